// cpu_features.h: which vector instruction set the running CPU supports.
//
// Kernels compiled for several ISAs (see cmake/RecsdkOptions.cmake) pick one through BestIsa().
// RECSDK_ISA=baseline|avx2|avx512 in the environment lowers the choice (never raises it past what
// the CPU has), for testing the portable paths on a fast machine. Thread-safe.
#ifndef RECSDK_COMMON_CPU_FEATURES_H_
#define RECSDK_COMMON_CPU_FEATURES_H_

#include <string_view>

namespace recsdk::internal {

enum class Isa { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

Isa BestIsa();
std::string_view IsaName(Isa isa);

}  // namespace recsdk::internal

#endif  // RECSDK_COMMON_CPU_FEATURES_H_
