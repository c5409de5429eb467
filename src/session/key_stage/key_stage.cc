// key_stage.cc: KeyStage (the spec's start_asc_pipeline): pulls Batches from a Dataset on
// key_process_thread_num worker threads, does the key work of the lookups ModifyGraph moved out of
// the graph, and hands the training loop one step's feeds at a time, in batch order.
//
// A stage serves one channel (KeyStageChannel): the moved lookups with is_train (training) or
// those without (evaluation); the other channel's lookups are not part of its plan at all.
//
// Per batch and table, the keys of all the table's lookups with one is_train (every feature of
// every sparse_lookup call the stage handles) are deduplicated in one pass and resolved with one
// Resolve (TableKeyWork, src/table/table_key_work.h), then split back into each lookup's outputs.
//
// Threading: workers take batches in order (sequence numbers assigned under dataset_mu, which
// also serialises the non-thread-safe Dataset). Dedup runs in parallel across batches; resolving
// keys to rows is serialised per table in batch order by a ticket (tables[t].ticket), under the
// table's key lock (LockedTable::LockKeys: exclusive for training lookups, shared for evaluation
// ones), so admission counts and row insertion happen exactly as the in-graph lookups would do
// them. `mu` guards the queue state and the tickets; lock order is a table's locks before mu.
// At most prefetch_batches
// batches are read and not yet consumed.
//
// Checkpoints (Quiesce): each Quiesce adds a stop (`stops`), a batch count reading must not pass;
// `read_limit`, the lowest stop, caps the batches workers may take (consumed + outstanding), so
// the tables stop changing ahead of the step. Stops are kept, not replaced, so savers on one stage
// (the Estimator's CheckpointSaverHook beside a user's) each get their step: a later Quiesce never
// raises an earlier one's limit. Next drops the stops the loop has reached when it needs an
// unread batch, and the next stop becomes the limit.
//
// Deterministic mode (SessionConfig::deterministic): how far the stage has run ahead when a hook
// runs between steps (set_threshold, a checkpoint, eviction, evaluation) would otherwise depend
// on timing, and it decides which keys were admitted and inserted before the change. So the
// window moves only at Next: Next(i) releases batch i-1 and keeps batch i counted until the next
// Next, and WaitForWindow (called between the step and the hooks) waits until the window is
// prepared. The stage then holds exactly the batches before i + prefetch. The newest batch's key
// work still overlaps step i; only a stage slower than the step makes WaitForWindow wait. The
// batch Next handed out and still holds counts in `outstanding` but was consumed: in_flight()
// leaves it out where Quiesce counts what was read.
//
// Invariant (DESIGN.md): the stage never frees a row a prepared batch refers to. It only inserts
// rows (Resolve); eviction runs through AfterStep, which caps the eviction cutoff below the
// oldest timestamp of every batch resolved but not yet consumed.
#if defined(__linux__)
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "fmt/format.h"
#include "recsdk/embedding.h"
#include "recsdk/pipeline.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "src/session/key_stage/key_stage_registry.h"
#include "src/session/session_resources.h"
#include "src/session/table_ops.h"
#include "src/table/collective_table.h"
#include "src/table/eviction.h"
#include "src/table/forwarding_table.h"

namespace recsdk {

namespace {

using internal::LookupAttrs;
using internal::LookupBatch;
using internal::TableKeyWork;
using internal::TableResource;

// InFlightEvictTable: a table whose EvictStale keeps the keys last accessed at or after
// `in_flight_from` (the oldest data time of the stage's batches in flight), so that EvictHook's
// trigger runs unchanged on the key stage's tables. The rule is EvictStaleKeys' (eviction.h), the
// one every EvictStale runs; a sharded table (`collective`) applies it where its keys live
// (CollectiveTable::EvictStaleKeeping: with ps ranks, on the ps, which also keeps the batches it
// resolved ahead).
class InFlightEvictTable final : public internal::ForwardingTable {
 public:
  InFlightEvictTable(EmbeddingTable* inner, int64_t in_flight_from,
                     internal::CollectiveTable* collective)
      : ForwardingTable(inner), in_flight_from_(in_flight_from), collective_(collective) {}

  StatusOr<int64_t> EvictStale() override {
    if (collective_ != nullptr) return collective_->EvictStaleKeeping(in_flight_from_);
    return internal::EvictStaleKeys(*inner(), in_flight_from_);
  }

