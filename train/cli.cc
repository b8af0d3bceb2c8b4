// zs-train's flags.
#include "train/cli.h"

#include <unistd.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <tuple>

#include "comm/factory.h"
#include "models/gpt_presets.h"
#include "runtime/error.h"
#include "runtime/logging.h"
#include "train/engine.h"
#include "train/restarts.h"
#include "train/stop.h"

namespace zs::train {

namespace {

// A check that a flag's number is above `bound` (or at least it), whose message names the bound
// ("must be > 0, got 0"); CLI11's PositiveNumber printed the largest double in full.
CLI::Validator number_above(double bound, bool or_equal) {
  std::ostringstream text;
  text << bound;
  const std::string limit = (or_equal ? ">= " : "> ") + text.str();
  return CLI::Validator(
      [limit, bound, or_equal](std::string& value) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(value.c_str(), &end);
        if (end == value.c_str() || *end != '\0' || std::isnan(v)) {
          return "must be a number " + limit + ", got '" + value + "'";
        }
        return (or_equal ? v >= bound : v > bound) ? "" : "must be " + limit + ", got " + value;
      },
      "NUMBER " + limit);
}

// The built-in demo's text: Debian's fortunes package (English quotations, jokes, poems).
constexpr const char* kDemoCorpus = "/usr/share/games/fortunes";

// The value of --deepspeed (or an alias) if given, read before the full parse so flags can
// override it.
std::string deepspeed_path(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    for (const char* name : {"--deepspeed", "--deepspeed_config", "--ds-config"}) {
      const size_t n = std::strlen(name);
      if (std::strcmp(argv[i], name) == 0 && i + 1 < argc) return argv[i + 1];
      if (std::strncmp(argv[i], name, n) == 0 && argv[i][n] == '=') return argv[i] + n + 1;
    }
  }
  return "";
}

}  // namespace

int resolve_stage(const std::string& strategy, int zero_stage_flag, int deepspeed_stage,
                  int hybrid_group) {
  int stage = zero_stage_flag;
  if (!strategy.empty()) {
    int named = -1;
    if (strategy == "ddp") {
      named = 0;
    } else if (strategy == "zero1" || strategy == "zero2" || strategy == "zero3") {
      named = strategy.back() - '0';
    } else if (strategy == "hybrid") {
      named = 3;
      ZS_CHECK(hybrid_group > 0, "--strategy hybrid needs --hybrid-group N (the ranks per node)");
    } else {
      ZS_THROW(InvalidArgument, "--strategy '", strategy,
               "' is not one of ddp, zero1, zero2, zero3, hybrid");
    }
    ZS_CHECK(zero_stage_flag < 0 || zero_stage_flag == named, "--strategy ", strategy,
             " means ZeRO stage ", named, " but --zero-stage is ", zero_stage_flag,
             "; give one of the two, or make them agree");
    stage = named;
  }
  ZS_CHECK(stage < 0 || deepspeed_stage < 0 || deepspeed_stage == stage,
           strategy.empty()
               ? "--zero-stage " + std::to_string(stage)
               : "--strategy " + strategy + " (ZeRO stage " + std::to_string(stage) + ")",
           " disagrees with the DeepSpeed config's zero_optimization.stage ", deepspeed_stage,
           "; make them agree, or drop the flag or the key");
  return stage >= 0 ? stage : deepspeed_stage;
}

