// The optimizer step over one large fp32 shard against the memory-bandwidth bound that the
// benchmark measures on the same buffers. AdamW reads param, grad, m, v and writes param, m, v:
// 7 × 4 bytes per element, with little arithmetic, so a step is bounded by streaming those bytes.
// The bound is a loop with exactly that traffic and trivial math (read four arrays, write three)
// over the same buffers and threads; the ratio AdamW / bound is the figure to watch (target:
// >= 70%). SGD with momentum (5 × 4 bytes) and memcpy/triad bandwidths are printed for context.
// Prints; never asserts.
//
// Usage: zs-bench-optimizer [millions of elements = 64] [threads = 1] [repeats = 5]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ops/cpu/gemm.h"
#include "optim/adamw.h"
#include "optim/sgd.h"
#include "runtime/allocator.h"
#include "runtime/measured_limit.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Best time of `repeats` runs of fn().
template <typename Fn>
double best_seconds(int repeats, const Fn& fn) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    fn();
    best = std::min(best, seconds_since(start));
  }
  return best;
}

// Contiguous [begin, end) of n for the calling thread of the team, split at 16-element points.
void thread_range(int64_t n, int64_t* begin, int64_t* end) {
  const int64_t threads = omp_get_num_threads(), thread = omp_get_thread_num();
  *begin = (n * thread / threads) / 16 * 16;
  *end = thread + 1 == threads ? n : (n * (thread + 1) / threads) / 16 * 16;
}

// The bound: AdamW's traffic (read p, g, m, v; write p, m, v) with one multiply-add per stream.
void stream_4r3w(float* __restrict p, const float* __restrict g, float* __restrict m,
                 float* __restrict v, int64_t n, float a) {
#pragma omp parallel
  {
    int64_t begin, end;
    thread_range(n, &begin, &end);
    for (int64_t i = begin; i < end; ++i) {
      const float x = a * g[i];
      p[i] += x;
      m[i] += x;
      v[i] += x + v[i] * a;
    }
  }
}

// STREAM triad a = b + s·c (2 reads, 1 write) and a parallel memcpy (1 read, 1 write).
void triad(float* __restrict a, const float* __restrict b, const float* __restrict c, int64_t n,
           float s) {
#pragma omp parallel
  {
    int64_t begin, end;
    thread_range(n, &begin, &end);
    for (int64_t i = begin; i < end; ++i) a[i] = b[i] + s * c[i];
  }
}

void parallel_memcpy(float* dst, const float* src, int64_t n) {
#pragma omp parallel
  {
    int64_t begin, end;
    thread_range(n, &begin, &end);
    std::memcpy(dst + begin, src + begin, static_cast<size_t>(end - begin) * sizeof(float));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t millions = argc > 1 ? std::atoll(argv[1]) : 64;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 1;
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 5;
  const int64_t n = millions * (int64_t{1} << 20);
  zs::ops::cpu::set_intra_op_threads(threads);

  zs::CpuAllocator allocator(nullptr);
  using zs::Tensor;
  Tensor master = Tensor::empty({n}, zs::DType::kF32, allocator, "master");
  Tensor grad = Tensor::empty({n}, zs::DType::kF32, allocator, "grad");
  float* p = master.data<float>();
  float* g = grad.data<float>();
  // First touch on the benchmark's threads, so pages sit where the loops will use them.
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    p[i] = 0.01f * static_cast<float>(i % 1000);
    g[i] = 1e-3f * static_cast<float>(i % 777) - 0.3f;
  }
  zs::optim::AdamWOptions adam_options;
  adam_options.weight_decay = 0.01f;
  zs::optim::AdamW adam({zs::optim::ShardView{"shard", master, grad, {{0, n, true}}}},
                        adam_options);
  float* m = adam.state(0)[0].data<float>();
  float* v = adam.state(0)[1].data<float>();

  std::printf(
      "optimizer step over a %lld M-element fp32 shard (%.2f GiB of param+grad+m+v), "
      "%d thread(s), best of %d\n",
      static_cast<long long>(millions), 16.0 * static_cast<double>(n) / (1 << 30), threads,
      repeats);

  adam.step(1e-4f);  // warm-up: state pages touched
  const double adam_s = best_seconds(repeats, [&] { adam.step(1e-4f); });
  stream_4r3w(p, g, m, v, n, 1e-9f);
  double bound_s = best_seconds(repeats, [&] { stream_4r3w(p, g, m, v, n, 1e-9f); });
  const double triad_s = best_seconds(repeats, [&] { triad(m, p, g, n, 0.5f); });
  const double memcpy_s = best_seconds(repeats, [&] { parallel_memcpy(v, g, n); });

  zs::optim::SgdOptions sgd_options;
  sgd_options.momentum = 0.9f;
  sgd_options.nesterov = true;
  zs::optim::Sgd sgd({zs::optim::ShardView{"shard", master, grad, {{0, n, true}}}}, sgd_options);
  sgd.step(1e-4f);
  const double sgd_s = best_seconds(repeats, [&] { sgd.step(1e-4f); });

  const double elems = static_cast<double>(n);
  const double gb = 1e9;
  const double adam_rate = elems / adam_s;
  // An AdamW step faster than its bound means the bound was measured low: measured again, and
  // the ratio is "—" if it still reads low (runtime/measured_limit.h).
  const double bound_rate = zs::remeasured_limit(elems / bound_s, adam_rate, [&] {
    return elems / best_seconds(repeats, [&] { stream_4r3w(p, g, m, v, n, 1e-9f); });
  });
  bound_s = elems / bound_rate;
  std::printf("  %-34s %8.1f ms  %8.1f Melem/s  %6.1f GB/s (28 B/elem)\n", "AdamW step",
              adam_s * 1e3, adam_rate / 1e6, 28 * elems / adam_s / gb);
  std::printf("  %-34s %8.1f ms  %8.1f Melem/s  %6.1f GB/s (28 B/elem)\n",
              "bound: read 4 + write 3 streams", bound_s * 1e3, bound_rate / 1e6,
              28 * elems / bound_s / gb);
  std::printf("  %-34s %8s     (target >= 70%%)\n", "AdamW / bound",
              zs::percent_of_limit(adam_rate, bound_rate).c_str());
  std::printf("  %-34s %8.1f ms  %8.1f Melem/s  %6.1f GB/s (20 B/elem)\n", "SGD nesterov step",
              sgd_s * 1e3, elems / sgd_s / 1e6, 20 * elems / sgd_s / gb);
  std::printf("  %-34s %8.1f ms                    %6.1f GB/s (12 B/elem)\n", "triad a = b + s*c",
              triad_s * 1e3, 12 * elems / triad_s / gb);
  std::printf("  %-34s %8.1f ms                    %6.1f GB/s (8 B/elem)\n", "memcpy",
              memcpy_s * 1e3, 8 * elems / memcpy_s / gb);
  return 0;
}
