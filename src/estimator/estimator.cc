// estimator.cc: Estimator (recsdk/estimator.h): builds the train, eval and predict branches of one
// graph with variable reuse, runs them from key stages of the matching channel through a
// MonitoredSession with the Estimator's hooks, and saves/restores checkpoints with the Saver.
//
// Threading: one caller thread; the key stages it starts have their own workers (stopped before
// each call returns).
#include "recsdk/estimator.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>

#include "fmt/format.h"
#include "recsdk/checkpoint.h"
#include "recsdk/distributed.h"
#include "recsdk/embedding.h"
#include "recsdk/export.h"
#include "recsdk/initialize.h"
#include "recsdk/pipeline.h"
#include "src/checkpoint/sharded_write.h"
#include "src/common/clock.h"
#include "src/common/env.h"
#include "src/common/status_macros.h"
#include "src/device/resource_mgr.h"
#include "src/dist/parameter_server.h"
#include "src/dist/process_communicator.h"
#include "src/graph/op_registry.h"
#include "src/session/session_resources.h"
#include "src/session/table_ops.h"

namespace recsdk {
namespace {

using internal::NowSeconds;

constexpr ModeKeys kModes[] = {ModeKeys::kTrain, ModeKeys::kEval, ModeKeys::kPredict};

// TrimRows: the first `rows` rows of a batch-major tensor (the real rows of a padded batch).
Tensor TrimRows(const Tensor& t, int64_t rows) {
  if (t.shape().rank() == 0 || t.shape().dim(0) <= rows) return t;
  StatusOr<Tensor> trimmed = t.SliceRows(0, std::max<int64_t>(rows, 0));
  return trimmed.ok() ? *std::move(trimmed) : t;
}

}  // namespace

std::string_view ModeKeysName(ModeKeys mode) {
  switch (mode) {
    case ModeKeys::kTrain:
      return "train";
    case ModeKeys::kEval:
      return "eval";
    case ModeKeys::kPredict:
      return "infer";
  }
  return "?";
}

struct Estimator::Impl {
  ModelFn model_fn;
  RunConfig config;
  Params params;
  EstimatorOptions options;
  Graph graph;
  bool built = false;
  bool has_labels = false;
  EstimatorSpec specs[3];
  int64_t schema_rows = 0;
  std::unique_ptr<Session> session;
  std::string latest_checkpoint;
  // input_position: batches of the training input consumed so far (the restored checkpoint's
  // dataset position, then where the last training stage stopped); used with
  // EstimatorOptions::resume_input_position.
  int64_t input_position = 0;
  // broadcast_added: TrainLoop added BroadcastGlobalVariablesHook (the first training call).
  bool broadcast_added = false;
  std::shared_ptr<SummaryWriter> train_writer;
  std::map<std::string, std::shared_ptr<SummaryWriter>> eval_writers;
  // ps_job: the job has ps ranks (TF_CONFIG's ps tasks, launch_env.h JobLayout); is_ps: this
  // process is one of them (it builds the model from the chief's columns and serves the
  // workers' table exchanges in each public call). Read on the first call (PsRole).
  bool role_known = false;
  bool ps_job = false;
  bool is_ps = false;
  // ps_saver: on a ps with a model_dir, the Saver through which the ps joins the workers'
  // saves and restores (the ps loop calls it); kept for the Estimator's life.
  std::unique_ptr<Saver> ps_saver;

  ~Impl() { dist::ClearPsExportHandler(this); }

  EstimatorSpec& spec(ModeKeys m) { return specs[static_cast<int>(m)]; }
  std::FILE* log() const { return options.log != nullptr ? options.log : stdout; }
  void Print(const std::string& line) const {
    std::fprintf(log(), "%s\n", line.c_str());
    std::fflush(log());
  }

