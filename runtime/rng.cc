// Bulk fills over global element indices for the counter-based RNG (runtime/rng.h).
//
// Each fill walks the index range in blocks of kLanes elements. A block computes the Philox
// words of all its lanes in lane-major arrays (so the loops over lanes vectorize), then turns
// every lane into a value with the per-element functions of rng.h, and copies out the lanes that
// fall inside the range. Every element goes through exactly the same instructions whatever its
// position in the block, the length of the range or the thread that runs it: there is no scalar
// remainder loop whose rounding could differ from the vector body. That is what makes a slice
// equal the same slice of the whole, and the result independent of the OpenMP thread count.
#include "runtime/rng.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "runtime/error.h"

namespace zs {
namespace {

// Elements per block: a multiple of the 32-bit lane count of every SIMD width (4, 8, 16).
constexpr size_t kLanes = 16;

// Below this many elements the fill runs on the calling thread: an OpenMP region costs a few
// microseconds, more than generating a small bias or a shard of one.
constexpr size_t kParallelMinCount = size_t{1} << 14;

// Words [0, kWords) of the Philox blocks of elements first .. first + kLanes - 1, lane-major:
// words[w][lane]. Each lane is random_block() itself; `omp simd` has the compiler run the ten
// rounds of all lanes side by side in vector registers (vpmuludq on x86).
template <int kWords>
ZS_FORCE_INLINE void philox_lanes(const RngKey& key, uint64_t first,
                                  uint32_t (&words)[kWords][kLanes]) {
#pragma omp simd
  for (size_t lane = 0; lane < kLanes; ++lane) {
    const PhiloxBlock block = random_block(key, first + lane);
    for (int w = 0; w < kWords; ++w) words[w][lane] = block.word[w];
  }
}

// Runs emit(offset, lanes_in_range, words) for each block of [begin, begin + count), where
// offset is the block's first element relative to begin and words holds its Philox output.
template <int kWords, typename Emit>
void for_each_block(uint64_t begin, size_t count, const RngKey& key, const Emit& emit) {
  const int64_t num_blocks = static_cast<int64_t>((count + kLanes - 1) / kLanes);
#pragma omp parallel for schedule(static) if (count >= kParallelMinCount)
  for (int64_t block = 0; block < num_blocks; ++block) {
    const size_t offset = static_cast<size_t>(block) * kLanes;
    uint32_t words[kWords][kLanes];
    philox_lanes<kWords>(key, begin + offset, words);
    emit(offset, std::min(kLanes, count - offset), words);
  }
}

void check_range(const char* fill, const void* out, uint64_t begin, size_t count) {
  ZS_CHECK(out != nullptr || count == 0, fill, ": the output is null but count is ", count,
           "; pass a buffer of count elements");
  ZS_CHECK(count == 0 ||
               static_cast<uint64_t>(count - 1) <= std::numeric_limits<uint64_t>::max() - begin,
           fill, ": element indices [", begin, ", ", begin, " + ", count,
           ") run past 2^64; an element index is a flat index into one tensor and must fit in "
           "64 bits");
}

}  // namespace

void fill_random_bits(uint32_t* out, uint64_t begin, size_t count, const RngKey& key) {
  check_range("fill_random_bits", out, begin, count);
  for_each_block<1>(begin, count, key,
                    [out](size_t offset, size_t lanes, const uint32_t(&words)[1][kLanes]) {
                      std::memcpy(out + offset, words[0], lanes * sizeof(uint32_t));
                    });
}

void fill_uniform(float* out, uint64_t begin, size_t count, const RngKey& key, float low,
                  float high) {
  check_range("fill_uniform", out, begin, count);
  ZS_CHECK(std::isfinite(low) && std::isfinite(high) && low <= high,
           "fill_uniform: expected finite bounds with low <= high, found low = ", low,
           ", high = ", high);
  for_each_block<1>(begin, count, key,
                    [=](size_t offset, size_t lanes, const uint32_t(&words)[1][kLanes]) {
                      float values[kLanes];
                      for (size_t lane = 0; lane < kLanes; ++lane) {
                        values[lane] = low + (high - low) * uniform_from_bits(words[0][lane]);
                      }
                      std::memcpy(out + offset, values, lanes * sizeof(float));
                    });
}

void fill_normal(float* out, uint64_t begin, size_t count, const RngKey& key, float mean,
                 float stddev) {
  check_range("fill_normal", out, begin, count);
  ZS_CHECK(std::isfinite(mean) && std::isfinite(stddev) && stddev >= 0.0f,
           "fill_normal: expected a finite mean and a finite stddev >= 0, found mean = ", mean,
           ", stddev = ", stddev);
  for_each_block<2>(
      begin, count, key, [=](size_t offset, size_t lanes, const uint32_t(&words)[2][kLanes]) {
        float values[kLanes];
        for (size_t lane = 0; lane < kLanes; ++lane) {
          values[lane] = mean + stddev * normal_from_bits(words[0][lane], words[1][lane]);
        }
        std::memcpy(out + offset, values, lanes * sizeof(float));
      });
}

void fill_bernoulli_mask(uint8_t* keep, uint64_t begin, size_t count, const RngKey& key,
                         float keep_prob) {
  check_range("fill_bernoulli_mask", keep, begin, count);
  ZS_CHECK(keep_prob >= 0.0f && keep_prob <= 1.0f,
           "fill_bernoulli_mask: expected keep_prob in [0, 1], found ", keep_prob);
  for_each_block<1>(begin, count, key,
                    [=](size_t offset, size_t lanes, const uint32_t(&words)[1][kLanes]) {
                      uint8_t kept[kLanes];
                      for (size_t lane = 0; lane < kLanes; ++lane) {
                        kept[lane] = uniform_from_bits(words[0][lane]) < keep_prob ? 1 : 0;
                      }
                      std::memcpy(keep + offset, kept, lanes);
                    });
}

void apply_dropout(float* values, uint64_t begin, size_t count, const RngKey& key,
                   float keep_prob) {
  check_range("apply_dropout", values, begin, count);
  ZS_CHECK(keep_prob > 0.0f && keep_prob <= 1.0f,
           "apply_dropout: expected keep_prob in (0, 1], found ", keep_prob,
           "; a layer that drops everything should skip its input instead");
  const float scale = 1.0f / keep_prob;
  for_each_block<1>(begin, count, key,
                    [=](size_t offset, size_t lanes, const uint32_t(&words)[1][kLanes]) {
                      float* block_values = values + offset;
                      for (size_t lane = 0; lane < lanes; ++lane) {
                        const bool kept = uniform_from_bits(words[0][lane]) < keep_prob;
                        block_values[lane] = kept ? block_values[lane] * scale : 0.0f;
                      }
                    });
}

}  // namespace zs
