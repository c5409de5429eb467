// io_pool.h: a few threads for blocking file I/O (the SSD tier's reads and writes), kept apart
// from oneTBB's workers so that a thread waiting on the disk never holds a compute core's place.
//
// Threading: Run may be called from any thread; calls are serialised (one job at a time), and
// the calling thread works on its own job too.
#ifndef RECSDK_TABLE_TIERS_IO_POOL_H_
#define RECSDK_TABLE_TIERS_IO_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"

namespace recsdk::internal {

class IoPool {
 public:
  // IoPool: starts `threads` threads (>= 1).
  explicit IoPool(int threads);
  ~IoPool();
  IoPool(const IoPool&) = delete;
  IoPool& operator=(const IoPool&) = delete;

  // Run: fn(i) for every i in [0, n), on the pool's threads and the caller's, each i once;
  // returns when all are done, with the first error any returned (the others still run).
  absl::Status Run(size_t n, const std::function<absl::Status(size_t)>& fn);
  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  struct Job {
    size_t n = 0;
    const std::function<absl::Status(size_t)>* fn = nullptr;
    std::atomic<size_t> next{0};
    int active = 0;  // threads working on it (under mu_)
    std::mutex status_mu;
    absl::Status status;
  };
  static void Work(Job* job);
  void Loop();

  std::mutex run_mu_;  // one job at a time
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  Job* job_ = nullptr;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace recsdk::internal

#endif  // RECSDK_TABLE_TIERS_IO_POOL_H_
