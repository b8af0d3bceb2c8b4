// The training engine: the world, the data and one RankRun per rank, which wires the device,
// the sharded model, the optimizer and the data, and runs the loop (train/loop.h) with the
// Trainer's step and the parts that evaluate, log, sample, export and report; run_training
// wraps the world in the restart loop of train/restarts.h (--max-restarts).
#include "train/engine.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_weights.h"
#include "checkpoint/gpt2_weights.h"
#include "comm/factory.h"
#include "comm/local/local_backend.h"
#include "data/loader.h"
#include "models/gpt.h"
#include "offload/host_pool.h"
#include "offload/nvme_pager.h"
#include "ops/cpu/gemm.h"
#include "optim/adamw.h"
#include "optim/loss_scaler.h"
#include "optim/sgd.h"
#include "runtime/allocator.h"
#include "runtime/autograd.h"
#include "runtime/error.h"
#include "runtime/logging.h"
#include "runtime/trace.h"
#include "sharding/sharded_model.h"
#include "sharding/unit_plan.h"
#include "train/checkpoints.h"
#include "train/compute_peak.h"
#include "train/device.h"
#include "train/evaluator.h"
#include "train/generation.h"
#include "train/loop.h"
#include "train/memory_model.h"
#include "train/rank_context.h"
#include "train/report.h"
#include "train/restarts.h"
#include "train/run_report.h"
#include "train/step_log.h"
#include "train/stop.h"
#include "train/tasks.h"
#include "train/trainer.h"
#include "train/weight_export.h"

namespace zs::train {
namespace {

std::unique_ptr<optim::Optimizer> make_optimizer(const OptimizerSettings& settings,
                                                 std::vector<optim::ShardView>& views,
                                                 TensorPager* pager) {
  if (settings.choice == OptimizerChoice::kSgd) {
    return std::make_unique<optim::Sgd>(views, settings.sgd, pager);
  }
  return std::make_unique<optim::AdamW>(views, settings.adamw, pager);
}

// Compute threads of one rank: --threads, else the cores shared by the process's ranks.
int compute_threads(const TrainConfig& config, int local_ranks) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return config.threads > 0 ? config.threads : std::max(1, cores / local_ranks);
}

// --trace: checkpoint restores, saves and publishing (where a background save's writes are
// waited for) as I/O spans around the checkpointer the run would use anyway.
class TracedCheckpointer final : public Checkpointer {
 public:
  TracedCheckpointer(std::unique_ptr<Checkpointer> inner, Trace& trace)
      : inner_(std::move(inner)), trace_(trace) {}
  int64_t restore() override {
    TraceScope traced(&trace_, TraceLane::kIo, "checkpoint restore");
    return inner_->restore();
  }
  bool due(int64_t completed_steps, bool last) const override {
    return inner_->due(completed_steps, last);
  }
  void save(int64_t completed_steps) override {
    TraceScope traced(&trace_, TraceLane::kIo, "checkpoint save");
    inner_->save(completed_steps);
  }
  void publish(bool wait) override {
    TraceScope traced(&trace_, TraceLane::kIo,
                      wait ? "checkpoint publish (wait)" : "checkpoint publish");
    inner_->publish(wait);
  }

 private:
  std::unique_ptr<Checkpointer> inner_;
  Trace& trace_;
};

// ---- One rank's run --------------------------------------------------------------------------

// Owns everything one rank's run is made of, wires it (device, communicator, sharded model,
// optimizer, data) and hands the loop its parts; the step itself is the Trainer's.
class RankRun final : private StepRunner {
 public:
  // `tracker`: the rank's device memory (see rank_tracker_name), made before the world so that the
  // nccl backend's scratch is charged to it too; it outlives the run.
  RankRun(const TrainConfig& config, const models::GptConfig& model_config, const TaskData& data,
          int64_t seq, comm::Communicator& comm, MemoryTracker& tracker, int local_ranks,
          const PeakMeasurement& cpu_peak, int attempt, TrainResult* result)
      : c_(config),
        data_(data),
        comm_(comm),
        lead_(comm.rank() == 0),
        tracker_(tracker),
        host_tracker_("rank " + std::to_string(comm.rank()) + " host"),
        allocator_(config.device == "cuda" ? &host_tracker_ : &tracker_),
        device_(config.device == "cuda" ? make_cuda_device(comm.buffer_device().index, &tracker_)
                                        : nullptr),
        compute_(device_ ? device_->allocator() : allocator_),
        task_(make_task(data, model_config, seq)),
        result_(result),
        cpu_peak_(cpu_peak),
        seq_(seq),
        attempt_(attempt),
        plan_(translate(config, comm.rank(), comm.size())) {
    try {
      set_up(model_config, local_ranks);
    } catch (const std::exception& e) {
      abort_group(e);
      throw;
    }
  }

