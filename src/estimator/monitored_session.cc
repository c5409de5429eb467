// monitored_session.cc: MonitoredSession (hooks.h): a Session whose steps run the hooks' Begin /
// AfterCreateSession / BeforeRun / AfterRun / End around them. The global step is read after
// each step or loop of steps (RunLoop) (only when the graph has one) straight from its variable, so
// hooks see the exact value whether or not the step incremented it. Not with a Session::Run: that
// would advance the session's run count, which keys the random streams (Session::SetRunCount), so a
// resumed MonitoredSession would draw other Dropout masks than the run it resumes.
//
// Threading: one loop thread.
#include <memory>
#include <mutex>
#include <utility>

#include "fmt/format.h"
#include "recsdk/hooks.h"
#include "recsdk/pipeline.h"
#include "recsdk/variables.h"
#include "src/common/status_macros.h"
#include "src/device/resource_mgr.h"
#include "src/session/session_resources.h"

namespace recsdk {

namespace {

Status AfterClose() {
  return absl::FailedPreconditionError(
      "MonitoredSession::Run after Close; create a new MonitoredSession to keep training");
}

}  // namespace

struct MonitoredSession::Impl {
  std::unique_ptr<Session> owned;
  Session* session = nullptr;
  HookList hooks;
  KeyStage* key_stage = nullptr;
  bool has_global_step = false;
  int64_t global_step = -1;
  int64_t steps_run = 0;  // steps run so far (SessionRunContext::run_index)
  bool stop = false;
  bool closed = false;

  // Steps: up to `iterations` steps with one round of hooks (Run and RunLoop): the first on
  // `first` (its rows `first_rows`), the others fed by *next (null: one step only).
  StatusOr<int64_t> Steps(int64_t iterations, const FeedList& first, int64_t first_rows,
                          const StepSource* next, const std::vector<TensorName>& fetches,
                          const std::vector<TensorName>& targets, std::vector<Tensor>* outputs);

