// cuDNN's fused attention forward (ops/cuda/cudnn_attention.h) against the plain kernel
// attention_forward (ops/cuda/nn_kernels.h) on the same random fp16/bf16 inputs (label gpu).
//
// Skips: every device test skips with "no CUDA device: skipped (compiled only)" where there is no
// GPU, and a comparison case skips with "cuDNN fused attention declined: <reason>" where cuDNN
// (or the build: "built without cuDNN") cannot take that shape — e.g. a GPU below 8.0. The
// environment switch (ZS_CUDNN_ATTENTION) is also checked without a device.
//
// Tolerances: both forwards read the same 16-bit q, k, v and accumulate the scores in fp32, so
// the lse (fp32) agrees within 1e-3 relative (+1e-3 absolute). cuDNN rounds the probabilities to
// the i/o dtype before P·V (the plain kernel keeps them in fp32), so the outputs agree within 1e-2
// relative + 1e-2 absolute (outputs are averages of values in [-1, 1] and may be near zero), plus
// one storage ulp.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <ostream>
#include <string>
#include <vector>

#include "ops/cuda/cudnn_attention.h"
#include "ops/cuda/nn_kernels.h"
#include "tests/cuda/cuda_test_util.h"

namespace zs {
namespace {

using ops::cuda::CudnnHandle;
using testing::CudaOpTest;
using testing::ScopedCudnnSwitch;

struct AttentionShape {
  int64_t batch, seq, heads, head_dim;
  bool causal;
  DType dtype;
};

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
        handle, qkv.raw_data(), out.raw_data(), lse.data<float>(), s.batch, s.seq, C, s.heads,
        s.causal, s.dtype,
        [this](size_t bytes) {
          workspaces_.push_back(device_empty({static_cast<int64_t>((bytes + 3) / 4)}, DType::kF32));
          return workspaces_.back().raw_data();
        },
        why_not);
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
  ops::cuda::attention_forward(qkv.raw_data(), want_out.raw_data(), want_lse.data<float>(), s.batch,
                               s.seq, C, s.heads, s.causal, nullptr, nullptr, s.dtype,
                               stream_->get());
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

// T not a multiple of 64 (nor of 32), D = 64 and 128, both masks, both 16-bit dtypes.
INSTANTIATE_TEST_SUITE_P(Shapes, CudnnAttentionMatchTest,
                         ::testing::Values(AttentionShape{2, 100, 3, 64, true, DType::kF16},
                                           AttentionShape{2, 100, 3, 64, false, DType::kF16},
                                           AttentionShape{2, 100, 3, 64, true, DType::kBF16},
                                           AttentionShape{2, 100, 3, 64, false, DType::kBF16},
                                           AttentionShape{1, 77, 2, 128, true, DType::kF16},
                                           AttentionShape{1, 77, 2, 128, false, DType::kBF16},
                                           AttentionShape{3, 129, 1, 128, true, DType::kBF16}),
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
