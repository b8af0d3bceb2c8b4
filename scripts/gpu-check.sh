#!/usr/bin/env bash
# The whole GPU check in one command, on a machine with an NVIDIA GPU and nothing of Debian's:
# it needs only the folder scripts/gpu-pack.sh made (.gpu/) and the machine's own CUDA runtime,
# cuBLAS, cuDNN and NCCL (the toolkit's lib64 or a Python venv's nvidia-* wheels).
#
#   scripts/gpu-check.sh [PARTS]     PARTS: any of probe tests tiny speed bench m124 big
#                                  profile memcheck (default: all, in that order)
#
# Logs go to $OUT (default /tmp/gpu-check): summary.txt (the probe, then a line per step),
# tests.log, train.log, speed.log, bench.log, profile.log and one memory profile (JSON + SVG):
# 8 files, the device tool's limit.
# A summary is printed last. Every step has its own time limit and a failing step does not stop
# the others: read the logs.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${OUT:-/tmp/gpu-check}
mkdir -p "$out"
parts=${*:-probe tests tiny speed bench m124 big profile memcheck}
# profile: every kernel's time over a two-step 124M run, by Nsight Compute; memcheck: a short
# bf16 stage-3 run under compute-sanitizer.
want() { [[ " $parts " == *" $1 "* ]]; }
bin=$root/.gpu/bin
text=$root/.gpu/text
[[ -x $bin/zs-train ]] || { echo "gpu-check: run scripts/gpu-pack.sh first (no .gpu/bin)" >&2; exit 2; }

# The test binaries name the source tree by the path it had where they were built.
[[ -e /work/main ]] || { mkdir -p /work && ln -s "$root" /work/main; }

# Shared libraries: the carried ones, then every folder of NVIDIA's wheels, then the toolkit.
libs=$root/.gpu/lib
nv=$(python3 -c 'import nvidia, sys; print(list(nvidia.__path__)[0])' 2>/dev/null || true)
if [[ -n $nv ]]; then
  libs+=:$(find "$nv" -name 'lib*.so*' -printf '%h\n' | sort -u | paste -sd:)
fi
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -d $d ]] && libs+=:$d
done
export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export ZS_COMM_TIMEOUT_S=60

# Every step ends by ZS_GPU_CHECK_DEADLINE seconds after the start (default 420), so that the
# whole check fits one device command: later steps are skipped, and say so in the summary.
deadline=${ZS_GPU_CHECK_DEADLINE:-420}
step() {  # step LOG SECONDS CMD...: runs CMD with a time limit, appending to LOG
  local log=$1 limit=$2
  shift 2
  local left=$((deadline - SECONDS))
  if ((left < 10)); then
    echo "   skipped (deadline) ${1##*/} ${*: -7}" >>"$out/summary.txt"
    return 124
  fi
  ((limit > left)) && limit=$left
  echo "=== $(date +%T) $*" >>"$log"
  local t0=$SECONDS
  timeout -k 5 "$limit" "$@" >>"$log" 2>&1
  local rc=$?
  echo "=== rc=$rc in $((SECONDS - t0)) s" >>"$log"
  local args=("$@")  # the summary names the program and its last arguments
  echo "$(printf '%4d s rc=%-3d' $((SECONDS - t0)) $rc) ${1##*/} ${args[*]: -7}" >>"$out/summary.txt"
  return $rc
}

