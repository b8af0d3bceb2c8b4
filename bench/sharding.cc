// Step time and peak per-rank memory of one GPT trained through ShardedModel on local ranks
// (threads of this process, each with cores / ranks intra-op threads), for ZeRO stages 0, 1, 2, 3
// in fp32 and in bf16 (param_dtype = reduce_dtype = bf16), stage 3 with prefetch on and off,
// stages 2/3 under each limit on gradient reductions in flight (reductions=, default 2; the
// grads column shows what the limit bounds: the full unit gradients waiting for their
// reduce-scatter).
// The target: stage 3 <= 1.15 x stage 0 on the local backend with prefetch on; the ratio
// is printed from the same run, per dtype (and per round with rounds > 1).
//
// A step is what examples/tiny_gpt_zero3.cc runs, without clipping: loss, backward,
// finish_backward, AdamW step, after_step. Every step starts after a barrier; a step's time is
// the slower rank's, and ms/step is the MEDIAN over the measured steps after the warm-up (best
// and worst also shown); GFLOP/s is Gpt::train_flops of the global batch over that time. Memory
// is each rank's MemoryTracker peak per category over the measured steps, the max over ranks
// (live bytes), next to the peak bytes the rank's CpuAllocator reserved (live blocks at their
// size class plus its cache of freed blocks; cache=off turns that cache off, to compare).
//
// The second table says where a step's time goes (means over measured steps and ranks):
// - the rank (compute) thread's phases: forward+loss, backward, finish_backward, optimizer,
//   after_step; stage 3's gathers are waited for inside forward and backward, so forward and
//   backward are split into on-CPU (thread CPU clock), runnable-but-not-running (runqueue wait
//   from /proc/self/task/<tid>/schedstat: another thread had the core) and blocked (the rest:
//   sleeping in Work::wait).
// - the communicator thread: its time inside the step's collectives (comm.stats(), includes
//   rendezvous waits), its CPU time inside them (a wrapping backend reads the thread CPU clock)
//   and its runqueue wait (a prefetch that is queued but has no core does not progress).
// - the process: CPU time, kernel time and minor page faults per step, next to a calibration
//   printed in the header (the cost of first-touching a freshly mapped page); and the share of
//   the machine's CPU other processes took during the measured steps (the machine is shared:
//   rows with a large share are not comparable).
// - the step's all-gathers: MiB received and MiB the backend copied (CommStats::bytes_copied).
// Before the sweep, one GPT block's all-gather on the same local ranks from a separate shard
// and in place (the rank's shard is its slot of the gathered buffer): copied bytes and time.
// Exposed communication: every rank records its spans (runtime/trace.h: the model's per-unit
// all-gathers and reductions from issue to completion, forward, backward and the optimizer as
// compute, the host's waits for collectives as not compute) and the main table prints, per
// measured step, the communication in flight and the part of it no compute overlapped
// (exposed_communication; medians over steps of the mean over ranks). Recording costs a clock
// read and a locked push per span, a few dozen per step.
// Prints; never asserts.
//
// Usage: zs-bench-sharding [key=value ...] (width, layers, context, batch, ranks, steps, warmup,
// rounds, dtypes, stages, prefetch, reductions, cache; see kUsage)
// A quick check: zs-bench-sharding width=64 layers=2 context=32 steps=2 warmup=1
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/fma_peak.h"
#include "bench/probes.h"
#include "comm/local/local_backend.h"
#include "models/gpt.h"
#include "ops/cpu/gemm.h"
#include "optim/adamw.h"
#include "runtime/allocator.h"
#include "runtime/autograd.h"
#include "runtime/rng.h"
#include "runtime/trace.h"
#include "sharding/sharded_model.h"

