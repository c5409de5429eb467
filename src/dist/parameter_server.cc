// parameter_server.cc: the workers' announcements and the ps loop (parameter_server.h), and the
// public RunParameterServer / EndParameterServers (recsdk/distributed.h).
#include "src/dist/parameter_server.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "fmt/format.h"
#include "recsdk/distributed.h"
#include "src/common/hash.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "src/dist/process_communicator.h"
#include "src/dist/ps_heartbeat.h"
#include "src/dist/sharded_table.h"
#include "src/table/collective_table.h"
#include "src/table/tier_lease.h"

namespace recsdk::dist {
namespace {

// The announcement: [magic, command, step, members, then (name fingerprint, mode) per member].
constexpr int64_t kPsMagic = 0x5053434d44;  // "PSCMD"
constexpr size_t kPsWords = 4 + 2 * static_cast<size_t>(kMaxAnnouncedTables);
using PsWords = std::array<int64_t, kPsWords>;
// A checkpoint command's text follows [magic, command, step, 0, length].
static_assert((kPsWords - 5) * sizeof(int64_t) >= kMaxAnnouncedText);
constexpr std::string_view kPsLabel = "ps/announce";

// ServedTables: this process's sharded tables by the fingerprint of their name; several live
// tables of one name are kept (a ps refuses to serve an ambiguous name).
struct ServedTables {
  absl::Mutex mu;
  absl::flat_hash_map<uint64_t, std::vector<ShardedTable*>> tables ABSL_GUARDED_BY(mu);
};

ServedTables& ServedTablesOf() {
  static ServedTables* served = new ServedTables;  // never destroyed
  return *served;
}

// Broadcasts `words` from rank 0 over every rank. On a ps (`ps_wait`), the wait lasts while the
// heartbeat keeps it alive (ps_heartbeat.h): the workers may be busy for longer than the timeout
// without an exchange; when one stopped answering, the error says which.
Status BroadcastPsWords(PsWords& words, const char* what, bool ps_wait = false) {
  Status s = WithProcessCommunicator([&](Communicator& comm, const DistributedOptions& o) {
    return comm.Broadcast<int64_t>(absl::MakeSpan(words), 0,
                                   DeadlineAfterSeconds(o.collective_timeout_s),
                                   CallTag{-1, kPsLabel, ps_wait ? PsKeepAlive() : nullptr});
  });
  if (s.ok()) return s;
  if (const Status beat = PsHeartbeatError(); ps_wait && !beat.ok()) {
    return Status(s.code(), fmt::format("{}: {}; {}", what, s.message(), beat.message()));
  }
  return Status(s.code(), fmt::format("{}: {}", what, s.message()));
}

// LookupServedTable: the served table whose name has fingerprint `fp`.
StatusOr<ShardedTable*> LookupServedTable(uint64_t fp, int rank) {
  ServedTables& served = ServedTablesOf();
  absl::MutexLock lock(&served.mu);
  auto it = served.tables.find(fp);
  if (it == served.tables.end() || it->second.empty()) {
    return absl::FailedPreconditionError(fmt::format(
        "ps rank {}: the workers exchange keys of a table this ps does not hold (name "
        "fingerprint {:016x}); a ps must make the same tables as the workers (build the same "
        "model and call LookupTable for each table) before RunParameterServer",
        rank, fp));
  }
  if (it->second.size() > 1) {
    return absl::FailedPreconditionError(
        fmt::format("ps rank {}: {} live sharded tables are named \"{}\"; a ps serves one "
                    "model's tables: destroy the other Sessions first",
                    rank, it->second.size(), it->second.front()->name()));
  }
  return it->second.front();
}

// CheckpointHandler: the ps's Saver, when it made one.
struct CheckpointHandler {
  absl::Mutex mu;
  const void* owner ABSL_GUARDED_BY(mu) = nullptr;
  PsCheckpointHandler handler ABSL_GUARDED_BY(mu);
};

CheckpointHandler& CheckpointHandlerOf() {
  static CheckpointHandler* h = new CheckpointHandler;  // never destroyed
  return *h;
}

// ExportHandler: the ps's Estimator's export of its shard, when it made one.
struct ExportHandler {
  absl::Mutex mu;
  const void* owner ABSL_GUARDED_BY(mu) = nullptr;
  PsExportHandler handler ABSL_GUARDED_BY(mu);
};

ExportHandler& ExportHandlerOf() {
  static ExportHandler* h = new ExportHandler;  // never destroyed
  return *h;
}

bool IsCheckpointCommand(PsCommand c) {
  return c == PsCommand::kSave || c == PsCommand::kSaveDelta || c == PsCommand::kRestore ||
         c == PsCommand::kExport;
}

// ServeCheckpointCommand: the ps's part of the workers' save or restore. Its outcome is every
// rank's (the save and the restore end with all ranks learning it), so a failure that is not
// the job's communication failing leaves the ps serving: the workers decide what follows.
Status ServeCheckpointCommand(PsCommand command, int64_t step, std::string_view text, int rank,
                              int64_t served) {
  PsCheckpointHandler handler;
  if (command == PsCommand::kExport) {
    ExportHandler& h = ExportHandlerOf();
    absl::MutexLock lock(&h.mu);
    if (h.handler) {
      handler = [export_shard = h.handler](PsCommand, int64_t, std::string_view t) {
        return export_shard(t);
      };
    }
  } else {
    CheckpointHandler& h = CheckpointHandlerOf();
    absl::MutexLock lock(&h.mu);
    handler = h.handler;
  }
  if (!handler && command == PsCommand::kExport) {
    return absl::FailedPreconditionError(fmt::format(
        "ps rank {}: the workers export a bundle but this ps has no model to export from; run "
        "the same Estimator on the ps (its ExportSavedModel serves the workers' export)",
        rank));
  }
  if (!handler) {
    return absl::FailedPreconditionError(fmt::format(
        "ps rank {}: the workers {} a checkpoint (step {}) but this ps has no Saver; create one "
        "(Saver::Create with the workers' SaverOptions) before RunParameterServer",
        rank, command == PsCommand::kRestore ? "restore" : "save", step));
  }
  const Status s = handler(command, step, text);
  if (s.ok()) return s;
  const std::string what =
      command == PsCommand::kRestore
          ? fmt::format("ps rank {}, table exchange #{}: the restore of \"{}\"", rank, served, text)
      : command == PsCommand::kExport
          ? fmt::format("ps rank {}, table exchange #{}: the export", rank, served)
          : fmt::format("ps rank {}, table exchange #{}: the save of step {}", rank, served, step);
  if (absl::IsDeadlineExceeded(s) || absl::IsUnavailable(s)) {
    return Status(s.code(), fmt::format("{}: {}", what, s.message()));
  }
  internal::LogWarning("{} failed on every rank: {}", what, s.message());
  return absl::OkStatus();
}

// A stage call's words: [magic, command, batch, 1, table fingerprint, mode, stage, index, count].
constexpr size_t kStageWord = 6;

// TableLocks: what a worker's LockedTable takes around each call (locked_table.h), for the ps,
// whose loop and stage threads call its ShardedTables directly: keys (exclusive for a training
// resolve, shared for an evaluation one), rows (shared for the row calls of a step: apply, pull),
// both exclusive for a checkpoint or an export.
struct TableLocks {
  std::shared_mutex keys;
  std::shared_mutex rows;
};

TableLocks& LocksOf(const ShardedTable* table) {
  static absl::Mutex* mu = new absl::Mutex;
  static auto* locks = new std::map<const ShardedTable*, std::unique_ptr<TableLocks>>;
  absl::MutexLock lock(mu);
  std::unique_ptr<TableLocks>& l = (*locks)[table];
  if (l == nullptr) l = std::make_unique<TableLocks>();
  return *l;
}

// KeysLock: the keys lock of `table` for a resolve in `mode`.
class KeysLock {
 public:
  KeysLock(const ShardedTable* table, LookupMode mode) {
    std::shared_mutex& mu = LocksOf(table).keys;
    if (mode == LookupMode::kTrain) {
      exclusive_ = std::unique_lock<std::shared_mutex>(mu);
    } else {
      shared_ = std::shared_lock<std::shared_mutex>(mu);
    }
  }

