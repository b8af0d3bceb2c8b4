// The per-rank memory model: the buffers of ShardedModel and the optimizers, unit by unit, and a
// replay of one steady-state step's buffer lifetimes for the peaks (see memory_model.h).
#include "train/memory_model.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <deque>
#include <limits>

#include "models/gpt_presets.h"
#include "offload/nvme_store.h"
#include "ops/linear_cross_entropy.h"
#include "runtime/error.h"
#include "sharding/stage_policy.h"

namespace zs::train {

const char* optimizer_kind_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kAdamW:
      return "adamw";
    case OptimizerKind::kSgd:
      return "sgd";
    case OptimizerKind::kSgdMomentum:
      return "sgd-momentum";
  }
  return "unknown";
}

OptimizerKind parse_optimizer_kind(const std::string& name) {
  for (OptimizerKind kind :
       {OptimizerKind::kAdamW, OptimizerKind::kSgd, OptimizerKind::kSgdMomentum}) {
    if (name == optimizer_kind_name(kind)) return kind;
  }
  ZS_THROW(InvalidArgument, "unknown optimizer '", name, "'; expected adamw, sgd or sgd-momentum");
}

int64_t optimizer_state_bytes_per_element(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kAdamW:
      return 8;  // exp_avg, exp_avg_sq
    case OptimizerKind::kSgdMomentum:
      return 4;  // momentum_buffer
    case OptimizerKind::kSgd:
      return 0;
  }
  return 0;
}

const char* offload_kind_name(OffloadKind kind) {
  switch (kind) {
    case OffloadKind::kOptimizer:
      return "optimizer";
    case OffloadKind::kOptimizerNvme:
      return "optimizer-nvme";
    case OffloadKind::kNone:
      break;
  }
  return "none";
}

OffloadKind parse_offload_kind(const std::string& name) {
  for (OffloadKind kind :
       {OffloadKind::kNone, OffloadKind::kOptimizer, OffloadKind::kOptimizerNvme}) {
    if (name == offload_kind_name(kind)) return kind;
  }
  ZS_THROW(InvalidArgument, "unknown offload '", name,
           "'; expected none, optimizer or optimizer-nvme");
}

uint64_t CategoryBytes::total() const {
  uint64_t sum = 0;
  for (uint64_t b : bytes) sum += b;
  return sum;
}

std::vector<MemoryUnit> memory_units(const std::vector<sharding::UnitPlan>& plan) {
  std::vector<MemoryUnit> units;
  for (const sharding::UnitPlan& unit : plan) units.push_back({unit.name, unit.numel, unit.parent});
  return units;
}

std::vector<MemoryUnit> gpt_memory_units(const models::GptConfig& config,
                                         const std::vector<std::string>& wrap_types) {
  models::Gpt model(config);  // declares parameters only
  return memory_units(sharding::plan_units(model, wrap_types));
}

std::vector<MemoryUnit> uniform_memory_units(int64_t parameters, int units) {
  ZS_CHECK(parameters >= 0 && units >= 1, "memory model: need parameters >= 0 and units >= 1, got ",
           parameters, " and ", units);
  if (units == 1) return {{"<root>", parameters, -1}};
  std::vector<MemoryUnit> out{{"<root>", parameters % units, -1}};
  for (int i = 0; i < units; ++i)
    out.push_back({"unit " + std::to_string(i), parameters / units, 0});
  return out;
}

