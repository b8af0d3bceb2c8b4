// Named GPT shapes: "tiny" for tests, the GPT-2 family (124M … 1.5B) and larger models in the
// shape of the GPT-3 paper's table (2.7B, 6.7B, 13B), plus the closed-form parameter count of a
// GptConfig — what zs-mem and the engine use to size a model without building it.
//
// The count equals the sum of numel over a constructed Gpt's parameters (tested): token and
// position embeddings, 12C² + 13C per block (qkv, attention projection, MLP with hidden 4C, all
// with biases, two LayerNorms), a final LayerNorm, and no separate LM head (it is tied to wte).
// Note that constructing a Gpt only declares parameters (shapes and init rules) and allocates no
// tensor memory, so even the 13B preset can be built to plan its units.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/gpt.h"

namespace zs::models {

// The config of a named preset. Aliases: "gpt2" = "124M", "gpt2-medium" = "350M",
// "gpt2-large" = "774M", "gpt2-xl" = "1.5B". Throws InvalidArgument listing the known names for
// an unknown one.
GptConfig gpt_preset(const std::string& name);

// The canonical names (one per shape, aliases left out), smallest model first.
std::vector<std::string> gpt_preset_names();
// Every accepted name, aliases included, in the order of gpt_preset_names().
std::vector<std::string> gpt_preset_aliases();

// Σ numel of a Gpt(config)'s parameters: V·C + T·C + L·(12C² + 13C) + 2C.
int64_t gpt_parameter_count(const GptConfig& config);

}  // namespace zs::models