bool parse_train_args(int argc, const char* const* argv, TrainConfig& c,
                      std::vector<std::string>* notes, std::string* help) {
  const std::string ds = deepspeed_path(argc, argv);
  // The DeepSpeed file's zero_optimization.stage, when it has one (kNoStage otherwise): a stage
  // flag must agree with it.
  constexpr int kNoStage = -1;
  int ds_stage = kNoStage;
  if (!ds.empty()) {
    std::ifstream file(ds);
    ZS_CHECK(file.good(), "--deepspeed '", ds, "' cannot be opened");
    std::stringstream text;
    text << file.rdbuf();
    const int default_stage = c.stage;
    c.stage = kNoStage;
    apply_deepspeed_json(text.str(), ds, c, notes);
    ds_stage = c.stage;
    if (c.stage == kNoStage) c.stage = default_stage;
  }

  CLI::App app{
      "zs-train: train a GPT with ZeRO stages 0-3 (DDP = stage 0) or hybrid sharding, on local "
      "rank threads or under mpirun/srun.",
      "zs-train"};
  app.get_formatter()->column_width(34);
  std::string ds_unused, precision, reduce_dtype, budget, host_budget, max_live, prefetch_bytes,
      keep_below, decay, strategy;
  std::string log_level;
  bool no_prefetch = false, no_progress = false, activation_checkpointing = false;

  const std::string kModel = "Model";
  app.add_option("--task", c.task,
                 "lm, classify (TSV data: text<TAB>label), or auto (by the "
                 "--data extension)")
      ->group(kModel);
  app.add_option(
         "--model", c.model,
         "preset: " +
             [] {
               std::string names;
               for (const std::string& n : models::gpt_preset_names())
                 names += (names.empty() ? "" : ", ") + n;
               return names;
             }())
      ->group(kModel);
  app.add_option("--model-config", c.model_config,
                 "JSON file with n_layer, width, n_head, "
                 "vocab_size, context (over the preset)")
      ->group(kModel);
  app.add_option("--layers", c.n_layer, "override the preset's layers")->group(kModel);
  app.add_option("--width", c.width, "override the preset's width")->group(kModel);
  app.add_option("--heads", c.n_head, "override the preset's attention heads")->group(kModel);
  app.add_option("--vocab-size", c.vocab_size, "override the preset's vocabulary")->group(kModel);
  app.add_option("--context", c.context, "override the preset's context length")->group(kModel);
  app.add_option("--init-from", c.init_from,
                 "start from GPT-2 weights: safetensors (Hugging Face layout), llm.c .bin, or a "
                 "sharded checkpoint directory (its weights only, for fine-tuning)")
      ->group(kModel);
  app.add_option("--save-weights", c.save_weights,
                 "write the trained weights at the end (.safetensors, or llm.c .bin)")
      ->group(kModel);

  const std::string kCheckpoints = "Checkpoints";
  app.add_option("--checkpoint-dir", c.checkpoint_dir,
                 "save sharded checkpoints here (DIR/step-000120/, DIR/latest), one file per rank "
                 "plus meta.json; the last one at the end of the run")
      ->group(kCheckpoints);
  app.add_option("--checkpoint-interval", c.checkpoint_interval,
                 "save every N optimizer steps (0: only at the end)")
      ->group(kCheckpoints);
  app.add_option("--keep-checkpoints", c.keep_checkpoints,
                 "keep the newest K checkpoints, delete older ones")
      ->group(kCheckpoints);
  app.add_option("--resume", c.resume,
                 "auto: continue from the newest checkpoint in --checkpoint-dir that verifies "
                 "(fresh if none); or a step directory to continue from (any ranks and stage: it "
                 "is resharded; the global batch must stay the same)")
      ->group(kCheckpoints);
  app.add_option_function<std::string>(
         "--checkpoint-async", [&c](const std::string& v) { c.checkpoint_async = v == "on"; },
         "on (default): a save copies each rank's file into host memory and writes it in the "
         "background while training continues; it is published at a later step (a failed write "
         "stops the run there). off: training waits for the write")
      ->check(CLI::IsMember({"on", "off"}))
      ->group(kCheckpoints);
  app.add_option_function<std::string>(
         "--checkpoint-buffer",
         [&c](const std::string& v) { c.checkpoint_buffer = parse_bytes(v); },
         "host memory per rank for a save's snapshot, e.g. 512MiB (default 1GiB); a larger rank "
         "file streams through it and training waits until all but the last buffer's worth is "
         "written")
      ->group(kCheckpoints);
  // Restarts after a failure (train/restarts.h).
  std::vector<std::string> injected_faults;
  app.add_option("--max-restarts", c.max_restarts,
                 "rank threads: when a rank fails (a lost or failing peer, a collective timeout, "
                 "an I/O error), rerun from the newest checkpoint in --checkpoint-dir (needed), "
                 "up to K times; bad input (InvalidArgument), a corrupt checkpoint, OutOfMemory "
                 "and NumericalError are not retried (they fail again). Under mpirun/srun use "
                 "scripts/zs-launch --max-restarts K instead")
      ->type_name("K")
      ->group(kCheckpoints);
  app.add_option("--inject-fault", injected_faults,
                 "testing: RANK:STEP[:KIND] makes rank RANK fail before step STEP of the first "
                 "attempt (KIND: comm (default), io, numerical, invalid; hang: it stops outside "
                 "every collective until its peers time out; sigterm: its process gets SIGTERM, a "
                 "preemption)")
      ->type_name("RANK:STEP[:KIND]")
      ->each([&c](const std::string& fault) {
        c.injected_faults.push_back(parse_injected_fault(fault));
      })
      ->group(kCheckpoints);

  const std::string kData = "Data";
  app.add_option("--data", c.data, "training token file (zeroshard or llm.c .bin)")->group(kData);
  app.add_option("--eval-data", c.eval_data, "evaluation token file")->group(kData);
  app.add_option("--text", c.text, "text files or directories, encoded byte-level")->group(kData);
  app.add_option("--eval-fraction", c.eval_fraction,
                 "share of the training windows held out when there is no --eval-data")
      ->group(kData);
  app.add_option("--seq-len", c.seq_len, "tokens per sequence (default: the context)")
      ->group(kData);

  const std::string kBatch = "Batch and schedule";
  app.add_option("--micro-batch", c.micro_batch, "sequences per rank per forward")->group(kBatch);
  app.add_option("--grad-accum", c.grad_accum, "micro-batches per optimizer step")->group(kBatch);
  app.add_option("--steps", c.steps, "optimizer steps")->group(kBatch);
  app.add_option("--epochs", c.epochs, "passes over the data (instead of --steps)")->group(kBatch);
  app.add_option("--exit-after-steps", c.exit_after_steps,
                 "save a checkpoint and exit 0 after this job has run N steps (a chain of jobs "
                 "with --resume auto continues the run)")
      ->group(kBatch);
  app.add_option("--exit-after-minutes", c.exit_after_minutes,
                 "save a checkpoint and exit 0 after the first step that ends M minutes after "
                 "the start (fit a job's time limit)")
      ->group(kBatch);
  app.add_option("--eval-interval", c.eval_interval, "evaluate every N steps (0: at the end)")
      ->group(kBatch);
  app.add_option("--eval-batches", c.eval_batches,
                 "evaluate on at most N batches per rank (default " +
                     std::to_string(kDefaultEvalBatches) + "; 0: every held-out window)")
      ->group(kBatch);
  app.add_option("--eval-micro-batch", c.eval_micro_batches,
                 "rows per evaluation forward (default: --micro-batch); several values score the "
                 "held-out set once per value at each evaluation point")
      ->expected(1, -1)
      ->group(kBatch);
  // An unsigned option takes "-1" as 2^64 - 1 without a word: a minus sign is refused.
  app.add_option("--seed", c.seed, "seed of the initialization and the data order")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            return text.find('-') == std::string::npos ? "" : "must be an integer >= 0";
          },
          "UINT"))
      ->group(kBatch);

  const std::string kParallel = "Parallelism";
  app.add_option("--zero-stage", c.stage, "0 (DDP), 1, 2 or 3")->group(kParallel);
  app.add_option("--strategy", strategy, "ddp, zero1, zero2, zero3 or hybrid (sets the stage)")
      ->group(kParallel);
  app.add_option("--hybrid-group", c.hybrid_group,
                 "hybrid: shard inside groups of this many ranks (a node), replicate across")
      ->group(kParallel);
  app.add_option("--backend", c.backend,
                 "local (ranks as threads), mpi, auto, nccl (GPUs; auto with --device cuda)")
      ->group(kParallel);
  app.add_option("--device", c.device,
                 "cpu, or cuda: nccl backend, one GPU per rank: --ranks N threads of this "
                 "process on GPUs 0..N-1, or one process per rank under mpirun/srun (GPU "
                 "local_rank % visible GPUs)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->group(kParallel);
  app.add_option("--ranks", c.ranks,
                 "rank threads of this process: CPU ranks (local backend), or with --device cuda "
                 "one GPU each (without mpirun)")
      ->group(kParallel);
  app.add_option("--threads", c.threads, "compute threads per rank (default: cores / ranks)")
      ->group(kParallel);
  app.add_option_function<std::string>(
         "--ddp-sync", [&c](const std::string& v) { c.ddp_sync = parse_ddp_sync(v); },
         "stage 0: bucketed (default: one all-reduce per unit, overlapped with backward), "
         "per-tensor (one all-reduce per gradient) or gather-scatter (gathered to rank 0, "
         "averaged, scattered back; CPU only): the naive two are for comparison")
      ->type_name("SYNC")
      ->group(kParallel);
  app.add_option_function<std::string>(
         "--grad-sync", [&c](const std::string& v) { c.grad_sync = parse_grad_sync(v); },
         "stages 0/1 with --grad-accum > 1: per-micro-batch (default: each micro-batch's "
         "gradients reduced, traffic x grad-accum, no memory added, all four stages bitwise "
         "identical) or per-step (DDP no_sync: summed locally in fp32 and reduced once per "
         "step, traffic independent of --grad-accum; stage 1 keeps a 4-byte-per-parameter "
         "sum; stages 0 and 1 bitwise identical with each other, not with per-micro-batch or "
         "stages 2/3, which always reduce per micro-batch)")
      ->type_name("WHEN")
      ->group(kParallel);
  app.add_option("--comm-timeout", c.comm_timeout_s,
                 "seconds any collective may take before the run fails naming it and the ranks "
                 "that did not arrive (also the bound on forming an mpi/nccl world); precedence: "
                 "this flag, then the environment's ZS_COMM_TIMEOUT_S, then 600")
      ->type_name("SECONDS")
      ->check(number_above(0, false))
      ->group(kParallel);
  app.add_flag("--no-prefetch", no_prefetch, "stage 3: gather on demand only")->group(kParallel);
  app.add_option("--max-live-gathered", max_live, "stage 3: limit on gathered parameter bytes")
      ->group(kParallel);
  app.add_option("--prefetch-bytes", prefetch_bytes,
                 "stage 3: gather the next units ahead while the bytes gathered and not yet used "
                 "stay within this, e.g. 64MiB (a unit larger is gathered when it runs); "
                 "default: one unit ahead")
      ->type_name("SIZE")
      ->group(kParallel);
  app.add_option("--keep-gathered-below", keep_below,
                 "stage 3: units smaller than this stay gathered")
      ->group(kParallel);
  app.add_option("--max-reductions-in-flight", c.max_reductions_in_flight,
                 "stages 2/3: gradient reductions left running during backward, each holding a "
                 "unit's full gradient (default 2; 0 = no limit: more overlap, more memory)")
      ->check(number_above(0, true))
      ->group(kParallel);

  const std::string kMemory = "Memory";
  app.add_flag("--activation-checkpointing", activation_checkpointing,
               "recompute every unit's forward (each Block) in its backward instead of keeping "
               "its activations: one more forward of the blocks per step, same bits, no extra "
               "traffic")
      ->group(kMemory);
  app.add_option("--checkpoint-every", c.checkpoint_every,
                 "activation checkpointing of every K-th unit (1 = every unit; implies "
                 "--activation-checkpointing; 0 = off)")
      ->type_name("K")
      ->check(number_above(0, true))
      ->group(kMemory);

  const std::string kPrecision = "Precision";
  app.add_option("--precision", precision, "fp32, fp16 (dynamic loss scaling) or bf16")
      ->group(kPrecision);
  app.add_option("--reduce-dtype", reduce_dtype, "dtype gradients travel in (default: precision)")
      ->group(kPrecision);

  const std::string kOptim = "Optimizer";
  app.add_option("--optimizer", c.optimizer, "adamw or sgd")->group(kOptim);
  app.add_option("--lr", c.lr, "peak learning rate")->group(kOptim);
  app.add_option("--min-lr", c.min_lr, "final learning rate (default lr/10)")->group(kOptim);
  app.add_option("--warmup", c.warmup_steps, "linear warmup steps")->group(kOptim);
  app.add_option("--decay", decay, "cosine, linear or constant")->group(kOptim);
  app.add_option("--weight-decay", c.weight_decay, "decoupled weight decay (not on biases, norms)")
      ->group(kOptim);
  app.add_option("--beta1", c.beta1, "AdamW beta1")->group(kOptim);
  app.add_option("--beta2", c.beta2, "AdamW beta2")->group(kOptim);
  app.add_option("--eps", c.eps, "AdamW epsilon")->group(kOptim);
  app.add_option("--momentum", c.momentum, "SGD momentum")->group(kOptim);
  app.add_flag("--nesterov", c.nesterov, "SGD Nesterov momentum")->group(kOptim);
  app.add_option("--clip", c.clip, "global gradient-norm clip (0: off)")->group(kOptim);

  const std::string kReport = "Memory and reports";
  app.add_option("--memory-budget", budget, "per-rank memory budget, e.g. 2GiB")->group(kReport);
  app.add_option_function<std::string>(
         "--offload-optimizer",
         [&c](const std::string& v) { c.offload_optimizer = parse_offload_target(v); },
         "none (default), host: the fp32 masters and optimizer state of the rank's shard live "
         "in host memory and the optimizer step runs on the CPU (stages 1-3), or nvme: as host, "
         "with the optimizer state and the fp32 masters on NVMe under --nvme-path and only "
         "--nvme-buffer-count units' state and masters in host memory")
      ->type_name("WHERE")
      ->group(kReport);
  app.add_option_function<std::string>(
         "--offload-param",
         [&c](const std::string& v) { c.offload_param = parse_offload_target(v); },
         "none (default), host: stage 3's parameter shards live in host memory and are copied "
         "in just before their all-gather, or nvme: on NVMe under --nvme-path, read ahead along "
         "the recorded unit order (needs --zero-stage 3 and --offload-optimizer)")
      ->type_name("WHERE")
      ->group(kReport);
  app.add_option("--nvme-param-buffer-count", c.param_buffer_count,
                 "--offload-param nvme: host buffers of one unit's parameter shard each (default "
                 "4; 2 or more overlap the next unit's read)")
      ->group(kReport);
  app.add_option("--nvme-path", c.nvme_paths,
                 "--offload-optimizer/--offload-param nvme: directory of the swap files, on a "
                 "fast local disk "
                 "(give several to stripe over several drives)")
      ->type_name("DIR")
      ->group(kReport);
  app.add_option("--nvme-buffer-count", c.nvme_buffer_count,
                 "--offload-optimizer nvme: host buffers of one unit's optimizer state each, and "
                 "as many of one unit's master (default 4; 3 or more overlap the disk with the "
                 "update)")
      ->group(kReport);
  app.add_option("--nvme-direct", c.nvme_direct,
                 "--offload-optimizer nvme: O_DIRECT swap files (default true; false for a "
                 "filesystem that refuses O_DIRECT)")
      ->group(kReport);
  app.add_option("--host-memory-budget", host_budget,
                 "per-rank budget of the host tier that --offload-optimizer host fills, e.g. "
                 "8GiB (default: unlimited)")
      ->group(kReport);
  app.add_option("--profile-memory", c.profile_memory,
                 "write each rank's memory timeline (JSON) and chart (SVG) of the last step")
      ->group(kReport);
  app.add_option("--trace", c.trace,
                 "write a Chrome/Perfetto trace (ui.perfetto.dev) of the run: spans of compute, "
                 "gathers, reductions, optimizer, I/O and data waits; one file per rank, "
                 "FILE.rank<r> before the extension when there is more than one rank "
                 "(trace.json -> trace.rank1.json), and .attempt<k> after the k-th restart "
                 "(--max-restarts); the end-of-run report adds the exposed communication per "
                 "step")
      ->type_name("FILE")
      ->group(kReport);
  app.add_option("--log-interval", c.log_interval, "log every N steps")->group(kReport);
  app.add_option("--sample", c.sample_tokens, "generate N tokens greedily at the end")
      ->group(kReport);
  app.add_option("--prompt", c.sample_prompt, "the sample's prompt")->group(kReport);
  app.add_option("--temperature", c.sample_temperature,
                 "the sample's temperature (0: greedy; else top-40 sampling)")
      ->group(kReport);
  app.add_flag("--no-progress", no_progress, "no progress bar on a terminal")->group(kReport);
  app.add_option("--log-level", log_level,
                 "trace, debug, info, warn, error or off (default: "
                 "ZS_LOG_LEVEL, else info)")
      ->group(kReport);
  app.add_option("--deepspeed,--deepspeed_config,--ds-config", ds_unused,
                 "DeepSpeed JSON config (flags override it)")
      ->group(kReport);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    if (help) *help = app.help();
    return true;
  } catch (const CLI::ParseError& e) {
    ZS_THROW(InvalidArgument, e.what(), "; see zs-train --help");
  }
  // Flags whose default (0) means "chosen for you" cannot be given as 0 or less.
  for (const auto& [flag, value, otherwise] :
       {std::tuple<const char*, int64_t, const char*>{"--seq-len", c.seq_len,
                                                      "the model's context"},
        {"--threads", c.threads, "the cores divided among the ranks"}}) {
    ZS_CHECK(app.count(flag) == 0 || value >= 1, flag, " must be >= 1, got ", value,
             "; leave it out for ", otherwise);
  }
  ZS_CHECK(app.count("--epochs") == 0 || app.count("--steps") == 0, "--epochs ", c.epochs,
           " and --steps ", c.steps, " both set the run's length; give one of them");
  if (!strategy.empty() || app.count("--zero-stage") > 0) {
    c.stage = resolve_stage(strategy, app.count("--zero-stage") > 0 ? c.stage : kNoStage, ds_stage,
                            c.hybrid_group);
  }
  if (!precision.empty()) c.precision = parse_precision(precision);
  if (!reduce_dtype.empty()) {
    c.reduce_dtype = parse_precision(reduce_dtype);
    c.reduce_dtype_set = true;
  }
  if (!budget.empty()) c.memory_budget = parse_bytes(budget);
  if (!host_budget.empty()) c.host_memory_budget = parse_bytes(host_budget);
  if (!max_live.empty()) c.max_live_gathered_bytes = parse_bytes(max_live);
  if (!prefetch_bytes.empty()) c.prefetch_bytes = parse_bytes(prefetch_bytes);
  if (!keep_below.empty()) c.keep_gathered_below_bytes = parse_bytes(keep_below);
  if (!decay.empty()) {
    if (decay == "cosine") {
      c.decay = optim::LrDecay::kCosine;
    } else if (decay == "linear") {
      c.decay = optim::LrDecay::kLinear;
    } else if (decay == "constant") {
      c.decay = optim::LrDecay::kConstant;
    } else {
      ZS_THROW(InvalidArgument, "--decay '", decay, "' is not one of cosine, linear, constant");
    }
  }
  if (!log_level.empty()) {
    static const char* const kLevels[] = {"trace", "debug", "info", "warn", "error", "off"};
    ZS_CHECK(std::find(std::begin(kLevels), std::end(kLevels), log_level) != std::end(kLevels),
             "--log-level '", log_level, "' is not one of trace, debug, info, warn, error, off");
    logger().set_level(spdlog::level::from_str(log_level));
  }
  // --device cuda takes the nccl backend unless --backend says otherwise (then validate()
  // refuses local/mpi by name).
  if (c.device == "cuda" && app.count("--backend") == 0) c.backend = "auto";
  if (no_prefetch) c.prefetch = false;
  // --checkpoint-every K chooses the units; the switch alone checkpoints every one.
  if (activation_checkpointing && app.count("--checkpoint-every") == 0) {
    c.checkpoint_every = std::max(c.checkpoint_every, 1);
  }
  if (no_progress) c.progress = false;
  if (c.data.empty() && c.text.empty()) {
    // The built-in demo: what zs-train does with no data flags (the README's first command).
    ZS_CHECK(access(kDemoCorpus, R_OK) == 0,
             "no training data given (--data FILE or --text "
             "FILE|DIR), and the built-in demo's corpus ",
             kDemoCorpus,
             " is missing: install "
             "Debian's fortunes package (scripts/setup.sh does), or give data");
    c.text = {kDemoCorpus};
    auto unset = [&](const char* flag) { return app.count(flag) == 0; };
    if (unset("--ranks") && c.backend == "local") c.ranks = 2;
    if (unset("--model") && c.model_config.empty()) {
      c.model = "tiny";
      if (unset("--layers")) c.n_layer = 4;
      if (unset("--width")) c.width = 128;
      if (unset("--heads")) c.n_head = 4;
      if (unset("--context")) c.context = 128;
    }
    if (unset("--micro-batch") && ds.empty()) c.micro_batch = 8;
    if (unset("--steps") && ds.empty()) c.steps = 600;
    if (unset("--lr") && ds.empty()) c.lr = 4e-3f;
    if (unset("--warmup") && ds.empty()) c.warmup_steps = 50;
    if (unset("--log-interval") && ds.empty()) c.log_interval = 50;
    if (unset("--eval-batches")) c.eval_batches = 16;
    if (unset("--sample")) c.sample_tokens = 300;
    if (unset("--prompt")) c.sample_prompt = "The ";
  }
  return false;
}

int train_main(int argc, const char* const* argv) {
  TrainConfig config;
  std::vector<std::string> notes;
  std::string help;
  try {
    if (parse_train_args(argc, argv, config, &notes, &help)) {
      std::printf("%s", help.c_str());
      return 0;
    }
    for (const std::string& note : notes) ZS_LOG_INFO("deepspeed config: {}", note);
    const TrainResult result = run_training(config);
    // Preempted: saved (with --checkpoint-dir), to be continued; a planned exit is a success.
    return result.stopped == StopReason::kSignal ? kExitPreempted : 0;
  } catch (const InvalidArgument& e) {
    std::fprintf(stderr, "zs-train: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zs-train: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace zs::train