  Status Build(const InputFn& input_fn);
  // PsRole: reads the job's roles once (ps_job, is_ps); initialises the process
  // (InitDistributed) when TF_CONFIG names ps tasks and the program has not.
  Status PsRole();
  // WithPs: runs `body` (a public call's work after its checks) as the job's role asks. In a
  // job without ps ranks: `body` alone. On a ps: Build from the chief's columns, then serve the
  // workers' table exchanges until they end this call. On a worker of a ps job: `body`, then
  // the end of the ps's call (EndParameterServers; after an error, the chief's
  // EndParameterServersAfterError, so the ps does not wait for its deadline).
  Status WithPs(const char* call, const InputFn& input_fn, const std::function<Status()>& body);
  Status CheckSpec(ModeKeys mode, const EstimatorSpec& s, int first_node);
  Status Restore();
  StatusOr<int64_t> GlobalStep();
  Status NeedLabels(const char* call) const;
  StatusOr<std::unique_ptr<KeyStage>> StartStage(const InputFn& input_fn, KeyStageChannel channel);
  Status TrainLoop(KeyStage* stage, int64_t last_step, const HookList& hooks);
  StatusOr<EvalResult> EvaluateLoop(const InputFn& input_fn, int64_t steps, const std::string& name,
                                    const HookList& hooks);
  Status ShortBatchHint(const Status& s, const Batch& batch) const;
};

Estimator::Estimator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Estimator::~Estimator() = default;

StatusOr<std::unique_ptr<Estimator>> Estimator::Create(ModelFn model_fn, RunConfig run_config,
                                                       Params params, EstimatorOptions options) {
  if (!model_fn) return absl::InvalidArgumentError("Estimator: model_fn is null");
  RECSDK_RETURN_IF_ERROR(run_config.Validate());
  // iterations_per_loop: one round of hooks per that many steps (MonitoredSession::RunLoop). A
  // period in steps that is not a multiple would fire at a later step than asked, so it is
  // refused instead (the periods in seconds are unaffected).
  if (const int64_t n = run_config.EffectiveSessionConfig().iterations_per_loop; n > 1) {
    const std::pair<const char*, int64_t> periods[] = {
        {"save_checkpoints_steps", run_config.save_checkpoints_steps},
        {"save_summary_steps", run_config.save_summary_steps},
        {"log_step_count_steps", run_config.log_step_count_steps}};
    for (const auto& [option, steps] : periods) {
      if (steps > 0 && steps % n != 0) {
        return absl::InvalidArgumentError(fmt::format(
            "Estimator: RunConfig::{} {} is not a multiple of iterations_per_loop {}; the hooks "
            "run once per loop of {} steps, so set {} to a multiple of {} (or iterations_per_loop "
            "to a divisor of {})",
            option, steps, n, n, option, n, steps));
      }
    }
  }
  auto impl = std::make_unique<Impl>();
  impl->model_fn = std::move(model_fn);
  impl->config = std::move(run_config);
  impl->params = std::move(params);
  impl->options = std::move(options);
  return std::unique_ptr<Estimator>(new Estimator(std::move(impl)));
}

Status Estimator::Impl::CheckSpec(ModeKeys mode, const EstimatorSpec& s, int first_node) {
  const std::string_view m = ModeKeysName(mode);
  if (mode != ModeKeys::kPredict && (!s.loss.valid() || s.loss.shape().num_elements() != 1)) {
    return absl::InvalidArgumentError(fmt::format(
        "Estimator: model_fn in mode {} returned no scalar loss; EstimatorSpec::loss is required "
        "for train and eval",
        m));
  }
  if (mode == ModeKeys::kTrain && s.train_op == nullptr) {
    return absl::InvalidArgumentError(
        "Estimator: model_fn in mode train returned no train_op; set EstimatorSpec::train_op "
        "(e.g. ops::Group of the dense Minimize and SparseMinimize)");
  }
  if (mode == ModeKeys::kPredict && s.predictions.empty()) {
    return absl::InvalidArgumentError(
        "Estimator: model_fn in mode infer returned no predictions; set "
        "EstimatorSpec::predictions");
  }
  // Eval and predict lookups must only read: the eval key stage channel serves is_train=false.
  if (mode != ModeKeys::kTrain) {
    const std::vector<Node*> nodes = graph.nodes();
    for (size_t i = static_cast<size_t>(first_node); i < nodes.size(); ++i) {
      const Node* n = nodes[i];
      if (n->type() == internal::kSparseLookupOp && internal::NodeAttrs(*n).Bool("is_train")) {
        return absl::InvalidArgumentError(fmt::format(
            "Estimator: model_fn in mode {} built sparse_lookup \"{}\" with is_train = true: "
            "evaluation and prediction lookups must only read; set SparseLookupOptions::is_train "
            "= (mode == ModeKeys::kTrain)",
            m, n->name()));
      }
    }
  }
  return absl::OkStatus();
}

namespace {

// EstimatorColumn: one column of the input's batches as the graph reads it (the batch dimension
// left unknown).
struct EstimatorColumn {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> inner_dims;
};

// PeekColumns: the columns of the input_fn's first batch, and its rows.
StatusOr<std::vector<EstimatorColumn>> PeekColumns(const InputFn& input_fn, int64_t* rows) {
  if (!input_fn) return absl::InvalidArgumentError("Estimator: input_fn is null");
  RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> peek, input_fn());
  if (peek == nullptr) return absl::InvalidArgumentError("Estimator: input_fn returned null");
  Batch first;
  RECSDK_ASSIGN_OR_RETURN(bool got, peek->GetNext(&first));
  if (!got) {
    return absl::InvalidArgumentError(
        "Estimator: the input_fn's dataset is empty; the Estimator reads its first batch to learn "
        "the feature and label columns");
  }
  *rows = first.num_rows();
  std::vector<EstimatorColumn> columns;
  for (const auto& [name, t] : first.columns()) {
    EstimatorColumn c{name, t.dtype(), {}};
    for (int d = 1; d < t.shape().rank(); ++d) c.inner_dims.push_back(t.shape().dim(d));
    columns.push_back(std::move(c));
  }
  return columns;
}

// The chief's columns as they travel to the ps ranks: a line per column, "name\tdtype\tdims".
std::string EncodeColumns(const std::vector<EstimatorColumn>& columns) {
  std::string text;
  for (const EstimatorColumn& c : columns) {
    text += fmt::format("{}\t{}\t{}\n", c.name, DTypeName(c.dtype), fmt::join(c.inner_dims, ","));
  }
  return text;
}

StatusOr<std::vector<EstimatorColumn>> DecodeColumns(std::string_view text) {
  std::vector<EstimatorColumn> columns;
  const auto malformed = [&] {
    return absl::InternalError(
        "Estimator: the chief's column layout arrived malformed; every rank must run the same "
        "recsdk");
  };
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    if (eol == std::string_view::npos) return malformed();
    const std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol + 1);
    const size_t t1 = line.find('\t');
    const size_t t2 = t1 == std::string_view::npos ? t1 : line.find('\t', t1 + 1);
    if (t2 == std::string_view::npos) return malformed();
    EstimatorColumn c;
    c.name = std::string(line.substr(0, t1));
    RECSDK_ASSIGN_OR_RETURN(c.dtype, ParseDType(line.substr(t1 + 1, t2 - t1 - 1)));
    std::string_view dims = line.substr(t2 + 1);
    while (!dims.empty()) {
      const size_t comma = dims.find(',');
      const std::string dim(dims.substr(0, comma));
      char* dim_end = nullptr;
      const long long v = std::strtoll(dim.c_str(), &dim_end, 10);
      if (dim.empty() || dim_end != dim.c_str() + dim.size()) return malformed();
      c.inner_dims.push_back(v);
      dims.remove_prefix(comma == std::string_view::npos ? dims.size() : comma + 1);
    }
    columns.push_back(std::move(c));
  }
  return columns;
}

