// recsdk/estimator.h: the Estimator (TensorFlow's tf.estimator.Estimator, the spec's
// NPUEstimator): a model_fn builds the model for a mode; Train, Evaluate, Predict,
// TrainAndEvaluate and ExportSavedModel run it with checkpoints, summaries and hooks.
//
// One graph, one Session, one set of variables and tables. On the first call the Estimator reads
// one batch of that call's input_fn to learn the columns, then calls model_fn once per mode
// (train, eval, predict) under a scope with variable reuse (Scope::WithVariableReuse), so the
// three branches share the dense tower (layers::Mlp of the same name) and the sparse tables
// (create_table of the same name): evaluation never builds a second, untrained copy of either.
// (Only the predict branch is built when that first input has no label columns; Train and
// Evaluate are then FailedPrecondition.) Then it runs ModifyGraph, so lookups built with
// modify_graph=true take their key work to the key stage: Train feeds steps from a training key
// stage (KeyStageChannel::kTrain), Evaluate and Predict from an evaluation stage (kEval), whose
// lookups only read. The model_fn must build eval and predict lookups with is_train = false
// (SparseLookupOptions); the Estimator checks it.
//
// Batches: feature columns have an unknown batch dimension, so batches of any size run. The last
// partial batch is the input_fn's decision (BatchOptions::drop_remainder, or pad_remainder with
// the "mask" column, whose padded rows Evaluate and Predict drop); a model that needs a fixed
// batch and fails on a short one gets an error saying to choose one of them.
//
// Hazard: while TrainAndEvaluate evaluates, the training key stage may already have resolved
// (and so admitted) the keys of its next prefetch_batches batches; an evaluation batch with such
// a key reads its freshly initialised row instead of serving_default_value.
//
// Threading: one thread uses an Estimator.
#ifndef RECSDK_ESTIMATOR_H_
#define RECSDK_ESTIMATOR_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "recsdk/dataset.h"
#include "recsdk/embedding.h"
#include "recsdk/graph.h"
#include "recsdk/hooks.h"
#include "recsdk/metrics.h"
#include "recsdk/pipeline.h"
#include "recsdk/run_config.h"
#include "recsdk/scope.h"
#include "recsdk/session.h"
#include "recsdk/status.h"
#include "recsdk/variables.h"

