// TrainConfig: everything a training run is made of — model, data, parallelism, precision,
// optimizer, schedule, reports — with the three ways to set it: defaults here, a DeepSpeed-style
// JSON config (`ds_config.json`), and zs-train's flags (flags win over the JSON file).
//
// The DeepSpeed keys zeroshard understands map onto the same fields (see apply_deepspeed_json);
// keys it knows but has no use for (DeepSpeed's bucket sizes, overlap switches) are reported as
// notes, keys it does not know are an error that lists them, and known features zeroshard does
// not have yet (NVMe offload) are an error that says so. Nothing is ignored silently.
//
// What a TrainConfig means to the layers below it is decided here, once: translate() turns it
// into the ShardingConfig, the optimizer's options, the schedule, the loss scaling and the
// sampler's options, and memory_model_config() gives zs-mem's estimate the same sharding
// settings. The engine, the OutOfMemory advice and zs-mem all go through these functions.
// Everything here is a pure function of its arguments (thread-safe).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/fault_backend.h"
#include "data/sampler.h"
#include "models/gpt.h"
#include "optim/adamw.h"
#include "optim/loss_scaler.h"
#include "optim/schedule.h"
#include "optim/sgd.h"
#include "runtime/dtype.h"
#include "runtime/file_system.h"
#include "sharding/sharded_model.h"
#include "train/memory_model.h"

namespace zs::train {

class PeakProbe;  // train/compute_peak.h

// --eval-batches when not given (0 = every held-out window).
constexpr int64_t kDefaultEvalBatches = 20;
// The longest runs validate() takes: more is a typo or an overflowed number (a clamped
// 99999999999999999999 would train for ever).
constexpr int64_t kMaxSteps = 1'000'000'000'000;
constexpr int64_t kMaxEpochs = 1'000'000;

// A failure injected into one rank of one attempt of a run, for tests of restarts
// (train/restarts.h); zs-train sets one with --inject-fault. The run fails as a rank does: the
// group aborts and the error ends the attempt.
struct InjectedFault {
  // kHang: the rank stops before the step, outside every collective (a rank stuck in computation
  // or I/O), for 2 × the collective timeout + 10 s, then throws CommError: its peers' collectives
  // time out first and name it (under mpirun, their peer probe finds it not answering).
  // kSigterm: the rank's process raises SIGTERM before the step (preemption, train/stop.h): the
  // run stops after that step, saved.
  enum class Kind { kCommError, kIoError, kNumericalError, kInvalidArgument, kHang, kSigterm };
  int rank = 0;
  int attempt = 0;    // 0: the first run; k: after the k-th restart
  int64_t step = -1;  // >= 0: the rank throws `kind` before this (0-based) step
  Kind kind = Kind::kCommError;
  // step < 0, rank threads on the CPU only: the rank's backend is wrapped in a
  // FaultInjectingBackend with these settings (a failed or dropped collective, counted in calls).
  comm::FaultSettings comm;
};

// Where optimizer offload puts the masters and the optimizer state (--offload-optimizer;
// DeepSpeed's zero_optimization.offload_optimizer.device).
// kNvme: the masters in the host tier as with kHost, the optimizer state (AdamW's m and v, SGD's
// momentum) on the NVMe tier (offload/nvme_pager.h), with the host holding only
// nvme_buffer_count buffers of it.
enum class OffloadTarget { kNone, kHost, kNvme };
// "none", "host" (also DeepSpeed's "cpu"), "nvme".
OffloadTarget parse_offload_target(const std::string& text);
const char* offload_target_name(OffloadTarget target);  // "none", "host", "nvme"
// --offload-param's target as the sharding engine names it.
sharding::ParamOffload param_offload(OffloadTarget target);

struct TrainConfig {
  // What to train: "lm" (a GPT on token files or text), "classify" (a BERT-style encoder
  // classifier on TSV files: text<TAB>label), or "auto" (classify when --data ends in .tsv).
  std::string task = "auto";

