// Counter-based random numbers: Philox4x32-10, keyed so that element i of a tensor depends only
// on (seed, stream, substream, i).
//
// Why counter-based: a rank initializes exactly its shard of a parameter, and the values equal
// the same slice of an unsharded init bit for bit, at any world size and in any construction
// order; dropout regenerates its mask in backward from the same key instead of storing it. There
// is no generator state to carry, split or checkpoint: a value is a pure function of its key and
// its global element index.
//
// Layout. The Philox key is the 64-bit seed (low word first). The 128-bit counter of element i
// is (low 32 bits of i, high 32 bits of i, stream, substream): `stream` names the tensor (see
// stream_id(), a hash of the parameter name, so ids do not depend on world size or construction
// order) and `substream` separates uses of one tensor, e.g. a dropout site's step. Every element
// gets its own counter and uses at most two of its four output words, so neighbours never share
// a Box-Muller pair and any slice can be generated alone.
//
// The per-element functions are ZS_HOST_DEVICE inline: the CPU loops in rng.cc and the CUDA
// kernels call the same code (STYLE.md, "One source of math"). Integer outputs (random_block,
// random_bits, dropout_keep) are identical on every device; float outputs go through logf/cosf,
// whose last bit may differ between glibc and the CUDA math library, and through a multiply-add
// the compiler may fuse. On one device and one build, the bulk fills equal the per-element
// functions evaluated at the same indices, whatever the slice and the number of OpenMP threads.
// (Not under -ffast-math: the bulk loops may then take vector logf/cosf. Slices still agree.)
//
// Everything here is a pure function of its arguments and safe to call from any thread. The
// bulk fills write only the caller's `out[0, count)`; the caller owns it.
#pragma once

#include <math.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "runtime/macros.h"

namespace zs {

// 128 bits of Philox: a counter going in, four random words coming out.
struct PhiloxBlock {
  uint32_t word[4];
};

struct PhiloxKey {
  uint32_t word[2];
};

// What selects a random sequence; element i of the sequence is a function of (key, i) only.
struct RngKey {
  uint64_t seed = 0;       // the run's seed (the Philox key)
  uint32_t stream = 0;     // the tensor: stream_id(parameter or dropout-site name)
  uint32_t substream = 0;  // a use of that tensor: 0 for init; e.g. the step for dropout
};

namespace detail {

// Philox4x32 constants from Salmon et al., "Parallel Random Numbers: As Easy as 1, 2, 3" (SC11).
constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;  // sqrt(3) - 1

constexpr uint64_t kFnv64Offset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnv64Prime = 0x100000001b3ull;

}  // namespace detail

// One Philox4x32 round: two 32x32->64 multiplies, then a Feistel-like mix with the round key.
ZS_HOST_DEVICE ZS_FORCE_INLINE PhiloxBlock philox4x32_round(PhiloxBlock ctr, PhiloxKey key) {
  const uint64_t product0 = static_cast<uint64_t>(detail::kPhiloxM0) * ctr.word[0];
  const uint64_t product1 = static_cast<uint64_t>(detail::kPhiloxM1) * ctr.word[2];
  PhiloxBlock out;
  out.word[0] = static_cast<uint32_t>(product1 >> 32) ^ ctr.word[1] ^ key.word[0];
  out.word[1] = static_cast<uint32_t>(product1);
  out.word[2] = static_cast<uint32_t>(product0 >> 32) ^ ctr.word[3] ^ key.word[1];
  out.word[3] = static_cast<uint32_t>(product0);
  return out;
}

// Philox4x32 with kRounds rounds (Random123's philox4x32_R); the key is bumped by the Weyl
// constants between rounds. kRounds = 10 is the generator used everywhere in zeroshard.
template <int kRounds>
ZS_HOST_DEVICE inline PhiloxBlock philox4x32_r(PhiloxBlock ctr, PhiloxKey key) {
  for (int round = 0; round < kRounds; ++round) {
    if (round > 0) {
      key.word[0] += detail::kPhiloxW0;
      key.word[1] += detail::kPhiloxW1;
    }
    ctr = philox4x32_round(ctr, key);
  }
  return ctr;
}

ZS_HOST_DEVICE inline PhiloxBlock philox4x32_10(PhiloxBlock ctr, PhiloxKey key) {
  return philox4x32_r<10>(ctr, key);
}

ZS_HOST_DEVICE inline PhiloxKey philox_key(const RngKey& key) {
  return PhiloxKey{{static_cast<uint32_t>(key.seed), static_cast<uint32_t>(key.seed >> 32)}};
}

ZS_HOST_DEVICE inline PhiloxBlock philox_counter(const RngKey& key, uint64_t index) {
  return PhiloxBlock{{static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), key.stream,
                      key.substream}};
}

// The four random words of element `index`.
ZS_HOST_DEVICE inline PhiloxBlock random_block(const RngKey& key, uint64_t index) {
  return philox4x32_10(philox_counter(key, index), philox_key(key));
}

