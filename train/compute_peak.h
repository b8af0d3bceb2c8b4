// The peak a run's model FLOP utilization (MFU) divides by, and where it came from.
//
// On the CPU it is the rate of a GEMM measured on the rank's threads: once before the ranks
// start, again after steps 1, 2, 4 and 8, and again whenever the run itself
// does more than it, keeping the best. The re-measurements after steps cost at most what the
// steps did: one is skipped while the probe's time so far, and one more measurement, would
// exceed the steps' time so far (a slow machine, or a sanitizer's instrumented GEMM, where one
// measurement takes longer than several steps). A measurement taken while another job had the cores
// reads low, and a low peak reads as a high MFU; the best of several spread over the run does not
// depend on the moment of start-up. An MFU that would still be above 100% is not a figure: the
// log shows it as unknown (runtime/measured_limit.h).
//
// On a GPU it is the device's published dense peak for the run's dtype, from a table keyed by the
// name CUDA gives the device; a GPU not in the table gets a GEMM measured in the run, by the CPU's
// rule.
//
// A PeakProbe is the seam: the engine measures through TrainConfig::peak_probe when a test sets
// one (a starved, slow measurement). Not thread-safe: one ComputePeak per logging rank.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "runtime/dtype.h"

namespace zs {
class Allocator;
}

namespace zs::train {

// One measurement of a compute rate, in FLOP/s, taken now on the calling thread.
class PeakProbe {
 public:
  virtual ~PeakProbe() = default;
  virtual double measure() const = 0;
  // What it measures, for the log ("SGEMM 256x768x768 on 2 threads").
  virtual std::string describe() const = 0;
};

// The CPU's probe: ops::cpu::sgemm of 256×768×768 with the calling thread's intra-op threads,
// the best of at least 3 products over about `budget_seconds` (measure_gemm_peak).
class CpuGemmProbe final : public PeakProbe {
 public:
  explicit CpuGemmProbe(double budget_seconds) : budget_seconds_(budget_seconds) {}
  double measure() const override;
  std::string describe() const override;

 private:
  double budget_seconds_;
};

// A probe on any device the ops reach: ops::matmul of two n×n matrices of `dtype` allocated from
// `allocator` (a GPU's: cuBLAS), the best of a few timed rounds, each ended by reading one
// element back (which waits for the device). `allocator` must outlive the probe.
class MatmulProbe final : public PeakProbe {
 public:
  MatmulProbe(Allocator& allocator, DType dtype, int64_t n)
      : allocator_(allocator), dtype_(dtype), n_(n) {}
  double measure() const override;
  std::string describe() const override;

 private:
  Allocator& allocator_;
  DType dtype_;
  int64_t n_;
};

// The dense (no sparsity) peak FLOP/s of the GPU CUDA names `device_name` ("NVIDIA H200",
// "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB") for GEMMs in `dtype` (fp32 without TF32, as
// the engine runs them), from the vendors' data sheets; `model` (if not null) is set to the
// table's name for it. 0 when the device is not in the table.
double published_gpu_peak(const std::string& device_name, DType dtype, std::string* model);

class ComputePeak {
 public:
  // Whether a measured peak is measured again after the run's step `step` (0-based, counted
  // from the first step this process runs): steps 1, 2, 4 and 8, each measurement about 30 ms
  // on the lead rank while the others wait.
  static bool remeasured_after(int64_t step) { return step < 8 && ((step + 1) & step) == 0; }
  // Measurements in all, the first included: a peak that still reads low after them stays so
  // (the MFU stays unknown) rather than stalling every log line.
  static constexpr int kMaxMeasurements = 16;

  ComputePeak() = default;  // none: no MFU is shown
  // A fixed figure (a GPU's published peak, or one measured once before training): never
  // re-measured. `source` says what it is, for the log.
  static ComputePeak published(double flops, std::string source);
  // Measured through `probe` (not owned; it must outlive this), whose first measurement was
  // `first` and took `first_seconds` (taken at start-up, maybe on another thread with the same
  // compute threads).
  static ComputePeak measured(double first, const PeakProbe& probe, double first_seconds = 0);

  bool known() const { return flops_ > 0; }
  double flops() const { return flops_; }
  bool is_measured() const { return probe_ != nullptr; }
  // "144.6 GFLOP/s per rank (SGEMM 256x768x768 on 1 thread, the best of 3 measurements in this
  // run)"; "989 TFLOP/s per rank (the NVIDIA H200's dense bf16 peak, published)".
  std::string describe() const;
  // A measured peak: one more measurement; true when it raised the peak.
  bool remeasure();
  // remeasure() after a step, when the steps so far took `steps_seconds`: skipped (false) while
  // the probe's seconds so far plus one more measurement's would exceed them.
  bool remeasure_after_steps(double steps_seconds);
  // Seconds spent in the probe so far, the first measurement included.
  double probe_seconds() const { return probe_seconds_; }
  // `achieved` FLOP/s of one rank as a fraction of the peak. Above the peak, a measured peak is
  // measured again (twice at most, kMaxMeasurements in all); a fraction that would still exceed
  // 1 is nothing.
  std::optional<double> fraction(double achieved);

 private:
  double timed_measure();  // one probe_ measurement, counted and timed

  double flops_ = 0;
  const PeakProbe* probe_ = nullptr;
  std::string what_;
  int measurements_ = 0;
  double probe_seconds_ = 0;  // all measurements
  double last_seconds_ = 0;   // the latest one
};

// A measured peak before a ComputePeak is made: the first measurement and its probe (null:
// none).
struct PeakMeasurement {
  double flops = 0;
  const PeakProbe* probe = nullptr;
  double seconds = 0;  // what the measurement took
};

// "1.0 MFLOP/s", "144.6 GFLOP/s", "989.4 TFLOP/s".
std::string format_flops(double flops);

}  // namespace zs::train
