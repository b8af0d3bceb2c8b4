// GPT presets: the shapes of the named models, the closed-form parameter count against the
// parameters a constructed Gpt declares, and that constructing even a large preset allocates no
// tensor memory (it only declares parameters).
#include "models/gpt_presets.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <string>

#include "runtime/error.h"

namespace zs::models {
namespace {

TEST(GptPresets, ClosedFormCountEqualsTheDeclaredParameters) {
  for (const char* name : {"tiny", "124M", "350M", "774M", "1.5B", "2.7B"}) {
    const GptConfig config = gpt_preset(name);
    Gpt model(config);
    EXPECT_EQ(gpt_parameter_count(config), model.num_parameters()) << name;
  }
  // An odd custom shape too, without blocks and with several.
  GptConfig odd;
  odd.vocab_size = 37;
  odd.context = 9;
  odd.width = 12;
  odd.n_head = 3;
  for (int64_t layers : {0, 1, 5}) {
    odd.n_layer = layers;
    Gpt model(odd);
    EXPECT_EQ(gpt_parameter_count(odd), model.num_parameters()) << layers << " layers";
  }
}

TEST(GptPresets, KnownSizes) {
  // GPT-2 small with a tied head: the published 124,439,808.
  EXPECT_EQ(gpt_parameter_count(gpt_preset("gpt2")), 124439808);
  EXPECT_EQ(gpt_parameter_count(gpt_preset("gpt2-medium")), 354823168);
  EXPECT_EQ(gpt_parameter_count(gpt_preset("gpt2-large")), 774030080);
  EXPECT_EQ(gpt_parameter_count(gpt_preset("gpt2-xl")), 1557611200);
  // The GPT-3-shaped entries land near their names.
  EXPECT_NEAR(static_cast<double>(gpt_parameter_count(gpt_preset("2.7B"))), 2.7e9, 0.15e9);
  EXPECT_NEAR(static_cast<double>(gpt_parameter_count(gpt_preset("6.7B"))), 6.7e9, 0.3e9);
  EXPECT_NEAR(static_cast<double>(gpt_parameter_count(gpt_preset("13B"))), 13e9, 0.5e9);
  const GptConfig xl = gpt_preset("1.5B");
  EXPECT_EQ(xl.n_layer, 48);
  EXPECT_EQ(xl.width, 1600);
  EXPECT_EQ(xl.n_head, 25);
  EXPECT_EQ(xl.vocab_size, 50257);
  EXPECT_EQ(xl.context, 1024);
  const GptConfig tiny = gpt_preset("tiny");
  EXPECT_EQ(tiny.vocab_size, 256);
  EXPECT_LT(gpt_parameter_count(tiny), 200000);
}

TEST(GptPresets, AliasesAndOrder) {
  EXPECT_EQ(gpt_parameter_count(gpt_preset("gpt2")), gpt_parameter_count(gpt_preset("124M")));
  EXPECT_EQ(gpt_parameter_count(gpt_preset("gpt2-medium")),
            gpt_parameter_count(gpt_preset("350M")));
  EXPECT_EQ(gpt_parameter_count(gpt_preset("gpt2-large")), gpt_parameter_count(gpt_preset("774M")));
  EXPECT_EQ(gpt_parameter_count(gpt_preset("gpt2-xl")), gpt_parameter_count(gpt_preset("1.5B")));
  const std::vector<std::string> names = gpt_preset_names();
  ASSERT_EQ(names.size(), 8u);
  EXPECT_EQ(names.front(), "tiny");
  for (size_t i = 1; i < names.size(); ++i) {
    EXPECT_LT(gpt_parameter_count(gpt_preset(names[i - 1])),
              gpt_parameter_count(gpt_preset(names[i])))
        << names[i];
  }
  EXPECT_EQ(gpt_preset_aliases().size(), names.size() + 4);
}

TEST(GptPresets, EveryPresetIsAValidConfig) {
  for (const std::string& name : gpt_preset_aliases()) {
    const GptConfig config = gpt_preset(name);
    EXPECT_EQ(config.width % config.n_head, 0) << name;
    EXPECT_NO_THROW(Gpt{config}) << name;  // the constructor validates the shape
  }
}

TEST(GptPresets, UnknownNameListsTheKnownOnes) {
  try {
    gpt_preset("gpt3");
    FAIL() << "no error";
  } catch (const InvalidArgument& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("'gpt3'"), std::string::npos) << message;
    for (const std::string& name : gpt_preset_aliases()) {
      EXPECT_NE(message.find(name), std::string::npos) << message;
    }
  }
}

TEST(GptPresets, ConstructingALargeModelAllocatesNoTensorMemory) {
  // 13B parameters would be 52 GB in fp32; constructing declares them only.
  const size_t before = mallinfo2().uordblks;
  {
    Gpt model(gpt_preset("13B"));
    const size_t during = mallinfo2().uordblks;
    EXPECT_LT(during - before, size_t{4} << 20) << "heap grew by " << during - before << " bytes";
    for (Parameter* p : model.parameters()) EXPECT_FALSE(p->is_bound()) << p->name();
    EXPECT_EQ(model.num_parameters(), gpt_parameter_count(gpt_preset("13B")));
  }
}

}  // namespace
}  // namespace zs::models
