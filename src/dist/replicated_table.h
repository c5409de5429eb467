// replicated_table.h: a table held whole on every rank of a distributed job (TableConfig::is_dp,
// the spec's data-parallel table), for small tables whose rows every rank reads often: no rows
// travel, only the keys and the gradients.
//
// Every rank keeps the same replica, because every rank makes the same changes in the same order:
//   Resolve: the ranks all-gather their batches' unique keys (with counts and latest timestamps;
//     AllGather of the counts, then AllGatherV of the keys), and each resolves the union of all
//     ranks' keys once, in rank order (a key's counts add up, its timestamp is the latest), on
//     its replica: admission, new rows and eviction times are those of one process resolving the
//     global batch, and the replicas' row ids agree. The rows of this rank's keys are read from
//     its replica; Gather* move nothing.
//   ApplyGradients: the ranks all-gather their (row, summed gradient) pairs; each adds a row's
//     gradients from every rank in rank order, combines them as all2all_gradients_op says (as
//     ShardedTable does: GradientScale, sharded_table.h) and applies its optimizer once. Every rank
//     computes the same sums in the same order, so the replicas stay bitwise equal (an MPI
//     all-reduce does not promise every rank the same bits).
// So N ranks train a replicated table as one process trains it on the N batches together.
//
// Chosen per table with TableConfig::is_dp (default false: sharded). Cost per step, each rank:
// U unique keys x 24 bytes sent to each other rank, and U_grad x (4 + 4 dim) bytes of gradients;
// no row exchange. A sharded table sends the keys once, to their owners, and rows both ways;
// replication pays off when the table is small and its keys repeat across ranks.
//
// Outside a step a rank sees the whole table: size(), ReadRow of any key, ExportNpy, eviction
// (each replica evicts the same keys by the same timestamps), ImportNpy (every rank imports the
// same files). Checkpoints: the table is one every rank holds whole (not a CollectiveTable):
// written once, restored whole on every rank at any world size. Refused, with the reason: the
// by-address optimizers and use_dynamic_expansion (their updates bypass the exchange), and the
// key stage (its worker would issue this table's collectives beside the step's; KeyStage::Start
// refuses, see internal::ReplicatedCollectives).
//
// Errors: a rank whose arguments are wrong still takes part and tells the others (a flag beside
// its count), so every rank fails the same call and no replica changes. Every exchange has the
// process communicator's deadline (collective_timeout_s) and names the table.
//
// Threading: as EmbeddingTable; the Session's LockedTable serialises the calls, the process
// communicator the collectives (process_communicator.h).
#ifndef RECSDK_DIST_REPLICATED_TABLE_H_
#define RECSDK_DIST_REPLICATED_TABLE_H_

#include <memory>
#include <string>

#include "recsdk/table.h"
#include "src/table/collective_table.h"
#include "src/table/forwarding_table.h"

namespace recsdk::dist {

class ReplicatedTable final : public internal::ForwardingTable,
                              public internal::ReplicatedCollectives {
 public:
  // Create: the replica of rank `rank` of `size` ranks, `table` holding every key.
  // InvalidArgument for a rank outside [0, size); FailedPrecondition naming the table for
  // configs a replicated table cannot honour (see above).
  [[nodiscard]] static StatusOr<std::unique_ptr<EmbeddingTable>> Create(
      std::unique_ptr<EmbeddingTable> table, int rank, int size);

  int world_size() const { return world_; }

  Status Resolve(absl::Span<const int64_t> unique_keys, absl::Span<const uint32_t> counts,
                 absl::Span<const int64_t> timestamps, LookupMode mode,
                 absl::Span<uint32_t> rows) override;
  Status ApplyGradients(absl::Span<const uint32_t> rows, absl::Span<const float> summed_grads,
                        int64_t step) override;
  Status RowAddresses(absl::Span<const uint32_t> rows, absl::Span<float*> addresses) override;
  Status ApplyGradientsByAddress(absl::Span<float* const> addresses,
                                 absl::Span<const float> summed_grads, int64_t step) override;

 private:
  ReplicatedTable(std::unique_ptr<EmbeddingTable> table, int rank, int size);

  std::unique_ptr<EmbeddingTable> table_;
  const int rank_;
  const int world_;
  // Labels of the exchanges (CallTag keeps a view).
  const std::string counts_label_, keys_label_, grad_counts_label_, grad_rows_label_, grads_label_;
};

}  // namespace recsdk::dist

#endif  // RECSDK_DIST_REPLICATED_TABLE_H_
