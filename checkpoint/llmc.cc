// llm.c GPT-2 checkpoints: the layout, header validation, the mapped reader, the streaming writer.
#include "checkpoint/llmc.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <utility>

#include "runtime/error.h"

namespace zs::checkpoint {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "llm.c checkpoints are little-endian and read by memcpy; a big-endian host needs "
              "byte swaps in llmc.cc");

constexpr size_t kConvertChunk = size_t{1} << 16;  // elements converted per step

int32_t version_of(StoredDType dtype) {
  return dtype == StoredDType::kBF16 ? kLlmcVersionBF16 : kLlmcVersionF32;
}

// The config's problem, or "" when it is consistent. Sizes stay below 2^31 (they are int32 in the
// header), so every tensor size below fits comfortably in 64 bits.
std::string config_problem(const LlmcConfig& c) {
  const int64_t limit = std::numeric_limits<int32_t>::max();
  const int64_t values[] = {c.max_seq_len, c.vocab_size, c.padded_vocab_size,
                            c.n_layer,     c.n_head,     c.channels};
  for (int64_t value : values) {
    if (value <= 0 || value > limit) {
      return "maxT, V, Vp, L, NH and C must be positive int32 values";
    }
  }
  if (c.channels % c.n_head != 0) return "C must be divisible by NH";
  if (c.padded_vocab_size < c.vocab_size) return "Vp must be at least V";
  // 12·L·C² + (Vp + maxT)·C + 13·L·C + 2·C parameters; bounded so element and byte offsets
  // stay far inside 64 bits (2^48 parameters is ~1000 TB of fp32).
  using Wide = unsigned __int128;
  const Wide C = static_cast<Wide>(c.channels), L = static_cast<Wide>(c.n_layer);
  const Wide total = 12 * L * C * C + static_cast<Wide>(c.padded_vocab_size + c.max_seq_len) * C +
                     13 * L * C + 2 * C;
  if (total > (Wide{1} << 48)) return "the parameter count exceeds 2^48";
  return "";
}

std::string describe(const LlmcConfig& c) {
  return detail::concat("maxT ", c.max_seq_len, ", V ", c.vocab_size, ", Vp ", c.padded_vocab_size,
                        ", L ", c.n_layer, ", NH ", c.n_head, ", C ", c.channels);
}

int tensor_index(const std::vector<LlmcTensor>& tensors, const std::string& name) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

// Checks `layer` addresses a slice of `tensor`; returns the slice's first element.
uint64_t slice_begin(const std::string& path, const LlmcTensor& tensor, int64_t layer) {
  if (tensor.per_layer) {
    ZS_CHECK(layer >= 0 && layer < tensor.shape[0], "llm.c checkpoint '", path, "': layer ", layer,
             " of '", tensor.name, "' is out of range [0, ", tensor.shape[0], ")");
    return tensor.first_element + static_cast<uint64_t>(layer * tensor.slice_numel());
  }
  ZS_CHECK(layer == -1, "llm.c checkpoint '", path, "': '", tensor.name,
           "' is not stored per layer; pass layer -1, not ", layer);
  return tensor.first_element;
}

}  // namespace

int64_t llmc_padded_vocab(int64_t vocab_size, int64_t multiple) {
  ZS_CHECK(multiple > 0, "padding multiple must be positive, got ", multiple);
  return (vocab_size + multiple - 1) / multiple * multiple;
}