namespace {

constexpr auto kParams = MemoryCategory::kParameters;
constexpr auto kGrads = MemoryCategory::kGradients;
constexpr auto kMaster = MemoryCategory::kMasterWeights;
constexpr auto kOptim = MemoryCategory::kOptimizerState;
constexpr auto kComm = MemoryCategory::kCommBuffers;

struct Sizes {
  std::vector<uint64_t> padded, shard;  // elements
  uint64_t p = 4, r = 4;                // bytes of param_dtype, reduce_dtype
};

// Forward tape of unit boundaries: (unit, true) when its forward starts, (unit, false) when it
// ends; units nest like their modules and run in plan (pre-)order.
std::vector<std::pair<int, bool>> unit_tape(const std::vector<MemoryUnit>& units) {
  std::vector<std::vector<int>> children(units.size());
  std::vector<int> roots;
  for (size_t i = 0; i < units.size(); ++i) {
    const int parent = units[i].parent;
    ZS_CHECK(parent < static_cast<int>(i), "memory model: unit '", units[i].name, "' names parent ",
             parent, ", which is not an earlier unit");
    (parent < 0 ? roots : children[static_cast<size_t>(parent)]).push_back(static_cast<int>(i));
  }
  std::vector<std::pair<int, bool>> tape;
  std::vector<std::pair<int, size_t>> stack;  // (unit, next child)
  for (int root : roots) {
    tape.push_back({root, true});
    stack.push_back({root, 0});
    while (!stack.empty()) {
      auto& [u, next] = stack.back();
      const auto& kids = children[static_cast<size_t>(u)];
      if (next < kids.size()) {
        const int child = kids[next++];
        tape.push_back({child, true});
        stack.push_back({child, 0});
      } else {
        tape.push_back({u, false});
        stack.pop_back();
      }
    }
  }
  return tape;
}

// Stage 3: the most gathered bytes alive at once in a steady-state step (the first step records
// the order and prefetches nothing, so it never exceeds this).
uint64_t gathered_window(const std::vector<std::pair<int, bool>>& tape,
                         const std::vector<uint64_t>& full_bytes, const MemoryModelConfig& config,
                         const sharding::StagePolicy& policy) {
  const size_t n = full_bytes.size();
  std::vector<bool> kept(n), gathered(n);
  uint64_t live = 0;
  for (size_t u = 0; u < n; ++u) {
    kept[u] = policy.stays_gathered(full_bytes[u], config.keep_gathered_below_bytes);
    gathered[u] = kept[u];
    if (kept[u]) live += full_bytes[u];
  }
  uint64_t window = live;
  auto gather = [&](int u) {
    if (gathered[u]) return;
    gathered[u] = true;
    live += full_bytes[u];
    window = std::max(window, live);
  };
  auto release = [&](int u) {
    if (kept[u] || !gathered[u]) return;
    gathered[u] = false;
    live -= full_bytes[u];
  };
  // ShardedModel::on_unit_start and UnitSchedule::prefetch_ahead: gather the unit, then
  // prefetch along the recorded order what fits the live-bytes limit — the next unit, or with
  // prefetch_bytes the following ones while the bytes gathered ahead and not yet used stay
  // within it.
  std::vector<bool> ahead(n);  // prefetched, not yet started
  uint64_t ahead_bytes = 0;
  auto fits_live = [&](int u) {
    return config.max_live_gathered_bytes == 0 ||
           live + full_bytes[u] <= config.max_live_gathered_bytes;
  };
  auto prefetch = [&](int u) {
    gather(u);
    ahead[u] = true;
    ahead_bytes += full_bytes[u];
  };
  auto start = [&](const std::vector<int>& order, size_t& position, int u) {
    ++position;
    gather(u);
    if (ahead[u]) {
      ahead[u] = false;
      ahead_bytes -= full_bytes[u];
    }
    if (!config.prefetch) return;
    if (config.prefetch_bytes == 0) {
      if (position < order.size() && !gathered[order[position]] && fits_live(order[position])) {
        prefetch(order[position]);
      }
      return;
    }
    for (size_t at = position; at < order.size(); ++at) {
      const int next = order[at];
      if (gathered[next]) continue;
      if (ahead_bytes + full_bytes[next] > config.prefetch_bytes || !fits_live(next)) break;
      prefetch(next);
    }
  };
  std::vector<int> forward_order, backward_order;
  for (const auto& [u, begin] : tape) {
    if (begin) forward_order.push_back(u);
  }
  for (auto it = tape.rbegin(); it != tape.rend(); ++it) {
    if (!it->second) backward_order.push_back(it->first);
  }
  size_t position = 0;
  for (const auto& [u, begin] : tape) {
    if (begin) {
      start(forward_order, position, u);
    } else {
      release(u);
    }
  }
  position = 0;
  for (auto it = tape.rbegin(); it != tape.rend(); ++it) {
    if (!it->second) {
      start(backward_order, position, it->first);  // the unit's "end" node: gradients start
    } else {
      release(it->first);  // its "begin" node: reduction launched, parameters released
    }
  }
  return window;
}

struct Transients {
  uint64_t grads = 0;  // peak of the gradient buffers that live only during backward
  uint64_t comm = 0;   // peak of comm_buffers
};

// Replays the gradient reductions of one micro-batch: which transient gradient and staging
// buffers are alive when. Reductions complete in launch order (one communicator thread, FIFO);
// at stages 2/3, when a reduction is launched at most `keep_before` older ones still run (its
// send buffer is allocated after those completed: the engine's rate limit waits before it),
// and right after the launch at most `keep_after` (this one included). Completed reductions
// have dropped their buffers. The engine's limit L is (L − 1, L); "k reductions run at once" is
// (k, k); "none completes before finish_backward" is (∞, ∞).
Transients reduction_transients(const std::vector<std::pair<int, bool>>& tape, const Sizes& sizes,
                                const MemoryModelConfig& config,
                                const sharding::StagePolicy& policy, size_t keep_before,
                                size_t keep_after) {
  // kPerStep with accumulation: the step's one reduction reads the fp32 sum (stages 0/1).
  const bool from_sum = config.gradient_accumulation && policy.full_grads_persist &&
                        config.grad_sync == sharding::GradSync::kPerStep;
  // A reduce_dtype copy of the gradient travels.
  const bool cast = sizes.r != (from_sum ? 4 : sizes.p);
  // Sharded stages reduce into a staging shard unless the result can land in the fp32 gradient.
  const bool staged = policy.masters_sharded && (config.reduce_dtype != DType::kF32 ||
                                                 (config.gradient_accumulation && !from_sum));
  // Stages 2/3: each unit's full gradient lives from its backward until its reduction read it.
  const bool transient_grads = !policy.full_grads_persist;
  Transients peak;
  uint64_t grads = 0, comm = 0;
  struct Launched {
    uint64_t grads, comm;
  };
  std::deque<Launched> running;
  auto complete_until = [&](size_t keep) {
    while (running.size() > keep) {
      grads -= running.front().grads;
      comm -= running.front().comm;
      running.pop_front();
    }
  };
  auto launch = [&](size_t u) {
    const uint64_t full_grad = transient_grads ? sizes.padded[u] * sizes.p : 0;
    const uint64_t send = cast ? sizes.padded[u] * sizes.r : 0;
    const uint64_t reduced = staged ? sizes.shard[u] * sizes.r : 0;
    if (transient_grads) complete_until(keep_before);
    comm += send + reduced;
    peak.comm = std::max(peak.comm, comm);
    // An all-reduce (stage 0) keeps its send buffer as the reduced result.
    if (policy.reduce_collective == sharding::GradientCollective::kAllReduce) return;
    // The reduced shard stays until finish_backward; the collective holds what it reads (the
    // cast copy, or else the gradient itself) until it completes. A cast gradient is dropped now.
    if (cast) grads -= full_grad;
    running.push_back({cast ? 0 : full_grad, send});
    complete_until(keep_after);
  };
  if (policy.reduce_timing == sharding::ReduceTiming::kEndOfBackward) {
    for (size_t u = 0; u < sizes.padded.size(); ++u) launch(u);  // all in finish_backward
    return peak;
  }
  for (auto it = tape.rbegin(); it != tape.rend(); ++it) {
    const size_t u = static_cast<size_t>(it->first);
    if (!it->second) {
      if (transient_grads) {
        grads += sizes.padded[u] * sizes.p;  // install_grad_buffer
        peak.grads = std::max(peak.grads, grads);
      }
    } else {
      launch(u);
    }
  }
  return peak;
}

// The NVMe tier's alignment: every region of its store and every host buffer of the pager
// (offload/nvme_pager.h) is a multiple of it, and each buffer has one of slack.
constexpr uint64_t kNvmeAlignment = offload::NvmeStore::kAlignment;
uint64_t round_up_nvme(uint64_t bytes) {
  return (bytes + kNvmeAlignment - 1) / kNvmeAlignment * kNvmeAlignment;
}

// Where the fp32 master doubled as the compute copy (fp32 at every stage: the full buffer, its
// slot, or stage 3's parameter shard) that copy stays in parameters on the device, as a buffer of
// its own; the master the optimizer updates moves to the host tier with its state.
void offload_optimizer(CategoryBytes& device) {
  device[kMaster] = 0;
  device[kOptim] = 0;
}

}  // namespace