// 32 random bits for element `index` (word 0 of its block).
ZS_HOST_DEVICE inline uint32_t random_bits(const RngKey& key, uint64_t index) {
  return random_block(key, index).word[0];
}

// The top 24 bits as k * 2^-24, k in [0, 2^24): exactly representable, uniform on [0, 1).
ZS_HOST_DEVICE inline float uniform_from_bits(uint32_t bits) {
  return static_cast<float>(static_cast<int32_t>(bits >> 8)) * 0x1p-24f;
}

// Box-Muller (cosine branch) from two words. u1 = (bits0 >> 1) * 2^-31 + 2^-32 lies in
// [2^-32, 1], never 0, so the radius is finite: at most sqrt(64 ln 2) ~ 6.66, which truncates
// the tail at a probability of ~3e-11. u1 rounds to exactly 1 at the top, where logf gives 0 and
// the result is +-0, never NaN.
ZS_HOST_DEVICE inline float normal_from_bits(uint32_t bits0, uint32_t bits1) {
  const float u1 = static_cast<float>(static_cast<int32_t>(bits0 >> 1)) * 0x1p-31f + 0x1p-32f;
  const float radius = sqrtf(-2.0f * logf(u1));
  const float angle = 6.28318530717958647692f * uniform_from_bits(bits1);
  return radius * cosf(angle);
}

// Uniform on [0, 1) with 24 random bits.
ZS_HOST_DEVICE inline float uniform(const RngKey& key, uint64_t index) {
  return uniform_from_bits(random_bits(key, index));
}

// low + (high - low) * u. In [low, high]: rounding of the product can reach `high` itself.
ZS_HOST_DEVICE inline float uniform(const RngKey& key, uint64_t index, float low, float high) {
  return low + (high - low) * uniform(key, index);
}

// Standard normal from words 0 and 1 of the element's own block.
ZS_HOST_DEVICE inline float normal(const RngKey& key, uint64_t index) {
  const PhiloxBlock block = random_block(key, index);
  return normal_from_bits(block.word[0], block.word[1]);
}

ZS_HOST_DEVICE inline float normal(const RngKey& key, uint64_t index, float mean, float stddev) {
  return mean + stddev * normal(key, index);
}

// Whether dropout keeps element `index`: uniform(key, index) < keep_prob, so keep_prob = 1 keeps
// everything and 0 drops everything. Forward and backward call it with the same key.
ZS_HOST_DEVICE inline bool dropout_keep(const RngKey& key, uint64_t index, float keep_prob) {
  return uniform(key, index) < keep_prob;
}

// FNV-1a, 64 bits, over the bytes of `text`.
constexpr uint64_t fnv1a_64(std::string_view text) {
  uint64_t hash = detail::kFnv64Offset;
  for (char c : text) {
    hash ^= static_cast<uint8_t>(c);
    hash *= detail::kFnv64Prime;
  }
  return hash;
}

// The stream id of a named tensor ("blocks.3.attn.qkv.weight"): FNV-1a 64 of the name, folded
// to the 32 bits of the counter word by xor of its halves. It depends on the name alone, so
// every rank and every world size agrees on it. Two names share an id with probability 2^-32
// per pair (about 1e-4 across 1000 parameters); a model should check its ids are distinct.
constexpr uint32_t stream_id(std::string_view name) {
  const uint64_t hash = fnv1a_64(name);
  return static_cast<uint32_t>(hash ^ (hash >> 32));
}

constexpr RngKey rng_key(uint64_t seed, std::string_view name, uint32_t substream = 0) {
  return RngKey{seed, stream_id(name), substream};
}

// Bulk fills over global element indices [begin, begin + count): out[j] is element begin + j,
// equal to the per-element function above at that index. Parallel (OpenMP, static schedule)
// above a few thousand elements; the result does not depend on the number of threads. All
// throw InvalidArgument if out is null with count > 0 or if the index range wraps past 2^64.

// out[j] = random_bits(key, begin + j).
void fill_random_bits(uint32_t* out, uint64_t begin, size_t count, const RngKey& key);

// out[j] = uniform(key, begin + j, low, high). Requires low <= high, both finite.
void fill_uniform(float* out, uint64_t begin, size_t count, const RngKey& key, float low,
                  float high);

// out[j] = normal(key, begin + j, mean, stddev). Requires stddev >= 0, both finite.
void fill_normal(float* out, uint64_t begin, size_t count, const RngKey& key, float mean,
                 float stddev);

// keep[j] = dropout_keep(key, begin + j, keep_prob) as 0 or 1. Requires keep_prob in [0, 1].
void fill_bernoulli_mask(uint8_t* keep, uint64_t begin, size_t count, const RngKey& key,
                         float keep_prob);

// Inverted dropout in place, without a stored mask: values[j] *= (1 / keep_prob) where
// dropout_keep(key, begin + j, keep_prob), else 0. The forward activations and the backward
// gradients go through the same call with the same key. Requires keep_prob in (0, 1].
void apply_dropout(float* values, uint64_t begin, size_t count, const RngKey& key, float keep_prob);

}  // namespace zs
