// Distributed samplers: which examples each rank trains on at each step, and the batch tensors
// they fill.
//
// Contract, for every sampler here. An epoch is a permutation of the dataset's items (causal-LM
// windows, or classification examples) that depends only on (seed, stream, epoch, item count) —
// never on the world size or the rank. Step s of an epoch takes the global batch of B items at
// positions [s·B, (s+1)·B) of that order; rank r of W takes the contiguous part
// [r·B/W, (r+1)·B/W). So the ranks' parts of a step are disjoint, their union in rank order is
// the same global batch for any W dividing B, and a run saved at W ranks resumes at any other W
// from the same BatchPosition. An epoch has floor(items / B) steps: the last partial batch is
// dropped so that every rank takes the same number of steps.
//
// The permutation sorts item indices by 64 bits of counter-based randomness,
// random_block(rng_key(seed, stream, epoch), index) words 0 and 1 (runtime/rng.h), ties broken by
// index: O(n log n) per epoch, computed by each rank for the whole dataset and cached for the
// current epoch. Distinct samplers over one seed should use distinct `stream` names (train vs
// eval) so that their orders are independent.
//
// Batches are int32 CPU tensors of a fixed shape, allocated once by make_batch() and refilled by
// fill(), which is what the loader thread calls (data/loader.h). A sampler keeps a reference to
// its dataset, which must outlive it. All const methods are thread-safe (the epoch cache is
// guarded by a mutex); fill() writes only the batch it is given.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "data/token_file.h"
#include "data/tsv.h"
#include "runtime/allocator.h"
#include "runtime/tensor.h"

namespace zs::data {

// Where a batch sits in the stream of batches: step `step` (0-based) of epoch `epoch`. The same
// for every rank, whatever the world size: it is what a checkpoint records to resume the data.
struct BatchPosition {
  int64_t epoch = 0;
  int64_t step = 0;
  bool operator==(const BatchPosition& other) const {
    return epoch == other.epoch && step == other.step;
  }
  bool operator!=(const BatchPosition& other) const { return !(*this == other); }
};

// One rank's part of one step. Shapes, with b = B / W the local batch and T the sequence length:
//   causal LM       ids [b, T], targets [b, T] = ids shifted by one token; lengths undefined
//   classification  ids [b, T] (padded), targets [b] (label ids), lengths [b] (real tokens)
struct Batch {
  BatchPosition position;
  Tensor ids;
  Tensor targets;
  Tensor lengths;
};

struct SamplerOptions {
  int64_t global_batch = 0;  // B: items per step over all ranks; a multiple of world_size
  int rank = 0;
  int world_size = 1;
  uint64_t seed = 0;
  bool shuffle = true;  // false: items in dataset order every epoch
  std::string stream;   // RNG stream name; empty: the sampler's default
};

// The order of an epoch's items and each step's global batch and rank part (the contract above).
class EpochOrder {
 public:
  EpochOrder(int64_t num_items, SamplerOptions options, const char* default_stream);
  EpochOrder(const EpochOrder&) = delete;
  EpochOrder& operator=(const EpochOrder&) = delete;

  int64_t num_items() const { return num_items_; }
  int64_t global_batch() const { return options_.global_batch; }
  int64_t local_batch() const { return options_.global_batch / options_.world_size; }
  int64_t steps_per_epoch() const { return num_items_ / options_.global_batch; }
  const SamplerOptions& options() const { return options_; }

  // Item indices of the whole step (B of them) and of this rank's part (B / W), in order.
  // Throw InvalidArgument for a negative epoch, an epoch >= 2^32 or a step outside the epoch.
  std::vector<int64_t> global_items(const BatchPosition& position) const;
  std::vector<int64_t> rank_items(const BatchPosition& position) const;
  // The position after `position` (the next step, or step 0 of the next epoch).
  BatchPosition next(const BatchPosition& position) const;

