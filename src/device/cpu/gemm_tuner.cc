// gemm_tuner.cc: see gemm_tuner.h.
#include "src/device/cpu/gemm_tuner.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "fmt/format.h"
#include "src/common/cpu_features.h"
#include "src/common/env.h"
#include "src/common/logging.h"
#include "src/device/cpu/kernel_util.h"

namespace recsdk::internal {
namespace {

constexpr char kBankFile[] = "gemm.tsv";
constexpr int kMaxParts = 8;

// DefaultPlanFor: the plan without tuning (a batch splits across its products, one each).
GemmPlan DefaultPlanFor(const GemmShape& s) {
  return s.batch > 0 ? GemmPlan{BestGemmBackend(), 1} : DefaultGemmPlan(s.m, s.n, s.k);
}

// Candidates: every available backend x {1, 2, 4, 8} blocks of C by rows and {2, 4, 8} by
// columns (blocks of at least 16 rows or columns); a batch splits across its products, so only
// the backend varies. The default plan is first.
std::vector<GemmPlan> Candidates(const GemmShape& s) {
  std::vector<GemmPlan> out;
  const GemmPlan def = DefaultPlanFor(s);
  out.push_back(def);
  std::vector<GemmBackend> backends = {GemmBackend::kEigen};
  if (OneDnnAvailable()) backends.push_back(GemmBackend::kOneDnn);
  const int max_parts = s.batch > 0 ? 1 : kMaxParts;
  for (GemmBackend b : backends) {
    for (bool columns : {false, true}) {
      for (int parts = columns ? 2 : 1; parts <= max_parts; parts *= 2) {
        if (parts > 1 && (columns ? s.n : s.m) < 16 * parts) break;
        const GemmPlan p{b, parts, columns};
        if (!(p == def)) out.push_back(p);
      }
    }
  }
  return out;
}

// TimeUs: per candidate, the best of three timed runs in microseconds. The candidates take turns
// (one warm-up round, then three timed rounds), so a slow start (threads waking, oneDNN's JIT,
// cold caches) or a burst of load elsewhere does not fall on one candidate alone.
std::vector<double> TimeUs(const std::vector<GemmPlan>& plans, const GemmShape& s, const float* a,
                           const float* b, float* c) {
  using Clock = std::chrono::steady_clock;
  std::vector<double> best(plans.size(), std::numeric_limits<double>::infinity());
  for (int round = 0; round < 4; ++round) {
    for (size_t i = 0; i < plans.size(); ++i) {
      const auto t = Clock::now();
      RunGemmPlan(plans[i], s, a, b, c);
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - t).count();
      if (round > 0) best[i] = std::min(best[i], us);
    }
  }
  return best;
}

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    std::string name = line.substr(colon + 1);
    name.erase(0, name.find_first_not_of(' '));
    return name;
  }
  return "unknown_cpu";
}

std::optional<GemmBackend> ParseBackend(absl::string_view name) {
  if (name == GemmBackendName(GemmBackend::kEigen)) return GemmBackend::kEigen;
  if (name == GemmBackendName(GemmBackend::kOneDnn)) return GemmBackend::kOneDnn;
  return std::nullopt;
}

