// dump_observer.cc: dumps, overflow detection and exception dumps (see dump_observer.h).
#include "src/precision/dump_observer.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "fmt/format.h"
#include "src/common/crc32c.h"
#include "src/common/status_macros.h"
#include "src/device/table_resource.h"
#include "src/graph/attr_json.h"
#include "src/graph/fused_from.h"
#include "src/precision/dump_compare.h"
#include "src/precision/non_finite.h"
#include "src/table/collective_table.h"
#include "src/table/npy.h"

namespace recsdk::internal {

using nlohmann::json;

namespace {

constexpr char kGraphName[] = "recsdk_graph";
// The rows a TableApply's dump reads back from its table after the update (RowsAfterUpdate).
constexpr size_t kRowsAfterSample = 8;

// IsAtomicOp: the ops that accumulate many values into one by scatter-add or segment sum (the
// spec's "Atomic Add"): what atomic_overflow watches.
bool IsAtomicOp(std::string_view type) {
  return type == "GatherGrad" || type == "TableGradAggregate" || type == "TableApply";
}

// Count: NaN and Inf in a tensor the CPU can read; zero for other dtypes.
// OnHost: `t` itself, or in `*keep` a host copy of it when it lives in device memory (through the
// Session's NodeExecution::ToHost); `t` when the copy fails (then it is skipped as not on host).
const Tensor* OnHost(const NodeExecution& exec, const Tensor* t, Tensor* keep) {
  if (t == nullptr || !t->IsInitialized() || t->on_host()) return t;
  auto host = exec.ToHost(*t);
  if (!host.ok()) return t;
  *keep = *std::move(host);
  return keep;
}

// RowsAfterUpdate: for a TableApply, the first kRowsAfterSample rows it updated ([k, dim]
// float32, in the update's order), read back from the table after the update: the spec's
// "updated rows for a sample of keys", so two runs that apply the same gradients to tables that
// differ part here. Uninitialised for another op, a sharded table (reading it would be a
// collective outside the step's order) or rows that cannot be read.
Tensor RowsAfterUpdate(const NodeExecution& exec) {
  if (exec.node->type() != "TableApply" || exec.inputs == nullptr || exec.inputs->size() < 3) {
    return Tensor();
  }
  auto* resource = dynamic_cast<TableResource*>(ResourceFromTensor(*(*exec.inputs)[0]));
  if (resource == nullptr ||
      dynamic_cast<CollectiveTable*>(&resource->table()->SelfSynchronised()) != nullptr) {
    return Tensor();
  }
  Tensor keep;
  const Tensor* unique = OnHost(exec, (*exec.inputs)[2], &keep);
  if (unique == nullptr || !unique->IsInitialized() || !unique->on_host() ||
      unique->dtype() != DType::kInt32) {
    return Tensor();
  }
  std::vector<uint32_t> rows;
  for (int32_t r : unique->flat<int32_t>()) {
    const auto row = static_cast<uint32_t>(r);
    if (row == EmbeddingTable::kPaddingRow || row == EmbeddingTable::kDefaultRow) continue;
    rows.push_back(row);
    if (rows.size() == kRowsAfterSample) break;
  }
  auto out = Tensor::Create(DType::kFloat32,
                            Shape{static_cast<int64_t>(rows.size()), resource->table()->dim()});
  if (!out.ok() || !resource->table()->Gather(rows, out->flat<float>()).ok()) return Tensor();
  return *std::move(out);
}

NonFinite Count(const Tensor* t) {
  if (t == nullptr || !t->IsInitialized() || t->num_elements() == 0 || !t->buffer() ||
      !t->buffer()->on_host()) {
    return {};
  }
  return CountNonFinite(t->dtype(), t->raw_data(), t->num_elements());
}

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y%m%d%H%M%S", &tm);
  return text;
}

}  // namespace

