// Global gradient-norm clipping (optim/clip.h): the fixed-order fp64 local sum, the all-reduce,
// and the scaling loop.
#include "optim/clip.h"

#include <algorithm>
#include <cmath>

#include "ops/math/elementwise.h"
#include "ops/math/norm.h"
#include "optim/device_loops.h"
#include "optim/loops_impl.h"
#include "runtime/allocator.h"

namespace zs::optim {
namespace {

using ops::math::kNormBlock;

// Σ g² over the covered elements of [block_begin, block_end), segments from `first` on, in the
// order ops/math/norm.h fixes (the CUDA kernel adds the same terms in the same order).
double block_sum_of_squares(const float* grad, int64_t block_begin, int64_t block_end,
                            const std::vector<Segment>& segments, size_t first) {
  double lanes[ops::math::kNormLanes] = {};
  for (size_t k = first; k < segments.size() && segments[k].begin < block_end; ++k) {
    ops::math::add_squares_to_lanes(grad, std::max(segments[k].begin, block_begin),
                                    std::min(segments[k].end, block_end), lanes);
  }
  return ops::math::fold_lanes(lanes);
}

// Pointers are taken before any parallel region: nothing inside one may throw.
void scale_view(const ShardView& view, float coefficient) {
  check_shard_view(view, "scale_grads");
  const std::vector<Segment> segments = normalize_segments(view.segments, view.master.numel(),
                                                           "scale_grads view '" + view.name + "'");
  if (segments.empty()) return;
  if (detail::on_device(view)) {
    detail::device_scale(view, segments, coefficient);
    return;
  }
  float* grad = view.grad.data<float>();
  detail::parallel_for_segments(segments, [&](int64_t begin, int64_t end, bool) {
    float* __restrict g = grad;
    for (int64_t i = begin; i < end; ++i) g[i] = ops::math::scale(g[i], coefficient);
  });
}

}  // namespace

double grad_sum_of_squares(const ShardView& view) {
  check_shard_view(view, "grad_sum_of_squares");
  if (view.gate) view.gate->check(GradientUse::kRead, "grad_sum_of_squares");
  const std::vector<Segment> segments = normalize_segments(
      view.segments, view.master.numel(), "grad_sum_of_squares view '" + view.name + "'");
  if (segments.empty()) return 0.0;
  if (detail::on_device(view)) return detail::device_sum_of_squares(view, segments);
  const float* grad = view.grad.data<float>();
  const int64_t numel = view.master.numel();
  const int64_t blocks = (numel + kNormBlock - 1) / kNormBlock;
  std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
  const bool parallel = detail::covered(segments) >= detail::kParallelMinElements;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t block_begin = b * kNormBlock;
    const int64_t block_end = std::min(block_begin + kNormBlock, numel);
    // The first segment that ends after the block starts.
    const auto first = std::upper_bound(segments.begin(), segments.end(), block_begin,
                                        [](int64_t at, const Segment& s) { return at < s.end; });
    partial[static_cast<size_t>(b)] = block_sum_of_squares(
        grad, block_begin, block_end, segments, static_cast<size_t>(first - segments.begin()));
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

double grad_sum_of_squares(const std::vector<ShardView>& views) {
  double total = 0.0;
  for (const ShardView& view : views) total += grad_sum_of_squares(view);
  return total;
}

float global_grad_norm(double local_sum_of_squares, comm::Communicator& comm, int replication,
                       const comm::CollectiveOptions& options) {
  ZS_CHECK(replication >= 1 && comm.size() % replication == 0, "global_grad_norm: replication ",
           replication, " must be >= 1 and divide the group size ", comm.size(),
           " (it is the number of ranks of the group that hold each gradient element)");
  ZS_CHECK(local_sum_of_squares >= 0.0 || std::isnan(local_sum_of_squares),
           "global_grad_norm: a sum of squares cannot be negative, found ", local_sum_of_squares);
  comm::CollectiveOptions tagged = options;
  if (tagged.tag.empty()) tagged.tag = "global gradient norm";
  const float reduced = detail::all_reduce_scalar(comm, static_cast<float>(local_sum_of_squares),
                                                  comm::ReduceOp::kSum, tagged);
  const double sum = static_cast<double>(reduced) / replication;
  return static_cast<float>(std::sqrt(sum));
}

float clip_coefficient(float total_norm, float max_norm) {
  ZS_CHECK(max_norm > 0.0f && std::isfinite(max_norm), "clip_coefficient: max_norm ", max_norm,
           " must be finite and > 0");
  return std::min(1.0f, max_norm / (total_norm + 1e-6f));
}

void scale_grads(const std::vector<ShardView>& views, float coefficient) {
  ZS_CHECK(std::isfinite(coefficient), "scale_grads: coefficient ", coefficient, " must be finite");
  check_gradient_gates(views, GradientUse::kRead, "scale_grads");
  if (coefficient == 1.0f) return;
  for (const ShardView& view : views) scale_view(view, coefficient);
}

float clip_grad_norm(const std::vector<ShardView>& views, float max_norm, comm::Communicator& comm,
                     int replication, const comm::CollectiveOptions& options) {
  ZS_CHECK(max_norm > 0.0f && std::isfinite(max_norm), "clip_grad_norm: max_norm ", max_norm,
           " must be finite and > 0");
  const float norm = global_grad_norm(grad_sum_of_squares(views), comm, replication, options);
  if (!std::isfinite(norm)) return norm;
  scale_grads(views, clip_coefficient(norm, max_norm));
  return norm;
}

}  // namespace zs::optim
