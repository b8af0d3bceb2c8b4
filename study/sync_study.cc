// The gradient-synchronization study (study/sync_study.h).
#include "study/sync_study.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <sstream>
#include <thread>

#include "comm/local/local_backend.h"
#include "ops/cpu/gemm.h"
#include "optim/adamw.h"
#include "runtime/allocator.h"
#include "runtime/error.h"
#include "runtime/memory_tracker.h"
#include "study/study_common.h"
#include "study/synthetic_data.h"
#include "train/config.h"
#include "train/svg_chart.h"
#include "train/tasks.h"
#include "train/trainer.h"

namespace zs::study {
namespace {

using sharding::DdpSync;

// What the ShardedModel's reductions tag their calls with ("gradients of <unit>", "gradient of
// <parameter>"); every other collective of a step is the Trainer's (the logged loss).
bool is_gradient_sync(const CallRecord& call) { return call.tag.rfind("gradient", 0) == 0; }

uint64_t sent_by(const std::vector<CallRecord>& calls) {
  uint64_t sent = 0;
  for (const CallRecord& c : calls) sent += c.sent;
  return sent;
}

// What every rank of one (sync, batch) run hands back.
struct RankOutcome {
  std::vector<float> losses;
  std::vector<double> ms;
  std::vector<std::vector<CallRecord>> calls;  // per iteration, this rank's
  std::vector<int64_t> unit_padded;
  std::vector<int64_t> parameter_numel;
  std::map<std::string, Shape> parameter_shapes;
  int64_t parameters = 0;
  int64_t iterations_per_epoch = 0;
};

// One rank of a run: the engine's Trainer over a Task, ShardedModel and AdamW built as zs-train
// builds them (train/config.h translate()).
void run_rank(const train::TrainConfig& config, const train::TaskData& data,
              const models::GptConfig& shape, int64_t iterations, comm::Communicator& comm,
              CallLog& log, int threads, RankOutcome& out) {
  ops::cpu::set_intra_op_threads(threads);
  const train::TrainPlan plan = train::translate(config, comm.rank(), comm.size());
  MemoryTracker tracker("rank " + std::to_string(comm.rank()));
  CpuAllocator allocator(&tracker);
  std::unique_ptr<train::Task> task = train::make_task(data, shape, shape.context);
  sharding::ShardedModel sharded(task->model(), comm, allocator, plan.sharding);
  for (const auto& unit : sharded.units()) {
    out.unit_padded.push_back(unit.padded_numel);
    for (const auto& p : unit.parameters) {
      out.parameter_numel.push_back(shape_numel(p.shape));
      out.parameter_shapes[p.name] = p.shape;
    }
  }
  out.parameters = task->model().num_parameters();
  std::vector<optim::ShardView> views = sharded.local_shards();
  optim::AdamW optimizer(views, plan.optimizer.adamw);
  std::unique_ptr<data::BatchSampler> sampler = task->sampler(plan.sampler);
  out.iterations_per_epoch = sampler->steps_per_epoch();
  const int64_t steps = std::max(iterations, out.iterations_per_epoch);
  const optim::LrSchedule schedule = plan.schedule.make(steps);
  data::LoaderOptions loader_options;
  loader_options.num_batches = steps;
  data::BatchLoader loader(*sampler, allocator, loader_options);
  train::StepOptions step_options;
  step_options.clip = config.clip;
  train::Trainer trainer(train::TrainerRefs{sharded, views, optimizer, nullptr, schedule, loader,
                                            *task, comm, allocator, nullptr},
                         step_options);
  // Construction's collectives are not the study's: count from here, in the log and the stats.
  comm.barrier()->wait();
  log.take();
  comm.stats().reset();
  for (int64_t step = 0; step < steps; ++step) {
    const train::StepRecord record = trainer.step(step);
    out.losses.push_back(record.loss);
    out.ms.push_back(record.ms);
    out.calls.push_back(log.take());  // the step waited for all of its collectives
  }
  // The log must hold every byte the communicator counted.
  uint64_t logged = 0;
  for (const auto& calls : out.calls) logged += sent_by(calls);
  ZS_CHECK(logged == comm.stats().total().bytes_sent, "zs-study: the call log of rank ",
           comm.rank(), " holds ", logged, " bytes sent, but the communicator counted ",
           comm.stats().total().bytes_sent, "; the log missed collectives");
}

SyncRun run_one(const SyncStudyOptions& o, const train::TaskData& data, const std::string& tsv,
                DdpSync sync, int64_t batch, SyncStudy& study) {
  train::TrainConfig config = classifier_config(o.setup, tsv, o.ranks, batch);
  config.stage = 0;
  config.ddp_sync = sync;
  train::validate(config, o.ranks);
  std::vector<CallLog> logs(static_cast<size_t>(o.ranks));
  std::vector<RankOutcome> outcomes(static_cast<size_t>(o.ranks));
  comm::LocalRunOptions run_options;
  run_options.wrap_backend = [&](std::unique_ptr<comm::Backend> backend, int rank) {
    return std::make_unique<RecordingBackend>(std::move(backend), logs[static_cast<size_t>(rank)]);
  };
  const int threads = rank_threads(o.setup.threads, o.ranks);
  comm::run_local_ranks(
      o.ranks,
      [&](comm::Communicator& comm) {
        run_rank(config, data, o.setup.shape, o.iterations, comm,
                 logs[static_cast<size_t>(comm.rank())], threads,
                 outcomes[static_cast<size_t>(comm.rank())]);
      },
      run_options);

  const RankOutcome& lead = outcomes[0];
  study.parameters = lead.parameters;
  study.units = lead.unit_padded.size();
  study.tensors = lead.parameter_numel.size();
  study.parameter_shapes = lead.parameter_shapes;
  SyncRun run;
  run.sync = sync;
  run.batch = batch;
  run.losses = lead.losses;
  run.ms = lead.ms;
  run.mean_ms = mean_after_first(lead.ms, o.iterations);
  run.iterations_per_epoch = lead.iterations_per_epoch;
  for (int which = 0; which < std::min(2, o.ranks); ++which) {
    const RankOutcome& rank = outcomes[static_cast<size_t>(which)];
    std::vector<uint64_t> per_iteration;
    for (const auto& calls : rank.calls) {
      std::vector<CallRecord> sync_calls;
      for (const CallRecord& c : calls) {
        if (is_gradient_sync(c)) sync_calls.push_back(c);
      }
      per_iteration.push_back(sent_by(sync_calls));
      if (which == 0 && run.sync_calls.empty() && run.other_calls.empty()) {
        run.sync_calls = sync_calls;
        for (const CallRecord& c : calls) {
          if (!is_gradient_sync(c)) run.other_calls.push_back(c);
        }
      }
    }
    ZS_CHECK(std::all_of(per_iteration.begin(), per_iteration.end(),
                         [&](uint64_t s) { return s == per_iteration.front(); }),
             "zs-study: rank ", which, "'s gradient traffic changed between iterations with ",
             ddp_sync_name(sync), " at batch ", batch);
    run.sent_per_iteration[which] = per_iteration.front();
    for (int64_t i = 0; i < run.iterations_per_epoch; ++i) {
      run.epoch_sent[which] += per_iteration[static_cast<size_t>(i)];
    }
    run.formula_per_iteration[which] = sync_bytes_sent(sync, lead.unit_padded, lead.parameter_numel,
                                                       sizeof(float), o.ranks, which);
  }
  return run;
}

std::string format_mb(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", static_cast<double>(bytes) / 1e6);
  return text;
}

std::string sync_label(DdpSync sync) { return train::ddp_sync_flag(sync); }

// A call's shape: the parameter's for a per-tensor call (its tag names the parameter), else the
// flat buffer's element count.
std::string call_shape(const CallRecord& call, const std::map<std::string, Shape>& shapes) {
  const std::string prefix = "gradient of ";
  const auto it =
      call.tag.rfind(prefix, 0) == 0 ? shapes.find(call.tag.substr(prefix.size())) : shapes.end();
  const Shape shape = it != shapes.end() ? it->second : Shape{call.numel};
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

}  // namespace

models::GptConfig classifier_shape(int64_t layers, int64_t width, int64_t heads, int64_t seq) {
  models::GptConfig g;
  g.n_layer = layers;
  g.width = width;
  g.n_head = heads;
  g.context = seq;
  g.vocab_size = 256;  // bytes
  return g;
}

models::GptConfig small_classifier_shape() { return classifier_shape(2, 64, 4, 128); }

models::GptConfig bert_base_shape() { return classifier_shape(12, 768, 12, 128); }

uint64_t sync_bytes_sent(DdpSync sync, const std::vector<int64_t>& unit_padded_numel,
                         const std::vector<int64_t>& parameter_numel, size_t element_bytes,
                         int ranks, int rank) {
  if (ranks <= 1) return 0;  // one rank averages nothing: no collective
  const uint64_t n = static_cast<uint64_t>(ranks);
  uint64_t sent = 0;
  switch (sync) {
    case DdpSync::kBucketed:  // ring all-reduce per unit: 2(N-1)/N of its bytes
      for (int64_t numel : unit_padded_numel) {
        sent += 2 * (n - 1) * (static_cast<uint64_t>(numel) * element_bytes) / n;
      }
      break;
    case DdpSync::kPerTensor:  // ring all-reduce per parameter, unpadded
      for (int64_t numel : parameter_numel) {
        sent += 2 * (n - 1) * (static_cast<uint64_t>(numel) * element_bytes) / n;
      }
      break;
    case DdpSync::kGatherScatter:  // rank 0 scatters N-1 copies; the others send theirs once
      for (int64_t numel : unit_padded_numel) {
        const uint64_t bytes = static_cast<uint64_t>(numel) * element_bytes;
        sent += rank == 0 ? (n - 1) * bytes : bytes;
      }
      break;
  }
  return sent;
}

SyncStudy run_sync_study(const SyncStudyOptions& o) {
  ZS_CHECK(o.ranks >= 2,
           "zs-study sync: --ranks must be >= 2 (one rank synchronizes nothing), got ", o.ranks);
  ZS_CHECK(o.iterations >= 2,
           "zs-study sync: --iterations must be >= 2 (the first is dropped), got ", o.iterations);
  ZS_CHECK(!o.batch_sizes.empty() && !o.syncs.empty(),
           "zs-study sync: give at least one batch size and one sync");
  SyncStudy study;
  study.options = o;
  StudyData data(o.setup, /*eval_fraction=*/0);
  for (int64_t batch : o.batch_sizes) {
    ZS_CHECK(batch >= 1 && batch * o.ranks <= o.setup.examples, "zs-study sync: batch ", batch,
             " per rank on ", o.ranks, " ranks needs at least ", batch * o.ranks,
             " examples; raise --examples (now ", o.setup.examples, ")");
    for (DdpSync sync : o.syncs) {
      std::fprintf(stderr, "zs-study sync: %s, batch %lld per rank on %d ranks...\n",
                   sync_label(sync).c_str(), static_cast<long long>(batch), o.ranks);
      study.runs.push_back(run_one(o, data.task_data(), data.tsv(), sync, batch, study));
    }
    const size_t first = study.runs.size() - o.syncs.size();
    for (size_t i = first + 1; i < study.runs.size(); ++i) {
      if (study.runs[i].losses != study.runs[first].losses) {
        study.mismatched_batches.push_back(batch);
        break;
      }
    }
  }
  return study;
}

std::string sync_markdown(const SyncStudy& s, const std::string& command) {
  const SyncStudyOptions& o = s.options;
  const models::GptConfig& g = o.setup.shape;
  std::ostringstream md;
  md << "# Gradient synchronization: gather-scatter vs per-tensor all-reduce vs bucketed DDP\n\n"
     << "Command: `" << command << "`\n\n"
     << "BERT-style classifier, " << g.n_layer << " layers, width " << g.width << ", " << g.n_head
     << " heads, sequence length " << g.context << ", byte vocabulary (" << s.parameters
     << " parameters in " << s.units << " units, " << s.tensors
     << " tensors), fp32, ZeRO stage 0 on " << o.ranks << " rank threads, AdamW lr " << o.setup.lr
     << ", seed " << o.setup.seed << "; " << o.setup.examples
     << " synthetic entailment pairs. ms per iteration: rank 0, mean of "
     << "iterations 2.." << o.iterations << ". Traffic: gradient-sync bytes sent by one rank, "
     << "from the log of every call (equal to the communicator's own counters), per iteration and "
     << "summed over the first epoch (examples / (batch x ranks) iterations). MB = 10^6 bytes.\n\n"
     << "Expected per iteration and rank (sharding/sharded_model.h, N ranks, B_u = a unit's padded "
     << "bytes, b_p = a tensor's bytes):\n\n"
     << "- gather-scatter: rank 0 sends (and receives) sum_u (N-1) B_u; every other rank "
     << "sum_u B_u\n"
     << "- per-tensor: sum_p 2(N-1)/N b_p on every rank\n"
     << "- bucketed: sum_u 2(N-1)/N B_u on every rank\n\n"
     << "Per epoch: the per-iteration bytes x iterations per epoch. The batch size does not change "
     << "the bytes per iteration (gradients have the parameters' shape); a smaller batch needs "
     << "more iterations per epoch, so more bytes per epoch.\n\n";
  md << "| sync | batch/rank | ms/iter | sync calls/iter | MB/iter rank 0 (formula) | MB/iter "
        "rank 1 (formula) | iters/epoch | MB/epoch rank 0 (formula) | MB/epoch rank 1 "
        "(formula) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const SyncRun& r : s.runs) {
    const uint64_t iters = static_cast<uint64_t>(r.iterations_per_epoch);
    char ms[32];
    std::snprintf(ms, sizeof ms, "%.1f", r.mean_ms);
    md << "| " << sync_label(r.sync) << " | " << r.batch << " | " << ms << " | "
       << r.sync_calls.size() << " | " << format_mb(r.sent_per_iteration[0]) << " ("
       << format_mb(r.formula_per_iteration[0]) << ") | " << format_mb(r.sent_per_iteration[1])
       << " (" << format_mb(r.formula_per_iteration[1]) << ") | " << iters << " | "
       << format_mb(r.epoch_sent[0]) << " (" << format_mb(iters * r.formula_per_iteration[0])
       << ") | " << format_mb(r.epoch_sent[1]) << " ("
       << format_mb(iters * r.formula_per_iteration[1]) << ") |\n";
  }
  md << "\nLosses: "
     << (s.identical() ? "identical bit for bit across the syncs at every batch size"
                       : "DIFFER between syncs at batch sizes");
  for (int64_t b : s.mismatched_batches) md << " " << b;
  md << ".\n\n## The calls of one iteration (rank 0, batch "
     << (s.runs.empty() ? 0 : s.runs[0].batch) << ")\n";
  for (const SyncRun& r : s.runs) {
    if (!s.runs.empty() && r.batch != s.runs[0].batch) break;
    md << "\n### " << sync_label(r.sync) << "\n\n| # | collective | tag | shape | dtype | bytes | "
       << "sent | received |\n|---:|---|---|---|---|---:|---:|---:|\n";
    size_t k = 0;
    for (const std::vector<CallRecord>* calls : {&r.sync_calls, &r.other_calls}) {
      for (const CallRecord& c : *calls) {
        md << "| " << k++ << " | " << comm::collective_name(c.kind) << " | " << c.tag << " | "
           << call_shape(c, s.parameter_shapes) << " | " << dtype_name(c.dtype) << " | " << c.bytes
           << " | " << c.sent << " | " << c.received << " |\n";
      }
    }
  }
  return md.str();
}

namespace {

// A bar chart over the batch sizes with one series per sync; `add` appends a run's bar.
train::Chart chart_by_batch(const SyncStudy& s, const std::string& title,
                            const std::string& y_label,
                            const std::function<void(const SyncRun&, train::ChartSeries&)>& add) {
  train::Chart chart;
  chart.title = title;
  chart.x_label = "batch size per rank";
  chart.y_label = y_label;
  for (int64_t b : s.options.batch_sizes) chart.categories.push_back(std::to_string(b));
  for (DdpSync sync : s.options.syncs) {
    train::ChartSeries series;
    series.name = sync_label(sync);
    for (const SyncRun& r : s.runs) {
      if (r.sync == sync) add(r, series);
    }
    chart.series.push_back(series);
  }
  return chart;
}

}  // namespace

std::string sync_time_svg(const SyncStudy& s) {
  return train::bar_chart_svg(chart_by_batch(
      s,
      "Time per iteration by gradient sync (" + std::to_string(s.options.ranks) +
          " ranks, mean of iterations 2.." + std::to_string(s.options.iterations) + ")",
      "ms per iteration (rank 0)",
      [](const SyncRun& r, train::ChartSeries& series) { series.values.push_back(r.mean_ms); }));
}

std::string sync_traffic_svg(const SyncStudy& s) {
  train::Chart chart = chart_by_batch(
      s, "Gradient traffic per epoch, rank 0 (" + std::to_string(s.options.ranks) + " ranks)",
      "MB sent per epoch by rank 0", [](const SyncRun& r, train::ChartSeries& series) {
        series.values.push_back(static_cast<double>(r.epoch_sent[0]) / 1e6);
        series.reference.push_back(static_cast<double>(r.formula_per_iteration[0]) *
                                   static_cast<double>(r.iterations_per_epoch) / 1e6);
      });
  chart.reference_label = "formula";
  return train::bar_chart_svg(chart);
}

}  // namespace zs::study
