// The model ops with a CUDA path of their own kernels — cross_entropy (and count_valid_targets),
// embedding and attention (both overloads) — on cuda:N against the same ops on the CPU (label gpu;
// skips with "no CUDA device: skipped (compiled only)" where there is no GPU): the same random
// inputs on a CpuAllocator and on a CudaAllocator, forward and backward through zs autograd,
// outputs and gradients compared; the data errors (a target, id or length out of range), found on
// the device and read back by the op, throw the CPU op's exact message; the saved tensors are
// charged as on the CPU; and a small GPT-like model (embedding → attention → linear →
// cross_entropy) runs unchanged on both devices.
//
// Tolerances (ops/cuda/nn_kernels.h says why): embedding forward and backward bit for bit;
// cross_entropy's loss and gradient within a few fp32 ulps (block sums, CUDA's expf/logf);
// attention within 5e-5 forward and 5e-4 backward relative (warp dot products, an online softmax,
// another summation order for dK/dV), plus for 16-bit gradients an absolute term for the stored
// output's rounding (plain_attention_backward_tolerance). A 16-bit result may round to the
// neighbouring value, so one ulp of the storage type is added for fp16/bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ops/attention.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/layernorm.h"
#include "ops/linear.h"
#include "runtime/autograd.h"
#include "runtime/memory_tracker.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/op_test.h"

namespace zs {
namespace {

using testing::backward_from;
using testing::CudaOpTest;
using testing::invalid_argument_message;
using testing::kBits;
using testing::kFloatDtypes;
using testing::random_ids;
using testing::random_targets;
using testing::ScopedCudnnSwitch;
using testing::storage_ulp;
using testing::Tolerance;

constexpr Tolerance kCrossEntropyLoss{false, 1e-5, 1e-6};
constexpr Tolerance kCrossEntropyGrad{false, 2e-5, 1e-9};
// A 16-bit sink written and then added to rounds twice, each rounding of a value that differs by a
// few fp32 ulps from the CPU's: allow one more storage ulp (2^-10 relative for fp16, 2^-7 bf16;
// near zero the subnormal spacing, storage_ulp(dtype, 0): an fp16 gradient of 32.5·2^-24, a tie,
// rounds to 33 then 66 on one device and to 32 then 64 on the other, two spacings apart).
Tolerance accumulated_grad_tolerance(DType dtype) {
  if (dtype == DType::kF32) return kCrossEntropyGrad;
  const double extra = dtype == DType::kF16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
  return Tolerance{false, kCrossEntropyGrad.rel + extra,
                   kCrossEntropyGrad.abs + storage_ulp(dtype, 0.0)};
}
constexpr Tolerance kAttentionForward{false, 5e-5, 5e-6};
constexpr Tolerance kAttentionBackward{false, 5e-4, 2e-5};
// The inputs of AttentionMatchesCpu: qkv uniform in ±kQkvBound; check_op seeds the output's
// gradient dO in ±1.
constexpr float kQkvBound = 1.5f;
// The plain kernel's backward against the CPU's, for 16-bit qkv. Both backwards read the stored
// forward output O, rounded to the 16-bit dtype, in each row's delta_i = Σ_d dO_id·O_id; the two
// forwards' fp32 O differ within kAttentionForward (another summation order — so do two CPU builds:
// an x86-64-baseline build with Eigen's GEMM and a -march=native one with OpenBLAS give the bf16
// T=37 causal gradients 0.004547 and 0.004486 at the element the GPU has 0.004486), so now and
// then one O element rounds to the neighbouring 16-bit value on one device only. That moves
// delta_i by |dO|·ulp(O), and through dS_ij = P_ij·(dP_ij − delta_i) every dQ_i = scale·Σ_j
// dS_ij·K_j (Σ_j P_ij = 1) and every dK_j of the keys row i sees, by up to scale·|dO|·ulp(O)·|q or
// k|: an absolute amount set by the row, not by the gradient element, which cancellation can make
// small (8 bf16 ulps of a 0.0025 element). dV = Pᵀ·dO does not read O. Allowed here: one such
// rounding at the inputs' largest magnitudes (|O| ≤ max|V|), on top of kAttentionBackward and the
// storage ulp of the gradient's own rounding (the H100 run's largest: about an eighth of it).
Tolerance plain_attention_backward_tolerance(DType dtype, int64_t head_dim) {
  if (dtype == DType::kF32) return kAttentionBackward;
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  const double flipped_output = 1.0 * storage_ulp(dtype, kQkvBound);  // max|dO| · ulp(max|O|)
  return Tolerance{false, kAttentionBackward.rel,
                   kAttentionBackward.abs + scale * flipped_output * kQkvBound};
}
// cuDNN rounds the probabilities (forward) and P and dS (backward, before the dV and dK
// products) to the 16-bit dtype: a few storage ulps of the output's scale forward, twice that
// backward, where each gradient sums T such products.
Tolerance cudnn_attention_tolerance(DType dtype, bool backward) {
  const double ulp = dtype == DType::kF16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
  const double ulps = backward ? 8.0 : 4.0;
  return Tolerance{false, ulps * ulp, ulps * ulp};
}
constexpr Tolerance kModel{false, 2e-4, 2e-5};

// Float inputs (random, maybe requiring grad) and integer inputs (given) of one op call.
struct Inputs {
  std::vector<Tensor> floats;
  std::vector<Tensor> ints;
};
using OpFn = std::function<Tensor(const Inputs&)>;

struct FloatSpec {
  Shape shape;
  float lo = -1.0f;
  float hi = 1.0f;
};

class CudaNnOpsTest : public CudaOpTest {
 protected:
  Tensor host_ints(const Shape& shape, const std::vector<int32_t>& values,
                   const std::string& name) {
    Tensor t = Tensor::empty(shape, DType::kI32, host_allocator_, MemoryCategory::kOther, name);
    EXPECT_EQ(static_cast<size_t>(t.numel()), values.size()) << name;
    if (!values.empty()) std::memcpy(t.raw_data(), values.data(), t.nbytes());
    return t;
  }

