// Internal: the OpenMP launcher that the optimizer, clipping and unscaling loops of optim/ share.
//
// A view's covered elements (its normalized segments) are split into contiguous ranges, one per
// thread of the calling thread's OpenMP team (its intra-op threads, see ops/cpu/gemm.h), with
// split points rounded to 16 elements so that no two threads write one cache line. The body
// runs a plain loop over its range, which the compiler vectorizes. The per-element math depends
// only on the element, so results never depend on the thread count or the split points.
#pragma once

#include <omp.h>

#include <cstdint>
#include <vector>

#include "optim/shard_view.h"

namespace zs::optim::detail {

// Below this many covered elements a loop runs on the calling thread: forking a team costs a few
// microseconds, more than the whole loop.
inline constexpr int64_t kParallelMinElements = int64_t{1} << 15;
// Split points between threads are multiples of this many elements (64 bytes of fp32).
inline constexpr int64_t kSplitAlignment = 16;

inline int64_t covered(const std::vector<Segment>& segments) {
  int64_t n = 0;
  for (const Segment& s : segments) n += s.end - s.begin;
  return n;
}

// Calls body(begin, end, decay) for disjoint ranges that together cover every segment exactly
// once, in parallel when the segments cover kParallelMinElements or more. `body` must not throw
// (take every pointer out of its tensors before calling this).
template <typename Body>
void parallel_for_segments(const std::vector<Segment>& segments, const Body& body) {
  if (covered(segments) < kParallelMinElements) {
    for (const Segment& s : segments) body(s.begin, s.end, s.decay);
    return;
  }
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads();
    const int64_t thread = omp_get_thread_num();
    for (const Segment& s : segments) {
      const int64_t n = s.end - s.begin;
      auto split = [&](int64_t part) {
        if (part == threads) return s.end;
        const int64_t point = (s.begin + n * part / threads) / kSplitAlignment * kSplitAlignment;
        return point > s.begin ? point : s.begin;
      };
      const int64_t begin = split(thread);
      const int64_t end = split(thread + 1);
      if (begin < end) body(begin, end, s.decay);
    }
  }
}

}  // namespace zs::optim::detail
