// sharded_table.cc: the key, row and gradient exchanges of a ShardedTable (sharded_table.h).
#include "src/dist/sharded_table.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "fmt/format.h"
#include "recsdk/distributed.h"
#include "src/common/status_macros.h"
#include "src/dist/create_communicator.h"
#include "src/dist/key_union.h"
#include "src/dist/launch_env.h"
#include "src/dist/parameter_server.h"
#include "src/dist/process_communicator.h"
#include "src/dist/ps_heartbeat.h"
#include "src/dist/replicated_table.h"
#include "src/table/forwarding_table.h"
#include "src/table/pooled_gather.h"
#include "src/table/tier_lease.h"

namespace recsdk::dist {
namespace {

constexpr uint32_t kDefaultRow = EmbeddingTable::kDefaultRow;
constexpr uint32_t kPaddingRow = EmbeddingTable::kPaddingRow;
// A row id of a batch: its slot in the top 4 bits, the key's index below.
constexpr int kSlotShift = 28;
constexpr uint32_t kIndexMask = (1u << kSlotShift) - 1;
// The most keys in one batch (the ids of slot 15 stay below the sentinels).
constexpr int64_t kMaxKeys = static_cast<int64_t>(kIndexMask) - 2;

uint32_t RowId(int slot, int64_t index) {
  return (static_cast<uint32_t>(slot) << kSlotShift) | static_cast<uint32_t>(index);
}

// The first float of each answer (and gradient) record says what follows.
enum Flag : int { kRow = 0, kDefault = 1, kPadding = 2, kOwnerFailed = 3 };
constexpr float kHasGradient = 1.0f;

// Exchange: runs `fn` on the process communicator with its deadline, and names the table and the
// step's collective in an error.
template <typename Fn>
Status Exchange(const std::string& table, const char* what, Fn&& fn) {
  Status s = WithProcessCommunicator([&](Communicator& comm, const DistributedOptions& o) {
    return fn(comm, DeadlineAfterSeconds(o.collective_timeout_s));
  });
  if (s.ok()) return s;
  return Status(s.code(), fmt::format("sharded table \"{}\", {}: {}", table, what, s.message()));
}

std::vector<int64_t> Scaled(const std::vector<int64_t>& counts, int64_t per) {
  std::vector<int64_t> out(counts.size());
  for (size_t i = 0; i < counts.size(); ++i) out[i] = counts[i] * per;
  return out;
}

// CopySections: moves a group exchange's sections between the members' own arrays and the
// group's buffer. The buffer holds, for each rank in turn, each member's section for that rank
// (count(t, r) elements of member t); a member's own array (own(t)) holds its sections one rank
// after another. `to_group`: from the members' arrays into `group`, else back. `next`: scratch.
template <typename T, typename CountFn, typename OwnFn>
void CopySections(int world, size_t members, CountFn count, OwnFn own, T* group, bool to_group,
                  std::vector<int64_t>& next) {
  next.assign(members, 0);
  size_t at = 0;
  for (int r = 0; r < world; ++r) {
    for (size_t t = 0; t < members; ++t) {
      const size_t c = static_cast<size_t>(count(t, r));
      T* mine = own(t) + next[t];
      if (to_group) {
        std::copy_n(mine, c, group + at);
      } else {
        std::copy_n(group + at, c, mine);
      }
      next[t] += static_cast<int64_t>(c);
      at += c;
    }
  }
}

}  // namespace

float GradientScale(const TableConfig& config, int world) {
  return config.all2all_gradients_op == "sum_gradients_and_div_by_ranksize"
             ? 1.0f / static_cast<float>(world)
             : 1.0f;
}

int ShardedTable::Owner(int64_t key, int size) { return internal::ShardOwner(key, size); }

ShardedTable::ShardedTable(std::unique_ptr<EmbeddingTable> shard, int rank, int size,
                           int owner_first, int owners)
    : EmbeddingTable(shard->config(), shard->optimizer()),
      shard_(std::move(shard)),
      rank_(rank),
      world_(size),
      owner_first_(owner_first),
      owners_(owners),
      workers_(owner_first > 0 ? owner_first : size),
      keys_label_(name() + "/keys"),
      rows_label_(name() + "/rows"),
      grads_label_(name() + "/grads"),
      agree_label_(name() + "/agree") {
  RegisterServedTable(this);
  // An EvictHook's time trigger on a worker of a job with ps ranks reads the job's data time,
  // which this process's sharded tables learn through AgreeShardedDataTimes.
  internal::SetDataTimeAgreement(AgreeShardedDataTimes);
}

ShardedTable::~ShardedTable() { UnregisterServedTable(this); }

StatusOr<std::unique_ptr<EmbeddingTable>> ShardedTable::Create(
    std::unique_ptr<EmbeddingTable> shard, int rank, int size, int owner_first, int owners) {
  if (shard == nullptr || size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        fmt::format("ShardedTable: rank {} of {} ranks{}; pass this process's rank and the "
                    "world size, 0 <= rank < size",
                    rank, size, shard == nullptr ? " with no shard" : ""));
  }
  if (owners == 0) {
    owner_first = 0;
    owners = size;
  }
  if (owners < 1 || owner_first < 0 || owner_first > size - owners ||
      (owner_first > 0 && owner_first + owners != size)) {
    return absl::InvalidArgumentError(fmt::format(
        "ShardedTable: owner ranks [{}, {}) in a world of {}; the owners are every rank, or the "
        "ps ranks that end the world",
        owner_first, owner_first + owners, size));
  }
  if (shard->config().use_dynamic_expansion) {
    return absl::FailedPreconditionError(fmt::format(
        "table \"{}\" is sharded over {} ranks and has use_dynamic_expansion, whose optimizers "
        "update rows by address on this rank; set use_dynamic_expansion = false and size "
        "device_vocabulary_size for one rank's share of the keys",
        shard->name(), size));
  }
  if (shard->optimizer().ByAddress()) {
    return absl::FailedPreconditionError(fmt::format(
        "table \"{}\" is sharded over {} ranks, and its optimizer {} updates rows by address, "
        "which live on their owners' ranks; use the optimizer's plain kind ({}), which applies "
        "the same update by row",
        shard->name(), size, SparseOptimizerKindName(shard->optimizer().kind),
        SparseOptimizerKindName(
            static_cast<SparseOptimizerKind>(static_cast<int>(shard->optimizer().kind) - 1))));
  }
  return std::unique_ptr<EmbeddingTable>(
      new ShardedTable(std::move(shard), rank, size, owner_first, owners));
}

int64_t ShardedTable::MemoryBytes() const {
  int64_t bytes = shard_->MemoryBytes();
  for (const Batch& b : batches_) {
    bytes += static_cast<int64_t>(
        b.rows.capacity() * sizeof(float) + b.send_position.capacity() * sizeof(int64_t) +
        (b.served_rows.capacity() + b.served_which.capacity()) * sizeof(uint32_t));
  }
  std::lock_guard<std::mutex> lock(buffers_mu_);
  for (const std::unique_ptr<ExchangeBuffers>& b : spare_buffers_) {
    bytes += static_cast<int64_t>(
        (b->send.capacity() + b->received.capacity()) * sizeof(KeyRecord) +
        b->answer.capacity() * sizeof(float) + b->key_rows.capacity() * sizeof(uint32_t) +
        b->united.keys.capacity() * (sizeof(int64_t) * 2 + sizeof(uint32_t) * 2) +
        (b->floats.capacity() + b->floats_received.capacity() + b->sums.capacity() +
         b->group_floats.capacity() + b->group_back.capacity()) *
            sizeof(float) +
        (b->group_keys.capacity() + b->group_received.capacity()) * sizeof(KeyRecord));
  }
  return bytes;
}

std::unique_ptr<ShardedTable::ExchangeBuffers> ShardedTable::TakeBuffers() {
  {
    std::lock_guard<std::mutex> lock(buffers_mu_);
    if (!spare_buffers_.empty()) {
      std::unique_ptr<ExchangeBuffers> b = std::move(spare_buffers_.back());
      spare_buffers_.pop_back();
      return b;
    }
  }
  return std::make_unique<ExchangeBuffers>();
}

void ShardedTable::GiveBack(std::unique_ptr<ExchangeBuffers> buffers) {
  if (buffers == nullptr) return;
  std::lock_guard<std::mutex> lock(buffers_mu_);
  spare_buffers_.push_back(std::move(buffers));
}

