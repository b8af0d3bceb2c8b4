// The training engine: world, data, model, loop, evaluation, reports.
#include "train/engine.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "checkpoint/gpt2_weights.h"
#include "comm/factory.h"
#include "comm/local/local_backend.h"
#include "data/byte_tokenizer.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "data/token_file.h"
#include "models/gpt.h"
#include "models/gpt_presets.h"
#include "ops/cpu/gemm.h"
#include "ops/elementwise.h"
#include "optim/adamw.h"
#include "optim/loss_scaler.h"
#include "optim/sgd.h"
#include "runtime/allocator.h"
#include "runtime/autograd.h"
#include "runtime/device_kernels.h"
#include "runtime/error.h"
#include "runtime/logging.h"
#include "runtime/rng.h"
#include "sharding/sharded_model.h"
#include "sharding/unit_plan.h"
#include "train/device.h"
#include "train/memory_model.h"
#include "train/report.h"
#include "train/shard_views.h"
#include "train/tasks.h"

namespace zs::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// ---- Model configuration ---------------------------------------------------------------------

models::GptConfig model_config(const TrainConfig& c) {
  // Starting from weights: the file's shape (the flags below may only restate it; a mismatch
  // is reported when the weights are read).
  models::GptConfig g = c.init_from.empty() ? models::gpt_preset(c.model)
                                            : checkpoint::infer_gpt2_config(
                                                  c.init_from, std::max<int64_t>(c.n_head, 0));
  if (!c.model_config.empty()) {
    std::ifstream file(c.model_config);
    ZS_CHECK_AS(IoError, file.good(), "--model-config '", c.model_config,
                "' cannot be opened; give a JSON file like {\"n_layer\": 4, \"width\": 256, "
                "\"n_head\": 4, \"vocab_size\": 256, \"context\": 128}");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(file);
    } catch (const nlohmann::json::exception& e) {
      ZS_THROW(InvalidArgument, "--model-config '", c.model_config,
               "' is not valid JSON: ", e.what());
    }
    ZS_CHECK(j.is_object(), "--model-config '", c.model_config, "' must hold a JSON object");
    for (const auto& item : j.items()) {
      const std::string& key = item.key();
      int64_t* field = key == "n_layer"      ? &g.n_layer
                       : key == "width"      ? &g.width
                       : key == "n_head"     ? &g.n_head
                       : key == "vocab_size" ? &g.vocab_size
                       : key == "context"    ? &g.context
                                             : nullptr;
      ZS_CHECK(field != nullptr, "--model-config '", c.model_config, "': unknown key '", key,
               "'; the keys are n_layer, width, n_head, vocab_size, context");
      ZS_CHECK(item.value().is_number_integer(), "--model-config '", c.model_config, "': '", key,
               "' must be an integer, got ", item.value().dump());
      *field = item.value().get<int64_t>();
    }
  }
  if (c.n_layer >= 0) g.n_layer = c.n_layer;
  if (c.width > 0) g.width = c.width;
  if (c.n_head > 0) g.n_head = c.n_head;
  if (c.vocab_size > 0) g.vocab_size = c.vocab_size;
  if (c.context > 0) g.context = c.context;
  return g;
}

// ---- Host bytes in and out of the rank's tensors ----------------------------------------------

// Exact bytes (any dtype) from host memory into `t`, on the CPU or (synchronously, on the
// tensor's allocator stream) on a device; and back.
void write_bytes(const Tensor& t, const void* host) {
  if (t.nbytes() == 0) return;
  if (t.device().is_cpu()) {
    std::memcpy(t.raw_data(), host, t.nbytes());
  } else {
    device_kernels(t.device(), "write_bytes").upload(t, host);
  }
}

void read_bytes(const Tensor& t, void* host) {
  if (t.nbytes() == 0) return;
  if (t.device().is_cpu()) {
    std::memcpy(host, t.raw_data(), t.nbytes());
  } else {
    device_kernels(t.device(), "read_bytes").download(t, host);
  }
}

// ---- Cross-rank figures ----------------------------------------------------------------------

