// Tensor: a handle to a contiguous row-major array in a Storage — shared storage, byte offset,
// shape, dtype — plus the autograd identity of the value it holds.
//
// Copying a Tensor copies the handle: both copies are the same value for autograd (same grad).
// A view (view(), slice()) is a new tensor on the same storage at some offset; it has its own
// autograd identity. Parameters are views into their unit's flat buffer; when that buffer's
// storage is released, touching a parameter's data throws ReleasedTensor naming the parameter.
//
// Host and device: data<T>() / raw_data() give the host a pointer and refuse memory the host
// cannot dereference (CUDA device memory) by the tensor's name; device_data<T>() /
// raw_device_data() give the address on the tensor's own device, for device kernels and copies.
// The host helpers (to_vector, copy_from, fill, ...) work on any device.
//
// Thread-safety: a Tensor is a value; distinct handles may be used from distinct threads. The
// same storage written from two threads at once is the caller's race.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/storage.h"

namespace zs {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& shape);  // "[2, 3, 4]"
int64_t shape_numel(const Shape& shape);

struct AutogradMeta;

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false

  // A new tensor of `shape` on `allocator`, charged to `category` (default: the calling
  // thread's current category, see MemoryCategoryScope). Contents undefined.
  static Tensor empty(const Shape& shape, DType dtype, Allocator& allocator, std::string name = "");
  static Tensor empty(const Shape& shape, DType dtype, Allocator& allocator,
                      MemoryCategory category, std::string name = "");
  static Tensor zeros(const Shape& shape, DType dtype, Allocator& allocator, std::string name = "");
  static Tensor zeros(const Shape& shape, DType dtype, Allocator& allocator,
                      MemoryCategory category, std::string name = "");
  // A tensor viewing `storage` at `offset_bytes`; the range must fit.
  static Tensor from_storage(std::shared_ptr<Storage> storage, size_t offset_bytes,
                             const Shape& shape, DType dtype, std::string name = "");
  // A new tensor of the same shape, dtype and allocator as `like` (category: current).
  static Tensor empty_like(const Tensor& like, std::string name = "");

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }
  Device device() const;
  Allocator& allocator() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  size_t offset_bytes() const { return offset_bytes_; }
  bool is_released() const { return storage_ && storage_->is_released(); }

  // Host access. Typed data for the host to read and write; checks the dtype, that the storage
  // is not released, and that its memory is host-visible (Allocator::host_visible: not CUDA
  // device memory) — each error names the tensor, and the last its device and what to do.
  template <typename T>
  T* data() const {
    check_dtype(DTypeOf<T>::value);
    return static_cast<T*>(raw_data());
  }
  void* raw_data() const;
  bool is_host_visible() const { return defined() && storage_->host_visible(); }

  // Device access: the address of the first element in the memory of the tensor's device (a
  // device pointer for CUDA memory), for kernels, library calls and copies that run on that
  // device — never for the host to dereference unless is_host_visible(). Checks the dtype (typed
  // form) and that the storage is not released.
  template <typename T>
  T* device_data() const {
    check_dtype(DTypeOf<T>::value);
    return static_cast<T*>(raw_device_data());
  }
  void* raw_device_data() const;

  // Name used in errors ("blocks.3.attn.qkv.weight"); empty if unnamed.
  const std::string& name() const;
  Tensor& set_name(std::string name);
  std::string describe() const;  // "'name' [2, 3] fp32" for messages

  // Views share storage. view(): same elements, new shape (one -1 allowed). slice(): elements
  // [begin, begin + numel(shape)) of this tensor's flat order, as `shape`. Recorded for
  // autograd when this tensor requires grad.
  Tensor view(const Shape& shape) const;
  Tensor slice(int64_t begin, const Shape& shape) const;

  // Autograd. A leaf that requires grad accumulates its gradient into grad() (allocating it
  // if unset). set_grad() installs the buffer gradients accumulate into (a view of a flat
  // gradient buffer); it must have this tensor's shape and dtype.
  bool requires_grad() const;
  Tensor& set_requires_grad(bool requires_grad);
  bool is_leaf() const;
  Tensor grad() const;
  void set_grad(const Tensor& grad) const;
  // The same data as a new leaf that does not require grad.
  Tensor detach() const;
  const std::shared_ptr<AutogradMeta>& autograd_meta() const { return meta_; }

  // Host-side helpers: copy out/in as float (converting fp16/bf16/int32) or as raw bytes in the
  // tensor's dtype (copy_to_host/copy_from_host: nbytes() bytes at `host`), fill. Any device: a
  // device tensor goes through its device's hooks (runtime/device_kernels.h) — for CUDA, a
  // synchronous copy on the tensor's allocator stream (to_vector, copy_from, item, the raw
  // copies: the host waits for the work already enqueued there) or a kernel enqueued there
  // (fill). They are for tests, the tape and setup, not for a training step's inner loop.
  std::vector<float> to_vector() const;
  void copy_from(const std::vector<float>& values) const;
  void copy_to_host(void* host) const;
  void copy_from_host(const void* host) const;
  void fill(float value) const;
  float item() const;  // the single element of a 1-element tensor, as float

  void check_dtype(DType expected) const;

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_bytes_ = 0;
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::kF32;
  std::shared_ptr<AutogradMeta> meta_;
};

// dst += src element-wise (same number of elements; any floating dtypes, summed in fp32). Both
// on the same device; a device pair runs on that device (runtime/device_kernels.h).
void accumulate_into(const Tensor& dst, const Tensor& src);

// Every byte of t = 0 (+0.0 in every dtype), on any device.
void zero_bytes(const Tensor& t);

// Element i of the int32 tensor t = i mod period, on any device (a kernel on a device: no host
// copy, no wait). The position ids of a [batch, period] batch of sequences.
void fill_index_mod(const Tensor& t, int64_t period);

// Autograd state of one value, shared by copies of its Tensor handle and by the tape nodes
// that produce or consume it. It does not keep the tensor's data alive.
struct AutogradMeta {
  std::string name;
  bool requires_grad = false;
  bool is_leaf = true;  // false for outputs of recorded ops
  Tensor grad;          // accumulated gradient; for non-leaves, only during backward
  // What a gradient allocated for this value looks like.
  Shape shape;
  DType dtype = DType::kF32;
  Allocator* allocator = nullptr;
};

}  // namespace zs
