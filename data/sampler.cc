// Epoch permutations from the counter-based RNG, rank slices of global batches, batch filling.
#include "data/sampler.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "runtime/error.h"
#include "runtime/rng.h"

namespace zs::data {
namespace {

constexpr int64_t kMaxEpochs = int64_t{1} << 32;  // the epoch is the 32-bit RNG substream

SamplerOptions with_default_stream(SamplerOptions options, const char* default_stream) {
  if (options.stream.empty()) options.stream = default_stream;
  return options;
}

void check_batch_tensor(const Tensor& tensor, const Shape& shape, const char* what) {
  ZS_CHECK(tensor.defined(), "batch.", what, " is undefined; make batches with make_batch()");
  ZS_CHECK(tensor.dtype() == DType::kI32 && tensor.shape() == shape, "batch.", what, " is ",
           tensor.describe(), ", expected int32 ", shape_str(shape),
           "; make batches with this sampler's make_batch()");
}

}  // namespace

int64_t lm_num_windows(const TokenDataset& dataset, int64_t seq_len) {
  ZS_CHECK(seq_len >= 1, "LmWindowSampler: seq_len must be >= 1, got ", seq_len);
  const uint64_t tokens = dataset.size();
  ZS_CHECK(tokens >= static_cast<uint64_t>(seq_len) + 1, "token file '", dataset.path(), "' holds ",
           tokens, " tokens, fewer than one window of seq_len + 1 = ", seq_len + 1,
           "; use a shorter seq_len or more data");
  return static_cast<int64_t>((tokens - 1) / static_cast<uint64_t>(seq_len));
}

namespace {

int64_t checked_range(const TokenDataset& dataset, int64_t seq_len, const WindowRange& range) {
  const int64_t total = lm_num_windows(dataset, seq_len);
  const int64_t count = range.count < 0 ? total - range.first : range.count;
  ZS_CHECK(range.first >= 0 && count >= 1 && range.first + count <= total,
           "LmWindowSampler: "
           "windows [",
           range.first, ", ", range.first + count, ") are not inside the ", total,
           " windows of seq_len ", seq_len, " in '", dataset.path(), "'");
  return count;
}

}  // namespace

std::vector<int64_t> epoch_permutation(int64_t num_items, uint64_t seed, const std::string& stream,
                                       int64_t epoch) {
  ZS_CHECK(num_items >= 0, "epoch_permutation: negative item count ", num_items);
  ZS_CHECK(epoch >= 0 && epoch < kMaxEpochs, "epoch ", epoch, " is outside [0, 2^32)");
  const RngKey key = rng_key(seed, stream, static_cast<uint32_t>(epoch));
  std::vector<std::pair<uint64_t, int64_t>> keyed(static_cast<size_t>(num_items));
  for (int64_t i = 0; i < num_items; ++i) {
    const PhiloxBlock block = random_block(key, static_cast<uint64_t>(i));
    keyed[static_cast<size_t>(i)] = {uint64_t{block.word[0]} << 32 | block.word[1], i};
  }
  std::sort(keyed.begin(), keyed.end());  // pairs: ties in the key fall back to the index
  std::vector<int64_t> order(keyed.size());
  for (size_t i = 0; i < keyed.size(); ++i) order[i] = keyed[i].second;
  return order;
}

EpochOrder::EpochOrder(int64_t num_items, SamplerOptions options, const char* default_stream)
    : num_items_(num_items), options_(with_default_stream(std::move(options), default_stream)) {
  const SamplerOptions& o = options_;
  ZS_CHECK(o.world_size >= 1, "sampler: world_size must be >= 1, got ", o.world_size);
  ZS_CHECK(o.rank >= 0 && o.rank < o.world_size, "sampler: rank ", o.rank,
           " is outside [0, world_size = ", o.world_size, ")");
  ZS_CHECK(o.global_batch >= 1, "sampler: global_batch must be >= 1, got ", o.global_batch);
  ZS_CHECK(o.global_batch % o.world_size == 0, "sampler: global_batch ", o.global_batch,
           " is not a multiple of the world size ", o.world_size,
           "; every rank takes global_batch / world_size items per step — choose a multiple");
  ZS_CHECK(num_items >= o.global_batch, "sampler: the dataset has ", num_items,
           " items, fewer than one global batch of ", o.global_batch,
           "; use a smaller global batch or more data");
}

void EpochOrder::check_position(const BatchPosition& position) const {
  ZS_CHECK(position.epoch >= 0 && position.epoch < kMaxEpochs, "batch position: epoch ",
           position.epoch, " is outside [0, 2^32)");
  ZS_CHECK(position.step >= 0 && position.step < steps_per_epoch(), "batch position: step ",
           position.step, " is outside the epoch's ", steps_per_epoch(), " steps (", num_items_,
           " items / global batch ", options_.global_batch, ")");
}

std::vector<int64_t> EpochOrder::items(int64_t epoch, int64_t first, int64_t count) const {
  std::vector<int64_t> out(static_cast<size_t>(count));
  if (!options_.shuffle) {
    std::iota(out.begin(), out.end(), first);
    return out;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (cached_epoch_ != epoch) {
    cached_order_ = epoch_permutation(num_items_, options_.seed, options_.stream, epoch);
    cached_epoch_ = epoch;
  }
  std::copy_n(cached_order_.begin() + first, count, out.begin());
  return out;
}

std::vector<int64_t> EpochOrder::global_items(const BatchPosition& position) const {
  check_position(position);
  return items(position.epoch, position.step * global_batch(), global_batch());
}

std::vector<int64_t> EpochOrder::rank_items(const BatchPosition& position) const {
  check_position(position);
  return items(position.epoch, position.step * global_batch() + options_.rank * local_batch(),
               local_batch());
}

BatchPosition EpochOrder::next(const BatchPosition& position) const {
  check_position(position);
  if (position.step + 1 < steps_per_epoch()) return {position.epoch, position.step + 1};
  return {position.epoch + 1, 0};
}

void read_lm_window(const TokenDataset& dataset, int64_t window, int64_t seq_len, int32_t* ids,
                    int32_t* targets) {
  // T tokens in one read for the ids, then the targets are the ids shifted plus one token.
  const size_t row = static_cast<size_t>(seq_len);
  const uint64_t start = static_cast<uint64_t>(window) * row;
  dataset.read(start, row, ids);
  std::copy(ids + 1, ids + row, targets);
  dataset.read(start + row, 1, targets + row - 1);
}

int32_t encode_example(const std::string& text, int64_t seq_len, int32_t pad_id, int32_t* ids) {
  const size_t row = static_cast<size_t>(seq_len);
  const size_t length = std::min(text.size(), row);
  for (size_t t = 0; t < length; ++t) ids[t] = static_cast<uint8_t>(text[t]);
  std::fill(ids + length, ids + row, pad_id);
  return static_cast<int32_t>(length);
}

LmWindowSampler::LmWindowSampler(const TokenDataset& dataset, int64_t seq_len,
                                 SamplerOptions options, WindowRange range)
    : dataset_(dataset),
      seq_len_(seq_len),
      first_window_(range.first),
      order_(checked_range(dataset, seq_len, range), std::move(options), "data.lm_windows") {}

Batch LmWindowSampler::make_batch(Allocator& allocator) const {
  Batch batch;
  const Shape shape{local_batch(), seq_len_};
  batch.ids = Tensor::empty(shape, DType::kI32, allocator, "batch.ids");
  batch.targets = Tensor::empty(shape, DType::kI32, allocator, "batch.targets");
  return batch;
}

void LmWindowSampler::fill(const BatchPosition& position, Batch& batch) const {
  const Shape shape{local_batch(), seq_len_};
  check_batch_tensor(batch.ids, shape, "ids");
  check_batch_tensor(batch.targets, shape, "targets");
  const std::vector<int64_t> windows = order_.rank_items(position);
  int32_t* ids = batch.ids.data<int32_t>();
  int32_t* targets = batch.targets.data<int32_t>();
  const size_t row = static_cast<size_t>(seq_len_);
  for (size_t i = 0; i < windows.size(); ++i) {
    read_lm_window(dataset_, first_window_ + windows[i], seq_len_, ids + i * row,
                   targets + i * row);
  }
  batch.position = position;
}

ClassificationSampler::ClassificationSampler(const ClassificationDataset& dataset, int64_t seq_len,
                                             SamplerOptions options, int32_t pad_id)
    : dataset_(dataset),
      seq_len_(seq_len),
      pad_id_(pad_id),
      order_(static_cast<int64_t>(dataset.size()), std::move(options), "data.examples") {
  ZS_CHECK(seq_len >= 1, "ClassificationSampler: seq_len must be >= 1, got ", seq_len);
  ZS_CHECK(dataset.labels.size() == dataset.texts.size(),
           "ClassificationSampler: ", dataset.texts.size(), " texts but ", dataset.labels.size(),
           " labels");
}

Batch ClassificationSampler::make_batch(Allocator& allocator) const {
  Batch batch;
  batch.ids = Tensor::empty({local_batch(), seq_len_}, DType::kI32, allocator, "batch.ids");
  batch.targets = Tensor::empty({local_batch()}, DType::kI32, allocator, "batch.labels");
  batch.lengths = Tensor::empty({local_batch()}, DType::kI32, allocator, "batch.lengths");
  return batch;
}

void ClassificationSampler::fill(const BatchPosition& position, Batch& batch) const {
  check_batch_tensor(batch.ids, {local_batch(), seq_len_}, "ids");
  check_batch_tensor(batch.targets, {local_batch()}, "targets");
  check_batch_tensor(batch.lengths, {local_batch()}, "lengths");
  const std::vector<int64_t> examples = order_.rank_items(position);
  int32_t* ids = batch.ids.data<int32_t>();
  int32_t* labels = batch.targets.data<int32_t>();
  int32_t* lengths = batch.lengths.data<int32_t>();
  const size_t row = static_cast<size_t>(seq_len_);
  for (size_t i = 0; i < examples.size(); ++i) {
    const size_t example = static_cast<size_t>(examples[i]);
    lengths[i] = encode_example(dataset_.texts[example], seq_len_, pad_id_, ids + i * row);
    labels[i] = dataset_.labels[example];
  }
  batch.position = position;
}

}  // namespace zs::data
