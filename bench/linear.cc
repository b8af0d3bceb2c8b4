// The linear op (ops/linear.h) against the raw GEMMs it is made of, on transformer shapes, next
// to the machine's measured FMA peak: forward Y = X·W^T + b, and backward (dX = dY·W, dW =
// dY^T·X, db). The op's overhead over raw GEMM is allocation, bias and autograd bookkeeping.
// Prints; never asserts.
//
//   zs-bench-linear [repeats]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/fma_peak.h"
#include "ops/cpu/gemm.h"
#include "ops/elementwise.h"
#include "ops/linear.h"
#include "runtime/allocator.h"
#include "runtime/autograd.h"
#include "runtime/rng.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Shape3 {
  const char* name;
  int64_t m, n, k;  // X [m, k], W [n, k]
};

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 10;
  const double peak1 = zs::bench::fma_peak_gflops(1, 200);
  std::printf("linear op vs raw GEMM, gemm=%s, best of %d; FMA peak (%s) 1 core %.1f GFLOP/s\n",
              zs::ops::cpu::gemm_backend_name(), repeats, zs::bench::kIsa, peak1);
  std::printf("%-10s %5s %5s %5s %3s | %14s %14s | %14s %14s | %8s\n", "shape", "m", "n", "k",
              "thr", "op fwd GF/s", "raw fwd GF/s", "op f+b GF/s", "raw f+b GF/s", "op/raw");
  const Shape3 shapes[] = {{"mlp.fc", 256, 3072, 768},
                           {"mlp.proj", 256, 768, 3072},
                           {"attn.qkv", 1024, 2304, 768},
                           {"attn.proj", 256, 768, 768}};
  zs::CpuAllocator allocator(nullptr);
  for (int threads : {1, 2}) {
    zs::ops::cpu::IntraOpThreadsScope scope(threads);
    for (const Shape3& s : shapes) {
      zs::Tensor x = zs::Tensor::empty({s.m, s.k}, zs::DType::kF32, allocator, "x");
      zs::Tensor w = zs::Tensor::empty({s.n, s.k}, zs::DType::kF32, allocator, "w");
      zs::Tensor b = zs::Tensor::zeros({s.n}, zs::DType::kF32, allocator, "b");
      zs::fill_normal(x.data<float>(), 0, x.numel(), zs::rng_key(1, "x"), 0, 1);
      zs::fill_normal(w.data<float>(), 0, w.numel(), zs::rng_key(1, "w"), 0, 0.02f);
      x.set_requires_grad(true);
      w.set_requires_grad(true);
      b.set_requires_grad(true);
      const double gemm_flops = 2.0 * s.m * s.n * s.k;
      double op_fwd = 1e30, op_all = 1e30, raw_fwd = 1e30, raw_all = 1e30;
      std::vector<float> y(s.m * s.n), dy(s.m * s.n, 0.01f), dx(s.m * s.k), dw(s.n * s.k);
      for (int r = 0; r < repeats + 1; ++r) {
        {
          zs::NoGradScope no_grad;
          auto start = Clock::now();
          zs::Tensor out = zs::ops::linear(x, w, b);
          if (r > 0) op_fwd = std::min(op_fwd, seconds_since(start));
        }
        {
          // Gradients accumulate into the existing buffers (beta = 1) after the first run.
          auto start = Clock::now();
          zs::Tensor out = zs::ops::linear(x, w, b);
          zs::backward(zs::ops::sum(out));
          if (r > 0) op_all = std::min(op_all, seconds_since(start));
        }
        auto start = Clock::now();
        zs::ops::cpu::sgemm(false, true, s.m, s.n, s.k, 1, x.data<float>(), s.k, w.data<float>(),
                            s.k, 0, y.data(), s.n);
        const double fwd = seconds_since(start);
        zs::ops::cpu::sgemm(false, false, s.m, s.k, s.n, 1, dy.data(), s.n, w.data<float>(), s.k, 0,
                            dx.data(), s.k);
        zs::ops::cpu::sgemm(true, false, s.n, s.k, s.m, 1, dy.data(), s.n, x.data<float>(), s.k, 1,
                            dw.data(), s.k);
        if (r > 0) {
          raw_fwd = std::min(raw_fwd, fwd);
          raw_all = std::min(raw_all, seconds_since(start));
        }
      }
      std::printf("%-10s %5lld %5lld %5lld %3d | %14.1f %14.1f | %14.1f %14.1f | %7.0f%%\n", s.name,
                  static_cast<long long>(s.m), static_cast<long long>(s.n),
                  static_cast<long long>(s.k), threads, gemm_flops / op_fwd * 1e-9,
                  gemm_flops / raw_fwd * 1e-9, 3 * gemm_flops / op_all * 1e-9,
                  3 * gemm_flops / raw_all * 1e-9, 100 * raw_all / op_all);
    }
  }
  std::printf("peak for 2 threads = 2 x %.1f GFLOP/s; op/raw = raw f+b time / op f+b time\n",
              peak1);
  return 0;
}
