// separator_index.h: stage 1 of the fast text parsers: the offsets of every separator byte of a
// span of text, found 64 bytes per step with SIMD compares (SSE2, AVX2 where the CPU has it) and
// written out branch-free, so the field parser then walks a plain array instead of scanning.
// Thread-safe (pure function).
#ifndef RECSDK_PIPELINE_SEPARATOR_INDEX_H_
#define RECSDK_PIPELINE_SEPARATOR_INDEX_H_

#include <cstddef>
#include <cstdint>

namespace recsdk::internal {

// Room IndexSeparators needs past the last offset it writes.
inline constexpr size_t kSeparatorIndexSlack = 64;

// IndexSeparators writes, in order, (q - base) for every q in [p, end) with *q == a or *q == b
// to out and returns their count. out needs room for (end - p) + kSeparatorIndexSlack entries;
// offsets must fit in uint32 (end - base < 4 GiB). Reads only [p, end).
size_t IndexSeparators(const char* base, const char* p, const char* end, char a, char b,
                       uint32_t* out);
// CountByte: how many bytes of [p, end) equal c (SSE2 16 bytes a step where available).
size_t CountByte(const char* p, const char* end, char c);
// The same with the SSE2 (or scalar) code whatever the CPU; for tests.
size_t IndexSeparatorsBaseline(const char* base, const char* p, const char* end, char a, char b,
                               uint32_t* out);

}  // namespace recsdk::internal

#endif  // RECSDK_PIPELINE_SEPARATOR_INDEX_H_