 private:
  int64_t in_flight_from_;
  internal::CollectiveTable* collective_;
};

struct LookupPlan {
  LookupAttrs attrs;  // attrs.name is the SparseLookup node
  std::vector<std::string> id_columns;
  std::string mask_column, timestamp_column;
};

// ModeGroup: the lookups of one table with one is_train: their keys are deduplicated together
// and resolved with one Resolve per batch.
struct ModeGroup {
  bool is_train = true;
  std::vector<int> lookups;  // into Impl::lookups, in graph order
};

struct TablePlan {
  std::string name;
  TableResource* resource = nullptr;
  std::vector<ModeGroup> groups;             // in the graph order of their first lookup
  int64_t ticket = 0;                        // next batch allowed to resolve (guarded by Impl::mu)
  std::map<int64_t, int64_t> inflight_time;  // batch -> oldest key time (guarded by Impl::mu)
};

struct Prepared {
  Batch batch;
  FeedList feeds;
  Status status;
};

}  // namespace

struct KeyStage::Impl {
  Session* session = nullptr;
  std::unique_ptr<Dataset> dataset;
  KeyStageOptions options;
  std::vector<std::pair<std::string, std::string>> column_feeds;  // placeholder, column
  std::vector<LookupPlan> lookups;
  std::vector<TablePlan> tables;
  std::vector<TableResource*> all_tables;  // every table of the session (eviction)

  std::mutex dataset_mu;
  int64_t next_read = 0;  // guarded by dataset_mu

  std::mutex mu;
  std::condition_variable cv;
  int64_t outstanding = 0;  // read and not consumed
  int64_t next_consume = 0;
  // stops: the batch counts (from start_batch) Quiesce asked reading to stop at, each held until
  // the training loop reaches it. Workers take a batch only while
  // next_consume + outstanding < read_limit, the lowest stop (none: no limit).
  std::set<int64_t> stops;
  int64_t read_limit = std::numeric_limits<int64_t>::max();
  // AddStop, DropReachedStops: change `stops` and keep read_limit its lowest. Under mu.
  void AddStop(int64_t at) {
    stops.insert(at);
    read_limit = *stops.begin();
  }
  void DropReachedStops() {
    stops.erase(stops.begin(), stops.upper_bound(next_consume));
    read_limit = stops.empty() ? std::numeric_limits<int64_t>::max() : *stops.begin();
  }
  int64_t end_seq = std::numeric_limits<int64_t>::max();
  bool ended = false;
  bool stop = false;
  bool deterministic = false;  // SessionConfig::deterministic: the window moves only at Next
  bool holding = false;        // deterministic: the batch Next handed out still counts
  int64_t preparing = 0;       // batches a worker took and has not yet made ready (or ended)
  // in_flight: batches read or being read and not yet handed out by Next (`outstanding` less
  // the batch a deterministic stage still holds).
  int64_t in_flight() const { return outstanding - (holding ? 1 : 0); }
  std::map<int64_t, Prepared> ready;
  std::vector<std::thread> workers;
  std::atomic<int64_t> keys{0};
  bool tiered = false;    // the tables have host tiers: batches hold leases on their rows
  bool released = false;  // Stop released the leases
  // detached: the Session was closed (DetachKeyStages): its tables are gone, so nothing may
  // touch them; Next and AfterStep answer FailedPrecondition. Set once, after Stop.
  std::atomic<bool> detached{false};

  // sharded: some table of the plan is sharded over the ranks (a CollectiveTable): one worker,
  // ShardedWorker, which agrees with the other ranks' stages on every batch (see there).
  bool sharded = false;
  internal::CollectiveTable* voter = nullptr;  // the first sharded table: the votes' channel

