# Compiler flags shared by every recsdk target, applied through the recsdk_compile_options
# interface target so that tests, benchmarks and samples build the same way as the library.
add_library(recsdk_compile_options INTERFACE)
# -Wno-maybe-uninitialized: GCC 12 reports false positives inside absl::InlinedVector (Shape), and
# -Wno-restrict false positives on std::string concatenation (GCC bug 105329). Both are GCC-only
# (clang, used by the fuzz build, warns about unknown options).
target_compile_options(recsdk_compile_options INTERFACE -Wall -Wextra
  $<$<CXX_COMPILER_ID:GNU>:-Wno-maybe-uninitialized> $<$<CXX_COMPILER_ID:GNU>:-Wno-restrict>)
if(RECSDK_WERROR)
  target_compile_options(recsdk_compile_options INTERFACE -Werror)
endif()
if(RECSDK_SANITIZE)
  target_compile_options(recsdk_compile_options INTERFACE
    -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  target_link_options(recsdk_compile_options INTERFACE -fsanitize=address,undefined)
endif()
if(RECSDK_TSAN)
  if(RECSDK_SANITIZE OR RECSDK_PIPELINE_FUZZ)
    message(FATAL_ERROR "RECSDK_TSAN cannot be combined with ASan builds (RECSDK_SANITIZE, fuzz)")
  endif()
  target_compile_options(recsdk_compile_options INTERFACE -fsanitize=thread -fno-omit-frame-pointer)
  target_link_options(recsdk_compile_options INTERFACE -fsanitize=thread)
endif()
if(RECSDK_PIPELINE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "RECSDK_PIPELINE_FUZZ needs clang (CXX=clang++), not ${CMAKE_CXX_COMPILER_ID}")
  endif()
  # The parsers live in the component libraries, not in the fuzz target's own source: they must
  # carry the coverage instrumentation (fuzzer-no-link), or libFuzzer sees only its harness and
  # mutates blind, and the sanitizers, or a bad read in a parser goes unnoticed. UBSan must abort
  # (no recover) so that undefined behaviour is a crash that fails the run.
  target_compile_options(recsdk_compile_options INTERFACE
    -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
    -fno-omit-frame-pointer)
  target_link_options(recsdk_compile_options INTERFACE -fsanitize=address,undefined)
endif()

# recsdk_isa_variants(<out_var> <source> <symbol_prefix>)
#
# Compiles <source> once per instruction set (AVX2+FMA, AVX-512) with -DRECSDK_ISA_SUFFIX=<isa>,
# then links each object with `ld -r` and makes every symbol except <symbol_prefix><isa>* local.
# Localising is what makes this safe: the Eigen templates instantiated with AVX-512 enabled can
# never be picked by the linker for code that runs on a machine without it. The resulting
# objects are appended to <out_var> as sources of the library; the caller dispatches at run time.
# The relocatable link and the symbol localising below use GNU binutils options
# (--force-group-allocation), so they run GNU ld and objcopy whatever linker the compiler
# uses: with clang, CMake may pick ld.lld and llvm-objcopy, which lack that option.
find_program(RECSDK_GNU_LD NAMES ld.bfd ld REQUIRED)
find_program(RECSDK_GNU_OBJCOPY NAMES objcopy REQUIRED)
function(recsdk_isa_variants out_var source symbol_prefix)
  set(objects)
  set(isas avx2 avx512)
  # POPCNT and BMI1 come with every AVX2 CPU (BestIsa checks them too): the separator index counts
  # and walks bit masks with them.
  set(flags_avx2 -mavx2 -mfma -mf16c -mpopcnt -mbmi)
  set(flags_avx512 -mavx512f -mavx512dq -mavx512vl -mavx512bw -mavx2 -mfma -mf16c -mpopcnt -mbmi)
  get_filename_component(stem ${source} NAME_WE)
  foreach(isa IN LISTS isas)
    set(lib ${stem}_${isa}_obj)
    add_library(${lib} OBJECT ${source})
    target_compile_definitions(${lib} PRIVATE RECSDK_ISA_SUFFIX=${isa})
    # -fno-trapping-math lets branch-free selects over float compares vectorise; results are
    # unchanged (we never enable FP exception traps).
    # -Wno-uninitialized: GCC 12 flags _mm512_undefined_ps() inside Eigen's AVX-512 transposes.
    # -fno-gnu-unique is GCC's (clang, used by the fuzz build, makes no STB_GNU_UNIQUE symbols).
    target_compile_options(${lib} PRIVATE ${flags_${isa}}
                           $<$<CXX_COMPILER_ID:GNU>:-fno-gnu-unique> -fno-trapping-math
                           -Wno-uninitialized)
    target_link_libraries(${lib} PRIVATE recsdk_internal_deps)
    set(local_obj ${CMAKE_CURRENT_BINARY_DIR}/${stem}_${isa}_local.o)
    add_custom_command(
      OUTPUT ${local_obj}
      COMMAND ${RECSDK_GNU_LD} -r --force-group-allocation $<TARGET_OBJECTS:${lib}> -o ${local_obj}.tmp
      COMMAND ${RECSDK_GNU_OBJCOPY} -w --keep-global-symbol=${symbol_prefix}${isa}* ${local_obj}.tmp ${local_obj}
      COMMAND ${CMAKE_COMMAND} -E remove ${local_obj}.tmp
      # The target name makes a target-level dependency (the objects alone are only file-level:
      # with the Makefile generator the consumer's rule could run before the object library was
      # built, a nondeterministic "No rule to make target ...isa.cc.o" at -j2).
      DEPENDS ${lib} $<TARGET_OBJECTS:${lib}>
      COMMAND_EXPAND_LISTS
      COMMENT "Localising ${isa} kernel symbols of ${stem}")
    list(APPEND objects ${local_obj})
  endforeach()
  set_source_files_properties(${objects} PROPERTIES EXTERNAL_OBJECT TRUE GENERATED TRUE)
  set(${out_var} ${${out_var}} ${objects} PARENT_SCOPE)
endfunction()
