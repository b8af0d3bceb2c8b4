// AdamW: the per-step scalars and the vectorized OpenMP loop around ops::math::adamw_update.
#include "optim/adamw.h"

#include <cmath>

#include "optim/device_loops.h"
#include "optim/loops_impl.h"

namespace zs::optim {
namespace {

void check_options(const AdamWOptions& o) {
  ZS_CHECK(o.beta1 >= 0.0f && o.beta1 < 1.0f && o.beta2 >= 0.0f && o.beta2 < 1.0f, "AdamW: betas (",
           o.beta1, ", ", o.beta2, ") must be in [0, 1)");
  ZS_CHECK(o.eps > 0.0f && std::isfinite(o.eps), "AdamW: eps ", o.eps,
           " must be finite and > 0 (it keeps the update finite where v is 0)");
  ZS_CHECK(o.weight_decay >= 0.0f && std::isfinite(o.weight_decay), "AdamW: weight_decay ",
           o.weight_decay, " must be finite and >= 0");
}

// A plain loop over [begin, end): the compiler vectorizes it (no aliasing, no cross-element
// arithmetic, the decay flag a compile-time constant).
template <bool kDecay>
void adamw_range(float* __restrict param, const float* __restrict grad, float* __restrict m,
                 float* __restrict v, int64_t begin, int64_t end, const ops::math::AdamWStep s) {
  for (int64_t i = begin; i < end; ++i) {
    ops::math::adamw_update(param[i], grad[i], m[i], v[i], s, kDecay);
  }
}

void check_state(const ShardView& view, const Tensor& state, const char* name) {
  ZS_CHECK(state.defined() && state.dtype() == DType::kF32 && state.numel() == view.master.numel(),
           "AdamW view '", view.name, "': state ", name, " ",
           state.defined() ? state.describe() : std::string("(undefined)"), " must be fp32 with ",
           view.master.numel(), " elements, like the master shard");
}

}  // namespace

ops::math::AdamWStep adamw_step_scalars(const AdamWOptions& options, float lr, int64_t t) {
  check_options(options);
  ZS_CHECK(t >= 1, "AdamW: step ", t, " must be >= 1 (steps count from 1)");
  ZS_CHECK(std::isfinite(lr) && lr >= 0.0f, "AdamW: learning rate ", lr,
           " must be finite and >= 0");
  const double beta1 = options.beta1, beta2 = options.beta2;
  const double bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(t));
  const double bias_correction2 = 1.0 - std::pow(beta2, static_cast<double>(t));
  ops::math::AdamWStep s;
  s.beta1 = options.beta1;
  s.beta2 = options.beta2;
  s.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  s.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  s.eps = options.eps;
  s.step_size = static_cast<float>(static_cast<double>(lr) / bias_correction1);
  s.inv_sqrt_bias_correction2 = static_cast<float>(1.0 / std::sqrt(bias_correction2));
  s.decay_factor =
      static_cast<float>(1.0 - static_cast<double>(lr) * static_cast<double>(options.weight_decay));
  return s;
}

void adamw_update(const ShardView& view, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                  const AdamWOptions& options, float lr, int64_t t) {
  check_shard_view(view, "AdamW");
  check_state(view, exp_avg, "exp_avg");
  check_state(view, exp_avg_sq, "exp_avg_sq");
  const ops::math::AdamWStep s = adamw_step_scalars(options, lr, t);
  const std::vector<Segment> segments =
      normalize_segments(view.segments, view.master.numel(), "AdamW view '" + view.name + "'");
  if (segments.empty()) return;
  if (detail::on_device(view)) {
    detail::device_adamw(view, segments, exp_avg, exp_avg_sq, s);
    return;
  }
  // Pointers are taken (and the tensors checked) before the parallel region: nothing inside it
  // may throw.
  float* param = view.master.data<float>();
  const float* grad = view.grad.data<float>();
  float* m = exp_avg.data<float>();
  float* v = exp_avg_sq.data<float>();
  detail::parallel_for_segments(segments, [&](int64_t begin, int64_t end, bool decay) {
    if (decay) {
      adamw_range<true>(param, grad, m, v, begin, end, s);
    } else {
      adamw_range<false>(param, grad, m, v, begin, end, s);
    }
  });
}

AdamW::AdamW(std::vector<ShardView> views, const AdamWOptions& options, TensorPager* pager)
    : Optimizer("AdamW", std::move(views), {"exp_avg", "exp_avg_sq"}, pager), options_(options) {
  check_options(options_);
}

AdamW::AdamW(std::vector<Tensor> params, std::vector<bool> decay, const AdamWOptions& options)
    : Optimizer("AdamW", params, decay, {"exp_avg", "exp_avg_sq"}), options_(options) {
  check_options(options_);
}

void AdamW::update(const ShardView& view, const std::vector<Tensor>& state, float lr, int64_t t) {
  adamw_update(view, state[0], state[1], options_, lr, t);
}

}  // namespace zs::optim
