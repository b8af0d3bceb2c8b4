#!/usr/bin/env bash
# Sanitizer jobs (issue 16): builds a CPU-only configuration with sanitizers into its own build
# directory and runs a test selection under them. Zero reports is the bar: any ASan, UBSan or TSan
# report fails its test (UBSan and ASan stop the process; TSan makes it exit 66), so ctest fails.
#
#   scripts/sanitize.sh asan   ASan + UBSan (build-asan): the unit and multirank tests
#   scripts/sanitize.sh tsan   TSan (build-tsan): the comm, sharding and engine multirank tests,
#                              and the NVMe offload store's
#
# Extra arguments go to ctest (e.g. -R Engine). ZS_SANITIZE_JOBS sets the build and ctest
# parallelism (default: nproc). scripts/test.sh (the README's test command, which CI runs) calls
# this for both after the main suite.
#
# What is left out, and why:
# - CUDA, NCCL and MPI are off (-DZS_CUDA=OFF -DZS_MPI=OFF): the sanitizers instrument host code
#   only, Open MPI's own allocations and progress threads are reported by LSan/TSan without being
#   ours, and the mpi tests are mpirun jobs of several processes. The local backend's tests (ranks
#   as threads) cover the same collectives and sharding code.
# - Label slow (train.checkpoint_kill, examples.installed): they start zs-train 40 times or
#   install and build the examples; neither adds code paths the unit tests do not run.
# - scripts.zs_launch: a bash test of scripts/zs-launch with a fake job; no C++ runs in it.
# - The bench/ programs (ZS_BUILD_BENCH=OFF): not tests.
# The TSan build uses the Eigen GEMM (-DZS_GEMM=eigen) and OMP_NUM_THREADS=1: OpenBLAS and GCC's
# libgomp are not built with TSan, so their internal synchronisation is invisible to it and
# would show as races in the buffers they hand between threads. With one OpenMP thread a parallel
# region runs on the calling thread, and the races TSan looks for here are between the rank
# threads and the comm / prefetch threads, which are ours (std::thread).
set -euo pipefail
cd "$(dirname "$0")/.."

kind=${1:-}
shift || true
jobs=${ZS_SANITIZE_JOBS:-$(nproc)}
# ZS_WERROR stays off: the main build (scripts/test.sh) holds warnings to errors, and GCC's
# instrumented builds report uninitialized/overflow warnings of their own making.
common=(-DCMAKE_BUILD_TYPE=Release -DZS_CUDA=OFF -DZS_MPI=OFF -DZS_BUILD_BENCH=OFF -DZS_WERROR=OFF)

case "$kind" in
  asan)
    build_dir=build-asan
    # -O1, not Release's -O3: GCC's ASan+UBSan instrumentation doubles the compile time of -O3
    # (train/engine.cc: 5.9 s uninstrumented, 22.1 s ASan+UBSan at -O3, 11.5 s at -O1, CPU
    # seconds), and this build is the largest part of CI's time.
    configure=("${common[@]}" -DZS_SANITIZE=address,undefined "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG")
    targets=(zs_runtime_tests zs_ops_tests zs_data_tests zs_models_tests zs_optim_tests
             zs_offload_tests zs_comm_tests zs_sharding_tests zs_train_tests zs_checkpoint_tests
             zs_apps_tests)
    # ParameterHash compares against bits recorded from the Release build; the instrumented -O1
    # build rounds some float expressions differently (contraction, inlining), so its hashes differ
    # without anything being wrong. apps.error_catalogue runs the zs-train program as a child
    # (not built here); the code under it runs in the unit tests above.
    select=(-L "unit|multirank" -LE "mpi|slow|gpu" -E "^scripts\\.|^ParameterHash\\.|^apps\\.error_catalogue$")
    # detect_leaks: the tests must also free what they allocate. UBSan prints the stack of what
    # it found (it stops the test through -fno-sanitize-recover=undefined).
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_init_order=1:check_initialization_order=1}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
    ;;
  tsan)
    build_dir=build-tsan
    configure=("${common[@]}" -DZS_SANITIZE=thread -DZS_GEMM=eigen)
    targets=(zs_comm_tests zs_sharding_tests zs_train_tests zs_offload_tests)
    # The comm and sharding programs whole, except the collective suite on 3 and 4 ranks (the
    # 2-rank case runs the same code; those took 45 s and 117 s under TSan here); from the train
    # program the engine's multi-rank runs and the NVMe offload's; the NVMe store and its pager
    # (an I/O thread; label threads).
    select=(-L "multirank|threads" -E "LocalSuite\\..*/[34]ranks" -R "(^|/)(Local|CpuStreamOrder|Duplicate|Factory|Launch|Rendezvous|Torchrun|Device|BertSharding|DdpSync|HybridSharding|MixedPrecision|Overlap|ParameterIo|ShardedModel|ShardingDevice|StagePolicy|StepOrder|UnitPlan|WrapPolicy|Engine|NvmeStore|NvmePager|NvmeOffload)[A-Za-z]*\\.")
    export OMP_NUM_THREADS=1
    export TSAN_OPTIONS=${TSAN_OPTIONS:-second_deadlock_stack=1:history_size=4:suppressions=$PWD/scripts/tsan.supp}
    ;;
  *)
    echo "usage: scripts/sanitize.sh asan|tsan [ctest arguments]" >&2
    exit 2
    ;;
esac

start=$(date +%s)
cmake -S . -B "$build_dir" "${configure[@]}" >/dev/null
cmake --build "$build_dir" -j"$jobs" --target "${targets[@]}"
built=$(date +%s)
echo "sanitize $kind: built in $((built - start)) s"
# A test that hangs fails after ZS_TEST_TIMEOUT seconds (default 1200: the slowest TSan test took
# about 300 s in CI) with its name, rather than holding CI until its own time limit ends.
ctest --test-dir "$build_dir" --output-on-failure -j"$jobs" --timeout "${ZS_TEST_TIMEOUT:-1200}" \
  "${select[@]}" "$@"
echo "sanitize $kind: tests ran in $(($(date +%s) - built)) s"
