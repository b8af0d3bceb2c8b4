// GPT-2 weights: the name mappings, config inference, the validated source and the exporter.
#include "checkpoint/gpt2_weights.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <utility>

#include "runtime/error.h"

namespace zs::checkpoint {
namespace {

constexpr const char* kPrefix = "transformer.";
constexpr const char* kHeadsMetadataKey = "zeroshard.n_head";
constexpr size_t kMaxListed = 8;  // names listed per kind of problem in one message

// "transformer.h.0.ln_1.weight" → "h.0.ln_1.weight".
std::string strip_prefix(const std::string& name) {
  const size_t length = std::strlen(kPrefix);
  return name.compare(0, length, kPrefix) == 0 ? name.substr(length) : name;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Hugging Face's causal-mask buffers: not weights.
bool is_mask_buffer(const std::string& key) {
  return key.compare(0, 2, "h.") == 0 &&
         (ends_with(key, ".attn.bias") || ends_with(key, ".attn.masked_bias"));
}

// "h.<i>.…" → i, or -1.
int64_t layer_of(const std::string& key) {
  if (key.compare(0, 2, "h.") != 0) return -1;
  const size_t dot = key.find('.', 2);
  if (dot == std::string::npos || dot == 2) return -1;
  int64_t layer = 0;
  for (size_t i = 2; i < dot; ++i) {
    if (key[i] < '0' || key[i] > '9' || layer > (int64_t{1} << 40)) return -1;
    layer = layer * 10 + (key[i] - '0');
  }
  return layer;
}

std::string join(const std::vector<std::string>& items) {
  std::string text;
  for (size_t i = 0; i < items.size() && i < kMaxListed; ++i) {
    text += (i ? ", '" : "'") + items[i] + "'";
  }
  if (items.size() > kMaxListed)
    text += detail::concat(" and ", items.size() - kMaxListed, " more");
  return text;
}

// out_matrix [cols, rows] = in_matrix [rows, cols] transposed: a Conv1D weight [in, out] into a
// Linear weight [out, in] and back. Tiled so both sides stay in cache.
void transpose(const float* in_matrix, int64_t rows, int64_t cols, float* out_matrix) {
  constexpr int64_t kTile = 32;
  for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) out_matrix[c * rows + r] = in_matrix[r * cols + c];
      }
    }
  }
}

// Builds a mapping from one row per parameter; `file` gives (HF name, llm.c name) per parameter.
struct ParamSpec {
  std::string ours;
  Shape shape;
  std::string hf;
  std::string llmc;
  bool transposed;
};

std::vector<ParamSpec> gpt2_params(const models::GptConfig& config) {
  const int64_t C = config.width;
  std::vector<ParamSpec> specs;
  specs.push_back({"wte", {config.vocab_size, C}, "wte.weight", "wte", false});
  specs.push_back({"wpe", {config.context, C}, "wpe.weight", "wpe", false});
  for (int64_t l = 0; l < config.n_layer; ++l) {
    const std::string ours = "blocks." + std::to_string(l) + ".";
    const std::string hf = "h." + std::to_string(l) + ".";
    specs.push_back({ours + "ln1.weight", {C}, hf + "ln_1.weight", "ln1w", false});
    specs.push_back({ours + "ln1.bias", {C}, hf + "ln_1.bias", "ln1b", false});
    specs.push_back(
        {ours + "attn.qkv.weight", {3 * C, C}, hf + "attn.c_attn.weight", "qkvw", true});
    specs.push_back({ours + "attn.qkv.bias", {3 * C}, hf + "attn.c_attn.bias", "qkvb", false});
    specs.push_back(
        {ours + "attn.proj.weight", {C, C}, hf + "attn.c_proj.weight", "attprojw", true});
    specs.push_back({ours + "attn.proj.bias", {C}, hf + "attn.c_proj.bias", "attprojb", false});
    specs.push_back({ours + "ln2.weight", {C}, hf + "ln_2.weight", "ln2w", false});
    specs.push_back({ours + "ln2.bias", {C}, hf + "ln_2.bias", "ln2b", false});
    specs.push_back({ours + "mlp.fc.weight", {4 * C, C}, hf + "mlp.c_fc.weight", "fcw", true});
    specs.push_back({ours + "mlp.fc.bias", {4 * C}, hf + "mlp.c_fc.bias", "fcb", false});
    specs.push_back(
        {ours + "mlp.proj.weight", {C, 4 * C}, hf + "mlp.c_proj.weight", "fcprojw", true});
    specs.push_back({ours + "mlp.proj.bias", {C}, hf + "mlp.c_proj.bias", "fcprojb", false});
  }
  specs.push_back({"ln_f.weight", {C}, "ln_f.weight", "lnfw", false});
  specs.push_back({"ln_f.bias", {C}, "ln_f.bias", "lnfb", false});
  return specs;
}