 private:
  std::unique_lock<std::shared_mutex> exclusive_;
  std::shared_lock<std::shared_mutex> shared_;
};

// Locker: runs a call of `table` under its locks (ShardedTable::TableLocker): the keys lock
// shared, or both exclusively. Never held across a collective: the stage threads hold the keys
// lock inside a key stage's exchange, which needs the stage threads of the other ps ranks.
ShardedTable::TableLocker Locker(const ShardedTable* table) {
  return [table](bool exclusive, const std::function<Status()>& fn) -> Status {
    TableLocks& locks = LocksOf(table);
    if (!exclusive) {
      std::shared_lock<std::shared_mutex> keys(locks.keys);
      return fn();
    }
    std::unique_lock<std::shared_mutex> keys(locks.keys);
    std::unique_lock<std::shared_mutex> rows(locks.rows);
    return fn();
  };
}

// IsCommunicationError: an error of the job's communication (a deadline, MPI failing, an unusable
// communicator), after which a ps cannot serve on; other errors of a served call are the workers'
// to act on (they fail their step naming this owner).
bool IsCommunicationError(const Status& s) {
  return absl::IsDeadlineExceeded(s) || absl::IsInternal(s) || absl::IsFailedPrecondition(s) ||
         absl::IsUnavailable(s) || absl::IsAborted(s);
}

// PsStage: a worker key stage as the ps serves it. Its thread (Serve) makes the stage's side of
// every batch on the channels: the vote, as a rank that has every batch and is never held, then
// each table's ResolveLeased with no keys of its own (the workers' keys are resolved here, on
// their owner). The ps loop brings the rows at each announced pull (PullAnnounced). The stage's
// `this` is the lease owner of its batches on the ps's tables.
class PsStage {
 public:
  PsStage(int64_t id, LookupMode mode, int rank, double timeout_s)
      : id_(id), mode_(mode), rank_(rank), timeout_s_(timeout_s) {}
  ~PsStage() { Close(); }

