// dump_reader.cc: reading dumps and find-nan (see dump_reader.h).
#include "src/precision/dump_reader.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/numbers.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "recsdk/dtype.h"
#include "src/common/crc32c.h"
#include "src/common/json_parse.h"
#include "src/common/status_macros.h"
#include "src/precision/dump_observer.h"
#include "src/precision/non_finite.h"
#include "src/table/npy.h"

namespace recsdk::internal {

using nlohmann::json;

namespace {

constexpr int kMaxDepth = 8;             // dump_path/time/device/graph/id/step is 5 deep
constexpr size_t kMaxEntries = 1 << 20;  // per directory, and step directories in all
constexpr int64_t kMaxRank = 32;

bool IsLookup(std::string_view type) {
  return type == "SparseLookup" || type == "TableGather" || type == "TableGatherConcat" ||
         type == "TableLookupForward" || type == "TableLookupGroup";
}

// StepNumber: the step of a directory name "N" (published); false for anything else.
bool StepNumber(std::string_view name, int64_t* step) {
  if (name.empty() || name.size() > 18) return false;
  for (char c : name) {
    if (c < '0' || c > '9') return false;
  }
  return absl::SimpleAtoi(absl::string_view(name.data(), name.size()), step);
}

// Field readers: a missing or mistyped field is DataLoss naming the manifest and the field.
class ManifestFields {
 public:
  explicit ManifestFields(std::string path) : path_(std::move(path)) {}
  Status Bad(std::string_view what) const {
    return absl::DataLossError(
        fmt::format("dump manifest \"{}\" is corrupt: {}; dump the step again", path_, what));
  }
  StatusOr<const json*> Get(const json& j, const char* key, json::value_t type,
                            bool optional = false) const {
    if (!j.is_object()) return Bad(fmt::format("an entry holding \"{}\" is not an object", key));
    auto it = j.find(key);
    if (it == j.end()) {
      if (optional) return nullptr;
      return Bad(fmt::format("field \"{}\" is missing", key));
    }
    const bool ok = type == json::value_t::number_integer
                        ? it->is_number_integer()
                        : (type == json::value_t::number_unsigned ? it->is_number_unsigned()
                                                                  : it->type() == type);
    if (!ok) return Bad(fmt::format("field \"{}\" is a {}", key, it->type_name()));
    return &*it;
  }
  StatusOr<std::string> String(const json& j, const char* key, bool optional = false) const {
    RECSDK_ASSIGN_OR_RETURN(const json* v, Get(j, key, json::value_t::string, optional));
    return v == nullptr ? std::string() : v->get<std::string>();
  }
  StatusOr<int64_t> Int(const json& j, const char* key) const {
    RECSDK_ASSIGN_OR_RETURN(const json* v, Get(j, key, json::value_t::number_integer));
    return v->get<int64_t>();
  }

