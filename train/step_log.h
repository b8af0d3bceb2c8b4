// StepLog: the loop part that writes the lines a user reads while a run trains, and records
// each step on rank 0.
//
// At the start: the model, the configuration and the world. Per step (rank 0): the record with
// its throughput goes into the result; on a terminal, a progress bar; every log_interval steps
// (and the first, the last and any skipped step) a line with loss, lr, tokens/s over the last
// log interval, step time, ETA, model FLOP utilization, grad norm, peak memory (and the fp16
// loss scale; with an NVMe tier the disk's read and write rates over the step, the time the
// step waited for it, and the host tier's peak). One rank's thread.
#pragma once

#include <cstdint>
#include <string>

#include "train/compute_peak.h"
#include "train/loop.h"
#include "train/rank_context.h"

namespace zs::train {

// Throughput over the steps since the last log line: tokens and step seconds are summed as
// steps end; rate() is tokens / seconds of the interval so far, restart() begins the next one.
// Only the steps' own times count (evaluation and logging between steps do not).
class IntervalRate {
 public:
  void add(int64_t tokens, double seconds) {
    tokens_ += tokens;
    seconds_ += seconds;
    ++steps_;
  }
  double rate() const { return seconds_ > 0 ? static_cast<double>(tokens_) / seconds_ : 0; }
  // Mean seconds per step of the interval (0 before any step).
  double seconds_per_step() const { return steps_ > 0 ? seconds_ / steps_ : 0; }
  void restart() { *this = IntervalRate(); }

 private:
  int64_t tokens_ = 0;
  double seconds_ = 0;
  int64_t steps_ = 0;
};

// Model FLOPs per trained token of a GPT, forward and backward (PaLM, appendix B; nanoGPT's
// estimate_mfu): 6·N for the weight matmuls (2 forward, 4 backward per parameter), plus
// 12·L·T·C for attention's QKᵀ and AV (L layers, T tokens of context, width C = heads × head
// size). Embeddings are counted in N, as both sources do.
double model_flops_per_token(int64_t parameters, int64_t n_layer, int64_t seq, int64_t width);

// The calling thread's fp32 GEMM rate in FLOP/s, through ops::cpu::sgemm with the thread's
// intra-op threads: the best of repeated 256×768×768 products for about `budget_seconds`.
double measure_gemm_peak(double budget_seconds);

// "1h02m", "3m05s", "42s": a duration for the ETA.
std::string format_duration(double seconds);

class StepLog final : public TrainerPart {
 public:
  // `peak`: what one rank's MFU divides by (train/compute_peak.h; none: no MFU shown), used on
  // the lead rank; `flops_per_token` as above.
  StepLog(const RankContext& rank, ComputePeak peak, double flops_per_token);
  void on_start(int64_t first_step, int64_t steps) override;
  void after_step(const StepRecord& record, bool last) override;

 private:
  void log_step(const StepRecord& record, bool tty);
  // The record's MFU (a fraction; -1 when unknown or no peak), warning once when unknown.
  double mfu(const StepRecord& record);
  void progress(int64_t step);
  bool has_nvme() const;

  const RankContext& rank_;
  ComputePeak peak_;
  bool warned_peak_ = false;
  const double flops_per_token_;
  int64_t steps_ = 0;
  int64_t first_step_ = 0;    // of this process's run (a resumed run starts past 0)
  double steps_seconds_ = 0;  // the steps' time in this process so far
  bool tty_ = false;
  IntervalRate interval_;
  RankContext::NvmeTraffic nvme_before_;  // at the previous step's record
};

}  // namespace zs::train
