// llm.c's GPT-2 model checkpoint (the .bin that llm.c's train_gpt2.py writes and its trainers
// read): a validating, memory-mapped reader and a crash-safe writer.
//
// Layout. A header of 256 little-endian int32 words — 0: magic 20240326, 1: version (3 = fp32
// parameters, 5 = bf16 parameters; both with a padded vocabulary), 2: maxT (context), 3: V
// (vocab size), 4: L (layers), 5: NH (heads), 6: C (width), 7: Vp (vocab padded, e.g. 50304),
// the rest zero — then the 16 parameter tensors back to back, in this order, each row-major:
//
//   wte (Vp, C)   wpe (maxT, C)   ln1w (L, C)    ln1b (L, C)    qkvw (L, 3C, C)  qkvb (L, 3C)
//   attprojw (L, C, C)  attprojb (L, C)  ln2w (L, C)  ln2b (L, C)  fcw (L, 4C, C)  fcb (L, 4C)
//   fcprojw (L, C, 4C)  fcprojb (L, C)  lnfw (C)  lnfb (C)
//
// Matrices are [out, in] (y = x·Wᵀ), like zeroshard's Linear; qkvw's 3C rows are q | k | v with
// heads contiguous inside each. Rows V..Vp-1 of wte are padding (llm.c keeps them zero).
//
// Errors: IoError when the file cannot be opened; CorruptCheckpoint when it is not a valid
// checkpoint (wrong magic, unknown version, impossible sizes, a size that is not header +
// parameters); InvalidArgument for requests the file cannot answer.
//
// Ownership and thread-safety: LlmcReader owns its mapping (move-only), is immutable after
// construction and may be read from any number of threads. LlmcWriter owns a temporary file
// until commit() and is used from one thread at a time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "runtime/file_io.h"
#include "runtime/tensor.h"

namespace zs::checkpoint {

constexpr int32_t kLlmcModelMagic = 20240326;
constexpr int32_t kLlmcVersionF32 = 3;
constexpr int32_t kLlmcVersionBF16 = 5;
constexpr size_t kLlmcHeaderBytes = 256 * 4;
constexpr int kLlmcNumTensors = 16;

struct LlmcConfig {
  int64_t max_seq_len = 0;        // maxT
  int64_t vocab_size = 0;         // V
  int64_t padded_vocab_size = 0;  // Vp >= V
  int64_t n_layer = 0;            // L
  int64_t n_head = 0;             // NH
  int64_t channels = 0;           // C
};

// One of the 16 tensors: its llm.c name, full shape (with the leading L for per-layer tensors),
// whether it is stacked per layer, and where its elements start among all parameters.
struct LlmcTensor {
  std::string name;  // "wte", "qkvw", ...
  Shape shape;
  bool per_layer = false;
  uint64_t first_element = 0;
  int64_t numel() const { return shape_numel(shape); }
  // Elements of one layer's slice (the whole tensor when not per layer).
  int64_t slice_numel() const { return per_layer ? numel() / shape[0] : numel(); }
};

// The 16 tensors of `config`, in file order. Checks the config is consistent (positive sizes,
// C divisible by NH, Vp >= V); InvalidArgument otherwise.
std::vector<LlmcTensor> llmc_layout(const LlmcConfig& config);
// Vocab rounded up to a multiple of `multiple` (llm.c uses 128: 50257 → 50304).
int64_t llmc_padded_vocab(int64_t vocab_size, int64_t multiple = 128);

class LlmcReader {
 public:
  explicit LlmcReader(std::string path);
  LlmcReader(LlmcReader&&) noexcept = default;
  LlmcReader& operator=(LlmcReader&&) noexcept = default;

  const std::string& path() const { return path_; }
  int32_t version() const { return version_; }
  StoredDType dtype() const { return dtype_; }  // kF32 (version 3) or kBF16 (version 5)
  const LlmcConfig& config() const { return config_; }
  const std::vector<LlmcTensor>& tensors() const { return tensors_; }
  // Throws InvalidArgument naming the file if `name` is not one of the 16.
  const LlmcTensor& tensor(const std::string& name) const;

  // out = layer `layer`'s slice of a per-layer tensor (layer in [0, L)), or the whole tensor
  // when it is not per layer (layer must be -1), as fp32 — its first `count` elements when
  // count >= 0 (e.g. the first V of wte's Vp rows), else all of it.
  void read_f32(const std::string& name, int64_t layer, float* out, int64_t count = -1) const;

 private:
  std::string path_;
  zs::detail::MappedFile mapping_;
  int32_t version_ = 0;
  StoredDType dtype_ = StoredDType::kF32;
  LlmcConfig config_;
  std::vector<LlmcTensor> tensors_;
};

// Writes an llm.c checkpoint of `config` with parameters stored as `dtype` (kF32 → version 3,
// kBF16 → version 5). The header is fixed at construction; write() puts each slice straight at
// its offset, in any order, so a model streams to disk one parameter at a time. Nothing
// appears at `path` until commit(), which checks every slice was written (each exactly once).
class LlmcWriter {
 public:
  LlmcWriter(std::string path, const LlmcConfig& config, StoredDType dtype = StoredDType::kF32);
  LlmcWriter(const LlmcWriter&) = delete;
  LlmcWriter& operator=(const LlmcWriter&) = delete;

  // values: layer `layer`'s slice of per-layer tensor `name` (layer in [0, L)), or the whole
  // tensor (layer -1) — slice_numel() fp32 values. wte takes all Vp rows.
  void write(const std::string& name, int64_t layer, const float* values);
  void commit();

  const std::string& path() const { return file_.path(); }
  const LlmcConfig& config() const { return config_; }

 private:
  zs::detail::AtomicFileWriter file_;
  LlmcConfig config_;
  StoredDType dtype_;
  std::vector<LlmcTensor> tensors_;
  std::vector<std::vector<bool>> written_;  // [tensor][layer or 0]
};

}  // namespace zs::checkpoint
