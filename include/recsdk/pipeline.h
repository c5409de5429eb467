// recsdk/pipeline.h: feeding a Session from a Dataset, with the key stage ahead of compute.
//
// A model reads its batch through DatasetColumn placeholders (one per Batch column it uses). A
// KeyStage (the spec's start_asc_pipeline) pulls Batches from a Dataset on background threads and
// turns each into the feeds of one step. For the lookups the graph modification moved out of the
// graph (ModifyGraph, the spec's modify_graph_and_start_emb_cache; sparse_lookup with
// modify_graph=true or FeatureSpecs), it also does their key work ahead of compute: dedup the
// ids of all the features of all the moved lookups of a table with the same is_train in one
// pass, count admissions (training lookups; rows whose mask is 0 are skipped), resolve keys to
// rows once (inserting admitted keys), and build each lookup's unique rows and restore indices;
// static shape pads a lookup's unique rows to its send_count. Resolution happens per table in batch
// order, so admission and training are exactly those of the in-graph lookups (a test checks both
// modes give identical losses and tables).
//
// The invariant that makes running ahead exact: the key stage only resolves keys to rows; row
// contents are read and written by the graph in step order, and eviction goes through
// KeyStage::AfterStep, which never frees a row that a prepared batch refers to.
//
// Threading: one training loop calls Next / AfterStep / Stop. The stage's worker threads are
// internal; Stop (or the destructor) joins them. The Session must outlive the KeyStage.
#ifndef RECSDK_PIPELINE_H_
#define RECSDK_PIPELINE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "recsdk/dataset.h"
#include "recsdk/graph.h"
#include "recsdk/scope.h"
#include "recsdk/session.h"
#include "recsdk/table.h"

namespace recsdk {

// DatasetColumn: a placeholder fed with the Batch column `column` by a KeyStage (and by
// BatchFeeds). Dimensions may be Shape::kUnknownDim.
Output DatasetColumn(const Scope& scope, std::string_view column, DType dtype, const Shape& shape);

// BatchFeeds: feeds for every DatasetColumn placeholder of `graph` whose column `batch` has.
FeedList BatchFeeds(const Graph& graph, const Batch& batch);

// ModifyGraphResult: what ModifyGraph did.
struct ModifyGraphResult {
  // moved_lookups: the SparseLookup ops whose key work now runs in the key stage.
  std::vector<std::string> moved_lookups;
};
// ModifyGraph: automatic graph modification. Finds the SparseLookup ops built with
// modify_graph=true (or from FeatureSpecs) and replaces their outputs (unique rows, restore
// indices) by placeholders the KeyStage feeds; everything downstream (gathers, gradients, the
// sparse optimizer) is rewired to them. Call it after building the model and the optimizers,
// before Session::Create. Idempotent. InvalidArgument when such a lookup's ids, mask or
// timestamps do not come straight from DatasetColumn placeholders.
StatusOr<ModifyGraphResult> ModifyGraph(Graph* graph);

// kKeyProcessThreadNumEnv: the environment variable (named as in the spec) that sets the
// default number of key stage threads.
inline constexpr char kKeyProcessThreadNumEnv[] = "KEY_PROCESS_THREAD_NUM";

// KeyStageChannel: which lookups a key stage serves (the spec's get_initializer(True) for
// training and get_initializer(False) for evaluation). A training stage does the key work of the
// moved lookups built with is_train = true (admission counts, inserts, timestamps); an evaluation
// stage that of the lookups built with is_train = false, which only read (unknown keys read the
// table's serving_default_value; nothing is inserted or counted). A stage never does the other
// channel's key work, so evaluating through the key stage cannot admit or refresh a key, and a
// step must fetch only outputs of its channel's lookups (the other channel's are not fed).
enum class KeyStageChannel { kTrain, kEval };

// KeyStageOptions.
struct KeyStageOptions {
  // channel: see KeyStageChannel. Default kTrain.
  KeyStageChannel channel = KeyStageChannel::kTrain;
  // key_process_thread_num: threads doing key work; >= 1. Batches are prepared in parallel; each
  // table is resolved in batch order. When unset (the default), KeyStage::Start reads the
  // environment variable KEY_PROCESS_THREAD_NUM, as the spec does: a decimal integer >= 1 (a
  // value that is not one is an InvalidArgument naming the variable); without it, 2 threads.
  // A value set here wins over the variable.
  std::optional<int> key_process_thread_num;
  // prefetch_batches: how many batches the stage may hold ahead of the training loop
  // (prepared or being prepared); >= 1. Default 2. Memory grows with it, never beyond it.
  int prefetch_batches = 2;
  // worker_nice: the scheduling niceness (Linux) the stage's threads run at, 0..19; default 10.
  // The stage runs ahead, so it can wait; the step cannot. When the compute keeps every core
  // busy, a niced stage takes its CPU time in the gaps instead of preempting a compute thread
  // (which stalls the whole parallel op). On a 2-core machine this took the live pipeline's
  // step-time cost from ~1.10 to ~1.05 of pre-materialised batches (benchmarks/
  // pipeline_e2e_bench.cc). 0 keeps the caller's priority. Ignored where threads have no nice
  // value (non-Linux).
  int worker_nice = 10;
  // start_batch: batches of the dataset to skip before the first one (Dataset::SkipBatches), so
  // a resumed run continues where its checkpoint was taken: pass
  // Saver::restored_dataset_batches(). >= 0. Default 0.
  int64_t start_batch = 0;
};

// KeyStage: the running pipeline of one Session and one Dataset. Closing or destroying the
// Session stops the stage first; Next and AfterStep then answer FailedPrecondition.
class KeyStage {
 public:
  // Start (the spec's start_asc_pipeline): creates the session's tables if needed and starts the
  // worker threads. InvalidArgument for bad options (or a bad KEY_PROCESS_THREAD_NUM); NotFound
  // for a table the graph lacks.
  static StatusOr<std::unique_ptr<KeyStage>> Start(Session& session,
                                                   std::unique_ptr<Dataset> dataset,
                                                   const KeyStageOptions& options = {});
  ~KeyStage();
  KeyStage(const KeyStage&) = delete;
  KeyStage& operator=(const KeyStage&) = delete;

