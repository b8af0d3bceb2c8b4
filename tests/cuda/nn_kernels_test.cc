// The cross-entropy, embedding and attention launchers (ops/cuda/nn_kernels.h) against the CPU ops
// with autograd on random inputs (label gpu; the device tests skip with "no CUDA device: skipped
// (compiled only)" where there is no GPU). The argument checks, which throw before anything is
// enqueued, run everywhere.
//
// What is compared bit for bit, and what within tolerance (nn_kernels.h says why):
// - embedding forward and backward (fresh and accumulating sinks): bytes.
// - cross-entropy: the row max bytes; the loss bytes against the CPU's procedure (row order,
// double)
//   applied to the device's row losses, and the count exactly. log_sum, the row losses, the loss
//   against the CPU op and the gradient: a few fp32 ulps (block sums in another order, CUDA's
//   expf/logf), plus one storage ulp for fp16/bf16 results.
// - attention: scores are warp dot products and the softmax is online over tiles, so outputs agree
//   within 5e-5 relative, gradients within 5e-4 (they sum over up to T queries or keys) and the lse
//   within 1e-5 of a double reference; masked structure is exact (−inf lse and zero output for
//   rows without keys). A host emulation of the kernels' loops (lanes as arrays) against a double
//   reference used under 1% of these bounds on the cases below.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ops/attention.h"
#include "ops/cross_entropy.h"
#include "ops/cuda/nn_kernels.h"
#include "ops/embedding.h"
#include "ops/math/cross_entropy.h"
#include "runtime/autograd.h"
#include "runtime/cuda/check.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/op_test.h"

namespace zs {
namespace {

using testing::backward_from;
using testing::converted;
using testing::CudaOpTest;
using testing::invalid_argument_message;
using testing::kFloatDtypes;
using testing::one_ulp_tolerance;
using testing::random_ids;
using testing::random_targets;

class CudaNnKernelTest : public CudaOpTest {
 protected:
  Tensor host_ints(const Shape& shape, const std::vector<int32_t>& values) {
    Tensor t = Tensor::empty(shape, DType::kI32, host_allocator_, MemoryCategory::kOther, "ints");
    EXPECT_EQ(t.numel(), static_cast<int64_t>(values.size()));
    if (!values.empty()) std::memcpy(t.data<int32_t>(), values.data(), values.size() * 4);
    return t;
  }

  Tensor host_filled(const Shape& shape, DType dtype, float value) {
    Tensor t = Tensor::empty(shape, dtype, host_allocator_, MemoryCategory::kOther, "filled");
    t.fill(value);
    return t;
  }

  // A device int32 flag set to INT32_MAX, as the first_bad_* contract asks.
  Tensor device_flag() { return upload(host_ints({1}, {INT32_MAX})); }
  int32_t read_int32(const Tensor& device) { return download(device).data<int32_t>()[0]; }
  // A device int64 (as two int32 elements, the layout cross_entropy's kernels take).
  Tensor device_int64() { return device_empty({2}, DType::kI32); }
  static int64_t* as_int64(const Tensor& device) {
    return static_cast<int64_t*>(device.raw_device_data());
  }
  int64_t read_int64(const Tensor& device) {
    int64_t value = 0;
    std::memcpy(&value, download(device).raw_data(), sizeof(value));
    return value;
  }

  // One cross_entropy_forward on the device: the uploaded inputs, the fresh outputs it wrote
  // (count and flag as device_int64 / device_flag), and the backward over them.
  struct DeviceCrossEntropy {
    Tensor logits, targets, max, log_sum, row_loss, loss, count, flag;
    int64_t rows = 0, vocab = 0;
    int32_t ignore_index = 0;
    cudaStream_t stream = nullptr;

