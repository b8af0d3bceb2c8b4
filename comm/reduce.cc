// The host loop of comm/reduce.h: rank-ordered reduction of N slices, in blocks, around the
// element ops of that header. The inner loops are plain loops into a stack block of
// accumulators, which the compiler vectorizes; with the bulk fp16/bf16 conversions they run near
// memory bandwidth. Nothing here keeps state between calls.
#include "comm/reduce.h"

#include <algorithm>
#include <cstring>

#include "runtime/half.h"

namespace zs::comm {
namespace {

// Elements reduced per block: the fp32 accumulator and one widened slice (8 KB each) stay in L1.
constexpr size_t kBlock = 2048;

// Loads n elements at `in` into the accumulator block `out`: fp16/bf16 are widened, fp32 and
// integers copied.
void load_block(float* out, const void* in, size_t n, DType dtype) {
  const auto* bits = static_cast<const uint16_t*>(in);
  if (dtype == DType::kF16) return f16_to_f32(bits, out, n);
  if (dtype == DType::kBF16) return bf16_to_f32(bits, out, n);
  std::memcpy(out, in, n * sizeof(float));
}

template <typename Integer>
void load_block(Integer* out, const void* in, size_t n, DType /*dtype*/) {
  std::memcpy(out, in, n * sizeof(Integer));
}

// Stores the accumulator block `in` as n elements at `out`: rounded to fp16/bf16 (the one
// rounding of the reduction), or copied.
void store_block(void* out, const float* in, size_t n, DType dtype) {
  auto* bits = static_cast<uint16_t*>(out);
  if (dtype == DType::kF16) return f32_to_f16(in, bits, n);
  if (dtype == DType::kBF16) return f32_to_bf16(in, bits, n);
  std::memcpy(out, in, n * sizeof(float));
}

template <typename Integer>
void store_block(void* out, const Integer* in, size_t n, DType /*dtype*/) {
  std::memcpy(out, in, n * sizeof(Integer));
}

// acc[i] = reduce_combine(acc[i], x[i]) for one rank's block. Out of line on purpose: inlined
// into the rank loop below, GCC 12 unrolls and jams that loop for int32 (two ranks per pass
// over the block), which measured about 45% slower from 4 ranks on than this plain loop.
template <ReduceOp kOp, typename T>
__attribute__((noinline)) void combine_block(T* __restrict acc, const T* __restrict x, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] = reduce_combine<kOp>(acc[i], x[i]);
}

// Reduces in blocks with accumulator type T (float for fp32, fp16 and bf16; int32_t and int64_t
// for the integers). fp32 and integer slices are read in place; fp16/bf16 ones are widened a
// block at a time.
template <ReduceOp kOp, typename T>
void reduce_blocks(void* out, const void* const* slices, int n_ranks, size_t count, DType dtype) {
  const size_t esize = dtype_size(dtype);
  const bool read_in_place = esize == sizeof(T);
  alignas(64) T acc[kBlock];
  alignas(64) T widened[kBlock];
  for (size_t begin = 0; begin < count; begin += kBlock) {
    const size_t n = std::min(kBlock, count - begin);
    load_block(acc, static_cast<const char*>(slices[0]) + begin * esize, n, dtype);
    for (int q = 1; q < n_ranks; ++q) {
      const T* x;
      if (read_in_place) {
        x = static_cast<const T*>(slices[q]) + begin;
      } else {
        load_block(widened, static_cast<const char*>(slices[q]) + begin * esize, n, dtype);
        x = widened;
      }
      combine_block<kOp>(acc, x, n);
    }
    if constexpr (kOp == ReduceOp::kAvg) {
      for (size_t i = 0; i < n; ++i) acc[i] = reduce_finish<kOp>(acc[i], n_ranks);
    }
    store_block(static_cast<char*>(out) + begin * esize, acc, n, dtype);
  }
}

template <ReduceOp kOp>
void reduce_typed(void* out, const void* const* slices, int n_ranks, size_t count, DType dtype) {
  if (dtype == DType::kI32) {
    reduce_blocks<kOp, int32_t>(out, slices, n_ranks, count, dtype);
  } else if (dtype == DType::kI64) {
    reduce_blocks<kOp, int64_t>(out, slices, n_ranks, count, dtype);
  } else {
    reduce_blocks<kOp, float>(out, slices, n_ranks, count, dtype);
  }
}

}  // namespace

void reduce_rank_slices(void* out, const void* const* slices, int n_ranks, size_t count,
                        DType dtype, ReduceOp op) {
  if (count == 0) return;
  // One rank: every op is the identity (x / 1 == x exactly, in every dtype), so no pass over
  // the data — a one-rank group costs nothing per collective.
  if (n_ranks == 1) {
    if (out != slices[0]) std::memmove(out, slices[0], count * dtype_size(dtype));
    return;
  }
  switch (op) {
    case ReduceOp::kSum:
      return reduce_typed<ReduceOp::kSum>(out, slices, n_ranks, count, dtype);
    case ReduceOp::kAvg:
      return reduce_typed<ReduceOp::kAvg>(out, slices, n_ranks, count, dtype);
    case ReduceOp::kMax:
      return reduce_typed<ReduceOp::kMax>(out, slices, n_ranks, count, dtype);
    case ReduceOp::kMin:
      return reduce_typed<ReduceOp::kMin>(out, slices, n_ranks, count, dtype);
  }
}

}  // namespace zs::comm