  // Next: blocks until the next batch is prepared; sets *feeds (dataset columns and key-stage
  // outputs) and, when given, *batch; returns false at the end of the data. An error of the
  // dataset or of the key work (e.g. send_count exceeded, table full) is returned once, in batch
  // order. The previous batch counts as finished when Next is called again.
  StatusOr<bool> Next(FeedList* feeds, Batch* batch = nullptr);

  // AfterStep: runs `hook` (EvictHook::AfterStep) on the session's tables, protecting every row a
  // prepared batch refers to: keys last accessed at or after the oldest timestamp of a prepared
  // batch are kept until that batch has run. Call it after each Session::Run of a training step.
  // FailedPrecondition on an evaluation stage (eviction belongs to training).
  StatusOr<int64_t> AfterStep(EvictHook& hook, int64_t global_step);

  // WaitForWindow: blocks until the stage has prepared every batch its window allows
  // (prefetch_batches ahead of the training loop, or up to the end of the data); it then does no
  // key work until the next Next. With SessionConfig::deterministic the window moves only at Next,
  // so after it the tables hold exactly the keys of the batches before step +
  // prefetch_batches: call it between a step and anything that reads or changes tables
  // (set_threshold, eviction, checkpoints, evaluation) for bitwise-reproducible runs.
  // MonitoredSession (and so the Estimator) calls it before the AfterRun hooks when deterministic
  // is on. (Quiesce, below, is the checkpoint's pause: it stops reading ahead instead of filling
  // the window.)
  void WaitForWindow();

  // Stop: stops and joins the workers; later Next calls return false. Idempotent.
  void Stop();

