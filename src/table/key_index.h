// key_index.h: the hash index of a table, int64 key -> uint32 row id.
//
// A bucketed two-choice (cuckoo) hash table built for lookups that miss every cache level:
//
// - A bucket is one 64-byte line holding 5 entries (5 keys, then their 5 row ids, then a word of
//   flags), so an entry costs 12.8 bytes and a key 12.8 / load bytes.
// - Buckets come in groups of 64, one 4 KiB page. A key hashes to a group and to two distinct
//   buckets in it, and lives in one of the two (or, rarely, in the stash below). A lookup reads
//   both lines and compares all ten entries without a branch. Both lines lie in one page: on this
//   kind of machine (a VM whose memory is mapped in 4 KiB pages on the host side) a random line in
//   a page already walked costs about as much as the adjacent line, while a line in another page
//   costs a second page walk (measured: one line 7.6 ns, two in one page 9.0 ns, two in different
//   pages 14.7 ns, over a 160 MB array).
// - No branch depends on where the key sits. The linear probing this replaces read 1.3 lines per
//   hit but decided at each slot whether to go on, and at load 0.8 the run length is so spread
//   out (60% at the home slot, 7% beyond two lines) that most lookups mispredicted a branch
//   waiting on a cache miss, which throws away every lookup the core had started behind it:
//   22-25 ns per uniform lookup into 10M keys, against 13.5 ns now (FindBatch, AVX2).
// - The price: a lookup always reads two lines. Keys whose lines stay cached cost 3.6 ns here
//   against 10 ns for linear probing's mispredicts, but the hottest keys of a skewed stream,
//   which linear probing finds at their home slot when they were inserted first, cost more here
//   (Zipf 1.05 over 10M keys inserted hottest first: 11-13 ns against 9).
// - Insertion puts a key in the emptier of its two buckets; when both are full it moves an entry
//   of one to that entry's other bucket, and so on (a cuckoo walk, all inside the page). When a
//   walk fails (a group holding far more keys than the average), the key left over goes to a
//   small stash, and its first bucket is flagged so that lookups that could need the stash (and
//   only those) look there. At the maximum load, a few thousand of 10M keys are stashed.
// - Deletion empties the entry: there are no probe runs, so no tombstones and no shifting.
//
// Entries move between buckets as keys are inserted and on growth; row ids never change.
//
// Threading: const methods (Find, FindBatch, FindBatchFor, ForEach) may run concurrently with each
// other; Insert, InsertBatch, Erase, Reserve and Clear need exclusive access.
#ifndef RECSDK_TABLE_KEY_INDEX_H_
#define RECSDK_TABLE_KEY_INDEX_H_

#include <cstddef>
#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "src/common/cpu_features.h"
#include "src/common/prefetch.h"

namespace recsdk::internal {

class KeyIndex {
 public:
  static constexpr uint32_t kEmpty = 0xFFFFFFFFu;
  // kMaxLoad: entries / slots kept at or below this (grows by 2x beyond it).
  static constexpr double kMaxLoad = 0.85;
  static constexpr int kBucketSlots = 5;
  static constexpr uint64_t kGroupBuckets = 64;

  // Creates an index that holds `expected` entries without growing.
  explicit KeyIndex(uint64_t expected = 0);
  ~KeyIndex();
  KeyIndex(const KeyIndex&) = delete;
  KeyIndex& operator=(const KeyIndex&) = delete;

  // Find: the row of `key`, or kEmpty.
  uint32_t Find(int64_t key) const;
  // FindBatch: rows[i] = Find(keys[i]), with the buckets of later keys prefetched (many cache
  // misses in flight instead of one) and the entries compared with vector instructions of the
  // best ISA of this CPU.
  void FindBatch(const int64_t* keys, size_t n, uint32_t* rows) const;
  // FindBatchFor: FindBatch with the variant for `isa` (for tests; `isa` must not exceed
  // BestIsa()).
  void FindBatchFor(Isa isa, const int64_t* keys, size_t n, uint32_t* rows) const;

  // Insert: adds key -> row; returns false (and changes nothing) when the key is present.
  bool Insert(int64_t key, uint32_t row);
  // InsertBatch: Insert(keys[i], rows[i]) for i < n, growing once up front and with the buckets
  // of later keys prefetched. Returns how many keys were new.
  size_t InsertBatch(const int64_t* keys, const uint32_t* rows, size_t n);
  // BulkLoadDistinct: InsertBatch into an empty index of keys known to be distinct (a full
  // snapshot's, which LoadSnapshot checked are strictly sorted). For a large index the entries
  // are first partitioned by their first bucket (one counting pass, one scatter into a temporary
  // buffer of 16 bytes per entry), so that each partition's inserts hit a few hundred KiB of
  // buckets that stay in cache, instead of a cache miss per entry. Finds give what InsertBatch
  // would give; the slots chosen may differ. On a non-empty index it is InsertBatch.
  void BulkLoadDistinct(const int64_t* keys, const uint32_t* rows, size_t n);
  // Erase: removes key; returns false when absent.
  bool Erase(int64_t key);
  // Reserve: grows so that `expected` entries fit under kMaxLoad. O(size) when it grows.
  void Reserve(uint64_t expected);
  // Clear: removes every entry; keeps the slot count. O(slots).
  void Clear();