// ShareChiefColumns: in a job with ps ranks, the chief's columns (or the error of reading them)
// to every rank, ps included: a ps reads no input (Shard refuses its rank), yet builds the same
// graph. A worker keeps its own columns (the program fingerprint compares the workers' graphs);
// a ps takes the chief's. The error travels too, so a ps does not wait for a layout that never
// comes. Two Broadcasts over every rank, each with the deadline collective_timeout_s.
StatusOr<std::vector<EstimatorColumn>> ShareChiefColumns(
    const StatusOr<std::vector<EstimatorColumn>>& mine, bool is_ps, int64_t* rows) {
  int rank = 0, size = 1;
  if (!dist::ProcessWorld(&rank, &size)) {
    return absl::InternalError("Estimator: a job with ps ranks but no process communicator");
  }
  std::string text;
  // header: [ok, bytes, rows]
  std::array<int64_t, 3> header{};
  if (rank == 0) {
    if (mine.ok()) {
      for (const EstimatorColumn& c : *mine) {
        if (c.name.find_first_of("\t\n") != std::string::npos) {
          return absl::InvalidArgumentError(fmt::format(
              "Estimator: column \"{}\" has a tab or a newline in its name; in a job with ps "
              "ranks the column names travel to the ps as lines: rename it",
              c.name));
        }
      }
      text = EncodeColumns(*mine);
    } else {
      text = std::string(mine.status().message().substr(0, 4000));
    }
    header = {mine.ok() ? 1 : 0, static_cast<int64_t>(text.size()), *rows};
  }
  const Status shared = dist::WithProcessCommunicator(
      [&](dist::Communicator& comm, const DistributedOptions& o) -> Status {
        RECSDK_RETURN_IF_ERROR(comm.Broadcast(absl::MakeSpan(header), 0,
                                              dist::DeadlineAfterSeconds(o.collective_timeout_s),
                                              {-1, "estimator columns"}));
        text.resize(static_cast<size_t>(header[1]));
        if (text.empty()) return absl::OkStatus();
        return comm.Broadcast(absl::MakeSpan(text.data(), text.size()), 0,
                              dist::DeadlineAfterSeconds(o.collective_timeout_s),
                              {-1, "estimator columns"});
      });
  if (!shared.ok()) {
    return Status(shared.code(),
                  fmt::format("Estimator: rank {}: sharing the chief's input columns with the ps "
                              "ranks: {}",
                              rank, shared.message()));
  }
  if (!is_ps) return mine;
  if (header[0] == 0) {
    return absl::AbortedError(fmt::format(
        "Estimator: ps rank {}: the chief could not read its input's first batch, so the ps has "
        "no model to serve: {}",
        rank, text));
  }
  *rows = header[2];
  return DecodeColumns(text);
}

}  // namespace

Status Estimator::Impl::PsRole() {
  if (role_known) return absl::OkStatus();
  dist::JobLayout layout;
  if (!dist::ProcessJob(&layout)) {
    // A ps job the program did not initialise: the Estimator does, as RunParameterServer would.
    // Without ps tasks nothing changes here (a launcher's errors surface where they did).
    const StatusOr<dist::JobLayout> described = dist::CurrentJobLayout();
    layout = dist::JobLayout{};
    if (described.ok() && described->ps > 0) {
      RECSDK_RETURN_IF_ERROR(InitDistributed());
      if (!dist::ProcessJob(&layout)) {
        return absl::InternalError("Estimator: InitDistributed left no job layout");
      }
    }
  }
  ps_job = layout.ps > 0;
  is_ps = layout.is_ps;
  role_known = true;
  return absl::OkStatus();
}

Status Estimator::Impl::Build(const InputFn& input_fn) {
  if (built) return absl::OkStatus();
  RECSDK_RETURN_IF_ERROR(PsRole());
  StatusOr<std::vector<EstimatorColumn>> columns =
      is_ps ? StatusOr<std::vector<EstimatorColumn>>(std::vector<EstimatorColumn>{})
            : PeekColumns(input_fn, &schema_rows);
  if (ps_job) columns = ShareChiefColumns(columns, is_ps, &schema_rows);
  RECSDK_RETURN_IF_ERROR(columns.status());
  if (config.seed.has_value()) graph.set_random_seed(*config.seed);
  Scope root(&graph);
  Features features;
  Labels labels;
  for (const EstimatorColumn& c : *columns) {
    std::vector<int64_t> dims = {Shape::kUnknownDim};
    dims.insert(dims.end(), c.inner_dims.begin(), c.inner_dims.end());
    const Output column = DatasetColumn(root.WithOpName(c.name), c.name, c.dtype, Shape(dims));
    const bool is_label = std::find(options.label_columns.begin(), options.label_columns.end(),
                                    c.name) != options.label_columns.end();
    (is_label ? labels : features)[c.name] = column;
  }
  has_labels = labels.size() == options.label_columns.size();
  GetOrCreateGlobalStep(root);
  const Scope reuse = root.WithVariableReuse(VariableReuse::kAutoReuse);
  for (ModeKeys mode : kModes) {
    if (mode != ModeKeys::kPredict && !has_labels) continue;
    const int first_node = graph.num_nodes();
    const Scope scope =
        mode == ModeKeys::kTrain ? reuse : reuse.NewNameScope(std::string(ModeKeysName(mode)));
    StatusOr<EstimatorSpec> s = model_fn(scope, features, labels, mode, params);
    if (!s.ok()) {
      return absl::Status(s.status().code(), fmt::format("Estimator: model_fn in mode {}: {}",
                                                         ModeKeysName(mode), s.status().message()));
    }
    RECSDK_RETURN_IF_ERROR(graph.status());
    RECSDK_RETURN_IF_ERROR(CheckSpec(mode, *s, first_node));
    spec(mode) = *std::move(s);
  }
  GlobalVariablesInitializer(root);
  RECSDK_RETURN_IF_ERROR(graph.status());
  // The lookups move to the key stage on every rank, a ps's too (its graph stays the workers',
  // though it runs no step). In a job with ps ranks the ps serves the workers' stages: their
  // channels, batch votes and leased resolves on a thread per stage, their pulls in its loop
  // (parameter_server.h). Each public call stops its stages before it ends the ps's part of the
  // call (WithPs), so the ps's loop returns once those stages have ended.
  RECSDK_RETURN_IF_ERROR(ModifyGraph(&graph).status());
  RECSDK_ASSIGN_OR_RETURN(session, Session::Create(graph, config.EffectiveSessionConfig()));
  RECSDK_RETURN_IF_ERROR(session->Run({}, {}, {"init"}).status());
  built = true;
  if (!is_ps) return Restore();
  // A ps: the sharded tables are made on first use, and a ps runs no step: make them now, so
  // that it holds its shards when the first exchange comes.
  for (const Node* n : graph.nodes()) {
    if (n->type() != internal::kTableHandleOp) continue;
    RECSDK_RETURN_IF_ERROR(LookupTable(*session, n->StringAttr("table_name")).status());
  }
  // The workers' ExportSavedModel: the ps writes its shard of the bundle's tables.
  dist::SetPsExportHandler(
      this, [this](std::string_view text) { return internal::ExportPsShard(*session, text); });
  if (config.model_dir.empty()) return absl::OkStatus();
  // The ps joins the workers' saves and restores through this Saver (the restore arrives
  // announced, with the directory the chief resolved); it restores nothing by itself.
  SaverOptions o;
  o.model_dir = config.model_dir;
  o.keep_checkpoint_max = config.keep_checkpoint_max;
  if (const ConfigInitializer* init = ConfigInitializer::Get(); init != nullptr) {
    o.is_incremental_checkpoint = init->options().is_incremental_checkpoint;
    o.restore_model_version = init->options().restore_model_version;
  }
  RECSDK_ASSIGN_OR_RETURN(ps_saver, Saver::Create(*session, o));
  return absl::OkStatus();
}

