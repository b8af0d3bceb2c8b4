// The machine's measured FMA peak, the physical limit the compute benchmarks print their
// figures against: kChains independent vector FMA chains per thread, best of many short runs.
// Header-only; used by bench/gemm.cc, bench/linear.cc and bench/block.cc.
#pragma once

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace zs::bench {
namespace fma_detail {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

#if defined(__AVX512F__)
using Vec = __m512;
constexpr int kLanes = 16;
// FMA latency 4 cycles x 2 FMA ports: at least 8 chains in flight; 16 leave margin and fit in the
// 32 zmm registers with the two operands.
constexpr int kChains = 16;
inline Vec splat(float x) { return _mm512_set1_ps(x); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline float lane0(Vec v) { return _mm512_cvtss_f32(v); }
constexpr const char* kIsa = "AVX-512";
#elif defined(__AVX2__) && defined(__FMA__)
using Vec = __m256;
constexpr int kLanes = 8;
constexpr int kChains = 12;  // 16 ymm registers: 12 chains + 2 operands
inline Vec splat(float x) { return _mm256_set1_ps(x); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline float lane0(Vec v) { return _mm256_cvtss_f32(v); }
constexpr const char* kIsa = "AVX2";
#else
// Built without AVX2/AVX-512 (ZS_NATIVE=OFF): a scalar loop, which measures the scalar FMA rate,
// not the machine's vector peak — the label says so.
using Vec = float;
constexpr int kLanes = 1;
constexpr int kChains = 8;
inline Vec splat(float x) { return x; }
inline Vec fma(Vec a, Vec b, Vec c) { return a * b + c; }
inline float lane0(Vec v) { return v; }
constexpr const char* kIsa = "scalar (built without -march=native: not the vector peak)";
#endif

// GFLOP/s of `iterations` rounds of kChains independent vector FMAs on the calling thread.
inline double fma_loop_gflops(int64_t iterations) {
  Vec acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = splat(1.0f + 1e-3f * j);
  // Multiply by ~1 and add ~0 so the values stay finite however long the loop runs.
  Vec scale = splat(0.9999999f), shift = splat(1e-7f);
  auto start = Clock::now();
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < kChains; ++j) acc[j] = fma(acc[j], scale, shift);
  }
  double elapsed = seconds_since(start);
  float sink = 0.0f;
  for (int j = 0; j < kChains; ++j) sink += lane0(acc[j]);
  volatile float keep = sink;  // the loop's result is used, so it is not optimized away
  (void)keep;
  return 2.0 * kLanes * kChains * static_cast<double>(iterations) / elapsed * 1e-9;
}

// Best aggregate FMA GFLOP/s of `threads` threads running the loop at once: all the threads' flops
// over the wall time from a common start to the last one's end. Runs are short (~2 ms) and many, so
// the best one is likely to have had the cores to itself on a busy machine.
inline double fma_peak_gflops(int threads, int repeats) {
  const int64_t iterations = 200'000;  // 51 MFLOP per thread
  double best = 0.0;
  for (int r = 0; r < repeats; ++r) {
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&] {
        ready.fetch_add(1);
        while (!go.load()) {
        }
        fma_loop_gflops(iterations);
      });
    }
    while (ready.load() < threads) {
    }
    auto start = Clock::now();
    go.store(true);
    for (auto& worker : workers) worker.join();
    double flops = 2.0 * kLanes * kChains * static_cast<double>(iterations) * threads;
    best = std::max(best, flops / seconds_since(start) * 1e-9);
  }
  return best;
}

}  // namespace fma_detail

using fma_detail::fma_peak_gflops;
using fma_detail::kChains;
using fma_detail::kIsa;
using fma_detail::kLanes;

}  // namespace zs::bench
