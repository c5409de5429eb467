// transforms.cc: Shard, Shuffle, BatchRows, Repeat, Map and Prefetch.
// Threading: each transform is used by one consumer thread; Prefetch owns one background thread
// that runs its input and stops (joined) on Reset and destruction.
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "fmt/format.h"
#include "recsdk/dataset.h"
#include "src/common/checked_math.h"
#include "src/common/exception_guard.h"
#include "src/common/hash.h"
#include "src/common/random.h"
#include "src/common/status_macros.h"
#include "src/pipeline/row_store.h"

namespace recsdk {
namespace internal {
namespace {

// Uniform integer in [0, n) from 64 random bits (n small relative to 2^64: bias negligible,
// and the result is a pure function of the stream, which is what determinism needs).
int64_t UniformIndex(PhiloxStream& rng, int64_t n) {
  const uint64_t bits = (static_cast<uint64_t>(rng.NextBits()) << 32) | rng.NextBits();
  return static_cast<int64_t>(static_cast<uint64_t>(
      (static_cast<unsigned __int128>(bits) * static_cast<uint64_t>(n)) >> 64));
}

class WrappingDataset : public Dataset {
 public:
  explicit WrappingDataset(std::unique_ptr<Dataset> input) : input_(std::move(input)) {}
  MalformedCounts malformed_counts() const override { return input_->malformed_counts(); }

 protected:
  std::unique_ptr<Dataset> input_;
};

// ---------------------------------------------------------------------------------------------
class ShardDataset final : public WrappingDataset {
 public:
  ShardDataset(std::unique_ptr<Dataset> input, int64_t size, int64_t id)
      : WrappingDataset(std::move(input)), size_(size), id_(id) {}

  StatusOr<bool> GetNext(Batch* batch) override {
    return CatchExceptions("Shard", [&] { return GetNextUnguarded(batch); });
  }
  StatusOr<bool> GetNextUnguarded(Batch* batch) {
    for (;;) {
      Batch in;
      RECSDK_ASSIGN_OR_RETURN(bool more, input_->GetNext(&in));
      if (!more) return false;
      const int64_t n = in.num_rows();
      const int64_t first = ((id_ - row_ % size_) + size_) % size_;  // first kept row in `in`
      row_ += n;
      if (first >= n) continue;
      if (size_ == 1) {
        *batch = std::move(in);
        return true;
      }
      if (!store_.initialized()) store_.Init(in);
      RECSDK_RETURN_IF_ERROR(store_.CheckLayout(in));
      store_.Reserve((n - first + size_ - 1) / size_);
      for (int64_t r = first; r < n; r += size_) store_.AppendRows(in, r, r + 1);
      *batch = store_.TakeBatch();
      return true;
    }
  }
  Status Reset() override {
    row_ = 0;
    return input_->Reset();
  }

 private:
  const int64_t size_, id_;
  int64_t row_ = 0;
  RowStore store_;
};

// ---------------------------------------------------------------------------------------------
class ShuffleDataset final : public WrappingDataset {
 public:
  ShuffleDataset(std::unique_ptr<Dataset> input, int64_t buffer, uint64_t seed,
                 ShuffleOptions options)
      : WrappingDataset(std::move(input)), buffer_(buffer), seed_(seed), opt_(options) {
    StartEpoch();
  }

  StatusOr<bool> GetNext(Batch* batch) override {
    return CatchExceptions("Shuffle", [&] { return GetNextUnguarded(batch); });
  }
  StatusOr<bool> GetNextUnguarded(Batch* batch) {
    while (!input_done_ && out_.size() < opt_.output_rows) {
      Batch in;
      RECSDK_ASSIGN_OR_RETURN(bool more, input_->GetNext(&in));
      if (!more) {
        input_done_ = true;
        break;
      }
      if (!pool_.initialized()) {
        pool_.Init(in);
        out_.Init(in);
      }
      RECSDK_RETURN_IF_ERROR(pool_.CheckLayout(in));
      for (int64_t r = 0; r < in.num_rows(); ++r) {
        if (pool_.size() < buffer_) {
          pool_.AppendRows(in, r, r + 1);
        } else {
          const int64_t j = UniformIndex(rng_, buffer_);
          out_.AppendFrom(pool_, j);
          pool_.SetRow(j, in, r);
        }
      }
    }
    if (input_done_) {
      // Drain: emit the pool in random order (Fisher-Yates from the back).
      while (pool_.size() > 0 && out_.size() < opt_.output_rows) {
        const int64_t last = pool_.size() - 1;
        const int64_t j = UniformIndex(rng_, last + 1);
        pool_.SwapRows(j, last);
        out_.AppendFrom(pool_, last);
        ShrinkPoolByOne();
      }
    }
    if (out_.size() == 0) return false;
    *batch = out_.TakeBatch();
    return true;
  }

