// parameter_server.h: the ps ranks of a job with separate parameter servers (TF_CONFIG's ps
// tasks, launch_env.h JobLayout), and how the workers drive them.
//
// A ps rank holds the shards of the sharded tables (ShardedTable's owners are the ps ranks) and
// runs no graph: it serves the workers' table exchanges. It does so through the very calls a
// worker makes (ShardedTable::Resolve, ApplyGradients, ResolveGroup, ApplyGroup) with nothing to
// look up: a ps sends no keys and receives the workers', exactly as an all-worker rank serves the
// keys it owns. To make the same collectives in the same order, a ps must know which call comes
// next: before each exchange the workers announce it (AnnounceExchange: a Broadcast of a 1 KiB
// command from the chief, rank 0, over every rank), and the ps loop (ServeTableExchanges) waits
// for that announcement, then makes the call. The workers' EndParameterServers announces the end.
// In a job without ps ranks nothing is announced: the same table calls, no extra collective.
//
// A worker key stage (KeyStage::Start with sharded tables) is served too: its OpenChannel of each
// table is announced (kOpenChannel), the ps opens the same channels and runs the stage's side on
// a thread of its own (ServeStage in parameter_server.cc): the batch votes, as a rank that always
// has the batch, and each table's ResolveLeased with no keys, so the workers' keys are admitted
// and resolved on the ps ahead of their steps exactly as an owner rank of an all-worker job does.
// KeyStage::Next's PullLeased is announced (kPull) and the ps sends the rows as they are then.
// The ps takes the locks a worker's LockedTable would take (keys for a resolve, rows for the
// row calls, both for a checkpoint), so its stage thread and its loop never touch a table at once
// in ways a worker's would not.
//
// Every wait has the process communicator's deadline (collective_timeout_s): a ps waits at most
// that long for the workers' next exchange, and a worker at most that long for a ps.
//
// Threading: as the process communicator (process_communicator.h).
#ifndef RECSDK_DIST_PARAMETER_SERVER_H_
#define RECSDK_DIST_PARAMETER_SERVER_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <string_view>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "recsdk/table.h"

namespace recsdk::dist {

class ShardedTable;

// PsCommand: what the workers announce. The values travel between ranks: pinned.
enum class PsCommand : int64_t {
  kResolve = 1,       // ShardedTable::Resolve of one table
  kApply = 2,         // ShardedTable::ApplyGradients of one table
  kResolveGroup = 3,  // ShardedTable::ResolveGroup
  kApplyGroup = 4,    // ShardedTable::ApplyGroup
  kEnd = 5,           // EndParameterServers: the ps loop returns (with a text: an error)
  kSave = 6,          // Saver::Save: every rank joins the sharded write (the text: unused)
  kSaveDelta = 7,     // Saver::SaveDelta
  kRestore = 8,       // Saver::Restore (the text: the checkpoint directory the chief resolved)
  kExport = 9,  // ExportSavedModel (the text: the bundle's directory, then its sharded tables)
  kOpenChannel = 10,  // a worker key stage opens its channel of one table (AnnounceStageCall)
  kPull = 11,         // KeyStage::Next brings one table's rows of a stage's batch
  kEvict = 12,        // eviction of one table (the step word: the chief's cutoff, or kEvictStale)
  kDataTime = 13,     // ShardedTable::AgreeDataTimes of the tables named
};

// kEvictStale: the cutoff word of kEvict for EvictStale (the ps ranks derive the cutoff from the
// job's data time; sharded_table.h).
inline constexpr int64_t kEvictStale = std::numeric_limits<int64_t>::min();

// PsMember: a table of an announced exchange and its lookup mode.
struct PsMember {
  std::string_view table;
  LookupMode mode = LookupMode::kTrain;
};

// kMaxAnnouncedTables: the most tables one announced exchange may name.
inline constexpr int kMaxAnnouncedTables = 60;

// AnnounceExchange: on a worker of a job with ps ranks, tells the ps ranks the exchange that
// follows (a collective of every rank); OK at once in a job without ps ranks. InvalidArgument
// for more than kMaxAnnouncedTables members.
[[nodiscard]] absl::Status AnnounceExchange(PsCommand command, int64_t step,
                                            absl::Span<const PsMember> members);

// AnnounceStageCall: on a worker of a job with ps ranks, tells the ps ranks a key stage's call
// on the training thread (kOpenChannel: ShardedTable::OpenChannel, `batch` unused; kPull:
// PullLeased of batch `batch`) of stage `stage` (the workers number their stages' channels in
// the order they open them: the same number on every worker) for `table`, the stage's table
// `index` of `count`. A collective of every rank; OK at once in a job without ps ranks.
[[nodiscard]] absl::Status AnnounceStageCall(PsCommand command, int64_t stage, int64_t batch,
                                             const PsMember& table, int index, int count);

// kMaxAnnouncedText: the longest text (a checkpoint's path) a command may carry.
inline constexpr size_t kMaxAnnouncedText = 900;

// AnnounceCommand: AnnounceExchange for a command of no tables that carries `text` (the
// checkpoint commands); InvalidArgument for a text longer than kMaxAnnouncedText.
[[nodiscard]] absl::Status AnnounceCommand(PsCommand command, int64_t step, std::string_view text);

// PsCheckpointHandler: what a ps does when the workers announce a checkpoint command (kSave,
// kSaveDelta, kRestore): the ps's Saver joins the same save or restore (saver.cc).
using PsCheckpointHandler =
    std::function<absl::Status(PsCommand command, int64_t step, std::string_view text)>;

// SetPsCheckpointHandler: installs `handler` for `owner` (the ps's Saver), replacing any;
// ClearPsCheckpointHandler removes it if `owner` installed it. A ps without one fails the
// workers' checkpoint command, naming the fix.
void SetPsCheckpointHandler(const void* owner, PsCheckpointHandler handler);
void ClearPsCheckpointHandler(const void* owner);

// SetPsExportHandler, ClearPsExportHandler: as the checkpoint handler, for kExport: what a ps
// does when the workers export a bundle (the ps's Estimator installs internal::ExportPsShard of
// its Session). A ps without one fails the workers' export, naming the fix.
using PsExportHandler = std::function<absl::Status(std::string_view text)>;
void SetPsExportHandler(const void* owner, PsExportHandler handler);
void ClearPsExportHandler(const void* owner);

// RegisterServedTable, UnregisterServedTable: the sharded tables of this process, by name, for
// the ps loop (ShardedTable's constructor and destructor call them).
void RegisterServedTable(ShardedTable* table);
void UnregisterServedTable(ShardedTable* table);

// EndParameterServersAfterError: on the workers of a job with ps ranks, once `error` ended their
// call (every worker calls it: the announcement is a collective of every rank): ends the ps loop
// with the chief's error (the ps's RunParameterServer returns Aborted naming it), so a ps does
// not wait for its deadline. Nothing on a ps or without ps ranks, nor after an error of the
// job's communication (DeadlineExceeded, Unavailable, Aborted, Internal: a failed collective
// leaves the communicator unusable, and the ps then ends at its own deadline). Best effort: an
// error of one worker alone leaves the others, and the ps, to their deadlines.
[[nodiscard]] absl::Status EndParameterServersAfterError(const absl::Status& error);

// ServeTableExchanges: the ps loop (RunParameterServer, recsdk/distributed.h).
[[nodiscard]] absl::Status ServeTableExchanges();

}  // namespace recsdk::dist

#endif  // RECSDK_DIST_PARAMETER_SERVER_H_
