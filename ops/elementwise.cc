// CPU launchers for the element-wise and reduction ops: chunked OpenMP loops around the
// per-element math of ops/math/elementwise.h.
//
// Every loop walks the flat elements in chunks of kChunk. A chunk of a fp16/bf16 tensor is
// converted to fp32 in a stack buffer with the bulk functions of runtime/half.h (vectorized,
// bit-identical to the scalar ones), computed in fp32, and converted back; a fp32 chunk is used
// in place. Chunk boundaries depend only on the element count, and no arithmetic crosses
// elements except in the reductions, which add each chunk in double into a slot of its own and
// then add the slots in chunk order, so results never depend on the number of threads.
//
// Gradients are written through GradSinks: "accumulate" sinks are added to, fresh ones fully
// overwritten. When two inputs of one node may be the same value (add(x, x), mul(x, x)), the
// backward finishes writing one input's gradient before it touches the other, and aliases the
// output gradient (if at all) last, into one input only.
//
// Nothing inside an OpenMP region throws: raw pointers and dtypes are taken out of the tensors
// (whose accessors check and may throw) before the loop starts.
//
// Tensors on a device (cuda:N) take the same ops with their device's kernels in place of the
// loops (ops/device_ops.h; on CUDA ops/cuda/elementwise_entries.cc): the same formulas from
// ops/math, the same block layout for the reductions (so sums match the CPU bit for bit). Each
// op records its autograd node once; its backward picks the loop or the kernel by dy's device.
#include "ops/elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ops/device_ops.h"
#include "ops/math/elementwise.h"
#include "ops/math/tanh.h"
#include "ops/op_utils.h"
#include "runtime/autograd.h"
#include "runtime/half.h"

namespace zs::ops {
namespace {

// Elements per chunk: three fp32 stack buffers of 8 KB each stay in L1 and L2. Also the block
// of the reductions, whose layout the device reductions reproduce (math::kReduceChunk).
constexpr int64_t kChunk = math::kReduceChunk;
// Below this many elements a loop runs on the calling thread: forking an OpenMP team costs a
// few microseconds, more than the whole loop.
constexpr int64_t kParallelMinElements = int64_t{1} << 15;
// Independent double accumulators per chunk in the reductions (lets the adds vectorize; the
// lanes are combined in a fixed order).
constexpr int64_t kReduceLanes = math::kReduceLanes;
// Columns per task in the bias gradient: each task sums all rows of its columns in row order.
constexpr int64_t kBiasColumnBlock = 256;

// The storage of a tensor as a raw pointer and a dtype, for use inside parallel loops.
struct ConstElements {
  const void* data = nullptr;
  DType dtype = DType::kF32;
};
struct Elements {
  void* data = nullptr;
  DType dtype = DType::kF32;
};

ConstElements const_elements(const Tensor& t) { return {t.raw_data(), t.dtype()}; }
Elements mutable_elements(const Tensor& t) { return {t.raw_data(), t.dtype()}; }

// Runs body(begin, count) over [0, n) in chunks of kChunk, in parallel for large n.
template <typename Body>
void for_each_chunk(int64_t n, const Body& body) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t begin = chunk * kChunk;
    body(begin, std::min(kChunk, n - begin));
  }
}

// The fp32 values of elements [begin, begin + count) of `src`: a pointer into src when it is
// fp32, otherwise the values converted into `scratch` (count <= kChunk floats).
const float* load_chunk(ConstElements src, int64_t begin, int64_t count, float* scratch) {
  const size_t n = static_cast<size_t>(count);
  switch (src.dtype) {
    case DType::kF32:
      return static_cast<const float*>(src.data) + begin;
    case DType::kF16:
      f16_to_f32(static_cast<const uint16_t*>(src.data) + begin, scratch, n);
      break;
    case DType::kBF16:
      bf16_to_f32(static_cast<const uint16_t*>(src.data) + begin, scratch, n);
      break;
    case DType::kI32:
    case DType::kI64:
      break;  // unreachable: every op checks for floating inputs first
  }
  return scratch;
}