  // Model. `model` is a preset (models/gpt_presets.h: tiny, gpt2, gpt2-medium, ...); the
  // overrides (> 0) replace the preset's fields; `model_config` is a JSON file with the same
  // field names (n_layer, width, n_head, vocab_size, context).
  std::string model = "tiny";
  std::string model_config;
  int64_t n_layer = -1;
  int64_t width = -1;
  int64_t n_head = -1;
  int64_t vocab_size = -1;
  int64_t context = -1;
  std::string init_from;     // GPT-2 weights to start from (safetensors or llm.c), optional
  std::string save_weights;  // full weights written here at the end (safetensors), optional

  // Data. Either token files (`data`, optional `eval_data`), or raw text files/directories
  // (`text`, encoded byte-level); without eval data the last `eval_fraction` of the training
  // tokens is held out for evaluation.
  std::string data;
  std::string eval_data;
  std::vector<std::string> text;
  double eval_fraction = 0.05;
  int64_t seq_len = 0;  // 0: the model's context

  // Batch: micro_batch sequences per rank per forward; the global batch of a step is
  // micro_batch × grad_accum × world size.
  int64_t micro_batch = 4;
  int64_t grad_accum = 1;
  int64_t global_batch = 0;  // when > 0 (DeepSpeed's train_batch_size): checked against the above

  // Parallelism.
  std::string backend = "local";  // local (ranks as threads), mpi, auto, nccl (with cuda)
  // Where each rank computes: "cpu", or "cuda" = GPU local_rank % (visible GPUs), with the nccl
  // backend ("auto" becomes nccl; local/mpi are refused) and one process per rank.
  std::string device = "cpu";
  int ranks = 1;  // local backend: how many rank threads
  // How long any collective of the run may take before the run fails with CommTimeout naming it
  // and the ranks that did not arrive; also the bound on forming an mpi/nccl world. 0: the
  // environment's ZS_COMM_TIMEOUT_S, else 600 s (comm::default_timeout()).
  double comm_timeout_s = 0;
  int stage = 3;         // ZeRO stage 0 (DDP), 1, 2, 3
  int hybrid_group = 0;  // > 0: hybrid sharding inside groups of this many ranks
  bool prefetch = true;
  size_t max_live_gathered_bytes = 0;  // stage 3 gathered-parameter limit, 0 = none
  // Stage 3 prefetch depth in bytes (sharding::ShardingConfig::prefetch_bytes; --prefetch-bytes,
  // DeepSpeed's stage3_prefetch_bucket_size): 0 = one unit ahead.
  size_t prefetch_bytes = 0;
  size_t keep_gathered_below_bytes = 0;  // stage 3 units smaller than this stay gathered
  int threads = 0;                       // compute threads per rank, 0: cores / local ranks
  // Stages 2/3: gradient reductions left running while backward goes on (memory for overlap;
  // sharding::ShardingConfig::max_reductions_in_flight), 0 = no limit.
  int max_reductions_in_flight = 2;
  // Stage 0: how gradients are synchronized (sharding::DdpSync; zs-train --ddp-sync): bucketed
  // (DDP's overlapped all-reduce per unit), per-tensor (one all-reduce per gradient) or
  // gather-scatter (through rank 0). The two naive ones exist for comparison and teaching; every
  // other stage reduce-scatters and refuses them (validate()).
  sharding::DdpSync ddp_sync = sharding::DdpSync::kBucketed;
  // Activation checkpointing (sharding::ShardingConfig::checkpoint_every; zs-train
  // --activation-checkpointing, --checkpoint-every K, DeepSpeed's activation_checkpointing
  // section): 0 = off, k = every k-th unit below the root (1 = every Block) recomputes its
  // forward in backward. Less activation memory for one more forward of those units; same bits.
  int checkpoint_every = 0;
  // Stages 0/1: whether a step of several micro-batches reduces each micro-batch's gradients
  // (per-micro-batch, the default: the four stages stay bitwise identical, no memory added) or
  // sums them locally and reduces once (per-step: traffic independent of --grad-accum, stage 1
  // keeps a full fp32 sum). sharding::GradSync; zs-train --grad-sync; stages 2/3 refuse
  // per-step (validate()).
  sharding::GradSync grad_sync = sharding::GradSync::kPerMicroBatch;

