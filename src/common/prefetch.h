// prefetch.h: software prefetch hints that the optimiser cannot delete. Thread-safe (no state).
//
// GCC models __builtin_prefetch as free of side effects. A function or lambda whose only work is
// prefetching is therefore inferred `const` by its pure-const analysis, and every call to it,
// returning nothing, is then removed as dead code. GCC 12 did exactly that to the table's gather
// (a `prefetch` lambda), which ran 2x slower than a plain loop over the same rows with no sign in
// the source. The empty asm volatile statement below is a side effect, so these helpers, and any
// wrapper built on them, keep their calls; it emits no instruction and clobbers nothing.
#ifndef RECSDK_COMMON_PREFETCH_H_
#define RECSDK_COMMON_PREFETCH_H_

#include <cstddef>

namespace recsdk::internal {

// PrefetchLevel: where the line goes. kL1 (prefetcht0) for data about to be used; kL2
// (prefetcht1) for data used later, which holds an L1 fill buffer only briefly.
enum class PrefetchLevel { kL1, kL2 };

// PrefetchRead / PrefetchWrite: the cache line holding `p`, for reading or with write intent.
inline void PrefetchRead(const void* p, PrefetchLevel level = PrefetchLevel::kL1) {
  if (level == PrefetchLevel::kL1) {
    __builtin_prefetch(p, 0, 3);
  } else {
    __builtin_prefetch(p, 0, 2);
  }
  asm volatile("" : : "r"(p));
}
inline void PrefetchWrite(const void* p) {
  __builtin_prefetch(p, 1, 3);
  asm volatile("" : : "r"(p));
}

// PrefetchLines / PrefetchLinesWrite: every 64-byte line of [p, p + bytes) (p's line first).
inline void PrefetchLines(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (size_t off = 0; off < bytes; off += 64) PrefetchRead(c + off);
}
inline void PrefetchLinesWrite(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (size_t off = 0; off < bytes; off += 64) PrefetchWrite(c + off);
}

}  // namespace recsdk::internal

#endif  // RECSDK_COMMON_PREFETCH_H_
