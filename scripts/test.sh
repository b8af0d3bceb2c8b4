#!/usr/bin/env bash
# README command 2: install what is missing, build, run the whole test suite (ctest).
# Extra arguments go to ctest, e.g. scripts/test.sh -L unit.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# Warnings in our own code are errors here (CI runs this), in the CPU and the CUDA configuration.
scripts/build.sh -DZS_WERROR=ON
ctest --test-dir "${ZS_BUILD_DIR:-build}" --output-on-failure -j"$(nproc)" "$@"