  // Precision: compute/gather dtype, gradient traffic dtype (default: the compute dtype), and
  // for fp16 the dynamic loss scaler (static_loss_scale > 0 fixes the scale instead).
  DType precision = DType::kF32;
  DType reduce_dtype = DType::kF32;
  bool reduce_dtype_set = false;
  optim::LossScalerOptions loss_scaler;
  float static_loss_scale = 0;

  // Optimizer and schedule.
  std::string optimizer = "adamw";  // adamw, sgd
  float lr = 1e-3f;
  float min_lr = -1;  // < 0: lr / 10
  int64_t warmup_steps = 0;
  optim::LrDecay decay = optim::LrDecay::kCosine;
  float weight_decay = 0.1f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float momentum = 0.9f;  // sgd
  bool nesterov = false;  // sgd
  float clip = 1.0f;      // global grad-norm clip; 0: off (the norm is still reported)

  // Run.
  int64_t steps = 100;
  int64_t epochs = 0;  // > 0: run this many passes over the data instead of `steps`
  // Planned exits (train/stop.h; need checkpoint_dir): save a checkpoint and end the run with
  // exit status 0 after this process has run exit_after_steps steps, or after the first step
  // that ends exit_after_minutes after the run started (0: off).
  int64_t exit_after_steps = 0;
  double exit_after_minutes = 0;
  // SIGTERM / SIGINT during the run: finish the step, save, stop (train/stop.h). Off: the
  // signals keep the process's own handling.
  bool stop_on_signals = true;
  int64_t eval_interval = 0;  // 0: evaluate at the end only
  // Evaluation batches per rank (micro_batch rows each); 0: the whole held-out set. Bounded by
  // default so that a short run on a large held-out split does not spend most of its time
  // scoring it.
  int64_t eval_batches = kDefaultEvalBatches;
  // Rows per evaluation forward (empty: micro_batch). With several sizes each evaluation point
  // scores the held-out set once per size, in order, and records each (EvalRecord::batch): how
  // evaluation time depends on its batch (zs-study scaling). eval_batches counts batches of each.
  std::vector<int64_t> eval_micro_batches;
  int64_t log_interval = 10;
  uint64_t seed = 1234;

  // Memory and reports.
  size_t memory_budget = 0;  // per rank, bytes; 0: unlimited
  // Optimizer offload (ZeRO-Offload, stages 1–3): with kHost the fp32 masters, the optimizer
  // state and the host copy of the gradient shard live in the rank's host tier
  // (offload/host_pool.h), whose bytes are capped by host_memory_budget (per rank; 0: unlimited).
  OffloadTarget offload_optimizer = OffloadTarget::kNone;
  size_t host_memory_budget = 0;
  // --offload-optimizer nvme: the directories of the swap files (one file per rank in each;
  // several stripe, as drives without RAID), the host buffers of optimizer state (DeepSpeed's
  // offload_optimizer.buffer_count; 3 overlap the read of the next unit, the update and the write
  // of the last), and O_DIRECT (off only for filesystems that refuse it).
  std::vector<std::string> nvme_paths;
  int nvme_buffer_count = 4;
  bool nvme_direct = true;
  // Parameter offload (ZeRO-Infinity's offload_param, stage 3 with optimizer offload): the
  // parameter shards of the units released after use live in the host tier (kHost) or on the
  // NVMe tier under nvme_paths (kNvme) with param_buffer_count host buffers of one unit's shard
  // (DeepSpeed's offload_param.buffer_count; 2 let the read of the next unit overlap).
  OffloadTarget offload_param = OffloadTarget::kNone;
  int param_buffer_count = 4;
  std::string profile_memory;  // FILE: per-rank JSON timeline + SVG chart of one step
  // FILE: each rank's Chrome/Perfetto trace (runtime/trace.h); FILE.rank<r> before the
  // extension when the world has more than one rank. Empty: no tracing.
  std::string trace;
  std::string report_json;    // FILE: the run's figures (losses, evals, memory, traffic)
  int64_t sample_tokens = 0;  // > 0: greedy sample of this many tokens at the end (rank 0)
  std::string sample_prompt = "The ";
  float sample_temperature = 0.8f;  // 0: greedy; else softmax(logits / T) over the top 40