// ParseLine: one bank line into (machine, threads, record), or an error saying what is wrong.
Status ParseLine(absl::string_view line, std::string* machine, int* threads, GemmTuneRecord* rec) {
  const std::vector<absl::string_view> f = absl::StrSplit(line, '\t');
  if (f.size() != 5) return absl::InvalidArgumentError("expected 5 tab-separated fields");
  *machine = std::string(f[0]);
  if (!absl::SimpleAtoi(f[1], threads) || *threads < 1) {
    return absl::InvalidArgumentError(fmt::format("threads \"{}\" is not a positive count", f[1]));
  }
  const std::vector<absl::string_view> dims = absl::StrSplit(f[2], ' ');
  int64_t v[6] = {};
  bool ok = dims.size() == 6;
  for (size_t i = 0; ok && i < 6; ++i) ok = absl::SimpleAtoi(dims[i], &v[i]) && v[i] >= 0;
  if (!ok || v[4] > 1 || v[5] > 1) {
    return absl::InvalidArgumentError(fmt::format(
        "shape \"{}\" is not \"<batch> <m> <n> <k> <trans_a 0|1> <trans_b 0|1>\"", f[2]));
  }
  rec->shape = {v[0], v[1], v[2], v[3], v[4] == 1, v[5] == 1};
  const std::vector<absl::string_view> plan = absl::StrSplit(f[3], ' ');
  std::optional<GemmBackend> backend;
  if (plan.size() == 3) backend = ParseBackend(plan[0]);
  if (!backend || !absl::SimpleAtoi(plan[1], &rec->plan.parts) || rec->plan.parts < 1 ||
      rec->plan.parts > kMaxParts || (plan[2] != "rows" && plan[2] != "columns")) {
    return absl::InvalidArgumentError(fmt::format(
        "plan \"{}\" is not \"<eigen|onednn> <blocks 1-{}> <rows|columns>\"", f[3], kMaxParts));
  }
  rec->plan.backend = *backend;
  rec->plan.split_columns = plan[2] == "columns";
  const std::vector<absl::string_view> us = absl::StrSplit(f[4], ' ');
  if (us.size() != 2 || !absl::SimpleAtod(us[0], &rec->default_us) ||
      !absl::SimpleAtod(us[1], &rec->tuned_us)) {
    return absl::InvalidArgumentError(
        fmt::format("times \"{}\" are not \"<default_us> <tuned_us>\"", f[4]));
  }
  return absl::OkStatus();
}

std::string FormatLine(const std::string& machine, int threads, const GemmTuneRecord& r) {
  const GemmShape& s = r.shape;
  return fmt::format("{}\t{}\t{} {} {} {} {:d} {:d}\t{} {} {}\t{:.1f} {:.1f}\n", machine, threads,
                     s.batch, s.m, s.n, s.k, s.trans_a, s.trans_b, GemmBackendName(r.plan.backend),
                     r.plan.parts, r.plan.split_columns ? "columns" : "rows", r.default_us,
                     r.tuned_us);
}

std::string Describe(const GemmShape& s) {
  return fmt::format("{}[{}x{}] x [{}x{}]{}{}", s.batch > 0 ? fmt::format("{} x ", s.batch) : "",
                     s.m, s.k, s.k, s.n, s.trans_a ? " (A transposed)" : "",
                     s.trans_b ? " (B transposed)" : "");
}

}  // namespace

GemmTuner::GemmTuner(std::string bank_dir, int threads)
    : bank_dir_(std::move(bank_dir)),
      bank_path_(bank_dir_ + "/" + kBankFile),
      machine_(MachineKey()),
      threads_(threads) {}

std::string GemmTuner::MachineKey() {
  std::string key = CpuModelName() + "/" + std::string(IsaName(BestIsa()));
  std::replace_if(
      key.begin(), key.end(), [](char ch) { return ch == ' ' || ch == '\t' || ch == '\n'; }, '_');
  return key;
}

StatusOr<std::unique_ptr<GemmTuner>> GemmTuner::Create(std::string bank_dir, int threads) {
  if (bank_dir.empty()) {
    return absl::InvalidArgumentError(
        "auto_tune_mode: tune_bank_path is empty; give the folder the tune bank goes to");
  }
  std::unique_ptr<GemmTuner> tuner(new GemmTuner(std::move(bank_dir), std::max(threads, 1)));
  RECSDK_RETURN_IF_ERROR(tuner->Load());
  return tuner;
}

