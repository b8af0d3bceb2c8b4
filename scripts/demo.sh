#!/usr/bin/env bash
# README command 1: install what is missing, build, run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
exec "${ZS_BUILD_DIR:-build}/examples/zs-example-tiny-gpt" "$@"
