// eviction_policy.h: which rows leave the device tier (the cache of the host tier) when a batch
// needs room: LRU, LFU, and LRFU (a frequency-aware LRU), behind one small interface.
//
// The key stage will drive it per batch: BeginBatch(); Touch(the device slots the batch hits);
// ChooseVictims(as many as the batch misses, beyond the free slots), move those rows down and
// Remove them; Insert(each slot that receives a missing row, with the key's history from the
// host-side admission counts and timestamps). Victims are never among the slots touched or inserted
// in the current batch or the previous one (the previous batch may still be in flight: DESIGN.md's
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
// Measured (benchmarks/tier_policy_bench.cc: device hit rate per unique key per batch after 100
// warm-up batches; 200k keys, 600 batches of 4096 ids; the drifting stream moves its hot set 50
// keys a batch; deterministic, so these are exact for that stream):
//
//                      zipf 10%   zipf 25%   drift 10%   drift 25%
//   lru                 0.591      0.752      0.574       0.735
//   lfu                 0.684      0.791      0.441       0.732
//   lrfu half-life   8  0.608      0.753      0.581       0.733
//   lrfu half-life  32  0.659      0.763      0.608       0.732
//   lrfu half-life  64  0.672      0.775      0.595       0.736
//   lrfu half-life 128  0.679      0.786      0.564       0.735
//
// LFU wins on a fixed Zipf but collapses when the hot set moves (0.77x LRU at 10%: keys that
// were hot keep their counts); LRU is at best level with the others. The default is LRFU with a
// half-life of 64 batches, the setting with the smallest worst-case loss to the best policy of each
// column (at most 0.016 of hit rate; +14% over LRU on zipf 10%, +4% on drift 10%). The best
// half-life grows with the cache's turnover time (slots / misses per batch: ~30 batches at 10%,
// ~110 at 25% here); a half-life derived from it is the next thing to try.
//
// Cost: O(1) per Touch and Insert (a lazy binary heap: entries of touched slots are re-keyed and
// those of removed slots dropped when they reach the top; rows of the last two batches and the
// last call's victims wait outside it; rebuilt when the entries reach 2x the slots tracked + 1024,
// so at most once per that many Inserts), ChooseVictims O(k log n) for k entries looked at.
// Memory: 80 bytes per slot of `capacity`, allocated once at Create (32 of state, 48 of heap
// entries reserved for the rebuild bound) plus the last two batches' inserts; bookkeeping in
// host memory for each device (or host) tier slot, nothing per SSD row.
//
// Threading: not thread-safe; the key stage calls it from one thread.
#ifndef RECSDK_TABLE_TIERS_EVICTION_POLICY_H_
#define RECSDK_TABLE_TIERS_EVICTION_POLICY_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace recsdk::internal {

enum class EvictionPolicyKind : uint8_t { kLru = 0, kLfu = 1, kLrfu = 2 };
// EvictionPolicyName: "lru", "lfu", "lrfu".
const char* EvictionPolicyName(EvictionPolicyKind kind);

struct EvictionPolicyOptions {
  // kind: default LRFU, chosen by measurement (see above).
  EvictionPolicyKind kind = EvictionPolicyKind::kLrfu;
  // capacity: device slots tracked, [0, capacity); > 0.
  uint32_t capacity = 0;
  // half_life_batches: kLrfu's half-life of a use, in batches; > 0. Default 64 (measured above).
  double half_life_batches = 64.0;
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
  // counts as another use; a slot not tracked is skipped).
  virtual void Touch(absl::Span<const uint32_t> slots) = 0;
  // Insert: starts tracking `slot`, which now holds a row the current batch uses; `prior_count`
  // is the key's uses before this batch and `prior_last_batch` the batch it was last used in
  // (-1 for none). A slot already tracked is re-inserted. InvalidArgument (nothing changed) for
  // a slot outside [0, capacity).
  [[nodiscard]] virtual absl::Status Insert(uint32_t slot, uint32_t prior_count,
                                            int64_t prior_last_batch) = 0;
  // Remove: stops tracking `slot` (its row left the device for another reason). No-op if not
  // tracked.
  virtual void Remove(uint32_t slot) = 0;
  // ChooseVictims: up to n tracked slots, lowest priority first, none used in the current or the
  // previous batch and none for which `skip` (when given) returns true (e.g. pinned slots).
  // Returns how many (fewer than n when the rest are protected or there are no more). The
  // victims stay tracked until the caller Removes them (or Inserts a new row into them), so a
  // caller that cannot evict them after all has nothing to undo.
  virtual size_t ChooseVictims(size_t n, uint32_t* victims,
                               const std::function<bool(uint32_t)>& skip = {}) = 0;
  // size: slots tracked.
  virtual uint32_t size() const = 0;
  virtual EvictionPolicyKind kind() const = 0;
};

}  // namespace recsdk::internal

#endif  // RECSDK_TABLE_TIERS_EVICTION_POLICY_H_