StatusOr<DumpSteps> DumpSteps::Parse(std::string_view text) {
  DumpSteps steps;
  if (text.empty()) return steps;
  for (absl::string_view part : absl::StrSplit(absl::string_view(text.data(), text.size()), '|')) {
    const size_t dash = part.find('-');
    int64_t lo = 0, hi = 0;
    const bool ok = dash == absl::string_view::npos
                        ? absl::SimpleAtoi(part, &lo) && (hi = lo, true)
                        : absl::SimpleAtoi(part.substr(0, dash), &lo) &&
                              absl::SimpleAtoi(part.substr(dash + 1), &hi);
    if (!ok || lo < 0 || hi < lo) {
      return absl::InvalidArgumentError(fmt::format(
          "dump_step: \"{}\" has the malformed part \"{}\"; write steps as N or A-B joined by '|'",
          text, std::string(part)));
    }
    steps.ranges_.emplace_back(lo, hi);
  }
  return steps;
}

bool DumpSteps::Contains(int64_t step) const {
  if (ranges_.empty()) return true;
  return std::any_of(ranges_.begin(), ranges_.end(),
                     [&](const auto& r) { return r.first <= step && step <= r.second; });
}

std::string DumpFileName(std::string_view op, std::string_view direction, int port) {
  std::string name;
  for (char c : op) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '_' || c == '-' || c == '.';
    name.push_back(plain ? c : '_');
  }
  // File names stop at 255 bytes: a long op name keeps its head and a hash of the whole.
  if (name.size() > 160) {
    name = fmt::format("{}~{:08x}", name.substr(0, 150), Crc32c(op));
  }
  if (!name.empty() && name.front() == '.') name.front() = '_';
  return fmt::format("{}.{}.{}.npy", name, direction, port);
}

std::string_view DumpNpyDescr(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "<f4";
    case DType::kFloat64:
      return "<f8";
    case DType::kFloat16:
      return "<f2";
    case DType::kBFloat16:
      return "<u2";
    case DType::kInt32:
      return "<i4";
    case DType::kInt64:
      return "<i8";
    case DType::kBool:
      return "|b1";
    case DType::kUInt8:
      return "|u1";
    default:
      return "";
  }
}

DumpObserver::DumpObserver(const SessionConfig& config, std::string device, int64_t graph_id)
    : env_(config.dump_env != nullptr ? config.dump_env : Env::Default()),
      dump_path_(NormalizeDir(config.dump_path)),
      device_(std::move(device)),
      device_id_(device_.find(':') == std::string::npos ? "0"
                                                        : device_.substr(device_.find(':') + 1)),
      graph_id_(graph_id),
      dump_(config.enable_dump),
      overflow_(config.enable_dump_debug),
      exception_(config.enable_exception_dump == 1),
      stop_on_overflow_(config.stop_on_overflow),
      checksums_(config.dump_checksums) {
  dump_inputs_ = config.dump_mode == "input" || config.dump_mode == "all";
  dump_outputs_ = config.dump_mode == "output" || config.dump_mode == "all";
  check_atomic_ = config.dump_debug_mode != "aicore_overflow";
  check_other_ = config.dump_debug_mode != "atomic_overflow";
}

StatusOr<std::unique_ptr<DumpObserver>> DumpObserver::Create(const SessionConfig& config,
                                                             std::string device, int64_t graph_id) {
  RECSDK_ASSIGN_OR_RETURN(DumpSteps steps, DumpSteps::Parse(config.dump_step));
  if (config.dump_path.empty()) {
    return absl::InvalidArgumentError(
        "dump_path: required with enable_dump, enable_dump_debug or enable_exception_dump; give a "
        "directory");
  }
  std::unique_ptr<DumpObserver> observer(new DumpObserver(config, std::move(device), graph_id));
  observer->steps_ = std::move(steps);
  // A dump_path that cannot be a directory is said now, not at the first dump (or the first
  // failing op, for exception dumps).
  if (Status s = observer->env_->CreateDir(observer->dump_path_); !s.ok()) {
    return Status(s.code(), fmt::format("dump_path \"{}\": cannot create it: {}; give a writable "
                                        "directory",
                                        config.dump_path, s.message()));
  }
  return observer;
}

