// StepLog and its helpers (train/step_log.h).
#include "train/step_log.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <utility>
#include <vector>

#include "offload/nvme_pager.h"
#include "ops/cpu/gemm.h"
#include "runtime/logging.h"
#include "runtime/measured_limit.h"
#include "train/report.h"

namespace zs::train {

double model_flops_per_token(int64_t parameters, int64_t n_layer, int64_t seq, int64_t width) {
  return 6.0 * static_cast<double>(parameters) + 12.0 * static_cast<double>(n_layer) *
                                                     static_cast<double>(seq) *
                                                     static_cast<double>(width);
}

double measure_gemm_peak(double budget_seconds) {
  const int64_t m = 256, n = 768, k = 768;
  std::vector<float> a(m * k, 0.5f), b(k * n, 0.25f), c(m * n);
  const auto begin = std::chrono::steady_clock::now();
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  // One untimed call first: it starts the BLAS library's threads and faults in the matrices,
  // which made the first ~50 ms of calls read several times slower than the GEMM is (a log that
  // showed MFU over 100%).
  ops::cpu::sgemm(false, false, m, n, k, 1, a.data(), k, b.data(), n, 0, c.data(), n);
  double best = 0;
  // At least 3 timed products, then more while the budget lasts: under a sanitizer's
  // instrumented GEMM one product takes ~0.3 s, and 10 of them made the probe most of a short
  // run's time.
  for (int run = 0; run < 3 || (since(begin) < budget_seconds && run < 1000); ++run) {
    const auto start = std::chrono::steady_clock::now();
    ops::cpu::sgemm(false, false, m, n, k, 1, a.data(), k, b.data(), n, 0, c.data(), n);
    const double seconds = since(start);
    if (seconds > 0) best = std::max(best, 2.0 * m * n * k / seconds);
  }
  return best;
}

std::string format_duration(double seconds) {
  const long long s = static_cast<long long>(seconds + 0.5);
  char text[32];
  if (s >= 3600) {
    std::snprintf(text, sizeof text, "%lldh%02lldm", s / 3600, s % 3600 / 60);
  } else if (s >= 60) {
    std::snprintf(text, sizeof text, "%lldm%02llds", s / 60, s % 60);
  } else {
    std::snprintf(text, sizeof text, "%llds", s);
  }
  return text;
}

StepLog::StepLog(const RankContext& rank, ComputePeak peak, double flops_per_token)
    : rank_(rank), peak_(std::move(peak)), flops_per_token_(flops_per_token) {}

void StepLog::on_start(int64_t first_step, int64_t steps) {
  steps_ = steps;
  first_step_ = first_step;
  // The first step's disk figures leave out construction's and a restore's I/O.
  if (has_nvme()) nvme_before_ = rank_.nvme_traffic();
  const TrainConfig& c = rank_.config;
  TrainResult& result = rank_.result;
  result.world = rank_.comm.size();
  result.parameters = rank_.task.model().num_parameters();
  result.tokens_per_step =
      c.micro_batch * c.grad_accum * rank_.comm.size() * rank_.task.tokens_per_row();
  tty_ = rank_.lead && c.progress && isatty(1);
  if (!rank_.lead) return;
  ZS_LOG_INFO("{} parameters ({}); {}", result.parameters, rank_.task.describe_model(),
              describe(c));
  ZS_LOG_INFO("{} ranks, {} units, {} steps of {} tokens; data: {}", rank_.comm.size(),
              rank_.sharded.units().size(), steps, result.tokens_per_step,
              rank_.data.description());
  if (peak_.known()) {
    ZS_LOG_INFO("MFU: {:.0f} model FLOPs per token over {}{}", flops_per_token_, peak_.describe(),
                peak_.is_measured() ? "; measured again over the first steps, the best kept" : "");
  }
}

bool StepLog::has_nvme() const { return !rank_.nvme_pagers().empty(); }

void StepLog::after_step(const StepRecord& r, bool last) {
  interval_.add(rank_.result.tokens_per_step, r.ms / 1e3);
  steps_seconds_ += r.ms / 1e3;
  if (!rank_.lead) return;
  StepRecord record = r;
  record.tokens_per_s = interval_.rate();
  if (has_nvme()) {
    const RankContext::NvmeTraffic now = rank_.nvme_traffic();
    record.nvme_read_bytes = now.read - nvme_before_.read;
    record.nvme_written_bytes = now.written - nvme_before_.written;
    record.nvme_wait_ms = 1e3 * (now.wait_seconds - nvme_before_.wait_seconds);
    nvme_before_ = now;
  }
  if (rank_.host_tier) record.host_peak_bytes = rank_.host_tier->peak_total();
  // A measured peak read low while the machine was busy is measured again between the first
  // steps (on the lead rank, outside the steps' times), at no more cost than the steps'.
  if (peak_.is_measured() && ComputePeak::remeasured_after(record.step - first_step_)) {
    peak_.remeasure_after_steps(steps_seconds_);
  }
  const int64_t done = record.step + 1;
  const bool logged =
      record.step == 0 || done % rank_.config.log_interval == 0 || last || record.skipped;
  if (logged) {
    record.mfu = mfu(record);
    rank_.result.mfu_peak_flops = peak_.flops();
    if (peak_.known()) rank_.result.mfu_peak = peak_.describe();
  }
  rank_.result.steps.push_back(record);
  if (tty_) progress(record.step);
  if (logged) {
    log_step(record, tty_);
    interval_.restart();
  }
}

double StepLog::mfu(const StepRecord& r) {
  if (!peak_.known()) return -1;
  // Per rank: the model FLOPs each rank does per second over one rank's peak.
  const double per_rank = flops_per_token_ * r.tokens_per_s / rank_.comm.size();
  const std::optional<double> fraction = peak_.fraction(per_rank);
  if (fraction) return *fraction;
  if (!warned_peak_ && !peak_.is_measured()) {
    warned_peak_ = true;
    ZS_LOG_WARN(
        "MFU shown as {}: this run did {} per rank, more than the peak it is counted against, "
        "{}; the model's FLOPs per token ({:.0f}) or the peak does not fit this run",
        kUnknownFigure, format_flops(per_rank), peak_.describe(), flops_per_token_);
  } else if (!warned_peak_) {
    warned_peak_ = true;
    ZS_LOG_WARN(
        "MFU shown as {}: this run did {} per rank, more than the peak it is measured against, "
        "{}. The machine was busy when the peak was measured (another job on these cores?); the "
        "peak is measured again at each log line, and the MFU shown once it is above the run's "
        "rate",
        kUnknownFigure, format_flops(per_rank), peak_.describe());
  }
  return -1;
}

void StepLog::log_step(const StepRecord& r, bool tty) {
  const double eta = interval_.seconds_per_step() * static_cast<double>(steps_ - r.step - 1);
  char mfu[32] = "";
  if (r.mfu >= 0) {
    std::snprintf(mfu, sizeof mfu, " | MFU %.1f%%", 100 * r.mfu);
  } else if (peak_.known()) {
    std::snprintf(mfu, sizeof mfu, " | MFU %s", kUnknownFigure);
  }
  char line[400];
  int n = std::snprintf(line, sizeof line,
                        "step %*lld/%lld | loss %.4f | lr %.2e | %.0f tok/s | %.1f ms | ETA %s%s "
                        "| grad norm %.3f | peak %s",
                        static_cast<int>(std::to_string(steps_).size()),
                        static_cast<long long>(r.step + 1), static_cast<long long>(steps_), r.loss,
                        r.lr, r.tokens_per_s, r.ms, format_duration(eta).c_str(), mfu, r.grad_norm,
                        format_bytes(rank_.tracker.peak_total()).c_str());
  if (rank_.config.precision == DType::kF16 && n > 0 && n < static_cast<int>(sizeof line)) {
    n += std::snprintf(line + n, sizeof line - n, " | scale %g%s", r.loss_scale,
                       r.skipped ? " | overflow: step skipped" : "");
  }
  if (has_nvme() && r.ms > 0 && n > 0 && n < static_cast<int>(sizeof line)) {
    // Rank 0's disk over the step (its rate at the step's length: the I/O runs under compute),
    // and the part of the step that waited for it.
    const double seconds = r.ms / 1e3;
    n += std::snprintf(line + n, sizeof line - n,
                       " | NVMe read %.2f GB/s, write %.2f GB/s, waited %.0f ms | host peak %s",
                       static_cast<double>(r.nvme_read_bytes) / seconds / 1e9,
                       static_cast<double>(r.nvme_written_bytes) / seconds / 1e9, r.nvme_wait_ms,
                       format_bytes(r.host_peak_bytes).c_str());
  }
  if (tty) std::printf("\r\033[K");
  std::fflush(stdout);
  ZS_LOG_INFO("{}", line);
}

void StepLog::progress(int64_t step) {
  const int width = 30;
  const int done = static_cast<int>(width * (step + 1) / steps_);
  std::printf("\r[%s%s] %lld/%lld", std::string(done, '#').c_str(),
              std::string(width - done, ' ').c_str(), static_cast<long long>(step + 1),
              static_cast<long long>(steps_));
  if (step + 1 == steps_) std::printf("\n");
  std::fflush(stdout);
}

}  // namespace zs::train
