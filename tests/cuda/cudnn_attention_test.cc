// cuDNN's fused attention forward and backward (ops/cuda/cudnn_attention.h) against the plain
// kernels attention_forward and attention_backward (ops/cuda/nn_kernels.h) on the same random
// fp16/bf16 inputs, and the op (ops::attention) forward + backward with cuDNN on against off
// (label gpu).
//
// Skips: every device test skips with "no CUDA device: skipped (compiled only)" where there is no
// GPU, and a comparison case skips with "cuDNN fused attention declined: <reason>" where cuDNN
// (or the build: "built without cuDNN") cannot take that shape — e.g. a GPU below 8.0, or a
// backward with T not a multiple of 128 on cuDNN <= 9.15. The environment switch
// (ZS_CUDNN_ATTENTION) is also checked without a device.
//
// Forward tolerances: both forwards read the same 16-bit q, k, v and accumulate the scores in
// fp32, so the lse (fp32) agrees within 1e-3 relative (+1e-3 absolute). cuDNN rounds the
// probabilities to the i/o dtype before P·V (the plain kernel keeps them in fp32), so the outputs
// agree within 1e-2 relative + 1e-2 absolute (outputs are averages of values in [-1, 1] and may
// be near zero), plus one storage ulp.
//
// Backward tolerances, per part (dq, dk, dv) of dqkv, in storage ulps (2^-10 fp16, 2^-7 bf16):
// 4 ulps relative + 4 ulps of the part's largest magnitude, plus one ulp of the element. Both
// backwards read the same 16-bit inputs, out and lse and accumulate in fp32, but cuDNN rounds P
// and dS to the i/o dtype before the dV and dK products (the plain kernel keeps them in fp32) and
// its dot products run in another order. Each rounding moves a term by at most half an ulp of
// itself, so a gradient element moves by at most ~ulp · Σ|terms|; the terms have random signs, so
// Σ|terms| can be several times the element itself (or the element near zero) but stays within a
// few times the part's largest element — hence an absolute part scaled by that maximum rather
// than a fixed one. A wrong mask, scale or transpose is off by O(1) relative and is still caught.
// Through the op, the cuDNN forward's rounded probabilities also change out and hence dot = Σ
// dO ⊙ O: twice those bounds (8 ulps) there.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <ostream>
#include <string>
#include <vector>

#include "ops/attention.h"
#include "ops/cuda/cudnn_attention.h"
#include "ops/cuda/nn_kernels.h"
#include "runtime/autograd.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/op_test.h"

namespace zs {
namespace {

using ops::cuda::CudnnHandle;
using testing::backward_from;
using testing::CudaOpTest;
using testing::ScopedCudnnSwitch;

struct AttentionShape {
  int64_t batch, seq, heads, head_dim;
  bool causal;
  DType dtype;
};

// The shapes both passes are compared on: T not a multiple of 64 (nor of 32), D = 64 and 128,
// both masks, both 16-bit dtypes.
const AttentionShape kShapes[] = {
    {2, 100, 3, 64, true, DType::kF16},  {2, 100, 3, 64, false, DType::kF16},
    {2, 100, 3, 64, true, DType::kBF16}, {2, 100, 3, 64, false, DType::kBF16},
    {1, 77, 2, 128, true, DType::kF16},  {1, 77, 2, 128, false, DType::kBF16},
    {3, 129, 1, 128, true, DType::kBF16}};

void PrintTo(const AttentionShape& s, std::ostream* os) {
  *os << "[B=" << s.batch << ", T=" << s.seq << ", H=" << s.heads << ", D=" << s.head_dim
      << (s.causal ? ", causal, " : ", bidirectional, ") << dtype_name(s.dtype) << "]";
}

std::string shape_name(const ::testing::TestParamInfo<AttentionShape>& info) {
  const AttentionShape& s = info.param;
  return std::string(s.causal ? "Causal" : "Bidirectional") + "_T" + std::to_string(s.seq) + "_D" +
         std::to_string(s.head_dim) + "_" + (s.dtype == DType::kF16 ? "F16" : "BF16");
}

class CudnnAttentionTest : public CudaOpTest {
 protected:
  // Runs the cuDNN forward on `qkv` (device, [B, T, 3C]) into out/lse; false with the reason when
  // cuDNN declines. The workspace tensors stay alive until the fixture's stream has run.
  bool cudnn_forward(CudnnHandle& handle, const Tensor& qkv, Tensor& out, Tensor& lse,
                     const AttentionShape& s, std::string* why_not) {
    const int64_t C = s.heads * s.head_dim;
    return ops::cuda::cudnn_attention_forward(
        handle, qkv.raw_device_data(), out.raw_device_data(), lse.device_data<float>(), s.batch,
        s.seq, C, s.heads, s.causal, s.dtype,
        [this](size_t bytes) {
          workspaces_.push_back(device_empty({static_cast<int64_t>((bytes + 3) / 4)}, DType::kF32));
          return workspaces_.back().raw_device_data();
        },
        why_not);
  }

