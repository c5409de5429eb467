// recsdk/distributed.h: data-parallel training on several processes (ranks), the spec's
// distributed API.
//
// A job is N copies of one program started by an MPI launcher (`mpirun -np N ./train`); a
// program started without one is a world of one rank, and every call below is then the N = 1
// case of the same code (the all-reduce is the identity, the broadcast a no-op), not a second
// path. Each rank trains on its own part of every global batch (Shard below) and keeps the
// dense variables equal to the other ranks' by averaging the gradients (DistributedOptimizer)
// after starting from the same values (broadcast_global_variables).
//
// The spec's names and ours:
//   get_rank_id(), get_rank_size(),          the same names (StatusOr: a launcher variable that
//   get_local_rank_id(), get_local_rank_size()  does not parse is an error, not rank 0)
//   npu_allreduce(tensors)                   allreduce() / AllReduceMean(): the mean, op type
//                                            "AllReduceMean"
//   npu_distributed_optimizer_wrapper(opt)   DistributedOptimizer
//   (npu_distributed_optimizer_wrapper
//                                            returns one)
//   hccl_ops.broadcast recipe                broadcast_global_variables(session, root_rank)
//   NPUBroadcastGlobalVariablesHook          BroadcastGlobalVariablesHook (recsdk/hooks.h)
//   dataset.shard(rank_size, rank_id)        Shard(dataset, size, rank) (recsdk/dataset.h):
//
//     StatusOr<int> size = get_rank_size(), rank = get_rank_id();
//     if (!size.ok() || !rank.ok()) return ...;
//     auto shard = Shard(std::move(dataset), *size, *rank);
//
// Multi-process runs need the MPI communicator: link recsdk::mpi
// (find_package(recsdk COMPONENTS mpi)) and call recsdk::dist::RegisterMpiCommunicator() at
// start; under mpirun with several ranks and without it, InitDistributed fails saying so rather
// than letting N processes each train alone.
//
// Sparse tables are sharded across the ranks (each key has one owner rank, ShardOwner): a
// lookup sends each key to its owner and gathers the rows back, and the gradients go back the
// same way; checkpoints hold one shard per rank and restore at any rank count
// (docs/distributed.md).
//
// Threading: the functions here may be called from any thread. Collectives of one process are
// serialised (one at a time, in the order their callers reach them), so every rank must reach
// them in the same order; the graph op does that for one Session (see AllReduceMean).
#ifndef RECSDK_DISTRIBUTED_H_
#define RECSDK_DISTRIBUTED_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "recsdk/metrics.h"
#include "recsdk/optimizers.h"
#include "recsdk/scope.h"
#include "recsdk/session.h"
#include "recsdk/status.h"

namespace recsdk {

// DistributedOptions: how this process joins the job.
struct DistributedOptions {
  // collective_timeout_s: the longest any one collective (an all-reduce of a step's gradients, a
  // broadcast of the variables) waits for the other ranks, in seconds; then it fails with
  // DeadlineExceeded naming the ranks that did not come. Finite and > 0. Default 300 (NCCL's and
  // HCCL's 10-30 minutes hide a stopped rank for too long; a step of a recommender model takes
  // well under a second, and the first collective also waits for the slowest rank's start-up).
  double collective_timeout_s = 300.0;

