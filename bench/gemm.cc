// GEMM benchmark: how close Eigen's GEMM, OpenBLAS and zeroshard's sgemm (ops/cpu/gemm.h) come to
// the machine's FMA peak on the GEMMs of a transformer layer, with 1 and 2 threads, and with two
// ranks-as-threads of one intra-op thread each. It chose the default of ZS_GEMM.
//
//   zs-bench-gemm [--repeats N] [--min-ms MS]
//
// Every figure is the best of N timed runs (default 10) of at least MS milliseconds each (default
// 30): the machine is shared, and the best run is the one least disturbed. Runs of the compared
// implementations are interleaved so slow phases of the machine hit all of them alike. Peak is the
// single-core FMA throughput measured below, times the threads used. Prints; never asserts.
// OpenBLAS columns need OpenBLAS at configure time (bench/CMakeLists.txt), whatever ZS_GEMM is.
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/fma_peak.h"
#include "ops/cpu/gemm.h"
#include "runtime/measured_limit.h"

#ifndef ZS_BENCH_OPENBLAS
#define ZS_BENCH_OPENBLAS 0
#endif

#if ZS_BENCH_OPENBLAS
#include <cblas.h>

extern "C" {
int openblas_get_parallel(void);
char* openblas_get_config(void);
char* openblas_get_corename(void);
void openblas_set_num_threads(int num_threads);
}

namespace zs::bench {
// bench/gemm/eigen_over_blas.cc.
void eigen_over_blas_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                           const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                           int64_t ldc);
}  // namespace zs::bench
#endif

namespace zs::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// ---- GEMM implementations --------------------------------------------------------------------

struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<float[], AlignedFree>;

AlignedBuffer random_buffer(int64_t count, uint32_t seed) {
  size_t bytes = (static_cast<size_t>(count) * sizeof(float) + 63) / 64 * 64;
  AlignedBuffer buffer(static_cast<float*>(std::aligned_alloc(64, bytes)));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (int64_t i = 0; i < count; ++i) buffer[i] = uniform(rng);
  return buffer;
}

struct Shape {
  const char* name;
  bool trans_a, trans_b;
  int64_t m, n, k;
  double flops() const { return 2.0 * m * n * k; }
};

// The operands of one GEMM, densely packed (ld = row length).
struct Operands {
  const Shape& shape;
  AlignedBuffer a, b, c;
  int64_t lda, ldb, ldc;

  Operands(const Shape& s, uint32_t seed)
      : shape(s),
        a(random_buffer(s.m * s.k, seed)),
        b(random_buffer(s.k * s.n, seed + 1)),
        c(random_buffer(s.m * s.n, seed + 2)),
        lda(s.trans_a ? s.m : s.k),
        ldb(s.trans_b ? s.k : s.n),
        ldc(s.n) {}
};

using RowMajorMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMatrixView = Eigen::Map<const RowMajorMatrix, Eigen::Unaligned, Eigen::OuterStride<>>;
using MatrixView = Eigen::Map<RowMajorMatrix, Eigen::Unaligned, Eigen::OuterStride<>>;

// Eigen's own GEMM (this translation unit has no EIGEN_USE_BLAS); threads: omp_get_max_threads().
void eigen_sgemm(Operands& o) {
  const Shape& s = o.shape;
  ConstMatrixView a(o.a.get(), s.trans_a ? s.k : s.m, s.trans_a ? s.m : s.k,
                    Eigen::OuterStride<>(o.lda));
  ConstMatrixView b(o.b.get(), s.trans_b ? s.n : s.k, s.trans_b ? s.k : s.n,
                    Eigen::OuterStride<>(o.ldb));
  MatrixView c(o.c.get(), s.m, s.n, Eigen::OuterStride<>(o.ldc));
  if (s.trans_a && s.trans_b) {
    c.noalias() = a.transpose() * b.transpose();
  } else if (s.trans_a) {
    c.noalias() = a.transpose() * b;
  } else if (s.trans_b) {
    c.noalias() = a * b.transpose();
  } else {
    c.noalias() = a * b;
  }
}

void zs_sgemm(Operands& o) {
  const Shape& s = o.shape;
  ops::cpu::sgemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, o.a.get(), o.lda, o.b.get(), o.ldb,
                  0.0f, o.c.get(), o.ldc);
}

#if ZS_BENCH_OPENBLAS
// OpenBLAS with its own threading (openblas_set_num_threads), called directly.
void openblas_sgemm(Operands& o) {
  const Shape& s = o.shape;
  cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans,
              s.trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(s.m), static_cast<int>(s.n),
              static_cast<int>(s.k), 1.0f, o.a.get(), static_cast<int>(o.lda), o.b.get(),
              static_cast<int>(o.ldb), 0.0f, o.c.get(), static_cast<int>(o.ldc));
}

void eigen_over_blas(Operands& o) {
  const Shape& s = o.shape;
  eigen_over_blas_sgemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, o.a.get(), o.lda, o.b.get(),
                        o.ldb, o.c.get(), o.ldc);
}
#endif

