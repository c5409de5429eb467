// stream.h: the order in which a device runs work: streams and events.
//
// A Stream is a queue of work on one device: a kernel's Compute is run through its node's stream
// (Run), and on an asynchronous backend it only enqueues its launches there. An Event marks a
// point in a stream; another stream can be made to wait for it (WaitFor) without blocking the
// host, and the host waits for it with a deadline (Event::Wait), which is how a copy to the host
// is known to be complete before the host reads it. The Session orders work across streams with
// events, never by synchronising a whole device.
//
// SyncStream is the host's stream: Run runs the work now, on the calling thread, so every event
// it records is complete when recorded. The CPU backend uses it, so nothing it does waits.
// Threading: a Stream is used by one executor at a time; events may be waited on from any thread.
#ifndef RECSDK_DEVICE_STREAM_H_
#define RECSDK_DEVICE_STREAM_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/time/time.h"
#include "recsdk/status.h"

namespace recsdk::internal {

// Event: a point in a stream's work.
class Event {
 public:
  virtual ~Event() = default;
  // Done: whether the work before the event has finished.
  virtual bool Done() const = 0;
  // Wait: blocks until Done or `timeout` passes; DeadlineExceeded naming the stream then.
  virtual Status Wait(absl::Duration timeout) const = 0;
};

class Stream {
 public:
  virtual ~Stream() = default;
  // name: "cpu:0/compute", for messages.
  virtual const std::string& name() const = 0;
  // Run: runs `work` (a kernel's Compute) in stream order: on a synchronous stream now; on an
  // asynchronous one `work` enqueues its launches and returns. Its Status is the launch's.
  virtual Status Run(absl::FunctionRef<Status()> work) = 0;
  // Enqueue: runs `work` in stream order, possibly after Enqueue returns (on a deferred stream,
  // when an event recorded after it is waited for or waited on by another stream), so `work` owns
  // what it touches (a staging buffer lives in its captures until it has run). An error of deferred
  // work is returned by the Wait of an event recorded after it. By default it runs as Run does.
  virtual Status Enqueue(std::function<Status()> work) { return Run(work); }
  // Record: an event after everything run on this stream so far.
  virtual StatusOr<std::shared_ptr<Event>> Record() = 0;
  // WaitFor: work run on this stream from now on starts after `event`.
  virtual Status WaitFor(const Event& event) = 0;
  // Synchronize: blocks until everything run so far has finished, or `timeout` passes
  // (DeadlineExceeded naming the stream).
  virtual Status Synchronize(absl::Duration timeout) = 0;
};

// SyncStream: work runs on the caller's thread when Run is called.
class SyncStream : public Stream {
 public:
  explicit SyncStream(std::string name) : name_(std::move(name)) {}
  const std::string& name() const override { return name_; }
  Status Run(absl::FunctionRef<Status()> work) override { return work(); }
  StatusOr<std::shared_ptr<Event>> Record() override;
  Status WaitFor(const Event& event) override;
  Status Synchronize(absl::Duration) override { return absl::OkStatus(); }

 private:
  std::string name_;
};

}  // namespace recsdk::internal

#endif  // RECSDK_DEVICE_STREAM_H_
