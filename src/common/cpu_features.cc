// cpu_features.cc
#include "src/common/cpu_features.h"

#include <cstdlib>
#include <string>

namespace recsdk::internal {
namespace {

Isa DetectIsa() {
  Isa best = Isa::kBaseline;
#if defined(__x86_64__)
  __builtin_cpu_init();
  // The AVX2 variants are compiled with -mavx2 -mfma -mf16c -mpopcnt -mbmi (recsdk_isa_variants).
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("popcnt") && __builtin_cpu_supports("bmi")) {
    best = Isa::kAvx2;
  }
  if (best == Isa::kAvx2 && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw")) {
    best = Isa::kAvx512;
  }
#endif
  if (const char* env = std::getenv("RECSDK_ISA")) {
    const std::string want(env);
    Isa cap = best;
    if (want == "baseline") cap = Isa::kBaseline;
    if (want == "avx2") cap = Isa::kAvx2;
    if (static_cast<int>(cap) < static_cast<int>(best)) best = cap;
  }
  return best;
}

}  // namespace

Isa BestIsa() {
  static const Isa isa = DetectIsa();
  return isa;
}

std::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    default:
      return "baseline";
  }
}

}  // namespace recsdk::internal
