// random.cc: the ziggurat tables of PhiloxStream::Normal (built once, on first use, by a
// thread-safe static; read-only afterwards) and the dispatch of PhiloxStreamBlocks over the ISA
// variants of random_isa.cc.
#include "src/common/random.h"

#include <algorithm>
#include <cmath>

#include "src/common/isa_dispatch.h"

#define RECSDK_RANDOM_DECLARE(isa)                                                                \
  extern "C" void recsdk_random_isa_##isa##_stream_blocks(const uint64_t*, size_t, int, uint64_t, \
                                                          uint32_t*);
RECSDK_ISA_DECLARE_VARIANTS(RECSDK_RANDOM_DECLARE)
#undef RECSDK_RANDOM_DECLARE

namespace recsdk::internal {
namespace {

ZigguratTables MakeZiggurat() {
  constexpr int kLayers = 128;
  constexpr double r = ZigguratTables::kTail;
  constexpr double v = 9.91256303526217e-3;  // area of each layer (and of the base with tail)
  constexpr double kScale = 16777216.0;      // 2^24: the magnitude's range
  double x[kLayers];                         // right edges; x[0] is not a layer edge
  x[kLayers - 1] = r;
  for (int i = kLayers - 2; i >= 1; --i) {
    x[i] = std::sqrt(-2.0 * std::log(v / x[i + 1] + std::exp(-0.5 * x[i + 1] * x[i + 1])));
  }
  const double base = v / std::exp(-0.5 * r * r);  // width of the base strip
  ZigguratTables z;
  z.width[0] = static_cast<float>(base / kScale);
  z.accept[0] = static_cast<uint32_t>(r / base * kScale);
  z.density[0] = 1.0;
  for (int i = 1; i < kLayers; ++i) {
    z.width[i] = static_cast<float>(x[i] / kScale);
    z.accept[i] = i == 1 ? 0u : static_cast<uint32_t>(x[i - 1] / x[i] * kScale);
    z.density[i] = std::exp(-0.5 * x[i] * x[i]);
  }
  return z;
}

}  // namespace

const ZigguratTables* BuildZiggurat() {
  static const ZigguratTables tables = MakeZiggurat();
  return &tables;
}

void PhiloxStreamBlocksFor(Isa isa, const uint64_t* keys, size_t n, int blocks, uint64_t stream,
                           uint32_t* out) {
  if (n == 0 || blocks <= 0) return;
  struct RandomKernels {
    Isa isa;
    void (*stream_blocks)(const uint64_t*, size_t, int, uint64_t, uint32_t*);
  };
#define RECSDK_RANDOM_TABLE(isa_enum, isa) \
  RandomKernels { isa_enum, recsdk_random_isa_##isa##_stream_blocks }
  static const IsaVariants<RandomKernels> variants(RECSDK_ISA_VARIANT_TABLES(RECSDK_RANDOM_TABLE));
#undef RECSDK_RANDOM_TABLE
  variants.For(isa).stream_blocks(keys, n, blocks, stream, out);
}

void PhiloxStreamBlocks(const uint64_t* keys, size_t n, int blocks, uint64_t stream,
                        uint32_t* out) {
  static const Isa isa = BestIsa();
  PhiloxStreamBlocksFor(isa, keys, n, blocks, stream, out);
}

}  // namespace recsdk::internal
