#!/usr/bin/env bash
# The bits of the engine over a matrix of configurations, recorded and compared: each run's
# trained weights (--save-weights, compared with cmp) and the losses and grad norms it logged.
# A refactor that must change no behaviour records before and compares after:
#
#   scripts/bits-matrix.sh record DIR     # with the build before the change
#   scripts/bits-matrix.sh compare DIR    # with the build after it: every weight file equal by
#                                         # cmp, every logged loss line equal; exit 1 otherwise
#
# The matrix: stages 0-3 x fp32/bf16/fp16; stage 0's three DDP syncs; per-step gradient sync with
# accumulation at stages 0 and 1; hybrid sharding (4 ranks, groups of 2) in fp32 and bf16; stage 3
# without prefetch, with one unit and several units ahead, with gathered-bytes limits, with small
# units kept gathered, with activation checkpointing, with SGD; optimizer offload to host and NVMe
# at stages 1-3; parameter offload to host and NVMe at stage 3 in fp32 and bf16. A tiny GPT on
# byte-level text (this script), 2 ranks of one thread each (4 for hybrid), 6 steps with
# accumulation 2. About 30 s on 2 cores.
# ZS_TRAIN (default build/apps/zs-train) names the binary.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: scripts/bits-matrix.sh record|compare DIR" >&2
  exit 2
}
[ $# -eq 2 ] || usage
mode=$1
dir=$2
case "$mode" in record | compare) ;; *) usage ;; esac
zs_train=${ZS_TRAIN:-build/apps/zs-train}
[ -x "$zs_train" ] || {
  echo "bits-matrix: $zs_train is not built (scripts/build.sh)" >&2
  exit 2
}
if [ "$mode" = compare ] && [ ! -f "$dir/matrix.txt" ]; then
  echo "bits-matrix: $dir has no recorded matrix (run 'record' first)" >&2
  exit 2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$dir"
# The corpus: this repository's own text, the same bytes in both modes.
corpus="$dir/corpus.txt"
if [ "$mode" = record ]; then
  cat README.md docs/guide.md > "$corpus"
fi

base=(--text "$corpus" --model tiny --layers 2 --width 64 --heads 2 --context 32 --micro-batch 2
  --grad-accum 2 --threads 1 --steps 6 --log-interval 1 --eval-batches 1 --lr 3e-3
  --warmup 2 --no-progress --seed 7)

# name | flags
matrix=(
  "s0-fp32|--zero-stage 0"
  "s1-fp32|--zero-stage 1"
  "s2-fp32|--zero-stage 2"
  "s3-fp32|--zero-stage 3"
  "s0-bf16|--zero-stage 0 --precision bf16"
  "s1-bf16|--zero-stage 1 --precision bf16"
  "s2-bf16|--zero-stage 2 --precision bf16"
  "s3-bf16|--zero-stage 3 --precision bf16"
  "s0-fp16|--zero-stage 0 --precision fp16"
  "s2-fp16|--zero-stage 2 --precision fp16"
  "s3-fp16|--zero-stage 3 --precision fp16"
  "s3-bf16-reduce-fp32|--zero-stage 3 --precision bf16 --reduce-dtype fp32"
  "s0-per-tensor|--zero-stage 0 --ddp-sync per-tensor"
  "s0-gather-scatter|--zero-stage 0 --ddp-sync gather-scatter"
  "s0-per-step|--zero-stage 0 --grad-sync per-step"
  "s1-per-step|--zero-stage 1 --grad-sync per-step"
  "hybrid-fp32|--strategy hybrid --hybrid-group 2 --ranks 4"
  "hybrid-bf16|--strategy hybrid --hybrid-group 2 --ranks 4 --precision bf16"
  "s3-no-prefetch|--zero-stage 3 --no-prefetch"
  "s3-live-limit|--zero-stage 3 --max-live-gathered 40KiB"
  "s3-keep-small|--zero-stage 3 --keep-gathered-below 40KiB"
  "s3-prefetch-bytes|--zero-stage 3 --prefetch-bytes 1"
  "s3-prefetch-units|--zero-stage 3 --prefetch-bytes 600KiB"
  "s3-prefetch-live|--zero-stage 3 --prefetch-bytes 600KiB --max-live-gathered 300KiB"
  "s3-reductions-0|--zero-stage 3 --max-reductions-in-flight 0"
  "s3-act-ckpt|--zero-stage 3 --activation-checkpointing"
  "s3-sgd|--zero-stage 3 --optimizer sgd --momentum 0.9"
  "s1-host|--zero-stage 1 --offload-optimizer host"
  "s2-host-bf16|--zero-stage 2 --offload-optimizer host --precision bf16"
  "s3-host|--zero-stage 3 --offload-optimizer host"
  "s2-nvme|--zero-stage 2 --offload-optimizer nvme --nvme-path @NVME@ --nvme-buffer-count 2"
  "s3-nvme-bf16|--zero-stage 3 --offload-optimizer nvme --nvme-path @NVME@ --nvme-buffer-count 2 --precision bf16"
  "s3-param-host|--zero-stage 3 --offload-optimizer host --offload-param host"
  "s3-param-host-bf16|--zero-stage 3 --offload-optimizer host --offload-param host --precision bf16"
  "s3-param-nvme|--zero-stage 3 --offload-optimizer nvme --offload-param nvme --nvme-path @NVME@ --nvme-buffer-count 2 --nvme-param-buffer-count 2"
)