  // The cuDNN backward into dqkv (device, [B, T, 3C], the shape's dtype); false with the reason
  // when cuDNN declines.
  bool cudnn_backward(CudnnHandle& handle, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                      const Tensor& dout, Tensor& dqkv, const AttentionShape& s, bool accumulate,
                      std::string* why_not) {
    const int64_t C = s.heads * s.head_dim;
    return ops::cuda::cudnn_attention_backward(
        handle, qkv.raw_device_data(), out.raw_device_data(), lse.device_data<float>(),
        dout.raw_device_data(), dqkv.raw_device_data(), s.batch, s.seq, C, s.heads, s.causal,
        s.dtype, accumulate,
        [this](size_t bytes) {
          workspaces_.push_back(device_empty({static_cast<int64_t>((bytes + 3) / 4)}, DType::kF32));
          return workspaces_.back().raw_device_data();
        },
        why_not);
  }

  // The plain backward into dqkv, as the reference.
  void plain_backward(const Tensor& qkv, const Tensor& out, const Tensor& lse, const Tensor& dout,
                      Tensor& dqkv, const AttentionShape& s, bool accumulate) {
    const int64_t C = s.heads * s.head_dim;
    Tensor delta = device_empty({s.batch * s.heads * s.seq}, DType::kF32);
    ops::cuda::attention_backward(
        qkv.raw_device_data(), out.raw_device_data(), lse.device_data<float>(),
        dout.raw_device_data(), delta.device_data<float>(), dqkv.raw_device_data(), s.batch, s.seq,
        C, s.heads, s.causal, nullptr, s.dtype, s.dtype, accumulate, stream_->get());
    workspaces_.push_back(delta);  // alive until the fixture's stream has run the kernel
  }

  // One storage ulp at 1 (2^-10 fp16, 2^-7 bf16).
  static double storage_ulp(DType dtype) {
    return dtype == DType::kF16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
  }

  // Gradients of qkv [B, T, 3C] compared per part (dq, dk, dv): within `ulps` storage ulps relative
  // plus `ulps` ulps of the part's largest magnitude (see the file comment), plus one ulp.
  static void expect_gradients_close(const std::vector<float>& got, const std::vector<float>& want,
                                     int64_t channels, DType dtype, double ulps,
                                     const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    const char* names[3] = {"dq", "dk", "dv"};
    for (int64_t part = 0; part < 3; ++part) {
      std::vector<float> got_part, want_part;
      double largest = 0.0;
      for (size_t i = 0; i < want.size(); ++i) {
        if (static_cast<int64_t>(i) % (3 * channels) / channels != part) continue;
        got_part.push_back(got[i]);
        want_part.push_back(want[i]);
        largest = std::max(largest, static_cast<double>(std::fabs(want[i])));
      }
      const double ulp = storage_ulp(dtype);
      expect_close(got_part, want_part, dtype, ulps * ulp, ulps * ulp * largest,
                   what + " " + names[part]);
    }
  }

