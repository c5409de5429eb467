// io_pool.cc: the I/O thread pool. Threading: see io_pool.h.
#include "src/table/tiers/io_pool.h"

namespace recsdk::internal {

IoPool::IoPool(int threads) {
  threads_.reserve(threads);
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

IoPool::~IoPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void IoPool::Work(Job* job) {
  for (size_t i = job->next.fetch_add(1); i < job->n; i = job->next.fetch_add(1)) {
    absl::Status status = (*job->fn)(i);
    if (!status.ok()) {
      std::lock_guard<std::mutex> lock(job->status_mu);
      if (job->status.ok()) job->status = std::move(status);
    }
  }
}

void IoPool::Loop() {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    Job* job = job_;
    // The job may already be over (the caller did it all and cleared job_).
    if (job == nullptr) continue;
    ++job->active;
    lock.unlock();
    Work(job);
    lock.lock();
    if (--job->active == 0) done_cv_.notify_all();
  }
}

absl::Status IoPool::Run(size_t n, const std::function<absl::Status(size_t)>& fn) {
  if (n == 0) return absl::OkStatus();
  std::lock_guard<std::mutex> run_lock(run_mu_);
  Job job;
  job.n = n;
  job.fn = &fn;
  if (n > 1) {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &job;
    ++generation_;
    work_cv_.notify_all();
  }
  Work(&job);
  if (n > 1) {
    std::unique_lock<std::mutex> lock(mu_);
    // Every index is taken once the caller's Work returns; wait for those still running.
    done_cv_.wait(lock, [&] { return job.active == 0; });
    job_ = nullptr;
  }
  return std::move(job.status);
}

}  // namespace recsdk::internal