 private:
  std::string path_;
};

StatusOr<DumpTensor> ParseTensor(const ManifestFields& f, const json& j, bool input) {
  DumpTensor t;
  RECSDK_ASSIGN_OR_RETURN(int64_t port, f.Int(j, "port"));
  if (port < 0 || port > (1 << 20)) return f.Bad(fmt::format("port {} is out of range", port));
  t.port = static_cast<int>(port);
  if (input) {
    RECSDK_ASSIGN_OR_RETURN(t.producer, f.String(j, "producer"));
  }
  RECSDK_ASSIGN_OR_RETURN(t.skipped, f.String(j, "skipped", /*optional=*/true));
  RECSDK_ASSIGN_OR_RETURN(t.dtype, f.String(j, "dtype", /*optional=*/true));
  RECSDK_ASSIGN_OR_RETURN(const json* shape,
                          f.Get(j, "shape", json::value_t::array, /*optional=*/true));
  if (shape != nullptr) {
    if (static_cast<int64_t>(shape->size()) > kMaxRank) {
      return f.Bad(fmt::format("a shape of rank {} (at most {})", shape->size(), kMaxRank));
    }
    for (const json& d : *shape) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) return f.Bad("a shape is not sizes");
      t.shape.push_back(d.get<int64_t>());
    }
  }
  RECSDK_ASSIGN_OR_RETURN(t.file, f.String(j, "file", /*optional=*/true));
  if (!t.file.empty()) {
    if (!IsPlainFileName(t.file) || t.file.size() > 255) {
      return f.Bad(fmt::format("file name \"{}\" is not a plain file name", t.file.substr(0, 64)));
    }
    RECSDK_ASSIGN_OR_RETURN(const json* bytes, f.Get(j, "bytes", json::value_t::number_unsigned));
    RECSDK_ASSIGN_OR_RETURN(const json* crc, f.Get(j, "crc32c", json::value_t::number_unsigned));
    t.bytes = bytes->get<uint64_t>();
    if (crc->get<uint64_t>() > 0xFFFFFFFFu) return f.Bad("a crc32c is above 32 bits");
    t.crc32c = static_cast<uint32_t>(crc->get<uint64_t>());
    if (t.dtype.empty()) return f.Bad(fmt::format("tensor file \"{}\" has no dtype", t.file));
  }
  RECSDK_ASSIGN_OR_RETURN(const json* checksum,
                          f.Get(j, "payload_crc32c", json::value_t::number_unsigned, true));
  if (checksum != nullptr) {
    if (checksum->get<uint64_t>() > 0xFFFFFFFFu) return f.Bad("a payload_crc32c is above 32 bits");
    t.has_checksum = true;
    t.payload_crc32c = static_cast<uint32_t>(checksum->get<uint64_t>());
    if (t.dtype.empty()) return f.Bad("a checksummed tensor has no dtype");
    RECSDK_ASSIGN_OR_RETURN(const json* sample, f.Get(j, "sample", json::value_t::array, true));
    if (sample != nullptr) {
      if (sample->size() > 64) return f.Bad(fmt::format("a sample of {} values", sample->size()));
      for (const json& v : *sample) {
        if (!v.is_number() && !v.is_null()) return f.Bad("a sample value is not a number");
        t.sample.push_back(v.is_null() ? std::nan("") : v.get<double>());
      }
    }
  }
  return t;
}

// Checked product of a shape's sizes times the element size; false on overflow or past the limit.
bool PayloadBytes(const std::vector<int64_t>& shape, uint64_t item, uint64_t* bytes) {
  uint64_t n = item;
  for (int64_t d : shape) {
    if (d != 0 && n > kMaxDumpTensorBytes / static_cast<uint64_t>(d)) return false;
    n *= static_cast<uint64_t>(d);
  }
  *bytes = n;
  return n <= kMaxDumpTensorBytes;
}

}  // namespace

StatusOr<std::vector<std::string>> FindStepDirs(Env* env, const std::string& root_in) {
  const std::string root = NormalizeDir(root_in);
  StatusOr<FileType> root_type = env->GetFileType(root);
  if (root_type.status().code() == absl::StatusCode::kNotFound) {
    return absl::NotFoundError(fmt::format(
        "dump directory \"{}\" does not exist; give the dump_path of a run with dumps on, or a "
        "directory below it",
        root));
  }
  RECSDK_RETURN_IF_ERROR(root_type.status());
  if (*root_type != FileType::kDirectory) {
    return absl::InvalidArgumentError(fmt::format(
        "\"{}\" is not a directory; give a dump directory (dump_path, or one step's directory)",
        root));
  }
  std::vector<std::pair<std::string, int64_t>> found;  // (parent, step)
  std::vector<std::pair<std::string, int>> stack = {{root, 0}};
  while (!stack.empty()) {
    auto [dir, depth] = stack.back();
    stack.pop_back();
    if (env->FileExists(dir + "/manifest.json")) {
      int64_t step = 0;
      const size_t slash = dir.rfind('/');
      const std::string name = slash == std::string::npos ? dir : dir.substr(slash + 1);
      // A step directory given directly may be named anything; one found below root is "N".
      if (StepNumber(name, &step) || dir == root) {
        found.emplace_back(dir, step);
        if (found.size() > kMaxEntries) {
          return absl::ResourceExhaustedError(
              fmt::format("\"{}\" holds more than {} dumped steps; give a narrower directory", root,
                          kMaxEntries));
        }
      }
      continue;
    }
    if (depth >= kMaxDepth) continue;
    RECSDK_ASSIGN_OR_RETURN(std::vector<std::string> children, env->GetChildren(dir));
    if (children.size() > kMaxEntries) {
      return absl::ResourceExhaustedError(fmt::format(
          "\"{}\" has {} entries; give a narrower dump directory", dir, children.size()));
    }
    for (const std::string& c : children) {
      if (c.find(".tmp-") != std::string::npos) continue;  // unpublished: a crash mid-step
      const std::string path = dir + "/" + c;
      auto type = env->GetFileType(path);
      if (type.ok() && *type == FileType::kDirectory) stack.emplace_back(path, depth + 1);
    }
  }
  if (found.empty()) {
    return absl::InvalidArgumentError(fmt::format(
        "\"{}\" holds no dumped step (a directory with manifest.json); give dump_path of a run "
        "with enable_dump, enable_dump_debug or enable_exception_dump",
        root));
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    const std::string pa = Dirname(a.first), pb = Dirname(b.first);
    return pa != pb ? pa < pb : a.second < b.second;
  });
  std::vector<std::string> dirs;
  for (auto& [dir, step] : found) dirs.push_back(std::move(dir));
  return dirs;
}

