// The state a checkpoint of a run holds, named in one place, and the checkpointer the engine
// plugs into the loop's save/restore seam (train/loop.h, Checkpointer). Without
// --checkpoint-dir and --resume, make_checkpointer returns one that restores nothing and never
// saves; otherwise a ShardedCheckpointer (train/checkpoints.cc): every rank writes its own file
// of masters and optimizer state in parallel (checkpoint/shard_files.h; at stage 0, where every
// rank holds the whole replica, each writes its slice, so a checkpoint is one replica's size
// whatever the world size), rank 0 one meta.json
// (model, world size, stage, hybrid group, alignment, unit layout, optimizer, loss scaler,
// completed steps and data position, seed, the run's flags, a checksum per file), all published
// atomically (checkpoint/checkpoint_dir.h). A restore at the same world size, stage, hybrid group
// and alignment reads each rank's own file (at stage 0 the byte ranges of every rank's file, each
// verified) and is exact: the resumed run gives the same bits as the uninterrupted one. At another
// world size, stage or hybrid group the files are resharded on load (checkpoint/reshard.h: each
// rank reads only the byte ranges of its new shards) and the run continues like an uninterrupted
// run of the new configuration, within fp32 tolerance; the global batch (micro-batch × ranks, and
// micro-batches per step) must be the one that saved, so that the data order continues exactly.
//
// Saves are asynchronous by default (--checkpoint-async): save() snapshots each rank's file into
// a bounded host buffer (--checkpoint-buffer; a larger file streams through it) and a writer
// thread of the checkpointer writes it while training continues; publish(), after each step,
// makes it the checkpoint once every rank's write finished (all ranks agree on it: the
// collectives stay on the rank's thread), or stops the run with a failed write's error. The next
// save and the end of the run wait for the writes. The log line of a save gives how long the
// training loop stalled and how long the write took.
//
// TrainState points at the rank's objects; it owns nothing and is valid while the engine's rank
// run is (the checkpointer must not outlive it). One rank's thread uses it; save(), publish() and
// restore() are collectives over the world (every rank calls them at the same steps).
#pragma once

#include <cstdint>
#include <memory>

#include "checkpoint/checkpoint_dir.h"
#include "comm/communicator.h"
#include "data/sampler.h"
#include "models/gpt.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "sharding/sharded_model.h"
#include "train/config.h"
#include "train/loop.h"
#include "train/records.h"

namespace zs::train {

struct TrainState {
  // The fp32 master shards, in the unit plan they follow (world size, stage, hybrid group,
  // alignment). The gathered compute copies are recomputed from them.
  sharding::ShardedModel* model = nullptr;
  // The optimizer state over the shards: AdamW m, v and its step count; SGD momentum.
  optim::Optimizer* optimizer = nullptr;
  // fp16 with dynamic scaling: the scale and its growth/hysteresis counters; null otherwise.
  optim::DynamicLossScaler* scaler = nullptr;
  // The schedule is a pure function of the step: its position is the completed steps.
  const optim::LrSchedule* schedule = nullptr;
  // The data position: the global batch sequence is a pure function of the seed and the step;
  // after k steps it is at the BatchPosition k × micro_batches_per_step micro-batches in.
  const data::BatchSampler* sampler = nullptr;
  int64_t micro_batches_per_step = 1;
  // RNG: every draw (initialization, data order, sampling) is counter-based, keyed by (seed,
  // stream, counter) with counters derived from parameter indices and steps, so the seed and the
  // completed steps restore every stream.
  uint64_t seed = 0;
  // The run's configuration (its flags, for the metadata).
  const TrainConfig* config = nullptr;
  // The GPT's resolved shape (null for other models), for the metadata.
  const models::GptConfig* gpt = nullptr;
  // The world (saves agree over it) and where its small agreement tensors live (the
  // communicator's buffer device).
  comm::Communicator* comm = nullptr;
  Allocator* compute = nullptr;
  // Where rank 0 records each published save (TrainResult::saves); null: not recorded.
  TrainResult* result = nullptr;
};

// Restores nothing, never saves.
class NoCheckpoints final : public Checkpointer {
 public:
  int64_t restore() override { return 0; }
  bool due(int64_t, bool) const override { return false; }
  void save(int64_t) override {}
  void publish(bool) override {}
};

// The format version meta.json carries; a checkpoint of a newer version is refused.
constexpr int kCheckpointFormatVersion = checkpoint::kCheckpointFormatVersion;

// The checkpointer for `config` over `state`: NoCheckpoints without --checkpoint-dir and
// --resume, else one that saves and restores sharded checkpoints.
std::unique_ptr<Checkpointer> make_checkpointer(const TrainConfig& config, const TrainState& state);

// The data position after `completed_steps` steps of `micro_batches_per_step` micro-batches.
data::BatchPosition data_position(const data::BatchSampler& sampler, int64_t completed_steps,
                                  int64_t micro_batches_per_step);

}  // namespace zs::train
