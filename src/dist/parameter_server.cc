// parameter_server.cc: the workers' announcements and the ps loop (parameter_server.h), and the
// public RunParameterServer / EndParameterServers (recsdk/distributed.h).
#include "src/dist/parameter_server.h"

#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "fmt/format.h"
#include "recsdk/distributed.h"
#include "src/common/hash.h"
#include "src/common/logging.h"
#include "src/common/status_macros.h"
#include "src/dist/process_communicator.h"
#include "src/dist/sharded_table.h"

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

// Broadcasts `words` from rank 0 over every rank.
Status BroadcastPsWords(PsWords& words, const char* what) {
  Status s = WithProcessCommunicator([&](Communicator& comm, const DistributedOptions& o) {
    return comm.Broadcast<int64_t>(absl::MakeSpan(words), 0,
                                   DeadlineAfterSeconds(o.collective_timeout_s),
                                   CallTag{-1, kPsLabel});
  });
  if (s.ok()) return s;
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

}  // namespace

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
  for (int64_t served = 0;; ++served) {
    PsWords words{};
    RECSDK_RETURN_IF_ERROR(BroadcastPsWords(
        words, fmt::format("ps rank {}: waiting for the workers' table exchange #{}", rank, served)
                   .c_str()));
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
      RECSDK_RETURN_IF_ERROR(ServeCheckpointCommand(command, step, text, rank, served));
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
          s = tables[0]->Resolve({}, {}, {}, modes[0], {});
        } else {
          s = tables[0]->ApplyGradients({}, {}, step);
        }
        break;
      case PsCommand::kResolveGroup: {
        std::vector<ShardedTable::GroupResolve> group(tables.size());
        for (size_t i = 0; i < tables.size(); ++i) {
          group[i].table = tables[i];
          group[i].mode = modes[i];
        }
        s = ShardedTable::ResolveGroup(group);
        break;
      }
      case PsCommand::kApplyGroup: {
        std::vector<ShardedTable::GroupApply> group(tables.size());
        for (size_t i = 0; i < tables.size(); ++i) {
          group[i].table = tables[i];
          group[i].step = step;
        }
        s = ShardedTable::ApplyGroup(group);
        break;
      }
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
