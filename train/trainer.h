// Trainer: one optimizer step of one rank, and nothing else.
//
// step(s): grad_accum micro-batches of batch → forward → backward (seeded with loss scale /
// micro-batches) → finish_backward; the fp16 unscale and overflow check agreed by all ranks (an
// overflowing step is skipped); global grad-norm clipping; the optimizer step at the schedule's
// learning rate; after_step; the logged loss averaged over ranks. A non-finite gradient norm, or
// outside fp16 a non-finite loss, throws NumericalError naming the step.
//
// The Trainer owns nothing: it refers to the rank's sharded model, optimizer, scaler, schedule,
// batch loader and task, which the engine owns and which outlive it. One rank's thread calls it;
// every rank calls step() for the same steps in the same order (it issues collectives).
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "data/loader.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "optim/shard_view.h"
#include "runtime/trace.h"
#include "sharding/sharded_model.h"
#include "train/device.h"
#include "train/records.h"
#include "train/tasks.h"

namespace zs::train {

struct TrainerRefs {
  sharding::ShardedModel& model;
  std::vector<optim::ShardView>& views;  // the optimizer's views of the local shards
  optim::Optimizer& optimizer;
  optim::DynamicLossScaler* scaler;  // fp16 dynamic loss scaling; null otherwise
  const optim::LrSchedule& schedule;
  data::BatchLoader& loader;
  Task& task;
  comm::Communicator& comm;  // the world: the logged loss is averaged over it
  Allocator& compute;        // where the loss lives
  RankDevice* device;        // --device cuda: batches are uploaded; null on the CPU
};

struct StepOptions {
  int64_t micro_batches = 1;
  DType precision = DType::kF32;
  float clip = 0;          // global grad-norm clip; 0: off (the norm is still computed)
  float static_scale = 1;  // the loss scale without a dynamic scaler
  // --trace: the rank's recorder for the step, data-wait, forward, backward and optimizer
  // spans (runtime/trace.h); null: none. It outlives the Trainer.
  Trace* trace = nullptr;
};

class Trainer {
 public:
  Trainer(TrainerRefs refs, StepOptions options);
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Runs optimizer step `step` (0-based) and returns its record (ms and loss filled; the
  // throughput is the reporter's).
  StepRecord step(int64_t step);

 private:
  data::Batch upload_batch(const data::Batch& host, int64_t micro);

  TrainerRefs r_;
  const StepOptions options_;
};

}  // namespace zs::train
