// The ops' per-device kernel table: what an op does with tensors that are not on the CPU.
//
// The shape of ggml-backend's per-backend op table and of the runtime's own hook table
// (runtime/device_kernels.h): one DeviceOps entry per Device::Kind in DeviceTables<DeviceOps>,
// filled by the device's library when a program links it — on CUDA, ops/cuda/register.cc in
// zs_ops_cuda (its INTERFACE link option pulls that file in; see runtime/device_kernels.h,
// "Registration"). The CPU kernels are the ops' own code: CPU tensors never go through the table,
// as with the runtime's hooks. Shared op code asks device_ops() and never has an `#if` on a
// backend; without an entry (a build without CUDA) an op on such a tensor fails by name.
//
// The entries are kernels, not ops: the shared op (ops/*.cc) checks its arguments, allocates its
// outputs, gradient buffers and fp32 staging (ops/op_utils.h), and records its autograd node once;
// an entry only computes into tensors it is given. So zs_ops_cuda needs nothing from zs_ops (no
// link cycle), and the gradient flow (which input gets dy, in which order sinks are written) is
// the one the CPU path has, by construction.
//
// Conventions: floating operands share one storage dtype unless an entry says otherwise (an entry
// checks that where the shared op does not, naming `op`); compute is fp32 (double where the CPU
// sums in double); `accumulate` adds into the destination (T(float(dst) + value), the CPU's
// rounding) instead of overwriting it. Entries enqueue on the tensors' stream and return
// (ops/cuda/context.h); each checks that its tensors are on one device and stream, naming the op.
//
// Internal to ops/ (namespace zs::ops::detail). Thread-safety: entries are immutable, static
// storage; the functions are as thread-safe as the ops that call them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "runtime/rng.h"
#include "runtime/tensor.h"

namespace zs::ops::detail {

// The per-element term a blocked reduction adds (math::sum_term, math::sum_of_squares_term).
enum class SumTerm { kValue, kSquare };

// An attention call's shape: qkv [batch, seq, 3 · channels] in `heads` heads.
struct AttentionShape {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t channels = 0;
  int64_t heads = 0;
  bool causal = false;
};

struct DeviceOps {
  const char* name = "";  // "cuda", for messages

  // ---- op_utils: dst = src converted to dst's dtype (fp32/fp16/bf16, round to nearest even;
  // equal dtypes copy the bits), src.numel() elements — the device form of the fp32 staging
  // (as_f32, store_f32), of cast, copy_ and of a converted gradient.
  void (*convert)(const char* op, const Tensor& src, const Tensor& dst) = nullptr;

  // ---- elementwise.cc (n = the operands' element count)
  // y = a + b.
  void (*add)(const Tensor& a, const Tensor& b, const Tensor& y) = nullptr;
  // y[r, c] = x[r, c] + bias[c] over [rows, cols].
  void (*add_bias)(const Tensor& x, const Tensor& bias, const Tensor& y, int64_t rows,
                   int64_t cols) = nullptr;
  // dst[c] (+)= float(Σ_r double(dy[r, c])), rows in order: add_bias's bias gradient.
  void (*bias_column_sums)(const Tensor& dy, const Tensor& dst, int64_t rows, int64_t cols,
                           bool accumulate) = nullptr;
  // dst (+)= alpha · x: scale's forward (into y) and backward (into the sink).
  void (*scale)(const Tensor& x, const Tensor& dst, float alpha, bool accumulate) = nullptr;
  // x = alpha · x in place.
  void (*scale_inplace)(const Tensor& x, float alpha) = nullptr;
  // y = a · b; dst (+)= other · dy (mul's gradient of the other input).
  void (*mul)(const Tensor& a, const Tensor& b, const Tensor& y) = nullptr;
  void (*mul_backward)(const Tensor& other, const Tensor& dy, const Tensor& dst,
                       bool accumulate) = nullptr;
  // y = tanh(x); dst (+)= dy · (1 − y²) from the saved output y.
  void (*tanh_forward)(const Tensor& x, const Tensor& y) = nullptr;
  void (*tanh_backward)(const Tensor& y, const Tensor& dy, const Tensor& dst,
                        bool accumulate) = nullptr;
  // dst (+)= dropout of src with the mask of (key, flat index): forward on x, backward on dy.
  void (*dropout)(const Tensor& src, const Tensor& dst, bool accumulate, const RngKey& key,
                  float keep_prob) = nullptr;
  // y (fp32 [1]) = float(Σ term(x_i) / divisor) with the CPU's block layout (kChunk blocks of
  // kReduceLanes lanes in double, added in order): bitwise the CPU's sum.
  void (*reduce_sum)(const char* op, const Tensor& x, SumTerm term, double divisor,
                     const Tensor& y) = nullptr;
  // dst (+)= float(double(scalar[0]) / divisor), scalar a fp32 [1] on the device: the gradient of
  // sum (divisor 1) and mean (divisor n), read without a host round trip.
  void (*fill_from_scalar)(const char* op, const Tensor& scalar, double divisor, const Tensor& dst,
                           bool accumulate) = nullptr;
  // dst (+)= math::sum_of_squares_backward(x_i, dy[0]), dy a fp32 [1].
  void (*sum_of_squares_backward)(const Tensor& x, const Tensor& dy, const Tensor& dst,
                                  bool accumulate) = nullptr;
  // x = value everywhere.
  void (*fill)(const Tensor& x, float value) = nullptr;
  // True when no element of x is NaN or ±inf (waits for the stream: a host sync).
  bool (*all_finite)(const Tensor& x) = nullptr;

