// ShardedModel: unit assignment, flat buffers, sharded init, boundary hooks and reductions.
#include "sharding/sharded_model.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <optional>
#include <set>

#include "comm/reduce.h"
#include "ops/elementwise.h"
#include "runtime/autograd.h"
#include "runtime/logging.h"
#include "runtime/rng.h"
#include "sharding/step_order.h"
#include "sharding/unit_plan.h"

namespace zs::sharding {

// A unit of the plan (name, module, parameters and their offsets) with its buffers.
struct ShardedModel::Unit : UnitPlan {
  explicit Unit(UnitPlan plan) : UnitPlan(std::move(plan)) {}
  int64_t padded = 0;  // padded_numel (sharding/unit_plan.h)
  int64_t shard = 0;
  int64_t own_begin = 0;  // the rank's master elements in the flat buffer: [own_begin, + master)
  std::shared_ptr<Storage> full_storage;  // the unit's full (gathered) parameters, param_dtype
  Tensor full;                            // flat view of full_storage
  // fp32: stage 0 the whole flat buffer (= full in fp32), else the rank's slice — in fp32 a view
  // of full's slot where full persists (the optimizer updates it where the model reads it).
  Tensor master;
  // Stages 1–3: the slice in param_dtype, source of the all-gathers. Where full persists
  // (stays_gathered) it is full's own slot, so the gathers are in place; at stage 3 (full
  // released after use) a buffer of its own (in fp32 the master itself).
  Tensor compute_shard;
  Tensor grad_full;  // flat gradient buffer (param_dtype) the parameters' gradients view
  Tensor grad;       // fp32 accumulated reduced gradient of master's elements
  // GradSync::kPerStep: the fp32 sum of the step's micro-batch gradients, all padded elements
  // (stage 0: grad; stage 1: in fp32 the flat gradient buffer, else a buffer of its own made at
  // the first deferred micro-batch).
  Tensor sum;
  // Where a step's first micro-batch computes straight into a persistent fp32 buffer (stage 0 in
  // fp32: grad; stage 1 in fp32 with kPerStep: sum); later micro-batches compute into a
  // temporary that is added to it.
  Tensor first_grad;
  Tensor host_grad;  // optimizer offload: the host copy of grad that the optimizer reads (paged
                     // masters on a host-visible device: grad itself)
  Tensor reduced;    // the collective's output when it cannot write into grad directly
  std::vector<comm::WorkPtr> reductions;  // this micro-batch's gradient collectives in flight
  // Hybrid, per micro-batch: its reduce-scatter was launched and its all-reduce across the
  // groups is not issued yet; then that all-reduce, until finish_backward waited for it.
  bool awaiting_replicas = false;
  comm::WorkPtr across_groups;
  comm::WorkPtr gathering;  // a prefetch in flight
  size_t full_bytes = 0;
  bool stays_gathered = false;  // StagePolicy::stays_gathered
  bool checkpointed = false;    // ShardingConfig::checkpoint_every
  bool offloaded = false;       // its shard lives off the device (offload_params)
  // Paged masters: the optimizer's step refreshed the compute copy from the updated master (the
  // view's MasterPages::updated); after_step does not read the master again.
  bool compute_copy_fresh = false;
  size_t index = 0;                       // in units_ (what the unit order check compares)
  SteadyClock::time_point compute_since;  // tracing: when its forward or backward began
};

const char* ddp_sync_name(DdpSync sync) {
  switch (sync) {
    case DdpSync::kBucketed:
      return "bucketed";
    case DdpSync::kPerTensor:
      return "per_tensor";
    case DdpSync::kGatherScatter:
      return "gather_scatter";
  }
  return "unknown";
}

ShardedModel::ShardedModel(models::Module& root, comm::Communicator& comm, Allocator& allocator,
                           const ShardingConfig& config, Allocator* optimizer_host,
                           TensorPager* param_pager, TensorPager* master_pager,
                           const StrategyOverrides& overrides)
    : root_(root),
      comm_(comm),
      shard_comm_(&comm),
      allocator_(allocator),
      host_(optimizer_host),
      param_pager_(param_pager),
      master_pager_(master_pager),
      config_(config),
      policy_(StagePolicy::make(config.stage, config.hybrid_group > 0,
                                config.hybrid_group > 0 ? config.hybrid_group : comm.size(),
                                config.offload_params != ParamOffload::kNone)) {
  // Asked of the stage requested, not the one that runs: a configuration valid at one rank only
  // (where every stage runs as stage 0) would fail when the job grows.
  ZS_CHECK(config.ddp_sync == DdpSync::kBucketed || policy_.requested_stage == 0,
           "sharding: ddp_sync '", ddp_sync_name(config.ddp_sync),
           "' is a gradient sync of stage 0 (DDP), but stage ", config.stage,
           " reduce-scatters gradients; use ddp_sync = bucketed with this stage, or stage 0");
  ZS_CHECK(config.grad_sync == GradSync::kPerMicroBatch || policy_.requested_stage <= 1,
           "sharding: grad_sync 'per_step' sums full gradients locally across micro-batches, "
           "which stages 0 and 1 keep, but stage ",
           config.stage,
           " frees each unit's full gradient once it is reduce-scattered (its memory saving); "
           "use grad_sync = per_micro_batch with this stage, or stage 0/1");
  once_per_step_ = config.grad_sync == GradSync::kPerStep;
  ZS_CHECK(host_ == nullptr || policy_.requested_stage >= 1,
           "sharding: optimizer offload needs ZeRO stage 1, 2 or 3 (the optimizer then runs on the "
           "rank's shard), got stage ",
           policy_.requested_stage, "; use --zero-stage 1 or higher, or leave offload off");
  ZS_CHECK(host_ == nullptr || host_->host_visible(),
           "sharding: the optimizer offload allocator must give host-visible memory (the "
           "optimizer's CPU loops update it)");
  ZS_CHECK(master_pager_ == nullptr || host_ != nullptr,
           "sharding: paged masters are part of optimizer offload (to NVMe); pass the host tier's "
           "allocator too");
  if (config.offload_params != ParamOffload::kNone) {
    const char* where = param_offload_name(config.offload_params);
    ZS_CHECK(policy_.requested_stage == 3, "sharding: parameter offload (", where,
             ") moves the parameter shards of ZeRO stage 3, but the stage is ",
             policy_.requested_stage,
             " (full parameters stay on every rank); use --zero-stage 3, or drop --offload-param");
    ZS_CHECK(policy_.stage == 3, "sharding: parameter offload (", where,
             ") needs stage 3's shards, but hybrid groups of one rank shard nothing (stage 3 "
             "runs as stage 0 there, full parameters on the device); use groups of 2 or more "
             "ranks, no hybrid sharding, or drop --offload-param");
    ZS_CHECK(host_ != nullptr, "sharding: parameter offload (", where,
             ") needs optimizer offload too (the shards are cast from the masters, which must "
             "live on the host); add --offload-optimizer host (or nvme)");
    ZS_CHECK((config.offload_params == ParamOffload::kNvme) == (param_pager != nullptr),
             "sharding: parameter offload to nvme needs a parameter pager, and only it takes one");
  } else {
    ZS_CHECK(param_pager == nullptr,
             "sharding: a parameter pager was given without parameter offload to nvme");
  }
  ZS_CHECK(config.alignment >= 1, "sharding: alignment must be >= 1 element, got ",
           config.alignment);
  ZS_CHECK(config.checkpoint_every >= 0,
           "sharding: checkpoint_every must be >= 0 (0 = no activation checkpointing, k = every "
           "k-th unit), got ",
           config.checkpoint_every);
  ZS_CHECK(config.max_reductions_in_flight >= 0,
           "sharding: max_reductions_in_flight must be >= 0 (0 = no limit), got ",
           config.max_reductions_in_flight);
  ZS_CHECK(is_floating(config.param_dtype) && is_floating(config.reduce_dtype),
           "sharding: param_dtype and reduce_dtype must be fp32, fp16 or bf16, got ",
           dtype_name(config.param_dtype), " and ", dtype_name(config.reduce_dtype));
  // Where the buffers live: the allocator's device, which must be where the communicator moves
  // tensors. On a device, the communicator must order its collectives after the compute stream
  // (the allocator's stream, where the ops run) — see "Devices" in sharded_model.h.
  const Device device = allocator.device();
  on_device_ = !device.is_cpu();
  ZS_CHECK(comm.buffer_device() == device, "sharding: the allocator's memory is on ", device.str(),
           " but the communicator (backend '", comm.backend_name(), "') moves tensors on ",
           comm.buffer_device().str(),
           "; use a CUDA allocator with the nccl backend on that GPU, or a CPU allocator with "
           "local/mpi");
  if (on_device_) {
    ZS_CHECK(!comm.compute_stream().is_host() && comm.compute_stream().device == device,
             "sharding: on ", device.str(),
             " the communicator needs the compute stream attached before the ShardedModel is "
             "made (Communicator::set_compute_stream(comm::stream_ref(stream)) with the stream "
             "of the CudaAllocator), so that collectives are ordered after the kernels on the "
             "device; it has ",
             comm.compute_stream().str());
    ZS_CHECK(config.ddp_sync != DdpSync::kGatherScatter,
             "sharding: ddp_sync 'gather_scatter' "
             "reduces on rank 0's host and is not available on ",
             device.str(), "; use ddp_sync = bucketed (or per_tensor) on a GPU");
  }
  const DType param_dtype = config.param_dtype;
  const size_t param_size = dtype_size(param_dtype);
  if (config.hybrid_group > 0) {
    const int g = config.hybrid_group;
    ZS_CHECK(comm.size() % g == 0, "sharding: the world size ", comm.size(),
             " is not a multiple of the hybrid group size ", g,
             "; use a group size that divides it (e.g. the ranks per node)");
  }
  if (policy_.stage != policy_.requested_stage && comm.rank() == 0) {
    ZS_LOG_INFO(
        "sharding: one rank per shard group shards nothing; stage {}{} runs as stage 0 (full "
        "buffers, no gathers)",
        policy_.requested_stage, config.hybrid_group > 0 ? " hybrid" : "");
  }
  // Groups of one rank shard nothing: the policy runs them as stage 0 over the world.
  if (policy_.hybrid) {
    const int g = config.hybrid_group;
    // Groups of consecutive ranks share the shards; ranks at the same position in every group
    // hold replicas of the same shard.
    intra_group_ = comm.split(comm.rank() / g, comm.rank());
    inter_group_ = comm.split(comm.rank() % g, comm.rank());
    shard_comm_ = intra_group_.get();
  }
  // Collective over the shard group (stage 3's gather queue), like the splits above.
  gather_ = make_param_gather(*shard_comm_, policy_, config, comm.rank());
  if (overrides.gather) gather_ = overrides.gather(std::move(gather_));
  step_order_ = std::make_shared<StepOrder>(once_per_step_);
  const int world = shard_comm_->size();
  const int rank = shard_comm_->rank();

  // Units: modules the wrap policy matches (by type, or by holding at least
  // wrap_min_parameters not yet claimed) claim their subtree's parameters, inner units first;
  // the root takes the rest. sharding/unit_plan.h holds the rule and the offsets; the plan is in
  // forward order (pre-order of the modules) for deterministic naming and collective order.
  std::vector<std::string> unit_names;
  for (UnitPlan& planned : plan_units(root, config.wrap_types, config.wrap_min_parameters)) {
    units_.push_back(std::make_unique<Unit>(std::move(planned)));
    units_.back()->index = units_.size() - 1;
    unit_names.push_back(units_.back()->name);
  }
  UnitSchedule::Options schedule;
  schedule.prefetch = config_.prefetch;
  schedule.gathers_just_in_time = !policy_.full_params_persist;
  schedule.reductions_followed = policy_.all_reduce_across_groups;
  schedule.prefetch_bytes = config_.prefetch_bytes;
  schedule.max_live_gathered_bytes = config_.max_live_gathered_bytes;
  schedule_ = std::make_unique<UnitSchedule>(schedule, std::move(unit_names));

  mark_checkpointed_units();

  // Sizes, and what each unit keeps. Parameter offload: the units released after use move their
  // shard off the device; with kNvme the pager reserves each one's bytes now (fp32 elements
  // holding param_dtype bytes: a shard is a multiple of the alignment, so of 2 elements), before
  // the loop below first writes them.
  std::vector<int64_t> pages;
  std::vector<int64_t> master_pages;  // paged masters: each unit's master
  for (auto& unit_ptr : units_) {
    Unit& u = *unit_ptr;
    u.padded = padded_numel(u.numel, world, config.alignment);
    u.shard = shard_numel(u.numel, world, config.alignment);
    u.full_bytes = static_cast<size_t>(u.padded) * param_size;
    u.stays_gathered = policy_.stays_gathered(u.full_bytes, config.keep_gathered_below_bytes);
    u.offloaded = config.offload_params != ParamOffload::kNone && !u.stays_gathered;
    const int64_t shard_bytes = u.shard * static_cast<int64_t>(param_size);
    pages.push_back(u.offloaded ? (shard_bytes + 3) / 4 : 0);
    master_pages.push_back(policy_.master_numel(u.padded, u.shard));
  }
  if (param_pager_) param_pager_->attach(pages, 1);
  if (master_pager_) master_pager_->attach(master_pages, 1);

  std::set<uint32_t> streams;
  for (auto& unit_ptr : units_) {
    Unit& u = *unit_ptr;
    for (models::Parameter* p : u.parameters) {
      ZS_CHECK(p->dtype() == DType::kF32, "sharding: parameter '", p->name(), "' is ",
               dtype_name(p->dtype()),
               "; masters are fp32 (set the compute dtype with "
               "param_dtype, not on the declaration)");
      ZS_CHECK(streams.insert(stream_id(p->name())).second, "parameter '", p->name(),
               "' has the same RNG stream id as an earlier parameter; rename one of them");
    }
    u.own_begin = policy_.master_begin(rank, u.shard);

    // Full buffer (parameters category) and views bound to the parameters.
    u.full_storage = Storage::create(allocator, u.full_bytes, MemoryCategory::kParameters,
                                     "unit " + u.name + " params");
    u.full = Tensor::from_storage(u.full_storage, 0, {u.padded}, param_dtype, u.name + " flat");
    for (size_t i = 0; i < u.parameters.size(); ++i) {
      models::Parameter* p = u.parameters[i];
      Tensor view =
          Tensor::from_storage(u.full_storage, static_cast<size_t>(u.offsets[i]) * param_size,
                               p->shape(), param_dtype, p->name());
      view.set_requires_grad(true);
      p->bind(view);
    }

    // Sharded init: each rank fills exactly the elements it owns (stage 0: all of them).
    const int64_t own_begin = u.own_begin;
    const int64_t own_end = own_begin + policy_.master_numel(u.padded, u.shard);
    const bool fp32_params = param_dtype == DType::kF32;
    // The rank's slot of the full buffer, where the full buffer persists: the compute shard
    // (and in fp32 the master) live there, so after_step's all-gathers are in place and no
    // separate copy of the rank's slice exists.
    const bool shard_in_full = policy_.masters_sharded && u.stays_gathered;
    if (master_pager_) {
      // Paged masters: a handle with the master's shape and no memory; the values are the unit's
      // page of the master pager (see "Paged masters" in the header).
      const int64_t numel = policy_.master_numel(u.padded, u.shard);
      const std::string name = "unit " + u.name + " master (paged)";
      u.master = Tensor::from_storage(
          Storage::create_released(*host_, static_cast<size_t>(numel) * sizeof(float),
                                   MemoryCategory::kMasterWeights, name),
          0, {numel}, DType::kF32, name);
    } else if (host_) {
      // Offload: the master is the host tier's, in fp32 too (see the header).
      u.master = Tensor::zeros({policy_.master_numel(u.padded, u.shard)}, DType::kF32, *host_,
                               MemoryCategory::kMasterWeights, "unit " + u.name + " master (host)");
    } else if (!policy_.masters_sharded) {
      u.master = fp32_params
                     ? u.full
                     : Tensor::empty({u.padded}, DType::kF32, allocator,
                                     MemoryCategory::kMasterWeights, "unit " + u.name + " master");
    } else if (shard_in_full && fp32_params) {
      u.master = shard_comm_->rank_slice(u.full);
    } else {
      // In fp32 at stage 3 (full released after use) the shard is the parameter itself;
      // otherwise it is a master copy.
      const MemoryCategory category =
          fp32_params ? MemoryCategory::kParameters : MemoryCategory::kMasterWeights;
      u.master = Tensor::zeros({u.shard}, DType::kF32, allocator, category,
                               "unit " + u.name + " master shard");
    }
    // The init rule writes host memory: on a device, fill a zeroed host copy of the master and
    // upload it once (Tensor::copy_from: synchronous, at construction only). A paged master is
    // written into its page, held until the compute copy below was made from it.
    PageAccess held_master = master_of(u, /*overwrite=*/true);
    const Tensor& master_values = held_master.tensors().front();
    const bool stage_init = !master_values.is_host_visible();
    std::vector<float> host_master;
    if (stage_init) host_master.assign(static_cast<size_t>(u.master.numel()), 0.0f);
    float* master = stage_init ? host_master.data() : master_values.data<float>();
    // (Tensor::zeros made the separate shards; stage 0's master, a master in the slot of the
    // uninitialized full buffer and a page start from zeros here.)
    if ((!policy_.masters_sharded || u.master.storage() == u.full_storage || master_pager_) &&
        !stage_init) {
      std::fill(master, master + u.master.numel(), 0.0f);
    }
    ShardView local;
    local.name = u.name;
    local.gate = step_order_;
    for (size_t i = 0; i < u.parameters.size(); ++i) {
      models::Parameter& p = *u.parameters[i];
      const int64_t p_begin = u.offsets[i];
      const int64_t begin = std::max(p_begin, own_begin);
      const int64_t end = std::min(p_begin + p.numel(), own_end);
      if (begin >= end) continue;
      p.init().fill(master + (begin - own_begin), static_cast<uint64_t>(begin - p_begin),
                    static_cast<size_t>(end - begin), config.seed, p.name());
      local.segments.push_back({begin - own_begin, end - own_begin, p.decay()});
    }
    if (stage_init) u.master.copy_from(host_master);
    // Gradient buffers that live for the whole run. Stage 0 in fp32 reduces in place: the
    // fp32 gradient is the flat gradient buffer itself (until a second micro-batch needs a
    // separate accumulator, see install_grad_buffer).
    if (policy_.full_grads_persist) {
      u.grad_full = Tensor::zeros({u.padded}, param_dtype, allocator, MemoryCategory::kGradients,
                                  "unit " + u.name + " grads");
    }
    if (reduces_in_place()) {
      u.grad = u.grad_full;
      u.first_grad = u.grad;
    } else {
      u.grad = Tensor::zeros({policy_.master_numel(u.padded, u.shard)}, DType::kF32, allocator,
                             MemoryCategory::kGradients, "unit " + u.name + " fp32 grads");
    }
    if (once_per_step_) {
      if (!policy_.masters_sharded) {
        u.sum = u.grad;  // stage 0 keeps a full fp32 gradient anyway
      } else if (param_dtype == DType::kF32) {
        u.sum = u.grad_full;
        u.first_grad = u.sum;
      }
    }
    if (host_ && master_pager_ && u.grad.is_host_visible()) {
      // Paged masters where the device's memory is host memory (the CPU device): the step reads
      // the gradient shard where it was reduced; a host copy would only add 4 bytes per element
      // of the rank's shard to what the host holds.
      u.host_grad = u.grad;
    } else if (host_) {
      u.host_grad = Tensor::zeros({u.grad.numel()}, DType::kF32, *host_, MemoryCategory::kGradients,
                                  "unit " + u.name + " grads (host)");
    }
    if (host_) {
      // Only the units whose compute copy is uploaded from the host stage their cast there.
      const int64_t staged = fp32_params || u.offloaded ? 0 : u.master.numel();
      if (staged > (host_staging_.defined() ? host_staging_.numel() : 0)) {
        host_staging_ = Tensor();  // the larger one replaces it
        host_staging_ = Tensor::empty({staged}, param_dtype, *host_, MemoryCategory::kParameters,
                                      "compute copy to upload (host)");
      }
    }
    local.master = u.master;
    local.grad = host_ ? u.host_grad : u.grad;
    Unit* unit = &u;
    if (master_pager_) {
      local.pages.pager = master_pager_;
      local.pages.page = u.index;
      local.pages.updated = [this, unit](const Tensor& updated) {
        finish_gathering(*unit);  // a prefetch still reading the compute copy finishes first
        refresh_compute_copy(*unit, updated);
        unit->compute_copy_fresh = true;
      };
    }
    shards_.push_back(local);

    // Compute copies: stage 0 casts the master into the full buffer; stages 1–3 keep the slice
    // in param_dtype (the full buffer's own slot where it persists); those units gather their
    // full parameters once now, in place, the others (stage 3) just in time. In fp32 the master
    // is that copy, unless it lives on the host (offload).
    const bool master_computes = fp32_params && !host_;
    if (u.offloaded) {
      // Parameter offload: the shard in the host tier (in fp32 the host master itself, unless
      // the masters are paged); with kNvme none here, the pager holds it.
      if (config.offload_params == ParamOffload::kHost) {
        u.compute_shard =
            fp32_params && !master_pager_
                ? u.master
                : Tensor::empty({u.shard}, param_dtype, *host_, MemoryCategory::kParameters,
                                "unit " + u.name + " shard (host)");
      }
    } else if (shard_in_full) {
      u.compute_shard = master_computes ? u.master : shard_comm_->rank_slice(u.full);
    } else if (policy_.masters_sharded) {
      u.compute_shard =
          master_computes ? u.master
                          : Tensor::empty({u.shard}, param_dtype, allocator,
                                          MemoryCategory::kParameters, "unit " + u.name + " shard");
    }
    refresh_compute_copy(u, master_values);
    held_master.mark_written();
    if (!u.stays_gathered) {
      u.full_storage->release();
    } else if (policy_.masters_sharded) {
      if (!policy_.full_params_persist) {  // stage 3's units kept gathered count as live
        schedule_->gathered(u.full_bytes);
      }
      gather_->all_gather(u.compute_shard, u.full, u.name)->wait();
    }

    // Boundaries around the unit's forward.
    u.module->add_pre_hook([this, unit](models::Module& module, const Tensor&) {
      if (&module == &root_) {  // a new forward pass
        step_order_->forward(grad_enabled());
        schedule_->begin(Pass::kForward);
        // A forward after a forward, no backward between (inference): its order is checked
        // here, before this pass prefetches along it.
        check_recorded_orders();
      }
      on_unit_start(Pass::kForward, *unit);
      unit->compute_since = collective_spans_.start();
      // Runs last in backward for this unit: its gradients are complete.
      record_boundary("unit_begin " + unit->name, [this, unit](BackwardContext&) {
        if (Trace* trace = collective_spans_.trace()) {
          trace->record(TraceLane::kCompute, "backward " + unit->name, unit->compute_since,
                        SteadyClock::now());
        }
        if (policy_.reduce_timing == ReduceTiming::kPerUnit) on_gradients_complete(*unit);
        start_reductions_across_groups(/*all=*/false);
        release(*unit);
        schedule_->record_reduction(unit->index);
        if (unit->module == &root_) {
          schedule_->complete(Pass::kBackward);
          schedule_->complete(Pass::kReductions);
        }
      });
    });
    if (u.checkpointed) {
      // Runs between the boundaries: in forward after the pre-hook's gather, in backward (the
      // recompute) after the "end" boundary's gather and before the "begin" boundary's release.
      u.module->set_forward_wrapper([unit](const Tensor& input, models::Module::Forward forward) {
        return checkpoint_activations(unit->name, input, std::move(forward));
      });
    }
    u.module->add_post_hook([this, unit](models::Module&, const Tensor&, const Tensor& output) {
      // Runs first in backward for this unit: parameters back, gradient buffer in place.
      record_boundary("unit_end " + unit->name, [this, unit](BackwardContext&) {
        if (unit->module == &root_) {  // a new backward pass
          step_order_->backward();
          schedule_->begin(Pass::kBackward);
        }
        on_unit_start(Pass::kBackward, *unit);
        install_grad_buffer(*unit);
        start_reductions_across_groups(/*all=*/false);
        unit->compute_since = collective_spans_.start();
      });
      if (Trace* trace = collective_spans_.trace()) {
        trace->record(TraceLane::kCompute, "forward " + unit->name, unit->compute_since,
                      SteadyClock::now());
      }
      if (unit->module == &root_) schedule_->complete(Pass::kForward);
      release(*unit);
      return output;
    });
  }
}

ShardedModel::~ShardedModel() {
  for (auto& u : units_) u->module->clear_hooks();
  // No copy may read or write host memory after its owner (the host tier) is gone.
  if (host_copies_ != nullptr) {
    try {
      host_copies_->wait();
    } catch (const std::exception& e) {
      ZS_LOG_ERROR("sharding: host copies at shutdown: {}", e.what());
    }
  }
}

void ShardedModel::mark_checkpointed_units() {
  if (config_.checkpoint_every == 0) return;
  std::vector<bool> encloses(units_.size(), false);
  for (const auto& u : units_) {
    if (u->parent >= 0) encloses[static_cast<size_t>(u->parent)] = true;
  }
  int64_t candidate = 0;
  size_t marked = 0;
  for (size_t i = 0; i < units_.size(); ++i) {
    Unit& u = *units_[i];
    if (u.module == &root_ || encloses[i]) continue;
    u.checkpointed = checkpoints_unit(candidate++, config_.checkpoint_every);
    marked += u.checkpointed ? 1 : 0;
  }
  if (comm_.rank() == 0) {
    ZS_LOG_INFO(
        "sharding: activation checkpointing: {} of {} units recompute their forward in backward "
        "(checkpoint_every {}, counted over the units below the root that enclose no other "
        "unit)",
        marked, units_.size(), config_.checkpoint_every);
  }
  if (marked == 0 && comm_.rank() == 0) {
    ZS_LOG_WARN(
        "sharding: activation checkpointing is on but no unit can be checkpointed (only the root "
        "or units enclosing others are wrapped); add a wrap type for the repeated layers, e.g. "
        "Block");
  }
}

// The units as the schedule's prefetch reads them, live.
class ShardedModel::Units final : public UnitStates {
 public:
  explicit Units(const std::vector<std::unique_ptr<Unit>>& units) : units_(units) {}
  size_t full_bytes(size_t unit) const override { return units_[unit]->full_bytes; }
  bool released(size_t unit) const override { return units_[unit]->full_storage->is_released(); }
  bool gathering(size_t unit) const override { return units_[unit]->gathering != nullptr; }
  size_t count() const override { return units_.size(); }

