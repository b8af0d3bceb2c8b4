// Tests of how the prefetch depth in bytes and the trace file reach the run: --prefetch-bytes
// (sizes such as 64MiB) and DeepSpeed's zero_optimization.stage3_prefetch_bucket_size (elements
// × the compute dtype's size; 0 = no prefetch; negative refused) into
// sharding::ShardingConfig::prefetch_bytes, and --trace into TrainConfig::trace.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/error.h"
#include "train/cli.h"
#include "train/config.h"

namespace zs::train {
namespace {

TEST(PrefetchBytesConfig, FlagTakesSizes) {
  const char* argv[] = {"zs-train", "--prefetch-bytes", "64MiB", "--trace", "run.json"};
  TrainConfig c;
  std::vector<std::string> notes;
  ASSERT_FALSE(parse_train_args(5, argv, c, &notes, nullptr));
  EXPECT_EQ(c.prefetch_bytes, size_t{64} << 20);
  EXPECT_EQ(c.trace, "run.json");
  EXPECT_EQ(translate(c, 0, 2).sharding.prefetch_bytes, size_t{64} << 20);
  EXPECT_EQ(translate(TrainConfig{}, 0, 2).sharding.prefetch_bytes, 0u);  // one unit ahead
}

TEST(PrefetchBytesConfig, DeepSpeedBucketSizeIsElements) {
  std::vector<std::string> notes;
  TrainConfig bf16;
  apply_deepspeed_json(
      R"({"bf16": {"enabled": true}, "zero_optimization": {"stage": 3,
          "stage3_prefetch_bucket_size": 1000}})",
      "ds.json", bf16, &notes);
  EXPECT_EQ(bf16.prefetch_bytes, 2000u);  // bf16: 2 bytes an element
  EXPECT_TRUE(bf16.prefetch);
  TrainConfig off;
  apply_deepspeed_json(R"({"zero_optimization": {"stage3_prefetch_bucket_size": 0}})", "ds.json",
                       off, &notes);
  EXPECT_FALSE(off.prefetch);
  TrainConfig negative;
  EXPECT_THROW(apply_deepspeed_json(R"({"zero_optimization": {"stage3_prefetch_bucket_size": -5}})",
                                    "ds.json", negative, &notes),
               InvalidArgument);
}

}  // namespace
}  // namespace zs::train
