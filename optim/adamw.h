// AdamW over a list of whole (unsharded) fp32 parameters: the foundation's optimizer for the
// demo and tests. The sharded optimizer that runs once per step over a rank's contiguous flat
// shard (optim/ in ARCHITECTURE.md) uses the same per-element math (ops/math/adamw.h).
//
// State (m, v) is fp32, allocated on the parameters' allocator in category optimizer_state on
// the first step. Not thread-safe; one optimizer per rank.
#pragma once

#include <vector>

#include "ops/math/adamw.h"
#include "runtime/tensor.h"

namespace zs::optim {

struct AdamWOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
};

class AdamW {
 public:
  // `decay[i]` says whether weight decay applies to params[i] (not to biases and norms).
  AdamW(std::vector<Tensor> params, std::vector<bool> decay, AdamWOptions options);

  // One update from the parameters' gradients at learning rate `lr` (the schedule's value).
  // Parameters without a gradient are skipped.
  void step(float lr);
  // Sets every parameter's gradient to zero (allocated gradients only).
  void zero_grad();
  int64_t steps() const { return steps_; }
  const AdamWOptions& options() const { return options_; }

 private:
  std::vector<Tensor> params_;
  std::vector<bool> decay_;
  AdamWOptions options_;
  std::vector<Tensor> m_, v_;
  int64_t steps_ = 0;
};

// Linear warmup to `peak_lr` over `warmup` steps, then cosine decay to `min_lr` at `total`.
float warmup_cosine_lr(int64_t step, int64_t warmup, int64_t total, float peak_lr, float min_lr);

}  // namespace zs::optim
