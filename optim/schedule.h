// Learning-rate schedules: linear warmup, then cosine or linear decay to a minimum, or constant.
//
// Steps count from 0 (the step about to run). Warmup rises linearly: lr(s) = peak·(s + 1)/warmup
// for s < warmup, so the first step already moves (peak/warmup) and step warmup − 1 runs at the
// peak. Decay runs from the peak at step `warmup` to min_lr at step `total`:
//   cosine: min + (peak − min)·(1 + cos(π·p))/2,   linear: peak − (peak − min)·p,
// with p = (s − warmup)/(total − warmup); from step `total` on, lr = min_lr. kConstant stays at
// the peak after warmup (min_lr and total unused). Values are computed in double and rounded
// once. A schedule is an immutable value: thread-safe.
#pragma once

#include <cstdint>

namespace zs::optim {

enum class LrDecay { kConstant, kLinear, kCosine };
const char* lr_decay_name(LrDecay decay);  // "constant", "linear", "cosine"

class LrSchedule {
 public:
  // Throws InvalidArgument unless 0 <= min_lr <= peak_lr (finite), warmup_steps >= 0 and, for
  // the decays, total_steps >= warmup_steps.
  LrSchedule(LrDecay decay, float peak_lr, float min_lr, int64_t warmup_steps, int64_t total_steps);

  static LrSchedule constant(float lr, int64_t warmup_steps = 0);
  static LrSchedule warmup_cosine(float peak_lr, float min_lr, int64_t warmup_steps,
                                  int64_t total_steps);
  static LrSchedule warmup_linear(float peak_lr, float min_lr, int64_t warmup_steps,
                                  int64_t total_steps);

  // The learning rate of step `step` (>= 0; throws InvalidArgument otherwise).
  float lr(int64_t step) const;

  LrDecay decay() const { return decay_; }
  float peak_lr() const { return peak_lr_; }
  float min_lr() const { return min_lr_; }
  int64_t warmup_steps() const { return warmup_steps_; }
  int64_t total_steps() const { return total_steps_; }

 private:
  LrDecay decay_;
  float peak_lr_;
  float min_lr_;
  int64_t warmup_steps_;
  int64_t total_steps_;
};

// LrSchedule::warmup_cosine(peak_lr, min_lr, warmup, total).lr(step), kept for existing callers.
float warmup_cosine_lr(int64_t step, int64_t warmup, int64_t total, float peak_lr, float min_lr);

}  // namespace zs::optim
