// key_index.cc: allocation, growth, cuckoo insertion, deletion and batched lookups of KeyIndex.
// Threading: see key_index.h.
#include "src/table/key_index.h"

#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <new>
#include <utility>

#include "src/common/check.h"
#include "src/common/isa_dispatch.h"
#include "src/table/key_index_match.h"

#define RECSDK_KEY_INDEX_DECLARE(isa)                                                        \
  extern "C" void recsdk_key_index_isa_##isa##_find_batch(const recsdk::internal::KeyIndex*, \
                                                          const int64_t*, size_t, uint32_t*);
RECSDK_ISA_DECLARE_VARIANTS(RECSDK_KEY_INDEX_DECLARE)
#undef RECSDK_KEY_INDEX_DECLARE

namespace recsdk::internal {

using key_index_match::MatchSse2;
using key_index_match::OrLanes;

namespace {
// Large bucket arrays get their own mapping (page-aligned, so a group is one page) with huge
// pages advised; small ones come from the heap, aligned to a line.
constexpr uint64_t kMapThreshold = 1ull << 21;
// A cuckoo walk gives up after this many moves and stashes the entry it carries. Walks in a
// group below ~95% full end in a few moves; this bound only matters for the rare overfull group.
constexpr int kMaxWalk = 64;

void* AllocateBytes(uint64_t bytes) {
  if (bytes >= kMapThreshold) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    madvise(p, bytes, MADV_HUGEPAGE);
    return p;
  }
  void* p = std::aligned_alloc(64, bytes);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void FreeBytes(void* p, uint64_t bytes) {
  if (p == nullptr) return;
  if (bytes >= kMapThreshold) {
    munmap(p, bytes);
  } else {
    std::free(p);
  }
}
}  // namespace

namespace {
// EmptySse2: bit j set when entry j of the bucket is empty (its row is all ones).
inline uint32_t EmptySse2(const void* bucket) {
  const __m128i* p = static_cast<const __m128i*>(bucket);
  const __m128i ones = _mm_set1_epi32(-1);
  const int r0_r1 = _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(_mm_load_si128(p + 2), ones)));
  const int r2_r4 = _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(_mm_load_si128(p + 3), ones)));
  return static_cast<uint32_t>((r0_r1 >> 2) | ((r2_r4 & 7) << 2));
}

}  // namespace

uint64_t KeyIndex::BucketsFor(uint64_t expected) {
  const double slots = std::ceil(static_cast<double>(expected) / kMaxLoad);
  const uint64_t buckets = static_cast<uint64_t>(std::ceil(slots / kBucketSlots));
  // One group of a power of two (at least 4) buckets, or whole groups of kGroupBuckets.
  if (buckets <= kGroupBuckets) return std::bit_ceil(std::max<uint64_t>(buckets, 4));
  return (buckets + kGroupBuckets - 1) / kGroupBuckets * kGroupBuckets;
}

void KeyIndex::Allocate(uint64_t buckets) {
  buckets_ = static_cast<Bucket*>(AllocateBytes(buckets * sizeof(Bucket)));
  num_buckets_ = buckets;
  const uint64_t group = std::min(buckets, kGroupBuckets);
  RECSDK_DCHECK(std::has_single_bit(group) && buckets % group == 0);
  group_mask_ = group - 1;
  num_groups_ = buckets / group;
  ResetBuckets();
}

void KeyIndex::ResetBuckets() {
  // Keys are set too, though an empty entry's key is never used alone: the branch-free match
  // reads it, and it must not be indeterminate.
  std::memset(static_cast<void*>(buckets_), 0xFF, num_buckets_ * sizeof(Bucket));
  for (uint64_t b = 0; b < num_buckets_; ++b) buckets_[b].flags = 0;
}

KeyIndex::KeyIndex(uint64_t expected) { Allocate(BucketsFor(expected)); }

KeyIndex::~KeyIndex() { FreeBytes(buckets_, num_buckets_ * sizeof(Bucket)); }

void KeyIndex::Clear() {
  ResetBuckets();
  stash_.clear();
  size_ = 0;
}

void KeyIndex::Reserve(uint64_t expected) {
  if (static_cast<double>(expected) > kMaxLoad * static_cast<double>(num_slots())) {
    Rehash(std::max(BucketsFor(expected), BucketsFor(size_ * 2)));
  }
}

// A ring of the last kAhead pushed entries, each located and prefetched for writing when pushed
// and placed when kAhead more have been pushed (or at Finish): an insert into a large index is a
// cache miss, like a lookup, so many are kept in flight. Entries are placed in push order.
template <typename PlaceFn>
class KeyIndex::InsertAhead {
 public:
  InsertAhead(const KeyIndex& index, PlaceFn place) : index_(index), place_(std::move(place)) {}
  void Push(int64_t key, uint32_t row) {
    Pending& slot = ring_[pushed_++ % kAhead];
    if (pushed_ > kAhead) place_(slot.place, slot.key, slot.row);
    slot = {key, row, index_.Locate(key)};
    index_.PrefetchForInsert(slot.place);
  }
  void Finish() {
    for (size_t i = pushed_ > kAhead ? pushed_ - kAhead : 0; i < pushed_; ++i) {
      const Pending& slot = ring_[i % kAhead];
      place_(slot.place, slot.key, slot.row);
    }
    pushed_ = 0;
  }

