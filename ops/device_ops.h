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

#include <cstdint>

#include "runtime/rng.h"
#include "runtime/tensor.h"

namespace zs::ops::detail {

// The per-element term a blocked reduction adds (math::sum_term, math::sum_of_squares_term).
enum class SumTerm { kValue, kSquare };

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
};

// The entry of `t`'s device kind (t not on the CPU); throws InvalidArgument naming `op`, the
// tensor and its device when this program has none.
const DeviceOps& device_ops(const Tensor& t, const char* op);

}  // namespace zs::ops::detail
