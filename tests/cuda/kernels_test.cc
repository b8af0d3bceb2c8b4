// Each ops/cuda kernel against the CPU op on random inputs (label gpu; skips with "no CUDA
// device: skipped (compiled only)" where there is no GPU).
//
// Tolerances. Both sides compute in fp32 with the same ops/math functions; they can differ by
// nvcc's FMA contraction and CUDA's expf (≤ 2 ulp) — a few fp32 ulps, magnified in GELU's
// negative tail (see tests/ops/gelu_test.cc) — and, for layernorm, by the order of the row sums
// (a warp tree vs a sequential loop). For fp16/bf16 outputs one ulp of the storage type is added
// (a different fp32 value may round to the neighbouring 16-bit value). Casts, scale, add, the
// finiteness check and AdamW are compared bit for bit (integer-only conversions; single IEEE
// operations; multiply-adds fused or not as the host build fuses them, ops/math/adamw.h).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "ops/cuda/kernels.h"
#include "ops/cuda/tensor_kernels.h"
#include "ops/elementwise.h"
#include "ops/gelu.h"
#include "ops/layernorm.h"
#include "ops/math/adamw.h"
#include "runtime/cuda/check.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/op_test.h"

namespace zs {
namespace {

using testing::backward_from;
using testing::converted;
using testing::CudaOpTest;
using testing::kFloatDtypes;

class CudaKernelTest : public CudaOpTest {
 protected:
  // A seed gradient for an op whose output is `dtype`, as fp32 values that `dtype` holds exactly.
  // backward_from stores the seed in the output's gradient, of the output's dtype, so the CPU
  // backward sees it rounded to 16 bits; the kernels take dy in fp32 and are given these same
  // rounded values (an unrounded fp32 seed differs by up to half a storage ulp per element, which
  // dgamma and dbeta sum over the rows: several storage ulps apart, not a kernel difference).
  Tensor seed_as_stored(const Shape& shape, uint32_t seed, DType dtype) {
    return converted(random_host(shape, seed, -1.0f, 1.0f, dtype), DType::kF32);
  }
};

TEST_F(CudaKernelTest, GeluForwardMatchesCpuOp) {
  for (DType dtype : kFloatDtypes) {
    Tensor x = random_host({4099}, 11, -8.0f, 8.0f, dtype);
    const std::vector<float> want = ops::gelu(x).to_vector();
    Tensor dx = upload(x);
    Tensor dy = device_empty(x.shape(), dtype);
    ops::cuda::gelu_forward(dx.raw_device_data(), dy.raw_device_data(), x.numel(), dtype,
                            stream_->get());
    expect_close(download(dy).to_vector(), want, dtype, 2e-5, 1e-7, "gelu forward");
  }
}

TEST_F(CudaKernelTest, GeluBackwardMatchesCpuAutograd) {
  for (DType dtype : kFloatDtypes) {
    Tensor x = random_host({3001}, 12, -8.0f, 8.0f, dtype, /*requires_grad=*/true);
    Tensor seed = seed_as_stored({3001}, 13, dtype);
    backward_from(ops::gelu(x), seed);
    const Tensor cpu_dx = x.grad();
    Tensor d_x = upload(x);
    Tensor d_dy = upload(seed);
    Tensor d_dx = device_empty(x.shape(), cpu_dx.dtype());
    ops::cuda::gelu_backward(d_x.raw_device_data(), d_dy.device_data<float>(),
                             d_dx.raw_device_data(), x.numel(), dtype, cpu_dx.dtype(), false,
                             stream_->get());
    expect_close(download(d_dx).to_vector(), cpu_dx.to_vector(), cpu_dx.dtype(), 2e-5, 1e-6,
                 "gelu backward");
  }
}

TEST_F(CudaKernelTest, LayernormForwardAndBackwardMatchCpuOp) {
  const int64_t rows = 37;
  const int64_t cols = 771;  // not a multiple of the warp size
  const float eps = 1e-5f;
  for (DType dtype : kFloatDtypes) {
    Tensor x = random_host({rows, cols}, 21, -3.0f, 5.0f, dtype, true);
    Tensor gamma = random_host({cols}, 22, 0.5f, 1.5f, dtype, true);
    Tensor beta = random_host({cols}, 23, -0.5f, 0.5f, dtype, true);
    Tensor seed = seed_as_stored({rows, cols}, 24, dtype);
    Tensor y = ops::layernorm(x, gamma, beta, eps);
    const std::vector<float> want_y = y.to_vector();
    backward_from(y, seed);

    Tensor d_x = upload(x);
    Tensor d_gamma = upload(gamma);
    Tensor d_beta = upload(beta);
    Tensor d_seed = upload(seed);
    Tensor d_y = device_empty({rows, cols}, dtype);
    Tensor d_mean = device_empty({rows}, DType::kF32);
    Tensor d_rstd = device_empty({rows}, DType::kF32);
    ops::cuda::layernorm_forward(d_x.raw_device_data(), d_gamma.raw_device_data(),
                                 d_beta.raw_device_data(), d_y.raw_device_data(),
                                 d_mean.device_data<float>(), d_rstd.device_data<float>(), rows,
                                 cols, eps, dtype, stream_->get());
    expect_close(download(d_y).to_vector(), want_y, dtype, 2e-5, 2e-5, "layernorm forward");

    const Tensor cpu_dx = x.grad();
    Tensor d_dx = device_empty({rows, cols}, cpu_dx.dtype());
    Tensor d_dgamma = device_empty({cols}, DType::kF32);
    Tensor d_dbeta = device_empty({cols}, DType::kF32);
    ZS_CUDA_CHECK(
        cudaMemsetAsync(d_dgamma.raw_device_data(), 0, d_dgamma.nbytes(), stream_->get()));
    ZS_CUDA_CHECK(cudaMemsetAsync(d_dbeta.raw_device_data(), 0, d_dbeta.nbytes(), stream_->get()));
    Tensor d_partials = device_empty({2 * ops::cuda::column_sum_partials(rows, cols)}, DType::kF32);
    ops::cuda::layernorm_backward(
        d_x.raw_device_data(), d_seed.device_data<float>(), d_gamma.raw_device_data(),
        d_mean.device_data<float>(), d_rstd.device_data<float>(), d_dx.raw_device_data(),
        d_dgamma.device_data<float>(), d_dbeta.device_data<float>(),
        d_partials.device_data<float>(), rows, cols, dtype, cpu_dx.dtype(), false, stream_->get());
    expect_close(download(d_dx).to_vector(), cpu_dx.to_vector(), cpu_dx.dtype(), 1e-4, 1e-4,
                 "layernorm dx");
    // Sums over 37 rows in another order: a few ulps of the sum of magnitudes.
    expect_close(download(d_dgamma).to_vector(), gamma.grad().to_vector(), gamma.grad().dtype(),
                 1e-4, 1e-4, "layernorm dgamma");
    expect_close(download(d_dbeta).to_vector(), beta.grad().to_vector(), beta.grad().dtype(), 1e-4,
                 1e-4, "layernorm dbeta");
  }
}

TEST_F(CudaKernelTest, CastsAreBitwiseEqualToCpuOpIncludingSpecialValues) {
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1.0f,
                               -1.0f,
                               65504.0f,
                               65520.0f,
                               1e-8f,
                               -6e-8f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN(),
                               3.14159f,
                               1e38f,
                               1.0009765625f /* an fp16 tie */,
                               1.00390625f /* a bf16 tie */};
  std::mt19937 gen(31);
  std::uniform_real_distribution<float> dist(-1000.0f, 1000.0f);
  while (values.size() < 2053) values.push_back(dist(gen));
  for (DType from : kFloatDtypes) {
    Tensor src = Tensor::empty({static_cast<int64_t>(values.size())}, from, host_allocator_,
                               MemoryCategory::kOther, "src");
    src.copy_from(values);
    Tensor d_src = upload(src);
    for (DType to : kFloatDtypes) {
      const Tensor want = from == to ? src : ops::cast(src, to);
      Tensor d_dst = device_empty(src.shape(), to);
      ops::cuda::cast(d_src.raw_device_data(), from, d_dst.raw_device_data(), to, src.numel(),
                      stream_->get());
      EXPECT_EQ(bytes_of(download(d_dst)), bytes_of(want))
          << dtype_name(from) << " -> " << dtype_name(to);
    }
  }
}

TEST_F(CudaKernelTest, ScaleAndAddAreBitwiseEqualToCpuOps) {
  for (DType dtype : kFloatDtypes) {
    Tensor a = random_host({5003}, 41, -100.0f, 100.0f, dtype);
    Tensor b = random_host({5003}, 42, -100.0f, 100.0f, dtype);
    Tensor d_a = upload(a);
    Tensor d_b = upload(b);
    Tensor d_sum = device_empty(a.shape(), dtype);
    ops::cuda::add(d_a.raw_device_data(), d_b.raw_device_data(), d_sum.raw_device_data(), a.numel(),
                   dtype, stream_->get());
    EXPECT_EQ(bytes_of(download(d_sum)), bytes_of(ops::add(a, b))) << dtype_name(dtype);
    ops::cuda::scale_inplace(d_a.raw_device_data(), 0.37f, a.numel(), dtype, stream_->get());
    ops::scale_(a, 0.37f);
    EXPECT_EQ(bytes_of(download(d_a)), bytes_of(a)) << dtype_name(dtype);
  }
}

TEST_F(CudaKernelTest, NonfiniteCheckAgreesWithCpuAllFinite) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor flag = device_empty({1}, DType::kI32);
  for (DType dtype : kFloatDtypes) {
    for (float bad : {0.0f, inf, -inf, nan, 1e6f /* inf in fp16 only */}) {
      for (int64_t where : {int64_t{0}, int64_t{4242}, int64_t{70000}}) {
        std::vector<float> values(70001, 1.5f);
        values[static_cast<size_t>(where)] = bad;
        Tensor x = Tensor::empty({70001}, dtype, host_allocator_, MemoryCategory::kOther, "x");
        x.copy_from(values);
        Tensor d_x = upload(x);
        ZS_CUDA_CHECK(cudaMemsetAsync(flag.raw_device_data(), 0, sizeof(int32_t), stream_->get()));
        ops::cuda::mark_nonfinite(d_x.raw_device_data(), x.numel(), dtype,
                                  flag.device_data<int32_t>(), stream_->get());
        const bool gpu_finite = download(flag).data<int32_t>()[0] == 0;
        EXPECT_EQ(gpu_finite, ops::all_finite(x))
            << dtype_name(dtype) << " value " << bad << " at " << where;
      }
    }
  }
}

