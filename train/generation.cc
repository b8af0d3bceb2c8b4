// TextGeneration and pick_token (train/generation.h).
#include "train/generation.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/autograd.h"
#include "runtime/logging.h"

namespace zs::train {

int32_t pick_token(const float* logits, int64_t vocab, float temperature, const RngKey& key) {
  if (temperature <= 0)
    return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  for (int64_t v = 0; v < vocab; ++v) order[v] = static_cast<int32_t>(v);
  const size_t k = std::min<size_t>(40, order.size());
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  std::vector<double> weights(k);
  double total = 0;
  for (size_t i = 0; i < k; ++i) {
    weights[i] = std::exp((logits[order[i]] - logits[order[0]]) / temperature);
    total += weights[i];
  }
  double u = uniform_from_bits(random_bits(key, 0)) * total;
  for (size_t i = 0; i < k; ++i) {
    u -= weights[i];
    if (u <= 0) return order[i];
  }
  return order[k - 1];
}

void TextGeneration::on_end(int64_t /*steps*/) {
  const TrainConfig& c = rank_.config;
  if (c.sample_tokens <= 0 || !rank_.task.gpt()) return;
  NoGradScope no_grad;
  MemoryCategoryScope activations(MemoryCategory::kActivations);
  std::vector<int32_t> tokens;
  for (unsigned char ch : c.sample_prompt) tokens.push_back(ch);
  if (tokens.empty()) tokens.push_back('\n');
  models::Gpt& gpt = *rank_.task.gpt();
  const int64_t vocab = gpt.config().vocab_size;
  const int64_t prompt = static_cast<int64_t>(tokens.size());
  for (int64_t i = 0; i < c.sample_tokens; ++i) {
    const int64_t len = std::min<int64_t>(static_cast<int64_t>(tokens.size()), rank_.seq);
    Tensor window = Tensor::empty({1, len}, DType::kI32, rank_.host, "sample window");
    std::copy(tokens.end() - len, tokens.end(), window.data<int32_t>());
    const std::vector<float> logits = gpt(rank_.to_compute(window)).to_vector();
    const float* row = logits.data() + (len - 1) * vocab;
    tokens.push_back(pick_token(row, vocab, c.sample_temperature,
                                rng_key(c.seed, "sample", static_cast<uint32_t>(i))));
  }
  const bool bytes = byte_level(rank_.data);
  std::string text;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (bytes) {
      text += static_cast<char>(tokens[i]);
    } else if (static_cast<int64_t>(i) >= prompt) {
      text += (text.empty() ? "" : " ") + std::to_string(tokens[i]);
    }
  }
  if (!rank_.lead) return;
  rank_.result.sample = text;
  const std::string how = c.sample_temperature > 0
                              ? fmt::format("top-40 at temperature {}", c.sample_temperature)
                              : std::string("greedy");
  ZS_LOG_INFO("sample ({} tokens, {}{}):\n{}", c.sample_tokens, how, bytes ? "" : ", token ids",
              text);
}

}  // namespace zs::train