  void Worker();
  void ShardedWorker();
  void SetWorkerNice() const;
  Status ProcessKeys(int64_t seq, const Batch& batch, FeedList* feeds);
  // ReadNext: the dataset's next batch into `batch`; false at its end.
  StatusOr<bool> ReadNext(Batch* batch, int64_t* seq);
};

namespace {
// CollectiveOf: the sharded table behind a plan's table, or null.
internal::CollectiveTable* CollectiveOf(const TablePlan& t) {
  return dynamic_cast<internal::CollectiveTable*>(&t.resource->table()->SelfSynchronised());
}
}  // namespace

Status KeyStage::Impl::ProcessKeys(int64_t seq, const Batch& batch, FeedList* feeds) {
  // Dedup of every table and mode first: it needs no table, so batches overlap here.
  std::vector<std::vector<TableKeyWork>> work(tables.size());
  Status prep;
  for (size_t t = 0; t < tables.size() && prep.ok(); ++t) {
    work[t].resize(tables[t].groups.size());
    for (size_t g = 0; g < tables[t].groups.size() && prep.ok(); ++g) {
      std::vector<LookupBatch> inputs;
      for (int l : tables[t].groups[g].lookups) {
        const LookupPlan& p = lookups[l];
        LookupBatch in;
        in.attrs = &p.attrs;
        for (const std::string& c : p.id_columns) {
          const Tensor* ids = batch.column(c);
          if (ids == nullptr) {
            prep = absl::NotFoundError(fmt::format(
                "key stage: sparse_lookup \"{}\" reads column \"{}\" but the batch has none ({})",
                p.attrs.name, c, batch.DebugString()));
            break;
          }
          in.ids.push_back(ids);
        }
        if (!prep.ok()) break;
        in.mask = p.mask_column.empty() ? nullptr : batch.column(p.mask_column);
        in.timestamps = p.timestamp_column.empty() ? nullptr : batch.column(p.timestamp_column);
        if (!p.timestamp_column.empty() && in.timestamps == nullptr) {
          prep = absl::NotFoundError(fmt::format(
              "key stage: sparse_lookup \"{}\" reads timestamps from column \"{}\" but the batch "
              "has none",
              p.attrs.name, p.timestamp_column));
          break;
        }
        inputs.push_back(std::move(in));
      }
      if (!prep.ok()) break;
      work[t][g].table_name = tables[t].name;
      prep = internal::PrepareTableKeys(inputs, &work[t][g]);
    }
  }
  // Resolve per table in batch order. Tickets advance even on an error so no batch waits
  // forever for this one.
  Status status = prep;
  for (size_t t = 0; t < tables.size(); ++t) {
    TablePlan& table = tables[t];
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return stop || table.ticket == seq; });
      // A sharded stage's one worker finishes the batch: the other ranks are in its exchanges.
      if (stop && !sharded) return absl::CancelledError("key stage stopped");
    }
    internal::CollectiveTable* collective = CollectiveOf(table);
    if (!status.ok() && collective != nullptr) {
      // The other ranks resolve this batch: take part with no keys, so that none waits.
      const internal::ResolveLease lease{this, seq};
      internal::TableGuard guard = table.resource->table()->LockKeys(
          options.channel == KeyStageChannel::kTrain ? LookupMode::kTrain : LookupMode::kEval);
      std::vector<uint32_t> none;
      (void)collective->ResolveLeased({}, {}, {}, LookupMode::kEval, absl::MakeSpan(none), lease);
    }
    if (status.ok()) {
      internal::LockedTable* locked = table.resource->table();
      for (size_t g = 0; g < table.groups.size() && status.ok(); ++g) {
        TableKeyWork& w = work[t][g];
        const bool train = table.groups[g].is_train;
        // Runs under the table's key lock, and records the batch's oldest key time before the
        // lock goes: AfterStep takes every table's locks, so it always sees (and protects) these
        // rows.
        // Tiered tables pin the batch's device rows under this stage's lease until the step
        // that uses them is done (Next releases them).
        const internal::ResolveLease lease{this, seq};
        const LookupMode mode = train ? LookupMode::kTrain : LookupMode::kEval;
        auto resolve = [&](EmbeddingTable* emb) {
          status = internal::ResolveTableKeys(emb, mode, &w, &lease);
          if (!status.ok()) return;
          int64_t oldest = w.has_time ? w.min_time : std::numeric_limits<int64_t>::max();
          if (!w.has_time || w.has_untimed_lookup) oldest = std::min(oldest, emb->data_time());
          // As owner, a sharded table served keys other ranks asked for: protect those too.
          if (collective != nullptr)
            oldest = std::min(oldest, collective->LeasedOldestTime(this, seq));
          std::lock_guard<std::mutex> lock(mu);
          auto [it, inserted] = table.inflight_time.try_emplace(seq, oldest);
          it->second = std::min(it->second, oldest);
        };
        for (;;) {
          // The loop's position before this attempt: if it moves on meanwhile, its releases may
          // have come too late for the attempt, so a retry must not wait for another move.
          int64_t seen;
          {
            std::lock_guard<std::mutex> lock(mu);
            seen = next_consume;
          }
          {
            internal::TableGuard guard = locked->LockKeys(mode);
            resolve(guard.get());
          }
          // Unavailable: the device tier is full of rows of batches this stage resolved ahead
          // and the loop has not consumed yet. Nothing changed; wait for the loop to take a
          // batch (which releases older rows), then plan again. The batch the loop waits for
          // never gets here (the table then answers with its "two batches" error instead).
          if (!absl::IsUnavailable(status)) break;
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return stop || next_consume != seen; });
          if (stop) return absl::CancelledError("key stage stopped");
        }
        keys.fetch_add(static_cast<int64_t>(w.keys.size()), std::memory_order_relaxed);
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      ++table.ticket;
    }
    cv.notify_all();
  }
  RECSDK_RETURN_IF_ERROR(status);
  for (std::vector<TableKeyWork>& table_work : work) {
    for (TableKeyWork& w : table_work) {
      for (TableKeyWork::Part& part : w.parts) {
        feeds->emplace_back(part.attrs->name + ":0", std::move(part.unique_rows));
        for (size_t f = 0; f < part.restore.size(); ++f) {
          feeds->emplace_back(fmt::format("{}:{}", part.attrs->name, f + 1),
                              std::move(part.restore[f]));
        }
      }
    }
  }
  return absl::OkStatus();
}