// Where a kernel writes the fp32 results of a chunk of `dst`: straight into dst when it is fp32
// and overwritten, otherwise into `scratch`, from which commit_chunk() stores or adds them.
float* out_chunk(Elements dst, bool accumulate, int64_t begin, float* scratch) {
  if (dst.dtype == DType::kF32 && !accumulate) return static_cast<float*>(dst.data) + begin;
  return scratch;
}

// Finishes a chunk computed into out_chunk(): converts it into dst or adds it to dst (through
// `scratch`, count floats, for a 16-bit dst). A no-op for an overwritten fp32 dst.
void commit_chunk(Elements dst, bool accumulate, int64_t begin, int64_t count, const float* values,
                  float* scratch) {
  const size_t n = static_cast<size_t>(count);
  switch (dst.dtype) {
    case DType::kF32:
      if (accumulate) {
        float* out = static_cast<float*>(dst.data) + begin;
        for (int64_t i = 0; i < count; ++i) out[i] += values[i];
      }
      return;
    case DType::kF16: {
      uint16_t* out = static_cast<uint16_t*>(dst.data) + begin;
      if (!accumulate) {
        f32_to_f16(values, out, n);
        return;
      }
      f16_to_f32(out, scratch, n);
      for (int64_t i = 0; i < count; ++i) scratch[i] += values[i];
      f32_to_f16(scratch, out, n);
      return;
    }
    case DType::kBF16: {
      uint16_t* out = static_cast<uint16_t*>(dst.data) + begin;
      if (!accumulate) {
        f32_to_bf16(values, out, n);
        return;
      }
      bf16_to_f32(out, scratch, n);
      for (int64_t i = 0; i < count; ++i) scratch[i] += values[i];
      f32_to_bf16(scratch, out, n);
      return;
    }
    case DType::kI32:
    case DType::kI64:
      return;  // unreachable
  }
}

// out = fn(x) element-wise (out += fn(x) when accumulate). out may be x itself.
template <typename Fn>
void map_unary(ConstElements x, Elements out, bool accumulate, int64_t n, const Fn& fn) {
  for_each_chunk(n, [&](int64_t begin, int64_t count) {
    alignas(64) float x_scratch[kChunk];
    alignas(64) float out_scratch[kChunk];
    alignas(64) float add_scratch[kChunk];
    const float* xv = load_chunk(x, begin, count, x_scratch);
    float* ov = out_chunk(out, accumulate, begin, out_scratch);
    for (int64_t i = 0; i < count; ++i) ov[i] = fn(xv[i]);
    commit_chunk(out, accumulate, begin, count, ov, add_scratch);
  });
}

// out = fn(a, b) element-wise (out += fn(a, b) when accumulate).
template <typename Fn>
void map_binary(ConstElements a, ConstElements b, Elements out, bool accumulate, int64_t n,
                const Fn& fn) {
  for_each_chunk(n, [&](int64_t begin, int64_t count) {
    alignas(64) float a_scratch[kChunk];
    alignas(64) float b_scratch[kChunk];
    alignas(64) float out_scratch[kChunk];
    const float* av = load_chunk(a, begin, count, a_scratch);
    const float* bv = load_chunk(b, begin, count, b_scratch);
    float* ov = out_chunk(out, accumulate, begin, out_scratch);
    for (int64_t i = 0; i < count; ++i) ov[i] = fn(av[i], bv[i]);
    // a_scratch is free again (av is consumed) and serves as the accumulation buffer.
    commit_chunk(out, accumulate, begin, count, ov, a_scratch);
  });
}

// out = value everywhere (out += value when accumulate).
void fill_elements(Elements out, bool accumulate, int64_t n, float value) {
  for_each_chunk(n, [&](int64_t begin, int64_t count) {
    alignas(64) float out_scratch[kChunk];
    alignas(64) float add_scratch[kChunk];
    float* ov = out_chunk(out, accumulate, begin, out_scratch);
    std::fill(ov, ov + count, value);
    commit_chunk(out, accumulate, begin, count, ov, add_scratch);
  });
}

