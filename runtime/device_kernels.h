// The per-device-kind hook table behind the runtime's host helpers: what Tensor::to_vector,
// copy_from, copy_to_host, copy_from_host, fill, zeros, zero_bytes, fill_index_mod and
// accumulate_into (and through them the autograd tape,
// which sums gradients with accumulate_into and seeds backward with fill) do for a tensor that
// is not on the CPU.
//
// Why a table: zs_runtime must not link a device library (the CPU build never needs the CUDA
// toolkit), yet the tape and the tests must work on device tensors. So the runtime keeps one
// entry per Device::Kind, and the device's own library installs its kernels there. The CUDA
// entry is installed by zs::cuda::CudaAllocator's constructor (runtime/cuda/allocator.h): a CUDA
// tensor can only exist once a CudaAllocator has been constructed, so the entry is present
// whenever a CUDA tensor is. A tensor on a device kind whose entry is missing (e.g. memory that
// an allocator merely labels cuda:N) is refused with InvalidArgument by name, never touched as
// host memory. CPU tensors never go through the table: their code paths are the plain loops in
// runtime/tensor.cc.
//
// The hooks are host helpers, not a compute path: download/upload are synchronous (they return
// once the copy is complete), the others are enqueued in the device's stream order and return
// at once. Each hook receives tensors of its own device kind.
//
// The same shape serves the layers above the runtime: DeviceTables<Table> is one slot per
// Device::Kind for a table type of that layer (ops' per-op kernels, optim's device loops, train's
// rank devices, comm's nccl backend), filled by the device's library when it is linked (see
// "Registration" below) and looked up by the shared code, which names the device and the missing
// backend when a slot is empty. No shared file has an `#if` on a backend: a build without CUDA
// simply has nothing in the CUDA slots.
//
// Registration. This table (DeviceKernels) is installed by CudaAllocator's constructor: a CUDA
// tensor exists only after one was constructed. The tables of the upper layers cannot be
// installed from there (runtime/cuda is below ops/cuda), so each backend library installs its
// tables from a static initializer in its register.cc, and its CMake target adds the linker
// option `--undefined=<that file's anchor symbol>` to its INTERFACE link options: every program
// that links the backend library, directly or through another target (zs_train links all of
// them in a CUDA build), pulls register.cc out of the static archive and so runs the
// initializer. This holds for static libraries (where an unreferenced object would otherwise be
// dropped) without --whole-archive, whose CMake feature refuses a library that is also linked
// without it elsewhere. The slots are constant-initialized atomics, so the order of static
// initializers does not matter.
//
// Thread-safety: install_device_kernels and device_kernels may be called from any thread (one
// atomic pointer per kind). The table entry must have static storage duration.
#pragma once

#include <atomic>
#include <cstdint>

#include "runtime/device.h"

namespace zs {

inline constexpr int kDeviceKinds = 2;  // Device::Kind::kCPU, kCUDA

// One installed table of type Table per Device::Kind (nullptr: none). The slots of each Table
// type are one object in the whole program (a function-local static of a template: vague
// linkage), whichever library installs or reads them.
template <typename Table>
class DeviceTables {
 public:
  // Installs (or, with nullptr, removes) the table of `kind`; `table` must have static storage.
  static void install(Device::Kind kind, const Table* table) {
    slot(kind).store(table, std::memory_order_release);
  }
  // The table of `kind`, or nullptr when no library installed one.
  static const Table* find(Device::Kind kind) { return slot(kind).load(std::memory_order_acquire); }

 private:
  static std::atomic<const Table*>& slot(Device::Kind kind) {
    // Zero-initialized before any dynamic initializer runs (static storage, trivial type).
    static std::atomic<const Table*> slots[kDeviceKinds];
    return slots[static_cast<int>(kind)];
  }
};

class Tensor;

struct DeviceKernels {
  const char* name = "";  // "cuda", for messages
  // Copies src.nbytes() bytes of `src` into host memory `host`; returns once they arrived.
  void (*download)(const Tensor& src, void* host) = nullptr;
  // Copies dst.nbytes() bytes from host memory `host` into `dst`; returns once they are copied
  // (the caller may free `host` at once).
  void (*upload)(const Tensor& dst, const void* host) = nullptr;
  // Every element of dst = value converted to dst's dtype (fp32/fp16/bf16 round to nearest
  // even, int32 truncates), as Tensor::fill does on the CPU.
  void (*fill)(const Tensor& dst, float value) = nullptr;
  // Every byte of dst = 0 (+0 in every dtype).
  void (*zero_bytes)(const Tensor& dst) = nullptr;
  // dst += src element-wise, summed in fp32 and rounded once to dst's dtype (floating dtypes;
  // the CPU's accumulate_into formula).
  void (*accumulate)(const Tensor& dst, const Tensor& src) = nullptr;
  // Element i of the int32 tensor dst = i mod period (fill_index_mod; 0 < period < 2^31).
  void (*fill_index_mod)(const Tensor& dst, int64_t period) = nullptr;
};

// Installs (or, with nullptr, removes) the table of `kind`; `kernels` must outlive every later
// use (static storage). Installing the CPU kind is refused: CPU tensors never use the table.
void install_device_kernels(Device::Kind kind, const DeviceKernels* kernels);
// True when `kind` has a table.
bool has_device_kernels(Device::Kind kind);
// The table of `device`'s kind; throws InvalidArgument naming `what` and the device when none is
// installed (no allocator of that kind was ever constructed in this process).
const DeviceKernels& device_kernels(Device device, const char* what);

}  // namespace zs
