// Shared support for the optim tests (header-only): random fills, bitwise snapshots, and a
// model-like parameter layout flattened into a padded buffer and split into per-rank shards the
// way the sharding engine does it (rank r owns the r-th contiguous slice; segments clipped to the
// shard; padding covered by no segment).
//
// Everything returned lives on the allocator passed in; the caller owns it. Single-threaded.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "optim/optimizer.h"
#include "optim/shard_view.h"
#include "runtime/allocator.h"
#include "runtime/rng.h"
#include "runtime/tensor.h"

namespace zs::optim::testing {

// Every element of t = normal(rng_key(seed, name), i) · stddev.
inline void fill_normal(const Tensor& t, uint64_t seed, std::string_view name,
                        float stddev = 1.0f) {
  float* data = t.data<float>();
  const RngKey key = rng_key(seed, name);
  for (int64_t i = 0; i < t.numel(); ++i) data[i] = normal(key, static_cast<uint64_t>(i)) * stddev;
}

// The stored bits of a fp32 tensor, for bitwise comparisons.
inline std::vector<uint32_t> bits(const Tensor& t) {
  std::vector<uint32_t> out(static_cast<size_t>(t.numel()));
  if (!out.empty()) std::memcpy(out.data(), t.raw_data(), out.size() * 4);
  return out;
}

inline Tensor flat(Allocator& allocator, int64_t n, const std::string& name) {
  return Tensor::zeros({n}, DType::kF32, allocator, name);
}

inline Tensor copy_of(const Tensor& t, Allocator& allocator, const std::string& name) {
  Tensor out = Tensor::empty(t.shape(), DType::kF32, allocator, name);
  if (t.numel() > 0) std::memcpy(out.raw_data(), t.raw_data(), t.nbytes());
  return out;
}

// Parameters of these sizes and decay flags, back to back in one flat buffer whose length is
// padded to a multiple of world × alignment.
struct Layout {
  std::vector<int64_t> sizes;
  std::vector<bool> decay;
  int64_t alignment = 4;

  int64_t used() const {
    int64_t n = 0;
    for (int64_t s : sizes) n += s;
    return n;
  }
  int64_t padded(int world) const {
    const int64_t unit = world * alignment;
    return (used() + unit - 1) / unit * unit;
  }
  // The segments of the whole flat buffer (the padding at the end is covered by none).
  std::vector<Segment> segments() const {
    std::vector<Segment> out;
    int64_t at = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      out.push_back({at, at + sizes[i], decay[i]});
      at += sizes[i];
    }
    return out;
  }
  // Rank r's segments in shard-local offsets, for a shard of `shard_numel` elements.
  std::vector<Segment> shard_segments(int rank, int64_t shard_numel) const {
    std::vector<Segment> out;
    const int64_t begin = rank * shard_numel, end = begin + shard_numel;
    for (const Segment& s : segments()) {
      const int64_t b = std::max(s.begin, begin), e = std::min(s.end, end);
      if (b < e) out.push_back({b - begin, e - begin, s.decay});
    }
    return out;
  }
};

// A model-like layout: odd sizes, decayed matrices next to undecayed biases and norms, large
// enough that the bigger shards take the parallel path and the smaller ones the serial one.
inline Layout model_like_layout() {
  Layout layout;
  layout.sizes = {40000, 129, 7, 33001, 1, 257, 5000};
  layout.decay = {true, false, false, true, false, true, false};
  return layout;
}

// Value of element i (of the layout's used range) of the initial master and of step s's gradient.
inline float initial_master(int64_t i) { return normal(rng_key(11, "master"), i, 0.0f, 0.5f); }
inline float step_grad(int step, int64_t i) {
  return normal(rng_key(11, "grad", static_cast<uint32_t>(step)), i, 0.0f, 0.1f);
}
inline float step_lr(int step) { return 1e-2f / static_cast<float>(step + 1); }

using ViewOptimizerFactory = std::function<std::unique_ptr<Optimizer>(std::vector<ShardView>)>;
using WholeOptimizerFactory =
    std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>, std::vector<bool>)>;