struct Implementation {
  std::string name;
  std::function<void(Operands&)> run;
  // Makes the calling thread's next runs use `threads` threads.
  std::function<void(int threads)> set_threads;
  // After a run on more than one thread, OpenBLAS's pthread pool keeps spinning for up to ~0.1 s
  // waiting for more work, which would slow whatever is timed next: pause before moving on.
  bool pool_spins_after = false;
};

std::vector<Implementation> implementations() {
  std::vector<Implementation> list;
  list.push_back({"eigen", eigen_sgemm, [](int t) { omp_set_num_threads(t); }});
#if ZS_BENCH_OPENBLAS
  // openblas_set_num_threads sets the pthread build's global count; the OpenMP build follows the
  // caller's nthreads ICV, which it also sets.
  auto openblas_threads = [](int t) {
    openblas_set_num_threads(t);
    omp_set_num_threads(t);
  };
  list.push_back({"openblas", openblas_sgemm, openblas_threads, true});
  list.push_back({"eigen+blas", eigen_over_blas, openblas_threads, true});
#endif
  list.push_back({std::string("zs:") + ops::cpu::gemm_backend_name(), zs_sgemm,
                  [](int t) { ops::cpu::set_intra_op_threads(t); }});
  return list;
}

// ---- Timing ---------------------------------------------------------------------------------

struct Options {
  int repeats = 10;
  double min_seconds = 0.030;
};

void settle() { std::this_thread::sleep_for(std::chrono::milliseconds(250)); }

// Calls `run` enough times to last at least `min_seconds`; returns seconds per call.
double time_per_call(const std::function<void()>& run, int64_t& calls, double min_seconds) {
  for (;;) {
    auto start = Clock::now();
    for (int64_t i = 0; i < calls; ++i) run();
    double elapsed = seconds_since(start);
    if (elapsed >= min_seconds) return elapsed / calls;
    calls = std::max(calls + 1, static_cast<int64_t>(calls * 1.2 * min_seconds / elapsed));
  }
}

// Best GFLOP/s of every implementation on one shape and thread count, runs interleaved.
std::vector<double> measure_shape(const Shape& shape, int threads,
                                  const std::vector<Implementation>& impls,
                                  const Options& options) {
  Operands operands(shape, 1);
  std::vector<int64_t> calls(impls.size(), 1);
  std::vector<double> best(impls.size(), 0.0);
  for (size_t i = 0; i < impls.size(); ++i) {  // warm-up: pack buffers, thread pools, caches
    impls[i].set_threads(threads);
    impls[i].run(operands);
  }
  settle();
  for (int r = 0; r < options.repeats; ++r) {
    for (size_t i = 0; i < impls.size(); ++i) {
      impls[i].set_threads(threads);
      double seconds =
          time_per_call([&] { impls[i].run(operands); }, calls[i], options.min_seconds);
      best[i] = std::max(best[i], shape.flops() / seconds * 1e-9);
      if (impls[i].pool_spins_after && threads > 1) settle();
    }
  }
  return best;
}

// Best aggregate GFLOP/s of `ranks` threads, each with one intra-op thread and its own operands,
// running `impl` on `shape` at the same time (the local backend's ranks sharing the cores).
double measure_ranks(const Shape& shape, int ranks, const Implementation& impl,
                     const Options& options) {
  std::vector<std::unique_ptr<Operands>> operands;
  for (int r = 0; r < ranks; ++r) operands.push_back(std::make_unique<Operands>(shape, 10 + r));
  // Calls per run, sized from one rank alone so every rank does the same work.
  int64_t calls = 1;
  impl.set_threads(1);
  impl.run(*operands[0]);
  time_per_call([&] { impl.run(*operands[0]); }, calls, options.min_seconds);
  double best = 0.0;
  for (int repeat = 0; repeat < options.repeats; ++repeat) {
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> workers;
    for (int r = 0; r < ranks; ++r) {
      workers.emplace_back([&, r] {
        impl.set_threads(1);
        ready.fetch_add(1);
        while (!go.load()) {
        }
        for (int64_t i = 0; i < calls; ++i) impl.run(*operands[r]);
      });
    }
    while (ready.load() < ranks) {
    }
    auto start = Clock::now();
    go.store(true);
    for (auto& worker : workers) worker.join();
    double elapsed = seconds_since(start);
    best = std::max(best, ranks * calls * shape.flops() / elapsed * 1e-9);
  }
  return best;
}

// The machine's 1-minute load average: other work running during the measurements.
std::string load_average() {
  std::ifstream file("/proc/loadavg");
  std::string one_minute;
  return file >> one_minute ? one_minute : std::string("?");
}

// GFLOP/s and its share of `threads` × the 1-core FMA peak. A GEMM faster than that peak means
// the peak was measured low: it is measured again (the best kept in `peak1`), and the share is
// "—" if it still reads low (runtime/measured_limit.h).
std::string cell(double gflops, int threads, double& peak1, int peak_runs) {
  peak1 = remeasured_limit(peak1, gflops / threads, [&] { return fma_peak_gflops(1, peak_runs); });
  char text[48];
  std::snprintf(text, sizeof text, "%6.1f %4s", gflops,
                percent_of_limit(gflops, threads * peak1, "%.0f%%").c_str());
  return text;
}

Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--repeats" && i + 1 < argc) {
      options.repeats = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--min-ms" && i + 1 < argc) {
      options.min_seconds = std::max(1.0, std::atof(argv[++i])) * 1e-3;
    } else {
      std::fprintf(stderr, "usage: %s [--repeats N] [--min-ms MS]\n", argv[0]);
      std::exit(2);
    }
  }
  return options;
}

