// The scaling study (study/scaling_study.h).
#include "study/scaling_study.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <tuple>

#include "comm/launch.h"
#include "runtime/error.h"
#include "study/study_common.h"
#include "train/engine.h"
#include "train/svg_chart.h"

namespace zs::study {
namespace {

// The rank counts this process runs: every one asked for on rank threads, else the launcher's.
std::vector<int> ranks_to_run(const ScalingStudyOptions& o) {
  const comm::LaunchInfo launch = comm::detect_launch();
  const bool threads = o.backend == "local" && !launch.by_mpi_launcher();
  if (threads) return o.ranks;
  ZS_CHECK(launch.world_size >= 1, "zs-study scaling: no world");
  return {launch.world_size};
}

std::vector<ScalingRow> run_one(const ScalingStudyOptions& o, const std::string& tsv, int ranks,
                                bool threads, DType precision, int64_t batch) {
  train::TrainConfig c = classifier_config(o.setup, tsv, threads ? ranks : 1, batch);
  c.stage = 0;
  c.precision = precision;
  c.steps = o.steps;
  c.eval_fraction = o.eval_fraction;
  c.eval_batches = 0;                         // every held-out pair
  c.eval_micro_batches = o.eval_batch_sizes;  // empty: the training batch
  c.backend = o.backend;
  c.device = o.device;
  if (!threads) c.threads = o.setup.threads;  // 0: the engine's cores / local ranks
  const train::TrainResult result = train::run_training(c);
  // Under a launcher only rank 0's result holds the evaluations (train/records.h).
  const bool lead = comm::detect_launch().rank == 0;
  ZS_CHECK(!lead || !result.evals.empty(), "zs-study scaling: the run of ", ranks,
           " ranks evaluated nothing; raise --examples or --eval-fraction");
  ScalingRow row;
  row.ranks = result.world;
  row.precision = dtype_name(precision);
  row.batch = batch;
  row.device = o.device;
  std::vector<double> ms;
  for (const train::StepRecord& s : result.steps) ms.push_back(s.ms);
  row.step_ms = mean_after_first(ms, o.steps);
  row.examples_per_s_per_rank =
      row.step_ms > 0 ? static_cast<double>(batch) * 1e3 / row.step_ms : 0;
  // The run evaluates once, at its end: one record per evaluation batch size, in order.
  std::vector<ScalingRow> rows;
  for (const train::EvalRecord& e : result.evals) {
    row.eval_batch = e.batch;
    row.predict_ms = e.predict_ms;
    row.metric_ms = e.metric_ms;
    row.broadcast_ms = e.broadcast_ms;
    row.eval_examples = e.tokens;
    row.accuracy = e.accuracy;
    rows.push_back(row);
  }
  if (rows.empty()) rows.push_back(row);  // a non-lead rank of a launched job
  return rows;
}

std::string config_name(const ScalingRow& r) {
  return r.precision + ", batch " + std::to_string(r.batch) +
         (r.device == "cpu" ? "" : " (" + r.device + ")");
}

// The rows grouped by (precision, batch, device), each group by ranks.
std::map<std::string, std::vector<ScalingRow>> by_config(const std::vector<ScalingRow>& rows) {
  std::map<std::string, std::vector<ScalingRow>> groups;
  for (const ScalingRow& r : rows) groups[config_name(r)].push_back(r);
  for (auto& [name, group] : groups) {
    std::sort(group.begin(), group.end(),
              [](const ScalingRow& a, const ScalingRow& b) { return a.ranks < b.ranks; });
  }
  return groups;
}

int max_ranks(const std::vector<ScalingRow>& rows) {
  int most = 1;
  for (const ScalingRow& r : rows) most = std::max(most, r.ranks);
  return most;
}

train::Chart line_chart(const std::vector<ScalingRow>& rows, const std::string& title,
                        const std::string& y_label,
                        double (*value)(const ScalingRow&, const std::vector<ScalingRow>&)) {
  train::Chart chart;
  chart.title = title;
  chart.x_label = "ranks";
  chart.y_label = y_label;
  for (const auto& [name, group] : by_config(rows)) {
    train::ChartSeries s;
    s.name = name;
    for (const ScalingRow& r : group) {
      // The training figures repeat over evaluation batch sizes: one point per rank count.
      if (!s.x.empty() && s.x.back() == r.ranks) continue;
      const double v = value(r, rows);
      if (v <= 0) continue;
      s.x.push_back(r.ranks);
      s.values.push_back(v);
    }
    chart.series.push_back(s);
  }
  return chart;
}

}  // namespace

std::vector<ScalingRow> run_scaling_study(const ScalingStudyOptions& o) {
  ZS_CHECK(o.steps >= 2, "zs-study scaling: --steps must be >= 2 (the first is dropped), got ",
           o.steps);
  ZS_CHECK(!o.ranks.empty() && !o.precisions.empty() && !o.batch_sizes.empty(),
           "zs-study scaling: give at least one rank count, precision and batch size");
  for (int64_t b : o.eval_batch_sizes) {
    ZS_CHECK(b >= 1, "zs-study scaling: --eval-batch-sizes must be >= 1, got ", b);
  }
  for (int r : o.ranks) ZS_CHECK(r >= 1, "zs-study scaling: --ranks must be >= 1, got ", r);
  const comm::LaunchInfo launch = comm::detect_launch();
  const bool threads = o.backend == "local" && !launch.by_mpi_launcher();
  // Each process writes its own copy of the data (under a launcher, one per process).
  ClassifierSetup setup = o.setup;
  StudyData data(setup, o.eval_fraction);
  std::vector<ScalingRow> rows;
  for (int ranks : ranks_to_run(o)) {
    for (DType precision : o.precisions) {
      for (int64_t batch : o.batch_sizes) {
        if (launch.rank == 0) {
          std::fprintf(stderr, "zs-study scaling: %d rank%s, %s, batch %lld per rank...\n", ranks,
                       ranks == 1 ? "" : "s", dtype_name(precision), static_cast<long long>(batch));
        }
        for (ScalingRow& row : run_one(o, data.tsv(), ranks, threads, precision, batch)) {
          rows.push_back(std::move(row));
        }
      }
    }
  }
  return rows;
}

double speedup(const ScalingRow& row, const std::vector<ScalingRow>& rows) {
  for (const ScalingRow& base : rows) {
    if (base.ranks == 1 && base.precision == row.precision && base.batch == row.batch &&
        base.device == row.device && base.examples_per_s_per_rank > 0) {
      return row.ranks * row.examples_per_s_per_rank / base.examples_per_s_per_rank;
    }
  }
  return 0;
}

std::string scaling_rows_tsv(const std::vector<ScalingRow>& rows) {
  std::ostringstream out;
  out << "ranks\tprecision\tbatch\tdevice\tstep_ms\texamples_per_s_per_rank\tpredict_ms\tmetric_"
         "ms\tbroadcast_ms\teval_examples\taccuracy\teval_batch\n";
  out.precision(9);
  for (const ScalingRow& r : rows) {
    out << r.ranks << '\t' << r.precision << '\t' << r.batch << '\t' << r.device << '\t'
        << r.step_ms << '\t' << r.examples_per_s_per_rank << '\t' << r.predict_ms << '\t'
        << r.metric_ms << '\t' << r.broadcast_ms << '\t' << r.eval_examples << '\t' << r.accuracy
        << '\t' << r.eval_batch << '\n';
  }
  return out.str();
}

std::vector<ScalingRow> read_scaling_rows(const std::string& text, const std::string& source) {
  std::istringstream in(text);
  std::string line;
  std::vector<ScalingRow> rows;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (number == 1 || line.empty()) continue;  // the header
    std::istringstream fields(line);
    ScalingRow r;
    fields >> r.ranks >> r.precision >> r.batch >> r.device >> r.step_ms >>
        r.examples_per_s_per_rank >> r.predict_ms >> r.metric_ms >> r.broadcast_ms >>
        r.eval_examples >> r.accuracy;
    ZS_CHECK(!fields.fail(), "zs-study scaling: ", source, " line ", number,
             " is not a row of 11 or 12 tab-separated figures (ranks, precision, batch, device, "
             "step_ms, ...); remove the line, or the file, to start a new table");
    if (!(fields >> r.eval_batch)) r.eval_batch = r.batch;  // a row of an older file
    rows.push_back(r);
  }
  return rows;
}

