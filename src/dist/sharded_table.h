// sharded_table.h: a table whose keys are spread over the ranks of a distributed job.
//
// Each key has one owner, owner(key) = Mix64(key) mod size (internal::ShardOwner: a mixing hash,
// since real ids are skewed and neither key mod N nor a mask of the low bits spreads them evenly).
// In a job with ps ranks (TF_CONFIG's ps tasks, parameter_server.h) the owners are the ps ranks
// alone, owner(key) = ps_ranks[Mix64(key) mod P] (KeyOwner); the workers own no key, and each
// exchange is announced to the ps ranks before it is made.
// Each rank holds the rows of the keys it owns in its shard, an ordinary table of the same configs.
// A ShardedTable is what the rank's Session uses in place of the table: the graph, the kernels and
// the sparse optimizer see an EmbeddingTable, and the exchange with the owners happens inside two
// of its calls, each a collective every rank makes in the same order (the graph's order of its
// table ops):
//   Resolve: every rank sends its batch's unique keys (with their counts and latest timestamps)
//     to their owners in one AllToAllV. Each owner resolves the union of what it received once,
//     in rank order: a key's counts add up and its timestamp is the latest, exactly as one process
//     resolving the whole global batch would see them, so admission, new rows and eviction times
//     are those of a single-process run. The owners send back each key's embedding (or that it
//     has none: not admitted, padding) in a second AllToAllV; the caller keeps them for the
//     batch, and the row ids Resolve returns name them. Like a tiered table's device rows, the
//     rows of the last two Resolve calls stay readable.
//   ApplyGradients: each row's summed gradient goes back to its key's owner (one AllToAllV); the
//     owner adds the gradients of a key from every rank in rank order, combines them as the
//     table's all2all_gradients_op says (GradientScale: "sum", the default, keeps the sum;
//     "sum_gradients_and_div_by_ranksize" divides by the number of ranks, so that, each rank's
//     loss being the mean over its own batch as DistributedOptimizer averages the dense
//     gradients, N ranks train a table as one process trains it on the N batches together), and
//     applies its sparse optimizer once.
// Gather*, PaddingMask read the rows of the batch this rank received; they move nothing.
//
// With a key stage (the CollectiveTable calls, collective_table.h) the keys of a batch go to
// their owners ahead of its step, on a channel of the stage's own (a communicator of its own, so
// those exchanges never meet the step's; with ps ranks, OpenChannel and PullLeased are announced
// and the ps serves the channel, parameter_server.h), and the owners admit and resolve them then;
// the rows come at KeyStage::Next (PullLeased), read after the previous step's update, so training
// with a key stage equals training without one. A stage's batches live until it releases them
// (ReleaseLeased); up to 14 batches of all stages together (kSlots - 2).
//
// What a rank sees of the table outside a step is its shard: size(), MemoryBytes(), FindRow,
// ReadRow, ExportNpy, the snapshot calls (each rank's Saver writes and restores its shard;
// src/checkpoint/sharded_checkpoint.h re-shards a checkpoint for another world size), eviction
// (each owner evicts its keys by the timestamps it received; with ps ranks, by the job's data
// time, see Evict below) and SetAccessThreshold. data_time() is the shard's, except on a worker
// of a job with ps ranks (an empty shard): there it is the job's, the latest of the ps shards'
// as of the last eviction or AgreeDataTimes. FindRow and
// ReadRow of a key another rank owns say which rank holds it. Refused, with the reason: the
// by-address optimizers (their rows live on another rank) and use_dynamic_expansion (at Create);
// ImportNpy (its files hold every rank's keys: import before sharding, or restore a checkpoint).
//
// Errors: a rank whose arguments are wrong still takes part in the exchange (with nothing to
// send) so the others are not left waiting, then returns its error; an owner whose Resolve fails
// tells every rank that asked it, and they fail naming the owner. Every exchange has the
// process communicator's deadline (collective_timeout_s) and names the table.
//
// Threading: as EmbeddingTable; the Session's LockedTable serialises the calls that need it, and
// the process communicator serialises the collectives (process_communicator.h).
#ifndef RECSDK_DIST_SHARDED_TABLE_H_
#define RECSDK_DIST_SHARDED_TABLE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "recsdk/table.h"
#include "src/dist/communicator.h"
#include "src/dist/key_union.h"
#include "src/dist/parameter_server.h"
#include "src/table/collective_table.h"
#include "src/table/eviction.h"

