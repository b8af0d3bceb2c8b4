// GPT-2 weight import/export: a materialized tiny Gpt exported and imported again is bit-exact in
// both formats; a Hugging Face-layout file built here by hand (Conv1D weights transposed,
// "transformer." prefix, mask buffers, tied lm_head) gives the same logits and loss as the model
// it came from; mismatched files fail with messages naming the tensor and both shapes.
#include "checkpoint/gpt2_weights.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>

#include "checkpoint_test_util.h"
#include "runtime/allocator.h"
#include "runtime/autograd.h"
#include "runtime/half.h"

namespace zs::checkpoint {
namespace {

using models::Gpt;
using models::GptConfig;
using testing::error_message;
using testing::read_bytes;
using testing::ScratchDir;
using testing::tiny_gpt_config;

std::map<std::string, std::vector<float>> parameters_of(Gpt& model) {
  std::map<std::string, std::vector<float>> values;
  for (models::Parameter* p : model.parameters()) values[p->name()] = p->tensor().to_vector();
  return values;
}

void expect_same_parameters(Gpt& a, Gpt& b) {
  const auto va = parameters_of(a), vb = parameters_of(b);
  ASSERT_EQ(va.size(), vb.size());
  for (const auto& item : va) {
    const std::vector<float>& other = vb.at(item.first);
    ASSERT_EQ(item.second.size(), other.size()) << item.first;
    EXPECT_EQ(std::memcmp(item.second.data(), other.data(), other.size() * 4), 0) << item.first;
  }
}

// Ids and targets [2, T] from a fixed stream.
struct Batch {
  Tensor ids, targets;
};
Batch make_batch(const GptConfig& config, Allocator& allocator) {
  const int64_t batch = 2, seq = config.context;
  Batch b{Tensor::empty({batch, seq}, DType::kI32, allocator, "ids"),
          Tensor::empty({batch, seq}, DType::kI32, allocator, "targets")};
  for (int64_t i = 0; i < batch * seq; ++i) {
    b.ids.data<int32_t>()[i] =
        static_cast<int32_t>(random_bits(rng_key(5, "ids"), i) % config.vocab_size);
    b.targets.data<int32_t>()[i] =
        static_cast<int32_t>(random_bits(rng_key(5, "targets"), i) % config.vocab_size);
  }
  return b;
}

std::vector<float> logits_of(Gpt& model, const Batch& batch) {
  NoGradScope no_grad;
  return model(batch.ids).to_vector();
}

float loss_of(Gpt& model, const Batch& batch) {
  NoGradScope no_grad;
  return model.loss(batch.ids, batch.targets).item();
}

// The Hugging Face name of one of our parameters, written out independently of the library's
// table: GPT2LMHeadModel's "transformer." prefix, h.<i>, ln_1/ln_2, c_attn, c_proj, c_fc.
std::string hf_name(const std::string& ours) {
  static const std::map<std::string, std::string> block = {
      {"ln1.weight", "ln_1.weight"},
      {"ln1.bias", "ln_1.bias"},
      {"attn.qkv.weight", "attn.c_attn.weight"},
      {"attn.qkv.bias", "attn.c_attn.bias"},
      {"attn.proj.weight", "attn.c_proj.weight"},
      {"attn.proj.bias", "attn.c_proj.bias"},
      {"ln2.weight", "ln_2.weight"},
      {"ln2.bias", "ln_2.bias"},
      {"mlp.fc.weight", "mlp.c_fc.weight"},
      {"mlp.fc.bias", "mlp.c_fc.bias"},
      {"mlp.proj.weight", "mlp.c_proj.weight"},
      {"mlp.proj.bias", "mlp.c_proj.bias"}};
  if (ours == "wte" || ours == "wpe") return "transformer." + ours + ".weight";
  if (ours.rfind("ln_f.", 0) == 0) return "transformer." + ours;
  const size_t dot = ours.find('.', 7);  // after "blocks.<i>"
  return "transformer.h." + ours.substr(7, dot - 7) + "." + block.at(ours.substr(dot + 1));
}

// Writes `model` as GPT2LMHeadModel would save it: prefixed names, Conv1D weights [in, out],
// the causal-mask buffers and a tied lm_head.weight. `skip` leaves one tensor out; `perturb_head`
// makes lm_head differ from wte.
void write_hf_file(Gpt& model, const std::string& path, const std::string& skip = "",
                   bool perturb_head = false) {
  SafetensorsWriter writer(path);
  writer.set_metadata("format", "pt");
  const GptConfig& config = model.config();
  for (models::Parameter* p : model.parameters()) {
    const std::string name = hf_name(p->name());
    if (name == skip) continue;
    std::vector<float> values = p->tensor().to_vector();
    Shape shape = p->shape();
    if (shape.size() == 2 && p->name().rfind("blocks.", 0) == 0) {  // Linear [out, in] → [in, out]
      const int64_t out = shape[0], in = shape[1];
      std::vector<float> conv(values.size());
      for (int64_t o = 0; o < out; ++o) {
        for (int64_t i = 0; i < in; ++i) conv[i * out + o] = values[o * in + i];
      }
      values.swap(conv);
      shape = {in, out};
    }
    writer.add(name, shape, StoredDType::kF32, values.data());
  }
  for (int64_t l = 0; l < config.n_layer; ++l) {
    const int64_t t = config.context;
    std::vector<float> mask(static_cast<size_t>(t * t), 0.0f);
    for (int64_t r = 0; r < t; ++r) {
      for (int64_t c = 0; c <= r; ++c) mask[r * t + c] = 1.0f;
    }
    writer.add("transformer.h." + std::to_string(l) + ".attn.bias", {1, 1, t, t}, StoredDType::kF32,
               mask.data());
    const float masked = -1e4f;
    writer.add("transformer.h." + std::to_string(l) + ".attn.masked_bias", {}, StoredDType::kF32,
               &masked);
  }
  for (models::Parameter* p : model.parameters()) {
    if (p->name() != "wte") continue;
    std::vector<float> head = p->tensor().to_vector();
    if (perturb_head) head[3] += 1.0f;
    writer.add("lm_head.weight", p->shape(), StoredDType::kF32, head.data());
  }
  writer.commit();
}

// Every test has a scratch directory and a tiny GPT-2 materialized twice with different seeds:
// `original` (seed 1) and `copy` (seed 2), same shapes, different weights.
class Gpt2Weights : public ::testing::Test {
 protected:
  Gpt2Weights() {
    models::materialize(original, allocator, 1);
    models::materialize(copy, allocator, 2);
  }