void KeyStage::Impl::SetWorkerNice() const {
#if defined(__linux__)
  if (options.worker_nice > 0) {
    // Per thread on Linux; a failure (e.g. a sandbox that forbids it) leaves the priority as is.
    (void)setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), options.worker_nice);
  }
#endif
}

StatusOr<bool> KeyStage::Impl::ReadNext(Batch* batch, int64_t* seq) {
  std::lock_guard<std::mutex> lock(dataset_mu);
  *seq = next_read++;
  try {
    return dataset->GetNext(batch);
  } catch (const std::exception& e) {
    return absl::InternalError(fmt::format("key stage: dataset threw: {}", e.what()));
  }
}

// ShardedWorker: the one worker of a stage whose tables are sharded over the ranks. Its
// exchanges must be the same on every rank, so before each batch the ranks' stages vote on the
// table's channel (CollectiveTable::AgreeBatch): a rank without the batch (its input ended, it
// failed, or its stage stops) ends the stage on every rank at that batch (the epoch ends at the
// shortest input); a rank whose reading a checkpoint holds back (Quiesce) holds every rank back
// there (a stop at that batch on every rank, so all reach Quiescent() at the same step),
// and they vote again once it is lifted. Otherwise every rank resolves the batch.
void KeyStage::Impl::ShardedWorker() {
  SetWorkerNice();
  bool failed = false;  // a batch of this rank failed: the next vote ends the stage everywhere
  for (int64_t seq = 0;; ++seq) {
    Prepared p;
    StatusOr<bool> got = false;
    bool read = false;
    for (;;) {
      bool leaving = false;
      bool held = false;
      {
        std::unique_lock<std::mutex> lock(mu);
        // Waits for this process's own training loop (Next) or Stop, never for another rank:
        // the waits on the others are the votes and exchanges, each with its deadline. Stop
        // (the destructor calls it) always ends this wait, as in Worker.
        cv.wait(lock, [&] { return stop || failed || outstanding < options.prefetch_batches; });
        leaving = stop || failed;
        if (!leaving) {
          ++outstanding;  // counted before the vote, so a Quiesce meanwhile counts it as read
          ++preparing;
        }
        held = seq >= read_limit;
      }
      if (!leaving && !read) {
        int64_t read_seq = 0;
        got = ReadNext(&p.batch, &read_seq);
        read = true;
      }
      std::array<float, 2> votes = {leaving || !got.ok() || !*got ? 1.0f : 0.0f,
                                    held ? 1.0f : 0.0f};
      const Status agreed = voter->AgreeBatch(this, seq, &votes);
      std::unique_lock<std::mutex> lock(mu);
      if (!agreed.ok() || votes[0] > 0 || leaving) {
        if (!leaving) {
          --outstanding;
          --preparing;
        }
        ended = true;
        if (!agreed.ok() || (!leaving && !got.ok())) {
          ready[seq].status = agreed.ok() ? got.status() : agreed;
          end_seq = std::min(end_seq, seq + 1);
        } else {
          end_seq = std::min(end_seq, seq);
        }
        cv.notify_all();
        return;
      }
      if (votes[1] == 0) break;
      // Held back on some rank: hold here too, and vote again once this rank's loop lifts it.
      --outstanding;
      --preparing;
      if (seq < read_limit) AddStop(seq);
      cv.notify_all();
      // This rank's own loop lifts the limit (Next after the checkpoint) or stops the stage;
      // on Stop the next vote says so, so the other ranks end too.
      cv.wait(lock, [&] { return stop || seq < read_limit; });
    }
    for (const auto& [placeholder, column] : column_feeds) {
      if (const Tensor* t = p.batch.column(column)) p.feeds.emplace_back(placeholder, *t);
    }
    p.status = ProcessKeys(seq, p.batch, &p.feeds);
    std::lock_guard<std::mutex> lock(mu);
    if (!p.status.ok()) {
      failed = true;
      end_seq = std::min(end_seq, seq + 1);
    }
    ready[seq] = std::move(p);
    --preparing;
    cv.notify_all();
  }
}

void KeyStage::Impl::Worker() {
  SetWorkerNice();
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] {
        return stop || ended ||
               (outstanding < options.prefetch_batches && next_consume + in_flight() < read_limit);
      });
      if (stop || ended) return;
      ++outstanding;
      ++preparing;
    }
    int64_t seq = 0;
    Prepared p;
    const StatusOr<bool> got = ReadNext(&p.batch, &seq);
    if (!got.ok() || !*got) {
      std::lock_guard<std::mutex> lock(mu);
      ended = true;
      --outstanding;
      --preparing;
      if (got.ok()) {
        end_seq = std::min(end_seq, seq);
      } else {
        ready[seq].status = got.status();
        end_seq = std::min(end_seq, seq + 1);
      }
      cv.notify_all();
      return;
    }
    for (const auto& [placeholder, column] : column_feeds) {
      if (const Tensor* t = p.batch.column(column)) p.feeds.emplace_back(placeholder, *t);
    }
    p.status = ProcessKeys(seq, p.batch, &p.feeds);
    std::lock_guard<std::mutex> lock(mu);
    if (!p.status.ok()) {
      ended = true;
      end_seq = std::min(end_seq, seq + 1);
    }
    ready[seq] = std::move(p);
    --preparing;
    cv.notify_all();
  }
}