ActivationEstimate estimate_gpt_activations(const models::GptConfig& config, int64_t batch,
                                            int64_t seq, DType dtype, int checkpoint_every) {
  ZS_CHECK(batch >= 1 && seq >= 1 && seq <= config.context,
           "activation estimate: the micro-batch must be >= 1 and the sequence length in [1, "
           "context ",
           config.context, "], got ", batch, " and ", seq);
  ZS_CHECK(checkpoint_every >= 0, "activation estimate: checkpoint_every must be >= 0, got ",
           checkpoint_every);
  const uint64_t n = static_cast<uint64_t>(batch * seq);
  const uint64_t p = dtype_size(dtype);
  const uint64_t nc = n * static_cast<uint64_t>(config.width) * p;
  const uint64_t row_stat = 4 * n;  // one fp32 value per row
  ActivationEstimate e;
  e.per_layer = 16 * nc + 4 * row_stat +
                4 * static_cast<uint64_t>(batch * config.n_head * seq);  // + attention lse
  e.per_layer_checkpointed = nc;
  // The fused head (ops/linear_cross_entropy.h) holds one chunk of logits and their gradient.
  const uint64_t chunk_rows =
      std::min<uint64_t>(n, static_cast<uint64_t>(ops::head_chunk_rows(config.vocab_size)));
  e.head =
      3 * nc + 4 * row_stat + 2 * chunk_rows * static_cast<uint64_t>(config.vocab_size) * p + 8;
  uint64_t kept = 0;  // by the blocks before the current one
  uint64_t in_backward = 0;
  for (int64_t l = 0; l < config.n_layer; ++l) {
    const bool checkpointed = sharding::checkpoints_unit(l, checkpoint_every);
    // The block's backward at the MLP's output projection (the loss tensor is still held).
    const uint64_t in_flight = (checkpointed ? 7 : 6) * nc + 4;
    in_backward = std::max(in_backward, kept + e.per_layer + in_flight);
    kept += checkpointed ? e.per_layer_checkpointed : e.per_layer;
    e.checkpointed_layers += checkpointed ? 1 : 0;
  }
  e.peak = std::max(kept + e.head, in_backward);
  return e;
}

