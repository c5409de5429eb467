// profiler.cc: the session's profiler (see profiler.h).
#include "src/session/profiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/match.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "src/session/table_ops.h"

namespace recsdk::internal {
namespace {

using json = nlohmann::json;

bool IsGradientOp(const std::string& type) {
  return absl::EndsWith(type, "Grad") || type == kTableGradAggregateOp;
}
bool IsKeyWork(const std::string& type) {
  return type == kSparseLookupOp || type == kTableLookupGroupOp;
}
bool IsDenseUpdate(const std::string& type) { return absl::StartsWith(type, "Apply"); }

constexpr int kPhaseTrack = 1000000;

}  // namespace

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Profiler::Profiler(const SessionConfig& config, std::string tag)
    : training_trace_(config.profiling_options.find("training_trace") != std::string::npos),
      task_trace_(config.profiling_options.find("task_trace") != std::string::npos),
      op_trace_(config.profiling_options.find("op_trace") != std::string::npos),
      fp_point_(config.fp_point),
      bp_point_(config.bp_point),
      dir_(config.profiling_dir),
      tag_(std::move(tag)),
      origin_ns_(NowNs()) {}

void Profiler::BeginRun(int64_t) {
  absl::MutexLock lock(&mu_);
  events_.clear();
  run_start_ns_ = NowNs();
}

void Profiler::AfterNode(const NodeExecution& exec) {
  absl::MutexLock lock(&mu_);
  events_.push_back(
      Event{exec.node, std::string(exec.device), exec.thread, exec.start_ns, exec.end_ns});
}

std::vector<Profiler::Phase> Profiler::Phases() const {
  std::vector<Phase> phases;
  if (previous_end_ns_ >= 0) {
    phases.push_back({"data_wait", previous_end_ns_, run_start_ns_ - previous_end_ns_});
  }
  int64_t key = 0, sparse = 0, dense = 0;
  int64_t fp_start = -1, bp_end = -1, first_grad = -1;
  for (const Event& e : events_) {
    const std::string& type = e.node->type();
    const int64_t d = e.end_ns - e.start_ns;
    if (IsKeyWork(type)) key += d;
    if (type == kTableApplyOp) sparse += d;
    if (IsDenseUpdate(type)) dense += d;
    if (e.node->name() == fp_point_) fp_start = e.start_ns;
    if (e.node->name() == bp_point_) bp_end = e.end_ns;
    if (IsGradientOp(type) && (first_grad < 0 || e.start_ns < first_grad)) first_grad = e.start_ns;
  }
  // Summed phases are drawn from the run's start, one after the other, as their totals.
  int64_t cursor = run_start_ns_;
  if (key > 0) {
    phases.push_back({"key_stage", cursor, key});
    cursor += key;
  }
  if (fp_start >= 0 && bp_end >= fp_start) {
    const int64_t split = first_grad >= fp_start && first_grad <= bp_end ? first_grad : bp_end;
    phases.push_back({"forward", fp_start, split - fp_start});
    phases.push_back({"backward", split, bp_end - split});
  }
  if (sparse > 0) phases.push_back({"sparse_update", std::max(cursor, bp_end), sparse});
  if (dense > 0) phases.push_back({"dense_update", std::max(cursor, bp_end) + sparse, dense});
  return phases;
}

std::string Profiler::Summary(int64_t step, const std::vector<Phase>& phases) const {
  const double wall_ms = static_cast<double>(run_end_ns_ - run_start_ns_) / 1e6;
  std::string out = fmt::format("recsdk profile: step {}, {} ops, run {:.3f} ms\n", step,
                                events_.size(), wall_ms);
  std::map<const Node*, int64_t> per_op;
  for (const Event& e : events_) per_op[e.node] += e.end_ns - e.start_ns;
  std::vector<std::pair<int64_t, const Node*>> slowest;
  for (const auto& [node, ns] : per_op) slowest.emplace_back(ns, node);
  std::sort(slowest.begin(), slowest.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second->id() < b.second->id();
  });
  out += "  slowest ops:\n";
  for (size_t i = 0; i < std::min<size_t>(slowest.size(), 5); ++i) {
    out += fmt::format("    {:10.3f} ms  {} ({})\n", static_cast<double>(slowest[i].first) / 1e6,
                       slowest[i].second->name(), slowest[i].second->type());
  }
  if (training_trace_) {
    int64_t total = run_end_ns_ - run_start_ns_;
    for (const Phase& p : phases) {
      if (p.name == "data_wait") total += p.dur_ns;
    }
    out += "  phases (share of data wait + run):\n";
    for (const Phase& p : phases) {
      out += fmt::format("    {:14s} {:10.3f} ms  {:5.1f}%\n", p.name,
                         static_cast<double>(p.dur_ns) / 1e6,
                         total > 0 ? 100.0 * static_cast<double>(p.dur_ns) / total : 0.0);
    }
  }
  return out;
}

