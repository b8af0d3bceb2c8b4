// Tensor implementation: construction, checked data access, views and host helpers.
#include "runtime/tensor.h"

#include <climits>
#include <cstdint>
#include <cstring>
#include <sstream>

#include "runtime/autograd.h"
#include "runtime/device_kernels.h"
#include "runtime/half.h"

namespace zs {

std::string shape_str(const Shape& shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    ZS_CHECK(d >= 0, "shape ", shape_str(shape), " has a negative dimension");
    n *= d;
  }
  return n;
}

namespace {

std::shared_ptr<AutogradMeta> make_meta(const Shape& shape, DType dtype, Allocator* allocator,
                                        std::string name) {
  auto meta = std::make_shared<AutogradMeta>();
  meta->name = std::move(name);
  meta->shape = shape;
  meta->dtype = dtype;
  meta->allocator = allocator;
  return meta;
}

}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Allocator& allocator, std::string name) {
  return empty(shape, dtype, allocator, current_memory_category(), std::move(name));
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Allocator& allocator, MemoryCategory category,
                     std::string name) {
  const size_t nbytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  auto storage = Storage::create(allocator, nbytes, category, name);
  return from_storage(std::move(storage), 0, shape, dtype, std::move(name));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Allocator& allocator, std::string name) {
  return zeros(shape, dtype, allocator, current_memory_category(), std::move(name));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Allocator& allocator, MemoryCategory category,
                     std::string name) {
  Tensor t = empty(shape, dtype, allocator, category, std::move(name));
  zero_bytes(t);
  return t;
}

Tensor Tensor::from_storage(std::shared_ptr<Storage> storage, size_t offset_bytes,
                            const Shape& shape, DType dtype, std::string name) {
  ZS_CHECK(storage != nullptr, "from_storage: null storage for tensor '", name, "'");
  Tensor t;
  t.numel_ = shape_numel(shape);
  const size_t nbytes = static_cast<size_t>(t.numel_) * dtype_size(dtype);
  ZS_CHECK(offset_bytes % dtype_size(dtype) == 0, "tensor '", name, "': offset ", offset_bytes,
           " is not a multiple of the ", dtype_name(dtype), " element size");
  ZS_CHECK(offset_bytes + nbytes <= storage->nbytes(), "tensor '", name, "' ", shape_str(shape),
           " ", dtype_name(dtype), " at byte offset ", offset_bytes, " needs ",
           offset_bytes + nbytes, " bytes but storage '", storage->name(), "' has ",
           storage->nbytes());
  t.storage_ = std::move(storage);
  t.offset_bytes_ = offset_bytes;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.meta_ = make_meta(shape, dtype, &t.storage_->allocator(), std::move(name));
  return t;
}

Tensor Tensor::empty_like(const Tensor& like, std::string name) {
  return empty(like.shape(), like.dtype(), like.allocator(), std::move(name));
}

int64_t Tensor::size(int64_t d) const {
  const int64_t n = dim();
  const int64_t i = d < 0 ? d + n : d;
  ZS_CHECK(i >= 0 && i < n, "dimension ", d, " out of range for ", describe());
  return shape_[static_cast<size_t>(i)];
}

Device Tensor::device() const {
  ZS_CHECK(defined(), "device() of an undefined tensor");
  return storage_->device();
}

Allocator& Tensor::allocator() const {
  ZS_CHECK(defined(), "allocator() of an undefined tensor");
  return storage_->allocator();
}

void* Tensor::raw_data() const {
  void* data = raw_device_data();
  // Checked after the release check, so a released parameter is still reported as released.
  ZS_CHECK(storage_->host_visible(), "host access to tensor ", describe(), " on ", device().str(),
           ": its memory (storage '", storage_->name(),
           "') is not host-visible, so the host cannot read or write it through a pointer. Copy "
           "it to the host first (to_vector / copy_to_host, or build the values in a host "
           "buffer and copy_from_host), or do the work in a kernel on ",
           device().str());
  return data;
}

