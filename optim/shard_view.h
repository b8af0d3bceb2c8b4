// ShardView: what one rank's optimizer updates in one flat buffer — its fp32 master shard, the
// fp32 gradient shard of the same length, and the parameter segments that the shard covers.
//
// The sharding engine flattens a unit's parameters into one buffer padded to a multiple of
// (world size × alignment); rank r owns the r-th contiguous slice. A ShardView describes that
// slice in shard-local element offsets: each Segment [begin, end) is the part of one parameter
// (or of several adjacent parameters with the same decay flag) that falls inside the shard, with
// its weight-decay flag. Elements covered by no segment are padding: optimizers, clipping and
// the loss scaler never read or write them (master, gradient and optimizer state keep whatever
// they hold, normally 0). An unsharded parameter is a view with one segment over all of it.
//
// A ShardView holds Tensor handles: it keeps the buffers' storages alive but owns no copy of the
// data. Views are values; the functions here are pure and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace zs::optim {

// Elements [begin, end) of a shard, in shard-local offsets, and whether they get weight decay.
struct Segment {
  int64_t begin = 0;
  int64_t end = 0;
  bool decay = true;
};

struct ShardView {
  // Names the view in errors and in state_dict keys ("blocks.3 shard 1/4"); may be empty.
  std::string name;
  Tensor master;  // fp32, updated in place; any shape, its elements in flat order
  Tensor grad;    // fp32, master.numel() elements; read only, except by clipping and unscaling
  std::vector<Segment> segments;
};

// The segments sorted by begin, empty ones dropped and adjacent ones with the same decay flag
// merged. Throws InvalidArgument (naming `what`) when a segment is reversed, leaves [0, numel)
// or overlaps another.
std::vector<Segment> normalize_segments(std::vector<Segment> segments, int64_t numel,
                                        const std::string& what);

// Checks that the view's master and grad are defined, fp32 and of equal numel, that they are
// not the same memory, and that its segments are valid (see normalize_segments). `who` names the
// caller in the message ("AdamW"). Throws InvalidArgument.
void check_shard_view(const ShardView& view, const char* who);

// Elements [begin, end) of `view` as a view of their own: master and grad are views of the same
// storages (no copy, no autograd record), segments are clipped to the range and shifted to start
// at 0. Use it to split a shard into sub-groups (offload), or in stage 0 to name the slice of a
// replicated gradient that this rank counts in the global norm (optim/clip.h).
ShardView slice_view(const ShardView& view, int64_t begin, int64_t end);

// An unsharded parameter as a view: one segment over all of `param`, with `decay`.
ShardView whole_tensor_view(const Tensor& param, const Tensor& grad, bool decay);

// The number of elements the view's segments cover (its numel minus the padding).
int64_t covered_numel(const ShardView& view);

}  // namespace zs::optim
