// StatePager: where an optimizer's per-element state lives when it is not resident in memory —
// the NVMe tier of optimizer offload (offload/nvme_state_pager.h implements it over the rank's
// NVMe store; the optimizer layer only knows this interface, as the layers require).
//
// The contract, per view of the optimizer (optim/optimizer.h): attach() is called once, by the
// optimizer's constructor, with every view's element count and the number of state tensors per
// view; the pager reserves its space, and every view's state reads as zeros until first written.
// acquire(v) returns view v's state tensors (fp32, the view's master shape, in the order of the
// optimizer's state_names()), resident and readable and writable until release(v); prefetch(v,
// may_wait) starts bringing them in ahead of acquire (with may_wait false it never waits for the
// disk: it skips the view when no buffer is free without waiting for a write-out); release(v,
// dirty) gives them back, writing them out (asynchronously) when dirty; flush() waits for every
// write-out and throws the first I/O error. At most a bounded number of views are resident at once
// (the pager's buffers); acquiring more views than that without releasing is an error the pager
// names.
//
// Thread-safety: one optimizer uses its pager from one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace zs::optim {

class StatePager {
 public:
  virtual ~StatePager() = default;

  virtual void attach(const std::vector<int64_t>& view_numel, size_t states_per_view) = 0;
  virtual void prefetch(size_t view, bool may_wait) = 0;
  virtual std::vector<Tensor> acquire(size_t view) = 0;
  virtual void release(size_t view, bool dirty) = 0;
  virtual void flush() = 0;
  // Human-readable: where the state lives ("NVMe: 2 files under /mnt/nvme, io_uring").
  virtual std::string describe() const = 0;
};

}  // namespace zs::optim
