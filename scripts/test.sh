#!/usr/bin/env bash
# Builds recsdk and runs its tests. Does its own set-up (installs missing Debian packages).
#
#   scripts/test.sh              quick suite + consumer-project check + ASan/UBSan build of the quick
#                                suite + ThreadSanitizer build of the threaded tests (label tsan) +
#                                a short libFuzzer run of every reader (scripts/fuzz.sh)
#   RECSDK_TEST_LABELS='quick|slow' scripts/test.sh     choose CTest labels
#   RECSDK_SKIP_SANITIZE=1 scripts/test.sh              skip the sanitizer build
#   RECSDK_SKIP_TSAN=1 scripts/test.sh                  skip the ThreadSanitizer build (label tsan)
#   RECSDK_SKIP_FUZZ=1 scripts/test.sh                  skip the fuzz build and run
#   RECSDK_FUZZ_SECONDS=30 scripts/test.sh              fuzz each target this long (default 10)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
scripts/install_deps.sh

jobs=$(nproc)
labels=${RECSDK_TEST_LABELS:-quick}
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

echo "== build (Release, warnings as errors)"
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DRECSDK_WERROR=ON >/dev/null
cmake --build build -j "$jobs"

echo "== tests (labels: $labels)"
(cd build && ctest -L "$labels" --output-on-failure -j "$jobs" --timeout 600)

echo "== consumer project: install, then find_package(recsdk) from outside the tree"
prefix="$root/build/install"
rm -rf "$prefix" build/consumer
cmake --install build --prefix "$prefix" >/dev/null
cmake -S tests/consumer -B build/consumer "${generator[@]}" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build build/consumer -j "$jobs"
build/consumer/consumer

if [ "${RECSDK_SKIP_SANITIZE:-0}" != "1" ]; then
  echo "== sanitizer build (ASan + UBSan), label quick"
  # Debug at -O1 with line tables: checks (RECSDK_DCHECK) on, and quick to compile on 2 cores.
  cmake -S . -B build-sanitize "${generator[@]}" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" \
    -DRECSDK_SANITIZE=ON \
    -DRECSDK_WERROR=ON -DRECSDK_BUILD_BENCHMARKS=OFF -DRECSDK_BUILD_SAMPLES=OFF >/dev/null
  cmake --build build-sanitize -j "$jobs"
  (cd build-sanitize && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest -L sanitize -LE "slow|mpi|soak" --output-on-failure -j "$jobs" --timeout 900)
fi
if [ "${RECSDK_SKIP_TSAN:-0}" != "1" ]; then
  echo "== ThreadSanitizer build, label tsan (pipeline threads, key stage, inter-op parallelism)"
  # Only the tests labelled tsan (RECSDK_TSAN_TESTS in tests/CMakeLists.txt) and what they link
  # are built. oneTBB is not instrumented: tests/tsan_suppressions.txt says why each entry is there.
  cmake -S . -B build-tsan "${generator[@]}" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" \
    -DRECSDK_TSAN=ON -DRECSDK_WERROR=ON -DRECSDK_BUILD_BENCHMARKS=OFF -DRECSDK_BUILD_SAMPLES=OFF >/dev/null
  tsan_tests=$(sed -n 's/^set(RECSDK_TSAN_TESTS \([^)]*\))$/\1/p' tests/CMakeLists.txt)
  # shellcheck disable=SC2086
  cmake --build build-tsan -j "$jobs" --target $tsan_tests
  (cd build-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$root/tests/tsan_suppressions.txt" \
    ctest -L tsan --output-on-failure -j "$jobs" --timeout 900)
fi
if [ "${RECSDK_SKIP_FUZZ:-0}" != "1" ]; then
  echo "== libFuzzer run of every reader (clang, ASan + UBSan)"
  # install_deps.sh installed clang, so a missing clang is an error here, not a skip; a crash
  # or sanitizer report makes fuzz.sh, and so this script, fail.
  RECSDK_FUZZ_REQUIRE_CLANG=1 scripts/fuzz.sh "${RECSDK_FUZZ_SECONDS:-10}"
fi
echo "== all tests passed"