namespace recsdk::dist {

class ShardedTable final : public EmbeddingTable, public internal::CollectiveTable {
 public:
  // Create: the table of rank `rank` of `size`, holding its keys in `shard`. InvalidArgument for
  // a rank outside [0, size); FailedPrecondition naming the table for configs a sharded table
  // cannot honour (see above).
  // With ps ranks (parameter_server.h), the owners are ranks [owner_first, owner_first + owners)
  // of the world; `owners` 0 means every rank (owner_first 0). InvalidArgument for a range not
  // inside the world.
  [[nodiscard]] static StatusOr<std::unique_ptr<EmbeddingTable>> Create(
      std::unique_ptr<EmbeddingTable> shard, int rank, int size, int owner_first = 0,
      int owners = 0);
  ~ShardedTable() override;

  // Owner: the rank that holds `key` in a world of `size` ranks, every rank an owner.
  static int Owner(int64_t key, int size);
  // KeyOwner: the rank that holds `key` in this table's world: owner_first +
  // ShardOwner(key, owners) (Owner(key, size) without ps ranks).
  int KeyOwner(int64_t key) const { return owner_first_ + internal::ShardOwner(key, owners_); }

  int world_size() const override { return world_; }
  int rank() const override { return rank_; }
  int64_t size() const override { return shard_->size(); }
  int64_t capacity() const override { return shard_->capacity(); }
  int64_t MemoryBytes() const override;
  int64_t data_time() const override;
  Status Resolve(absl::Span<const int64_t> unique_keys, absl::Span<const uint32_t> counts,
                 absl::Span<const int64_t> timestamps, LookupMode mode,
                 absl::Span<uint32_t> rows) override;
  Status Gather(absl::Span<const uint32_t> rows, absl::Span<float> out) const override;
  Status GatherRestored(absl::Span<const uint32_t> unique_rows,
                        absl::Span<const uint32_t> restore_index,
                        absl::Span<float> out) const override;
  Status GatherPooled(absl::Span<const uint32_t> unique_rows,
                      absl::Span<const uint32_t> restore_index, int64_t batch, int64_t n,
                      Combiner combiner, absl::Span<float> out) const override;
  Status GatherPooledStrided(absl::Span<const uint32_t> unique_rows,
                             absl::Span<const uint32_t> restore_index, int64_t batch, int64_t n,
                             Combiner combiner, int64_t out_stride,
                             absl::Span<float> out) const override;
  Status PaddingMask(absl::Span<const uint32_t> unique_rows,
                     absl::Span<const uint32_t> restore_index,
                     absl::Span<float> mask) const override;
  Status ApplyGradients(absl::Span<const uint32_t> rows, absl::Span<const float> summed_grads,
                        int64_t step) override;
  Status RowAddresses(absl::Span<const uint32_t> rows, absl::Span<float*> addresses) override;
  Status ApplyGradientsByAddress(absl::Span<float* const> addresses,
                                 absl::Span<const float> summed_grads, int64_t step) override;
  // Eviction: every owner evicts its own keys (by the timestamps it received). Without ps
  // ranks, each rank's call evicts in its shard and returns its own count (not a collective:
  // ranks may evict at different steps). With ps ranks the workers' shards are empty, so a
  // worker's call is a collective of every rank, which every worker makes alike: announced to
  // the ps loop (kEvict), every rank gives its part in one AllGather (a worker its call, a ps
  // its shard's data time), and each ps evicts in its shard by the cutoff every rank derives
  // from them: EvictStale by the job's data time (the latest of the ps shards', so P ps evict
  // what one process evicts) and the workers' in-flight times (EvictStaleKeeping), kept below
  // the batches the ps resolved ahead for a key stage and has not sent yet; an explicit cutoff
  // as given (the lowest, if the workers' differ). Every rank returns the job's total, and a
  // worker's data_time() is the job's from then on.
  StatusOr<int64_t> EvictStale() override {
    return Evict(/*stale=*/true, internal::kNothingInFlight);
  }
  StatusOr<int64_t> EvictLastAccessedAtOrBefore(int64_t cutoff) override {
    return Evict(/*stale=*/false, cutoff);
  }
  // TableLocker: runs `fn` under this table's locks as a worker's LockedTable takes them: the
  // key lock shared (`exclusive` false: reading the data time), or both locks exclusively
  // (evicting). The ps loop's (parameter_server.cc): it holds no lock across a collective, since
  // its stage threads hold the key lock inside a key stage's exchanges, which need the stage
  // threads of the other ps ranks, whose loops may be in this very collective.
  using TableLocker = std::function<Status(bool exclusive, const std::function<Status()>& fn)>;
  // ServeEvict: the ps loop's side of a worker's eviction call (the workers' calls arrive in
  // the gather), each phase that touches the shard under `locker`.
  StatusOr<int64_t> ServeEvict(const TableLocker& locker) {
    return Evict(/*stale=*/false, 0, &locker);
  }
  // AgreeDataTimes: on the workers of a job with ps ranks, learns the job's data time of each of
  // `tables` (the latest of its ps shards'), which their data_time() then reports: announced to
  // the ps loop (kDataTime), then one AllGather of every rank (each ps gives its shards' data
  // times) for up to kMaxAnnouncedTables tables. Every worker passes the same tables in the same
  // order; a ps makes the call for the announced tables, reading each data time under its
  // `lockers` (one per table). OK at once without ps ranks or tables. The
  // internal::DataTimeAgreement of this process (EvictHook's time trigger).
  [[nodiscard]] static Status AgreeDataTimes(absl::Span<ShardedTable* const> tables,
                                             absl::Span<const TableLocker> lockers = {});
  Status SetAccessThreshold(int64_t access_threshold) override;
  uint32_t FindRow(int64_t key) const override;
  StatusOr<std::vector<float>> ReadRow(int64_t key) const override;
  float AdmissionCount(int64_t key) const override { return shard_->AdmissionCount(key); }
  Status ExportNpy(const std::string& keys_path, const std::string& values_path) const override {
    return shard_->ExportNpy(keys_path, values_path);
  }
  Status ImportNpy(const std::string& keys_path, const std::string& values_path) override;
  StatusOr<TableSnapshot> Snapshot(SnapshotKind kind) override { return shard_->Snapshot(kind); }
  StatusOr<TableSnapshot> SnapshotToSink(SnapshotKind kind, SnapshotRowSink& sink) override {
    return shard_->SnapshotToSink(kind, sink);
  }
  Status LoadSnapshot(const TableSnapshot& snapshot) override {
    return shard_->LoadSnapshot(snapshot);
  }
  Status AdoptSnapshot(TableSnapshot&& snapshot) override {
    return shard_->AdoptSnapshot(std::move(snapshot));
  }
  Status CheckSnapshots(absl::Span<const TableSnapshot> chain) override {
    return shard_->CheckSnapshots(chain);
  }

