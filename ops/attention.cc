// attention: forward and backward of fused multi-head self-attention on fp32 data, one
// (batch, head) pair at a time, with the per-row softmax math from ops/math/softmax.h.
//
// Layout. A head's Q, K and V are strided sub-matrices of qkv ([T, D] with leading dimension 3C)
// and its output is a [T, D] sub-matrix of out (leading dimension C), so every GEMM addresses
// them in place through cpu::sgemm's leading dimensions; nothing is copied per head.
//
// Forward, for each pair (OpenMP over the B·H pairs), in blocks of kQueryBlock query rows:
//   S = scale · Q_blk · K^T            (rows × keys, in the thread's workspace)
//   P = row softmax of S over the visible prefix of each row, zeros after it; lse saved per row
//   O_blk = P · V                      (written straight into out's columns)
// Backward, for each pair, in the same blocks (same GEMM shapes, so S is recomputed bit for bit):
//   P = exp(S − lse),  dP = dO_blk · V^T,  dS = P ⊙ (dP − rowsum(dO ⊙ O))
//   dQ_blk = scale · dS · K,  dK += scale · dS^T · Q_blk,  dV += P^T · dO_blk
// into the q, k and v columns of qkv's gradient. dQ rows are written once per pair; dK and dV sum
// over the query blocks in a fixed order (zero-filled first unless the sink accumulates).
//
// Masking. `keys` = the columns a block computes: all valid keys, or for a causal block only keys
// < the block's last row + 1 (the upper triangle beyond the block is skipped: about half the
// FLOPs for long causal sequences). Within the block each row's visible prefix comes from
// math::masked_row_length; masked entries are exact zeros in P, so changing a future token never
// changes an earlier output (0 · v adds nothing).
//
// Workspace (category workspace, fp32), with team = min(intra_op_threads(), B·H) threads (fewer
// for small problems, see pair_team) and rows = min(T, kQueryBlock):
//   forward peak:  team · rows · T · 4 bytes (one score block per thread),
//   backward peak: team · 2 · rows · T · 4 bytes (P and dP/dS blocks per thread),
// both <= team · T · T · 4 bytes per pass — never B·H·T·T. Plus, for fp16/bf16 only, the fp32
// staging copies made by as_f32 (qkv, out, dout) and of the output / gradient being written, and,
// when no grad is recorded, the lse (B·H·T floats), which then is scratch rather than saved.
//
// Determinism: each pair is computed by one thread with single-threaded GEMMs of shapes that
// depend only on (T, D, C, mask), and pairs write disjoint columns, so the results are bitwise
// independent of the thread count.
//
// On a device (cuda:N) the same op, under the same autograd record, calls its device's kernels
// (ops/device_ops.h; on CUDA ops/cuda/attention_entries.cc): ops/cuda/nn_kernels.h's fused
// kernels (one warp per query row, online softmax over key tiles; the backward recomputes the
// probabilities from the saved lse), on the stream of the tensors' allocator
// (ops/cuda/context.h). Without valid_lengths the forward first tries cuDNN's
// fused flash attention (ops/cuda/cudnn_attention.h: fp16/bf16, head_dim a multiple of 8 up to
// 128, compute capability >= 8.0, cuDNN >= 8.9, not disabled by ZS_CUDNN_ATTENTION=0), which
// writes the same out and lse (natural-log Σ exp of the visible scaled scores) in place; where it
// declines, the plain kernel runs. Padding always stays on the plain kernels. The backward is
// cuDNN's fused backward (same header) where the forward was cuDNN's (the closure records it), the
// sink has qkv's dtype (overwritten, or added to through a staging copy and a second kernel) and
// cuDNN takes the graph; otherwise the plain kernel, e.g. for an fp32 sink, which it writes
// without rounding through 16 bits. Either backward works from either forward: both only need the
// lse's meaning, which the forwards share. Saved, as here: qkv and the output (handles), the lse
// (fp32 [B, H, T], activations) and the lengths by value — on the device, a copy of valid_lengths
// (int32 [B], activations, a device-to-device copy on the op's stream), so that changing the
// caller's lengths before backward cannot change the gradient. No fp32 staging: the kernels read
// and write 16-bit storage themselves, and qkv's gradient is written in the sink's dtype. With
// valid_lengths the forward kernel flags the first sequence whose length is outside [0, T]; the op
// reads that flag back once (one 4-byte download on the op's stream: a host sync, the host waits
// for the forward) and throws the CPU's message (reading the offending length, one more 4-byte
// download, on that error path only). Without valid_lengths there is nothing to check and no sync.
// The kernels hold at most kAttentionMaxHeadDim (256) values of a head per lane group: a larger
// head_dim is refused by the launcher with InvalidArgument (the CPU op has no such limit).
#include "ops/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <vector>

