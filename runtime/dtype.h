// Element types of tensors. Compute is fp32 (or int32 for indices); fp16 and bf16 are storage
// types converted on load and store (runtime/half.h). int64 carries exact 64-bit figures (byte
// counts, the bits of doubles) through the communicators; no op computes in it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace zs {

enum class DType : uint8_t { kF32, kF16, kBF16, kI32, kI64 };

inline size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kF16:
      return 2;
    case DType::kBF16:
      return 2;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
  }
  return 0;
}

inline const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "fp32";
    case DType::kF16:
      return "fp16";
    case DType::kBF16:
      return "bf16";
    case DType::kI32:
      return "int32";
    case DType::kI64:
      return "int64";
  }
  return "?";
}

inline bool is_floating(DType dtype) { return dtype != DType::kI32 && dtype != DType::kI64; }

// Parses "fp32"/"float32", "fp16"/"float16", "bf16"/"bfloat16", "int32"; throws InvalidArgument.
// (int64 is not a dtype a user names: it is for the communicators' exact figures.)
DType parse_dtype(const std::string& name);

}  // namespace zs

namespace zs {

struct Half;      // runtime/half.h
struct BFloat16;  // runtime/half.h

// The DType of a C++ storage type, for Tensor::data<T>() checks.
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct DTypeOf<Half> {
  static constexpr DType value = DType::kF16;
};
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = DType::kBF16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kI32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kI64;
};

}  // namespace zs