  // ---- checks and copies shared by the ops below
  // Checks that every defined tensor (the first must be defined) can be used by this device's
  // kernels together: one device, an allocator of this backend, one stream. Throws
  // InvalidArgument naming `op` and the tensor. For an op whose device path first touches its
  // tensors through the runtime's hooks (fills, downloads), so that a tensor the kernels cannot
  // use is refused for that reason.
  void (*check_tensors)(const char* op, std::initializer_list<const Tensor*> tensors) = nullptr;
  // dst's bytes = src's bytes (src.nbytes() bytes, same size), in stream order.
  void (*copy_bytes)(const char* op, const Tensor& src, const Tensor& dst) = nullptr;

  // ---- gelu.cc: y = gelu(x); dst (+)= dy · gelu'(x), dy fp32 (the upstream gradient staged as
  // on the CPU), dst of x's dtype or fp32.
  void (*gelu_forward)(const Tensor& x, const Tensor& y) = nullptr;
  void (*gelu_backward)(const Tensor& x, const Tensor& dy, const Tensor& dst,
                        bool accumulate) = nullptr;

  // ---- select.cc: x viewed as [outer, size, inner]. y = x[:, index, :]; dst[:, index, :] (+)= dy
  // with the rest of dst zeroed first unless `accumulate` (dy and dst of one dtype).
  void (*select_forward)(const Tensor& x, const Tensor& y, int64_t outer, int64_t size,
                         int64_t inner, int64_t index) = nullptr;
  void (*select_backward)(const Tensor& dy, const Tensor& dst, int64_t outer, int64_t size,
                          int64_t inner, int64_t index, bool accumulate) = nullptr;

  // ---- layernorm.cc over [rows, cols]. The forward writes y and the fp32 [rows] mean and rstd.
  // The backward: dx (of x's dtype or fp32; added into when dx_accumulate) from fp32 dy, and adds
  // the rows' contributions into the fp32 [cols] dgamma and dbeta; dx, dgamma and dbeta may each
  // be undefined (not wanted).
  void (*layernorm_forward)(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                            const Tensor& y, const Tensor& mean, const Tensor& rstd, int64_t rows,
                            int64_t cols, float eps) = nullptr;
  void (*layernorm_backward)(const Tensor& x, const Tensor& dy, const Tensor& gamma,
                             const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                             bool dx_accumulate, const Tensor& dgamma, const Tensor& dbeta,
                             int64_t rows, int64_t cols) = nullptr;

