#!/usr/bin/env bash
# fuzz.sh: builds the pipeline's libFuzzer targets with clang in build-fuzz and runs each for N
# seconds (default 20). scripts/test.sh (CI) calls it; it also runs on its own.
#   scripts/fuzz.sh [seconds]
#   RECSDK_FUZZ_REQUIRE_CLANG=1 scripts/fuzz.sh    fail, instead of skipping, when clang is absent
# Without that knob it exits 0, saying so, when clang is absent. A crash, a sanitizer report or a
# failed build exits non-zero. Needs clang and the libFuzzer runtime (Debian: clang and
# libclang-rt-dev, which scripts/install_deps.sh installs).
# Only the fuzz targets and the component libraries they link are built; RECSDK_PIPELINE_FUZZ
# compiles those libraries with coverage instrumentation and ASan + UBSan (cmake/RecsdkOptions.cmake).
# Crash inputs land in build-fuzz/fuzz-artifacts/; the corpus grows in build-fuzz/fuzz-corpus/<target>,
# starting from the seeds in tests/pipeline/fuzz/seeds/ (the first byte picks the parser, see
# parsers_fuzz.cc).
# RECSDK_NO_ISA_VARIANTS: src/table/table_kernels.cc selects ISAs with #pragma GCC target, which
# clang does not honour (its AVX variants fail to compile under clang); the fuzz targets need only
# the baseline kernels, so the build leaves the variants out.
set -euo pipefail
seconds="${1:-20}"
here="${BASH_SOURCE[0]%/*}"
[[ "${here}" == "${BASH_SOURCE[0]}" ]] && here=.
root="$(cd "${here}/.." && pwd)"
build="${root}/build-fuzz"
cc="$(command -v clang || true)"
cxx="$(command -v clang++ || true)"
if [[ -z "${cc}" || -z "${cxx}" ]]; then
  if [[ "${RECSDK_FUZZ_REQUIRE_CLANG:-0}" == "1" ]]; then
    echo "fuzz.sh: clang/clang++ not found (install clang and libclang-rt-dev)" >&2
    exit 1
  fi
  echo "fuzz.sh: clang/clang++ not found; skipped the pipeline fuzz targets"
  exit 0
fi
targets=(pipeline_parsers_fuzz)
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
CC="${cc}" CXX="${cxx}" cmake -S "${root}" -B "${build}" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRECSDK_PIPELINE_FUZZ=ON -DRECSDK_WERROR=OFF \
  -DRECSDK_ISA_VARIANTS=OFF -DRECSDK_BUILD_BENCHMARKS=OFF -DRECSDK_BUILD_SAMPLES=OFF \
  -DCMAKE_CXX_FLAGS="-DRECSDK_NO_ISA_VARIANTS=1" >/dev/null
cmake --build "${build}" -j "$(nproc)" --target "${targets[@]}"
mkdir -p "${build}/fuzz-artifacts"
for t in "${targets[@]}"; do
  corpus="${build}/fuzz-corpus/${t}"
  seeds="${root}/tests/pipeline/fuzz/seeds"
  mkdir -p "${corpus}"
  echo "fuzz.sh: running ${t} for ${seconds}s"
  # New inputs go to the first directory only; the seeds are read, never written. Warnings are
  # off: each input is a new source that would warn about its first malformed row, which floods
  # the log and slows the run several-fold.
  RECSDK_LOG_LEVEL=2 "${build}/tests/pipeline/${t}" -max_total_time="${seconds}" -print_final_stats=1 \
    -artifact_prefix="${build}/fuzz-artifacts/${t}-" "${corpus}" "${seeds}"
done
echo "fuzz.sh: all targets ran ${seconds}s without a crash"
