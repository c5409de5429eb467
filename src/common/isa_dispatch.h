// isa_dispatch.h: the one way a kernel family compiled once per instruction set is declared and
// picked at run time.
//
// A family's kernels live in a file named *_isa.cc, which src/CMakeLists.txt compiles once per
// ISA (recsdk_isa_variants), prefixing each extern "C" symbol with recsdk_<stem>_isa_<isa>_. The
// dispatching file declares the variants and builds one table of function pointers per ISA:
//
//   #define RECSDK_FOO_DECLARE(isa) extern "C" void recsdk_foo_isa_##isa##_run(const float*);
//   RECSDK_ISA_DECLARE_VARIANTS(RECSDK_FOO_DECLARE)
//   #define RECSDK_FOO_TABLE(isa_enum, isa) FooKernels{isa_enum, recsdk_foo_isa_##isa##_run}
//
//   const FooKernels& FooFor(Isa isa) {  // struct FooKernels { Isa isa; void (*run)(...); };
//     static const IsaVariants<FooKernels> variants(RECSDK_ISA_VARIANT_TABLES(RECSDK_FOO_TABLE));
//     return variants.For(isa);
//   }
//
// and #undefs its two macros at the end of the file (unity builds). The variants above the
// baseline exist only where the build compiled them (RECSDK_ISA_VARIANTS=ON, so
// RECSDK_NO_ISA_VARIANTS is not defined); the macros leave them out otherwise, and For falls
// back to the baseline. BestIsa() (cpu_features.h) is the ISA to pass outside tests.
#ifndef RECSDK_COMMON_ISA_DISPATCH_H_
#define RECSDK_COMMON_ISA_DISPATCH_H_

#include <initializer_list>
#include <vector>

#include "src/common/cpu_features.h"

#ifdef RECSDK_NO_ISA_VARIANTS
#define RECSDK_ISA_DECLARE_VARIANTS(DECLARE) DECLARE(baseline)
#define RECSDK_ISA_VARIANT_TABLES(TABLE) \
  { TABLE(::recsdk::internal::Isa::kBaseline, baseline) }
#else
#define RECSDK_ISA_DECLARE_VARIANTS(DECLARE) DECLARE(baseline) DECLARE(avx2) DECLARE(avx512)
#define RECSDK_ISA_VARIANT_TABLES(TABLE)                 \
  {                                                      \
    TABLE(::recsdk::internal::Isa::kBaseline, baseline), \
        TABLE(::recsdk::internal::Isa::kAvx2, avx2),     \
        TABLE(::recsdk::internal::Isa::kAvx512, avx512)  \
  }
#endif

namespace recsdk::internal {

// IsaVariants: a family's tables, one per compiled ISA. `Table` has a member `Isa isa` naming the
// ISA its functions were compiled for.
template <typename Table>
class IsaVariants {
 public:
  // variants: the baseline's table first, then the others in rising ISA order.
  IsaVariants(std::initializer_list<Table> variants) : variants_(variants) {}

  // For: the table of the highest compiled ISA not above `isa` (the baseline's at least).
  const Table& For(Isa isa) const {
    const Table* pick = &variants_.front();
    for (const Table& t : variants_) {
      if (t.isa <= isa) pick = &t;
    }
    return *pick;
  }

 private:
  std::vector<Table> variants_;
};

}  // namespace recsdk::internal

#endif  // RECSDK_COMMON_ISA_DISPATCH_H_
