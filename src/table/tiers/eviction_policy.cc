// eviction_policy.cc: LRU, LFU and LRFU as one scored policy over a lazy min-heap.
//
// Touch only raises a slot's score (every kind's score grows with use), so the heap is not told:
// a slot's heap entry keeps the score it had when pushed, a lower bound of its score now, and
// ChooseVictims re-pushes an entry whose slot was touched since when it reaches the top. The entry
// on top whose score is current is then the least of all current scores, so victims come in the
// same order as with a push per Touch, at a heap operation per slot that reaches the top instead
// of one per Touch. On tier_e2e_bench's host-tiered Resolves (perf, stop 19) Touch fell from
// ~10% of the Resolve's CPU to ~5%, victims unchanged (docs/tiers.md).
// Threading: not thread-safe (see eviction_policy.h).
#include "src/table/tiers/eviction_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "fmt/format.h"

namespace recsdk::internal {

const char* EvictionPolicyName(EvictionPolicyKind kind) {
  switch (kind) {
    case EvictionPolicyKind::kLru:
      return "lru";
    case EvictionPolicyKind::kLfu:
      return "lfu";
    case EvictionPolicyKind::kLrfu:
      return "lrfu";
  }
  return "unknown";
}

namespace {

constexpr double kNoScore = -std::numeric_limits<double>::infinity();

// LogAdd: log2(2^a + 2^b), without overflow (LRFU's scores are logs of sums that grow as
// 2^(batch / half_life)).
double LogAdd(double a, double b) {
  if (a == kNoScore) return b;
  if (b == kNoScore) return a;
  const double hi = std::max(a, b);
  const double d = std::abs(a - b);
  return hi + std::log1p(std::exp2(-d)) / std::log(2.0);
}

// ScoredPolicy: every kind is "evict the lowest score"; only the score differs.
class ScoredPolicy final : public EvictionPolicy {
 public:
  explicit ScoredPolicy(const EvictionPolicyOptions& options)
      : kind_(options.kind),
        inv_half_life_(1.0 / options.half_life_batches),
        slots_(options.capacity) {}

  void BeginBatch() override { ++batch_; }

  void Touch(absl::Span<const uint32_t> slots) override {
    for (uint32_t slot : slots) {
      // An untracked slot (a caller's mistake) is skipped rather than read out of range.
      if (slot >= slots_.size() || !slots_[slot].tracked) continue;
      SlotState& s = slots_[slot];
      ++s.count;
      switch (kind_) {
        case EvictionPolicyKind::kLru:
          s.score = static_cast<double>(batch_);
          break;
        case EvictionPolicyKind::kLfu:
          s.score = static_cast<double>(s.count);
          break;
        case EvictionPolicyKind::kLrfu:
          s.score = LogAdd(s.score, static_cast<double>(batch_) * inv_half_life_);
          break;
      }
      s.last_batch = batch_;
      // No Push: the slot's heap entry is now a lower bound, re-keyed when it reaches the top.
    }
  }

  absl::Status Insert(uint32_t slot, uint32_t prior_count, int64_t prior_last_batch) override {
    if (slot >= slots_.size()) {
      return absl::InvalidArgumentError(fmt::format(
          "eviction policy: Insert of slot {}, but the policy tracks slots [0, {}); pass a slot "
          "of the tier it was created for",
          slot, slots_.size()));
    }
    SlotState& s = slots_[slot];
    if (!s.tracked) ++size_;
    s.tracked = true;
    s.count = prior_count + 1;
    switch (kind_) {
      case EvictionPolicyKind::kLru:
        s.score = static_cast<double>(batch_);
        break;
      case EvictionPolicyKind::kLfu:
        s.score = static_cast<double>(s.count);
        break;
      case EvictionPolicyKind::kLrfu: {
        // The history as `prior_count` uses at its last batch, then this use.
        const double history = prior_count > 0 && prior_last_batch >= 0
                                   ? std::log2(static_cast<double>(prior_count)) +
                                         static_cast<double>(prior_last_batch) * inv_half_life_
                                   : kNoScore;
        s.score = LogAdd(history, static_cast<double>(batch_) * inv_half_life_);
        break;
      }
    }
    s.last_batch = batch_;
    Push(slot);
    return absl::OkStatus();
  }

