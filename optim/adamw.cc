// AdamW over whole parameters: a thin loop around math::adamw_update.
#include "optim/adamw.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace zs::optim {

AdamW::AdamW(std::vector<Tensor> params, std::vector<bool> decay, AdamWOptions options)
    : params_(std::move(params)), decay_(std::move(decay)), options_(options) {
  ZS_CHECK(decay_.size() == params_.size(), "AdamW: ", decay_.size(), " decay flags for ",
           params_.size(), " parameters");
  for (const Tensor& p : params_) {
    ZS_CHECK(p.defined() && p.dtype() == DType::kF32, "AdamW: parameter ", p.describe(),
             " must be fp32 (mixed precision keeps fp32 master weights in the sharded optimizer)");
  }
}

void AdamW::step(float lr) {
  if (m_.empty()) {
    for (const Tensor& p : params_) {
      m_.push_back(Tensor::zeros(p.shape(), DType::kF32, p.allocator(),
                                 MemoryCategory::kOptimizerState, "adam.m " + p.name()));
      v_.push_back(Tensor::zeros(p.shape(), DType::kF32, p.allocator(),
                                 MemoryCategory::kOptimizerState, "adam.v " + p.name()));
    }
  }
  ++steps_;
  math::AdamWStep s;
  s.lr = lr;
  s.beta1 = options_.beta1;
  s.beta2 = options_.beta2;
  s.eps = options_.eps;
  s.weight_decay = options_.weight_decay;
  s.bias_correction1 = 1.0f - std::pow(options_.beta1, static_cast<float>(steps_));
  s.bias_correction2 = 1.0f - std::pow(options_.beta2, static_cast<float>(steps_));
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor grad = params_[i].grad();
    if (!grad.defined()) continue;
    float* w = params_[i].data<float>();
    const float* g = grad.data<float>();
    float* m = m_[i].data<float>();
    float* v = v_[i].data<float>();
    const bool decay = decay_[i];
    const int64_t n = params_[i].numel();
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < n; ++j) math::adamw_update(w[j], g[j], m[j], v[j], s, decay);
  }
}

void AdamW::zero_grad() {
  for (const Tensor& p : params_) {
    Tensor grad = p.grad();
    if (grad.defined()) std::memset(grad.raw_data(), 0, grad.nbytes());
  }
}

float warmup_cosine_lr(int64_t step, int64_t warmup, int64_t total, float peak_lr, float min_lr) {
  if (warmup > 0 && step < warmup) {
    return peak_lr * static_cast<float>(step + 1) / static_cast<float>(warmup);
  }
  if (step >= total) return min_lr;
  const double progress = static_cast<double>(step - warmup) /
                          static_cast<double>(std::max<int64_t>(total - warmup, 1));
  const double cosine = 0.5 * (1.0 + std::cos(3.14159265358979323846 * progress));
  return min_lr + static_cast<float>(cosine) * (peak_lr - min_lr);
}

}  // namespace zs::optim
