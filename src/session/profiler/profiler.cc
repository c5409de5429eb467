// profiler.cc: the session's profiler (see profiler.h).
#include "src/session/profiler/profiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "absl/strings/match.h"
#include "fmt/format.h"
#include "src/common/env.h"
#include "src/common/status_macros.h"
#include "src/session/table_ops.h"

namespace recsdk::internal {
namespace {

bool IsGradientOp(const std::string& type) {
  return absl::EndsWith(type, "Grad") || type == kTableGradAggregateOp;
}
// IsKeyWork, IsSparseUpdate: a step's table lookups and updates, one table at a time or (several
// ranks) all tables in one exchange.
bool IsKeyWork(const std::string& type) {
  return type == kSparseLookupOp || type == kTableLookupGroupOp || type == kTableLookupExchangeOp;
}
bool IsSparseUpdate(const std::string& type) {
  return type == kTableApplyOp || type == kTableApplyExchangeOp;
}
bool IsDenseUpdate(const std::string& type) { return absl::StartsWith(type, "Apply"); }

constexpr int kPhaseTrack = 1000000;

// Quote: `text` as a JSON string literal.
std::string Quote(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      out += fmt::format("\\u{:04x}", u);
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

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
      origin_ns_(NowNs()),
      writer_([this] { WriterLoop(); }) {}

Profiler::~Profiler() {
  (void)Flush();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  changed_.notify_all();
  writer_.join();
}

void Profiler::BeginRun(int64_t) {
  run_.fetch_add(1, std::memory_order_relaxed);  // every buffer becomes stale
  overflow_ = ThreadBuffer();
  run_start_ns_ = NowNs();
}

void Profiler::Record(ThreadBuffer& b, const NodeExecution& exec) {
  const int64_t run = run_.load(std::memory_order_relaxed);
  if (b.run != run) {
    b.run = run;
    b.events.clear();
    b.devices.clear();
  }
  if (b.devices.empty() || b.devices.back() != exec.device) b.devices.emplace_back(exec.device);
  b.events.push_back(Event{exec.node, static_cast<int>(b.devices.size()) - 1, exec.thread,
                           exec.start_ns, exec.end_ns});
}

void Profiler::AfterNode(const NodeExecution& exec) {
  if (exec.thread >= 0 && exec.thread < kMaxThreads) {
    Record(buffers_[exec.thread], exec);  // only this thread touches its buffer during a Run
    return;
  }
  std::lock_guard<std::mutex> lock(overflow_mu_);
  Record(overflow_, exec);
}

Status Profiler::EndRun(int64_t step) {
  auto t = std::make_unique<RunTrace>();
  t->step = step;
  t->run_start_ns = run_start_ns_;
  t->run_end_ns = NowNs();
  t->previous_end_ns = previous_end_ns_;
  previous_end_ns_ = t->run_end_ns;
  // The Run is over: no AfterNode runs now, so the buffers can be read without locks.
  const int64_t run = run_.load(std::memory_order_relaxed);
  auto take = [&](ThreadBuffer& b) {
    if (b.run != run) return;
    const int base = static_cast<int>(t->devices.size());
    for (std::string& d : b.devices) t->devices.push_back(std::move(d));
    for (Event e : b.events) {
      e.device += base;
      t->events.push_back(e);
    }
    b.run = -1;
  };
  for (ThreadBuffer& b : buffers_) take(b);
  take(overflow_);
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [&] { return pending_.size() < kMaxPendingRuns; });
  pending_.push_back(std::move(t));
  changed_.notify_all();
  Status error = error_;
  error_ = Status();
  return error;
}

Status Profiler::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [&] { return pending_.empty() && !writing_; });
  Status error = error_;
  error_ = Status();
  return error;
}

std::string Profiler::last_trace_path() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_trace_path_;
}
std::string Profiler::last_summary() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_summary_;
}

void Profiler::WriterLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    changed_.wait(lock, [&] { return stop_ || !pending_.empty(); });
    if (pending_.empty()) return;  // stop_ with nothing left
    std::unique_ptr<RunTrace> t = std::move(pending_.front());
    pending_.pop_front();
    writing_ = true;
    changed_.notify_all();  // a waiting EndRun may proceed
    lock.unlock();
    const Status s = Write(*t);
    lock.lock();
    writing_ = false;
    if (!s.ok() && error_.ok()) error_ = s;
    changed_.notify_all();
  }
}