// Every rank's values, by rank (the comm moves fp32/int32: each uint64 travels as two int32).
std::vector<std::vector<uint64_t>> gather_u64(comm::Communicator& comm, Allocator& allocator,
                                              const std::vector<uint64_t>& values) {
  const int64_t n = static_cast<int64_t>(values.size());
  Tensor mine = Tensor::empty({2 * n}, DType::kI32, allocator, MemoryCategory::kCommBuffers, "u64");
  Tensor all = Tensor::empty({2 * n * comm.size()}, DType::kI32, allocator,
                             MemoryCategory::kCommBuffers, "u64 gathered");
  // Staged on the host (the tensors live on the communicator's buffer device).
  std::vector<uint32_t> m(static_cast<size_t>(2 * n));
  for (int64_t i = 0; i < n; ++i) {
    m[2 * i] = static_cast<uint32_t>(values[i] >> 32);
    m[2 * i + 1] = static_cast<uint32_t>(values[i]);
  }
  write_bytes(mine, m.data());
  comm.all_gather(mine, all, {comm::default_timeout(), "figures for the log"})->wait();
  std::vector<uint32_t> gathered(static_cast<size_t>(2 * n * comm.size()));
  read_bytes(all, gathered.data());
  const uint32_t* a = gathered.data();
  std::vector<std::vector<uint64_t>> out(static_cast<size_t>(comm.size()));
  for (int r = 0; r < comm.size(); ++r) {
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t* p = a + 2 * (r * n + i);
      out[r].push_back((uint64_t{p[0]} << 32) | p[1]);
    }
  }
  return out;
}

// Σ over ranks, in rank order, of each of the doubles every rank holds (exact bits travel:
// each double goes as its uint64 pattern through gather_u64), the same on every rank.
std::vector<double> sum_over_ranks(comm::Communicator& comm, Allocator& allocator,
                                   const std::vector<double>& values) {
  std::vector<uint64_t> bits(values.size());
  std::memcpy(bits.data(), values.data(), values.size() * sizeof(double));
  std::vector<double> totals(values.size(), 0.0);
  for (const std::vector<uint64_t>& rank : gather_u64(comm, allocator, bits)) {
    for (size_t i = 0; i < values.size(); ++i) {
      double value;
      std::memcpy(&value, &rank[i], sizeof value);
      totals[i] += value;
    }
  }
  return totals;
}

// The next token from a row of logits: the arg-max (temperature 0), or a draw from
// softmax(logits / temperature) restricted to the 40 most likely tokens, with a counter-based
// random number (the same on every rank).
int32_t pick_token(const float* logits, int64_t vocab, float temperature, const RngKey& key) {
  if (temperature <= 0)
    return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  for (int64_t v = 0; v < vocab; ++v) order[v] = static_cast<int32_t>(v);
  const size_t k = std::min<size_t>(40, order.size());
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  std::vector<double> weights(k);
  double total = 0;
  for (size_t i = 0; i < k; ++i) {
    weights[i] = std::exp((logits[order[i]] - logits[order[0]]) / temperature);
    total += weights[i];
  }
  double u = uniform_from_bits(random_bits(key, 0)) * total;
  for (size_t i = 0; i < k; ++i) {
    u -= weights[i];
    if (u <= 0) return order[i];
  }
  return order[k - 1];
}

// ---- One rank's run --------------------------------------------------------------------------

class RankRun {
 public:
  // `tracker`: the rank's device memory (see rank_tracker_name), made before the world so that the
  // nccl backend's scratch is charged to it too; it outlives the run.
  RankRun(const TrainConfig& config, const models::GptConfig& model_config, const TaskData& data,
          int64_t seq, comm::Communicator& comm, MemoryTracker& tracker, int local_ranks,
          TrainResult* result)
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
        seq_(seq) {
    try {
      set_up(model_config, local_ranks);
    } catch (const std::exception& e) {
      abort_group(e);
      throw;
    }
  }

  // A step that failed part-way leaves its forward on this thread's tape, holding tensors of
  // this rank's allocator: drop it before the allocator goes.
  ~RankRun() { current_tape().clear(); }
  RankRun(const RankRun&) = delete;
  RankRun& operator=(const RankRun&) = delete;

  void run() {
    try {
      run_steps();
    } catch (const std::exception& e) {
      abort_group(e);
      throw;
    }
  }

 private:
  // Fails pending collectives at once instead of at their timeout, before the members go
  // (release_comm_): every rank's with the local backend (and run_gpu_ranks aborts the other
  // threads' nccl groups); with mpi this is MPI_Abort, which ends the job — as the MPI world
  // would when this process leaves on the exception, but with the reason logged. An nccl abort
  // is this rank's only (NCCL does not tell the peers); under mpirun the job ends when this
  // process leaves, through its MPI bootstrap.
  void abort_group(const std::exception& e) { comm_.abort(e.what()); }

