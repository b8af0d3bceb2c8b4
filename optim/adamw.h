// AdamW over flat fp32 shards (the sharded optimizer of ARCHITECTURE.md) and over whole
// parameters (the unsharded path of the examples and tests): one update loop serves both.
//
// The per-element math is ops/math/adamw.h (decoupled weight decay, PyTorch's order of
// operations); this file adds the per-step scalars and the OpenMP loop over each view's covered
// segments. State: exp_avg (m) and exp_avg_sq (v), fp32, allocated eagerly by the constructor in
// category optimizer_state (see optim/optimizer.h). Padding elements (covered by no segment)
// are never read or written, in the master, the gradient or the state.
//
// Thread-safety: none; one optimizer per rank (optim/optimizer.h).
#pragma once

#include <cstdint>
#include <vector>

#include "ops/math/adamw.h"
#include "optim/optimizer.h"
#include "optim/shard_view.h"
#include "runtime/tensor.h"

namespace zs::optim {

struct AdamWOptions {
  float lr = 1e-3f;  // the default for callers that use no schedule; step(lr) takes the lr
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled; applied only to segments whose decay flag is set
};

// The scalars of step t (t >= 1) at learning rate lr, computed in double and rounded once.
// Throws InvalidArgument on t < 1 or options out of range.
ops::math::AdamWStep adamw_step_scalars(const AdamWOptions& options, float lr, int64_t t);

// One AdamW step of one view at step t with explicit state buffers (fp32, the master's numel):
// the loop AdamW::step runs for each view, exposed for callers that stream state in sub-groups
// (offload). Checks the view and the state, then updates the covered elements.
void adamw_update(const ShardView& view, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                  const AdamWOptions& options, float lr, int64_t t);

class AdamW : public Optimizer {
 public:
  // Over shards: one view per flat buffer of which this rank owns a slice.
  // `pager`: paged state (runtime/tensor_pager.h; optimizer offload to NVMe), null: resident.
  AdamW(std::vector<ShardView> views, const AdamWOptions& options, TensorPager* pager = nullptr);
  // Over whole parameters: `decay[i]` says whether weight decay applies to params[i] (not to
  // biases and norms). Gradients are read from the parameters at each step; parameters without a
  // gradient are skipped.
  AdamW(std::vector<Tensor> params, std::vector<bool> decay, const AdamWOptions& options);

  const AdamWOptions& options() const { return options_; }

 protected:
  void update(const ShardView& view, const std::vector<Tensor>& state, float lr,
              int64_t t) override;

 private:
  AdamWOptions options_;
};

}  // namespace zs::optim
