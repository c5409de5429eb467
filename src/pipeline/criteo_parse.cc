// criteo_parse.cc: see criteo_parse.h.
#include "src/pipeline/criteo_parse.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "fmt/format.h"
#include "src/common/check.h"
#include "src/common/cpu_features.h"
#include "src/common/status_macros.h"
#include "src/pipeline/separator_index.h"
#include "src/pipeline/text_parse.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace recsdk::internal {
namespace {

// CountLines: the lines in a chunk's text, counting an unterminated last one.
int64_t CountLines(const char* p, const char* end) {
  if (p == end) return 0;
  return static_cast<int64_t>(CountByte(p, end, '\n')) + (end[-1] != '\n');
}

// Classifies a failed line: invalid UTF-8 wins over the field-level reason.
MalformedReason Classify(const char* line, const char* end, MalformedReason reason) {
  return IsValidUtf8(line, end - line) ? reason : MalformedReason::kInvalidUtf8;
}

std::string Excerpt(const char* p, const char* end) {
  std::string s(p, std::min<ptrdiff_t>(end - p, 40));
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  }
  return "\"" + s + (end - p > 40 ? "...\"" : "\"");
}

// ChunkBuffer: one uninitialised 64-byte aligned block holding all columns of a chunk (every
// row the parser keeps is written before it is visible; the rest is trimmed away).
class ChunkBuffer final : public TensorBuffer {
 public:
  static std::shared_ptr<ChunkBuffer> Make(size_t bytes) {
    const size_t rounded = std::max<size_t>(64, (bytes + 63) / 64 * 64);
    void* p = std::aligned_alloc(64, rounded);
    // Thrown, not a check: the reader's GetNext turns it into ResourceExhausted.
    if (p == nullptr) throw std::bad_alloc();
    return std::shared_ptr<ChunkBuffer>(new ChunkBuffer(p, rounded));
  }
  ~ChunkBuffer() override { std::free(data()); }

 private:
  ChunkBuffer(void* p, size_t n) : TensorBuffer(p, n) {}
};

size_t Align64(size_t n) { return (n + 63) / 64 * 64; }

}  // namespace

CriteoParser::CriteoParser(const CriteoOptions& options)
    : transform_(options.dense_transform),
      default_id_(options.default_id),
      id_modulus_(options.id_modulus) {
  static const std::vector<float> table = [] {
    std::vector<float> t(kLog1pTable);
    for (int i = 0; i < kLog1pTable; ++i) t[i] = std::log1p(static_cast<float>(i));
    return t;
  }();
  log1p_ = table.data();
  for (int i = 0; i < kCriteoSparse; ++i) {
    names_[i] = options.sparse_prefix + std::to_string(i + 1);
  }
  empty_dense_ = transform_ == DenseTransform::kNone
                     ? options.default_dense
                     : std::log1p(std::max(options.default_dense, 0.0f));
}

