// GPT-2 weight import and export: the name and layout mapping between zeroshard's Gpt
// parameters and the two files GPT-2 weights come in — a Hugging Face safetensors file and an
// llm.c checkpoint — and the source and sink that plug into the sharded model's
// load_full_parameters / visit_full_parameters callbacks.
//
// The mapping, for layer i (C = width, V = vocab, T = context):
//
//   zeroshard                      Hugging Face (optional "transformer." prefix)   llm.c
//   wte [V, C]                     wte.weight [V, C]                               wte [Vp, C]
//   wpe [T, C]                     wpe.weight [T, C]                               wpe [T, C]
//   blocks.i.ln1.{weight,bias}     h.i.ln_1.{weight,bias}                          ln1w/ln1b[i]
//   blocks.i.attn.qkv.weight [3C,C] h.i.attn.c_attn.weight [C, 3C]  (transposed)   qkvw[i]
//   blocks.i.attn.qkv.bias         h.i.attn.c_attn.bias                            qkvb[i]
//   blocks.i.attn.proj.weight      h.i.attn.c_proj.weight          (transposed)    attprojw[i]
//   blocks.i.attn.proj.bias        h.i.attn.c_proj.bias                            attprojb[i]
//   blocks.i.ln2.{weight,bias}     h.i.ln_2.{weight,bias}                          ln2w/ln2b[i]
//   blocks.i.mlp.fc.weight [4C,C]  h.i.mlp.c_fc.weight [C, 4C]     (transposed)    fcw[i]
//   blocks.i.mlp.fc.bias           h.i.mlp.c_fc.bias                               fcb[i]
//   blocks.i.mlp.proj.weight       h.i.mlp.c_proj.weight [4C, C]   (transposed)    fcprojw[i]
//   blocks.i.mlp.proj.bias         h.i.mlp.c_proj.bias                             fcprojb[i]
//   ln_f.{weight,bias}             ln_f.{weight,bias}                              lnfw/lnfb
//
// Hugging Face's GPT-2 uses Conv1D, whose weight is [in, out] (y = x·W), so its matrices are the
// transpose of zeroshard's Linear [out, in]; llm.c stores [out, in] like zeroshard. The q | k | v
// split of the fused attention projection and the head order inside each are the same in all
// three. On import, Hugging Face's attention-mask buffers (h.i.attn.bias, h.i.attn.masked_bias)
// are ignored, and lm_head.weight — tied to wte in GPT-2 — is accepted if it equals wte.weight
// (a file whose head differs is refused: this model ties them). llm.c's vocab is padded to Vp:
// rows >= V are ignored on import (unless the model's vocab is Vp) and zero on export.
//
// Errors: a file that does not fit the model (a missing tensor, a tensor the model lacks, a
// shape mismatch) is an InvalidArgument naming the tensor, both shapes and the model config the
// file holds; an invalid file is a CorruptCheckpoint (see safetensors.h, llmc.h).
//
// Thread-safety: a Gpt2WeightSource is immutable after construction; fill() may run on any
// number of threads at once. A Gpt2WeightExporter is used from one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "checkpoint/llmc.h"
#include "checkpoint/safetensors.h"
#include "models/gpt.h"