void* Tensor::raw_device_data() const {
  ZS_CHECK(defined(), "data of an undefined tensor (was it created, or its gradient computed?)");
  if (storage_->is_released()) {
    ZS_THROW(ReleasedTensor, "tensor ", describe(), " was released: its storage '",
             storage_->name(),
             "' holds no memory now (a sharded parameter is only valid while its unit is "
             "gathered: inside the unit's forward or backward)");
  }
  return static_cast<char*>(storage_->data_unchecked()) + offset_bytes_;
}

const std::string& Tensor::name() const {
  static const std::string kEmpty;
  return meta_ ? meta_->name : kEmpty;
}

Tensor& Tensor::set_name(std::string name) {
  ZS_CHECK(defined(), "set_name on an undefined tensor");
  meta_->name = std::move(name);
  return *this;
}

std::string Tensor::describe() const {
  if (!defined()) return "<undefined>";
  std::string text = name().empty() ? "<unnamed>" : "'" + name() + "'";
  return text + " " + shape_str(shape_) + " " + dtype_name(dtype_);
}

void Tensor::check_dtype(DType expected) const {
  ZS_CHECK(defined(), "expected a ", dtype_name(expected), " tensor, got an undefined one");
  ZS_CHECK(dtype_ == expected, "tensor ", describe(), " accessed as ", dtype_name(expected));
}

Tensor Tensor::slice(int64_t begin, const Shape& shape) const {
  ZS_CHECK(defined(), "slice of an undefined tensor");
  const int64_t n = shape_numel(shape);
  ZS_CHECK(begin >= 0 && begin + n <= numel_, "slice [", begin, ", ", begin + n, ") of ",
           describe(), " is out of range");
  Tensor out =
      from_storage(storage_, offset_bytes_ + static_cast<size_t>(begin) * dtype_size(dtype_), shape,
                   dtype_, name());
  if (needs_grad({this})) {
    const int64_t full = numel_;
    record_op("slice", {this}, {&out}, [begin, n, full](BackwardContext& ctx) {
      Tensor g = ctx.grad_output(0);
      GradSink sink = ctx.grad_input(0);
      if (!g.defined() || !sink) return;
      if (!sink.accumulate) zero_bytes(sink.buffer);  // fresh buffer: zero outside the slice
      (void)full;
      Tensor target = sink.buffer.slice(begin, g.shape());
      accumulate_into(target, g);
    });
  }
  return out;
}

Tensor Tensor::view(const Shape& shape) const {
  ZS_CHECK(defined(), "view of an undefined tensor");
  Shape resolved = shape;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < resolved.size(); ++i) {
    if (resolved[i] == -1) {
      ZS_CHECK(infer < 0, "view ", shape_str(shape), " of ", describe(), " has two -1 dims");
      infer = static_cast<int>(i);
    } else {
      known *= resolved[i];
    }
  }
  if (infer >= 0) {
    ZS_CHECK(known > 0 && numel_ % known == 0, "cannot view ", describe(), " as ",
             shape_str(shape));
    resolved[static_cast<size_t>(infer)] = numel_ / known;
  }
  ZS_CHECK(shape_numel(resolved) == numel_, "cannot view ", describe(), " (", numel_,
           " elements) as ", shape_str(shape));
  Tensor out = from_storage(storage_, offset_bytes_, resolved, dtype_, name());
  if (needs_grad({this})) {
    record_op("view", {this}, {&out}, [](BackwardContext& ctx) {
      Tensor g = ctx.grad_output(0);
      if (g.defined()) ctx.alias_or_accumulate_input_grad(0, g);
    });
  }
  return out;
}

bool Tensor::requires_grad() const { return meta_ && meta_->requires_grad; }

Tensor& Tensor::set_requires_grad(bool requires_grad) {
  ZS_CHECK(defined(), "set_requires_grad on an undefined tensor");
  ZS_CHECK(meta_->is_leaf || requires_grad, "set_requires_grad(false) on ", describe(),
           ", which is the output of a recorded op; use detach() instead");
  meta_->requires_grad = requires_grad;
  return *this;
}

bool Tensor::is_leaf() const { return !meta_ || meta_->is_leaf; }

Tensor Tensor::grad() const { return meta_ ? meta_->grad : Tensor(); }

