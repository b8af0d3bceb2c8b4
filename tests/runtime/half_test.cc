// Tests for runtime/half.h: fp16 and bf16 conversions, scalar and bulk.
//
// The scalar conversions are checked against a reference written here with double arithmetic
// (nearest representable value, ties to even, then the bit layout in closed form), which shares
// no code with half.h: exhaustively for the 65536 fp16 and bf16 patterns, systematically for
// every bf16 with the edge cases of the dropped bits, and on millions of random floats chosen to
// hit subnormal results, the overflow threshold and exact ties. The bulk functions must equal the
// scalar ones bit for bit, whatever instruction set the build selected, and must not write past n.
#include "runtime/half.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace zs {
namespace {

uint32_t bits_of(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float float_from_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

std::string hex(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%08x", value);
  return text;
}

// A binary format with 1 sign bit, 15 - mantissa_bits exponent bits and mantissa_bits stored
// mantissa bits, described by what the reference needs.
struct Format {
  const char* name;
  int mantissa_bits;        // stored bits: 10 for fp16, 7 for bf16
  int min_normal_exponent;  // -14 for fp16, -126 for bf16
  int max_exponent;         // 15 for fp16, 127 for bf16
};

constexpr Format kFp16{"fp16", 10, -14, 15};
constexpr Format kBf16{"bf16", 7, -126, 127};

uint16_t infinity_bits(const Format& format) {
  return static_cast<uint16_t>(((1u << (15 - format.mantissa_bits)) - 1u) << format.mantissa_bits);
}

double largest_finite(const Format& format) {
  return std::ldexp(2.0 - std::ldexp(1.0, -format.mantissa_bits), format.max_exponent);
}

// The value of a bit pattern, from the definition of the format. NaN patterns give NaN.
double reference_decode(uint16_t bits, const Format& format) {
  const int exponent_field = (bits & 0x7FFF) >> format.mantissa_bits;
  const int mantissa = bits & ((1 << format.mantissa_bits) - 1);
  const int max_field = (1 << (15 - format.mantissa_bits)) - 1;
  double magnitude;
  if (exponent_field == max_field) {
    magnitude = mantissa == 0 ? INFINITY : NAN;
  } else if (exponent_field == 0) {
    magnitude = std::ldexp(mantissa, format.min_normal_exponent - format.mantissa_bits);
  } else {
    magnitude = std::ldexp(1.0 + std::ldexp(mantissa, -format.mantissa_bits),
                           exponent_field - 1 + format.min_normal_exponent);
  }
  return (bits & 0x8000) ? -magnitude : magnitude;
}

// The bits of x rounded to the nearest value of the format, ties to even. Finite values that
// round beyond the largest finite value become infinity. NaN follows the documented rule: quiet,
// sign kept, top payload bits kept.
uint16_t reference_encode(float x, const Format& format) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const uint16_t inf = infinity_bits(format);
  if (std::isnan(x)) {
    const uint32_t payload = bits_of(x) & 0x7FFFFF;
    const uint16_t quiet = static_cast<uint16_t>(1u << (format.mantissa_bits - 1));
    return sign | inf | quiet | static_cast<uint16_t>(payload >> (23 - format.mantissa_bits));
  }
  if (std::isinf(x)) return sign | inf;

  const double magnitude = std::fabs(static_cast<double>(x));
  int frexp_exponent;
  std::frexp(magnitude, &frexp_exponent);  // magnitude in [2^(e-1), 2^e)
  const int binade = std::max(frexp_exponent - 1, format.min_normal_exponent);
  const int quantum_exponent = binade - format.mantissa_bits;
  const double scaled = std::ldexp(magnitude, -quantum_exponent);  // exact, below 2^12
  double units = std::floor(scaled);
  const double rest = scaled - units;
  if (rest > 0.5 || (rest == 0.5 && std::fmod(units, 2.0) != 0.0)) units += 1.0;
  const double rounded = std::ldexp(units, quantum_exponent);

  if (rounded > largest_finite(format)) return sign | inf;
  if (rounded < std::ldexp(1.0, format.min_normal_exponent)) {
    return sign | static_cast<uint16_t>(units);  // subnormal: count of the smallest quantum
  }
  std::frexp(rounded, &frexp_exponent);
  const int rounded_binade = frexp_exponent - 1;
  const double mantissa =
      std::ldexp(std::ldexp(rounded, -rounded_binade) - 1.0, format.mantissa_bits);
  const int exponent_field = rounded_binade - format.min_normal_exponent + 1;
  return sign | static_cast<uint16_t>(exponent_field << format.mantissa_bits) |
         static_cast<uint16_t>(mantissa);
}

uint16_t scalar_encode(float x, const Format& format) {
  return format.mantissa_bits == kFp16.mantissa_bits ? float_to_half_bits(x)
                                                     : float_to_bf16_bits(x);
}

// Collects mismatches and reports the first few, so one bug does not print a million lines.
class MismatchLog {
 public:
  void add(const std::string& what) {
    if (count_ < 10) ADD_FAILURE() << what;
    ++count_;
  }
  size_t count() const { return count_; }