std::vector<LlmcTensor> llmc_layout(const LlmcConfig& config) {
  const std::string problem = config_problem(config);
  ZS_CHECK(problem.empty(), "llm.c model config (", describe(config), "): ", problem);
  const int64_t L = config.n_layer, C = config.channels;
  std::vector<LlmcTensor> tensors = {
      {"wte", {config.padded_vocab_size, C}, false, 0},
      {"wpe", {config.max_seq_len, C}, false, 0},
      {"ln1w", {L, C}, true, 0},
      {"ln1b", {L, C}, true, 0},
      {"qkvw", {L, 3 * C, C}, true, 0},
      {"qkvb", {L, 3 * C}, true, 0},
      {"attprojw", {L, C, C}, true, 0},
      {"attprojb", {L, C}, true, 0},
      {"ln2w", {L, C}, true, 0},
      {"ln2b", {L, C}, true, 0},
      {"fcw", {L, 4 * C, C}, true, 0},
      {"fcb", {L, 4 * C}, true, 0},
      {"fcprojw", {L, C, 4 * C}, true, 0},
      {"fcprojb", {L, C}, true, 0},
      {"lnfw", {C}, false, 0},
      {"lnfb", {C}, false, 0},
  };
  uint64_t offset = 0;
  for (LlmcTensor& tensor : tensors) {
    tensor.first_element = offset;
    offset += static_cast<uint64_t>(tensor.numel());
  }
  return tensors;
}

// ---------------------------------------------------------------------------------------------
// Reader

LlmcReader::LlmcReader(std::string path)
    : path_(std::move(path)), mapping_(path_, "llm.c checkpoint") {
  const uint64_t file_bytes = mapping_.size();
  ZS_CHECK_AS(CorruptCheckpoint, file_bytes >= kLlmcHeaderBytes, "llm.c checkpoint '", path_,
              "' is ", file_bytes, " bytes, shorter than the ", kLlmcHeaderBytes,
              "-byte header; it is truncated or not an llm.c checkpoint");
  std::array<int32_t, 256> header;
  std::memcpy(header.data(), mapping_.data(), kLlmcHeaderBytes);
  ZS_CHECK_AS(CorruptCheckpoint, header[0] == kLlmcModelMagic, "llm.c checkpoint '", path_,
              "' starts with magic ", header[0], ", not ", kLlmcModelMagic,
              "; it is not an llm.c GPT-2 model file (token files have magic 20240520)");
  version_ = header[1];
  ZS_CHECK_AS(CorruptCheckpoint, version_ == kLlmcVersionF32 || version_ == kLlmcVersionBF16,
              "llm.c checkpoint '", path_, "' has version ", version_,
              "; zeroshard reads versions 3 (fp32) and 5 (bf16), both with a padded vocab — "
              "re-export it with a current llm.c train_gpt2.py");
  dtype_ = version_ == kLlmcVersionBF16 ? StoredDType::kBF16 : StoredDType::kF32;
  config_.max_seq_len = header[2];
  config_.vocab_size = header[3];
  config_.n_layer = header[4];
  config_.n_head = header[5];
  config_.channels = header[6];
  config_.padded_vocab_size = header[7];
  const std::string problem = config_problem(config_);
  ZS_CHECK_AS(CorruptCheckpoint, problem.empty(), "llm.c checkpoint '", path_,
              "' has an impossible header (", describe(config_), "): ", problem);
  tensors_ = llmc_layout(config_);
  const uint64_t elements =
      tensors_.back().first_element + static_cast<uint64_t>(tensors_.back().numel());
  const uint64_t expected = kLlmcHeaderBytes + elements * stored_dtype_size(dtype_);
  ZS_CHECK_AS(CorruptCheckpoint, file_bytes == expected, "llm.c checkpoint '", path_, "' is ",
              file_bytes, " bytes but its header (", describe(config_), ", ",
              stored_dtype_name(dtype_), ") needs ", expected, " (", elements,
              " parameters); the file is ", file_bytes < expected ? "truncated" : "too long",
              " or its header is corrupt");
}

const LlmcTensor& LlmcReader::tensor(const std::string& name) const {
  const int index = tensor_index(tensors_, name);
  ZS_CHECK(index >= 0, "llm.c checkpoint '", path_, "' has no tensor '", name,
           "'; its tensors are wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, "
           "ln2b, fcw, fcb, fcprojw, fcprojb, lnfw, lnfb");
  return tensors_[static_cast<size_t>(index)];
}

