// SGD: the vectorized OpenMP loops around ops::math::sgd_update / sgd_momentum_update.
#include "optim/sgd.h"

#include <cmath>

#include "optim/device_loops.h"
#include "optim/loops_impl.h"

namespace zs::optim {
namespace {

const SgdOptions& checked(const SgdOptions& o) {
  ZS_CHECK(o.momentum >= 0.0f && o.momentum < 1.0f, "SGD: momentum ", o.momentum,
           " must be in [0, 1)");
  ZS_CHECK(!o.nesterov || o.momentum > 0.0f, "SGD: nesterov needs momentum > 0, found momentum ",
           o.momentum, "; set a momentum or turn nesterov off");
  ZS_CHECK(o.weight_decay >= 0.0f && std::isfinite(o.weight_decay), "SGD: weight_decay ",
           o.weight_decay, " must be finite and >= 0");
  return o;
}

std::vector<std::string> sgd_state_names(const SgdOptions& o) {
  if (o.momentum > 0.0f) return {"momentum_buffer"};
  return {};
}

// Plain loops over [begin, end) with the flags as compile-time constants, so they vectorize.
template <bool kDecay>
void sgd_range(float* __restrict param, const float* __restrict grad, int64_t begin, int64_t end,
               const ops::math::SgdStep s) {
  for (int64_t i = begin; i < end; ++i) ops::math::sgd_update(param[i], grad[i], s, kDecay);
}

template <bool kDecay, bool kNesterov>
void sgd_momentum_range(float* __restrict param, const float* __restrict grad,
                        float* __restrict buffer, int64_t begin, int64_t end,
                        const ops::math::SgdStep s) {
  for (int64_t i = begin; i < end; ++i) {
    ops::math::sgd_momentum_update(param[i], grad[i], buffer[i], s, kDecay, kNesterov);
  }
}

}  // namespace

void sgd_update(const ShardView& view, const Tensor& momentum_buffer, const SgdOptions& options,
                float lr) {
  checked(options);
  check_shard_view(view, "SGD");
  ZS_CHECK(std::isfinite(lr) && lr >= 0.0f, "SGD: learning rate ", lr, " must be finite and >= 0");
  const bool momentum = options.momentum > 0.0f;
  if (momentum) {
    ZS_CHECK(momentum_buffer.defined() && momentum_buffer.dtype() == DType::kF32 &&
                 momentum_buffer.numel() == view.master.numel(),
             "SGD view '", view.name, "': the momentum buffer ",
             momentum_buffer.defined() ? momentum_buffer.describe() : std::string("(undefined)"),
             " must be fp32 with ", view.master.numel(), " elements, like the master shard");
  }
  const std::vector<Segment> segments =
      normalize_segments(view.segments, view.master.numel(), "SGD view '" + view.name + "'");
  if (segments.empty()) return;
  const ops::math::SgdStep s{lr, options.momentum, options.weight_decay};
  if (detail::on_device(view)) {
    detail::device_sgd(view, segments, momentum ? momentum_buffer : Tensor(), s, options.nesterov);
    return;
  }
  float* param = view.master.data<float>();
  const float* grad = view.grad.data<float>();
  if (!momentum) {
    detail::parallel_for_segments(segments, [&](int64_t begin, int64_t end, bool decay) {
      if (decay) {
        sgd_range<true>(param, grad, begin, end, s);
      } else {
        sgd_range<false>(param, grad, begin, end, s);
      }
    });
    return;
  }
  float* buffer = momentum_buffer.data<float>();
  const bool nesterov = options.nesterov;
  detail::parallel_for_segments(segments, [&](int64_t begin, int64_t end, bool decay) {
    if (decay && nesterov) {
      sgd_momentum_range<true, true>(param, grad, buffer, begin, end, s);
    } else if (decay) {
      sgd_momentum_range<true, false>(param, grad, buffer, begin, end, s);
    } else if (nesterov) {
      sgd_momentum_range<false, true>(param, grad, buffer, begin, end, s);
    } else {
      sgd_momentum_range<false, false>(param, grad, buffer, begin, end, s);
    }
  });
}

Sgd::Sgd(std::vector<ShardView> views, const SgdOptions& options, TensorPager* pager)
    : Optimizer("SGD", std::move(views), sgd_state_names(checked(options)), pager),
      options_(options) {}

Sgd::Sgd(std::vector<Tensor> params, std::vector<bool> decay, const SgdOptions& options)
    : Optimizer("SGD", params, decay, sgd_state_names(checked(options))), options_(options) {}

void Sgd::update(const ShardView& view, const std::vector<Tensor>& state, float lr, int64_t /*t*/) {
  sgd_update(view, state.empty() ? Tensor() : state[0], options_, lr);
}

}  // namespace zs::optim