bool CriteoParser::ParseLine(const char* line, const char* end, bool unterminated, int64_t r,
                             float* label, float* dense, int64_t* const* sparse,
                             MalformedReason* reason, std::string* detail) const {
  const char* p = line;
  auto column_count = [&](int got_fields) {
    *reason = unterminated ? MalformedReason::kTruncated : MalformedReason::kWrongColumnCount;
    *reason = Classify(line, end, *reason);
    *detail =
        fmt::format("{} columns where 40 were expected (label, 13 integer, 26 hex)", got_fields);
    return false;
  };
  auto count_fields = [&] { return 1 + static_cast<int>(std::count(line, end, '\t')); };
  // Label: "0"/"1" fast path, else any number.
  const char* tab = static_cast<const char*>(std::memchr(p, '\t', end - p));
  if (tab == nullptr) return column_count(1);
  if (tab - p == 1 && (*p == '0' || *p == '1')) {
    label[r] = static_cast<float>(*p - '0');
  } else if (!ParseFloat(p, tab, &label[r]) || !std::isfinite(label[r])) {
    *reason = Classify(line, end, MalformedReason::kBadNumber);
    *detail = fmt::format("label {} is not a number", Excerpt(p, tab));
    return false;
  }
  p = tab + 1;
  float* d = dense + r * kCriteoDense;
  for (int i = 0; i < kCriteoDense; ++i) {
    if (p >= end) return column_count(count_fields());
    if (*p == '\t') {
      d[i] = empty_dense_;
      ++p;
      continue;
    }
    // Hand-rolled decimal: Criteo integer fields are short.
    const char* q = p;
    bool neg = false;
    if (*q == '-') {
      neg = true;
      ++q;
    }
    uint64_t v = 0;
    const char* digits = q;
    while (q < end && static_cast<unsigned>(*q - '0') < 10 && q - digits < 18) {
      v = v * 10 + static_cast<unsigned>(*q - '0');
      ++q;
    }
    if (q == digits || (q < end && *q != '\t')) {
      // Not a plain integer: accept a float ("1.5", "1e3"), else it is a bad number.
      const char* fe = static_cast<const char*>(std::memchr(p, '\t', end - p));
      if (fe == nullptr) fe = end;
      float f;
      if (!ParseFloat(p, fe, &f) || !std::isfinite(f)) {
        *reason = Classify(line, end, MalformedReason::kBadNumber);
        *detail = fmt::format("integer feature I{} {} is not a number", i + 1, Excerpt(p, fe));
        return false;
      }
      d[i] = transform_ == DenseTransform::kNone ? f : std::log1p(std::max(f, 0.0f));
      q = fe;
    } else {
      d[i] = Dense(neg ? -static_cast<int64_t>(v) : static_cast<int64_t>(v));
    }
    if (q >= end) return column_count(count_fields());
    p = q + 1;  // past the tab
  }
  for (int i = 0; i < kCriteoSparse; ++i) {
    const char* fe;
    if (i + 1 < kCriteoSparse) {
      fe = static_cast<const char*>(std::memchr(p, '\t', end - p));
      if (fe == nullptr) return column_count(count_fields());
    } else {
      fe = end;
      if (std::memchr(p, '\t', end - p) != nullptr) return column_count(count_fields());
    }
    int64_t id;
    if (fe == p) {
      id = default_id_;
    } else {
      if (!ParseHex(p, fe, &id)) {
        *reason = Classify(line, end, MalformedReason::kBadHex);
        *detail =
            fmt::format("categorical feature C{} {} is not 1-16 hex digits", i + 1, Excerpt(p, fe));
        return false;
      }
      if (id_modulus_ > 0) {
        id = static_cast<int64_t>(static_cast<uint64_t>(id) % static_cast<uint64_t>(id_modulus_));
      }
    }
    sparse[i][r] = id;
    p = fe + 1;
  }
  return true;
}

// FastLineParser: the fast path for one line whose 40 separators are q[0..39]. Line (SWAR, any
// CPU) and LineAvx2 return false for anything they do not accept; the reference path then
// decides. Separate, not inlined functions: the chunk loop's state stays out of their registers.
struct CriteoParser::FastLineParser {
  static constexpr int kSeps = 1 + kCriteoDense + kCriteoSparse;

  const CriteoParser* parser;
  const char* end;  // of the chunk: 8-byte loads must stay below it

  // Structure: q[0..38] are '\t', q[39] is '\n' (one branch for all 40) and the label is "0" or
  // "1", which it stores.
  bool Structure(const char* begin, const uint32_t* q, const char* line, int64_t row,
                 float* label) const {
    unsigned bad = static_cast<unsigned char>(begin[q[kSeps - 1]] ^ '\n');
    for (int j = 0; j < kSeps - 1; ++j) bad |= static_cast<unsigned char>(begin[q[j]] ^ '\t');
    if (bad != 0 || begin + q[0] != line + 1 || (*line != '0' && *line != '1')) return false;
    label[row] = static_cast<float>(*line - '0');
    return true;
  }