namespace {
std::mutex& RegistryMu() {
  static std::mutex mu;
  return mu;
}
// Tracked: a live stage, its Session and its Impl's detached flag (the Impl itself is private
// to KeyStage).
struct Tracked {
  KeyStage* stage;
  const Session* session;
  std::atomic<bool>* detached;
};
std::vector<Tracked>& Registry() {
  static std::vector<Tracked> stages;
  return stages;
}
void Track(const Tracked& tracked) {
  std::lock_guard<std::mutex> lock(RegistryMu());
  Registry().push_back(tracked);
}
}  // namespace

void internal::UntrackKeyStage(KeyStage* stage) {
  std::lock_guard<std::mutex> lock(RegistryMu());
  std::erase_if(Registry(), [&](const Tracked& t) { return t.stage == stage; });
}
int internal::StopAllKeyStages() {
  std::lock_guard<std::mutex> lock(RegistryMu());
  for (const Tracked& t : Registry()) t.stage->Stop();
  return static_cast<int>(Registry().size());
}
int internal::DetachKeyStages(const Session* session) {
  std::lock_guard<std::mutex> lock(RegistryMu());
  int n = 0;
  for (const Tracked& t : Registry()) {
    if (t.session != session || *t.detached) continue;
    // Stop joins the workers (none is inside a Resolve after it) and returns the leases of a
    // tiered stage while its tables still exist; from now on nothing touches them.
    t.stage->Stop();
    *t.detached = true;
    ++n;
  }
  return n;
}

namespace {
Status DetachedError(const char* what) {
  return absl::FailedPreconditionError(fmt::format(
      "KeyStage::{}: the stage's Session was closed (Session::Close or its destruction), and "
      "its tables with it; stop or destroy a stage before its Session, or start a new stage on "
      "a live Session",
      what));
}
}  // namespace

KeyStage::KeyStage(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  Track({this, impl_->session, &impl_->detached});
}
KeyStage::~KeyStage() {
  internal::UntrackKeyStage(this);
  Stop();
}

namespace {

// ThreadNum: the worker count: the option when set, else KEY_PROCESS_THREAD_NUM, else 2.
StatusOr<int> ThreadNum(const KeyStageOptions& options) {
  if (options.key_process_thread_num.has_value()) {
    if (*options.key_process_thread_num < 1) {
      return absl::InvalidArgumentError(fmt::format(
          "KeyStage: key_process_thread_num {} is below 1; use 1 or more threads (or leave it "
          "unset to use {} or the default 2)",
          *options.key_process_thread_num, kKeyProcessThreadNumEnv));
    }
    return *options.key_process_thread_num;
  }
  const char* env = std::getenv(kKeyProcessThreadNumEnv);
  if (env == nullptr) return 2;
  const std::string_view text(env);
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 1) {
    return absl::InvalidArgumentError(fmt::format(
        "KeyStage: environment variable {}=\"{}\" is not a thread count: it must be a decimal "
        "integer >= 1; set it to e.g. 4, or unset it for the default 2",
        kKeyProcessThreadNumEnv, text));
  }
  return value;
}

}  // namespace

