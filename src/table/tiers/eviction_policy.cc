// eviction_policy.cc: LRU, LFU and LRFU as one scored policy over a lazy min-heap.
//
// Touch only raises a slot's score (every kind's score grows with use), so the heap is not told:
// a slot's heap entry keeps the score it had when pushed, a lower bound of its score now, and
// ChooseVictims re-pushes an entry whose slot was touched since when it reaches the top. The entry
// on top whose score is current is then the least of all current scores, so victims come in the
// same order as with a push per Touch, at a heap operation per slot that reaches the top instead
// of one per Touch.
//
// Two more kinds of entry stay out of the heap while they cannot be victims, since popping and
// pushing them back was most of ChooseVictims' work: rows inserted in the current or the previous
// batch wait in a FIFO (recent_) until they are old enough, and the victims of a call wait in
// lent_ until the next call, which puts back those the caller did not Remove (a plan that
// failed). Neither changes the order: the heap holds every slot that may be a victim. Together
// they cut the policy's share of tier_e2e_bench's host-tiered Resolve by 60% (docs/tiers.md).
// Threading: not thread-safe (see eviction_policy.h).
#include "src/table/tiers/eviction_policy.h"

#include <algorithm>
#include <cmath>
#include <deque>
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
        slots_(options.capacity) {
    // The lazy heap's one allocation, made once (its entries never pass kMaxEntries, see
    // Insert), so its memory is a fixed 48 bytes a slot instead of a vector that doubled as
    // stale entries piled up: at scale that doubling was RSS still growing after the host tier
    // had filled (docs/tiers.md, "RSS").
    heap_.reserve(MaxEntries(options.capacity));
  }

  // MaxEntries: the entries (heap, recent and lent) that trigger a Rebuild: twice the slots
  // tracked and 1024 more, so a rebuild (O(capacity)) comes at most once per `size_` pushes.
  static size_t MaxEntries(uint32_t tracked) { return 2 * static_cast<size_t>(tracked) + 1024; }

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
    ++s.version;  // its older entries are stale
    // Not a victim before batch_ + 2: into the heap from recent_ then.
    recent_.push_back({s.score, s.last_batch, slot, s.version});
    if (heap_.size() + recent_.size() + lent_.size() >= MaxEntries(size_)) {
      Rebuild();
    }
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
    // The last call's victims that are still tracked, and rows that arrived before the previous
    // batch, may be victims now.
    for (const Entry& e : lent_) {
      if (Live(e)) PushEntry(e);
    }
    lent_.clear();
    while (!recent_.empty() && recent_.front().last_batch < batch_ - 1) {
      if (Live(recent_.front())) PushEntry(recent_.front());
      recent_.pop_front();
    }
    size_t got = 0;
    held_.clear();
    while (got < n && !heap_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end(), Later);
      const Entry e = heap_.back();
      heap_.pop_back();
      const SlotState& s = slots_[e.slot];
      if (!Live(e)) continue;  // stale: removed or inserted again since
      if (s.score != e.score || s.last_batch != e.last_batch) {
        // Touched since it was pushed: back in at its current score.
        PushEntry({s.score, s.last_batch, e.slot, e.version});
        continue;
      }
      // Not a slot of the current or the previous batch, nor one the caller excludes: held, and
      // pushed back below.
      if (s.last_batch >= batch_ - 1 || (skip && skip(e.slot))) {
        held_.push_back(e);
        continue;
      }
      // Victims stay tracked until Removed: lent_ until the next call.
      lent_.push_back(e);
      victims[got++] = e.slot;
    }
    for (const Entry& e : held_) PushEntry(e);
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

  bool Live(const Entry& e) const {
    const SlotState& s = slots_[e.slot];
    return s.tracked && s.version == e.version;
  }

  void PushEntry(const Entry& e) {
    heap_.push_back(e);
    std::push_heap(heap_.begin(), heap_.end(), Later);
  }

  // Rebuild: one current entry per tracked slot, all in the heap (recent_ and lent_ emptied, so
  // no slot has two live entries).
  void Rebuild() {
    heap_.clear();
    recent_.clear();
    lent_.clear();
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
  std::vector<Entry> held_;   // ChooseVictims' popped entries that are not victims
  std::deque<Entry> recent_;  // inserted in the last batches, by batch: not yet in the heap
  std::vector<Entry> lent_;   // the last call's victims: back into the heap unless Removed
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