  // DenseField: integer field i (between separators q[i] and q[i+1]) into *out.
  bool DenseField(const char* begin, const uint32_t* q, int i, float* out) const {
    const char* f = begin + q[i] + 1;
    const ptrdiff_t len = begin + q[i + 1] - f;
    if (len > 8 || f + 8 > end) return false;  // long or near the chunk's end: the reference's
    uint64_t v;
    const bool good = ParseDec8Swar(f, len < 1 ? 1 : int(len), &v);
    const bool empty = len == 0;
    if (!(good || empty)) return false;  // signs, floats, junk: the reference decides
    // Empty fields (common) take empty_dense by a mask, not a branch.
    const uint32_t m = 0u - static_cast<uint32_t>(empty);
    v &= ~static_cast<uint64_t>(0) + empty;  // 0 when empty
    const float value = parser->Dense(static_cast<int64_t>(v));
    *out = std::bit_cast<float>((std::bit_cast<uint32_t>(value) & ~m) |
                                (std::bit_cast<uint32_t>(parser->empty_dense_) & m));
    return true;
  }

  // SparseField: categorical field i (between separators q[13 + i] and q[14 + i]) into *out.
  bool SparseField(const char* begin, const uint32_t* q, int i, int64_t* out) const {
    const char* f = begin + q[kCriteoDense + i] + 1;
    const char* s = begin + q[kCriteoDense + i + 1];
    const ptrdiff_t len = s - f;
    const int64_t default_id = parser->default_id_;
    const uint64_t modulus = static_cast<uint64_t>(parser->id_modulus_);
    uint64_t id;
    if (len <= 8 && f + 8 <= end) {
      const bool empty = len == 0;
      const bool good = ParseHex8Swar(f, empty ? 1 : int(len), &id);
      if (!(good || empty)) return false;
      if (modulus > 0) id %= modulus;
      // Empty fields (common) take default_id by a mask, not a branch.
      const uint64_t m = uint64_t{0} - static_cast<uint64_t>(empty);
      id = (id & ~m) | (static_cast<uint64_t>(default_id) & m);
    } else {
      int64_t v;
      if (len == 0) {
        v = default_id;
      } else if (!ParseHex(f, s, &v)) {
        return false;
      } else if (modulus > 0) {
        v = static_cast<int64_t>(static_cast<uint64_t>(v) % modulus);
      }
      id = static_cast<uint64_t>(v);
    }
    *out = static_cast<int64_t>(id);
    return true;
  }