TEST_F(CudaKernelTest, AdamWMatchesTheCpuUpdateBitForBit) {
  const int64_t n = 10007;
  Tensor param = random_host({n}, 51, -1.0f, 1.0f, DType::kF32);
  Tensor grad = random_host({n}, 52, -1e-2f, 1e-2f, DType::kF32);
  Tensor m = random_host({n}, 53, -1e-3f, 1e-3f, DType::kF32);
  Tensor v = random_host({n}, 54, 0.0f, 1e-5f, DType::kF32);
  Tensor d_param = upload(param);
  Tensor d_grad = upload(grad);
  Tensor d_m = upload(m);
  Tensor d_v = upload(v);
  // Step 3 of lr 1e-3, betas (0.9, 0.95), eps 1e-8, wd 0.1, computed as optim/adamw.cc does.
  const double lr = 1e-3, beta1 = 0.9, beta2 = 0.95, wd = 0.1;
  const double bc1 = 1.0 - std::pow(beta1, 3.0), bc2 = 1.0 - std::pow(beta2, 3.0);
  ops::math::AdamWStep s;
  s.beta1 = static_cast<float>(beta1);
  s.beta2 = static_cast<float>(beta2);
  s.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  s.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  s.eps = 1e-8f;
  s.step_size = static_cast<float>(lr / bc1);
  s.inv_sqrt_bias_correction2 = static_cast<float>(1.0 / std::sqrt(bc2));
  s.decay_factor = static_cast<float>(1.0 - lr * wd);
  // Two segments, as a shard covering a decayed weight and an undecayed bias.
  const int64_t split = 6000;
  ops::cuda::adamw_step(d_param.device_data<float>(), d_grad.device_data<float>(),
                        d_m.device_data<float>(), d_v.device_data<float>(), split, s, true,
                        stream_->get());
  ops::cuda::adamw_step(d_param.device_data<float>() + split, d_grad.device_data<float>() + split,
                        d_m.device_data<float>() + split, d_v.device_data<float>() + split,
                        n - split, s, false, stream_->get());
  float* p = param.data<float>();
  float* mm = m.data<float>();
  float* vv = v.data<float>();
  const float* g = grad.data<float>();
  for (int64_t i = 0; i < n; ++i) ops::math::adamw_update(p[i], g[i], mm[i], vv[i], s, i < split);
  // Bitwise with and without FMA on the host: the kernel rounds multiply-adds as this file does.
  EXPECT_EQ(bytes_of(download(d_param)), bytes_of(param));
  EXPECT_EQ(bytes_of(download(d_m)), bytes_of(m));
  EXPECT_EQ(bytes_of(download(d_v)), bytes_of(v));
}

}  // namespace
}  // namespace zs