StatusOr<DumpStep> ReadDumpManifest(Env* env, const std::string& step_dir) {
  const std::string path = step_dir + "/manifest.json";
  RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, env->NewRandomAccessFile(path));
  RECSDK_ASSIGN_OR_RETURN(uint64_t size, file->Size());
  if (size > kMaxManifestBytes) {
    return absl::DataLossError(
        fmt::format("dump manifest \"{}\" is {} bytes, above the {} a "
                    "manifest may have; it is not one of ours",
                    path, size, kMaxManifestBytes));
  }
  RECSDK_ASSIGN_OR_RETURN(std::string text, ReadFileToString(env, path));
  const ManifestFields f(path);
  // Bounded depth, like every JSON recsdk reads (json_parse.h): a hostile manifest nested
  // deeply would otherwise overflow the stack.
  RECSDK_ASSIGN_OR_RETURN(
      const json j, ParseJson(text, fmt::format("dump manifest \"{}\" (dump the step again)", path),
                              absl::StatusCode::kDataLoss));
  RECSDK_ASSIGN_OR_RETURN(std::string format, f.String(j, "format"));
  if (format != "recsdk-dump") return f.Bad(fmt::format("format \"{}\"", format.substr(0, 64)));
  RECSDK_ASSIGN_OR_RETURN(int64_t version, f.Int(j, "version"));
  if (version != 1) {
    return absl::FailedPreconditionError(fmt::format(
        "dump manifest \"{}\" has version {}; this recsdk reads version 1: read it with the "
        "recsdk that wrote it",
        path, version));
  }
  DumpStep step;
  step.dir = step_dir;
  RECSDK_ASSIGN_OR_RETURN(step.step, f.Int(j, "step"));
  RECSDK_ASSIGN_OR_RETURN(step.device, f.String(j, "device"));
  RECSDK_ASSIGN_OR_RETURN(step.graph, f.String(j, "graph"));
  RECSDK_ASSIGN_OR_RETURN(step.graph_id, f.Int(j, "graph_id"));
  RECSDK_ASSIGN_OR_RETURN(const json* ops, f.Get(j, "ops", json::value_t::array));
  for (const json& o : *ops) {
    DumpOp op;
    RECSDK_ASSIGN_OR_RETURN(op.seq, f.Int(o, "seq"));
    RECSDK_ASSIGN_OR_RETURN(op.name, f.String(o, "name"));
    RECSDK_ASSIGN_OR_RETURN(op.type, f.String(o, "type"));
    RECSDK_ASSIGN_OR_RETURN(op.error, f.String(o, "error", /*optional=*/true));
    RECSDK_ASSIGN_OR_RETURN(const json* reasons, f.Get(o, "reasons", json::value_t::array));
    for (const json& r : *reasons) {
      if (!r.is_string()) return f.Bad("a reason is not a string");
      op.reasons.push_back(r.get<std::string>());
    }
    RECSDK_ASSIGN_OR_RETURN(const json* attrs,
                            f.Get(o, "attrs", json::value_t::object, /*optional=*/true));
    if (attrs != nullptr) op.attrs = *attrs;
    RECSDK_ASSIGN_OR_RETURN(const json* omitted,
                            f.Get(o, "attrs_omitted", json::value_t::array, /*optional=*/true));
    if (omitted != nullptr) {
      for (const json& a : *omitted) {
        if (!a.is_string()) return f.Bad("an omitted attribute's name is not a string");
        op.attrs_omitted.push_back(a.get<std::string>());
      }
    }
    RECSDK_ASSIGN_OR_RETURN(const json* fused,
                            f.Get(o, "fused_from", json::value_t::array, /*optional=*/true));
    if (fused != nullptr) {
      for (const json& e : *fused) {
        FusedOp replaced;
        RECSDK_ASSIGN_OR_RETURN(replaced.name, f.String(e, "name"));
        RECSDK_ASSIGN_OR_RETURN(replaced.type, f.String(e, "type"));
        op.fused_from.push_back(std::move(replaced));
      }
    }
    for (auto [key, list, input] :
         {std::tuple<const char*, std::vector<DumpTensor>*, bool>{"inputs", &op.inputs, true},
          std::tuple<const char*, std::vector<DumpTensor>*, bool>{"outputs", &op.outputs, false}}) {
      RECSDK_ASSIGN_OR_RETURN(const json* tensors, f.Get(o, key, json::value_t::array));
      for (const json& t : *tensors) {
        RECSDK_ASSIGN_OR_RETURN(DumpTensor tensor, ParseTensor(f, t, input));
        list->push_back(std::move(tensor));
      }
    }
    step.ops.push_back(std::move(op));
  }
  std::stable_sort(step.ops.begin(), step.ops.end(),
                   [](const DumpOp& a, const DumpOp& b) { return a.seq < b.seq; });
  return step;
}

