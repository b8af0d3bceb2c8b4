// The per-rank memory model of ShardedModel + an optimizer: how many bytes of each memory
// category one rank holds for a model's units under a stage, world size, hybrid group, dtypes,
// optimizer and stage-3 schedule — what zs-mem prints and what a budget check can use before
// anything is allocated. Also the ZeRO paper's closed forms for comparison, the largest preset
// that fits a per-rank budget, and the parameter-count parser ("1.5B").
//
// The estimate follows the buffers sharding/sharded_model.cc and optim/ allocate, per unit of P
// padded elements and S = P / N elements per rank (N = the ranks sharing the shards: the world,
// or the hybrid group), p/r = bytes of param_dtype/reduce_dtype:
//
//   parameters       stage 0: P·p. Stages 1/2: P·p (the compute copy of the shard is the full
//                    buffer's own slot: in-place gathers). Stage 3: 4S in fp32 (the master
//                    shard is the parameter the all-gathers read), else S·p; a unit kept
//                    gathered P·p instead (its slot is the shard); plus the gathered units
//                    while they are live.
//   master_weights   4P at stage 0, else 4S — unless p = 4, where the parameters hold the
//                    master (stage 0's full buffer, stages 1/2's slot, stage 3's shard): 0.
//   gradients        stage 0: P·p, plus an fp32 accumulator 4P unless fp32 reduces in place;
//                    with accumulation in fp32, a 4P micro-batch buffer that lives until the
//                    next step's backward. Stage 1: P·p + 4S, and with GradSync::kPerStep and
//                    accumulation 4P more (the fp32 sum; in fp32 the later micro-batches'
//                    temporary flat gradient). Stages 2/3: 4S, plus P·p per unit
//                    from its backward until its reduce-scatter has read it (at most
//                    max_reductions_in_flight such units besides those still in backward).
//   optimizer_state  AdamW 8, SGD with momentum 4, plain SGD 0 bytes per master element (P in
//                    stage 0, S otherwise).
//   comm_buffers     during backward only: a reduce_dtype copy of a unit's gradient when r != p
//                    (P·r), and the reduced shard (S·r, kept until finish_backward) when it cannot
//                    land in the fp32 gradient directly (r != 4, or a later micro-batch of an
//                    accumulating step). With kPerStep and accumulation the one reduction reads
//                    the fp32 sum: a copy P·r when r != 4, a staged shard only when r != 4.
//
// `steady` is what a rank holds between steps (after after_step): it equals the MemoryTracker's
// current bytes per category, exactly. `peak` is each category's peak during a step: exact where
// the engine's buffer lifetimes are decided on the compute thread (the stage-3 gathered window is
// simulated with the recorded order, prefetch and the live-bytes limit), and bounded where they
// end when a reduction completes on the communicator's thread (stage ≥ 2 gradient buffers,
// reduce_dtype staging copies). Reductions complete in launch order; `peak_low` is the peak if
// each completes as soon as it is launched, `peak_high` if they complete as late as the engine
// lets them: with `max_reductions_in_flight` = L > 0 (ShardingConfig's rate limit, stages 2/3),
// a unit's reduction is launched only once at most L − 1 older ones still run, so at most L
// units' full gradients (or reduce_dtype copies) wait for their reduce-scatter besides the
// units still in backward; with L = 0 none is assumed to complete before finish_backward. The
// measured peak lies in [peak_low, peak_high] and reaches peak_high whenever the communicator
// falls L reductions behind (on the local backend 4 ranks on 2 cores do; 1 rank measures
// peak_low). With a limit, `peak` is peak_high — the bound the engine enforces, what a budget
// can rely on; with L = 0, `peak` assumes `reductions_in_flight` reductions run at once (an
// estimate, not a bound: without a limit nothing stops a slow communicator from leaving every
// unit's full gradient of the step alive, peak_high). Activations and workspace depend on the
// batch and are not estimated. Stage 0 is modeled with the default DdpSync::kBucketed
// (kPerTensor allocates the same buffers; kGatherScatter's rank 0 also holds an N × P·r gather
// buffer of the unit it is reducing, which the model leaves out).
//
// Optimizer offload (OffloadKind::kOptimizer, zs-train --offload-optimizer host): master_weights
// and optimizer_state leave the device (where the fp32 master doubled as the compute copy, that
// copy stays in parameters on the device) and `host` holds the rank's host tier as
// ShardedModel allocates it: per unit the fp32 master (4M), its state and the host copy of the
// gradient shard (4M), M = the rank's master elements; with p < 4 one param_dtype staging buffer
// of the largest unit's M (parameters). The host tier allocates nothing during a step, so `host`
// is both its steady bytes and its peak, exactly. With the state on NVMe (kOptimizerNvme,
// zs-train --offload-optimizer nvme) the masters go to NVMe with the state (ShardedModel's paged
// masters): the host tier's optimizer_state and master_weights are the two pagers' buffers —
// nvme_buffer_count × (each state tensor, or the master, of the largest unit, rounded up to 4 KiB,
// and 4 KiB of alignment slack) — and `nvme` holds the state and the masters, each unit's tensors
// rounded up to 4 KiB (offload/nvme_pager.h). Where the device's memory is host memory
// (device_is_host: the CPU device) the host tier then holds no gradient copy either (the step
// reads the shard where it was reduced); on a GPU it keeps the 4M copy.
//
// Parameter offload (offload_params, stage 3 with an optimizer offload): the units released
// after use hold no parameter shard on the device (only while gathered). With kHost the host
// tier holds each one's shard in param_dtype (S·p; none in fp32, where it is the host master,
// unless the masters are on NVMe);
// with kNvme the NVMe tier holds it (S·p rounded up to 4 KiB per unit) and the host tier
// param_buffer_count buffers of the largest such shard (rounded up to 4 KiB, plus 4 KiB of
// slack), as parameters. The staging buffer is then the largest master of the units that are
// not offloaded (those kept gathered).
//
// Pure functions; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/gpt.h"
#include "runtime/dtype.h"
#include "runtime/memory_tracker.h"
#include "sharding/stage_policy.h"
#include "sharding/unit_plan.h"

