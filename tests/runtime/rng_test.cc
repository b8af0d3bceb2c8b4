// Tests of the counter-based RNG (runtime/rng.h): Philox4x32 against the Random123 known
// answers, slices against the whole, thread-count independence, independence of streams,
// distribution statistics, dropout masks and name-derived stream ids.
//
// Statistical tolerances are about 5 standard errors of the estimate at the stated sample size.
// The inputs are fixed seeds, so the checks are deterministic, not flaky; the tolerances only
// say how far from theory a correct generator may land.
#include "runtime/rng.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/error.h"

namespace zs {
namespace {

struct PhiloxKnownAnswer {
  PhiloxBlock counter;
  PhiloxKey key;
  PhiloxBlock expected;
};

void expect_block_eq(const PhiloxBlock& expected, const PhiloxBlock& actual) {
  for (int w = 0; w < 4; ++w) {
    EXPECT_EQ(expected.word[w], actual.word[w]) << "word " << w;
  }
}

// Random123 tests/kat_vectors ("philox4x32 10" and "philox4x32 7" lines), as reproduced in
// DEShawResearch/Random123-Boost libs/random/test/test_philox.cpp. Columns: counter (4 words),
// key (2 words), expected output (4 words).
TEST(PhiloxTest, KnownAnswersTenRounds) {
  const PhiloxKnownAnswer answers[] = {
      {{{0x00000000, 0x00000000, 0x00000000, 0x00000000}},
       {{0x00000000, 0x00000000}},
       {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       {{0xffffffff, 0xffffffff}},
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},  // pi digits
       {{0xa4093822, 0x299f31d0}},
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const PhiloxKnownAnswer& answer : answers) {
    expect_block_eq(answer.expected, philox4x32_10(answer.counter, answer.key));
  }
}

TEST(PhiloxTest, KnownAnswersSevenRounds) {
  const PhiloxKnownAnswer answers[] = {
      {{{0x00000000, 0x00000000, 0x00000000, 0x00000000}},
       {{0x00000000, 0x00000000}},
       {{0x5f6fb709, 0x0d893f64, 0x4f121f81, 0x4f730a48}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       {{0xffffffff, 0xffffffff}},
       {{0x5207ddc2, 0x45165e59, 0x4d8ee751, 0x8c52f662}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       {{0xa4093822, 0x299f31d0}},
       {{0x4dfccaba, 0x190a87f0, 0xc47362ba, 0xb6b5242a}}},
  };
  for (const PhiloxKnownAnswer& answer : answers) {
    expect_block_eq(answer.expected, philox4x32_r<7>(answer.counter, answer.key));
  }
}

// The documented layout: key = seed (low word first), counter = (index lo, index hi, stream,
// substream).
TEST(RngTest, BlockIsPhiloxOfTheDocumentedCounter) {
  const RngKey key{0x0123456789abcdefull, 0xdeadbeefu, 7u};
  const uint64_t index = 0x0000000500000003ull;
  const PhiloxBlock expected =
      philox4x32_10(PhiloxBlock{{0x00000003u, 0x00000005u, 0xdeadbeefu, 7u}},
                    PhiloxKey{{0x89abcdefu, 0x01234567u}});
  expect_block_eq(expected, random_block(key, index));
  EXPECT_EQ(expected.word[0], random_bits(key, index));
}

TEST(RngTest, UniformAndNormalFromBitsAtTheEdges) {
  EXPECT_EQ(0.0f, uniform_from_bits(0u));
  EXPECT_EQ(1.0f - 0x1p-24f, uniform_from_bits(0xffffffffu));
  EXPECT_LT(uniform_from_bits(0xffffffffu), 1.0f);

  // bits0 = 0 is the pattern that would give u1 = 0 and an infinite radius without the offset;
  // here u1 = 2^-32, radius sqrt(64 ln 2) = 6.6604, and with angle 0 the value is the radius.
  const float max_radius = static_cast<float>(std::sqrt(64.0 * std::log(2.0)));
  EXPECT_NEAR(max_radius, normal_from_bits(0u, 0u), 1e-5f);
  const uint32_t edge_bits[] = {0u, 1u, 2u, 0x7fffffffu, 0x80000000u, 0xfffffffeu, 0xffffffffu};
  for (uint32_t bits0 : edge_bits) {
    for (uint32_t bits1 : edge_bits) {
      const float value = normal_from_bits(bits0, bits1);
      EXPECT_TRUE(std::isfinite(value)) << bits0 << " " << bits1;
      EXPECT_LE(std::fabs(value), max_radius + 1e-5f) << bits0 << " " << bits1;
    }
  }
  // The top pattern rounds u1 to exactly 1: radius 0, a zero, not a NaN.
  EXPECT_EQ(0.0f, normal_from_bits(0xffffffffu, 0u));
}

// Bulk fills equal the per-element functions, including across the 2^32 index boundary where
// the high counter word starts to count.
TEST(RngTest, BulkFillsEqualPerElementFunctions) {
  const RngKey key = rng_key(1234, "blocks.0.mlp.fc.weight");
  const uint64_t begins[] = {0, 3, (uint64_t{1} << 32) - 37};
  const size_t count = 1001;
  for (uint64_t begin : begins) {
    std::vector<uint32_t> bits(count);
    std::vector<float> uniforms(count), normals(count);
    std::vector<uint8_t> keep(count);
    fill_random_bits(bits.data(), begin, count, key);
    fill_uniform(uniforms.data(), begin, count, key, 0.0f, 1.0f);
    fill_normal(normals.data(), begin, count, key, 0.0f, 1.0f);
    fill_bernoulli_mask(keep.data(), begin, count, key, 0.9f);
    for (size_t j = 0; j < count; ++j) {
      const uint64_t index = begin + j;
      ASSERT_EQ(random_bits(key, index), bits[j]) << index;
      ASSERT_EQ(uniform(key, index), uniforms[j]) << index;
      ASSERT_EQ(normal(key, index), normals[j]) << index;
      ASSERT_EQ(dropout_keep(key, index, 0.9f) ? 1 : 0, keep[j]) << index;
    }
  }
}

// What sharded init relies on: a rank's slice generated alone is bitwise the same slice of the
// whole tensor, at odd offsets and lengths that cut through the blocks of the bulk loop.
TEST(RngTest, SliceGeneratedAloneEqualsSliceOfWhole) {
  const RngKey key = rng_key(42, "blocks.3.attn.qkv.weight");
  const size_t numel = 10007;
  std::vector<float> whole_uniform(numel), whole_normal(numel);
  fill_uniform(whole_uniform.data(), 0, numel, key, -0.07f, 0.07f);
  fill_normal(whole_normal.data(), 0, numel, key, 0.25f, 0.02f);

  struct Slice {
    uint64_t begin;
    uint64_t end;
  };
  const Slice slices[] = {{0, 1}, {1, 4097}, {5000, 10007}, {17, 18}, {15, 33}, {9999, 10007}};
  for (const Slice& slice : slices) {
    const size_t count = slice.end - slice.begin;
    std::vector<float> part_uniform(count), part_normal(count);
    fill_uniform(part_uniform.data(), slice.begin, count, key, -0.07f, 0.07f);
    fill_normal(part_normal.data(), slice.begin, count, key, 0.25f, 0.02f);
    EXPECT_EQ(0, std::memcmp(part_uniform.data(), whole_uniform.data() + slice.begin,
                             count * sizeof(float)))
        << "uniform [" << slice.begin << ", " << slice.end << ")";
    EXPECT_EQ(0, std::memcmp(part_normal.data(), whole_normal.data() + slice.begin,
                             count * sizeof(float)))
        << "normal [" << slice.begin << ", " << slice.end << ")";
  }

  // The shards of a 3-way split concatenate to the whole.
  std::vector<float> sharded(numel);
  const size_t shard_numel = (numel + 2) / 3;
  for (size_t rank = 0; rank < 3; ++rank) {
    const size_t begin = rank * shard_numel;
    const size_t count = std::min(shard_numel, numel - begin);
    fill_normal(sharded.data() + begin, begin, count, key, 0.25f, 0.02f);
  }
  EXPECT_EQ(0, std::memcmp(sharded.data(), whole_normal.data(), numel * sizeof(float)));
}

// Sets the OpenMP thread count for a scope and restores it.
class OmpThreadsScope {
 public:
  explicit OmpThreadsScope(int num_threads) : previous_(omp_get_max_threads()) {
    omp_set_num_threads(num_threads);
  }
  ~OmpThreadsScope() { omp_set_num_threads(previous_); }
  OmpThreadsScope(const OmpThreadsScope&) = delete;
  OmpThreadsScope& operator=(const OmpThreadsScope&) = delete;

 private:
  int previous_;
};

TEST(RngTest, SameResultForAnyThreadCount) {
  const RngKey key = rng_key(7, "wte.weight");
  const size_t count = 100003;  // above the parallel threshold, not a multiple of the block
  const uint64_t begin = 11;
  std::vector<float> uniform_ref(count), normal_ref(count), dropout_ref(count, 1.5f);
  {
    OmpThreadsScope threads(1);
    fill_uniform(uniform_ref.data(), begin, count, key, -1.0f, 1.0f);
    fill_normal(normal_ref.data(), begin, count, key, 0.0f, 0.02f);
    apply_dropout(dropout_ref.data(), begin, count, key, 0.8f);
  }
  for (int num_threads : {2, 3}) {
    OmpThreadsScope threads(num_threads);
    std::vector<float> uniform_values(count), normal_values(count), dropout_values(count, 1.5f);
    fill_uniform(uniform_values.data(), begin, count, key, -1.0f, 1.0f);
    fill_normal(normal_values.data(), begin, count, key, 0.0f, 0.02f);
    apply_dropout(dropout_values.data(), begin, count, key, 0.8f);
    EXPECT_EQ(0, std::memcmp(uniform_ref.data(), uniform_values.data(), count * sizeof(float)))
        << num_threads << " threads";
    EXPECT_EQ(0, std::memcmp(normal_ref.data(), normal_values.data(), count * sizeof(float)))
        << num_threads << " threads";
    EXPECT_EQ(0, std::memcmp(dropout_ref.data(), dropout_values.data(), count * sizeof(float)))
        << num_threads << " threads";
  }
}

// Two keys that differ in one field give unrelated sequences: of 4096 32-bit words, chance
// agreement at the same index is expected 4096 / 2^32 ~ 1e-6 times.
TEST(RngTest, DifferentSeedsStreamsAndSubstreamsDiffer) {
  const RngKey base{1, stream_id("h.0.attn.c_attn.weight"), 0};
  RngKey other_seed = base;
  other_seed.seed = 2;
  RngKey other_stream = base;
  other_stream.stream = stream_id("h.0.attn.c_proj.weight");
  RngKey other_substream = base;
  other_substream.substream = 1;
  RngKey seed_high_word = base;
  seed_high_word.seed = base.seed | (uint64_t{1} << 32);

  const size_t count = 4096;
  std::vector<uint32_t> reference(count), values(count);
  fill_random_bits(reference.data(), 0, count, base);
  for (const RngKey& key : {other_seed, other_stream, other_substream, seed_high_word}) {
    fill_random_bits(values.data(), 0, count, key);
    size_t equal = 0;
    for (size_t j = 0; j < count; ++j) equal += values[j] == reference[j];
    EXPECT_EQ(0u, equal) << "seed " << key.seed << " stream " << key.stream << " substream "
                         << key.substream;
  }
  // Starting one element later shifts the sequence by one: a value depends on its global index,
  // not on its position in the call.
  fill_random_bits(values.data(), 1, count, base);
  size_t equal = 0;
  for (size_t j = 0; j + 1 < count; ++j) equal += values[j] == reference[j + 1];
  EXPECT_EQ(count - 1, equal);
}

// 2^20 samples. Uniform on [0, 1): mean 1/2 (standard error sqrt(1/12/n) = 2.8e-4), variance
// 1/12 (standard error sqrt((1/80 - 1/144)/n) = 7.3e-5).
TEST(RngTest, UniformStatistics) {
  const size_t n = size_t{1} << 20;
  std::vector<float> values(n);
  fill_uniform(values.data(), 0, n, rng_key(2024, "stats.uniform"), 0.0f, 1.0f);
  double sum = 0.0, sum_sq = 0.0;
  float min_value = 1.0f, max_value = 0.0f;
  for (float v : values) {
    sum += v;
    sum_sq += static_cast<double>(v) * v;
    min_value = std::min(min_value, v);
    max_value = std::max(max_value, v);
  }
  const double mean = sum / n;
  const double variance = sum_sq / n - mean * mean;
  EXPECT_NEAR(0.5, mean, 1.5e-3);
  EXPECT_NEAR(1.0 / 12.0, variance, 4e-4);
  EXPECT_GE(min_value, 0.0f);
  EXPECT_LT(max_value, 1.0f);

  // Each of 16 equal bins holds n/16 = 65536 samples; standard error sqrt(n p (1-p)) = 248.
  size_t bins[16] = {};
  for (float v : values) ++bins[static_cast<int>(v * 16.0f)];
  for (size_t bin : bins) EXPECT_NEAR(65536.0, static_cast<double>(bin), 1250.0);
}

// 2^20 samples. Standard normal: mean 0 (standard error 1e-3), standard deviation 1 (standard
// error 1/sqrt(2n) = 6.9e-4), P(|z| < 1) = 0.682689 (standard error 4.5e-4), neighbours
// uncorrelated (standard error 1e-3).
TEST(RngTest, NormalStatistics) {
  const size_t n = size_t{1} << 20;
  std::vector<float> values(n);
  fill_normal(values.data(), 0, n, rng_key(2024, "stats.normal"), 0.0f, 1.0f);
  double sum = 0.0, sum_sq = 0.0, lag_product = 0.0;
  size_t within_one = 0, non_finite = 0;
  for (size_t j = 0; j < n; ++j) {
    const double v = values[j];
    non_finite += !std::isfinite(values[j]);
    sum += v;
    sum_sq += v * v;
    within_one += std::fabs(v) < 1.0;
    if (j + 1 < n) lag_product += v * values[j + 1];
  }
  ASSERT_EQ(0u, non_finite);
  const double mean = sum / n;
  const double stddev = std::sqrt(sum_sq / n - mean * mean);
  EXPECT_NEAR(0.0, mean, 5e-3);
  EXPECT_NEAR(1.0, stddev, 3.5e-3);
  EXPECT_NEAR(0.682689, static_cast<double>(within_one) / n, 2.5e-3);
  EXPECT_NEAR(0.0, lag_product / (n - 1), 5e-3);

  // mean and stddev are applied after the draw: same key, scaled values.
  std::vector<float> scaled(1000);
  fill_normal(scaled.data(), 0, scaled.size(), rng_key(2024, "stats.normal"), 3.0f, 0.5f);
  for (size_t j = 0; j < scaled.size(); ++j) {
    EXPECT_NEAR(3.0f + 0.5f * values[j], scaled[j], 1e-6f);
  }
}

// Dropout keeps element i exactly when dropout_keep says so, scales kept values by 1/p, and
// keeps a fraction p of 2^20 elements (standard error sqrt(p (1-p) / n) = 3.9e-4 at p = 0.9).
TEST(RngTest, DropoutMaskIsRegeneratedFromTheKey) {
  const float keep_prob = 0.9f;
  const RngKey key = rng_key(99, "h.5.attn.dropout", /*substream=*/12345);
  const size_t n = size_t{1} << 20;
  const uint64_t begin = 3;
  std::vector<float> activations(n, 2.0f);
  apply_dropout(activations.data(), begin, n, key, keep_prob);
  std::vector<uint8_t> keep(n);
  fill_bernoulli_mask(keep.data(), begin, n, key, keep_prob);
  size_t kept = 0;
  for (size_t j = 0; j < n; ++j) {
    const bool keep_j = dropout_keep(key, begin + j, keep_prob);
    ASSERT_EQ(keep_j ? 1 : 0, keep[j]) << j;
    ASSERT_EQ(keep_j ? 2.0f * (1.0f / keep_prob) : 0.0f, activations[j]) << j;
    kept += keep_j;
  }
  EXPECT_NEAR(keep_prob, static_cast<double>(kept) / n, 2e-3);

  // The gradient pass with the same key zeroes the same elements.
  std::vector<float> gradients(n, 1.0f);
  apply_dropout(gradients.data(), begin, n, key, keep_prob);
  for (size_t j = 0; j < n; ++j) ASSERT_EQ(activations[j] == 0.0f, gradients[j] == 0.0f) << j;

  // keep_prob 1 keeps everything unscaled; 0 keeps nothing.
  std::vector<float> unchanged(1000, 2.0f);
  apply_dropout(unchanged.data(), 0, unchanged.size(), key, 1.0f);
  for (float v : unchanged) ASSERT_EQ(2.0f, v);
  std::vector<uint8_t> none(1000, 1);
  fill_bernoulli_mask(none.data(), 0, none.size(), key, 0.0f);
  for (uint8_t k : none) ASSERT_EQ(0, k);
}

// FNV-1a 64: the published vectors, and the closed form of a one-byte string,
// (offset_basis xor byte) * prime mod 2^64.
TEST(RngTest, StreamIdsFromNamesAreStable) {
  static_assert(fnv1a_64("") == 0xcbf29ce484222325ull, "FNV-1a 64 offset basis");
  EXPECT_EQ(0xaf63dc4c8601ec8cull, fnv1a_64("a"));
  EXPECT_EQ(0x85944171f73967e8ull, fnv1a_64("foobar"));
  for (int byte = 1; byte < 256; ++byte) {
    const char text[1] = {static_cast<char>(byte)};
    const uint64_t expected =
        (0xcbf29ce484222325ull ^ static_cast<uint64_t>(byte)) * 0x100000001b3ull;
    ASSERT_EQ(expected, fnv1a_64(std::string_view(text, 1))) << byte;
  }

  // A parameter's id is a pure function of its name: fixed forever, so a checkpoint-free
  // re-init at another world size reproduces the same weights.
  constexpr uint64_t kQkvHash = 0xdf90b5a587f88c61ull;
  EXPECT_EQ(kQkvHash, fnv1a_64("blocks.3.attn.qkv.weight"));
  EXPECT_EQ(static_cast<uint32_t>(kQkvHash ^ (kQkvHash >> 32)),
            stream_id("blocks.3.attn.qkv.weight"));
  EXPECT_EQ(0x586839c4u, stream_id("blocks.3.attn.qkv.weight"));
  EXPECT_NE(stream_id("blocks.3.attn.qkv.weight"), stream_id("blocks.3.attn.qkv.bias"));

  constexpr RngKey key = rng_key(5, "blocks.3.attn.qkv.weight", 9);
  EXPECT_EQ(5u, key.seed);
  EXPECT_EQ(0x586839c4u, key.stream);
  EXPECT_EQ(9u, key.substream);
}

TEST(RngTest, RejectsBadArguments) {
  const RngKey key = rng_key(1, "w");
  std::vector<float> values(4);
  std::vector<uint8_t> keep(4);
  EXPECT_THROW(fill_uniform(nullptr, 0, 4, key, 0.0f, 1.0f), InvalidArgument);
  EXPECT_NO_THROW(fill_uniform(nullptr, 0, 0, key, 0.0f, 1.0f));
  EXPECT_THROW(fill_uniform(values.data(), ~uint64_t{0} - 2, 4, key, 0.0f, 1.0f), InvalidArgument);
  EXPECT_NO_THROW(fill_uniform(values.data(), ~uint64_t{0} - 3, 4, key, 0.0f, 1.0f));
  EXPECT_THROW(fill_uniform(values.data(), 0, 4, key, 1.0f, 0.0f), InvalidArgument);
  EXPECT_THROW(fill_uniform(values.data(), 0, 4, key, 0.0f, NAN), InvalidArgument);
  EXPECT_THROW(fill_normal(values.data(), 0, 4, key, 0.0f, -1.0f), InvalidArgument);
  EXPECT_THROW(fill_normal(values.data(), 0, 4, key, INFINITY, 1.0f), InvalidArgument);
  EXPECT_THROW(fill_bernoulli_mask(keep.data(), 0, 4, key, 1.5f), InvalidArgument);
  EXPECT_THROW(apply_dropout(values.data(), 0, 4, key, 0.0f), InvalidArgument);
}

}  // namespace
}  // namespace zs
