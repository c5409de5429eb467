// key_index.h: the open-addressing hash index of a table, int64 key -> uint32 row id.
//
// Each slot is 12 packed bytes (the key and its row id), so a key costs 12 / load bytes and a hit
// reads one cache line almost always: no separate key array, no control bytes. Linear probing
// with a multiplicative hash mapped to the slot range by "fastrange" (so the slot count need not
// be a power of two and can be sized close to the table's capacity); deletion shifts later
// entries back, so there are no tombstones and lookups never degrade after evictions.
//
// Threading: const methods (Find, FindBatch, ForEach) may run concurrently with each other; Insert,
// Erase, Reserve and Clear need exclusive access.
#ifndef RECSDK_TABLE_KEY_INDEX_H_
#define RECSDK_TABLE_KEY_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "src/common/prefetch.h"

namespace recsdk::internal {

class KeyIndex {
 public:
  static constexpr uint32_t kEmpty = 0xFFFFFFFFu;
  // kMaxLoad: entries / slots kept at or below this (grows by 2x beyond it).
  static constexpr double kMaxLoad = 0.8;

  // Creates an index that holds `expected` entries without growing.
  explicit KeyIndex(uint64_t expected = 0);
  ~KeyIndex();
  KeyIndex(const KeyIndex&) = delete;
  KeyIndex& operator=(const KeyIndex&) = delete;

  // Find: the row of `key`, or kEmpty.
  uint32_t Find(int64_t key) const { return FindFrom(Home(key), key); }
  // FindBatch: rows[i] = Find(keys[i]), with the slots of later keys prefetched (several cache
  // misses in flight instead of one).
  void FindBatch(const int64_t* keys, size_t n, uint32_t* rows) const;

  // Insert: adds key -> row; returns false (and changes nothing) when the key is present.
  bool Insert(int64_t key, uint32_t row);
  // InsertBatch: Insert(keys[i], rows[i]) for i < n, growing once up front and with the home
  // slots of later keys prefetched (an insert into a large index is a cache miss, like a
  // lookup). Returns how many keys were new.
  size_t InsertBatch(const int64_t* keys, const uint32_t* rows, size_t n);
  // Erase: removes key; returns false when absent.
  bool Erase(int64_t key);
  // Reserve: grows so that `expected` entries fit under kMaxLoad. O(size) when it grows.
  void Reserve(uint64_t expected);
  void Clear();

  uint64_t size() const { return size_; }
  uint64_t num_slots() const { return num_slots_; }
  // MemoryBytes: bytes of the slot array.
  uint64_t MemoryBytes() const { return num_slots_ * kSlotBytes; }

  // ForEach: f(key, row) for every entry, in slot order. O(slots).
  template <typename F>
  void ForEach(F&& f) const {
    for (uint64_t i = 0; i < num_slots_; ++i) {
      const Slot* s = SlotAt(i);
      const uint32_t row = LoadRow(s);
      if (row != kEmpty) f(LoadKey(s), row);
    }
  }

  // Hash: the 64-bit hash of a key (exposed for prefetching callers and tests).
  static uint64_t Hash(int64_t key) {
    uint64_t h = static_cast<uint64_t>(key);
    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ull;
    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ull;
    return h ^ (h >> 32);
  }
  uint64_t Home(int64_t key) const {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Hash(key)) * num_slots_) >> 64);
  }
  // PrefetchKey: the home slot's line and the next: at load 0.8 a hit scans ~3 slots (36 bytes)
  // from home, which crosses into the next line about half the time.
  void PrefetchKey(int64_t key) const {
    const char* p = reinterpret_cast<const char*>(SlotAt(Home(key)));
    PrefetchRead(p);
    PrefetchRead(p + 36);
  }

 private:
  struct Slot {
    unsigned char bytes[12];
  };
  static constexpr uint64_t kSlotBytes = sizeof(Slot);
  static_assert(kSlotBytes == 12);

  static int64_t LoadKey(const Slot* s) {
    int64_t k;
    std::memcpy(&k, s->bytes, 8);
    return k;
  }
  static uint32_t LoadRow(const Slot* s) {
    uint32_t r;
    std::memcpy(&r, s->bytes + 8, 4);
    return r;
  }
  static void Store(Slot* s, int64_t key, uint32_t row) {
    std::memcpy(s->bytes, &key, 8);
    std::memcpy(s->bytes + 8, &row, 4);
  }
  // FindFrom: Find with the key's home slot `i` already computed.
  uint32_t FindFrom(uint64_t i, int64_t key) const {
    for (;;) {
      const Slot* s = SlotAt(i);
      const uint32_t row = LoadRow(s);
      if (row == kEmpty) return kEmpty;
      if (LoadKey(s) == key) return row;
      if (++i == num_slots_) i = 0;
    }
  }
  const Slot* SlotAt(uint64_t i) const { return slots_ + i; }
  Slot* SlotAt(uint64_t i) { return slots_ + i; }
  void Rehash(uint64_t new_slots);
  static uint64_t SlotsFor(uint64_t expected);

  Slot* slots_ = nullptr;
  uint64_t num_slots_ = 0;
  uint64_t size_ = 0;
};

}  // namespace recsdk::internal

#endif  // RECSDK_TABLE_KEY_INDEX_H_