MemoryEstimate estimate_memory(const std::vector<MemoryUnit>& units,
                               const MemoryModelConfig& config) {
  // What the stage keeps: the same decisions ShardedModel asks (sharding/stage_policy.h). It
  // refuses a stage outside 0–3 and hybrid below stage 3.
  const sharding::StagePolicy policy =
      sharding::StagePolicy::make(config.stage, config.hybrid_group > 0,
                                  config.hybrid_group > 0 ? config.hybrid_group : config.world,
                                  config.offload_params != sharding::ParamOffload::kNone);
  ZS_CHECK(config.world >= 1, "memory model: world size must be >= 1, got ", config.world);
  ZS_CHECK(config.alignment >= 1, "memory model: alignment must be >= 1, got ", config.alignment);
  ZS_CHECK(is_floating(config.param_dtype) && is_floating(config.reduce_dtype),
           "memory model: param_dtype and reduce_dtype must be fp32, fp16 or bf16");
  ZS_CHECK(config.reductions_in_flight >= 0, "memory model: reductions_in_flight must be >= 0");
  ZS_CHECK(config.offload != OffloadKind::kOptimizerNvme || config.nvme_buffer_count >= 1,
           "memory model: the NVMe tier needs at least 1 host buffer, got ",
           config.nvme_buffer_count);
  ZS_CHECK(config.max_reductions_in_flight >= 0,
           "memory model: max_reductions_in_flight must be >= 0 (0 = no limit), got ",
           config.max_reductions_in_flight);
  const bool offload_params = config.offload_params != sharding::ParamOffload::kNone;
  // The conditions ShardedModel enforces.
  ZS_CHECK(!offload_params || (policy.stage == 3 && config.offload != OffloadKind::kNone &&
                               config.param_buffer_count >= 1),
           "memory model: parameter offload needs stage 3 (not over hybrid groups of one rank), "
           "an optimizer offload and at least 1 host buffer");
  if (config.hybrid_group > 0) {
    ZS_CHECK(config.world % config.hybrid_group == 0, "memory model: the world size ", config.world,
             " is not a multiple of the hybrid group size ", config.hybrid_group);
  }
  ZS_CHECK(!units.empty(), "memory model: no units");
  MemoryEstimate estimate;
  estimate.config = config;
  // The ranks a unit is padded for and split over (hybrid groups of one rank run as stage 0 over
  // the world).
  const int n = policy.hybrid ? config.hybrid_group : config.world;
  estimate.shard_ranks = n;
  const int stage = policy.stage;  // the stage that runs (0 for a shard group of one rank)
  const bool fp32_params = config.param_dtype == DType::kF32;
  const bool fp32_grads = fp32_params && config.reduce_dtype == DType::kF32;
  const uint64_t state_bytes =
      static_cast<uint64_t>(optimizer_state_bytes_per_element(config.optimizer));

  Sizes sizes;
  sizes.p = dtype_size(config.param_dtype);
  sizes.r = dtype_size(config.reduce_dtype);
  std::vector<uint64_t> full_bytes;
  CategoryBytes& steady = estimate.steady;
  uint64_t kept_bytes = 0;
  std::vector<bool> offloaded;  // per unit: its parameter shard lives off the device
  for (const MemoryUnit& unit : units) {
    ZS_CHECK(unit.numel >= 0, "memory model: unit '", unit.name, "' has ", unit.numel,
             " parameters");
    const uint64_t padded =
        static_cast<uint64_t>(sharding::padded_numel(unit.numel, n, config.alignment));
    const uint64_t shard =
        static_cast<uint64_t>(sharding::shard_numel(unit.numel, n, config.alignment));
    estimate.numel += unit.numel;
    estimate.padded_numel += static_cast<int64_t>(padded);
    sizes.padded.push_back(padded);
    sizes.shard.push_back(shard);
    const uint64_t full = padded * sizes.p;
    full_bytes.push_back(full);
    // Stage 3's units kept gathered for good (stages 0–2 keep every unit's full parameters).
    const bool kept = !policy.full_params_persist &&
                      policy.stays_gathered(full, config.keep_gathered_below_bytes);
    if (kept) kept_bytes += full;
    offloaded.push_back(offload_params && !kept);
    const uint64_t master_numel = static_cast<uint64_t>(
        policy.master_numel(static_cast<int64_t>(padded), static_cast<int64_t>(shard)));
    switch (stage) {
      case 0:
        steady[kParams] += full;
        steady[kMaster] += fp32_params ? 0 : 4 * padded;
        // fp32 reduces in place in the flat gradient; otherwise an fp32 accumulator besides it.
        // With accumulation, fp32's later micro-batches keep a temporary flat gradient that lives
        // until the next step's backward replaces it.
        steady[kGrads] +=
            full + (fp32_grads ? (config.gradient_accumulation ? 4 * padded : 0) : 4 * padded);
        break;
      case 1:
      case 2:
        // The compute shard is the full buffer's own slot (in-place gathers); in fp32 so is the
        // master.
        steady[kParams] += full;
        steady[kMaster] += fp32_params ? 0 : 4 * shard;
        steady[kGrads] += (stage == 1 ? full : 0) + 4 * shard;
        // kPerStep with accumulation: the fp32 sum (mixed) or the later micro-batches'
        // temporary flat gradient (fp32, whose sum is the flat gradient itself).
        if (stage == 1 && config.gradient_accumulation &&
            config.grad_sync == sharding::GradSync::kPerStep) {
          steady[kGrads] += 4 * padded;
        }
        break;
      case 3:
        // In fp32 the master shard is the parameter shard the all-gathers read; a unit kept
        // gathered holds its shard in its full buffer's slot instead.
        steady[kParams] += kept               ? full
                           : offloaded.back() ? 0
                           : fp32_params      ? 4 * shard
                                              : shard * sizes.p;
        steady[kMaster] += fp32_params ? 0 : 4 * shard;
        steady[kGrads] += 4 * shard;
        break;
    }
    steady[kOptim] += state_bytes * master_numel;
  }

  const std::vector<std::pair<int, bool>> tape = unit_tape(units);
  estimate.peak = estimate.peak_low = estimate.peak_high = steady;
  if (!policy.full_params_persist) {
    estimate.gathered_window_bytes = gathered_window(tape, full_bytes, config, policy);
    for (CategoryBytes* peak : {&estimate.peak, &estimate.peak_low, &estimate.peak_high}) {
      (*peak)[kParams] += estimate.gathered_window_bytes - kept_bytes;
    }
  }
  // The reduction models (see reduction_transients): peak_low, every reduction completes at
  // once; peak_high, none completes before finish_backward or, under the engine's rate limit L
  // (stages 2/3), L run after each launch; peak, the limit's bound when there is one, else
  // `reductions_in_flight` running at once.
  constexpr size_t kAll = std::numeric_limits<size_t>::max();
  const size_t limit =
      policy.full_grads_persist ? 0 : static_cast<size_t>(config.max_reductions_in_flight);
  const size_t assumed = static_cast<size_t>(config.reductions_in_flight);
  struct Model {
    CategoryBytes* peak;
    size_t keep_before, keep_after;
  };
  const Model models[] = {
      {&estimate.peak_low, 0, 0},
      {&estimate.peak_high, limit > 0 ? limit - 1 : kAll, limit > 0 ? limit : kAll},
      {&estimate.peak, limit > 0 ? limit - 1 : assumed, limit > 0 ? limit : assumed}};
  for (const Model& model : models) {
    const Transients transients =
        reduction_transients(tape, sizes, config, policy, model.keep_before, model.keep_after);
    (*model.peak)[kGrads] += transients.grads;
    (*model.peak)[kComm] += transients.comm;
  }

  if (config.offload != OffloadKind::kNone) {
    // The host tier (ShardedModel's optimizer offload): per unit the fp32 master, its optimizer
    // state and the host copy of the fp32 gradient shard; in fp16/bf16 one staging buffer of the
    // largest master in param_dtype, where the updated masters are cast before they go back.
    uint64_t largest_master = 0;  // of every unit: the NVMe state's buffers
    uint64_t largest_staged = 0;  // of the units whose compute copy is uploaded from the host
    uint64_t largest_page = 0;    // kNvme: the largest offloaded shard's bytes in the store
    const bool nvme = config.offload == OffloadKind::kOptimizerNvme;
    for (size_t u = 0; u < units.size(); ++u) {
      const uint64_t master_numel = static_cast<uint64_t>(policy.master_numel(
          static_cast<int64_t>(sizes.padded[u]), static_cast<int64_t>(sizes.shard[u])));
      if (nvme) {
        estimate.nvme += round_up_nvme(4 * master_numel);  // the paged master
      } else {
        estimate.host[kMaster] += 4 * master_numel;
      }
      if (!(nvme && config.device_is_host)) estimate.host[kGrads] += 4 * master_numel;
      if (offloaded[u]) {
        // The pager keeps a shard's param_dtype bytes in whole fp32 elements.
        const uint64_t shard_bytes = sizes.shard[u] * sizes.p;
        const uint64_t page = round_up_nvme((shard_bytes + 3) / 4 * 4);
        if (config.offload_params == sharding::ParamOffload::kHost) {
          // (In fp32 the shard is the host master, unless the masters are paged.)
          estimate.host[kParams] += fp32_params && !nvme ? 0 : shard_bytes;
        } else {
          estimate.nvme += page;
          largest_page = std::max(largest_page, page);
        }
      } else {
        largest_staged = std::max(largest_staged, master_numel);
      }
      largest_master = std::max(largest_master, master_numel);
      if (config.offload == OffloadKind::kOptimizer) {
        estimate.host[kOptim] += state_bytes * master_numel;
      } else {
        estimate.nvme += state_bytes / 4 * round_up_nvme(4 * master_numel);
      }
    }
    if (nvme && state_bytes > 0) {
      estimate.host[kOptim] =
          static_cast<uint64_t>(config.nvme_buffer_count) *
          (state_bytes / 4 * round_up_nvme(4 * largest_master) + kNvmeAlignment);
    }
    if (nvme) {
      estimate.host[kMaster] = static_cast<uint64_t>(config.nvme_buffer_count) *
                               (round_up_nvme(4 * largest_master) + kNvmeAlignment);
    }
    if (!fp32_params) estimate.host[kParams] += largest_staged * sizes.p;
    if (largest_page > 0) {
      estimate.host[kParams] +=
          static_cast<uint64_t>(config.param_buffer_count) * (largest_page + kNvmeAlignment);
    }
    for (CategoryBytes* device :
         {&estimate.steady, &estimate.peak, &estimate.peak_low, &estimate.peak_high}) {
      offload_optimizer(*device);
    }
  }
  return estimate;
}

