#!/usr/bin/env bash
# Installs what zeroshard needs to build and test from Debian's packages, and nothing that is
# already there. Idempotent; runs as root or through sudo.
# Usage: scripts/setup.sh [--fuzz]   (--fuzz: also clang and libFuzzer, for scripts/fuzz.sh)
set -euo pipefail

packages=(
  g++ make cmake pkg-config ccache
  libeigen3-dev libspdlog-dev libfmt-dev libgtest-dev libgmock-dev
  libopenblas-dev libcli11-dev nlohmann-json3-dev
  libxxhash-dev  # XXH3, the checksum of checkpoint files
  liburing-dev  # io_uring, the NVMe offload store's engine
  fortunes  # the demo's English text corpus (/usr/share/games/fortunes)
  libopenmpi-dev openmpi-bin
)
if [ "${1:-}" = "--fuzz" ]; then
  packages+=(clang-14 libclang-rt-14-dev libomp-14-dev)
elif [ $# -gt 0 ]; then
  echo "usage: scripts/setup.sh [--fuzz]" >&2
  exit 2
fi

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
