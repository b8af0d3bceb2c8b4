// GPU benchmark (CUDA build only): how close zeroshard's cuBLAS GEMM comes to the chip's peak at
// the GEMM shapes of GPT-2 124M and 1.5B, and cuDNN's fused attention against the own kernel.
//
//   zs-bench-gpu [--tokens N] [--repeats R]
//
// Peak: the best of R timed 8192 x 8192 x 8192 bf16 products (fp32 accumulation) through
// ops/cuda/gemm.h, on random data — the ceiling every other figure is quoted against, measured in
// the same run. Model shapes: a linear layer's forward (x·Wᵀ) and its two backward products
// (dY·W, dYᵀ·X) for N tokens (default 16384) per shape of the block and the LM head, bf16; the LM
// head once more through ops::linear / ops::matmul, with the padded copies they make. The
// attention rows time ops::attention forward, and forward + backward through the tape, at the
// models' (B, T, H, D) in bf16, with ZS_CUDNN_ATTENTION unset (cuDNN) and =0 (the own kernel).
// Every figure is the median of R runs timed with CUDA events after warm-up. Prints; never asserts.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ops/attention.h"
#include "ops/cuda/gemm.h"
#include "ops/elementwise.h"
#include "ops/linear.h"
#include "runtime/autograd.h"
#include "runtime/cuda/allocator.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/stream.h"
#include "runtime/memory_tracker.h"
#include "runtime/tensor.h"

