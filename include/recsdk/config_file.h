// config_file.h: a SessionConfig from a JSON file, for programs that take `--session_config FILE`
// (the samples). Thread-safe: it reads the file and shares nothing.
#ifndef RECSDK_CONFIG_FILE_H_
#define RECSDK_CONFIG_FILE_H_

#include <string>

#include "recsdk/config.h"
#include "recsdk/status.h"

namespace recsdk {

// SessionConfigFromFile: SessionConfig::FromJson of the file at `path`, the format
// `recsdk validate-config FILE` checks. Every error names the file: NotFound when nothing is
// there, InvalidArgument for a directory, a file above 16 MiB (no config is near that) or any error
// of FromJson (the option and its rule). Reads the whole file once through the process's file
// system.
[[nodiscard]] StatusOr<SessionConfig> SessionConfigFromFile(const std::string& path);

}  // namespace recsdk

#endif  // RECSDK_CONFIG_FILE_H_