  // A step that failed part-way leaves its forward on this thread's tape, holding tensors of
  // this rank's allocator: drop it before the allocator goes.
  ~RankRun() override { current_tape().clear(); }
  RankRun(const RankRun&) = delete;
  RankRun& operator=(const RankRun&) = delete;

  void run() {
    try {
      run_loop();
    } catch (const std::exception& e) {
      abort_group(e);
      // The trace of a failed run is worth having (what ran up to the failure); a failure to
      // write it must not hide the run's error.
      try {
        write_trace();
      } catch (const std::exception& write_error) {
        ZS_LOG_ERROR("{}", write_error.what());
      }
      throw;
    }
    write_trace();
  }

 private:
  // Fails pending collectives at once instead of at their timeout, before the members go
  // (release_comm_): every rank's with the local backend (and run_gpu_ranks aborts the other
  // threads' nccl groups); with mpi this is MPI_Abort, which ends the job — as the MPI world
  // would when this process leaves on the exception, but with the reason logged. An nccl abort
  // is this rank's only (NCCL does not tell the peers); under mpirun the job ends when this
  // process leaves, through its MPI bootstrap.
  void abort_group(const std::exception& e) { comm_.abort(e.what()); }

  // --trace: this rank's file, and on rank 0 the exposed communication per step from its spans
  // (the first step is left out of the mean when there are more: it records the unit order and
  // does not prefetch).
  void write_trace() {
    if (!trace_) return;
    std::string path = rank_path(c_.trace, comm_.rank(), comm_.size(), "");
    // A restarted attempt (--max-restarts) writes a file of its own: the failed attempt's spans
    // are what shows why it failed.
    if (attempt_ > 0) path = tagged_path(path, ".attempt" + std::to_string(attempt_), "");
    trace_->write(path);
    if (!lead_) return;
    const std::vector<StepExposure> steps = exposed_communication(trace_->spans());
    const size_t first = steps.size() > 1 ? 1 : 0;
    double step_ms = 0, communication_ms = 0, exposed_ms = 0;
    for (size_t i = first; i < steps.size(); ++i) {
      step_ms += steps[i].step_us / 1e3;
      communication_ms += steps[i].communication_us / 1e3;
      exposed_ms += steps[i].exposed_us / 1e3;
    }
    const double n = static_cast<double>(std::max<size_t>(1, steps.size() - first));
    ZS_LOG_INFO(
        "trace written to {}{}; rank 0 per step ({} step(s){}): {:.2f} ms, communication in "
        "flight {:.2f} ms, of which exposed (not overlapped by compute) {:.2f} ms",
        path, comm_.size() > 1 ? " (one file per rank)" : "", steps.size() - first,
        first ? ", the first left out" : "", step_ms / n, communication_ms / n, exposed_ms / n);
  }

  // One use of the rank's NVMe tier: its swap files (`file`: "optimizer-state", "masters",
  // "parameters") and `buffers` host buffers in the host tier, charged as `category`; `what`
  // names the tensors in errors and labels.
  std::unique_ptr<offload::NvmePager> nvme_pager(const char* file, int buffers, const char* what,
                                                 MemoryCategory category,
                                                 offload::NvmePager::Eviction eviction) const {
    offload::NvmeStoreOptions store;
    store.paths = c_.nvme_paths;
    char name[64];
    // The process id too: two jobs sharing --nvme-path must not truncate each other's files.
    std::snprintf(name, sizeof(name), "zs-%d-rank-%05d-%s", static_cast<int>(::getpid()),
                  comm_.rank(), file);
    store.name = name;
    store.direct = c_.nvme_direct;
    return std::make_unique<offload::NvmePager>(store, host_tier_->allocator(), buffers,
                                                *c_.file_system, what, category, eviction);
  }