namespace {

using zs::DType;
using zs::Tensor;

// Median milliseconds of `repeats` runs of `body` on `stream`, timed with events, after `warmup`.
double median_ms(cudaStream_t stream, int warmup, int repeats, const std::function<void()>& body) {
  for (int i = 0; i < warmup; ++i) body();
  ZS_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<cudaEvent_t> events(static_cast<size_t>(2 * repeats));
  for (auto& e : events) ZS_CUDA_CHECK(cudaEventCreate(&e));
  for (int r = 0; r < repeats; ++r) {
    ZS_CUDA_CHECK(cudaEventRecord(events[static_cast<size_t>(2 * r)], stream));
    body();
    ZS_CUDA_CHECK(cudaEventRecord(events[static_cast<size_t>(2 * r + 1)], stream));
  }
  ZS_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) {
    float t = 0;
    ZS_CUDA_CHECK(cudaEventElapsedTime(&t, events[static_cast<size_t>(2 * r)],
                                       events[static_cast<size_t>(2 * r + 1)]));
    ms.push_back(t);
  }
  for (auto& e : events) ZS_CUDA_CHECK(cudaEventDestroy(e));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct Bench {
  zs::MemoryTracker tracker{"cuda:0"};
  zs::cuda::Stream stream{0};
  zs::cuda::CudaAllocator allocator{stream, &tracker};
  zs::ops::cuda::CublasHandle cublas{stream};
  std::mt19937 gen{1234};

  // A device tensor of uniform values in [-1, 1) (never zeros: see the header). Large tensors
  // repeat a pool of 2^24 draws from a random offset: as good as fresh values for timing, without
  // drawing hundreds of millions of numbers on the host.
  Tensor random(const zs::Shape& shape, DType dtype, bool requires_grad = false) {
    constexpr size_t kPool = size_t{1} << 24;
    if (pool.empty()) {
      std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
      pool.resize(kPool);
      for (auto& v : pool) v = dist(gen);
    }
    Tensor t = Tensor::empty(shape, dtype, allocator, "bench");
    std::vector<float> values(static_cast<size_t>(t.numel()));
    const size_t offset = gen() % kPool;
    for (size_t i = 0; i < values.size(); ++i) values[i] = pool[(offset + i) % kPool];
    t.copy_from(values);
    t.set_requires_grad(requires_grad);
    return t;
  }
  std::vector<float> pool;

  // Median ms of C[m x n] = op(A)·op(B) in bf16 with fp32 accumulation, bf16 output.
  double gemm_ms(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int repeats) {
    Tensor a = random(ta ? zs::Shape{k, m} : zs::Shape{m, k}, DType::kBF16);
    Tensor b = random(tb ? zs::Shape{n, k} : zs::Shape{k, n}, DType::kBF16);
    Tensor c = Tensor::empty({m, n}, DType::kBF16, allocator, "bench C");  // beta = 0
    return median_ms(stream.get(), 3, repeats, [&] {
      zs::ops::cuda::gemm(cublas, ta, tb, m, n, k, 1.0f, a.raw_device_data(), ta ? m : k,
                          b.raw_device_data(), tb ? k : n, 0.0f, c.raw_device_data(), n,
                          DType::kBF16, DType::kBF16);
    });
  }
};

double tflops(double flops, double ms) { return flops / (ms * 1e-3) / 1e12; }

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // every line as it is measured, also when piped
  int64_t tokens = 16384;
  int repeats = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--tokens") == 0) {
      tokens = std::atoll(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--repeats") == 0) {
      repeats = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: zs-bench-gpu [--tokens N] [--repeats R]\n");
      return 2;
    }
  }
  if (zs::cuda::cuda_device_count() == 0) {
    std::printf("zs-bench-gpu: no CUDA device (%s); nothing measured\n",
                zs::cuda::cuda_unavailable_reason().c_str());
    return 0;
  }
  cudaDeviceProp prop{};
  ZS_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, %.0f GiB\n", prop.name, prop.multiProcessorCount,
              static_cast<double>(prop.totalGlobalMem) / (1ull << 30));

  Bench bench;
  const int64_t p = 8192;
  const double peak = tflops(2.0 * p * p * p, bench.gemm_ms(false, true, p, p, p, repeats));
  std::printf("\npeak bf16 GEMM %lld^3 (random data): %.0f TFLOP/s\n\n", static_cast<long long>(p),
              peak);

  struct Model {
    const char* name;
    int64_t width, heads, batch, seq;
  };
  const Model models[] = {{"124M", 768, 12, 16, 1024}, {"1.5B", 1600, 25, 8, 1024}};
  const int64_t vocab = 50257;
  std::printf("%-6s %-10s %6s %6s %6s  %9s %9s %9s  %s\n", "model", "layer", "N", "in", "out",
              "fwd TF/s", "dX TF/s", "dW TF/s", "of peak (fwd+bwd)");
  for (const Model& model : models) {
    const int64_t c = model.width;
    struct Shape {
      const char* layer;
      int64_t in, out;
    };
    const Shape shapes[] = {{"qkv", c, 3 * c},
                            {"attn.proj", c, c},
                            {"mlp.fc", c, 4 * c},
                            {"mlp.proj", 4 * c, c},
                            {"lm_head", c, vocab}};
    for (const Shape& s : shapes) {
      const double flops = 2.0 * tokens * s.in * s.out;
      const double fwd = bench.gemm_ms(false, true, tokens, s.out, s.in, repeats);
      const double dx = bench.gemm_ms(false, false, tokens, s.in, s.out, repeats);
      const double dw = bench.gemm_ms(true, false, s.out, s.in, tokens, repeats);
      std::printf("%-6s %-10s %6lld %6lld %6lld  %9.0f %9.0f %9.0f  %.0f%%\n", model.name, s.layer,
                  static_cast<long long>(tokens), static_cast<long long>(s.in),
                  static_cast<long long>(s.out), tflops(flops, fwd), tflops(flops, dx),
                  tflops(flops, dw), 100.0 * tflops(3 * flops, fwd + dx + dw) / peak);
    }
    // The LM head as the model runs it: its three products through ops::linear / ops::matmul,
    // which pad the unaligned vocabulary dimension (ops/cuda/linear_entries.cc), copies included.
    const double flops = 2.0 * tokens * c * vocab;
    Tensor x = bench.random({tokens, c}, DType::kBF16);
    Tensor w = bench.random({vocab, c}, DType::kBF16);
    Tensor dy = bench.random({tokens, vocab}, DType::kBF16);
    zs::NoGradScope no_grad;
    const double fwd =
        median_ms(bench.stream.get(), 2, repeats, [&] { (void)zs::ops::linear(x, w); });
    const double dx =
        median_ms(bench.stream.get(), 2, repeats, [&] { (void)zs::ops::matmul(dy, w); });
    const double dw =
        median_ms(bench.stream.get(), 2, repeats, [&] { (void)zs::ops::matmul(dy, x, true); });
    std::printf(
        "%-6s %-10s %6lld %6lld %6lld  %9.0f %9.0f %9.0f  %.0f%%  (through the ops, padded)\n",
        model.name, "lm_head", static_cast<long long>(tokens), static_cast<long long>(c),
        static_cast<long long>(vocab), tflops(flops, fwd), tflops(flops, dx), tflops(flops, dw),
        100.0 * tflops(3 * flops, fwd + dx + dw) / peak);
  }

  std::printf("\nattention, bf16, causal (ms; median of %d)\n", repeats);
  for (const Model& model : models) {
    const int64_t d = model.width / model.heads;
    Tensor qkv = bench.random({model.batch, model.seq, 3 * model.width}, DType::kBF16, true);
    double ms[2][2] = {};
    for (int own = 0; own < 2; ++own) {
      if (own) {
        ::setenv("ZS_CUDNN_ATTENTION", "0", 1);
      } else {
        ::unsetenv("ZS_CUDNN_ATTENTION");
      }
      std::printf("  timing %s %s attention...\n", model.name, own ? "own" : "cuDNN");
      ms[own][0] = median_ms(bench.stream.get(), 3, repeats, [&] {
        zs::NoGradScope no_grad;
        (void)zs::ops::attention(qkv, model.heads, true);
      });
      ms[own][1] = median_ms(bench.stream.get(), 3, repeats, [&] {
        Tensor loss = zs::ops::sum(zs::ops::attention(qkv, model.heads, true));
        zs::backward(loss);  // clears the tape
      });
      std::printf(
          "%-6s B=%lld T=%lld H=%lld D=%lld %-6s forward %8.3f ms, forward+backward %8.3f ms\n",
          model.name, static_cast<long long>(model.batch), static_cast<long long>(model.seq),
          static_cast<long long>(model.heads), static_cast<long long>(d), own ? "own" : "cuDNN",
          ms[own][0], ms[own][1]);
    }
    ::unsetenv("ZS_CUDNN_ATTENTION");
    std::printf("%-6s cuDNN over own: forward %.2fx, forward+backward %.2fx\n", model.name,
                ms[1][0] / ms[0][0], ms[1][1] / ms[0][1]);
  }
  return 0;
}