namespace {

using zs::bench::Clock;
using zs::bench::current_tid;
using zs::bench::first_touch_us_per_page;
using zs::bench::machine_times;
using zs::bench::MachineTimes;
using zs::bench::process_usage;
using zs::bench::ProcessUsage;
using zs::bench::runqueue_seconds;
using zs::bench::seconds_since;
using zs::bench::thread_cpu_seconds;
using zs::bench::TimedBackend;
using zs::comm::CollectiveKind;

struct RunConfig {
  int stage = 0;
  zs::DType dtype = zs::DType::kF32;
  bool prefetch = true;
  int max_reductions = 2;  // ShardingConfig::max_reductions_in_flight (stages 2/3)
};

struct Workload {
  zs::models::GptConfig gpt;
  int64_t global_batch = 8;
  int ranks = 2;
  int warmup = 2;
  int steps = 6;
  bool allocator_cache = true;  // CpuAllocatorOptions::caching
};

// One measured step on one rank (seconds).
struct StepSample {
  double wall = 0;
  double communication = 0;  // collectives in flight during the step (trace spans)
  double exposed = 0;        // of which not overlapped by compute
  double forward = 0;        // loss included
  double backward = 0;
  double finish_backward = 0;
  double optimizer = 0;
  double after_step = 0;
  // The rank thread in forward and in backward: on a core (thread CPU clock), and runnable but
  // waiting for one (schedstat); the rest of the phase's wall time it was blocked in waits.
  double forward_cpu = 0;
  double forward_runqueue = 0;
  double backward_cpu = 0;
  double backward_runqueue = 0;
};

constexpr zs::MemoryCategory kShownCategories[] = {
    zs::MemoryCategory::kParameters,    zs::MemoryCategory::kGradients,
    zs::MemoryCategory::kMasterWeights, zs::MemoryCategory::kOptimizerState,
    zs::MemoryCategory::kActivations,   zs::MemoryCategory::kCommBuffers,
};
constexpr int kNumShown = 6;

constexpr CollectiveKind kStepKinds[] = {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter,
                                         CollectiveKind::kAllReduce};

// What one rank measured over the measured steps.
struct RankReport {
  std::vector<StepSample> steps;
  std::array<size_t, kNumShown> peak_bytes{};
  size_t peak_total = 0;
  size_t peak_reserved = 0;  // the CpuAllocator's
  double comm_wall = 0;      // communicator thread inside step collectives (comm.stats())
  double comm_cpu = 0;       // its CPU time inside them
  double comm_runqueue = 0;  // communicator thread, runnable but waiting for a core
  std::array<double, 3> comm_wall_by_kind{};  // by kStepKinds
  // The step all-gathers' bytes received and bytes the backend copied (comm.stats()).
  uint64_t gather_received = 0, gather_copied = 0;
  // Rank 0 only, over the window (all threads of the process; the window also holds the
  // barriers between steps):
  ProcessUsage process;
  double others_cpu_share = 0;  // other processes' CPU / (cores × window)
  double steal_share = 0;       // hypervisor-stolen time / (cores × window)
  size_t units = 0;
};

double mib(size_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// One run of one configuration (one round).
struct Result {
  RunConfig config;
  std::vector<double> step_ms;  // per measured step, the slower rank's
  // Per measured step, the mean over ranks of the collectives in flight and of the exposed part.
  std::vector<double> communication_ms, exposed_ms;
  std::array<size_t, kNumShown> peak_bytes{};
  size_t peak_total = 0;
  size_t peak_reserved = 0;
  StepSample phases_ms;                                            // means over steps and ranks
  double comm_wall_ms = 0, comm_cpu_ms = 0, comm_runqueue_ms = 0;  // means over steps and ranks
  std::array<double, 3> comm_wall_by_kind_ms{};
  double gather_received_mib = 0, gather_copied_mib = 0;  // means over steps and ranks
  ProcessUsage process_per_step;                          // ms for cpu and system; faults per step
  double others_cpu_share = 0;
  double steal_share = 0;
  size_t units = 0;
};

Result run(const RunConfig& config, const Workload& work) {
  const int ranks = work.ranks;
  const int threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / ranks);
  const int64_t local_batch = work.global_batch / ranks;
  const int64_t seq = work.gpt.context;
  std::vector<RankReport> reports(static_cast<size_t>(ranks));
  std::vector<TimedBackend*> backends(static_cast<size_t>(ranks), nullptr);
  std::mutex backends_mutex;

  zs::comm::LocalRunOptions options;
  options.wrap_backend = [&](std::unique_ptr<zs::comm::Backend> backend, int rank) {
    auto timed = std::make_unique<TimedBackend>(std::move(backend));
    std::lock_guard<std::mutex> lock(backends_mutex);
    backends[static_cast<size_t>(rank)] = timed.get();
    return std::unique_ptr<zs::comm::Backend>(std::move(timed));
  };
  zs::comm::run_local_ranks(
      ranks,
      [&](zs::comm::Communicator& comm) {
        zs::ops::cpu::set_intra_op_threads(threads);
        const int rank = comm.rank();
        TimedBackend* timed = nullptr;
        {
          std::lock_guard<std::mutex> lock(backends_mutex);
          timed = backends[static_cast<size_t>(rank)];
        }
        RankReport& report = reports[static_cast<size_t>(rank)];
        zs::MemoryTracker tracker("rank " + std::to_string(rank) + " cpu");
        zs::CpuAllocatorOptions allocator_options;
        allocator_options.caching = work.allocator_cache;
        zs::CpuAllocator allocator(&tracker, allocator_options);
        zs::models::Gpt model(work.gpt);
        zs::sharding::ShardingConfig sharding;
        sharding.stage = config.stage;
        sharding.seed = 42;
        sharding.param_dtype = config.dtype;
        sharding.reduce_dtype = config.dtype;
        sharding.prefetch = config.prefetch;
        sharding.max_reductions_in_flight = config.max_reductions;
        zs::sharding::ShardedModel sharded(model, comm, allocator, sharding);
        zs::Trace trace(rank);
        sharded.set_trace(&trace);
        zs::optim::AdamWOptions adam;
        adam.weight_decay = 0.01f;
        zs::optim::AdamW optimizer(sharded.local_shards(), adam);
        report.units = sharded.units().size();

        // Random tokens, fixed across steps (the data does not change the work).
        zs::Tensor ids = zs::Tensor::empty({local_batch, seq}, zs::DType::kI32, allocator, "ids");
        zs::Tensor targets =
            zs::Tensor::empty({local_batch, seq}, zs::DType::kI32, allocator, "targets");
        for (int64_t i = 0; i < local_batch * seq; ++i) {
          const uint64_t index = static_cast<uint64_t>(rank * local_batch * seq + i);
          ids.data<int32_t>()[i] = static_cast<int32_t>(
              zs::random_bits(zs::rng_key(7, "ids"), index) % work.gpt.vocab_size);
          targets.data<int32_t>()[i] = static_cast<int32_t>(
              zs::random_bits(zs::rng_key(7, "targets"), index) % work.gpt.vocab_size);
        }

        const long compute_tid = current_tid();
        double comm_queued_start = 0;
        std::array<double, 3> cpu_start{};
        MachineTimes machine_start;
        ProcessUsage process_start;
        Clock::time_point window_start;
        for (int step = 0; step < work.warmup + work.steps; ++step) {
          comm.barrier()->wait();
          const bool measured = step >= work.warmup;
          if (step == work.warmup) {
            // The measured window opens; every counter below is a difference from here.
            comm.stats().reset();
            tracker.reset_peaks();
            allocator.reset_peak_reserved();
            comm_queued_start = runqueue_seconds(timed->thread_id());
            for (size_t k = 0; k < 3; ++k) cpu_start[k] = timed->cpu_seconds(kStepKinds[k]);
            machine_start = machine_times();
            process_start = process_usage();
            window_start = Clock::now();
          }
          StepSample sample;
          const auto t0 = Clock::now();
          {
            // CPU time from the thread clock: schedstat's run time of a running thread lags
            // by up to a tick.
            const double cpu0 = thread_cpu_seconds();
            const double queued0 = runqueue_seconds(compute_tid);
            zs::Tensor loss = model.loss(ids, targets);
            const auto t1 = Clock::now();
            trace.record(zs::TraceLane::kCompute, "forward", t0, t1);
            const double cpu1 = thread_cpu_seconds();
            const double queued1 = runqueue_seconds(compute_tid);
            zs::backward(loss);
            trace.record(zs::TraceLane::kCompute, "backward", t1, Clock::now());
            sample.forward = std::chrono::duration<double>(t1 - t0).count();
            sample.backward = seconds_since(t1);
            sample.forward_cpu = cpu1 - cpu0;
            sample.forward_runqueue = queued1 - queued0;
            sample.backward_cpu = thread_cpu_seconds() - cpu1;
            sample.backward_runqueue = runqueue_seconds(compute_tid) - queued1;
          }
          auto t = Clock::now();
          sharded.finish_backward();
          sample.finish_backward = seconds_since(t);
          t = Clock::now();
          optimizer.step(adam.lr);
          sample.optimizer = seconds_since(t);
          trace.record(zs::TraceLane::kOptimizer, "optimizer", t, Clock::now());
          t = Clock::now();
          sharded.after_step();
          sample.after_step = seconds_since(t);
          sample.wall = seconds_since(t0);
          if (measured) {
            // Only measured steps get a step span, so the exposure has one entry per such step.
            trace.record(zs::TraceLane::kStep, "step", t0, Clock::now());
            report.steps.push_back(sample);
          }
        }
        const std::vector<zs::StepExposure> exposure = zs::exposed_communication(trace.spans());
        for (size_t k = 0; k < exposure.size() && k < report.steps.size(); ++k) {
          report.steps[k].communication = exposure[k].communication_us / 1e6;
          report.steps[k].exposed = exposure[k].exposed_us / 1e6;
        }
        // Close the window: the stats of the step collectives are final once the barrier
        // (queued after them on the same thread) has completed.
        comm.barrier()->wait();
        const double window = seconds_since(window_start);
        report.comm_runqueue = runqueue_seconds(timed->thread_id()) - comm_queued_start;
        const zs::comm::CollectiveStats gathers = comm.stats().get(CollectiveKind::kAllGather);
        report.gather_received = gathers.bytes_received;
        report.gather_copied = gathers.bytes_copied;
        for (size_t k = 0; k < 3; ++k) {
          report.comm_wall_by_kind[k] = comm.stats().get(kStepKinds[k]).seconds;
          report.comm_wall += report.comm_wall_by_kind[k];
          report.comm_cpu += timed->cpu_seconds(kStepKinds[k]) - cpu_start[k];
        }
        if (rank == 0) {
          const ProcessUsage process_end = process_usage();
          report.process = {process_end.cpu - process_start.cpu,
                            process_end.system - process_start.system,
                            process_end.minor_faults - process_start.minor_faults};
          const MachineTimes machine_end = machine_times();
          const double capacity = window * static_cast<double>(std::thread::hardware_concurrency());
          const double others = (machine_end.busy - machine_start.busy) - report.process.cpu;
          report.others_cpu_share = std::max(0.0, others) / capacity;
          report.steal_share = (machine_end.steal - machine_start.steal) / capacity;
        }
        for (int c = 0; c < kNumShown; ++c)
          report.peak_bytes[c] = tracker.peak(kShownCategories[c]);
        report.peak_total = tracker.peak_total();
        report.peak_reserved = allocator.stats().peak_reserved_bytes;
      },
      options);

  Result result;
  result.config = config;
  result.units = reports[0].units;
  result.others_cpu_share = reports[0].others_cpu_share;
  result.steal_share = reports[0].steal_share;
  result.process_per_step = {1e3 * reports[0].process.cpu / work.steps,
                             1e3 * reports[0].process.system / work.steps,
                             reports[0].process.minor_faults / work.steps};
  for (int s = 0; s < work.steps; ++s) {
    double slowest = 0;
    for (const RankReport& r : reports) slowest = std::max(slowest, r.steps[s].wall);
    result.step_ms.push_back(1e3 * slowest);
    double communication = 0, exposed = 0;
    for (const RankReport& r : reports) {
      communication += r.steps[s].communication;
      exposed += r.steps[s].exposed;
    }
    result.communication_ms.push_back(1e3 * communication / ranks);
    result.exposed_ms.push_back(1e3 * exposed / ranks);
  }
  const double per = 1e3 / (static_cast<double>(work.steps) * ranks);  // mean ms per step & rank
  for (const RankReport& r : reports) {
    for (int c = 0; c < kNumShown; ++c) {
      result.peak_bytes[c] = std::max(result.peak_bytes[c], r.peak_bytes[c]);
    }
    result.peak_total = std::max(result.peak_total, r.peak_total);
    result.peak_reserved = std::max(result.peak_reserved, r.peak_reserved);
    StepSample& p = result.phases_ms;
    for (const StepSample& s : r.steps) {
      p.wall += s.wall * per;
      p.forward += s.forward * per;
      p.backward += s.backward * per;
      p.finish_backward += s.finish_backward * per;
      p.optimizer += s.optimizer * per;
      p.after_step += s.after_step * per;
      p.forward_cpu += s.forward_cpu * per;
      p.backward_cpu += s.backward_cpu * per;
      p.forward_runqueue += s.forward_runqueue * per;
      p.backward_runqueue += s.backward_runqueue * per;
    }
    result.comm_wall_ms += r.comm_wall * per;
    result.comm_cpu_ms += r.comm_cpu * per;
    result.comm_runqueue_ms += r.comm_runqueue * per;
    for (size_t k = 0; k < 3; ++k) result.comm_wall_by_kind_ms[k] += r.comm_wall_by_kind[k] * per;
    // per / 1e3: one over steps × ranks.
    result.gather_received_mib += mib(r.gather_received) * per / 1e3;
    result.gather_copied_mib += mib(r.gather_copied) * per / 1e3;
  }
  return result;
}

const char* dtype_label(zs::DType dtype) { return dtype == zs::DType::kF32 ? "fp32" : "bf16"; }

std::string label(const RunConfig& c) {
  return "ZeRO-" + std::to_string(c.stage) + " " + dtype_label(c.dtype) +
         (c.stage == 3 ? (c.prefetch ? " pf" : " no-pf") : "") +
         (c.stage >= 2 ? " r" + std::to_string(c.max_reductions) : "");
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

// The runs of one configuration over all rounds.
struct Runs {
  RunConfig config;
  std::vector<Result> rounds;

  std::vector<double> all_steps_ms() const { return pooled(&Result::step_ms); }
  // One per-step figure of every round, pooled.
  std::vector<double> pooled(std::vector<double> Result::*figure) const {
    std::vector<double> all;
    for (const Result& r : rounds) all.insert(all.end(), (r.*figure).begin(), (r.*figure).end());
    return all;
  }
  double median_ms() const { return median(all_steps_ms()); }
  // The mean over rounds of one diagnostic.
  template <typename Get>
  double mean(Get get) const {
    double sum = 0;
    for (const Result& r : rounds) sum += get(r);
    return sum / static_cast<double>(rounds.size());
  }
};

// One column of the "where the time goes" table.
struct Column {
  const char* name;
  bool new_group;  // a '|' before it
  double (*value)(const Result&);
};

const Column kColumns[] = {
    {"wall", false, [](const Result& r) { return r.phases_ms.wall; }},
    {"fwd", true, [](const Result& r) { return r.phases_ms.forward; }},
    {"f.cpu", false, [](const Result& r) { return r.phases_ms.forward_cpu; }},
    {"f.runq", false, [](const Result& r) { return r.phases_ms.forward_runqueue; }},
    {"f.blk", false,
     [](const Result& r) {
       const StepSample& p = r.phases_ms;
       return std::max(0.0, p.forward - p.forward_cpu - p.forward_runqueue);
     }},
    {"bwd", true, [](const Result& r) { return r.phases_ms.backward; }},
    {"b.cpu", false, [](const Result& r) { return r.phases_ms.backward_cpu; }},
    {"b.runq", false, [](const Result& r) { return r.phases_ms.backward_runqueue; }},
    {"b.blk", false,
     [](const Result& r) {
       const StepSample& p = r.phases_ms;
       return std::max(0.0, p.backward - p.backward_cpu - p.backward_runqueue);
     }},
    {"fin", true, [](const Result& r) { return r.phases_ms.finish_backward; }},
    {"opt", false, [](const Result& r) { return r.phases_ms.optimizer; }},
    {"aft", false, [](const Result& r) { return r.phases_ms.after_step; }},
    {"in-col", true, [](const Result& r) { return r.comm_wall_ms; }},
    {"ag", false, [](const Result& r) { return r.comm_wall_by_kind_ms[0]; }},
    {"rs", false, [](const Result& r) { return r.comm_wall_by_kind_ms[1]; }},
    {"ar", false, [](const Result& r) { return r.comm_wall_by_kind_ms[2]; }},
    {"ccpu", false, [](const Result& r) { return r.comm_cpu_ms; }},
    {"agMiB", false, [](const Result& r) { return r.gather_received_mib; }},
    {"cpMiB", false, [](const Result& r) { return r.gather_copied_mib; }},
    {"crunq", false, [](const Result& r) { return r.comm_runqueue_ms; }},
    {"pcpu", true, [](const Result& r) { return r.process_per_step.cpu; }},
    {"sys", false, [](const Result& r) { return r.process_per_step.system; }},
    {"faults", false, [](const Result& r) { return r.process_per_step.minor_faults; }},
    {"others%", true, [](const Result& r) { return 100 * r.others_cpu_share; }},
    {"steal%", false, [](const Result& r) { return 100 * r.steal_share; }},
};

// The local all-gather of one GPT block's parameters (12·C² + 13·C fp32 elements, padded to a
// multiple of the ranks) in its two forms, one after the other in this run: from a separate
// shard (what every gather did before in-place gathers, and what stage 3's released units still
// do) and in place (the shard is the rank's slot of full: stages 1/2 and units kept gathered).
// Prints the bytes the backend copied per call and rank, and the median time of a call.
void print_gather_forms(const Workload& work) {
  const int ranks = work.ranks;
  const int64_t width = work.gpt.width;
  const int64_t block = 12 * width * width + 13 * width;
  const int64_t shard = (block + ranks - 1) / ranks;
  constexpr int kWarmup = 3, kReps = 21;
  struct Form {
    double ms = 0;
    uint64_t copied = 0;
  };
  Form forms[2];  // separate, in place (rank 0's)
  zs::comm::run_local_ranks(ranks, [&](zs::comm::Communicator& comm) {
    zs::CpuAllocator allocator(nullptr);
    zs::Tensor full = zs::Tensor::zeros({shard * ranks}, zs::DType::kF32, allocator, "full");
    zs::Tensor separate = zs::Tensor::zeros({shard}, zs::DType::kF32, allocator, "shard");
    const zs::Tensor slot = comm.rank_slice(full);
    for (int form = 0; form < 2; ++form) {
      const zs::Tensor& input = form == 0 ? separate : slot;
      std::vector<double> ms;
      for (int rep = 0; rep < kWarmup + kReps; ++rep) {
        comm.barrier()->wait();
        if (rep == kWarmup) comm.stats().reset();
        const auto start = Clock::now();
        comm.all_gather(input, full)->wait();
        if (rep >= kWarmup) ms.push_back(1e3 * seconds_since(start));
      }
      if (comm.rank() == 0) {
        forms[form].ms = median(ms);
        forms[form].copied = comm.stats().get(CollectiveKind::kAllGather).bytes_copied / kReps;
      }
    }
  });
  std::printf(
      "local all-gather of one block (%.2f MiB fp32) on %d ranks, per call on rank 0 (median of "
      "%d):\n  separate shard: copied %.2f MiB, %.3f ms\n  in place:       copied %.2f MiB, "
      "%.3f ms\n\n",
      mib(static_cast<size_t>(shard * ranks) * 4), ranks, kReps, mib(forms[0].copied), forms[0].ms,
      mib(forms[1].copied), forms[1].ms);
}

// Splits "a,b,c".
std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    if (end > begin) items.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return items;
}

const char kUsage[] =
    "usage: %s [key=value ...]\n"
    "  width=320 layers=4 context=128 batch=8 (global) ranks=2   the model and the run\n"
    "  steps=6 warmup=2 (>= 1: stage 3 records its prefetch order on the first step)\n"
    "  rounds=1     repeat the whole sweep, interleaved; figures pool the rounds' steps\n"
    "  dtypes=fp32,bf16 stages=0,1,2,3 prefetch=on,off (stage 3)   which runs\n"
    "  reductions=2 stages 2/3: max gradient reductions in flight, a list (0 = no limit)\n"
    "  cache=on     the CpuAllocator's cache of freed blocks (off: every free goes to malloc)\n"
    "  quick check: %s width=64 layers=2 context=32 steps=2 warmup=1\n";

}  // namespace