 private:
  size_t count_ = 0;
};

// Floats that stress rounding to `format`: anything at all, every binade the format can round
// into (subnormal results included), exact midpoints between neighbours, one float ulp either
// side of a midpoint, and the neighbourhood of the overflow threshold.
std::vector<float> stress_floats(const Format& format, size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint32_t> any_bits;
  const int lowest_exponent = format.min_normal_exponent - format.mantissa_bits - 3;
  const int highest_exponent = format.max_exponent + 2;
  std::uniform_int_distribution<int> binade(std::max(lowest_exponent, -127),
                                            std::min(highest_exponent, 127));
  std::uniform_int_distribution<int> subnormal_binade(std::max(lowest_exponent, -127),
                                                      format.min_normal_exponent);
  const uint32_t max_finite_bits = infinity_bits(format) - 1u;
  std::uniform_int_distribution<uint32_t> finite_pattern(0, max_finite_bits);
  const uint32_t overflow_low = bits_of(static_cast<float>(largest_finite(format) * 0.99));
  const uint32_t overflow_high = bits_of(static_cast<float>(std::min(
      std::ldexp(1.0, format.max_exponent + 1) * 1.01, double{std::numeric_limits<float>::max()})));
  std::uniform_int_distribution<uint32_t> near_overflow(overflow_low, overflow_high);

  auto with_exponent = [&](int exponent) {
    // Biased exponent 0 gives an fp32 subnormal with a random mantissa.
    const uint32_t biased = static_cast<uint32_t>(exponent + 127);
    return float_from_bits((any_bits(rng) & 0x807FFFFFu) | (biased << 23));
  };
  auto midpoint = [&]() {
    const uint16_t below = static_cast<uint16_t>(finite_pattern(rng));
    const double low = reference_decode(below, format);
    const double high = below == max_finite_bits ? std::ldexp(1.0, format.max_exponent + 1)
                                                 : reference_decode(below + 1, format);
    return (low + high) / 2.0;  // needs mantissa_bits + 2 bits: exact in fp32
  };

  std::vector<float> values;
  values.reserve(count);
  while (values.size() < count) {
    const float sign = (any_bits(rng) & 1u) ? -1.0f : 1.0f;
    switch (any_bits(rng) % 8) {
      case 0:
        values.push_back(float_from_bits(any_bits(rng)));
        break;
      case 1:
      case 2:
        values.push_back(with_exponent(binade(rng)));
        break;
      case 3:
        values.push_back(with_exponent(subnormal_binade(rng)));
        break;
      case 4:
      case 5: {
        const double tie = midpoint();
        EXPECT_EQ(static_cast<double>(static_cast<float>(tie)), tie);
        values.push_back(sign * static_cast<float>(tie));
        break;
      }
      case 6: {
        const float tie = static_cast<float>(midpoint());
        const float away = (any_bits(rng) & 1u) ? INFINITY : 0.0f;
        values.push_back(sign * std::nextafter(tie, away));
        break;
      }
      case 7:
        values.push_back(sign * float_from_bits(near_overflow(rng)));
        break;
    }
  }
  return values;
}

void expect_matches_reference(const std::vector<float>& inputs, const Format& format) {
  MismatchLog log;
  for (float x : inputs) {
    const uint16_t expected = reference_encode(x, format);
    const uint16_t found = scalar_encode(x, format);
    if (found != expected) {
      log.add(std::string(format.name) + " of " + hex(bits_of(x)) + ": expected " + hex(expected) +
              ", found " + hex(found));
    }
  }
  EXPECT_EQ(log.count(), 0u) << "mismatches out of " << inputs.size();
}

template <typename In, typename Out>
void expect_bits_equal(const std::vector<In>& inputs, const std::vector<Out>& bulk,
                       const std::vector<Out>& scalar, const char* what) {
  ASSERT_EQ(bulk.size(), scalar.size());
  MismatchLog log;
  for (size_t i = 0; i < bulk.size(); ++i) {
    if (std::memcmp(&bulk[i], &scalar[i], sizeof(Out)) != 0) {
      uint32_t in = 0, from_bulk = 0, from_scalar = 0;
      std::memcpy(&in, &inputs[i], sizeof(In));
      std::memcpy(&from_bulk, &bulk[i], sizeof(Out));
      std::memcpy(&from_scalar, &scalar[i], sizeof(Out));
      log.add(std::string(what) + " at " + std::to_string(i) + " of " + hex(in) + ": bulk " +
              hex(from_bulk) + ", scalar " + hex(from_scalar));
    }
  }
  EXPECT_EQ(log.count(), 0u) << what << ": bulk differs from scalar";
}

std::vector<uint16_t> all_16_bit_patterns() {
  std::vector<uint16_t> patterns(65536);
  for (uint32_t i = 0; i < 65536; ++i) patterns[i] = static_cast<uint16_t>(i);
  return patterns;
}

// --- Storage types -------------------------------------------------------------------------

TEST(HalfTypes, LayoutAndConversions) {
  static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2, "two-byte storage");
  static_assert(std::is_trivial<Half>::value && std::is_trivial<BFloat16>::value,
                "uninitialised arrays of them are fine");
  static_assert(!std::is_convertible<float, Half>::value, "construction from float is explicit");
  static_assert(!std::is_convertible<Half, float>::value, "conversion to float is explicit");

