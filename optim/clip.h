// Global gradient-norm clipping over sharded or replicated gradients: one all-reduce of the
// ranks' local sums of squares.
//
// The local sum is Σ g² over the covered elements of each view (padding excluded), in fp64, in
// a fixed order that depends only on which elements are covered and where they sit in the view:
// blocks of 4096 elements from the view's start, eight interleaved lanes inside a block (element
// i goes to lane i mod 8, in increasing i), lanes then blocks added in order. So the sum does not
// depend on the thread count, and a slice_view of a replicated buffer sums to the same bits as
// the shard with the same elements.
//
// Counting every element exactly once (pick one; both are correct):
//  * Owned slices, replication = 1 (recommended). Each rank sums only the elements it owns: in
//    stages 1–3 its shard views; in stage 0, where every rank holds the full all-reduced
//    gradient, slice_view(full_view, r·shard_numel, (r+1)·shard_numel) — the slice it would own
//    in stage 1. The local sums, hence the norms, are then bitwise the same in every stage.
//  * Replicated sums, replication = R. Every rank sums its whole copy, where each element is
//    held by exactly R ranks of `comm` (stage 0: R = world size); the all-reduced total is
//    divided by R. Simplest for DDP, but equal to the sharded norm only within rounding.
//  For hybrid sharding, the shard gradients are identical across groups after the cross-group
//  all-reduce: pass the intra-group communicator with replication = 1, or the world with
//  replication = number of groups.
//
// The communication layer moves fp32 (not fp64): each rank's fp64 sum is rounded to fp32 once
// before the all-reduce, which adds in rank order; every rank gets the same bits.
//
// Views with a gate (the sharding engine's, runtime/shard_view.h) are read and scaled only while
// it says the step's gradients are complete (after finish_backward, before the next backward).
//
// Thread-safety: global_grad_norm and clip_grad_norm are collectives on `comm` (every rank of
// the group calls them, in the same order as its other collectives); the loops use the calling
// thread's OpenMP team. Gradients are written only by scale_grads and clip_grad_norm.
#pragma once

#include <vector>

#include "comm/communicator.h"
#include "optim/shard_view.h"

namespace zs::optim {

// Σ g² over the covered elements of `view` (of all views, added in order), fp64, fixed order.
double grad_sum_of_squares(const ShardView& view);
double grad_sum_of_squares(const std::vector<ShardView>& views);

// √(Σ over ranks of local_sum_of_squares / replication): ONE all_reduce (sum) of a fp32 [1]
// tensor, waited for before returning. replication must divide comm.size().
float global_grad_norm(double local_sum_of_squares, comm::Communicator& comm, int replication = 1,
                       const comm::CollectiveOptions& options = {});

// min(1, max_norm / (total_norm + 1e-6)), in fp32. max_norm must be > 0. A non-finite norm
// gives 0 or NaN: check the norm first (clip_grad_norm does).
float clip_coefficient(float total_norm, float max_norm);

// g ← coefficient·g over the covered elements of every view (padding untouched); nothing to do
// when coefficient == 1. The same per-element multiply as ops::scale_.
void scale_grads(const std::vector<ShardView>& views, float coefficient);

// Local sum, global norm, clip coefficient and scaling in one call; returns the global norm
// before clipping. A non-finite norm (an inf or NaN gradient somewhere) leaves every gradient
// untouched and is returned as is, so the caller can skip the step or stop with an error.
float clip_grad_norm(const std::vector<ShardView>& views, float max_norm, comm::Communicator& comm,
                     int replication = 1, const comm::CollectiveOptions& options = {});

}  // namespace zs::optim