int main(int argc, char** argv) {
  Workload work;
  work.gpt.vocab_size = 256;
  work.gpt.width = 320;
  work.gpt.n_layer = 4;
  work.gpt.context = 128;
  int rounds = 1;
  std::vector<std::string> dtypes{"fp32", "bf16"}, stages{"0", "1", "2", "3"},
      prefetch{"on", "off"}, reductions{"2"};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    const std::string key = arg.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : arg.substr(eq + 1);
    const long long number = std::atoll(value.c_str());
    if (key == "width") {
      work.gpt.width = number;
    } else if (key == "layers") {
      work.gpt.n_layer = number;
    } else if (key == "context") {
      work.gpt.context = number;
    } else if (key == "batch") {
      work.global_batch = number;
    } else if (key == "ranks") {
      work.ranks = static_cast<int>(number);
    } else if (key == "steps") {
      work.steps = static_cast<int>(number);
    } else if (key == "warmup") {
      work.warmup = static_cast<int>(number);
    } else if (key == "rounds") {
      rounds = static_cast<int>(number);
    } else if (key == "dtypes") {
      dtypes = split_list(value);
    } else if (key == "stages") {
      stages = split_list(value);
    } else if (key == "prefetch") {
      prefetch = split_list(value);
    } else if (key == "reductions") {
      reductions = split_list(value);
    } else if (key == "cache" && (value == "on" || value == "off")) {
      work.allocator_cache = value == "on";
    } else {
      std::fprintf(stderr, "unknown argument '%s'\n", arg.c_str());
      std::fprintf(stderr, kUsage, argv[0], argv[0]);
      return 2;
    }
  }
  work.gpt.n_head = std::max<int64_t>(1, work.gpt.width / 64);
  std::vector<RunConfig> configs;
  for (const std::string& d : dtypes) {
    const zs::DType dtype = d == "bf16" ? zs::DType::kBF16 : zs::DType::kF32;
    for (const std::string& st : stages) {
      const int stage = std::atoi(st.c_str());
      if (stage < 2) {
        configs.push_back({stage, dtype, true, 0});
        continue;
      }
      for (const std::string& r : reductions) {
        const int limit = std::atoi(r.c_str());
        if (stage == 2) {
          configs.push_back({2, dtype, true, limit});
          continue;
        }
        for (const std::string& p : prefetch) configs.push_back({3, dtype, p == "on", limit});
      }
    }
  }
  bool valid_configs = !configs.empty() && !reductions.empty();
  for (const RunConfig& c : configs) {
    valid_configs = valid_configs && c.stage >= 0 && c.stage <= 3 && c.max_reductions >= 0;
  }
  if (work.gpt.width < 1 || work.gpt.n_layer < 1 || work.steps < 1 || work.warmup < 1 ||
      work.gpt.context < 1 || work.ranks < 1 || work.global_batch < 1 ||
      work.global_batch % work.ranks != 0 || work.gpt.width % work.gpt.n_head != 0 || rounds < 1 ||
      !valid_configs) {
    std::fprintf(stderr, kUsage, argv[0], argv[0]);
    return 2;
  }

  const int threads =
      std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / work.ranks);
  zs::models::Gpt shape(work.gpt);  // for its FLOPs and parameter count only
  const double flops = shape.train_flops(work.global_batch, work.gpt.context);
  const double tokens = static_cast<double>(work.global_batch * work.gpt.context);
  std::printf(
      "GPT width %lld, %lld layers, %lld heads, context %lld, vocab %lld, global batch %lld: "
      "%lld parameters, %.2f GFLOP/step (Gpt::train_flops)\n"
      "%d local ranks x %d intra-op thread(s) on %u cores, gemm %s; load average %s\n"
      "machine: FMA peak (%s, all cores) %.0f GFLOP/s; first touch of fresh memory %.2f us/page "
      "(fault + zeroing)\n"
      "ms/step = MEDIAN over %d measured steps (after %d warm-up) x %d round(s), each step the "
      "slower rank's, started after a barrier; best/worst shown.\n"
      "Peak MiB per category: MemoryTracker peak over the measured steps, max over ranks "
      "(total = peak of the sum, incl. workspace/other; live bytes); reserved = the "
      "CpuAllocator's peak (live blocks + cache), cache %s.\n\n",
      static_cast<long long>(work.gpt.width), static_cast<long long>(work.gpt.n_layer),
      static_cast<long long>(work.gpt.n_head), static_cast<long long>(work.gpt.context),
      static_cast<long long>(work.gpt.vocab_size), static_cast<long long>(work.global_batch),
      static_cast<long long>(shape.num_parameters()), flops / 1e9, work.ranks, threads,
      std::thread::hardware_concurrency(), zs::ops::cpu::gemm_backend_name(),
      load_average().c_str(), zs::bench::kIsa,
      zs::bench::fma_peak_gflops(static_cast<int>(std::thread::hardware_concurrency()), 200),
      first_touch_us_per_page(), work.steps, work.warmup, rounds,
      work.allocator_cache ? "on" : "off");

  print_gather_forms(work);

  std::vector<Runs> runs;
  for (const RunConfig& config : configs) runs.push_back({config, {}});
  for (int round = 0; round < rounds; ++round) {
    for (Runs& r : runs) {
      r.rounds.push_back(run(r.config, work));
      if (rounds > 1) {
        std::fprintf(stderr, "round %d %-21s %8.1f ms/step (others %.0f%%, steal %.0f%%)\n",
                     round + 1, label(r.config).c_str(), median(r.rounds.back().step_ms),
                     100 * r.rounds.back().others_cpu_share, 100 * r.rounds.back().steal_share);
      }
    }
  }

  std::printf(
      "exposed = ms per step of communication not overlapped by compute, in-flt = ms per step "
      "with a collective in flight (trace spans; medians over steps of the mean over ranks)\n");
  std::printf("%5s %5s %8s %6s %9s %8s %8s %8s %7s %8s %7s | %7s %7s %7s %7s %7s %7s | %7s %8s\n",
              "stage", "dtype", "prefetch", "reduc", "ms/step", "best", "worst", "tok/s", "GFLOP/s",
              "exposed", "in-flt", "params", "grads", "master", "optim", "activ", "comm", "total",
              "reserved");
  for (const Runs& r : runs) {
    const std::vector<double> steps = r.all_steps_ms();
    const double ms = median(steps);
    std::array<size_t, kNumShown> peak{};
    size_t peak_total = 0, peak_reserved = 0;
    for (const Result& result : r.rounds) {
      for (int c = 0; c < kNumShown; ++c) peak[c] = std::max(peak[c], result.peak_bytes[c]);
      peak_total = std::max(peak_total, result.peak_total);
      peak_reserved = std::max(peak_reserved, result.peak_reserved);
    }
    std::printf(
        "%5d %5s %8s %6s %9.1f %8.1f %8.1f %8.0f %7.2f %8.1f %7.1f | %7.2f %7.2f %7.2f %7.2f %7.2f "
        "%7.2f | %7.2f %8.2f\n",
        r.config.stage, dtype_label(r.config.dtype),
        r.config.stage == 3 ? (r.config.prefetch ? "on" : "off") : "-",
        r.config.stage < 2             ? "-"
        : r.config.max_reductions == 0 ? "none"
                                       : std::to_string(r.config.max_reductions).c_str(),
        ms, *std::min_element(steps.begin(), steps.end()),
        *std::max_element(steps.begin(), steps.end()), tokens / (ms / 1e3),
        flops / (ms / 1e3) / 1e9, median(r.pooled(&Result::exposed_ms)),
        median(r.pooled(&Result::communication_ms)), mib(peak[0]), mib(peak[1]), mib(peak[2]),
        mib(peak[3]), mib(peak[4]), mib(peak[5]), mib(peak_total), mib(peak_reserved));
  }

  // The ratio wherever both stage 0 and stage 3 ran in this dtype.
  bool header = false;
  for (zs::DType dtype : {zs::DType::kF32, zs::DType::kBF16}) {
    const Runs* stage0 = nullptr;
    const Runs* stage3[2] = {nullptr, nullptr};  // prefetch off, on
    for (const Runs& r : runs) {
      if (r.config.dtype != dtype) continue;
      if (r.config.stage == 0) stage0 = &r;
      // Stage 3 under the first limit of reductions=.
      if (r.config.stage == 3 && r.config.max_reductions == std::atoi(reductions[0].c_str())) {
        stage3[r.config.prefetch ? 1 : 0] = &r;
      }
    }
    if (stage0 == nullptr || (stage3[0] == nullptr && stage3[1] == nullptr)) continue;
    if (!header) {
      std::printf(
          "\nstage-3 / stage-0 step time (medians, this run; target <= 1.15 with prefetch on):\n");
      header = true;
    }
    std::printf("  %s:", dtype_label(dtype));
    for (int on : {1, 0}) {
      if (stage3[on] == nullptr) continue;
      const double ratio = stage3[on]->median_ms() / stage0->median_ms();
      std::printf("  prefetch %s %.3f%s", on ? "on" : "off", ratio,
                  on ? (ratio <= 1.15 ? " (meets)" : " (misses)") : "");
      if (rounds > 1) {
        std::printf(" [rounds:");
        for (int k = 0; k < rounds; ++k) {
          std::printf(" %.3f",
                      median(stage3[on]->rounds[k].step_ms) / median(stage0->rounds[k].step_ms));
        }
        std::printf("]");
      }
    }
    std::printf("\n");
  }

  std::printf(
      "\nwhere the time goes (ms per step; rank and comm columns are means over measured steps "
      "and ranks%s):\n"
      "  rank thread: wall of the step and of fwd (incl. loss), bwd, fin = finish_backward, "
      "opt = AdamW, aft = after_step;\n"
      "    in fwd and bwd: cpu = on a core, runq = runnable but waiting for a core, blk = "
      "blocked in waits (wall - cpu - runq)\n"
      "  comm thread: in-col = inside step collectives (comm.stats(), incl. rendezvous waits), "
      "of which ag/rs/ar = all_gather/reduce_scatter/all_reduce;\n"
      "    ccpu = its CPU time inside them, crunq = its runqueue wait (ready to run, no free "
      "core);\n"
      "    agMiB = MiB the step's all-gathers received, cpMiB = MiB the backend copied for "
      "them (local: its transport; in-place gathers skip the rank's own slice)\n"
      "  process (all threads, per step incl. the barrier between steps): pcpu = CPU time, sys "
      "= of which kernel, faults = minor page faults\n"
      "  others%% = CPU share other processes took of the machine during the measured steps, "
      "steal%% = share the hypervisor took (a VM)\n",
      rounds > 1 ? " and rounds" : "");
  std::printf("%-21s", "config");
  for (const Column& c : kColumns) std::printf("%s %6s", c.new_group ? " |" : "", c.name);
  std::printf("\n");
  for (const Runs& r : runs) {
    std::printf("%-21s", label(r.config).c_str());
    for (const Column& c : kColumns) {
      std::printf("%s %6.1f", c.new_group ? " |" : "", r.mean(c.value));
    }
    std::printf("\n");
  }
  std::printf("\nunits: %zu (Blocks + root); load average at the end %s\n", runs[0].rounds[0].units,
              load_average().c_str());
  return 0;
}