StatusOr<std::unique_ptr<KeyStage>> KeyStage::Start(Session& session,
                                                    std::unique_ptr<Dataset> dataset,
                                                    const KeyStageOptions& options) {
  RECSDK_ASSIGN_OR_RETURN(const int threads, ThreadNum(options));
  if (options.prefetch_batches < 1) {
    return absl::InvalidArgumentError(fmt::format(
        "KeyStage: prefetch_batches {} is below 1; let the stage hold at least 1 batch ahead",
        options.prefetch_batches));
  }
  if (options.worker_nice < 0 || options.worker_nice > 19) {
    return absl::InvalidArgumentError(fmt::format(
        "KeyStage: worker_nice {} is outside 0..19; use 0 for the caller's priority or up to 19 "
        "to make the stage yield more to the training step",
        options.worker_nice));
  }
  if (dataset == nullptr) return absl::InvalidArgumentError("KeyStage: the dataset is null");
  auto impl = std::make_unique<Impl>();
  impl->session = &session;
  impl->deterministic = session.config().deterministic;
  impl->dataset = std::move(dataset);
  impl->options = options;
  impl->options.key_process_thread_num = threads;
  const Graph& g = session.graph();
  std::map<std::string, int> table_index;
  for (const Node* n : g.nodes()) {
    if (n->type() == "Placeholder" && !n->StringAttr(internal::kDatasetColumnAttr).empty()) {
      impl->column_feeds.emplace_back(n->name(), n->StringAttr(internal::kDatasetColumnAttr));
    }
    if (n->type() == internal::kTableHandleOp) {
      RECSDK_ASSIGN_OR_RETURN(TableResource * r,
                              internal::GetOrCreateTable(internal::SessionResources(session), *n));
      impl->all_tables.push_back(r);
    }
    if (n->type() != internal::kSparseLookupOp || !n->BoolAttr("moved_to_key_stage")) continue;
    LookupPlan p;
    p.attrs = internal::ReadLookupAttrs(*n);
    // The other channel's lookups belong to another stage (KeyStageChannel).
    if (p.attrs.is_train != (options.channel == KeyStageChannel::kTrain)) continue;
    auto column = [&](int i) {
      return n->input(1 + i).node->StringAttr(internal::kDatasetColumnAttr);
    };
    for (int f = 0; f < p.attrs.num_features; ++f) p.id_columns.push_back(column(f));
    if (p.attrs.has_mask) p.mask_column = column(p.attrs.mask_input());
    if (p.attrs.has_timestamps) p.timestamp_column = column(p.attrs.timestamps_input());
    auto [it, inserted] =
        table_index.try_emplace(p.attrs.table_name, static_cast<int>(impl->tables.size()));
    if (inserted) {
      TablePlan t;
      t.name = p.attrs.table_name;
      TableResource* resource = nullptr;
      for (const Node* h : g.nodes()) {
        if (h->type() == internal::kTableHandleOp && h->StringAttr("table_name") == t.name) {
          RECSDK_ASSIGN_OR_RETURN(
              resource, internal::GetOrCreateTable(internal::SessionResources(session), *h));
        }
      }
      if (resource == nullptr) {
        return absl::NotFoundError(fmt::format(
            "KeyStage: sparse_lookup \"{}\" names table \"{}\" but the graph has no such table",
            p.attrs.name, t.name));
      }
      t.resource = resource;
      impl->tables.push_back(std::move(t));
    }
    TablePlan& table = impl->tables[it->second];
    auto group = std::find_if(table.groups.begin(), table.groups.end(),
                              [&](const ModeGroup& g) { return g.is_train == p.attrs.is_train; });
    if (group == table.groups.end()) {
      table.groups.push_back(ModeGroup{p.attrs.is_train, {}});
      group = table.groups.end() - 1;
    }
    group->lookups.push_back(static_cast<int>(impl->lookups.size()));
    impl->lookups.push_back(std::move(p));
  }
  // Sharded tables: the stage's exchanges go on channels of its own, opened here on the training
  // thread at the same point of every rank's program, and one worker makes them in batch order.
  for (const TablePlan& t : impl->tables) {
    if (internal::CollectiveTable* c = CollectiveOf(t)) {
      impl->sharded = true;
      if (impl->voter == nullptr) impl->voter = c;
    }
    if (dynamic_cast<internal::ReplicatedCollectives*>(&t.resource->table()->SelfSynchronised()) !=
        nullptr) {
      return absl::FailedPreconditionError(fmt::format(
          "KeyStage: table \"{}\" is replicated on every rank (is_dp), and its lookups and "
          "updates are collectives that must run in the step's order; the key stage resolves "
          "batches ahead on a thread of its own. Look the table up in the graph (no "
          "modify_graph / FeatureSpec key stage for it), or set is_dp = false to shard it",
          t.name));
    }
  }
  // The spec: every table uses the host tier or none does.
  {
    const TableResource* tiered = nullptr;
    const TableResource* flat = nullptr;
    for (const TableResource* r : impl->all_tables) {
      (internal::IsTiered(*r->table()) ? tiered : flat) = r;
    }
    impl->tiered = tiered != nullptr;
    if (tiered != nullptr && flat != nullptr) {
      return absl::FailedPreconditionError(fmt::format(
          "KeyStage: table \"{}\" has a host tier (host_vocabulary_size {}) but table \"{}\" "
          "has none; every table uses the host tier or none does (the spec): set "
          "host_vocabulary_size > 0 on every table, or 0 on every table",
          tiered->table()->name(), tiered->table()->config().host_vocabulary_size,
          flat->table()->name()));
    }
  }
  if (options.start_batch < 0) {
    return absl::InvalidArgumentError(fmt::format(
        "KeyStage: start_batch {} is below 0; pass the batches already trained on (0 to start "
        "at the beginning)",
        options.start_batch));
  }
  if (options.start_batch > 0) {
    RECSDK_ASSIGN_OR_RETURN(const int64_t skipped, impl->dataset->SkipBatches(options.start_batch));
    (void)skipped;  // fewer at the end of the data: the stage then ends at once
  }
  Impl* raw = impl.get();
  if (raw->sharded) {
    // Each channel knows its place among the stage's sharded tables and the stage's mode: a ps
    // rank, which runs no stage, serves the stage's votes and resolves from them.
    internal::ChannelSpec spec;
    spec.mode = options.channel == KeyStageChannel::kTrain ? LookupMode::kTrain : LookupMode::kEval;
    spec.count = static_cast<int>(
        std::count_if(raw->tables.begin(), raw->tables.end(),
                      [](const TablePlan& t) { return CollectiveOf(t) != nullptr; }));
    for (size_t i = 0; i < raw->tables.size(); ++i) {
      internal::CollectiveTable* c = CollectiveOf(raw->tables[i]);
      if (c == nullptr) continue;
      const Status s = c->OpenChannel(raw, spec);
      ++spec.index;
      if (!s.ok()) {
        for (size_t j = 0; j < i; ++j) {
          if (internal::CollectiveTable* o = CollectiveOf(raw->tables[j])) o->CloseChannel(raw);
        }
        return s;
      }
    }
    if (threads > 1) {
      internal::LogInfo(
          "KeyStage: {} key process threads asked for, 1 used: the tables are sharded over the "
          "ranks, and one worker makes their exchanges in the same order on every rank",
          threads);
    }
    raw->options.key_process_thread_num = 1;
    raw->workers.emplace_back([raw] { raw->ShardedWorker(); });
  } else {
    for (int i = 0; i < threads; ++i) {
      raw->workers.emplace_back([raw] { raw->Worker(); });
    }
  }
  return std::unique_ptr<KeyStage>(new KeyStage(std::move(impl)));
}