// dst = src converting the dtype (round-to-nearest-even); bitwise when the dtypes are equal.
void convert_elements(ConstElements src, Elements dst, int64_t n) {
  if (src.dtype == dst.dtype) {
    const size_t element_size = dtype_size(src.dtype);
    for_each_chunk(n, [&](int64_t begin, int64_t count) {
      std::memcpy(static_cast<char*>(dst.data) + begin * element_size,
                  static_cast<const char*>(src.data) + begin * element_size,
                  static_cast<size_t>(count) * element_size);
    });
    return;
  }
  for_each_chunk(n, [&](int64_t begin, int64_t count) {
    alignas(64) float scratch[kChunk];
    // A 16-bit source converts straight into a fp32 destination; otherwise through scratch.
    float* staging = dst.dtype == DType::kF32 ? static_cast<float*>(dst.data) + begin : scratch;
    const float* values = load_chunk(src, begin, count, staging);
    if (dst.dtype != DType::kF32) commit_chunk(dst, false, begin, count, values, nullptr);
  });
}

// Writes a gradient that equals `grad` (converted to the sink's dtype) into the sink. On a
// device: converted by the table's convert, or added in fp32 by accumulate_into's hook.
void write_converted_grad(const GradSink& sink, const Tensor& grad) {
  const int64_t n = sink.buffer.numel();
  ZS_CHECK(grad.numel() == n, "gradient ", grad.describe(), " does not match its sink ",
           sink.buffer.describe());
  if (detail::on_device(grad)) {
    if (sink.accumulate) {
      accumulate_into(sink.buffer, grad);
    } else {
      detail::device_ops(grad, "gradient").convert("gradient", grad, sink.buffer);
    }
    return;
  }
  if (sink.accumulate) {
    map_unary(const_elements(grad), mutable_elements(sink.buffer), true, n,
              [](float g) { return g; });
  } else {
    convert_elements(const_elements(grad), mutable_elements(sink.buffer), n);
  }
}

// Σ term(x_i) in double. Each chunk is added into kReduceLanes accumulators (element i of the
// chunk into lane i % kReduceLanes), the lanes are added in order into the chunk's slot, and
// the slots in chunk order: a fixed order whatever the number of threads.
template <typename Term>
double reduce_sum(ConstElements x, int64_t n, const Term& term) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> chunk_sums(static_cast<size_t>(chunks));
  double* sums = chunk_sums.data();
  for_each_chunk(n, [&](int64_t begin, int64_t count) {
    alignas(64) float scratch[kChunk];
    const float* values = load_chunk(x, begin, count, scratch);
    double lanes[kReduceLanes] = {};
    int64_t i = 0;
    for (; i + kReduceLanes <= count; i += kReduceLanes) {
      for (int64_t lane = 0; lane < kReduceLanes; ++lane) lanes[lane] += term(values[i + lane]);
    }
    for (int64_t lane = 0; i < count; ++i, ++lane) lanes[lane] += term(values[i]);
    double chunk_sum = 0.0;
    for (int64_t lane = 0; lane < kReduceLanes; ++lane) chunk_sum += lanes[lane];
    sums[begin / kChunk] = chunk_sum;
  });
  double total = 0.0;
  for (double chunk_sum : chunk_sums) total += chunk_sum;
  return total;
}

// dst[c] (+)= Σ_r dy[r, c] for a [rows, cols] dy. Tasks own blocks of columns and add the rows
// of their columns in row order, in double.
void column_sums(ConstElements dy, int64_t rows, int64_t cols, Elements dst, bool accumulate) {
  const int64_t blocks = (cols + kBiasColumnBlock - 1) / kBiasColumnBlock;
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMinElements && blocks > 1)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t col0 = block * kBiasColumnBlock;
    const int64_t width = std::min(kBiasColumnBlock, cols - col0);
    double totals[kBiasColumnBlock] = {};
    alignas(64) float scratch[kBiasColumnBlock];
    for (int64_t row = 0; row < rows; ++row) {
      const float* values = load_chunk(dy, row * cols + col0, width, scratch);
      for (int64_t j = 0; j < width; ++j) totals[j] += math::sum_term(values[j]);
    }
    alignas(64) float result_scratch[kBiasColumnBlock];
    alignas(64) float add_scratch[kBiasColumnBlock];
    float* result = out_chunk(dst, accumulate, col0, result_scratch);
    for (int64_t j = 0; j < width; ++j) result[j] = static_cast<float>(totals[j]);
    commit_chunk(dst, accumulate, col0, width, result, add_scratch);
  }
}