void LlmcReader::read_f32(const std::string& name, int64_t layer, float* out, int64_t count) const {
  const LlmcTensor& t = tensor(name);
  const uint64_t begin = slice_begin(path_, t, layer);
  ZS_CHECK(count <= t.slice_numel(), "llm.c checkpoint '", path_, "': ", count,
           " elements requested from '", name, "', whose slice holds ", t.slice_numel());
  const uint8_t* bytes = mapping_.data() + kLlmcHeaderBytes + begin * stored_dtype_size(dtype_);
  decode_to_f32(bytes, static_cast<size_t>(count >= 0 ? count : t.slice_numel()), dtype_, out);
}

// ---------------------------------------------------------------------------------------------
// Writer

LlmcWriter::LlmcWriter(std::string path, const LlmcConfig& config, StoredDType dtype)
    : file_(std::move(path)), config_(config), dtype_(dtype) {
  ZS_CHECK(dtype == StoredDType::kF32 || dtype == StoredDType::kBF16, "writing '", file_.path(),
           "': llm.c checkpoints store F32 (version 3) or BF16 (version 5), not ",
           stored_dtype_name(dtype));
  tensors_ = llmc_layout(config_);
  for (const LlmcTensor& t : tensors_) {
    written_.emplace_back(t.per_layer ? static_cast<size_t>(t.shape[0]) : 1, false);
  }
  std::array<int32_t, 256> header{};
  header[0] = kLlmcModelMagic;
  header[1] = version_of(dtype_);
  header[2] = static_cast<int32_t>(config_.max_seq_len);
  header[3] = static_cast<int32_t>(config_.vocab_size);
  header[4] = static_cast<int32_t>(config_.n_layer);
  header[5] = static_cast<int32_t>(config_.n_head);
  header[6] = static_cast<int32_t>(config_.channels);
  header[7] = static_cast<int32_t>(config_.padded_vocab_size);
  file_.write(header.data(), kLlmcHeaderBytes);
}

void LlmcWriter::write(const std::string& name, int64_t layer, const float* values) {
  ZS_CHECK(!file_.committed(), "'", path(), "' was already committed; create a new writer");
  const int index = tensor_index(tensors_, name);
  ZS_CHECK(index >= 0, "writing llm.c checkpoint '", path(), "': no tensor '", name, "'");
  const LlmcTensor& t = tensors_[static_cast<size_t>(index)];
  const uint64_t begin = slice_begin(path(), t, layer);
  std::vector<bool>& written = written_[static_cast<size_t>(index)];
  const size_t slot = t.per_layer ? static_cast<size_t>(layer) : 0;
  ZS_CHECK(!written[slot], "writing llm.c checkpoint '", path(), "': '", name, "' layer ", layer,
           " is written twice");
  const size_t count = static_cast<size_t>(t.slice_numel());
  const size_t element_bytes = stored_dtype_size(dtype_);
  std::vector<uint8_t> encoded(std::min(count, kConvertChunk) * element_bytes);
  for (size_t done = 0; done < count; done += kConvertChunk) {
    const size_t n = std::min(kConvertChunk, count - done);
    encode_f32(values + done, n, dtype_, encoded.data());
    file_.write_at(kLlmcHeaderBytes + (begin + done) * element_bytes, encoded.data(),
                   n * element_bytes);
  }
  written[slot] = true;
}

void LlmcWriter::commit() {
  ZS_CHECK(!file_.committed(), "'", path(), "' was already committed; create a new writer");
  for (size_t i = 0; i < tensors_.size(); ++i) {
    for (size_t layer = 0; layer < written_[i].size(); ++layer) {
      ZS_CHECK(written_[i][layer], "writing llm.c checkpoint '", path(), "': '", tensors_[i].name,
               "'", tensors_[i].per_layer ? " layer " : "",
               tensors_[i].per_layer ? std::to_string(layer) : std::string(),
               " was never written; write every tensor before commit()");
    }
  }
  file_.commit();
}

}  // namespace zs::checkpoint