Status ShardedTable::Resolve(absl::Span<const int64_t> unique_keys,
                             absl::Span<const uint32_t> counts,
                             absl::Span<const int64_t> timestamps, LookupMode mode,
                             absl::Span<uint32_t> rows) {
  const PsMember member{name(), mode};
  RECSDK_RETURN_IF_ERROR(AnnounceExchange(PsCommand::kResolve, -1, {&member, 1}));
  ++generation_;
  return ResolveInto(static_cast<int>(generation_ % 2), nullptr, nullptr, unique_keys, counts,
                     timestamps, mode, rows);
}

Status ShardedTable::BeginResolve(int slot, absl::Span<const int64_t> unique_keys,
                                  absl::Span<const uint32_t> counts,
                                  absl::Span<const int64_t> timestamps, LookupMode mode,
                                  absl::Span<uint32_t> rows, ExchangeBuffers& buffers) {
  const size_t n = unique_keys.size();
  // A rank with wrong arguments sends nothing but still takes part, so no rank waits for it.
  Status own;
  if (rows.size() != n || (!counts.empty() && counts.size() != n) ||
      (!timestamps.empty() && timestamps.size() != n)) {
    own = absl::InvalidArgumentError(fmt::format(
        "table \"{}\": Resolve of {} keys got {} rows, {} counts and {} timestamps; pass one "
        "row (and one count and timestamp, or none) per key",
        name(), n, rows.size(), counts.size(), timestamps.size()));
  } else if (static_cast<int64_t>(n) > kMaxKeys) {
    own = absl::InvalidArgumentError(
        fmt::format("table \"{}\": Resolve of {} keys; a batch of a sharded table holds at most {}",
                    name(), n, kMaxKeys));
  }
  const size_t sent = own.ok() ? n : 0;
  Batch& batch = batches_[static_cast<size_t>(slot)];
  // Refill the slot (its stage fields stay), keeping its arrays' memory for this batch.
  batch.serial = serials_.fetch_add(1) + 1;
  batch.train = mode == LookupMode::kTrain;
  batch.rows_pending = false;
  batch.oldest_served = std::numeric_limits<int64_t>::max();
  // num_keys stays 0 until the rows are in: the ids of a Resolve that failed name no row.
  batch.num_keys = 0;
  batch.row_stride = 0;
  batch.row_offset = 0;
  batch.flags.clear();
  batch.recv_counts.clear();
  batch.served_rows.clear();
  batch.send_counts.assign(world_, 0);
  std::vector<int>& owner = buffers.owner;
  owner.resize(sent);
  for (size_t i = 0; i < sent; ++i) {
    owner[i] = KeyOwner(unique_keys[i]);
    ++batch.send_counts[owner[i]];
  }
  std::vector<int64_t>& next = buffers.next;
  next.assign(world_, 0);
  for (int r = 1; r < world_; ++r) next[r] = next[r - 1] + batch.send_counts[r - 1];
  std::vector<KeyRecord>& send = buffers.send;
  send.resize(sent);
  batch.send_position.resize(sent);
  for (size_t i = 0; i < sent; ++i) {
    const int64_t p = next[owner[i]]++;
    batch.send_position[i] = p;
    send[p] = {unique_keys[i], counts.empty() ? 1 : static_cast<int64_t>(counts[i]),
               timestamps.empty() ? kNoKeyTime : timestamps[i]};
  }
  return own;
}

Status ShardedTable::ServeKeys(int slot, absl::Span<const KeyRecord> received, LookupMode mode,
                               const internal::ResolveLease* lease, bool with_rows,
                               ExchangeBuffers& buffers) {
  Batch& batch = batches_[static_cast<size_t>(slot)];
  // As the owner: the union of the keys asked for, in rank order, resolved once.
  KeyUnion& united = buffers.united;
  united.Unite(received, shard_->data_time());
  const std::vector<int64_t>& keys = united.keys;
  const std::vector<uint32_t>& key_counts = united.counts;
  const std::vector<int64_t>& key_times = united.times;  // empty: no lookup had timestamps
  const std::vector<uint32_t>& which = united.which;
  const bool any_time = !key_times.empty();
  std::vector<uint32_t>& key_rows = buffers.key_rows;
  key_rows.resize(keys.size());
  const absl::Span<const int64_t> owned_times =
      any_time ? absl::MakeConstSpan(key_times) : absl::Span<const int64_t>();
  // A key stage's batch pins its rows in a tiered shard until the stage releases it.
  Status owned =
      lease != nullptr
          ? internal::ResolveWithLease(*shard_, keys, key_counts, owned_times, mode,
                                       absl::MakeSpan(key_rows), *lease)
          : shard_->Resolve(keys, key_counts, owned_times, mode, absl::MakeSpan(key_rows));
  if (owned.ok() && !keys.empty()) {
    batch.oldest_served =
        any_time ? *std::min_element(key_times.begin(), key_times.end()) : shard_->data_time();
  }
  const int64_t dim = config_.dim;
  // A record of the answer: the flag, then (sent at once) the embedding.
  const int64_t record = with_rows ? dim + 1 : 1;
  std::vector<float>& answer = buffers.answer;
  answer.resize(received.size() * static_cast<size_t>(record));
  if (owned.ok() && with_rows && !received.empty()) {
    // Each record's embedding straight into its place after the flag: a pooled lookup of one
    // key per record (every combiner of one row is the row) with the records' stride.
    owned = shard_->GatherPooledStrided(key_rows, which, static_cast<int64_t>(received.size()), 1,
                                        Combiner::kSum, record, absl::MakeSpan(answer).subspan(1));
  }
  batch.served_rows.resize(received.size());
  for (size_t p = 0; p < received.size(); ++p) {
    float* a = answer.data() + p * static_cast<size_t>(record);
    if (!owned.ok()) {
      a[0] = kOwnerFailed;
      batch.served_rows[p] = kDefaultRow;
      continue;
    }
    const uint32_t row = key_rows[which[p]];
    batch.served_rows[p] = row;
    a[0] = row == kPaddingRow ? kPadding : row == kDefaultRow ? kDefault : kRow;
  }
  // Each record's key index stays with the batch for ApplyReceived; the union refills the slot's
  // previous array next time (a swap: neither is freed).
  batch.served_unique = static_cast<int64_t>(keys.size());
  batch.served_which.swap(united.which);
  return owned;
}

Status ShardedTable::FinishResolve(int slot, bool with_rows, const std::vector<int>& owner,
                                   absl::Span<const int64_t> unique_keys,
                                   absl::Span<uint32_t> rows) {
  Batch& batch = batches_[static_cast<size_t>(slot)];
  const int64_t dim = config_.dim;
  const int64_t record = with_rows ? dim + 1 : 1;
  const size_t sent = owner.size();
  if (with_rows) {
    batch.row_stride = record;
    batch.row_offset = 1;
  } else {
    batch.flags.resize(sent);
  }
  for (size_t i = 0; i < sent; ++i) {
    const float* a = batch.rows.data() + batch.send_position[i] * record;
    if (!with_rows) batch.flags[i] = static_cast<uint8_t>(a[0]);
    switch (static_cast<int>(a[0])) {
      case kRow:
        rows[i] = RowId(slot, static_cast<int64_t>(i));
        break;
      case kDefault:
        rows[i] = kDefaultRow;
        break;
      case kPadding:
        rows[i] = kPaddingRow;
        break;
      default:
        return absl::AbortedError(fmt::format(
            "sharded table \"{}\": rank {}, which owns key {}, failed to resolve its keys (its "
            "own error says why); this step's lookup of the table cannot complete",
            name(), owner[i], unique_keys[i]));
    }
  }
  batch.num_keys = static_cast<int64_t>(sent);
  batch.rows_pending = !with_rows;
  if (batch.train && with_rows) {
    apply_slot_ = slot;
    apply_serial_ = batch.serial;
  }
  return absl::OkStatus();
}

int64_t ShardedTable::data_time() const {
  // A worker of a job with ps ranks holds no key: the job's data time, as last learnt.
  if (!OwnsKeys()) return job_data_time_.load(std::memory_order_relaxed);
  return shard_->data_time();
}

namespace {
// The words each rank gives to a ps job's eviction: what it asks (a ps: nothing), the value
// (the cutoff, or the in-flight time of a stale eviction) and its shard's data time.
enum EvictAsk : int64_t { kAskNothing = 0, kAskCutoff = 1, kAskStale = 2 };
constexpr size_t kEvictWords = 3;
}  // namespace

