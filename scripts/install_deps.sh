#!/usr/bin/env bash
# Installs recsdk's build dependencies from Debian packages. Idempotent: packages already present
# are left alone and nothing runs apt when everything is installed.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libeigen3-dev libtbb-dev libabsl-dev nlohmann-json3-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin
  # oneDNN's sgemm, loaded at run time by src/device/cpu/gemm.cc when present (1.3-1.6x the Eigen
  # kernel on the DLRM shapes); without it the Eigen kernel runs.
  libdnnl2
  # scripts/fuzz.sh (run by scripts/test.sh): clang and its libFuzzer runtime
  # (libclang_rt.fuzzer-x86_64.a, shipped by libclang-rt-<N>-dev, which clang only recommends).
  clang libclang-rt-dev
  # lld links the sanitizer build's ~70 test binaries 2-3x faster than GNU ld (scripts/fuzz.sh).
  lld
  # tests/estimator/summary_writer_test.cc decodes TensorBoard event files with real protobuf.
  python3-protobuf
  # The API reference of include/recsdk/ (docs/Doxyfile; CTest docs_doxygen fails on any warning,
  # an undocumented public name included).
  doxygen
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "recsdk: installing missing packages: ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