std::vector<Profiler::Phase> Profiler::Phases(const RunTrace& t) const {
  std::vector<Phase> phases;
  if (t.previous_end_ns >= 0) {
    phases.push_back({"data_wait", t.previous_end_ns, t.run_start_ns - t.previous_end_ns});
  }
  int64_t key = 0, sparse = 0, dense = 0;
  int64_t fp_start = -1, bp_end = -1, first_grad = -1;
  for (const Event& e : t.events) {
    const std::string& type = e.node->type();
    const int64_t d = e.end_ns - e.start_ns;
    if (IsKeyWork(type)) key += d;
    if (IsSparseUpdate(type)) sparse += d;
    if (IsDenseUpdate(type)) dense += d;
    if (e.node->name() == fp_point_) fp_start = e.start_ns;
    if (e.node->name() == bp_point_) bp_end = e.end_ns;
    if (IsGradientOp(type) && (first_grad < 0 || e.start_ns < first_grad)) first_grad = e.start_ns;
  }
  // Summed phases are drawn from the run's start, one after the other, as their totals.
  int64_t cursor = t.run_start_ns;
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

std::string Profiler::Summary(const RunTrace& t, const std::vector<Phase>& phases) const {
  const double wall_ms = static_cast<double>(t.run_end_ns - t.run_start_ns) / 1e6;
  std::string out = fmt::format("recsdk profile: step {}, {} ops, run {:.3f} ms\n", t.step,
                                t.events.size(), wall_ms);
  std::map<const Node*, int64_t> per_op;
  for (const Event& e : t.events) per_op[e.node] += e.end_ns - e.start_ns;
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
    int64_t total = t.run_end_ns - t.run_start_ns;
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

Status Profiler::Write(RunTrace& t) {
  std::sort(t.events.begin(), t.events.end(), [](const Event& a, const Event& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.node->id() < b.node->id();
  });
  const std::vector<Phase> phases = training_trace_ ? Phases(t) : std::vector<Phase>{};
  const auto us = [this](int64_t ns) { return static_cast<double>(ns - origin_ns_) / 1e3; };
  // Formatted directly (names escaped as JSON strings): a trace is thousands of events per Run.
  fmt::memory_buffer b;
  auto out = std::back_inserter(b);
  fmt::format_to(out,
                 "{{\"traceEvents\":[{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,"
                 "\"args\":{{\"name\":{}}}}}",
                 Quote(fmt::format("recsdk session {}", tag_)));
  if (task_trace_ || op_trace_) {
    // Per node, the constant part of its event (name, category, type) is formatted once and kept
    // for later traces; times are integer nanoseconds printed as microseconds with 3 decimals.
    std::vector<std::string> quoted_devices;
    for (const std::string& d : t.devices) quoted_devices.push_back(Quote(d));
    for (const Event& e : t.events) {
      std::string& head = event_heads_[e.node];
      if (head.empty()) {
        head = fmt::format(
            ",\n{{\"name\":{},\"cat\":\"{}\",\"ph\":\"X\",\"pid\":0,\"args\":{{\"type\":{}",
            Quote(e.node->name()), op_trace_ ? "op" : "task", Quote(e.node->type()));
      }
      b.append(head.data(), head.data() + head.size());
      if (task_trace_) {
        fmt::format_to(out, ",\"device\":{},\"thread\":{}", quoted_devices[e.device], e.thread);
      }
      const int64_t ts = e.start_ns - origin_ns_, dur = e.end_ns - e.start_ns;
      fmt::format_to(out, "}},\"tid\":{},\"ts\":{}.{:03},\"dur\":{}.{:03}}}",
                     op_trace_ ? 0 : e.thread, ts / 1000, ts % 1000, dur / 1000, dur % 1000);
    }
  }
  if (training_trace_) {
    fmt::format_to(out,
                   ",\n{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":{},"
                   "\"args\":{{\"name\":\"phases\"}}}}",
                   kPhaseTrack);
    for (const Phase& p : phases) {
      fmt::format_to(out,
                     ",\n{{\"name\":{},\"cat\":\"phase\",\"ph\":\"X\",\"pid\":0,\"tid\":{},"
                     "\"ts\":{:.3f},\"dur\":{:.3f}}}",
                     Quote(p.name), kPhaseTrack, us(p.start_ns),
                     static_cast<double>(p.dur_ns) / 1e3);
    }
  }
  const std::string summary = Summary(t, phases);
  fmt::format_to(out,
                 "],\n\"displayTimeUnit\":\"ms\",\"otherData\":{{\"summary\":{},\"step\":{}}}}}\n",
                 Quote(summary), t.step);
  if (Status s = internal::Env::Default()->CreateDir(dir_); !s.ok()) {
    return absl::FailedPreconditionError(
        fmt::format("profiling_dir \"{}\": cannot create it: {}; choose a writable directory", dir_,
                    s.message()));
  }
  const std::string path = fmt::format("{}/trace_{}_{}.json", dir_, tag_, t.step);
  // Through the Env, atomically: a trace is whole or absent, never followed through a link.
  if (Status s = internal::WriteStringToFileAtomic(internal::Env::Default(), path,
                                                   std::string_view(b.data(), b.size()));
      !s.ok()) {
    return absl::Status(s.code(), fmt::format("profiling: writing the trace failed: {}; check the "
                                              "disk and profiling_dir",
                                              s.message()));
  }
  std::fputs(summary.c_str(), stderr);
  std::lock_guard<std::mutex> lock(mu_);
  last_trace_path_ = path;
  last_summary_ = summary;
  return absl::OkStatus();
}

}  // namespace recsdk::internal