namespace recsdk {

// ModeKeys: TensorFlow's tf.estimator.ModeKeys.
enum class ModeKeys { kTrain, kEval, kPredict };
// ModeKeysName: "train", "eval" or "infer" (TensorFlow's strings).
std::string_view ModeKeysName(ModeKeys mode);

// Features / Labels: the model_fn's inputs, one DatasetColumn output per column of the input's
// batches ([?, ...], dtype and trailing dimensions of the first batch read).
using Features = std::map<std::string, Output>;
using Labels = std::map<std::string, Output>;
// Params: the model_fn's params (TensorFlow's params dict), as text.
using Params = std::map<std::string, std::string>;

// EvalMetric: one eval_metric_ops entry: a streaming metric (metrics.h) of `values` ([B] or
// [B,1] float32 predictions, or any tensor for kMean) against `labels` (0/1, same size; unused
// for kMean), accumulated over the evaluation's real rows. Name it per head ("auc_0", "auc_1").
struct EvalMetric {
  // name: the result's key. kind: the metric. Default kAuc. values, labels: as above.
  std::string name;
  MetricKind kind = MetricKind::kAuc;
  Output values;
  Output labels;
  int num_bins = 10000;  // kBinnedAuc
};

// EstimatorSpec: what model_fn returns for a mode.
struct EstimatorSpec {
  // loss: scalar float32; required in train and eval (Evaluate reports its mean as "loss").
  Output loss;
  // train_op: required in train (e.g. ops::Group of the dense Minimize and SparseMinimize).
  Node* train_op = nullptr;
  // predictions: required in predict: name -> [B, ...] tensor.
  std::map<std::string, Output> predictions;
  // eval_metric_ops: eval only.
  std::vector<EvalMetric> eval_metric_ops;
  // Hooks run in their mode, after the Estimator's own and before the caller's.
  HookList training_hooks, evaluation_hooks, prediction_hooks;
};

// ModelFn: the model_fn (TensorFlow's): builds the model for `mode` under `scope` from the input
// columns and returns its EstimatorSpec. Called once per mode, under variable reuse (see the file
// comment).
using ModelFn = std::function<StatusOr<EstimatorSpec>(const Scope& scope, const Features& features,
                                                      const Labels& labels, ModeKeys mode,
                                                      const Params& params)>;
// InputFn: a fresh dataset of Batches for one call (TensorFlow's input_fn).
using InputFn = std::function<StatusOr<std::unique_ptr<Dataset>>()>;

// EstimatorOptions.
struct EstimatorOptions {
  // label_columns: the batch columns passed as labels (the others are features). Default
  // {"label"}.
  std::vector<std::string> label_columns = {"label"};
  // key_stage: options of the key stages the Estimator starts (the channel is set per call).
  KeyStageOptions key_stage;
  // resume_input_position: training continues the input where it stopped, as TensorFlow's
  // CheckpointInputPipelineHook does. Each Train (and TrainAndEvaluate) skips the batches its
  // input_fn's dataset already gave: after a restore, the dataset position the checkpoint
  // recorded (Saver::restored_dataset_batches); after a Train in this process, where that call's
  // training stopped. The skip is KeyStageOptions::start_batch (Dataset::SkipBatches: O(1) for
  // the in-memory and synthetic datasets, else read and discarded). Only for an input_fn that
  // gives the same data in the same order each call; with new data it would silently skip its
  // first batches. Default false: each call starts its input at batch 0 (key_stage.start_batch).
  bool resume_input_position = false;
  // log: where the Estimator's own lines go (progress, evaluation results); default stdout.
  std::FILE* log = nullptr;
  // terminal: force the progress line mode (default: isatty of `log`).
  std::optional<bool> terminal;
};

// TrainSpec / EvalSpec: TrainAndEvaluate's arguments (TensorFlow's).
struct TrainSpec {
  // input_fn: the training data. max_steps: as Train's. hooks: added to Train's.
  InputFn input_fn;
  int64_t max_steps = -1;  // -1: until the input ends
  HookList hooks;
};
// EvalSpec: when and on what TrainAndEvaluate evaluates.
struct EvalSpec {
  // input_fn: the evaluation data. steps: as Evaluate's. name: as Evaluate's (the summaries go to
  // model_dir/eval_<name>). hooks: added to Evaluate's.
  InputFn input_fn;
  int64_t steps = -1;  // batches per evaluation; -1: the whole input
  std::string name;
  HookList hooks;
  // every_n_steps: evaluate after every that many training steps (> 0), else after each
  // checkpoint period (save_checkpoints_steps, or 100 steps when saving by seconds). An evaluation
  // is skipped (as TensorFlow throttles) when fewer than throttle_secs seconds passed since the
  // previous one; start_delay_secs delays the first. One final evaluation always runs.
  int64_t every_n_steps = 0;
  // throttle_secs, start_delay_secs: see every_n_steps. Default 0.
  double throttle_secs = 0;
  double start_delay_secs = 0;
};

// EvalResult: metric name -> value, plus "loss" (mean over batches) and "global_step".
using EvalResult = std::map<std::string, double>;

// PredictFn: receives each batch's predictions, trimmed to its real rows, with the batch.
using PredictFn =
    std::function<Status(const Batch& batch, const std::map<std::string, Tensor>& predictions)>;

// ServingInput: ExportSavedModel's serving_input_receiver_fn: the feature columns the exported
// model is fed with (names, dtypes, shapes with an unknown batch dimension).
struct ServingInputColumn {
  // name: a feature column of the model. dtype: its dtype. Default float32. shape: its shape, batch
  // dimension unknown.
  std::string name;
  DType dtype = DType::kFloat32;
  Shape shape;
};

// Estimator: trains, evaluates, predicts and exports a model_fn's model (see the file comment). Not
// copyable; one caller at a time.
// In a job with ps tasks (TF_CONFIG, recsdk/distributed.h) every rank makes the same calls. On a
// ps, Train, Evaluate, TrainAndEvaluate, Predict and ExportSavedModel build the model from the
// chief's input columns (a ps calls no input_fn) and serve the workers' table exchanges, saves,
// restores and export until the workers end that call, then return OK (Evaluate and
// TrainAndEvaluate an empty EvalResult, ExportSavedModel ""); a worker's call ends the ps's. The
// lookups stay in the graph there (no key stage exchanges), and the ps waits at most
// collective_timeout_s between two of the workers' exchanges (docs/distributed.md).
class Estimator {
 public:
  // Create: validates run_config (RunConfig::Validate). InvalidArgument for a null model_fn.
  static StatusOr<std::unique_ptr<Estimator>> Create(ModelFn model_fn, RunConfig run_config,
                                                     Params params = {},
                                                     EstimatorOptions options = {});
  ~Estimator();
  Estimator(const Estimator&) = delete;
  Estimator& operator=(const Estimator&) = delete;

