// key_union.h: the keys several ranks asked for, united for one Resolve: what a shard's owner
// does with the keys sent to it (sharded_table.cc) and every replica with all ranks' keys
// (replicated_table.cc). Internal.
#ifndef RECSDK_DIST_KEY_UNION_H_
#define RECSDK_DIST_KEY_UNION_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/container/flat_hash_map.h"
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

// KeyUnion: the distinct keys in order of first arrival, each one's summed count (saturated at
// uint32 max, negative counts taken as 0) and latest time, and for each record its key's index.
struct KeyUnion {
  std::vector<int64_t> keys;
  std::vector<uint32_t> counts;
  std::vector<int64_t> times;  // empty when no record had a time
  std::vector<uint32_t> which;
};

// UniteKeys: the union of `received`. When some records have times and some not, the others
// take `data_time` (the table's data time), as lookups of one table would.
inline KeyUnion UniteKeys(absl::Span<const KeyRecord> received, int64_t data_time) {
  KeyUnion u;
  u.which.resize(received.size());
  bool any_time = false, all_time = true;
  absl::flat_hash_map<int64_t, uint32_t> index;
  index.reserve(received.size());
  for (size_t p = 0; p < received.size(); ++p) {
    const KeyRecord& r = received[p];
    auto [it, inserted] = index.try_emplace(r.key, static_cast<uint32_t>(u.keys.size()));
    if (inserted) {
      u.keys.push_back(r.key);
      u.counts.push_back(0);
      u.times.push_back(kNoKeyTime);
    }
    const uint32_t k = it->second;
    u.which[p] = k;
    const int64_t sum = static_cast<int64_t>(u.counts[k]) + std::max<int64_t>(r.count, 0);
    u.counts[k] =
        static_cast<uint32_t>(std::min<int64_t>(sum, std::numeric_limits<uint32_t>::max()));
    u.times[k] = std::max(u.times[k], r.time);
    any_time |= r.time != kNoKeyTime;
    all_time &= r.time != kNoKeyTime;
  }
  if (!any_time) {
    u.times.clear();
  } else if (!all_time) {
    for (int64_t& t : u.times) t = t == kNoKeyTime ? data_time : t;
  }
  return u;
}

}  // namespace recsdk::dist

#endif  // RECSDK_DIST_KEY_UNION_H_
