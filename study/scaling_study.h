// zs-study scaling: how data-parallel training of the BERT-style classifier scales with ranks,
// precision and per-rank batch size. Each configuration is a whole zs-train run
// (train::run_training, the "classify" task on the synthetic entailment set of
// study/synthetic_data.h) at ZeRO stage 0 with bucketed all-reduce (DDP), followed by an
// evaluation of the held-out pairs. Per run it reports the step time (rank 0, mean of the steps
// after the first), throughput per rank (examples/s), the evaluation's time split into predict /
// metric / broadcast (train/evaluator.h) and the final accuracy; speedup is the total
// throughput over the 1-rank run's of the same precision and batch, against the ideal (= ranks).
//
// Ranks: with the local backend every entry of `ranks` is run in turn as rank threads of this
// process (on this machine the threads share its cores, so more ranks than cores cannot speed
// up: the table shows what the runtime costs, not a cluster's scaling). Under a launcher (mpirun
// / srun, --backend mpi, or --device cuda with one GPU per process) the job's world is the one
// rank count run; rows are merged into the results file so that jobs of 1, 2, 4, … ranks fill
// one table (examples/slurm/zs-study-scaling.sbatch). Collective over the job's ranks; results
// are rank 0's. Not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "study/sync_study.h"

namespace zs::study {

struct ScalingStudyOptions {
  ClassifierSetup setup;
  std::vector<int> ranks{1, 2, 4};
  std::vector<DType> precisions{DType::kF32, DType::kBF16};
  std::vector<int64_t> batch_sizes{16, 32};  // per rank
  // Rows per evaluation forward, each scoring the held-out pairs once after training (empty: the
  // training batch): the evaluation-time split by evaluation batch size.
  std::vector<int64_t> eval_batch_sizes;
  int64_t steps = 30;             // per run; the first is dropped from the mean
  double eval_fraction = 0.25;    // held-out share of the examples
  std::string backend = "local";  // local, mpi, auto, nccl (train::TrainConfig)
  std::string device = "cpu";     // cpu or cuda
};

struct ScalingRow {
  int ranks = 1;
  std::string precision;  // "fp32", "bf16", "fp16"
  int64_t batch = 0;      // per rank
  std::string device;     // "cpu", "cuda"
  double step_ms = 0;
  double examples_per_s_per_rank = 0;
  double predict_ms = 0;
  double metric_ms = 0;
  double broadcast_ms = 0;
  int64_t eval_examples = 0;
  double accuracy = 0;
  int64_t eval_batch = 0;  // rows per evaluation forward
};

// Runs every configuration this process's world allows (see the file comment). Returns rank 0's
// rows (other ranks of a launched job get their own figures): one per configuration and
// evaluation batch size (the training figures repeat; the evaluation's differ).
std::vector<ScalingRow> run_scaling_study(const ScalingStudyOptions& options);

// Speedup of a row: its total throughput over that of the 1-rank row of the same precision,
// batch and device in `rows`; 0 when there is none.
double speedup(const ScalingRow& row, const std::vector<ScalingRow>& rows);

// Rows as TSV (a header line, then one line per row) and back; read_scaling_rows throws
// InvalidArgument naming the file and line of a malformed row. Rows written before the
// eval_batch column existed read with eval_batch = batch.
std::string scaling_rows_tsv(const std::vector<ScalingRow>& rows);
std::vector<ScalingRow> read_scaling_rows(const std::string& text, const std::string& source);
// `rows` with `added` in place of rows of the same ranks, precision, batch, evaluation batch and
// device, sorted.
std::vector<ScalingRow> merge_scaling_rows(std::vector<ScalingRow> rows,
                                           const std::vector<ScalingRow>& added);

std::string scaling_markdown(const std::vector<ScalingRow>& rows, const std::string& setup,
                             const std::string& command);
std::string scaling_throughput_svg(const std::vector<ScalingRow>& rows);
std::string scaling_speedup_svg(const std::vector<ScalingRow>& rows);
std::string scaling_step_time_svg(const std::vector<ScalingRow>& rows);
std::string scaling_eval_svg(const std::vector<ScalingRow>& rows);

}  // namespace zs::study