  void set_up(const models::GptConfig& model_config, int local_ranks) {
    ops::cpu::set_intra_op_threads(compute_threads(c_, local_ranks));
    tracker_.set_budget(c_.memory_budget);
    if (device_) {
      ZS_CHECK(comm_.buffer_device() == device_->device(),
               "--device cuda: the communicator moves tensors on ", comm_.buffer_device().str(),
               ", not on the rank's ", device_->device().str());
      // Collectives follow the kernels enqueued before them (sharding/sharded_model.h).
      comm_.set_compute_stream(device_->stream());
      release_comm_.detach_stream = true;
      if (lead_)
        ZS_LOG_INFO("computing on {} (one per rank), nccl backend", device_->device().str());
    }
    if (plan_.offload_optimizer) {
      offload::HostPoolOptions host;
      host.budget = c_.host_memory_budget;
      host.device = device_ ? device_->device() : Device::cpu();
      host_tier_ = std::make_unique<offload::HostPool>(
          "rank " + std::to_string(comm_.rank()) + " host tier", host);
    }
    if (plan_.optimizer_state_on_nvme) {
      // The masters go with the optimizer state (ZeRO-Infinity): a swap file of their own, read
      // beside the state in the optimizer's step (sharding/sharded_model.h, "Paged masters").
      master_pager_ =
          nvme_pager("masters", c_.nvme_buffer_count, "master weights",
                     MemoryCategory::kMasterWeights, offload::NvmePager::Eviction::kSweeps);
    }
    if (plan_.params_on_nvme) {
      param_pager_ =
          nvme_pager("parameters", c_.param_buffer_count, "parameter shards",
                     MemoryCategory::kParameters, offload::NvmePager::Eviction::kLeastRecentlyUsed);
    }
    sharded_ = std::make_unique<sharding::ShardedModel>(
        task_->model(), comm_, compute_, plan_.sharding,
        host_tier_ ? &host_tier_->allocator() : nullptr, param_pager_.get(), master_pager_.get());
    // Offload on a GPU: the gradient downloads and the uploads run on the rank's copy stream.
    if (device_ && host_tier_) sharded_->set_host_copies(&device_->host_copies());
    if (param_pager_ && lead_) ZS_LOG_INFO("parameter shards on {}", param_pager_->describe());
    if (!c_.trace.empty()) {
      trace_ = std::make_unique<Trace>(comm_.rank());
      sharded_->set_trace(trace_.get());
    }
    if (!c_.init_from.empty() && std::filesystem::is_directory(c_.init_from)) {
      // A sharded checkpoint's weights only (fine-tuning): no optimizer state, step or data
      // position carries over.
      checkpoint::CheckpointWeights weights(c_.init_from);
      sharded_->load_full_parameters([&](const std::string& name, const Shape& shape, float* dst) {
        weights.fill(name, shape, dst);
      });
      if (lead_) {
        ZS_LOG_INFO("initialized from the weights of checkpoint {} (step {})", weights.dir(),
                    weights.completed_steps());
      }
    } else if (!c_.init_from.empty()) {
      const checkpoint::Gpt2WeightSource source(c_.init_from, model_config);
      sharded_->load_full_parameters([&](const std::string& name, const Shape& shape, float* dst) {
        source.fill(name, shape, dst);
      });
      if (lead_) ZS_LOG_INFO("initialized from {}", c_.init_from);
    }
    views_ = sharded_->local_shards();
    if (plan_.optimizer_state_on_nvme) {
      // The step updates the units in sweeps, up and down (offload/nvme_pager.h, Eviction).
      state_pager_ =
          nvme_pager("optimizer-state", c_.nvme_buffer_count, "optimizer state",
                     MemoryCategory::kOptimizerState, offload::NvmePager::Eviction::kSweeps);
    }
    optimizer_ = make_optimizer(plan_.optimizer, views_, state_pager_.get());
    if (state_pager_ && lead_) {
      ZS_LOG_INFO("optimizer state on {}; master weights on {}", state_pager_->describe(),
                  master_pager_->describe());
    }
    if (plan_.loss_scaling.dynamic) {
      scaler_ = std::make_unique<optim::DynamicLossScaler>(plan_.loss_scaling.scaler);
    }
    sampler_ = task_->sampler(plan_.sampler);
    steps_ = total_steps(c_, sampler_->steps_per_epoch());
    schedule_ = std::make_unique<optim::LrSchedule>(plan_.schedule.make(steps_));
    TrainState state;
    state.model = sharded_.get();
    state.optimizer = optimizer_.get();
    state.scaler = scaler_.get();
    state.schedule = schedule_.get();
    state.sampler = sampler_.get();
    state.micro_batches_per_step = plan_.micro_batches_per_step;
    state.seed = c_.seed;
    state.config = &c_;
    state.gpt = task_->gpt() ? &task_->gpt()->config() : nullptr;
    state.comm = &comm_;
    state.compute = &compute_;
    state.result = result_;
    checkpointer_ = make_checkpointer(c_, state);
    // (Without checkpoints there is no I/O to show: no empty publish span every step.)
    if (trace_ && !(c_.checkpoint_dir.empty() && c_.resume.empty())) {
      checkpointer_ = std::make_unique<TracedCheckpointer>(std::move(checkpointer_), *trace_);
    }
    rank_ = std::make_unique<RankContext>(RankContext{
        c_, data_, comm_, lead_, tracker_, allocator_, compute_, device_.get(), *task_, *sharded_,
        plan_.sharding, seq_, *result_, host_tier_ ? &host_tier_->tracker() : nullptr,
        state_pager_.get(), param_pager_.get(), master_pager_.get()});
  }

