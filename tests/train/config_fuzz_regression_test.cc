// Regression tests for what fuzzing zs-train's configuration parsers found (fuzz/
// deepspeed_json_fuzz.cc, fuzz/model_config_json_fuzz.cc, docs/fuzzing.md), each with the
// crashing input: a bad config is an InvalidArgument that says what is wrong, never an escaping
// JSON exception (which ends zs-train with std::terminate instead of exit code 2).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "checkpoint/checkpoint_weights.h"
#include "models/gpt.h"
#include "runtime/error.h"
#include "tests/support/scratch.h"
#include "train/config.h"

namespace zs::train {
namespace {

using zs::testing::error_message;

// A number too large for a double: the JSON library throws out_of_range (406), not parse_error.
const std::string kNumberOverflow = "555555555E5555555";

TEST(ConfigFuzzRegression, ANumberTooLargeForADoubleIsInvalidDeepSpeedJson) {
  // The fuzzer's input, as found (the bytes after the number never get parsed).
  const std::string crash = kNumberOverflow + std::string("\x02\0\0\0\0\0\0\0\0\x30", 10) +
                            "\xda\xc6\xd3\xdf\"nnad_op}\nad_op}\n";
  for (const std::string& text :
       std::vector<std::string>{crash, kNumberOverflow, "{\"train_batch_size\": 1E999}"}) {
    TrainConfig config;
    std::vector<std::string> notes;
    const std::string message = error_message<InvalidArgument>(
        [&] { apply_deepspeed_json(text, "ds.json", config, &notes); });
    EXPECT_NE(message.find("deepspeed config ds.json is not valid JSON"), std::string::npos)
        << message;
    EXPECT_NE(message.find("number overflow"), std::string::npos) << message;
  }
}

// A whole float too large for int64 was converted anyway (undefined behaviour); whole floats
// that fit are still integers, as DeepSpeed configs write them (5e8).
TEST(ConfigFuzzRegression, AWholeFloatBeyondInt64IsNotAnInteger) {
  // The fuzzer's input, reduced to the key that crashed.
  const std::string crash = R"({"scheduler": {"type": "WarmupCosineLR", "params": {
      "warmup_num_steps": 20, "total_num_steps": 122222222222222222222222222222222222222222222200}}})";
  TrainConfig config;
  std::vector<std::string> notes;
  const std::string message = error_message<InvalidArgument>(
      [&] { apply_deepspeed_json(crash, "ds.json", config, &notes); });
  EXPECT_NE(message.find("'scheduler.params.total_num_steps' must be an integer within ±2^63"),
            std::string::npos)
      << message;
  apply_deepspeed_json(R"({"train_micro_batch_size_per_gpu": 4.0})", "ds.json", config, &notes);
  EXPECT_EQ(config.micro_batch, 4);
}

TEST(ConfigFuzzRegression, ANumberTooLargeForADoubleIsInvalidModelConfigJson) {
  models::GptConfig shape;
  const std::string message = error_message<InvalidArgument>(
      [&] { apply_model_config_json("{\"width\": 1E999}", "model.json", shape); });
  EXPECT_NE(message.find("--model-config 'model.json' is not valid JSON"), std::string::npos)
      << message;
}

// Issue 28: 100,000 nested arrays crashed zs-train with SIGSEGV (the JSON library's recursion
// while the message quoting the value was built), and 30,000 under "fp16" printed a 60 KB message
// of brackets. Nesting is bounded while the text is parsed, and a quoted value is cut.
std::string nested(const std::string& key, int depth) {
  std::string inner =
      std::string(static_cast<size_t>(depth), '[') + std::string(static_cast<size_t>(depth), ']');
  return key.empty() ? inner : "{\"" + key + "\": " + inner + "}";
}

TEST(ConfigFuzzRegression, DeeplyNestedJsonIsRefusedWithAShortMessage) {
  for (const std::string& text :
       {nested("", 100000), nested("fp16", 30000), nested("zero_optimization", 65)}) {
    TrainConfig config;
    std::vector<std::string> notes;
    const std::string message = error_message<InvalidArgument>(
        [&] { apply_deepspeed_json(text, "ds.json", config, &notes); });
    EXPECT_NE(message.find("deepspeed config ds.json nests deeper than 64 levels"),
              std::string::npos)
        << message.substr(0, 300);
    EXPECT_LT(message.size(), 600u);
  }
  models::GptConfig shape;
  const std::string message = error_message<InvalidArgument>(
      [&] { apply_model_config_json(nested("width", 100000), "model.json", shape); });
  EXPECT_NE(message.find("--model-config 'model.json' nests deeper than 64 levels"),
            std::string::npos)
      << message.substr(0, 300);
  // 64 levels are still read (and refused for what they hold, not for their depth).
  TrainConfig config;
  std::vector<std::string> notes;
  const std::string at_limit = error_message<InvalidArgument>(
      [&] { apply_deepspeed_json(nested("fp16", 63), "ds.json", config, &notes); });
  EXPECT_NE(at_limit.find("'fp16' must be a JSON object"), std::string::npos) << at_limit;
}

TEST(ConfigFuzzRegression, AValueQuotedInAMessageIsCut) {
  std::string wide = "{\"fp16\": [";
  for (int i = 0; i < 100000; ++i) wide += i ? ",1" : "1";
  wide += "]}";
  TrainConfig config;
  std::vector<std::string> notes;
  const std::string message = error_message<InvalidArgument>(
      [&] { apply_deepspeed_json(wide, "ds.json", config, &notes); });
  EXPECT_NE(message.find("'fp16' must be a JSON object, got [1,1,1"), std::string::npos)
      << message.substr(0, 300);
  EXPECT_NE(message.find("… (200001 characters)"), std::string::npos) << message.substr(0, 400);
  EXPECT_LT(message.size(), 600u);
}

TEST(ConfigFuzzRegression, DeeplyNestedCheckpointMetadataIsCorrupt) {
  zs::testing::ScratchDir dir;
  zs::testing::write_text(dir.path("meta.json"), nested("format_version", 100000));
  const std::string message =
      error_message<CorruptCheckpoint>([&] { checkpoint::read_checkpoint_meta(dir.path("")); });
  EXPECT_NE(message.find("nests deeper than 64 levels"), std::string::npos)
      << message.substr(0, 300);
}

}  // namespace
}  // namespace zs::train