// The parameters of `layout` updated for `steps` steps as `world` shards, each rank's shard in
// buffers of its own with its own optimizer (run one after the other). Padding gradients are NaN:
// any read of them would show. Returns the concatenated master shards (padded length) and, in
// `state`, each state tensor concatenated over ranks.
inline std::vector<uint32_t> run_sharded(const Layout& layout, int world, int steps,
                                         const ViewOptimizerFactory& make,
                                         std::vector<std::vector<uint32_t>>* state = nullptr) {
  CpuAllocator allocator(nullptr);
  const int64_t padded = layout.padded(world), shard = padded / world, used = layout.used();
  std::vector<std::unique_ptr<Optimizer>> optimizers;
  std::vector<Tensor> masters, grads;
  for (int r = 0; r < world; ++r) {
    Tensor master = flat(allocator, shard, "master shard " + std::to_string(r));
    Tensor grad = flat(allocator, shard, "grad shard " + std::to_string(r));
    for (int64_t j = 0; j < shard; ++j) {
      const int64_t i = r * shard + j;
      master.data<float>()[j] = i < used ? initial_master(i) : 0.0f;
    }
    ShardView view{"unit shard " + std::to_string(r), master, grad,
                   layout.shard_segments(r, shard)};
    optimizers.push_back(make({view}));
    masters.push_back(master);
    grads.push_back(grad);
  }
  for (int s = 0; s < steps; ++s) {
    for (int r = 0; r < world; ++r) {
      for (int64_t j = 0; j < shard; ++j) {
        const int64_t i = r * shard + j;
        grads[r].data<float>()[j] =
            i < used ? step_grad(s, i) : std::numeric_limits<float>::quiet_NaN();
      }
      optimizers[r]->step(step_lr(s));
    }
  }
  std::vector<uint32_t> out;
  for (const Tensor& m : masters) {
    const std::vector<uint32_t> b = bits(m);
    out.insert(out.end(), b.begin(), b.end());
  }
  if (state) {
    state->assign(optimizers[0]->state_names().size(), {});
    for (size_t k = 0; k < state->size(); ++k) {
      for (const auto& opt : optimizers) {
        const std::vector<uint32_t> b = bits(opt->state(0)[k]);
        (*state)[k].insert((*state)[k].end(), b.begin(), b.end());
      }
    }
  }
  return out;
}

// The same parameters as separate whole tensors with autograd gradients (the unsharded path),
// concatenated after `steps` steps (used length, no padding).
inline std::vector<uint32_t> run_whole(const Layout& layout, int steps,
                                       const WholeOptimizerFactory& make) {
  CpuAllocator allocator(nullptr);
  std::vector<Tensor> params;
  int64_t at = 0;
  for (size_t p = 0; p < layout.sizes.size(); ++p) {
    Tensor t = flat(allocator, layout.sizes[p], "param " + std::to_string(p));
    t.set_requires_grad(true);
    t.set_grad(flat(allocator, layout.sizes[p], "grad " + std::to_string(p)));
    for (int64_t j = 0; j < layout.sizes[p]; ++j) t.data<float>()[j] = initial_master(at + j);
    params.push_back(t);
    at += layout.sizes[p];
  }
  std::unique_ptr<Optimizer> optimizer = make(params, layout.decay);
  for (int s = 0; s < steps; ++s) {
    at = 0;
    for (const Tensor& t : params) {
      for (int64_t j = 0; j < t.numel(); ++j) t.grad().data<float>()[j] = step_grad(s, at + j);
      at += t.numel();
    }
    optimizer->step(step_lr(s));
  }
  std::vector<uint32_t> out;
  for (const Tensor& t : params) {
    const std::vector<uint32_t> b = bits(t);
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

// Checks that sharding into 1, 2 and 3 ranks gives the unsharded parameters bit for bit, that the
// padding stays exactly 0, and that the state does not depend on the split either.
inline void expect_sharding_invariant(const Layout& layout, int steps,
                                      const ViewOptimizerFactory& make_sharded,
                                      const WholeOptimizerFactory& make_whole) {
  const std::vector<uint32_t> whole = run_whole(layout, steps, make_whole);
  const int64_t used = layout.used();
  std::vector<std::vector<uint32_t>> state1;
  for (int world : {1, 2, 3}) {
    std::vector<std::vector<uint32_t>> state;
    const std::vector<uint32_t> sharded = run_sharded(layout, world, steps, make_sharded, &state);
    ASSERT_EQ(sharded.size(), static_cast<size_t>(layout.padded(world)));
    EXPECT_TRUE(std::equal(whole.begin(), whole.end(), sharded.begin()))
        << world << " shards differ from the unsharded update";
    for (size_t i = static_cast<size_t>(used); i < sharded.size(); ++i) {
      ASSERT_EQ(sharded[i], 0u) << "padding element " << i << " changed with " << world
                                << " shards";
    }
    for (auto& s : state) {
      for (size_t i = static_cast<size_t>(used); i < s.size(); ++i) {
        ASSERT_EQ(s[i], 0u) << "padding state element " << i << " with " << world << " shards";
      }
      s.resize(static_cast<size_t>(used));
    }
    if (world == 1) {
      state1 = state;
    } else {
      EXPECT_EQ(state, state1) << "optimizer state with " << world << " shards";
    }
  }
}

}  // namespace zs::optim::testing