std::vector<ScalingRow> merge_scaling_rows(std::vector<ScalingRow> rows,
                                           const std::vector<ScalingRow>& added) {
  const auto key = [](const ScalingRow& r) {
    return std::make_tuple(r.device, r.precision, r.batch, r.ranks, r.eval_batch);
  };
  for (const ScalingRow& a : added) {
    rows.erase(std::remove_if(rows.begin(), rows.end(),
                              [&](const ScalingRow& r) { return key(r) == key(a); }),
               rows.end());
    rows.push_back(a);
  }
  std::sort(rows.begin(), rows.end(),
            [&](const ScalingRow& a, const ScalingRow& b) { return key(a) < key(b); });
  return rows;
}

std::string scaling_markdown(const std::vector<ScalingRow>& rows, const std::string& setup,
                             const std::string& command) {
  std::ostringstream md;
  md << "# Data-parallel scaling of the BERT-style classifier\n\nCommand: `" << command << "`\n\n"
     << setup << "\n\n"
     << "Step time: rank 0, mean of the steps after the first. Throughput per rank = batch per "
        "rank / step time. Speedup = total throughput / the 1-rank run's (ideal = ranks). "
        "Evaluation of the held-out pairs on rank 0, split into predict (forwards), metric (loss "
        "and correct counts from the logits) and broadcast (the sums over ranks, which includes "
        "waiting for the slowest rank).\n\n"
     << "| ranks | precision | batch/rank | step ms | examples/s per rank | speedup (ideal) | "
        "eval batch | eval predict ms | eval metric ms | eval broadcast ms | eval examples | "
        "accuracy |\n"
     << "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  char line[400];
  for (const ScalingRow& r : rows) {
    const double s = speedup(r, rows);
    char speed[32] = "-";
    if (s > 0) std::snprintf(speed, sizeof speed, "%.2f (%d)", s, r.ranks);
    std::snprintf(
        line, sizeof line,
        "| %d | %s%s | %lld | %.1f | %.1f | %s | %lld | %.2f | %.3f | %.2f | %lld | %.1f%% |\n",
        r.ranks, r.precision.c_str(), r.device == "cpu" ? "" : (" " + r.device).c_str(),
        static_cast<long long>(r.batch), r.step_ms, r.examples_per_s_per_rank, speed,
        static_cast<long long>(r.eval_batch), r.predict_ms, r.metric_ms, r.broadcast_ms,
        static_cast<long long>(r.eval_examples), 100 * r.accuracy);
    md << line;
  }
  return md.str();
}