void Tensor::set_grad(const Tensor& grad) const {
  ZS_CHECK(defined(), "set_grad on an undefined tensor");
  if (grad.defined()) {
    ZS_CHECK(grad.shape() == shape_ && grad.dtype() == dtype_, "gradient buffer ", grad.describe(),
             " does not match ", describe());
  }
  meta_->grad = grad;
}

Tensor Tensor::detach() const {
  ZS_CHECK(defined(), "detach of an undefined tensor");
  return from_storage(storage_, offset_bytes_, shape_, dtype_, name());
}

namespace {

// Host bytes of `dtype` → floats, and back: the one conversion both the CPU path and the
// device path (after a download, before an upload) use.
void host_bytes_to_floats(const void* src, DType dtype, std::vector<float>& out) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(out.data(), src, out.size() * sizeof(float));
      break;
    case DType::kF16:
      f16_to_f32(static_cast<const uint16_t*>(src), out.data(), out.size());
      break;
    case DType::kBF16:
      bf16_to_f32(static_cast<const uint16_t*>(src), out.data(), out.size());
      break;
    case DType::kI32:
      for (size_t i = 0; i < out.size(); ++i) {
        out[i] = static_cast<float>(static_cast<const int32_t*>(src)[i]);
      }
      break;
    case DType::kI64:
      for (size_t i = 0; i < out.size(); ++i) {
        out[i] = static_cast<float>(static_cast<const int64_t*>(src)[i]);
      }
      break;
  }
}

void floats_to_host_bytes(const std::vector<float>& values, DType dtype, void* dst) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, values.data(), values.size() * sizeof(float));
      break;
    case DType::kF16:
      f32_to_f16(values.data(), static_cast<uint16_t*>(dst), values.size());
      break;
    case DType::kBF16:
      f32_to_bf16(values.data(), static_cast<uint16_t*>(dst), values.size());
      break;
    case DType::kI32:
      for (size_t i = 0; i < values.size(); ++i) {
        static_cast<int32_t*>(dst)[i] = static_cast<int32_t>(values[i]);
      }
      break;
    case DType::kI64:
      for (size_t i = 0; i < values.size(); ++i) {
        static_cast<int64_t*>(dst)[i] = static_cast<int64_t>(values[i]);
      }
      break;
  }
}

}  // namespace

std::vector<float> Tensor::to_vector() const {
  ZS_CHECK(defined(), "to_vector needs a defined tensor, got ", describe());
  std::vector<float> out(static_cast<size_t>(numel_));
  if (out.empty()) return out;
  if (device().is_cpu()) {
    host_bytes_to_floats(raw_data(), dtype_, out);
    return out;
  }
  // A device tensor: download its bytes (synchronously, after the work enqueued on its
  // allocator's stream), then convert on the host exactly as above.
  std::vector<unsigned char> bytes(nbytes());
  (void)raw_device_data();  // throws ReleasedTensor naming the tensor
  device_kernels(device(), "to_vector").download(*this, bytes.data());
  host_bytes_to_floats(bytes.data(), dtype_, out);
  return out;
}

void Tensor::copy_from(const std::vector<float>& values) const {
  ZS_CHECK(defined(), "copy_from needs a defined tensor, got ", describe());
  ZS_CHECK(static_cast<int64_t>(values.size()) == numel_, "copy_from: ", values.size(),
           " values for ", describe(), " with ", numel_, " elements");
  if (values.empty()) return;
  if (device().is_cpu()) {
    floats_to_host_bytes(values, dtype_, raw_data());
    return;
  }
  // A device tensor: convert on the host, then upload synchronously (the staging bytes are
  // freed on return, so the copy must be complete by then).
  (void)raw_device_data();  // throws ReleasedTensor naming the tensor
  std::vector<unsigned char> bytes(nbytes());
  floats_to_host_bytes(values, dtype_, bytes.data());
  device_kernels(device(), "copy_from").upload(*this, bytes.data());
}

void Tensor::copy_to_host(void* host) const {
  ZS_CHECK(defined(), "copy_to_host needs a defined tensor, got ", describe());
  if (nbytes() == 0) return;
  if (device().is_cpu()) {
    std::memcpy(host, raw_data(), nbytes());
    return;
  }
  (void)raw_device_data();  // throws ReleasedTensor naming the tensor
  device_kernels(device(), "copy_to_host").download(*this, host);
}

