// The peak the log's MFU divides by (train/compute_peak.h) and the rule for every figure quoted
// against a measured limit (runtime/measured_limit.h): a start-up measurement starved by a busy
// machine never makes the log print an MFU above 100%; it is measured again and, while it still
// reads below what the run does, the MFU is shown as "—" with one warning. GPU peaks come from a
// table keyed by the name CUDA gives the device.
#include "train/compute_peak.h"

#include <gtest/gtest.h>

#include <atomic>
#include <regex>
#include <string>
#include <vector>

#include "runtime/measured_limit.h"
#include "tests/support/corpus.h"
#include "tests/support/log_capture.h"
#include "tests/support/scratch.h"
#include "tests/support/short_run.h"
#include "train/config.h"
#include "train/engine.h"

namespace zs::train {
namespace {

using zs::testing::learnable_corpus;
using zs::testing::LogCapture;
using zs::testing::ScratchDir;
using zs::testing::write_text;

// A probe whose measurements are scripted; past the script it repeats the last value.
class ScriptedProbe final : public PeakProbe {
 public:
  explicit ScriptedProbe(std::vector<double> values) : values_(std::move(values)) {}
  double measure() const override {
    const size_t i = calls_++;
    return values_[std::min(i, values_.size() - 1)];
  }
  std::string describe() const override { return "a scripted probe"; }
  size_t calls() const { return calls_; }

 private:
  std::vector<double> values_;
  mutable std::atomic<size_t> calls_{0};
};

// The real SGEMM probe, except that its first `starved` measurements read 1000x slow: the
// machine was busy when the run started.
class StarvedAtStartProbe final : public PeakProbe {
 public:
  explicit StarvedAtStartProbe(int starved) : starved_(starved) {}
  double measure() const override {
    const double real = real_.measure();
    return calls_++ < starved_ ? real / 1000 : real;
  }
  std::string describe() const override { return real_.describe() + " (starved at start)"; }