 private:
  // Copies order[first, first + count) of `epoch` into a vector.
  std::vector<int64_t> items(int64_t epoch, int64_t first, int64_t count) const;
  void check_position(const BatchPosition& position) const;

  const int64_t num_items_;
  const SamplerOptions options_;
  mutable std::mutex mutex_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_order_;
};

// The permutation of [0, num_items) for `epoch` that EpochOrder uses (shuffle on).
std::vector<int64_t> epoch_permutation(int64_t num_items, uint64_t seed, const std::string& stream,
                                       int64_t epoch);

// What the loader drives: a fixed-shape batch and how to fill it for a position.
class BatchSampler {
 public:
  virtual ~BatchSampler() = default;
  virtual const EpochOrder& order() const = 0;
  // New tensors for one batch on `allocator`, charged to the calling thread's memory category.
  virtual Batch make_batch(Allocator& allocator) const = 0;
  // Fills `batch` (from make_batch) with this rank's part of the step at `position`.
  virtual void fill(const BatchPosition& position, Batch& batch) const = 0;

  int64_t steps_per_epoch() const { return order().steps_per_epoch(); }
  int64_t local_batch() const { return order().local_batch(); }
  BatchPosition next(const BatchPosition& position) const { return order().next(position); }
};

// Causal-LM windows over a token dataset of N tokens: window w is tokens [w·T, w·T + T + 1), so
// windows tile the data with a one-token overlap and there are floor((N - 1) / T) of them. Row i
// of a batch holds window i's first T tokens as ids and its last T as targets.
// Default stream: "data.lm_windows".
//
// A WindowRange restricts the sampler to windows [first, first + count) of the file (count -1:
// to the last window), e.g. to hold out the tail of a file for evaluation.
struct WindowRange {
  int64_t first = 0;
  int64_t count = -1;
};

// The number of windows of seq_len + 1 tokens in `dataset` (throws InvalidArgument if none).
int64_t lm_num_windows(const TokenDataset& dataset, int64_t seq_len);

// Window `window` of seq_len + 1 tokens (the layout above): ids[0, T) = its first T tokens,
// targets[0, T) = its last T. Throws like TokenDataset::read past the end.
void read_lm_window(const TokenDataset& dataset, int64_t window, int64_t seq_len, int32_t* ids,
                    int32_t* targets);

class LmWindowSampler : public BatchSampler {
 public:
  LmWindowSampler(const TokenDataset& dataset, int64_t seq_len, SamplerOptions options,
                  WindowRange range = {});

  const EpochOrder& order() const override { return order_; }
  Batch make_batch(Allocator& allocator) const override;
  void fill(const BatchPosition& position, Batch& batch) const override;

  int64_t seq_len() const { return seq_len_; }
  int64_t num_windows() const { return order_.num_items(); }

 private:
  const TokenDataset& dataset_;
  const int64_t seq_len_;
  const int64_t first_window_;
  EpochOrder order_;
};

// Classification examples, byte-tokenized (data/byte_tokenizer.h): row i of ids holds the first
// min(len, T) bytes of the example's text followed by pad_id; lengths[i] is min(len, T) and
// targets[i] the label id. Default stream: "data.examples".
// An example's text as ids: its first seq_len bytes, then pad_id to seq_len. Returns the number
// of bytes kept (the sequence's length).
int32_t encode_example(const std::string& text, int64_t seq_len, int32_t pad_id, int32_t* ids);

class ClassificationSampler : public BatchSampler {
 public:
  ClassificationSampler(const ClassificationDataset& dataset, int64_t seq_len,
                        SamplerOptions options, int32_t pad_id = 0);

  const EpochOrder& order() const override { return order_; }
  Batch make_batch(Allocator& allocator) const override;
  void fill(const BatchPosition& position, Batch& batch) const override;

  int64_t seq_len() const { return seq_len_; }

 private:
  const ClassificationDataset& dataset_;
  const int64_t seq_len_;
  const int32_t pad_id_;
  EpochOrder order_;
};

}  // namespace zs::data