void Tensor::copy_from_host(const void* host) const {
  ZS_CHECK(defined(), "copy_from_host needs a defined tensor, got ", describe());
  if (nbytes() == 0) return;
  if (device().is_cpu()) {
    std::memcpy(raw_data(), host, nbytes());
    return;
  }
  (void)raw_device_data();  // throws ReleasedTensor naming the tensor
  device_kernels(device(), "copy_from_host").upload(*this, host);
}

void Tensor::fill(float value) const {
  if (defined() && !device().is_cpu()) {
    if (numel_ == 0) return;
    (void)raw_device_data();                              // throws ReleasedTensor naming the tensor
    device_kernels(device(), "fill").fill(*this, value);  // a kernel: no host staging
    return;
  }
  copy_from(std::vector<float>(static_cast<size_t>(numel_), value));
}

float Tensor::item() const {
  ZS_CHECK(numel_ == 1, "item() of ", describe(), ", which has ", numel_, " elements");
  return to_vector()[0];
}

void accumulate_into(const Tensor& dst, const Tensor& src) {
  ZS_CHECK(dst.numel() == src.numel(), "accumulate_into: ", src.describe(), " into ",
           dst.describe());
  if (!dst.device().is_cpu() || !src.device().is_cpu()) {
    ZS_CHECK(dst.device() == src.device(), "accumulate_into: ", src.describe(), " on ",
             src.device().str(), " into ", dst.describe(), " on ", dst.device().str(),
             "; both must be on one device (copy one of them first)");
    ZS_CHECK(is_floating(dst.dtype()) && is_floating(src.dtype()),
             "accumulate_into needs floating tensors, got ", src.describe(), " into ",
             dst.describe());
    if (dst.numel() == 0) return;
    (void)dst.raw_device_data();  // throw ReleasedTensor naming the tensor
    (void)src.raw_device_data();
    device_kernels(dst.device(), "accumulate_into").accumulate(dst, src);
    return;
  }
  const size_t n = static_cast<size_t>(dst.numel());
  if (dst.dtype() == DType::kF32 && src.dtype() == DType::kF32) {
    float* d = dst.data<float>();
    const float* s = src.data<float>();
    for (size_t i = 0; i < n; ++i) d[i] += s[i];
    return;
  }
  ZS_CHECK(is_floating(dst.dtype()) && is_floating(src.dtype()),
           "accumulate_into needs floating tensors, got ", src.describe(), " into ",
           dst.describe());
  std::vector<float> sum = dst.to_vector();
  std::vector<float> add = src.to_vector();
  for (size_t i = 0; i < n; ++i) sum[i] += add[i];
  dst.copy_from(sum);
}

void zero_bytes(const Tensor& t) {
  if (!t.defined() || t.nbytes() == 0) return;
  if (t.device().is_cpu()) {
    std::memset(t.raw_data(), 0, t.nbytes());
    return;
  }
  (void)t.raw_device_data();  // throws ReleasedTensor naming the tensor
  device_kernels(t.device(), "zero_bytes").zero_bytes(t);
}

void fill_index_mod(const Tensor& t, int64_t period) {
  ZS_CHECK(t.defined() && t.dtype() == DType::kI32, "fill_index_mod needs an int32 tensor, got ",
           t.describe());
  if (t.numel() == 0) return;
  ZS_CHECK(period > 0 && period <= INT32_MAX, "fill_index_mod: period ", period,
           " must be in [1, 2^31) for ", t.describe());
  if (t.device().is_cpu()) {
    int32_t* values = t.data<int32_t>();
    for (int64_t i = 0; i < t.numel(); ++i) values[i] = static_cast<int32_t>(i % period);
    return;
  }
  (void)t.raw_device_data();  // throws ReleasedTensor naming the tensor
  const DeviceKernels& kernels = device_kernels(t.device(), "fill_index_mod");
  ZS_CHECK(kernels.fill_index_mod != nullptr, "fill_index_mod on ", t.device().str(), ": the ",
           kernels.name, " kernels have no fill_index_mod");
  kernels.fill_index_mod(t, period);
}

}  // namespace zs