// out (+)= dropout of `in` with the mask of (key, element index): the forward on x and the
// backward on dy are this same call.
void dropout_elements(ConstElements in, Elements out, bool accumulate, int64_t n, const RngKey& key,
                      float keep_prob) {
  const float scale = math::dropout_scale(keep_prob);
  for_each_chunk(n, [&](int64_t begin, int64_t count) {
    alignas(64) float in_scratch[kChunk];
    alignas(64) float out_scratch[kChunk];
    alignas(64) float add_scratch[kChunk];
    alignas(64) uint8_t keep[kChunk];
    // count < the RNG's own parallel threshold: the mask is generated on this thread.
    fill_bernoulli_mask(keep, static_cast<uint64_t>(begin), static_cast<size_t>(count), key,
                        keep_prob);
    const float* iv = load_chunk(in, begin, count, in_scratch);
    float* ov = out_chunk(out, accumulate, begin, out_scratch);
    for (int64_t i = 0; i < count; ++i) ov[i] = math::dropout(iv[i], keep[i] != 0, scale);
    commit_chunk(out, accumulate, begin, count, ov, add_scratch);
  });
}

void check_same_shape(const char* op, const Tensor& a, const Tensor& b) {
  ZS_CHECK(a.shape() == b.shape(), op, ": shapes differ: ", a.describe(), " vs ", b.describe(),
           "; ", op, " needs equal shapes (view one of them, or use add_bias for a [C] bias)");
}

void check_float_dtype(const char* op, DType dtype) {
  ZS_CHECK(is_floating(dtype), op, ": target dtype ", dtype_name(dtype),
           " is not supported; expected fp32, fp16 or bf16");
}

void check_scalar_grad(const Tensor& dy, const char* op) {
  ZS_CHECK(dy.numel() == 1, op, ": expected a gradient with one element, got ", dy.describe());
}

// The scalar gradient of a reduction's [1] output, as fp32 (CPU).
float scalar_grad(const Tensor& dy, const char* op) {
  check_scalar_grad(dy, op);
  return dy.item();
}

Tensor scalar_output(double value, const Tensor& like, const char* op) {
  Tensor y = detail::new_output({1}, DType::kF32, like, op);
  y.data<float>()[0] = static_cast<float>(value);
  return y;
}

// A reduction's fp32 [1] output on x's device: the CPU's blocked double sum, / divisor.
Tensor device_sum(const Tensor& x, detail::SumTerm term, double divisor, const char* op) {
  Tensor y = detail::new_output({1}, DType::kF32, x, op);
  detail::device_ops(x, op).reduce_sum(op, x, term, divisor, y);
  return y;
}

// The device backward of sum and mean: sink (+)= float(double(dy) / divisor), dy read on the
// device (no host round trip).
void device_fill_from_scalar(const char* op, const Tensor& dy, const GradSink& sink,
                             double divisor) {
  check_scalar_grad(dy, op);
  Tensor dy32 = detail::as_f32(dy);
  detail::device_ops(dy, op).fill_from_scalar(op, dy32, divisor, sink.buffer, sink.accumulate);
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  detail::check_float_input("add", "a", a);
  detail::check_float_input("add", "b", b);
  check_same_shape("add", a, b);
  detail::check_same_dtype("add", a, b);
  detail::check_same_device("add", {&a, &b});
  const int64_t n = a.numel();
  Tensor y = detail::new_output(a.shape(), a.dtype(), a, "add");
  if (detail::on_device(a)) {
    detail::device_ops(a, "add").add(a, b, y);
  } else {
    map_binary(const_elements(a), const_elements(b), mutable_elements(y), false, n,
               [](float av, float bv) { return math::add(av, bv); });
  }
  if (needs_grad({&a, &b})) {
    record_op("add", {&a, &b}, {&y}, [](BackwardContext& ctx) {
      Tensor dy = ctx.grad_output(0);
      if (!dy.defined()) return;
      // b first, as a copy; then dy itself goes to a. For add(x, x) the copy is x's gradient
      // and the alias step finds it and adds dy into it: 2·dy, and no buffer is shared.
      if (GradSink sink = ctx.grad_input(1)) write_converted_grad(sink, dy);
      ctx.alias_or_accumulate_input_grad(0, dy);
    });
  }
  return y;
}