std::string DumpObserver::StepDir(int64_t step, bool tmp) const {
  std::string dir =
      fmt::format("{}/{}/{}/{}/{}/{}", dump_path_, time_, device_id_, kGraphName, graph_id_, step);
  if (tmp) dir += fmt::format(".tmp-{}", static_cast<int64_t>(::getpid()));
  return dir;
}

void DumpObserver::BeginRun(int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  step_ = step;
  dump_step_ = dump_ && steps_.Contains(step);
  dir_created_ = false;
  names_.clear();
  ops_ = json::array();
  seq_ = 0;
  error_ = absl::OkStatus();
  stop_ = absl::OkStatus();
  stop_requested_.store(false, std::memory_order_release);
}

Status DumpObserver::EnsureStepDir() {
  if (dir_created_) return absl::OkStatus();
  if (time_.empty()) time_ = UtcNow();
  const std::string tmp = StepDir(step_, true);
  // A leftover of a process that had this pid and crashed mid-step.
  RECSDK_RETURN_IF_ERROR(DeleteRecursively(env_, tmp));
  RECSDK_RETURN_IF_ERROR(env_->CreateDir(tmp));
  dir_created_ = true;
  return absl::OkStatus();
}

json DumpObserver::WriteTensor(const Tensor* t, const std::string& file, bool write, bool checksum,
                               Status* error) {
  json entry = json::object();
  if (t == nullptr || !t->IsInitialized()) {
    entry["skipped"] = "not produced";
    return entry;
  }
  entry["dtype"] = std::string(DTypeName(t->dtype()));
  entry["shape"] = std::vector<int64_t>(t->shape().dims().begin(), t->shape().dims().end());
  if (!write) return entry;
  const std::string_view descr = DumpNpyDescr(t->dtype());
  if (descr.empty()) {
    entry["skipped"] = t->dtype() == DType::kResource
                           ? std::string("resource handle")
                           : fmt::format("dtype {} is not dumped", DTypeName(t->dtype()));
    return entry;
  }
  if (t->num_elements() > 0 && (!t->buffer() || !t->buffer()->on_host())) {
    entry["skipped"] = "not in host memory";
    return entry;
  }
  const std::string_view payload(static_cast<const char*>(t->raw_data()),
                                 t->num_elements() > 0 ? t->TotalBytes() : 0);
  if (checksum) {
    // dump_checksums: the elements' CRC-32C and the first few values; nothing is written.
    entry["payload_crc32c"] = Crc32c(payload);
    json sample = json::array();
    const std::vector<double> values = DumpValues(
        std::string(DTypeName(t->dtype())),
        std::string(payload.substr(
            0, std::min<size_t>(payload.size(), kDumpSampleElements * DTypeSize(t->dtype())))));
    for (double v : values) sample.push_back(std::isfinite(v) ? json(v) : json(nullptr));
    entry["sample"] = std::move(sample);
    return entry;
  }
  const std::string header =
      NpyHeader(descr, std::vector<int64_t>(t->shape().dims().begin(), t->shape().dims().end()));
  const std::string path = StepDir(step_, true) + "/" + file;
  Status s = [&]() -> Status {
    RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, env_->NewWritableFile(path));
    RECSDK_RETURN_IF_ERROR(f->Append(header));
    RECSDK_RETURN_IF_ERROR(f->Append(payload));
    return f->Close();
  }();
  if (!s.ok()) {
    *error = s;  // the Env's errors name the path
    entry["skipped"] = "write failed";
    return entry;
  }
  entry["file"] = file;
  entry["bytes"] = header.size() + payload.size();
  entry["crc32c"] = Crc32cExtend(Crc32c(header), payload.data(), payload.size());
  return entry;
}

