// NvmePager: paged tensors on the rank's NVMe tier (runtime/tensor_pager.h over
// offload/nvme_store.h) — ZeRO-Infinity's optimizer state swapping (AdamW's m and v per unit)
// and parameter swapping (stage 3's parameter shards), with the rank's host memory bounded by a
// fixed number of buffers whatever the model's size. Each use has a pager (and a store) of its own.
//
// Layout. attach() makes the store (its files sized for exactly its user's tensors: so a missing
// directory, a filesystem without O_DIRECT or a full disk is an error when the optimizer or the
// sharded model is built, before training starts) and reserves, per view and state tensor, a region
// of the view's fp32 bytes (rounded up to the store's 4 KiB alignment). A view's state reads as
// zeros until it is first written out (no bytes are read or written for it before), as the resident
// optimizer's zero-filled state.
//
// Buffers. `buffers` host buffers, each holding one view's state tensors (sized for the largest
// view), allocated once from the given allocator — the rank's host tier (offload/host_pool.h:
// budgeted, charged as `category`, pinned on a CUDA rank) — and 4 KiB aligned for O_DIRECT.
// A buffer is free, reading (prefetched), acquired, or idle (released). prefetch() takes a free
// buffer or evicts the idle one the policy picks (writing it out and waiting for that first) and
// never one that is reading or acquired: with too few buffers a prefetch does nothing and
// acquire() reads then. acquire() also evicts a reading one if it must.
// acquire_for_overwrite() takes a buffer the same way and reads nothing. A prefetch that may not
// wait takes only an idle buffer already written out.
//
// Write-back. A dirty release only marks the buffer changed: a view stays in its buffer,
// unwritten, until an eviction needs the buffer (or flush()). Writing every changed view at
// release would move every view's bytes out every step even where the buffers keep them. The
// write-out of the next victim starts as soon as an eviction of it is coming (no free buffer, and
// a view not in any buffer is needed before it; LRU does not know the order: any such view), so
// the read that takes the buffer does not wait for the write on its own path.
//
// Eviction. kLeastRecentlyUsed (the default; stage 3's parameter shards, read in forward order
// and again in reverse) evicts the idle view released longest ago. kSweeps is for a user that
// acquires its views in sweeps, alternately 0..N-1 and N-1..0 (the optimizer's step, which
// alternates its direction every step, optim/optimizer.h): the pager follows the sweep (the
// direction turns after the end view is acquired, and that view is the next sweep's first),
// evicts the idle view whose next use is farthest, and skips a prefetch of a view needed later
// than every resident one (Belady's choice for a known order). With K buffers and N > K views
// a sweep reads N − K views and writes N − K. The same order every step would read N − K + 1
// (the view needed next is the one just evicted), and LRU in the same order every step reads
// and writes all N. Three buffers give the optimizer's pipeline its overlap (read i+1, update
// i, write the victim); one works, serially (no prefetch).
//
// Errors: the store's IoErrors, from acquire() (a read), and from flush() or an eviction (a
// write-out, or a write the store refuses). A failed write-out loses nothing: the buffer keeps its
// view, changed, and is not reused until a later write-out of it lands (with the disk full for
// good, every eviction of it fails, so the run stops on the error). Acquiring more views than
// there are buffers is an InvalidArgument.
//
// Ownership: the pager owns its store; the allocator and the file system must outlive it.
// Thread-safety: one thread (its user's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "offload/nvme_store.h"
#include "runtime/allocator.h"
#include "runtime/memory_tracker.h"
#include "runtime/tensor.h"
#include "runtime/tensor_pager.h"

namespace zs::offload {

class NvmePager final : public TensorPager {
 public:
  enum class Eviction { kLeastRecentlyUsed, kSweeps };
  // `store`: the store's options but its capacity (attach() sizes it). `what` names the tensors
  // in errors and the buffers' labels; `category` charges the buffers in the host tier.
  NvmePager(const NvmeStoreOptions& store, Allocator& host, int buffers,
            const FileSystem& file_system = posix_file_system(),
            std::string what = "optimizer state",
            MemoryCategory category = MemoryCategory::kOptimizerState,
            Eviction eviction = Eviction::kLeastRecentlyUsed);
  ~NvmePager() override;