Status Estimator::Impl::WithPs(const char* call, const InputFn& input_fn,
                               const std::function<Status()>& body) {
  RECSDK_RETURN_IF_ERROR(PsRole());
  if (!ps_job) return body();
  int rank = 0, size = 1;
  dist::ProcessWorld(&rank, &size);
  if (is_ps) {
    if (Status b = Build(input_fn); !b.ok()) {
      return Status(b.code(), fmt::format("Estimator::{} on ps rank {}: building the model: {}",
                                          call, rank, b.message()));
    }
    // The workers' steps, evaluations and checkpoints, until they end this call.
    if (Status served = RunParameterServer(); !served.ok()) {
      return Status(served.code(),
                    fmt::format("Estimator::{} on ps rank {}: {}", call, rank, served.message()));
    }
    return absl::OkStatus();
  }
  const Status s = body();
  if (!s.ok()) {
    // Best effort: the workers end the ps with the chief's error (nothing after a failed
    // collective; an error of one worker alone leaves the others to their deadlines).
    dist::EndParameterServersAfterError(s).IgnoreError();
    return s;
  }
  if (Status ended = EndParameterServers(); !ended.ok()) {
    return Status(ended.code(), fmt::format("Estimator::{}: rank {}: ending the ps ranks' part "
                                            "of the call: {}",
                                            call, rank, ended.message()));
  }
  return absl::OkStatus();
}

Status Estimator::Impl::Restore() {
  const ConfigInitializer* init = ConfigInitializer::Get();
  if (config.model_dir.empty()) {
    if (init != nullptr && init->options().if_load) {
      return absl::FailedPreconditionError(
          "Estimator: init(if_load = true) but RunConfig::model_dir is empty; set the directory "
          "to restore from");
    }
    return absl::OkStatus();
  }
  SaverOptions o;
  o.model_dir = config.model_dir;
  o.keep_checkpoint_max = config.keep_checkpoint_max;
  if (init != nullptr) {
    o.is_incremental_checkpoint = init->options().is_incremental_checkpoint;
    o.restore_model_version = init->options().restore_model_version;
  }
  RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<Saver> saver, Saver::Create(*session, o));
  StatusOr<std::string> latest = saver->LatestCheckpoint();
  if (!latest.ok()) {
    if (latest.status().code() != absl::StatusCode::kNotFound) return latest.status();
    if (init != nullptr && init->options().if_load) {
      return absl::FailedPreconditionError(fmt::format(
          "Estimator: init(if_load = true) but model_dir \"{}\" has no checkpoint; train first "
          "or set if_load = false",
          config.model_dir));
    }
    return absl::OkStatus();  // a fresh model_dir: start from the initializers
  }
  if (init != nullptr && !init->options().if_load) return absl::OkStatus();
  RECSDK_ASSIGN_OR_RETURN(int64_t step, saver->Restore(""));
  input_position = std::max<int64_t>(0, saver->restored_dataset_batches());
  latest_checkpoint = *latest;
  Print(fmt::format("restored checkpoint of step {} from {}", step, config.model_dir));
  return absl::OkStatus();
}

StatusOr<int64_t> Estimator::Impl::GlobalStep() {
  // Straight from the variable: a Session::Run would advance the run count, the RNG state
  // checkpoints restore (Session::SetRunCount), so a resumed Train would draw other Dropout masks.
  RECSDK_ASSIGN_OR_RETURN(
      Tensor v, internal::SessionResources(*session)->ReadVariable(std::string(kGlobalStep)));
  if (v.dtype() == DType::kInt64 && v.num_elements() == 1) return v.data<int64_t>()[0];
  RECSDK_ASSIGN_OR_RETURN(std::vector<Tensor> out,
                          session->Run({}, {std::string(kGlobalStep) + "/read"}));
  return out[0].scalar<int64_t>();
}

Status Estimator::Impl::NeedLabels(const char* call) const {
  if (has_labels) return absl::OkStatus();
  return absl::FailedPreconditionError(fmt::format(
      "Estimator::{}: the graph was built from an input without the label columns [{}] (the "
      "first call's input), so it has no train or eval branch; make the first call with labelled "
      "input",
      call, fmt::join(options.label_columns, ", ")));
}

StatusOr<std::unique_ptr<KeyStage>> Estimator::Impl::StartStage(const InputFn& input_fn,
                                                                KeyStageChannel channel) {
  if (!input_fn) return absl::InvalidArgumentError("Estimator: input_fn is null");
  RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> data, input_fn());
  KeyStageOptions o = options.key_stage;
  o.channel = channel;
  if (channel == KeyStageChannel::kTrain && options.resume_input_position) {
    o.start_batch = input_position;
    if (input_position > 0) {
      Print(fmt::format("resuming the training input at batch {}", input_position));
    }
  }
  return KeyStage::Start(*session, std::move(data), o);
}

Status Estimator::Impl::ShortBatchHint(const Status& s, const Batch& batch) const {
  if (s.code() != absl::StatusCode::kInvalidArgument || batch.num_rows() == schema_rows) return s;
  return absl::Status(
      s.code(),
      fmt::format("{} [this batch has {} rows where the first had {}: the last partial batch is "
                  "the input_fn's choice: drop it (BatchOptions::drop_remainder) or pad it with "
                  "the mask (BatchOptions::pad_remainder)]",
                  s.message(), batch.num_rows(), schema_rows));
}

namespace {

// InputError: an error of the input (the input_fn's dataset, its reader or a Map) with where it
// happened, so "bad block" says which call, step and batch it stopped.
Status InputError(const Status& s, std::string_view call, int64_t global_step,
                  int64_t batches_read) {
  return absl::Status(
      s.code(), fmt::format("Estimator::{}: the input_fn's data failed at global step {}, reading "
                            "batch {} of this call's input (after {} batches): {}",
                            call, global_step, batches_read + 1, batches_read, s.message()));
}

}  // namespace