  // StepRunner: the data from `first_step` on, and the Trainer over it.
  void start(int64_t first_step) override {
    data::LoaderOptions lo;
    lo.start = data_position(*sampler_, first_step, plan_.micro_batches_per_step);
    lo.num_batches = (steps_ - first_step) * plan_.micro_batches_per_step;
    loader_ = std::make_unique<data::BatchLoader>(*sampler_, allocator_, lo);
    StepOptions options;
    options.micro_batches = plan_.micro_batches_per_step;
    options.precision = c_.precision;
    options.clip = c_.clip;
    options.static_scale = plan_.loss_scaling.static_scale;
    options.trace = trace_.get();
    trainer_ = std::make_unique<Trainer>(
        TrainerRefs{*sharded_, views_, *optimizer_, scaler_.get(), *schedule_, *loader_, *task_,
                    comm_, compute_, device_.get()},
        options);
  }

  StepRecord step(int64_t step) override { return trainer_->step(step); }

  // What the lead rank's MFU is against: on the CPU the GEMM rate measured at start, measured
  // again over the run; on a GPU its published dense peak for the run's dtype, or, for a device
  // not in that table, a GEMM in that dtype measured here.
  ComputePeak compute_peak() {
    if (!device_) {
      return cpu_peak_.probe
                 ? ComputePeak::measured(cpu_peak_.flops, *cpu_peak_.probe, cpu_peak_.seconds)
                 : ComputePeak();
    }
    const std::string name = device_->name();
    std::string model;
    const double published = published_gpu_peak(name, c_.precision, &model);
    if (published > 0) {
      return ComputePeak::published(published, "the " + model + "'s dense " +
                                                   dtype_name(c_.precision) +
                                                   " peak, published; the device: " + name);
    }
    // Measured once, before the first step: its ~24 MiB (fp32: 48) come and go before training,
    // and the loop never stops for it.
    const MatmulProbe probe(device_->allocator(), c_.precision, 2048);
    return ComputePeak::published(probe.measure(), probe.describe() + ", once before training; " +
                                                       name +
                                                       " is not in the table of published "
                                                       "peaks");
  }

  void run_loop() {
    models::Gpt* gpt = task_->gpt();
    const double flops_per_token =
        gpt ? model_flops_per_token(task_->model().num_parameters(), gpt->config().n_layer, seq_,
                                    gpt->config().width)
            : 6.0 * static_cast<double>(task_->model().num_parameters());
    Evaluator evaluator(*rank_);
    TextGeneration generation(*rank_);
    WeightExport weights(*rank_);
    StepLog log(*rank_, lead_ ? compute_peak() : ComputePeak(), flops_per_token);
    RunReport report(*rank_);
    InjectedFaults faults(c_, comm_.rank(), attempt_);
    StopRule stop(c_, comm_, compute_);
    // The order at each point: evaluation, sample and export before the end-of-run tables.
    TrainLoop loop(steps_, c_.eval_interval,
                   {&faults, &evaluator, &generation, &weights, &log, &report}, *checkpointer_,
                   &stop);
    const LoopEnd end = loop.run(*this);
    if (end.stopped == StopReason::kNone) return;
    result_->stopped = end.stopped;
    result_->stopped_after = end.completed;
    if (!lead_) return;
    if (c_.checkpoint_dir.empty()) {
      ZS_LOG_WARN("stopped after step {} of {} ({}); no --checkpoint-dir, so nothing was saved",
                  end.completed, steps_, stop.describe(end.stopped));
    } else {
      ZS_LOG_INFO(
          "stopped after step {} of {} ({}); its checkpoint is in {}: the next job continues "
          "with --resume auto",
          end.completed, steps_, stop.describe(end.stopped), c_.checkpoint_dir);
    }
  }

