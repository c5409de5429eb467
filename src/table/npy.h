// npy.h: reading and writing numpy .npy files (format version 1.0, little-endian, C order) for
// table export and import (checkpoints write their payloads through src/checkpoint/).
// Thread-safe (no shared state).
#ifndef RECSDK_TABLE_NPY_H_
#define RECSDK_TABLE_NPY_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "recsdk/status.h"
#include "src/common/env.h"

namespace recsdk::internal {

// NpyArray: a parsed file: descr ("<i8", "<i4", "<f4"), shape, and the raw payload.
struct NpyArray {
  std::string descr;
  std::vector<int64_t> shape;
  std::string data;
  int64_t NumElements() const;
};

// NpyHeader: the bytes of a v1.0 header (magic, version, length, dict, padding to 64 bytes).
std::string NpyHeader(std::string_view descr, const std::vector<int64_t>& shape);

// WriteNpy: writes header + `bytes` payload bytes to `path` through `env` (null: the process's),
// atomically (WritePiecesToFileAtomic): on an error the previous file is intact.
Status WriteNpy(const std::string& path, std::string_view descr, const std::vector<int64_t>& shape,
                const void* data, uint64_t bytes, Env* env = nullptr);

// ReadNpy: parses a file. NotFound when missing; DataLoss for a bad header, an unsupported
// layout or a payload size that does not match the shape (truncated file). Read through `env`
// (null: the process's).
StatusOr<NpyArray> ReadNpy(const std::string& path, Env* env = nullptr);

// ReadFile: the whole file through `env` (null: the process's). NotFound when missing.
StatusOr<std::string> ReadFile(const std::string& path, Env* env = nullptr);

}  // namespace recsdk::internal

#endif  // RECSDK_TABLE_NPY_H_