namespace {

// UsesAllReduce: whether the graph averages gradients over the ranks (DistributedOptimizer,
// allreduce: op type "AllReduceMean", recsdk/distributed.h).
bool UsesAllReduce(const Graph& graph) {
  for (const Node* n : graph.nodes()) {
    if (n->type() == "AllReduceMean") return true;
  }
  return false;
}

bool HasBroadcastHook(const HookList& hooks) {
  return std::any_of(hooks.begin(), hooks.end(), [](const std::shared_ptr<SessionRunHook>& h) {
    return dynamic_cast<const BroadcastGlobalVariablesHook*>(h.get()) != nullptr;
  });
}

}  // namespace

Status Estimator::Impl::TrainLoop(KeyStage* stage, int64_t last_step, const HookList& hooks) {
  const EstimatorSpec& train = spec(ModeKeys::kTrain);
  RECSDK_ASSIGN_OR_RETURN(const int64_t start, GlobalStep());
  const ConfigInitializer* init = ConfigInitializer::Get();
  HookList all;
  std::shared_ptr<CheckpointSaverHook> saver;
  all.push_back(std::make_shared<NanTensorHook>(train.loss));
  if (config.log_step_count_steps > 0) {
    ProgressHookOptions p;
    p.total_steps = last_step >= 0 ? last_step - start : 0;
    p.first_step = start;  // the line shows the run's global step (train_and_evaluate's chunks)
    p.loss = TensorName(train.loss);
    p.every_n_steps = config.log_step_count_steps;
    p.out = log();
    p.terminal = options.terminal;
    all.push_back(std::make_shared<ProgressHook>(p));
  }
  // With several ranks the chief (rank 0) writes the summaries; every rank saves checkpoints
  // (a collective: each writes its shard).
  const bool chief = get_rank_id().value_or(0) == 0;
  if (!config.model_dir.empty()) {
    if (config.save_summary_steps > 0 && chief) {
      if (train_writer == nullptr) {
        RECSDK_ASSIGN_OR_RETURN(train_writer, SummaryWriter::Create(config.model_dir));
      }
      all.push_back(std::make_shared<SummarySaverHook>(
          train_writer, config.save_summary_steps,
          std::vector<std::pair<std::string, TensorName>>{{"loss", train.loss}}));
      all.push_back(std::make_shared<StepCounterHook>(config.save_summary_steps, train_writer));
    }
    CheckpointSaverOptions c;
    c.model_dir = config.model_dir;
    c.save_steps = config.save_checkpoints_steps;
    c.save_secs = config.save_checkpoints_secs;
    if (init != nullptr && init->options().save_steps > 0 && c.save_steps <= 0) {
      c.save_steps = init->options().save_steps;
      c.save_secs = 0;
    }
    c.keep_checkpoint_max = config.keep_checkpoint_max;
    c.last_step = last_step;
    if (init != nullptr) {
      c.is_incremental_checkpoint = init->options().is_incremental_checkpoint;
      c.save_delta_checkpoints_secs =
          static_cast<double>(init->options().save_delta_checkpoints_secs);
    }
    c.log = true;
    c.sink = [this](const std::string& line) { Print(line); };
    saver = std::make_shared<CheckpointSaverHook>(c);
    all.push_back(saver);
  }
  all.insert(all.end(), train.training_hooks.begin(), train.training_hooks.end());
  all.insert(all.end(), hooks.begin(), hooks.end());
  // The spec: with the distributed optimizer the Estimator adds the broadcast hook itself, so
  // every rank starts from rank 0's values (initialised or restored). Once per Estimator, and
  // only when the user's hooks have none.
  if (!broadcast_added && UsesAllReduce(graph) && !HasBroadcastHook(all)) {
    all.push_back(std::make_shared<BroadcastGlobalVariablesHook>(0));
    broadcast_added = true;
  }
  if (last_step >= 0) all.push_back(std::make_shared<StopAtStepHook>(-1, last_step));

  RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<MonitoredSession> ms,
                          MonitoredSession::Wrap(*session, std::move(all)));
  ms->set_key_stage(stage);
  const int64_t per_loop = session->config().iterations_per_loop;
  Status status;
  Batch batch;
  int64_t batches = 0;
  bool input_ended = false;
  bool input_failed = false;  // the error came from the input, not from a step
  const int ranks = get_rank_size().value_or(1);
  // next: one step's feeds from the key stage; false when the input ended (on any rank).
  const MonitoredSession::StepSource next = [&](FeedList* feeds, int64_t* rows) -> StatusOr<bool> {
    input_failed = true;
    StatusOr<bool> got = stage->Next(feeds, &batch);
    if (!got.ok()) return InputError(got.status(), "Train", start + batches, batches);
    ++batches;
    // With several ranks, a rank whose input ended would leave the others waiting in the step's
    // collectives: the ranks agree each step that every one has a batch, and the epoch ends at
    // the shortest input (the rows the others still hold are not trained on).
    if (ranks > 1) {
      RECSDK_ASSIGN_OR_RETURN(const bool all_have,
                              AllRanksAgree(*got, "every rank has a training batch"));
      if (*got && !all_have) {
        Print(
            fmt::format("training input of another rank ended at global step {}; this rank "
                        "stops there too (the epoch ends at the shortest input)",
                        start + batches - 1));
      }
      if (!all_have) got = false;
    }
    input_failed = false;
    input_ended = !*got;
    *rows = batch.num_valid();
    return *got;
  };
  while (status.ok() && !ms->ShouldStop() && !input_ended) {
    // The last loop stops at last_step exactly, so the hooks see the step they asked for.
    int64_t steps = per_loop;
    if (last_step >= 0 && ms->global_step() >= 0) {
      steps = std::clamp<int64_t>(last_step - ms->global_step(), 1, per_loop);
    }
    StatusOr<int64_t> ran = ms->RunLoop(steps, next, {}, {train.train_op}, nullptr);
    if (!ran.ok()) status = input_failed ? ran.status() : ShortBatchHint(ran.status(), batch);
  }
  if (status.ok()) status = ms->Close();  // End: the final checkpoint
  if (saver != nullptr && !saver->saved().empty()) latest_checkpoint = saver->saved().back();
  return status;
}