  // ---- embedding.cc. out = table[ids]; the kernel records the first id outside [0, V) in the
  // int32 [1] `flag` (ops/op_utils.h new_index_flag). The backward sums dy's rows into dst's rows
  // (dst written in its own dtype; rows no id names zeroed unless `accumulate`), in position order,
  // with a workspace of embedding_backward_workspace_bytes (undefined when 0) and an optional flag
  // (undefined: the ids are not checked). The workspace size is asked with `ids`' device current.
  void (*embedding_forward)(const Tensor& table, const Tensor& ids, const Tensor& out,
                            const Tensor& flag) = nullptr;
  size_t (*embedding_backward_workspace_bytes)(const Tensor& ids, int64_t vocab) = nullptr;
  void (*embedding_backward)(const Tensor& ids, const Tensor& dy, int64_t vocab, int64_t cols,
                             const Tensor& dst, bool accumulate, const Tensor& workspace,
                             size_t workspace_bytes, const Tensor& flag) = nullptr;

  // ---- cross_entropy.cc over logits [rows, vocab]. `counts` is an int32 [4]: elements 0-1 the
  // valid count as an int64 (written by the forward, the backward's divisor), element 2 the
  // forward's first bad row (filled with kNoBadIndex by the op). row_max, log_sum, row_loss fp32
  // [rows]; loss fp32 [1]. The backward writes dst (+)= the gradient scaled by dloss[0] / count,
  // dloss a fp32 [1].
  void (*cross_entropy_forward)(const Tensor& logits, const Tensor& targets, int32_t ignore_index,
                                const Tensor& row_max, const Tensor& log_sum,
                                const Tensor& row_loss, const Tensor& loss,
                                const Tensor& counts) = nullptr;
  void (*cross_entropy_backward)(const Tensor& logits, const Tensor& targets, const Tensor& row_max,
                                 const Tensor& log_sum, const Tensor& dloss, const Tensor& counts,
                                 int32_t ignore_index, const Tensor& dst,
                                 bool accumulate) = nullptr;

  // ---- linear.cc. c = op(a) · op(b) + beta · c, the [m, k] · [k, n] product of row-major a and b
  // (one dtype) with row lengths lda, ldb, ldc (as the CPU's sgemm takes them); c fp32 or a's
  // dtype, the sum and beta · c added in fp32 and rounded once into c.
  void (*gemm)(const char* op, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
               const Tensor& a, int64_t lda, const Tensor& b, int64_t ldb, float beta,
               const Tensor& c, int64_t ldc) = nullptr;
  // y (fp32 or the bias's dtype, [rows, cols]) = bias[c] in every row: linear's bias, before a
  // beta = 1 GEMM.
  void (*broadcast_rows)(const Tensor& bias, const Tensor& y, int64_t rows, int64_t cols) = nullptr;
  // db (fp32 [cols]) (+)= Σ_r dy[r, c] in fp32, in a fixed order: linear's bias gradient.
  void (*column_sums)(const Tensor& dy, const Tensor& db, int64_t rows, int64_t cols,
                      bool accumulate) = nullptr;

  // ---- attention.cc (qkv [B, T, 3C], out [B, T, C], lse fp32 [B, H, T]; `lengths` int32 [B] or
  // undefined, `flag` as embedding's or undefined).
  // The fused forward of the device library (cuDNN on CUDA) where it applies (no padding); false,
  // having enqueued nothing, where it declines.
  bool (*attention_forward_fused)(const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                  const AttentionShape& shape) = nullptr;
  void (*attention_forward)(const Tensor& qkv, const Tensor& out, const Tensor& lse,
                            const AttentionShape& shape, const Tensor& lengths,
                            const Tensor& flag) = nullptr;
  // The fused backward into dst (qkv's dtype, added into when `accumulate`), or false.
  bool (*attention_backward_fused)(const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                   const Tensor& dout, const Tensor& dst,
                                   const AttentionShape& shape, bool accumulate) = nullptr;
  // dst (qkv's dtype or fp32) (+)= the gradient, with a fp32 [B·H·T] workspace `delta`
  // (undefined when qkv is empty).
  void (*attention_backward)(const Tensor& qkv, const Tensor& out, const Tensor& lse,
                             const Tensor& dout, const Tensor& delta, const Tensor& dst,
                             const AttentionShape& shape, const Tensor& lengths,
                             bool accumulate) = nullptr;
};

// The entry of `t`'s device kind (t not on the CPU); throws InvalidArgument naming `op`, the
// tensor and its device when this program has none.
const DeviceOps& device_ops(const Tensor& t, const char* op);

}  // namespace zs::ops::detail
