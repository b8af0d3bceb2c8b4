// Every number zs-train takes is range-checked before the first step, and flags that conflict are
// refused (issue 28, findings 5 and 6): each input below was accepted with exit 0 before, and
// ignored, clamped or silently resolved one way. Each is now an InvalidArgument (exit 2) that
// names the flag, from parse_train_args or validate() (which the fuzz targets reach too).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/error.h"
#include "tests/support/error_text.h"
#include "train/cli.h"
#include "train/config.h"

namespace zs::train {
namespace {

using zs::testing::invalid_argument_message;

// zs-train's checks of `args` (with a data flag, so the built-in demo is not chosen): parsing,
// then validate() for the world the flags give.
void check(std::vector<const char*> args) {
  args.insert(args.begin(), "zs-train");
  args.push_back("--text");
  args.push_back("unused.txt");
  TrainConfig c;
  parse_train_args(static_cast<int>(args.size()), args.data(), c, nullptr, nullptr);
  validate(c, c.ranks);
}

struct Refused {
  std::vector<const char*> args;
  const char* says;
};

TEST(InputRanges, EveryNumberOutOfItsRangeIsRefusedNamingItsFlag) {
  const Refused cases[] = {
      // Model shape overrides: 0 and negatives were ignored, --layers 0 built no layers.
      {{"--width", "0"}, "--width must be >= 1, got 0"},
      {{"--heads", "0"}, "--heads must be >= 1, got 0"},
      {{"--context", "0"}, "--context must be >= 1, got 0"},
      {{"--vocab-size", "0"}, "--vocab-size must be >= 1, got 0"},
      {{"--layers", "-2"}, "--layers must be >= 1, got -2"},
      {{"--layers", "0"}, "--layers must be >= 1, got 0"},
      // Flags whose 0 means "chosen for you" when left out.
      {{"--seq-len", "0"}, "--seq-len must be >= 1, got 0"},
      {{"--seq-len", "-5"}, "--seq-len must be >= 1, got -5"},
      {{"--threads", "-3"}, "--threads must be >= 1, got -3"},
      // An unsigned seed took -1 as 2^64 - 1.
      {{"--seed", "-1"}, "must be an integer >= 0"},
      {{"--min-lr", "nan"}, "--min-lr must be a number >= 0, got nan"},
      {{"--temperature", "nan"}, "--temperature must be >= 0"},
      {{"--temperature", "-1"}, "--temperature must be >= 0 (0 = greedy), got -1"},
      {{"--sample", "-1"}, "--sample must be >= 0"},
      {{"--eval-interval", "-1"}, "--eval-interval must be >= 0"},
      {{"--eval-batches", "-1"}, "--eval-batches must be >= 0"},
      // A fault for a rank that does not exist never fired.
      {{"--ranks", "2", "--inject-fault", "5:1"},
       "--inject-fault names rank 5, but the ranks "
       "are 0 to 1"},
      // Clamped to INT64_MAX, it trained for ever.
      {{"--steps", "99999999999999999999"}, "--steps"},
      {{"--steps", "9223372036854775807"}, "--steps must be at most 1000000000000"},
      // A range message names its bound, not the largest double in full (finding 7).
      {{"--comm-timeout", "0"}, "--comm-timeout: must be > 0, got 0;"},
      {{"--max-reductions-in-flight", "-1"}, "--max-reductions-in-flight: must be >= 0, got -1"},
      // Conflicts.
      {{"--epochs", "1", "--steps", "2"}, "--epochs 1 and --steps 2 both set the run's length"},
      {{"--init-from", "w.safetensors", "--resume", "ck/step-000002"},
       "both give the run's starting weights"},
  };
  for (const Refused& r : cases) {
    std::string args;
    for (const char* a : r.args) args += std::string(a) + " ";
    const std::string message = invalid_argument_message([&] { check(r.args); });
    EXPECT_NE(message.find(r.says), std::string::npos) << args << ": " << message;
  }
}

TEST(InputRanges, TheValuesAtTheEdgesOfEachRangeAreTaken) {
  for (const std::vector<const char*>& args : std::vector<std::vector<const char*>>{
           {},
           {"--width", "8", "--heads", "1", "--layers", "1", "--context", "4", "--vocab-size", "2"},
           {"--seq-len", "1", "--threads", "1"},
           {"--seed", "0"},
           {"--seed", "18446744073709551615"},
           {"--min-lr", "0"},
           {"--temperature", "0", "--sample", "0"},
           {"--eval-interval", "0", "--eval-batches", "0"},
           {"--ranks", "2", "--inject-fault", "1:1"},
           {"--steps", "1000000000000"},
           {"--epochs", "2"},
           // The first job of a requeued chain: no checkpoint yet, so --init-from starts it.
           {"--init-from", "w.safetensors", "--resume", "auto", "--checkpoint-dir", "ck"},
       }) {
    std::string text;
    for (const char* a : args) text += std::string(a) + " ";
    EXPECT_NO_THROW(check(args)) << text;
  }
}

TEST(InputRanges, ADeepSpeedConfigWithFp16AndBf16BothOnIsRefused) {
  std::vector<std::string> notes;
  TrainConfig c;
  const std::string message = invalid_argument_message([&] {
    apply_deepspeed_json(R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})", "ds.json", c,
                         &notes);
  });
  EXPECT_NE(message.find("ds.json: fp16.enabled and bf16.enabled are both true"), std::string::npos)
      << message;
  // Either one alone, or one on and one off, is a precision.
  TrainConfig one;
  apply_deepspeed_json(R"({"fp16": {"enabled": false}, "bf16": {"enabled": true}})", "ds.json", one,
                       &notes);
  EXPECT_EQ(one.precision, DType::kBF16);
  EXPECT_NE(invalid_argument_message([&] {
              TrainConfig s;
              apply_deepspeed_json(R"({"seed": -1})", "ds.json", s, &notes);
            }).find("'seed' must be >= 0, got -1"),
            std::string::npos);
}

TEST(InputRanges, AModelConfigKeyBelowOneIsRefused) {
  models::GptConfig g;
  const std::string message =
      invalid_argument_message([&] { apply_model_config_json(R"({"n_layer": 0})", "m.json", g); });
  EXPECT_NE(message.find("'n_layer' must be >= 1, got 0"), std::string::npos) << message;
}

}  // namespace
}  // namespace zs::train