  // GroupResolve: one member of ResolveGroup: a table and the arguments of its Resolve.
  struct GroupResolve {
    ShardedTable* table = nullptr;
    absl::Span<const int64_t> keys;
    absl::Span<const uint32_t> counts;
    absl::Span<const int64_t> times;
    LookupMode mode = LookupMode::kTrain;
    absl::Span<uint32_t> rows;
  };
  // ResolveGroup: each member's Resolve (same results, same errors, each table's own), with the
  // keys of all members in one exchange and their rows back in another, instead of two per table
  // (one step's lookups of several tables: the group_table_exchanges pass, table_exchange_ops.cc).
  // Every rank must pass the same tables in the same order. A collective, like Resolve.
  [[nodiscard]] static Status ResolveGroup(absl::Span<const GroupResolve> members);
  // GroupApply: one member of ApplyGroup: a table and the arguments of its ApplyGradients.
  struct GroupApply {
    ShardedTable* table = nullptr;
    absl::Span<const uint32_t> rows;
    absl::Span<const float> grads;
    int64_t step = 0;
  };
  // ApplyGroup: each member's ApplyGradients, with the gradients of all members in one exchange.
  // A rank whose arguments for any member are wrong sends nothing, and every rank then skips the
  // whole group's update (each returns an error).
  [[nodiscard]] static Status ApplyGroup(absl::Span<const GroupApply> members);