  // Runs `fn` on the CPU and on the GPU with the same inputs — random float inputs (dtype
  // `dtype`, requiring grad) per `specs`, and the given int32 inputs (undefined ones stay
  // undefined) — then backward from the same random seed gradient, and compares the outputs
  // (`forward_tol`) and every float input's gradient (`backward_tol`).
  void check_op(const std::string& name, DType dtype, const std::vector<FloatSpec>& specs,
                const std::vector<Tensor>& ints, const OpFn& fn, Tolerance forward_tol,
                Tolerance backward_tol) {
    SCOPED_TRACE(name + " " + dtype_name(dtype));
    Inputs host;
    Inputs device;
    uint32_t seed = 31;
    for (const FloatSpec& spec : specs) {
      Tensor x = random_host(spec.shape, seed++, spec.lo, spec.hi, dtype, true);
      device.floats.push_back(to_gpu(x, true));
      host.floats.push_back(x);
    }
    for (const Tensor& t : ints) {
      host.ints.push_back(t);
      device.ints.push_back(t.defined() ? to_gpu(t) : Tensor());
    }
    Tensor y_cpu = fn(host);
    ASSERT_TRUE(y_cpu.requires_grad()) << name;
    Tensor seed_cpu = random_host(y_cpu.shape(), 99, -1.0f, 1.0f, y_cpu.dtype(), false);
    backward_from(y_cpu, seed_cpu);
    current_tape().clear();

    Tensor y_gpu = fn(device);
    ASSERT_TRUE(y_gpu.requires_grad()) << name;
    backward_from(y_gpu, to_gpu(seed_cpu, false));
    current_tape().clear();

    expect_match(y_gpu, y_cpu, forward_tol, name + " forward");
    for (size_t i = 0; i < specs.size(); ++i) {
      expect_match(device.floats[i].grad(), host.floats[i].grad(), backward_tol,
                   name + " gradient of input " + std::to_string(i));
    }
  }

