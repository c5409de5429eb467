#!/usr/bin/env bash
# fuzz.sh: builds the pipeline's libFuzzer targets with clang (ASan + UBSan) in build-fuzz and runs
# each for N seconds (default 20). Exits 0, saying so, when clang is absent.
#   scripts/fuzz.sh [seconds]
# Crash inputs land in build-fuzz/fuzz-artifacts/; the corpus grows in build-fuzz/fuzz-corpus/<target>.
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
  echo "fuzz.sh: clang/clang++ not found; skipped the pipeline fuzz targets"
  exit 0
fi
targets=(pipeline_parsers_fuzz)
CC="${cc}" CXX="${cxx}" cmake -S "${root}" -B "${build}" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DRECSDK_PIPELINE_FUZZ=ON -DRECSDK_WERROR=OFF -DRECSDK_ISA_VARIANTS=OFF \
  -DCMAKE_CXX_FLAGS="-DRECSDK_NO_ISA_VARIANTS=1" >/dev/null
cmake --build "${build}" --target "${targets[@]}"
mkdir -p "${build}/fuzz-artifacts"
for t in "${targets[@]}"; do
  corpus="${build}/fuzz-corpus/${t}"
  mkdir -p "${corpus}"
  echo "fuzz.sh: running ${t} for ${seconds}s"
  "${build}/tests/pipeline/${t}" -max_total_time="${seconds}" -print_final_stats=1 \
    -artifact_prefix="${build}/fuzz-artifacts/${t}-" "${corpus}"
done
echo "fuzz.sh: all targets ran ${seconds}s without a crash"