if want probe; then
  {
    nvidia-smi
    nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv
    command -v nvcc && nvcc --version
    uname -a
    grep -m1 'model name' /proc/cpuinfo
    grep -o -m1 -w 'avx512f' /proc/cpuinfo || echo "no avx512f"
    nproc
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    for b in "$bin"/*; do
      echo "--- ldd $b"
      ldd "$b" | grep -E 'not found|cuda|cublas|cudnn|nccl|spdlog|fmt'
    done
    command -v compute-sanitizer
  } >>"$out/summary.txt" 2>&1
fi

if want tests; then
  step "$out/tests.log" 60 "$bin/zs_cuda_unit_tests"
  step "$out/tests.log" 300 "$bin/zs_cuda_tests"
fi

# The engine: tiny (the demo's shape) and 124M, fp32/bf16/fp16, stages 0 and 3, one GPU. The same
# command lines on the CPU (--device cpu) give the reference curves.
common=(--text "$text" --device cuda --ranks 1 --seed 7 --log-interval 1 --eval-batches 2
        --sample 0 --no-progress)
tiny=(--model tiny --layers 4 --width 128 --heads 4 --context 128 --micro-batch 8 --steps 30
      --lr 4e-3 --warmup 10)
m124=(--model 124M --seq-len 256 --micro-batch 2 --steps 6 --lr 3e-4 --warmup 2)
every_precision_and_stage() {  # SECONDS ARGS...: zs-train in fp32/bf16/fp16 at stages 0 and 3
  local limit=$1
  shift
  for p in fp32 bf16 fp16; do
    for s in 0 3; do
      step "$out/train.log" "$limit" "$bin/zs-train" "${common[@]}" "$@" --precision $p --zero-stage $s
    done
  done
}
if want tiny; then
  every_precision_and_stage 60 "${tiny[@]}"
  # Gradients summed on the device over micro-batches, reduced once per step (stages 0 and 1).
  for s in 0 1; do
    step "$out/train.log" 60 "$bin/zs-train" "${common[@]}" "${tiny[@]}" --precision bf16 --zero-stage $s \
      --grad-accum 4 --grad-sync per-step
  done
  # Activation checkpointing and optimizer offload (pinned host memory, then NVMe) on the GPU: the
  # logged losses equal the plain bf16 runs above (stage 3 and stage 2 give stage 0's).
  step "$out/train.log" 60 "$bin/zs-train" "${common[@]}" "${tiny[@]}" --precision bf16 --zero-stage 3 \
    --activation-checkpointing
  step "$out/train.log" 60 "$bin/zs-train" "${common[@]}" "${tiny[@]}" --precision bf16 --zero-stage 2 \
    --offload-optimizer host
  # The optimizer state on NVMe (O_DIRECT swap files, pinned host buffers): the same losses again.
  mkdir -p /tmp/zs-nvme
  step "$out/train.log" 60 "$bin/zs-train" "${common[@]}" "${tiny[@]}" --precision bf16 --zero-stage 2 \
    --offload-optimizer nvme --nvme-path /tmp/zs-nvme
  step "$out/train.log" 30 "$bin/zs-mem" --model tiny --layers 4 --width 128 --heads 4 --context 128 \
    --precision bf16
fi

# Throughput: 124M in bf16 at B·T = 16384 tokens per step (zs-bench-gpu compares the attentions).
speed=(--text "$text" --device cuda --ranks 1 --seed 7 --log-interval 5 --eval-batches 1
       --sample 0 --no-progress --precision bf16 --lr 3e-4 --warmup 2)
if want speed; then
  step "$out/speed.log" 150 "$bin/zs-train" "${speed[@]}" --model 124M --micro-batch 16 --steps 30 --zero-stage 0
  step "$out/speed.log" 150 "$bin/zs-train" "${speed[@]}" --model 124M --micro-batch 16 --steps 30 --zero-stage 3 \
    --profile-memory "$out/mem-124M-bf16-s3"
  step "$out/speed.log" 30 "$bin/zs-mem" --model 124M --precision bf16
fi

if want bench; then
  step "$out/bench.log" 120 "$bin/zs-bench-gpu" --repeats 20
fi

if want m124; then
  every_precision_and_stage 90 "${m124[@]}"
fi

if want profile; then
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  step "$out/profile.log" 200 "$ncu" --clock-control none --cache-control none \
    --metrics gpu__time_duration.sum --print-summary per-kernel \
    "$bin/zs-train" "${speed[@]}" --model 124M --micro-batch 16 --steps 2 --zero-stage 0
fi

if want big; then
  step "$out/speed.log" 240 "$bin/zs-train" "${speed[@]}" --model 1.5B --micro-batch 8 --steps 10 --zero-stage 3
fi

if want memcheck; then
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
  step "$out/tests.log" 120 "$sanitizer" --tool memcheck --error-exitcode 1 \
    "$bin/zs-train" "${common[@]}" "${tiny[@]}" --steps 3 --precision bf16 --zero-stage 3
fi

echo "--- summary ($out)"
grep -E '^ +[0-9]+ s rc=|skipped' "$out/summary.txt"
grep -h -E 'FAILED|PASSED|tests ran' "$out/tests.log" 2>/dev/null | tail -30
grep -h -E '^=== [0-9]|step +[0-9]+/[0-9]+ \|' "$out/train.log" 2>/dev/null |
  awk '/^===/{if (last) print last; print "=== ..." substr($0, length($0) - 60); last=""; next}
       {last=$0} END{if (last) print last}'
[[ -f $out/speed.log ]] && grep -E 'tok/s' "$out/speed.log" | tail -12
[[ -f $out/bench.log ]] && tail -25 "$out/bench.log"
[[ -f $out/profile.log ]] && python3 scripts/ncu-summary.py "$out/profile.log" 15
exit 0
