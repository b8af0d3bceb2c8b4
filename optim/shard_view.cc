// Segment normalization and checks, sub-views and whole-tensor views (optim/shard_view.h).
#include "optim/shard_view.h"

#include <algorithm>

#include "runtime/dtype.h"

namespace zs::optim {

std::vector<Segment> normalize_segments(std::vector<Segment> segments, int64_t numel,
                                        const std::string& what) {
  for (const Segment& s : segments) {
    ZS_CHECK(s.begin >= 0 && s.begin <= s.end && s.end <= numel, what, ": segment [", s.begin, ", ",
             s.end, ") is not inside the shard's [0, ", numel,
             ") elements; segments are shard-local element offsets (begin <= end)");
  }
  segments.erase(std::remove_if(segments.begin(), segments.end(),
                                [](const Segment& s) { return s.begin == s.end; }),
                 segments.end());
  std::sort(segments.begin(), segments.end(),
            [](const Segment& a, const Segment& b) { return a.begin < b.begin; });
  std::vector<Segment> merged;
  for (const Segment& s : segments) {
    if (!merged.empty()) {
      Segment& last = merged.back();
      ZS_CHECK(s.begin >= last.end, what, ": segments [", last.begin, ", ", last.end, ") and [",
               s.begin, ", ", s.end,
               ") overlap; every element belongs to at most one parameter segment");
      if (s.begin == last.end && s.decay == last.decay) {
        last.end = s.end;
        continue;
      }
    }
    merged.push_back(s);
  }
  return merged;
}

void check_shard_view(const ShardView& view, const char* who) {
  const std::string what = ::zs::detail::concat(who, " view '", view.name, "'");
  ZS_CHECK(view.master.defined(), what, ": the master shard is undefined");
  ZS_CHECK(view.master.dtype() == DType::kF32, what, ": the master shard ", view.master.describe(),
           " must be fp32 (mixed precision keeps fp32 master weights next to the optimizer "
           "state; cast the low-precision parameters' shard into a fp32 master copy)");
  ZS_CHECK(view.grad.defined(), what,
           ": the gradient shard is undefined; pass the fp32 "
           "gradient shard that belongs to master ",
           view.master.describe());
  ZS_CHECK(view.grad.dtype() == DType::kF32, what, ": the gradient shard ", view.grad.describe(),
           " must be fp32 (reduce in fp16/bf16 if you like, then accumulate into a fp32 shard)");
  ZS_CHECK(view.grad.numel() == view.master.numel(), what, ": the gradient shard ",
           view.grad.describe(), " has ", view.grad.numel(), " elements, the master shard ",
           view.master.describe(), " has ", view.master.numel(), "; they must match");
  // (A paged master, or a slice of one, has no memory here: it cannot be the gradient's.)
  ZS_CHECK(view.master.numel() == 0 || view.master.storage()->is_released() ||
               view.grad.raw_device_data() != view.master.raw_device_data(),
           what,
           ": the gradient and the master shard are the same memory; give the gradient its own "
           "buffer");
  (void)normalize_segments(view.segments, view.master.numel(), what);
}

namespace {

Tensor flat_range(const Tensor& t, int64_t begin, int64_t end) {
  return Tensor::from_storage(t.storage(),
                              t.offset_bytes() + static_cast<size_t>(begin) * dtype_size(t.dtype()),
                              {end - begin}, t.dtype(), t.name());
}

}  // namespace

ShardView slice_view(const ShardView& view, int64_t begin, int64_t end) {
  const int64_t numel = view.master.numel();
  ZS_CHECK(0 <= begin && begin <= end && end <= numel, "slice_view: range [", begin, ", ", end,
           ") is not inside view '", view.name, "' of ", numel, " elements");
  ShardView out;
  out.name = view.name;
  out.gate = view.gate;
  out.master = flat_range(view.master, begin, end);
  if (view.grad.defined()) out.grad = flat_range(view.grad, begin, end);
  for (const Segment& s : view.segments) {
    const int64_t b = std::max(s.begin, begin);
    const int64_t e = std::min(s.end, end);
    if (b < e) out.segments.push_back({b - begin, e - begin, s.decay});
  }
  return out;
}

ShardView whole_tensor_view(const Tensor& param, const Tensor& grad, bool decay) {
  ShardView view;
  view.name = param.name();
  view.master = param;
  view.grad = grad;
  view.segments = {{0, param.numel(), decay}};
  return view;
}

std::vector<GradientGate*> distinct_gates(const std::vector<ShardView>& views) {
  std::vector<GradientGate*> gates;
  for (const ShardView& view : views) {
    GradientGate* gate = view.gate.get();
    if (gate && std::find(gates.begin(), gates.end(), gate) == gates.end()) gates.push_back(gate);
  }
  return gates;
}

std::vector<GradientGate*> check_gradient_gates(const std::vector<ShardView>& views,
                                                GradientUse use, const char* consumer) {
  std::vector<GradientGate*> gates = distinct_gates(views);
  for (GradientGate* gate : gates) gate->check(use, consumer);
  return gates;
}

int64_t covered_numel(const ShardView& view) {
  int64_t n = 0;
  for (const Segment& s : view.segments) n += s.end - s.begin;
  return n;
}

}  // namespace zs::optim
