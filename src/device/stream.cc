// stream.cc: the synchronous stream.
#include "src/device/stream.h"

#include "fmt/format.h"
#include "src/common/status_macros.h"

namespace recsdk::internal {
namespace {

// CompleteEvent: the event of a synchronous stream, done when recorded.
class CompleteEvent final : public Event {
 public:
  bool Done() const override { return true; }
  Status Wait(absl::Duration) const override { return absl::OkStatus(); }
};

}  // namespace

StatusOr<std::shared_ptr<Event>> SyncStream::Record() {
  return std::shared_ptr<Event>(std::make_shared<CompleteEvent>());
}

Status SyncStream::WaitFor(const Event& event) {
  // An event of another stream: the host waits for it, bounded (a synchronous stream cannot
  // queue the wait), with a deadline long enough for any copy and short of forever.
  if (Status s = event.Wait(absl::Minutes(10)); !s.ok()) {
    return Status(s.code(), fmt::format("stream {} waiting for an event: {}", name_, s.message()));
  }
  return absl::OkStatus();
}

}  // namespace recsdk::internal
