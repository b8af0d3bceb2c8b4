// Training throughput of whole zs-train runs (the engine, not a kernel): tokens/s and model
// FLOP utilization — 6 · parameters · tokens/s over the single-core SGEMM peak measured in this
// same run (× the cores the run uses; measured again when a run beats it, and "—" when it still
// reads below a run's rate) — for a GPT preset at B=4 per rank: 1 rank fp32 at
// T = 64 and 256 (target: >= 50% of the GEMM peak), 1 rank at ZeRO-3 against ZeRO-0 (target:
// <= 1.01x the step time; one rank shards nothing), then ZeRO stages 0-3 on 2 local ranks of one
// core each, and the scaling table (ranks 1, 2; throughput per rank; speedup), printed and
// written as markdown and SVG; last, the gradient traffic of one optimizer step at stage 0 on 2
// ranks with 1 and 8 micro-batches, reduced per micro-batch and once per step (--grad-sync
// per-step: the bytes must not grow with the micro-batches). Synthetic random tokens. Prints;
// never asserts.
//
// Usage: zs-bench-train [STEPS [PRESET [OUT_PREFIX]]] — positional, defaults 4, gpt2,
// zs-bench-train (e.g. zs-bench-train 4 124M /tmp/zbt). An unknown preset is an error (exit 2).
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "bench/fma_peak.h"
#include "bench/random_tokens.h"
#include "models/gpt_presets.h"
#include "ops/cpu/gemm.h"
#include "runtime/error.h"
#include "runtime/measured_limit.h"
#include "train/config.h"
#include "train/engine.h"
#include "train/svg_chart.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Best single-thread SGEMM GFLOP/s over shapes like a GPT-2 block's (tokens × C × 4C).
double sgemm_peak_gflops() {
  const int64_t m = 1024, n = 3072, k = 768;
  std::vector<float> a(m * k, 0.5f), b(k * n, 0.25f), c(m * n);
  zs::ops::cpu::set_intra_op_threads(1);
  double best = 0;
  for (int r = 0; r < 5; ++r) {
    const auto start = std::chrono::steady_clock::now();
    zs::ops::cpu::sgemm(false, false, m, n, k, 1, a.data(), k, b.data(), n, 0, c.data(), n);
    best = std::max(best, 2.0 * m * n * k / seconds_since(start) / 1e9);
  }
  return best;
}