 private:
  CpuGemmProbe real_{0.005};
  int starved_;
  mutable std::atomic<int> calls_{0};
};

TEST(MeasuredLimit, AFigureAboveItsLimitIsUnknown) {
  EXPECT_EQ(percent_of_limit(50, 200), "25.0%");
  EXPECT_EQ(percent_of_limit(200, 200), "100.0%");
  EXPECT_EQ(percent_of_limit(201, 200), kUnknownFigure);
  EXPECT_EQ(percent_of_limit(1, 0), kUnknownFigure);  // no limit
  EXPECT_EQ(percent_of_limit(103, 100, "%.0f%%"), kUnknownFigure);
  EXPECT_FALSE(fraction_of_limit(-1, 100));
  ASSERT_TRUE(fraction_of_limit(25, 100));
  EXPECT_DOUBLE_EQ(*fraction_of_limit(25, 100), 0.25);
}

TEST(MeasuredLimit, ALimitReadLowIsMeasuredAgainUntilTheFigureFits) {
  int calls = 0;
  const auto measure = [&](std::vector<double> values) {
    calls = 0;
    return [&calls, values] { return values[static_cast<size_t>(calls++)]; };
  };
  // Fits: nothing is measured.
  EXPECT_EQ(remeasured_limit(100, 90, measure({1000})), 100);
  EXPECT_EQ(calls, 0);
  // The first new measurement fits: it stops there.
  EXPECT_EQ(remeasured_limit(10, 90, measure({120, 500})), 120);
  EXPECT_EQ(calls, 1);
  // Two tries that still read low: the best of them, which the figure still exceeds.
  EXPECT_EQ(remeasured_limit(10, 90, measure({30, 20})), 30);
  EXPECT_EQ(calls, 2);
  EXPECT_FALSE(fraction_of_limit(90, 30));
}

TEST(ComputePeak, AMeasuredPeakKeepsTheBestMeasurement) {
  const ScriptedProbe probe({5e9, 2e9});  // the second, at the step, reads lower: not kept
  ComputePeak peak = ComputePeak::measured(1e9, probe);
  EXPECT_TRUE(peak.known());
  EXPECT_TRUE(peak.is_measured());
  EXPECT_TRUE(peak.remeasure());
  EXPECT_EQ(peak.flops(), 5e9);
  EXPECT_FALSE(peak.remeasure());
  EXPECT_EQ(peak.flops(), 5e9);
  EXPECT_EQ(peak.describe(),
            "5.0 GFLOP/s per rank (a scripted probe, the best of 3 measurements in this run)");
  ASSERT_TRUE(peak.fraction(2.5e9));
  EXPECT_DOUBLE_EQ(*peak.fraction(2.5e9), 0.5);
  // Above the peak: measured twice more (2e9 each), still above: unknown, never > 1.
  EXPECT_FALSE(peak.fraction(6e9));
  EXPECT_EQ(probe.calls(), 4u);
}

// The re-measurements after steps cost no more than the steps: one is skipped while the probe's
// time so far plus one more measurement would exceed the steps' time.
TEST(ComputePeak, AReMeasurementAfterStepsCostsNoMoreThanTheSteps) {
  const ScriptedProbe probe({5e9});
  ComputePeak peak = ComputePeak::measured(1e9, probe, 0.5);  // the first took 0.5 s
  EXPECT_DOUBLE_EQ(peak.probe_seconds(), 0.5);
  EXPECT_FALSE(peak.remeasure_after_steps(0.9));  // 0.5 + 0.5 > 0.9: skipped
  EXPECT_EQ(probe.calls(), 0u);
  EXPECT_EQ(peak.flops(), 1e9);
  EXPECT_TRUE(peak.remeasure_after_steps(1.0));  // 0.5 + 0.5 <= 1.0: measured, and higher
  EXPECT_EQ(probe.calls(), 1u);
  EXPECT_EQ(peak.flops(), 5e9);
  // The scripted measurement took about nothing: the next fits in a little more step time.
  EXPECT_LT(peak.probe_seconds(), 0.6);
  EXPECT_FALSE(peak.remeasure_after_steps(0.7));  // measured, not higher
  EXPECT_EQ(probe.calls(), 2u);
  // A peak measured once before training and never again (a published one) is never measured.
  ComputePeak fixed = ComputePeak::published(1e9, "stated");
  EXPECT_FALSE(fixed.remeasure_after_steps(100));
}

TEST(ComputePeak, FlopRatesReadAsAPersonWritesThem) {
  EXPECT_EQ(format_flops(1e6), "1.0 MFLOP/s");
  EXPECT_EQ(format_flops(144.6e9), "144.6 GFLOP/s");
  EXPECT_EQ(format_flops(989.4e12), "989.4 TFLOP/s");
  EXPECT_EQ(format_flops(1979e12), "1979 TFLOP/s");
}

TEST(ComputePeak, APublishedPeakIsNeverMeasured) {
  ComputePeak peak = ComputePeak::published(989.4e12, "the H200 SXM's dense bf16 peak");
  EXPECT_FALSE(peak.is_measured());
  EXPECT_FALSE(peak.remeasure());
  EXPECT_EQ(peak.describe(), "989.4 TFLOP/s per rank (the H200 SXM's dense bf16 peak)");
  EXPECT_FALSE(peak.fraction(1000e12));
  ASSERT_TRUE(peak.fraction(494.7e12));
  EXPECT_DOUBLE_EQ(*peak.fraction(494.7e12), 0.5);
  EXPECT_FALSE(ComputePeak().known());
  EXPECT_FALSE(ComputePeak().fraction(1));
}

TEST(ComputePeak, RemeasuredAfterSteps1_2_4And8) {
  std::vector<int64_t> steps;
  for (int64_t step = 0; step < 100; ++step) {
    if (ComputePeak::remeasured_after(step)) steps.push_back(step);
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{0, 1, 3, 7}));
}

TEST(ComputePeak, PublishedGpuPeaksByDeviceName) {
  std::string model;
  // The names CUDA gives the devices.
  EXPECT_DOUBLE_EQ(published_gpu_peak("NVIDIA H200", DType::kBF16, &model), 989.4e12);
  EXPECT_EQ(model, "H200 SXM");
  EXPECT_DOUBLE_EQ(published_gpu_peak("NVIDIA H100 80GB HBM3", DType::kBF16, &model), 989.4e12);
  EXPECT_EQ(model, "H100 SXM");
  EXPECT_DOUBLE_EQ(published_gpu_peak("NVIDIA H100 80GB HBM3", DType::kF16, nullptr), 989.4e12);
  EXPECT_DOUBLE_EQ(published_gpu_peak("NVIDIA H100 80GB HBM3", DType::kF32, nullptr), 66.9e12);
  EXPECT_DOUBLE_EQ(published_gpu_peak("NVIDIA H100 PCIe", DType::kBF16, &model), 756e12);
  EXPECT_EQ(model, "H100 PCIe");
  EXPECT_DOUBLE_EQ(published_gpu_peak("NVIDIA GH200 480GB", DType::kBF16, &model), 989.4e12);
  EXPECT_EQ(model, "GH200");
  EXPECT_DOUBLE_EQ(published_gpu_peak("NVIDIA A100-SXM4-80GB", DType::kBF16, &model), 312e12);
  // Not in the table: the engine measures a GEMM instead.
  model = "unchanged";
  EXPECT_EQ(published_gpu_peak("NVIDIA H100 NVL", DType::kBF16, &model), 0);
  EXPECT_EQ(published_gpu_peak("NVIDIA GeForce RTX 4090", DType::kBF16, &model), 0);
  EXPECT_EQ(published_gpu_peak("NVIDIA RTX A1000", DType::kBF16, &model), 0);
  EXPECT_DOUBLE_EQ(published_gpu_peak("NVIDIA A100 80GB PCIe", DType::kBF16, nullptr), 312e12);
  EXPECT_EQ(model, "unchanged");
}

class MfuInTheLog : public ::testing::Test {
 protected:
  void SetUp() override { write_text(path_, learnable_corpus()); }
  TrainConfig run(const PeakProbe& probe) const {
    TrainConfig c = zs::testing::short_gpt_run(path_, 2, 3, DType::kF32);
    c.steps = 12;
    c.log_interval = 1;
    c.peak_probe = &probe;
    return c;
  }
  ScratchDir dir_;
  std::string path_ = dir_.path("corpus.txt");
};

// Every "MFU x%" the log printed, as numbers.
std::vector<double> logged_mfus(const std::string& log) {
  std::vector<double> mfus;
  const std::regex figure("MFU ([0-9.]+)%");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), figure); it != std::sregex_iterator();
       ++it) {
    mfus.push_back(std::stod((*it)[1].str()));
  }
  return mfus;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST_F(MfuInTheLog, AStarvedPeakNeverPrintsAnMfuAbove100Percent) {
  // Every measurement reads 1 MFLOP/s, far below what the run does: no MFU is a figure.
  const ScriptedProbe starved({1e6});
  LogCapture log;
  const TrainResult result = run_training(run(starved));
  const std::string text = log.text();
  EXPECT_TRUE(logged_mfus(text).empty()) << text;
  EXPECT_EQ(count(text, std::string("MFU ") + kUnknownFigure + " |"), result.steps.size()) << text;
  EXPECT_EQ(count(text, "MFU shown as"), 1u) << text;  // warned once
  EXPECT_NE(text.find("over 1.0 MFLOP/s per rank (a scripted probe"), std::string::npos) << text;
  EXPECT_NE(text.find("MFU: "), std::string::npos);  // the peak is stated at start
  EXPECT_NE(text.find("a scripted probe"), std::string::npos);
  for (const StepRecord& step : result.steps) EXPECT_EQ(step.mfu, -1) << step.step;
  // Measured at start, after steps 1, 2, 4 and 8, and twice more at the log lines until the
  // run's 16 measurements are spent.
  EXPECT_EQ(starved.calls(), static_cast<size_t>(ComputePeak::kMaxMeasurements));
}

TEST_F(MfuInTheLog, APeakStarvedAtStartIsMeasuredAgainAndTheMfuIsRight) {
  // The start-up measurement and the first re-measurement read 1000x slow; later ones do not.
  const StarvedAtStartProbe probe(2);
  LogCapture log;
  const TrainResult result = run_training(run(probe));
  const std::string text = log.text();
  const std::vector<double> mfus = logged_mfus(text);
  ASSERT_FALSE(mfus.empty()) << text;
  for (double mfu : mfus) EXPECT_LE(mfu, 100.0) << text;
  for (const StepRecord& step : result.steps) EXPECT_LE(step.mfu, 1.0) << step.step;
  // The last step's MFU is a figure, against the peak the run ends with.
  EXPECT_GT(result.steps.back().mfu, 0);
  EXPECT_GT(result.mfu_peak_flops, 0);
  EXPECT_NE(result.mfu_peak.find("starved at start"), std::string::npos);
}

}  // namespace
}  // namespace zs::train
