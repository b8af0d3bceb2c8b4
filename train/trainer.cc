// Trainer::step (train/trainer.h).
#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "ops/elementwise.h"
#include "runtime/autograd.h"
#include "runtime/error.h"
#include "train/shard_views.h"

namespace zs::train {

Trainer::Trainer(TrainerRefs refs, StepOptions options) : r_(refs), options_(options) {}

StepRecord Trainer::step(int64_t step) {
  const auto start = std::chrono::steady_clock::now();
  Trace* const trace = options_.trace;
  const int64_t micro_batches = options_.micro_batches;
  StepRecord rec;
  rec.step = step;
  rec.lr = r_.schedule.lr(step);
  rec.loss_scale = r_.scaler ? r_.scaler->scale() : options_.static_scale;
  double loss_sum = 0;
  // On a GPU each micro-batch's loss is copied into a slot of `losses` on the device and the
  // slots are read back once, after the micro-batches (the host does not wait for a forward).
  Tensor losses;
  if (r_.device) {
    losses = Tensor::empty({micro_batches}, DType::kF32, r_.compute, MemoryCategory::kActivations,
                           "losses of the step");
  }
  // Optimizer state on NVMe: its first units are read while forward and backward run.
  r_.optimizer.prefetch_state();
  for (int64_t micro = 0; micro < micro_batches; ++micro) {
    // Every micro-batch but the last only accumulates (the model reduces them once per step
    // under --grad-sync per-step; else it reduces each as it comes).
    r_.model.defer_sync(micro + 1 < micro_batches);
    std::optional<TraceScope> data_wait(std::in_place, trace, TraceLane::kData, "next batch");
    data::BatchLease batch = r_.loader.next();
    data_wait.reset();
    MemoryCategoryScope activations(MemoryCategory::kActivations);
    Tensor loss;
    std::optional<TraceScope> forward(std::in_place, trace, TraceLane::kCompute, "forward");
    if (r_.device) {
      loss = r_.task.loss(upload_batch(*batch, micro));
      NoGradScope no_grad;
      ops::copy_(Tensor::from_storage(losses.storage(), static_cast<size_t>(micro) * sizeof(float),
                                      loss.shape(), DType::kF32, "loss of micro-batch"),
                 loss);
    } else {
      loss = r_.task.loss(*batch);
      loss_sum += loss.item();
    }
    forward.reset();
    {
      // Mean over micro-batches: each backward is seeded with scale / micro-batches.
      TraceScope traced(trace, TraceLane::kCompute, "backward");
      backward(loss, rec.loss_scale / static_cast<float>(micro_batches));
    }
    r_.model.finish_backward();
  }
  if (r_.device) {
    for (float value : losses.to_vector()) loss_sum += value;  // the same sum, in order
  }
  std::optional<TraceScope> optimizer(std::in_place, trace, TraceLane::kOptimizer, "optimizer");
  if (options_.precision == DType::kF16) {
    const bool found_inf = optim::unscale_and_check(r_.views, 1.0f / rec.loss_scale);
    if (r_.scaler) {
      rec.skipped = r_.scaler->update(found_inf, r_.comm);
    } else {
      ZS_CHECK_AS(NumericalError, !found_inf, "step ", step,
                  ": a gradient overflowed fp16 under the static loss scale ", rec.loss_scale,
                  "; lower the scale or use the dynamic one (fp16.loss_scale = 0)");
    }
  }
  if (!rec.skipped) {
    rec.grad_norm = options_.clip > 0 ? clip_gradients(r_.model, r_.views, options_.clip)
                                      : gradient_norm(r_.model, r_.views);
    ZS_CHECK_AS(NumericalError, std::isfinite(rec.grad_norm), "step ", step,
                ": the gradient norm is ", rec.grad_norm, " (loss ", loss_sum / micro_batches,
                "); the run diverged — lower --lr (now ", rec.lr,
                "), keep --clip on, or train in bf16/fp32; nothing saved was touched");
    r_.optimizer.step(rec.lr);
  } else {
    rec.grad_norm = std::numeric_limits<float>::quiet_NaN();
  }
  optimizer.reset();
  if (rec.skipped) {
    r_.model.after_skipped_step();
  } else {
    r_.model.after_step();
  }
  // The logged loss: the mean over ranks (one small all-reduce), on the communicator's buffer
  // device; fill()/item() store and read the same float on the CPU as a plain store and load.
  Tensor mean = Tensor::empty({1}, DType::kF32, r_.compute, MemoryCategory::kCommBuffers, "loss");
  mean.fill(static_cast<float>(loss_sum / static_cast<double>(micro_batches)));
  r_.comm.all_reduce(mean, comm::ReduceOp::kAvg, {{}, "logged loss"})->wait();
  rec.loss = mean.item();
  ZS_CHECK_AS(NumericalError, std::isfinite(rec.loss) || options_.precision == DType::kF16, "step ",
              step, ": the loss is ", rec.loss, "; lower --lr (now ", rec.lr,
              ") or check the data");
  const auto end = std::chrono::steady_clock::now();
  if (trace) trace->record(TraceLane::kStep, "step " + std::to_string(step), start, end);
  rec.ms = std::chrono::duration<double>(end - start).count() * 1e3;
  return rec;
}

// The batch on the rank's GPU: each tensor through its pinned staging slot (three per
// micro-batch), uploaded on the copy stream; the compute stream waits for it on the device.
data::Batch Trainer::upload_batch(const data::Batch& host, int64_t micro) {
  data::Batch placed;
  placed.position = host.position;
  const size_t slot = 3 * static_cast<size_t>(micro);
  if (host.ids.defined()) placed.ids = r_.device->upload(host.ids, slot, "ids");
  if (host.targets.defined()) placed.targets = r_.device->upload(host.targets, slot + 1, "targets");
  if (host.lengths.defined()) placed.lengths = r_.device->upload(host.lengths, slot + 2, "lengths");
  return placed;
}

}  // namespace zs::train
