// The GPT language-model head with its loss, unfused (ops::linear, then ops::cross_entropy: the
// [N, V] logits and their gradient held whole) against the fused, chunked head
// (ops::linear_cross_entropy) at several chunk sizes, on GPT-2's shapes: one forward and backward
// each, the best of `repeats` (variants interleaved, so a busy machine slows all of them alike),
// with the activations each holds at its peak and its loss (the same bits for every variant). The
// fused head runs one more GEMM of the head's size (backward recomputes the logits), so its floor
// is 4/3 of the unfused head's GEMM time. Prints; never asserts.
//
//   zs-bench-head [repeats=3] [rows=4096] [vocab=50257] [width=768]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ops/cpu/gemm.h"
#include "ops/cross_entropy.h"
#include "ops/linear.h"
#include "ops/linear_cross_entropy.h"
#include "runtime/allocator.h"
#include "runtime/autograd.h"
#include "runtime/rng.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

zs::Tensor random_values(const zs::Shape& shape, zs::Allocator& allocator, const char* name,
                         float scale) {
  zs::Tensor t = zs::Tensor::empty(shape, zs::DType::kF32, allocator, name);
  float* p = t.data<float>();
  const zs::RngKey key = zs::rng_key(7, name);
  for (int64_t i = 0; i < t.numel(); ++i) {
    p[i] = scale *
           (static_cast<float>(zs::random_bits(key, static_cast<uint64_t>(i)) % 2001) / 1000.0f -
            1.0f);
  }
  return t;
}

struct Variant {
  std::string name;
  int64_t chunk_rows;  // -1: unfused; 0: the default
  double best_s = 1e30;
  size_t activation_peak = 0;
  float loss = 0;
};

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 3;
  const int64_t rows = argc > 2 ? std::atoll(argv[2]) : 4096;
  const int64_t vocab = argc > 3 ? std::atoll(argv[3]) : 50257;
  const int64_t width = argc > 4 ? std::atoll(argv[4]) : 768;
  zs::MemoryTracker tracker;
  zs::CpuAllocator allocator(&tracker);
  zs::Tensor h = random_values({rows, width}, allocator, "h", 1.0f);
  zs::Tensor weight = random_values({vocab, width}, allocator, "weight", 0.05f);
  h.set_requires_grad(true);
  weight.set_requires_grad(true);
  zs::Tensor targets = zs::Tensor::empty({rows}, zs::DType::kI32, allocator, "targets");
  for (int64_t r = 0; r < rows; ++r) {
    targets.data<int32_t>()[r] =
        static_cast<int32_t>(zs::random_bits(zs::rng_key(7, "targets"), r) % vocab);
  }
  std::vector<Variant> variants = {{"unfused", -1},
                                   {"fused, 64 rows", 64},
                                   {"fused, 256 rows", 256},
                                   {"fused, 1024 rows", 1024}};
  variants.insert(
      variants.begin() + 1,
      {"fused, default " + std::to_string(zs::ops::head_chunk_rows(vocab)) + " rows", 0});
  std::printf("LM head + loss, forward and backward: N %lld, V %lld, C %lld, gemm=%s, best of %d\n",
              static_cast<long long>(rows), static_cast<long long>(vocab),
              static_cast<long long>(width), zs::ops::cpu::gemm_backend_name(), repeats);
  for (int r = 0; r < repeats; ++r) {
    for (Variant& v : variants) {
      h.set_grad(zs::Tensor());
      weight.set_grad(zs::Tensor());
      tracker.reset_peaks();
      const size_t before = tracker.current(zs::MemoryCategory::kActivations);
      const auto start = Clock::now();
      zs::Tensor loss = v.chunk_rows < 0
                            ? zs::ops::cross_entropy(zs::ops::linear(h, weight), targets)
                            : zs::ops::linear_cross_entropy(
                                  h, weight, targets, zs::ops::kDefaultIgnoreIndex, v.chunk_rows);
      v.loss = loss.item();
      zs::backward(loss);
      v.best_s = std::min(v.best_s, seconds_since(start));
      v.activation_peak = tracker.peak(zs::MemoryCategory::kActivations) - before;
    }
  }
  const double unfused_s = variants.front().best_s;
  std::printf("%-24s %10s %8s %16s %14s\n", "head", "ms", "ratio", "activations MiB", "loss");
  for (const Variant& v : variants) {
    std::printf("%-24s %10.1f %8.2f %16.1f %14.9g\n", v.name.c_str(), 1e3 * v.best_s,
                v.best_s / unfused_s, static_cast<double>(v.activation_peak) / (1 << 20),
                static_cast<double>(v.loss));
  }
  return 0;
}