void KeyStage::WaitForWindow() {
  Impl& s = *impl_;
  std::unique_lock<std::mutex> lock(s.mu);
  s.cv.wait(lock, [&] {
    // The window is full, the data ended, or Quiesce capped reading below a full window.
    return s.stop || (s.preparing == 0 && (s.ended || s.outstanding >= s.options.prefetch_batches ||
                                           s.next_consume + s.in_flight() >= s.read_limit));
  });
}

StatusOr<bool> KeyStage::Next(FeedList* feeds, Batch* batch) {
  Impl& s = *impl_;
  if (s.detached) return DetachedError("Next");
  std::unique_lock<std::mutex> lock(s.mu);
  if (s.holding) {  // deterministic: the previous batch leaves the window only now
    s.holding = false;
    --s.outstanding;
    s.cv.notify_all();
  }
  if (s.next_consume >= s.read_limit) {
    // Quiesced and everything read is consumed: the consistent moment has passed; read again,
    // up to the next stop.
    s.DropReachedStops();
    s.cv.notify_all();
  }
  s.cv.wait(lock, [&] {
    return s.stop || s.ready.contains(s.next_consume) || s.next_consume >= s.end_seq;
  });
  // Past the end (or past an error already reported): workers may have prepared later batches
  // ahead, but none of them is handed out. Nor after Stop, as documented.
  if (s.stop || s.next_consume >= s.end_seq) return false;
  auto it = s.ready.find(s.next_consume);
  if (it == s.ready.end()) return false;  // stopped
  Prepared p = std::move(it->second);
  s.ready.erase(it);
  ++s.next_consume;
  if (s.deterministic) {
    s.holding = true;
  } else {
    --s.outstanding;
  }
  // The loop takes batch next_consume - 1 now, so the step of the batch before it has run (the
  // loop runs one step at a time): rows of older batches may move again (tiered tables). The
  // batch handed out keeps its rows while the stage resolves the next one: the spec's "current
  // and previous batch".
  if (s.tiered || s.sharded) {
    for (TablePlan& t : s.tables) {
      internal::ReleaseLeases(*t.resource->table(), impl_.get(), s.next_consume - 1);
    }
  }
  s.cv.notify_all();
  if (!p.status.ok()) s.end_seq = s.next_consume;  // report an error once, then end
  if (s.sharded) {
    // The rows of a sharded table's batch, brought now: after the previous step's update, in
    // the same place of every rank's order of collectives (between steps, tables in order).
    const int64_t seq = s.next_consume - 1;
    lock.unlock();
    for (TablePlan& t : s.tables) {
      internal::CollectiveTable* c = CollectiveOf(t);
      if (c == nullptr) continue;
      internal::TableGuard rows = t.resource->table()->LockRows();
      if (Status pulled = c->PullLeased(impl_.get(), seq, !p.status.ok());
          !pulled.ok() && p.status.ok()) {
        p.status = pulled;
        lock.lock();
        s.end_seq = std::min(s.end_seq, s.next_consume);
        lock.unlock();
      }
    }
  }
  if (!p.status.ok()) return p.status;
  *feeds = std::move(p.feeds);
  if (batch != nullptr) *batch = std::move(p.batch);
  return true;
}