namespace zs::checkpoint {

enum class WeightFormat : uint8_t { kSafetensors, kLlmc };
const char* weight_format_name(WeightFormat format);  // "safetensors", "llm.c"
// By content: a file that starts with llm.c's model magic is llm.c; anything else is read as
// safetensors (whose reader says so if it is not). IoError if the file cannot be read.
WeightFormat detect_weight_format(const std::string& path);
// By extension, for outputs: ".safetensors" → safetensors, ".bin" → llm.c; false otherwise.
bool weight_format_from_extension(const std::string& path, WeightFormat* format);

// Where one zeroshard parameter lives in a file.
struct Gpt2TensorRef {
  std::string param;        // "blocks.3.attn.qkv.weight"
  Shape shape;              // the parameter's shape
  std::string file_tensor;  // Hugging Face: "h.3.attn.c_attn.weight" (no prefix); llm.c: "qkvw"
  Shape file_shape;         // Hugging Face: the tensor's shape in the file; llm.c: the slice's
  int64_t layer = -1;       // llm.c: the per-layer slice; -1 for whole tensors
  bool transposed = false;  // stored as the transpose of the parameter (Conv1D)
};
// Every parameter of a Gpt with `config`, in the model's parameter order.
std::vector<Gpt2TensorRef> gpt2_hf_mapping(const models::GptConfig& config);
// llm.c: `padded_vocab` is the file's Vp; wte's file_shape is [Vp, C], of which the parameter
// takes the first config.vocab_size rows.
std::vector<Gpt2TensorRef> gpt2_llmc_mapping(const models::GptConfig& config, int64_t padded_vocab);

// The GPT config a weight file holds. llm.c: all of it from the header (n_head > 0 must agree
// with the header). safetensors: layers, width, vocab and context from the tensors' shapes;
// heads from `n_head` when > 0, else from the metadata key "zeroshard.n_head" (written by the
// exporter), else width / 64 (every GPT-2 size has 64-wide heads) when that divides.
// `n_head_source`, when given, receives where the heads came from ("llm.c header", "--heads",
// "metadata", "width / 64").
models::GptConfig infer_gpt2_config(const std::string& path, int64_t n_head = 0,
                                    std::string* n_head_source = nullptr);

// Reads GPT-2 weights for a model of `config` from a safetensors or llm.c file. Construction
// checks everything up front — every parameter present with the right shape and a float dtype,
// no tensor the model lacks — so a mismatch is reported before any parameter is written.
//
// With the sharded model:
//   Gpt2WeightSource source(path, config);
//   sharded.load_full_parameters([&](const std::string& name, const Shape& shape, float* dst) {
//     source.fill(name, shape, dst);
//   });
class Gpt2WeightSource {
 public:
  Gpt2WeightSource(const std::string& path, const models::GptConfig& config);
  ~Gpt2WeightSource();
  Gpt2WeightSource(Gpt2WeightSource&&) noexcept;
  Gpt2WeightSource& operator=(Gpt2WeightSource&&) noexcept;

  const std::string& path() const { return path_; }
  WeightFormat format() const { return format_; }
  const models::GptConfig& config() const { return config_; }

  // dst[0, numel(shape)) = parameter `name` as fp32. InvalidArgument if the model has no such
  // parameter or `shape` is not its shape.
  void fill(const std::string& name, const Shape& shape, float* dst) const;
  // Fills every parameter of an unsharded model whose parameters are bound (models::materialize);
  // any floating dtype (converted from fp32).
  void load_into(models::Module& model) const;

 private:
  std::string path_;
  WeightFormat format_;
  models::GptConfig config_;
  std::unique_ptr<SafetensorsReader> safetensors_;
  std::unique_ptr<LlmcReader> llmc_;
  // By parameter name; file_tensor is the name as the file spells it (with any prefix).
  std::unordered_map<std::string, Gpt2TensorRef> refs_;
};

struct Gpt2ExportOptions {
  WeightFormat format = WeightFormat::kSafetensors;
  StoredDType dtype = StoredDType::kF32;  // safetensors: F32, F16, BF16; llm.c: F32, BF16
  int64_t padded_vocab = 0;               // llm.c's Vp; 0: vocab rounded up to a multiple of 128
};

// Writes a Gpt's parameters as a Hugging Face-layout safetensors file (names without prefix,
// Conv1D weights transposed, metadata "format": "pt" and the model config) or an llm.c
// checkpoint. Parameters arrive one at a time, in any order, and stream to disk; commit()
// checks all arrived and makes the file appear at `path` (see SafetensorsWriter, LlmcWriter).
//
// With the sharded model (visit_full_parameters is collective: every rank calls it, one writes):
//   std::optional<Gpt2WeightExporter> exporter;
//   if (rank == 0) exporter.emplace(path, config, options);
//   sharded.visit_full_parameters([&](const std::string& name, const Shape& shape,
//                                     const float* data) {
//     if (exporter) exporter->add(name, shape, data);
//   });
//   if (exporter) exporter->commit();
class Gpt2WeightExporter {
 public:
  Gpt2WeightExporter(std::string path, const models::GptConfig& config,
                     const Gpt2ExportOptions& options = {});
  ~Gpt2WeightExporter();
  Gpt2WeightExporter(const Gpt2WeightExporter&) = delete;
  Gpt2WeightExporter& operator=(const Gpt2WeightExporter&) = delete;

  // data: the full fp32 values of parameter `name` of shape `shape`.
  void add(const std::string& name, const Shape& shape, const float* data);
  // add() for every parameter of an unsharded, bound model, then commit().
  void save(models::Module& model);
  void commit();

 private:
  std::string path_;
  models::GptConfig config_;
  Gpt2ExportOptions options_;
  std::unique_ptr<SafetensorsWriter> safetensors_;
  std::unique_ptr<LlmcWriter> llmc_;
  std::unordered_map<std::string, Gpt2TensorRef> refs_;
  std::unordered_map<std::string, bool> added_;
};

}  // namespace zs::checkpoint
