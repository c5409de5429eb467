// table.cc: EmbeddingTable::Create and the core of TableImpl (table_impl.h): the row slab, row
// initialisation and allocation, single-key reads; plus the snapshot buffers of recsdk/table.h.
// Threading: see recsdk/table.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "fmt/format.h"
#include "src/common/hash.h"
#include "src/common/random.h"
#include "src/common/status_macros.h"
#include "src/table/table_impl.h"

namespace recsdk {
namespace internal {

TableImpl::TableImpl(const TableConfig& config, const SparseOptimizerConfig& optimizer)
    : EmbeddingTable(config, optimizer),
      row_floats_(config.dim + num_slots_),
      row_bytes_(static_cast<uint64_t>(row_floats_) * sizeof(float)),
      evicting_(config.eviction_threshold >= 0),
      admitting_(config.access_threshold >= 0),
      seed_(config.initializer.seed != 0 ? static_cast<uint64_t>(config.initializer.seed)
                                         : Fingerprint64(config.name)),
      padding_(config.padding_keys.begin(), config.padding_keys.end()) {
  const int64_t vocab =
      config.device_vocabulary_size + config.host_vocabulary_size + config.ssd_vocabulary_size;
  if (config.use_dynamic_expansion) {
    max_rows_ = std::min<int64_t>(kMaxRows, kDynamicReserveBytes / row_bytes_);
    index_ = std::make_unique<KeyIndex>(std::min<int64_t>(vocab, kDynamicInitialIndex));
  } else {
    max_rows_ = vocab;
    index_ = std::make_unique<KeyIndex>(vocab);
  }
  // Host size 0 means device only (the spec): then every row is a device row, as before tiers.
  tiered_ = !config.use_dynamic_expansion && config.host_vocabulary_size > 0;
  device_rows_ = tiered_ ? config.device_vocabulary_size : max_rows_;
  // Copy-on-write checkpoints keep the slots the latest one refers to while training writes
  // fresh ones: the SSD tier gets up to twice its vocabulary in slots (files are made only as
  // rows need them), as far as 32-bit row locations reach (TierBases::Check).
  if (tiered_ && config.ssd_vocabulary_size > 0 && vocab < int64_t{0xFFFFFFFF}) {
    ssd_spare_ = std::min<int64_t>(config.ssd_vocabulary_size, int64_t{0xFFFFFFFF} - vocab);
  }
}

Status TableImpl::Init() {
  // The slab is the device tier; timestamps and change tracking cover every tier's rows.
  slab_ = SlabReservation(static_cast<uint64_t>(device_rows_) * row_bytes_);
  if (slab_.base() == nullptr) {
    return absl::ResourceExhaustedError(fmt::format(
        "table \"{}\": cannot reserve {} bytes of address space for {} rows of {} floats; "
        "lower the vocabulary sizes",
        name(), static_cast<uint64_t>(device_rows_) * row_bytes_, device_rows_, row_floats_));
  }
  rows_base_ = slab_.base();
  dirty_ = SlabReservation(static_cast<uint64_t>(max_rows_));
  if (dirty_.base() == nullptr) {
    return absl::ResourceExhaustedError(
        fmt::format("table \"{}\": cannot reserve change tracking for {} rows", name(), max_rows_));
  }
  if (!tiered_) {
    row_keys_ = SlabReservation(static_cast<uint64_t>(max_rows_) * sizeof(int64_t));
    if (row_keys_.base() == nullptr) {
      return absl::ResourceExhaustedError(
          fmt::format("table \"{}\": cannot reserve row keys for {} rows", name(), max_rows_));
    }
  }
  if (evicting_) {
    timestamps_ = SlabReservation(static_cast<uint64_t>(max_rows_ + ssd_spare_) * sizeof(int64_t));
    if (timestamps_.base() == nullptr) {
      return absl::ResourceExhaustedError(
          fmt::format("table \"{}\": cannot reserve timestamps for {} rows", name(), max_rows_));
    }
  }
  if (tiered_) RECSDK_RETURN_IF_ERROR(InitTiers());
  return absl::OkStatus();
}

Status TableImpl::UseDeviceTierMemory(std::unique_ptr<DeviceTierMemory> memory) {
  if (!tiered_ || size() != 0 || next_row_ != 0 || device_memory_ != nullptr) {
    return absl::FailedPreconditionError(
        fmt::format("table \"{}\": device tier memory can only be given to a tiered table "
                    "(host_vocabulary_size > 0) before it holds any row, once",
                    name()));
  }
  if (memory == nullptr || memory->row_floats() != row_floats_ ||
      static_cast<int64_t>(memory->capacity()) != device_rows_) {
    return absl::InvalidArgumentError(fmt::format(
        "table \"{}\": its device tier is {} rows of {} floats; the device tier memory given has "
        "{} rows of {} floats",
        name(), device_rows_, row_floats_, memory == nullptr ? 0 : memory->capacity(),
        memory == nullptr ? 0 : memory->row_floats()));
  }
  device_memory_ = std::move(memory);
  rows_base_ = reinterpret_cast<char*>(device_memory_->rows());
  slab_ = SlabReservation();  // the host slab is not used any more
  return absl::OkStatus();
}

int64_t TableImpl::MemoryBytes() const {
  int64_t bytes = static_cast<int64_t>(index_->MemoryBytes());
  // Rows in device memory are not the host's (the Session counts them against its device pool).
  if (device_memory_ == nullptr) bytes += next_row_ * static_cast<int64_t>(row_bytes_);
  if (evicting_) bytes += next_row_ * static_cast<int64_t>(sizeof(int64_t));
  bytes += static_cast<int64_t>(free_rows_.capacity() * sizeof(uint32_t));
  bytes += static_cast<int64_t>(pending_.capacity() *
                                (sizeof(std::pair<const int64_t, PendingKey>) + 1));
  bytes += static_cast<int64_t>(padding_.capacity() * (sizeof(int64_t) + 1));
  bytes += static_cast<int64_t>(sizeof(*this));
  if (tiered_) {
    // The host tier's rows (the SSD tier's are on disk) and the tiers' bookkeeping.
    bytes += static_cast<int64_t>(host_->size()) * static_cast<int64_t>(row_bytes_);
    bytes +=
        static_cast<int64_t>((device_keys_.capacity() + host_keys_.capacity()) * sizeof(int64_t));
    bytes += static_cast<int64_t>(device_pins_.capacity() * sizeof(uint16_t));
    bytes += static_cast<int64_t>(size()) * static_cast<int64_t>(sizeof(uint64_t));  // history
  }
  return bytes;
}

// InitRow: embedding from the initializer stream of (seed, key), then fresh slots.
void TableImpl::InitRow(uint32_t row, int64_t key) const { InitRowAt(Row(row), key); }

void TableImpl::InitRowAt(float* w, int64_t key) const {
  const Initializer& init = config_.initializer;
  const int dim = config_.dim;
  PhiloxStream stream(CombineSeeds(seed_, static_cast<uint64_t>(key)), 0);
  switch (init.kind) {
    case Initializer::Kind::kConstant:
      std::fill(w, w + dim, static_cast<float>(init.value));
      break;
    case Initializer::Kind::kUniform: {
      const float lo = static_cast<float>(init.min), span = static_cast<float>(init.max - init.min);
      for (int i = 0; i < dim; ++i) w[i] = lo + span * stream.Uniform();
      break;
    }
    case Initializer::Kind::kNormal:
      for (int i = 0; i < dim; ++i) {
        w[i] = static_cast<float>(init.mean) + static_cast<float>(init.stddev) * stream.Normal();
      }
      break;
    case Initializer::Kind::kTruncatedNormal:
      for (int i = 0; i < dim; ++i) {
        w[i] = static_cast<float>(init.mean) +
               static_cast<float>(init.stddev) * stream.TruncatedNormal();
      }
      break;
    case Initializer::Kind::kGlorotUniform: {
      const float limit = std::sqrt(6.0f / (2.0f * static_cast<float>(dim)));
      for (int i = 0; i < dim; ++i) w[i] = -limit + 2.0f * limit * stream.Uniform();
      break;
    }
    case Initializer::Kind::kGlorotNormal: {
      const float stddev = std::sqrt(2.0f / (2.0f * static_cast<float>(dim)));
      for (int i = 0; i < dim; ++i) w[i] = stddev * stream.TruncatedNormal();
      break;
    }
  }
  InitSlots(optimizer_, dim, w + dim);
}

void TableImpl::InitRows(const uint32_t* at, size_t n, const uint32_t* rows,
                         const int64_t* keys) const {
  const Initializer& init = config_.initializer;
  const bool glorot = init.kind == Initializer::Kind::kGlorotUniform;
  if (init.kind != Initializer::Kind::kUniform && !glorot) {
    for (size_t j = 0; j < n; ++j) InitRow(rows[at[j]], keys[at[j]]);
    return;
  }
  // The same expressions as InitRow's, on the same words: a row's stream is (seed, key), and its
  // first `dim` words are the first blocks of that stream.
  const int dim = config_.dim;
  const float limit = std::sqrt(6.0f / (2.0f * static_cast<float>(dim)));
  const float lo = glorot ? -limit : static_cast<float>(init.min);
  const float span = glorot ? 2.0f * limit : static_cast<float>(init.max - init.min);
  const int blocks = (dim + 3) / 4;
  constexpr size_t kChunk = 64;
  uint64_t seeds[kChunk];
  std::vector<uint32_t> words(kChunk * 4 * static_cast<size_t>(blocks));
  for (size_t j0 = 0; j0 < n; j0 += kChunk) {
    const size_t m = std::min(kChunk, n - j0);
    for (size_t j = 0; j < m; ++j) {
      seeds[j] = CombineSeeds(seed_, static_cast<uint64_t>(keys[at[j0 + j]]));
    }
    PhiloxStreamBlocks(seeds, m, blocks, 0, words.data());
    for (size_t j = 0; j < m; ++j) {
      float* w = Row(rows[at[j0 + j]]);
      const uint32_t* u = words.data() + j * 4 * static_cast<size_t>(blocks);
      for (int i = 0; i < dim; ++i) w[i] = lo + span * UniformFloat(u[i]);
      InitSlots(optimizer_, dim, w + dim);
    }
  }
}

uint32_t TableImpl::AllocateRow() {
  if (!free_rows_.empty()) {
    const uint32_t r = free_rows_.back();
    free_rows_.pop_back();
    return r;
  }
  return static_cast<uint32_t>(next_row_++);
}

Status TableImpl::FullError(int64_t needed) const {
  if (config_.use_dynamic_expansion) {
    return absl::ResourceExhaustedError(fmt::format(
        "table \"{}\" is full: {} new keys need rows but only {} of its {} rows are free (the "
        "row address space a dynamically expanding table reserves, 2^40 bytes of {}-byte rows); "
        "shard the table, lower dim, or enable admission and eviction",
        name(), needed, FreeRows(), max_rows_, row_bytes_));
  }
  return absl::ResourceExhaustedError(fmt::format(
      "table \"{}\" is full: {} new keys need rows but only {} of its {} rows are free "
      "(capacity = device_vocabulary_size {} + host_vocabulary_size {} + ssd_vocabulary_size "
      "{}); raise the vocabulary sizes, set use_dynamic_expansion, or enable admission and "
      "eviction",
      name(), needed, tiered_ ? TierFreeRows() : FreeRows(), max_rows_,
      config_.device_vocabulary_size, config_.host_vocabulary_size, config_.ssd_vocabulary_size));
}

Status TableImpl::CheckKeyRange(absl::Span<const int64_t> keys) const {
  if (config_.key_dtype != DType::kInt32) return absl::OkStatus();
  for (int64_t k : keys) {
    if (k < std::numeric_limits<int32_t>::min() || k > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(fmt::format(
          "table \"{}\" has int32 keys but got key {}; map ids into the int32 range or create "
          "the table with key_dtype int64",
          name(), k));
    }
  }
  return absl::OkStatus();
}

uint32_t TableImpl::FindRow(int64_t key) const {
  if (padding_.contains(key)) return kPaddingRow;
  const uint32_t row = index_->Find(key);
  // With tiers only a device row has a row id the graph can use.
  if (row == KeyIndex::kEmpty || (tiered_ && row >= static_cast<uint32_t>(device_rows_))) {
    return kDefaultRow;
  }
  return row;
}

StatusOr<std::vector<float>> TableImpl::ReadRow(int64_t key) const {
  const uint32_t row = index_->Find(key);
  if (row == KeyIndex::kEmpty) {
    return absl::NotFoundError(fmt::format("table \"{}\" has no row for key {}", name(), key));
  }
  std::vector<float> out(static_cast<size_t>(row_floats_));
  if (!tiered_) {
    std::memcpy(out.data(), Row(row), row_bytes_);
    return out;
  }
  std::lock_guard<std::mutex> tier_lock(tier_mu_);
  RECSDK_RETURN_IF_ERROR(ReadRowsAt({&row, 1}, out.data()));
  return out;
}

float TableImpl::AdmissionCount(int64_t key) const {
  auto it = pending_.find(key);
  return it == pending_.end() ? 0.0f : it->second.count;
}

// Entries sorted by key: checkpoints and exports are canonical whatever the insertion order.
KeyRows TableImpl::SortedEntries() const {
  KeyRows entries;
  entries.reserve(index_->size());
  index_->ForEach([&](int64_t key, uint32_t row) { entries.emplace_back(key, row); });
  SortEntriesByKey(entries);
  return entries;
}

void SortEntriesByLocation(KeyRows& entries) {
  // Packed locations are distinct and below 2^32: a radix sort on their two 16-bit halves.
  const size_t n = entries.size();
  if (n < (size_t{1} << 16)) {
    std::sort(entries.begin(), entries.end(),
              [](const KeyRow& a, const KeyRow& b) { return a.second < b.second; });
    return;
  }
  KeyRows other(n);
  KeyRow* from = entries.data();
  KeyRow* to = other.data();
  for (int shift : {0, 16}) {
    std::vector<size_t> counts(size_t{1} << 16, 0);
    for (size_t i = 0; i < n; ++i) ++counts[(from[i].second >> shift) & 0xffff];
    size_t sum = 0;
    for (size_t& c : counts) {
      const size_t here = c;
      c = sum;
      sum += here;
    }
    for (size_t i = 0; i < n; ++i) to[counts[(from[i].second >> shift) & 0xffff]++] = from[i];
    std::swap(from, to);
  }
  // Two passes: the result is back in `entries`.
}

void SortEntriesByKey(KeyRows& entries) {
  const size_t n = entries.size();
  if (n < (size_t{1} << 16)) {
    std::sort(entries.begin(), entries.end());
    return;
  }
  // LSD radix sort on 11-bit digits of the key, its sign bit flipped so that negative keys come
  // first, over only the low bits in which keys differ (the high bits of small or clustered ids
  // are shared): a counting pass for every digit at once, then one stable scatter per digit.
  // Most of a full snapshot's time was the comparison sort this replaces.
  constexpr int kBits = 11;
  constexpr size_t kBuckets = size_t{1} << kBits;
  auto flip = [](int64_t key) { return static_cast<uint64_t>(key) ^ (uint64_t{1} << 63); };
  const uint64_t first = flip(entries[0].first);
  uint64_t varying = 0;
  for (const auto& e : entries) varying |= flip(e.first) ^ first;
  int bits = 0;
  while (bits < 64 && (varying >> bits) != 0) ++bits;
  const int passes = (bits + kBits - 1) / kBits;
  std::vector<size_t> counts(static_cast<size_t>(passes) * kBuckets, 0);
  for (const auto& e : entries) {
    const uint64_t k = flip(e.first);
    for (int d = 0; d < passes; ++d) ++counts[d * kBuckets + ((k >> (kBits * d)) & (kBuckets - 1))];
  }
  KeyRows other(n);
  KeyRow* from = entries.data();
  KeyRow* to = other.data();
  for (int d = 0; d < passes; ++d) {
    size_t* c = counts.data() + d * kBuckets;
    size_t sum = 0;
    for (size_t b = 0; b < kBuckets; ++b) {
      const size_t here = c[b];
      c[b] = sum;
      sum += here;
    }
    const int shift = kBits * d;
    for (size_t i = 0; i < n; ++i) {
      to[c[(flip(from[i].first) >> shift) & (kBuckets - 1)]++] = from[i];
    }
    std::swap(from, to);
  }
  if (from != entries.data()) entries.swap(other);
}

constexpr size_t kLargeBuffer = size_t{1} << 20;

void* MapHugeAligned(uint64_t bytes, int extra_flags) {
  // Over-map by one huge page and trim, so the mapping starts on a 2 MiB boundary: its pages can
  // be whole huge pages, and MoveSnapshotPages can move them without splitting them.
  const uint64_t len = (bytes + 4095) & ~uint64_t{4095};
  void* raw = mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | extra_flags, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePage - 1) & ~uintptr_t{kHugePage - 1};
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = start + len + kHugePage;
  if (end > aligned + len) munmap(reinterpret_cast<void*>(aligned + len), end - (aligned + len));
  void* p = reinterpret_cast<void*>(aligned);
  madvise(p, len, MADV_HUGEPAGE);
  return p;
}

void* AllocateSnapshotBuffer(size_t bytes) {
  if (bytes < kLargeBuffer) return ::operator new(bytes);
  void* p = MapHugeAligned(bytes, 0);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

bool MoveSnapshotPages(void* from, size_t bytes, void* to) {
  const uintptr_t src = reinterpret_cast<uintptr_t>(from);
  const uintptr_t dst = reinterpret_cast<uintptr_t>(to);
  if (bytes < kLargeBuffer || src % kHugePage != 0 || dst % kHugePage != 0) return false;
  const size_t len = (bytes + 4095) & ~size_t{4095};
  // MREMAP_DONTUNMAP leaves `from` mapped (and empty), so its owner frees it as usual.
  void* p = mremap(from, len, len, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, to);
  return p == to;
}

void FreeSnapshotBuffer(void* p, size_t bytes) noexcept {
  if (p == nullptr) return;
  if (bytes < kLargeBuffer) {
    ::operator delete(p);
  } else {
    munmap(p, bytes);
  }
}

}  // namespace internal

float* RowBufferAllocator::allocate(size_t n) {
  return static_cast<float*>(internal::AllocateSnapshotBuffer(n * sizeof(float)));
}
void RowBufferAllocator::deallocate(float* p, size_t n) noexcept {
  internal::FreeSnapshotBuffer(p, n * sizeof(float));
}

StatusOr<std::unique_ptr<EmbeddingTable>> EmbeddingTable::Create(
    const TableConfig& config, const SparseOptimizerConfig& optimizer) {
  RECSDK_RETURN_IF_ERROR(config.Validate());
  if (Status s = optimizer.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(
        fmt::format("table \"{}\": {}", config.name, std::string(s.message())));
  }
  if (config.use_dynamic_expansion && !optimizer.ByAddress()) {
    return absl::InvalidArgumentError(fmt::format(
        "table \"{}\": use_dynamic_expansion needs a by-address optimizer but got {}; use "
        "SGDByAddr, AdagradByAddress or LazyAdamByAddress",
        config.name, SparseOptimizerKindName(optimizer.kind)));
  }
  try {
    auto table = std::make_unique<internal::TableImpl>(config, optimizer);
    RECSDK_RETURN_IF_ERROR(table->Init());
    return std::unique_ptr<EmbeddingTable>(std::move(table));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(fmt::format(
        "table \"{}\": out of memory creating the key index for {} rows; lower the vocabulary "
        "sizes or use use_dynamic_expansion",
        config.name,
        config.device_vocabulary_size + config.host_vocabulary_size + config.ssd_vocabulary_size));
  }
}

}  // namespace recsdk