StatusOr<EvalResult> Estimator::Impl::EvaluateLoop(const InputFn& input_fn, int64_t steps,
                                                   const std::string& name, const HookList& hooks) {
  const EstimatorSpec& eval = spec(ModeKeys::kEval);
  std::vector<std::unique_ptr<StreamingMetric>> metrics;
  std::vector<TensorName> fetches = {eval.loss};
  for (const EvalMetric& m : eval.eval_metric_ops) {
    if (!m.values.valid() || (m.kind != MetricKind::kMean && !m.labels.valid())) {
      return absl::InvalidArgumentError(
          fmt::format("Estimator: eval metric \"{}\" needs values{}", m.name,
                      m.kind == MetricKind::kMean ? "" : " and labels"));
    }
    RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<StreamingMetric> metric,
                            MakeStreamingMetric(m.kind, m.num_bins));
    metrics.push_back(std::move(metric));
    fetches.push_back(m.values);
    fetches.push_back(m.kind == MetricKind::kMean ? TensorName(m.values) : TensorName(m.labels));
  }
  RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<KeyStage> stage,
                          StartStage(input_fn, KeyStageChannel::kEval));
  HookList all = eval.evaluation_hooks;
  all.insert(all.end(), hooks.begin(), hooks.end());
  RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<MonitoredSession> ms,
                          MonitoredSession::Wrap(*session, std::move(all)));
  // The loss is the mean of the batches' losses, kept as a metric so that ranks can merge it.
  RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<StreamingMetric> loss_mean,
                          MakeStreamingMetric(MetricKind::kMean));
  int64_t batches = 0;
  FeedList feeds;
  Batch batch;
  std::vector<Tensor> out;
  RECSDK_ASSIGN_OR_RETURN(const int64_t eval_step, GlobalStep());
  // In a job with ps ranks the workers also agree each batch that every one has one, so the
  // evaluation ends at the shortest input even where no lookup moved to the key stage (whose
  // vote on the batches ends it there otherwise).
  const bool agree_batches = ps_job && get_rank_size().value_or(1) > 1;
  while ((steps < 0 || batches < steps) && !ms->ShouldStop()) {
    StatusOr<bool> got = stage->Next(&feeds, &batch);
    if (!got.ok()) return InputError(got.status(), "Evaluate", eval_step, batches);
    if (agree_batches) {
      RECSDK_ASSIGN_OR_RETURN(const bool all_have,
                              AllRanksAgree(*got, "every rank has an evaluation batch"));
      if (!all_have) break;
    }
    if (!*got) break;
    Status s = ms->Run(feeds, fetches, {}, &out, batch.num_valid());
    if (!s.ok()) return ShortBatchHint(s, batch);
    const float batch_loss = out[0].scalar<float>();
    RECSDK_RETURN_IF_ERROR(loss_mean->Update(absl::MakeConstSpan(&batch_loss, 1), {}));
    ++batches;
    const int64_t rows = batch.num_valid();
    for (size_t i = 0; i < metrics.size(); ++i) {
      const Tensor values = TrimRows(out[1 + 2 * i], rows);
      const Tensor labels = TrimRows(out[2 + 2 * i], rows);
      if (values.dtype() != DType::kFloat32 || labels.dtype() != DType::kFloat32) {
        return absl::InvalidArgumentError(fmt::format(
            "Estimator: eval metric \"{}\": values and labels must be float32, got {} and {}",
            eval.eval_metric_ops[i].name, DTypeName(values.dtype()), DTypeName(labels.dtype())));
      }
      const bool mean = eval.eval_metric_ops[i].kind == MetricKind::kMean;
      Status u = metrics[i]->Update(values.flat<float>(),
                                    mean ? absl::Span<const float>() : labels.flat<float>());
      if (!u.ok()) {
        return absl::Status(u.code(), fmt::format("Estimator: eval metric \"{}\": {}",
                                                  eval.eval_metric_ops[i].name, u.message()));
      }
    }
  }
  stage->Stop();
  RECSDK_RETURN_IF_ERROR(ms->Close());
  // With several ranks, each evaluated its shard: the reported metrics are those of all the
  // rows (exact global AUC and loss), merged before any rank decides anything on its own.
  if (StatusOr<int> ranks = get_rank_size(); ranks.ok() && *ranks > 1) {
    RECSDK_RETURN_IF_ERROR(MergeMetricOverRanks(*loss_mean));
    for (size_t i = 0; i < metrics.size(); ++i) {
      if (Status m = MergeMetricOverRanks(*metrics[i]); !m.ok()) {
        return Status(m.code(), fmt::format("Estimator: eval metric \"{}\": {}",
                                            eval.eval_metric_ops[i].name, m.message()));
      }
    }
  }
  if (loss_mean->count() == 0) {
    return absl::InvalidArgumentError(
        "Estimator::Evaluate: the input_fn yielded no batch; nothing was evaluated");
  }
  EvalResult result;
  RECSDK_ASSIGN_OR_RETURN(const int64_t step, GlobalStep());
  result["global_step"] = static_cast<double>(step);
  RECSDK_ASSIGN_OR_RETURN(result["loss"], loss_mean->Result());
  for (size_t i = 0; i < metrics.size(); ++i) {
    RECSDK_ASSIGN_OR_RETURN(result[eval.eval_metric_ops[i].name], metrics[i]->Result());
  }
  std::string line = fmt::format("eval{} at step {}:", name.empty() ? "" : " " + name, step);
  for (const auto& [k, v] : result) {
    if (k != "global_step") line += fmt::format(" {} = {:.4f}", k, v);
  }
  Print(line);
  if (!config.model_dir.empty() && get_rank_id().value_or(0) == 0) {
    const std::string dir = config.model_dir + (name.empty() ? "/eval" : "/eval_" + name);
    std::shared_ptr<SummaryWriter>& writer = eval_writers[dir];
    if (writer == nullptr) {
      RECSDK_ASSIGN_OR_RETURN(writer, SummaryWriter::Create(dir));
    }
    for (const auto& [k, v] : result) {
      if (k != "global_step") RECSDK_RETURN_IF_ERROR(writer->AddScalar(k, v, step));
    }
    RECSDK_RETURN_IF_ERROR(writer->Flush());
  }
  return result;
}

// --- the public calls