StatusOr<std::string> ReadDumpTensor(Env* env, const DumpStep& step, const DumpTensor& tensor) {
  const std::string path = step.dir + "/" + tensor.file;
  auto bad = [&](std::string_view why) {
    return absl::DataLossError(
        fmt::format("dumped tensor \"{}\" is corrupt: {}; dump the step again", path, why));
  };
  auto dtype = ParseDType(tensor.dtype);
  const std::string_view descr = dtype.ok() ? DumpNpyDescr(*dtype) : std::string_view();
  if (descr.empty())
    return bad(fmt::format("its dtype \"{}\" is not one dumps write", tensor.dtype.substr(0, 32)));
  const std::string header = NpyHeader(descr, tensor.shape);
  uint64_t payload = 0;
  if (!PayloadBytes(tensor.shape, DTypeSize(*dtype), &payload)) {
    return bad("its shape gives more bytes than a dump holds");
  }
  if (tensor.bytes != header.size() + payload) {
    return bad(fmt::format("the manifest says {} bytes, its dtype and shape give {}", tensor.bytes,
                           header.size() + payload));
  }
  auto file = env->NewRandomAccessFile(path);
  if (!file.ok()) {
    if (file.status().code() == absl::StatusCode::kNotFound) {
      return absl::NotFoundError(fmt::format(
          "dumped tensor \"{}\" is missing (the manifest lists it); dump the step again", path));
    }
    return file.status();
  }
  RECSDK_ASSIGN_OR_RETURN(uint64_t size, (*file)->Size());
  if (size != tensor.bytes) {
    return bad(fmt::format("it is {} bytes, the manifest says {}", size, tensor.bytes));
  }
  std::string bytes(size, '\0');
  uint64_t done = 0;
  while (done < size) {
    RECSDK_ASSIGN_OR_RETURN(size_t got, (*file)->Read(done, size - done, bytes.data() + done));
    if (got == 0) return bad("it ended early while read");
    done += got;
  }
  if (Crc32c(bytes) != tensor.crc32c) {
    return bad(fmt::format("its CRC-32C is {:#010x}, the manifest says {:#010x}", Crc32c(bytes),
                           tensor.crc32c));
  }
  if (bytes.compare(0, header.size(), header) != 0) {
    return bad("its .npy header does not match the manifest's dtype and shape");
  }
  bytes.erase(0, header.size());  // in place: no second buffer of the tensor's size
  return bytes;
}