Status Profiler::EndRun(int64_t step) {
  absl::MutexLock lock(&mu_);
  run_end_ns_ = NowNs();
  std::sort(events_.begin(), events_.end(), [](const Event& a, const Event& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.node->id() < b.node->id();
  });
  const std::vector<Phase> phases = training_trace_ ? Phases() : std::vector<Phase>{};
  const auto us = [this](int64_t ns) { return static_cast<double>(ns - origin_ns_) / 1e3; };
  json trace = json::array();
  trace.push_back({{"name", "process_name"},
                   {"ph", "M"},
                   {"pid", 0},
                   {"args", {{"name", fmt::format("recsdk session {}", tag_)}}}});
  if (task_trace_ || op_trace_) {
    for (const Event& e : events_) {
      json args = {{"type", e.node->type()}};
      if (task_trace_) {
        args["device"] = e.device;
        args["thread"] = e.thread;
      }
      trace.push_back({{"name", e.node->name()},
                       {"cat", op_trace_ ? "op" : "task"},
                       {"ph", "X"},
                       {"pid", 0},
                       {"tid", op_trace_ ? 0 : e.thread},
                       {"ts", us(e.start_ns)},
                       {"dur", static_cast<double>(e.end_ns - e.start_ns) / 1e3},
                       {"args", args}});
    }
  }
  if (training_trace_) {
    trace.push_back({{"name", "thread_name"},
                     {"ph", "M"},
                     {"pid", 0},
                     {"tid", kPhaseTrack},
                     {"args", {{"name", "phases"}}}});
    for (const Phase& p : phases) {
      trace.push_back({{"name", p.name},
                       {"cat", "phase"},
                       {"ph", "X"},
                       {"pid", 0},
                       {"tid", kPhaseTrack},
                       {"ts", us(p.start_ns)},
                       {"dur", static_cast<double>(p.dur_ns) / 1e3}});
    }
  }
  last_summary_ = Summary(step, phases);
  previous_end_ns_ = run_end_ns_;
  const json doc = {{"traceEvents", trace},
                    {"displayTimeUnit", "ms"},
                    {"otherData", {{"summary", last_summary_}, {"step", step}}}};
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        fmt::format("profiling_dir \"{}\": cannot create it: {}; choose a writable directory", dir_,
                    ec.message()));
  }
  const std::string path = fmt::format("{}/trace_{}_{}.json", dir_, tag_, step);
  std::ofstream f(path, std::ios::trunc);
  f << doc.dump(-1, ' ', false, json::error_handler_t::replace);
  f.close();
  if (!f) {
    return absl::DataLossError(
        fmt::format("profiling: writing \"{}\" failed; check the disk and profiling_dir", path));
  }
  last_trace_path_ = path;
  std::fputs(last_summary_.c_str(), stderr);
  return absl::OkStatus();
}

}  // namespace recsdk::internal