  int64_t id() const { return id_; }
  int count() const { return count_; }
  const std::vector<ShardedTable*>& tables() const { return tables_; }

  // Open: the channel of the stage's next table (kOpenChannel), opened beside the workers'.
  Status Open(ShardedTable* table, const internal::ChannelSpec& spec) {
    count_ = spec.count;
    RECSDK_RETURN_IF_ERROR(table->OpenChannel(this, spec));
    tables_.push_back(table);
    if (static_cast<int>(tables_.size()) == count_) thread_ = std::thread([this] { Serve(); });
    return absl::OkStatus();
  }

  // PullAnnounced: KeyStage::Next's PullLeased of `batch` of `table`, as the workers make it:
  // releases the stage's older batches, waits (within the deadline) until the stage's thread has
  // finished that batch's resolve, then sends the rows the ps holds now.
  Status PullAnnounced(ShardedTable* table, int64_t batch) {
    table->ReleaseLeased(this, batch);
    bool resolved = false;
    {
      absl::MutexLock lock(&mu_);
      ++releases_;
      const auto done = [this, batch]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return resolved_ > batch || ended_;
      };
      if (!mu_.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(2 * timeout_s_))) {
        return absl::DeadlineExceededError(fmt::format(
            "ps rank {}, key stage {}: the workers bring the rows of batch {}, whose resolve on "
            "this ps did not end within {:.0f} s",
            rank_, id_, batch, 2 * timeout_s_));
      }
      resolved = resolved_ > batch;
    }
    Status s;
    {
      std::shared_lock<std::shared_mutex> rows(LocksOf(table).rows);
      s = table->PullLeased(this, batch, /*failed=*/!resolved);
    }
    return s;
  }

  // Ended: whether the workers' votes ended the stage; error: its thread's error, if any.
  bool Ended() {
    absl::MutexLock lock(&mu_);
    return ended_;
  }
  Status error() {
    absl::MutexLock lock(&mu_);
    return error_;
  }

  // Close: waits for the thread (each of its waits has a deadline) and closes the channels.
  void Close() {
    // Cannot hang: every wait of the stage's thread is a collective on its channel with the
    // channel's deadline (or the heartbeat's keep-alive, itself bounded by the job's timeout).
    if (thread_.joinable()) thread_.join();
    for (ShardedTable* t : tables_) t->CloseChannel(this);
    tables_.clear();
  }

 private:
  void End(Status error) {
    absl::MutexLock lock(&mu_);
    ended_ = true;
    if (!error.ok()) {
      error_ = Status(error.code(),
                      fmt::format("ps rank {}, key stage {}: {}", rank_, id_, error.message()));
    }
  }

