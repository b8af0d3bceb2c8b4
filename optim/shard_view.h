// The functions over shard views (runtime/shard_view.h): segment normalization and checks,
// sub-views and whole-tensor views. optim names the view types in its own namespace (ShardView,
// Segment): they are the runtime's types, the same ones the sharding engine hands out.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/shard_view.h"
#include "runtime/tensor.h"

namespace zs::optim {

using ShardView = ::zs::ShardView;
using Segment = ::zs::ShardSegment;

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
// at 0; the gate is shared. Use it to split a shard into sub-groups (offload), or in stage 0 to
// name the slice of a replicated gradient that this rank counts in the global norm (optim/clip.h).
ShardView slice_view(const ShardView& view, int64_t begin, int64_t end);

// An unsharded parameter as a view: one segment over all of `param`, with `decay`.
ShardView whole_tensor_view(const Tensor& param, const Tensor& grad, bool decay);

// The gates of `views`, each once, in the order first seen (views without a gate have none).
std::vector<GradientGate*> distinct_gates(const std::vector<ShardView>& views);

// Asks each distinct gate of `views` whether the gradients may be used as `use` now, and returns
// the gates asked; throws what a gate throws. Views without a gate pass. Every consumer of a
// step's gradients (optimizers, clipping, unscaling) calls it before touching them.
std::vector<GradientGate*> check_gradient_gates(const std::vector<ShardView>& views,
                                                GradientUse use, const char* consumer);

// The number of elements the view's segments cover (its numel minus the padding).
int64_t covered_numel(const ShardView& view);

}  // namespace zs::optim
