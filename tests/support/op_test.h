// Shared support for the op tests (header-only), so each test file keeps only what is its own:
// - OpTest, the fixture base: a tracked CPU allocator per test, and the thread's tape dropped
//   after each test;
// - backward_from: backward with chosen gradients for an op's outputs;
// - converted: a copy of a tensor in another dtype;
// - int32_tensor: a 1-D int32 tensor of given values (targets, ids);
// - invalid_argument_message: the text of the InvalidArgument a call throws (from
//   tests/support/error_text.h, included here);
// - one_ulp_tolerance: the bound for fp16/bf16 results against fp32;
// - storage_ulp: the spacing of fp32/fp16/bf16 values at a value, subnormals included.
//
// Tensors returned belong to the caller and live on the allocator of the tensor they were made
// from. Everything works on the calling thread's tape (runtime/autograd.h), so these helpers are
// as thread-safe as that: one thread, one graph at a time.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "runtime/allocator.h"
#include "runtime/autograd.h"
#include "runtime/error.h"
#include "runtime/memory_tracker.h"
#include "runtime/tensor.h"
#include "tests/support/error_text.h"

namespace zs::testing {

// Runs backward once with seeds[i] as the gradient of outs[i] (same shape each): a node recorded
// on top of the outputs hands each seed to its output, and backward() then runs, and empties, the
// whole tape. One output, or two when one input feeds two calls that share a backward. Gradients
// that already exist are added into, as in any backward.
inline void backward_from(const std::vector<Tensor>& outs, const std::vector<Tensor>& seeds) {
  ZS_CHECK(!outs.empty() && outs.size() <= 2 && seeds.size() == outs.size(),
           "backward_from seeds one or two outputs with one seed each, got ", outs.size(),
           " outputs and ", seeds.size(), " seeds");
  Tensor loss = Tensor::zeros({1}, DType::kF32, outs[0].allocator(), "loss");
  const Tensor* second = outs.size() > 1 ? &outs[1] : nullptr;
  record_op("seed", {&outs[0], second}, {&loss}, [seeds](BackwardContext& ctx) {
    for (size_t i = 0; i < seeds.size(); ++i) {
      GradSink sink = ctx.grad_input(i);
      if (!sink) continue;
      if (sink.accumulate) {
        accumulate_into(sink.buffer, seeds[i]);
      } else {
        sink.buffer.copy_from(seeds[i].to_vector());
      }
    }
  });
  backward(loss);
}

// A 1-D int32 tensor holding `values` (class targets, ids) on `allocator`, category other.
inline Tensor int32_tensor(const std::vector<int32_t>& values, Allocator& allocator,
                           const std::string& name) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::kI32, allocator,
                           MemoryCategory::kOther, name);
  std::copy(values.begin(), values.end(), t.data<int32_t>());
  return t;
}

// Runs backward once with `seed` as the gradient of `out` (same shape).
inline void backward_from(const Tensor& out, const Tensor& seed) {
  backward_from(std::vector<Tensor>{out}, std::vector<Tensor>{seed});
}

// A copy of `t` stored as `dtype` (rounded to nearest even when narrowing), as a new leaf on t's
// allocator.
inline Tensor converted(const Tensor& t, DType dtype, bool requires_grad = false) {
  Tensor out = Tensor::empty(t.shape(), dtype, t.allocator(), MemoryCategory::kOther, "converted");
  out.copy_from(t.to_vector());
  out.set_requires_grad(requires_grad);
  return out;
}

// The spacing of `dtype`'s values at `value` (fp32, fp16 or bf16): one unit in the last place,
// 2^(exponent of |value| − mantissa bits) in the normal range, and in the subnormal range (and at
// 0) the format's smallest spacing, 2^-24 for fp16, 2^-133 for bf16 and 2^-149 for fp32. A bound
// written as a fraction of |value| alone gives about nothing there, so a comparison that allows
// roundings of a 16-bit result near zero adds storage_ulp(dtype, 0.0) per rounding.
inline double storage_ulp(DType dtype, double value) {
  const int mantissa_bits = dtype == DType::kF16 ? 10 : dtype == DType::kBF16 ? 7 : 23;
  const int min_normal_exponent = dtype == DType::kF16 ? -14 : -126;
  const int exponent = value == 0.0 ? min_normal_exponent : std::ilogb(value);
  return std::ldexp(1.0, std::max(exponent, min_normal_exponent) - mantissa_bits);
}

// One ulp of fp16 (2^-10) or bf16 (2^-7) relative to `reference`, plus 1e-7 absolute for fp16
// subnormals: the bound for an op that computes in fp32 from 16-bit inputs and rounds its result
// once (at most half an ulp), against the fp32 op on the same values.
inline double one_ulp_tolerance(DType dtype, double reference) {
  const double relative = dtype == DType::kF16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
  return relative * std::fabs(reference) + 1e-7;
}

// Base of the op test fixtures: a tracked CPU allocator for the test's tensors.
class OpTest : public ::testing::Test {
 protected:
  // A forward whose backward never runs (forward-only checks, an argument error thrown after an
  // op recorded) leaves nodes on this thread's tape that hold tensors of allocator_. The tape is
  // thread-local and outlives the test: drop them before allocator_ is destroyed.
  void TearDown() override { current_tape().clear(); }

  MemoryTracker tracker_;
  CpuAllocator allocator_{&tracker_};
};

}  // namespace zs::testing
