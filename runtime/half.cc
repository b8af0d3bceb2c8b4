// Bulk fp32 <-> fp16 / bf16 conversions declared in runtime/half.h.
//
// The instructions are chosen at compile time from the target the build was given (ZS_NATIVE=ON
// compiles with -march=native): AVX-512F when present, else F16C for fp16 and AVX2 for bf16, else
// the scalar functions of half.h. Each choice is a converter that handles one fixed-width block;
// the last partial block of an array is staged through a zero-padded buffer on the stack and goes
// through the same block code, so every element of an array is converted by the same instructions.
// The vector code gives the same bits as the scalar functions: F16C/AVX-512 round to nearest even
// from the immediate (not from MXCSR) and quiet NaNs the way half.h does, and the bf16 vector code
// is the integer arithmetic of float_to_bf16_bits, lane by lane. tests/runtime/half_test.cc checks
// every fp16 and millions of floats against the scalar path.
//
// No state; every function is thread-safe.
#include "runtime/half.h"

#if defined(__AVX512F__) || defined(__F16C__) || defined(__AVX2__)
// GCC 12 reports -Wmaybe-uninitialized inside this header's AVX-512 intrinsics once they are
// inlined (GCC PR 105593); zs_warnings in the top-level CMakeLists.txt turns it off for GCC < 13.
#include <immintrin.h>
#endif

#include <cstring>

namespace zs {
namespace {

// A converter has In and Out element types, kWidth elements per block and a convert_block(in,
// out) that converts exactly one block.

#if defined(__AVX512F__)

struct F32ToF16 {
  using In = float;
  using Out = uint16_t;
  static constexpr size_t kWidth = 16;
  static void convert_block(const float* in, uint16_t* out) {
    const __m512 values = _mm512_loadu_ps(in);
    const __m256i halves = _mm512_cvtps_ph(values, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), halves);
  }
};

struct F16ToF32 {
  using In = uint16_t;
  using Out = float;
  static constexpr size_t kWidth = 16;
  static void convert_block(const uint16_t* in, float* out) {
    const __m256i halves = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in));
    _mm512_storeu_ps(out, _mm512_cvtph_ps(halves));
  }
};

struct F32ToBF16 {
  using In = float;
  using Out = uint16_t;
  static constexpr size_t kWidth = 16;
  static void convert_block(const float* in, uint16_t* out) {
    const __m512i bits = _mm512_loadu_si512(in);
    const __m512i upper = _mm512_srli_epi32(bits, 16);
    // float_to_bf16_bits: (bits + 0x7FFF + lsb) >> 16, and NaN -> upper | quiet bit.
    const __m512i round_bias =
        _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), _mm512_and_si512(upper, _mm512_set1_epi32(1)));
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, round_bias), 16);
    const __m512i quiet_nan = _mm512_or_si512(upper, _mm512_set1_epi32(0x0040));
    const __m512i magnitude = _mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF));
    const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(magnitude, _mm512_set1_epi32(0x7F800000));
    const __m512i result = _mm512_mask_blend_epi32(is_nan, rounded, quiet_nan);
    // Every lane is below 2^16, so narrowing by truncation (VPMOVDW) is exact.
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi32_epi16(result));
  }
};

struct BF16ToF32 {
  using In = uint16_t;
  using Out = float;
  static constexpr size_t kWidth = 16;
  static void convert_block(const uint16_t* in, float* out) {
    const __m256i bf16 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in));
    const __m512i bits = _mm512_slli_epi32(_mm512_cvtepu16_epi32(bf16), 16);
    _mm512_storeu_si512(out, bits);
  }
};

#else  // no AVX-512F

#if defined(__F16C__)

struct F32ToF16 {
  using In = float;
  using Out = uint16_t;
  static constexpr size_t kWidth = 8;
  static void convert_block(const float* in, uint16_t* out) {
    const __m128i halves = _mm256_cvtps_ph(_mm256_loadu_ps(in), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), halves);
  }
};