namespace zs::train {

enum class OptimizerKind { kAdamW, kSgd, kSgdMomentum };
const char* optimizer_kind_name(OptimizerKind kind);          // "adamw", "sgd", "sgd-momentum"
OptimizerKind parse_optimizer_kind(const std::string& name);  // throws InvalidArgument
// fp32 bytes of optimizer state per master element: 8, 0, 4.
int64_t optimizer_state_bytes_per_element(OptimizerKind kind);

enum class OffloadKind { kNone, kOptimizer, kOptimizerNvme };
// "none", "optimizer", "optimizer-nvme"
const char* offload_kind_name(OffloadKind kind);
OffloadKind parse_offload_kind(const std::string& name);  // throws InvalidArgument

// One sharded unit as the estimator sees it.
struct MemoryUnit {
  std::string name;
  int64_t numel = 0;  // parameter elements, unpadded
  int parent = -1;    // the nearest enclosing unit (index), -1 for the root
};

// The units of a plan (sharding/unit_plan.h), in its order.
std::vector<MemoryUnit> memory_units(const std::vector<sharding::UnitPlan>& plan);
// A GPT's units under a wrap policy: builds the model (declares its parameters, allocates
// nothing) and plans it.
std::vector<MemoryUnit> gpt_memory_units(const models::GptConfig& config,
                                         const std::vector<std::string>& wrap_types = {"Block"});
// A bare parameter count: `units` == 1 gives one root unit holding everything (the whole model
// is gathered at once under stage 3); `units` > 1 gives a root holding the remainder of
// parameters / units and `units` equal units inside it (a stack of equal blocks).
std::vector<MemoryUnit> uniform_memory_units(int64_t parameters, int units = 1);

struct MemoryModelConfig {
  int world = 1;
  int stage = 3;         // 0–3
  int hybrid_group = 0;  // > 0: stage 3 inside groups of this many ranks
  DType param_dtype = DType::kF32;
  DType reduce_dtype = DType::kF32;
  int64_t alignment = 16;  // elements (ShardingConfig::alignment)
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  bool gradient_accumulation = false;  // more than one micro-batch per step
  // ShardingConfig::grad_sync. kPerStep is modeled at stages 0/1; stages 2/3 reduce every
  // micro-batch whatever it says (the engine refuses it there; a zs-mem row of every stage
  // shows them as they must run).
  sharding::GradSync grad_sync = sharding::GradSync::kPerMicroBatch;
  // Stage 3 schedule (ShardingConfig's fields of the same names).
  bool prefetch = true;
  size_t max_live_gathered_bytes = 0;
  size_t prefetch_bytes = 0;  // sharding::ShardingConfig::prefetch_bytes (0: one unit ahead)
  size_t keep_gathered_below_bytes = 0;
  // ShardingConfig::max_reductions_in_flight: the engine's limit on gradient reductions left
  // running at stages 2/3 (>= 0; 0 = no limit). Sets peak_high, and peak when > 0.
  int max_reductions_in_flight = 2;
  // With no limit (max_reductions_in_flight = 0): the reductions assumed to run at once on the
  // communicator's thread (peak's model; >= 0).
  int reductions_in_flight = 1;
  OffloadKind offload = OffloadKind::kNone;
  // kOptimizerNvme: the host buffers of optimizer state (zs-train --nvme-buffer-count).
  int nvme_buffer_count = 4;
  // Stage 3's parameter offload (ShardingConfig::offload_params; needs an optimizer offload and
  // a shard group of more than one rank) and, with kNvme, its host buffers (zs-train
  // --nvme-param-buffer-count).
  sharding::ParamOffload offload_params = sharding::ParamOffload::kNone;
  int param_buffer_count = 4;
  // The device's memory is host memory (zs-train --device cpu; false for cuda): with
  // kOptimizerNvme the host tier keeps no copy of the gradient shard.
  bool device_is_host = true;
};

// Bytes per memory category.
struct CategoryBytes {
  std::array<uint64_t, kNumMemoryCategories> bytes{};
  uint64_t& operator[](MemoryCategory category) { return bytes[static_cast<size_t>(category)]; }
  uint64_t operator[](MemoryCategory category) const {
    return bytes[static_cast<size_t>(category)];
  }
  uint64_t total() const;
};

struct MemoryEstimate {
  MemoryModelConfig config;
  int shard_ranks = 1;       // N: the ranks the shards are split over
  int64_t numel = 0;         // Σ unit numel
  int64_t padded_numel = 0;  // Σ unit padded numel
  CategoryBytes steady;      // device, between steps
  CategoryBytes peak;        // device, per-category peak in a step (the limit's bound, or the
                             // reductions_in_flight model without one)
  CategoryBytes peak_low;    // lower bound of the measurable peak
  CategoryBytes peak_high;   // upper bound of the measurable peak
  // Stage 3: the most gathered (full) parameter bytes alive at once, kept units included —
  // ShardedModel::peak_live_gathered_bytes() of a steady-state step. 0 for stages 0–2.
  uint64_t gathered_window_bytes = 0;
  CategoryBytes host;  // the host tier (optimizer offload), steady = peak
  // kOptimizerNvme: the optimizer state on the rank's NVMe tier (the bytes its swap files
  // reserve; the files are preallocated to whole stripes of 1 MiB per directory).
  uint64_t nvme = 0;
};

// Throws InvalidArgument for an invalid config (stage, world, hybrid group, dtypes, alignment)
// or units (none, or a negative numel).
MemoryEstimate estimate_memory(const std::vector<MemoryUnit>& units,
                               const MemoryModelConfig& config);

// Activations of one micro-batch of a GPT (the default wrap policy: each Block a unit), B
// sequences of T tokens in `dtype` (the compute dtype): the peak of the category activations
// during a forward and backward, as the CPU engine allocates it. With N = B·T, C the width, V the
// vocabulary, H the heads, p = size of dtype, and row statistics in fp32:
//   a recorded block keeps 16·N·C·p — its input, both layernorms' outputs, qkv (3), the
//     attention's output, the residual, the MLP's hidden pre- and post-GELU (4 + 4) — plus
//     16·N (the layernorms' mean and rstd) and 4·B·H·T (the attention's log-sum-exp);
//   a checkpointed block keeps its input, N·C·p;
//   the head (the fused LM head and loss, ops/linear_cross_entropy.h) holds the final
//     layernorm's input and output, its statistics and the loss's row statistics, and in its
//     backward the gradient of the layernorm's output and one chunk of R = min(N,
//     ops::head_chunk_rows(V)) rows of recomputed logits and their gradient: 3·N·C·p + 16·N +
//     2·R·V·p (+ 8 bytes: the loss and its seed gradient).
// The peak is the larger of (a) every block's keep plus the head (the start of backward) and
// (b) for each block l, the keep of the blocks before it, its own recorded activations and
// what its backward holds at once at the MLP's output projection (the incoming gradient, the
// projection's output gradient, the hidden gradient 4: 6·N·C·p, and one more for a
// checkpointed block's recomputed output). GPT-2 124M at B = 4, T = 1024 peaks at (a) without
// checkpointing and at (b) with every block checkpointed (the chunked head is 164 MiB).
// Which blocks are checkpointed: sharding/unit_plan.h checkpoints_unit. Measured equal to the
// byte on the CPU (tests/train/engine_test.cc). On a GPU the head is not chunked yet (it runs the
// unfused kernels and holds all N rows of logits and their gradient, 2·N·V·p, without the
// layernorm output's gradient), and fused kernels may hold other temporaries.
struct ActivationEstimate {
  uint64_t per_layer = 0;               // a recorded block's kept activations
  uint64_t per_layer_checkpointed = 0;  // a checkpointed block's: its input
  uint64_t head = 0;  // final layernorm, a chunk of logits and their gradient, the loss
  int checkpointed_layers = 0;
  uint64_t peak = 0;
};
// Throws InvalidArgument for batch < 1, seq outside [1, context] or checkpoint_every < 0.
ActivationEstimate estimate_gpt_activations(const models::GptConfig& config, int64_t batch,
                                            int64_t seq, DType dtype, int checkpoint_every);

// The ZeRO paper's per-rank model-state bytes for Ψ parameters over N ranks, with p bytes per
// parameter and gradient (2 in mixed precision, 4 in fp32) and K bytes of optimizer-side state
// (fp32 master 4 when p = 2, plus the optimizer's state): stage 0 (2p+K)Ψ, 1 2pΨ + KΨ/N,
// 2 pΨ + (p+K)Ψ/N, 3 (2p+K)Ψ/N. Mixed precision with Adam: 16Ψ, 4Ψ+12Ψ/N, 2Ψ+14Ψ/N, 16Ψ/N.
double zero_formula_bytes(int64_t parameters, int stage, int ranks, DType param_dtype,
                          OptimizerKind optimizer);
std::string zero_formula_text(int stage, DType param_dtype,
                              OptimizerKind optimizer);  // "2Ψ + 14Ψ/N"

// The largest of `presets` (GPT preset names, models/gpt_presets.h; default: all of them) whose
// estimated device peak (peak.total(), model states and the gathered window; no activations)
// fits `budget` bytes per rank, with its estimate; nullopt if none fits.
struct PresetFit {
  std::string preset;
  int64_t parameters = 0;
  MemoryEstimate estimate;
};
std::optional<PresetFit> largest_fitting_preset(const MemoryModelConfig& config, uint64_t budget,
                                                const std::vector<std::string>& presets = {});

// "124M", "1.5B", "350k", "2T", "7e9", "1000" -> a count (decimal suffixes k, M, B/G, T).
// Throws InvalidArgument naming the text. (Sizes in bytes and precisions: parse_bytes and
// parse_precision in train/config.h.)
int64_t parse_count(const std::string& text);

}  // namespace zs::train