Status DumpObserver::Record(const NodeExecution& exec, Tensors which,
                            std::vector<std::string> reasons, json extra) {
  const Node& node = *exec.node;
  int64_t seq = 0;
  // A table update's dump also holds the rows it left (RowsAfterUpdate), as one more output.
  const bool rows_after = which.outputs && node.type() == "TableApply";
  std::vector<std::string> in_files(node.num_inputs()),
      out_files(node.num_outputs() + (rows_after ? 1 : 0));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return error_;  // this step's dump already failed: stop writing
    if (Status s = EnsureStepDir(); !s.ok()) {
      error_ = s;
      return s;
    }
    seq = seq_++;
    auto reserve = [&](std::string_view direction, int port) {
      std::string name = DumpFileName(node.name(), direction, port);
      if (!names_.insert(name).second) {
        name.insert(name.size() - 4, fmt::format("-{}", seq));
        names_.insert(name);
      }
      return name;
    };
    if (which.inputs) {
      for (int i = 0; i < node.num_inputs(); ++i) in_files[i] = reserve("input", i);
    }
    if (which.outputs) {
      for (int o = 0; o < static_cast<int>(out_files.size()); ++o) {
        out_files[o] = reserve("output", o);
      }
    }
  }
  Status error;
  json inputs = json::array(), outputs = json::array();
  for (int i = 0; i < node.num_inputs(); ++i) {
    Tensor keep;
    const Tensor* t = OnHost(exec,
                             exec.inputs != nullptr && i < static_cast<int>(exec.inputs->size())
                                 ? (*exec.inputs)[i]
                                 : nullptr,
                             &keep);
    json e = WriteTensor(t, in_files[i], which.inputs && error.ok(), which.checksums, &error);
    e["port"] = i;
    e["producer"] = node.input(i).name();
    inputs.push_back(std::move(e));
  }
  for (int o = 0; o < node.num_outputs(); ++o) {
    Tensor keep;
    const Tensor* t = OnHost(exec,
                             exec.outputs != nullptr && o < static_cast<int>(exec.outputs->size())
                                 ? &(*exec.outputs)[o]
                                 : nullptr,
                             &keep);
    json e = WriteTensor(t, out_files[o], which.outputs && error.ok(), which.checksums, &error);
    e["port"] = o;
    outputs.push_back(std::move(e));
  }
  if (rows_after) {
    const Tensor after = RowsAfterUpdate(exec);
    json e = WriteTensor(&after, out_files.back(), error.ok(), which.checksums, &error);
    e["port"] = node.num_outputs();
    e["rows_after_update"] = true;
    outputs.push_back(std::move(e));
  }
  json entry = std::move(extra);
  entry["seq"] = seq;
  entry["name"] = node.name();
  entry["type"] = node.type();
  entry["reasons"] = std::move(reasons);
  // The attributes, so that `recsdk replay-op` can rebuild the op; a tensor attribute past
  // kMaxDumpAttrTensorBytes (a large constant) is left out and named, to keep manifests small. A
  // checksummed entry (dump_checksums) has no tensors to replay the op on: no attributes.
  if (!which.checksums) {
    AttrMap attrs;
    json omitted = json::array();
    for (const auto& [k, v] : node.attrs()) {
      if (v.type() == AttrValue::Type::kTensor &&
          std::get<Tensor>(v.value()).TotalBytes() > kMaxDumpAttrTensorBytes) {
        omitted.push_back(k);
      } else {
        attrs.emplace(k, v);
      }
    }
    entry["attrs"] = AttrMapToJson(attrs);
    if (!omitted.empty()) entry["attrs_omitted"] = std::move(omitted);
  }
  // fused_from: the ops a fusion pass replaced with this one (src/graph/fused_from.h), spelled
  // out for compare-dumps and for people reading the manifest.
  if (const std::vector<std::string> fused = node.StringsAttr(kFusedFromAttr); !fused.empty()) {
    json list = json::array();
    for (const std::string& e : fused) {
      auto [type, name] = ParseFusedFromEntry(e);
      list.push_back({{"name", std::move(name)}, {"type", std::move(type)}});
    }
    entry["fused_from"] = std::move(list);
  }
  entry["inputs"] = std::move(inputs);
  entry["outputs"] = std::move(outputs);
  std::lock_guard<std::mutex> lock(mu_);
  ops_.push_back(std::move(entry));
  if (!error.ok() && error_.ok()) error_ = error;
  return error;
}