  const TrainConfig& c_;
  const TaskData& data_;
  comm::Communicator& comm_;
  const bool lead_;
  MemoryTracker& tracker_;      // the rank's device: the CPU, or its GPU
  MemoryTracker host_tracker_;  // --device cuda: the host memory of batches (not reported)
  CpuAllocator allocator_;      // host memory: everything on the CPU; batches with --device cuda
  // --device cuda: the rank's GPU (stream, allocator, copies); declared before everything that
  // holds its memory, so it is destroyed after it.
  std::unique_ptr<RankDevice> device_;
  // --offload-optimizer host: the rank's host tier (the masters, the optimizer state and the
  // gradient shard's host copy); declared before what holds its memory.
  std::unique_ptr<offload::HostPool> host_tier_;
  // --offload-optimizer nvme: the optimizer state's swap files and host buffers (in the host
  // tier above); the optimizer below uses it.
  std::unique_ptr<offload::NvmePager> state_pager_;
  // --offload-param nvme: stage 3's parameter shards' swap files and host buffers (host tier);
  // the ShardedModel below uses it.
  std::unique_ptr<offload::NvmePager> param_pager_;
  // --offload-optimizer nvme: the fp32 masters' swap files and host buffers (host tier); the
  // ShardedModel and the optimizer below use it.
  std::unique_ptr<offload::NvmePager> master_pager_;
  // The communicator outlives the rank: after everything declared below is gone (the
  // ShardedModel and its sub-communicators) and before the memory above, also when the
  // constructor or run() throws, it is flushed — collectives still queued or in flight (a
  // prefetch, a gradient reduction) complete or fail and drop their tensors while their
  // allocator, stream and tracker exist — and the rank's stream is detached from it. (run()
  // aborts the group on an error first, so nothing waits for ranks that will not come.)
  struct ReleaseComm {
    comm::Communicator* comm;
    bool detach_stream = false;
    ~ReleaseComm() {
      // Leaving on an exception that did not abort yet (a member's initializer): nothing may
      // wait for ranks that will not come.
      if (std::uncaught_exceptions() > 0) comm->abort("this rank is leaving on an error");
      comm->flush();
      if (detach_stream) comm->set_compute_stream(comm::StreamRef::host());
    }
  } release_comm_{&comm_};
  Allocator& compute_;  // where the model, the shards and the scalar collectives live
  std::unique_ptr<Task> task_;
  TrainResult* result_;
  // The CPU's GEMM rate measured before the ranks started (train/compute_peak.h).
  const PeakMeasurement cpu_peak_;
  const int64_t seq_;
  const int attempt_;  // 0: the first; k: after the k-th restart (--max-restarts)
  const TrainPlan plan_;
  int64_t steps_ = 0;
  // --trace: the rank's spans; declared before what records into it (the sharded model, the
  // checkpointer, the trainer), so it outlives them.
  std::unique_ptr<Trace> trace_;
  std::unique_ptr<sharding::ShardedModel> sharded_;
  std::vector<optim::ShardView> views_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<optim::DynamicLossScaler> scaler_;
  std::unique_ptr<optim::LrSchedule> schedule_;
  std::unique_ptr<data::BatchSampler> sampler_;
  std::unique_ptr<Checkpointer> checkpointer_;
  std::unique_ptr<RankContext> rank_;
  std::unique_ptr<data::BatchLoader> loader_;
  std::unique_ptr<Trainer> trainer_;
};

// The timeout of every collective of the run (TrainConfig::comm_timeout_s), given to each
// communicator when it is created: --comm-timeout, else ZS_COMM_TIMEOUT_S, else 600 s.
std::chrono::milliseconds comm_timeout(const TrainConfig& config) {
  // A year bounds the conversion to milliseconds (and no collective should wait longer).
  constexpr double kMaxSeconds = 365.0 * 24 * 3600;
  ZS_CHECK(config.comm_timeout_s >= 0 && config.comm_timeout_s <= kMaxSeconds, "--comm-timeout ",
           config.comm_timeout_s,
           ": expected seconds in (0, 31536000], e.g. 300, or leave it out for ZS_COMM_TIMEOUT_S "
           "(default 600)");
  if (config.comm_timeout_s == 0) return comm::default_timeout();
  // At least 1 ms: a positive timeout below a millisecond would otherwise round to none.
  return std::max(std::chrono::milliseconds(1),
                  std::chrono::milliseconds(static_cast<int64_t>(config.comm_timeout_s * 1000)));
}

void run_world(const TrainConfig& config, const models::GptConfig& gpt, const TaskData& data,
               int64_t seq, const std::string& backend, const comm::LaunchInfo& launch,
               const PeakMeasurement& cpu_peak, int attempt, TrainResult& result);
bool rank_threads(const TrainConfig& config, const std::string& backend,
                  const comm::LaunchInfo& launch);

// zs-mem's estimate of the model states per rank for `config` at `stage` (no activations).
MemoryEstimate model_state_estimate(const TrainConfig& c, const std::vector<MemoryUnit>& units,
                                    int world, int stage) {
  return estimate_memory(units, memory_model_config(c, world, stage));
}

// What would fit a budget, from zs-mem's numbers: the stages whose model states fit, and the
// model states of the configured stage. Appended to OutOfMemory errors.
std::string memory_advice(const TrainConfig& c, const std::vector<MemoryUnit>& units, int world) {
  std::ostringstream out;
  const MemoryEstimate here = model_state_estimate(c, units, world, c.stage);
  out << "zs-mem's estimate of the model states alone at stage " << c.stage << " on " << world
      << " rank" << (world == 1 ? "" : "s") << ": " << format_bytes(here.peak.total())
      << " per rank (activations come on top);";
  std::string fits;
  for (int stage = 0; stage <= 3; ++stage) {
    if (stage == c.stage) continue;
    const MemoryEstimate e = model_state_estimate(c, units, world, stage);
    if (e.peak.total() < c.memory_budget) {
      fits += (fits.empty() ? " " : ", ") + std::string("stage ") + std::to_string(stage) + " (" +
              format_bytes(e.peak.total()) + ")";
    }
  }
  if (!fits.empty()) {
    out << " within the budget of " << format_bytes(c.memory_budget) << " would fit:" << fits
        << ";";
  }
  out << " otherwise lower --micro-batch, use more ranks or bf16, or raise --memory-budget (see "
         "zs-mem --ranks "
      << world << " --precision " << dtype_name(c.precision) << ")";
  return out.str();
}

}  // namespace