    // cross_entropy_backward from the device scalar `dloss` into `grad` (of `grad_dtype`).
    void backward(const Tensor& dloss, const Tensor& grad, DType grad_dtype,
                  bool accumulate) const {
      ops::cuda::cross_entropy_backward(
          logits.raw_device_data(), targets.device_data<int32_t>(), max.device_data<float>(),
          log_sum.device_data<float>(), dloss.device_data<float>(), as_int64(count), rows, vocab,
          ignore_index, logits.dtype(), grad.raw_device_data(), grad_dtype, accumulate, stream);
    }
  };
  // Uploads host logits [rows, vocab] and targets [rows] and runs cross_entropy_forward on them.
  DeviceCrossEntropy cross_entropy_on_device(const Tensor& logits, const Tensor& targets,
                                             int32_t ignore_index) {
    DeviceCrossEntropy d;
    d.rows = logits.size(0);
    d.vocab = logits.size(1);
    d.ignore_index = ignore_index;
    d.stream = stream_->get();
    d.logits = upload(logits);
    d.targets = upload(targets);
    d.max = device_empty({d.rows}, DType::kF32);
    d.log_sum = device_empty({d.rows}, DType::kF32);
    d.row_loss = device_empty({d.rows}, DType::kF32);
    d.loss = device_empty({1}, DType::kF32);
    d.count = device_int64();
    d.flag = device_flag();
    ops::cuda::cross_entropy_forward(d.logits.raw_device_data(), d.targets.device_data<int32_t>(),
                                     d.rows, d.vocab, ignore_index, logits.dtype(),
                                     d.max.device_data<float>(), d.log_sum.device_data<float>(),
                                     d.row_loss.device_data<float>(), d.loss.device_data<float>(),
                                     as_int64(d.count), d.flag.device_data<int32_t>(), d.stream);
    return d;
  }
};

// ---------------------------------------------------------------------------- cross-entropy

TEST_F(CudaNnKernelTest, CrossEntropyForwardAndBackwardMatchCpuOp) {
  const int64_t rows = 67;
  const int64_t vocab = 1031;  // not a multiple of the block
  const float dloss_value = 0.75f;
  for (DType dtype : kFloatDtypes) {
    // The default ignore_index, and one inside [0, vocab) (class 7 is then ignored).
    for (int32_t ignore_index : {ops::kDefaultIgnoreIndex, int32_t{7}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " ignore_index " +
                   std::to_string(ignore_index));
      Tensor logits = random_host({rows, vocab}, 61, -6.0f, 6.0f, dtype, true);
      std::vector<int32_t> target_values = random_targets(rows, vocab, ignore_index, 62);
      target_values[3] = 7;
      Tensor targets = host_ints({rows}, target_values);
      Tensor loss = ops::cross_entropy(logits, targets, ignore_index);
      const float cpu_loss = loss.item();
      const int64_t cpu_count = ops::count_valid_targets(targets, ignore_index);
      Tensor dloss = host_filled({1}, DType::kF32, dloss_value);
      backward_from(loss, dloss);
      const Tensor cpu_grad = logits.grad();

      // The CPU op's saved statistics, recomputed with the same function on the same fp32
      // values (a 16-bit logit converts to fp32 exactly, so the bits are the op's).
      const std::vector<float> lv = logits.to_vector();
      std::vector<float> want_max(rows, 0.0f), want_log_sum(rows, 0.0f), want_row_loss(rows, 0.0f);
      for (int64_t r = 0; r < rows; ++r) {
        const int32_t t = target_values[static_cast<size_t>(r)];
        if (t == ignore_index) continue;
        const float* row = lv.data() + r * vocab;
        ops::math::cross_entropy_row_stats(row, vocab, &want_max[r], &want_log_sum[r]);
        want_row_loss[r] = ops::math::cross_entropy_loss(want_max[r], want_log_sum[r], row[t]);
      }

      const DeviceCrossEntropy d = cross_entropy_on_device(logits, targets, ignore_index);
      Tensor host_max =
          Tensor::empty({rows}, DType::kF32, host_allocator_, MemoryCategory::kOther, "want max");
      host_max.copy_from(want_max);
      EXPECT_EQ(bytes_of(download(d.max)), bytes_of(host_max)) << "row max";
      expect_close(download(d.log_sum).to_vector(), want_log_sum, DType::kF32, 1e-5, 2e-6,
                   "log_sum");
      const std::vector<float> got_row_loss = download(d.row_loss).to_vector();
      expect_close(got_row_loss, want_row_loss, DType::kF32, 1e-5, 2e-6, "row loss");
      const int64_t count = read_int64(d.count);
      EXPECT_EQ(count, cpu_count);
      EXPECT_EQ(read_int32(d.flag), INT32_MAX);
      // The CPU's mean over the device's row losses: row order, double, one rounding.
      double total = 0.0;
      for (float value : got_row_loss) total += static_cast<double>(value);
      const float want_loss = static_cast<float>(total / static_cast<double>(count));
      const float got_loss = download(d.loss).item();
      EXPECT_EQ(std::memcmp(&got_loss, &want_loss, sizeof(float)), 0)
          << "loss " << got_loss << " vs the CPU's mean of the device row losses " << want_loss;
      EXPECT_NEAR(got_loss, cpu_loss, 1e-5 * std::fabs(cpu_loss) + 1e-6);

      // Backward into a fresh sink of the logits' dtype (the CPU op's sink), over garbage.
      Tensor d_dloss = upload(dloss);
      Tensor d_grad = upload(host_filled({rows, vocab}, cpu_grad.dtype(), 123.0f));
      d.backward(d_dloss, d_grad, cpu_grad.dtype(), false);
      expect_close(download(d_grad).to_vector(), cpu_grad.to_vector(), cpu_grad.dtype(), 2e-5, 1e-9,
                   "dlogits");

      // An fp32 sink, fresh and then accumulating over random values: the reference is the same
      // row function in fp32, added to the previous values; ignored rows stay untouched.
      const float scale = dloss_value / static_cast<float>(cpu_count);
      std::vector<float> want_grad(static_cast<size_t>(rows * vocab), 0.0f);
      for (int64_t r = 0; r < rows; ++r) {
        const int32_t t = target_values[static_cast<size_t>(r)];
        if (t == ignore_index) continue;
        ops::math::cross_entropy_row_backward(lv.data() + r * vocab, vocab, want_max[r],
                                              want_log_sum[r], t, scale,
                                              want_grad.data() + r * vocab, false);
      }
      Tensor previous = random_host({rows, vocab}, 63, -1.0f, 1.0f, DType::kF32);
      Tensor d_grad32 = upload(previous);
      d.backward(d_dloss, d_grad32, DType::kF32, true);
      const std::vector<float> got_accumulated = download(d_grad32).to_vector();
      const std::vector<float> before = previous.to_vector();
      std::vector<float> want_accumulated(before.size());
      for (size_t i = 0; i < before.size(); ++i) want_accumulated[i] = before[i] + want_grad[i];
      expect_close(got_accumulated, want_accumulated, DType::kF32, 2e-5, 1e-7, "accumulated");
      for (int64_t r = 0; r < rows; ++r) {
        if (target_values[static_cast<size_t>(r)] != ignore_index) continue;
        EXPECT_EQ(std::memcmp(got_accumulated.data() + r * vocab, before.data() + r * vocab,
                              static_cast<size_t>(vocab) * sizeof(float)),
                  0)
            << "ignored row " << r << " was written while accumulating";
      }
      d.backward(d_dloss, d_grad32, DType::kF32, false);
      expect_close(download(d_grad32).to_vector(), want_grad, DType::kF32, 2e-5, 1e-9,
                   "fp32 dlogits");
    }
  }
}

TEST_F(CudaNnKernelTest, CrossEntropyWithNoCountedRowIsZeroNotNaN) {
  const int64_t vocab = 33;
  Tensor d_loss = upload(host_filled({1}, DType::kF32, 5.0f));
  Tensor d_count = device_int64();
  Tensor d_flag = device_flag();
  // rows == 0: the outputs are written by memset, no kernel.
  ops::cuda::cross_entropy_forward(nullptr, nullptr, 0, vocab, ops::kDefaultIgnoreIndex,
                                   DType::kF32, nullptr, nullptr, nullptr,
                                   d_loss.device_data<float>(), as_int64(d_count),
                                   d_flag.device_data<int32_t>(), stream_->get());
  EXPECT_EQ(download(d_loss).item(), 0.0f);
  EXPECT_EQ(read_int64(d_count), 0);
  // Every row ignored: loss 0, count 0, zero gradient — as the CPU op.
  const int64_t rows = 9;
  Tensor logits = random_host({rows, vocab}, 71, -3.0f, 3.0f, DType::kF32, true);
  Tensor targets = host_ints({rows}, std::vector<int32_t>(rows, ops::kDefaultIgnoreIndex));
  Tensor loss = ops::cross_entropy(logits, targets);
  EXPECT_EQ(loss.item(), 0.0f);
  const DeviceCrossEntropy d = cross_entropy_on_device(logits, targets, ops::kDefaultIgnoreIndex);
  EXPECT_EQ(download(d.loss).item(), 0.0f);
  EXPECT_EQ(read_int64(d.count), 0);
  Tensor d_dloss = upload(host_filled({1}, DType::kF32, 1.0f));
  Tensor d_grad = upload(host_filled({rows, vocab}, DType::kF32, 9.0f));
  d.backward(d_dloss, d_grad, DType::kF32, false);
  for (float g : download(d_grad).to_vector()) ASSERT_EQ(g, 0.0f);
}

TEST_F(CudaNnKernelTest, CrossEntropyFlagsTheFirstBadTargetRowAsTheCpuOpReportsIt) {
  const int64_t rows = 12;
  const int64_t vocab = 40;
  std::vector<int32_t> target_values = random_targets(rows, vocab, ops::kDefaultIgnoreIndex, 81);
  target_values[9] = -7;
  target_values[5] = static_cast<int32_t>(vocab) + 3;
  Tensor logits = random_host({rows, vocab}, 82, -2.0f, 2.0f, DType::kF32);
  Tensor targets = host_ints({rows}, target_values);
  EXPECT_NE(invalid_argument_message([&] {
              ops::cross_entropy(logits, targets);
            }).find("targets[5] = 43 is out of range"),
            std::string::npos);
  const DeviceCrossEntropy d = cross_entropy_on_device(logits, targets, ops::kDefaultIgnoreIndex);
  EXPECT_EQ(read_int32(d.flag), 5);
}

// ---------------------------------------------------------------------------- embedding

TEST_F(CudaNnKernelTest, EmbeddingForwardAndBackwardAreBitwiseEqualToCpuOp) {
  const int64_t vocab = 97;
  const int64_t cols = 75;
  const Shape id_shape{3, 41};
  const int64_t positions = 3 * 41;
  const Shape out_shape{3, 41, cols};
  for (DType dtype : kFloatDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor table = random_host({vocab, cols}, 91, -1.0f, 1.0f, dtype, true);
    const std::vector<int32_t> id_values = random_ids(positions, vocab, 92);
    Tensor ids = host_ints(id_shape, id_values);
    Tensor out = ops::embedding(table, ids);
    Tensor seed = random_host(out_shape, 93, -1.0f, 1.0f, DType::kF32);
    backward_from(out, seed);
    // A copy of the first gradient (the handle's storage is added into by the next backward).
    const Tensor first_grad = converted(table.grad(), dtype);

    Tensor d_table = upload(table);
    Tensor d_ids = upload(ids);
    Tensor d_out = device_empty(out_shape, dtype);
    Tensor d_flag = device_flag();
    ops::cuda::embedding_forward(d_table.raw_device_data(), d_ids.device_data<int32_t>(),
                                 d_out.raw_device_data(), vocab, cols, positions, dtype,
                                 d_flag.device_data<int32_t>(), stream_->get());
    EXPECT_EQ(bytes_of(download(d_out)), bytes_of(out)) << "forward";

    // The CPU backward reads the upstream gradient in the output's dtype.
    Tensor dout = dtype == DType::kF32 ? seed : converted(seed, dtype);
    Tensor d_dout = upload(dout);
    const size_t workspace_bytes = ops::cuda::embedding_backward_workspace_bytes(positions, vocab);
    Tensor d_workspace =
        device_empty({static_cast<int64_t>((workspace_bytes + 3) / 4)}, DType::kI32);
    Tensor d_grad = upload(host_filled({vocab, cols}, dtype, 77.0f));  // fresh: garbage first
    ops::cuda::embedding_backward(d_ids.device_data<int32_t>(), d_dout.raw_device_data(), dtype,
                                  positions, vocab, cols, d_grad.raw_device_data(), dtype, false,
                                  d_workspace.raw_device_data(), workspace_bytes,
                                  d_flag.device_data<int32_t>(), stream_->get());
    EXPECT_EQ(bytes_of(download(d_grad)), bytes_of(first_grad)) << "backward, fresh sink";

    // A second call accumulates into the existing gradient (the CPU: sink.accumulate).
    const std::vector<int32_t> id_values2 = random_ids(positions, vocab, 94);
    Tensor ids2 = host_ints(id_shape, id_values2);
    Tensor out2 = ops::embedding(table, ids2);
    Tensor seed2 = random_host(out_shape, 95, -1.0f, 1.0f, DType::kF32);
    backward_from(out2, seed2);
    Tensor d_ids2 = upload(ids2);
    Tensor d_dout2 = upload(dtype == DType::kF32 ? seed2 : converted(seed2, dtype));
    Tensor d_accumulated = upload(first_grad);
    ops::cuda::embedding_backward(d_ids2.device_data<int32_t>(), d_dout2.raw_device_data(), dtype,
                                  positions, vocab, cols, d_accumulated.raw_device_data(), dtype,
                                  true, d_workspace.raw_device_data(), workspace_bytes,
                                  d_flag.device_data<int32_t>(), stream_->get());
    EXPECT_EQ(bytes_of(download(d_accumulated)), bytes_of(table.grad()))
        << "backward, accumulating sink";

    // An fp32 sink for a 16-bit table: the same fp32 sums, unrounded.
    if (dtype != DType::kF32) {
      Tensor d_grad32 = upload(host_filled({vocab, cols}, DType::kF32, 77.0f));
      ops::cuda::embedding_backward(d_ids.device_data<int32_t>(), d_dout.raw_device_data(), dtype,
                                    positions, vocab, cols, d_grad32.raw_device_data(), DType::kF32,
                                    false, d_workspace.raw_device_data(), workspace_bytes,
                                    d_flag.device_data<int32_t>(), stream_->get());
      const std::vector<float> dy = dout.to_vector();
      std::vector<float> want(static_cast<size_t>(vocab * cols), 0.0f);
      for (int64_t v = 0; v < vocab; ++v) {
        for (int64_t j = 0; j < cols; ++j) {
          float sum = 0.0f;
          for (int64_t p = 0; p < positions; ++p) {
            if (id_values[static_cast<size_t>(p)] == v) sum += dy[p * cols + j];
          }
          want[v * cols + j] = sum;
        }
      }
      const std::vector<float> got = download(d_grad32).to_vector();
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
          << "fp32 sink";
    }
    EXPECT_EQ(read_int32(d_flag), INT32_MAX);
  }
}

TEST_F(CudaNnKernelTest, EmbeddingBackwardWithoutIdsZeroesAFreshSink) {
  // The CPU contract: rows no id hits are zero in a fresh sink and untouched in an accumulating
  // one; with no ids at all that is every row (written by memset, no kernel).
  const int64_t vocab = 10;
  const int64_t cols = 6;
  EXPECT_EQ(ops::cuda::embedding_backward_workspace_bytes(0, vocab), 0u);
  for (DType dtype : kFloatDtypes) {
    Tensor d_grad = upload(host_filled({vocab, cols}, dtype, 5.0f));
    ops::cuda::embedding_backward(nullptr, nullptr, dtype, 0, vocab, cols, d_grad.raw_device_data(),
                                  dtype, true, nullptr, 0, nullptr, stream_->get());
    for (float g : download(d_grad).to_vector()) ASSERT_EQ(g, 5.0f) << dtype_name(dtype);
    ops::cuda::embedding_backward(nullptr, nullptr, dtype, 0, vocab, cols, d_grad.raw_device_data(),
                                  dtype, false, nullptr, 0, nullptr, stream_->get());
    EXPECT_EQ(bytes_of(download(d_grad)),
              bytes_of(Tensor::zeros({vocab, cols}, dtype, host_allocator_, "zeros")))
        << dtype_name(dtype);
  }
}

TEST_F(CudaNnKernelTest, EmbeddingFlagsTheFirstBadIdAsTheCpuOpReportsIt) {
  const int64_t vocab = 50;
  const int64_t cols = 8;
  std::vector<int32_t> id_values = random_ids(64, vocab, 111);
  id_values[30] = -1;
  id_values[17] = static_cast<int32_t>(vocab);
  Tensor table = random_host({vocab, cols}, 112, -1.0f, 1.0f, DType::kF32);
  Tensor ids = host_ints({64}, id_values);
  EXPECT_NE(invalid_argument_message([&] { ops::embedding(table, ids); }).find("flat position 17"),
            std::string::npos);
  Tensor d_table = upload(table);
  Tensor d_ids = upload(ids);
  Tensor d_out = device_empty({64, cols}, DType::kF32);
  Tensor d_flag = device_flag();
  ops::cuda::embedding_forward(d_table.raw_device_data(), d_ids.device_data<int32_t>(),
                               d_out.raw_device_data(), vocab, cols, 64, DType::kF32,
                               d_flag.device_data<int32_t>(), stream_->get());
  EXPECT_EQ(read_int32(d_flag), 17);
  const std::vector<float> out = download(d_out).to_vector();
  for (int64_t j = 0; j < cols; ++j) EXPECT_EQ(out[17 * cols + j], 0.0f);
  // Backward with the same ids: flagged too, and the bad positions are summed into no row.
  Tensor d_backward_flag = device_flag();
  Tensor d_dout = upload(random_host({64, cols}, 113, -1.0f, 1.0f, DType::kF32));
  const size_t workspace_bytes = ops::cuda::embedding_backward_workspace_bytes(64, vocab);
  Tensor d_workspace = device_empty({static_cast<int64_t>((workspace_bytes + 3) / 4)}, DType::kI32);
  Tensor d_grad = device_empty({vocab, cols}, DType::kF32);
  ops::cuda::embedding_backward(d_ids.device_data<int32_t>(), d_dout.raw_device_data(), DType::kF32,
                                64, vocab, cols, d_grad.raw_device_data(), DType::kF32, false,
                                d_workspace.raw_device_data(), workspace_bytes,
                                d_backward_flag.device_data<int32_t>(), stream_->get());
  EXPECT_EQ(read_int32(d_backward_flag), 17);
}

// ---------------------------------------------------------------------------- attention

struct AttentionCase {
  int64_t batch, seq, heads, head_dim;
  bool causal;
  std::vector<int32_t> lengths;  // empty: no padding
};

std::string describe(const AttentionCase& c) {
  std::string s = "B" + std::to_string(c.batch) + " T" + std::to_string(c.seq) + " H" +
                  std::to_string(c.heads) + " D" + std::to_string(c.head_dim) +
                  (c.causal ? " causal" : " bidirectional");
  if (!c.lengths.empty()) {
    s += " lengths";
    for (int32_t l : c.lengths) s += " " + std::to_string(l);
  }
  return s;
}

// The log-sum-exp of each row's visible scores, in double from the fp32 inputs: an independent
// reference for the saved lse (the CPU op keeps its lse internal).
std::vector<float> reference_lse(const AttentionCase& c, const std::vector<float>& qkv) {
  const int64_t C = c.heads * c.head_dim, ld = 3 * C, T = c.seq, D = c.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::vector<float> lse(static_cast<size_t>(c.batch * c.heads * T));
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t valid = c.lengths.empty() ? T : c.lengths[static_cast<size_t>(b)];
    for (int64_t h = 0; h < c.heads; ++h) {
      for (int64_t i = 0; i < T; ++i) {
        const int64_t visible = c.causal ? std::min(i + 1, valid) : valid;
        std::vector<double> s(static_cast<size_t>(visible));
        double max = -INFINITY;
        for (int64_t j = 0; j < visible; ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < D; ++d) {
            dot += static_cast<double>(qkv[(b * T + i) * ld + h * D + d]) *
                   qkv[(b * T + j) * ld + C + h * D + d];
          }
          s[static_cast<size_t>(j)] = scale * dot;
          max = std::max(max, s[static_cast<size_t>(j)]);
        }
        double sum = 0.0;
        for (double x : s) sum += std::exp(x - max);
        lse[static_cast<size_t>((b * c.heads + h) * T + i)] =
            visible == 0 ? -INFINITY : static_cast<float>(max + std::log(sum));
      }
    }
  }
  return lse;
}