StatusOr<int64_t> ShardedTable::Evict(bool stale, int64_t value, const TableLocker* locker) {
  if (owner_first_ == 0) {
    // Every rank owns keys: its own shard, its own count.
    return stale ? internal::EvictStaleKeys(*shard_, value)
                 : shard_->EvictLastAccessedAtOrBefore(value);
  }
  const bool ps = OwnsKeys();  // a ps rank: the workers own no key
  // A table without an eviction threshold: the shard's FailedPrecondition, on every worker
  // alike (the configs are the same), before anything is announced.
  if (!ps && stale && config_.eviction_threshold < 0) return shard_->EvictStale();
  if (!ps) {
    const PsMember member{name(), LookupMode::kTrain};
    RECSDK_RETURN_IF_ERROR(
        AnnounceExchange(PsCommand::kEvict, stale ? kEvictStale : value, {&member, 1}));
  }
  auto locked = [&](bool exclusive, const std::function<Status()>& fn) {
    return locker != nullptr ? (*locker)(exclusive, fn) : fn();
  };
  // Every rank gives its part, and every rank derives the same cutoff from the parts.
  std::array<int64_t, kEvictWords> mine = {stale ? kAskStale : kAskCutoff, value, kNoKeyTime};
  if (ps) {
    mine = {kAskNothing, 0, kNoKeyTime};
    RECSDK_RETURN_IF_ERROR(locked(false, [&] {
      mine[2] = shard_->data_time();
      return absl::OkStatus();
    }));
  }
  std::vector<int64_t> parts(kEvictWords * static_cast<size_t>(world_));
  RECSDK_RETURN_IF_ERROR(
      Exchange(name(), "gathering the ranks' eviction calls", [&](Communicator& c, auto d) {
        return c.AllGather<int64_t>(mine, absl::MakeSpan(parts), d, CallTag{-1, agree_label_});
      }));
  int64_t asked = kAskNothing;
  int64_t lowest = std::numeric_limits<int64_t>::max();
  int64_t job_time = kNoKeyTime;
  for (int r = 0; r < world_; ++r) {
    const int64_t* p = parts.data() + kEvictWords * static_cast<size_t>(r);
    job_time = std::max(job_time, p[2]);
    if (p[0] == kAskNothing) continue;
    if (asked != kAskNothing && p[0] != asked) {
      return absl::InvalidArgumentError(fmt::format(
          "sharded table \"{}\": the workers made different eviction calls (rank {} {}, another "
          "{}); every worker of a job with ps ranks evicts alike, at the same point",
          name(), r, p[0] == kAskStale ? "EvictStale" : "EvictLastAccessedAtOrBefore",
          asked == kAskStale ? "EvictStale" : "EvictLastAccessedAtOrBefore"));
    }
    asked = p[0];
    lowest = std::min(lowest, p[1]);
  }
  job_data_time_.store(job_time, std::memory_order_relaxed);
  StatusOr<int64_t> own = 0;
  if (ps && asked != kAskNothing) {
    // Under both locks, and after the gather: a key stage's batch this ps resolved since then
    // is kept too (UnsentOldestTime), and the data time it moved is the next eviction's.
    const Status done = locked(true, [&]() -> Status {
      std::optional<int64_t> cutoff = lowest;
      if (asked == kAskStale) {
        // The job's data time, below every worker's batches in flight and below what this ps
        // resolved ahead and has not sent (a worker may not have counted a batch whose keys are
        // here already). Nothing is older than a batch in flight at the earliest time.
        const int64_t keep = std::min(lowest, UnsentOldestTime());
        cutoff = keep == std::numeric_limits<int64_t>::min()
                     ? std::nullopt
                     : internal::StaleCutoff(job_time, config_.eviction_threshold, keep);
      }
      if (cutoff) own = shard_->EvictLastAccessedAtOrBefore(*cutoff);
      return absl::OkStatus();
    });
    if (!done.ok()) own = done;
  }
  // Every rank then gives its count (-1: its eviction failed) and returns the job's total.
  const int64_t count = own.ok() ? *own : -1;
  std::vector<int64_t> counts(static_cast<size_t>(world_));
  RECSDK_RETURN_IF_ERROR(
      Exchange(name(), "gathering the owners' eviction counts", [&](Communicator& c, auto d) {
        return c.AllGather<int64_t>({&count, 1}, absl::MakeSpan(counts), d,
                                    CallTag{-1, agree_label_});
      }));
  if (!own.ok()) return own.status();
  int64_t total = 0;
  for (int r = 0; r < world_; ++r) {
    if (counts[r] < 0) {
      return absl::AbortedError(fmt::format(
          "sharded table \"{}\": the eviction failed on ps rank {} (its own error says why)",
          name(), r));
    }
    total += counts[r];
  }
  return total;
}

int64_t ShardedTable::UnsentOldestTime() const {
  int64_t oldest = internal::kNothingInFlight;
  std::lock_guard<std::mutex> lock(slots_mu_);
  for (int s = 2; s < kSlots; ++s) {
    const Batch& b = batches_[static_cast<size_t>(s)];
    if (b.leased && !b.pulled) oldest = std::min(oldest, b.oldest_served);
  }
  return oldest;
}

Status ShardedTable::AgreeDataTimes(absl::Span<ShardedTable* const> tables,
                                    absl::Span<const TableLocker> lockers) {
  if (tables.empty() || tables.front()->owner_first_ == 0) return absl::OkStatus();
  for (size_t from = 0; from < tables.size(); from += kMaxAnnouncedTables) {
    const absl::Span<ShardedTable* const> part =
        tables.subspan(from, static_cast<size_t>(kMaxAnnouncedTables));
    const ShardedTable& first = *part.front();
    const bool ps = first.rank_ >= first.owner_first_;
    if (!ps) {
      std::vector<PsMember> members;
      for (const ShardedTable* t : part) members.push_back({t->name(), LookupMode::kTrain});
      RECSDK_RETURN_IF_ERROR(AnnounceExchange(PsCommand::kDataTime, -1, members));
    }
    // A worker's shard is empty: only the ps ranks' data times count, read before the gather
    // (no lock is held across it: see TableLocker).
    std::vector<int64_t> mine(part.size(), kNoKeyTime);
    if (ps) {
      for (size_t i = 0; i < part.size(); ++i) {
        auto read = [&] {
          mine[i] = part[i]->shard_->data_time();
          return absl::OkStatus();
        };
        const size_t at = from + i;
        RECSDK_RETURN_IF_ERROR(at < lockers.size() ? lockers[at](false, read) : read());
      }
    }
    std::vector<int64_t> all(part.size() * static_cast<size_t>(first.world_));
    RECSDK_RETURN_IF_ERROR(
        Exchange(part.size() == 1 ? first.name()
                                  : fmt::format("{} and {} more", first.name(), part.size() - 1),
                 "gathering the ps ranks' data times", [&](Communicator& c, auto d) {
                   return c.AllGather<int64_t>(mine, absl::MakeSpan(all), d,
                                               CallTag{-1, first.agree_label_});
                 }));
    for (size_t i = 0; i < part.size(); ++i) {
      int64_t latest = kNoKeyTime;
      for (int r = 0; r < first.world_; ++r) {
        latest = std::max(latest, all[static_cast<size_t>(r) * part.size() + i]);
      }
      part[i]->job_data_time_.store(latest, std::memory_order_relaxed);
    }
  }
  return absl::OkStatus();
}

Status ShardedTable::OwnerFailed(const Status& owned) const {
  return Status(owned.code(), fmt::format("sharded table \"{}\" on rank {} (owner of keys other "
                                          "ranks asked for): {}",
                                          name(), rank_, owned.message()));
}