  void Serve() {
    for (int64_t batch = 0;; ++batch) {
      for (;;) {
        std::array<float, 2> votes = {0.0f, 0.0f};
        const Status agreed = tables_.front()->AgreeBatch(this, batch, &votes);
        if (!agreed.ok()) return End(agreed);
        if (votes[0] > 0) return End(absl::OkStatus());
        if (votes[1] == 0) break;
        // A checkpoint holds some worker back: it votes again once its loop lifts the hold.
      }
      for (ShardedTable* table : tables_) {
        const internal::ResolveLease lease{this, batch};
        Status s;
        for (;;) {
          int64_t seen = 0;
          {
            absl::MutexLock lock(&mu_);
            seen = releases_;
          }
          {
            KeysLock keys(table, mode_);
            s = table->ResolveLeased({}, {}, {}, mode_, {}, lease);
          }
          // Unavailable: every slot holds a batch not pulled yet; a pull releases one.
          if (!absl::IsUnavailable(s)) break;
          absl::MutexLock lock(&mu_);
          const auto released = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
            return releases_ != seen;
          };
          if (!mu_.AwaitWithTimeout(absl::Condition(&released), absl::Seconds(timeout_s_))) break;
        }
        if (!s.ok() && IsCommunicationError(s)) return End(s);
        if (!s.ok()) {
          // The workers fail this batch naming this owner, and their stages end at the next vote.
          internal::LogWarning("ps rank {}, key stage {}, batch {}: {}", rank_, id_, batch,
                               s.message());
        }
      }
      absl::MutexLock lock(&mu_);
      resolved_ = batch + 1;
    }
  }

  const int64_t id_;
  const LookupMode mode_;
  const int rank_;
  const double timeout_s_;
  int count_ = 0;
  std::vector<ShardedTable*> tables_;  // in the stage's order; the first carries the votes
  std::thread thread_;
  absl::Mutex mu_;
  int64_t resolved_ ABSL_GUARDED_BY(mu_) = 0;  // batches [0, resolved_) resolved
  int64_t releases_ ABSL_GUARDED_BY(mu_) = 0;  // pulls so far (each may free a slot)
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  Status error_ ABSL_GUARDED_BY(mu_);
};

// PsStages: the ps loop's stages by the workers' number.
class PsStages {
 public:
  explicit PsStages(int rank) : rank_(rank) {}
  ~PsStages() {
    for (auto& [id, stage] : stages_) stage->Close();
  }

  Status Serve(PsCommand command, int64_t batch, ShardedTable* table, const PsWords& words) {
    const int64_t id = words[kStageWord];
    internal::ChannelSpec spec;
    spec.mode = words[5] == 0 ? LookupMode::kTrain : LookupMode::kEval;
    spec.index = static_cast<int>(words[kStageWord + 1]);
    spec.count = static_cast<int>(words[kStageWord + 2]);
    if (command == PsCommand::kOpenChannel) {
      if (spec.index == 0) {
        // A new stage: the stages that ended hold their last rows no longer (a worker that
        // starts a stage is done pulling from the ones whose votes ended).
        std::erase_if(stages_, [](auto& entry) { return entry.second->Ended(); });
        double timeout_s = 0;
        RECSDK_RETURN_IF_ERROR(
            WithProcessCommunicator([&](Communicator&, const DistributedOptions& o) {
              timeout_s = o.collective_timeout_s;
              return absl::OkStatus();
            }));
        stages_[id] = std::make_unique<PsStage>(id, spec.mode, rank_, timeout_s);
      }
      auto it = stages_.find(id);
      if (it == stages_.end() || static_cast<int>(it->second->tables().size()) != spec.index) {
        return absl::InternalError(fmt::format(
            "ps rank {}: the workers open table {} of key stage {}, which this ps did not see "
            "open; every rank must run the same recsdk",
            rank_, spec.index, id));
      }
      return it->second->Open(table, spec);
    }
    auto it = stages_.find(id);
    if (it == stages_.end()) {
      // A stage dropped above: take part with nothing (the workers' Next then fails).
      std::shared_lock<std::shared_mutex> rows(LocksOf(table).rows);
      return table->PullLeased(nullptr, batch, /*failed=*/true);
    }
    // An ended stage stays: its last batch is applied after its pull (the workers hold theirs
    // until Stop); the next stage's start lets it go.
    return it->second->PullAnnounced(table, batch);
  }

