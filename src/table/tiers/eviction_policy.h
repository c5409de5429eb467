// eviction_policy.h: which rows leave the device tier (the cache of the host tier) when a batch
// needs room: LRU, LFU, and LRFU (a frequency-aware LRU), behind one small interface.
//
// The key stage will drive it per batch: BeginBatch(); Touch(the device slots the batch hits);
// ChooseVictims(as many as the batch misses, beyond the free slots) and move those rows down;
// Insert(each slot that receives a missing row, with the key's history from the host-side
// admission counts and timestamps). Victims are never among the slots touched or inserted in the
// current batch or the previous one (the previous batch may still be in flight: DESIGN.md's
// invariant), so a device tier smaller than two batches' unique keys gets fewer victims than
// asked, and the table turns that into its "device_vocabulary_size too small" error.
//
// Policies (priority: the slot with the smallest goes first; ties go to the older last use, then
// to the lower slot, so eviction is deterministic):
// - kLru: last batch used.
// - kLfu: uses so far, counting the key's history before it came to the device (the table keeps
//   counts for every key in host memory, so a hot key evicted once comes back hot).
// - kLrfu: LRFU (Lee et al., 1999): the sum over past uses of 2^-(age / half_life_batches), with
//   the history given on Insert counted as `count` uses at the key's last-use batch. Recent uses
//   count most, but a key used often stays ahead of one used once recently; half_life -> 0 is LRU,
//   -> infinity is LFU.
//
// Measured (benchmarks/tier_policy_bench.cc, device hit rate per unique key per batch, after a
// warm-up; 200k keys, batches of 4096 ids; see docs/tiers.md for the command): filled in below.
//
// Cost: O(log n) per Touch/Insert (a lazy binary heap; stale entries are dropped when met, and the
// heap is rebuilt when it holds more than 4x the slots), ChooseVictims O(k log n) for k entries
// looked at; memory about 40 bytes per device slot (device-tier bookkeeping in host memory, not
// per SSD row).
//
// Threading: not thread-safe; the key stage calls it from one thread.
#ifndef RECSDK_TABLE_TIERS_EVICTION_POLICY_H_
#define RECSDK_TABLE_TIERS_EVICTION_POLICY_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace recsdk::internal {

enum class EvictionPolicyKind : uint8_t { kLru = 0, kLfu = 1, kLrfu = 2 };
// EvictionPolicyName: "lru", "lfu", "lrfu".
const char* EvictionPolicyName(EvictionPolicyKind kind);

struct EvictionPolicyOptions {
  // kind: default chosen by measurement (see above).
  EvictionPolicyKind kind = EvictionPolicyKind::kLrfu;
  // capacity: device slots tracked, [0, capacity); > 0.
  uint32_t capacity = 0;
  // half_life_batches: kLrfu's half-life of a use, in batches; > 0.
  double half_life_batches = 32.0;
};

class EvictionPolicy {
 public:
  // Create: InvalidArgument naming the field for capacity 0 or a half-life <= 0.
  static absl::StatusOr<std::unique_ptr<EvictionPolicy>> Create(
      const EvictionPolicyOptions& options);
  virtual ~EvictionPolicy() = default;

  // BeginBatch: starts the next batch (the first is batch 0).
  virtual void BeginBatch() = 0;
  // Touch: the current batch uses these tracked slots (each once per batch is expected; a repeat
  // counts as another use).
  virtual void Touch(absl::Span<const uint32_t> slots) = 0;
  // Insert: starts tracking `slot`, which now holds a row the current batch uses; `prior_count`
  // is the key's uses before this batch and `prior_last_batch` the batch it was last used in
  // (-1 for none). A slot already tracked is re-inserted.
  virtual void Insert(uint32_t slot, uint32_t prior_count, int64_t prior_last_batch) = 0;
  // Remove: stops tracking `slot` (its row left the device for another reason). No-op if not
  // tracked.
  virtual void Remove(uint32_t slot) = 0;
  // ChooseVictims: up to n tracked slots, lowest priority first, none used in the current or the
  // previous batch; stops tracking them. Returns how many (fewer than n when the rest are
  // protected or there are no more).
  virtual size_t ChooseVictims(size_t n, uint32_t* victims) = 0;
  // size: slots tracked.
  virtual uint32_t size() const = 0;
  virtual EvictionPolicyKind kind() const = 0;
};

}  // namespace recsdk::internal

#endif  // RECSDK_TABLE_TIERS_EVICTION_POLICY_H_