 private:
  static constexpr size_t kAhead = 32;
  struct Pending {
    int64_t key;
    uint32_t row;
    Place place;
  };
  const KeyIndex& index_;
  PlaceFn place_;
  Pending ring_[kAhead];
  size_t pushed_ = 0;
};

void KeyIndex::Rehash(uint64_t new_buckets) {
  Bucket* old = buckets_;
  const uint64_t old_buckets = num_buckets_;
  absl::flat_hash_map<int64_t, uint32_t> old_stash;
  old_stash.swap(stash_);
  Allocate(new_buckets);
  // The old buckets are read in order; the entries go to random lines of the new ones.
  InsertAhead ahead(
      *this, [this](const Place& p, int64_t key, uint32_t row) { PlaceAbsent(p, key, row); });
  for (uint64_t b = 0; b < old_buckets; ++b) {
    for (int j = 0; j < kBucketSlots; ++j) {
      if (old[b].rows[j] != kEmpty) ahead.Push(old[b].keys[j], old[b].rows[j]);
    }
  }
  for (const auto& [key, row] : old_stash) ahead.Push(key, row);
  ahead.Finish();
  FreeBytes(old, old_buckets * sizeof(Bucket));
}

uint32_t KeyIndex::StashFind(int64_t key) const {
  auto it = stash_.find(key);
  return it == stash_.end() ? kEmpty : it->second;
}

inline uint32_t KeyIndex::FindIn(const Place& p, int64_t key) const {
  const __m128i k = _mm_set1_epi64x(key);
  const Bucket& x = buckets_[p.b1];
  return Resolved(OrLanes(_mm_or_si128(MatchSse2(&x, k), MatchSse2(&buckets_[p.b2], k))), x, key);
}

uint32_t KeyIndex::Find(int64_t key) const { return FindIn(Locate(key), key); }

void KeyIndex::PrefetchForInsert(const Place& p) const {
  PrefetchWrite(buckets_ + p.b1);
  PrefetchWrite(buckets_ + p.b2);
}

inline void KeyIndex::PlaceAbsent(const Place& p, int64_t key, uint32_t row) {
  // The emptier of the two buckets, so that both fill evenly and walks stay rare, chosen without
  // a branch on the buckets' contents: such a branch mispredicts half the time and waits on the
  // buckets' cache miss, so every insert behind it would wait too.
  const uint32_t e1 = EmptySse2(&buckets_[p.b1]), e2 = EmptySse2(&buckets_[p.b2]);
  if (__builtin_expect((e1 | e2) == 0, 0)) return PlaceByWalk(p, key, row);
  // (A table: baseline x86-64 has no popcnt instruction, and the library call costs more.)
  static constexpr uint8_t kEmpties[32] = {0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4,
                                           1, 2, 2, 3, 2, 3, 3, 4, 2, 3, 3, 4, 3, 4, 4, 5};
  const bool first = kEmpties[e1] >= kEmpties[e2];
  Bucket& b = buckets_[first ? p.b1 : p.b2];
  const int j = std::countr_zero(first ? e1 : e2);
  b.keys[j] = key;
  b.rows[j] = row;
}

void KeyIndex::PlaceByWalk(const Place& p, int64_t key, uint32_t row) {
  // Both buckets full: a random walk. Put the carried entry in a random slot of the current
  // bucket, and carry the entry it displaces to that entry's other bucket, until one has room.
  uint64_t bucket = (walk_state_ & 1) ? p.b1 : p.b2;
  for (int step = 0; step < kMaxWalk; ++step) {
    walk_state_ ^= walk_state_ << 13;
    walk_state_ ^= walk_state_ >> 7;
    walk_state_ ^= walk_state_ << 17;
    Bucket& b = buckets_[bucket];
    const int j = static_cast<int>((walk_state_ >> 32) % kBucketSlots);
    std::swap(key, b.keys[j]);
    std::swap(row, b.rows[j]);
    const Place q = Locate(key);
    bucket = q.b1 == bucket ? q.b2 : q.b1;
    Bucket& next = buckets_[bucket];
    if (const uint32_t empty = EmptySse2(&next); empty != 0) {
      const int free = std::countr_zero(empty);
      next.keys[free] = key;
      next.rows[free] = row;
      return;
    }
  }
  // The walk failed (the group is far fuller than the average): the carried entry is stashed.
  buckets_[Locate(key).b1].flags |= kStashed;
  stash_.emplace(key, row);
}

bool KeyIndex::InsertLocated(const Place& p, int64_t key, uint32_t row) {
  RECSDK_DCHECK(row < kEmpty);
  if (FindIn(p, key) != kEmpty) return false;
  PlaceAbsent(p, key, row);
  ++size_;
  return true;
}