struct F16ToF32 {
  using In = uint16_t;
  using Out = float;
  static constexpr size_t kWidth = 8;
  static void convert_block(const uint16_t* in, float* out) {
    const __m128i halves = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in));
    _mm256_storeu_ps(out, _mm256_cvtph_ps(halves));
  }
};

#else  // scalar fp16

struct F32ToF16 {
  using In = float;
  using Out = uint16_t;
  static constexpr size_t kWidth = 1;
  static void convert_block(const float* in, uint16_t* out) { *out = float_to_half_bits(*in); }
};

struct F16ToF32 {
  using In = uint16_t;
  using Out = float;
  static constexpr size_t kWidth = 1;
  static void convert_block(const uint16_t* in, float* out) { *out = half_bits_to_float(*in); }
};

#endif  // __F16C__

#if defined(__AVX2__)

// float_to_bf16_bits on 8 lanes; the bf16 bits are in the low half of each 32-bit lane.
inline __m256i round_to_bf16(__m256i bits) {
  const __m256i upper = _mm256_srli_epi32(bits, 16);
  const __m256i round_bias =
      _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), _mm256_and_si256(upper, _mm256_set1_epi32(1)));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, round_bias), 16);
  const __m256i quiet_nan = _mm256_or_si256(upper, _mm256_set1_epi32(0x0040));
  const __m256i magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i is_nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7F800000));
  return _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
}

struct F32ToBF16 {
  using In = float;
  using Out = uint16_t;
  static constexpr size_t kWidth = 16;
  static void convert_block(const float* in, uint16_t* out) {
    const __m256i low = round_to_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in)));
    const __m256i high =
        round_to_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 8)));
    // Lanes are below 2^16, so unsigned saturation is exact. packus works per 128-bit half
    // (low0-3 high0-3 low4-7 high4-7); the permute puts the quarters back in order.
    const __m256i packed = _mm256_packus_epi32(low, high);
    const __m256i ordered = _mm256_permute4x64_epi64(packed, 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), ordered);
  }
};

struct BF16ToF32 {
  using In = uint16_t;
  using Out = float;
  static constexpr size_t kWidth = 8;
  static void convert_block(const uint16_t* in, float* out) {
    const __m128i bf16 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in));
    const __m256i bits = _mm256_slli_epi32(_mm256_cvtepu16_epi32(bf16), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), bits);
  }
};

#else  // scalar bf16

struct F32ToBF16 {
  using In = float;
  using Out = uint16_t;
  static constexpr size_t kWidth = 1;
  static void convert_block(const float* in, uint16_t* out) { *out = float_to_bf16_bits(*in); }
};

struct BF16ToF32 {
  using In = uint16_t;
  using Out = float;
  static constexpr size_t kWidth = 1;
  static void convert_block(const uint16_t* in, float* out) { *out = bf16_bits_to_float(*in); }
};

#endif  // __AVX2__
#endif  // __AVX512F__

// Whole blocks in place, then the remainder through a padded block on the stack.
template <typename Converter>
void convert_array(const typename Converter::In* in, typename Converter::Out* out, size_t n) {
  constexpr size_t kWidth = Converter::kWidth;
  size_t done = 0;
  for (; done + kWidth <= n; done += kWidth) Converter::convert_block(in + done, out + done);
  const size_t remainder = n - done;
  if (remainder == 0) return;
  typename Converter::In padded_in[kWidth] = {};
  typename Converter::Out padded_out[kWidth];
  std::memcpy(padded_in, in + done, remainder * sizeof(*in));
  Converter::convert_block(padded_in, padded_out);
  std::memcpy(out + done, padded_out, remainder * sizeof(*out));
}

}  // namespace

void f32_to_f16(const float* in, uint16_t* out, size_t n) { convert_array<F32ToF16>(in, out, n); }

void f16_to_f32(const uint16_t* in, float* out, size_t n) { convert_array<F16ToF32>(in, out, n); }

void f32_to_bf16(const float* in, uint16_t* out, size_t n) { convert_array<F32ToBF16>(in, out, n); }

void bf16_to_f32(const uint16_t* in, float* out, size_t n) { convert_array<BF16ToF32>(in, out, n); }

}  // namespace zs