  void Remove(uint32_t slot) override {
    if (slot >= slots_.size() || !slots_[slot].tracked) return;
    slots_[slot].tracked = false;
    ++slots_[slot].version;
    --size_;
  }

  size_t ChooseVictims(size_t n, uint32_t* victims,
                       const std::function<bool(uint32_t)>& skip) override {
    size_t got = 0;
    held_.clear();
    while (got < n && !heap_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end(), Later);
      const Entry e = heap_.back();
      heap_.pop_back();
      const SlotState& s = slots_[e.slot];
      if (!s.tracked || s.version != e.version) continue;  // stale: removed since
      if (s.score != e.score || s.last_batch != e.last_batch) {
        // Touched since it was pushed: back in at its current score.
        heap_.push_back({s.score, s.last_batch, e.slot, e.version});
        std::push_heap(heap_.begin(), heap_.end(), Later);
        continue;
      }
      // Every live entry popped goes back: victims stay tracked until Removed.
      held_.push_back(e);
      // Not a slot of the current or the previous batch, nor one the caller excludes.
      if (s.last_batch >= batch_ - 1 || (skip && skip(e.slot))) continue;
      victims[got++] = e.slot;
    }
    for (const Entry& e : held_) {
      heap_.push_back(e);
      std::push_heap(heap_.begin(), heap_.end(), Later);
    }
    return got;
  }

  uint32_t size() const override { return size_; }
  EvictionPolicyKind kind() const override { return kind_; }

 private:
  struct SlotState {
    double score = kNoScore;
    int64_t last_batch = -1;
    uint32_t count = 0;
    uint32_t version = 0;
    bool tracked = false;
  };
  // Entry: a slot's score when pushed; stale once the slot's version moved on.
  struct Entry {
    double score;
    int64_t last_batch;
    uint32_t slot;
    uint32_t version;
  };
  // Later: a after b in eviction order (std heaps keep the "largest" on top, so this makes a
  // min-heap of (score, last_batch, slot)).
  static bool Later(const Entry& a, const Entry& b) {
    return std::tie(a.score, a.last_batch, a.slot) > std::tie(b.score, b.last_batch, b.slot);
  }

  void Push(uint32_t slot) {
    SlotState& s = slots_[slot];
    ++s.version;
    heap_.push_back({s.score, s.last_batch, slot, s.version});
    std::push_heap(heap_.begin(), heap_.end(), Later);
    if (heap_.size() > 4 * static_cast<size_t>(size_) + 1024) Rebuild();
  }

  void Rebuild() {
    heap_.clear();
    for (uint32_t slot = 0; slot < slots_.size(); ++slot) {
      const SlotState& s = slots_[slot];
      if (s.tracked) heap_.push_back({s.score, s.last_batch, slot, s.version});
    }
    std::make_heap(heap_.begin(), heap_.end(), Later);
  }

  EvictionPolicyKind kind_;
  double inv_half_life_;
  int64_t batch_ = -1;
  uint32_t size_ = 0;
  std::vector<SlotState> slots_;
  std::vector<Entry> heap_;
  std::vector<Entry> held_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<EvictionPolicy>> EvictionPolicy::Create(
    const EvictionPolicyOptions& options) {
  if (options.capacity == 0) {
    return absl::InvalidArgumentError(
        "eviction policy: capacity 0 device slots; the device tier needs at least one row");
  }
  if (!(options.half_life_batches > 0.0) || !std::isfinite(options.half_life_batches)) {
    return absl::InvalidArgumentError(
        fmt::format("eviction policy: half_life_batches {} must be a finite number > 0",
                    options.half_life_batches));
  }
  switch (options.kind) {
    case EvictionPolicyKind::kLru:
    case EvictionPolicyKind::kLfu:
    case EvictionPolicyKind::kLrfu:
      return std::unique_ptr<EvictionPolicy>(new ScoredPolicy(options));
  }
  return absl::InvalidArgumentError(fmt::format(
      "eviction policy: unknown kind {}; use lru, lfu or lrfu", static_cast<int>(options.kind)));
}

}  // namespace recsdk::internal