int run(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  std::printf("zs-bench-gemm: fp32 GEMM, zs backend '%s', best of %d runs of >= %.0f ms\n",
              ops::cpu::gemm_backend_name(), options.repeats, options.min_seconds * 1e3);
#if ZS_BENCH_OPENBLAS
  static const char* const kParallel[] = {"serial", "pthreads", "OpenMP"};
  int parallel = openblas_get_parallel();
  std::printf("OpenBLAS: %s; core %s; threading %s\n", openblas_get_config(),
              openblas_get_corename(), parallel >= 0 && parallel <= 2 ? kParallel[parallel] : "?");
#else
  std::printf("OpenBLAS: not found at configure time; only Eigen and zs are measured\n");
#endif
  std::printf("Eigen %d.%d.%d, SIMD %s\n", EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION,
              EIGEN_MINOR_VERSION, Eigen::SimdInstructionSetsInUse());
  std::printf("load average (1 min) at start: %s\n\n", load_average().c_str());

  const int peak_runs = 50 * options.repeats;
  double peak1 = fma_peak_gflops(1, peak_runs);
  const double first_peak1 = peak1;
  const double peak2 = fma_peak_gflops(2, peak_runs);
  std::printf(
      "FMA peak (%s, %d lanes x %d independent chains): 1 core %.1f GFLOP/s, "
      "2 cores at once %.1f GFLOP/s\n",
      kIsa, kLanes, kChains, peak1, peak2);
  std::printf("%% below = GFLOP/s / (threads x 1-core peak %.1f)\n", peak1);
  std::printf(
      "eigen: Eigen's own GEMM; openblas: cblas_sgemm with OpenBLAS's own threads; "
      "eigen+blas: Eigen built with EIGEN_USE_BLAS;\nzs:*: ops::cpu::sgemm as built "
      "(openblas: one single-threaded cblas_sgemm per block of C, split over the caller's "
      "OpenMP team)\n\n");

  const std::vector<Shape> shapes = {
      {"linear fwd   Y=X.W^T", false, true, 256, 3072, 768},
      {"linear dW    dW=dY^T.X", true, false, 3072, 768, 256},
      {"linear dX    dX=dY.W", false, false, 256, 768, 3072},
      {"proj fwd     Y=X.W^T", false, true, 256, 768, 768},
      {"qkv fwd      Y=X.W^T", false, true, 1024, 2304, 768},
  };
  const std::vector<Implementation> impls = implementations();

  std::printf("%-24s %5s %5s %5s %3s", "GEMM (row-major)", "m", "n", "k", "thr");
  for (const auto& impl : impls) std::printf(" | %12s", impl.name.c_str());
  std::printf("\n");
  for (const auto& shape : shapes) {
    for (int threads : {1, 2}) {
      std::vector<double> gflops = measure_shape(shape, threads, impls, options);
      std::printf("%-24s %5lld %5lld %5lld %3d", shape.name, static_cast<long long>(shape.m),
                  static_cast<long long>(shape.n), static_cast<long long>(shape.k), threads);
      for (double g : gflops) {
        std::printf(" | %12s", cell(g, threads, peak1, peak_runs).c_str());
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  }

  settle();
  std::printf(
      "\n2 ranks-as-threads at once, 1 intra-op thread each (aggregate GFLOP/s, %% of "
      "2 x 1-core peak)\n");
  std::printf("%-24s %5s %5s %5s", "GEMM (row-major)", "m", "n", "k");
  std::vector<const Implementation*> rank_impls = {&impls.front(), &impls.back()};
  for (const auto* impl : rank_impls) std::printf(" | %12s", impl->name.c_str());
  std::printf("\n");
  for (const auto& shape : shapes) {
    std::printf("%-24s %5lld %5lld %5lld", shape.name, static_cast<long long>(shape.m),
                static_cast<long long>(shape.n), static_cast<long long>(shape.k));
    for (const auto* impl : rank_impls)
      std::printf(" | %12s",
                  cell(measure_ranks(shape, 2, *impl, options), 2, peak1, peak_runs).c_str());
    std::printf("\n");
    std::fflush(stdout);
  }
  if (peak1 > first_peak1) {
    std::printf(
        "\nthe 1-core FMA peak read below a GEMM's rate and was measured again: %.1f GFLOP/s "
        "(%.1f at start); the shares after that are against it, %s where it still read low\n",
        peak1, first_peak1, kUnknownFigure);
  }
  std::printf("\nload average (1 min, this program included) at end: %s\n", load_average().c_str());
  return 0;
}

}  // namespace
}  // namespace zs::bench

int main(int argc, char** argv) { return zs::bench::run(argc, argv); }
