// zs-study sync: the gradient-synchronization experiment. The BERT-style classifier
// (models/bert.h, the "classify" task of train/tasks.h) is trained at ZeRO stage 0 on rank
// threads with each DdpSync (sharding/sharded_model.h) — gather to rank 0 + scatter, one
// all-reduce per tensor, one bucketed all-reduce per unit overlapped with backward — at each
// per-rank batch size, from the same seed. It records:
// - the loss of every iteration, which must be identical bit for bit across the syncs (every
//   backend reduces in rank order with fp32 accumulation, so grouping changes no bits);
// - ms per iteration on rank 0, the mean over the iterations after the first (warm-up);
// - every collective of every iteration on every rank (study/call_log.h: kind, tag, elements,
//   dtype, bytes), checked against the communicator's own CommStats, summed over the first
//   epoch (an epoch = examples / (batch × ranks) iterations; the run is lengthened to cover it),
//   next to the closed form of the sync (sync_bytes_sent below).
// Gradient traffic per iteration does not depend on the batch size (the gradients have the
// parameters' shape); per epoch it scales with the iterations an epoch takes.
//
// run_sync_study runs the rank threads itself (to wrap each rank's backend in the call log):
// per rank a Task, a ShardedModel, AdamW and the engine's Trainer (train/trainer.h) — the same
// step zs-train runs. Not thread-safe; one call at a time per process.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/gpt.h"
#include "runtime/tensor.h"
#include "sharding/sharded_model.h"
#include "study/call_log.h"

namespace zs::study {

// The classifier's shape and the run around it.
struct ClassifierSetup {
  // n_layer, width, n_head, context (= the sequence length); vocab 256 (byte-level).
  models::GptConfig shape;
  int64_t examples = 1280;  // synthetic labelled pairs (study/synthetic_data.h)
  float lr = 1e-3f;
  uint64_t seed = 1234;
  int threads = 0;       // compute threads per rank; 0: cores / ranks
  std::string work_dir;  // where the TSV is written; "": a temporary directory, removed after
};
// A byte-level (vocabulary 256) encoder of `layers` layers, `width`, `heads`, sequence `seq`.
models::GptConfig classifier_shape(int64_t layers, int64_t width, int64_t heads, int64_t seq);
// The default small shape: 2 layers, width 64, 4 heads, sequence 128 (RTE's, and what a pair of
// the synthetic set needs), about 0.13M parameters.
models::GptConfig small_classifier_shape();
// BERT-base's encoder: 12 layers, width 768, 12 heads, sequence 128 (byte vocabulary of 256
// instead of WordPiece's 30,522, so ~85M parameters instead of 110M).
models::GptConfig bert_base_shape();

struct SyncStudyOptions {
  ClassifierSetup setup;
  int ranks = 2;
  std::vector<int64_t> batch_sizes{64, 32, 16};  // per rank
  std::vector<sharding::DdpSync> syncs{sharding::DdpSync::kGatherScatter,
                                       sharding::DdpSync::kPerTensor, sharding::DdpSync::kBucketed};
  int64_t iterations = 40;  // timed; the first is dropped from the mean
};

// One rank's bytes sent per iteration by the gradient synchronization `sync` over `ranks` ranks,
// as sharding/sharded_model.h states it: units of `unit_padded_numel` elements, parameters of
// `parameter_numel` elements, gradients travelling as `element_bytes`-byte elements, each term
// rounded down per call as CommStats counts. Received equals sent for every sync and rank.
uint64_t sync_bytes_sent(sharding::DdpSync sync, const std::vector<int64_t>& unit_padded_numel,
                         const std::vector<int64_t>& parameter_numel, size_t element_bytes,
                         int ranks, int rank);

struct SyncRun {
  sharding::DdpSync sync = sharding::DdpSync::kBucketed;
  int64_t batch = 0;  // per rank
  std::vector<float> losses;
  std::vector<double> ms;  // rank 0, per iteration
  double mean_ms = 0;      // over iterations 2..`iterations`
  int64_t iterations_per_epoch = 0;
  // Rank 0's gradient-sync calls of the first iteration (every iteration issues the same ones:
  // checked), and the other collectives of an iteration (the logged loss).
  std::vector<CallRecord> sync_calls;
  std::vector<CallRecord> other_calls;
  // Gradient-sync bytes sent per iteration and over the first epoch, by rank 0 and by rank 1
  // (every rank but 0 sends the same), measured and by the formula.
  uint64_t sent_per_iteration[2] = {0, 0};
  uint64_t formula_per_iteration[2] = {0, 0};
  uint64_t epoch_sent[2] = {0, 0};
};

struct SyncStudy {
  SyncStudyOptions options;
  int64_t parameters = 0;
  size_t units = 0;
  size_t tensors = 0;
  // Each parameter's shape by name (what a per-tensor call's tag names).
  std::map<std::string, Shape> parameter_shapes;
  std::vector<SyncRun> runs;  // batch-major, then options.syncs order
  // Batch sizes whose losses differ between syncs (empty: all identical).
  std::vector<int64_t> mismatched_batches;
  bool identical() const { return mismatched_batches.empty(); }
};

SyncStudy run_sync_study(const SyncStudyOptions& options);

// The report: the set-up, the formula, the table (ms per iteration, traffic per iteration and
// per epoch measured vs formula), the loss check, and one iteration's calls per sync.
std::string sync_markdown(const SyncStudy& study, const std::string& command);
std::string sync_time_svg(const SyncStudy& study);     // ms per iteration by batch and sync
std::string sync_traffic_svg(const SyncStudy& study);  // traffic per epoch vs the formula

}  // namespace zs::study
