// select: x viewed as [outer, size, inner] (size = x.size(dim)); the output is the [outer, inner]
// slab at `index` of the middle dimension. Forward copies `outer` contiguous runs of `inner`
// elements; backward writes dy's runs back to the same places (converting to the gradient's
// dtype, or adding into it) and zeros the rest of a fresh gradient.
//
// Nothing inside an OpenMP region throws: raw pointers are taken out of the tensors first.
//
// On a device (cuda:N) the same copies and adds run as its kernels (ops/device_ops.h), with the
// same autograd record; the results are the same bits.
#include "ops/select.h"

#include <cstring>

#include "ops/device_ops.h"
#include "ops/op_utils.h"
#include "runtime/autograd.h"

namespace zs::ops {
namespace {

constexpr const char* kOp = "select";
// Below this many selected elements the loops run on the calling thread (same results).
constexpr int64_t kParallelMinElements = int64_t{1} << 15;

// x as [outer, size, inner] around dimension `dim`.
struct SelectDims {
  int64_t outer = 1;
  int64_t size = 0;
  int64_t inner = 1;
};

SelectDims select_dims(const Shape& shape, int64_t dim) {
  SelectDims dims;
  for (int64_t d = 0; d < dim; ++d) dims.outer *= shape[static_cast<size_t>(d)];
  dims.size = shape[static_cast<size_t>(dim)];
  for (size_t d = static_cast<size_t>(dim) + 1; d < shape.size(); ++d) dims.inner *= shape[d];
  return dims;
}

void backward(const SelectDims& dims, int64_t index, BackwardContext& ctx) {
  Tensor dy = ctx.grad_output(0);
  GradSink sink = ctx.grad_input(0);
  if (!dy.defined() || !sink) return;
  ZS_CHECK(dy.numel() == dims.outer * dims.inner, kOp, ": gradient ", dy.describe(),
           " does not match the selected output of ", dims.outer * dims.inner, " elements");
  if (sink.buffer.numel() == 0) return;
  if (detail::on_device(dy)) {
    detail::check_same_dtype(kOp, dy, sink.buffer);
    return detail::device_ops(dy, kOp).select_backward(dy, sink.buffer, dims.outer, dims.size,
                                                       dims.inner, index, sink.accumulate);
  }
  const bool accumulate = sink.accumulate;
  // A fresh gradient is zero outside the selected slab; all-zero bits are +0 in every dtype.
  if (!accumulate) std::memset(sink.buffer.raw_data(), 0, sink.buffer.nbytes());
  const bool parallel = dims.outer * dims.inner >= kParallelMinElements;
  detail::visit_float_dtype(dy.dtype(), kOp, [&](auto dy_tag) {
    using T = decltype(dy_tag);
    const T* grad = dy.data<T>();
    detail::visit_float_dtype(sink.buffer.dtype(), kOp, [&](auto sink_tag) {
      using S = decltype(sink_tag);
      S* dx = sink.buffer.data<S>();
#pragma omp parallel for schedule(static) if (parallel)
      for (int64_t o = 0; o < dims.outer; ++o) {
        const T* src = grad + o * dims.inner;
        S* dst = dx + (o * dims.size + index) * dims.inner;
        for (int64_t j = 0; j < dims.inner; ++j) {
          const float value = static_cast<float>(src[j]);
          dst[j] = accumulate ? S(static_cast<float>(dst[j]) + value) : S(value);
        }
      }
    });
  });
}

}  // namespace

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  detail::check_float_input(kOp, "x", x);
  const int64_t rank = x.dim();
  ZS_CHECK(rank >= 2, kOp, ": x ", x.describe(),
           " needs at least 2 dimensions (selecting from a 1-D tensor would leave a 0-d one; "
           "use Tensor::slice for a single element)");
  ZS_CHECK(dim >= -rank && dim < rank, kOp, ": dim ", dim, " is out of range for x ", x.describe(),
           "; expected a dimension in [", -rank, ", ", rank, ")");
  if (dim < 0) dim += rank;
  const SelectDims dims = select_dims(x.shape(), dim);
  ZS_CHECK(index >= 0 && index < dims.size, kOp, ": index ", index, " is out of range for ",
           "dimension ", dim, " of x ", x.describe(), "; expected an index in [0, ", dims.size,
           ")");

  Shape out_shape = x.shape();
  out_shape.erase(out_shape.begin() + dim);
  Tensor y = detail::new_output(out_shape, x.dtype(), x, kOp);
  const size_t element_size = dtype_size(x.dtype());
  const size_t run_bytes = static_cast<size_t>(dims.inner) * element_size;
  if (detail::on_device(x)) {
    detail::device_ops(x, kOp).select_forward(x, y, dims.outer, dims.size, dims.inner, index);
  } else if (y.numel() > 0) {
    const auto* src = static_cast<const unsigned char*>(x.raw_data());
    auto* dst = static_cast<unsigned char*>(y.raw_data());
    const bool parallel = dims.outer * dims.inner >= kParallelMinElements;
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t o = 0; o < dims.outer; ++o) {
      std::memcpy(dst + static_cast<size_t>(o) * run_bytes,
                  src + static_cast<size_t>(o * dims.size + index) * run_bytes, run_bytes);
    }
  }

  if (needs_grad({&x})) {
    record_op(kOp, {&x}, {&y}, [dims, index](BackwardContext& ctx) { backward(dims, index, ctx); });
  }
  return y;
}

}  // namespace zs::ops
