// The dynamic loss scaler and the fused unscale + overflow check (optim/loss_scaler.h).
#include "optim/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "ops/math/elementwise.h"
#include "optim/device_loops.h"
#include "optim/loops_impl.h"
#include "runtime/half.h"
#include "runtime/logging.h"

namespace zs::optim {
namespace {

const LossScalerOptions& checked(const LossScalerOptions& o) {
  ZS_CHECK(std::isfinite(o.growth_factor) && o.growth_factor >= 1.0f,
           "DynamicLossScaler: growth_factor ", o.growth_factor, " must be finite and >= 1");
  ZS_CHECK(o.backoff_factor > 0.0f && o.backoff_factor < 1.0f, "DynamicLossScaler: backoff_factor ",
           o.backoff_factor, " must be in (0, 1)");
  ZS_CHECK(o.growth_interval >= 1, "DynamicLossScaler: growth_interval ", o.growth_interval,
           " must be >= 1 step");
  ZS_CHECK(o.hysteresis >= 1, "DynamicLossScaler: hysteresis ", o.hysteresis,
           " must be >= 1 (1 backs off on every overflow)");
  ZS_CHECK(std::isfinite(o.max_scale) && o.min_scale > 0.0f && o.min_scale <= o.initial_scale &&
               o.initial_scale <= o.max_scale,
           "DynamicLossScaler: expected 0 < min_scale <= initial_scale <= max_scale (finite), "
           "found min_scale ",
           o.min_scale, ", initial_scale ", o.initial_scale, ", max_scale ", o.max_scale);
  return o;
}

// g ← g·inv_scale over [begin, end); returns true if a result is not finite (an inf or NaN
// input stays so; a finite input can also overflow when inv_scale > 1). Vectorizes: the flag
// is an OR over the exponent test of each result's bits.
bool unscale_range(float* __restrict grad, int64_t begin, int64_t end, float inv_scale) {
  uint32_t non_finite = 0;
  for (int64_t i = begin; i < end; ++i) {
    const float g = ops::math::scale(grad[i], inv_scale);
    grad[i] = g;
    non_finite |= ops::math::is_finite_f32_bits(::zs::detail::float_to_bits(g)) ? 0u : 1u;
  }
  return non_finite != 0;
}

}  // namespace

DynamicLossScaler::DynamicLossScaler(const LossScalerOptions& options)
    : options_(checked(options)) {
  state_.scale = options_.initial_scale;
}

bool DynamicLossScaler::update(bool local_found_inf, comm::Communicator& comm,
                               const comm::CollectiveOptions& options) {
  comm::CollectiveOptions tagged = options;
  if (tagged.tag.empty()) tagged.tag = "loss scaler overflow flag";
  const bool found_inf = detail::all_reduce_scalar(comm, local_found_inf ? 1.0f : 0.0f,
                                                   comm::ReduceOp::kMax, tagged) != 0.0f;
  if (!found_inf) {
    state_.consecutive_overflows = 0;
    if (++state_.good_steps >= options_.growth_interval) {
      state_.good_steps = 0;
      const float grown = std::min(state_.scale * options_.growth_factor, options_.max_scale);
      if (grown != state_.scale) {
        ZS_LOG_DEBUG("loss scale {} -> {} after {} steps without overflow", state_.scale, grown,
                     options_.growth_interval);
      }
      state_.scale = grown;
    }
    return false;
  }
  ++state_.skipped_steps;
  state_.good_steps = 0;
  ++state_.consecutive_overflows;
  const bool rank0 = comm.rank() == 0;
  if (state_.consecutive_overflows >= options_.hysteresis) {
    const float previous = state_.scale;
    state_.scale = std::max(state_.scale * options_.backoff_factor, options_.min_scale);
    if (previous == options_.min_scale) {
      // Still overflowing at the minimum scale: the gradients are inf/NaN on their own.
      const char* fmt =
          "step skipped: gradient overflow (inf/NaN) on some rank at the minimum loss scale {}, "
          "{} consecutive overflows; the model may be diverging (check the learning rate and "
          "the data)";
      if (rank0) {
        ZS_LOG_WARN(fmt, state_.scale, state_.consecutive_overflows);
      } else {
        ZS_LOG_DEBUG(fmt, state_.scale, state_.consecutive_overflows);
      }
    } else if (rank0) {
      ZS_LOG_WARN("step skipped: gradient overflow (inf/NaN) on some rank; loss scale {} -> {}",
                  previous, state_.scale);
    } else {
      ZS_LOG_DEBUG("step skipped: gradient overflow (inf/NaN) on some rank; loss scale {} -> {}",
                   previous, state_.scale);
    }
  } else {
    const char* fmt =
        "step skipped: gradient overflow (inf/NaN) on some rank; loss scale stays {} "
        "(overflow {} of hysteresis {})";
    if (rank0) {
      ZS_LOG_INFO(fmt, state_.scale, state_.consecutive_overflows, options_.hysteresis);
    } else {
      ZS_LOG_DEBUG(fmt, state_.scale, state_.consecutive_overflows, options_.hysteresis);
    }
  }
  return true;
}

void DynamicLossScaler::load_state(const LossScalerState& state) {
  ZS_CHECK(std::isfinite(state.scale) && state.scale > 0.0f, "DynamicLossScaler: saved scale ",
           state.scale, " must be finite and > 0; the checkpoint's scaler state is damaged");
  ZS_CHECK(state.good_steps >= 0 && state.consecutive_overflows >= 0 && state.skipped_steps >= 0,
           "DynamicLossScaler: saved counters (good_steps ", state.good_steps,
           ", consecutive_overflows ", state.consecutive_overflows, ", skipped_steps ",
           state.skipped_steps, ") must be >= 0");
  state_ = state;
}

bool unscale_and_check(const ShardView& view, float inv_scale) {
  check_shard_view(view, "unscale_and_check");
  ZS_CHECK(std::isfinite(inv_scale) && inv_scale > 0.0f, "unscale_and_check: inv_scale ", inv_scale,
           " must be finite and > 0 (1 / the loss scale)");
  const std::vector<Segment> segments = normalize_segments(
      view.segments, view.master.numel(), "unscale_and_check view '" + view.name + "'");
  if (segments.empty()) return false;
  if (detail::on_device(view)) return detail::device_unscale_and_check(view, segments, inv_scale);
  float* grad = view.grad.data<float>();
  // One flag per thread of the team, ORed after the loop (an OR does not depend on the order,
  // so neither does the answer on the thread count).
  std::vector<char> flags(static_cast<size_t>(omp_get_max_threads()), 0);
  detail::parallel_for_segments(segments, [&](int64_t begin, int64_t end, bool) {
    if (unscale_range(grad, begin, end, inv_scale)) {
      flags[static_cast<size_t>(omp_get_thread_num())] = 1;
    }
  });
  bool found_inf = false;
  for (char f : flags) found_inf |= f != 0;
  return found_inf;
}

bool unscale_and_check(const std::vector<ShardView>& views, float inv_scale) {
  check_gradient_gates(views, GradientUse::kRead, "unscale_and_check");
  bool found_inf = false;
  for (const ShardView& view : views) found_inf |= unscale_and_check(view, inv_scale);
  return found_inf;
}

}  // namespace zs::optim
