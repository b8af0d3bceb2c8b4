// The tensor-level ops on cuda:N against the same ops on the CPU (label gpu; skips with "no CUDA
// device: skipped (compiled only)" where there is no GPU): for every op with a CUDA path and
// fp32/fp16/bf16, the same random inputs on a CpuAllocator and on a CudaAllocator, forward and
// backward through zs autograd (backward_from with the same random output gradient), outputs and
// every input gradient compared.
//
// Tolerances. Bit for bit where the CUDA path computes each value with the CPU's operations in
// the CPU's order: add, add_bias (and its double column sums), scale, mul, dropout, cast,
// select, sum / mean / sum_of_squares (the CPU's block layout), the in-place helpers, and the
// gradients of all of those. Within tolerance elsewhere: GEMMs sum in cuBLAS's order
// (≈ k·2⁻²⁴·Σ|a·b|), layernorm's row sums are warp trees, GELU/tanh use CUDA's expf/tanhf and
// nvcc's FMA contraction; a 16-bit result may then round to the neighbouring value, so one ulp
// of the storage type is added for fp16/bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "ops/elementwise.h"
#include "ops/gelu.h"
#include "ops/layernorm.h"
#include "ops/linear.h"
#include "ops/select.h"
#include "runtime/autograd.h"
#include "runtime/cuda/allocator.h"
#include "runtime/rng.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/gradcheck.h"
#include "tests/support/op_test.h"

namespace zs {
namespace {

using testing::backward_from;
using testing::CudaOpTest;
using testing::kBits;
using testing::kFloatDtypes;
using testing::Tolerance;

constexpr Tolerance kGemm{false, 1e-4, 1e-4};
constexpr Tolerance kPointwise{false, 1e-5, 1e-6};  // expf / tanhf ulps, FMA contraction
constexpr Tolerance kLayernorm{false, 1e-4, 1e-4};

struct InputSpec {
  Shape shape;
  float lo = -1.0f;
  float hi = 1.0f;
  bool requires_grad = true;
};

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

class CudaTensorOpsTest : public CudaOpTest {
 protected:
  // Runs `fn` on CPU inputs and on their GPU copies, each followed by backward from the same
  // random output gradient, and compares the outputs and every input gradient. The tape holds one
  // graph at a time (backward runs and clears everything recorded), so each device records its
  // forward and runs its backward before the other starts.
  void check_op(const std::string& name, DType dtype, const std::vector<InputSpec>& specs,
                const OpFn& fn, Tolerance forward_tol, Tolerance backward_tol) {
    SCOPED_TRACE(name + " " + dtype_name(dtype));
    std::vector<Tensor> host_inputs;
    std::vector<Tensor> device_inputs;
    uint32_t seed = 17;
    for (const InputSpec& spec : specs) {
      Tensor host = random_host(spec.shape, seed++, spec.lo, spec.hi, dtype, spec.requires_grad);
      device_inputs.push_back(to_gpu(host, spec.requires_grad));
      host_inputs.push_back(host);
    }
    Tensor y_cpu = fn(host_inputs);
    const bool differentiable = y_cpu.requires_grad();
    Tensor seed_cpu = random_host(y_cpu.shape(), 99, -1.0f, 1.0f, y_cpu.dtype(), false);
    if (differentiable) backward_from(y_cpu, seed_cpu);
    current_tape().clear();

    Tensor y_gpu = fn(device_inputs);
    ASSERT_EQ(y_gpu.requires_grad(), differentiable) << name;
    if (differentiable) backward_from(y_gpu, to_gpu(seed_cpu, false));
    current_tape().clear();

    expect_match(y_gpu, y_cpu, forward_tol, name + " forward");
    if (!differentiable) return;
    for (size_t i = 0; i < specs.size(); ++i) {
      if (!specs[i].requires_grad) continue;
      expect_match(device_inputs[i].grad(), host_inputs[i].grad(), backward_tol,
                   name + " gradient of input " + std::to_string(i));
    }
  }
};

TEST_F(CudaTensorOpsTest, LinearMatchesCpu) {
  for (DType dtype : kFloatDtypes) {
    check_op(
        "linear+bias", dtype, {{{5, 7, 48}}, {{24, 48}}, {{24}}},
        [](const std::vector<Tensor>& in) { return ops::linear(in[0], in[1], in[2]); }, kGemm,
        kGemm);
    check_op(
        "linear", dtype, {{{35, 48}}, {{24, 48}}},
        [](const std::vector<Tensor>& in) { return ops::linear(in[0], in[1]); }, kGemm, kGemm);
  }
}

TEST_F(CudaTensorOpsTest, MatmulMatchesCpuForEveryTranspose) {
  const int64_t m = 19, k = 33, n = 26;
  for (DType dtype : kFloatDtypes) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const Shape a_shape = ta ? Shape{k, m} : Shape{m, k};
        const Shape b_shape = tb ? Shape{n, k} : Shape{k, n};
        check_op(
            "matmul ta=" + std::to_string(ta) + " tb=" + std::to_string(tb), dtype,
            {{a_shape}, {b_shape}},
            [ta, tb](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1], ta, tb); },
            kGemm, kGemm);
      }
    }
  }
}

