#!/usr/bin/env bash
# Builds the CUDA programs for a Hopper GPU here and packs them into .gpu/ (ignored by git) for
# scripts/gpu-check.sh to run on a machine that has a GPU but none of Debian's packages:
#   .gpu/bin   zs_cuda_tests, zs_cuda_unit_tests, zs-train, zs-mem, zs-bench-gpu (stripped)
#   .gpu/lib   the shared libraries they need that are neither glibc's, the compiler's nor
#              NVIDIA's (spdlog, fmt, xxhash, liburing, OpenMP, ...); the GPU machine's own
#              CUDA runtime, cuBLAS, cuDNN and NCCL are used there
#   .gpu/text  the built-in demo's corpus (Debian's fortunes), the training text there
# The build is portable (-DZS_NATIVE=OFF: the GPU machine's CPU is not this one), uses Eigen's
# GEMM (no OpenBLAS to carry) and no MPI. Usage: scripts/gpu-pack.sh [ARCH] (default 90).
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${1:-90}
build=${ZS_GPU_BUILD_DIR:-build-gpu}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" \
  -DZS_CUDA=ON -DZS_MPI=OFF -DZS_GEMM=eigen -DZS_NATIVE=OFF >/dev/null
targets=(zs_cuda_tests zs_cuda_unit_tests zs-train zs-mem zs-bench-gpu)
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
rm -rf .gpu && mkdir -p .gpu/bin .gpu/lib .gpu/text
for t in "${targets[@]}"; do
  f=$(find "$build" -type f -name "$t" -perm -u+x | head -1)
  [[ -n $f ]] || { echo "gpu-pack: $t was not built" >&2; exit 1; }
  strip -o ".gpu/bin/$t" "$f"
done
# Everything ldd resolves outside the C library, the compiler runtime and NVIDIA's libraries.
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcudnn|libnccl|libnvrtc|libnvJitLink)'
ldd .gpu/bin/* | awk '/=> \//{print $1, $3}' | sort -u | while read -r name path; do
  [[ $name =~ $skip ]] || cp -L "$path" ".gpu/lib/$name"
done
cp -r /usr/share/games/fortunes/. .gpu/text/
du -sh .gpu .gpu/*
