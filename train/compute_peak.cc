// ComputePeak and its probes (train/compute_peak.h).
#include "train/compute_peak.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>

#include "ops/cpu/gemm.h"
#include "ops/linear.h"
#include "runtime/autograd.h"
#include "runtime/measured_limit.h"
#include "runtime/tensor.h"
#include "train/step_log.h"

namespace zs::train {

double CpuGemmProbe::measure() const { return measure_gemm_peak(budget_seconds_); }

std::string CpuGemmProbe::describe() const {
  const int threads = ops::cpu::intra_op_threads();
  return "SGEMM 256x768x768 on " + std::to_string(threads) +
         (threads == 1 ? " thread" : " threads");
}

double MatmulProbe::measure() const {
  NoGradScope no_grad;
  const Tensor a = Tensor::empty({n_, n_}, dtype_, allocator_, "peak probe a");
  const Tensor b = Tensor::empty({n_, n_}, dtype_, allocator_, "peak probe b");
  a.fill(0.5f);
  b.fill(0.25f);
  // One untimed product first (the library's first call loads its kernels), and a read back so
  // that the timed rounds start on an idle device.
  ops::matmul(a, b).slice(0, {1}).item();
  const int per_round = 8;
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    const auto start = std::chrono::steady_clock::now();
    Tensor c;
    for (int i = 0; i < per_round; ++i) c = ops::matmul(a, b);
    c.slice(0, {1}).item();  // waits for the device's queue, this round's products included
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double flops = 2.0 * static_cast<double>(n_) * static_cast<double>(n_) *
                         static_cast<double>(n_) * per_round;
    if (seconds > 0) best = std::max(best, flops / seconds);
  }
  return best;
}

std::string MatmulProbe::describe() const {
  return std::string("a ") + dtype_name(dtype_) + " " + std::to_string(n_) + "x" +
         std::to_string(n_) + "x" + std::to_string(n_) + " matmul on " + allocator_.device().str() +
         " measured in this run";
}

namespace {

// Dense peaks from the data sheets (TFLOP/s without sparsity): fp16 and bf16 on the tensor
// cores, fp32 on the CUDA cores (the engine's fp32 GEMMs do not use TF32). H200 and GH200 have
// the H100 SXM's compute.
struct PublishedGpu {
  const char* model;
  const char* names[3];  // substrings of cudaDeviceProp::name, the first that matches wins
  double f16_tflops;     // fp16 and bf16
  double f32_tflops;
};

const PublishedGpu kPublishedGpus[] = {
    {"GH200", {"GH200"}, 989.4, 66.9},
    {"H200 SXM", {"H200"}, 989.4, 66.9},
    {"H100 PCIe", {"H100 PCIe"}, 756.0, 51.2},
    {"H100 SXM", {"H100 SXM", "H100 80GB HBM3"}, 989.4, 66.9},
    {"A100", {"A100-", "A100 "}, 312.0, 19.5},  // not "RTX A1000"
};

}  // namespace

double published_gpu_peak(const std::string& device_name, DType dtype, std::string* model) {
  // NVL and other variants with other clocks are not in the table: a GEMM is measured instead.
  if (device_name.find("NVL") != std::string::npos) return 0;
  for (const PublishedGpu& gpu : kPublishedGpus) {
    for (const char* name : gpu.names) {
      if (name == nullptr || device_name.find(name) == std::string::npos) continue;
      if (model) *model = gpu.model;
      const double tflops = dtype == DType::kF32 ? gpu.f32_tflops : gpu.f16_tflops;
      return tflops * 1e12;
    }
  }
  return 0;
}

ComputePeak ComputePeak::published(double flops, std::string source) {
  ComputePeak peak;
  peak.flops_ = flops;
  peak.what_ = std::move(source);
  return peak;
}

ComputePeak ComputePeak::measured(double first, const PeakProbe& probe, double first_seconds) {
  ComputePeak peak;
  peak.flops_ = first;
  peak.probe_ = &probe;
  peak.what_ = probe.describe();
  peak.measurements_ = 1;
  peak.probe_seconds_ = peak.last_seconds_ = first_seconds;
  return peak;
}

std::string ComputePeak::describe() const {
  std::string text = format_flops(flops_) + " per rank (" + what_;
  if (probe_) {
    text += ", the best of " + std::to_string(measurements_) +
            (measurements_ == 1 ? " measurement" : " measurements") + " in this run";
  }
  return text + ")";
}

double ComputePeak::timed_measure() {
  const auto start = std::chrono::steady_clock::now();
  const double flops = probe_->measure();
  last_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  probe_seconds_ += last_seconds_;
  ++measurements_;
  return flops;
}

bool ComputePeak::remeasure() {
  if (!probe_ || measurements_ >= kMaxMeasurements) return false;
  const double now = timed_measure();
  if (!(now > flops_)) return false;
  flops_ = now;
  return true;
}

bool ComputePeak::remeasure_after_steps(double steps_seconds) {
  if (probe_seconds_ + last_seconds_ > steps_seconds) return false;
  return remeasure();
}

std::optional<double> ComputePeak::fraction(double achieved) {
  if (probe_) {
    const int tries = std::min(2, kMaxMeasurements - measurements_);
    flops_ = remeasured_limit(
        flops_, achieved, [&] { return timed_measure(); }, tries);
  }
  return fraction_of_limit(achieved, flops_);
}

std::string format_flops(double flops) {
  const char* unit = "MFLOP/s";
  double value = flops / 1e6;
  if (flops >= 1e12) {
    unit = "TFLOP/s";
    value = flops / 1e12;
  } else if (flops >= 1e9) {
    unit = "GFLOP/s";
    value = flops / 1e9;
  }
  char text[48];
  std::snprintf(text, sizeof text, value >= 1000 ? "%.0f %s" : "%.1f %s", value, unit);
  return text;
}

}  // namespace zs::train