  std::vector<Tensor> workspaces_;
};

class CudnnAttentionMatchTest : public CudnnAttentionTest,
                                public ::testing::WithParamInterface<AttentionShape> {};

TEST_P(CudnnAttentionMatchTest, MatchesThePlainKernel) {
  const AttentionShape s = GetParam();
  const int64_t C = s.heads * s.head_dim;
  Tensor qkv = upload(random_host({s.batch, s.seq, 3 * C}, 17, -1.0f, 1.0f, s.dtype));
  Tensor out = device_empty({s.batch, s.seq, C}, s.dtype);
  Tensor lse = device_empty({s.batch, s.heads, s.seq}, DType::kF32);
  Tensor want_out = device_empty({s.batch, s.seq, C}, s.dtype);
  Tensor want_lse = device_empty({s.batch, s.heads, s.seq}, DType::kF32);

  CudnnHandle handle(*stream_);
  std::string why_not;
  if (!cudnn_forward(handle, qkv, out, lse, s, &why_not)) {
    GTEST_SKIP() << "cuDNN fused attention declined: " << why_not;
  }
  ops::cuda::attention_forward(qkv.raw_device_data(), want_out.raw_device_data(),
                               want_lse.device_data<float>(), s.batch, s.seq, C, s.heads, s.causal,
                               nullptr, nullptr, s.dtype, stream_->get());
  expect_close(download(out).to_vector(), download(want_out).to_vector(), s.dtype, 1e-2, 1e-2,
               "out");
  expect_close(download(lse).to_vector(), download(want_lse).to_vector(), DType::kF32, 1e-3, 1e-3,
               "lse");

  // The cached plan runs again with other pointers (a second call takes the cache path).
  Tensor again = device_empty({s.batch, s.seq, C}, s.dtype);
  Tensor again_lse = device_empty({s.batch, s.heads, s.seq}, DType::kF32);
  ASSERT_TRUE(cudnn_forward(handle, qkv, again, again_lse, s, &why_not)) << why_not;
  EXPECT_EQ(download(again).to_vector(), download(out).to_vector());
  EXPECT_EQ(download(again_lse).to_vector(), download(lse).to_vector());
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudnnAttentionMatchTest, ::testing::ValuesIn(kShapes), shape_name);

class CudnnAttentionBackwardTest : public CudnnAttentionTest,
                                   public ::testing::WithParamInterface<AttentionShape> {};

TEST_P(CudnnAttentionBackwardTest, MatchesThePlainKernel) {
  const AttentionShape s = GetParam();
  const int64_t C = s.heads * s.head_dim;
  const Shape qkv_shape{s.batch, s.seq, 3 * C};
  Tensor qkv = upload(random_host(qkv_shape, 23, -1.0f, 1.0f, s.dtype));
  Tensor dout = upload(random_host({s.batch, s.seq, C}, 29, -1.0f, 1.0f, s.dtype));
  // out and lse from the plain forward: both backwards get the same saved tensors.
  Tensor out = device_empty({s.batch, s.seq, C}, s.dtype);
  Tensor lse = device_empty({s.batch, s.heads, s.seq}, DType::kF32);
  ops::cuda::attention_forward(qkv.raw_device_data(), out.raw_device_data(),
                               lse.device_data<float>(), s.batch, s.seq, C, s.heads, s.causal,
                               nullptr, nullptr, s.dtype, stream_->get());

  CudnnHandle handle(*stream_);
  std::string why_not;
  Tensor dqkv = device_empty(qkv_shape, s.dtype);
  if (!cudnn_backward(handle, qkv, out, lse, dout, dqkv, s, /*accumulate=*/false, &why_not)) {
    GTEST_SKIP() << "cuDNN fused attention declined: " << why_not;
  }
  Tensor want = device_empty(qkv_shape, s.dtype);
  plain_backward(qkv, out, lse, dout, want, s, /*accumulate=*/false);
  const std::vector<float> want_values = download(want).to_vector();
  expect_gradients_close(download(dqkv).to_vector(), want_values, C, s.dtype, 4, "dqkv");

  // The cached plan again, with other pointers and a fresh (re-zeroed) dQ accumulator. cuDNN may
  // add the dQ partial sums in another order, so the same bound rather than the same bits.
  Tensor again = device_empty(qkv_shape, s.dtype);
  ASSERT_TRUE(cudnn_backward(handle, qkv, out, lse, dout, again, s, false, &why_not)) << why_not;
  expect_gradients_close(download(again).to_vector(), want_values, C, s.dtype, 4, "dqkv again");

  // Accumulating into an existing gradient: cuDNN's staging copy plus add against the plain
  // kernel's own accumulation, from the same starting values.
  const Tensor initial = random_host(qkv_shape, 31, -0.5f, 0.5f, s.dtype);
  Tensor summed = upload(initial);
  Tensor want_summed = upload(initial);
  ASSERT_TRUE(cudnn_backward(handle, qkv, out, lse, dout, summed, s, /*accumulate=*/true, &why_not))
      << why_not;
  plain_backward(qkv, out, lse, dout, want_summed, s, /*accumulate=*/true);
  expect_gradients_close(download(summed).to_vector(), download(want_summed).to_vector(), C,
                         s.dtype, 4, "accumulated dqkv");
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudnnAttentionBackwardTest, ::testing::ValuesIn(kShapes),
                         shape_name);

class CudnnAttentionOpTest : public CudnnAttentionTest,
                             public ::testing::WithParamInterface<AttentionShape> {
 protected:
  // qkv's gradient through the op on the device allocator, with ZS_CUDNN_ATTENTION = `cudnn`:
  // one attention call seeded with `seed`, or two calls on the same qkv (the second backward
  // then adds into the gradient the first wrote).
  std::vector<float> op_gradient(const Tensor& qkv_host, const Tensor& seed, int64_t heads,
                                 bool causal, const char* cudnn, bool twice) {
    ScopedCudnnSwitch scope(cudnn);
    Tensor qkv = to_gpu(qkv_host, /*requires_grad=*/true);
    Tensor device_seed = to_gpu(seed);
    if (twice) {
      backward_from({ops::attention(qkv, heads, causal), ops::attention(qkv, heads, causal)},
                    {device_seed, device_seed});
    } else {
      backward_from(ops::attention(qkv, heads, causal), device_seed);
    }
    return qkv.grad().to_vector();
  }
};

TEST_P(CudnnAttentionOpTest, CudnnOnMatchesCudnnOff) {
  const AttentionShape s = GetParam();
  const int64_t C = s.heads * s.head_dim;
  const Tensor qkv_host = random_host({s.batch, s.seq, 3 * C}, 37, -1.0f, 1.0f, s.dtype);
  const Tensor seed = random_host({s.batch, s.seq, C}, 41, -1.0f, 1.0f, s.dtype);
  {
    // Whether cuDNN takes both passes of this shape on the fixture's allocator (the op uses the
    // thread's handle for it): else the comparison below would be the plain kernel twice.
    Tensor qkv = upload(qkv_host);
    Tensor out = device_empty({s.batch, s.seq, C}, s.dtype);
    Tensor lse = device_empty({s.batch, s.heads, s.seq}, DType::kF32);
    Tensor dout = upload(seed);
    Tensor dqkv = device_empty({s.batch, s.seq, 3 * C}, s.dtype);
    CudnnHandle& handle = ops::cuda::thread_cudnn_handle(*device_allocator_);
    std::string why_not;
    if (!cudnn_forward(handle, qkv, out, lse, s, &why_not) ||
        !cudnn_backward(handle, qkv, out, lse, dout, dqkv, s, false, &why_not)) {
      GTEST_SKIP() << "cuDNN fused attention declined: " << why_not;
    }
  }
  for (bool twice : {false, true}) {
    const std::vector<float> fused = op_gradient(qkv_host, seed, s.heads, s.causal, "1", twice);
    const std::vector<float> plain = op_gradient(qkv_host, seed, s.heads, s.causal, "0", twice);
    expect_gradients_close(fused, plain, C, s.dtype, 8,
                           twice ? "qkv grad, two calls (accumulated)" : "qkv grad");
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudnnAttentionOpTest,
                         ::testing::Values(AttentionShape{2, 100, 3, 64, true, DType::kF16},
                                           AttentionShape{1, 77, 2, 128, false, DType::kBF16}),
                         shape_name);

TEST_F(CudnnAttentionTest, ZsCudnnAttentionZeroDisablesIt) {
  const AttentionShape s{1, 64, 2, 64, true, DType::kF16};
  const int64_t C = s.heads * s.head_dim;
  Tensor qkv = upload(random_host({s.batch, s.seq, 3 * C}, 3, -1.0f, 1.0f, s.dtype));
  Tensor out = device_empty({s.batch, s.seq, C}, s.dtype);
  Tensor lse = device_empty({s.batch, s.heads, s.seq}, DType::kF32);
  CudnnHandle handle(*stream_);
  ScopedCudnnSwitch off("0");
  std::string why_not;
  EXPECT_FALSE(cudnn_forward(handle, qkv, out, lse, s, &why_not));
  EXPECT_NE(why_not.find("ZS_CUDNN_ATTENTION"), std::string::npos) << why_not;
  Tensor dout = device_empty({s.batch, s.seq, C}, s.dtype);
  Tensor dqkv = device_empty({s.batch, s.seq, 3 * C}, s.dtype);
  why_not.clear();
  EXPECT_FALSE(cudnn_backward(handle, qkv, out, lse, dout, dqkv, s, false, &why_not));
  EXPECT_NE(why_not.find("ZS_CUDNN_ATTENTION"), std::string::npos) << why_not;
  EXPECT_TRUE(workspaces_.empty());
}

TEST_F(CudnnAttentionTest, DeclinesFp32AndUnsupportedHeadDims) {
  CudnnHandle handle(*stream_);
  for (const AttentionShape& s : {AttentionShape{1, 16, 2, 64, false, DType::kF32},
                                  AttentionShape{1, 16, 2, 12, false, DType::kF16},
                                  AttentionShape{1, 16, 1, 256, true, DType::kBF16}}) {
    const int64_t C = s.heads * s.head_dim;
    Tensor qkv = device_empty({s.batch, s.seq, 3 * C}, s.dtype);
    Tensor out = device_empty({s.batch, s.seq, C}, s.dtype);
    Tensor lse = device_empty({s.batch, s.heads, s.seq}, DType::kF32);
    std::string why_not;
    EXPECT_FALSE(cudnn_forward(handle, qkv, out, lse, s, &why_not))
        << shape_name(::testing::TestParamInfo<AttentionShape>(s, 0));
    EXPECT_FALSE(why_not.empty());
    // The answer is cached: the second call says the same.
    std::string again;
    EXPECT_FALSE(cudnn_forward(handle, qkv, out, lse, s, &again));
    EXPECT_EQ(again, why_not);
  }
  EXPECT_TRUE(workspaces_.empty());
}

TEST_F(CudnnAttentionTest, BackwardDeclinesFp32UnsupportedHeadDimsAndOneToken) {
  CudnnHandle handle(*stream_);
  for (const AttentionShape& s : {AttentionShape{1, 16, 2, 64, false, DType::kF32},
                                  AttentionShape{1, 16, 2, 12, false, DType::kF16},
                                  AttentionShape{1, 16, 1, 256, true, DType::kBF16},
                                  AttentionShape{2, 1, 2, 64, true, DType::kF16}}) {
    const int64_t C = s.heads * s.head_dim;
    Tensor qkv = device_empty({s.batch, s.seq, 3 * C}, s.dtype);
    Tensor out = device_empty({s.batch, s.seq, C}, s.dtype);
    Tensor lse = device_empty({s.batch, s.heads, s.seq}, DType::kF32);
    Tensor dout = device_empty({s.batch, s.seq, C}, s.dtype);
    Tensor dqkv = device_empty({s.batch, s.seq, 3 * C}, s.dtype);
    const std::string name = shape_name(::testing::TestParamInfo<AttentionShape>(s, 0));
    std::string why_not;
    EXPECT_FALSE(cudnn_backward(handle, qkv, out, lse, dout, dqkv, s, false, &why_not)) << name;
    EXPECT_FALSE(why_not.empty()) << name;
    std::string again;
    EXPECT_FALSE(cudnn_backward(handle, qkv, out, lse, dout, dqkv, s, true, &again)) << name;
    EXPECT_EQ(again, why_not) << name;
  }
  EXPECT_TRUE(workspaces_.empty());
}

// No device needed: the switch is read from the environment at every call.
TEST(CudnnAttentionSwitch, ZeroDisablesAnythingElseEnables) {
  {
    ScopedCudnnSwitch off("0");
    EXPECT_FALSE(ops::cuda::cudnn_attention_enabled());
  }
  {
    ScopedCudnnSwitch on("1");
    EXPECT_TRUE(ops::cuda::cudnn_attention_enabled());
  }
}

}  // namespace
}  // namespace zs