  // error: the first stage thread's error of the job's communication.
  Status error() {
    for (auto& [id, stage] : stages_) RECSDK_RETURN_IF_ERROR(stage->error());
    return absl::OkStatus();
  }

 private:
  const int rank_;
  std::map<int64_t, std::unique_ptr<PsStage>> stages_;
};

}  // namespace

Status AnnounceStageCall(PsCommand command, int64_t stage, int64_t batch, const PsMember& table,
                         int index, int count) {
  JobLayout layout;
  if (!ProcessJob(&layout) || layout.ps == 0 || layout.is_ps) return absl::OkStatus();
  PsWords words{};
  words[0] = kPsMagic;
  words[1] = static_cast<int64_t>(command);
  words[2] = batch;
  words[3] = 1;
  words[4] = static_cast<int64_t>(internal::Fingerprint64(table.table));
  words[5] = table.mode == LookupMode::kTrain ? 0 : 1;
  words[kStageWord] = stage;
  words[kStageWord + 1] = index;
  words[kStageWord + 2] = count;
  return BroadcastPsWords(words, command == PsCommand::kOpenChannel
                                     ? "announcing a key stage's channel to the ps ranks"
                                     : "announcing a key stage's rows to the ps ranks");
}

void SetPsCheckpointHandler(const void* owner, PsCheckpointHandler handler) {
  CheckpointHandler& h = CheckpointHandlerOf();
  absl::MutexLock lock(&h.mu);
  h.owner = owner;
  h.handler = std::move(handler);
}

void ClearPsCheckpointHandler(const void* owner) {
  CheckpointHandler& h = CheckpointHandlerOf();
  absl::MutexLock lock(&h.mu);
  if (h.owner != owner) return;
  h.owner = nullptr;
  h.handler = nullptr;
}

void SetPsExportHandler(const void* owner, PsExportHandler handler) {
  ExportHandler& h = ExportHandlerOf();
  absl::MutexLock lock(&h.mu);
  h.owner = owner;
  h.handler = std::move(handler);
}

void ClearPsExportHandler(const void* owner) {
  ExportHandler& h = ExportHandlerOf();
  absl::MutexLock lock(&h.mu);
  if (h.owner != owner) return;
  h.owner = nullptr;
  h.handler = nullptr;
}

Status AnnounceCommand(PsCommand command, int64_t step, std::string_view text) {
  JobLayout layout;
  if (!ProcessJob(&layout) || layout.ps == 0 || layout.is_ps) return absl::OkStatus();
  if (text.size() > kMaxAnnouncedText) {
    return absl::InvalidArgumentError(fmt::format(
        "a path of {} bytes for the ps ranks (\"{}...\"); at most {} bytes travel: use a shorter "
        "model_dir",
        text.size(), text.substr(0, 40), kMaxAnnouncedText));
  }
  PsWords words{};
  words[0] = kPsMagic;
  words[1] = static_cast<int64_t>(command);
  words[2] = step;
  words[3] = 0;
  words[4] = static_cast<int64_t>(text.size());
  std::memcpy(&words[5], text.data(), text.size());
  return BroadcastPsWords(words, "announcing a checkpoint command to the ps ranks");
}

Status AnnounceExchange(PsCommand command, int64_t step, absl::Span<const PsMember> members) {
  JobLayout layout;
  if (!ProcessJob(&layout) || layout.ps == 0 || layout.is_ps) return absl::OkStatus();
  if (members.size() > static_cast<size_t>(kMaxAnnouncedTables)) {
    return absl::InvalidArgumentError(
        fmt::format("an exchange of {} tables with ps ranks; at most {} tables share one exchange",
                    members.size(), kMaxAnnouncedTables));
  }
  PsWords words{};
  words[0] = kPsMagic;
  words[1] = static_cast<int64_t>(command);
  words[2] = step;
  words[3] = static_cast<int64_t>(members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    words[4 + 2 * i] = static_cast<int64_t>(internal::Fingerprint64(members[i].table));
    words[5 + 2 * i] = members[i].mode == LookupMode::kTrain ? 0 : 1;
  }
  return BroadcastPsWords(words, "announcing a table exchange to the ps ranks");
}

void RegisterServedTable(ShardedTable* table) {
  ServedTables& served = ServedTablesOf();
  absl::MutexLock lock(&served.mu);
  served.tables[internal::Fingerprint64(table->name())].push_back(table);
}