int64_t layer_from_param(const std::string& ours) {
  if (ours.compare(0, 7, "blocks.") != 0) return -1;
  return std::stoll(ours.substr(7, ours.find('.', 7) - 7));
}

std::unordered_map<std::string, Gpt2TensorRef> by_param(std::vector<Gpt2TensorRef> refs) {
  std::unordered_map<std::string, Gpt2TensorRef> map;
  for (Gpt2TensorRef& ref : refs) {
    std::string key = ref.param;
    map.emplace(std::move(key), std::move(ref));
  }
  return map;
}

// "; the file holds a GPT-2 with layers …" or "" when the file's config cannot be inferred.
std::string file_config_hint(const std::string& path) {
  try {
    return "; the file holds a GPT-2 with " + models::describe(infer_gpt2_config(path)) +
           " (heads as inferred) — build the model with that config or use a file that matches";
  } catch (const Error&) {
    return "";
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Formats, mappings, config inference

const char* weight_format_name(WeightFormat format) {
  return format == WeightFormat::kLlmc ? "llm.c" : "safetensors";
}

WeightFormat detect_weight_format(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  ZS_CHECK_AS(IoError, file.is_open(), "cannot open weight file '", path,
              "'; check the path and its permissions");
  int32_t magic = 0;
  file.read(reinterpret_cast<char*>(&magic), sizeof magic);
  return file.gcount() == sizeof magic && magic == kLlmcModelMagic ? WeightFormat::kLlmc
                                                                   : WeightFormat::kSafetensors;
}

bool weight_format_from_extension(const std::string& path, WeightFormat* format) {
  if (ends_with(path, ".safetensors")) {
    *format = WeightFormat::kSafetensors;
    return true;
  }
  if (ends_with(path, ".bin")) {
    *format = WeightFormat::kLlmc;
    return true;
  }
  return false;
}

std::vector<Gpt2TensorRef> gpt2_hf_mapping(const models::GptConfig& config) {
  std::vector<Gpt2TensorRef> refs;
  for (ParamSpec& spec : gpt2_params(config)) {
    Shape file_shape = spec.shape;
    if (spec.transposed) std::reverse(file_shape.begin(), file_shape.end());
    refs.push_back({spec.ours, spec.shape, spec.hf, file_shape, -1, spec.transposed});
  }
  return refs;
}

std::vector<Gpt2TensorRef> gpt2_llmc_mapping(const models::GptConfig& config,
                                             int64_t padded_vocab) {
  std::vector<Gpt2TensorRef> refs;
  for (ParamSpec& spec : gpt2_params(config)) {
    Shape file_shape = spec.shape;
    if (spec.ours == "wte") file_shape[0] = padded_vocab;
    refs.push_back(
        {spec.ours, spec.shape, spec.llmc, file_shape, layer_from_param(spec.ours), false});
  }
  return refs;
}

models::GptConfig infer_gpt2_config(const std::string& path, int64_t n_head,
                                    std::string* n_head_source) {
  std::string ignored;
  std::string& source = n_head_source != nullptr ? *n_head_source : ignored;
  models::GptConfig config;
  config.causal = true;
  if (detect_weight_format(path) == WeightFormat::kLlmc) {
    const LlmcReader reader(path);
    const LlmcConfig& header = reader.config();
    ZS_CHECK(n_head <= 0 || n_head == header.n_head, "llm.c checkpoint '", path, "' has ",
             header.n_head, " heads, not the ", n_head, " asked for; drop the heads flag");
    config.vocab_size = header.vocab_size;
    config.context = header.max_seq_len;
    config.width = header.channels;
    config.n_head = header.n_head;
    config.n_layer = header.n_layer;
    source = "llm.c header";
    return config;
  }
  const SafetensorsReader reader(path);
  std::map<std::string, std::string> keys;  // stripped → as in the file
  for (const std::string& name : reader.names()) keys[strip_prefix(name)] = name;
  for (const char* required : {"wte.weight", "wpe.weight"}) {
    ZS_CHECK(keys.count(required) != 0, "safetensors file '", path, "' has no '", required,
             "' (nor 'transformer.", required,
             "'); it does not hold GPT-2 weights in the Hugging Face layout");
  }
  const Shape& wte = reader.info(keys["wte.weight"]).shape;
  const Shape& wpe = reader.info(keys["wpe.weight"]).shape;
  ZS_CHECK(wte.size() == 2 && wpe.size() == 2 && wte[1] == wpe[1] && wte[0] > 0 && wpe[0] > 0,
           "safetensors file '", path, "': wte.weight ", shape_str(wte), " and wpe.weight ",
           shape_str(wpe), " are not [vocab, width] and [context, width] of one width");
  config.vocab_size = wte[0];
  config.width = wte[1];
  config.context = wpe[0];
  std::set<int64_t> layers;
  for (const auto& key : keys) {
    const int64_t layer = layer_of(key.first);
    if (layer >= 0) layers.insert(layer);
  }
  config.n_layer = static_cast<int64_t>(layers.size());
  ZS_CHECK(layers.empty() || *layers.rbegin() == config.n_layer - 1, "safetensors file '", path,
           "' has tensors for ", layers.size(), " layers numbered up to ", *layers.rbegin(),
           "; the layers are not numbered 0..L-1 — the file is incomplete");
  if (n_head > 0) {
    config.n_head = n_head;
    source = "--heads";
  } else if (reader.metadata().count(kHeadsMetadataKey) != 0) {
    source = "metadata";
    const std::string& text = reader.metadata().at(kHeadsMetadataKey);
    try {
      config.n_head = std::stoll(text);
    } catch (const std::exception&) {
      ZS_THROW(CorruptCheckpoint, "safetensors file '", path, "': metadata ", kHeadsMetadataKey,
               " is '", text, "', not a number");
    }
  } else {
    ZS_CHECK(config.width % 64 == 0, "safetensors file '", path, "' does not record the number ",
             "of heads and its width ", config.width,
             " is not a multiple of GPT-2's head size 64; pass the number of heads (--heads)");
    config.n_head = config.width / 64;
    source = "width / 64";
  }
  ZS_CHECK(config.n_head > 0 && config.width % config.n_head == 0, "safetensors file '", path,
           "': width ", config.width, " is not divisible by ", config.n_head,
           " heads; pass a number of heads that divides it (--heads)");
  return config;
}

// ---------------------------------------------------------------------------------------------
// Source

Gpt2WeightSource::~Gpt2WeightSource() = default;
Gpt2WeightSource::Gpt2WeightSource(Gpt2WeightSource&&) noexcept = default;
Gpt2WeightSource& Gpt2WeightSource::operator=(Gpt2WeightSource&&) noexcept = default;

Gpt2WeightSource::Gpt2WeightSource(const std::string& path, const models::GptConfig& config)
    : path_(path), format_(detect_weight_format(path)), config_(config) {
  ZS_CHECK(config.vocab_size > 0 && config.width > 0 && config.context > 0 && config.n_layer >= 0 &&
               config.n_head > 0,
           "GPT-2 import from '", path, "': invalid model config (", models::describe(config), ")");
  if (format_ == WeightFormat::kLlmc) {
    llmc_ = std::make_unique<LlmcReader>(path);
    const LlmcConfig& file = llmc_->config();
    std::vector<std::string> differences;
    auto compare = [&](const char* what, int64_t model_value, int64_t file_value) {
      if (model_value != file_value) {
        differences.push_back(detail::concat(what, " ", model_value, " vs ", file_value));
      }
    };
    compare("layers", config.n_layer, file.n_layer);
    compare("width", config.width, file.channels);
    compare("heads", config.n_head, file.n_head);
    compare("context", config.context, file.max_seq_len);
    if (config.vocab_size != file.vocab_size && config.vocab_size != file.padded_vocab_size) {
      differences.push_back(detail::concat("vocab ", config.vocab_size, " vs ", file.vocab_size,
                                           " (padded ", file.padded_vocab_size, ")"));
    }
    if (!differences.empty()) {
      std::string list;
      for (const std::string& d : differences) list += (list.empty() ? "" : ", ") + d;
      ZS_THROW(InvalidArgument, "llm.c checkpoint '", path, "' does not fit the model (model vs ",
               "file: ", list, "); the file holds a GPT-2 with layers ", file.n_layer, ", width ",
               file.channels, ", heads ", file.n_head, ", vocab ", file.vocab_size, ", context ",
               file.max_seq_len,
               " — build the model with that config (`zs-ckpt inspect` prints it)");
    }
    refs_ = by_param(gpt2_llmc_mapping(config, file.padded_vocab_size));
    return;
  }

  safetensors_ = std::make_unique<SafetensorsReader>(path);
  const SafetensorsReader& reader = *safetensors_;
  std::unordered_map<std::string, std::string> file_names;  // stripped → as in the file
  std::vector<std::string> unexpected, missing, problems;
  std::string lm_head;
  std::vector<Gpt2TensorRef> expected = gpt2_hf_mapping(config);  // in parameter order
  std::unordered_map<std::string, std::string> param_of;          // HF key → parameter
  for (const Gpt2TensorRef& ref : expected) param_of[ref.file_tensor] = ref.param;
  for (const std::string& name : reader.names()) {
    if (name == "lm_head.weight") {
      lm_head = name;
      continue;
    }
    const std::string key = strip_prefix(name);
    if (is_mask_buffer(key)) continue;
    ZS_CHECK(file_names.emplace(key, name).second, "safetensors file '", path, "' holds both '",
             file_names[key], "' and '", name, "'; which one to load is ambiguous");
    if (param_of.count(key) == 0) unexpected.push_back(name);
  }
  for (Gpt2TensorRef& ref : expected) {
    auto found = file_names.find(ref.file_tensor);
    if (found == file_names.end()) {
      missing.push_back(ref.file_tensor);
      continue;
    }
    const SafetensorsTensorInfo& info = reader.info(found->second);
    if (info.shape != ref.file_shape) {
      problems.push_back(detail::concat(
          "'", found->second, "' is ", shape_str(info.shape), " but parameter '", ref.param, "' ",
          ref.transposed ? shape_str(ref.shape) + " " : std::string(), "needs ",
          shape_str(ref.file_shape), ref.transposed ? " (Conv1D [in, out])" : ""));
    } else if (!is_float_dtype(info.dtype)) {
      problems.push_back(detail::concat("'", found->second, "' is ", stored_dtype_name(info.dtype),
                                        ", not a float (F32, F16, BF16) weight"));
    }
    ref.file_tensor = found->second;
  }
  std::sort(missing.begin(), missing.end());
  if (!missing.empty() || !unexpected.empty() || !problems.empty()) {
    std::string message;
    if (!problems.empty()) {
      for (size_t i = 0; i < problems.size() && i < kMaxListed; ++i) {
        message += (message.empty() ? "" : "; ") + problems[i];
      }
      if (problems.size() > kMaxListed) {
        message += detail::concat(" and ", problems.size() - kMaxListed, " more shape mismatches");
      }
    }
    if (!missing.empty()) {
      message += detail::concat(message.empty() ? "" : "; ", "missing ", join(missing));
    }
    if (!unexpected.empty()) {
      message +=
          detail::concat(message.empty() ? "" : "; ", "tensors the model lacks ", join(unexpected));
    }
    ZS_THROW(InvalidArgument, "safetensors file '", path, "' does not fit a GPT-2 with ",
             models::describe(config), ": ", message, file_config_hint(path));
  }
  if (!lm_head.empty()) {
    // GPT-2 ties the head to the token embedding; a file whose head differs was trained untied
    // and loading only wte would silently change the model.
    const Gpt2TensorRef& wte = expected.front();  // the mapping starts with wte
    const SafetensorsTensorInfo& head = reader.info(lm_head);
    const SafetensorsTensorInfo& embedding = reader.info(wte.file_tensor);
    ZS_CHECK(head.shape == embedding.shape, "safetensors file '", path, "': lm_head.weight ",
             shape_str(head.shape), " does not match ", wte.file_tensor, " ",
             shape_str(embedding.shape), "; this model ties its head to the token embedding");
    bool equal = false;
    if (head.dtype == embedding.dtype) {
      equal = std::memcmp(reader.raw(lm_head), reader.raw(wte.file_tensor), head.nbytes()) == 0;
    } else {
      equal = reader.read_f32(lm_head) == reader.read_f32(wte.file_tensor);
    }
    ZS_CHECK(equal, "safetensors file '", path, "': lm_head.weight differs from ", wte.file_tensor,
             "; this model ties its LM head to the token embedding, so an "
             "untied head cannot be loaded — drop lm_head.weight from the file to use wte alone");
  }
  refs_ = by_param(std::move(expected));
}

void Gpt2WeightSource::fill(const std::string& name, const Shape& shape, float* dst) const {
  auto found = refs_.find(name);
  ZS_CHECK(found != refs_.end(), "GPT-2 import from '", path_, "': the model's parameter '", name,
           "' has no counterpart in GPT-2 weights; is the model a zeroshard Gpt with ",
           models::describe(config_), "?");
  const Gpt2TensorRef& ref = found->second;
  ZS_CHECK(shape == ref.shape, "GPT-2 import from '", path_, "': parameter '", name, "' is ",
           shape_str(shape), " but a GPT-2 with ", models::describe(config_), " has ",
           shape_str(ref.shape), "; build the model with the config the source was opened with");
  if (llmc_) {
    llmc_->read_f32(ref.file_tensor, ref.layer, dst, shape_numel(ref.shape));
    return;
  }
  if (!ref.transposed) {
    safetensors_->read_f32(ref.file_tensor, dst);
    return;
  }
  const std::vector<float> stored = safetensors_->read_f32(ref.file_tensor);
  transpose(stored.data(), ref.file_shape[0], ref.file_shape[1], dst);
}

void Gpt2WeightSource::load_into(models::Module& model) const {
  for (models::Parameter* parameter : model.parameters()) {
    const Tensor& tensor = parameter->tensor();
    if (tensor.dtype() == DType::kF32 && tensor.is_host_visible()) {
      fill(parameter->name(), parameter->shape(), tensor.data<float>());
    } else {
      std::vector<float> values(static_cast<size_t>(parameter->numel()));
      fill(parameter->name(), parameter->shape(), values.data());
      tensor.copy_from(values);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Exporter

Gpt2WeightExporter::~Gpt2WeightExporter() = default;

Gpt2WeightExporter::Gpt2WeightExporter(std::string path, const models::GptConfig& config,
                                       const Gpt2ExportOptions& options)
    : path_(std::move(path)), config_(config), options_(options) {
  ZS_CHECK(config.vocab_size > 0 && config.width > 0 && config.context > 0 && config.n_layer >= 0 &&
               config.n_head > 0 && config.width % config.n_head == 0,
           "GPT-2 export to '", path_, "': invalid model config (", models::describe(config), ")");
  if (options.format == WeightFormat::kLlmc) {
    const int64_t padded =
        options.padded_vocab > 0 ? options.padded_vocab : llmc_padded_vocab(config.vocab_size);
    ZS_CHECK(padded >= config.vocab_size, "GPT-2 export to '", path_, "': padded vocab ", padded,
             " is smaller than the vocab ", config.vocab_size);
    ZS_CHECK(options.dtype == StoredDType::kF32 || options.dtype == StoredDType::kBF16,
             "GPT-2 export to '", path_, "': llm.c checkpoints hold F32 or BF16, not ",
             stored_dtype_name(options.dtype), "; pick one of those or write safetensors");
    LlmcConfig llmc;
    llmc.max_seq_len = config.context;
    llmc.vocab_size = config.vocab_size;
    llmc.padded_vocab_size = padded;
    llmc.n_layer = config.n_layer;
    llmc.n_head = config.n_head;
    llmc.channels = config.width;
    llmc_ = std::make_unique<LlmcWriter>(path_, llmc, options.dtype);
    refs_ = by_param(gpt2_llmc_mapping(config, padded));
    return;
  }
  ZS_CHECK(is_float_dtype(options.dtype), "GPT-2 export to '", path_, "': safetensors weights ",
           "are written as F32, F16 or BF16, not ", stored_dtype_name(options.dtype));
  safetensors_ = std::make_unique<SafetensorsWriter>(path_);
  // "format": "pt" is what Hugging Face's loaders expect of a PyTorch-layout file.
  safetensors_->set_metadata("format", "pt");
  safetensors_->set_metadata(kHeadsMetadataKey, std::to_string(config.n_head));
  const std::vector<Gpt2TensorRef> refs = gpt2_hf_mapping(config);
  for (const Gpt2TensorRef& ref : refs) {
    safetensors_->declare(ref.file_tensor, ref.file_shape, options.dtype);
  }
  refs_ = by_param(refs);
}

void Gpt2WeightExporter::add(const std::string& name, const Shape& shape, const float* data) {
  auto found = refs_.find(name);
  ZS_CHECK(found != refs_.end(), "GPT-2 export to '", path_, "': parameter '", name,
           "' is not a parameter of a GPT-2 with ", models::describe(config_));
  const Gpt2TensorRef& ref = found->second;
  ZS_CHECK(shape == ref.shape, "GPT-2 export to '", path_, "': parameter '", name, "' is ",
           shape_str(shape), " but a GPT-2 with ", models::describe(config_), " has ",
           shape_str(ref.shape));
  ZS_CHECK(!added_[name], "GPT-2 export to '", path_, "': parameter '", name, "' added twice");
  if (llmc_) {
    if (ref.file_shape != ref.shape) {  // wte with padding rows: zero
      std::vector<float> padded(static_cast<size_t>(shape_numel(ref.file_shape)), 0.0f);
      std::copy(data, data + shape_numel(shape), padded.begin());
      llmc_->write(ref.file_tensor, ref.layer, padded.data());
    } else {
      llmc_->write(ref.file_tensor, ref.layer, data);
    }
  } else if (ref.transposed) {
    std::vector<float> stored(static_cast<size_t>(shape_numel(shape)));
    transpose(data, shape[0], shape[1], stored.data());
    safetensors_->write(ref.file_tensor, stored.data());
  } else {
    safetensors_->write(ref.file_tensor, data);
  }
  added_[name] = true;
}

void Gpt2WeightExporter::save(models::Module& model) {
  for (models::Parameter* parameter : model.parameters()) {
    const Tensor& tensor = parameter->tensor();
    if (tensor.dtype() == DType::kF32 && tensor.is_host_visible()) {
      add(parameter->name(), parameter->shape(), tensor.data<float>());
    } else {
      const std::vector<float> values = tensor.to_vector();
      add(parameter->name(), parameter->shape(), values.data());
    }
  }
  commit();
}

void Gpt2WeightExporter::commit() {
  std::vector<std::string> missing;
  for (const auto& item : refs_) {
    if (!added_[item.first]) missing.push_back(item.first);
  }
  std::sort(missing.begin(), missing.end());
  ZS_CHECK(missing.empty(), "GPT-2 export to '", path_, "': parameters ", join(missing),
           " were never added; add every parameter before commit()");
  if (llmc_) {
    llmc_->commit();
  } else {
    safetensors_->commit();
  }
}

}  // namespace zs::checkpoint