Status GemmTuner::Load() {
  Env* env = Env::Default();
  if (!env->FileExists(bank_path_)) return absl::OkStatus();
  RECSDK_ASSIGN_OR_RETURN(std::string text, ReadFileToString(env, bank_path_));
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    ++line_no;
    std::string machine;
    int threads = 0;
    GemmTuneRecord rec;
    if (Status s = ParseLine(line, &machine, &threads, &rec); !s.ok()) {
      return absl::FailedPreconditionError(
          fmt::format("auto_tune_mode: tune bank \"{}\" line {}: {}; delete the file (it is "
                      "rebuilt by tuning) or fix the line",
                      bank_path_, line_no, s.message()));
    }
    if (machine == machine_ && threads == threads_) {
      mine_[rec.shape] = rec;
    } else {
      others_.emplace_back(line);
    }
  }
  return absl::OkStatus();
}

void GemmTuner::Save() {
  std::string text;
  for (const std::string& line : others_) text += line + "\n";
  for (const auto& [shape, rec] : mine_) text += FormatLine(machine_, threads_, rec);
  Env* env = Env::Default();
  Status s = env->CreateDir(bank_dir_);
  if (s.ok()) s = WriteStringToFileAtomic(env, bank_path_, text);
  if (!s.ok() && !warned_) {
    warned_ = true;
    LogWarning(
        "auto_tune_mode: cannot write the tune bank ({}); the tuned choices apply to this "
        "process only",
        s.message());
  }
}

GemmPlan GemmTuner::Plan(const GemmShape& shape, const float* a, const float* b, float* c) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = mine_.find(shape);
    if (it != mine_.end()) return it->second.plan;
  }
  GemmTuneRecord rec;
  rec.shape = shape;
  const std::vector<GemmPlan> plans = Candidates(shape);
  const std::vector<double> us = TimeUs(plans, shape, a, b, c);
  const size_t best = std::min_element(us.begin(), us.end()) - us.begin();
  rec.plan = plans[best];
  rec.default_us = us[0];  // Candidates puts the default first
  rec.tuned_us = us[best];
  LogInfo(
      "auto_tune_mode: {} at {} threads: {}, {} blocks by {}: {:.1f} us (default {:.1f} us, "
      "{:.2f}x)",
      Describe(shape), threads_, GemmBackendName(rec.plan.backend), rec.plan.parts,
      rec.plan.split_columns ? "columns" : "rows", rec.tuned_us, rec.default_us,
      rec.default_us / std::max(rec.tuned_us, 1e-3));
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = mine_.try_emplace(shape, rec);
  if (inserted) {
    ++measured_;
    Save();
  }
  return it->second.plan;
}

std::vector<GemmTuneRecord> GemmTuner::Records() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<GemmTuneRecord> out;
  for (const auto& [shape, rec] : mine_) out.push_back(rec);
  return out;
}

int64_t GemmTuner::measured() const {
  std::lock_guard<std::mutex> lock(mu_);
  return measured_;
}

void RunGemmPlan(const GemmPlan& plan, const GemmShape& s, const float* a, const float* b, float* c,
                 const GemmEpilogue& epilogue) {
  if (s.batch == 0) {
    ParallelSgemm(plan, s.m, s.n, s.k, a, s.trans_a, b, s.trans_b, c, epilogue);
    return;
  }
  const int64_t lda = s.trans_a ? s.m : s.k, ldb = s.trans_b ? s.k : s.n;
  ParallelFor(s.batch, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t i = b0; i < b1; ++i) {
      SingleSgemm(plan.backend, s.m, s.n, s.k, a + i * s.m * s.k, lda, s.trans_a, b + i * s.k * s.n,
                  ldb, s.trans_b, c + i * s.m * s.n, s.n);
    }
  });
}

void RunGemm(Device* device, const GemmShape& shape, const float* a, const float* b, float* c,
             const GemmEpilogue& epilogue) {
  GemmTuner* tuner = CpuGemmTuner(device);
  const GemmPlan plan = tuner != nullptr ? tuner->Plan(shape, a, b, c) : DefaultPlanFor(shape);
  RunGemmPlan(plan, shape, a, b, c, epilogue);
}

}  // namespace recsdk::internal
