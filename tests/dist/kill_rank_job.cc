// kill_rank_job.cc: the job of tests/dist/kill_rank_test.sh (CTest dist_kill_rank, label mpi).
//   kill_rank_job kill DIR: 2 ranks train the sparse model of sparse_model_util.h, saving a
//     checkpoint every 5 steps into DIR; in step 12 rank 1 kills itself with SIGKILL. The job
//     must end in bounded time, non-zero, with a message naming rank 1.
//   kill_rank_job restore DIR: 2 ranks restore the latest checkpoint (step 10, the last one
//     complete before the kill), check it and train on.
//   kill_rank_job stop DIR: as kill, but rank 1 stops itself with SIGSTOP in step 12 and never
//     resumes (tests/dist/stop_rank_test.sh, CTest dist_stop_rank), with a collective timeout of
//     kStopTimeoutS: rank 0 must fail its next collective with DeadlineExceeded naming rank 1
//     and the step, and exit non-zero; mpirun then ends the stopped rank.
//   kill_rank_job psstop DIR: as stop, in a job of chief, worker and ps (each rank's TF_CONFIG
//     from tests/dist/ps_stop_rank_test.sh, no checkpoints): worker
//     rank 1 stops in step 12; the chief fails its step and the ps (rank 2) its wait for the
//     next exchange, both with DeadlineExceeded naming rank 1, and exit non-zero at once
//     (std::_Exit: MPI_Finalize would wait its 10 s grace for the stopped rank, which the stop
//     phase already covers).
//   kill_rank_job pslost DIR: the same job, but the ps stops (SIGSTOP) in step 12 (the chief
//     writes DIR/stop-ps, a thread of the ps watches for it): both workers fail step 12 with
//     DeadlineExceeded and exit non-zero; the one waiting in the key exchange names the ps,
//     rank 2 (the chief, in the announcement, may only say the data did not arrive).
//   kill_rank_job pskill DIR: the same job, every rank (ps included) with a Saver checkpointing
//     into DIR/ckpt every 5 steps; in step 12 the ps kills itself with SIGKILL (the chief writes
//     DIR/kill-ps). The job must end in bounded time, non-zero, with a message naming rank 2.
//   kill_rank_job psbusy DIR: the psstop job (timeout 3 s), but after step 3 both workers are
//     busy for kBusyS (well over the timeout) without any exchange, as in a long evaluation or
//     summary write, then train on to step 6 and end the ps: the heartbeat keeps the ps waiting,
//     and every rank ends with 0 (tests/dist/ps_heartbeat_test.sh).
//   kill_rank_job psbusystop DIR: as psbusy, but worker rank 1 stops (SIGSTOP) at the start of
//     the pause while the chief stays busy (alive): the ps still ends with DeadlineExceeded,
//     its heartbeat naming rank 1, long before the chief's pause is over.
//   kill_rank_job psrestore DIR: a job of chief, worker and 2 ps restores the latest checkpoint
//     (step 10, the last one complete before the kill, written by 1 ps: re-sharded over 2) and
//     trains on; each ps then holds rows, only of keys it owns.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "recsdk/recsdk.h"
#include "src/dist/mpi/mpi_communicator.h"
#include "src/dist/process_communicator.h"
#include "src/dist/sharded_table.h"
#include "tests/dist/sparse_model_util.h"