double zero_formula_bytes(int64_t parameters, int stage, int ranks, DType param_dtype,
                          OptimizerKind optimizer) {
  ZS_CHECK(stage >= 0 && stage <= 3 && ranks >= 1, "zero formula: stage 0–3 and ranks >= 1");
  const double psi = static_cast<double>(parameters);
  const double n = static_cast<double>(ranks);
  const double p = param_dtype == DType::kF32 ? 4 : 2;
  const double k = (param_dtype == DType::kF32 ? 0 : 4) +
                   static_cast<double>(optimizer_state_bytes_per_element(optimizer));
  switch (stage) {
    case 0:
      return (2 * p + k) * psi;
    case 1:
      return 2 * p * psi + k * psi / n;
    case 2:
      return p * psi + (p + k) * psi / n;
    default:
      return (2 * p + k) * psi / n;
  }
}

std::string zero_formula_text(int stage, DType param_dtype, OptimizerKind optimizer) {
  const int64_t p = param_dtype == DType::kF32 ? 4 : 2;
  const int64_t k =
      (param_dtype == DType::kF32 ? 0 : 4) + optimizer_state_bytes_per_element(optimizer);
  auto term = [](int64_t bytes, bool over_n) {
    return std::to_string(bytes) + "Ψ" + (over_n ? "/N" : "");
  };
  switch (stage) {
    case 0:
      return term(2 * p + k, false);
    case 1:
      return k == 0 ? term(2 * p, false) : term(2 * p, false) + " + " + term(k, true);
    case 2:
      return term(p, false) + " + " + term(p + k, true);
    default:
      return term(2 * p + k, true);
  }
}