TrainResult run_training(const TrainConfig& config) {
  // From here a SIGTERM or SIGINT stops the run after a step, saved (train/stop.h); the clock of
  // --exit-after-minutes starts here too.
  std::optional<StopSignals> stop_signals;
  if (config.stop_on_signals) stop_signals.emplace();
  // The device first: --device cuda without a usable GPU fails here, before any data is read.
  validate_device(config);
  if (config.device == "cuda") {
    std::string why;
    ZS_CHECK(cuda_devices(&why) > 0, "--device cuda: this process sees no CUDA device (", why,
             "); run on a machine with a GPU and its driver, or train with --device cpu");
  }
  const comm::LaunchInfo launch = comm::detect_launch();
  const std::string backend = comm::resolve_backend(resolved_backend_name(config), launch);
  const int world = rank_threads(config, backend, launch) ? config.ranks : launch.world_size;
  // --ranks makes rank threads (local backend, or GPUs without a launcher); under a launcher the
  // launcher makes the ranks, and a --ranks that disagrees with it would be silently ignored.
  ZS_CHECK(config.ranks == 1 || config.ranks == world, "--ranks ", config.ranks,
           " sets how many rank threads one process runs, but with the ", backend,
           " backend here the ranks are processes (this one: ", launch.describe(),
           "); start one process per rank (mpirun -np ", config.ranks,
           " zs-train ..., or srun), or drop --ranks");
  validate(config, world);
  check_outputs(config, launch.rank == 0);
  // One run per checkpoint directory, held by the first process until the run (restarts
  // included) ends: a second one would delete this one's saves in progress as stale.
  std::optional<checkpoint::DirectoryLock> checkpoint_lock;
  if (!config.checkpoint_dir.empty() && launch.rank == 0) {
    checkpoint_lock.emplace(config.checkpoint_dir);
    if (!checkpoint_lock->previous().empty()) {
      ZS_LOG_INFO("taking over {}/.lock, left by {}, which no longer runs", config.checkpoint_dir,
                  checkpoint_lock->previous());
    }
  }
  (void)comm_timeout(config);  // a bad --comm-timeout fails before any data is read
  check_restart_settings(config, rank_threads(config, backend, launch), launch);
  ZS_CHECK(!has_comm_faults(config, -1) || backend == "local",
           "injected communicator faults wrap the local backend's ranks; this run uses ", backend);
  checkpoint::WeightFormat format;
  ZS_CHECK(config.save_weights.empty() ||
               checkpoint::weight_format_from_extension(config.save_weights, &format),
           "--save-weights '", config.save_weights,
           "': name the file .safetensors (Hugging Face "
           "layout) or .bin (llm.c's checkpoint), so the format is clear before training starts");
  const models::GptConfig gpt = resolve_model_config(config);
  models::Gpt{gpt};  // validates the shape before any data is read
  const int64_t seq = config.seq_len > 0 ? config.seq_len : gpt.context;
  ZS_CHECK(seq >= 1 && seq <= gpt.context, "--seq-len ", seq, " must be in [1, context ",
           gpt.context, "]");
  const std::unique_ptr<TaskData> data = load_task_data(config, gpt, seq);
  ZS_CHECK(data->kind() == TaskKind::kLanguageModel ||
               (config.init_from.empty() && config.save_weights.empty()),
           "--init-from and --save-weights read and write GPT-2 weight files; they do not apply "
           "to classification");
  ZS_CHECK(data->train_items() >= config.micro_batch * world, "the training data has ",
           data->train_items(), " items (windows of ", seq + 1,
           " tokens, or examples), fewer "
           "than one micro-batch of ",
           config.micro_batch, " x ", world, " ranks; use more data or smaller batches");
  // The units the model will have (declaring a model allocates nothing), for zs-mem's numbers.
  const std::unique_ptr<Task> plan = make_task(*data, gpt, seq);
  const sharding::ShardingConfig sharding = translate(config, 0, world).sharding;
  const std::vector<MemoryUnit> units = memory_units(
      sharding::plan_units(plan->model(), sharding.wrap_types, sharding.wrap_min_parameters));

  if (config.memory_budget > 0) {
    // Fail before anything is allocated when the model states alone cannot fit.
    const MemoryEstimate estimate = model_state_estimate(config, units, world, config.stage);
    ZS_CHECK_AS(OutOfMemory, estimate.peak.total() <= config.memory_budget,
                "the per-rank memory budget ", format_bytes(config.memory_budget),
                " is too small for this model: ", memory_advice(config, units, world));
  }
  if (config.offload_optimizer != OffloadTarget::kNone && config.host_memory_budget > 0) {
    // The host tier allocates nothing during a step: zs-mem's figure is its size, exactly.
    const uint64_t host = model_state_estimate(config, units, world, config.stage).host.total();
    ZS_CHECK_AS(OutOfMemory, host <= config.host_memory_budget,
                "out of host memory: the host tier of each rank needs ", format_bytes(host), " (",
                host,
                " bytes: the fp32 masters, the host copy of the gradient shard and the "
                "optimizer state, or with it on NVMe its buffers; with --offload-param also the "
                "parameter shards or their buffers), over --host-memory-budget ",
                format_bytes(config.host_memory_budget),
                "; raise --host-memory-budget if the machine has the RAM, use more ranks (the "
                "host tier shrinks as 1/N), or page the optimizer state to NVMe "
                "(--offload-optimizer nvme); zs-mem --offload ... shows the split");
  }

  // The GEMM rate the log's model FLOP utilization is against on the CPU: first measured
  // before any rank runs, on this thread with one rank's compute threads, then again by the lead
  // rank over the first steps (train/compute_peak.h). A GPU's is its own (RankRun).
  const CpuGemmProbe default_probe(0.02);
  PeakMeasurement cpu_peak;
  if (config.device == "cpu") {
    cpu_peak.probe = config.peak_probe ? config.peak_probe : &default_probe;
    const int local_ranks =
        rank_threads(config, backend, launch) ? config.ranks : launch.local_size;
    const int threads_before = ops::cpu::intra_op_threads();
    ops::cpu::set_intra_op_threads(compute_threads(config, local_ranks));
    const auto probe_start = std::chrono::steady_clock::now();
    cpu_peak.flops = cpu_peak.probe->measure();
    cpu_peak.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - probe_start).count();
    ops::cpu::set_intra_op_threads(threads_before);
  }

  try {
    // Each attempt builds the world anew and tears it down (threads joined, trackers and
    // communicators destroyed) before the next one starts.
    return run_with_restarts(
        config, [&](const TrainConfig& attempt_config, int attempt, TrainResult& out) {
          run_world(attempt_config, gpt, *data, seq, backend, launch, cpu_peak, attempt, out);
        });
  } catch (const OutOfMemory& e) {
    ZS_THROW(OutOfMemory, e.what(), "\n", memory_advice(config, units, world));
  }
}