Status Estimator::Train(const InputFn& input_fn, int64_t steps, int64_t max_steps, HookList hooks) {
  Impl& s = *impl_;
  if (steps == 0 || steps < -1 || max_steps == 0 || max_steps < -1 ||
      (steps > 0 && max_steps > 0)) {
    return absl::InvalidArgumentError(fmt::format(
        "Estimator::Train: steps {} and max_steps {}: give at most one of them, > 0 (or -1 for "
        "until the input ends)",
        steps, max_steps));
  }
  if (const ConfigInitializer* init = ConfigInitializer::Get(); init != nullptr) {
    if (steps < 0 && max_steps < 0 && init->options().train_steps >= 0) {
      steps = init->options().train_steps;
    }
    if (max_steps < 0 && init->options().max_steps >= 0) max_steps = init->options().max_steps;
    if (steps == 0) return absl::OkStatus();  // init(train_steps = 0): evaluation-only job
  }
  return s.WithPs("Train", input_fn, [&]() -> Status {
    RECSDK_RETURN_IF_ERROR(s.Build(input_fn));
    RECSDK_RETURN_IF_ERROR(s.NeedLabels("Train"));
    RECSDK_ASSIGN_OR_RETURN(const int64_t start, s.GlobalStep());
    int64_t last = steps > 0 ? start + steps : -1;
    if (max_steps > 0) last = last < 0 ? max_steps : std::min(last, max_steps);
    if (last >= 0 && start >= last) {
      s.Print(
          fmt::format("global step {} already reached max_steps {}; not training", start, last));
      return absl::OkStatus();
    }
    RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<KeyStage> stage,
                            s.StartStage(input_fn, KeyStageChannel::kTrain));
    Status status = s.TrainLoop(stage.get(), last, hooks);
    stage->Stop();
    s.input_position = stage->batches_consumed();
    return status;
  });
}

StatusOr<EvalResult> Estimator::Evaluate(const InputFn& input_fn, int64_t steps,
                                         const std::string& name, HookList hooks) {
  Impl& s = *impl_;
  if (steps == 0 || steps < -1) {
    return absl::InvalidArgumentError(fmt::format(
        "Estimator::Evaluate: steps {}: use a batch count > 0, or -1 for the whole input", steps));
  }
  if (const ConfigInitializer* init = ConfigInitializer::Get();
      init != nullptr && steps < 0 && init->options().eval_steps > 0) {
    steps = init->options().eval_steps;
  }
  EvalResult result;
  RECSDK_RETURN_IF_ERROR(s.WithPs("Evaluate", input_fn, [&]() -> Status {
    RECSDK_RETURN_IF_ERROR(s.Build(input_fn));
    RECSDK_RETURN_IF_ERROR(s.NeedLabels("Evaluate"));
    RECSDK_ASSIGN_OR_RETURN(result, s.EvaluateLoop(input_fn, steps, name, hooks));
    return absl::OkStatus();
  }));
  return result;
}

Status Estimator::Predict(const InputFn& input_fn, const PredictFn& consumer, HookList hooks) {
  Impl& s = *impl_;
  if (!consumer) return absl::InvalidArgumentError("Estimator::Predict: the consumer is null");
  return s.WithPs("Predict", input_fn, [&]() -> Status {
    RECSDK_RETURN_IF_ERROR(s.Build(input_fn));
    const EstimatorSpec& predict = s.spec(ModeKeys::kPredict);
    std::vector<TensorName> fetches;
    std::vector<std::string> names;
    for (const auto& [name, t] : predict.predictions) {
      names.push_back(name);
      fetches.push_back(t);
    }
    RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<KeyStage> stage,
                            s.StartStage(input_fn, KeyStageChannel::kEval));
    HookList all = predict.prediction_hooks;
    all.insert(all.end(), hooks.begin(), hooks.end());
    RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<MonitoredSession> ms,
                            MonitoredSession::Wrap(*s.session, std::move(all)));
    FeedList feeds;
    Batch batch;
    std::vector<Tensor> out;
    RECSDK_ASSIGN_OR_RETURN(const int64_t predict_step, s.GlobalStep());
    int64_t batches = 0;
    const bool agree_batches = s.ps_job && get_rank_size().value_or(1) > 1;
    while (!ms->ShouldStop()) {
      StatusOr<bool> got = stage->Next(&feeds, &batch);
      if (!got.ok()) return InputError(got.status(), "Predict", predict_step, batches);
      if (agree_batches) {  // as EvaluateLoop's
        RECSDK_ASSIGN_OR_RETURN(const bool all_have,
                                AllRanksAgree(*got, "every rank has a prediction batch"));
        if (!all_have) break;
      }
      if (!*got) break;
      ++batches;
      Status st = ms->Run(feeds, fetches, {}, &out, batch.num_valid());
      if (!st.ok()) return s.ShortBatchHint(st, batch);
      std::map<std::string, Tensor> predictions;
      for (size_t i = 0; i < names.size(); ++i) {
        predictions[names[i]] = TrimRows(out[i], batch.num_valid());
      }
      RECSDK_RETURN_IF_ERROR(consumer(batch, predictions));
    }
    stage->Stop();
    return ms->Close();
  });
}

