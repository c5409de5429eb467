// file_open.h: opening input files safely. Every file the library reads goes through
// OpenRegularFile: it opens with O_NONBLOCK (so a named pipe or a device never blocks the
// caller), refuses anything but a regular file, and maps errno to the status code a caller can
// act on (NotFound, PermissionDenied, InvalidArgument for a directory or special file).
// ErrnoToStatus does the mapping for the other file calls (stat, glob results).
// Threading: thread-safe (no shared state).
#ifndef RECSDK_COMMON_FILE_OPEN_H_
#define RECSDK_COMMON_FILE_OPEN_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace recsdk::internal {

// ErrnoToStatus: a Status for a failed file call: `what` names the action and the file ("cannot
// open \"x\""); the message gets strerror and a fix for the code.
absl::Status ErrnoToStatus(int err, std::string_view what);

// OpenRegularFile: a read-only, close-on-exec descriptor of `path`, blocking reads restored,
// after checking (fstat on the open descriptor, so nothing can swap the file in between) that
// it is a regular file. `who` starts the message ("TFRecord file", "ReadNpy"); `fix` ends the
// message for anything but a regular file (the default suits data readers). The caller owns the
// descriptor.
absl::StatusOr<int> OpenRegularFile(
    const std::string& path, std::string_view who,
    std::string_view fix = "inputs must be regular files (copy the data into a file first)");

}  // namespace recsdk::internal

#endif  // RECSDK_COMMON_FILE_OPEN_H_