  // The key stage's calls (internal::CollectiveTable).
  Status OpenChannel(const void* owner, const internal::ChannelSpec& spec) override;
  void CloseChannel(const void* owner) override;
  Status AgreeBatch(const void* owner, int64_t batch, std::array<float, 2>* votes) override;
  Status ResolveLeased(absl::Span<const int64_t> unique_keys, absl::Span<const uint32_t> counts,
                       absl::Span<const int64_t> timestamps, LookupMode mode,
                       absl::Span<uint32_t> rows, const internal::ResolveLease& lease) override;
  Status PullLeased(const void* owner, int64_t batch, bool failed) override;
  void ReleaseLeased(const void* owner, int64_t before_batch) override;
  int64_t LeasedOldestTime(const void* owner, int64_t batch) const override;
  bool OwnsKeys() const override { return owner_first_ == 0 || rank_ >= owner_first_; }
  StatusOr<int64_t> EvictStaleKeeping(int64_t in_flight_from) override {
    return Evict(/*stale=*/true, in_flight_from);
  }

 private:
  // Batch: one Resolve's exchange, kept for its Gather* and (training) its ApplyGradients, in
  // a slot: 0 and 1 for Resolve's last two calls, 2 and up for a key stage's batches.
  struct Batch {
    bool train = false;
    uint64_t serial = 0;  // which Resolve filled the slot (1, 2, ...)
    // A key stage's batch: its stage, its number, whether it is held, and whether its rows are
    // still at their owners (PullLeased brings them).
    const void* owner = nullptr;
    int64_t lease_batch = -1;
    bool leased = false;
    bool rows_pending = false;
    bool pulled = false;  // PullLeased brought (or failed) its rows: its step ran, or fails
    int64_t oldest_served = std::numeric_limits<int64_t>::max();  // as owner, of its keys
    int64_t num_keys = 0;
    // The answers as they arrived, in send order: slot i's embedding is the `dim` floats at
    // rows[send_position[i] * row_stride + row_offset] (each record is the flag and the row when
    // Resolve brings the rows, the row alone when PullLeased does), read where they landed.
    std::vector<float> rows;
    int64_t row_stride = 0;
    int64_t row_offset = 0;
    std::vector<uint8_t> flags;          // rows_pending: each key's answer (kRow, kDefault, ...)
    std::vector<int64_t> send_position;  // slot i -> its record in the send order
    std::vector<int64_t> send_counts;    // records sent to each rank
    std::vector<int64_t> recv_counts;    // records received from each rank (as owner)
    std::vector<uint32_t> served_rows;   // per received record: the shard's row
    // served_which: per received record, its key's index among the served_unique distinct keys
    // the owner resolved (KeyUnion::which), so ApplyReceived sums a row's gradients by index.
    std::vector<uint32_t> served_which;
    int64_t served_unique = 0;
  };
  static constexpr int kSlots = 16;
  // ExchangeBuffers: the arrays one Resolve fills and drops (what it sends, receives and answers
  // as an owner, the owners' union of keys), kept across calls so that a step's exchange, once
  // the batches reach their size, allocates nothing and touches no fresh page. One per caller
  // in flight (the step, each key stage's worker): TakeBuffers hands out a spare one (or a new
  // one), GiveBack returns it.
  struct ExchangeBuffers {
    std::vector<KeyRecord> send;
    std::vector<KeyRecord> received;
    std::vector<int> owner;     // per sent key, its owner's rank
    std::vector<int64_t> next;  // per rank, the next record's position in `send`
    std::vector<float> answer;  // as the owner: one record per received key
    std::vector<uint32_t> key_rows;
    KeyUnion united;
    // A gradient exchange (ApplyGradients; a member's part of ApplyGroup) or PullLeased's rows:
    // the floats sent, those received and their counts (grad_from: where each rank's gradient
    // records start); as the owner of gradients, each distinct key's place in `sums` and the rows
    // applied.
    std::vector<float> floats;
    std::vector<float> floats_received;
    std::vector<int64_t> float_send_counts, float_recv_counts, float_incoming, grad_from;
    std::vector<uint32_t> grad_at;
    std::vector<uint32_t> owned_rows;
    std::vector<float> sums;
    // A group's exchanges (ResolveGroup, ApplyGroup; the first member's buffers hold them): what
    // the group sends and receives, and each source's sections.
    std::vector<KeyRecord> group_keys;
    std::vector<KeyRecord> group_received;
    std::vector<float> group_floats;
    std::vector<float> group_back;
    std::vector<int64_t> group_send_counts, group_recv_counts, group_answer_counts,
        group_back_counts;
  };
  std::unique_ptr<ExchangeBuffers> TakeBuffers();
  void GiveBack(std::unique_ptr<ExchangeBuffers> buffers);

