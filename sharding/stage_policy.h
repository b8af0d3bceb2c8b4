// StagePolicy: what a ZeRO stage (and hybrid sharding) keeps, frees and communicates, decided
// once from (stage, hybrid) and asked by ShardedModel and the memory model (zs-mem) instead of
// each re-deriving it from the stage number. The traffic formula the reports print
// (train/report.h) is written from the ZeRO paper's table on purpose, not from this policy, so
// that it checks the implementation rather than restating it.
//
//   stage  full params                 full grads              masters+state  grads reduce
//   0      persist                     persist                 full           all-reduce, per unit
//   1      persist                     persist                 shard          reduce-scatter, at
//                                                                             the end of backward
//   2      persist                     per unit, freed once    shard          reduce-scatter, per
//                                      reduced                                unit when ready
//   3      gathered just in time,      per unit, freed once    shard          reduce-scatter, per
//          released after use          reduced                                unit when ready
//   After the step: stage 0 casts its full master into the parameters; stages 1/2 all-gather
//   the updated slices into every unit; stage 3 all-gathers only into the units kept gathered.
//   Hybrid: stage 3 inside a group; the reduced gradient shard is also all-reduced across groups.
//
// A shard group of one rank (world size 1, or hybrid groups of 1) shards nothing: a rank's shard
// would be the whole buffer, its all-gathers copies of it and its reduce-scatters copies back.
// Every stage, hybrid included, then runs as stage 0 over the world (DDP: full buffers that
// persist, the fp32 master computed with in place in fp32, one all-reduce per unit — over one
// rank, none at all), which gives the same bits (invariant 3) at stage 0's time and memory.
//
// "Per unit" reductions are launched from the unit's "begin" boundary in backward (stage 0's
// all-reduce is DDP's bucket, one per unit) and overlap the rest of backward; stage 1 launches
// them all in finish_backward. Stage 0's all-reduce can be swapped for the naive DdpSync variants
// (sharded_model.h); the policy only says that stage 0 all-reduces.
//
// A value type; pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zs::sharding {

// When stages 0/1 reduce the gradients of a step of several micro-batches (stages 2/3 always
// reduce each micro-batch: they keep no full gradient between micro-batches, for memory).
//   kPerMicroBatch  every micro-batch's gradient is reduced and the reduced values are summed in
//                   fp32 (ShardedModel): every stage reduces and sums in the same order, so the
//                   four stages are bitwise identical with accumulation too. Traffic grows with
//                   the micro-batches per step.
//   kPerStep        DDP's no_sync, DeepSpeed's stages 0/1: the micro-batches' full gradients are
//                   summed locally in fp32 and the sum is reduced once, by the step's last
//                   micro-batch. Traffic per step is that of one micro-batch; stages 0 and 1
//                   stay bitwise identical with each other (the same local sum, then the same
//                   element-wise reduction), but not with kPerMicroBatch or stages 2/3 (the sum
//                   and the average over ranks are taken in the other order). Memory: stage 1
//                   keeps a full fp32 sum (4Ψ) with accumulation; stage 0 nothing more.
enum class GradSync { kPerMicroBatch, kPerStep };
const char* grad_sync_name(GradSync sync);  // "per_micro_batch", "per_step"

// Stage 3 parameter offload (ZeRO-Infinity's offload_param; "Parameter offload" in
// sharding/sharded_model.h): where the rank's shard of each unit released after use lives
// between its all-gathers — the device, the host tier, or the NVMe tier.
enum class ParamOffload { kNone, kHost, kNvme };
const char* param_offload_name(ParamOffload offload);  // "none", "host", "nvme"

// The collective that reduces a unit's gradient within the shard group.
enum class GradientCollective { kAllReduce, kReduceScatter };
// When a unit's gradient reduction is launched.
enum class ReduceTiming {
  kPerUnit,        // from the unit's "begin" boundary in backward, as soon as it is complete
  kEndOfBackward,  // every unit in finish_backward
};

struct StagePolicy {
  // The stage that runs: the one asked for, or 0 for a shard group of one rank (see above).
  int stage = 3;
  // The stage asked for (what the run's configuration, reports and checkpoints name).
  int requested_stage = 3;
  // Hybrid sharding runs: asked for, over groups of more than one rank.
  bool hybrid = false;

  // What persists between steps.
  // Full (gathered) parameters stay allocated for the run (stages 0–2); otherwise they are
  // gathered just in time for a unit's forward and backward and released after it (stage 3),
  // except the units that stays_gathered() keeps, and prefetched along the recorded order.
  bool full_params_persist = false;
  // The full flat gradient buffer lives for the run (stages 0/1); otherwise each unit's exists
  // from its backward until its reduction has read it (stages 2/3), and at most
  // max_reductions_in_flight of those wait for their reduction (the rate limit).
  bool full_grads_persist = false;
  // fp32 masters, fp32 gradients and optimizer state are the rank's slice (stages 1–3), not
  // the whole padded buffer (stage 0). A sharded stage keeps a compute-dtype copy of the slice,
  // the source of its all-gathers.
  bool masters_sharded = true;

  // Gradient reduction.
  GradientCollective reduce_collective = GradientCollective::kReduceScatter;
  ReduceTiming reduce_timing = ReduceTiming::kPerUnit;
  // Hybrid: after the in-group reduction, the gradient shard is all-reduced (averaged) across
  // the groups that hold replicas of it.
  bool all_reduce_across_groups = false;

  // After the optimizer step: the updated slices are all-gathered into every full buffer that
  // is allocated (stages 1/2: all units; stage 3: the kept units). Stage 0 casts its updated
  // full master into the full parameters instead.
  bool gather_after_step = true;

  // Stage 0–3 without or with hybrid sharding, over shard groups of `shard_ranks` ranks (the
  // world, or hybrid's group size): with one rank, stage 0's row over the world. Throws
  // InvalidArgument for a stage outside 0–3, hybrid with a stage other than 3, or shard_ranks
  // below 1.
  static StagePolicy make(int stage, bool hybrid, int shard_ranks);

  // Whether a unit's full parameters of `full_bytes` are never released: every unit whose full
  // parameters persist, and under stage 3 those smaller than keep_gathered_below_bytes.
  bool stays_gathered(size_t full_bytes, size_t keep_gathered_below_bytes) const {
    return full_params_persist || full_bytes < keep_gathered_below_bytes;
  }
  // The master elements a rank owns in a unit's flat buffer of `padded` elements split in
  // `shard` per rank: [begin, begin + master_numel).
  int64_t master_numel(int64_t padded, int64_t shard) const {
    return masters_sharded ? shard : padded;
  }
  int64_t master_begin(int rank, int64_t shard) const { return masters_sharded ? rank * shard : 0; }
};

}  // namespace zs::sharding