  // Validate: InvalidArgument naming the option, its value, the rule and the fix.
  Status Validate() const;
};

// InitDistributed: creates this process's communicator, once: the MPI one under an MPI launcher
// when the program registered it, else the local one (a world of one). Collective under MPI:
// every rank calls it, and it waits for them up to collective_timeout_s. A second call with the
// same options returns OK and changes nothing; with other options it is FailedPrecondition
// (call ShutdownDistributed first). Errors: InvalidArgument for bad options or launcher
// variables, FailedPrecondition for a multi-rank launch without MPI in the program.
// Optional for a single process: the all-reduce op initialises with default options on first
// use.
[[nodiscard]] Status InitDistributed(const DistributedOptions& options = {});

// ShutdownDistributed: drops this process's communicator (MPI itself is finalised at exit), so
// that InitDistributed may run again. Not while a collective is running (it waits for it).
void ShutdownDistributed();

// get_rank_id / get_rank_size / get_local_rank_id / get_local_rank_size (the spec's): this
// process's rank in the job, the number of ranks, its rank among the ranks on this host, and
// how many those are. From the communicator once InitDistributed ran, else from the launcher's
// environment (OMPI_COMM_WORLD_RANK, ...); 0 and 1 for a plain process. InvalidArgument naming
// the variable when a launcher variable does not parse or is out of range. Cheap (a read of a
// few environment variables at most); not safe beside a setenv in another thread.
[[nodiscard]] StatusOr<int> get_rank_id();
[[nodiscard]] StatusOr<int> get_rank_size();
[[nodiscard]] StatusOr<int> get_local_rank_id();
[[nodiscard]] StatusOr<int> get_local_rank_size();

// Separate parameter servers (the spec's PS-worker scripts). When TF_CONFIG lists "ps" tasks, the
// launcher's ranks are the cluster's tasks in TensorFlow's order: chief first (rank 0), then the
// workers, then the ps tasks (`mpirun -np 1 -x TF_CONFIG=<chief's> ./train : -np 1 -x
// TF_CONFIG=<worker's> ./train : -np 1 -x TF_CONFIG=<ps's> ./train`, docs/distributed.md).
// The ps ranks own the sharded tables' keys (owner = the ps ranks' ShardOwner); the workers own
// none, read the data and run the dense graph, whose collectives (AllReduceMean,
// broadcast_global_variables, the metrics) are the workers' alone. get_rank_size() is then the
// number of workers and get_rank_id() the rank (a worker's is < get_rank_size()), so that
// Shard(dataset, get_rank_size(), get_rank_id()) gives each worker its share of the data; a ps
// reads no data. Without ps tasks every rank is a worker and owns a share of every table.

// IsParameterServer: whether this process is a ps task (TF_CONFIG's task type "ps"); false for a
// plain process. InvalidArgument or FailedPrecondition when TF_CONFIG does not describe the
// launch (the error names what differs).
[[nodiscard]] StatusOr<bool> IsParameterServer();

// RunParameterServer: on a ps rank, serves the workers' table exchanges until the workers call
// EndParameterServers (OK), or until an exchange fails: a worker that does not come within
// collective_timeout_s (the ps waits that long for the next exchange; a longer pause of the
// workers, e.g. an evaluation without table lookups, needs a larger timeout), a lost rank, or a
// table error; then the error names the rank and the exchange, and the process should end with a
// non-zero status (mpirun then ends the job). Before it, the ps must make the same sharded tables
// as the workers: build the same model and Session, and call LookupTable(session, name) for each
// table (the tables are made on first use). Initialises the process (InitDistributed) if needed.
// FailedPrecondition on a worker.
[[nodiscard]] Status RunParameterServer();

// EndParameterServers: on the workers, once their training has ended (every worker calls it, at
// the same point of their programs): makes RunParameterServer return on the ps ranks. OK and
// nothing in a job without ps ranks; FailedPrecondition on a ps.
[[nodiscard]] Status EndParameterServers();

// AllReduceMean: one node (op type "AllReduceMean") whose outputs are the element-wise means
// over all ranks of its float32 inputs, each output shaped like its input; the identity on one
// rank. Its kernel packs the inputs into one buffer and makes one all-reduce through this
// process's communicator with the deadline collective_timeout_s, so a list of gradients costs
// one collective. A rank that does not take part makes the others' Session::Run fail with
// DeadlineExceeded naming the op and that rank; after such a failure the MPI communicator is
// unusable (every later collective fails): end the process.
// Order: each AllReduceMean node of a graph takes a control input from the previous one, so in
// one Session the collectives run in build order. Every rank must build the same graph and run
// the same fetches (a rank that skips the node leaves the others waiting until the deadline).
// Gradient: the mean over the ranks of the outputs' gradients (another AllReduceMean): the
// gradient, with respect to this rank's input, of the sum of every rank's loss; at N = 1 the
// identity. Stateful: never constant-folded or merged.
// An error (a non-float32 input, no inputs) is recorded in the graph and the returned outputs
// are invalid, like every builder of recsdk/ops.h.
std::vector<Output> AllReduceMean(const Scope& scope, const std::vector<Output>& tensors);

// allreduce: the spec's npu_allreduce on a list of gradients (mean): AllReduceMean.
inline std::vector<Output> allreduce(const Scope& scope, const std::vector<Output>& tensors) {
  return AllReduceMean(scope, tensors);
}

// DistributedOptimizerOptions: how DistributedOptimizer reduces the gradients.
struct DistributedOptimizerOptions {
  // is_tailing_optimization: the spec's NPUOptimizer constructor argument of that name (false by
  // default). It must equal SessionConfig::is_tailing_optimization of every Session that runs
  // the training graph (the spec pairs the two): Session::Create fails with InvalidArgument
  // naming both settings when they differ. With both true, hcom_parallel true and several ranks,
  // the last bucket of the reduction runs in the background while the updates of the earlier
  // buckets' variables run (the session pass "tailing_optimization", docs/distributed.md).
  bool is_tailing_optimization = false;
};

// DistributedOptimizer (the spec's npu_distributed_optimizer_wrapper): wraps a dense optimizer.
// ComputeGradients asks the inner optimizer for the gradients, then replaces every valid one by
// its mean over the ranks with one AllReduceMean node; ApplyGradients (and Minimize) apply them
// through the inner optimizer, so its slots and names are the inner optimizer's. With a mean
// loss over equal-size shards of a global batch, the averaged gradient is the full batch's, so
// N ranks train as one process on the global batches. At N = 1 training is bitwise the inner
// optimizer's (the mean of one value is that value).
// The reduction runs after the whole backward pass unless SessionConfig::hcom_parallel splits it
// into buckets reduced while backward runs (the session pass bucket_all_reduce); with
// is_tailing_optimization (here and in SessionConfig) the last bucket also overlaps the
// updates that do not need it.
// Sparse tables are untouched: their gradients (ComputeSparseGradients) are not reduced here;
// with several ranks the tables are sharded and their updates go to the owners.
// Threading: build-time, like Scope.
class DistributedOptimizer : public Optimizer {
 public:
  // DistributedOptimizer: wraps `inner`, whose updates run on the averaged gradients; its name() is
  // the inner optimizer's.
  explicit DistributedOptimizer(std::shared_ptr<Optimizer> inner,
                                DistributedOptimizerOptions options = {});
  std::string name() const override;
  // options: the options it was made with.
  const DistributedOptimizerOptions& options() const { return options_; }