  EXPECT_EQ(Half(1.0f).bits, 0x3C00);
  EXPECT_EQ(Half(-2.0f).bits, 0xC000);
  EXPECT_EQ(static_cast<float>(Half::from_bits(0x3555)), 0x1.554p-2f);
  EXPECT_EQ(BFloat16(1.0f).bits, 0x3F80);
  EXPECT_EQ(BFloat16(-2.0f).bits, 0xC000);
  EXPECT_EQ(static_cast<float>(BFloat16::from_bits(0x3FC0)), 1.5f);
}

// --- fp16 ----------------------------------------------------------------------------------

TEST(HalfFp16, EveryPatternDecodesExactly) {
  MismatchLog log;
  for (uint16_t bits : all_16_bit_patterns()) {
    const float value = half_bits_to_float(bits);
    const bool is_nan = (bits & 0x7C00) == 0x7C00 && (bits & 0x3FF) != 0;
    // A NaN comes back quiet with its sign and payload; anything else is the exact value.
    const uint32_t expected = is_nan
                                  ? ((bits & 0x8000u) << 16) | 0x7FC00000u | ((bits & 0x3FFu) << 13)
                                  : bits_of(static_cast<float>(reference_decode(bits, kFp16)));
    if (bits_of(value) != expected) {
      log.add("fp16 " + hex(bits) + ": expected " + hex(expected) + ", found " +
              hex(bits_of(value)));
    }
  }
  EXPECT_EQ(log.count(), 0u);
}

TEST(HalfFp16, EveryPatternRoundTrips) {
  MismatchLog log;
  for (uint16_t bits : all_16_bit_patterns()) {
    const uint16_t back = float_to_half_bits(half_bits_to_float(bits));
    const bool is_nan = (bits & 0x7C00) == 0x7C00 && (bits & 0x3FF) != 0;
    // A NaN stays a NaN with the same sign and payload, made quiet.
    const uint16_t expected = is_nan ? static_cast<uint16_t>(bits | 0x0200) : bits;
    if (back != expected) log.add("fp16 " + hex(bits) + " came back as " + hex(back));
  }
  EXPECT_EQ(log.count(), 0u);
}

TEST(HalfFp16, EveryPatternBulkEqualsScalar) {
  const std::vector<uint16_t> halves = all_16_bit_patterns();
  std::vector<float> bulk_floats(halves.size()), scalar_floats(halves.size());
  f16_to_f32(halves.data(), bulk_floats.data(), halves.size());
  for (size_t i = 0; i < halves.size(); ++i) scalar_floats[i] = half_bits_to_float(halves[i]);
  expect_bits_equal(halves, bulk_floats, scalar_floats, "f16_to_f32");

  std::vector<uint16_t> bulk_halves(halves.size()), scalar_halves(halves.size());
  f32_to_f16(scalar_floats.data(), bulk_halves.data(), halves.size());
  for (size_t i = 0; i < halves.size(); ++i) {
    scalar_halves[i] = float_to_half_bits(scalar_floats[i]);
  }
  expect_bits_equal(scalar_floats, bulk_halves, scalar_halves, "f32_to_f16");
}