StatusOr<int64_t> KeyStage::AfterStep(EvictHook& hook, int64_t global_step) {
  Impl& s = *impl_;
  if (s.options.channel != KeyStageChannel::kTrain) {
    return absl::FailedPreconditionError(
        "KeyStage::AfterStep: eviction runs after training steps, and this is an evaluation "
        "stage (KeyStageChannel::kEval); call it on the training stage");
  }
  if (s.detached) return DetachedError("AfterStep");
  // No Resolve may run while rows are freed: the tables whose rows live here are locked. A
  // sharded table whose keys all live on ps ranks (CollectiveOf(...)->OwnsKeys() false) is not:
  // its rows are freed on the ps, under the ps's locks, which keeps the batches it resolved
  // ahead; and a lock held here across that eviction's collectives would stop this rank's stage
  // in the middle of an exchange the ps's stage may be waiting for.
  std::vector<internal::TableGuard> locked;
  std::vector<EmbeddingTable*> evicted(s.all_tables.size());
  std::vector<internal::CollectiveTable*> collective(s.all_tables.size());
  for (size_t i = 0; i < s.all_tables.size(); ++i) {
    internal::LockedTable* table = s.all_tables[i]->table();
    collective[i] = dynamic_cast<internal::CollectiveTable*>(&table->SelfSynchronised());
    if (collective[i] != nullptr && !collective[i]->OwnsKeys()) {
      evicted[i] = table;
    } else {
      locked.push_back(table->LockAll());
      evicted[i] = locked.back().get();
    }
  }
  // The keys of batches in flight stay: per table, the oldest data time of those batches.
  std::vector<std::unique_ptr<InFlightEvictTable>> wrapped;
  std::vector<EmbeddingTable*> tables;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    for (size_t i = 0; i < s.all_tables.size(); ++i) {
      TableResource* r = s.all_tables[i];
      int64_t oldest = internal::kNothingInFlight;
      for (TablePlan& t : s.tables) {
        if (t.resource != r) continue;
        // Batches already consumed have run their step; only later ones are in flight.
        t.inflight_time.erase(t.inflight_time.begin(), t.inflight_time.lower_bound(s.next_consume));
        for (const auto& [seq, time] : t.inflight_time) oldest = std::min(oldest, time);
      }
      wrapped.push_back(std::make_unique<InFlightEvictTable>(evicted[i], oldest, collective[i]));
      tables.push_back(wrapped.back().get());
    }
  }
  return hook.AfterStep(global_step, tables);
}

void KeyStage::Stop() {
  if (impl_ == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  for (std::thread& t : impl_->workers) t.join();
  impl_->workers.clear();
  // No batch of this stage runs any more: its rows may move again. Only tiered tables hold
  // leases. When the Session closes first, DetachKeyStages has already stopped the stage and
  // released them while the tables existed, so a stage may outlive its Session.
  if ((impl_->tiered || impl_->sharded) && !impl_->released && !impl_->detached) {
    impl_->released = true;
    for (TablePlan& t : impl_->tables) {
      internal::ReleaseLeases(*t.resource->table(), impl_.get(),
                              std::numeric_limits<int64_t>::max());
      if (internal::CollectiveTable* c = CollectiveOf(t)) c->CloseChannel(impl_.get());
    }
  }
}

void KeyStage::Quiesce(int64_t at_batches_consumed) {
  Impl& s = *impl_;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    const int64_t taken = s.next_consume + s.in_flight();  // batches read or being read
    // A stop beside the others: the lowest one is the limit, so this call never lets the stage
    // read past a step another caller is waiting for (nor past its own).
    s.AddStop(std::max(taken, at_batches_consumed - s.options.start_batch));
  }
  s.cv.notify_all();
}

bool KeyStage::Quiescent() const {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  // The data's end needs no Quiesce: every batch read was handed out, so the tables hold
  // exactly the effects of the batches trained on (a Train to the end of its input would
  // otherwise warn at its final checkpoint, with nothing the user could do about it).
  if (s.ended && s.in_flight() == 0) return true;
  return s.read_limit != std::numeric_limits<int64_t>::max() && s.next_consume >= s.read_limit;
}

int64_t KeyStage::batches_consumed() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->options.start_batch + impl_->next_consume;
}

int64_t KeyStage::keys_processed() const { return impl_->keys.load(std::memory_order_relaxed); }

KeyStageChannel KeyStage::channel() const { return impl_->options.channel; }

int KeyStage::key_process_thread_num() const { return *impl_->options.key_process_thread_num; }

}  // namespace recsdk