  bool progress = true;  // a progress line when stdout is a terminal

  // Sharded checkpoints (train/checkpoints.h): saved into checkpoint_dir every
  // checkpoint_interval steps (0: only at the end of the run) and at the end, keeping the newest
  // keep_checkpoints; resume: "" starts fresh, "auto" loads the newest checkpoint in
  // checkpoint_dir that verifies (fresh when there is none), anything else is the step
  // directory to load.
  std::string checkpoint_dir;
  int64_t checkpoint_interval = 0;
  int keep_checkpoints = 3;
  std::string resume;
  // Saves snapshot each rank's file into a host buffer of at most checkpoint_buffer bytes and
  // write it in the background (checkpoint_async; false: the loop waits for the write). 1 GiB
  // holds a whole rank file of up to ~89M parameters per rank with AdamW (12 bytes each: GPT-2
  // 124M on 2 ranks), so such saves stall only for the copy, while 8 local ranks hold at most
  // 8 GiB of host memory; a larger file streams through it.
  bool checkpoint_async = true;
  size_t checkpoint_buffer = size_t{1} << 30;
  // The file layer checkpoints are saved and loaded through, and the NVMe tier's swap files
  // are made and moved through (runtime/file_system.h): the POSIX one; a test passes a fault
  // wrapper (runtime/fault_file_system.h). Not owned; it must outlive the run.
  const FileSystem* file_system = &posix_file_system();
  // What the log's MFU on the CPU is measured through (train/compute_peak.h): null for the
  // SGEMM probe; a test passes a slow one. Not owned; it must outlive the run.
  const PeakProbe* peak_probe = nullptr;