  Status Reset() override {
    ++epoch_;
    StartEpoch();
    return input_->Reset();
  }

 private:
  void StartEpoch() {
    const uint64_t e = opt_.reshuffle_each_iteration ? static_cast<uint64_t>(epoch_) : 0;
    rng_ = PhiloxStream(CombineSeeds(seed_, 0x5348554646ULL), e);
    input_done_ = false;
    pool_.Clear();
    out_.Clear();
  }
  void ShrinkPoolByOne() { pool_.PopBack(); }

  const int64_t buffer_;
  const uint64_t seed_;
  const ShuffleOptions opt_;
  int64_t epoch_ = 0;
  PhiloxStream rng_{0, 0};
  bool input_done_ = false;
  RowStore pool_, out_;
};

// ---------------------------------------------------------------------------------------------
class BatchRowsDataset final : public WrappingDataset {
 public:
  BatchRowsDataset(std::unique_ptr<Dataset> input, int64_t batch_size, BatchOptions options)
      : WrappingDataset(std::move(input)), batch_size_(batch_size), opt_(options) {}

  StatusOr<bool> GetNext(Batch* batch) override {
    return CatchExceptions("BatchRows", [&] { return GetNextUnguarded(batch); });
  }
  StatusOr<bool> GetNextUnguarded(Batch* batch) {
    Batch out;
    RECSDK_ASSIGN_OR_RETURN(bool more, Next(&out));
    if (!more) return false;
    if (opt_.pad_remainder) {
      const int64_t valid = out.num_valid();
      Tensor mask(DType::kFloat32, Shape{out.num_rows()});
      float* m = mask.data<float>();
      for (int64_t i = 0; i < valid; ++i) m[i] = 1.0f;
      RECSDK_RETURN_IF_ERROR(out.SetColumn("mask", std::move(mask)));
      out.set_num_valid(valid);
    }
    *batch = std::move(out);
    return true;
  }

  Status Reset() override {
    pending_ = Batch();
    offset_ = 0;
    done_ = false;
    store_.Clear();
    return input_->Reset();
  }

 private:
  StatusOr<bool> Next(Batch* out) {
    for (;;) {
      const int64_t avail = pending_.num_rows() - offset_;
      // Zero-copy when a whole batch lies in the current input block.
      if (store_.size() == 0 && avail >= batch_size_) {
        RECSDK_ASSIGN_OR_RETURN(*out, pending_.Slice(offset_, offset_ + batch_size_));
        offset_ += batch_size_;
        return true;
      }
      if (avail > 0) {
        if (!store_.initialized()) store_.Init(pending_);
        const int64_t take = std::min(avail, batch_size_ - store_.size());
        store_.Reserve(batch_size_);
        store_.AppendRows(pending_, offset_, offset_ + take);
        offset_ += take;
        if (store_.size() == batch_size_) {
          *out = store_.TakeBatch();
          return true;
        }
      }
      if (done_) break;
      Batch in;
      RECSDK_ASSIGN_OR_RETURN(bool more, input_->GetNext(&in));
      if (!more) {
        done_ = true;
        pending_ = Batch();
        offset_ = 0;
        continue;
      }
      if (in.has_column("mask")) {
        return absl::InvalidArgumentError(
            "BatchRows: the input already has a \"mask\" column (it was batched with "
            "pad_remainder); batch once, or drop the column with Map first");
      }
      if (store_.initialized()) RECSDK_RETURN_IF_ERROR(store_.CheckLayout(in));
      pending_ = std::move(in);
      offset_ = 0;
    }
    if (store_.size() == 0 || opt_.drop_remainder) {
      store_.Clear();
      return false;
    }
    *out = store_.TakeBatch(opt_.pad_remainder ? batch_size_ : 0);
    return true;
  }

