// dedup.cc: DedupKeys (one pass over a batch's keys of a table) and AggregateGradients (per
// unique key sums). DedupKeys keeps its hash scratch per thread; both are thread-safe.
#include "src/table/dedup.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "src/common/exception_guard.h"
#include "src/common/parallel_for.h"
#include "src/common/prefetch.h"
#include "src/table/key_index.h"

namespace recsdk::internal {

namespace {

template <typename K>
void DedupImpl(absl::Span<const K> keys, DedupResult* out) {
  const size_t n = keys.size();
  size_t cap = 16;
  while (cap < 2 * n) cap <<= 1;
  const uint64_t mask = cap - 1;
  // Scratch: 8-byte slots, gen:16 | tag:16 | index into unique_keys:32. Half the bytes of a
  // (key, index) slot, so twice the slots per line and half the cache footprint (2 MiB for a
  // 106k-id batch instead of 4). The key itself is compared through unique_keys, and only when
  // the 16-bit tag (high hash bits, independent of the slot bits) matches. A slot is live only
  // when its generation is this call's, so the scratch is not cleared per call.
  thread_local std::vector<uint64_t> scratch;
  thread_local uint32_t gen = 0;
  if (scratch.size() < cap) {
    scratch.assign(cap, 0);
    gen = 0;
  }
  if (++gen > 0xFFFFu) {
    std::fill(scratch.begin(), scratch.end(), uint64_t{0});
    gen = 1;
  }
  uint64_t* s = scratch.data();
  out->unique_keys.resize(n);
  out->counts.resize(n);
  out->restore_index.resize(n);
  uint32_t* restore = out->restore_index.data();
  int64_t* unique_keys = out->unique_keys.data();
  uint32_t* counts = out->counts.data();
  uint32_t num_unique = 0;
  const uint64_t gen_bits = static_cast<uint64_t>(gen) << 48;
  // Hashes are computed once, kAhead positions early (when their slot is prefetched), and kept
  // in a small ring until probed. 64 ahead (with write intent) beat 16 by ~20% on a cold scratch.
  constexpr size_t kAhead = 64;
  uint64_t ring[kAhead];
  const size_t warm = std::min(n, kAhead);
  for (size_t i = 0; i < warm; ++i) {
    ring[i] = KeyIndex::Hash(static_cast<int64_t>(keys[i]));
    PrefetchWrite(s + (ring[i] & mask));
  }
  for (size_t i = 0; i < n; ++i) {
    const uint64_t hash = ring[i % kAhead];
    if (i + kAhead < n) {
      const uint64_t ha = KeyIndex::Hash(static_cast<int64_t>(keys[i + kAhead]));
      ring[i % kAhead] = ha;
      PrefetchWrite(s + (ha & mask));
    }
    const int64_t key = static_cast<int64_t>(keys[i]);
    const uint64_t want = gen_bits | ((hash >> 48) << 32);  // gen and tag, index bits zero
    uint64_t h = hash & mask;
    for (;;) {
      const uint64_t slot = s[h];
      if ((slot >> 48) != gen) {
        s[h] = want | num_unique;
        unique_keys[num_unique] = key;
        counts[num_unique] = 1;
        restore[i] = num_unique++;
        break;
      }
      if ((slot & 0xFFFFFFFF00000000ull) == want) {
        const uint32_t u = static_cast<uint32_t>(slot);
        if (unique_keys[u] == key) {
          ++counts[u];
          restore[i] = u;
          break;
        }
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

namespace {

// SumPositions: out rows [lo, hi) from the positions sorted by id: pos[start[u], start[u + 1])
// are id u's positions in increasing order (start indexed by id, pos by sorted slot). Each row is
// 0 + its gradients in position order, as the scan adds them; an id with no position gets zeros.
// The gradient rows are read out of order, so they are prefetched a few positions ahead.
void SumPositions(const uint32_t* start, const uint32_t* pos, const float* grads, size_t d,
                  uint32_t lo, uint32_t hi, float* out) {
  constexpr uint32_t kAhead = 8;
  const size_t row_bytes = d * sizeof(float);
  const uint32_t first = start[lo], last = start[hi];
  for (uint32_t k = first; k < std::min(last, first + kAhead); ++k) {
    PrefetchLines(grads + pos[k] * d, row_bytes);
  }
  uint32_t k = first;
  for (uint32_t u = lo; u < hi; ++u) {
    float* __restrict o = out + u * d;
    const uint32_t end = start[u + 1];
    if (k == end) {
      std::fill(o, o + d, 0.0f);
      continue;
    }
    for (bool first_pos = true; k < end; ++k, first_pos = false) {
      if (k + kAhead < last) PrefetchLines(grads + pos[k + kAhead] * d, row_bytes);
      const float* __restrict g = grads + pos[k] * d;
      if (first_pos) {
        for (size_t j = 0; j < d; ++j) o[j] = 0.0f + g[j];
      } else {
        for (size_t j = 0; j < d; ++j) o[j] += g[j];
      }
    }
  }
}

void AggregateGradientsUnchecked(absl::Span<const uint32_t> restore_index, const float* grads,
                                 int dim, int64_t num_unique, float* out,
                                 AggregateStrategy strategy) {
  const size_t d = static_cast<size_t>(dim);
  const size_t n = restore_index.size();
  // kScan: each task owns a range [lo, hi) of unique ids and adds, in input order, the positions
  // that map into it: no two tasks write the same output row and each row's summation order
  // (input order) never depends on the number of tasks. Output rows are not zeroed up front:
  // DedupKeys numbers unique keys in order of first occurrence, so the first position of id
  // `next` copies its gradient (one pass, no separate zeroing pass); ids that skip ahead of that
  // order (a restore index from elsewhere) zero the rows they pass first, so any index gives the
  // sums.
  // `from`: a position before which no id is in [lo, hi), where the walk may start.
  auto scan = [&](uint32_t lo, uint32_t hi, size_t from) {
    uint32_t next = lo;
    for (size_t i = from; i < n; ++i) {
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
  if (nu == 0) return;
  // Tasks each read the index from their first position on, so only as many as may run at once.
  const uint32_t parts = static_cast<uint32_t>(std::min<size_t>(8, MaxParallelism()));
  bool big = n >= 16384 && nu >= 2;
  bool sort = strategy == AggregateStrategy::kSort;
  if (strategy == AggregateStrategy::kAuto) {
    // Measured (BM_AggregateStrategy, idle host, 2026-12-07, three runs): with one thread the
    // scan's single streaming pass wins; with several, the sort wins on skewed batches of wide
    // rows only (Zipf dim 128: scan/sort 1.03-1.06), and loses at dims 16 and 64 (0.89-0.94),
    // since each scanning task now starts at its first position; the scan wins on near-unique
    // batches (nothing to group, and the sort's reads are random).
    sort = big && parts > 1 && n >= 2 * static_cast<size_t>(nu) && dim >= 128;
  }
  // Counts and sorted slots are 32-bit: a batch of 2^32 positions or more is scanned.
  if (n > std::numeric_limits<uint32_t>::max()) sort = big = false;
  if (!sort && (!big || parts == 1)) {
    scan(0, nu, 0);
    return;
  }
  // start[u]: the first sorted slot of id u (a prefix sum of the counts; start[nu] == n).
  std::vector<uint32_t> start(static_cast<size_t>(nu) + 1, 0);
  for (uint32_t u : restore_index) ++start[u + 1];
  for (uint32_t u = 0; u < nu; ++u) start[u + 1] += start[u];
  // Ranges of equal work, not of equal id count: with skewed ids the first ids (the keys seen
  // first, which are the frequent ones) hold most positions, and equal id ranges left one task
  // doing nearly all of it (dim 64, Zipf, 2 threads: aggregation was 2/3 of the update).
  const uint32_t tasks = big ? parts : 1;
  std::vector<uint32_t> bounds(tasks + 1, nu);
  bounds[0] = 0;
  uint32_t p = 1;
  for (uint32_t u = 0; u < nu && p < tasks; ++u) {
    while (p < tasks &&
           static_cast<uint64_t>(start[u + 1]) * tasks >= static_cast<uint64_t>(n) * p) {
      bounds[p++] = u + 1;
    }
  }
  // from[t]: the first position whose id is bounds[t] or more; every earlier position belongs
  // to an earlier range, so task t's walk starts there. With ids numbered by first occurrence
  // (DedupKeys) that is where its first id first occurs: near-unique batches then stream
  // mostly disjoint parts of the gradients instead of every task streaming all of them.
  std::vector<size_t> from(tasks, 0);
  size_t at = 0;
  for (uint32_t t = 1; t < tasks; ++t) {
    while (at < n && restore_index[at] < bounds[t]) ++at;
    from[t] = at;
  }
  std::unique_ptr<uint32_t[]> pos;
  std::unique_ptr<uint32_t[]> cursor;
  if (sort) {
    pos.reset(new uint32_t[n]);
    cursor.reset(new uint32_t[nu]);
  }
  // kSort, per task: place its ids' positions in their sorted slots (a stable counting sort of
  // its range: positions in increasing order), then sum them. Either way each range sums its
  // own ids in position order, so where the ranges fall changes no bit.
  auto sorted = [&](uint32_t lo, uint32_t hi, size_t first) {
    uint32_t* c = cursor.get();
    std::copy(start.begin() + lo, start.begin() + hi, c + lo);
    for (size_t i = first; i < n; ++i) {
      const uint32_t u = restore_index[i];
      if (u < lo || u >= hi) continue;
      pos[c[u]++] = static_cast<uint32_t>(i);
    }
    SumPositions(start.data(), pos.get(), grads, d, lo, hi, out);
  };
  ParallelFor(tasks, 1u, [&](uint32_t t0, uint32_t t1) {
    for (uint32_t t = t0; t < t1; ++t) {
      if (bounds[t] >= bounds[t + 1]) continue;
      if (sort) {
        sorted(bounds[t], bounds[t + 1], from[t]);
      } else {
        scan(bounds[t], bounds[t + 1], from[t]);
      }
    }
  });
}

}  // namespace

Status AggregateGradients(absl::Span<const uint32_t> restore_index, absl::Span<const float> grads,
                          int dim, int64_t num_unique, absl::Span<float> out,
                          AggregateStrategy strategy) {
  auto bad = [](std::string what) {
    return absl::InvalidArgumentError(fmt::format("AggregateGradients: {}", what));
  };
  if (dim < 1) return bad(fmt::format("dim is {}; pass the table's dim (1 or more)", dim));
  if (num_unique < 0 || num_unique > std::numeric_limits<uint32_t>::max()) {
    return bad(
        fmt::format("num_unique is {}; pass the number of unique keys (DedupKeys)", num_unique));
  }
  const size_t d = static_cast<size_t>(dim);
  if (grads.size() != restore_index.size() * d) {
    return bad(fmt::format("grads holds {} floats for {} positions of dim {}; size it [{}, {}]",
                           grads.size(), restore_index.size(), dim, restore_index.size(), dim));
  }
  if (out.size() != static_cast<size_t>(num_unique) * d) {
    return bad(fmt::format("out holds {} floats for {} unique keys of dim {}; size it [{}, {}]",
                           out.size(), num_unique, dim, num_unique, dim));
  }
  uint32_t worst = 0;
  for (uint32_t u : restore_index) worst = std::max(worst, u);
  if (!restore_index.empty() && worst >= num_unique) {
    return bad(
        fmt::format("restore index {} is out of range for {} unique keys; pass the "
                    "restore_index of the same DedupKeys",
                    worst, num_unique));
  }
  return CatchExceptions("AggregateGradients", [&]() -> Status {
    AggregateGradientsUnchecked(restore_index, grads.data(), dim, num_unique, out.data(), strategy);
    return absl::OkStatus();
  });
}

Status AggregateLookupGradients(absl::Span<const uint32_t> unique_rows,
                                absl::Span<const LookupGradient> features,
                                std::optional<Combiner> combiner, int64_t dim,
                                absl::Span<float> out) {
  const int64_t num_unique = static_cast<int64_t>(unique_rows.size());
  auto bad = [](std::string what) {
    return absl::InvalidArgumentError(fmt::format("AggregateLookupGradients: {}", what));
  };
  if (dim < 1) return bad(fmt::format("dim is {}; pass the table's dim (1 or more)", dim));
  if (out.size() != static_cast<size_t>(num_unique * dim)) {
    return bad(fmt::format("out holds {} floats for {} unique rows of dim {}", out.size(),
                           num_unique, dim));
  }
  for (size_t f = 0; f < features.size(); ++f) {
    const LookupGradient& lg = features[f];
    if (lg.batch < 0 || lg.per < 0 || lg.restore.size() != static_cast<size_t>(lg.batch * lg.per)) {
      return bad(fmt::format("feature {}: restore holds {} indices for batch {} and {} per sample",
                             f, lg.restore.size(), lg.batch, lg.per));
    }
    const int64_t want = combiner ? lg.batch * dim : lg.batch * lg.per * dim;
    if (static_cast<int64_t>(lg.grad.size()) != want) {
      return bad(
          fmt::format("feature {}: the gradient holds {} floats, its restore [{}, {}] and "
                      "dim {} need {}",
                      f, lg.grad.size(), lg.batch, lg.per, dim, want));
    }
    for (size_t i = 0; i < lg.restore.size(); ++i) {
      if (lg.restore[i] < 0 || lg.restore[i] >= num_unique) {
        return bad(
            fmt::format("feature {}: restore index {} at position {} is outside the {} "
                        "unique rows",
                        f, lg.restore[i], i, num_unique));
      }
    }
  }
  std::fill(out.begin(), out.end(), 0.0f);
  float* acc = out.data();
  for (const LookupGradient& lg : features) {
    const int32_t* r = lg.restore.data();
    const float* g = lg.grad.data();
    const int64_t b = lg.batch, n = lg.per;
    if (!combiner) {
      if (features.size() == 1) {
        // One feature: the table core's aggregation (parallel, exact per-key sums, 0 + g first).
        return AggregateGradients(
            absl::Span<const uint32_t>(reinterpret_cast<const uint32_t*>(r), b * n), lg.grad,
            static_cast<int>(dim), num_unique, out);
      }
      for (int64_t p = 0; p < b * n; ++p) {
        float* o = acc + r[p] * dim;
        const float* gp = g + p * dim;
        for (int64_t d = 0; d < dim; ++d) o[d] += gp[d];
      }
      continue;
    }
    // A sum needs no count of the sample's valid ids (its scale is 1, and 1 * g is g exactly).
    const bool sum = *combiner == Combiner::kSum;
    for (int64_t s = 0; s < b; ++s) {
      const int32_t* rs = r + s * n;
      float scale = 1.0f;
      if (!sum) {
        int64_t valid = 0;
        for (int64_t j = 0; j < n; ++j) valid += unique_rows[rs[j]] != EmbeddingTable::kPaddingRow;
        if (valid == 0) continue;
        scale = *combiner == Combiner::kMean ? 1.0f / static_cast<float>(valid)
                                             : 1.0f / std::sqrt(static_cast<float>(valid));
      }
      const float* gs = g + s * dim;
      for (int64_t j = 0; j < n; ++j) {
        const int32_t u = rs[j];
        if (unique_rows[u] == EmbeddingTable::kPaddingRow) continue;
        float* o = acc + u * dim;
        if (sum) {
          for (int64_t d = 0; d < dim; ++d) o[d] += gs[d];
        } else {
          for (int64_t d = 0; d < dim; ++d) o[d] += scale * gs[d];
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace recsdk::internal
