// Dynamic loss scaling for fp16 training, with an overflow decision that every rank agrees on.
//
// The loss is multiplied by scale() before backward; the gradients then carry the factor, and
// unscale_and_check multiplies each gradient shard by 1/scale() while looking for inf/NaN (one
// pass). update(local_found_inf, comm) then all-reduces the overflow flag (max over ranks, ONE
// collective), so every rank skips the same steps and keeps the same scale:
//   * overflow on any rank: the step is skipped (update returns true) and the run of good steps
//     restarts; after `hysteresis` consecutive overflows the scale is multiplied by
//     backoff_factor (not below min_scale), and again on every further consecutive overflow.
//   * no overflow: the consecutive-overflow count resets; after growth_interval consecutive
//     good steps the scale is multiplied by growth_factor (not above max_scale).
// A skipped step is logged on rank 0 (WARN when the scale backs off, INFO otherwise) with the
// new scale; other ranks log it at debug level.
//
// Thread-safety: none; one scaler per rank, used from the rank's compute thread. update() is a
// collective on `comm`.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "optim/shard_view.h"
#include "runtime/allocator.h"
#include "runtime/macros.h"
#include "runtime/tensor.h"

namespace zs::optim {

struct LossScalerOptions {
  float initial_scale = 65536.0f;  // 2^16
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  int64_t growth_interval = 2000;  // consecutive good steps before the scale grows
  int hysteresis = 2;              // consecutive overflows before the scale backs off
  float min_scale = 1.0f;
  float max_scale = 16777216.0f;  // 2^24
};

// Everything a checkpoint must save to resume the scaler exactly.
struct LossScalerState {
  float scale = 65536.0f;
  int64_t good_steps = 0;  // consecutive steps without overflow since the last change
  int consecutive_overflows = 0;
  int64_t skipped_steps = 0;  // total, for reports
};

class DynamicLossScaler {
 public:
  // Throws InvalidArgument on options out of range (factors, interval, hysteresis >= 1,
  // 0 < min_scale <= initial_scale <= max_scale).
  explicit DynamicLossScaler(const LossScalerOptions& options = {});
  ZS_DISALLOW_COPY(DynamicLossScaler);

  float scale() const { return state_.scale; }
  float inv_scale() const { return 1.0f / state_.scale; }

  // Collective: agrees with every rank of `comm` on whether any found an inf/NaN gradient
  // (all_reduce max of a flag), updates the scale, and returns true if the step must be
  // skipped — the same answer on every rank.
  bool update(bool local_found_inf, comm::Communicator& comm,
              const comm::CollectiveOptions& options = {});

  LossScalerState state() const { return state_; }
  // Restores a saved state; throws InvalidArgument on a non-positive or non-finite scale.
  void load_state(const LossScalerState& state);
  const LossScalerOptions& options() const { return options_; }

 private:
  LossScalerOptions options_;
  LossScalerState state_;
};

// Multiplies the covered elements of each view's gradient by inv_scale and reports whether any of
// them was, or became, inf or NaN — one vectorized pass (padding untouched). The answer does not
// depend on the thread count. Pass the result to DynamicLossScaler::update.
bool unscale_and_check(const ShardView& view, float inv_scale);
bool unscale_and_check(const std::vector<ShardView>& views, float inv_scale);

}  // namespace zs::optim