void UnregisterServedTable(ShardedTable* table) {
  ServedTables& served = ServedTablesOf();
  absl::MutexLock lock(&served.mu);
  auto it = served.tables.find(internal::Fingerprint64(table->name()));
  if (it == served.tables.end()) return;
  std::erase(it->second, table);
  if (it->second.empty()) served.tables.erase(it);
}

Status ServeTableExchanges() {
  JobLayout layout;
  int rank = 0, size = 1;
  if (!ProcessJob(&layout) || !ProcessWorld(&rank, &size) || !layout.is_ps) {
    return absl::FailedPreconditionError(
        "RunParameterServer: this process is not a ps rank (TF_CONFIG's task type \"ps\", after "
        "InitDistributed); workers train, and end the ps ranks with EndParameterServers()");
  }
  // Declared before the loop's returns: its destructor waits for the stages' threads (each wait
  // of theirs has a deadline) and closes their channels.
  PsStages stages(rank);
  for (int64_t served = 0;; ++served) {
    // A stage thread that lost the job's communication ends the ps as the loop's own errors do.
    RECSDK_RETURN_IF_ERROR(stages.error());
    PsWords words{};
    RECSDK_RETURN_IF_ERROR(BroadcastPsWords(
        words,
        fmt::format("ps rank {}: waiting for the workers' table exchange #{}", rank, served)
            .c_str(),
        /*ps_wait=*/true));
    const int64_t members = words[3];
    if (words[0] != kPsMagic || members < 0 || members > kMaxAnnouncedTables) {
      return absl::InternalError(fmt::format(
          "ps rank {}: announcement #{} from the chief is malformed (magic {:x}, {} tables); "
          "every rank must run the same recsdk",
          rank, served, words[0], members));
    }
    const auto command = static_cast<PsCommand>(words[1]);
    const int64_t step = words[2];
    if (command == PsCommand::kEnd || IsCheckpointCommand(command)) {
      const auto length = static_cast<size_t>(words[4]);
      if (length > kMaxAnnouncedText) {
        return absl::InternalError(fmt::format(
            "ps rank {}: announcement #{} carries a text of {} bytes; every rank must run the "
            "same recsdk",
            rank, served, words[4]));
      }
      const std::string text(reinterpret_cast<const char*>(&words[5]), length);
      if (command == PsCommand::kEnd) {
        if (text.empty()) return absl::OkStatus();
        // The chief ended the ps after an error of its own (EndParameterServersAfterError): the
        // ps's call fails too, so that the ps program exits non-zero as the workers' do.
        return absl::AbortedError(fmt::format(
            "ps rank {}: the workers ended the job after an error on the chief (rank 0): {}", rank,
            text));
      }
      {
        // Both locks of every table, as a worker's Saver takes LockAll.
        std::vector<std::unique_lock<std::shared_mutex>> held;
        std::vector<ShardedTable*> all;
        {
          ServedTables& st = ServedTablesOf();
          absl::MutexLock lock(&st.mu);
          for (auto& [fp, list] : st.tables) all.insert(all.end(), list.begin(), list.end());
        }
        std::sort(all.begin(), all.end());
        for (ShardedTable* t : all) {
          held.emplace_back(LocksOf(t).keys);
          held.emplace_back(LocksOf(t).rows);
        }
        RECSDK_RETURN_IF_ERROR(ServeCheckpointCommand(command, step, text, rank, served));
      }
      continue;
    }
    std::vector<ShardedTable*> tables;
    std::vector<LookupMode> modes;
    for (int64_t i = 0; i < members; ++i) {
      RECSDK_ASSIGN_OR_RETURN(ShardedTable * t,
                              LookupServedTable(static_cast<uint64_t>(words[4 + 2 * i]), rank));
      tables.push_back(t);
      modes.push_back(words[5 + 2 * i] == 0 ? LookupMode::kTrain : LookupMode::kEval);
    }
    // The calls a worker makes, with nothing of this rank's own to look up or apply.
    Status s;
    switch (command) {
      case PsCommand::kResolve:
      case PsCommand::kApply:
        if (tables.size() != 1) {
          s = absl::InternalError(
              fmt::format("announcement of {} tables for one table's call", tables.size()));
        } else if (command == PsCommand::kResolve) {
          KeysLock keys(tables[0], modes[0]);
          s = tables[0]->Resolve({}, {}, {}, modes[0], {});
        } else {
          std::shared_lock<std::shared_mutex> rows(LocksOf(tables[0]).rows);
          s = tables[0]->ApplyGradients({}, {}, step);
        }
        break;
      case PsCommand::kResolveGroup: {
        std::vector<ShardedTable::GroupResolve> group(tables.size());
        std::vector<KeysLock> keys;
        keys.reserve(tables.size());
        for (size_t i = 0; i < tables.size(); ++i) {
          group[i].table = tables[i];
          group[i].mode = modes[i];
          keys.emplace_back(tables[i], modes[i]);
        }
        s = ShardedTable::ResolveGroup(group);
        break;
      }
      case PsCommand::kApplyGroup: {
        std::vector<ShardedTable::GroupApply> group(tables.size());
        std::vector<std::shared_lock<std::shared_mutex>> rows;
        for (size_t i = 0; i < tables.size(); ++i) {
          group[i].table = tables[i];
          group[i].step = step;
          rows.emplace_back(LocksOf(tables[i]).rows);
        }
        s = ShardedTable::ApplyGroup(group);
        break;
      }
      case PsCommand::kEvict:
        if (tables.size() != 1) {
          s = absl::InternalError(
              fmt::format("announcement of {} tables for one table's eviction", tables.size()));
        } else {
          // Eviction changes the index and frees rows: both locks, as a checkpoint takes them,
          // but only around the eviction itself, never across its collectives.
          s = tables[0]->ServeEvict(Locker(tables[0])).status();
        }
        break;
      case PsCommand::kDataTime: {
        // Reading a data time: the keys lock shared, as a worker's LockedTable::data_time.
        std::vector<ShardedTable::TableLocker> lockers;
        for (ShardedTable* t : tables) lockers.push_back(Locker(t));
        s = ShardedTable::AgreeDataTimes(tables, lockers);
        break;
      }
      case PsCommand::kOpenChannel:
      case PsCommand::kPull:
        if (tables.size() != 1) {
          s = absl::InternalError(
              fmt::format("announcement of {} tables for a key stage's call", tables.size()));
        } else {
          s = stages.Serve(command, step, tables[0], words);
        }
        break;
      default:
        s = absl::InternalError(fmt::format("unknown command {}", words[1]));
    }
    if (!s.ok()) {
      // The workers see the failure in their step; this ps ends (non-zero exit: mpirun then
      // ends the job).
      return Status(s.code(), fmt::format("ps rank {}, table exchange #{} (step {}): {}", rank,
                                          served, step, s.message()));
    }
  }
}

}  // namespace recsdk::dist