namespace {

using recsdk::testing::sparse::GlobalBatch;
using recsdk::testing::sparse::kFeatures;
using recsdk::testing::sparse::kVocab;
using recsdk::testing::sparse::ShardOf;
using recsdk::testing::sparse::SparseNet;

constexpr int64_t kGlobalRows = 12;
// kStopTimeoutS: the collective timeout of the stop phase (short: the test waits for it).
constexpr double kStopTimeoutS = 3;
// kBusyS: the workers' pause without exchanges in the psbusy phase (over 2x kStopTimeoutS);
// kBusyStopS: the chief's in the psbusystop phase (the job must end long before it is over).
constexpr int kBusyS = 8;
constexpr int kBusyStopS = 40;

int Fail(const std::string& what) {
  std::fprintf(stderr, "kill_rank_job: %s\n", what.c_str());
  std::fflush(stderr);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace recsdk;  // NOLINT(google-build-using-namespace): a test program's main
  if (argc != 3) {
    return Fail(
        "usage: kill_rank_job kill|restore|stop|psstop|pslost|pskill|psrestore|psbusy|"
        "psbusystop DIR");
  }
  const std::string phase = argv[1], dir = argv[2];
  dist::RegisterMpiCommunicator();
  DistributedOptions options;
  const bool ps_lost = phase == "pslost";
  const bool ps_ckpt = phase == "pskill" || phase == "psrestore";
  const bool ps_busy = phase == "psbusy" || phase == "psbusystop";
  const bool ps_job = phase == "psstop" || ps_lost || ps_ckpt || ps_busy;
  options.collective_timeout_s = phase == "stop" || (ps_job && !ps_ckpt) ? kStopTimeoutS : 30;
  if (Status s = InitDistributed(options); !s.ok()) return Fail(s.ToString());
  const int rank = *get_rank_id(), size = *get_rank_size();
  if (size != 2) return Fail("run under mpirun -np 2 (or 2 workers and a ps)");
  if (ps_job) {
    SparseNet net(npu_distributed_optimizer_wrapper(std::make_shared<SgdOptimizer>()),
                  kGlobalRows / size);
    if (net.session == nullptr || !LookupTable(*net.session, "emb").ok()) {
      return Fail("the model did not build");
    }
    // pslost, pskill: the chief writes this file in step 12 (the script removed it before).
    const std::string marker = dir + (ps_ckpt ? "/kill-ps" : "/stop-ps");
    std::unique_ptr<Saver> saver;
    if (ps_ckpt) {
      SaverOptions so;
      so.model_dir = dir + "/ckpt";
      StatusOr<std::unique_ptr<Saver>> made = Saver::Create(*net.session, so);
      if (!made.ok()) return Fail(made.status().ToString());
      saver = std::move(*made);
    }
    if (*IsParameterServer()) {
      if (phase == "pskill") {
        std::thread([marker] {
          while (!std::filesystem::exists(marker)) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          std::fprintf(stderr, "kill_rank_job: ps rank 2 kills itself (SIGKILL) in step 12\n");
          std::fflush(stderr);
          std::raise(SIGKILL);
        }).detach();
      }
      if (phase == "psrestore") {
        const Status served = RunParameterServer();  // the restore, the steps, the end
        if (!served.ok()) return Fail("ps rank " + std::to_string(rank) + ": " + served.ToString());
        EmbeddingTable* table = *LookupTable(*net.session, "emb");
        dist::JobLayout job;
        if (!dist::ProcessJob(&job)) return Fail("no job layout");
        int64_t held = 0;
        for (int f = 0; f < kFeatures; ++f) {
          for (int64_t id = 1000 * f; id < 1000 * f + kVocab; ++id) {
            if (!table->ReadRow(id).ok()) continue;
            ++held;
            const int owner = job.owner_first() + dist::ShardedTable::Owner(id, job.owners());
            if (owner != rank) {
              return Fail("ps rank " + std::to_string(rank) + " holds key " + std::to_string(id) +
                          " of rank " + std::to_string(owner));
            }
          }
        }
        if (held == 0) return Fail("ps rank " + std::to_string(rank) + " holds no row");
        std::fprintf(stderr, "kill_rank_job: ps rank %d holds %lld rows, all its own\n", rank,
                     static_cast<long long>(held));
        return 0;
      }
      if (ps_lost) {
        std::thread([marker] {
          while (!std::filesystem::exists(marker)) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          std::fprintf(stderr, "kill_rank_job: ps rank 2 stops itself (SIGSTOP) in step 12\n");
          std::fflush(stderr);
          std::raise(SIGSTOP);
        }).detach();
      }
      const auto served_from = std::chrono::steady_clock::now();
      const Status served = RunParameterServer();
      if (phase == "psbusy" && served.ok()) {
        std::fprintf(stderr, "kill_rank_job: ps rank %d served the busy workers\n", rank);
        return 0;
      }
      if (phase == "psbusystop") {
        std::fprintf(
            stderr, "kill_rank_job: the ps ended %.1f s after it began serving\n",
            std::chrono::duration<double>(std::chrono::steady_clock::now() - served_from).count());
      }
      const int failed = Fail("ps rank " + std::to_string(rank) + ": " + served.ToString());
      // The ps began waiting a little before the chief's step began, so its deadline passes
      // first; mpirun ends the job at the first non-zero exit, so the ps stays a moment for the
      // chief to report its own error (the test checks both).
      std::this_thread::sleep_for(std::chrono::seconds(2));
      std::_Exit(failed);  // see the file comment
    }
    int first = 0;
    if (phase == "psrestore") {
      StatusOr<int64_t> step = saver->Restore("");
      if (!step.ok()) return Fail("restore: " + step.status().ToString());
      if (*step != 10) return Fail("restored step " + std::to_string(*step) + ", not 10");
      first = 10;
    }
    for (int step = first; step < first + 20; ++step) {
      if (phase == "psrestore" && step == first + 2) {  // trained on from the checkpoint
        if (Status s = EndParameterServers(); !s.ok()) return Fail(s.ToString());
        if (rank == 0) std::printf("kill_rank_job: %s done\n", phase.c_str());
        return 0;
      }
      if ((ps_lost || phase == "pskill") && rank == 0 && step == 12) {
        std::filesystem::create_directories(dir);
        std::fclose(std::fopen(marker.c_str(), "w"));
        // The ps's watcher polls every millisecond: let it stop the ps before this step.
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      if (ps_busy && step == 3) {
        if (phase == "psbusystop" && rank == 1) {
          std::fprintf(stderr, "kill_rank_job: rank 1 stops itself (SIGSTOP) in the pause\n");
          std::fflush(stderr);
          std::raise(SIGSTOP);
          return Fail("rank 1 was resumed; nothing in the test resumes it");
        }
        // Busy without exchanges: the ps only hears the heartbeat meanwhile.
        std::this_thread::sleep_for(
            std::chrono::seconds(phase == "psbusystop" ? kBusyStopS : kBusyS));
        if (phase == "psbusystop") return Fail("the chief's pause ended before the job did");
      }
      if (phase == "psbusy" && step == 6) {
        if (Status s = EndParameterServers(); !s.ok()) return Fail(s.ToString());
        std::fprintf(stderr, "kill_rank_job: worker rank %d trained through the pause\n", rank);
        return 0;
      }
      if (!ps_lost && !ps_busy && rank == 1 && step == 12) {
        std::fprintf(stderr, "kill_rank_job: rank 1 stops itself (SIGSTOP) in step 12\n");
        std::fflush(stderr);
        std::raise(SIGSTOP);
        return Fail("rank 1 was resumed; nothing in the test resumes it");
      }
      if (Status s = net.Step(ShardOf(GlobalBatch(step, kGlobalRows), size, rank)); !s.ok()) {
        const int failed = Fail("step " + std::to_string(step) + ": " + s.ToString());
        // pslost: the chief fails first, in the announcement, where MPI cannot say which rank
        // did not pass the data on (every header had come); it stays a moment so that the
        // worker, waiting for the ps in the key exchange, reports the ps by its rank. The worker
        // stays too: when the ps stopped before it entered the announcement, both workers fail
        // there, the worker first (the chief began the step 200 ms later), and mpirun would end
        // the chief at the worker's exit, before the chief's own deadline.
        if (ps_lost) std::this_thread::sleep_for(std::chrono::seconds(2));
        std::_Exit(failed);
      }
      if (phase == "pskill" && step % 5 == 4) {
        StatusOr<std::string> saved = saver->Save(step + 1);
        if (!saved.ok()) return Fail("save: " + saved.status().ToString());
      }
    }
    return Fail(ps_lost || phase == "pskill" ? "the workers trained on although the ps was lost"
                                             : "the workers trained on although rank 1 stopped");
  }
  const bool fault = phase == "kill" || phase == "stop";
  if (fault && rank == 0) std::filesystem::remove_all(dir);
  if (!AllRanksAgree(true, "the directory is ready").ok()) return Fail("agreeing");
  SparseNet net(npu_distributed_optimizer_wrapper(std::make_shared<SgdOptimizer>()),
                kGlobalRows / size);
  if (net.session == nullptr) return Fail("the model did not build");
  SaverOptions so;
  so.model_dir = dir;
  StatusOr<std::unique_ptr<Saver>> saver = Saver::Create(*net.session, so);
  if (!saver.ok()) return Fail(saver.status().ToString());
  int first = 0;
  if (phase == "restore") {
    StatusOr<int64_t> step = (*saver)->Restore("");
    if (!step.ok()) return Fail("restore: " + step.status().ToString());
    if (*step != 10) return Fail("restored step " + std::to_string(*step) + ", not 10");
    first = 10;
  }
  for (int step = first; step < first + 20; ++step) {
    if (phase == "kill" && rank == 1 && step == 12) {
      std::fprintf(stderr, "kill_rank_job: rank 1 kills itself (SIGKILL) in step 12\n");
      std::fflush(stderr);
      std::raise(SIGKILL);
    }
    if (phase == "stop" && rank == 1 && step == 12) {
      std::fprintf(stderr, "kill_rank_job: rank 1 stops itself (SIGSTOP) in step 12\n");
      std::fflush(stderr);
      std::raise(SIGSTOP);
      return Fail("rank 1 was resumed; nothing in the test resumes it");
    }
    if (Status s = net.Step(ShardOf(GlobalBatch(step, kGlobalRows), size, rank)); !s.ok()) {
      return Fail("step " + std::to_string(step) + ": " + s.ToString());
    }
    if (fault && step % 5 == 4) {
      StatusOr<std::string> saved = (*saver)->Save(step + 1);
      if (!saved.ok()) return Fail("save: " + saved.status().ToString());
    }
    if (phase == "restore" && step == first + 1) break;  // trained on from the checkpoint
  }
  if (rank == 0) std::printf("kill_rank_job: %s done\n", phase.c_str());
  return 0;
}