  void set_up(const models::GptConfig& model_config, int local_ranks) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    ops::cpu::set_intra_op_threads(c_.threads > 0 ? c_.threads : std::max(1, cores / local_ranks));
    tracker_.set_budget(c_.memory_budget);
    sharding::ShardingConfig s;
    s.stage = c_.stage;
    s.hybrid_group = c_.hybrid_group;
    s.seed = c_.seed;
    s.param_dtype = c_.precision;
    s.reduce_dtype = c_.reduce_dtype_set ? c_.reduce_dtype : c_.precision;
    s.prefetch = c_.prefetch;
    s.max_live_gathered_bytes = c_.max_live_gathered_bytes;
    s.keep_gathered_below_bytes = c_.keep_gathered_below_bytes;
    s.max_reductions_in_flight = c_.max_reductions_in_flight;
    sharding_config_ = s;
    if (device_) {
      ZS_CHECK(comm_.buffer_device() == device_->device(),
               "--device cuda: the communicator moves "
               "tensors on ",
               comm_.buffer_device().str(), ", not on the rank's ", device_->device().str());
      // Collectives follow the kernels enqueued before them (sharding/sharded_model.h).
      comm_.set_compute_stream(device_->stream());
      release_comm_.detach_stream = true;
      if (lead_)
        ZS_LOG_INFO("computing on {} (one per rank), nccl backend", device_->device().str());
    }
    sharded_ = std::make_unique<sharding::ShardedModel>(task_->model(), comm_, compute_, s);
    if (!c_.init_from.empty()) {
      const checkpoint::Gpt2WeightSource source(c_.init_from, model_config);
      sharded_->load_full_parameters([&](const std::string& name, const Shape& shape, float* dst) {
        source.fill(name, shape, dst);
      });
      if (lead_) ZS_LOG_INFO("initialized from {}", c_.init_from);
    }
    views_ = sharded_->local_shards();
    if (c_.optimizer == "sgd") {
      optim::SgdOptions o;
      o.momentum = c_.momentum;
      o.nesterov = c_.nesterov;
      o.weight_decay = c_.weight_decay;
      optimizer_ = std::make_unique<optim::Sgd>(views_, o);
    } else {
      optim::AdamWOptions o;
      o.beta1 = c_.beta1;
      o.beta2 = c_.beta2;
      o.eps = c_.eps;
      o.weight_decay = c_.weight_decay;
      optimizer_ = std::make_unique<optim::AdamW>(views_, o);
    }
    if (c_.precision == DType::kF16 && c_.static_loss_scale == 0) {
      scaler_ = std::make_unique<optim::DynamicLossScaler>(c_.loss_scaler);
    }
    data::SamplerOptions so;
    so.global_batch = c_.micro_batch * comm_.size();
    so.rank = comm_.rank();
    so.world_size = comm_.size();
    so.seed = c_.seed;
    sampler_ = task_->sampler(so);
    const int64_t per_epoch = sampler_->steps_per_epoch() / c_.grad_accum;
    ZS_CHECK(per_epoch >= 1 || c_.epochs == 0, "one epoch of ", sampler_->steps_per_epoch(),
             " micro-batches of ", so.global_batch, " items is less than one step of ",
             c_.grad_accum, " micro-batches; lower --grad-accum or --micro-batch");
    steps_ = c_.epochs > 0 ? c_.epochs * per_epoch : c_.steps;
    schedule_ = std::make_unique<optim::LrSchedule>(
        c_.decay, c_.lr, c_.min_lr >= 0 ? c_.min_lr : c_.lr / 10, c_.warmup_steps,
        std::max(steps_, c_.warmup_steps));
    data::LoaderOptions lo;
    lo.num_batches = steps_ * c_.grad_accum;
    loader_ = std::make_unique<data::BatchLoader>(*sampler_, allocator_, lo);
  }

  void run_steps() {
    result_->world = comm_.size();
    result_->parameters = task_->model().num_parameters();
    result_->tokens_per_step =
        c_.micro_batch * c_.grad_accum * comm_.size() * task_->tokens_per_row();
    if (lead_) {
      ZS_LOG_INFO("{} parameters ({}); {}", result_->parameters, task_->describe_model(),
                  describe(c_));
      ZS_LOG_INFO("{} ranks, {} units, {} steps of {} tokens; data: {}", comm_.size(),
                  sharded_->units().size(), steps_, result_->tokens_per_step, data_.description());
    }
    const bool tty = lead_ && c_.progress && isatty(1);
    const auto start = Clock::now();
    for (int64_t step = 0; step < steps_; ++step) {
      const bool last = step == steps_ - 1;
      if (last) begin_profiled_step();
      StepRecord record = train_step(step);
      if (last) end_profiled_step();
      record.tokens_per_s =
          static_cast<double>((step + 1) * result_->tokens_per_step) / seconds_since(start);
      if (lead_) result_->steps.push_back(record);
      if (tty) progress(step);
      if (lead_ && (step == 0 || (step + 1) % c_.log_interval == 0 || last || record.skipped))
        log_step(record, tty);
      if (c_.eval_interval > 0 && (step + 1) % c_.eval_interval == 0 && !last) evaluate(step + 1);
    }
    evaluate(steps_);
    if (c_.sample_tokens > 0 && task_->gpt()) sample();
    if (!c_.save_weights.empty()) save_weights();
    report();
  }

  StepRecord train_step(int64_t step) {
    const auto start = Clock::now();
    StepRecord r;
    r.step = step;
    r.lr = schedule_->lr(step);
    r.loss_scale = scaler_ ? scaler_->scale() : c_.static_loss_scale > 0 ? c_.static_loss_scale : 1;
    double loss_sum = 0;
    // On a GPU each micro-batch's loss is copied into a slot of `losses` on the device and the
    // slots are read back once, after the micro-batches (the host does not wait for a forward).
    Tensor losses;
    if (device_) {
      losses = Tensor::empty({c_.grad_accum}, DType::kF32, compute_, MemoryCategory::kActivations,
                             "losses of the step");
    }
    for (int64_t micro = 0; micro < c_.grad_accum; ++micro) {
      data::BatchLease batch = loader_->next();
      MemoryCategoryScope activations(MemoryCategory::kActivations);
      Tensor loss;
      if (device_) {
        loss = task_->loss(upload_batch(*batch, micro));
        NoGradScope no_grad;
        ops::copy_(
            Tensor::from_storage(losses.storage(), static_cast<size_t>(micro) * sizeof(float),
                                 loss.shape(), DType::kF32, "loss of micro-batch"),
            loss);
      } else {
        loss = task_->loss(*batch);
        loss_sum += loss.item();
      }
      // Mean over micro-batches: each backward is seeded with scale / micro-batches.
      backward(loss, r.loss_scale / static_cast<float>(c_.grad_accum));
      sharded_->finish_backward();
    }
    if (device_) {
      for (float value : losses.to_vector()) loss_sum += value;  // the same sum, in order
    }
    if (c_.precision == DType::kF16) {
      const bool found_inf = optim::unscale_and_check(views_, 1.0f / r.loss_scale);
      if (scaler_) {
        r.skipped = scaler_->update(found_inf, comm_);
      } else {
        ZS_CHECK_AS(NumericalError, !found_inf, "step ", step,
                    ": a gradient overflowed fp16 "
                    "under the static loss scale ",
                    r.loss_scale,
                    "; lower the scale or use the "
                    "dynamic one (fp16.loss_scale = 0)");
      }
    }
    if (!r.skipped) {
      r.grad_norm = c_.clip > 0 ? clip_gradients(*sharded_, views_, c_.clip)
                                : gradient_norm(*sharded_, views_);
      ZS_CHECK_AS(NumericalError, std::isfinite(r.grad_norm), "step ", step,
                  ": the gradient norm is ", r.grad_norm, " (loss ", loss_sum / c_.grad_accum,
                  "); the run diverged — lower --lr (now ", r.lr,
                  "), keep --clip on, or train in "
                  "bf16/fp32; nothing saved was touched");
      optimizer_->step(r.lr);
    } else {
      r.grad_norm = std::numeric_limits<float>::quiet_NaN();
    }
    sharded_->after_step();
    // The logged loss: the mean over ranks (one small all-reduce).
    // On the communicator's buffer device; fill()/item() store and read the same float on the
    // CPU as a plain store and load.
    Tensor mean = Tensor::empty({1}, DType::kF32, compute_, MemoryCategory::kCommBuffers, "loss");
    mean.fill(static_cast<float>(loss_sum / static_cast<double>(c_.grad_accum)));
    comm_.all_reduce(mean, comm::ReduceOp::kAvg, {comm::default_timeout(), "logged loss"})->wait();
    r.loss = mean.item();
    ZS_CHECK_AS(NumericalError, std::isfinite(r.loss) || c_.precision == DType::kF16, "step ", step,
                ": the loss is ", r.loss, "; lower --lr (now ", r.lr, ") or check the data");
    r.ms = seconds_since(start) * 1e3;
    return r;
  }

  // The batch on the rank's GPU: each tensor through its pinned staging slot (three per
  // micro-batch), uploaded on the copy stream; the compute stream waits for it on the device.
  data::Batch upload_batch(const data::Batch& host, int64_t micro) {
    data::Batch placed;
    placed.position = host.position;
    const size_t slot = 3 * static_cast<size_t>(micro);
    if (host.ids.defined()) placed.ids = device_->upload(host.ids, slot, "ids");
    if (host.targets.defined()) placed.targets = device_->upload(host.targets, slot + 1, "targets");
    if (host.lengths.defined()) placed.lengths = device_->upload(host.lengths, slot + 2, "lengths");
    return placed;
  }

  // A host tensor where the rank computes: itself on the CPU, else a synchronous upload.
  Tensor to_compute(const Tensor& host) {
    if (!device_) return host;
    Tensor placed = Tensor::empty(host.shape(), host.dtype(), compute_, host.name());
    write_bytes(placed, host.raw_data());
    return placed;
  }

  void log_step(const StepRecord& r, bool tty) {
    char line[320];
    int n = std::snprintf(line, sizeof line,
                          "step %*lld/%lld | loss %.4f | lr %.2e | %.0f tok/s | %.1f ms | "
                          "grad norm %.3f | peak %s",
                          static_cast<int>(std::to_string(steps_).size()),
                          static_cast<long long>(r.step + 1), static_cast<long long>(steps_),
                          r.loss, r.lr, r.tokens_per_s, r.ms, r.grad_norm,
                          format_bytes(tracker_.peak_total()).c_str());
    if (c_.precision == DType::kF16 && n > 0 && n < static_cast<int>(sizeof line)) {
      n += std::snprintf(line + n, sizeof line - n, " | scale %g%s", r.loss_scale,
                         r.skipped ? " | overflow: step skipped" : "");
    }
    if (tty) std::printf("\r\033[K");
    std::fflush(stdout);
    ZS_LOG_INFO("{}", line);
  }

  void progress(int64_t step) {
    const int width = 30;
    const int done = static_cast<int>(width * (step + 1) / steps_);
    std::printf("\r[%s%s] %lld/%lld", std::string(done, '#').c_str(),
                std::string(width - done, ' ').c_str(), static_cast<long long>(step + 1),
                static_cast<long long>(steps_));
    if (step + 1 == steps_) std::printf("\n");
    std::fflush(stdout);
  }

  // The last step is the profiled one: traffic and peaks are reset before it, and with
  // --profile-memory its allocations are recorded.
  void begin_profiled_step() {
    comm_.stats().reset();
    if (&sharded_->shard_group() != &comm_) sharded_->shard_group().stats().reset();
    if (sharded_->replica_group()) sharded_->replica_group()->stats().reset();
    tracker_.reset_peaks();
    if (!c_.profile_memory.empty()) {
      for (int cat = 0; cat < kNumMemoryCategories; ++cat) {
        profile_start_.bytes[cat] = tracker_.current(static_cast<MemoryCategory>(cat));
      }
      tracker_.enable_timeline(true);
      tracker_.mark("step begins");
    }
  }

  void end_profiled_step() {
    // Hybrid: the shard group's collectives are on their own communicator; add them.
    step_traffic_ = snapshot(comm_.stats());
    std::vector<comm::Communicator*> groups;
    if (&sharded_->shard_group() != &comm_) groups.push_back(&sharded_->shard_group());
    if (sharded_->replica_group()) groups.push_back(sharded_->replica_group());
    for (comm::Communicator* group_comm : groups) {
      const StepTraffic group = snapshot(group_comm->stats());
      for (int k = 0; k < comm::kNumCollectiveKinds; ++k) {
        step_traffic_[k].calls += group[k].calls;
        step_traffic_[k].bytes_sent += group[k].bytes_sent;
        step_traffic_[k].bytes_received += group[k].bytes_received;
        step_traffic_[k].seconds += group[k].seconds;
      }
    }
    have_step_traffic_ = true;
    if (!c_.profile_memory.empty()) {
      tracker_.mark("step ends");
      tracker_.enable_timeline(false);
    }
  }

  // Each rank scores its share of the held-out items (rows past the end are padding that is
  // not scored, so every rank runs the same number of forwards, as stage 3 needs); the sums are
  // added over ranks in rank order.
  void evaluate(int64_t after_steps) {
    const int64_t total = data_.eval_items();
    if (total <= 0) return;
    const int64_t world = comm_.size();
    const int64_t rows = c_.micro_batch;
    int64_t items = total;
    if (c_.eval_batches > 0) items = std::min(items, c_.eval_batches * world * rows);
    const int64_t batches = (items + world * rows - 1) / (world * rows);
    NoGradScope no_grad;
    MemoryCategoryScope activations(MemoryCategory::kActivations);
    EvalSums mine;
    for (int64_t b = 0; b < batches; ++b) {
      std::vector<int64_t> share;
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t item = (b * world + comm_.rank()) * rows + i;
        if (item < items) share.push_back(item);
      }
      const EvalSums sums = task_->evaluate(share, rows, allocator_,
                                            [this](const Tensor& t) { return to_compute(t); });
      mine.loss_sum += sums.loss_sum;
      mine.count += sums.count;
      mine.correct += sums.correct;
    }
    const std::vector<double> sums =
        sum_over_ranks(comm_, compute_, {mine.loss_sum, mine.count, mine.correct});
    const double loss_sum = sums[0], count = sums[1], correct = sums[2];
    EvalRecord e;
    e.step = after_steps;
    e.loss = loss_sum / count;
    e.tokens = static_cast<int64_t>(std::llround(count));
    const bool classify = data_.kind() == TaskKind::kClassification;
    if (classify) {
      e.correct = static_cast<int64_t>(std::llround(correct));
      e.accuracy = correct / count;
    } else {
      e.perplexity = std::exp(e.loss);
    }
    if (lead_) {
      result_->evals.push_back(e);
      if (classify) {
        ZS_LOG_INFO(
            "eval after step {}: loss {:.4f}, accuracy {:.2f}% ({} of {} held-out "
            "examples)",
            after_steps, e.loss, 100 * e.accuracy, e.correct, e.tokens);
      } else {
        ZS_LOG_INFO("eval after step {}: loss {:.4f}, perplexity {:.2f} over {} held-out tokens",
                    after_steps, e.loss, e.perplexity, e.tokens);
      }
    }
  }

  // Greedy continuation of the prompt. Every rank runs the same forwards (stage 3 gathers
  // collectively); rank 0 keeps the text.
  void sample() {
    NoGradScope no_grad;
    MemoryCategoryScope activations(MemoryCategory::kActivations);
    std::vector<int32_t> tokens;
    for (unsigned char ch : c_.sample_prompt) tokens.push_back(ch);
    if (tokens.empty()) tokens.push_back('\n');
    models::Gpt& gpt = *task_->gpt();
    const int64_t vocab = gpt.config().vocab_size;
    const int64_t prompt = static_cast<int64_t>(tokens.size());
    for (int64_t i = 0; i < c_.sample_tokens; ++i) {
      const int64_t len = std::min<int64_t>(static_cast<int64_t>(tokens.size()), seq_);
      Tensor window = Tensor::empty({1, len}, DType::kI32, allocator_, "sample window");
      std::copy(tokens.end() - len, tokens.end(), window.data<int32_t>());
      const std::vector<float> logits = gpt(to_compute(window)).to_vector();
      const float* row = logits.data() + (len - 1) * vocab;
      tokens.push_back(pick_token(row, vocab, c_.sample_temperature,
                                  rng_key(c_.seed, "sample", static_cast<uint32_t>(i))));
    }
    std::string text;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (byte_level(data_)) {
        text += static_cast<char>(tokens[i]);
      } else if (static_cast<int64_t>(i) >= prompt) {
        text += (text.empty() ? "" : " ") + std::to_string(tokens[i]);
      }
    }
    if (lead_) {
      result_->sample = text;
      const std::string how = c_.sample_temperature > 0
                                  ? fmt::format("top-40 at temperature {}", c_.sample_temperature)
                                  : std::string("greedy");
      ZS_LOG_INFO("sample ({} tokens, {}{}):\n{}", c_.sample_tokens, how,
                  byte_level(data_) ? "" : ", token ids", text);
    }
  }

  // Full weights in GPT-2's layout (safetensors, or llm.c's .bin by extension): every rank
  // takes part in gathering each unit's masters; rank 0 writes.
  void save_weights() {
    std::optional<checkpoint::Gpt2WeightExporter> exporter;
    if (lead_) {
      checkpoint::Gpt2ExportOptions options;
      checkpoint::weight_format_from_extension(c_.save_weights, &options.format);
      exporter.emplace(c_.save_weights, task_->gpt()->config(), options);
    }
    sharded_->visit_full_parameters(
        [&](const std::string& name, const Shape& shape, const float* data) {
          if (exporter) exporter->add(name, shape, data);
        });
    if (exporter) {
      exporter->commit();
      ZS_LOG_INFO("saved the full weights to {}", c_.save_weights);
    }
  }

  void report() {
    // Memory: every rank's peaks, min/max over ranks.
    std::vector<uint64_t> mine;
    for (int cat = 0; cat < kNumMemoryCategories; ++cat) {
      mine.push_back(tracker_.peak(static_cast<MemoryCategory>(cat)));
    }
    mine.push_back(tracker_.peak_total());
    const auto all = gather_u64(comm_, compute_, mine);
    std::vector<RankMemory> ranks(all.size());
    for (size_t r = 0; r < all.size(); ++r) {
      for (int cat = 0; cat < kNumMemoryCategories; ++cat) ranks[r].peak.bytes[cat] = all[r][cat];
      ranks[r].peak_total = all[r][kNumMemoryCategories];
    }
    const MemorySpread spread = memory_spread(ranks);
    for (const Spread& s : spread.peak) {
      result_->peak_min.push_back(s.min);
      result_->peak_max.push_back(s.max);
    }
    result_->peak_total_max = spread.peak_total.max;
    result_->memory_table = memory_table(spread, c_.memory_budget);

    // Traffic of the last step next to the formula.
    TrafficFormula f;
    f.stage = c_.stage;
    f.shard_group = sharded_->shard_group().size();
    f.rank_in_group = sharded_->shard_group().rank();
    f.micro_batches = c_.grad_accum;
    f.param_bytes = dtype_size(sharding_config_.param_dtype);
    f.reduce_bytes = dtype_size(sharding_config_.reduce_dtype);
    if (comm::Communicator* replicas = sharded_->replica_group()) {
      f.replica_group = replicas->size();
      f.rank_in_replicas = replicas->rank();
    }
    for (const auto& unit : sharded_->units()) {
      f.padded_numel.push_back(unit.padded_numel);
      f.kept_gathered.push_back(unit.stays_gathered);
    }
    const auto expected = formula_bytes_sent(f);
    for (uint64_t b : expected) result_->formula_bytes_sent += b;
    for (const comm::CollectiveStats& k : step_traffic_) result_->bytes_sent += k.bytes_sent;
    if (have_step_traffic_) result_->traffic_table = traffic_table(step_traffic_, f);

    if (!c_.profile_memory.empty()) {
      const std::string json = rank_path(c_.profile_memory, comm_.rank(), comm_.size(), "");
      const std::string svg = rank_path(c_.profile_memory, comm_.rank(), comm_.size(), ".svg");
      tracker_.write_timeline_json(json);
      std::ofstream out(svg + ".tmp", std::ios::trunc);
      out << memory_svg(tracker_.timeline(), profile_start_,
                        "memory by category over one step, " + tracker_.device_name() +
                            " (ZeRO stage " + std::to_string(c_.stage) + ")");
      out.close();
      ZS_CHECK_AS(IoError, out.good() && std::rename((svg + ".tmp").c_str(), svg.c_str()) == 0,
                  "cannot write the memory chart ", svg);
      if (lead_) ZS_LOG_INFO("memory profile of the last step: {} and {} (per rank)", json, svg);
    }
    if (lead_) {
      std::printf("%s%s", result_->memory_table.c_str(), result_->traffic_table.c_str());
      std::fflush(stdout);
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
  const int64_t seq_;
  int64_t steps_ = 0;
  sharding::ShardingConfig sharding_config_;
  std::unique_ptr<sharding::ShardedModel> sharded_;
  std::vector<optim::ShardView> views_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<optim::DynamicLossScaler> scaler_;
  std::unique_ptr<optim::LrSchedule> schedule_;
  std::unique_ptr<data::BatchSampler> sampler_;
  std::unique_ptr<data::BatchLoader> loader_;
  StepTraffic step_traffic_{};
  bool have_step_traffic_ = false;
  CategoryBytes profile_start_{};
};

void run_world(const TrainConfig& config, const models::GptConfig& gpt, const TaskData& data,
               int64_t seq, const std::string& backend, const comm::LaunchInfo& launch,
               TrainResult& result);
bool rank_threads(const TrainConfig& config, const std::string& backend,
                  const comm::LaunchInfo& launch);

// zs-mem's estimate of the model states per rank for `config` at `stage` (no activations).
MemoryEstimate model_state_estimate(const TrainConfig& c, const std::vector<MemoryUnit>& units,
                                    int world, int stage) {
  MemoryModelConfig m;
  m.world = world;
  m.stage = stage;
  m.hybrid_group = stage == 3 ? c.hybrid_group : 0;
  m.param_dtype = c.precision;
  m.reduce_dtype = c.reduce_dtype_set ? c.reduce_dtype : c.precision;
  m.optimizer = c.optimizer == "sgd"
                    ? (c.momentum > 0 ? OptimizerKind::kSgdMomentum : OptimizerKind::kSgd)
                    : OptimizerKind::kAdamW;
  m.gradient_accumulation = c.grad_accum > 1;
  m.prefetch = c.prefetch;
  m.max_live_gathered_bytes = c.max_live_gathered_bytes;
  m.keep_gathered_below_bytes = c.keep_gathered_below_bytes;
  m.max_reductions_in_flight = c.max_reductions_in_flight;
  return estimate_memory(units, m);
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
  checkpoint::WeightFormat format;
  ZS_CHECK(config.save_weights.empty() ||
               checkpoint::weight_format_from_extension(config.save_weights, &format),
           "--save-weights '", config.save_weights,
           "': name the file .safetensors (Hugging Face "
           "layout) or .bin (llm.c's checkpoint), so the format is clear before training starts");
  const models::GptConfig gpt = model_config(config);
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
  const std::vector<MemoryUnit> units =
      memory_units(sharding::plan_units(plan->model(), {"Block"}));

  if (config.memory_budget > 0) {
    // Fail before anything is allocated when the model states alone cannot fit.
    const MemoryEstimate estimate = model_state_estimate(config, units, world, config.stage);
    ZS_CHECK_AS(OutOfMemory, estimate.peak.total() <= config.memory_budget,
                "the per-rank memory budget ", format_bytes(config.memory_budget),
                " is too small for this model: ", memory_advice(config, units, world));
  }

  TrainResult result;
  try {
    run_world(config, gpt, *data, seq, backend, launch, result);
  } catch (const OutOfMemory& e) {
    ZS_THROW(OutOfMemory, e.what(), "\n", memory_advice(config, units, world));
  }
  return result;
}

namespace {

// Whether this process runs config.ranks rank threads: the local backend, or --device cuda
// without a launcher (nccl over a local bootstrap, one GPU per thread).
bool rank_threads(const TrainConfig& config, const std::string& backend,
                  const comm::LaunchInfo& launch) {
  return backend == "local" || (backend == "nccl" && !launch.by_mpi_launcher() && config.ranks > 1);
}

// "rank 3 cuda:1": the tracker's name in memory errors and reports.
std::string rank_tracker_name(int rank, Device device) {
  return "rank " + std::to_string(rank) + " " + device.str();
}

void run_world(const TrainConfig& config, const models::GptConfig& gpt, const TaskData& data,
               int64_t seq, const std::string& backend, const comm::LaunchInfo& launch,
               TrainResult& result) {
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
      RankRun(config, gpt, data, seq, comm, *trackers[static_cast<size_t>(comm.rank())],
              config.ranks, &mine)
          .run();
      if (comm.rank() == 0) result = std::move(mine);
    };
    if (gpus) {
      comm::run_gpu_ranks(config.ranks, rank_main, scratch_trackers);
    } else {
      comm::run_local_ranks(config.ranks, rank_main);
    }
  } else {
    // Named before the world exists: the launcher's rank, and the GPU the nccl world will take.
    const Device device = config.device == "cuda"
                              ? Device::cuda(launch.local_rank % std::max(1, cuda_devices()))
                              : Device::cpu();
    MemoryTracker tracker(rank_tracker_name(launch.rank, device));
    std::unique_ptr<comm::Communicator> comm = comm::make_world_communicator(
        backend, launch, comm::default_timeout(), device.is_cuda() ? &tracker : nullptr);
    RankScope scope(comm->rank());
    RankRun(config, gpt, data, seq, *comm, tracker, launch.local_size, &result).run();
  }
}

}  // namespace

}  // namespace zs::train