  void attach(const std::vector<int64_t>& view_numel, size_t states_per_view) override;
  void prefetch(size_t view, bool may_wait) override;
  std::vector<Tensor> acquire(size_t view) override;
  std::vector<Tensor> acquire_for_overwrite(size_t view) override;
  void release(size_t view, bool dirty) override;
  void flush() override;
  std::string describe() const override;

  // Seconds acquire() and flush() spent waiting for the disk, since construction.
  double wait_seconds() const { return wait_seconds_; }
  // Host bytes of the buffers.
  uint64_t buffer_bytes() const;
  // The store (after attach()).
  const NvmeStore& store() const;

 private:
  enum class State { kFree, kReading, kAcquired, kIdle };
  struct Buffer {
    Tensor memory;            // the allocation (4 KiB of slack for the alignment)
    uint64_t aligned_at = 0;  // byte offset of the aligned start in `memory`
    State state = State::kFree;
    size_t view = 0;
    uint64_t released_at = 0;  // release order, for eviction
    bool dirty = false;        // changed since its last write-out started
    std::vector<NvmeStore::Io> reads;
    std::vector<NvmeStore::Io> writes;
  };
  // The buffer holding `view`, or -1.
  int buffer_of(size_t view) const;
  // A buffer to put `view` into: free, else the idle one the eviction policy picks (unless
  // `may_wait`, only one written out; kSweeps: for a prefetch only one needed after
  // `view`), else (only `for_acquire`) a reading one; -1 if none. Waits for an evicted buffer's
  // I/O.
  int take_buffer(size_t view, bool for_acquire, bool may_wait);
  // kSweeps: how many acquires from the position until `view` is used.
  size_t distance(size_t view) const;
  // kSweeps: follows an acquire of `view` (the direction turns after an end view).
  void advance(size_t view);
  // Whether the eviction policy throws out `candidate` before `current`.
  bool evicts_before(const Buffer& candidate, const Buffer& current) const;
  // A free buffer, or -1.
  int first_free() const;
  // The idle buffer the eviction policy throws out first (`written_only`: among those whose
  // bytes are on the disk), or -1.
  int best_idle(bool written_only) const;
  // The idle buffer the next eviction takes when no buffer is free, or -1.
  int next_victim() const;
  // Bytes of one state tensor's region of `view` in the store (4 KiB aligned).
  uint64_t region_bytes(size_t view) const;
  // Starts writing the buffer's view out.
  void write_out(Buffer& buffer);
  // Starts the write-out of the next victim if it is changed and an eviction of it is coming.
  void write_ahead();
  bool writes_done(const Buffer& buffer) const;
  // Waits for the buffer's write-outs; after a failure the buffer is changed again (dirty).
  void wait_writes(Buffer& buffer);
  // Puts `view` into the buffer: reads it in (zeros if never written), or with `read` false
  // nothing (acquire_for_overwrite).
  void start_read(int buffer, size_t view, bool read);
  std::vector<Tensor> acquire(size_t view, bool read);
  void wait_all(std::vector<NvmeStore::Io>& ios);
  void check_view(size_t view) const;
  char* data(Buffer& buffer) const;

  NvmeStoreOptions store_options_;
  const FileSystem& file_system_;
  std::unique_ptr<NvmeStore> store_;
  Allocator& host_;
  int buffer_count_;
  std::vector<Buffer> buffers_;
  size_t states_ = 0;
  std::vector<int64_t> numel_;
  std::vector<std::vector<uint64_t>> offsets_;  // [view][state]: region in the store
  Eviction eviction_;
  size_t position_ = 0;        // kSweeps: the view used next
  bool ascending_ = true;      // kSweeps: the direction of the sweep under way
  std::vector<bool> written_;  // a view's state was written out at least once
  uint64_t stride_ = 0;        // bytes per state tensor in a buffer
  uint64_t releases_ = 0;
  double wait_seconds_ = 0.0;
  std::string what_;
  MemoryCategory category_;
};

}  // namespace zs::offload