failed=0
: > "$work/matrix.txt"
for entry in "${matrix[@]}"; do
  name=${entry%%|*}
  flags=${entry#*|}
  nvme="$work/nvme-$name"
  mkdir -p "$nvme"
  flags=${flags//@NVME@/$nvme}
  echo "$name" >> "$work/matrix.txt"
  weights="$work/$name.safetensors"
  log="$work/$name.log"
  ranks=(--ranks 2)
  [[ $flags == *--ranks* ]] && ranks=()
  # shellcheck disable=SC2086  # the flags are words
  if ! "$zs_train" "${base[@]}" "${ranks[@]}" $flags --save-weights "$weights" > "$log" 2>&1; then
    echo "bits-matrix: $name failed:" >&2
    tail -5 "$log" >&2
    failed=1
    continue
  fi
  # The figures that must not change: step, loss, lr, grad norm and the fp16 scale of every step,
  # the evaluation, and the engine's sharding lines (timings, rates, MFU and memory are left
  # out).
  grep -E '\| loss |eval after step|sharding: ' "$log" | sed -E \
    -e 's/^(\[[^]]*\] )*//' \
    -e 's/ \| [0-9.]+ tok\/s \| [0-9.]+ ms \| ETA [^ |]*//' -e 's/ \| MFU [^ |]*//' \
    -e 's/ \| peak [0-9.]+ [A-Za-z]+//' -e 's/ \| NVMe .*//' > "$work/$name.losses" || true
  [ -s "$work/$name.losses" ] || {
    echo "bits-matrix: $name logged no steps" >&2
    failed=1
  }
  if [ "$mode" = record ]; then
    cp "$weights" "$dir/$name.safetensors"
    cp "$work/$name.losses" "$dir/$name.losses"
    echo "recorded $name"
  else
    if cmp -s "$weights" "$dir/$name.safetensors" && cmp -s "$work/$name.losses" "$dir/$name.losses"; then
      echo "same     $name"
    else
      echo "DIFFERS  $name" >&2
      diff "$dir/$name.losses" "$work/$name.losses" | head -5 >&2 || true
      cmp "$dir/$name.safetensors" "$weights" >&2 || true
      failed=1
    fi
  fi
  rm -rf "$nvme" "$weights"
done
if [ "$mode" = record ]; then
  cp "$work/matrix.txt" "$dir/matrix.txt"
elif ! cmp -s "$work/matrix.txt" "$dir/matrix.txt"; then
  echo "bits-matrix: the matrix differs from the recorded one" >&2
  failed=1
fi
if [ "$failed" -ne 0 ]; then
  echo "bits-matrix: FAILED" >&2
  exit 1
fi
echo "bits-matrix: $mode done, ${#matrix[@]} runs"