  // Restarts after a failure (train/restarts.h): with rank threads, a failed attempt is run
  // again from the newest checkpoint in checkpoint_dir, up to max_restarts times, when a restart
  // can cure its error. Under mpirun/srun scripts/zs-launch restarts the job instead.
  // injected_faults: tests only (and zs-train's test flag --inject-fault); empty in real runs.
  int max_restarts = 0;
  std::vector<InjectedFault> injected_faults;
};

// Throws InvalidArgument naming the field, its value and what would be valid. `world` is the
// number of ranks the run will have (for divisibility checks). Reads nothing and writes nothing.
void validate(const TrainConfig& config, int world);
// Every output of the run can be written (below), so a run does not train and then fail to
// write its result; before the first step, on every process (`lead`: the one that writes the
// weights).
void check_outputs(const TrainConfig& config, bool lead);
// An output file `path` given by `flag` (empty: none) can be written: its directory exists, a
// file can be created there, and the path is not a directory. InvalidArgument otherwise, saying
// where else to write the `what` ("trace", "weights").
void check_output_file(const std::string& flag, const std::string& path, const std::string& what);
// An output directory (made if missing, as --checkpoint-dir is) can be: the path is not a file,
// and files can be created in it or in its nearest existing ancestor.
void check_output_directory(const std::string& flag, const std::string& path);
// The device and backend alone (part of validate): cpu or cuda; cuda needs nccl or auto; nccl
// needs cuda.
void validate_device(const TrainConfig& config);
// The backend to form the world with: "nccl" for --device cuda with --backend auto, else
// config.backend.
std::string resolved_backend_name(const TrainConfig& config);

// "1024", "64KiB", "16MiB", "1.5GiB", "2GB" (powers of 1024 and 1000 as written), "0" → bytes.
size_t parse_bytes(const std::string& text);
// "fp32"/"float32", "fp16"/"float16"/"half", "bf16"/"bfloat16".
DType parse_precision(const std::string& text);
// "bucketed", "per-tensor", "gather-scatter" (or with '_' as ddp_sync_name spells them).
sharding::DdpSync parse_ddp_sync(const std::string& text);
// The flag's spelling of a sync: "bucketed", "per-tensor", "gather-scatter".
std::string ddp_sync_flag(sharding::DdpSync sync);
// "per-micro-batch", "per-step" (or with '_' as grad_sync_name spells them).
sharding::GradSync parse_grad_sync(const std::string& text);
// The flag's spelling: "per-micro-batch", "per-step".
std::string grad_sync_flag(sharding::GradSync sync);

// Applies a DeepSpeed JSON config (the text of ds_config.json) to `config`. Notes for keys that
// were understood but have no effect are appended to `notes`. Throws InvalidArgument for
// malformed JSON, unknown keys (all of them listed, with their JSON paths), values of the wrong
// type, and features zeroshard does not have. `source` names the file in messages.
void apply_deepspeed_json(const std::string& json_text, const std::string& source,
                          TrainConfig& config, std::vector<std::string>* notes);

// The run's configuration, one line per group, for the log.
std::string describe(const TrainConfig& config);

// The model's shape: the preset (or, with init_from, the weight file's shape), then the
// --model-config JSON file's keys (n_layer, width, n_head, vocab_size, context), then the
// override fields. Throws IoError for an unreadable file and InvalidArgument for malformed JSON,
// unknown keys or non-integer values, naming the file and the key.
models::GptConfig resolve_model_config(const TrainConfig& config);
// resolve_model_config's JSON step alone: applies `json_text`'s keys to `shape`; `source` names
// the file in messages.
void apply_model_config_json(const std::string& json_text, const std::string& source,
                             models::GptConfig& shape);

// ---- What the configuration means to the layers below (one translation, used everywhere).

enum class OptimizerChoice { kAdamW, kSgd };

struct OptimizerSettings {
  OptimizerChoice choice = OptimizerChoice::kAdamW;
  optim::AdamWOptions adamw;  // used when choice == kAdamW
  optim::SgdOptions sgd;      // used when choice == kSgd
};

// The learning-rate schedule but for its length, which depends on the data (epochs).
struct ScheduleSettings {
  optim::LrDecay decay = optim::LrDecay::kCosine;
  float peak_lr = 1e-3f;
  float min_lr = 1e-4f;
  int64_t warmup_steps = 0;
  // The schedule of a run of `steps` optimizer steps (decays over max(steps, warmup)).
  optim::LrSchedule make(int64_t steps) const;
};

// The loss scale: fp16 without a static scale has a dynamic scaler; otherwise the scale is the
// static one (static_loss_scale > 0) or 1.
struct LossScaling {
  bool dynamic = false;
  optim::LossScalerOptions scaler;  // when dynamic
  float static_scale = 1;           // when not dynamic
};

struct TrainPlan {
  sharding::ShardingConfig sharding;
  OptimizerSettings optimizer;
  ScheduleSettings schedule;
  LossScaling loss_scaling;
  data::SamplerOptions sampler;  // this rank's part of each micro-batch's global batch
  int64_t micro_batches_per_step = 1;
  // The masters and the optimizer state live in the rank's host tier (ShardedModel's
  // optimizer_host).
  bool offload_optimizer = false;
  // ... and the optimizer state is paged onto the NVMe tier.
  bool optimizer_state_on_nvme = false;
  // Stage 3's parameter shards are paged onto the NVMe tier (sharding.offload_params kNvme).
  bool params_on_nvme = false;
};

// The plan of rank `rank` of `world` ranks. A pure function of its arguments.
TrainPlan translate(const TrainConfig& config, int rank, int world);

// Optimizer steps of the run: config.steps, or with epochs > 0 that many passes over data of
// `micro_batches_per_epoch` micro-batches. Throws InvalidArgument when an epoch is shorter than
// one step.
int64_t total_steps(const TrainConfig& config, int64_t micro_batches_per_epoch);

// zs-mem's configuration of the same run at `stage` on `world` ranks (the hybrid group applies
// at stage 3 only): the sharding settings of translate(), the optimizer's state kind, and
// whether gradients accumulate.
MemoryModelConfig memory_model_config(const TrainConfig& config, int world, int stage);

}  // namespace zs::train
