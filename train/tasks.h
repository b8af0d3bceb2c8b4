// What a run trains: causal language modelling with a GPT on token files or raw text, or
// sequence classification with a BERT-style encoder on TSV files. The engine's loop, sharding,
// optimizer, evaluation schedule and reports are the same for both; a Task supplies the model,
// its data, its loss and how one batch of held-out data is scored.
//
// TaskData is loaded once per process and shared read-only by its rank threads; a Task is one
// rank's (its model is that rank's Module tree).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/sampler.h"
#include "models/gpt.h"
#include "models/module.h"
#include "train/config.h"

namespace zs::train {

enum class TaskKind { kLanguageModel, kClassification };
// config.task: "lm", "classify", or "auto" (classification when the data file ends in .tsv).
TaskKind resolve_task(const TrainConfig& config);

class TaskData {
 public:
  virtual ~TaskData() = default;
  virtual TaskKind kind() const = 0;
  virtual std::string description() const = 0;
  virtual int64_t train_items() const = 0;  // windows or examples
  virtual int64_t eval_items() const = 0;   // 0: no evaluation
};

// Reads (and for raw text, encodes) the data. `shape` is the model's shape (vocab, context);
// `seq` the sequence length. Throws InvalidArgument / IoError naming the file and the problem.
std::unique_ptr<TaskData> load_task_data(const TrainConfig& config, const models::GptConfig& shape,
                                         int64_t seq);

// Sums over one rank's held-out rows: the loss summed over what it averages (tokens or
// examples), that count, and correct predictions (classification).
struct EvalSums {
  double loss_sum = 0;
  double count = 0;
  double correct = 0;
  // Of the time evaluate() took, the seconds spent turning the model's outputs into these sums
  // (the metric; the rest is the prediction). 0 where the model's forward computes the loss.
  double metric_seconds = 0;
};

// A host tensor where the rank computes.
using ToCompute = std::function<Tensor(const Tensor& host)>;

class Task {
 public:
  virtual ~Task() = default;
  virtual models::Module& model() = 0;
  virtual std::string describe_model() const = 0;
  // The training sampler over this rank's part of each global batch.
  virtual std::unique_ptr<data::BatchSampler> sampler(
      const data::SamplerOptions& options) const = 0;
  // Mean loss of a batch from sampler() (grad mode as set by the caller).
  virtual Tensor loss(const data::Batch& batch) = 0;
  // Scores held-out items `items` (indices < eval_items(), at most `rows` of them) as one batch
  // of `rows` rows, padding the rest so that every rank runs the same forwards.
  // The batch is built on the host in `allocator`'s memory and handed to the model through
  // `to_compute` (the identity on the CPU, an upload to the rank's GPU with --device cuda).
  virtual EvalSums evaluate(const std::vector<int64_t>& items, int64_t rows, Allocator& allocator,
                            const ToCompute& to_compute) = 0;
  // Tokens one row of a training batch holds (for tokens/s).
  virtual int64_t tokens_per_row() const = 0;
  // The GPT of a language-modelling task (sampling, GPT-2 weight files); null otherwise.
  virtual models::Gpt* gpt() { return nullptr; }
};

std::unique_ptr<Task> make_task(const TaskData& data, const models::GptConfig& shape, int64_t seq);

// Language modelling only: the loaded data is byte-level text (samples decode to text).
bool byte_level(const TaskData& data);

}  // namespace zs::train