TEST_F(CudaTensorOpsTest, GeluTanhAndLayernormMatchCpu) {
  for (DType dtype : kFloatDtypes) {
    check_op(
        "gelu", dtype, {{{4099}, -6.0f, 6.0f}},
        [](const std::vector<Tensor>& in) { return ops::gelu(in[0]); }, kPointwise, kPointwise);
    check_op(
        "tanh", dtype, {{{3001}, -4.0f, 4.0f}},
        [](const std::vector<Tensor>& in) { return ops::tanh(in[0]); }, kPointwise, kPointwise);
    check_op(
        "layernorm", dtype, {{{37, 96}, -2.0f, 3.0f}, {{96}}, {{96}}},
        [](const std::vector<Tensor>& in) { return ops::layernorm(in[0], in[1], in[2], 1e-5f); },
        kLayernorm, kLayernorm);
  }
}

TEST_F(CudaTensorOpsTest, ElementwiseOpsMatchCpuBitForBit) {
  const RngKey key{1234, 7, 3};
  for (DType dtype : kFloatDtypes) {
    check_op(
        "add", dtype, {{{5000}}, {{5000}}},
        [](const std::vector<Tensor>& in) { return ops::add(in[0], in[1]); }, kBits, kBits);
    check_op(
        "add(x, x)", dtype, {{{777}}},
        [](const std::vector<Tensor>& in) { return ops::add(in[0], in[0]); }, kBits, kBits);
    check_op(
        "add_bias", dtype, {{{3, 70, 40}}, {{40}}},
        [](const std::vector<Tensor>& in) { return ops::add_bias(in[0], in[1]); }, kBits, kBits);
    check_op(
        "scale", dtype, {{{4097}}},
        [](const std::vector<Tensor>& in) { return ops::scale(in[0], -0.37f); }, kBits, kBits);
    check_op(
        "mul", dtype, {{{2049}}, {{2049}}},
        [](const std::vector<Tensor>& in) { return ops::mul(in[0], in[1]); }, kBits, kBits);
    check_op(
        "mul(x, x)", dtype, {{{513}}},
        [](const std::vector<Tensor>& in) { return ops::mul(in[0], in[0]); }, kBits, kBits);
    check_op(
        "dropout", dtype, {{{6000}}},
        [key](const std::vector<Tensor>& in) { return ops::dropout(in[0], 0.3f, key); }, kBits,
        kBits);
    for (DType to : kFloatDtypes) {
      check_op(
          std::string("cast to ") + dtype_name(to), dtype, {{{1500}, -70000.0f, 70000.0f}},
          [to](const std::vector<Tensor>& in) { return ops::cast(in[0], to); }, kBits, kBits);
    }
    check_op(
        "select dim 1", dtype, {{{4, 6, 5}}},
        [](const std::vector<Tensor>& in) { return ops::select(in[0], 1, 2); }, kBits, kBits);
    check_op(
        "select dim 0", dtype, {{{3, 8}}},
        [](const std::vector<Tensor>& in) { return ops::select(in[0], 0, 2); }, kBits, kBits);
  }
}

TEST_F(CudaTensorOpsTest, ReductionsMatchCpuBitForBit) {
  // Several 2048-element blocks and a ragged last block, so the block layout matters.
  for (DType dtype : kFloatDtypes) {
    for (int64_t n : {int64_t{1}, int64_t{13}, int64_t{2048}, int64_t{3 * 2048 + 77}}) {
      const std::string size = " n=" + std::to_string(n);
      check_op(
          "sum" + size, dtype, {{{n}, -3.0f, 5.0f}},
          [](const std::vector<Tensor>& in) { return ops::sum(in[0]); }, kBits, kBits);
      check_op(
          "mean" + size, dtype, {{{n}, -3.0f, 5.0f}},
          [](const std::vector<Tensor>& in) { return ops::mean(in[0]); }, kBits, kBits);
      check_op(
          "sum_of_squares" + size, dtype, {{{n}, -3.0f, 5.0f}},
          [](const std::vector<Tensor>& in) { return ops::sum_of_squares(in[0]); }, kBits, kBits);
    }
  }
}