Status ShardedTable::ResolveInto(int slot, Communicator* channel,
                                 const internal::ResolveLease* lease,
                                 absl::Span<const int64_t> unique_keys,
                                 absl::Span<const uint32_t> counts,
                                 absl::Span<const int64_t> timestamps, LookupMode mode,
                                 absl::Span<uint32_t> rows) {
  std::unique_ptr<ExchangeBuffers> buffers = TakeBuffers();
  absl::Cleanup give_back = [&] { GiveBack(std::move(buffers)); };
  const Status own = BeginResolve(slot, unique_keys, counts, timestamps, mode, rows, *buffers);
  Batch& batch = batches_[static_cast<size_t>(slot)];
  // Exchange on the process communicator (the step's) or the key stage's channel.
  auto exchange = [&](const char* what, auto&& fn) -> Status {
    if (channel == nullptr) return Exchange(name(), what, fn);
    Status st = fn(*channel, DeadlineAfterSeconds(ChannelTimeout(lease->owner)));
    if (st.ok()) return st;
    return Status(st.code(), fmt::format("sharded table \"{}\", key stage batch {}, {}: {}", name(),
                                         lease->batch, what, st.message()));
  };
  const int64_t tag_step = lease != nullptr ? lease->batch : -1;
  // The keys and their counts in one call (one header round; the owners learn the counts).
  RECSDK_RETURN_IF_ERROR(exchange("sending keys to their owners", [&](Communicator& c, auto d) {
    return c.ExchangeV<KeyRecord>(buffers->send, batch.send_counts, &buffers->received,
                                  &batch.recv_counts, d, CallTag{tag_step, keys_label_});
  }));
  const bool with_rows = channel == nullptr;
  const Status owned = ServeKeys(slot, buffers->received, mode, lease, with_rows, *buffers);
  const int64_t record = with_rows ? config_.dim + 1 : 1;
  // The answers land in the slot, where the batch's lookups read them.
  batch.rows.resize(buffers->owner.size() * static_cast<size_t>(record));
  const std::vector<int64_t> answer_counts = Scaled(batch.recv_counts, record);
  const std::vector<int64_t> back_counts = Scaled(batch.send_counts, record);
  RECSDK_RETURN_IF_ERROR(
      exchange("sending rows back from their owners", [&](Communicator& c, auto d) {
        return c.AllToAllV<float>(buffers->answer, {answer_counts, {}}, absl::MakeSpan(batch.rows),
                                  {back_counts, {}}, d, CallTag{tag_step, rows_label_});
      }));
  if (!owned.ok()) return OwnerFailed(owned);
  RECSDK_RETURN_IF_ERROR(own);
  return FinishResolve(slot, with_rows, buffers->owner, unique_keys, rows);
}

bool ShardedTable::Slot(uint32_t row, const Batch** batch, int64_t* slot) const {
  if (row >= kDefaultRow) return false;
  const Batch& b = batches_[row >> kSlotShift];
  const int64_t s = row & kIndexMask;
  if (s >= b.num_keys || b.rows_pending) return false;
  *batch = &b;
  *slot = s;
  return true;
}

const float* ShardedTable::RowOf(uint32_t row) const {
  const Batch* b = nullptr;
  int64_t s = 0;
  (void)Slot(row, &b, &s);  // CheckRows has passed
  return b->rows.data() + b->send_position[static_cast<size_t>(s)] * b->row_stride + b->row_offset;
}

void ShardedTable::CopyRow(uint32_t row, float* out) const {
  const int dim = config_.dim;
  if (row < kDefaultRow) {
    std::copy_n(RowOf(row), dim, out);
  } else {
    std::fill(out, out + dim, row == kPaddingRow ? 0.0f : config_.serving_default_value);
  }
}

Status ShardedTable::CheckRows(absl::Span<const uint32_t> rows,
                               absl::Span<const uint32_t> restore) const {
  for (uint32_t i : restore) {
    if (i >= rows.size()) {
      return absl::InvalidArgumentError(fmt::format(
          "table \"{}\": restore index {} is out of range for {} unique rows; pass "
          "the restore_index of the batch whose unique keys Resolve turned into those rows",
          name(), i, rows.size()));
    }
  }
  for (uint32_t row : rows) {
    const Batch* b = nullptr;
    int64_t s = 0;
    if (row < kDefaultRow && !Slot(row, &b, &s)) {
      return absl::InvalidArgumentError(fmt::format(
          "table \"{}\": row id {} is not a row of this rank's current batches of the sharded "
          "table, or its rows were not brought yet (a key stage's batch gets them at "
          "KeyStage::Next); pass rows that Resolve returned",
          name(), row));
    }
  }
  return absl::OkStatus();
}

Status ShardedTable::Gather(absl::Span<const uint32_t> rows, absl::Span<float> out) const {
  const size_t dim = static_cast<size_t>(config_.dim);
  if (out.size() != rows.size() * dim) {
    return absl::InvalidArgumentError(
        fmt::format("table \"{}\": Gather's output holds {} floats where {} rows of {} belong",
                    name(), out.size(), rows.size(), dim));
  }
  RECSDK_RETURN_IF_ERROR(CheckRows(rows, {}));
  for (size_t i = 0; i < rows.size(); ++i) CopyRow(rows[i], out.data() + i * dim);
  return absl::OkStatus();
}

Status ShardedTable::GatherRestored(absl::Span<const uint32_t> unique_rows,
                                    absl::Span<const uint32_t> restore_index,
                                    absl::Span<float> out) const {
  const size_t dim = static_cast<size_t>(config_.dim);
  if (out.size() != restore_index.size() * dim) {
    return absl::InvalidArgumentError(fmt::format(
        "table \"{}\": GatherRestored's output holds {} floats where {} rows of {} belong", name(),
        out.size(), restore_index.size(), dim));
  }
  RECSDK_RETURN_IF_ERROR(CheckRows(unique_rows, restore_index));
  for (size_t i = 0; i < restore_index.size(); ++i) {
    CopyRow(unique_rows[restore_index[i]], out.data() + i * dim);
  }
  return absl::OkStatus();
}

Status ShardedTable::GatherPooled(absl::Span<const uint32_t> unique_rows,
                                  absl::Span<const uint32_t> restore_index, int64_t batch,
                                  int64_t n, Combiner combiner, absl::Span<float> out) const {
  if (batch < 0 || static_cast<int64_t>(out.size()) != batch * config_.dim) {
    return absl::InvalidArgumentError(
        fmt::format("table \"{}\": GatherPooled's output holds {} floats where [{}, {}] belong",
                    name(), out.size(), batch, config_.dim));
  }
  return GatherPooledStrided(unique_rows, restore_index, batch, n, combiner, config_.dim, out);
}

Status ShardedTable::GatherPooledStrided(absl::Span<const uint32_t> unique_rows,
                                         absl::Span<const uint32_t> restore_index, int64_t batch,
                                         int64_t n, Combiner combiner, int64_t out_stride,
                                         absl::Span<float> out) const {
  if (batch < 0 || n < 0 || (n > 0 && batch > std::numeric_limits<int64_t>::max() / n) ||
      static_cast<int64_t>(restore_index.size()) != batch * n) {
    return absl::InvalidArgumentError(
        fmt::format("table \"{}\": pooled lookup of [batch {}, n {}] got {} restore indices; pass "
                    "batch * n of them",
                    name(), batch, n, restore_index.size()));
  }
  const int64_t needed = batch == 0 ? 0 : (batch - 1) * out_stride + config_.dim;
  if (out_stride < config_.dim || static_cast<int64_t>(out.size()) < needed) {
    return absl::InvalidArgumentError(fmt::format(
        "table \"{}\": pooled output of {} rows {} floats apart needs a stride of at least dim "
        "{} and {} floats, got {}",
        name(), batch, out_stride, config_.dim, needed, out.size()));
  }
  RECSDK_RETURN_IF_ERROR(CheckRows(unique_rows, restore_index));
  internal::PooledGatherRows([this](uint32_t row) { return RowOf(row); }, [](uint32_t) {},
                             unique_rows.data(), restore_index.data(), static_cast<size_t>(batch),
                             static_cast<size_t>(n), combiner, static_cast<size_t>(out_stride),
                             config_.dim, config_.serving_default_value, out.data());
  return absl::OkStatus();
}

Status ShardedTable::PaddingMask(absl::Span<const uint32_t> unique_rows,
                                 absl::Span<const uint32_t> restore_index,
                                 absl::Span<float> mask) const {
  if (mask.size() != restore_index.size()) {
    return absl::InvalidArgumentError(
        fmt::format("table \"{}\": PaddingMask's mask holds {} floats for {} positions", name(),
                    mask.size(), restore_index.size()));
  }
  RECSDK_RETURN_IF_ERROR(CheckRows(unique_rows, restore_index));
  for (size_t i = 0; i < restore_index.size(); ++i) {
    mask[i] = unique_rows[restore_index[i]] == kPaddingRow ? 0.0f : 1.0f;
  }
  return absl::OkStatus();
}