  __attribute__((noinline)) bool Line(const char* begin, const uint32_t* q, const char* line,
                                      int64_t row, float* label, float* dense,
                                      int64_t* const* sparse) const {
    if (!Structure(begin, q, line, row, label)) return false;
    float* d = dense + row * kCriteoDense;
    for (int i = 0; i < kCriteoDense; ++i) {
      if (!DenseField(begin, q, i, &d[i])) return false;
    }
    for (int i = 0; i < kCriteoSparse; ++i) {
      if (!SparseField(begin, q, i, &sparse[i][row])) return false;
    }
    return true;
  }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RECSDK_CRITEO_AVX2 1
#define RECSDK_AVX2 __attribute__((target("avx2,bmi,bmi2,popcnt")))
  // Lanes4: four fields at once, one per 64-bit lane: the 8 bytes at each field's start, the
  // left shift (in bits) that puts the field's digits in the lane's high bytes with zeros below
  // (as the SWAR helpers do), the byte mask of those fill bytes, and the empty fields.
  struct Lanes4 {
    __m256i raw, shift, fill, empty;
    int empty_bits;  // bit l: lane l's field is empty
    int long_bits;   // bit l: lane l's field has more than 8 bytes (not for this path)
  };
  // Load4: the fields between separators qs[l] and qs[l + 1], l < 4.
  RECSDK_AVX2 static Lanes4 Load4(const char* begin, const uint32_t* qs) {
    const __m128i starts = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m128i lens = _mm_sub_epi32(
        _mm_sub_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 1)), starts),
        _mm_set1_epi32(1));
    const __m256i lens64 = _mm256_cvtepu32_epi64(lens);
    const __m256i one = _mm256_set1_epi64x(1);
    Lanes4 f;
    f.empty = _mm256_cmpeq_epi64(lens64, _mm256_setzero_si256());
    f.empty_bits = _mm256_movemask_pd(_mm256_castsi256_pd(f.empty));
    f.long_bits =
        _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpgt_epi64(lens64, _mm256_set1_epi64x(8))));
    const __m256i s =
        _mm256_sub_epi64(_mm256_set1_epi64x(8), _mm256_blendv_epi8(lens64, one, f.empty));
    f.shift = _mm256_slli_epi64(s, 3);
    f.raw = _mm256_i32gather_epi64(reinterpret_cast<const long long*>(begin),
                                   _mm_add_epi32(starts, _mm_set1_epi32(1)), 1);
    // s in every byte of its lane, against the byte's position in the lane.
    const __m256i s_bytes =
        _mm256_shuffle_epi8(s, _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 8, 8, 8, 8, 8, 8, 8, 8, 0,
                                                0, 0, 0, 0, 0, 0, 0, 8, 8, 8, 8, 8, 8, 8, 8));
    const __m256i position = _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1,
                                              2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7);
    f.fill = _mm256_cmpgt_epi8(s_bytes, position);
    return f;
  }
  // AllLanesGood: every byte of `ok` set in each lane whose field is not empty (an empty
  // field's bytes are whatever follows it).
  RECSDK_AVX2 static bool AllLanesGood(__m256i ok, int empty_bits) {
    const uint32_t bad = ~static_cast<uint32_t>(_mm256_movemask_epi8(ok));
    uint32_t ignore = 0;
    for (int lane = 0; lane < 4; ++lane) {
      if ((empty_bits >> lane) & 1) ignore |= 0xFFu << (8 * lane);
    }
    return (bad & ~ignore) == 0;
  }

  // Hex4: the categorical fields i .. i + 3, or false when one of them is not acceptable here
  // (the caller then parses them one at a time, which decides).
  RECSDK_AVX2 bool Hex4(const char* begin, const uint32_t* q, int i, int64_t row,
                        int64_t* const* sparse) const {
    const Lanes4 f = Load4(begin, q + kCriteoDense + i);
    if (f.long_bits != 0) return false;
    const __m256i x = _mm256_sllv_epi64(f.raw, f.shift);
    const __m256i lower = _mm256_or_si256(x, _mm256_set1_epi8(0x20));
    const __m256i digit = _mm256_and_si256(_mm256_cmpgt_epi8(x, _mm256_set1_epi8('0' - 1)),
                                           _mm256_cmpgt_epi8(_mm256_set1_epi8('9' + 1), x));
    const __m256i letter = _mm256_and_si256(_mm256_cmpgt_epi8(lower, _mm256_set1_epi8('a' - 1)),
                                            _mm256_cmpgt_epi8(_mm256_set1_epi8('f' + 1), lower));
    if (!AllLanesGood(_mm256_or_si256(f.fill, _mm256_or_si256(digit, letter)), f.empty_bits)) {
      return false;
    }
    // One nibble per byte (fill bytes are 0), then pairs (16a + b), quads (256a + b), and the
    // lane's two quads (the first holds the more significant digits).
    const __m256i nibble = _mm256_add_epi8(_mm256_and_si256(x, _mm256_set1_epi8(0x0F)),
                                           _mm256_and_si256(letter, _mm256_set1_epi8(9)));
    const __m256i pairs = _mm256_maddubs_epi16(nibble, _mm256_set1_epi16(0x0110));
    const __m256i quads = _mm256_madd_epi16(pairs, _mm256_set1_epi32(0x00010100));
    __m256i v = _mm256_or_si256(
        _mm256_slli_epi64(_mm256_and_si256(quads, _mm256_set1_epi64x(0xFFFFFFFF)), 16),
        _mm256_srli_epi64(quads, 32));
    alignas(32) uint64_t ids[4];
    const uint64_t modulus = static_cast<uint64_t>(parser->id_modulus_);
    if (modulus > 0) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(ids), v);
      for (uint64_t& id : ids) id %= modulus;
      v = _mm256_load_si256(reinterpret_cast<const __m256i*>(ids));
    }
    v = _mm256_blendv_epi8(v, _mm256_set1_epi64x(parser->default_id_), f.empty);
    _mm256_store_si256(reinterpret_cast<__m256i*>(ids), v);
    for (int lane = 0; lane < 4; ++lane) sparse[i + lane][row] = static_cast<int64_t>(ids[lane]);
    return true;
  }

  // Dec4: the integer fields i .. i + 3 into out[0..3], or false (the caller then parses them
  // one at a time, which decides).
  RECSDK_AVX2 bool Dec4(const char* begin, const uint32_t* q, int i, float* out) const {
    const Lanes4 f = Load4(begin, q + i);
    if (f.long_bits != 0) return false;
    // Minus '0' before the shift, so the fill stays 0; good digits are then bytes 0..9.
    const __m256i d = _mm256_sllv_epi64(_mm256_sub_epi8(f.raw, _mm256_set1_epi8('0')), f.shift);
    const __m256i nine = _mm256_set1_epi8(9);
    if (!AllLanesGood(_mm256_cmpeq_epi8(_mm256_max_epu8(d, nine), nine), f.empty_bits)) {
      return false;
    }
    const __m256i pairs = _mm256_maddubs_epi16(d, _mm256_set1_epi16(0x010A));       // 10a + b
    const __m256i quads = _mm256_madd_epi16(pairs, _mm256_set1_epi32(0x00010064));  // 100a + b
    const __m256i v = _mm256_add_epi64(_mm256_mul_epu32(quads, _mm256_set1_epi64x(10000)),
                                       _mm256_srli_epi64(quads, 32));
    alignas(32) uint64_t values[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(values), v);
    for (int lane = 0; lane < 4; ++lane) {
      out[lane] = ((f.empty_bits >> lane) & 1) != 0
                      ? parser->empty_dense_
                      : parser->Dense(static_cast<int64_t>(values[lane]));
    }
    return true;
  }

  RECSDK_AVX2 __attribute__((noinline)) bool LineAvx2(const char* begin, const uint32_t* q,
                                                      const char* line, int64_t row, float* label,
                                                      float* dense, int64_t* const* sparse) const {
    if (!Structure(begin, q, line, row, label)) return false;
    // Every field's 8-byte load must stay inside the chunk: one check for the whole line.
    const bool loads_inside = begin + q[kSeps - 2] + 1 + 8 <= end;
    float* d = dense + row * kCriteoDense;
    int i = 0;
    if (loads_inside) {
      for (; i + 4 <= kCriteoDense; i += 4) {
        if (!Dec4(begin, q, i, d + i)) break;
      }
    }
    for (; i < kCriteoDense; ++i) {
      if (!DenseField(begin, q, i, &d[i])) return false;
    }
    // Fields of more than 8 digits make a lane bad; Hex4 then leaves the group to SparseField.
    for (i = 0; i < kCriteoSparse; i += 4) {
      const int group = std::min(4, kCriteoSparse - i);
      if (group == 4 && loads_inside && Hex4(begin, q, i, row, sparse)) continue;
      for (int j = i; j < i + group; ++j) {
        if (!SparseField(begin, q, j, &sparse[j][row])) return false;
      }
    }
    return true;
  }
