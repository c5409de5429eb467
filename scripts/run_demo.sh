#!/usr/bin/env bash
# Builds recsdk and runs the main job: the little_demo sample (sparse tables + key stage +
# dense MLP on synthetic click data). Does its own set-up. Extra arguments go to little_demo.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target little_demo
exec build/samples/little_demo "$@"