Status ShardedTable::PrepareGradients(absl::Span<const uint32_t> rows,
                                      absl::Span<const float> summed_grads,
                                      std::vector<float>* send) const {
  const int64_t dim = config_.dim;
  const int64_t record = dim + 1;
  send->clear();
  if (apply_slot_ < 0 || batches_[static_cast<size_t>(apply_slot_)].serial != apply_serial_) {
    return absl::FailedPreconditionError(fmt::format(
        "table \"{}\": ApplyGradients with no training batch of this rank (its last training "
        "Resolve was followed by two more, or the key stage brought no training batch); apply "
        "the gradients of the step's own training lookup",
        name()));
  }
  const Batch* batch = &batches_[static_cast<size_t>(apply_slot_)];
  if (summed_grads.size() != rows.size() * static_cast<size_t>(dim)) {
    return absl::InvalidArgumentError(
        fmt::format("table \"{}\": ApplyGradients got {} gradient floats for {} rows of dim {}",
                    name(), summed_grads.size(), rows.size(), dim));
  }
  // Only the flags need clearing: the receiver reads no gradient of a record without one.
  send->resize(static_cast<size_t>(batch->num_keys * record));
  for (size_t p = 0; p < send->size(); p += static_cast<size_t>(record)) (*send)[p] = 0.0f;
  for (size_t i = 0; i < rows.size(); ++i) {
    const uint32_t row = rows[i];
    if (row >= kDefaultRow) continue;
    const int64_t slot = row & kIndexMask;
    if (static_cast<int>(row >> kSlotShift) != apply_slot_ || slot >= batch->num_keys) {
      send->clear();
      return absl::InvalidArgumentError(fmt::format(
          "table \"{}\": row id {} is not a row of this rank's training batch; apply the rows "
          "that Resolve returned",
          name(), row));
    }
    float* g = send->data() + batch->send_position[slot] * record;
    if (g[0] == kHasGradient) {
      send->clear();
      return absl::InvalidArgumentError(fmt::format(
          "table \"{}\": row id {} appears twice in one ApplyGradients; sum its gradients "
          "first (AggregateGradients)",
          name(), row));
    }
    g[0] = kHasGradient;
    std::copy_n(summed_grads.data() + i * dim, dim, g + 1);
  }
  return absl::OkStatus();
}

Status ShardedTable::ApplyReceived(absl::Span<const float> received, absl::Span<const int64_t> from,
                                   int64_t step, ExchangeBuffers& buffers) {
  const Batch& batch = batches_[static_cast<size_t>(apply_slot_)];
  const size_t dim = static_cast<size_t>(config_.dim);
  const size_t record = dim + 1;
  // As the owner: each row's gradients from every rank, added in rank order, then combined as
  // the table's all2all_gradients_op says (GradientScale). A row's place in `sums` is that of
  // its key in the batch's union (served_which, from ServeKeys): no hashing, nothing allocated
  // once the batches reach their size; the rows are applied in order of their first gradient.
  constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
  std::vector<uint32_t>& at = buffers.grad_at;
  at.assign(static_cast<size_t>(batch.served_unique), kNone);
  std::vector<uint32_t>& owned_rows = buffers.owned_rows;
  std::vector<float>& sums = buffers.sums;
  owned_rows.clear();
  sums.clear();
  size_t p = 0;
  for (int r = 0; r < world_; ++r) {
    const float* g = received.data() + from[static_cast<size_t>(r)];
    const size_t end = p + static_cast<size_t>(batch.recv_counts[static_cast<size_t>(r)]);
    for (; p < end; ++p, g += record) {
      const uint32_t row = batch.served_rows[p];
      if (g[0] != kHasGradient || row >= kDefaultRow) continue;
      uint32_t& k = at[batch.served_which[p]];
      if (k == kNone) {
        k = static_cast<uint32_t>(owned_rows.size());
        owned_rows.push_back(row);
        sums.resize(sums.size() + dim, 0.0f);
      }
      float* s = sums.data() + k * dim;
      for (size_t d = 0; d < dim; ++d) s[d] += g[1 + d];
    }
  }
  const float scale = GradientScale(config_, workers_);
  if (scale != 1.0f) {
    for (float& v : sums) v *= scale;
  }
  return shard_->ApplyGradients(owned_rows, sums, step);
}

Status ShardedTable::ApplyGradients(absl::Span<const uint32_t> rows,
                                    absl::Span<const float> summed_grads, int64_t step) {
  const PsMember member{name(), LookupMode::kTrain};
  RECSDK_RETURN_IF_ERROR(AnnounceExchange(PsCommand::kApply, step, {&member, 1}));
  const int64_t record = config_.dim + 1;
  std::unique_ptr<ExchangeBuffers> buffers = TakeBuffers();
  absl::Cleanup give_back = [&] { GiveBack(std::move(buffers)); };
  // A rank with wrong arguments sends no gradient but still takes part (see Resolve).
  std::vector<float>& send = buffers->floats;
  const Status own = PrepareGradients(rows, summed_grads, &send);
  std::vector<int64_t>& send_counts = buffers->float_send_counts;
  std::vector<int64_t>& recv_counts = buffers->float_recv_counts;
  send_counts.assign(world_, 0);
  recv_counts.assign(world_, 0);
  if (own.ok()) {
    const Batch& batch = batches_[static_cast<size_t>(apply_slot_)];
    for (int r = 0; r < world_; ++r) {
      send_counts[r] = batch.send_counts[r] * record;
      recv_counts[r] = batch.recv_counts[r] * record;
    }
  }
  // Every rank knows what it will receive from the Resolve, unless a rank sends nothing: the
  // counts go first so a rank that refused its arguments does not break the others' exchange.
  std::vector<int64_t>& incoming = buffers->float_incoming;
  std::vector<float>& received = buffers->floats_received;
  RECSDK_RETURN_IF_ERROR(
      Exchange(name(), "sending gradients to their owners", [&](Communicator& c, auto d) {
        return c.ExchangeV<float>(send, send_counts, &received, &incoming, d,
                                  CallTag{step, grads_label_});
      }));
  RECSDK_RETURN_IF_ERROR(own);
  if (incoming != recv_counts) {
    return absl::AbortedError(fmt::format(
        "sharded table \"{}\": another rank sent no gradients for this step's keys (its own "
        "error says why); the update is skipped on every rank",
        name()));
  }
  std::vector<int64_t>& from = buffers->grad_from;
  from.assign(world_, 0);
  for (int r = 1; r < world_; ++r) from[r] = from[r - 1] + recv_counts[r - 1];
  return ApplyReceived(received, from, step, *buffers);
}

