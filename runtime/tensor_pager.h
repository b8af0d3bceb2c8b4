// TensorPager: where per-unit tensors live when they are not resident in memory — the NVMe tier
// of offload (offload/nvme_pager.h implements it over the rank's NVMe store; the layers below
// offload only know this interface, as the layers require). Its users: the optimizer's state
// (optim/optimizer.h; AdamW's m and v per view) and stage 3's parameter shards
// (sharding/sharded_model.h, parameter offload to NVMe).
//
// The contract, per view (an optimizer's view, a sharded unit): attach() is called once, by the
// user's constructor, with every view's element count and the number of tensors per view; the
// pager reserves its space, and every view's tensors read as zeros until first written.
// acquire(v) returns view v's tensors (fp32, the view's element count, in the order the user
// gave them meaning), resident and readable and writable until release(v); acquire_for_overwrite(v)
// the same without reading them in (their contents are unspecified: for a user about to write
// every element); prefetch(v, may_wait) starts bringing them in ahead of acquire (with may_wait
// false it never waits for the disk: it skips the view when no buffer is free without waiting for
// a write-out); release(v, dirty) gives them back, changed when dirty (the pager writes them out
// before it reuses their memory, asynchronously where it can; a clean release promises the
// bytes are as acquired); flush() writes out every released changed view, waits for every
// write-out and throws the first I/O error. At most a bounded number of
// views are resident at once (the pager's buffers); acquiring more views than that without
// releasing is an error the pager names. A user of other dtypes keeps bytes in the fp32 tensors
// (a 16-bit shard of n elements in n / 2 of them).
//
// PageAccess holds one view's tensors resident for a scope: acquired from a pager (given back at
// its end, written out if mark_written() was called), or a resident user's own tensors (pager
// null: nothing to give back). Its users: the optimizer's state and master access
// (optim/optimizer.h), the sharding engine's paged masters (sharding/sharded_model.h).
//
// Thread-safety: one user uses its pager from one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensor.h"

namespace zs {

class TensorPager {
 public:
  virtual ~TensorPager() = default;

  virtual void attach(const std::vector<int64_t>& view_numel, size_t tensors_per_view) = 0;
  virtual void prefetch(size_t view, bool may_wait) = 0;
  virtual std::vector<Tensor> acquire(size_t view) = 0;
  virtual std::vector<Tensor> acquire_for_overwrite(size_t view) = 0;
  virtual void release(size_t view, bool dirty) = 0;
  virtual void flush() = 0;
  // Human-readable: where the tensors live ("NVMe: 2 files under /mnt/nvme, io_uring").
  virtual std::string describe() const = 0;
};

// A pager's fp32 page (one of the tensors acquire() hands out) as a tensor of `shape` and
// `dtype`: its bytes from the page's start (a user of other dtypes keeps bytes in the page).
Tensor page_view(const Tensor& page, const Shape& shape, DType dtype, const std::string& name);

class PageAccess {
 public:
  // `pager` null: `tensors` are resident and nothing is given back; else view `view` of `pager`,
  // acquired by the caller, is released by this object.
  PageAccess(TensorPager* pager, size_t view, std::vector<Tensor> tensors)
      : pager_(pager), view_(view), tensors_(std::move(tensors)) {}
  ~PageAccess();
  PageAccess(PageAccess&& other) noexcept;
  PageAccess(const PageAccess&) = delete;
  PageAccess& operator=(const PageAccess&) = delete;
  PageAccess& operator=(PageAccess&&) = delete;
  const std::vector<Tensor>& tensors() const { return tensors_; }
  // The tensors were changed: a paged view is written back at the end.
  void mark_written() { written_ = true; }

 private:
  TensorPager* pager_;
  size_t view_;
  std::vector<Tensor> tensors_;
  bool written_ = false;
};

}  // namespace zs