#undef RECSDK_AVX2
#endif
};

ParsedChunk CriteoParser::Parse(std::string_view text, bool at_eof, Path path) const {
  ParsedChunk out;
  const char* const begin = text.data();
  const char* const end = begin + text.size();
  const int64_t n = CountLines(begin, end);
  out.lines = n;
  // One block for all columns: label, dense, then the 26 id columns, each 64-byte aligned.
  const size_t label_bytes = Align64(static_cast<size_t>(n) * sizeof(float));
  const size_t dense_bytes = Align64(static_cast<size_t>(n) * kCriteoDense * sizeof(float));
  const size_t ids_bytes = Align64(static_cast<size_t>(n) * sizeof(int64_t));
  auto buffer = ChunkBuffer::Make(label_bytes + dense_bytes + kCriteoSparse * ids_bytes);
  char* const block = static_cast<char*>(buffer->data());
  float* const lp = reinterpret_cast<float*>(block);
  float* const dp = reinterpret_cast<float*>(block + label_bytes);
  std::array<int64_t*, kCriteoSparse> sp;
  for (int i = 0; i < kCriteoSparse; ++i) {
    sp[i] = reinterpret_cast<int64_t*>(block + label_bytes + dense_bytes + i * ids_bytes);
  }

  int64_t r = 0;
  const char* p = begin;
  // The reference path for the line at p (also the fast path's fallback); returns the next line.
  auto reference_line = [&](int64_t line) {
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', end - p));
    const bool unterminated = nl == nullptr;
    const char* le = unterminated ? end : nl;
    const char* content_end = (le > p && le[-1] == '\r') ? le - 1 : le;
    MalformedReason reason;
    std::string detail;
    if (ParseLine(p, content_end, unterminated && at_eof, r, lp, dp, sp.data(), &reason, &detail)) {
      ++r;
    } else {
      out.errors.push_back(RowError{reason, line, -1, std::move(detail)});
    }
    return unterminated ? end : nl + 1;
  };

  if (path == Path::kReference) {
    for (int64_t line = 0; p < end; ++line) p = reference_line(line);
  } else {
    // Fast path over windows of the chunk: stage 1 indexes every '\t'/'\n' of the window, then
    // a line is its next 40 separators q[0..39]: field j is (q[j-1], q[j]) with q[-1] the byte
    // before the line; accepted only when q[0..38] are '\t' and q[39] is '\n' and every field
    // parses here. A line that crosses the window's end re-windows from its start.
    constexpr int kSeps = 1 + kCriteoDense + kCriteoSparse;  // separators per line
    constexpr size_t kWindow = 16 << 10;
    thread_local std::vector<uint32_t> index;
    if (index.size() < kWindow + kSeparatorIndexSlack) index.resize(kWindow + kSeparatorIndexSlack);
    const uint32_t* const idx = index.data();
    size_t k = 0, count = 0;
    const char* window_end = begin;
    const FastLineParser fast{this, end};
    using LineFn = bool (FastLineParser::*)(const char*, const uint32_t*, const char*, int64_t,
                                            float*, float*, int64_t* const*) const;
    LineFn line_fn = &FastLineParser::Line;
#ifdef RECSDK_CRITEO_AVX2
    static const bool avx2 = BestIsa() >= Isa::kAvx2;
    if (path == Path::kFast && avx2) line_fn = &FastLineParser::LineAvx2;
#endif
    for (int64_t line = 0; p < end; ++line) {
      if (count - k < kSeps && window_end < end) {
        window_end = p + std::min<ptrdiff_t>(kWindow, end - p);
        count = IndexSeparators(begin, p, window_end, '\t', '\n', index.data());
        k = 0;
      }
      if (count - k >= kSeps && (fast.*line_fn)(begin, idx + k, p, r, lp, dp, sp.data())) {
        ++r;
        p = begin + idx[k + kSeps - 1] + 1;
        k += kSeps;
        continue;
      }
      p = reference_line(line);
      const uint32_t next = static_cast<uint32_t>(p - begin);
      while (k < count && idx[k] < next) ++k;
    }
  }

  const int64_t rows = r;
  auto column = [&](DType t, Shape shape, size_t offset) {
    return Tensor(t, std::move(shape), buffer, offset);
  };
  Status st = out.batch.AddColumn("label", column(DType::kFloat32, Shape{rows, 1}, 0));
  st.Update(out.batch.AddColumn("dense",
                                column(DType::kFloat32, Shape{rows, kCriteoDense}, label_bytes)));
  for (int i = 0; i < kCriteoSparse; ++i) {
    st.Update(out.batch.AddColumn(names_[i], column(DType::kInt64, Shape{rows, 1},
                                                    label_bytes + dense_bytes + i * ids_bytes)));
  }
  RECSDK_CHECK_MSG(st.ok(), "CriteoParser: building the batch failed");
  return out;
}

}  // namespace recsdk::internal