// ResolveGroup: as each member's Resolve, with one exchange of keys and one of rows for all of
// them. Rank j's block of the key exchange: one header record per member (its record count in
// the `key` field), then each member's records in member order; the rows come back in the same
// sections, whose sizes both sides know from the key exchange.
Status ShardedTable::ResolveGroup(absl::Span<const GroupResolve> members) {
  const size_t m = members.size();
  if (m == 0) return absl::OkStatus();
  const int world = members.front().table->world_;
  for (const GroupResolve& g : members) {
    if (g.table == nullptr || g.table->world_ != world) {
      return absl::InvalidArgumentError(fmt::format(
          "ShardedTable::ResolveGroup: member {} is {}; pass sharded tables of one world",
          &g - members.data(), g.table == nullptr ? "null" : g.table->name()));
    }
  }
  {
    std::vector<PsMember> announced(m);
    for (size_t t = 0; t < m; ++t) announced[t] = {members[t].table->name(), members[t].mode};
    RECSDK_RETURN_IF_ERROR(AnnounceExchange(PsCommand::kResolveGroup, -1, announced));
  }
  std::vector<int> slots(m);
  std::vector<Status> own(m);
  // Each member's buffers, from its table (a table may appear once per group).
  std::vector<std::unique_ptr<ExchangeBuffers>> buffers(m);
  absl::Cleanup give_back = [&] {
    for (size_t t = 0; t < m; ++t) members[t].table->GiveBack(std::move(buffers[t]));
  };
  for (size_t t = 0; t < m; ++t) {
    ShardedTable& table = *members[t].table;
    buffers[t] = table.TakeBuffers();
    ++table.generation_;
    slots[t] = static_cast<int>(table.generation_ % 2);
    own[t] = table.BeginResolve(slots[t], members[t].keys, members[t].counts, members[t].times,
                                members[t].mode, members[t].rows, *buffers[t]);
  }
  auto batch_of = [&](size_t t) -> Batch& {
    return members[t].table->batches_[static_cast<size_t>(slots[t])];
  };
  // The group's arrays live in the first member's buffers (kept across steps like each
  // member's own), so a step's group exchange allocates nothing once the batches reach their size.
  ExchangeBuffers& group = *buffers.front();
  // The key exchange: per destination, the headers then the members' sections.
  std::vector<int64_t>& send_counts = group.group_send_counts;
  send_counts.assign(world, 0);
  for (int j = 0; j < world; ++j) {
    send_counts[j] = static_cast<int64_t>(m);
    for (size_t t = 0; t < m; ++t) send_counts[j] += batch_of(t).send_counts[j];
  }
  std::vector<KeyRecord>& send = group.group_keys;
  {
    int64_t total = 0;
    for (int64_t c : send_counts) total += c;
    send.resize(static_cast<size_t>(total));
    size_t at = 0;
    std::vector<int64_t>& read = group.next;  // per member, its next record to send
    read.assign(m, 0);
    for (int j = 0; j < world; ++j) {
      for (size_t t = 0; t < m; ++t) send[at++] = {batch_of(t).send_counts[j], 0, 0};
      for (size_t t = 0; t < m; ++t) {
        const int64_t c = batch_of(t).send_counts[j];
        std::copy_n(buffers[t]->send.data() + read[t], c, send.data() + at);
        read[t] += c;
        at += static_cast<size_t>(c);
      }
    }
  }
  const std::string& label = members.front().table->keys_label_;
  std::vector<KeyRecord>& received = group.group_received;
  std::vector<int64_t>& recv_counts = group.group_recv_counts;
  RECSDK_RETURN_IF_ERROR(Exchange(
      fmt::format("{} and {} more", members.front().table->name(), m - 1),
      "sending the keys of a group of tables to their owners", [&](Communicator& c, auto d) {
        return c.ExchangeV<KeyRecord>(send, send_counts, &received, &recv_counts, d,
                                      CallTag{-1, label});
      }));
  // Split each source's block into the members' sections (each member's `received`).
  for (size_t t = 0; t < m; ++t) {
    batch_of(t).recv_counts.assign(world, 0);
    buffers[t]->received.clear();
  }
  size_t at = 0;
  for (int r = 0; r < world; ++r) {
    const size_t end = at + static_cast<size_t>(recv_counts[r]);
    if (recv_counts[r] < static_cast<int64_t>(m)) {
      return absl::InternalError(fmt::format(
          "ShardedTable::ResolveGroup: rank {} sent {} records, fewer than the {} section "
          "headers; every rank must group the same tables (this is a bug)",
          r, recv_counts[r], m));
    }
    size_t body = at + m;
    for (size_t t = 0; t < m; ++t) {
      const int64_t c = received[at + t].key;
      if (c < 0 || body + static_cast<size_t>(c) > end) {
        return absl::InternalError(fmt::format(
            "ShardedTable::ResolveGroup: rank {} announced {} records of table \"{}\", more than "
            "its block holds (this is a bug)",
            r, c, members[t].table->name()));
      }
      batch_of(t).recv_counts[r] = c;
      std::vector<KeyRecord>& per = buffers[t]->received;
      per.insert(per.end(), received.begin() + body, received.begin() + body + c);
      body += static_cast<size_t>(c);
    }
    at = end;
  }
  // As the owner of each member, then the rows back in one AllToAllV.
  std::vector<Status> owned(m);
  for (size_t t = 0; t < m; ++t) {
    owned[t] = members[t].table->ServeKeys(slots[t], buffers[t]->received, members[t].mode, nullptr,
                                           true, *buffers[t]);
  }
  auto record_of = [&](size_t t) { return members[t].table->config_.dim + 1; };
  std::vector<int64_t>& answer_counts = group.group_answer_counts;
  std::vector<int64_t>& back_counts = group.group_back_counts;
  answer_counts.assign(world, 0);
  back_counts.assign(world, 0);
  for (int r = 0; r < world; ++r) {
    for (size_t t = 0; t < m; ++t) {
      answer_counts[r] += batch_of(t).recv_counts[r] * record_of(t);
      back_counts[r] += batch_of(t).send_counts[r] * record_of(t);
    }
  }
  std::vector<float>& answer = group.group_floats;
  int64_t answer_total = 0;
  for (int64_t c : answer_counts) answer_total += c;
  answer.resize(static_cast<size_t>(answer_total));
  CopySections(
      world, m, [&](size_t t, int r) { return batch_of(t).recv_counts[r] * record_of(t); },
      [&](size_t t) { return buffers[t]->answer.data(); }, answer.data(), /*to_group=*/true,
      group.next);
  int64_t back_total = 0;
  for (int64_t c : back_counts) back_total += c;
  std::vector<float>& back = group.group_back;
  back.resize(static_cast<size_t>(back_total));
  const std::string& rows_label = members.front().table->rows_label_;
  RECSDK_RETURN_IF_ERROR(Exchange(
      fmt::format("{} and {} more", members.front().table->name(), m - 1),
      "sending the rows of a group of tables back from their owners", [&](Communicator& c, auto d) {
        return c.AllToAllV<float>(answer, {answer_counts, {}}, absl::MakeSpan(back),
                                  {back_counts, {}}, d, CallTag{-1, rows_label});
      }));
  // Each member's answers, contiguous in its own send order, in its slot.
  for (size_t t = 0; t < m; ++t) {
    batch_of(t).rows.resize(buffers[t]->owner.size() * static_cast<size_t>(record_of(t)));
  }
  CopySections(
      world, m, [&](size_t t, int r) { return batch_of(t).send_counts[r] * record_of(t); },
      [&](size_t t) { return batch_of(t).rows.data(); }, back.data(), /*to_group=*/false,
      group.next);
  Status first;
  for (size_t t = 0; t < m; ++t) {
    ShardedTable& table = *members[t].table;
    Status s = !owned[t].ok() ? table.OwnerFailed(owned[t])
               : !own[t].ok() ? own[t]
                              : table.FinishResolve(slots[t], true, buffers[t]->owner,
                                                    members[t].keys, members[t].rows);
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

// ApplyGroup: as each member's ApplyGradients, with one exchange of gradients. A rank whose
// arguments for any member are wrong sends no gradient of any member, and every rank then skips
// the whole group's update (the sections could not be told apart otherwise).
Status ShardedTable::ApplyGroup(absl::Span<const GroupApply> members) {
  const size_t m = members.size();
  if (m == 0) return absl::OkStatus();
  const int world = members.front().table->world_;
  for (const GroupApply& g : members) {
    if (g.table == nullptr || g.table->world_ != world) {
      return absl::InvalidArgumentError(
          fmt::format("ShardedTable::ApplyGroup: member {} is {}; pass sharded tables of one world",
                      &g - members.data(), g.table == nullptr ? "null" : g.table->name()));
    }
  }
  {
    std::vector<PsMember> announced(m);
    for (size_t t = 0; t < m; ++t) announced[t] = {members[t].table->name(), LookupMode::kTrain};
    RECSDK_RETURN_IF_ERROR(
        AnnounceExchange(PsCommand::kApplyGroup, members.front().step, announced));
  }
  // Each member's buffers, from its table; the first member's also hold the group's arrays.
  std::vector<std::unique_ptr<ExchangeBuffers>> buffers(m);
  absl::Cleanup give_back = [&] {
    for (size_t t = 0; t < m; ++t) members[t].table->GiveBack(std::move(buffers[t]));
  };
  for (size_t t = 0; t < m; ++t) buffers[t] = members[t].table->TakeBuffers();
  ExchangeBuffers& group = *buffers.front();
  Status own;
  for (size_t t = 0; t < m && own.ok(); ++t) {
    own =
        members[t].table->PrepareGradients(members[t].rows, members[t].grads, &buffers[t]->floats);
  }
  auto batch_of = [&](size_t t) -> const Batch& {
    const ShardedTable& table = *members[t].table;
    return table.batches_[static_cast<size_t>(table.apply_slot_)];
  };
  std::vector<int64_t>& send_counts = group.group_send_counts;
  std::vector<int64_t>& recv_counts = group.group_recv_counts;
  send_counts.assign(world, 0);
  recv_counts.assign(world, 0);
  std::vector<float>& send = group.group_floats;
  send.clear();
  if (own.ok()) {
    int64_t total = 0;
    for (size_t t = 0; t < m; ++t) total += static_cast<int64_t>(buffers[t]->floats.size());
    send.resize(static_cast<size_t>(total));
    size_t at = 0;
    for (size_t t = 0; t < m; ++t) buffers[t]->grad_from.assign(1, 0);  // read position
    for (int j = 0; j < world; ++j) {
      for (size_t t = 0; t < m; ++t) {
        const int64_t record = members[t].table->config_.dim + 1;
        const size_t c = static_cast<size_t>(batch_of(t).send_counts[j] * record);
        int64_t& read = buffers[t]->grad_from[0];
        std::copy_n(buffers[t]->floats.data() + read, c, send.data() + at);
        read += static_cast<int64_t>(c);
        at += c;
        send_counts[j] += static_cast<int64_t>(c);
        recv_counts[j] += batch_of(t).recv_counts[j] * record;
      }
    }
  }
  const int64_t step = members.front().step;
  std::vector<int64_t>& incoming = group.group_back_counts;
  std::vector<float>& received = group.group_back;
  RECSDK_RETURN_IF_ERROR(Exchange(
      fmt::format("{} and {} more", members.front().table->name(), m - 1),
      "sending the gradients of a group of tables to their owners", [&](Communicator& c, auto d) {
        return c.ExchangeV<float>(send, send_counts, &received, &incoming, d,
                                  CallTag{step, members.front().table->grads_label_});
      }));
  RECSDK_RETURN_IF_ERROR(own);
  if (incoming != recv_counts) {
    return absl::AbortedError(fmt::format(
        "sharded tables \"{}\" and {} more: another rank sent no gradients for this step's keys "
        "(its own error says why); the update of the group is skipped on every rank",
        members.front().table->name(), m - 1));
  }
  // Each member reads its sections where they landed: where each rank's records for it start.
  for (size_t t = 0; t < m; ++t) buffers[t]->grad_from.assign(world, 0);
  int64_t at = 0;
  for (int r = 0; r < world; ++r) {
    for (size_t t = 0; t < m; ++t) {
      buffers[t]->grad_from[r] = at;
      at += batch_of(t).recv_counts[r] * (members[t].table->config_.dim + 1);
    }
  }
  Status first;
  for (size_t t = 0; t < m; ++t) {
    Status s = members[t].table->ApplyReceived(received, buffers[t]->grad_from, members[t].step,
                                               *buffers[t]);
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

Communicator* ShardedTable::Channel(const void* owner) const {
  std::lock_guard<std::mutex> lock(slots_mu_);
  auto it = channels_.find(owner);
  return it == channels_.end() ? nullptr : it->second.comm.get();
}

double ShardedTable::ChannelTimeout(const void* owner) const {
  std::lock_guard<std::mutex> lock(slots_mu_);
  auto it = channels_.find(owner);
  return it == channels_.end() ? 0 : it->second.timeout_s;
}

namespace {
// LastStage: the number of the last key stage whose channels this process opened (each stage
// opens its tables' channels one after another on the training thread, the first with index 0);
// the same on every worker, since every worker starts the same stages in the same order.
std::atomic<int64_t>& LastStage() {
  static std::atomic<int64_t> last{-1};
  return last;
}
}  // namespace

Status ShardedTable::OpenChannel(const void* owner, const internal::ChannelSpec& spec) {
  if (spec.count < 1 || spec.index < 0 || spec.index >= spec.count) {
    return absl::InvalidArgumentError(
        fmt::format("sharded table \"{}\": a key stage's channel {} of {} tables", name(),
                    spec.index, spec.count));
  }
  OpenChannelState state;
  state.spec = spec;
  state.stage = spec.index == 0 ? LastStage().fetch_add(1) + 1 : LastStage().load();
  // With ps ranks the ps opens the same channel (a ps makes no stage of its own: it follows).
  const PsMember member{name(), spec.mode};
  RECSDK_RETURN_IF_ERROR(
      AnnounceStageCall(PsCommand::kOpenChannel, state.stage, -1, member, spec.index, spec.count));
  // A communicator of its own (under MPI a duplicate of the world's): creating it is a
  // collective of the ranks' training threads, at the same point of their programs.
  Status s = WithProcessCommunicator([&](Communicator&, const DistributedOptions& o) -> Status {
    state.timeout_s = o.collective_timeout_s;
    absl::StatusOr<std::unique_ptr<Communicator>> comm =
        CreateCommunicator(DeadlineAfterSeconds(o.collective_timeout_s));
    if (!comm.ok()) return comm.status();
    state.comm = std::move(*comm);
    return absl::OkStatus();
  });
  if (!s.ok()) {
    return Status(s.code(), fmt::format("sharded table \"{}\": opening the key stage's channel: {}",
                                        name(), s.message()));
  }
  if (state.comm->size() != world_ || state.comm->rank() != rank_) {
    return absl::FailedPreconditionError(fmt::format(
        "sharded table \"{}\" is rank {} of {}, but the key stage's channel says rank {} of {}; "
        "train under one launcher",
        name(), rank_, world_, state.comm->rank(), state.comm->size()));
  }
  std::lock_guard<std::mutex> lock(slots_mu_);
  channels_[owner] = std::move(state);
  return absl::OkStatus();
}

void ShardedTable::CloseChannel(const void* owner) {
  ReleaseLeased(owner, std::numeric_limits<int64_t>::max());
  std::unique_ptr<Communicator> comm;
  {
    std::lock_guard<std::mutex> lock(slots_mu_);
    auto it = channels_.find(owner);
    if (it == channels_.end()) return;
    comm = std::move(it->second.comm);
    channels_.erase(it);
  }
}

Status ShardedTable::AgreeBatch(const void* owner, int64_t batch, std::array<float, 2>* votes) {
  Communicator* channel = Channel(owner);
  if (channel == nullptr) {
    return absl::FailedPreconditionError(fmt::format(
        "sharded table \"{}\": a key stage agrees on batch {} without a channel (OpenChannel)",
        name(), batch));
  }
  // A ps waits for the workers' next vote while their heartbeat says they live (ps_heartbeat.h):
  // a worker's loop may pause longer than the timeout between batches.
  const bool ps = owner_first_ > 0 && rank_ >= owner_first_;
  Status s = channel->AllReduce(absl::MakeSpan(*votes), ReduceOp::kSum,
                                DeadlineAfterSeconds(ChannelTimeout(owner)),
                                CallTag{batch, agree_label_, ps ? PsKeepAlive() : nullptr});
  if (s.ok()) return s;
  return Status(s.code(),
                fmt::format("sharded table \"{}\", key stage batch {}: agreeing on it: {}", name(),
                            batch, s.message()));
}

Status ShardedTable::ResolveLeased(absl::Span<const int64_t> unique_keys,
                                   absl::Span<const uint32_t> counts,
                                   absl::Span<const int64_t> timestamps, LookupMode mode,
                                   absl::Span<uint32_t> rows, const internal::ResolveLease& lease) {
  Communicator* channel = Channel(lease.owner);
  if (channel == nullptr) {
    return absl::FailedPreconditionError(fmt::format(
        "sharded table \"{}\": a key stage resolves batch {} without a channel (OpenChannel)",
        name(), lease.batch));
  }
  int slot = -1;
  {
    std::lock_guard<std::mutex> lock(slots_mu_);
    bool older = false;
    for (int s = 2; s < kSlots; ++s) {
      Batch& b = batches_[static_cast<size_t>(s)];
      if (b.leased) {
        older |= b.owner == lease.owner && b.lease_batch < lease.batch;
      } else if (slot < 0) {
        slot = s;
      }
    }
    if (slot < 0) {
      // The others may already be in this batch's exchange: they wait (within the deadline)
      // until this rank's consumer has released a batch and the stage tries again.
      if (older) {
        return absl::UnavailableError(fmt::format(
            "sharded table \"{}\": every batch slot is held by batches resolved ahead; retry "
            "once the consumer has taken one",
            name()));
      }
      return absl::FailedPreconditionError(fmt::format(
          "sharded table \"{}\": key stages hold {} batches ahead of their steps, the most a "
          "sharded table keeps; lower prefetch_batches or run fewer stages at once",
          name(), kSlots - 2));
    }
    Batch& b = batches_[static_cast<size_t>(slot)];
    b.leased = true;
    b.pulled = false;
    b.owner = lease.owner;
    b.lease_batch = lease.batch;
  }
  return ResolveInto(slot, channel, &lease, unique_keys, counts, timestamps, mode, rows);
}

Status ShardedTable::PullLeased(const void* owner, int64_t lease_batch, bool failed) {
  int slot = -1;
  {
    std::lock_guard<std::mutex> lock(slots_mu_);
    for (int s = 2; s < kSlots && !failed; ++s) {
      const Batch& b = batches_[static_cast<size_t>(s)];
      if (b.leased && b.owner == owner && b.lease_batch == lease_batch) slot = s;
    }
    // Its step runs now (or fails): its keys are in flight no longer.
    if (slot >= 0) batches_[static_cast<size_t>(slot)].pulled = true;
  }
  Batch* batch = slot >= 0 ? &batches_[static_cast<size_t>(slot)] : nullptr;
  const int64_t dim = config_.dim;
  // As owner: each record this rank served for the batch gets its row as it is now, gathered
  // straight into its place (a sentinel's record gets the sentinel's row, which its asker, told
  // by the record's flag at ResolveLeased, never reads), in arrays kept across calls.
  std::unique_ptr<ExchangeBuffers> buffers = TakeBuffers();
  absl::Cleanup give_back = [&] { GiveBack(std::move(buffers)); };
  std::vector<float>& send = buffers->floats;
  std::vector<int64_t>& send_counts = buffers->float_send_counts;
  std::vector<int64_t>& expected = buffers->float_recv_counts;
  send.clear();
  send_counts.assign(world_, 0);
  expected.assign(world_, 0);
  Status own;
  if (batch != nullptr) {
    send.resize(batch->served_rows.size() * static_cast<size_t>(dim));
    own = shard_->Gather(batch->served_rows, absl::MakeSpan(send));
    if (own.ok()) {
      for (int r = 0; r < world_; ++r) {
        send_counts[r] = batch->recv_counts[r] * dim;
        expected[r] = batch->send_counts[r] * dim;
      }
    } else {
      send.clear();
    }
  } else if (!failed) {
    own = absl::FailedPreconditionError(fmt::format(
        "sharded table \"{}\": the key stage brings the rows of batch {}, which it did not "
        "resolve on this rank",
        name(), lease_batch));
  }
  {
    // Announced without slots_mu_: the announcement waits for the other workers, whose stages
    // may be in an exchange with this rank's stage, which takes slots_mu_.
    int64_t stage = -1;
    internal::ChannelSpec spec;
    {
      std::lock_guard<std::mutex> lock(slots_mu_);
      if (auto it = channels_.find(owner); it != channels_.end()) {
        stage = it->second.stage;
        spec = it->second.spec;
      }
    }
    const PsMember member{name(), spec.mode};
    RECSDK_RETURN_IF_ERROR(
        AnnounceStageCall(PsCommand::kPull, stage, lease_batch, member, spec.index, spec.count));
  }
  std::vector<int64_t>& incoming = buffers->float_incoming;
  // The rows land in the slot, where the batch's lookups read them (rows_pending until checked).
  std::vector<float> failed_back;
  std::vector<float>* back = batch != nullptr ? &batch->rows : &failed_back;
  RECSDK_RETURN_IF_ERROR(
      Exchange(name(), "bringing a key stage batch's rows", [&](Communicator& c, auto d) {
        return c.ExchangeV<float>(send, send_counts, back, &incoming, d,
                                  CallTag{lease_batch, rows_label_});
      }));
  RECSDK_RETURN_IF_ERROR(own);
  if (batch == nullptr) return absl::OkStatus();  // this rank's batch failed; it took part
  if (incoming != expected) {
    return absl::AbortedError(fmt::format(
        "sharded table \"{}\": another rank sent no rows for key stage batch {} (its own error "
        "says why)",
        name(), lease_batch));
  }
  batch->row_stride = dim;
  batch->row_offset = 0;
  batch->rows_pending = false;
  if (batch->train) {
    apply_slot_ = slot;
    apply_serial_ = batch->serial;
  }
  return absl::OkStatus();
}

void ShardedTable::ReleaseLeased(const void* owner, int64_t before_batch) {
  {
    std::lock_guard<std::mutex> lock(slots_mu_);
    for (int s = 2; s < kSlots; ++s) {
      Batch& b = batches_[static_cast<size_t>(s)];
      if (!b.leased || b.owner != owner || b.lease_batch >= before_batch) continue;
      const uint64_t serial = b.serial;
      b = Batch{};
      b.serial = serial;  // an ApplyGradients of the released batch is refused
    }
  }
  internal::ReleaseLeases(*shard_, owner, before_batch);
}

int64_t ShardedTable::LeasedOldestTime(const void* owner, int64_t lease_batch) const {
  std::lock_guard<std::mutex> lock(slots_mu_);
  for (int s = 2; s < kSlots; ++s) {
    const Batch& b = batches_[static_cast<size_t>(s)];
    if (b.leased && b.owner == owner && b.lease_batch == lease_batch) return b.oldest_served;
  }
  return std::numeric_limits<int64_t>::max();
}

Status ShardedTable::RowAddresses(absl::Span<const uint32_t>, absl::Span<float*>) {
  return absl::FailedPreconditionError(fmt::format(
      "table \"{}\" is sharded: its rows live on their owners' ranks and have no address here; "
      "use a by-row optimizer (Create refuses the by-address ones)",
      name()));
}

Status ShardedTable::ApplyGradientsByAddress(absl::Span<float* const>, absl::Span<const float>,
                                             int64_t) {
  return RowAddresses({}, {});
}

Status ShardedTable::SetAccessThreshold(int64_t access_threshold) {
  Status s = shard_->SetAccessThreshold(access_threshold);
  if (s.ok()) config_.access_threshold = shard_->config().access_threshold;
  return s;
}

uint32_t ShardedTable::FindRow(int64_t key) const {
  return KeyOwner(key) == rank_ ? shard_->FindRow(key) : kDefaultRow;
}

StatusOr<std::vector<float>> ShardedTable::ReadRow(int64_t key) const {
  const int owner = KeyOwner(key);
  if (owner != rank_) {
    return absl::NotFoundError(fmt::format(
        "table \"{}\": key {} is held by rank {} of {}, not by this rank {}; read it there", name(),
        key, owner, world_, rank_));
  }
  return shard_->ReadRow(key);
}

Status ShardedTable::ImportNpy(const std::string& keys_path, const std::string& values_path) {
  return absl::FailedPreconditionError(fmt::format(
      "table \"{}\" is sharded over {} ranks and ImportNpy's files (\"{}\", \"{}\") hold keys "
      "of every rank; import them in a single-process run and save a checkpoint, then restore "
      "it here",
      name(), world_, keys_path, values_path));
}

ShardedTable* ShardedBehind(EmbeddingTable* table) {
  while (table != nullptr) {
    if (auto* sharded = dynamic_cast<ShardedTable*>(table)) return sharded;
    auto* wrapper = dynamic_cast<internal::ForwardingTable*>(table);
    table = wrapper != nullptr ? wrapper->forwarded() : nullptr;
  }
  return nullptr;
}

Status AgreeShardedDataTimes(absl::Span<EmbeddingTable* const> tables) {
  std::vector<ShardedTable*> sharded;
  for (EmbeddingTable* t : tables) {
    if (ShardedTable* s = ShardedBehind(t)) sharded.push_back(s);
  }
  return ShardedTable::AgreeDataTimes(sharded);
}

StatusOr<std::unique_ptr<EmbeddingTable>> MaybeShardTable(std::unique_ptr<EmbeddingTable> table) {
  // The workers (get_rank_size) and, with ps ranks, the ps ranks after them.
  RECSDK_ASSIGN_OR_RETURN(const int workers, get_rank_size());
  RECSDK_ASSIGN_OR_RETURN(const int rank, get_rank_id());
  RECSDK_ASSIGN_OR_RETURN(const JobLayout layout, CurrentJobLayout());
  if (layout.ps == 0 && workers <= 1) return table;
  if (table->config().is_dp) {
    // Replicated on the workers; a ps holds no replica (it never looks the table up).
    if (layout.is_ps) return table;
    return ReplicatedTable::Create(std::move(table), rank, workers);
  }
  return ShardedTable::Create(std::move(table), rank, layout.world(), layout.owner_first(),
                              layout.ps > 0 ? layout.owners() : 0);
}

}  // namespace recsdk::dist