namespace recsdk {

Status RunParameterServer() {
  dist::JobLayout layout;
  if (!dist::ProcessJob(&layout)) RECSDK_RETURN_IF_ERROR(InitDistributed());
  return dist::ServeTableExchanges();
}

Status EndParameterServers() {
  dist::JobLayout layout;
  if (dist::ProcessJob(&layout) && layout.is_ps) {
    return absl::FailedPreconditionError(
        "EndParameterServers: this process is a ps rank; the workers call it once their "
        "training has ended, and RunParameterServer then returns here");
  }
  return dist::AnnounceExchange(dist::PsCommand::kEnd, -1, {});
}

namespace dist {

Status EndParameterServersAfterError(const Status& error) {
  JobLayout layout;
  int rank = 0, size = 1;
  if (!ProcessJob(&layout) || layout.ps == 0 || layout.is_ps || !ProcessWorld(&rank, &size)) {
    return absl::OkStatus();
  }
  // A failed collective leaves the communicator unusable (MPI cannot cancel it): the ps then
  // ends at its own deadline, and announcing anything would only wait for that deadline too.
  if (absl::IsDeadlineExceeded(error) || absl::IsUnavailable(error) || absl::IsAborted(error) ||
      absl::IsInternal(error)) {
    return absl::OkStatus();
  }
  // Every worker joins the announcement (a Broadcast of every rank); the chief's text is what
  // the ps receives.
  std::string text(error.message().substr(0, kMaxAnnouncedText - 40));
  if (text.empty()) text = "(no message)";
  return AnnounceCommand(PsCommand::kEnd, -1,
                         fmt::format("{}: {}", absl::StatusCodeToString(error.code()), text));
}

}  // namespace dist

}  // namespace recsdk