StatusOr<EvalResult> Estimator::TrainAndEvaluate(const TrainSpec& train_spec,
                                                 const EvalSpec& eval_spec) {
  Impl& s = *impl_;
  if (train_spec.max_steps == 0 || train_spec.max_steps < -1 || eval_spec.every_n_steps < 0 ||
      !(eval_spec.throttle_secs >= 0) || !(eval_spec.start_delay_secs >= 0) ||
      !std::isfinite(eval_spec.throttle_secs) || !std::isfinite(eval_spec.start_delay_secs)) {
    return absl::InvalidArgumentError(fmt::format(
        "Estimator::TrainAndEvaluate: max_steps {} (> 0 or -1), every_n_steps {}, throttle_secs "
        "{}, start_delay_secs {} (each finite and >= 0)",
        train_spec.max_steps, eval_spec.every_n_steps, eval_spec.throttle_secs,
        eval_spec.start_delay_secs));
  }
  EvalResult result;
  RECSDK_RETURN_IF_ERROR(s.WithPs("TrainAndEvaluate", train_spec.input_fn, [&]() -> Status {
    RECSDK_RETURN_IF_ERROR(s.Build(train_spec.input_fn));
    RECSDK_RETURN_IF_ERROR(s.NeedLabels("TrainAndEvaluate"));
    const int64_t period = eval_spec.every_n_steps > 0           ? eval_spec.every_n_steps
                           : s.config.save_checkpoints_steps > 0 ? s.config.save_checkpoints_steps
                                                                 : 100;
    RECSDK_ASSIGN_OR_RETURN(std::unique_ptr<KeyStage> stage,
                            s.StartStage(train_spec.input_fn, KeyStageChannel::kTrain));
    const double started = NowSeconds();
    double last_eval = -1;
    bool evaluated_last = false;
    for (;;) {
      RECSDK_ASSIGN_OR_RETURN(const int64_t step, s.GlobalStep());
      if (train_spec.max_steps > 0 && step >= train_spec.max_steps) break;
      int64_t last = step + period;
      if (train_spec.max_steps > 0) last = std::min(last, train_spec.max_steps);
      RECSDK_RETURN_IF_ERROR(s.TrainLoop(stage.get(), last, train_spec.hooks));
      RECSDK_ASSIGN_OR_RETURN(const int64_t now_step, s.GlobalStep());
      const bool ended = now_step < last;  // the input ran out
      const double now = NowSeconds();
      evaluated_last = false;
      bool evaluate = now - started >= eval_spec.start_delay_secs &&
                      (last_eval < 0 || now - last_eval >= eval_spec.throttle_secs);
      // The ranks' clocks differ: with several workers they evaluate only when every one would
      // (an evaluation's table exchanges and metric merges are collectives of them all).
      if (get_rank_size().value_or(1) > 1 &&
          (eval_spec.start_delay_secs > 0 || eval_spec.throttle_secs > 0)) {
        RECSDK_ASSIGN_OR_RETURN(evaluate, AllRanksAgree(evaluate, "every rank evaluates now"));
      }
      if (evaluate) {
        RECSDK_ASSIGN_OR_RETURN(result, s.EvaluateLoop(eval_spec.input_fn, eval_spec.steps,
                                                       eval_spec.name, eval_spec.hooks));
        last_eval = NowSeconds();
        evaluated_last = true;
      }
      if (ended) break;
    }
    stage->Stop();
    s.input_position = stage->batches_consumed();
    if (!evaluated_last) {
      RECSDK_ASSIGN_OR_RETURN(result, s.EvaluateLoop(eval_spec.input_fn, eval_spec.steps,
                                                     eval_spec.name, eval_spec.hooks));
    }
    return absl::OkStatus();
  }));
  return result;
}

StatusOr<std::string> Estimator::ExportSavedModel(
    const std::string& export_dir_base, const std::vector<ServingInputColumn>& serving_input) {
  Impl& s = *impl_;
  if (!s.built) {
    return absl::FailedPreconditionError(
        "Estimator::ExportSavedModel: the model is built on the first Train, Evaluate or Predict "
        "call; export after training");
  }
  // On a ps: its part of the bundle (its shard of the tables), written while it serves the
  // workers' export (kExport), until they end the call; it returns "".
  std::string exported;
  RECSDK_RETURN_IF_ERROR(s.WithPs("ExportSavedModel", nullptr, [&]() -> Status {
    if (serving_input.empty()) {
      return absl::InvalidArgumentError(
          "Estimator::ExportSavedModel: serving_input is empty; list the feature columns the "
          "served model is fed with");
    }
    ServingSignature signature;
    for (const ServingInputColumn& c : serving_input) {
      const Node* n = s.graph.FindNode(c.name);
      if (n == nullptr || n->type() != "Placeholder") {
        return absl::InvalidArgumentError(fmt::format(
            "Estimator::ExportSavedModel: serving input \"{}\" is not a feature column of the "
            "model (the columns of its input_fn's batches)",
            c.name));
      }
      if (n->output(0).dtype() != c.dtype) {
        return absl::InvalidArgumentError(fmt::format(
            "Estimator::ExportSavedModel: serving input \"{}\" is {} but the model reads {}",
            c.name, DTypeName(c.dtype), DTypeName(n->output(0).dtype())));
      }
      signature.inputs.push_back(c.name);
    }
    for (const auto& [name, t] : s.spec(ModeKeys::kPredict).predictions) {
      signature.outputs.push_back(t.name());
      signature.output_names.push_back(name);  // served as the model_fn named it ("prob")
    }
    const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    internal::Env* env = internal::Env::Default();
    if (Status st = env->CreateDir(export_dir_base); !st.ok()) {
      return Status(st.code(), fmt::format("Estimator::ExportSavedModel: {}", st.message()));
    }
    // Versions are timestamps in seconds, as TensorFlow's; two exports within one second (a short
    // run that exports after train and again after load_and_train) take the next free number, so
    // the newest export is still the highest version a model server picks.
    int64_t version = now;
    while (version < now + 1000 &&
           env->FileExists(fmt::format("{}/{}", export_dir_base, version))) {
      ++version;
    }
    // With several ranks the bundle is written by all of them: rank 0's version (its clock, its
    // view of the directory) is every rank's. Each rank reading its own clock named two bundles
    // when the ranks crossed a second apart, and rank 0 could not commit.
    const Status agreed = dist::WithWorkerCommunicator(
        [&](dist::Communicator& comm, const DistributedOptions& o) -> Status {
          if (comm.size() == 1) return absl::OkStatus();
          return comm.Broadcast(absl::MakeSpan(&version, 1), 0,
                                dist::DeadlineAfterSeconds(o.collective_timeout_s),
                                {-1, "export version"});
        });
    if (!agreed.ok()) {
      return Status(agreed.code(),
                    fmt::format("Estimator::ExportSavedModel: agreeing on the export's version "
                                "with the other ranks: {}",
                                agreed.message()));
    }
    const std::string dir = fmt::format("{}/{}", export_dir_base, version);
    RECSDK_RETURN_IF_ERROR(recsdk::ExportSavedModel(*s.session, dir, signature));
    s.Print(fmt::format("exported the model to {}", dir));
    exported = dir;
    return absl::OkStatus();
  }));
  return exported;
}

StatusOr<std::pair<std::vector<Variable>, std::vector<SparseTable>>>
Estimator::get_dense_and_sparse_variable() const {
  if (!impl_->built) {
    return absl::FailedPreconditionError(
        "get_dense_and_sparse_variable: the model is built on the first Train, Evaluate or "
        "Predict call; call it after one");
  }
  return recsdk::get_dense_and_sparse_variable(&impl_->graph);
}

StatusOr<int64_t> Estimator::global_step() {
  if (!impl_->built) return 0;
  return impl_->GlobalStep();
}
Session* Estimator::session() { return impl_->session.get(); }
const Graph& Estimator::graph() const { return impl_->graph; }
const RunConfig& Estimator::config() const { return impl_->config; }
const std::string& Estimator::latest_checkpoint() const { return impl_->latest_checkpoint; }

}  // namespace recsdk
