#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, docs/fuzzing.md) with clang into build-fuzz and runs each
# for SECONDS, one after the other, starting from its seed corpus (fuzz/corpus/<target>) plus
# what earlier runs here added (build-fuzz/corpus/<target>). Prints executions, corpus size and
# crashes per target; a crash leaves its input in build-fuzz/crashes/<target>/ and makes the exit
# status 1. Replay one input: build-fuzz/fuzz/fuzz_<target> FILE.
#
# Usage: scripts/fuzz.sh SECONDS [TARGET...]   (default: every target)
# Needs clang++ 14 and its libFuzzer runtime: apt-get install clang-14 libclang-rt-14-dev
# libomp-14-dev (scripts/setup.sh --fuzz installs them). FUZZ_BUILD_DIR overrides build-fuzz.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-}
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
  echo "usage: scripts/fuzz.sh SECONDS [TARGET...]  (seconds of fuzzing per target)" >&2
  exit 2
fi
shift
all_targets=(safetensors llmc token_file tsv deepspeed_json model_config_json train_args
  sharded_checkpoint)
targets=("${@:-${all_targets[@]}}")
for target in "${targets[@]}"; do
  [ -d "fuzz/corpus/$target" ] || {
    echo "fuzz: unknown target '$target'; the targets: ${all_targets[*]}" >&2
    exit 2
  }
done

cxx=$(command -v clang++ || command -v clang++-14 || true)
cc=$(command -v clang || command -v clang-14 || true)
if [ -z "$cxx" ] || [ -z "$cc" ]; then
  echo "fuzz: clang is not installed: run scripts/setup.sh --fuzz (or apt-get install clang-14" \
    "libclang-rt-14-dev libomp-14-dev)" >&2
  exit 2
fi
if [ ! -f "$("$cxx" -print-file-name=libclang_rt.fuzzer-x86_64.a)" ]; then
  echo "fuzz: clang's libFuzzer runtime is missing: apt-get install libclang-rt-14-dev" >&2
  exit 2
fi

build=${FUZZ_BUILD_DIR:-build-fuzz}
jobs=$(nproc)
start=$(date +%s)
# -O1: the targets run the parsers, not the kernels, and it halves the sanitizer build's time.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER="$cc" \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DZS_FUZZ=ON -DZS_CUDA=OFF -DZS_MPI=OFF \
  -DZS_BUILD_TESTS=OFF -DZS_BUILD_BENCH=OFF >/dev/null
fuzzers=()
for target in "${targets[@]}"; do fuzzers+=("fuzz_$target"); done
cmake --build "$build" -j"$jobs" --target "${fuzzers[@]}"
echo "fuzz: build took $(($(date +%s) - start)) s"

# The sanitizers' reports end a run as a crash; leaks too (a parser that leaks on bad input
# leaks in a long-running trainer).
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=0
summary=()
for target in "${targets[@]}"; do
  work="$build/corpus/$target"
  crashes="$build/crashes/$target"
  log="$build/logs/$target.log"
  rm -rf "$crashes"
  mkdir -p "$work" "$crashes" "$(dirname "$log")"
  status=0
  # -timeout: an input that takes 10 s is a hang; -rss_limit_mb: one that takes 2 GiB is a leak
  # or a size taken from the input unchecked.
  "$build/fuzz/fuzz_$target" "$work" "fuzz/corpus/$target" -max_total_time="$seconds" \
    -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$crashes/" \
    >"$log" 2>&1 || status=$?
  executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  corpus_size=$(find "$work" -type f | wc -l)
  found=$(find "$crashes" -type f | wc -l)
  line=$(printf '%-20s %10s executions  %5d corpus  %3d crashes' "$target" \
    "${executions:-?}" "$corpus_size" "$found")
  if [ "$status" -ne 0 ]; then
    failed=1
    line="$line  CRASH (exit $status; $log)"
    grep -m3 -E "^(==[0-9]+==ERROR|SUMMARY|.*runtime error)" "$log" | sed 's/^/    /' || true
  fi
  echo "$line"
  summary+=("$line")
done
echo "fuzz: ${seconds} s per target, $(($(date +%s) - start)) s in all"
printf '%s\n' "${summary[@]}"
exit "$failed"