  const int64_t batch_size_;
  const BatchOptions opt_;
  Batch pending_;
  int64_t offset_ = 0;
  bool done_ = false;
  RowStore store_;
};

// ---------------------------------------------------------------------------------------------
class RepeatDataset final : public WrappingDataset {
 public:
  RepeatDataset(std::unique_ptr<Dataset> input, int64_t epochs)
      : WrappingDataset(std::move(input)), epochs_(epochs) {}

  StatusOr<bool> GetNext(Batch* batch) override {
    for (;;) {
      RECSDK_ASSIGN_OR_RETURN(bool more, input_->GetNext(batch));
      if (more) {
        produced_in_epoch_ = true;
        return true;
      }
      ++epoch_;
      // An empty epoch would loop forever under -1: stop instead.
      if ((epochs_ >= 0 && epoch_ >= epochs_) || !produced_in_epoch_) return false;
      produced_in_epoch_ = false;
      RECSDK_RETURN_IF_ERROR(input_->Reset());
    }
  }
  Status Reset() override {
    epoch_ = 0;
    produced_in_epoch_ = false;
    return input_->Reset();
  }

 private:
  const int64_t epochs_;
  int64_t epoch_ = 0;
  bool produced_in_epoch_ = false;
};

// ---------------------------------------------------------------------------------------------
class MapDataset final : public WrappingDataset {
 public:
  MapDataset(std::unique_ptr<Dataset> input, MapFn fn)
      : WrappingDataset(std::move(input)), fn_(std::move(fn)) {}
  StatusOr<bool> GetNext(Batch* batch) override {
    return CatchExceptions("Map", [&] { return GetNextUnguarded(batch); });
  }
  StatusOr<bool> GetNextUnguarded(Batch* batch) {
    Batch in;
    RECSDK_ASSIGN_OR_RETURN(bool more, input_->GetNext(&in));
    if (!more) return false;
    StatusOr<Batch> out =
        CatchExceptions("Map: the user function", [&] { return fn_(std::move(in)); });
    if (!out.ok()) return out.status();
    *batch = *std::move(out);
    return true;
  }
  Status Reset() override { return input_->Reset(); }

 private:
  MapFn fn_;
};

// ---------------------------------------------------------------------------------------------
class PrefetchDataset final : public WrappingDataset {
 public:
  PrefetchDataset(std::unique_ptr<Dataset> input, int64_t capacity)
      : WrappingDataset(std::move(input)), capacity_(capacity) {}
  ~PrefetchDataset() override { Stop(); }

  StatusOr<bool> GetNext(Batch* batch) override {
    if (!started_) Start();
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !queue_.empty() || finished_; });
    if (queue_.empty()) {
      if (!final_status_.ok()) {
        Status s = final_status_;
        final_status_ = absl::OkStatus();
        return s;
      }
      return false;
    }
    *batch = std::move(queue_.front());
    queue_.pop_front();
    cv_.notify_all();
    return true;
  }

  Status Reset() override {
    Stop();
    queue_.clear();
    finished_ = false;
    final_status_ = absl::OkStatus();
    return input_->Reset();
  }

  // For tests: the most batches ever queued at once.
  int64_t max_queued() const { return max_queued_; }

 private:
  void Start() {
    started_ = true;
    stop_ = false;
    thread_ = std::thread([this] { Run(); });
  }
  void Stop() {
    if (!started_) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    started_ = false;
  }
  void Run() {
    for (;;) {
      Batch b;
      // The worker thread is a boundary too: an exception here would end the process.
      StatusOr<bool> more = CatchExceptions("Prefetch", [&] { return input_->GetNext(&b); });
      std::unique_lock<std::mutex> lock(mu_);
      if (!more.ok() || !*more) {
        final_status_ = more.ok() ? absl::OkStatus() : more.status();
        finished_ = true;
        cv_.notify_all();
        return;
      }
      cv_.wait(lock, [&] { return stop_ || static_cast<int64_t>(queue_.size()) < capacity_; });
      if (stop_) return;
      queue_.push_back(std::move(b));
      max_queued_ = std::max<int64_t>(max_queued_, static_cast<int64_t>(queue_.size()));
      cv_.notify_all();
    }
  }