 private:
  const std::vector<std::unique_ptr<Unit>>& units_;
};

void ShardedModel::on_unit_start(Pass pass, Unit& unit) {
  schedule_->on_unit_start(pass, unit.index);
  gather(unit);
  // Start the next units' all-gathers so they overlap this unit's compute.
  prefetch_ahead(pass);
}

void ShardedModel::prefetch_ahead(Pass pass) {
  const std::optional<size_t> after = schedule_->prefetch_ahead(
      pass, Units(units_), [this](size_t unit) { start_gather(*units_[unit]); });
  // Parameter offload to NVMe: the disk reads the unit after those meanwhile (into a free
  // buffer; never waiting for a write-out here).
  if (param_pager_ && after) {
    const Unit& next = *units_[*after];
    if (next.offloaded) param_pager_->prefetch(next.index, /*may_wait=*/false);
  }
}

void ShardedModel::check_recorded_orders() { schedule_->check_recorded_orders(comm_, allocator_); }

void ShardedModel::start_gather(Unit& u) {
  u.full_storage->materialize();
  schedule_->gathered(u.full_bytes);
  u.gathering = issue_gather(u);
}

comm::WorkPtr ShardedModel::issue_gather(Unit& u) {
  Tensor source = u.compute_shard;
  if (u.offloaded) {
    // The shard comes in from the host or the disk into its own slot, and the gather is in place.
    TraceScope loading(collective_spans_.trace(), TraceLane::kIo, "load offloaded shard");
    source = load_offloaded_shard(u);
  }
  const SteadyClock::time_point issued_at = collective_spans_.start();
  comm::WorkPtr work = gather_->all_gather(source, u.full, u.name);
  collective_spans_.issued(work, TraceLane::kGather, "all_gather", u.name, issued_at);
  return work;
}

Tensor ShardedModel::load_offloaded_shard(Unit& u) {
  Tensor slot = gather_->group().rank_slice(u.full);
  if (!param_pager_) {
    // The host tier's shard changes only after finish_backward waited for the copies (in
    // after_step, or with paged masters in the optimizer's step).
    upload(slot, u.compute_shard.raw_data(), /*then_wait=*/false);
    return slot;
  }
  const std::vector<Tensor> pages = param_pager_->acquire(u.index);
  // The page may be read over by the pager once released: the upload lands first.
  upload(slot, pages.front().raw_data(), /*then_wait=*/true);
  param_pager_->release(u.index, /*dirty=*/false);
  return slot;
}

void ShardedModel::store_offloaded_shard(Unit& u, const Tensor& master) {
  if (!param_pager_) {
    // In fp32 the host shard is the master the optimizer just updated (unless it is paged).
    if (u.compute_shard.storage() != master.storage()) ops::copy_(u.compute_shard, master);
    return;
  }
  const std::vector<Tensor> pages = param_pager_->acquire_for_overwrite(u.index);
  ops::copy_(page_view(pages.front(), {u.shard}, config_.param_dtype, "unit " + u.name + " shard"),
             master);
  param_pager_->release(u.index, /*dirty=*/true);
}

PageAccess ShardedModel::master_of(Unit& u, bool overwrite) {
  if (!master_pager_) return PageAccess(nullptr, 0, {u.master});
  const std::vector<Tensor> page =
      overwrite ? master_pager_->acquire_for_overwrite(u.index) : master_pager_->acquire(u.index);
  return PageAccess(master_pager_, u.index,
                    {page_view(page.front(), u.master.shape(), DType::kF32, u.master.name())});
}

void ShardedModel::gather(Unit& u) {
  if (policy_.full_params_persist) return;
  if (u.full_storage->is_released()) start_gather(u);
  if (u.gathering) {
    // The unit's kernels are enqueued after this: on a device they wait for the all-gather on
    // the GPU, the host goes on (on the CPU this is wait()).
    {
      TraceScope waiting(collective_spans_.trace(), TraceLane::kWait, "wait for all_gather");
      u.gathering->wait_on(compute_stream());
    }
    u.gathering = nullptr;
    collective_spans_.record_completed();
  }
}

void ShardedModel::release(Unit& u) {
  if (u.stays_gathered) return;
  if (u.full_storage->is_released()) return;
  // Never free memory a collective is still writing. On a device, the free below is enqueued on
  // the allocator's stream — the compute stream — after its wait for the all-gather, so the
  // memory is reused only after the collective has written it (see "Devices" in the header).
  if (u.gathering) {
    u.gathering->wait_on(compute_stream());
    u.gathering = nullptr;
  }
  u.full_storage->release();
  schedule_->released(u.full_bytes);
}

void ShardedModel::install_grad_buffer(Unit& u) {
  const DType param_dtype = config_.param_dtype;
  if (!policy_.full_grads_persist) {
    u.grad_full = Tensor::zeros({u.padded}, param_dtype, allocator_, MemoryCategory::kGradients,
                                "unit " + u.name + " grads");
  } else {
    if (u.first_grad.defined()) {
      // Stage 0 in fp32 reduces the step's first micro-batch in place in the fp32 gradient
      // (with kPerStep: sums it there; stage 1 in fp32 with kPerStep sums it in its flat
      // gradient); later micro-batches get a temporary buffer whose (reduced) values are added
      // to it. The previous temporary is dropped first (the parameters' gradients view it), so
      // at most one exists.
      if (accumulating_) {
        for (models::Parameter* p : u.parameters) p->tensor().set_grad(Tensor());
        u.grad_full = Tensor();
        u.grad_full = Tensor::empty({u.padded}, DType::kF32, allocator_, MemoryCategory::kGradients,
                                    "unit " + u.name + " micro-batch grads");
      } else {
        u.grad_full = u.first_grad;
      }
    }
    ops::fill_(u.grad_full, 0.0f);
  }
  const size_t size = dtype_size(param_dtype);
  for (size_t i = 0; i < u.parameters.size(); ++i) {
    models::Parameter* p = u.parameters[i];
    p->tensor().set_grad(Tensor::from_storage(u.grad_full.storage(),
                                              static_cast<size_t>(u.offsets[i]) * size, p->shape(),
                                              param_dtype, "grad of " + p->name()));
  }
}

void ShardedModel::wait_for_reductions(size_t keep) {
  while (reducing_.size() > keep) {
    Unit& oldest = *reducing_.front();
    reducing_.pop_front();
    // Work::complete drops the collective's buffers before wait() returns: the unit's full
    // gradient (or its reduce_dtype copy) is freed here. The reduced shard is accumulated in
    // finish_backward, in unit order as without the limit, so no bit changes.
    // A host wait on purpose, on a device too: the limit bounds memory, and memory held by a
    // Work is freed only when the collective has completed (the device work done), so only a
    // host that waits for the oldest reduction keeps the allocations bounded — FSDP's rate
    // limiter does the same. It waits for a reduction launched L units ago, not for the
    // kernels just enqueued; max_reductions_in_flight = 0 removes it.
    TraceScope waiting(collective_spans_.trace(), TraceLane::kWait,
                       "wait for reduction (max_reductions_in_flight)");
    for (comm::WorkPtr& work : oldest.reductions) work->wait();
    oldest.reductions.clear();
  }
}

void ShardedModel::add_to_sum(Unit& u) {
  if (u.grad_full.storage() == u.sum.storage()) return;  // computed straight into the sum
  if (accumulating_) {
    accumulate_into(u.sum, u.grad_full);
    return;
  }
  if (!u.sum.defined()) {  // stage 1 in mixed precision: the sum is a buffer of its own
    u.sum = Tensor::empty({u.padded}, DType::kF32, allocator_, MemoryCategory::kGradients,
                          "unit " + u.name + " gradient sum");
  }
  ops::copy_(u.sum, u.grad_full);
}

void ShardedModel::on_gradients_complete(Unit& u) {
  if (deferring() || reduces_sum()) add_to_sum(u);
  if (!deferring()) reduce_grads(u);
}

void ShardedModel::reduce_grads(Unit& u) {
  if (!policy_.full_grads_persist && config_.max_reductions_in_flight > 0) {
    // Rate limit: make room for this unit's reduction before its send buffer is allocated, so
    // at most max_reductions_in_flight reductions (this one included) hold full gradients.
    wait_for_reductions(static_cast<size_t>(config_.max_reductions_in_flight) - 1);
  }
  const comm::CollectiveOptions options{{}, "gradients of " + u.name};
  const size_t reductions_before = u.reductions.size();
  // What travels: the flat gradient (kPerStep after deferred micro-batches: the step's fp32
  // sum), cast to reduce_dtype if that differs.
  const bool from_sum = reduces_sum();
  const Tensor& source = from_sum ? u.sum : u.grad_full;
  Tensor send = source;
  if (config_.reduce_dtype != source.dtype()) {
    send = Tensor::empty({u.padded}, config_.reduce_dtype, allocator_, MemoryCategory::kCommBuffers,
                         "unit " + u.name + " grads to reduce");
    ops::copy_(send, source);
  }
  const SteadyClock::time_point issued_at = collective_spans_.start();  // after the cast
  if (policy_.reduce_collective == GradientCollective::kAllReduce) {
    // Over one rank the average is the gradient itself, bit for bit (every backend averages
    // with fp32 accumulation and rounds back to the dtype it was given): nothing to send, and
    // `send` is the result.
    const int ranks = shard_comm_->size();
    switch (ranks > 1 ? config_.ddp_sync : DdpSync::kBucketed) {
      case DdpSync::kBucketed:
        if (ranks > 1) {
          u.reductions.push_back(shard_comm_->all_reduce(send, comm::ReduceOp::kAvg, options));
        }
        break;
      case DdpSync::kPerTensor: {
        // Each parameter's gradient on its own (views of `send`; the Works keep it alive).
        const size_t size = dtype_size(send.dtype());
        for (size_t i = 0; i < u.parameters.size(); ++i) {
          const models::Parameter& p = *u.parameters[i];
          const Tensor gradient = Tensor::from_storage(
              send.storage(), send.offset_bytes() + static_cast<size_t>(u.offsets[i]) * size,
              {p.numel()}, send.dtype(), "gradient of " + p.name());
          u.reductions.push_back(
              shard_comm_->all_reduce(gradient, comm::ReduceOp::kAvg, {{}, gradient.name()}));
        }
        break;
      }
      case DdpSync::kGatherScatter:
        gather_reduce_scatter(u, send, options);
        break;
    }
    u.reduced = send.storage() == u.grad.storage() ? Tensor() : send;
  } else {
    // Straight into the fp32 gradient when it is fp32 and holds nothing yet this step (with
    // kPerStep it never does: this is the step's one reduction).
    const bool direct = config_.reduce_dtype == DType::kF32 && (!accumulating_ || from_sum);
    u.reduced =
        direct ? Tensor()
               : Tensor::empty({u.shard}, config_.reduce_dtype, allocator_,
                               MemoryCategory::kCommBuffers, "unit " + u.name + " reduced grads");
    u.reductions.push_back(shard_comm_->reduce_scatter(send, direct ? u.grad : u.reduced,
                                                       comm::ReduceOp::kAvg, options));
  }
  for (size_t i = reductions_before; i < u.reductions.size(); ++i) {
    const char* collective = "reduce_scatter";
    if (policy_.reduce_collective == GradientCollective::kAllReduce) {
      // Gather-scatter's gather was waited for above; what is left in flight is its scatter.
      collective = config_.ddp_sync == DdpSync::kGatherScatter ? "scatter" : "all_reduce";
    }
    collective_spans_.issued(u.reductions[i], TraceLane::kReduce, collective, u.name, issued_at);
  }
  if (!policy_.full_grads_persist) {
    // The Work keeps the full gradient alive until the reduction has read it.
    for (models::Parameter* p : u.parameters) p->tensor().set_grad(Tensor());
    u.grad_full = Tensor();
    reducing_.push_back(&u);
  }
  u.awaiting_replicas = policy_.all_reduce_across_groups;
}

void ShardedModel::start_reductions_across_groups(bool all) {
  if (!policy_.all_reduce_across_groups) return;
  const auto issue = [&](Unit& u) {
    // The all-reduce reads what the reduce-scatter wrote: on a device the compute stream waits
    // for it (an event that has fired already where test() said so), and the all-reduce is
    // ordered after that stream; on the CPU this is wait(), at once when it completed.
    for (comm::WorkPtr& work : u.reductions) work->wait_on(compute_stream());
    u.awaiting_replicas = false;
    // Average the in-group result over the replicas (equal group sizes, so the mean of the
    // group means is the global mean).
    const Tensor& result = u.reduced.defined() ? u.reduced : u.grad;
    const SteadyClock::time_point issued_at = collective_spans_.start();
    u.across_groups = inter_group_->all_reduce(result, comm::ReduceOp::kAvg,
                                               {{}, "gradients of " + u.name + " across groups"});
    collective_spans_.issued(u.across_groups, TraceLane::kReduce, "all_reduce across groups",
                             u.name, issued_at);
  };
  // The replicas run their own backward, so they must issue these in an order they agreed on:
  // the reductions' order the unit order check compared (whatever order this backward runs
  // in). Early, each as soon as its reduce-scatter completed, stopping at the first that has not.
  if (schedule_->checked(Pass::kReductions)) {
    const std::vector<size_t>& order = schedule_->recorded(Pass::kReductions);
    for (; replica_position_ < order.size(); ++replica_position_) {
      Unit& u = *units_[order[replica_position_]];
      if (u.across_groups) continue;  // a unit that ran twice: issued at its first place
      const bool reduced = u.awaiting_replicas &&
                           std::all_of(u.reductions.begin(), u.reductions.end(),
                                       [](const comm::WorkPtr& work) { return work->test(); });
      if (!reduced && !all) return;
      if (u.awaiting_replicas) issue(u);
    }
  }
  // finish_backward: the rest in unit order (on the step before the check, all of them).
  if (!all) return;
  for (auto& u : units_) {
    if (u->awaiting_replicas) issue(*u);
  }
  replica_position_ = 0;
}

void ShardedModel::gather_reduce_scatter(Unit& u, const Tensor& send,
                                         const comm::CollectiveOptions& options) {
  // Rank 0 receives every rank's gradient into one buffer, slot r = rank r's, and waits for it
  // (the backward stalls here: no overlap, on purpose).
  const int world = shard_comm_->size();
  const bool root = shard_comm_->rank() == 0;
  Tensor gathered;
  if (root) {
    gathered = Tensor::empty({u.padded * world}, send.dtype(), allocator_,
                             MemoryCategory::kCommBuffers, "unit " + u.name + " gathered grads");
  }
  shard_comm_->gather(send, gathered, 0, options)->wait();
  if (root) {
    // The average in rank order with fp32 accumulation, by the same element math the backends'
    // all_reduce uses (comm/reduce.h), into slot 0; then a copy of it into every slot.
    const size_t bytes = send.nbytes();
    char* slots = static_cast<char*>(gathered.raw_data());
    std::vector<const void*> slices(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) slices[static_cast<size_t>(r)] = slots + r * bytes;
    comm::reduce_rank_slices(slots, slices.data(), world, static_cast<size_t>(u.padded),
                             send.dtype(), comm::ReduceOp::kAvg);
    for (int r = 1; r < world; ++r) std::memcpy(slots + r * bytes, slots, bytes);
  }
  // Slot r back to rank r, into the buffer it sent from; finish_backward waits for it.
  u.reductions.push_back(shard_comm_->scatter(gathered, send, 0, options));
}

void ShardedModel::upload(const Tensor& dst, const void* host, bool then_wait) {
  if (host_copies_ == nullptr) {
    dst.copy_from_host(host);
    return;
  }
  host_copies_->upload(dst, host);
  if (then_wait) host_copies_->wait();
}

void ShardedModel::upload_compute_copy(Unit& u, const Tensor& master) {
  const Tensor& target = policy_.masters_sharded ? u.compute_shard : u.full;
  if (config_.param_dtype == DType::kF32) {
    // A host master changes next in the optimizer's step, after finish_backward waited for the
    // copies; a paged master's page goes back to its pager right after this.
    upload(target, master.raw_data(), /*then_wait=*/master_pager_ != nullptr);
    return;
  }
  // Cast on the host (the same cast as on the device path: ops::copy_), then one copy of the
  // compute-dtype bytes (the staging buffer serves the next unit next: the copy lands first).
  const Tensor staged = Tensor::from_storage(host_staging_.storage(), 0, {master.numel()},
                                             config_.param_dtype, "unit " + u.name + " to upload");
  ops::copy_(staged, master);
  upload(target, staged.raw_data(), /*then_wait=*/true);
}

void ShardedModel::refresh_compute_copy(Unit& u) {
  const PageAccess master = master_of(u, /*overwrite=*/false);
  refresh_compute_copy(u, master.tensors().front());
}

void ShardedModel::refresh_compute_copy(Unit& u, const Tensor& master) {
  if (u.offloaded) {
    TraceScope storing(collective_spans_.trace(), TraceLane::kIo, "store offloaded shard");
    store_offloaded_shard(u, master);
    return;
  }
  if (host_) {
    upload_compute_copy(u, master);
    return;
  }
  if (config_.param_dtype == DType::kF32) return;  // the compute copy is the master itself
  if (!policy_.masters_sharded) {
    ops::copy_(u.full, master);
  } else {
    ops::copy_(u.compute_shard, master);
  }
}

void ShardedModel::defer_sync(bool defer) {
  ZS_CHECK(step_order_->phase() != StepOrder::Phase::kBackward,
           "sharding: defer_sync() between a backward and its finish_backward(); call it before "
           "the micro-batch's forward");
  defer_ = defer;
}

void ShardedModel::finish_backward() {
  step_order_->finish_backward(defer_);
  if (policy_.reduce_timing == ReduceTiming::kEndOfBackward) {
    for (auto& u : units_) on_gradients_complete(*u);
  }
  if (deferring()) {  // summed locally (stage 0 in backward, stage 1 above); nothing to wait for
    accumulating_ = true;
    return;
  }
  reducing_.clear();  // every reduction is waited for below
  start_reductions_across_groups(/*all=*/true);
  const comm::StreamRef& stream = compute_stream();
  for (auto& u : units_) {
    // The accumulation below is enqueued on the compute stream: on a device it waits for the
    // reductions on the GPU (a failure aborts the group and reaches the next wait(), at the
    // optimizer's scalar collectives at the latest); on the CPU this is wait().
    {
      TraceScope waiting(
          u->reductions.empty() && !u->across_groups ? nullptr : collective_spans_.trace(),
          TraceLane::kWait, "wait for reductions");
      for (comm::WorkPtr& work : u->reductions) work->wait_on(stream);
      u->reductions.clear();
      if (u->across_groups) {
        u->across_groups->wait_on(stream);
        u->across_groups = nullptr;
      }
    }
    if (u->reduced.defined()) {
      // Accumulate (or, on the step's first micro-batch or kPerStep's one reduction, store) the
      // staged reduced gradient.
      if (accumulating_ && !once_per_step_) {
        accumulate_into(u->grad, u->reduced);
      } else {
        ops::copy_(u->grad, u->reduced);
      }
      u->reduced = Tensor();
    }
    // Offload: this unit's gradient shard to the host, now that it holds the step's sum so far
    // (on a device with host copies: on the copy stream after the accumulation, waited for
    // below; without: a synchronous copy).
    if (host_ && u->host_grad.storage() != u->grad.storage()) {
      if (host_copies_ != nullptr) {
        host_copies_->download(u->grad, u->host_grad.raw_data());  // waited for below
      } else {
        u->grad.copy_to_host(u->host_grad.raw_data());
      }
    }
  }
  // The host reads the gradient shards next (clipping, the optimizer): every download lands
  // first (and with them every upload of the step: they were enqueued before).
  finish_host_copies();
  accumulating_ = true;
  collective_spans_.record_completed();
  // The first backward completed both schedules: agree on them before the next pass uses them.
  check_recorded_orders();
}

void ShardedModel::after_step() {
  step_order_->after_step();
  accumulating_ = false;
  refresh_full_parameters(/*after_optimizer=*/true);
}

void ShardedModel::after_skipped_step() {
  ZS_CHECK(step_order_->phase() != StepOrder::Phase::kStepped,
           "sharding: after_skipped_step() after an optimizer step; the masters changed, so call "
           "after_step()");
  step_order_->after_step();
  accumulating_ = false;
}

void ShardedModel::refresh_full_parameters(bool after_optimizer) {
  // The host bytes of uploads still running (a forward's without a backward: evaluation) are
  // written below.
  finish_host_copies();
  // Stages 1/2 keep full parameters: gather the updated slices. Stage 3 does the same for the
  // units that are gathered now (the small units it keeps gathered); the others are gathered
  // when next used.
  std::vector<comm::WorkPtr> works;
  for (auto& u : units_) {
    finish_gathering(*u);
    if (u->offloaded) continue;  // below
    refresh_from_master(*u, after_optimizer);
    if (policy_.gather_after_step && !u->full_storage->is_released()) {
      works.push_back(issue_gather(*u));
    }
  }
  // Parameter offload: the offloaded shards, last unit first, so that with kNvme the pager's
  // buffers end up holding the first units, which the next forward reads first.
  for (auto it = units_.rbegin(); it != units_.rend(); ++it) {
    Unit& u = **it;
    if (!u.offloaded) continue;
    refresh_from_master(u, after_optimizer);
    if (policy_.gather_after_step && !u.full_storage->is_released()) {  // still gathered
      works.push_back(issue_gather(u));
    }
  }
  // The next forward's kernels wait for the gathers on the device; the host waits here (once
  // per step, after the optimizer) so that errors surface at the step that caused them.
  {
    TraceScope waiting(works.empty() ? nullptr : collective_spans_.trace(), TraceLane::kWait,
                       "wait for after-step all_gathers");
    for (auto& w : works) w->wait();
  }
  collective_spans_.record_completed();
}

void ShardedModel::load_full_parameters(const ParameterFill& fill) {
  // Stage: each unit's owned elements (the master's layout; padding and elements of no
  // parameter keep their current values), filled parameter by parameter through one buffer of
  // the largest parameter's numel. Any error here — the fill, or a workspace allocation over
  // the budget — is held until the ranks have agreed, so no rank is left waiting in a
  // collective the failing rank never issues.
  // On a device the staging is host memory (the fills write host buffers): an untracked host
  // allocator, the masters downloaded into it and uploaded back at the commit.
  CpuAllocator host_allocator(nullptr);
  Allocator& staging = on_device_ ? static_cast<Allocator&>(host_allocator) : allocator_;
  std::vector<Tensor> staged;
  std::exception_ptr error;
  std::string failed_parameter;
  try {
    int64_t largest = 1;
    for (const auto& u : units_) {
      for (models::Parameter* p : u->parameters) largest = std::max(largest, p->numel());
    }
    Tensor buffer = Tensor::empty({largest}, DType::kF32, staging, MemoryCategory::kWorkspace,
                                  "parameter to load");
    float* values = buffer.data<float>();
    for (const auto& u : units_) {
      Tensor stage =
          Tensor::empty({u->master.numel()}, DType::kF32, staging, MemoryCategory::kWorkspace,
                        "unit " + u->name + " loaded master");
      const PageAccess held = master_of(*u, /*overwrite=*/false);
      const Tensor& master = held.tensors().front();
      if (on_device_ && !master.is_host_visible()) {
        stage.copy_from(master.to_vector());
      } else {
        ops::copy_(stage, master);
      }
      float* owned = stage.data<float>();
      const int64_t own_begin = u->own_begin;
      const int64_t own_end = own_begin + u->master.numel();
      for (size_t i = 0; i < u->parameters.size(); ++i) {
        models::Parameter* p = u->parameters[i];
        failed_parameter = p->name();
        std::fill(values, values + p->numel(), 0.0f);
        fill(p->name(), p->shape(), values);
        const int64_t p_begin = u->offsets[i];
        const int64_t begin = std::max(p_begin, own_begin);
        const int64_t end = std::min(p_begin + p->numel(), own_end);
        if (begin < end) {
          std::copy(values + (begin - p_begin), values + (end - p_begin),
                    owned + (begin - own_begin));
        }
      }
      staged.push_back(std::move(stage));
    }
  } catch (...) {
    error = std::current_exception();
    staged.clear();
  }
  // Agree: the lowest failing rank of the world, or the world size if none failed.
  // On the communicator's buffer device (allocator_'s, checked at construction); fill() and
  // item() store and read the same float on the CPU as data<float>() did.
  Tensor verdict = Tensor::empty({1}, DType::kF32, allocator_, MemoryCategory::kCommBuffers,
                                 "load_full_parameters verdict");
  verdict.fill(static_cast<float>(error ? comm_.rank() : comm_.size()));
  comm_
      .all_reduce(verdict, comm::ReduceOp::kMin,
                  {{}, "load_full_parameters: did every fill succeed"})
      ->wait();
  const int failed_rank = static_cast<int>(verdict.item());
  if (error) {
    ZS_LOG_ERROR(
        "load_full_parameters: loading parameter '{}' failed on rank {}; no parameter was "
        "changed on any rank",
        failed_parameter, comm_.rank());
    std::rethrow_exception(error);
  }
  ZS_CHECK(failed_rank == comm_.size(), "load_full_parameters: the fill failed on rank ",
           failed_rank, " (its error says why); no parameter was changed on any rank");
  finish_host_copies();  // uploads may still read the masters
  for (size_t k = 0; k < units_.size(); ++k) {
    PageAccess held = master_of(*units_[k], /*overwrite=*/true);
    const Tensor& master = held.tensors().front();
    if (on_device_ && !master.is_host_visible()) {
      master.copy_from(staged[k].to_vector());
    } else {
      ops::copy_(master, staged[k]);
    }
    held.mark_written();
  }
  staged.clear();
  refresh_full_parameters(/*after_optimizer=*/false);
}

void ShardedModel::visit_full_parameters(const ParameterVisit& visit) {
  std::exception_ptr error;
  for (const auto& u : units_) {
    const PageAccess held = master_of(*u, /*overwrite=*/false);
    Tensor full = held.tensors().front();  // stage 0: the whole flat fp32 master
    if (policy_.masters_sharded) {
      // The collective moves tensors on the communicator's device: an offloaded master goes
      // there first on a GPU (on the CPU device host memory is that device's).
      Tensor source = held.tensors().front();
      if (on_device_ && host_) {
        source = Tensor::empty({u->master.numel()}, DType::kF32, allocator_,
                               MemoryCategory::kCommBuffers, "unit " + u->name + " master");
        source.copy_from_host(held.tensors().front().raw_data());
      }
      full = Tensor::empty({u->padded}, DType::kF32, allocator_, MemoryCategory::kCommBuffers,
                           "unit " + u->name + " gathered masters");
      shard_comm_->all_gather(source, full, {{}, u->name + " masters"})->wait();
    }
    if (error) continue;  // keep issuing the collectives the other ranks issue
    try {
      // On a device, the visit reads a host copy (downloaded on the allocator's stream, after
      // the all-gather: wait() returned).
      std::vector<float> host;
      if (on_device_) host = full.to_vector();
      const float* values = on_device_ ? host.data() : full.data<float>();
      for (size_t i = 0; i < u->parameters.size(); ++i) {
        visit(u->parameters[i]->name(), u->parameters[i]->shape(), values + u->offsets[i]);
      }
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

std::vector<ShardedModel::UnitInfo> ShardedModel::units() const {
  std::vector<UnitInfo> out;
  for (const auto& u : units_) {
    UnitInfo info{u->name,           u->numel, u->padded,      u->shard, u->parameters.size(),
                  u->stays_gathered, {},       u->checkpointed};
    for (size_t i = 0; i < u->parameters.size(); ++i) {
      info.parameters.push_back(
          {u->parameters[i]->name(), u->parameters[i]->shape(), u->offsets[i]});
    }
    out.push_back(std::move(info));
  }
  return out;
}

std::pair<int64_t, int64_t> ShardedModel::master_range(size_t unit, int world_rank) const {
  ZS_CHECK(unit < units_.size(), "master_range: unit ", unit, " of ", units_.size());
  ZS_CHECK(world_rank >= 0 && world_rank < comm_.size(), "master_range: rank ", world_rank,
           " of a world of ", comm_.size());
  const Unit& u = *units_[unit];
  // The shard group of a hybrid run is the rank's group of consecutive ranks (the split in the
  // constructor), where its rank is world_rank % group size.
  const int group_rank = policy_.hybrid ? world_rank % config_.hybrid_group : world_rank;
  const int64_t begin = policy_.master_begin(group_rank, u.shard);
  return {begin, begin + policy_.master_numel(u.padded, u.shard)};
}

void ShardedModel::finish_gathering(Unit& u) {
  if (!u.gathering) return;
  // Never write memory a collective is still writing (or reading).
  u.gathering->wait_on(compute_stream());
  u.gathering = nullptr;
}

void ShardedModel::refresh_from_masters() { refresh_full_parameters(/*after_optimizer=*/false); }

void ShardedModel::refresh_from_master(Unit& u, bool after_optimizer) {
  // Paged masters: the optimizer's step already refreshed the compute copy from the page it
  // updated; any other caller (a restore, a load) wrote the master itself, so it is read again.
  if (!(after_optimizer && u.compute_copy_fresh)) refresh_compute_copy(u);
  u.compute_copy_fresh = false;
}

}  // namespace zs::sharding
