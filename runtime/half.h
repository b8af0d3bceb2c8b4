// fp16 (IEEE binary16) and bf16 (bfloat16) storage types and their conversions to and from fp32.
//
// Compute is fp32; fp16 and bf16 are storage types converted on load and store (runtime/dtype.h).
// The scalar conversions below are the one source of that math: they are ZS_HOST_DEVICE inline
// functions with integer-only bodies, so the CPU loops here and the CUDA kernels in ops/cuda
// compile the same code and agree bit for bit, whatever the FP rounding mode or FTZ/DAZ setting.
// The bulk functions (half.cc) convert arrays with AVX-512 or F16C/AVX2 when the build targets
// them, and give the same bits as the scalar functions for every input.
//
// Rounding is to nearest, ties to even. NaN stays NaN: it comes out quiet, with its sign and the
// top of its payload (this is what x86 VCVTPS2PH/VCVTPH2PS do, so the vector and scalar paths
// agree). bf16_bits_to_float is a plain widening and keeps a signalling NaN signalling.
//
// Everything here is a pure function of its arguments and safe to call from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "runtime/macros.h"

namespace zs {
namespace detail {

// Bit casts that work in host code and in CUDA device code (no std::bit_cast in C++17, and
// memcpy is not a device function).
ZS_HOST_DEVICE inline uint32_t float_to_bits(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(value);
#else
  uint32_t bits;
  __builtin_memcpy(&bits, &value, sizeof(bits));
  return bits;
#endif
}

ZS_HOST_DEVICE inline float bits_to_float(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value;
  __builtin_memcpy(&value, &bits, sizeof(value));
  return value;
#endif
}

}  // namespace detail

// fp32 -> fp16 bits. Values at or above 65520 in magnitude (the midpoint between 65504, the
// largest fp16, and 2^16) become infinity; results below 2^-14 become fp16 subnormals.
ZS_HOST_DEVICE inline uint16_t float_to_half_bits(float value) {
  const uint32_t bits = detail::float_to_bits(value);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t magnitude = bits & 0x7FFFFFFFu;

  if (magnitude >= 0x7F800000u) {
    if (magnitude == 0x7F800000u) return static_cast<uint16_t>(sign | 0x7C00u);
    // NaN: set the quiet bit, keep the top 9 bits of the payload.
    return static_cast<uint16_t>(sign | 0x7E00u | ((magnitude >> 13) & 0x3FFu));
  }
  if (magnitude >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520

  if (magnitude >= 0x38800000u) {  // >= 2^-14: a normal fp16
    // Rebias the exponent from 127 to 15 and drop 13 mantissa bits, rounding to nearest even
    // without a branch: adding 0xFFF plus the kept LSB carries into the kept bits exactly when
    // the dropped bits are above half, or at half with an odd LSB. A carry out of the mantissa
    // moves correctly into the exponent.
    const uint32_t round_bias = 0x0FFFu + ((magnitude >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((magnitude - 0x38000000u + round_bias) >> 13));
  }
  if (magnitude <= 0x33000000u) return static_cast<uint16_t>(sign);  // <= 2^-25 (the tie) -> 0

  // fp16 subnormal: the result counts units of 2^-24. The float is significand * 2^(e - 150)
  // with a 24-bit significand, so the count is significand >> (126 - e), shift in [14, 24].
  const uint32_t exponent = magnitude >> 23;
  const uint32_t significand = (magnitude & 0x7FFFFFu) | 0x800000u;
  // Same rounding as above with a variable number of dropped bits. Rounding up from 0x3FF
  // gives 0x400, the smallest normal, which is the right answer.
  const uint32_t shift = 126u - exponent;
  const uint32_t round_bias = ((1u << (shift - 1u)) - 1u) + ((significand >> shift) & 1u);
  return static_cast<uint16_t>(sign | ((significand + round_bias) >> shift));
}

// fp16 bits -> fp32, exact (every fp16 value is an fp32 value).
ZS_HOST_DEVICE inline float half_bits_to_float(uint16_t half_bits) {
  const uint32_t sign = static_cast<uint32_t>(half_bits & 0x8000u) << 16;
  const uint32_t exponent = (half_bits >> 10) & 0x1Fu;
  const uint32_t mantissa = half_bits & 0x3FFu;

  if (exponent == 0x1Fu) {
    // Infinity, or NaN made quiet with its payload kept.
    const uint32_t quiet = mantissa != 0 ? 0x400000u : 0u;
    return detail::bits_to_float(sign | 0x7F800000u | quiet | (mantissa << 13));
  }
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24. Both factors and the product are exact fp32 normals
    // (or zero), so the result does not depend on rounding mode or flush-to-zero.
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // 2^-24
    return detail::bits_to_float(sign | detail::float_to_bits(magnitude));
  }
  return detail::bits_to_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// fp32 -> bf16 bits: the top 16 bits of the float, rounded to nearest even. Finite values at or
// above the midpoint between the largest bf16 and 2^128 round to infinity. fp32 subnormals stay
// subnormal (no flush to zero).
ZS_HOST_DEVICE inline uint16_t float_to_bf16_bits(float value) {
  const uint32_t bits = detail::float_to_bits(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {
    // NaN: truncate and set the quiet bit, so the payload can never round into infinity.
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  // Adding 0x7FFF rounds up anything above the halfway point; adding the kept LSB as well
  // breaks the exact tie toward the even result.
  const uint32_t round_bias = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + round_bias) >> 16);
}

// bf16 bits -> fp32, exact.
ZS_HOST_DEVICE inline float bf16_bits_to_float(uint16_t bf16_bits) {
  return detail::bits_to_float(static_cast<uint32_t>(bf16_bits) << 16);
}

// An fp16 value in storage. Trivially copyable, two bytes, so ops and Tensor::data<T>() can
// template on the storage type. Conversions are explicit both ways: write Half(x) and float(h).
// Half(1) is the value 1.0, not the bit pattern 0x0001; use from_bits for raw bits.
struct Half {
  uint16_t bits;

  Half() = default;
  ZS_HOST_DEVICE explicit Half(float value) : bits(float_to_half_bits(value)) {}
  ZS_HOST_DEVICE explicit operator float() const { return half_bits_to_float(bits); }
  ZS_HOST_DEVICE static Half from_bits(uint16_t raw) {
    Half half;
    half.bits = raw;
    return half;
  }
};

// A bf16 value in storage; same contract as Half.
struct BFloat16 {
  uint16_t bits;

  BFloat16() = default;
  ZS_HOST_DEVICE explicit BFloat16(float value) : bits(float_to_bf16_bits(value)) {}
  ZS_HOST_DEVICE explicit operator float() const { return bf16_bits_to_float(bits); }
  ZS_HOST_DEVICE static BFloat16 from_bits(uint16_t raw) {
    BFloat16 bf16;
    bf16.bits = raw;
    return bf16;
  }
};

static_assert(sizeof(Half) == 2 && alignof(Half) == 2, "Half must have the layout of uint16_t");
static_assert(sizeof(BFloat16) == 2 && alignof(BFloat16) == 2,
              "BFloat16 must have the layout of uint16_t");
static_assert(std::is_trivially_copyable<Half>::value &&
                  std::is_trivially_copyable<BFloat16>::value,
              "storage types are copied with memcpy");

// Bulk conversions of n elements. `in` and `out` must not overlap; n == 0 touches neither
// pointer. Results are bit-identical to the scalar functions above. They run on the calling
// thread; split the range across threads for large buffers.
void f32_to_f16(const float* in, uint16_t* out, size_t n);
void f16_to_f32(const uint16_t* in, float* out, size_t n);
void f32_to_bf16(const float* in, uint16_t* out, size_t n);
void bf16_to_f32(const uint16_t* in, float* out, size_t n);

}  // namespace zs
