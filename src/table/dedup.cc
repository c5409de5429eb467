// dedup.cc: DedupKeys (one pass over a batch's keys of a table) and AggregateGradients (per
// unique key sums). DedupKeys keeps its hash scratch per thread; both are thread-safe.
#include <algorithm>
#include <cstring>
#include <vector>

#include "oneapi/tbb/blocked_range.h"
#include "oneapi/tbb/global_control.h"
#include "oneapi/tbb/parallel_for.h"
#include "recsdk/table.h"
#include "src/table/key_index.h"

namespace recsdk {

namespace {

template <typename K>
void DedupImpl(absl::Span<const K> keys, DedupResult* out) {
  constexpr uint32_t kEmpty = 0xFFFFFFFFu;
  const size_t n = keys.size();
  size_t cap = 16;
  while (cap < 2 * n) cap <<= 1;
  const uint64_t mask = cap - 1;
  // Scratch: slot -> (key, index into unique_keys), one cache line access per probe. A slot is
  // live only when its generation is this call's, so the scratch is not cleared per call (that
  // was a write of 16 bytes x 2n slots, more than the probes themselves).
  struct Slot {
    int64_t key;
    uint32_t unique;
    uint32_t gen;
  };
  thread_local std::vector<Slot> scratch;
  thread_local uint32_t gen = 0;
  if (scratch.size() < cap) {
    scratch.assign(cap, Slot{0, kEmpty, 0});
    gen = 0;
  }
  if (++gen == 0) {
    for (Slot& x : scratch) x.gen = 0;
    gen = 1;
  }
  Slot* s = scratch.data();
  out->unique_keys.resize(n);
  out->counts.resize(n);
  out->restore_index.resize(n);
  uint32_t* restore = out->restore_index.data();
  int64_t* unique_keys = out->unique_keys.data();
  uint32_t* counts = out->counts.data();
  uint32_t num_unique = 0;
  constexpr size_t kAhead = 16;
  for (size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) {
      __builtin_prefetch(s +
                         (internal::KeyIndex::Hash(static_cast<int64_t>(keys[i + kAhead])) & mask));
    }
    const int64_t key = static_cast<int64_t>(keys[i]);
    uint64_t h = internal::KeyIndex::Hash(key) & mask;
    for (;;) {
      if (s[h].gen != gen) {
        s[h].key = key;
        s[h].unique = num_unique;
        s[h].gen = gen;
        unique_keys[num_unique] = key;
        counts[num_unique] = 1;
        restore[i] = num_unique++;
        break;
      }
      if (s[h].key == key) {
        const uint32_t u = s[h].unique;
        ++counts[u];
        restore[i] = u;
        break;
      }
      h = (h + 1) & mask;
    }
  }
  out->unique_keys.resize(num_unique);
  out->counts.resize(num_unique);
}

}  // namespace

void DedupKeys(absl::Span<const int64_t> keys, DedupResult* out) { DedupImpl(keys, out); }
void DedupKeys(absl::Span<const int32_t> keys, DedupResult* out) { DedupImpl(keys, out); }

void AggregateGradients(absl::Span<const uint32_t> restore_index, const float* grads, int dim,
                        int64_t num_unique, float* out) {
  const size_t d = static_cast<size_t>(dim);
  const size_t n = restore_index.size();
  // Each task owns a range [lo, hi) of unique ids and adds, in input order, the positions that
  // map into it: no two tasks write the same output row and each row's summation order (input
  // order) never depends on the number of tasks. Output rows are not zeroed up front: DedupKeys
  // numbers unique keys in order of first occurrence, so the first position of id `next` copies
  // its gradient (one pass, no separate zeroing pass); ids that skip ahead of that order (a
  // restore index from elsewhere) zero the rows they pass first, so any index gives the sums.
  auto run = [&](uint32_t lo, uint32_t hi) {
    uint32_t next = lo;
    for (size_t i = 0; i < n; ++i) {
      const uint32_t u = restore_index[i];
      if (u < lo || u >= hi) continue;
      float* __restrict o = out + u * d;
      const float* __restrict g = grads + i * d;
      if (u >= next) {
        std::fill(out + next * d, o, 0.0f);
        for (size_t k = 0; k < d; ++k) o[k] = 0.0f + g[k];
        next = u + 1;
        continue;
      }
      for (size_t k = 0; k < d; ++k) o[k] += g[k];
    }
    std::fill(out + next * d, out + hi * d, 0.0f);
  };
  const uint32_t nu = static_cast<uint32_t>(num_unique);
  // Tasks each read the whole index, so only as many as may run at once.
  const uint32_t threads = static_cast<uint32_t>(
      tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism));
  const uint32_t parts = std::min<uint32_t>(8, std::max<uint32_t>(1, threads));
  if (n < 16384 || nu < 2 || parts == 1) {
    run(0, nu);
    return;
  }
  const uint32_t step = (nu + parts - 1) / parts;
  tbb::parallel_for(uint32_t{0}, parts, [&](uint32_t p) {
    const uint32_t lo = std::min(nu, p * step), hi = std::min(nu, lo + step);
    if (lo < hi) run(lo, hi);
  });
}

}  // namespace recsdk