bool KeyIndex::Insert(int64_t key, uint32_t row) {
  // Grow only for a key that is new (inserting a present key changes nothing).
  if (static_cast<double>(size_ + 1) > kMaxLoad * static_cast<double>(num_slots()) &&
      Find(key) == kEmpty) {
    Rehash(BucketsFor(size_ * 2));
  }
  return InsertLocated(Locate(key), key, row);
}

size_t KeyIndex::InsertBatch(const int64_t* keys, const uint32_t* rows, size_t n) {
  Reserve(size_ + n);
  size_t added = 0;
  InsertAhead ahead(*this, [&](const Place& p, int64_t key, uint32_t row) {
    added += InsertLocated(p, key, row);
  });
  for (size_t i = 0; i < n; ++i) ahead.Push(keys[i], rows[i]);
  ahead.Finish();
  return added;
}

void KeyIndex::BulkLoadDistinct(const int64_t* keys, const uint32_t* rows, size_t n) {
  if (size_ != 0 || !stash_.empty()) {
    InsertBatch(keys, rows, n);  // the partitioned load assumes empty buckets; the plain one not
    return;
  }
  Reserve(n);
  // Partitions of about 256 KiB of buckets (L2-sized), at most 4096 (the scatter's streams).
  constexpr uint64_t kPartBytes = uint64_t{256} << 10;
  const uint64_t parts = std::min<uint64_t>(4096, num_buckets_ * sizeof(Bucket) / kPartBytes);
  struct Entry {
    int64_t key;
    uint32_t row;
  };
  const uint64_t bytes = static_cast<uint64_t>(n) * sizeof(Entry);
  Entry* sorted = nullptr;
  if (parts >= 4 && n >= (size_t{1} << 16)) {
    try {
      sorted = static_cast<Entry*>(AllocateBytes(bytes));
    } catch (const std::bad_alloc&) {
      sorted = nullptr;  // no room for the partitioned copy: insert in the given order
    }
  }
  if (sorted == nullptr) {
    InsertAhead ahead(
        *this, [this](const Place& p, int64_t key, uint32_t row) { PlaceAbsent(p, key, row); });
    for (size_t i = 0; i < n; ++i) ahead.Push(keys[i], rows[i]);
    ahead.Finish();
    size_ = n;
    return;
  }
  auto part_of = [&](int64_t key) { return Locate(key).b1 * parts / num_buckets_; };
  std::vector<uint64_t> start(parts + 1, 0);
  for (size_t i = 0; i < n; ++i) ++start[part_of(keys[i]) + 1];
  for (uint64_t p = 0; p < parts; ++p) start[p + 1] += start[p];
  std::vector<uint64_t> next(start.begin(), start.end() - 1);
  for (size_t i = 0; i < n; ++i) sorted[next[part_of(keys[i])]++] = Entry{keys[i], rows[i]};
  // In partition order, each partition's buckets are in cache after its first few inserts.
  for (size_t i = 0; i < n; ++i) PlaceAbsent(Locate(sorted[i].key), sorted[i].key, sorted[i].row);
  FreeBytes(sorted, bytes);
  size_ = n;
}

bool KeyIndex::Erase(int64_t key) {
  const Place p = Locate(key);
  for (const uint64_t b : {p.b1, p.b2}) {
    Bucket& bucket = buckets_[b];
    for (int j = 0; j < kBucketSlots; ++j) {
      if (bucket.rows[j] != kEmpty && bucket.keys[j] == key) {
        bucket.rows[j] = kEmpty;
        --size_;
        return true;
      }
    }
  }
  // The first bucket's flag stays set after the stash empties (a lookup that checks the stash
  // needlessly is only slower); Clear and growth reset it.
  if ((buckets_[p.b1].flags & kStashed) != 0 && stash_.erase(key) == 1) {
    --size_;
    return true;
  }
  return false;
}

// The batch lookups' ISA variants (key_index_isa.cc). AVX-512 CPUs run the AVX2 build: on the
// machine these were measured on, a Zen 5 with AVX-512, it ran as fast as any AVX-512 form tried.
namespace {
struct KeyIndexKernels {
  Isa isa;
  void (*find_batch)(const KeyIndex*, const int64_t*, size_t, uint32_t*);
};
}  // namespace

void KeyIndex::FindBatchFor(Isa isa, const int64_t* keys, size_t n, uint32_t* rows) const {
#define RECSDK_KEY_INDEX_TABLE(isa_enum, isa) \
  KeyIndexKernels { isa_enum, recsdk_key_index_isa_##isa##_find_batch }
  static const IsaVariants<KeyIndexKernels> variants(
      RECSDK_ISA_VARIANT_TABLES(RECSDK_KEY_INDEX_TABLE));
#undef RECSDK_KEY_INDEX_TABLE
  variants.For(std::min(isa, Isa::kAvx2)).find_batch(this, keys, n, rows);
}

void KeyIndex::FindBatch(const int64_t* keys, size_t n, uint32_t* rows) const {
  static const Isa isa = BestIsa();
  FindBatchFor(isa, keys, n, rows);
}

}  // namespace recsdk::internal