StatusOr<NanReport> FindNan(Env* env, const std::string& root) {
  RECSDK_ASSIGN_OR_RETURN(std::vector<std::string> dirs, FindStepDirs(env, root));
  NanReport report;
  for (const std::string& dir : dirs) {
    RECSDK_ASSIGN_OR_RETURN(DumpStep step, ReadDumpManifest(env, dir));
    ++report.steps;
    // What each dumped output of this step held: producer "node:index" -> non-finite count.
    std::map<std::string, NonFinite> produced;
    for (const DumpOp& op : step.ops) {
      ++report.ops;
      auto scan = [&](const DumpTensor& t) -> StatusOr<std::optional<NonFinite>> {
        if (t.file.empty()) return std::optional<NonFinite>();
        RECSDK_ASSIGN_OR_RETURN(std::string payload, ReadDumpTensor(env, step, t));
        ++report.tensors;
        const DType dtype = *ParseDType(t.dtype);  // checked by ReadDumpTensor
        const uint64_t item = DTypeSize(dtype);
        return std::optional<NonFinite>(CountNonFinite(
            dtype, payload.data(), static_cast<int64_t>(item == 0 ? 0 : payload.size() / item)));
      };
      std::vector<std::optional<NonFinite>> ins, outs;
      for (const DumpTensor& t : op.inputs) {
        RECSDK_ASSIGN_OR_RETURN(auto c, scan(t));
        ins.push_back(c);
      }
      for (const DumpTensor& t : op.outputs) {
        RECSDK_ASSIGN_OR_RETURN(auto c, scan(t));
        outs.push_back(c);
        if (c) produced[fmt::format("{}:{}", op.name, t.port)] = *c;
      }
      if (report.first) continue;  // verify the rest of the dump
      NanFinding finding;
      for (size_t o = 0; o < outs.size(); ++o) {
        if (outs[o] && outs[o]->any()) {
          finding.outputs.push_back(fmt::format("output {} ({}): {} NaN, {} Inf",
                                                op.outputs[o].port, op.outputs[o].file,
                                                outs[o]->nan, outs[o]->inf));
        }
      }
      if (finding.outputs.empty()) continue;
      finding.step_dir = step.dir;
      finding.step = step.step;
      finding.op = op.name;
      finding.type = op.type;
      bool unknown = false, non_finite = false;
      for (size_t i = 0; i < op.inputs.size(); ++i) {
        const DumpTensor& in = op.inputs[i];
        std::optional<NonFinite> c = ins[i];
        std::string source = in.file.empty() ? "" : fmt::format("dumped as {}", in.file);
        if (!c) {
          if (auto it = produced.find(in.producer); it != produced.end()) {
            c = it->second;
            source = fmt::format("its producer's dumped output");
          }
        }
        if (!c && (in.skipped == "resource handle" || in.dtype == "resource")) {
          finding.input_notes.push_back(fmt::format(
              "input {} from \"{}\": a resource handle (no values)", in.port, in.producer));
          continue;
        }
        if (!c) {
          unknown = true;
          finding.input_notes.push_back(
              fmt::format("input {} from \"{}\": not in the dump (a feed, or dump_mode left it "
                          "out: dump with dump_mode \"all\" to see it)",
                          in.port, in.producer));
        } else {
          non_finite = non_finite || c->any();
          finding.input_notes.push_back(fmt::format(
              "input {} from \"{}\" ({}): {}", in.port, in.producer, source,
              c->any() ? fmt::format("{} NaN, {} Inf", c->nan, c->inf) : std::string("finite")));
        }
      }
      finding.inputs = non_finite ? NanFinding::Inputs::kNonFinite
                       : unknown  ? NanFinding::Inputs::kUnknown
                                  : NanFinding::Inputs::kFinite;
      finding.table_lookup = IsLookup(op.type);
      report.first = std::move(finding);
    }
  }
  return report;
}

std::string NanReport::Text() const {
  if (!first) {
    return fmt::format("no NaN or Inf: {} tensors of {} ops over {} steps read, checksums good\n",
                       tensors, ops, steps);
  }
  const NanFinding& f = *first;
  std::string text = fmt::format("first NaN/Inf at step {}: op \"{}\" ({})\n  in {}\n", f.step,
                                 f.op, f.type, f.step_dir);
  for (const std::string& o : f.outputs) text += "  " + o + "\n";
  for (const std::string& i : f.input_notes) text += "  " + i + "\n";
  switch (f.inputs) {
    case NanFinding::Inputs::kFinite:
      text +=
          f.table_lookup
              ? "  verdict: its inputs were finite: the table rows it returned hold NaN/Inf, so "
                "the table is the source (check its updates, or the checkpoint it came from)\n"
              : "  verdict: its inputs were finite: this op made the NaN/Inf\n";
      break;
    case NanFinding::Inputs::kNonFinite:
      text +=
          "  verdict: its inputs already held NaN/Inf: trace upstream (they came from a feed or an "
          "op not in the dump)\n";
      break;
    case NanFinding::Inputs::kUnknown:
      text += "  verdict: unknown whether its inputs held NaN/Inf (not all are in the dump)\n";
      break;
  }
  text += fmt::format("({} tensors of {} ops over {} steps read, checksums good)\n", tensors, ops,
                      steps);
  return text;
}

}  // namespace recsdk::internal