Tensor add_bias(const Tensor& x, const Tensor& bias) {
  detail::check_float_input("add_bias", "x", x);
  detail::check_float_input("add_bias", "bias", bias);
  ZS_CHECK(x.dim() >= 1, "add_bias: x ", x.describe(), " needs at least one dimension");
  const int64_t cols = x.size(-1);
  ZS_CHECK(bias.dim() == 1 && bias.size(0) == cols, "add_bias: bias ", bias.describe(),
           " must be [", cols, "] to match the last dimension of x ", x.describe());
  detail::check_same_dtype("add_bias", x, bias);
  const int64_t n = x.numel();
  const int64_t rows = cols > 0 ? n / cols : 0;
  detail::check_same_device("add_bias", {&x, &bias});
  Tensor y = detail::new_output(x.shape(), x.dtype(), x, "add_bias");
  if (detail::on_device(x)) {
    detail::device_ops(x, "add_bias").add_bias(x, bias, y, rows, cols);
  } else {
    Tensor bias32 = detail::as_f32(bias);
    const float* bias_values = bias32.data<float>();
    const ConstElements xe = const_elements(x);
    const Elements ye = mutable_elements(y);
    for_each_chunk(n, [&](int64_t begin, int64_t count) {
      alignas(64) float x_scratch[kChunk];
      alignas(64) float out_scratch[kChunk];
      const float* xv = load_chunk(xe, begin, count, x_scratch);
      float* ov = out_chunk(ye, false, begin, out_scratch);
      // Walk the chunk as row segments so the inner loop is a plain vectorizable add.
      int64_t col = begin % cols;
      for (int64_t i = 0; i < count;) {
        const int64_t len = std::min(cols - col, count - i);
        for (int64_t j = 0; j < len; ++j) ov[i + j] = math::add(xv[i + j], bias_values[col + j]);
        i += len;
        col = 0;
      }
      commit_chunk(ye, false, begin, count, ov, nullptr);
    });
  }

  if (needs_grad({&x, &bias})) {
    record_op("add_bias", {&x, &bias}, {&y}, [rows, cols](BackwardContext& ctx) {
      Tensor dy = ctx.grad_output(0);
      if (!dy.defined()) return;
      // The bias gradient reads dy before dy may become x's gradient (aliased, last).
      if (GradSink sink = ctx.grad_input(1)) {
        if (detail::on_device(dy)) {
          detail::device_ops(dy, "add_bias")
              .bias_column_sums(dy, sink.buffer, rows, cols, sink.accumulate);
        } else {
          column_sums(const_elements(dy), rows, cols, mutable_elements(sink.buffer),
                      sink.accumulate);
        }
      }
      ctx.alias_or_accumulate_input_grad(0, dy);
    });
  }
  return y;
}