TEST_F(CudaNnKernelTest, AttentionForwardAndBackwardMatchCpuOp) {
  const std::vector<AttentionCase> cases = {
      {2, 37, 3, 40, true, {}},          // T not a multiple of 32, D of 2 register chunks
      {2, 37, 3, 40, false, {}},         //
      {3, 33, 2, 8, true, {33, 0, 17}},  // padding, incl. a sequence with no key
      {3, 33, 2, 8, false, {5, 0, 33}},  //
      {1, 70, 2, 64, true, {50}},        // three key tiles, padded queries attend to 50 keys
      {1, 9, 1, 256, false, {}},         // the largest head_dim
      {2, 5, 4, 100, true, {4, 5}},      // D of 4 chunks, partly filled
  };
  uint32_t seed = 120;
  for (const AttentionCase& c : cases) {
    for (DType dtype : kFloatDtypes) {
      SCOPED_TRACE(describe(c) + " " + dtype_name(dtype));
      const int64_t C = c.heads * c.head_dim;
      const Shape qkv_shape{c.batch, c.seq, 3 * C};
      const Shape out_shape{c.batch, c.seq, C};
      Tensor qkv = random_host(qkv_shape, ++seed, -1.5f, 1.5f, dtype, true);
      Tensor lengths = c.lengths.empty() ? Tensor() : host_ints({c.batch}, c.lengths);
      Tensor out = ops::attention(qkv, c.heads, c.causal, lengths);
      Tensor seed_grad = random_host(out_shape, ++seed, -1.0f, 1.0f, DType::kF32);
      backward_from(out, seed_grad);
      const Tensor cpu_grad = qkv.grad();

      Tensor d_qkv = upload(qkv);
      Tensor d_lengths = c.lengths.empty() ? Tensor() : upload(lengths);
      const int32_t* lengths_ptr = c.lengths.empty() ? nullptr : d_lengths.device_data<int32_t>();
      Tensor d_flag = device_flag();
      Tensor d_out = upload(host_filled(out_shape, dtype, 55.0f));
      Tensor d_lse = device_empty({c.batch, c.heads, c.seq}, DType::kF32);
      ops::cuda::attention_forward(d_qkv.raw_device_data(), d_out.raw_device_data(),
                                   d_lse.device_data<float>(), c.batch, c.seq, C, c.heads, c.causal,
                                   lengths_ptr, d_flag.device_data<int32_t>(), dtype,
                                   stream_->get());
      expect_close(download(d_out).to_vector(), out.to_vector(), dtype, 5e-5, 5e-6, "out");
      expect_close(download(d_lse).to_vector(), reference_lse(c, qkv.to_vector()), DType::kF32,
                   1e-5, 1e-5, "lse");
      EXPECT_EQ(read_int32(d_flag), INT32_MAX);

      // Backward from the upstream gradient in the output's dtype (what the CPU op reads).
      Tensor d_dout = upload(dtype == DType::kF32 ? seed_grad : converted(seed_grad, dtype));
      Tensor d_delta = device_empty({c.batch * c.heads * c.seq}, DType::kF32);
      Tensor d_grad = upload(host_filled(qkv_shape, dtype, 66.0f));
      ops::cuda::attention_backward(
          d_qkv.raw_device_data(), d_out.raw_device_data(), d_lse.device_data<float>(),
          d_dout.raw_device_data(), d_delta.device_data<float>(), d_grad.raw_device_data(), c.batch,
          c.seq, C, c.heads, c.causal, lengths_ptr, dtype, dtype, false, stream_->get());
      const std::vector<float> want_grad = cpu_grad.to_vector();
      expect_close(download(d_grad).to_vector(), want_grad, dtype, 5e-4, 2e-5, "dqkv");

      // An fp32 sink, accumulating over random values.
      Tensor previous = random_host(qkv_shape, ++seed, -1.0f, 1.0f, DType::kF32);
      Tensor d_grad32 = upload(previous);
      ops::cuda::attention_backward(d_qkv.raw_device_data(), d_out.raw_device_data(),
                                    d_lse.device_data<float>(), d_dout.raw_device_data(),
                                    d_delta.device_data<float>(), d_grad32.raw_device_data(),
                                    c.batch, c.seq, C, c.heads, c.causal, lengths_ptr, dtype,
                                    DType::kF32, true, stream_->get());
      const std::vector<float> before = previous.to_vector();
      std::vector<float> want_accumulated(before.size());
      for (size_t i = 0; i < before.size(); ++i) want_accumulated[i] = before[i] + want_grad[i];
      // The CPU gradient was rounded to the storage type: one ulp of it on top.
      std::vector<float> got_accumulated = download(d_grad32).to_vector();
      for (size_t i = 0; i < before.size(); ++i) {
        const double tol = 5e-4 * std::fabs(want_grad[i]) + 2e-5 + 1e-6 * std::fabs(before[i]) +
                           (dtype == DType::kF32 ? 0.0 : one_ulp_tolerance(dtype, want_grad[i]));
        if (!(std::fabs(got_accumulated[i] - want_accumulated[i]) <= tol)) {
          ADD_FAILURE() << "accumulated dqkv element " << i << ": got " << got_accumulated[i]
                        << ", want " << want_accumulated[i];
          break;
        }
      }
    }
  }
}

