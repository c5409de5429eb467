// npy.cc: .npy v1.0 writer and a strict reader that never trusts sizes from the file.
// Thread-safe (no shared state).
#include "src/table/npy.h"

#include <cstring>
#include <memory>

#include "fmt/format.h"
#include "src/common/env.h"
#include "src/common/hash.h"

namespace recsdk::internal {

namespace {
constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

// Debian's Abseil has its own string_view type, so the few string helpers needed are here.
std::string_view Strip(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n'))
    s.remove_suffix(1);
  return s;
}

bool ParseSize(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 18) return false;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

int64_t ItemSize(std::string_view descr) {
  if (descr == "<i8" || descr == "<f8") return 8;
  if (descr == "<i4" || descr == "<f4") return 4;
  return 0;
}

// Value of `'key': ` in the header dict, up to the next top-level comma or closing brace.
bool FindField(std::string_view dict, std::string_view key, std::string_view* value) {
  const std::string quoted = fmt::format("'{}':", key);
  const size_t pos = dict.find(quoted);
  if (pos == std::string_view::npos) return false;
  std::string_view rest = dict.substr(pos + quoted.size());
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  size_t end = 0;
  if (!rest.empty() && rest.front() == '(') {
    end = rest.find(')');
    if (end == std::string_view::npos) return false;
    ++end;
  } else {
    end = rest.find_first_of(",}");
    if (end == std::string_view::npos) return false;
  }
  *value = rest.substr(0, end);
  return true;
}
}  // namespace

int64_t NpyArray::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string NpyHeader(std::string_view descr, const std::vector<int64_t>& shape) {
  std::string shape_text = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    shape_text += fmt::format("{}", shape[i]);
    if (shape.size() == 1 || i + 1 < shape.size()) shape_text += ",";
    if (i + 1 < shape.size()) shape_text += " ";
  }
  shape_text += ")";
  std::string dict =
      fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr, shape_text);
  // Total header (magic 6 + version 2 + length 2 + dict + '\n') padded with spaces to 64 bytes.
  const size_t unpadded = kMagicLen + 2 + 2 + dict.size() + 1;
  const size_t padded = (unpadded + 63) / 64 * 64;
  dict.append(padded - unpadded, ' ');
  dict.push_back('\n');
  std::string header(kMagic, kMagicLen);
  header.push_back('\x01');
  header.push_back('\x00');
  const uint16_t len = static_cast<uint16_t>(dict.size());
  header.push_back(static_cast<char>(len & 0xFF));
  header.push_back(static_cast<char>(len >> 8));
  return header + dict;
}

Status WriteNpy(const std::string& path, std::string_view descr, const std::vector<int64_t>& shape,
                const void* data, uint64_t bytes, Env* env) {
  // Through the Env, atomically: a failed export (a full disk, a failed sync) leaves the previous
  // file whole, and a link planted at the name is never written through.
  const std::string header = NpyHeader(descr, shape);
  return WritePiecesToFileAtomic(
      env != nullptr ? env : Env::Default(), path,
      {header, std::string_view(static_cast<const char*>(data), static_cast<size_t>(bytes))});
}

StatusOr<std::string> ReadFile(const std::string& path, Env* env) {
  // Through the Env (a test's Env injects short reads and failures). The Default Env opens
  // without blocking on a named pipe or device and refuses them; permissions are PermissionDenied.
  StatusOr<std::string> bytes = ReadFileToString(env != nullptr ? env : Env::Default(), path);
  if (!bytes.ok() && bytes.status().code() == absl::StatusCode::kNotFound) {
    return absl::NotFoundError(fmt::format("file \"{}\" does not exist", path));
  }
  return bytes;
}

StatusOr<NpyArray> ReadNpy(const std::string& path, Env* env) {
  auto file = ReadFile(path, env);
  if (!file.ok()) return file.status();
  const std::string& bytes = *file;
  auto bad = [&](std::string_view why) {
    return absl::DataLossError(fmt::format(
        "\"{}\" is not a readable .npy file: {}; rewrite it or restore a good copy", path, why));
  };
  if (bytes.size() < kMagicLen + 4 || std::memcmp(bytes.data(), kMagic, kMagicLen) != 0) {
    return bad("the magic bytes are missing (truncated or another format)");
  }
  const unsigned major = static_cast<unsigned char>(bytes[6]);
  size_t header_len = 0;
  size_t dict_start = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) |
                 (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    dict_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return bad("the header is truncated");
    header_len = 0;
    for (int i = 0; i < 4; ++i) {
      header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    }
    dict_start = 12;
  } else {
    return bad(fmt::format("format version {} is not supported", major));
  }
  if (bytes.size() < dict_start + header_len) return bad("the header is truncated");
  const std::string_view dict(bytes.data() + dict_start, header_len);
  std::string_view descr_v, order_v, shape_v;
  if (!FindField(dict, "descr", &descr_v) || !FindField(dict, "fortran_order", &order_v) ||
      !FindField(dict, "shape", &shape_v)) {
    return bad("the header dict lacks descr, fortran_order or shape");
  }
  NpyArray out;
  descr_v = Strip(descr_v);
  if (descr_v.size() < 2 || descr_v.front() != '\'' || descr_v.back() != '\'') {
    return bad("descr is not a quoted string");
  }
  out.descr = std::string(descr_v.substr(1, descr_v.size() - 2));
  if (out.descr == "|i1" || out.descr == "|u1") return bad("byte arrays are not supported");
  const int64_t item = ItemSize(out.descr);
  if (item == 0) return bad(fmt::format("dtype '{}' is not one of <i8, <i4, <f4, <f8", out.descr));
  if (Strip(order_v) != "False") return bad("Fortran order is not supported");
  shape_v = Strip(shape_v);
  if (shape_v.size() < 2 || shape_v.front() != '(' || shape_v.back() != ')') {
    return bad("shape is not a tuple");
  }
  __int128 elements = 1;
  std::string_view dims = shape_v.substr(1, shape_v.size() - 2);
  while (!Strip(dims).empty()) {
    const size_t comma = dims.find(',');
    const std::string_view part = Strip(dims.substr(0, comma));
    dims = comma == std::string_view::npos ? std::string_view() : dims.substr(comma + 1);
    int64_t d = 0;
    if (!ParseSize(part, &d)) {
      return bad(fmt::format("shape entry '{}' is not a size", part));
    }
    out.shape.push_back(d);
    elements *= d;
    if (elements > (static_cast<__int128>(1) << 60)) return bad("shape is implausibly large");
  }
  const size_t payload = dict_start + header_len;
  const __int128 want = elements * item;
  if (static_cast<__int128>(bytes.size() - payload) != want) {
    return bad(fmt::format("the payload has {} bytes but shape and dtype need {}",
                           bytes.size() - payload, static_cast<int64_t>(want)));
  }
  out.data = bytes.substr(payload);
  return out;
}

}  // namespace recsdk::internal