  StatusOr<GradsAndVars> ComputeGradients(const Scope& scope, Output loss,
                                          const std::vector<Variable>& var_list = {}) override;
  StatusOr<Node*> ApplyGradients(const Scope& scope, const GradsAndVars& grads_and_vars,
                                 const Variable* global_step = nullptr) override;

 protected:
  StatusOr<Node*> ApplyDense(const Scope& scope, Output grad, const Variable& var) override;

 private:
  std::shared_ptr<Optimizer> inner_;
  DistributedOptimizerOptions options_;
};

// npu_distributed_optimizer_wrapper: the spec's name for DistributedOptimizer; `options` carries
// the spec's NPUOptimizer argument is_tailing_optimization.
inline std::shared_ptr<Optimizer> npu_distributed_optimizer_wrapper(
    std::shared_ptr<Optimizer> inner, DistributedOptimizerOptions options = {}) {
  return std::make_shared<DistributedOptimizer>(std::move(inner), options);
}

// AllRanksAgree: true when `value` is true on every rank (one AllReduce of one number); `value`
// itself at world size 1. A collective: every rank calls it at the same point, e.g. once per step
// with "I still have a batch", so that ranks whose inputs end at different steps stop together
// at the shortest instead of leaving the others waiting in the step's collectives (the Estimator
// does this). `label` names the call in errors. The communicator's errors otherwise.
StatusOr<bool> AllRanksAgree(bool value, std::string_view label);

// MergeMetricOverRanks: replaces `metric` on every rank by the metric of all the ranks' pairs:
// each rank's SaveState is gathered and merged in rank order, so a distributed evaluation reports
// the exact global AUC, loss or accuracy (what one process evaluating all the rows reports, up to
// the order of floating-point sums), not an average of per-rank values. A no-op at world size 1.
// A collective: every rank calls it for the same metrics in the same order (the Estimator's
// Evaluate does, for its loss and every eval metric). FailedPrecondition, before any exchange,
// for a metric that cannot merge; InvalidArgument when ranks hold metrics of different kinds;
// the communicator's errors (DeadlineExceeded naming the ranks) otherwise. On an error after
// the exchange the metric holds what it merged so far: do not report it.
Status MergeMetricOverRanks(StreamingMetric& metric);

// broadcast_global_variables (the spec's hccl_ops.broadcast recipe): copies the value of every
// global variable of `session`'s graph (GlobalVariables: weights, optimizer slots, the global
// step) from rank `root_rank` to every other rank, in one broadcast of all their bytes, so that
// ranks that initialised with different random values start equal. Collective: every rank calls
// it after its variables are initialised; cost O(total variable bytes) per rank. Errors:
// InvalidArgument for root_rank outside [0, size); FailedPrecondition naming a variable that is
// not initialised (the other ranks then fail with DeadlineExceeded naming this rank); a
// mismatch of the variables' total size across ranks fails every rank at once; DeadlineExceeded
// as for AllReduceMean. Not while a Run of the same session is in progress.
[[nodiscard]] Status broadcast_global_variables(Session& session, int root_rank = 0);

}  // namespace recsdk

#endif  // RECSDK_DISTRIBUTED_H_