  ShardedTable(std::unique_ptr<EmbeddingTable> shard, int rank, int size, int owner_first,
               int owners);
  // ResolveInto: Resolve into slot `slot`; `channel` null: on the process communicator with the
  // rows sent back at once; else on that channel, the rows left at their owners.
  Status ResolveInto(int slot, Communicator* channel, const internal::ResolveLease* lease,
                     absl::Span<const int64_t> unique_keys, absl::Span<const uint32_t> counts,
                     absl::Span<const int64_t> timestamps, LookupMode mode,
                     absl::Span<uint32_t> rows);
  // Slot: the batch and index of a row id Resolve returned; false for other ids.
  bool Slot(uint32_t row, const Batch** batch, int64_t* slot) const;
  // The phases of ResolveInto, shared with ResolveGroup. BeginResolve: refills slot `slot` and
  // lays out the records to send in buffers.send (per owner, in rank order; buffers.owner: each
  // key's); returns this rank's argument error (then it sends nothing). ServeKeys: as the owner,
  // resolves what it received (batch.recv_counts set) and makes the answer records in
  // buffers.answer (the flag, and the row when `with_rows`); returns the owner's error.
  // FinishResolve: reads the answers (in the slot's `rows`, in send order) into `rows`.
  // OwnerFailed: ServeKeys' error as the caller returns it.
  Status BeginResolve(int slot, absl::Span<const int64_t> unique_keys,
                      absl::Span<const uint32_t> counts, absl::Span<const int64_t> timestamps,
                      LookupMode mode, absl::Span<uint32_t> rows, ExchangeBuffers& buffers);
  Status ServeKeys(int slot, absl::Span<const KeyRecord> received, LookupMode mode,
                   const internal::ResolveLease* lease, bool with_rows, ExchangeBuffers& buffers);
  Status FinishResolve(int slot, bool with_rows, const std::vector<int>& owner,
                       absl::Span<const int64_t> unique_keys, absl::Span<uint32_t> rows);
  Status OwnerFailed(const Status& owned) const;
  // Evict: the eviction calls: `stale`, EvictStale keeping the keys last accessed at or after
  // `value` (kNothingInFlight: none); else EvictLastAccessedAtOrBefore(`value`). `locker`: the
  // ps loop's (ServeEvict); null where the caller holds what it needs.
  StatusOr<int64_t> Evict(bool stale, int64_t value, const TableLocker* locker = nullptr);
  // UnsentOldestTime: as owner, the oldest time of the keys of the key stages' batches this rank
  // resolved ahead and has not sent yet (PullLeased), kNothingInFlight when none: a ps's own
  // protection of the batches in flight.
  int64_t UnsentOldestTime() const;
  // The phases of ApplyGradients, shared with ApplyGroup. PrepareGradients: the gradient records
  // in send order (empty, with the error, for bad arguments). ApplyReceived: as the owner, adds
  // each row's gradients in rank order, scales them (GradientScale) and applies them.
  // `from[r]`: where rank r's records for this table start in `received` (in floats); the
  // owner's scratch comes from `buffers`.
  Status PrepareGradients(absl::Span<const uint32_t> rows, absl::Span<const float> summed_grads,
                          std::vector<float>* send) const;
  Status ApplyReceived(absl::Span<const float> received, absl::Span<const int64_t> from,
                       int64_t step, ExchangeBuffers& buffers);
  Status CheckRows(absl::Span<const uint32_t> rows, absl::Span<const uint32_t> restore) const;
  const float* RowOf(uint32_t row) const;
  void CopyRow(uint32_t row, float* out) const;
  // Channel: `owner`'s channel, or null; ChannelTimeout: its deadline in seconds (slots_mu_ not
  // held by the caller).
  Communicator* Channel(const void* owner) const;
  double ChannelTimeout(const void* owner) const;