  ScratchDir scratch;
  CpuAllocator allocator{nullptr};
  const GptConfig config = tiny_gpt_config();
  Gpt original{config};
  Gpt copy{config};
};

TEST_F(Gpt2Weights, SafetensorsExportThenImportIsBitExact) {
  const std::string first = scratch.path("first.safetensors");
  Gpt2WeightExporter(first, config).save(original);

  const Gpt2WeightSource source(first, config);
  EXPECT_EQ(source.format(), WeightFormat::kSafetensors);
  source.load_into(copy);
  expect_same_parameters(original, copy);

  // Exporting the import gives the same bytes.
  const std::string second = scratch.path("second.safetensors");
  Gpt2WeightExporter(second, config).save(copy);
  EXPECT_EQ(read_bytes(first), read_bytes(second));

  // The file is in the Hugging Face layout: no prefix, Conv1D shapes, "format": "pt".
  const SafetensorsReader reader(first);
  EXPECT_EQ(reader.info("h.1.attn.c_attn.weight").shape, (Shape{16, 48}));
  EXPECT_EQ(reader.info("h.0.mlp.c_proj.weight").shape, (Shape{64, 16}));
  EXPECT_EQ(reader.info("wte.weight").shape, (Shape{37, 16}));
  EXPECT_EQ(reader.metadata().at("format"), "pt");
  EXPECT_EQ(reader.names().size(), original.parameters().size());
}

TEST_F(Gpt2Weights, LlmcExportThenImportIsBitExact) {
  const std::string first = scratch.path("first.bin");
  Gpt2ExportOptions options;
  options.format = WeightFormat::kLlmc;
  Gpt2WeightExporter(first, config, options).save(original);

  EXPECT_EQ(detect_weight_format(first), WeightFormat::kLlmc);
  const LlmcReader reader(first);
  EXPECT_EQ(reader.config().padded_vocab_size, 128);  // 37 rounded up to a multiple of 128
  std::vector<float> wte(128 * 16);
  reader.read_f32("wte", -1, wte.data());
  for (size_t i = 37 * 16; i < wte.size(); ++i)
    ASSERT_EQ(wte[i], 0.0f) << "padding row element " << i;

  Gpt2WeightSource(first, config).load_into(copy);
  expect_same_parameters(original, copy);
  const std::string second = scratch.path("second.bin");
  Gpt2WeightExporter(second, config, options).save(copy);
  EXPECT_EQ(read_bytes(first), read_bytes(second));

  const GptConfig inferred = infer_gpt2_config(first);
  EXPECT_EQ(models::describe(inferred), models::describe(config));
}

TEST_F(Gpt2Weights, LlmcImportIntoAModelWithThePaddedVocab) {
  const std::string path = scratch.path("padded.bin");
  Gpt2ExportOptions options;
  options.format = WeightFormat::kLlmc;
  options.padded_vocab = 40;
  Gpt2WeightExporter(path, config, options).save(original);
  GptConfig padded = config;
  padded.vocab_size = 40;  // llm.c trains with the padded vocab
  Gpt wide(padded);
  models::materialize(wide, allocator, 3);
  Gpt2WeightSource(path, padded).load_into(wide);
  const std::vector<float> a = original.parameters()[0]->tensor().to_vector();
  const std::vector<float> b = wide.parameters()[0]->tensor().to_vector();
  ASSERT_EQ(b.size(), 40u * 16);
  EXPECT_EQ(std::vector<float>(b.begin(), b.begin() + 37 * 16), a);
  EXPECT_EQ(std::vector<float>(b.begin() + 37 * 16, b.end()), std::vector<float>(3 * 16, 0.0f));
}

TEST_F(Gpt2Weights, HuggingFaceFileWithTransposedConv1dGivesTheSameLogits) {
  Gpt& imported = copy;
  const Batch batch = make_batch(config, allocator);
  const std::vector<float> logits = logits_of(original, batch);
  const float loss = loss_of(original, batch);
  ASSERT_NE(loss_of(imported, batch), loss);  // different seeds: different models

  const std::string path = scratch.path("gpt2_lm_head.safetensors");
  write_hf_file(original, path);
  // The library's mapping agrees with the names written above.
  for (const Gpt2TensorRef& ref : gpt2_hf_mapping(config)) {
    EXPECT_EQ("transformer." + ref.file_tensor, hf_name(ref.param));
  }
  // A callback of load_full_parameters' shape, as the sharded model calls it.
  const Gpt2WeightSource source(path, config);
  std::function<void(const std::string&, const Shape&, float*)> load =
      [&](const std::string& name, const Shape& shape, float* dst) {
        source.fill(name, shape, dst);
      };
  for (models::Parameter* p : imported.parameters()) {
    load(p->name(), p->shape(), p->tensor().data<float>());
  }
  expect_same_parameters(original, imported);
  const std::vector<float> imported_logits = logits_of(imported, batch);
  ASSERT_EQ(imported_logits.size(), logits.size());
  EXPECT_EQ(std::memcmp(imported_logits.data(), logits.data(), logits.size() * 4), 0);
  EXPECT_EQ(loss_of(imported, batch), loss);
  EXPECT_EQ(current_tape().size(), 0u);
}

TEST_F(Gpt2Weights, InfersTheConfigOfAPrefixedFile) {
  Gpt& model = original;
  const std::string path = scratch.path("prefixed.safetensors");
  write_hf_file(model, path);
  // Width 16 is not a multiple of GPT-2's 64-wide heads and the file does not say: ask.
  EXPECT_CONTAINS(error_message<InvalidArgument>([&] { infer_gpt2_config(path); }), "--heads");
  const GptConfig inferred = infer_gpt2_config(path, 2);
  EXPECT_EQ(models::describe(inferred), models::describe(config));
  // The exporter records the heads in the metadata, so its files need no flag.
  const std::string exported = scratch.path("exported.safetensors");
  Gpt2WeightExporter(exported, config).save(model);
  EXPECT_EQ(infer_gpt2_config(exported).n_head, 2);
  EXPECT_EQ(infer_gpt2_config(exported, 4).n_head, 4);  // an explicit value wins
}

TEST_F(Gpt2Weights, Bf16ExportHoldsRoundedValues) {
  for (WeightFormat format : {WeightFormat::kSafetensors, WeightFormat::kLlmc}) {
    const std::string path = scratch.path(format == WeightFormat::kLlmc ? "bf16.bin" : "bf16.st");
    Gpt2ExportOptions options;
    options.format = format;
    options.dtype = StoredDType::kBF16;
    Gpt2WeightExporter(path, config, options).save(original);
    Gpt2WeightSource(path, config).load_into(copy);
    const auto expected = parameters_of(original);
    for (const auto& item : parameters_of(copy)) {
      for (size_t i = 0; i < item.second.size(); ++i) {
        ASSERT_EQ(item.second[i],
                  bf16_bits_to_float(float_to_bf16_bits(expected.at(item.first)[i])))
            << weight_format_name(format) << " " << item.first << "[" << i << "]";
      }
    }
  }
}

TEST_F(Gpt2Weights, MismatchedFilesNameTheTensorBothShapesAndTheFix) {
  Gpt& model = original;
  const std::string path = scratch.path("model.safetensors");
  Gpt2WeightExporter(path, config).save(model);

  GptConfig wider = config;
  wider.width = 32;
  std::string message = error_message<InvalidArgument>([&] { Gpt2WeightSource(path, wider); });
  EXPECT_CONTAINS(message, "'wte.weight' is [37, 16] but parameter 'wte' needs [37, 32]");
  EXPECT_CONTAINS(message,
                  "'h.0.attn.c_attn.weight' is [16, 48] but parameter "
                  "'blocks.0.attn.qkv.weight' [96, 32] needs [32, 96] (Conv1D [in, out])");
  EXPECT_CONTAINS(message, "the file holds a GPT-2 with layers 2, width 16, heads 2, vocab 37");

  GptConfig shallower = config;
  shallower.n_layer = 1;
  message = error_message<InvalidArgument>([&] { Gpt2WeightSource(path, shallower); });
  EXPECT_CONTAINS(message, "tensors the model lacks 'h.1.");
  GptConfig deeper = config;
  deeper.n_layer = 3;
  message = error_message<InvalidArgument>([&] { Gpt2WeightSource(path, deeper); });
  EXPECT_CONTAINS(message, "missing 'h.2.attn.c_attn.bias'");

  const std::string no_ln_f = scratch.path("no_ln_f.safetensors");
  write_hf_file(model, no_ln_f, "transformer.ln_f.bias");
  message = error_message<InvalidArgument>([&] { Gpt2WeightSource(no_ln_f, config); });
  EXPECT_CONTAINS(message, "missing 'ln_f.bias'");

  const std::string untied = scratch.path("untied.safetensors");
  write_hf_file(model, untied, "", /*perturb_head=*/true);
  EXPECT_CONTAINS(error_message<InvalidArgument>([&] { Gpt2WeightSource(untied, config); }),
                  "lm_head.weight differs from transformer.wte.weight");

  const std::string llmc = scratch.path("model.bin");
  Gpt2ExportOptions options;
  options.format = WeightFormat::kLlmc;
  Gpt2WeightExporter(llmc, config, options).save(model);
  message = error_message<InvalidArgument>([&] { Gpt2WeightSource(llmc, shallower); });
  EXPECT_CONTAINS(message, "layers 1 vs 2");
  EXPECT_CONTAINS(message, "build the model with that config");

  // fill() checks the name and shape it is called with.
  const Gpt2WeightSource source(path, config);
  std::vector<float> buffer(16 * 48);
  EXPECT_CONTAINS(error_message<InvalidArgument>([&] {
                    source.fill("blocks.0.attn.qkv.weight", {16, 48}, buffer.data());
                  }),
                  "parameter 'blocks.0.attn.qkv.weight' is [16, 48]");
  EXPECT_CONTAINS(
      error_message<InvalidArgument>([&] { source.fill("head.weight", {16}, buffer.data()); }),
      "'head.weight' has no counterpart");
}

TEST_F(Gpt2Weights, ExporterChecksEveryParameterArrivesOnce) {
  const std::string path = scratch.path("partial.safetensors");
  Gpt2WeightExporter exporter(path, config);
  std::vector<float> ln(16, 1.0f);
  exporter.add("ln_f.weight", {16}, ln.data());
  EXPECT_THROW(exporter.add("ln_f.weight", {16}, ln.data()), InvalidArgument);
  EXPECT_THROW(exporter.add("ln_f.bias", {17}, ln.data()), InvalidArgument);
  EXPECT_CONTAINS(error_message<InvalidArgument>([&] { exporter.commit(); }), "were never added");
  EXPECT_FALSE(std::filesystem::exists(path));
  Gpt2ExportOptions f16_llmc;
  f16_llmc.format = WeightFormat::kLlmc;
  f16_llmc.dtype = StoredDType::kF16;
  EXPECT_THROW(Gpt2WeightExporter(scratch.path("x.bin"), config, f16_llmc), InvalidArgument);
}

}  // namespace
}  // namespace zs::checkpoint
