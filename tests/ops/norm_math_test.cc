// ops/math/norm.h: add_squares_to_lane, one lane at a time (how the GPU's sum-of-squares kernel
// splits a norm block over eight threads), must give add_squares_to_lanes' lanes bit for bit, for
// covered ranges that start and end anywhere inside a block.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "ops/math/norm.h"

namespace zs::ops::math {
namespace {

TEST(NormMath, OneLaneAtATimeGivesTheEightLanesBitForBit) {
  std::mt19937 gen(11);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> grad(static_cast<size_t>(2 * kNormBlock + 1003));
  for (float& g : grad) g = dist(gen);
  const int64_t numel = static_cast<int64_t>(grad.size());
  // Ranges as the optimizer's views cover them: unaligned starts and ends, an empty range, one
  // crossing a block boundary, the tail block.
  const std::vector<std::vector<std::pair<int64_t, int64_t>>> range_sets = {
      {{0, numel}},
      {{3, 17}, {17, 17}, {29, 4100}, {4101, 4102}},
      {{kNormBlock - 5, kNormBlock + 9}, {2 * kNormBlock + 1, numel - 2}},
  };
  for (const auto& ranges : range_sets) {
    for (int64_t block_begin = 0; block_begin < numel; block_begin += kNormBlock) {
      const int64_t block_end = std::min(numel, block_begin + kNormBlock);
      double lanes[kNormLanes] = {};
      double by_lane[kNormLanes] = {};
      bool covered = false;
      for (const auto& [range_begin, range_end] : ranges) {
        const int64_t begin = std::max(range_begin, block_begin);
        const int64_t end = std::min(range_end, block_end);
        if (begin >= end) continue;
        covered = true;
        add_squares_to_lanes(grad.data(), begin, end, lanes);
        for (int64_t l = 0; l < kNormLanes; ++l) {
          by_lane[l] = add_squares_to_lane(grad.data(), begin, end, l, by_lane[l]);
        }
      }
      EXPECT_EQ(std::memcmp(lanes, by_lane, sizeof lanes), 0) << "block at " << block_begin;
      EXPECT_EQ(fold_lanes(lanes) != 0.0, covered) << "block at " << block_begin;
    }
  }
}

}  // namespace
}  // namespace zs::ops::math
