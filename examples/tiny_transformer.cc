// The foundation's end-to-end check, run by the README's first command until zs-train exists:
// a 4-layer byte-level transformer learns an embedded English text on the CPU with a plain
// AdamW loop (the sharded optimizers of optim/ replace it), printing the loss as it falls, a
// sample generated from the trained model, and the memory table by category.
//
// Usage: zs-example-tiny-transformer [steps] [threads]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "models/transformer.h"
#include "ops/cpu/gemm.h"
#include "optim/adamw.h"
#include "optim/schedule.h"
#include "runtime/allocator.h"
#include "runtime/autograd.h"
#include "runtime/logging.h"
#include "runtime/memory_tracker.h"
#include "runtime/rng.h"

namespace {

// Written for this demo: plain sentences with repeated words and structure to learn.
const char kText[] =
    "The river runs past the mill and under the old stone bridge. In the morning the miller "
    "opens the doors, and the wheel turns with the water. The baker comes for flour, the "
    "farmer brings the grain, and the children watch the wheel go round and round. "
    "When the rain comes, the river rises and the wheel turns faster. When the sun comes, the "
    "river falls and the wheel turns slowly. The miller knows the river as a sailor knows the "
    "sea: by the sound of the water and the colour of the sky. "
    "Every evening the miller closes the doors, sweeps the floor, and counts the sacks of "
    "flour. Then he walks over the bridge to the village, where the lamps are lit and the "
    "bread is warm. The baker says good evening, the farmer says good evening, and the "
    "children say good night. The river runs on in the dark, past the mill and under the "
    "bridge, and in the morning the wheel turns again. ";

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 300;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 2;
  zs::ops::cpu::set_intra_op_threads(threads);
  zs::RankScope rank(0);

  zs::MemoryTracker tracker("rank 0 cpu");
  zs::CpuAllocator allocator(&tracker);
  zs::models::TransformerConfig config;
  config.vocab_size = 256;
  config.context = 64;
  config.width = 128;
  config.n_head = 4;
  config.n_layer = 4;
  config.seed = 42;
  zs::models::Transformer model(config, allocator);

  const std::string text(kText);
  const int64_t batch = 8, seq = config.context;
  ZS_LOG_INFO(
      "tiny transformer: {} parameters, {} layers, width {}, batch {}x{}, {} bytes of text, "
      "gemm {}, {} threads",
      model.num_parameters(), config.n_layer, config.width, batch, seq, text.size(),
      zs::ops::cpu::gemm_backend_name(), threads);

  zs::Tensor ids = zs::Tensor::empty({batch, seq}, zs::DType::kI32, allocator, "ids");
  zs::Tensor targets = zs::Tensor::empty({batch, seq}, zs::DType::kI32, allocator, "targets");
  std::vector<zs::Tensor> params;
  std::vector<bool> decay;
  for (const auto& p : model.parameters()) {
    params.push_back(p.tensor);
    decay.push_back(p.decay);
  }
  zs::optim::AdamWOptions options;
  options.beta2 = 0.95f;
  options.weight_decay = 0.01f;
  const float peak_lr = 3e-3f;
  zs::optim::AdamW optimizer(params, decay, options);
  const auto start = std::chrono::steady_clock::now();
  float first_loss = 0, last_loss = 0;
  for (int step = 0; step < steps; ++step) {
    // Random windows of the text: window b of step s starts at a counter-based random offset.
    const uint64_t span = text.size() - static_cast<uint64_t>(seq) - 1;
    for (int64_t b = 0; b < batch; ++b) {
      const uint64_t at = zs::random_bits(zs::rng_key(7, "batches", static_cast<uint32_t>(step)),
                                          static_cast<uint64_t>(b)) %
                          span;
      for (int64_t t = 0; t < seq; ++t) {
        ids.data<int32_t>()[b * seq + t] = static_cast<unsigned char>(text[at + t]);
        targets.data<int32_t>()[b * seq + t] = static_cast<unsigned char>(text[at + t + 1]);
      }
    }
    optimizer.zero_grad();
    zs::Tensor loss = model.loss(ids, targets);
    zs::backward(loss);
    optimizer.step(zs::optim::warmup_cosine_lr(step, 20, steps, peak_lr, 0.1f * peak_lr));
    last_loss = loss.item();
    if (step == 0) first_loss = last_loss;
    if (step % 25 == 0 || step == steps - 1) {
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      ZS_LOG_INFO("step {:4d}  loss {:.4f}  tokens/s {:.0f}", step, last_loss,
                  static_cast<double>((step + 1) * batch * seq) / secs);
    }
  }

  // Greedy continuation of a prompt, one token at a time over the last `context` bytes.
  std::string sample = "The miller ";
  {
    zs::NoGradScope no_grad;
    for (int i = 0; i < 120; ++i) {
      const int64_t len = std::min<int64_t>(static_cast<int64_t>(sample.size()), seq);
      zs::Tensor window = zs::Tensor::empty({1, len}, zs::DType::kI32, allocator, "prompt");
      for (int64_t t = 0; t < len; ++t) {
        window.data<int32_t>()[t] =
            static_cast<unsigned char>(sample[sample.size() - static_cast<size_t>(len) + t]);
      }
      std::vector<float> logits = model.forward(window).to_vector();
      const float* last = logits.data() + (len - 1) * config.vocab_size;
      sample += static_cast<char>(std::max_element(last, last + config.vocab_size) - last);
    }
  }
  ZS_LOG_INFO("sample: \"{}\"", sample);
  ZS_LOG_INFO("loss {:.4f} -> {:.4f} over {} steps", first_loss, last_loss, steps);
  std::printf("%s", tracker.breakdown().c_str());
  if (!(last_loss < 0.5f * first_loss)) {
    ZS_LOG_ERROR("the loss did not fall by half; the run is not learning");
    return 1;
  }
  return 0;
}