  Status ReadGlobalStep() {
    if (!has_global_step) return absl::OkStatus();
    RECSDK_ASSIGN_OR_RETURN(
        Tensor v, internal::SessionResources(*session)->ReadVariable(std::string(kGlobalStep)));
    if (v.dtype() == DType::kInt64 && v.num_elements() == 1) {
      global_step = v.data<int64_t>()[0];
      return absl::OkStatus();
    }
    RECSDK_ASSIGN_OR_RETURN(std::vector<Tensor> out,
                            session->Run({}, {std::string(kGlobalStep) + "/read"}));
    global_step = out[0].scalar<int64_t>();
    return absl::OkStatus();
  }
};

MonitoredSession::MonitoredSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MonitoredSession::~MonitoredSession() = default;

StatusOr<std::unique_ptr<MonitoredSession>> MonitoredSession::Create(
    Graph* graph, MonitoredSessionOptions options) {
  if (graph == nullptr) return absl::InvalidArgumentError("MonitoredSession: the graph is null");
  for (const auto& hook : options.hooks) {
    if (hook == nullptr) {
      return absl::InvalidArgumentError("MonitoredSession: a hook in the list is null");
    }
    RECSDK_RETURN_IF_ERROR(hook->Begin(graph));
  }
  auto impl = std::make_unique<Impl>();
  RECSDK_ASSIGN_OR_RETURN(impl->owned, Session::Create(*graph, options.config));
  impl->session = impl->owned.get();
  std::vector<TensorName> init;
  if (options.init_targets.has_value()) {
    init = *options.init_targets;
  } else if (graph->FindNode("init") != nullptr) {
    init.push_back("init");
  }
  if (!init.empty()) RECSDK_RETURN_IF_ERROR(impl->session->Run({}, {}, init).status());
  if (options.after_init) RECSDK_RETURN_IF_ERROR(options.after_init(*impl->session));
  impl->hooks = std::move(options.hooks);
  impl->has_global_step = Variable::FromGraph(*graph, kGlobalStep).ok();
  RECSDK_RETURN_IF_ERROR(impl->ReadGlobalStep());
  for (const auto& hook : impl->hooks) {
    RECSDK_RETURN_IF_ERROR(hook->AfterCreateSession(*impl->session));
  }
  return std::unique_ptr<MonitoredSession>(new MonitoredSession(std::move(impl)));
}

StatusOr<std::unique_ptr<MonitoredSession>> MonitoredSession::Wrap(Session& session,
                                                                   HookList hooks) {
  for (const auto& hook : hooks) {
    if (hook == nullptr) {
      return absl::InvalidArgumentError("MonitoredSession: a hook in the list is null");
    }
    RECSDK_RETURN_IF_ERROR(hook->Begin(nullptr));
  }
  auto impl = std::make_unique<Impl>();
  impl->session = &session;
  impl->hooks = std::move(hooks);
  impl->has_global_step = Variable::FromGraph(session.graph(), kGlobalStep).ok();
  RECSDK_RETURN_IF_ERROR(impl->ReadGlobalStep());
  for (const auto& hook : impl->hooks) RECSDK_RETURN_IF_ERROR(hook->AfterCreateSession(session));
  return std::unique_ptr<MonitoredSession>(new MonitoredSession(std::move(impl)));
}

Status MonitoredSession::Run(const FeedList& feeds, const std::vector<TensorName>& fetches,
                             const std::vector<TensorName>& targets, std::vector<Tensor>* outputs,
                             int64_t batch_rows) {
  return impl_->Steps(1, feeds, batch_rows, nullptr, fetches, targets, outputs).status();
}

StatusOr<int64_t> MonitoredSession::RunLoop(int64_t iterations, const StepSource& next,
                                            const std::vector<TensorName>& fetches,
                                            const std::vector<TensorName>& targets,
                                            std::vector<Tensor>* outputs) {
  if (iterations < 1) {
    return absl::InvalidArgumentError(fmt::format(
        "MonitoredSession::RunLoop: iterations {} is below 1; run 1 or more steps", iterations));
  }
  if (!next)
    return absl::InvalidArgumentError("MonitoredSession::RunLoop: the StepSource is empty");
  if (impl_->closed) return AfterClose();
  FeedList feeds;
  int64_t rows = 0;
  RECSDK_ASSIGN_OR_RETURN(const bool more, next(&feeds, &rows));
  if (!more) return 0;
  return impl_->Steps(iterations, feeds, rows, &next, fetches, targets, outputs);
}

StatusOr<int64_t> MonitoredSession::Impl::Steps(int64_t iterations, const FeedList& first,
                                                int64_t first_rows, const StepSource* next,
                                                const std::vector<TensorName>& fetches,
                                                const std::vector<TensorName>& targets,
                                                std::vector<Tensor>* outputs) {
  Impl& s = *this;
  if (s.closed) return AfterClose();
  SessionRunContext context;
  context.session = s.session;
  context.key_stage = s.key_stage;
  context.run_index = s.steps_run;
  context.steps = iterations;
  context.global_step = s.global_step;
  std::vector<TensorName> all = fetches;
  std::vector<std::pair<size_t, size_t>> ranges;  // per hook: [begin, end) in the results
  for (const auto& hook : s.hooks) {
    SessionRunArgs args;
    RECSDK_RETURN_IF_ERROR(hook->BeforeRun(context, &args));
    ranges.emplace_back(all.size(), all.size() + args.fetches.size());
    all.insert(all.end(), args.fetches.begin(), args.fetches.end());
  }
  // Every step fetches (the fetches are scalars the hooks check); the last step's are kept.
  std::vector<Tensor> results;
  int64_t steps = 0;
  int64_t total_rows = 0;
  // The first step runs on the caller's feeds (no copy); later ones on those `next` fills.
  const FeedList* feeds = &first;
  int64_t rows = first_rows;
  FeedList pulled;
  while (true) {
    RECSDK_RETURN_IF_ERROR(s.session->Run(*feeds, all, targets, &results));
    // deterministic: the hooks (set_threshold, eviction, checkpoints) see the key stage at a
    // fixed point, not wherever its threads happen to be (KeyStage::WaitForWindow).
    if (s.key_stage != nullptr && s.session->config().deterministic) s.key_stage->WaitForWindow();
    ++s.steps_run;
    ++steps;
    total_rows += rows;
    if (steps == iterations || next == nullptr) break;
    pulled.clear();
    RECSDK_ASSIGN_OR_RETURN(const bool more, (*next)(&pulled, &rows));
    if (!more) break;
    feeds = &pulled;
  }
  RECSDK_RETURN_IF_ERROR(s.ReadGlobalStep());
  context.global_step = s.global_step;
  context.steps = steps;
  context.batch_rows = total_rows;
  if (outputs != nullptr) {
    outputs->assign(results.begin(), results.begin() + static_cast<long>(fetches.size()));
  }
  const absl::Span<const Tensor> span(results);
  for (size_t h = 0; h < s.hooks.size(); ++h) {
    RECSDK_RETURN_IF_ERROR(s.hooks[h]->AfterRun(
        context, span.subspan(ranges[h].first, ranges[h].second - ranges[h].first)));
  }
  if (context.stop_requested) s.stop = true;
  return steps;
}

bool MonitoredSession::ShouldStop() const { return impl_->stop; }

Status MonitoredSession::Close() {
  Impl& s = *impl_;
  if (s.closed) return absl::OkStatus();
  s.closed = true;
  Status first;
  for (const auto& hook : s.hooks) {
    Status st = hook->End(*s.session);
    if (first.ok()) first = st;
  }
  return first;
}

Session& MonitoredSession::session() { return *impl_->session; }
int64_t MonitoredSession::global_step() const { return impl_->global_step; }
void MonitoredSession::set_key_stage(KeyStage* stage) { impl_->key_stage = stage; }

}  // namespace recsdk