TEST_F(CudaNnKernelTest, AttentionFlagsTheFirstBadValidLength) {
  const int64_t batch = 3, seq = 6, heads = 1, C = 8;
  Tensor qkv = random_host({batch, seq, 3 * C}, 131, -1.0f, 1.0f, DType::kF32);
  Tensor lengths = host_ints({batch}, {3, static_cast<int32_t>(seq) + 1, -1});
  EXPECT_NE(invalid_argument_message([&] {
              ops::attention(qkv, heads, true, lengths);
            }).find("valid_lengths[1] = 7 is outside [0, 6]"),
            std::string::npos);
  Tensor d_qkv = upload(qkv);
  Tensor d_lengths = upload(lengths);
  Tensor d_flag = device_flag();
  Tensor d_out = device_empty({batch, seq, C}, DType::kF32);
  Tensor d_lse = device_empty({batch, heads, seq}, DType::kF32);
  ops::cuda::attention_forward(d_qkv.raw_device_data(), d_out.raw_device_data(),
                               d_lse.device_data<float>(), batch, seq, C, heads, true,
                               d_lengths.device_data<int32_t>(), d_flag.device_data<int32_t>(),
                               DType::kF32, stream_->get());
  EXPECT_EQ(read_int32(d_flag), 1);
}

// ---------------------------------------------------------------------------- argument checks
// These throw before anything is enqueued, so they run without a GPU.

