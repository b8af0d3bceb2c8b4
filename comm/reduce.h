// The arithmetic of reducing collectives (all_reduce, reduce_scatter), written once for every
// backend that reduces on its own: the local backend (comm/local) and the MPI backend (comm/mpi)
// call reduce_rank_slices, and a CUDA kernel can include the element ops below (STYLE.md, "One
// source of math for CPU and CUDA"). NCCL reduces by itself and does not use this file.
//
// The rules, which make every backend agree bit for bit with every other and with a serial
// reference:
// - Ranks are combined in rank order 0, 1, …, N−1, starting from rank 0's value.
// - fp32 accumulates in fp32. fp16 and bf16 are widened to fp32 (exactly), accumulated in fp32
//   and rounded once, to nearest even, when the result is stored.
// - avg is the fp32 sum divided by N (a division, not a multiplication by 1/N), then rounded
//   once like sum.
// - int32 sums wrap modulo 2^32 and int64 sums modulo 2^64; avg divides the wrapped sum by N
//   with C++ `/` (truncating toward zero).
// - max and min compare in the element type's value: `x > acc ? x : acc` (and `<` for min),
//   with acc the running result and x the next rank's value: a NaN of rank 0 propagates, a NaN
//   of a later rank is passed over. fp16/bf16 are compared after the exact widening to fp32,
//   which keeps their order.
//
// The element ops are ZS_HOST_DEVICE inline, pure, and call no host-only library function. The
// host loop is a pure function of its arguments (no shared state) and safe to call from any
// thread on buffers that thread may read and write.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "comm/types.h"
#include "runtime/dtype.h"
#include "runtime/macros.h"

namespace zs::comm {

// ---- Element ops. A reduction of element i over N ranks is
//   acc = value of rank 0;  acc = reduce_combine<op>(acc, value of rank q) for q = 1 … N−1;
//   result = reduce_finish<op>(acc, N)
// with fp16/bf16 values widened to fp32 before (runtime/half.h) and the result narrowed after.

// The accumulator types: fp32 (for fp32, fp16 and bf16 elements), int32 and int64.
template <typename T>
constexpr bool kIsReduceAccumulator =
    std::is_same_v<T, float> || std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>;

// Folds the next rank's value `x` into the running result `acc`. An integer sum is computed in
// the unsigned type of the same width, so that it wraps with defined behaviour.
template <ReduceOp kOp, typename T>
ZS_HOST_DEVICE inline T reduce_combine(T acc, T x) {
  static_assert(kIsReduceAccumulator<T>, "reductions accumulate in float, int32_t or int64_t");
  if constexpr (kOp == ReduceOp::kSum || kOp == ReduceOp::kAvg) {
    if constexpr (std::is_integral_v<T>) {
      using Unsigned = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<Unsigned>(acc) + static_cast<Unsigned>(x));
    } else {
      return acc + x;
    }
  } else if constexpr (kOp == ReduceOp::kMax) {
    return x > acc ? x : acc;
  } else {
    return x < acc ? x : acc;
  }
}

// The result from the combined value of all `n_ranks` ranks: avg divides (fp32 division, or
// C++ integer division for int32 and int64), every other op keeps the value.
template <ReduceOp kOp, typename T>
ZS_HOST_DEVICE inline T reduce_finish(T acc, int n_ranks) {
  static_assert(kIsReduceAccumulator<T>, "reductions accumulate in float, int32_t or int64_t");
  if constexpr (kOp == ReduceOp::kAvg) {
    return acc / static_cast<T>(n_ranks);
  } else {
    return acc;
  }
}

// ---- Host loop.

// out[i] = op over ranks r = 0, 1, …, n_ranks − 1 (in that order) of slices[r][i], for i in
// [0, count), following the rules above. Each slices[r] holds `count` elements of `dtype`. The
// loop works in blocks of a few thousand elements (fp16/bf16 are converted a block at a time
// with the bulk functions of runtime/half.h) and reads a whole block of every slice before it
// writes that block, so `out` may be one of the slices; otherwise it must not overlap them.
// count == 0 touches no pointer. n_ranks >= 1.
void reduce_rank_slices(void* out, const void* const* slices, int n_ranks, size_t count,
                        DType dtype, ReduceOp op);

}  // namespace zs::comm
