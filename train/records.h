// What a training run reports: one StepRecord per optimizer step, one EvalRecord per evaluation,
// and the run's TrainResult (rank 0's, or under MPI this process's). Plain values, no behaviour.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zs::train {

struct StepRecord {
  int64_t step = 0;
  float loss = 0;  // mean over ranks and micro-batches
  float lr = 0;
  float grad_norm = 0;  // before clipping
  float loss_scale = 1;
  bool skipped = false;  // fp16 overflow: no update
  double ms = 0;
  // Tokens per second over the log interval this step belongs to (steps since the last logged
  // step, this one included), from the steps' own times: evaluation and logging between steps
  // do not count.
  double tokens_per_s = 0;
  // Model FLOP utilization of one rank over the same interval, as a fraction of the peak the log
  // states (train/compute_peak.h), on the logged steps; -1 on other steps, without a peak, and
  // when it would exceed 1 (the peak was measured low: the log shows "—").
  double mfu = -1;
  // The NVMe tier (--offload-optimizer/--offload-param nvme) since the previous step's record
  // (or the loop's start; an evaluation between steps counts in the next step), on rank 0: bytes
  // its swap files read and wrote, and how long the step waited for the disk (the rest of the time
  // the I/O ran under compute); the host tier's peak so far.
  uint64_t nvme_read_bytes = 0;
  uint64_t nvme_written_bytes = 0;
  double nvme_wait_ms = 0;
  uint64_t host_peak_bytes = 0;
};

struct EvalRecord {
  int64_t step = 0;       // evaluated after this many optimizer steps
  int64_t batch = 0;      // rows per forward (TrainConfig::eval_micro_batches)
  double loss = 0;        // mean over the held-out tokens (language modelling) or examples
  double perplexity = 0;  // language modelling
  int64_t tokens = 0;     // held-out tokens, or examples (classification)
  int64_t correct = 0;    // classification: examples whose arg-max logit is the label
  double accuracy = 0;    // classification: correct / examples
  // Where the evaluation's time went on this rank (train/evaluator.h): the forwards over its
  // held-out share (predict), turning outputs into loss and correct counts (metric), and the
  // collective that gives every rank the sums (broadcast; it includes waiting for the slowest
  // rank).
  double predict_ms = 0;
  double metric_ms = 0;
  double broadcast_ms = 0;
};

// One published checkpoint save (--checkpoint-dir), as rank 0 saw it: what its log line says,
// with rank 0's write broken down (checkpoint/rank_file_writer.h, RankFileWriter::Written).
struct SaveRecord {
  int64_t step = 0;  // the completed steps it holds
  // The training loop's time in this save: the snapshot into the write buffer, the per-step
  // checks of whether the write is done and, where the loop had to wait for the write (with
  // --checkpoint-async off, before the next save, at the end of the run), that wait.
  double stall_seconds = 0;
  double write_seconds = 0;  // the slowest rank's, from its snapshot to its file fsynced
  // Rank 0's write: the copy into the buffer, checksumming, the file layer's writes, and the
  // commit (fsync, rename, directory fsync).
  double copy_seconds = 0;
  double checksum_seconds = 0;
  double file_write_seconds = 0;
  double commit_seconds = 0;
};

// Why a run ended before its last step (train/stop.h; ordered: the ranks stop for the largest).
enum class StopReason { kNone = 0, kPlanned = 1, kSignal = 2 };

struct TrainResult {
  int world = 1;
  int64_t parameters = 0;
  int64_t tokens_per_step = 0;
  std::vector<StepRecord> steps;
  std::vector<EvalRecord> evals;
  std::string sample;  // greedy continuation of sample_prompt (when sample_tokens > 0)
  std::string memory_table;
  std::string traffic_table;
  // Per category: peak bytes on the rank with the least and the most (index = MemoryCategory).
  std::vector<size_t> peak_min;
  std::vector<size_t> peak_max;
  size_t peak_total_max = 0;
  // The host tier (--offload-optimizer host), the same figures; empty / 0 without offload.
  std::vector<size_t> host_peak_min;
  std::vector<size_t> host_peak_max;
  size_t host_peak_total_max = 0;
  // --offload-optimizer nvme: the most optimizer-state bytes a rank's NVMe tier holds; the lead
  // rank's bytes read and written over the run, and the seconds its optimizer steps waited for
  // them (what the pipeline did not hide).
  uint64_t nvme_bytes_max = 0;
  uint64_t nvme_bytes_read = 0;
  uint64_t nvme_bytes_written = 0;
  double nvme_wait_seconds = 0.0;
  // Last step, this rank: bytes sent by the collectives vs the stage's formula.
  uint64_t bytes_sent = 0;
  uint64_t formula_bytes_sent = 0;
  // Restarts after failures (--max-restarts) before the run finished; `steps` and `evals` hold
  // each step once, across the attempts.
  int restarts = 0;
  // The checkpoints this run saved, in order (of the last attempt after restarts).
  std::vector<SaveRecord> saves;
  // The peak the log's MFU divides by at the end of the run (FLOP/s of one rank; 0: none) and
  // what it is (ComputePeak::describe).
  double mfu_peak_flops = 0;
  std::string mfu_peak;
  // A run stopped before its last step (a signal, --exit-after-steps/-minutes): why, and after
  // how many steps (a checkpoint was saved there when --checkpoint-dir is set).
  StopReason stopped = StopReason::kNone;
  int64_t stopped_after = 0;
};

}  // namespace zs::train
