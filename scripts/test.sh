#!/usr/bin/env bash
# README command 2: install what is missing, build, run the whole test suite (ctest), then the
# sanitizer jobs (scripts/sanitize.sh: ASan+UBSan over the unit and multirank tests, TSan over
# the comm, sharding and engine multirank tests, each in its own build directory), then a short
# run of every fuzz target (scripts/fuzz.sh, ZS_FUZZ_SECONDS each, default 15: a crash fails the
# suite and leaves its input in build-fuzz/crashes/). CI runs this. Extra arguments go to ctest
# and select part of the main suite, e.g. scripts/test.sh -L unit; the sanitizer and fuzz jobs
# then do not run (a selection is a local check). ZS_SKIP_SANITIZERS=1 and ZS_SKIP_FUZZ=1 skip
# them for the whole suite too.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# Warnings in our own code are errors here (CI runs this), in the CPU and the CUDA configuration.
scripts/build.sh -DZS_WERROR=ON
# A hung test fails by name after ZS_TEST_TIMEOUT seconds (default 900) instead of holding CI
# until its time limit; a test with a TIMEOUT of its own keeps it.
ctest --test-dir "${ZS_BUILD_DIR:-build}" --output-on-failure -j"$(nproc)" \
  --timeout "${ZS_TEST_TIMEOUT:-900}" "$@"
if [ $# -eq 0 ] && [ "${ZS_SKIP_SANITIZERS:-0}" != 1 ]; then
  scripts/sanitize.sh asan
  scripts/sanitize.sh tsan
fi
if [ $# -eq 0 ] && [ "${ZS_SKIP_FUZZ:-0}" != 1 ]; then
  scripts/setup.sh --fuzz
  scripts/fuzz.sh "${ZS_FUZZ_SECONDS:-15}"
fi