Tensor scale(const Tensor& x, float alpha) {
  detail::check_float_input("scale", "x", x);
  ZS_CHECK(std::isfinite(alpha), "scale: alpha must be finite, got ", alpha);
  const int64_t n = x.numel();
  Tensor y = detail::new_output(x.shape(), x.dtype(), x, "scale");
  const auto kernel = [alpha](float v) { return math::scale(v, alpha); };
  if (detail::on_device(x)) {
    detail::device_ops(x, "scale").scale(x, y, alpha, false);
  } else {
    map_unary(const_elements(x), mutable_elements(y), false, n, kernel);
  }
  if (needs_grad({&x})) {
    record_op("scale", {&x}, {&y}, [n, alpha, kernel](BackwardContext& ctx) {
      Tensor dy = ctx.grad_output(0);
      GradSink sink = ctx.grad_input(0);
      if (!dy.defined() || !sink) return;
      if (detail::on_device(dy)) {
        detail::device_ops(dy, "scale").scale(dy, sink.buffer, alpha, sink.accumulate);
        return;
      }
      map_unary(const_elements(dy), mutable_elements(sink.buffer), sink.accumulate, n, kernel);
    });
  }
  return y;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  detail::check_float_input("mul", "a", a);
  detail::check_float_input("mul", "b", b);
  check_same_shape("mul", a, b);
  detail::check_same_dtype("mul", a, b);
  detail::check_same_device("mul", {&a, &b});
  const int64_t n = a.numel();
  Tensor y = detail::new_output(a.shape(), a.dtype(), a, "mul");
  if (detail::on_device(a)) {
    detail::device_ops(a, "mul").mul(a, b, y);
  } else {
    map_binary(const_elements(a), const_elements(b), mutable_elements(y), false, n,
               [](float av, float bv) { return math::mul(av, bv); });
  }
  if (needs_grad({&a, &b})) {
    record_op("mul", {&a, &b}, {&y}, [a, b, n](BackwardContext& ctx) {
      Tensor dy = ctx.grad_output(0);
      if (!dy.defined()) return;
      const auto kernel = [](float other, float g) { return math::mul_backward(other, g); };
      // sink (+)= other · dy, on dy's device.
      const auto write = [&](const Tensor& other, const GradSink& sink) {
        if (detail::on_device(dy)) {
          detail::device_ops(dy, "mul").mul_backward(other, dy, sink.buffer, sink.accumulate);
        } else {
          map_binary(const_elements(other), const_elements(dy), mutable_elements(sink.buffer),
                     sink.accumulate, n, kernel);
        }
      };
      // One input at a time (in stream order on a device): for mul(x, x) both sinks are x's
      // gradient, and the second adds to what the first wrote.
      if (GradSink sink = ctx.grad_input(0)) write(b, sink);
      if (GradSink sink = ctx.grad_input(1)) write(a, sink);
    });
  }
  return y;
}

Tensor tanh(const Tensor& x) {
  detail::check_float_input("tanh", "x", x);
  const int64_t n = x.numel();
  Tensor y = detail::new_output(x.shape(), x.dtype(), x, "tanh");
  if (detail::on_device(x)) {
    detail::device_ops(x, "tanh").tanh_forward(x, y);
  } else {
    map_unary(const_elements(x), mutable_elements(y), false, n,
              [](float v) { return math::tanh_forward(v); });
  }
  if (needs_grad({&x})) {
    // Saves the output (a handle), not x: the derivative 1 − y² needs only y. The tape frees
    // it once the node has run.
    record_op("tanh", {&x}, {&y}, [y, n](BackwardContext& ctx) {
      Tensor dy = ctx.grad_output(0);
      GradSink sink = ctx.grad_input(0);
      if (!dy.defined() || !sink) return;
      if (detail::on_device(dy)) {
        detail::device_ops(dy, "tanh").tanh_backward(y, dy, sink.buffer, sink.accumulate);
        return;
      }
      map_binary(const_elements(y), const_elements(dy), mutable_elements(sink.buffer),
                 sink.accumulate, n, [](float yv, float g) { return math::tanh_backward(yv, g); });
    });
  }
  return y;
}

Tensor dropout(const Tensor& x, float p, const RngKey& key, bool training) {
  detail::check_float_input("dropout", "x", x);
  ZS_CHECK(p >= 0.0f && p < 1.0f, "dropout: expected a drop probability p in [0, 1), got ", p,
           "; p = 1 would drop everything (skip the layer's input instead)");
  if (!training || p == 0.0f) return x;
  const int64_t n = x.numel();
  const float keep_prob = math::dropout_keep_prob(p);
  Tensor y = detail::new_output(x.shape(), x.dtype(), x, "dropout");
  if (detail::on_device(x)) {
    detail::device_ops(x, "dropout").dropout(x, y, false, key, keep_prob);
  } else {
    dropout_elements(const_elements(x), mutable_elements(y), false, n, key, keep_prob);
  }
  if (needs_grad({&x})) {
    // Saves the key and p only: backward regenerates the mask.
    record_op("dropout", {&x}, {&y}, [key, p, n](BackwardContext& ctx) {
      Tensor dy = ctx.grad_output(0);
      GradSink sink = ctx.grad_input(0);
      if (!dy.defined() || !sink) return;
      const float keep = math::dropout_keep_prob(p);
      if (detail::on_device(dy)) {
        detail::device_ops(dy, "dropout").dropout(dy, sink.buffer, sink.accumulate, key, keep);
        return;
      }
      dropout_elements(const_elements(dy), mutable_elements(sink.buffer), sink.accumulate, n, key,
                       keep);
    });
  }
  return y;
}