  // Runs `fn` on both devices and expects the same InvalidArgument text (the ops throw the
  // device's data errors with the CPU's message, from the same line of the same function).
  void expect_same_error(const std::string& what, const std::function<void(bool gpu)>& fn) {
    // A throw inside backward leaves the rest of that graph on the tape: drop it after each call.
    const std::string cpu = invalid_argument_message([&] { fn(false); });
    current_tape().clear();
    const std::string gpu = invalid_argument_message([&] { fn(true); });
    current_tape().clear();
    EXPECT_NE(cpu, "<no InvalidArgument thrown>") << what;
    EXPECT_EQ(gpu, cpu) << what;
  }
};

TEST_F(CudaNnOpsTest, CrossEntropyMatchesCpu) {
  const int64_t rows = 67;
  const int64_t vocab = 1031;  // not a multiple of the kernel's block
  for (DType dtype : kFloatDtypes) {
    for (int32_t ignore_index : {ops::kDefaultIgnoreIndex, int32_t{7}}) {
      std::vector<int32_t> values = random_targets(rows, vocab, ignore_index, 62);
      values[3] = 7;
      Tensor targets = host_ints({rows}, values, "targets");
      const std::string name = "cross_entropy ignore_index " + std::to_string(ignore_index);
      check_op(
          name, dtype, {{{rows, vocab}, -6.0f, 6.0f}}, {targets},
          [ignore_index](const Inputs& in) {
            return ops::cross_entropy(in.floats[0], in.ints[0], ignore_index);
          },
          kCrossEntropyLoss, kCrossEntropyGrad);
      // Two losses on the same logits: the second gradient is added into the first's sink.
      check_op(
          name + " twice", dtype, {{{rows, vocab}, -6.0f, 6.0f}}, {targets},
          [ignore_index](const Inputs& in) {
            return ops::add(ops::cross_entropy(in.floats[0], in.ints[0], ignore_index),
                            ops::cross_entropy(in.floats[0], in.ints[0], ignore_index));
          },
          kCrossEntropyLoss, accumulated_grad_tolerance(dtype));
      EXPECT_EQ(ops::count_valid_targets(to_gpu(targets), ignore_index),
                ops::count_valid_targets(targets, ignore_index));
    }
  }
}

TEST_F(CudaNnOpsTest, CrossEntropyWithEveryRowIgnoredIsZeroNotNaN) {
  for (DType dtype : kFloatDtypes) {
    Tensor targets = host_ints({4}, {-100, -100, -100, -100}, "targets");
    check_op(
        "cross_entropy all ignored", dtype, {{{4, 9}}}, {targets},
        [](const Inputs& in) { return ops::cross_entropy(in.floats[0], in.ints[0]); }, kBits,
        kBits);
  }
}

TEST_F(CudaNnOpsTest, CrossEntropyRefusesABadTargetWithTheCpuMessage) {
  Tensor logits = random_host({12, 10}, 3, -1.0f, 1.0f, DType::kF32, true);
  logits.set_name("logits");
  Tensor d_logits = to_gpu(logits, true);
  // Row 5 is the first bad one (row 9 too); -100 is ignored, not bad.
  Tensor targets = host_ints({12}, {1, 2, -100, 3, 4, 13, 5, 6, 7, -1, 8, 9}, "targets");
  Tensor d_targets = to_gpu(targets);
  expect_same_error("cross_entropy", [&](bool gpu) {
    (void)ops::cross_entropy(gpu ? d_logits : logits, gpu ? d_targets : targets);
  });
  const std::string message =
      invalid_argument_message([&] { (void)ops::cross_entropy(d_logits, d_targets); });
  EXPECT_NE(message.find("targets[5] = 13 is out of range [0, 10)"), std::string::npos) << message;
  // A CPU/CUDA mix is refused by name.
  EXPECT_NE(invalid_argument_message([&] {
              (void)ops::cross_entropy(d_logits, targets);
            }).find("every tensor of an op must be on one device"),
            std::string::npos);
  current_tape().clear();
}

TEST_F(CudaNnOpsTest, EmbeddingMatchesCpuBitForBit) {
  const int64_t vocab = 50, cols = 24;
  std::vector<int32_t> values = random_ids(3 * 17, vocab, 5);
  values[4] = values[40] = values[41] = 11;  // a row hit several times
  Tensor ids = host_ints({3, 17}, values, "ids");
  for (DType dtype : kFloatDtypes) {
    check_op(
        "embedding", dtype, {{{vocab, cols}}}, {ids},
        [](const Inputs& in) { return ops::embedding(in.floats[0], in.ints[0]); }, kBits, kBits);
    // The table used twice: the second gradient is added into the first's sink.
    check_op(
        "embedding twice", dtype, {{{vocab, cols}}}, {ids},
        [](const Inputs& in) {
          return ops::add(ops::embedding(in.floats[0], in.ints[0]),
                          ops::embedding(in.floats[0], in.ints[0]));
        },
        kBits, kBits);
  }
}

TEST_F(CudaNnOpsTest, EmbeddingRefusesABadIdWithTheCpuMessage) {
  Tensor table = random_host({8, 4}, 4, -1.0f, 1.0f, DType::kF32, true);
  table.set_name("wte");
  Tensor d_table = to_gpu(table, true);
  Tensor ids = host_ints({2, 3}, {0, 7, 1, 2, 8, -3}, "ids");  // [1, 1] = 8 is the first bad one
  Tensor d_ids = to_gpu(ids);
  expect_same_error("embedding", [&](bool gpu) {
    (void)ops::embedding(gpu ? d_table : table, gpu ? d_ids : ids);
  });
  const std::string message =
      invalid_argument_message([&] { (void)ops::embedding(d_table, d_ids); });
  EXPECT_NE(message.find("ids[1, 1] = 8 (flat position 4"), std::string::npos) << message;

  // Ids overwritten between forward and backward: backward's message, on both devices.
  Tensor good = host_ints({2, 3}, {0, 7, 1, 2, 3, 4}, "ids");
  Tensor d_good = to_gpu(good);
  expect_same_error("embedding backward", [&](bool gpu) {
    const Tensor& t = gpu ? d_table : table;
    const Tensor& i = gpu ? d_good : good;
    Tensor out = ops::embedding(t, i);
    i.copy_from({0, 7, 1, 2, 9, 4});
    backward_from(out, Tensor::zeros(out.shape(), DType::kF32, t.allocator()));
  });
}

struct AttentionCase {
  int64_t batch, seq, heads, head_dim;
  bool causal;
  std::vector<int32_t> lengths;  // empty: the overload without valid_lengths
};

TEST_F(CudaNnOpsTest, AttentionMatchesCpu) {
  const std::vector<AttentionCase> cases = {
      {2, 37, 3, 40, true, {}},          // T not a multiple of 32
      {2, 37, 3, 40, false, {}},         //
      {3, 33, 2, 8, true, {33, 0, 17}},  // padding, incl. a sequence with no key
      {3, 33, 2, 8, false, {5, 0, 33}},  //
      {1, 70, 2, 64, true, {50}},        // three key tiles
  };
  for (const AttentionCase& c : cases) {
    const int64_t C = c.heads * c.head_dim;
    Tensor lengths = c.lengths.empty() ? Tensor() : host_ints({c.batch}, c.lengths, "lengths");
    const std::string name = std::string("attention ") + (c.causal ? "causal" : "bidirectional") +
                             (c.lengths.empty() ? "" : " padded") + " T=" + std::to_string(c.seq);
    const OpFn op = [c](const Inputs& in) {
      return c.lengths.empty() ? ops::attention(in.floats[0], c.heads, c.causal)
                               : ops::attention(in.floats[0], c.heads, c.causal, in.ints[0]);
    };
    for (DType dtype : kFloatDtypes) {
      {
        // The plain kernel (cuDNN would take the unpadded 16-bit cases).
        ScopedCudnnSwitch plain("0");
        check_op(name, dtype, {{{c.batch, c.seq, 3 * C}, -kQkvBound, kQkvBound}}, {lengths}, op,
                 kAttentionForward, plain_attention_backward_tolerance(dtype, c.head_dim));
      }
      if (c.lengths.empty() && dtype != DType::kF32) {
        // cuDNN's fused forward and backward where it takes the shape (else the plain kernel
        // again): cuDNN rounds probabilities to the 16-bit dtype, hence the 16-bit tolerance.
        ScopedCudnnSwitch fused("1");
        check_op(name + " (cuDNN)", dtype, {{{c.batch, c.seq, 3 * C}, -kQkvBound, kQkvBound}},
                 {lengths}, op, cudnn_attention_tolerance(dtype, false),
                 cudnn_attention_tolerance(dtype, true));
      }
    }
  }
}

TEST_F(CudaNnOpsTest, AttentionKeepsTheForwardsLengthsForBackward) {
  // The CPU saves the lengths by value, the CUDA path a copy: changing them after forward
  // changes neither gradient.
  const int64_t B = 2, T = 9, H = 2, D = 8;
  for (bool gpu : {false, true}) {
    SCOPED_TRACE(gpu ? "cuda" : "cpu");
    Tensor qkv = random_host({B, T, 3 * H * D}, 8, -1.0f, 1.0f, DType::kF32, true);
    Tensor lengths = host_ints({B}, {4, 9}, "lengths");
    Tensor seed = random_host({B, T, H * D}, 9, -1.0f, 1.0f, DType::kF32);
    if (gpu) {
      qkv = to_gpu(qkv, true);
      lengths = to_gpu(lengths);
      seed = to_gpu(seed);
    }
    backward_from(ops::attention(qkv, H, true, lengths), seed);
    const std::vector<float> want = qkv.grad().to_vector();
    qkv.grad().fill(0.0f);
    Tensor out = ops::attention(qkv, H, true, lengths);
    lengths.copy_from({9, 1});
    backward_from(out, seed);
    EXPECT_EQ(qkv.grad().to_vector(), want);
    current_tape().clear();
  }
}

TEST_F(CudaNnOpsTest, AttentionRefusesABadLengthWithTheCpuMessage) {
  Tensor qkv = random_host({3, 6, 12}, 6, -1.0f, 1.0f, DType::kF32, true);
  Tensor d_qkv = to_gpu(qkv, true);
  Tensor lengths = host_ints({3}, {5, 7, -1}, "lengths");  // b = 1 is the first bad one
  Tensor d_lengths = to_gpu(lengths);
  for (bool causal : {false, true}) {
    expect_same_error("attention", [&](bool gpu) {
      (void)ops::attention(gpu ? d_qkv : qkv, 2, causal, gpu ? d_lengths : lengths);
    });
  }
  const std::string message =
      invalid_argument_message([&] { (void)ops::attention(d_qkv, 2, true, d_lengths); });
  EXPECT_NE(message.find("valid_lengths[1] = 7 is outside [0, 6]"), std::string::npos) << message;
  current_tape().clear();
}

TEST_F(CudaNnOpsTest, SavedTensorsAreChargedAsOnTheCpu) {
  // Activations recorded by one forward (outputs and saved tensors), per device. The CUDA path
  // saves the same tensors plus, for cross_entropy, its 16-byte count/flag tensor (the divisor
  // stays on the device) and, for attention with lengths, the B int32 lengths copy.
  auto activations_of = [&](bool gpu, const std::function<Tensor()>& forward) {
    MemoryTracker& tracker = gpu ? device_tracker_ : host_tracker_;
    const size_t before = tracker.current(MemoryCategory::kActivations);
    Tensor out = forward();
    const size_t after = tracker.current(MemoryCategory::kActivations);
    current_tape().clear();
    return after - before;
  };
  Tensor logits = random_host({6, 11}, 1, -1.0f, 1.0f, DType::kF32, true);
  Tensor targets = host_ints({6}, {1, 2, 3, -100, 4, 5}, "targets");
  Tensor d_logits = to_gpu(logits, true);
  Tensor d_targets = to_gpu(targets);
  EXPECT_EQ(activations_of(true, [&] { return ops::cross_entropy(d_logits, d_targets); }),
            activations_of(false, [&] { return ops::cross_entropy(logits, targets); }) + 16);

  Tensor table = random_host({7, 5}, 2, -1.0f, 1.0f, DType::kBF16, true);
  Tensor ids = host_ints({4}, {1, 6, 1, 0}, "ids");
  Tensor d_table = to_gpu(table, true);
  Tensor d_ids = to_gpu(ids);
  EXPECT_EQ(activations_of(true, [&] { return ops::embedding(d_table, d_ids); }),
            activations_of(false, [&] { return ops::embedding(table, ids); }));

  Tensor qkv = random_host({2, 5, 24}, 3, -1.0f, 1.0f, DType::kF16, true);
  Tensor lengths = host_ints({2}, {5, 3}, "lengths");
  Tensor d_qkv = to_gpu(qkv, true);
  Tensor d_lengths = to_gpu(lengths);
  EXPECT_EQ(activations_of(true, [&] { return ops::attention(d_qkv, 2, true); }),
            activations_of(false, [&] { return ops::attention(qkv, 2, true); }));
  EXPECT_EQ(activations_of(true, [&] { return ops::attention(d_qkv, 2, false, d_lengths); }),
            activations_of(false, [&] { return ops::attention(qkv, 2, false, lengths); }) +
                2 * sizeof(int32_t));
}

// A small GPT-like model written once runs unchanged on both devices: token + position
// embeddings → layernorm → fused QKV linear → causal attention (with padding) → output
// projection → residual → layernorm → tied LM head (the token table again) → cross_entropy,
// forward and backward, loss and every parameter gradient compared.
TEST_F(CudaNnOpsTest, AGptLikeModelRunsUnchangedOnCuda) {
  const int64_t B = 2, T = 12, V = 40, C = 32, H = 4;
  struct Model {
    Tensor wte, wpe, ln1_g, ln1_b, w_qkv, b_qkv, w_o, b_o, ln2_g, ln2_b;
    Tensor tokens, positions, lengths, targets;
  };
  auto forward = [&](const Model& m) {
    Tensor x = ops::add(ops::embedding(m.wte, m.tokens), ops::embedding(m.wpe, m.positions));
    Tensor qkv = ops::linear(ops::layernorm(x, m.ln1_g, m.ln1_b, 1e-5f), m.w_qkv, m.b_qkv);
    Tensor att = ops::attention(qkv, H, true, m.lengths);
    x = ops::add(x, ops::linear(att, m.w_o, m.b_o));
    Tensor logits = ops::linear(ops::layernorm(x, m.ln2_g, m.ln2_b, 1e-5f), m.wte);
    return ops::cross_entropy(logits.view({B * T, V}), m.targets);
  };
  std::vector<int32_t> positions;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) positions.push_back(static_cast<int32_t>(t));
  }
  std::vector<int32_t> targets = random_ids(B * T, V, 31);
  for (int64_t t = 9; t < T; ++t) targets[static_cast<size_t>(T + t)] = -100;  // padding
  auto make = [&](bool gpu) {
    auto param = [&](const Shape& shape, uint32_t seed, float lo, float hi) {
      Tensor host = random_host(shape, seed, lo, hi, DType::kF32, true);
      return gpu ? to_gpu(host, true) : host;
    };
    auto ints = [&](const Shape& shape, const std::vector<int32_t>& values, const char* name) {
      Tensor host = host_ints(shape, values, name);
      return gpu ? to_gpu(host) : host;
    };
    Model m;
    m.wte = param({V, C}, 1, -0.5f, 0.5f);
    m.wpe = param({T, C}, 2, -0.1f, 0.1f);
    m.ln1_g = param({C}, 3, 0.8f, 1.2f);
    m.ln1_b = param({C}, 4, -0.1f, 0.1f);
    m.w_qkv = param({3 * C, C}, 5, -0.3f, 0.3f);
    m.b_qkv = param({3 * C}, 6, -0.1f, 0.1f);
    m.w_o = param({C, C}, 7, -0.3f, 0.3f);
    m.b_o = param({C}, 8, -0.1f, 0.1f);
    m.ln2_g = param({C}, 9, 0.8f, 1.2f);
    m.ln2_b = param({C}, 10, -0.1f, 0.1f);
    m.tokens = ints({B, T}, random_ids(B * T, V, 30), "tokens");
    m.positions = ints({B, T}, positions, "positions");
    m.lengths = ints({B}, {static_cast<int32_t>(T), 9}, "lengths");
    m.targets = ints({B * T}, targets, "targets");
    return m;
  };
  Model cpu = make(false);
  Model gpu = make(true);
  // One graph on the tape at a time: forward and backward on the CPU, then on the GPU.
  Tensor loss_cpu = forward(cpu);
  backward(loss_cpu);
  Tensor loss_gpu = forward(gpu);
  backward(loss_gpu);
  expect_match(loss_gpu, loss_cpu, kModel, "loss");
  const std::vector<std::pair<const char*, std::pair<Tensor, Tensor>>> grads = {
      {"wte", {gpu.wte, cpu.wte}},       {"wpe", {gpu.wpe, cpu.wpe}},
      {"ln1_g", {gpu.ln1_g, cpu.ln1_g}}, {"ln1_b", {gpu.ln1_b, cpu.ln1_b}},
      {"w_qkv", {gpu.w_qkv, cpu.w_qkv}}, {"b_qkv", {gpu.b_qkv, cpu.b_qkv}},
      {"w_o", {gpu.w_o, cpu.w_o}},       {"b_o", {gpu.b_o, cpu.b_o}},
      {"ln2_g", {gpu.ln2_g, cpu.ln2_g}}, {"ln2_b", {gpu.ln2_b, cpu.ln2_b}}};
  for (const auto& [name, pair] : grads) {
    expect_match(pair.first.grad(), pair.second.grad(), kModel, std::string("gradient of ") + name);
  }
}

}  // namespace
}  // namespace zs
