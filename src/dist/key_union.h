// key_union.h: the keys several ranks asked for, united for one Resolve: what a shard's owner
// does with the keys sent to it (sharded_table.cc) and every replica with all ranks' keys
// (replicated_table.cc). Internal.
#ifndef RECSDK_DIST_KEY_UNION_H_
#define RECSDK_DIST_KEY_UNION_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/types/span.h"

namespace recsdk::dist {

// kNoKeyTime: the time of a key whose lookup had no timestamps.
inline constexpr int64_t kNoKeyTime = std::numeric_limits<int64_t>::min();

// KeyRecord: one key a rank sends, with its count in the batch and its time (kNoKeyTime: none).
struct KeyRecord {
  int64_t key;
  int64_t count;
  int64_t time;
};

// KeyUnion: the distinct keys of some records in order of first arrival, each one's summed count
// (saturated at uint32 max, negative counts taken as 0) and latest time, and for each record its
// key's index. Made to be kept and refilled every step: Unite reuses its arrays and its index (an
// open-addressing table stamped per call, so nothing is cleared or freed between calls), so once
// the batches reach their size a step's union allocates nothing. Not thread-safe.
class KeyUnion {
 public:
  // Unite: refills this union with `received`. When some records have times and some not, the
  // others take `data_time` (the table's data time), as lookups of one table would.
  void Unite(absl::Span<const KeyRecord> received, int64_t data_time);

  std::vector<int64_t> keys;
  std::vector<uint32_t> counts;
  std::vector<int64_t> times;  // empty when no record had a time
  std::vector<uint32_t> which;

 private:
  // Slot: a key and its index, valid when `stamp` is the current call's.
  struct Slot {
    int64_t key;
    uint32_t stamp;
    uint32_t index;
  };
  std::vector<Slot> slots_;  // a power of two, at least twice the records
  uint32_t stamp_ = 0;
};

inline void KeyUnion::Unite(absl::Span<const KeyRecord> received, int64_t data_time) {
  const size_t n = received.size();
  keys.clear();
  counts.clear();
  times.clear();
  which.resize(n);
  size_t capacity = 16;
  while (capacity < 2 * n) capacity *= 2;
  if (slots_.size() < capacity || ++stamp_ == 0) {
    // A new table, or the stamps wrapped: start with every slot stale.
    slots_.assign(std::max(capacity, slots_.size()), Slot{0, 0, 0});
    stamp_ = 1;
  }
  const size_t mask = slots_.size() - 1;
  // Multiplicative hashing on the top bits: an owner's keys share their ShardOwner residue, so
  // the low bits of Mix64 would crowd them.
  const int shift = 64 - __builtin_ctzll(static_cast<uint64_t>(slots_.size()));
  bool any_time = false, all_time = true;
  for (size_t p = 0; p < n; ++p) {
    const KeyRecord& r = received[p];
    size_t at =
        static_cast<size_t>((static_cast<uint64_t>(r.key) * 0x9E3779B97F4A7C15ull) >> shift);
    while (slots_[at].stamp == stamp_ && slots_[at].key != r.key) at = (at + 1) & mask;
    Slot& slot = slots_[at];
    if (slot.stamp != stamp_) {
      slot = Slot{r.key, stamp_, static_cast<uint32_t>(keys.size())};
      keys.push_back(r.key);
      counts.push_back(0);
      times.push_back(kNoKeyTime);
    }
    const uint32_t k = slot.index;
    which[p] = k;
    const int64_t sum = static_cast<int64_t>(counts[k]) + std::max<int64_t>(r.count, 0);
    counts[k] = static_cast<uint32_t>(std::min<int64_t>(sum, std::numeric_limits<uint32_t>::max()));
    times[k] = std::max(times[k], r.time);
    any_time |= r.time != kNoKeyTime;
    all_time &= r.time != kNoKeyTime;
  }
  if (!any_time) {
    times.clear();
  } else if (!all_time) {
    for (int64_t& t : times) t = t == kNoKeyTime ? data_time : t;
  }
}

}  // namespace recsdk::dist

#endif  // RECSDK_DIST_KEY_UNION_H_
