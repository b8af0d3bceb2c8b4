#!/usr/bin/env bash
# Writes the seed corpora of the libFuzzer targets into fuzz/corpus/<target>/ (docs/fuzzing.md):
# a few small valid inputs per target, so that fuzzing starts from files that get past the
# magic numbers and headers. Binary seeds are spelled out byte by byte here (bash printf only);
# the sharded-checkpoint seed is a real save of a one-layer model by zs-train from BUILD_DIR
# (default build-fuzz, which scripts/fuzz.sh configures), joined into one input with the
# separator fuzz/fuzz_input.h names. Replaces the seeds it writes; other files (inputs that
# libFuzzer added while fuzzing, if copied in) are kept.
#
# Usage: scripts/make_fuzz_corpus.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build-fuzz}
corpus=fuzz/corpus

# u32 VALUE...: each value as 4 little-endian bytes.
u32() {
  local v
  for v in "$@"; do
    printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $((v & 255)) $((v >> 8 & 255)) \
      $((v >> 16 & 255)) $((v >> 24 & 255)))"
  done
}
# u16 VALUE...: each value as 2 little-endian bytes.
u16() {
  local v
  for v in "$@"; do printf "$(printf '\\x%02x\\x%02x' $((v & 255)) $((v >> 8 & 255)))"; done
}
zeros() { head -c "$1" /dev/zero; }
# header WORD...: a 256-word header starting with these words.
header() {
  u32 "$@"
  zeros $(((256 - $#) * 4))
}

mkdir -p "$corpus"/{token_file,llmc,safetensors,tsv,deepspeed_json,model_config_json,train_args}
mkdir -p "$corpus"/sharded_checkpoint

# Token files (data/token_file.h): zeroshard's header with 2- and 4-byte tokens, llm.c's two.
{ header 0x4B54535A 1 2 256 5 0; u16 1 2 3 255 0; } >"$corpus/token_file/zeroshard_u16"
{ header 0x4B54535A 1 4 0 3 0; u32 7 70000 0; } >"$corpus/token_file/zeroshard_u32"
{ header 20240520 1 4; u16 50256 1 2 3; } >"$corpus/token_file/llmc_gpt2"
{ header 20240801 7 2; u32 128000 5; } >"$corpus/token_file/llmc_llama3"
{ header 0x4B54535A 1 2 0 0 0; } >"$corpus/token_file/zeroshard_empty"

# llm.c checkpoints (checkpoint/llmc.h): maxT 2, V 3, L 1, NH 1, C 2, Vp 4 — 90 parameters, as
# fp32 (version 3) and bf16 (version 5).
{ header 20240326 3 2 3 1 1 2 4; zeros 360; } >"$corpus/llmc/gpt2_f32"
{ header 20240326 5 2 3 1 1 2 4; zeros 180; } >"$corpus/llmc/gpt2_bf16"

# safetensors (checkpoint/safetensors.h): the 8-byte header length, the JSON, the data.
safetensors() {
  local json=$1 data_bytes=$2
  u32 ${#json} 0
  printf '%s' "$json"
  zeros "$data_bytes"
}
safetensors '{"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}}' 24 \
  >"$corpus/safetensors/f32"
safetensors '{"__metadata__":{"format":"pt"},"w":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},"b":{"dtype":"F16","shape":[],"data_offsets":[4,6]}}' 6 \
  >"$corpus/safetensors/mixed"
safetensors '{"i":{"dtype":"I64","shape":[1,1],"data_offsets":[0,8]},"e":{"dtype":"U8","shape":[0],"data_offsets":[8,8]}}' 8 \
  >"$corpus/safetensors/ints"

# TSV (data/tsv.h): the first byte is the target's options (bit 0: header, bit 1: fixed labels).
printf '\x00good movie\tpositive\nbad one\tnegative\n\nmeh\tneutral\r\n' >"$corpus/tsv/plain"
printf '\x03sentence\tlabel\nfine\tpositive\nawful\tnegative' >"$corpus/tsv/header_fixed"

# DeepSpeed JSON (train/config.h, apply_deepspeed_json).
printf '%s\n' '{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
 "zero_optimization": {"stage": 3, "overlap_comm": true, "reduce_bucket_size": 5e8},
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8,
  "weight_decay": 0.1}},
 "scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 10,
  "total_num_steps": 100, "cos_min_ratio": 0.1}},
 "gradient_clipping": 1.0, "bf16": {"enabled": true}, "steps_per_print": 10}' \
  >"$corpus/deepspeed_json/zero3_adamw"