  uint64_t size() const { return size_; }
  uint64_t num_slots() const { return num_buckets_ * kBucketSlots; }
  // stash_size: entries in the stash (for tests and benchmarks; a few per 10^4 at full load).
  uint64_t stash_size() const { return stash_.size(); }
  // MemoryBytes: bytes of the buckets and the stash.
  uint64_t MemoryBytes() const {
    return num_buckets_ * sizeof(Bucket) + stash_.capacity() * (sizeof(int64_t) + 4 + 1);
  }

  // ForEach: f(key, row) for every entry, buckets first (in order), then the stash. O(slots).
  template <typename F>
  void ForEach(F&& f) const {
    for (uint64_t b = 0; b < num_buckets_; ++b) {
      const Bucket& bucket = buckets_[b];
      for (int j = 0; j < kBucketSlots; ++j) {
        if (bucket.rows[j] != kEmpty) f(bucket.keys[j], bucket.rows[j]);
      }
    }
    for (const auto& [key, row] : stash_) f(key, row);
  }

  // Hash: the 64-bit hash of a key (also used by the batch dedup, and exposed for tests).
  static uint64_t Hash(int64_t key) {
    uint64_t h = static_cast<uint64_t>(key);
    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ull;
    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ull;
    return h ^ (h >> 32);
  }
  // BucketOffsets: the byte offsets, from the first bucket, of the two buckets `key` may live in
  // (for tests that build colliding keys and benchmarks that model the index's memory traffic).
  void BucketOffsets(int64_t key, uint64_t* first, uint64_t* second) const {
    const Place p = Locate(key);
    *first = p.b1 * sizeof(Bucket);
    *second = p.b2 * sizeof(Bucket);
  }

 private:
  // The batch lookup of each ISA variant (key_index_isa.cc) walks the buckets.
  friend struct KeyIndexFindBatch;

  // Bucket: one cache line. An entry j is live when rows[j] != kEmpty; the key of an empty entry
  // is left as it was and never read on its own.
  struct alignas(64) Bucket {
    int64_t keys[kBucketSlots];
    uint32_t rows[kBucketSlots];
    uint32_t flags;
  };
  static_assert(sizeof(Bucket) == 64);
  // kStashed (in Bucket::flags): some key whose first bucket this is lives in the stash.
  static constexpr uint32_t kStashed = 1;

  // Place: a key's two buckets (global bucket numbers, distinct, in the same group).
  struct Place {
    uint64_t b1, b2;
  };
  Place Locate(int64_t key) const {
    const uint64_t h = Hash(key);
    // The group from the top 32 bits ("fastrange": a multiply and a shift map uniform bits onto
    // [0, n) without a division); the first bucket from the low bits; the second differs from
    // it by an odd mask, so it is another bucket of the group (groups are powers of two, >= 4).
    const uint64_t group = ((h >> 32) * num_groups_) >> 32;
    const uint64_t first = h & group_mask_;
    const uint64_t second = first ^ (((h >> 8) | 1) & group_mask_);
    const uint64_t base = group * (group_mask_ + 1);
    return {base + first, base + second};
  }
  void Prefetch(const Place& p) const {
    PrefetchRead(buckets_ + p.b1);
    PrefetchRead(buckets_ + p.b2);
  }
  // FindIn: Find with the key's buckets located (SSE2 match; see key_index.cc).
  uint32_t FindIn(const Place& p, int64_t key) const;
  // Resolved: the row from the OR of both buckets' (row + 1) matches, or from the stash when the
  // key was in neither and its first bucket `x` says the stash may hold it.
  uint32_t Resolved(uint32_t found, const Bucket& x, int64_t key) const {
    if (__builtin_expect(found == 0 && (x.flags & kStashed) != 0, 0) && !stash_.empty()) {
      return StashFind(key);
    }
    return found - 1;
  }
  uint32_t StashFind(int64_t key) const;
  // PlaceAbsent: stores an entry known to be absent, in the emptier of its buckets or by a cuckoo
  // walk (PlaceByWalk) when both are full. Never grows (the caller checked the load).
  void PlaceAbsent(const Place& p, int64_t key, uint32_t row);
  void PlaceByWalk(const Place& p, int64_t key, uint32_t row);
  void PrefetchForInsert(const Place& p) const;
  // InsertLocated: Insert with the key's buckets located and the load already checked.
  bool InsertLocated(const Place& p, int64_t key, uint32_t row);
  // InsertAhead: hands pushed entries to a placing function kAhead pushes later, their buckets
  // located and prefetched for writing in between (key_index.cc; InsertBatch and Rehash).
  template <typename PlaceFn>
  class InsertAhead;
  void Rehash(uint64_t new_buckets);
  void Allocate(uint64_t buckets);
  // ResetBuckets: every entry empty, no flags.
  void ResetBuckets();
  static uint64_t BucketsFor(uint64_t expected);

  Bucket* buckets_ = nullptr;
  uint64_t num_buckets_ = 0;
  uint64_t group_mask_ = 0;  // buckets per group - 1 (kGroupBuckets, or all when there are fewer)
  uint64_t num_groups_ = 0;
  uint64_t size_ = 0;                            // entries, stash included
  uint64_t walk_state_ = 0x9E3779B97F4A7C15ull;  // xorshift state for the cuckoo walks
  absl::flat_hash_map<int64_t, uint32_t> stash_;
};

}  // namespace recsdk::internal

#endif  // RECSDK_TABLE_KEY_INDEX_H_
