// Host↔device copies on a dedicated copy stream.
//
// A CopyStream owns a non-blocking stream on one device: uploads (host → device), downloads
// (device → host) and device → device copies are enqueued there, so they overlap with compute
// on other streams. The consumer of a copy is ordered after it on the GPU with
// order_before(consumer) (an event; the host does not block); the host waits with synchronize().
// Copies use cudaMemcpyDefault: with unified addressing CUDA infers the direction from the
// pointers, so one call serves every direction.
//
// Asynchrony needs pinned host memory (runtime/cuda/allocator.h, PinnedHostAllocator): a copy
// from or to pageable memory is staged by the driver and returns only once the host side is
// done with the source (upload) or the data has arrived (download).
//
// Lifetime: a copy reads and writes its buffers after the call returns. The caller keeps both
// alive and untouched until the copy has completed (synchronize(), or work ordered after it) —
// the same rule as a Work's buffers in comm/work.h.
//
// Thread-safety: one thread enqueues on a CopyStream at a time; synchronize() is safe from any.
#pragma once

#include <cstddef>
#include <string>

#include "runtime/cuda/stream.h"
#include "runtime/tensor.h"

namespace zs::cuda {

class CopyStream {
 public:
  explicit CopyStream(int device);
  ZS_DISALLOW_COPY(CopyStream);

  // dst ← src, `nbytes` bytes, any combination of host (pinned or not) and device pointers.
  void copy(void* dst, const void* src, size_t nbytes);
  // dst ← src: same dtype and number of elements (shapes may differ, as a flat copy).
  void copy(const Tensor& dst, const Tensor& src);

  // Work enqueued on `consumer` after this call waits for every copy enqueued so far.
  void order_before(Stream& consumer);
  // Work enqueued on this copy stream after the call waits for `producer`'s work so far (e.g. a
  // download of a tensor that a kernel on `producer` writes).
  void order_after(Stream& producer) { stream_.wait_for(producer); }
  // Blocks the host until every copy enqueued so far completes.
  void synchronize() const { stream_.synchronize(); }

  Stream& stream() { return stream_; }
  int device() const { return stream_.device(); }

 private:
  Stream stream_;
  Event done_;  // recorded by order_before
};

// A device copy of a host tensor on `device_allocator`, uploaded on `copies`; the result may be
// used by work on `copies.stream()` at once, by other streams after copies.order_before(them).
Tensor to_device(const Tensor& host, Allocator& device_allocator, CopyStream& copies,
                 const std::string& name = "");
// A host copy of a device tensor on `host_allocator`; waits for the download before returning
// (so the result is ready on return). The caller orders the producer of `device` first
// (copies.order_after(producer)).
Tensor to_host(const Tensor& device, Allocator& host_allocator, CopyStream& copies,
               const std::string& name = "");

}  // namespace zs::cuda