Tensor cast(const Tensor& x, DType dtype) {
  detail::check_float_input("cast", "x", x);
  check_float_dtype("cast", dtype);
  if (dtype == x.dtype()) return x;
  Tensor y = detail::new_output(x.shape(), dtype, x, "cast");
  if (detail::on_device(x)) {
    detail::device_ops(x, "cast").convert("cast", x, y);
  } else {
    convert_elements(const_elements(x), mutable_elements(y), x.numel());
  }
  if (needs_grad({&x})) {
    record_op("cast", {&x}, {&y}, [](BackwardContext& ctx) {
      Tensor dy = ctx.grad_output(0);
      GradSink sink = ctx.grad_input(0);
      if (!dy.defined() || !sink) return;
      write_converted_grad(sink, dy);  // the sink has x's dtype
    });
  }
  return y;
}

Tensor sum_of_squares(const Tensor& x) {
  detail::check_float_input("sum_of_squares", "x", x);
  Tensor y;
  if (detail::on_device(x)) {
    y = device_sum(x, detail::SumTerm::kSquare, 1.0, "sum_of_squares");
  } else {
    const double total = reduce_sum(const_elements(x), x.numel(),
                                    [](float v) { return math::sum_of_squares_term(v); });
    y = scalar_output(total, x, "sum_of_squares");
  }
  if (needs_grad({&x})) {
    record_op("sum_of_squares", {&x}, {&y}, [x](BackwardContext& ctx) {
      Tensor dy = ctx.grad_output(0);
      GradSink sink = ctx.grad_input(0);
      if (!dy.defined() || !sink) return;
      if (detail::on_device(dy)) {
        check_scalar_grad(dy, "sum_of_squares");
        Tensor dy32 = detail::as_f32(dy);  // read on the device, no host round trip
        detail::device_ops(dy, "sum_of_squares")
            .sum_of_squares_backward(x, dy32, sink.buffer, sink.accumulate);
        return;
      }
      const float g = scalar_grad(dy, "sum_of_squares");
      map_unary(const_elements(x), mutable_elements(sink.buffer), sink.accumulate, x.numel(),
                [g](float v) { return math::sum_of_squares_backward(v, g); });
    });
  }
  return y;
}

Tensor sum(const Tensor& x) {
  detail::check_float_input("sum", "x", x);
  Tensor y;
  if (detail::on_device(x)) {
    y = device_sum(x, detail::SumTerm::kValue, 1.0, "sum");
  } else {
    const double total =
        reduce_sum(const_elements(x), x.numel(), [](float v) { return math::sum_term(v); });
    y = scalar_output(total, x, "sum");
  }
  if (needs_grad({&x})) {
    record_op("sum", {&x}, {&y}, [](BackwardContext& ctx) {
      Tensor dy = ctx.grad_output(0);
      GradSink sink = ctx.grad_input(0);
      if (!dy.defined() || !sink) return;
      if (detail::on_device(dy)) return device_fill_from_scalar("sum", dy, sink, 1.0);
      fill_elements(mutable_elements(sink.buffer), sink.accumulate, sink.buffer.numel(),
                    scalar_grad(dy, "sum"));
    });
  }
  return y;
}