namespace {

// Narrowing: for an op that turns a wider float input into a float16 / bfloat16 output (a Cast
// the mixed-precision pass or the model put there), the narrow type and its largest finite value:
// an Inf it makes from finite inputs means a value past that range, not an arithmetic fault.
std::optional<std::pair<DType, double>> Narrowing(const NodeExecution& exec) {
  auto wide = [](DType d) { return d == DType::kFloat32 || d == DType::kFloat64; };
  if (std::none_of(exec.inputs->begin(), exec.inputs->end(),
                   [&](const Tensor* t) { return t != nullptr && wide(t->dtype()); })) {
    return std::nullopt;
  }
  for (const Tensor& t : *exec.outputs) {
    if (t.dtype() == DType::kFloat16) return std::make_pair(DType::kFloat16, 65504.0);
    if (t.dtype() == DType::kBFloat16)
      return std::make_pair(DType::kBFloat16, 3.3895313892515355e38);
  }
  return std::nullopt;
}

}  // namespace

void DumpObserver::AfterNode(const NodeExecution& exec) {
  bool dump_step;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dump_step = dump_step_;
  }
  json extra = json::object();
  std::vector<std::string> reasons;
  bool overflowed = false;
  if (overflow_ && (IsAtomicOp(exec.node->type()) ? check_atomic_ : check_other_)) {
    // Outputs first: most ops are finite, and then their inputs need no scan.
    json ports = json::array();
    for (size_t o = 0; o < exec.outputs->size(); ++o) {
      Tensor keep;
      const NonFinite c = Count(OnHost(exec, &(*exec.outputs)[o], &keep));
      if (c.any()) ports.push_back({{"port", o}, {"nan", c.nan}, {"inf", c.inf}});
    }
    if (!ports.empty()) {
      overflowed = std::none_of(exec.inputs->begin(), exec.inputs->end(), [&](const Tensor* t) {
        Tensor keep;
        return Count(OnHost(exec, t, &keep)).any();
      });
    }
    if (overflowed) {
      overflow_count_.fetch_add(1);
      std::string range;
      if (const auto narrow = Narrowing(exec)) {
        range = fmt::format(
            "; it narrows to {}, whose range is +-{:g}: a value past it became Inf, so an op "
            "upstream makes values too large for that precision (scale the loss down, or keep "
            "this path in float32: precision_mode must_keep_origin_dtype)",
            DTypeName(narrow->first), narrow->second);
        extra["narrowed_to"] = std::string(DTypeName(narrow->first));
      }
      std::fprintf(stderr,
                   "recsdk: overflow at step %lld: op \"%s\" (%s) made NaN/Inf from finite inputs "
                   "(%s)%s; inputs and outputs dumped under %s\n",
                   static_cast<long long>(exec.step), exec.node->name().c_str(),
                   exec.node->type().c_str(), ports.dump().c_str(), range.c_str(),
                   dump_path_.c_str());
      if (stop_on_overflow_) {
        // The step directory is named now (its final name: EndRun publishes it as the Run ends).
        std::lock_guard<std::mutex> lock(mu_);
        if (stop_.ok()) {
          if (time_.empty()) time_ = UtcNow();  // as EnsureStepDir would, for the step's name
          stop_ = absl::InvalidArgumentError(fmt::format(
              "overflow at step {}: op \"{}\" ({}) made NaN/Inf from finite inputs ({}){}; "
              "stop_on_overflow stopped the run there (the ops after it did not run); its inputs "
              "and outputs are dumped in \"{}\" (recsdk find-nan / replay-op read it); set "
              "stop_on_overflow false to count overflows and continue",
              exec.step, exec.node->name(), exec.node->type(), ports.dump(), range,
              StepDir(step_, false)));
          stop_requested_.store(true, std::memory_order_release);
        }
      }
      extra["overflow"] = std::move(ports);
    }
  }
  if (!dump_step && !overflowed) return;
  if (dump_step) reasons.push_back("dump");
  if (overflowed) reasons.push_back("overflow");
  // Errors are kept for EndRun, which the Run returns.
  // dump_checksums compacts the plain dump; an overflow's tensors are written whole.
  (void)Record(exec,
               {dump_inputs_ || overflowed, dump_outputs_ || overflowed, checksums_ && !overflowed},
               std::move(reasons), std::move(extra));
}