  // Quiesce: the workers read no further batch, so the tables stop changing ahead of the step
  // (a training stage inserts keys and counts admissions for the batches it prepares). Once the
  // training loop has consumed every batch already read, Quiescent() turns true: the tables then
  // hold exactly the effects of the batches trained on, the one consistent moment a checkpoint
  // needs (Saver::Save checks it; CheckpointSaverHook waits for it). The next Next call that
  // needs an unread batch resumes reading. Never blocks; costs at most prefetch_batches steps
  // without prefetching. With at_batches_consumed >= 0, reading stops there instead (or at once
  // when the stage has read past it): a checkpoint planned for a known step (save_steps) then
  // costs no prefetching at all. Each call adds a stop beside those not yet reached, and reading
  // stops at the lowest, then, once the loop has passed it, at the next: several callers (two
  // CheckpointSaverHooks on one stage) each get their own consistent moment, and no call lifts
  // another's stop. A stop nobody saves at costs only its pause. Thread-safe.
  void Quiesce(int64_t at_batches_consumed = -1);
  // Quiescent: no batch is being read, prepared, or waiting for Next, because Quiesce was called
  // and batches_consumed() reached its lowest stop, or because the data ended and Next handed out
  // every batch (a run to the end of its input needs no Quiesce).
  bool Quiescent() const;
  // batches_consumed: start_batch plus the batches Next has handed out: the dataset position a
  // checkpoint records. Thread-safe.
  int64_t batches_consumed() const;

  // keys_processed: ids the stage has deduplicated and resolved so far.
  int64_t keys_processed() const;
  // channel: the channel the stage was started on (KeyStageOptions::channel).
  KeyStageChannel channel() const;
  // key_process_thread_num: the number of worker threads the stage runs (from the options, or
  // from KEY_PROCESS_THREAD_NUM, see KeyStageOptions).
  int key_process_thread_num() const;

 private:
  struct Impl;  // the implementation (pimpl), defined in src/
  explicit KeyStage(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// StartAscPipeline: the spec's name for KeyStage::Start.
inline StatusOr<std::unique_ptr<KeyStage>> StartAscPipeline(Session& session,
                                                            std::unique_ptr<Dataset> dataset,
                                                            const KeyStageOptions& options = {}) {
  return KeyStage::Start(session, std::move(dataset), options);
}

// modify_graph_and_start_emb_cache: the spec's entry point of automatic graph modification
// (mx_rec.graph.modifier), called where the spec calls it: after the model, its gradients and
// optimizers are built, before the Session is created. It runs ModifyGraph on `graph` and, with
// `dump_graph`, writes the modified graph (Graph::ToJson, loadable with Graph::FromJson) to
// `dump_path` for inspection. The "start emb cache" half has no separate step here: the key
// stage (the spec's embedding cache feeding) needs the Session, so it starts with
// get_initializer below (or StartAscPipeline). Errors: ModifyGraph's; InvalidArgument naming
// dump_path when the file cannot be written. Idempotent like ModifyGraph. With the Estimator
// there is nothing to call: it modifies each mode's graph and starts their key stages itself.
StatusOr<ModifyGraphResult> modify_graph_and_start_emb_cache(
    Graph* graph, bool dump_graph = false, const std::string& dump_path = "modified_graph.json");

// get_initializer: the spec's ConfigInitializer.get_instance().train_params_config
// .get_initializer(is_training), whose sess.run starts the dataset of the automatic graph
// modification mode. Here it starts the key stage of `session` over `dataset` on the channel
// is_training selects (KeyStageChannel::kTrain for true, kEval for false; options.channel is
// overridden) and returns it: drive the loop with KeyStage::Next as with StartAscPipeline.
// The guide runs get_initializer(true) instead of global_variables_initializer, so with
// is_training = true it first runs every variable initializer of the session's graph (the
// GlobalVariablesInitializer op's work): calling it again for a later training stage resets the
// dense variables, as a second global_variables_initializer would; start later stages with
// StartAscPipeline. Sparse tables are not reset. is_training = false initialises nothing.
// Errors: those of the initializers' Run and of KeyStage::Start. With the Estimator there is
// nothing to call: it initialises the variables and starts each mode's key stage itself.
StatusOr<std::unique_ptr<KeyStage>> get_initializer(Session& session,
                                                    std::unique_ptr<Dataset> dataset,
                                                    bool is_training, KeyStageOptions options = {});

}  // namespace recsdk

#endif  // RECSDK_PIPELINE_H_