#include "ops/cpu/gemm.h"
#include "ops/device_ops.h"
#include "ops/math/softmax.h"
#include "ops/op_utils.h"

namespace zs::ops {

using detail::as_f32;

namespace {

// Query rows per block: bounds the per-thread workspace at kQueryBlock · T floats per buffer and
// lets causal blocks skip the keys after their last row. Large enough to keep the GEMMs efficient.
constexpr int64_t kQueryBlock = 64;
// Multiply-adds of work per thread below which the pairs run on fewer threads (see pair_team).
constexpr int64_t kMinMacsPerThread = int64_t{1} << 20;

struct AttentionDims {
  int64_t batch = 0;
  int64_t seq = 0;       // T
  int64_t channels = 0;  // C
  int64_t heads = 0;     // H
  int64_t head_dim = 0;  // D
  float scale = 1.0f;    // 1 / sqrt(D)
  int64_t qkv_ld() const { return 3 * channels; }
  int64_t pairs() const { return batch * heads; }
  int64_t block_rows() const { return std::min(seq, kQueryBlock); }
};

AttentionDims check_attention_args(const Tensor& qkv, int64_t n_head) {
  detail::check_float_input("attention", "qkv", qkv);
  ZS_CHECK(qkv.dim() == 3, "attention: qkv ", qkv.describe(),
           " must be 3-D [batch, seq, 3 * channels]; reshape the fused QKV projection to that");
  ZS_CHECK(n_head >= 1, "attention: n_head must be at least 1, got ", n_head);
  const int64_t width = qkv.size(2);
  ZS_CHECK(width > 0 && width % (3 * n_head) == 0, "attention: the last dim of qkv ",
           qkv.describe(), " must be a positive multiple of 3 * n_head = ", 3 * n_head,
           " ([q | k | v], each split into ", n_head, " heads); got ", width);
  AttentionDims dims;
  dims.batch = qkv.size(0);
  dims.seq = qkv.size(1);
  dims.channels = width / 3;
  dims.heads = n_head;
  dims.head_dim = dims.channels / n_head;
  dims.scale = 1.0f / std::sqrt(static_cast<float>(dims.head_dim));
  return dims;
}

// valid_lengths' own checks (device, dtype, shape), before its values are read.
void check_lengths_tensor(const Tensor& valid_lengths, const AttentionDims& dims) {
  detail::check_supported_device("attention", valid_lengths);
  ZS_CHECK(valid_lengths.dtype() == DType::kI32, "attention: valid_lengths ",
           valid_lengths.describe(), " must be int32");
  ZS_CHECK(valid_lengths.dim() == 1 && valid_lengths.size(0) == dims.batch,
           "attention: valid_lengths ", valid_lengths.describe(), " must be [", dims.batch,
           "], one length per sequence of qkv");
}

// The CPU's message for valid_lengths[b] = length outside [0, T].
void check_length(const AttentionDims& dims, int64_t b, int32_t length) {
  ZS_CHECK(length >= 0 && length <= dims.seq, "attention: valid_lengths[", b, "] = ", length,
           " is outside [0, ", dims.seq, "] (the sequence length of qkv)");
}

// The valid key count of every sequence: T without padding, else valid_lengths checked.
std::vector<int64_t> check_valid_lengths(const Tensor& valid_lengths, const AttentionDims& dims) {
  std::vector<int64_t> lengths(static_cast<size_t>(dims.batch), dims.seq);
  if (!valid_lengths.defined()) return lengths;
  detail::check_cpu("attention", valid_lengths);
  check_lengths_tensor(valid_lengths, dims);
  const int32_t* values = valid_lengths.data<int32_t>();
  for (int64_t b = 0; b < dims.batch; ++b) {
    check_length(dims, b, values[b]);
    lengths[static_cast<size_t>(b)] = values[b];
  }
  return lengths;
}

// Threads that share the pairs: never more than there are pairs (each thread owns a workspace),
// and one thread for small problems, where waking a team costs more than it saves (on a loaded
// machine a sleeping OpenMP worker can take a scheduler tick, ~ms, to join).
int pair_team(const AttentionDims& dims) {
  const int64_t macs = 2 * dims.pairs() * dims.seq * dims.seq * dims.head_dim;  // Q·K^T and P·V
  const int64_t by_size = std::max<int64_t>(1, macs / kMinMacsPerThread);
  return static_cast<int>(std::min<int64_t>({cpu::intra_op_threads(), dims.pairs(), by_size}));
}

// Runs body(pair, thread) for every pair on `team` OpenMP threads. Each thread's GEMMs run
// single-threaded (the parallelism is over pairs, and this keeps results independent of the
// thread count). An exception cannot cross an OpenMP region: the first one is rethrown here.
template <typename Body>
void for_each_pair(int64_t pairs, int team, const Body& body) {
  std::exception_ptr error;
#pragma omp parallel num_threads(team)
  {
    cpu::IntraOpThreadsScope single_threaded_gemm(1);
    const int thread = omp_get_thread_num();
#pragma omp for schedule(static)
    for (int64_t pair = 0; pair < pairs; ++pair) {
      try {
        body(pair, thread);
      } catch (...) {
#pragma omp critical(zs_attention_error)
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

// Keys a query block [r0, r1) computes: the valid ones, and for causal blocks only those < r1.
int64_t block_keys(int64_t r1, bool causal, int64_t valid) {
  return causal ? std::min(r1, valid) : valid;
}

// One pair's forward. `scores` is a block_rows × T workspace (leading dimension T).
void forward_pair(const AttentionDims& dims, bool causal, int64_t valid, const float* qkv,
                  float* out, float* lse, int64_t b, int64_t h, float* scores) {
  const int64_t T = dims.seq, C = dims.channels, D = dims.head_dim, ld = dims.qkv_ld();
  const float* q = qkv + b * T * ld + h * D;
  const float* k = q + C;
  const float* v = q + 2 * C;
  float* o = out + b * T * C + h * D;
  float* row_lse = lse + (b * dims.heads + h) * T;
  for (int64_t r0 = 0; r0 < T; r0 += kQueryBlock) {
    const int64_t r1 = std::min(T, r0 + kQueryBlock);
    const int64_t rows = r1 - r0;
    const int64_t keys = block_keys(r1, causal, valid);
    cpu::sgemm(false, true, rows, keys, D, dims.scale, q + r0 * ld, ld, k, ld, 0.0f, scores, T);
    for (int64_t i = 0; i < rows; ++i) {
      float* row = scores + i * T;
      const int64_t visible = math::masked_row_length(r0 + i, causal, valid);
      row_lse[r0 + i] = math::softmax_row_inplace(row, visible);
      std::fill(row + visible, row + keys, 0.0f);
    }
    // keys == 0 (an all-padding sequence): sgemm with k = 0 and beta = 0 writes zeros.
    cpu::sgemm(false, false, rows, D, keys, 1.0f, scores, T, v, ld, 0.0f, o + r0 * C, C);
  }
}

// One pair's backward. `probs` and `dscores` are block_rows × T workspaces (leading dimension T).
// dqkv gets this pair's q, k and v columns: dQ overwritten (or added to if accumulate), dK and dV
// zero-filled first unless accumulate.
void backward_pair(const AttentionDims& dims, bool causal, int64_t valid, const float* qkv,
                   const float* out, const float* lse, const float* dout, float* dqkv,
                   bool accumulate, int64_t b, int64_t h, float* probs, float* dscores) {
  const int64_t T = dims.seq, C = dims.channels, D = dims.head_dim, ld = dims.qkv_ld();
  const int64_t base = b * T * ld + h * D;
  const float* q = qkv + base;
  const float* k = q + C;
  const float* v = q + 2 * C;
  float* dq = dqkv + base;
  float* dk = dq + C;
  float* dv = dq + 2 * C;
  const float* o = out + b * T * C + h * D;
  const float* dout_head = dout + b * T * C + h * D;
  const float* row_lse = lse + (b * dims.heads + h) * T;
  if (!accumulate) {
    for (int64_t t = 0; t < T; ++t) {
      std::fill(dk + t * ld, dk + t * ld + D, 0.0f);
      std::fill(dv + t * ld, dv + t * ld + D, 0.0f);
    }
  }
  for (int64_t r0 = 0; r0 < T; r0 += kQueryBlock) {
    const int64_t r1 = std::min(T, r0 + kQueryBlock);
    const int64_t rows = r1 - r0;
    const int64_t keys = block_keys(r1, causal, valid);
    // P = exp(S − lse): the same GEMM as the forward, so S is the same bits.
    cpu::sgemm(false, true, rows, keys, D, dims.scale, q + r0 * ld, ld, k, ld, 0.0f, probs, T);
    // dP = dO · V^T.
    cpu::sgemm(false, true, rows, keys, D, 1.0f, dout_head + r0 * C, C, v, ld, 0.0f, dscores, T);
    for (int64_t i = 0; i < rows; ++i) {
      float* p_row = probs + i * T;
      float* ds_row = dscores + i * T;
      const int64_t visible = math::masked_row_length(r0 + i, causal, valid);
      const float row_lse_i = row_lse[r0 + i];
      const float delta = math::row_dot(dout_head + (r0 + i) * C, o + (r0 + i) * C, D);
      for (int64_t j = 0; j < visible; ++j) {
        p_row[j] = math::softmax_prob_from_lse(p_row[j], row_lse_i);
        ds_row[j] = math::softmax_backward(p_row[j], ds_row[j], delta);
      }
      std::fill(p_row + visible, p_row + keys, 0.0f);
      std::fill(ds_row + visible, ds_row + keys, 0.0f);
    }
    // dQ_blk = scale · dS · K (k = keys; keys == 0 writes zeros unless accumulating).
    cpu::sgemm(false, false, rows, D, keys, dims.scale, dscores, T, k, ld, accumulate ? 1.0f : 0.0f,
               dq + r0 * ld, ld);
    // dK[0, keys) += scale · dS^T · Q_blk;  dV[0, keys) += P^T · dO_blk.
    cpu::sgemm(true, false, keys, D, rows, dims.scale, dscores, T, q + r0 * ld, ld, 1.0f, dk, ld);
    cpu::sgemm(true, false, keys, D, rows, 1.0f, probs, T, dout_head + r0 * C, C, 1.0f, dv, ld);
  }
}

// What a forward saves for backward: qkv, the output and the lse (handles, no copies), the shape,
// and the valid lengths — on the CPU by value, on a device as a device copy (device_lengths).
struct Saved {
  Tensor qkv;
  Tensor out;
  Tensor lse;
  AttentionDims dims;
  bool causal = false;
  std::vector<int64_t> lengths;  // CPU
  Tensor device_lengths;         // device: int32 [B], or undefined without padding
  bool fused = false;            // device: the forward was the library's fused one
};

detail::AttentionShape shape_of(const Saved& saved) {
  return {saved.dims.batch, saved.dims.seq, saved.dims.channels, saved.dims.heads, saved.causal};
}

// ---- The CPU: fp32 staging (as_f32) and the per-pair loops above.

void forward(const Tensor& qkv, const Tensor& out, const Tensor& lse, const Saved& saved) {
  const AttentionDims& dims = saved.dims;
  const bool causal = saved.causal;
  const std::vector<int64_t>& lengths = saved.lengths;
  const Shape& out_shape = out.shape();
  if (out.numel() > 0) {
    Tensor qkv32 = as_f32(qkv);
    Tensor out32 = qkv.dtype() == DType::kF32
                       ? out
                       : detail::new_workspace(out_shape, qkv, "attention fp32 out");
    const int team = pair_team(dims);
    const int64_t block_floats = dims.block_rows() * dims.seq;
    Tensor scores = detail::new_workspace({team, block_floats}, qkv, "attention scores");
    const float* qkv_data = qkv32.data<float>();
    float* out_data = out32.data<float>();
    float* lse_data = lse.data<float>();
    float* scores_data = scores.data<float>();
    for_each_pair(dims.pairs(), team, [&](int64_t pair, int thread) {
      const int64_t b = pair / dims.heads, h = pair % dims.heads;
      forward_pair(dims, causal, lengths[static_cast<size_t>(b)], qkv_data, out_data, lse_data, b,
                   h, scores_data + thread * block_floats);
    });
    if (qkv.dtype() != DType::kF32) detail::store_f32(out, out_data);
  }
}

void backward(const Saved& saved, BackwardContext& ctx) {
  const Tensor& qkv = saved.qkv;
  const Tensor& out = saved.out;
  const Tensor& lse = saved.lse;
  const AttentionDims& dims = saved.dims;
  const bool causal = saved.causal;
  const std::vector<int64_t>& lengths = saved.lengths;
  GradSink sink = ctx.grad_input(0);
  Tensor dout = ctx.grad_output(0);
  if (!sink || !dout.defined()) return;
  auto dqkv = detail::f32_grad_buffer(sink, qkv);
  if (qkv.numel() == 0) {
    detail::finish_grad(sink, dqkv);
    return;
  }
  Tensor qkv32 = as_f32(qkv);
  Tensor out32 = as_f32(out);
  Tensor dout32 = as_f32(dout);
  const int team = pair_team(dims);
  const int64_t block_floats = dims.block_rows() * dims.seq;
  Tensor scratch = detail::new_workspace({team, 2, block_floats}, qkv, "attention backward scores");
  const float* qkv_data = qkv32.data<float>();
  const float* out_data = out32.data<float>();
  const float* lse_data = lse.data<float>();
  const float* dout_data = dout32.data<float>();
  float* dqkv_data = dqkv.buffer.data<float>();
  float* scratch_data = scratch.data<float>();
  const bool accumulate = dqkv.accumulate;
  for_each_pair(dims.pairs(), team, [&](int64_t pair, int thread) {
    const int64_t b = pair / dims.heads, h = pair % dims.heads;
    float* probs = scratch_data + thread * 2 * block_floats;
    backward_pair(dims, causal, lengths[static_cast<size_t>(b)], qkv_data, out_data, lse_data,
                  dout_data, dqkv_data, accumulate, b, h, probs, probs + block_floats);
  });
  detail::finish_grad(sink, dqkv);
}

// ---- On a device (ops/device_ops.h).

// The forward: the library's fused forward without padding where it applies, else the plain
// kernel, which checks the lengths (flag read back once). Fills saved.device_lengths and .fused.
void forward_on_device(const Tensor& qkv, const Tensor& valid_lengths, const Tensor& out,
                       const Tensor& lse, bool record, Saved& saved) {
  const detail::DeviceOps& device = detail::device_ops(qkv, "attention");
  const AttentionDims& dims = saved.dims;
  const detail::AttentionShape shape = shape_of(saved);
  // The lengths backward uses: a copy of the caller's (the CPU saves them by value). Copied
  // before the forward on the same stream, so both kernels read the same values.
  Tensor lengths;
  if (valid_lengths.defined() && record) {
    lengths = detail::new_output({dims.batch}, DType::kI32, qkv, "attention valid lengths");
    if (dims.batch > 0) device.copy_bytes("attention", valid_lengths, lengths);
  } else if (valid_lengths.defined()) {
    lengths = valid_lengths;
  }
  // The kernel checks the lengths only when it has rows to compute (seq > 0; channels > 0
  // here), so flag only then; an empty sequence dimension is checked on the host below.
  const bool kernel_checks = lengths.defined() && dims.batch > 0 && dims.seq > 0;
  Tensor flag;
  if (kernel_checks) flag = detail::new_index_flag(qkv, dims.batch, "attention bad length flag");
  // Without padding, the fused forward where it can (on CUDA cuDNN's: fp16/bf16, supported
  // head_dim and GPU; ops/cuda/cudnn_attention.h); it writes the same out and lse, so the plain
  // backward works from either.
  const bool fused = !valid_lengths.defined() && qkv.numel() > 0 &&
                     device.attention_forward_fused(qkv, out, lse, shape);
  if (!fused) device.attention_forward(qkv, out, lse, shape, lengths, flag);
  if (kernel_checks) {
    const int64_t bad = detail::read_int32(flag)[0];  // the op's one host sync
    if (bad < dims.batch) {
      check_length(dims, bad, detail::read_int32_at(valid_lengths, bad));
      ZS_THROW(InvalidArgument, "attention: the device flagged valid_lengths[", bad,
               "] as outside [0, ", dims.seq,
               "] but it reads back inside: were the lengths overwritten while the op ran?");
    }
  } else if (lengths.defined()) {
    const std::vector<int32_t> values = detail::read_int32(valid_lengths);
    for (int64_t b = 0; b < dims.batch; ++b) check_length(dims, b, values[static_cast<size_t>(b)]);
  }
  saved.device_lengths = lengths;
  saved.fused = fused;
}

// The backward: the library's fused backward where the forward was fused (only then does it try)
// and the sink has qkv's dtype; otherwise the plain kernel, into the sink directly when it has
// qkv's dtype or fp32, else through a fp32 staging buffer.
void backward_on_device(const Saved& saved, BackwardContext& ctx) {
  GradSink sink = ctx.grad_input(0);
  Tensor dout = ctx.grad_output(0);
  if (!sink || !dout.defined()) return;
  const Tensor& qkv = saved.qkv;
  const detail::DeviceOps& device = detail::device_ops(qkv, "attention");
  device.check_tensors("attention",
                       {&qkv, &saved.out, &saved.lse, &saved.device_lengths, &dout, &sink.buffer});
  ZS_CHECK(dout.dtype() == qkv.dtype(), "attention: output gradient ", dout.describe(),
           " does not have qkv's dtype ", dtype_name(qkv.dtype()));
  const detail::AttentionShape shape = shape_of(saved);
  const DType sink_dtype = sink.buffer.dtype();
  if (saved.fused && sink_dtype == qkv.dtype() &&
      device.attention_backward_fused(qkv, saved.out, saved.lse, dout, sink.buffer, shape,
                                      sink.accumulate)) {
    return;
  }
  // The plain kernel writes qkv's dtype or fp32; any other sink dtype goes through fp32.
  const bool direct = sink_dtype == qkv.dtype() || sink_dtype == DType::kF32;
  detail::F32GradBuffer staged;
  if (!direct) staged = detail::f32_grad_buffer(sink, qkv);
  const Tensor& dqkv = direct ? sink.buffer : staged.buffer;
  const bool accumulate = direct ? sink.accumulate : staged.accumulate;
  Tensor delta;
  if (qkv.numel() > 0) {
    const AttentionDims& dims = saved.dims;
    delta = detail::new_workspace({dims.batch * dims.heads * dims.seq}, qkv,
                                  "attention backward delta");
  }
  device.attention_backward(qkv, saved.out, saved.lse, dout, delta, dqkv, shape,
                            saved.device_lengths, accumulate);
  if (!direct) detail::finish_grad(sink, staged);
}

Tensor attention_impl(const Tensor& qkv, int64_t n_head, bool causal, const Tensor& valid_lengths) {
  Saved saved;
  saved.dims = check_attention_args(qkv, n_head);
  saved.causal = causal;
  const AttentionDims& dims = saved.dims;
  detail::check_same_device("attention", {&qkv, &valid_lengths});
  const bool on_device = detail::on_device(qkv);
  if (on_device) {
    // Refused before any fill or download, for what the kernels need.
    detail::device_ops(qkv, "attention").check_tensors("attention", {&qkv, &valid_lengths});
    if (valid_lengths.defined()) check_lengths_tensor(valid_lengths, dims);
  } else {
    saved.lengths = check_valid_lengths(valid_lengths, dims);
  }
  const Shape out_shape{dims.batch, dims.seq, dims.channels};
  const Shape lse_shape{dims.batch, dims.heads, dims.seq};
  Tensor out = detail::new_output(out_shape, qkv.dtype(), qkv, "attention");
  const bool record = needs_grad({&qkv});
  // The lse is saved for backward when recording, otherwise it is scratch.
  Tensor lse = record ? detail::new_output(lse_shape, DType::kF32, qkv, "attention lse")
                      : detail::new_workspace(lse_shape, qkv, "attention lse");
  if (on_device) {
    forward_on_device(qkv, valid_lengths, out, lse, record, saved);
  } else {
    forward(qkv, out, lse, saved);
  }

  if (record) {
    saved.qkv = qkv;
    saved.out = out;
    saved.lse = lse;
    const auto run = on_device ? &backward_on_device : &backward;
    record_op("attention", {&qkv}, {&out}, [saved, run](BackwardContext& ctx) { run(saved, ctx); });
  }
  return out;
}

}  // namespace

Tensor attention(const Tensor& qkv, int64_t n_head, bool causal) {
  return attention_impl(qkv, n_head, causal, Tensor());
}

Tensor attention(const Tensor& qkv, int64_t n_head, bool causal, const Tensor& valid_lengths) {
  return attention_impl(qkv, n_head, causal, valid_lengths);
}

}  // namespace zs::ops