namespace {

// Whether this process runs config.ranks rank threads: the local backend, or --device cuda
// without a launcher (nccl over a local bootstrap, one GPU per thread). Under mpirun, srun or
// torchrun the ranks are processes (torchrun's form their nccl group over a TCP rendezvous).
bool rank_threads(const TrainConfig& config, const std::string& backend,
                  const comm::LaunchInfo& launch) {
  return backend == "local" || (backend == "nccl" && !launch.by_mpi_launcher() &&
                                launch.world_size == 1 && config.ranks > 1);
}

// "rank 3 cuda:1": the tracker's name in memory errors and reports.
std::string rank_tracker_name(int rank, Device device) {
  return "rank " + std::to_string(rank) + " " + device.str();
}

void run_world(const TrainConfig& config, const models::GptConfig& gpt, const TaskData& data,
               int64_t seq, const std::string& backend, const comm::LaunchInfo& launch,
               const PeakMeasurement& cpu_peak, int attempt, TrainResult& result) {
  if (rank_threads(config, backend, launch)) {
    // One process, config.ranks rank threads: on the CPU (local backend), or rank r on GPU r
    // over an nccl group formed across the threads.
    const bool gpus = backend == "nccl";
    std::vector<std::unique_ptr<MemoryTracker>> trackers;
    std::vector<MemoryTracker*> scratch_trackers;
    for (int r = 0; r < config.ranks; ++r) {
      trackers.push_back(std::make_unique<MemoryTracker>(
          rank_tracker_name(r, gpus ? Device::cuda(r) : Device::cpu())));
      scratch_trackers.push_back(trackers.back().get());
    }
    const auto rank_main = [&](comm::Communicator& comm) {
      TrainResult mine;
      // Rank 0's records reach `result` also when the attempt fails: a restart keeps the steps
      // it does not run again.
      struct KeepRecords {
        TrainResult& mine;
        TrainResult& result;
        bool lead;
        ~KeepRecords() {
          if (lead) result = std::move(mine);
        }
      } keep{mine, result, comm.rank() == 0};
      RankRun(config, gpt, data, seq, comm, *trackers[static_cast<size_t>(comm.rank())],
              config.ranks, cpu_peak, attempt, &mine)
          .run();
    };
    if (gpus) {
      comm::run_gpu_ranks(config.ranks, rank_main, scratch_trackers, comm_timeout(config));
    } else {
      comm::LocalRunOptions options;
      options.timeout = comm_timeout(config);
      if (has_comm_faults(config, attempt)) {
        options.wrap_backend = [&](std::unique_ptr<comm::Backend> backend, int rank) {
          return local_fault_wrapper(config, attempt, std::move(backend), rank);
        };
      }
      comm::run_local_ranks(config.ranks, rank_main, options);
    }
  } else {
    // Named before the world exists: the launcher's rank, and the GPU the nccl world will take.
    const Device device = config.device == "cuda"
                              ? Device::cuda(launch.local_rank % std::max(1, cuda_devices()))
                              : Device::cpu();
    MemoryTracker tracker(rank_tracker_name(launch.rank, device));
    std::unique_ptr<comm::Communicator> comm = comm::make_world_communicator(
        backend, launch, comm_timeout(config), device.is_cuda() ? &tracker : nullptr);
    RankScope scope(comm->rank());
    RankRun(config, gpt, data, seq, *comm, tracker, launch.local_size, cpu_peak, attempt, &result)
        .run();
  }
}

}  // namespace

}  // namespace zs::train
