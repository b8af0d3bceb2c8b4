// The preset table and the closed-form parameter count.
#include "models/gpt_presets.h"

#include "runtime/error.h"

namespace zs::models {
namespace {

struct Preset {
  const char* name;
  const char* alias;  // "" if none
  GptConfig config;
};

GptConfig shape(int64_t vocab, int64_t context, int64_t width, int64_t n_head, int64_t n_layer) {
  GptConfig config;
  config.vocab_size = vocab;
  config.context = context;
  config.width = width;
  config.n_head = n_head;
  config.n_layer = n_layer;
  return config;
}

// GPT-2's vocabulary and context; the GPT-3-shaped entries keep them (the GPT-3 paper's models
// use a 2048 context; 1024 keeps them comparable with the GPT-2 family, and the position table
// is a negligible part of their size).
constexpr int64_t kGpt2Vocab = 50257;
constexpr int64_t kGpt2Context = 1024;

const std::vector<Preset>& presets() {
  static const std::vector<Preset> table = {
      // Byte vocabulary, small enough for every test to build and train.
      {"tiny", "", shape(256, 64, 64, 4, 2)},
      {"124M", "gpt2", shape(kGpt2Vocab, kGpt2Context, 768, 12, 12)},
      {"350M", "gpt2-medium", shape(kGpt2Vocab, kGpt2Context, 1024, 16, 24)},
      {"774M", "gpt2-large", shape(kGpt2Vocab, kGpt2Context, 1280, 20, 36)},
      {"1.5B", "gpt2-xl", shape(kGpt2Vocab, kGpt2Context, 1600, 25, 48)},
      {"2.7B", "", shape(kGpt2Vocab, kGpt2Context, 2560, 32, 32)},
      {"6.7B", "", shape(kGpt2Vocab, kGpt2Context, 4096, 32, 32)},
      {"13B", "", shape(kGpt2Vocab, kGpt2Context, 5120, 40, 40)},
  };
  return table;
}

}  // namespace

GptConfig gpt_preset(const std::string& name) {
  for (const Preset& preset : presets()) {
    if (name == preset.name || (*preset.alias != '\0' && name == preset.alias)) {
      return preset.config;
    }
  }
  std::string known;
  for (const std::string& alias : gpt_preset_aliases())
    known += (known.empty() ? "" : ", ") + alias;
  ZS_THROW(InvalidArgument, "unknown GPT preset '", name, "'; known presets: ", known);
}

std::vector<std::string> gpt_preset_names() {
  std::vector<std::string> names;
  for (const Preset& preset : presets()) names.emplace_back(preset.name);
  return names;
}

std::vector<std::string> gpt_preset_aliases() {
  std::vector<std::string> names;
  for (const Preset& preset : presets()) {
    names.emplace_back(preset.name);
    if (*preset.alias != '\0') names.emplace_back(preset.alias);
  }
  return names;
}

int64_t gpt_parameter_count(const GptConfig& config) {
  const int64_t c = config.width;
  // Per block: ln1 and ln2 (2C each), qkv (3C² + 3C), attention proj (C² + C), MLP fc (4C² + 4C)
  // and proj (4C² + C).
  const int64_t per_block = 12 * c * c + 13 * c;
  return config.vocab_size * c + config.context * c + config.n_layer * per_block + 2 * c;
}

}  // namespace zs::models
