#!/usr/bin/env bash
# README command 1: install what is missing, build, run the main job: zs-train with no data
# flags trains its built-in demo (see train/cli.cc); any zs-train flags pass through.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
exec "${ZS_BUILD_DIR:-build}/apps/zs-train" "$@"