struct Row {
  std::string label;
  int ranks;
  int stage;
  int64_t seq;
  double ms;
  double tokens_per_s;
  double flops_per_rank;  // model FLOP/s of one rank (6 · parameters · tokens/s ÷ ranks)
  size_t peak_bytes;
};

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::max(2, std::atoi(argv[1])) : 4;
  const std::string preset = argc > 2 ? argv[2] : "gpt2";
  const std::string out = argc > 3 ? argv[3] : "zs-bench-train";
  zs::models::GptConfig model;
  try {
    model = zs::models::gpt_preset(preset);
  } catch (const zs::InvalidArgument& e) {
    std::fprintf(stderr,
                 "zs-bench-train: %s\nUsage: zs-bench-train [STEPS [PRESET [OUT_PREFIX]]]\n",
                 e.what());
    return 2;
  }
  const int64_t params = zs::models::gpt_parameter_count(model);
  const double fma = zs::bench::fma_peak_gflops(1, 200);
  double gemm = sgemm_peak_gflops();
  const double first_gemm = gemm;
  std::printf(
      "zs-bench-train: %s (%lld parameters), B=4 per rank, %d steps per run (the first "
      "is warm-up)\nper core: FMA peak %.1f GFLOP/s, SGEMM peak %.1f GFLOP/s (%s, "
      "1024x3072x768)\n\n",
      preset.c_str(), static_cast<long long>(params), steps, fma, gemm,
      zs::ops::cpu::gemm_backend_name());

  // Random tokens, enough windows for every run.
  const int64_t max_seq = 256;
  const std::string data = "/tmp/zs-bench-train-" + std::to_string(getpid()) + ".tokens";
  zs::bench::write_random_tokens(data, static_cast<size_t>(8 * steps * (max_seq + 1) * 4 + 1),
                                 static_cast<uint32_t>(model.vocab_size), 5);

  std::vector<Row> rows;
  auto config = [&](int ranks, int stage, int64_t seq) {
    zs::train::TrainConfig c;
    c.model = preset;
    c.data = data;
    c.eval_fraction = 0;
    c.seq_len = seq;
    c.micro_batch = 4;
    c.ranks = ranks;
    c.threads = 1;
    c.stage = stage;
    c.steps = steps;
    c.log_interval = 1000000;
    c.progress = false;
    return c;
  };
  auto run = [&](const std::string& label, int ranks, int stage, int64_t seq) {
    const zs::train::TrainResult r = zs::train::run_training(config(ranks, stage, seq));
    std::vector<double> ms;
    for (size_t s = 1; s < r.steps.size(); ++s) ms.push_back(r.steps[s].ms);
    std::sort(ms.begin(), ms.end());
    const double median = ms[ms.size() / 2];
    const double tps = static_cast<double>(r.tokens_per_step) / (median / 1e3);
    const double flops_per_rank = 6.0 * static_cast<double>(params) * tps / ranks;
    // A run faster than the peak means the peak was measured low (runtime/measured_limit.h).
    gemm = zs::remeasured_limit(gemm, flops_per_rank / 1e9, sgemm_peak_gflops);
    rows.push_back({label, ranks, stage, seq, median, tps, flops_per_rank, r.peak_total_max});
  };
  run("1 rank fp32", 1, 0, 64);
  // Issue 19's target: at one rank, stage 3 (the default) costs what stage 0 costs.
  run("1 rank fp32, ZeRO-3", 1, 3, 64);
  run("1 rank fp32", 1, 0, 256);
  for (int stage = 0; stage <= 3; ++stage) {
    run("2 ranks, ZeRO-" + std::to_string(stage), 2, stage, 64);
  }
  // Gradient traffic per optimizer step (the last step's, rank 0) at stage 0, 2 ranks, T=64.
  struct Traffic {
    int64_t accum;
    zs::sharding::GradSync sync;
    uint64_t bytes = 0;
    uint64_t formula = 0;
  };
  std::vector<Traffic> traffic = {{1, zs::sharding::GradSync::kPerMicroBatch},
                                  {8, zs::sharding::GradSync::kPerMicroBatch},
                                  {8, zs::sharding::GradSync::kPerStep}};
  for (Traffic& t : traffic) {
    zs::train::TrainConfig c = config(2, 0, 64);
    c.steps = 2;
    c.grad_accum = t.accum;
    c.grad_sync = t.sync;
    const zs::train::TrainResult r = zs::train::run_training(c);
    t.bytes = r.bytes_sent;
    t.formula = r.formula_bytes_sent;
  }
  std::remove(data.c_str());

  std::printf("%-22s %5s %10s %12s %16s %14s\n", "run", "T", "step ms", "tokens/s",
              "MFU (of SGEMM)", "peak mem/rank");
  for (const Row& r : rows) {
    std::printf("%-22s %5lld %10.1f %12.1f %16s %14s\n", r.label.c_str(),
                static_cast<long long>(r.seq), r.ms, r.tokens_per_s,
                zs::percent_of_limit(r.flops_per_rank, gemm * 1e9).c_str(),
                zs::format_bytes(r.peak_bytes).c_str());
  }
  if (gemm > first_gemm) {
    std::printf(
        "(the SGEMM peak read below a run's rate at first and was measured again: %.1f GFLOP/s, "
        "%.1f at start; the MFU column is against the best; %s: still below, the machine was "
        "busy)\n",
        gemm, first_gemm, zs::kUnknownFigure);
  }

  // One rank shards nothing: ZeRO-3 against ZeRO-0, in this run.
  std::printf(
      "\n1 rank, T=64: ZeRO-3 / ZeRO-0 step time %.3fx (target <= 1.01), peak memory %s vs %s\n",
      rows[1].ms / rows[0].ms, zs::format_bytes(rows[1].peak_bytes).c_str(),
      zs::format_bytes(rows[0].peak_bytes).c_str());

  // Scaling: 1 rank vs the 2-rank runs at T=64 (1 core per rank).
  const Row& base = rows[0];
  std::ofstream md(out + ".md");
  md << "| run | ranks | tokens/s | tokens/s per rank | speedup |\n|---|---|---|---|---|\n";
  for (const Row& r : rows) {
    if (r.seq != 64) continue;
    char line[200];
    std::snprintf(line, sizeof line, "| %s | %d | %.1f | %.1f | %.2fx |\n", r.label.c_str(),
                  r.ranks, r.tokens_per_s, r.tokens_per_s / r.ranks,
                  r.tokens_per_s / base.tokens_per_s);
    md << line;
  }
  // The chart: one bar per T=64 run, through the reports' shared chart writer.
  zs::train::Chart chart;
  chart.title = preset + " tokens/s at T=64, B=4 per rank (1 core per rank)";
  chart.x_label = "run";
  chart.y_label = "tokens/s";
  zs::train::ChartSeries tokens_per_s;
  tokens_per_s.name = "tokens/s";
  for (const Row& r : rows) {
    if (r.seq != 64) continue;
    chart.categories.push_back(r.label);
    tokens_per_s.values.push_back(r.tokens_per_s);
  }
  chart.series.push_back(tokens_per_s);
  chart.width = std::max(760, 260 + 120 * static_cast<int>(chart.categories.size()));
  std::ofstream(out + ".svg") << zs::train::bar_chart_svg(chart);
  std::printf("\nscaling table: %s.md, chart: %s.svg\n", out.c_str(), out.c_str());

  std::printf(
      "\ngradient traffic of one optimizer step, ZeRO-0 on 2 ranks, rank 0 (sent; the formula's "
      "bytes; target: per-step sync sends at 8 micro-batches what 1 micro-batch sends)\n");
  for (const Traffic& t : traffic) {
    std::printf("  --grad-accum %lld --grad-sync %-16s %12s  (formula %s)\n",
                static_cast<long long>(t.accum), zs::train::grad_sync_flag(t.sync).c_str(),
                zs::format_bytes(t.bytes).c_str(), zs::format_bytes(t.formula).c_str());
  }
  std::printf("  per-step at 8 / per-micro-batch at 1: %.3fx\n",
              static_cast<double>(traffic[2].bytes) / static_cast<double>(traffic[0].bytes));
  return 0;
}