TEST(HalfFp16, HandPickedCases) {
  EXPECT_EQ(float_to_half_bits(0.0f), 0x0000);
  EXPECT_EQ(float_to_half_bits(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half_bits(1.0f), 0x3C00);
  EXPECT_EQ(float_to_half_bits(INFINITY), 0x7C00);
  EXPECT_EQ(float_to_half_bits(-INFINITY), 0xFC00);

  // Largest finite 65504 = (2 - 2^-10) * 2^15; 65520 is the tie with 2^16, and 0x7BFF is odd.
  EXPECT_EQ(float_to_half_bits(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_half_bits(std::nextafter(65520.0f, 0.0f)), 0x7BFF);
  EXPECT_EQ(float_to_half_bits(65520.0f), 0x7C00);
  EXPECT_EQ(float_to_half_bits(-65520.0f), 0xFC00);
  EXPECT_EQ(float_to_half_bits(1e10f), 0x7C00);
  EXPECT_EQ(float_to_half_bits(std::numeric_limits<float>::max()), 0x7C00);

  // Subnormals count units of 2^-24.
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.0f, -25)), 0x0000);   // tie between 0 and 1 unit
  EXPECT_EQ(float_to_half_bits(-std::ldexp(1.0f, -25)), 0x8000);  // keeps the sign
  EXPECT_EQ(float_to_half_bits(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(float_to_half_bits(3 * std::ldexp(1.0f, -26)), 0x0001);  // 0.75 units
  EXPECT_EQ(float_to_half_bits(3 * std::ldexp(1.0f, -25)), 0x0002);  // 1.5 units: tie, to even
  EXPECT_EQ(float_to_half_bits(5 * std::ldexp(1.0f, -25)), 0x0002);  // 2.5 units: tie, to even
  EXPECT_EQ(float_to_half_bits(1023 * std::ldexp(1.0f, -24)), 0x03FF);
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  // 1023.5 units: the tie rounds up to even 1024, which is the smallest normal.
  EXPECT_EQ(float_to_half_bits(2047 * std::ldexp(1.0f, -25)), 0x0400);
  EXPECT_EQ(float_to_half_bits(std::numeric_limits<float>::denorm_min()), 0x0000);

  // Normal ties: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(float_to_half_bits(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(float_to_half_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);

  // NaN: quiet, sign kept, top 9 payload bits kept.
  EXPECT_EQ(float_to_half_bits(float_from_bits(0x7FC00000)), 0x7E00);
  EXPECT_EQ(float_to_half_bits(float_from_bits(0xFFC00000)), 0xFE00);
  EXPECT_EQ(float_to_half_bits(float_from_bits(0x7F800001)), 0x7E00);  // signalling, low payload
  EXPECT_EQ(float_to_half_bits(float_from_bits(0x7FA00000)), 0x7F00);
  EXPECT_EQ(float_to_half_bits(float_from_bits(0x7FFFFFFF)), 0x7FFF);

  EXPECT_EQ(half_bits_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(half_bits_to_float(0x03FF), 1023 * std::ldexp(1.0f, -24));
  EXPECT_EQ(half_bits_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(bits_of(half_bits_to_float(0x8000)), 0x80000000u);
  EXPECT_EQ(half_bits_to_float(0xFC00), -INFINITY);
  EXPECT_EQ(bits_of(half_bits_to_float(0x7E00)), 0x7FC00000u);
  EXPECT_EQ(bits_of(half_bits_to_float(0xFC01)), 0xFFC02000u);  // signalling made quiet
}

TEST(HalfFp16, StressFloatsMatchReference) {
  const std::vector<float> inputs = stress_floats(kFp16, 2'000'000, 16);
  expect_matches_reference(inputs, kFp16);

  std::vector<uint16_t> bulk(inputs.size()), scalar(inputs.size());
  f32_to_f16(inputs.data(), bulk.data(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) scalar[i] = float_to_half_bits(inputs[i]);
  expect_bits_equal(inputs, bulk, scalar, "f32_to_f16");
}

// --- bf16 ----------------------------------------------------------------------------------

TEST(HalfBf16, EveryPatternDecodesExactlyAndRoundTrips) {
  const std::vector<uint16_t> patterns = all_16_bit_patterns();
  MismatchLog log;
  for (uint16_t bits : patterns) {
    const float value = bf16_bits_to_float(bits);
    const bool is_nan = (bits & 0x7F80) == 0x7F80 && (bits & 0x7F) != 0;
    // Widening is exact, NaNs included (a signalling NaN stays signalling).
    const uint32_t expected = is_nan ? static_cast<uint32_t>(bits) << 16
                                     : bits_of(static_cast<float>(reference_decode(bits, kBf16)));
    if (bits_of(value) != expected) {
      log.add("bf16 " + hex(bits) + ": expected " + hex(expected) + ", found " +
              hex(bits_of(value)));
    }
    const uint16_t back = float_to_bf16_bits(value);
    const uint16_t expected_back = is_nan ? static_cast<uint16_t>(bits | 0x0040) : bits;
    if (back != expected_back) log.add("bf16 " + hex(bits) + " came back as " + hex(back));
  }
  EXPECT_EQ(log.count(), 0u);

  std::vector<float> bulk(patterns.size()), scalar(patterns.size());
  bf16_to_f32(patterns.data(), bulk.data(), patterns.size());
  for (size_t i = 0; i < patterns.size(); ++i) scalar[i] = bf16_bits_to_float(patterns[i]);
  expect_bits_equal(patterns, bulk, scalar, "bf16_to_f32");
}

// Every bf16 pattern as the top half of a float, with each edge case of the 16 dropped bits:
// exact, one above, just below the tie, the tie, just above the tie, all ones.
TEST(HalfBf16, EveryUpperHalfWithEdgeLowBits) {
  std::vector<float> inputs;
  for (uint32_t upper = 0; upper < 65536; ++upper) {
    for (uint32_t lower : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) {
      inputs.push_back(float_from_bits((upper << 16) | lower));
    }
  }
  expect_matches_reference(inputs, kBf16);

  std::vector<uint16_t> bulk(inputs.size()), scalar(inputs.size());
  f32_to_bf16(inputs.data(), bulk.data(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) scalar[i] = float_to_bf16_bits(inputs[i]);
  expect_bits_equal(inputs, bulk, scalar, "f32_to_bf16");
}

TEST(HalfBf16, HandPickedCases) {
  EXPECT_EQ(float_to_bf16_bits(0.0f), 0x0000);
  EXPECT_EQ(float_to_bf16_bits(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16_bits(INFINITY), 0x7F80);
  EXPECT_EQ(float_to_bf16_bits(-INFINITY), 0xFF80);

  // The bf16 quantum at 1 is 2^-7. 1 + 2^-8 is the tie between 1 (even) and 1 + 2^-7;
  // 1 + 3 * 2^-8 is the tie between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  EXPECT_EQ(float_to_bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
  EXPECT_EQ(float_to_bf16_bits(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)), 0x3F81);

  // Largest finite bf16 is (2 - 2^-7) * 2^127; the tie with 2^128 is (2 - 2^-8) * 2^127.
  const float largest = std::ldexp(2.0f - std::ldexp(1.0f, -7), 127);
  const float overflow_tie = std::ldexp(2.0f - std::ldexp(1.0f, -8), 127);
  EXPECT_EQ(float_to_bf16_bits(largest), 0x7F7F);
  EXPECT_EQ(float_to_bf16_bits(std::nextafter(overflow_tie, 0.0f)), 0x7F7F);
  EXPECT_EQ(float_to_bf16_bits(overflow_tie), 0x7F80);
  EXPECT_EQ(float_to_bf16_bits(-overflow_tie), 0xFF80);
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::max()), 0x7F80);

  // fp32 subnormals round to bf16 subnormals, not to zero.
  EXPECT_EQ(float_to_bf16_bits(std::ldexp(1.0f, -133)), 0x0001);
  EXPECT_EQ(float_to_bf16_bits(std::ldexp(1.0f, -134)), 0x0000);  // tie, to even

  // NaN stays a quiet NaN and never rounds into infinity or across the sign.
  EXPECT_EQ(float_to_bf16_bits(float_from_bits(0x7FC00000)), 0x7FC0);
  EXPECT_EQ(float_to_bf16_bits(float_from_bits(0xFFC00000)), 0xFFC0);
  EXPECT_EQ(float_to_bf16_bits(float_from_bits(0x7F800001)), 0x7FC0);
  EXPECT_EQ(float_to_bf16_bits(float_from_bits(0x7F80FFFF)), 0x7FC0);
  EXPECT_EQ(float_to_bf16_bits(float_from_bits(0x7FFFFFFF)), 0x7FFF);
  EXPECT_EQ(float_to_bf16_bits(float_from_bits(0xFFFFFFFF)), 0xFFFF);

  EXPECT_EQ(bf16_bits_to_float(0x3F80), 1.0f);
  EXPECT_EQ(bf16_bits_to_float(0x0001), std::ldexp(1.0f, -133));
  EXPECT_EQ(bf16_bits_to_float(0xFF80), -INFINITY);
}

TEST(HalfBf16, StressFloatsMatchReference) {
  const std::vector<float> inputs = stress_floats(kBf16, 2'000'000, 32);
  expect_matches_reference(inputs, kBf16);

  std::vector<uint16_t> bulk(inputs.size()), scalar(inputs.size());
  f32_to_bf16(inputs.data(), bulk.data(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) scalar[i] = float_to_bf16_bits(inputs[i]);
  expect_bits_equal(inputs, bulk, scalar, "f32_to_bf16");
}

// --- Bulk: lengths, tails, alignment ----------------------------------------------------------

TEST(HalfBulk, ZeroLengthTouchesNothing) {
  f32_to_f16(nullptr, nullptr, 0);
  f16_to_f32(nullptr, nullptr, 0);
  f32_to_bf16(nullptr, nullptr, 0);
  bf16_to_f32(nullptr, nullptr, 0);
}

// Each size in turn, at an aligned and an odd offset, with sentinels after the last element:
// the first n outputs equal the scalar conversion and nothing past n is written.
TEST(HalfBulk, TailsMatchScalarAndStayInBounds) {
  constexpr size_t kSlack = 64;
  constexpr uint16_t kSentinel16 = 0xA5A5;
  constexpr uint32_t kSentinel32 = 0xDEADBEEF;
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<uint32_t> any_bits;
  std::uniform_real_distribution<float> moderate(-70000.0f, 70000.0f);

  for (size_t n : {0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 1000}) {
    for (size_t offset : {0, 1}) {
      SCOPED_TRACE("n = " + std::to_string(n) + ", offset = " + std::to_string(offset));
      std::vector<float> floats(offset + n);
      std::vector<uint16_t> halves(offset + n);
      for (size_t i = offset; i < floats.size(); ++i) {
        floats[i] = (i % 3 == 0) ? float_from_bits(any_bits(rng)) : moderate(rng);
        halves[i] = static_cast<uint16_t>(any_bits(rng));
      }

      using Narrow = void (*)(const float*, uint16_t*, size_t);
      using Widen = void (*)(const uint16_t*, float*, size_t);
      using NarrowScalar = uint16_t (*)(float);
      using WidenScalar = float (*)(uint16_t);
      const std::pair<Narrow, NarrowScalar> narrowings[] = {{f32_to_f16, float_to_half_bits},
                                                            {f32_to_bf16, float_to_bf16_bits}};
      const std::pair<Widen, WidenScalar> widenings[] = {{f16_to_f32, half_bits_to_float},
                                                         {bf16_to_f32, bf16_bits_to_float}};

      for (const auto& [bulk, scalar] : narrowings) {
        std::vector<uint16_t> out(offset + n + kSlack, kSentinel16);
        bulk(floats.data() + offset, out.data() + offset, n);
        for (size_t i = 0; i < offset; ++i) EXPECT_EQ(out[i], kSentinel16) << "before " << i;
        for (size_t i = offset; i < offset + n; ++i) {
          EXPECT_EQ(out[i], scalar(floats[i])) << "input " << hex(bits_of(floats[i]));
        }
        for (size_t i = offset + n; i < out.size(); ++i) {
          EXPECT_EQ(out[i], kSentinel16) << "written past n at " << i;
        }
      }
      for (const auto& [bulk, scalar] : widenings) {
        std::vector<uint32_t> out(offset + n + kSlack, kSentinel32);
        std::vector<float> out_floats(out.size());
        std::memcpy(out_floats.data(), out.data(), out.size() * sizeof(float));
        bulk(halves.data() + offset, out_floats.data() + offset, n);
        std::memcpy(out.data(), out_floats.data(), out.size() * sizeof(float));
        for (size_t i = 0; i < offset; ++i) EXPECT_EQ(out[i], kSentinel32) << "before " << i;
        for (size_t i = offset; i < offset + n; ++i) {
          EXPECT_EQ(out[i], bits_of(scalar(halves[i]))) << "input " << hex(halves[i]);
        }
        for (size_t i = offset + n; i < out.size(); ++i) {
          EXPECT_EQ(out[i], kSentinel32) << "written past n at " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace zs
