#!/usr/bin/env bash
# Builds recsdk and runs its tests. Does its own set-up (installs missing Debian packages).
#
#   scripts/test.sh              quick suite (and the graph and session tests again on the
#                                separate-memory test device, label separate_memory) + MPI suite (label mpi, under mpirun at 2 and 3 ranks)
#                                + consumer-project check + one clang ASan/UBSan build
#                                (build-fuzz) that runs the quick suite and then a short libFuzzer
#                                run of every reader (scripts/fuzz.sh) + ThreadSanitizer build of
#                                the threaded tests (label tsan)
#   RECSDK_TEST_LABELS='quick|slow' scripts/test.sh     choose CTest labels
#   RECSDK_SKIP_MPI=1 scripts/test.sh                   skip the MPI suite (label mpi)
#   RECSDK_SKIP_SANITIZE=1 scripts/test.sh              skip the quick suite under ASan/UBSan
#   RECSDK_SKIP_TSAN=1 scripts/test.sh                  skip the ThreadSanitizer build (label tsan)
#   RECSDK_SKIP_FUZZ=1 scripts/test.sh                  skip the fuzz build and run
#   RECSDK_FUZZ_SECONDS=30 scripts/test.sh              fuzz each target this long (default 7)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
scripts/install_deps.sh

jobs=$(nproc)
# stage: a stage's banner with the seconds since the script started (the log then shows what
# each part of CI costs).
stage() { echo "== [${SECONDS}s] $*"; }
labels=${RECSDK_TEST_LABELS:-quick|separate_memory}
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

# The Release tree builds the CUDA backend (recsdk_cuda, its tests and benchmark) when CMake finds
# nvcc (RECSDK_CUDA=AUTO); its GPU tests skip without a GPU, saying so. The sanitizer trees below
# leave it out (-DRECSDK_CUDA=OFF): nvcc's objects carry no sanitizer instrumentation, and a
# second CUDA compile would only cost CI time.
stage "build (Release, warnings as errors)"
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DRECSDK_WERROR=ON >/dev/null
cmake --build build -j "$jobs"

stage "tests (labels: $labels)"
(cd build && ctest -L "$labels" --output-on-failure -j "$jobs" --timeout 600)

# The MPI communicator's tests run under mpirun (tests/dist/CMakeLists.txt), in the Release tree.
# install_deps.sh installed Open MPI, so no test found is an error here, not a skip.
if [ "${RECSDK_SKIP_MPI:-0}" != "1" ]; then
  stage "tests (label mpi: the MPI communicator under mpirun, 2 and 3 ranks)"
  (cd build && ctest -L mpi --no-tests=error --output-on-failure -j "$jobs" --timeout 600)
fi

stage "consumer project: install, then find_package(recsdk COMPONENTS mpi) from outside the tree"
prefix="$root/build/install"
rm -rf "$prefix" build/consumer
cmake --install build --prefix "$prefix" >/dev/null
cmake -S tests/consumer -B build/consumer "${generator[@]}" -DCMAKE_PREFIX_PATH="$prefix" \
  -DRECSDK_CONSUMER_MPI=ON >/dev/null
cmake --build build/consumer -j "$jobs"
build/consumer/consumer
build/consumer/consumer_mpi

if [ "${RECSDK_SKIP_TSAN:-0}" != "1" ]; then
  stage "ThreadSanitizer build, label tsan (pipeline threads, key stage, inter-op parallelism)"
  # Only the tests labelled tsan (RECSDK_TSAN_TESTS in tests/CMakeLists.txt) and what they link
  # are built. oneTBB is not instrumented: tests/tsan_suppressions.txt says why each entry is there.
  # A unity build of the library (its -O1 compile is mostly headers) and the tests' own code
  # at -O0 (RECSDK_TEST_OPT): the time a test runs is the library's.
  # This tree is built with the Unix Makefiles generator (the others with Ninja when present):
  # every generator must build at -j2, and Makefiles once missed a target-level dependency that
  # Ninja did not (the ISA objects, issue 28). A tree made by another generator is remade.
  if [ -f build-tsan/CMakeCache.txt ] &&
    ! grep -q '^CMAKE_GENERATOR:INTERNAL=Unix Makefiles$' build-tsan/CMakeCache.txt; then
    rm -rf build-tsan
  fi
  cmake -S . -B build-tsan -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" \
    -DRECSDK_TSAN=ON -DRECSDK_WERROR=ON -DRECSDK_UNITY_BUILD=ON -DRECSDK_TEST_OPT=-O0 -DRECSDK_CUDA=OFF \
    -DRECSDK_BUILD_BENCHMARKS=OFF -DRECSDK_BUILD_SAMPLES=OFF >/dev/null
  tsan_tests=$(sed -n 's/^set(RECSDK_TSAN_TESTS \([^)]*\))$/\1/p' tests/CMakeLists.txt)
  # shellcheck disable=SC2086
  cmake --build build-tsan -j "$jobs" --target $tsan_tests
  (cd build-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$root/tests/tsan_suppressions.txt" \
    ctest -L tsan --output-on-failure -j "$jobs" --timeout 900)
fi
# One clang build with ASan + UBSan and libFuzzer coverage (build-fuzz) serves both the quick
# suite under the sanitizers and the fuzz targets: the library is compiled once for both.
# install_deps.sh installed clang, so a missing clang is an error here, not a skip; a test
# failure, a crash or a sanitizer report makes fuzz.sh, and so this script, fail.
skip_sanitize=${RECSDK_SKIP_SANITIZE:-0}
skip_fuzz=${RECSDK_SKIP_FUZZ:-0}
if [ "$skip_sanitize" != "1" ] || [ "$skip_fuzz" != "1" ]; then
  fuzz_seconds=${RECSDK_FUZZ_SECONDS:-7}
  [ "$skip_fuzz" = "1" ] && fuzz_seconds=0
  with_tests=1
  [ "$skip_sanitize" = "1" ] && with_tests=0
  stage "clang ASan + UBSan build: label sanitize (unless skipped), then libFuzzer ${fuzz_seconds}s per reader"
  # One target per core: each runs its seconds of wall time, so 10 targets take 5 rounds on 2 cores.
  # A unity build of the library, the tests' own code at -O0 against one precompiled header, and
  # no MPI programs (the mpi label does not run here) (scripts/fuzz.sh says why).
  RECSDK_FUZZ_REQUIRE_CLANG=1 RECSDK_FUZZ_WITH_TESTS=$with_tests RECSDK_FUZZ_JOBS=${RECSDK_FUZZ_JOBS:-$jobs} \
    RECSDK_FUZZ_UNITY=${RECSDK_FUZZ_UNITY:-ON} RECSDK_FUZZ_TEST_OPT=${RECSDK_FUZZ_TEST_OPT:--O0} \
    RECSDK_FUZZ_TEST_PCH=${RECSDK_FUZZ_TEST_PCH:-ON} \
    scripts/fuzz.sh "$fuzz_seconds"
fi
stage "all tests passed"
