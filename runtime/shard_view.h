// ShardView: what one rank's optimizer updates in one flat buffer — its fp32 master shard, the
// fp32 gradient shard of the same length, the parameter segments that the shard covers, and the
// gate through which the gradients' producer says whether they may be read now.
//
// The one type the sharding engine hands out (ShardedModel::local_shards(), one view per unit)
// and the optimizers, clipping and the loss scaler take (optim/). It lives in runtime/ because
// those two layers are siblings that may not include each other (ARCHITECTURE.md: sharding sits
// on runtime/comm/models, optim on runtime/ops/comm); runtime is the lowest layer both see, and
// the view is only tensors and offsets, so it needs nothing above it. The functions over views
// (segment normalization, slicing, checks) are optim's: optim/shard_view.h.
//
// The sharding engine flattens a unit's parameters into one buffer padded to a multiple of
// (world size × alignment); rank r owns the r-th contiguous slice. A ShardView describes that
// slice in shard-local element offsets: each ShardSegment [begin, end) is the part of one
// parameter (or of several adjacent parameters with the same decay flag) that falls inside the
// shard, with its weight-decay flag. Elements covered by no segment are padding: optimizers,
// clipping and the loss scaler never read or write them. An unsharded parameter is a view with
// one segment over all of it (and no gate).
//
// A ShardView holds Tensor handles and a shared gate: it keeps the buffers' storages (and the
// gate) alive but owns no copy of the data. Views are values. A gate belongs to its producer's
// thread (the rank's compute thread) like the rest of the step: not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensor.h"
#include "runtime/tensor_pager.h"

namespace zs {

// Elements [begin, end) of a shard, in shard-local offsets, and whether they get weight decay.
struct ShardSegment {
  int64_t begin = 0;
  int64_t end = 0;
  bool decay = true;
};

// How a consumer uses a view's gradients.
enum class GradientUse {
  kRead,  // reads or rescales them in place (global norm, clipping, unscaling)
  kStep,  // updates the masters from them (an optimizer step)
};

// The producer of a view's gradients (ShardedModel) decides when they hold a complete step's
// values; consumers ask it first, so that a missed call (finish_backward, after_step) is an error
// that names it instead of a step on stale or partial gradients. Views built by hand have no
// gate: then nothing is checked.
class GradientGate {
 public:
  virtual ~GradientGate() = default;
  // Throws InvalidArgument naming `consumer` and the call it missed unless the gradients may be
  // used that way now.
  virtual void check(GradientUse use, const char* consumer) const = 0;
  // An optimizer step updated the masters from the gradients (after check(kStep, …) passed for
  // every view it updates).
  virtual void stepped() = 0;
};

// Where a view's master is when it is not resident (optimizer offload to NVMe: ShardedModel
// pages the masters, sharding/sharded_model.h). The view's `master` is then a handle with the
// master's shape and a released storage (Storage::create_released: no memory, a data access is
// a ReleasedTensor error naming it), and the values are page `page` of `pager` (its one fp32
// tensor, master.numel() elements). Who reads or writes the master (an optimizer's step, a
// checkpoint) acquires that page and releases it, dirty when written. `updated` is called by an
// optimizer with the resident page right after it updated the master, so that the master's
// owner refreshes its compute copy from it without reading it back from the disk.
struct MasterPages {
  TensorPager* pager = nullptr;  // null: the master is resident
  size_t page = 0;
  std::function<void(const Tensor& master)> updated;
};

struct ShardView {
  ShardView() = default;
  ShardView(std::string name, Tensor master, Tensor grad, std::vector<ShardSegment> segments,
            std::shared_ptr<GradientGate> gate = nullptr)
      : name(std::move(name)),
        master(std::move(master)),
        grad(std::move(grad)),
        segments(std::move(segments)),
        gate(std::move(gate)) {}

  // Names the view in errors and in state_dict keys (the unit: "blocks.3"); may be empty.
  std::string name;
  Tensor master;  // fp32, updated in place; any shape, its elements in flat order
  Tensor grad;    // fp32, master.numel() elements; read only, except by clipping and unscaling
  std::vector<ShardSegment> segments;
  std::shared_ptr<GradientGate> gate;  // null: unchecked
  MasterPages pages;                   // pages.pager null: `master` is resident
};

}  // namespace zs
