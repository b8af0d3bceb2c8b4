// Learning-rate schedules (optim/schedule.h).
#include "optim/schedule.h"

#include <algorithm>
#include <cmath>

#include "runtime/error.h"

namespace zs::optim {

const char* lr_decay_name(LrDecay decay) {
  switch (decay) {
    case LrDecay::kConstant:
      return "constant";
    case LrDecay::kLinear:
      return "linear";
    case LrDecay::kCosine:
      return "cosine";
  }
  return "?";
}

LrSchedule::LrSchedule(LrDecay decay, float peak_lr, float min_lr, int64_t warmup_steps,
                       int64_t total_steps)
    : decay_(decay),
      peak_lr_(peak_lr),
      min_lr_(decay == LrDecay::kConstant ? peak_lr : min_lr),
      warmup_steps_(warmup_steps),
      total_steps_(total_steps) {
  ZS_CHECK(std::isfinite(peak_lr) && peak_lr >= 0.0f, "LrSchedule: peak_lr ", peak_lr,
           " must be finite and >= 0");
  ZS_CHECK(warmup_steps >= 0, "LrSchedule: warmup_steps ", warmup_steps, " must be >= 0");
  if (decay != LrDecay::kConstant) {
    ZS_CHECK(std::isfinite(min_lr) && min_lr >= 0.0f && min_lr <= peak_lr, "LrSchedule (",
             lr_decay_name(decay), "): min_lr ", min_lr, " must be in [0, peak_lr = ", peak_lr,
             "]");
    ZS_CHECK(total_steps >= warmup_steps, "LrSchedule (", lr_decay_name(decay), "): total_steps ",
             total_steps, " must be >= warmup_steps ", warmup_steps, "; decay ends at total_steps");
  }
}

LrSchedule LrSchedule::constant(float lr, int64_t warmup_steps) {
  return LrSchedule(LrDecay::kConstant, lr, lr, warmup_steps, warmup_steps);
}

LrSchedule LrSchedule::warmup_cosine(float peak_lr, float min_lr, int64_t warmup_steps,
                                     int64_t total_steps) {
  return LrSchedule(LrDecay::kCosine, peak_lr, min_lr, warmup_steps, total_steps);
}

LrSchedule LrSchedule::warmup_linear(float peak_lr, float min_lr, int64_t warmup_steps,
                                     int64_t total_steps) {
  return LrSchedule(LrDecay::kLinear, peak_lr, min_lr, warmup_steps, total_steps);
}

float LrSchedule::lr(int64_t step) const {
  ZS_CHECK(step >= 0, "LrSchedule: step ", step, " must be >= 0 (steps count from 0)");
  const double peak = peak_lr_, min = min_lr_;
  if (step < warmup_steps_) {
    return static_cast<float>(peak * static_cast<double>(step + 1) /
                              static_cast<double>(warmup_steps_));
  }
  if (decay_ == LrDecay::kConstant) return peak_lr_;
  if (step >= total_steps_) return min_lr_;
  const double progress =
      static_cast<double>(step - warmup_steps_) / static_cast<double>(total_steps_ - warmup_steps_);
  if (decay_ == LrDecay::kLinear) return static_cast<float>(peak - (peak - min) * progress);
  const double cosine = 0.5 * (1.0 + std::cos(3.14159265358979323846 * progress));
  return static_cast<float>(min + (peak - min) * cosine);
}

float warmup_cosine_lr(int64_t step, int64_t warmup, int64_t total, float peak_lr, float min_lr) {
  // Tolerates total < warmup as it always did (a short run that never leaves warmup).
  return LrSchedule::warmup_cosine(peak_lr, min_lr, warmup, std::max(total, warmup)).lr(step);
}

}  // namespace zs::optim
