// The Module API: names, declaration order, hooks, tied parameters, init as a pure function of
// (seed, name, index), unsharded materialization, and clear errors for bad declarations.
#include "models/module.h"

#include <gtest/gtest.h>

#include "models/gpt.h"
#include "models/layers.h"
#include "runtime/allocator.h"
#include "runtime/autograd.h"
#include "runtime/rng.h"

namespace zs::models {
namespace {

GptConfig tiny_config() {
  GptConfig config;
  config.vocab_size = 17;
  config.context = 9;
  config.width = 12;
  config.n_head = 3;
  config.n_layer = 2;
  return config;
}

TEST(Module, NamesFollowTheTree) {
  Gpt gpt(tiny_config());
  std::vector<std::string> names;
  for (Parameter* p : gpt.parameters()) names.push_back(p->name());
  ASSERT_EQ(names.size(), 2u + 2 * 12u + 2u);
  EXPECT_EQ(names[0], "wte");
  EXPECT_EQ(names[1], "wpe");
  EXPECT_EQ(names[2], "blocks.0.ln1.weight");
  EXPECT_EQ(names[4], "blocks.0.attn.qkv.weight");
  EXPECT_EQ(names[13], "blocks.0.mlp.proj.bias");
  EXPECT_EQ(names.back(), "ln_f.bias");
  EXPECT_EQ(gpt.blocks().children()[1]->name(), "blocks.1");
  EXPECT_EQ(gpt.blocks().children()[1]->type_name(), "Block");
  const int64_t c = 12, v = 17, t = 9;
  EXPECT_EQ(gpt.num_parameters(), v * c + t * c + 2 * (12 * c * c + 13 * c) + 2 * c);
  // Biases and norms are not decayed; matrices and embeddings are.
  for (Parameter* p : gpt.parameters()) {
    const bool vector_like = p->shape().size() == 1;
    EXPECT_EQ(p->decay(), !vector_like) << p->name();
  }
}

TEST(Module, InitIsAPureFunctionOfSeedNameAndIndex) {
  CpuAllocator allocator(nullptr);
  Gpt a(tiny_config()), b(tiny_config());
  materialize(a, allocator, 5);
  materialize(b, allocator, 5);
  Parameter& qkv = *a.parameters()[4];
  EXPECT_EQ(qkv.tensor().to_vector(), b.parameters()[4]->tensor().to_vector());
  const std::vector<float> whole = qkv.tensor().to_vector();
  // Any slice generated alone equals the same slice of the whole.
  std::vector<float> slice(37);
  qkv.init().fill(slice.data(), 100, slice.size(), 5, qkv.name());
  for (size_t j = 0; j < slice.size(); ++j) EXPECT_EQ(slice[j], whole[100 + j]);
  EXPECT_EQ(whole[3], normal(rng_key(5, "blocks.0.attn.qkv.weight"), 3, 0.0f, 0.02f));
  Gpt c(tiny_config());
  materialize(c, allocator, 6);
  EXPECT_NE(c.parameters()[4]->tensor().to_vector(), whole);
  EXPECT_EQ(a.parameters()[2]->tensor().to_vector(), std::vector<float>(12, 1.0f));  // ln1.weight
}

TEST(Module, HooksRunAroundForwardAndMayReplaceTheOutput) {
  CpuAllocator allocator(nullptr);
  Linear linear(3, 2);
  materialize(linear, allocator, 1);
  std::vector<std::string> events;
  linear.add_pre_hook([&](Module& m, const Tensor&) { events.push_back("pre " + m.type_name()); });
  linear.add_post_hook([&](Module&, const Tensor&, const Tensor& out) {
    events.push_back("post");
    return out.view({-1});
  });
  Tensor x = Tensor::zeros({4, 3}, DType::kF32, allocator, "x");
  Tensor y = linear(x);
  EXPECT_EQ(events, (std::vector<std::string>{"pre Linear", "post"}));
  EXPECT_EQ(y.shape(), (Shape{8}));
  current_tape().clear();
}

TEST(Module, TiedHeadGetsOneGradientFromBothUses) {
  CpuAllocator allocator(nullptr);
  Gpt gpt(tiny_config());
  materialize(gpt, allocator, 3);
  Tensor ids = Tensor::zeros({2, 5}, DType::kI32, allocator, "ids");
  Tensor targets = Tensor::zeros({2, 5}, DType::kI32, allocator, "targets");
  for (int i = 0; i < 10; ++i) {
    ids.data<int32_t>()[i] = i % 17;
    targets.data<int32_t>()[i] = (i * 7) % 17;
  }
  backward(gpt.loss(ids, targets));
  Parameter& wte = *gpt.parameters()[0];
  ASSERT_TRUE(wte.tensor().grad().defined());
  // Rows of tokens never fed as input still get gradient through the head.
  const std::vector<float> grad = wte.tensor().grad().to_vector();
  bool row16_nonzero = false;
  for (int j = 0; j < 12; ++j) row16_nonzero |= grad[16 * 12 + j] != 0.0f;
  EXPECT_TRUE(row16_nonzero);
}

class Twice : public Module {
 public:
  Twice() : Module("Twice") {
    declare("w", {2}, InitRule::zeros());
    declare("w", {3}, InitRule::zeros());
  }

 protected:
  Tensor forward(const Tensor& x) override { return x; }
};

TEST(Module, BadDeclarationsAndUnboundParametersAreClearErrors) {
  EXPECT_THROW(Twice(), InvalidArgument);
  GptConfig bad = tiny_config();
  bad.width = 13;
  EXPECT_THROW(Gpt{bad}, InvalidArgument);
  // Declared before the module it materializes, so it outlives the parameters it holds (found by
  // UBSan: the parameters were freed through the destroyed allocator).
  CpuAllocator allocator(nullptr);
  Linear linear(3, 2);
  Tensor x = Tensor::zeros({1, 3}, DType::kF32, allocator, "x");
  try {
    linear(x);
    FAIL() << "expected an error for an unmaterialized parameter";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("parameter '"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not materialized"), std::string::npos) << e.what();
  }
  materialize(linear, allocator, 1);
  EXPECT_THROW(linear.weight().bind(Tensor::zeros({3, 2}, DType::kF32, allocator, "w")),
               InvalidArgument);
}

}  // namespace
}  // namespace zs::models