TEST_F(CudaTensorOpsTest, InPlaceHelpersMatchCpu) {
  for (DType dtype : kFloatDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor host = random_host({3000}, 5, -2.0f, 2.0f, dtype, false);
    Tensor device = to_gpu(host, false);
    ops::scale_(host, 1.7f);
    ops::scale_(device, 1.7f);
    expect_match(device, host, kBits, "scale_");
    for (DType to : kFloatDtypes) {
      Tensor host_dst = Tensor::empty({3000}, to, host_allocator_);
      Tensor device_dst = Tensor::empty({3000}, to, *device_allocator_);
      ops::copy_(host_dst, host);
      ops::copy_(device_dst, device);
      expect_match(device_dst, host_dst, kBits, std::string("copy_ to ") + dtype_name(to));
    }
    ops::fill_(host, -0.3f);
    ops::fill_(device, -0.3f);
    expect_match(device, host, kBits, "fill_");
    EXPECT_TRUE(ops::all_finite(device));
    std::vector<float> values = device.to_vector();
    values[1234] = std::numeric_limits<float>::infinity();
    device.copy_from(values);
    EXPECT_FALSE(ops::all_finite(device));
    values[1234] = std::numeric_limits<float>::quiet_NaN();
    device.copy_from(values);
    EXPECT_FALSE(ops::all_finite(device));
  }
}

// A small model written once runs unchanged on both devices: linear → gelu → layernorm →
// linear → add_bias → mean, forward and backward, parameter gradients compared.
TEST_F(CudaTensorOpsTest, ASmallModelRunsUnchangedOnCuda) {
  struct Params {
    Tensor x, w1, b1, gamma, beta, w2, bias;
  };
  auto forward = [](const Params& p) {
    Tensor h = ops::gelu(ops::linear(p.x, p.w1, p.b1));
    h = ops::layernorm(h, p.gamma, p.beta, 1e-5f);
    return ops::mean(ops::add_bias(ops::linear(h, p.w2), p.bias));
  };
  auto make = [&](bool gpu) {
    auto tensor = [&](const Shape& shape, uint32_t seed) {
      Tensor host = random_host(shape, seed, -0.5f, 0.5f, DType::kF32, true);
      return gpu ? to_gpu(host, true) : host;
    };
    return Params{tensor({6, 32}, 1), tensor({64, 32}, 2), tensor({64}, 3), tensor({64}, 4),
                  tensor({64}, 5),    tensor({16, 64}, 6), tensor({16}, 7)};
  };
  Params cpu = make(false);
  Params gpu = make(true);
  // One graph on the tape at a time: forward and backward on the CPU, then on the GPU.
  Tensor loss_cpu = forward(cpu);
  backward(loss_cpu);
  Tensor loss_gpu = forward(gpu);
  backward(loss_gpu);
  expect_match(loss_gpu, loss_cpu, kLayernorm, "loss");
  const std::vector<std::pair<const char*, std::pair<Tensor, Tensor>>> grads = {
      {"x", {gpu.x, cpu.x}},          {"w1", {gpu.w1, cpu.w1}},
      {"b1", {gpu.b1, cpu.b1}},       {"gamma", {gpu.gamma, cpu.gamma}},
      {"beta", {gpu.beta, cpu.beta}}, {"w2", {gpu.w2, cpu.w2}},
      {"bias", {gpu.bias, cpu.bias}}};
  for (const auto& [name, pair] : grads) {
    expect_match(pair.first.grad(), pair.second.grad(), kLayernorm,
                 std::string("gradient of ") + name);
  }
}

TEST_F(CudaTensorOpsTest, TensorsOnAnotherStreamAreRefused) {
  cuda::Stream other_stream(0);
  cuda::CudaAllocator other_allocator(other_stream, nullptr);
  Tensor a = Tensor::zeros({8}, DType::kF32, *device_allocator_, "a");
  Tensor b = Tensor::zeros({8}, DType::kF32, other_allocator, "b");
  const std::string message = testing::invalid_argument_message([&] { (void)ops::add(a, b); });
  EXPECT_NE(message.find("comes from a CudaAllocator on another stream"), std::string::npos)
      << message;
  other_stream.synchronize();
}

}  // namespace
}  // namespace zs