void DumpObserver::OnNodeError(const NodeExecution& exec, Status* error) {
  if (!exception_) return;
  std::string dir;
  Status s = Record(exec, {true, true, false}, {"exception"},
                    json{{"error", std::string(error->message())}});
  {
    std::lock_guard<std::mutex> lock(mu_);
    dir = StepDir(step_, false);
  }
  *error = Status(
      error->code(),
      s.ok() ? fmt::format("{}; exception dump: the op's inputs are in \"{}\" "
                           "(manifest.json lists them)",
                           error->message(), dir)
             : fmt::format("{}; the exception dump failed: {}", error->message(), s.message()));
}

std::string DumpObserver::last_step_dir() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_step_dir_;
}

Status DumpObserver::EndRun(int64_t step, Status run_status) {
  std::lock_guard<std::mutex> lock(mu_);
  Status publish;
  if (dir_created_) {
    std::sort(ops_.begin(), ops_.end(),
              [](const json& a, const json& b) { return a["seq"] < b["seq"]; });
    const json manifest = {
        {"format", "recsdk-dump"}, {"version", 1},        {"step", step},
        {"device", device_},       {"graph", kGraphName}, {"graph_id", graph_id_},
        {"ops", std::move(ops_)}};
    const std::string tmp = StepDir(step, true), final_dir = StepDir(step, false);
    publish = [&]() -> Status {
      RECSDK_RETURN_IF_ERROR(WriteStringToFileAtomic(
          env_, tmp + "/manifest.json",
          // dump_checksums (the compact trace): no indentation, a third smaller.
          manifest.dump(checksums_ ? -1 : 1, ' ', false, json::error_handler_t::replace) + "\n"));
      if (env_->FileExists(final_dir)) {
        // The step ran before in this session (SetRunCount moved the counter back).
        RECSDK_RETURN_IF_ERROR(DeleteRecursively(env_, final_dir));
      }
      RECSDK_RETURN_IF_ERROR(env_->RenameFile(tmp, final_dir));
      return env_->SyncDir(Dirname(final_dir));
    }();
    if (publish.ok()) last_step_dir_ = final_dir;
    dir_created_ = false;
    ops_ = json::array();
  }
  const Status first = !error_.ok() ? error_ : publish;
  error_ = absl::OkStatus();
  if (!run_status.ok()) {
    if (first.ok()) return run_status;
    return Status(run_status.code(), fmt::format("{}; and the step's dump failed: {}",
                                                 run_status.message(), first.message()));
  }
  if (first.ok()) return absl::OkStatus();
  return Status(first.code(),
                fmt::format("dump_path \"{}\": the dump of step {} failed: {}; free space or fix "
                            "dump_path, or turn enable_dump / enable_dump_debug off",
                            dump_path_, step, first.message()));
}

}  // namespace recsdk::internal