printf '%s\n' '{"train_batch_size": 16, "fp16": {"enabled": true, "loss_scale": 0,
 "initial_scale_power": 12, "loss_scale_window": 100, "hysteresis": 2, "min_loss_scale": 1},
 "optimizer": {"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9, "nesterov": true}},
 "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "none"}},
 "checkpoint": {"writer": {"decoupled": true}}}' >"$corpus/deepspeed_json/fp16_sgd"

# Model-config JSON (--model-config FILE).
printf '%s\n' '{"n_layer": 2, "width": 64, "n_head": 4, "vocab_size": 256, "context": 64}' \
  >"$corpus/model_config_json/tiny"
printf '%s\n' '{"n_layer": 12, "width": 768}' >"$corpus/model_config_json/partial"

# zs-train's arguments, one per line.
printf '%s\n' --data train.bin --model tiny --steps 10 --zero-stage 3 --ranks 4 --micro-batch 2 \
  --grad-accum 2 --precision bf16 --memory-budget 2GiB >"$corpus/train_args/zero3"
printf '%s\n' --text /usr/share/games/fortunes --strategy hybrid --hybrid-group 2 --ranks 4 \
  --optimizer sgd --momentum 0.9 --decay linear --max-live-gathered 64MiB \
  --checkpoint-dir ckpt --checkpoint-interval 5 >"$corpus/train_args/hybrid_sgd"
printf '%s\n' --data train.tsv --task classify --layers 2 --width 32 --heads 2 --epochs 2 \
  --precision fp16 --reduce-dtype fp32 --log-level warn >"$corpus/train_args/classify"

# A sharded checkpoint: one step of a one-layer model on 2 rank threads at ZeRO-3, saved, then
# meta.json and both rank files joined into one input.
zs_train="$build_dir/apps/zs-train"
if [ ! -x "$zs_train" ]; then
  echo "make_fuzz_corpus: $zs_train is missing: run scripts/fuzz.sh (or build the zs-train target" \
    "in $build_dir) first; the other corpora are written" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
zs_train=$(realpath "$zs_train")
cp fuzz/fuzz_input.h "$work/corpus.txt"
# Relative paths, so the flags recorded in meta.json are the same in every clone. Stage 3 with
# AdamW (two state tensors per file), stage 0 with plain SGD (none).
seed_run() {
  local name=$1
  shift
  (cd "$work" && ASAN_OPTIONS=detect_leaks=0 "$zs_train" --text corpus.txt --layers 1 --width 4 \
    --heads 1 --context 4 --micro-batch 1 --steps 1 --ranks 2 --checkpoint-dir "$name" \
    --checkpoint-interval 1 --sample 0 --no-progress --log-level warn "$@" >/dev/null)
  local step
  step=$(cat "$work/$name/latest")
  {
    cat "$work/$name/$step/meta.json"
    printf '\n--zs-fuzz-file--\n'
    cat "$work/$name/$step/rank-00000.bin"
    printf '\n--zs-fuzz-file--\n'
    cat "$work/$name/$step/rank-00001.bin"
  } >"$corpus/sharded_checkpoint/$name"
}
seed_run zero3_adamw --zero-stage 3
seed_run zero0_sgd --zero-stage 0 --optimizer sgd --momentum 0
du -sh "$corpus"