  const int64_t capacity_;
  std::thread thread_;
  bool started_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> queue_;
  bool stop_ = false;
  bool finished_ = false;
  Status final_status_;
  int64_t max_queued_ = 0;
};

Status NeedInput(const std::unique_ptr<Dataset>& input, std::string_view who) {
  if (input == nullptr) {
    return absl::InvalidArgumentError(fmt::format("{}: the input dataset is null", who));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace internal

StatusOr<std::unique_ptr<Dataset>> Shard(std::unique_ptr<Dataset> input, int64_t rank_size,
                                         int64_t rank_id) {
  RECSDK_RETURN_IF_ERROR(internal::NeedInput(input, "Shard"));
  if (rank_size < 1 || rank_id < 0 || rank_id >= rank_size) {
    return absl::InvalidArgumentError(fmt::format(
        "Shard: rank_id {} with rank_size {}; need rank_size >= 1 and 0 <= rank_id < rank_size",
        rank_id, rank_size));
  }
  return std::unique_ptr<Dataset>(new internal::ShardDataset(std::move(input), rank_size, rank_id));
}

StatusOr<std::unique_ptr<Dataset>> Shuffle(std::unique_ptr<Dataset> input, int64_t buffer_size,
                                           uint64_t seed, const ShuffleOptions& options) {
  RECSDK_RETURN_IF_ERROR(internal::NeedInput(input, "Shuffle"));
  if (buffer_size < 1) {
    return absl::InvalidArgumentError(fmt::format(
        "Shuffle: buffer_size {} is below 1; use 1 (no shuffling) or more rows", buffer_size));
  }
  if (options.output_rows < 1) {
    return absl::InvalidArgumentError(
        fmt::format("Shuffle: output_rows {} is below 1", options.output_rows));
  }
  return std::unique_ptr<Dataset>(
      new internal::ShuffleDataset(std::move(input), buffer_size, seed, options));
}

StatusOr<std::unique_ptr<Dataset>> BatchRows(std::unique_ptr<Dataset> input, int64_t batch_size,
                                             const BatchOptions& options) {
  RECSDK_RETURN_IF_ERROR(internal::NeedInput(input, "BatchRows"));
  if (batch_size < 1 || batch_size > internal::kMaxBatchRows) {
    return absl::InvalidArgumentError(fmt::format(
        "BatchRows: batch_size {} is outside [1, {}]; use a positive size no larger than the "
        "bound (batches are held in memory whole)",
        batch_size, internal::kMaxBatchRows));
  }
  if (options.drop_remainder && options.pad_remainder) {
    return absl::InvalidArgumentError(
        "BatchRows: drop_remainder and pad_remainder are both set; drop for training, pad for "
        "evaluation/prediction, not both");
  }
  return std::unique_ptr<Dataset>(
      new internal::BatchRowsDataset(std::move(input), batch_size, options));
}

StatusOr<std::unique_ptr<Dataset>> Repeat(std::unique_ptr<Dataset> input, int64_t epochs) {
  RECSDK_RETURN_IF_ERROR(internal::NeedInput(input, "Repeat"));
  if (epochs < 1 && epochs != -1) {
    return absl::InvalidArgumentError(fmt::format(
        "Repeat: epochs {} is invalid; use a count >= 1, or -1 to repeat forever", epochs));
  }
  return std::unique_ptr<Dataset>(new internal::RepeatDataset(std::move(input), epochs));
}

StatusOr<std::unique_ptr<Dataset>> Map(std::unique_ptr<Dataset> input, MapFn fn) {
  RECSDK_RETURN_IF_ERROR(internal::NeedInput(input, "Map"));
  if (!fn) return absl::InvalidArgumentError("Map: the function is empty");
  return std::unique_ptr<Dataset>(new internal::MapDataset(std::move(input), std::move(fn)));
}

StatusOr<std::unique_ptr<Dataset>> Prefetch(std::unique_ptr<Dataset> input,
                                            int64_t buffer_batches) {
  RECSDK_RETURN_IF_ERROR(internal::NeedInput(input, "Prefetch"));
  if (buffer_batches < 1) {
    return absl::InvalidArgumentError(fmt::format(
        "Prefetch: buffer_batches {} is below 1; use 1 or 2 to overlap input with compute",
        buffer_batches));
  }
  return std::unique_ptr<Dataset>(new internal::PrefetchDataset(std::move(input), buffer_batches));
}

}  // namespace recsdk
