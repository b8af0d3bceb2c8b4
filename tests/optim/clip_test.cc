// Global gradient-norm clipping: the local fp64 sum (padding excluded, fixed order, independent
// of threads and of where a slice starts), and the global norm over 1–4 local ranks for sharded
// and replicated gradients, against the single-rank norm and the closed form.
#include "optim/clip.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "comm/local/local_backend.h"
#include "optim_test_util.h"
#include "runtime/allocator.h"

namespace zs::optim {
namespace {

using comm::Communicator;
using comm::run_local_ranks;
using testing::flat;

constexpr float kPaddingSentinel = 1000.0f;  // would dominate the norm if it were counted

// The flat gradient of `layout` padded for `world` ranks: gradient values in the used range,
// the sentinel in the padding.
Tensor full_gradient(Allocator& allocator, const testing::Layout& layout, int world) {
  const int64_t padded = layout.padded(world), used = layout.used();
  Tensor grad = flat(allocator, padded, "full grad");
  for (int64_t i = 0; i < padded; ++i) {
    grad.data<float>()[i] = i < used ? testing::step_grad(0, i) : kPaddingSentinel;
  }
  return grad;
}

double reference_sum_of_squares(const testing::Layout& layout) {
  double sum = 0;
  for (int64_t i = 0; i < layout.used(); ++i) {
    const double g = testing::step_grad(0, i);
    sum += g * g;
  }
  return sum;
}

TEST(GradSumOfSquares, ExcludesPaddingAndMatchesTheClosedForm) {
  CpuAllocator allocator(nullptr);
  Tensor master = flat(allocator, 100, "master"), grad = flat(allocator, 100, "grad");
  grad.fill(2.0f);
  // 30 + 45 covered elements of value 2: Σ g² = 75·4.
  ShardView view{"u", master, grad, {{0, 30, true}, {50, 95, false}}};
  EXPECT_EQ(grad_sum_of_squares(view), 300.0);
  EXPECT_EQ(grad_sum_of_squares(std::vector<ShardView>{view, view}), 600.0);
}

TEST(GradSumOfSquares, IsIndependentOfTheThreadCountAndOfTheSliceItIsTakenFrom) {
  CpuAllocator allocator(nullptr);
  const testing::Layout layout = testing::model_like_layout();
  Tensor grad = full_gradient(allocator, layout, 2);
  Tensor master = flat(allocator, grad.numel(), "master");
  const ShardView full{"u", master, grad, layout.segments()};
  std::vector<double> sums;
  for (int threads : {1, 2, 3}) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    sums.push_back(grad_sum_of_squares(full));
    omp_set_num_threads(saved);
  }
  EXPECT_EQ(sums[0], sums[1]);
  EXPECT_EQ(sums[0], sums[2]);
  EXPECT_NEAR(sums[0], reference_sum_of_squares(layout), 1e-12 * sums[0]);
  // Rank 1's shard in its own buffer sums to the same bits as the slice of the full view.
  const int64_t shard = grad.numel() / 2;
  Tensor own_grad = flat(allocator, shard, "own grad"), own_master = flat(allocator, shard, "m");
  std::memcpy(own_grad.raw_data(), grad.data<float>() + shard, own_grad.nbytes());
  const ShardView own{"u", own_master, own_grad, layout.shard_segments(1, shard)};
  EXPECT_EQ(grad_sum_of_squares(own), grad_sum_of_squares(slice_view(full, shard, 2 * shard)));
}

// Runs one norm computation on `world` local ranks and returns each rank's result.
std::vector<float> norms_on_ranks(int world, bool replicated, bool owned_slice) {
  const testing::Layout layout = testing::model_like_layout();
  std::vector<float> norms(static_cast<size_t>(world), -1.0f);
  run_local_ranks(world, [&](Communicator& comm) {
    CpuAllocator allocator(nullptr);
    Tensor grad = full_gradient(allocator, layout, world);  // every rank's own copy
    const int64_t shard = grad.numel() / world, r = comm.rank();
    float norm = 0;
    if (!replicated) {
      // Stages 1–3: this rank holds only its shard.
      Tensor shard_grad = flat(allocator, shard, "grad shard");
      Tensor shard_master = flat(allocator, shard, "master shard");
      std::memcpy(shard_grad.raw_data(), grad.data<float>() + r * shard, shard_grad.nbytes());
      const ShardView view{"u", shard_master, shard_grad,
                           layout.shard_segments(comm.rank(), shard)};
      const uint64_t before = comm.calls_issued();
      norm = global_grad_norm(grad_sum_of_squares(view), comm);
      EXPECT_EQ(comm.calls_issued() - before, 1u) << "one collective";
    } else {
      Tensor master = flat(allocator, grad.numel(), "master");
      const ShardView full{"u", master, grad, layout.segments()};
      if (owned_slice) {
        // Stage 0, owned slices: count only the slice this rank would own in stage 1.
        norm = global_grad_norm(grad_sum_of_squares(slice_view(full, r * shard, (r + 1) * shard)),
                                comm);
      } else {
        // Stage 0, replicated sums: every rank counts its whole copy.
        norm = global_grad_norm(grad_sum_of_squares(full), comm, /*replication=*/comm.size());
      }
    }
    norms[static_cast<size_t>(r)] = norm;
  });
  return norms;
}

class GlobalNorm : public ::testing::TestWithParam<int> {};

TEST_P(GlobalNorm, ShardedAndReplicatedGradientsGiveTheSingleRankNorm) {
  const int world = GetParam();
  const float single = norms_on_ranks(1, false, false)[0];
  EXPECT_NEAR(single, std::sqrt(reference_sum_of_squares(testing::model_like_layout())),
              1e-6 * single);
  const std::vector<float> sharded = norms_on_ranks(world, false, false);
  const std::vector<float> replicated = norms_on_ranks(world, true, false);
  const std::vector<float> owned = norms_on_ranks(world, true, true);
  for (int r = 0; r < world; ++r) {
    EXPECT_NEAR(sharded[r], single, 1e-6 * single) << "rank " << r;
    EXPECT_NEAR(replicated[r], single, 1e-6 * single) << "rank " << r;
    // Every rank gets the same bits; owned slices of a replicated gradient give the sharded bits.
    EXPECT_EQ(sharded[r], sharded[0]);
    EXPECT_EQ(replicated[r], replicated[0]);
    EXPECT_EQ(owned[r], sharded[r]) << "stage 0 with owned slices vs sharded, rank " << r;
  }
}

TEST_P(GlobalNorm, ClipGradNormScalesEveryShardToTheMaxNormAndLeavesPaddingAlone) {
  const int world = GetParam();
  const testing::Layout layout = testing::model_like_layout();
  const float single = std::sqrt(static_cast<float>(reference_sum_of_squares(layout)));
  const float max_norm = 0.25f * single;
  std::vector<float> before(world), after(world);
  std::vector<char> padding_intact(world, 0);
  run_local_ranks(world, [&](Communicator& comm) {
    CpuAllocator allocator(nullptr);
    Tensor grad = full_gradient(allocator, layout, world);
    const int64_t shard = grad.numel() / world, r = comm.rank();
    Tensor shard_grad = flat(allocator, shard, "grad shard");
    Tensor shard_master = flat(allocator, shard, "master shard");
    std::memcpy(shard_grad.raw_data(), grad.data<float>() + r * shard, shard_grad.nbytes());
    const std::vector<ShardView> views = {
        {"u", shard_master, shard_grad, layout.shard_segments(comm.rank(), shard)}};
    std::vector<float> expected = shard_grad.to_vector();
    before[r] = clip_grad_norm(views, max_norm, comm);
    const float coefficient = clip_coefficient(before[r], max_norm);
    const std::vector<float> clipped = shard_grad.to_vector();
    bool intact = true;
    for (int64_t j = 0; j < shard; ++j) {
      const bool padding = r * shard + j >= layout.used();
      intact &= padding ? clipped[j] == kPaddingSentinel : clipped[j] == expected[j] * coefficient;
    }
    padding_intact[r] = intact;
    after[r] = global_grad_norm(grad_sum_of_squares(views), comm);
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_NEAR(before[r], single, 1e-6 * single);
    EXPECT_NEAR(after[r], max_norm, 1e-5 * max_norm) << "rank " << r;
    EXPECT_TRUE(padding_intact[r]) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlobalNorm, ::testing::Values(1, 2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "ranks";
                         });

TEST(ClipCoefficient, ClosedForm) {
  EXPECT_EQ(clip_coefficient(0.5f, 1.0f), 1.0f);  // under the max: no clipping
  EXPECT_FLOAT_EQ(clip_coefficient(4.0f, 1.0f), 1.0f / (4.0f + 1e-6f));
  EXPECT_EQ(clip_coefficient(0.0f, 1.0f), 1.0f);
  EXPECT_THROW(clip_coefficient(1.0f, 0.0f), InvalidArgument);
}

TEST(ClipGradNorm, ANonFiniteNormLeavesGradientsUntouched) {
  run_local_ranks(2, [](Communicator& comm) {
    CpuAllocator allocator(nullptr);
    Tensor grad = flat(allocator, 8, "grad"), master = flat(allocator, 8, "master");
    grad.fill(3.0f);
    if (comm.rank() == 1) grad.data<float>()[2] = std::numeric_limits<float>::quiet_NaN();
    const float norm = clip_grad_norm({{"u", master, grad, {{0, 8, true}}}}, 1.0f, comm);
    EXPECT_TRUE(std::isnan(norm));
    EXPECT_EQ(grad.data<float>()[0], 3.0f);
  });
}

TEST(GlobalNormReplication, MustDivideTheGroup) {
  run_local_ranks(1, [](Communicator& comm) {
    EXPECT_THROW(global_grad_norm(1.0, comm, 2), InvalidArgument);
    EXPECT_EQ(global_grad_norm(16.0, comm, 1), 4.0f);
  });
}

}  // namespace
}  // namespace zs::optim
