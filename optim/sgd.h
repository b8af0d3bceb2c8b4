// SGD over flat fp32 shards and whole parameters: plain, heavy-ball momentum, or Nesterov
// momentum, with dampening 0 and coupled (L2) weight decay on the segments whose decay flag is
// set — PyTorch's torch.optim.SGD semantics.
//
// The per-element math is ops/math/sgd.h. State: momentum_buffer (fp32, zero-filled, allocated
// eagerly by the constructor in category optimizer_state) when momentum > 0, none otherwise.
// Padding elements are never read or written.
//
// Thread-safety: none; one optimizer per rank (optim/optimizer.h).
#pragma once

#include <cstdint>
#include <vector>

#include "ops/math/sgd.h"
#include "optim/optimizer.h"
#include "optim/shard_view.h"
#include "runtime/tensor.h"

namespace zs::optim {

struct SgdOptions {
  float lr = 1e-2f;  // the default for callers that use no schedule; step(lr) takes the lr
  float momentum = 0.0f;
  bool nesterov = false;  // needs momentum > 0
  float weight_decay = 0.0f;
};

// One SGD step of one view with an explicit momentum buffer (fp32, the master's numel; ignored
// and may be undefined when options.momentum == 0): the loop Sgd::step runs for each view.
void sgd_update(const ShardView& view, const Tensor& momentum_buffer, const SgdOptions& options,
                float lr);

class Sgd : public Optimizer {
 public:
  // `pager`: paged state (runtime/tensor_pager.h; optimizer offload to NVMe), null: resident.
  Sgd(std::vector<ShardView> views, const SgdOptions& options, TensorPager* pager = nullptr);
  // Whole parameters; `decay[i]` says whether weight decay applies to params[i].
  Sgd(std::vector<Tensor> params, std::vector<bool> decay, const SgdOptions& options);

  const SgdOptions& options() const { return options_; }

 protected:
  void update(const ShardView& view, const std::vector<Tensor>& state, float lr,
              int64_t t) override;

 private:
  SgdOptions options_;
};

}  // namespace zs::optim