TEST(CudaNnKernelArguments, RejectWhatTheKernelsCannotDoBeforeEnqueueing) {
  cudaStream_t stream = nullptr;
  EXPECT_NE(invalid_argument_message([&] {
              ops::cuda::attention_forward(nullptr, nullptr, nullptr, 1, 4, 264, 1, true, nullptr,
                                           nullptr, DType::kF32, stream);
            }).find("head_dim D = channels / n_head = 264 exceeds 256"),
            std::string::npos);
  EXPECT_NE(invalid_argument_message([&] {
              ops::cuda::attention_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1,
                                            4, 64, 2, false, nullptr, DType::kF16, DType::kBF16,
                                            false, stream);
            }).find("must be qkv's dtype (fp16) or fp32"),
            std::string::npos);
  EXPECT_NE(invalid_argument_message([&] {
              ops::cuda::attention_forward(nullptr, nullptr, nullptr, 1, 4, 66, 4, false, nullptr,
                                           nullptr, DType::kF32, stream);
            }).find("must be a multiple of n_head = 4"),
            std::string::npos);
  EXPECT_NE(invalid_argument_message([&] {
              ops::cuda::cross_entropy_forward(nullptr, nullptr, 3, 0, -100, DType::kF32, nullptr,
                                               nullptr, nullptr, nullptr, nullptr, nullptr, stream);
            }).find("vocab = 0"),
            std::string::npos);
  EXPECT_NE(invalid_argument_message([&] {
              ops::cuda::cross_entropy_backward(nullptr, nullptr, nullptr, nullptr, nullptr,
                                                nullptr, 3, 10, -100, DType::kI32, nullptr,
                                                DType::kF32, false, stream);
            }).find("the logits' dtype int32 is not supported"),
            std::string::npos);
  EXPECT_NE(invalid_argument_message([&] {
              ops::cuda::embedding_forward(nullptr, nullptr, nullptr, 10, 4, 3, DType::kI32,
                                           nullptr, stream);
            }).find("is not supported (expected fp32, fp16 or bf16)"),
            std::string::npos);
  EXPECT_NE(invalid_argument_message([&] {
              ops::cuda::embedding_forward(nullptr, nullptr, nullptr, 10, 4, 3, DType::kF32,
                                           nullptr, stream);
            }).find("first_bad_position must be a device int32"),
            std::string::npos);
}

}  // namespace
}  // namespace zs