  // Train: steps more steps (> 0), or until the global step reaches max_steps (> 0), or (both
  // -1) until the input ends; at most one of steps / max_steps. Without either, init()'s
  // train_steps (initialize.h) applies when set. Runs the Estimator's hooks (progress line every
  // log_step_count_steps, summaries every save_summary_steps, NaN guard, checkpoints per
  // RunConfig into model_dir), the model's training_hooks, then `hooks`; with the distributed
  // optimizer, BroadcastGlobalVariablesHook(0) on the first call unless a hook given is one
  // (the spec's automatic NPUBroadcastGlobalVariablesHook). The first call restores
  // the latest checkpoint of model_dir when there is one (and when init's if_load or no init was
  // given; see restore_model_version).
  Status Train(const InputFn& input_fn, int64_t steps = -1, int64_t max_steps = -1,
               HookList hooks = {});
  // Evaluate: `steps` batches (-1: the whole input, or init's eval_steps) through the eval
  // branch; returns the metrics. Writes them as summaries to model_dir/eval[_name].
  StatusOr<EvalResult> Evaluate(const InputFn& input_fn, int64_t steps = -1,
                                const std::string& name = "", HookList hooks = {});
  // Predict: every batch through the predict branch, handing `consumer` its predictions.
  Status Predict(const InputFn& input_fn, const PredictFn& consumer, HookList hooks = {});
  // TrainAndEvaluate: trains per train_spec, evaluating per eval_spec; returns the last
  // evaluation.
  StatusOr<EvalResult> TrainAndEvaluate(const TrainSpec& train_spec, const EvalSpec& eval_spec);
  // ExportSavedModel (the spec's export_saved_model): the inference bundle of the predict branch
  // (export.h: read-only lookups, no optimizer state) in export_dir_base/<unix seconds>, fed with
  // the `serving_input` feature columns and returning the model's predictions in name order, each
  // served under its predictions key (Predictor::PredictNamed, signature().output_names);
  // returns that directory (a Predictor loads it). FailedPrecondition before the model is built;
  // InvalidArgument for a column that is not a feature of the model or of another dtype.
  StatusOr<std::string> ExportSavedModel(const std::string& export_dir_base,
                                         const std::vector<ServingInputColumn>& serving_input);

  // get_dense_and_sparse_variable (the spec's): the trainable dense variables and the sparse
  // tables of the model, each in creation order. FailedPrecondition before the graph is built.
  StatusOr<std::pair<std::vector<Variable>, std::vector<SparseTable>>>
  get_dense_and_sparse_variable() const;

  // global_step: the current global step (0 before any training).
  StatusOr<int64_t> global_step();
  // session: the Session (after the first call), for tables and inspection; null before.
  Session* session();
  // graph: the model's graph (every mode's branch); empty before the first call builds it. config:
  // the RunConfig.
  const Graph& graph() const;
  const RunConfig& config() const;
  // latest_checkpoint: the last checkpoint directory Train wrote or restored ("" when none).
  const std::string& latest_checkpoint() const;

 private:
  struct Impl;  // the implementation (pimpl), defined in src/
  explicit Estimator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// get_dense_and_sparse_variable (the spec's, for Session-mode code): the graph's trainable dense
// variables and its sparse tables, each in creation order.
StatusOr<std::pair<std::vector<Variable>, std::vector<SparseTable>>> get_dense_and_sparse_variable(
    Graph* graph);

// NPUEstimator: the spec's name.
using NPUEstimator = Estimator;

}  // namespace recsdk

#endif  // RECSDK_ESTIMATOR_H_
