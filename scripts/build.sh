#!/usr/bin/env bash
# Configures and builds zeroshard in ./build (Release). Extra arguments go to cmake's configure
# step, e.g. scripts/build.sh -DZS_GEMM=eigen -DZS_NATIVE=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${ZS_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=${ZS_BUILD_TYPE:-Release} "$@" >/dev/null
cmake --build "$build_dir" -j"$(nproc)"
