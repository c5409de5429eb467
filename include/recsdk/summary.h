// recsdk/summary.h: TensorBoard curves. A SummaryWriter appends scalar summaries to an event file
// "events.out.tfevents.<unix seconds>.<host>" in a log directory, in TensorFlow's format (TFRecord
// framing with masked CRC32C around Event protocol buffers, the first one carrying file_version
// "brain.Event:2"), so `tensorboard --logdir <dir>` shows them. The Estimator writes loss,
// metrics, steps/s and table sizes through one (SummarySaverHook, hooks.h); a Session loop can
// use one directly.
//
// Threading: thread-safe (one mutex; each AddScalar is one write into the file's buffer).
#ifndef RECSDK_SUMMARY_H_
#define RECSDK_SUMMARY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "recsdk/status.h"

namespace recsdk {

class Env;  // recsdk/env.h

class SummaryWriter {
 public:
  // Create: makes `logdir` (and its parents) if needed and opens a new event file there, writing
  // the file_version event. A second writer in the same second gets a ".N" suffix rather than
  // overwriting. `env`: the file system (tests inject faults through it); null: the process's
  // POSIX one. InvalidArgument for an empty logdir; the file system's error (PermissionDenied,
  // FailedPrecondition for a file in the way, ...) naming the path when the directory or file
  // cannot be created.
  static StatusOr<std::unique_ptr<SummaryWriter>> Create(const std::string& logdir,
                                                         Env* env = nullptr);
  ~SummaryWriter();
  SummaryWriter(const SummaryWriter&) = delete;
  SummaryWriter& operator=(const SummaryWriter&) = delete;

  // AddScalar: one Event at `step` (wall time now) holding a simple_value summary named `tag`
  // ("loss", "eval/auc_0"). Buffered until Flush (or 64 KiB). InvalidArgument for an empty tag;
  // FailedPrecondition after Close; the file system's error when a write fails.
  Status AddScalar(std::string_view tag, double value, int64_t step);
  // Flush: pushes buffered events to the file (TensorBoard sees them from then on).
  Status Flush();
  // Close: flushes and closes the file. Idempotent; the destructor closes.
  Status Close();
  // path: the event file.
  const std::string& path() const;

 private:
  struct Impl;  // the implementation (pimpl), defined in src/
  explicit SummaryWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace recsdk

#endif  // RECSDK_SUMMARY_H_