  std::unique_ptr<EmbeddingTable> shard_;
  const int rank_;
  const int world_;
  // The owners' ranks, [owner_first_, owner_first_ + owners_), and the ranks with data (the
  // workers: every rank without ps ranks), by which "sum_gradients_and_div_by_ranksize" divides.
  const int owner_first_;
  const int owners_;
  const int workers_;
  std::array<Batch, kSlots> batches_;
  // On a worker of a job with ps ranks: the job's data time as of the last eviction or
  // AgreeDataTimes (data_time()).
  std::atomic<int64_t> job_data_time_{kNoKeyTime};
  int64_t generation_ = -1;  // Resolve calls (slots 0 and 1 alternate)
  std::atomic<uint64_t> serials_{0};
  // The batch ApplyGradients applies: the last training Resolve's, or the training batch the
  // key stage pulled last.
  int apply_slot_ = -1;
  uint64_t apply_serial_ = 0;
  // slots_mu_: which leased slots are held, and the channels (a stage's worker resolves while
  // the training thread pulls or gathers another batch).
  mutable std::mutex slots_mu_;
  struct OpenChannelState {
    std::unique_ptr<Communicator> comm;
    double timeout_s = 0;
    // The stage's number and this table's place in it, for the announcements to the ps ranks.
    int64_t stage = -1;
    internal::ChannelSpec spec;
  };
  std::map<const void*, OpenChannelState> channels_;
  mutable std::mutex buffers_mu_;
  std::vector<std::unique_ptr<ExchangeBuffers>> spare_buffers_;
  // Labels of the exchanges (CallTag keeps a view).
  const std::string keys_label_, rows_label_, grads_label_, agree_label_;
};

// GradientScale: the factor a key's gradients, summed over the `world` ranks, are multiplied by
// before its owner applies them, as `config.all2all_gradients_op` says: 1 for "sum" (the
// default), 1 / world for "sum_gradients_and_div_by_ranksize" (then N ranks train a table as one
// process trains it on their N batches together, each rank's loss being the mean over its batch).
float GradientScale(const TableConfig& config, int world);

// MaybeShardTable: `table` as the Session of this process should hold it: when this process is
// one of several ranks (the process communicator's world, or the launcher's when none exists
// yet), a ShardedTable, or a ReplicatedTable (replicated_table.h) when its config has is_dp;
// else unchanged. The table decorator of every Session's tables
// (SetTableDecorator, src/device/table_resource.h), installed with the collective ops.
[[nodiscard]] StatusOr<std::unique_ptr<EmbeddingTable>> MaybeShardTable(
    std::unique_ptr<EmbeddingTable> table);

// ShardedBehind: the ShardedTable `table` is or wraps (through ForwardingTables: a Session's
// LockedTable, the key stage's eviction guard), or null.
ShardedTable* ShardedBehind(EmbeddingTable* table);

// AgreeShardedDataTimes: ShardedTable::AgreeDataTimes of the sharded tables among `tables`; the
// internal::DataTimeAgreement (eviction.h) that every ShardedTable's constructor installs.
[[nodiscard]] Status AgreeShardedDataTimes(absl::Span<EmbeddingTable* const> tables);

}  // namespace recsdk::dist

#endif  // RECSDK_DIST_SHARDED_TABLE_H_