std::optional<PresetFit> largest_fitting_preset(const MemoryModelConfig& config, uint64_t budget,
                                                const std::vector<std::string>& presets) {
  const std::vector<std::string> names = presets.empty() ? models::gpt_preset_names() : presets;
  std::optional<PresetFit> best;
  for (const std::string& name : names) {
    const models::GptConfig gpt = models::gpt_preset(name);
    const int64_t parameters = models::gpt_parameter_count(gpt);
    if (best && parameters <= best->parameters) continue;
    MemoryEstimate estimate = estimate_memory(gpt_memory_units(gpt), config);
    if (estimate.peak.total() <= budget) best = PresetFit{name, parameters, std::move(estimate)};
  }
  return best;
}

namespace {

// Splits "1.5 GiB" into 1.5 and "GiB"; throws naming `what` if there is no leading number.
std::pair<double, std::string> number_and_suffix(const std::string& text, const char* what) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  ZS_CHECK(used > 0 && std::isfinite(value) && value >= 0, "cannot read '", text, "' as ", what);
  std::string suffix = text.substr(used);
  suffix.erase(0, suffix.find_first_not_of(' '));
  return {value, suffix};
}

}  // namespace

int64_t parse_count(const std::string& text) {
  auto [value, suffix] = number_and_suffix(text, "a parameter count (e.g. 124M, 1.5B, 7e9)");
  double scale = 1;
  if (suffix == "k" || suffix == "K") {
    scale = 1e3;
  } else if (suffix == "M" || suffix == "m") {
    scale = 1e6;
  } else if (suffix == "B" || suffix == "b" || suffix == "G" || suffix == "g") {
    scale = 1e9;
  } else if (suffix == "T" || suffix == "t") {
    scale = 1e12;
  } else {
    ZS_CHECK(suffix.empty(), "cannot read '", text, "' as a parameter count: unknown suffix '",
             suffix, "' (use k, M, B or T)");
  }
  const double count = std::round(value * scale);
  ZS_CHECK(count >= 1 && count < 9e18, "parameter count '", text, "' is out of range");
  return static_cast<int64_t>(count);
}

}  // namespace zs::train