Tensor mean(const Tensor& x) {
  detail::check_float_input("mean", "x", x);
  const int64_t n = x.numel();
  ZS_CHECK(n > 0, "mean: x ", x.describe(), " is empty; the mean of no elements is undefined");
  Tensor y;
  if (detail::on_device(x)) {
    y = device_sum(x, detail::SumTerm::kValue, static_cast<double>(n), "mean");
  } else {
    const double total =
        reduce_sum(const_elements(x), n, [](float v) { return math::sum_term(v); });
    y = scalar_output(total / static_cast<double>(n), x, "mean");
  }
  if (needs_grad({&x})) {
    record_op("mean", {&x}, {&y}, [n](BackwardContext& ctx) {
      Tensor dy = ctx.grad_output(0);
      GradSink sink = ctx.grad_input(0);
      if (!dy.defined() || !sink) return;
      if (detail::on_device(dy)) {
        return device_fill_from_scalar("mean", dy, sink, static_cast<double>(n));
      }
      const double g = static_cast<double>(scalar_grad(dy, "mean")) / static_cast<double>(n);
      fill_elements(mutable_elements(sink.buffer), sink.accumulate, n, static_cast<float>(g));
    });
  }
  return y;
}

void scale_(const Tensor& x, float alpha) {
  detail::check_float_input("scale_", "x", x);
  ZS_CHECK(std::isfinite(alpha), "scale_: alpha must be finite, got ", alpha);
  if (detail::on_device(x)) return detail::device_ops(x, "scale_").scale_inplace(x, alpha);
  map_unary(const_elements(x), mutable_elements(x), false, x.numel(),
            [alpha](float v) { return math::scale(v, alpha); });
}

bool all_finite(const Tensor& x) {
  detail::check_float_input("all_finite", "x", x);
  if (detail::on_device(x)) return detail::device_ops(x, "all_finite").all_finite(x);
  const int64_t n = x.numel();
  const void* data = x.raw_data();
  const DType dtype = x.dtype();
  bool finite = true;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) reduction(&& : finite) if (n >= kParallelMinElements)
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t begin = chunk * kChunk;
    const int64_t end = std::min(begin + kChunk, n);
    bool chunk_finite = true;
    if (dtype == DType::kF32) {
      const uint32_t* bits = static_cast<const uint32_t*>(data);
      for (int64_t i = begin; i < end; ++i) chunk_finite &= math::is_finite_f32_bits(bits[i]);
    } else if (dtype == DType::kF16) {
      const uint16_t* bits = static_cast<const uint16_t*>(data);
      for (int64_t i = begin; i < end; ++i) chunk_finite &= math::is_finite_f16_bits(bits[i]);
    } else {
      const uint16_t* bits = static_cast<const uint16_t*>(data);
      for (int64_t i = begin; i < end; ++i) chunk_finite &= math::is_finite_bf16_bits(bits[i]);
    }
    finite = finite && chunk_finite;
  }
  return finite;
}

void fill_(const Tensor& x, float value) {
  detail::check_float_input("fill_", "x", x);
  if (detail::on_device(x)) return detail::device_ops(x, "fill_").fill(x, value);
  fill_elements(mutable_elements(x), false, x.numel(), value);
}

void copy_(const Tensor& dst, const Tensor& src) {
  detail::check_float_input("copy_", "dst", dst);
  detail::check_float_input("copy_", "src", src);
  ZS_CHECK(dst.shape() == src.shape(), "copy_: shapes differ: dst ", dst.describe(), ", src ",
           src.describe(), "; view one of them to the other's shape first");
  detail::check_same_device("copy_", {&dst, &src});
  if (dst.storage() == src.storage()) {
    const size_t dst_begin = dst.offset_bytes();
    const size_t src_begin = src.offset_bytes();
    const bool overlap =
        dst_begin < src_begin + src.nbytes() && src_begin < dst_begin + dst.nbytes();
    if (overlap && dst_begin == src_begin && dst.dtype() == src.dtype()) return;  // itself
    ZS_CHECK(!overlap, "copy_: dst ", dst.describe(), " and src ", src.describe(),
             " overlap in storage '", dst.storage()->name(), "'; copy through a separate tensor");
  }
  if (detail::on_device(dst)) return detail::device_ops(dst, "copy_").convert("copy_", src, dst);
  convert_elements(const_elements(src), mutable_elements(dst), dst.numel());
}

}  // namespace zs::ops