std::string scaling_throughput_svg(const std::vector<ScalingRow>& rows) {
  return train::line_chart_svg(line_chart(rows, "Throughput per rank", "examples/s per rank",
                                          [](const ScalingRow& r, const std::vector<ScalingRow>&) {
                                            return r.examples_per_s_per_rank;
                                          }));
}

std::string scaling_speedup_svg(const std::vector<ScalingRow>& rows) {
  train::Chart chart = line_chart(
      rows, "Speedup vs ranks (total throughput / 1 rank's)", "speedup",
      [](const ScalingRow& r, const std::vector<ScalingRow>& all) { return speedup(r, all); });
  train::ChartSeries ideal;
  ideal.name = "ideal";
  ideal.dashed = true;
  for (int r = 1; r <= max_ranks(rows); r *= 2) {
    ideal.x.push_back(r);
    ideal.values.push_back(r);
  }
  if (ideal.x.back() != max_ranks(rows)) {
    ideal.x.push_back(max_ranks(rows));
    ideal.values.push_back(max_ranks(rows));
  }
  chart.series.push_back(ideal);
  return train::line_chart_svg(chart);
}

std::string scaling_step_time_svg(const std::vector<ScalingRow>& rows) {
  return train::line_chart_svg(
      line_chart(rows, "Step time", "ms per step (rank 0)",
                 [](const ScalingRow& r, const std::vector<ScalingRow>&) { return r.step_ms; }));
}

std::string scaling_eval_svg(const std::vector<ScalingRow>& rows) {
  train::Chart chart;
  chart.title = "Evaluation time on rank 0: predict / metric / broadcast";
  chart.x_label = "ranks; precision and batch per rank";
  chart.y_label = "ms";
  chart.stacked = true;
  train::ChartSeries predict, metric, broadcast;
  predict.name = "predict";
  metric.name = "metric";
  broadcast.name = "broadcast";
  for (const ScalingRow& r : rows) {
    // A third line, "eval <rows>", where the evaluation batch is not the training batch.
    chart.categories.push_back(
        std::to_string(r.ranks) + (r.ranks == 1 ? " rank\n" : " ranks\n") + r.precision + " b" +
        std::to_string(r.batch) +
        (r.eval_batch == r.batch ? "" : "\neval " + std::to_string(r.eval_batch)));
    predict.values.push_back(r.predict_ms);
    metric.values.push_back(r.metric_ms);
    broadcast.values.push_back(r.broadcast_ms);
  }
  chart.series = {predict, metric, broadcast};
  chart.width = std::max(760, 180 + 78 + 70 * static_cast<int>(rows.size()));
  return train::bar_chart_svg(chart);
}

}  // namespace zs::study
