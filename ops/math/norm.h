// The gradient-norm sum of squares in a fixed order, written once for the CPU loop
// (optim/clip.cc) and the CUDA kernel (ops/cuda/optim_kernels.cu), so both add the same terms in
// the same order and give the same double, bit for bit (STYLE.md, "One source of math").
//
// The order: a view's elements are cut into blocks of kNormBlock, counted from the view's
// start. Inside a block, element i adds its square (in double) to lane i mod kNormLanes, in
// increasing i, whatever the segment boundaries; the lanes fold in a fixed tree; the blocks
// add in block order. Eight lanes let the CPU loop vectorize; the blocks let it (and the GPU)
// run in parallel; neither changes the order of any addition.
#pragma once

#include <cstdint>

#include "ops/math/elementwise.h"
#include "runtime/macros.h"

namespace zs::ops::math {

constexpr int64_t kNormBlock = 4096;  // a multiple of kNormLanes
constexpr int64_t kNormLanes = 8;

// lanes[i mod 8] += g[i]² (in double) for i in [begin, end), in increasing i. The peel / groups
// of eight / tail shape is for the CPU's vectorizer; the per-lane order is plain increasing i.
ZS_HOST_DEVICE inline void add_squares_to_lanes(const float* grad, int64_t begin, int64_t end,
                                                double* lanes) {
  int64_t i = begin;
  for (; i < end && i % kNormLanes != 0; ++i) lanes[i % kNormLanes] += sum_of_squares_term(grad[i]);
  for (; i + kNormLanes <= end; i += kNormLanes) {
    for (int64_t l = 0; l < kNormLanes; ++l) lanes[l] += sum_of_squares_term(grad[i + l]);
  }
  for (; i < end; ++i) lanes[i % kNormLanes] += sum_of_squares_term(grad[i]);
}

// Lane `lane` of add_squares_to_lanes alone: sum plus the squares of the elements i ≡ lane
// (mod kNormLanes) of [begin, end), in increasing i — the same additions in the same order, so
// eight calls give add_squares_to_lanes' eight lanes bit for bit. The GPU gives each lane a
// thread (ops/cuda/optim_kernels.cu).
ZS_HOST_DEVICE inline double add_squares_to_lane(const float* grad, int64_t begin, int64_t end,
                                                 int64_t lane, double sum) {
  int64_t i = begin + (lane - begin % kNormLanes + kNormLanes) % kNormLanes;
  for (; i < end; i += kNormLanes) sum += sum_of_squares_term(grad[i]);
  return sum;
}

// The block's sum from its eight lanes, in a fixed tree.
ZS_HOST_DEVICE inline double fold_lanes(const double* lanes) {
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

}  // namespace zs::ops::math
