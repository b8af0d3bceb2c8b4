// Throughput of the bulk fp16 / bf16 conversions of runtime/half.h next to memcpy.
//
// Converts a 64 MiB fp32 buffer (16 Mi elements) to fp16 and bf16 and back, on one thread, and
// prints one line per conversion. GB/s counts bytes read plus bytes written (10^9 bytes per
// second), the same way for memcpy of the same 64 MiB buffer, which is the practical ceiling: a
// conversion streams 96 MiB where memcpy streams 128 MiB, so a conversion that keeps up with
// memory shows about the same GB/s. Each figure is the best of several runs after a warm-up run
// that also faults the pages in. Prints figures only; it checks nothing (see STYLE.md).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/half.h"

namespace {

constexpr size_t kBufferBytes = size_t{64} << 20;
constexpr size_t kElements = kBufferBytes / sizeof(float);
constexpr int kRuns = 8;

// Keeps the compiler from treating a buffer that is never read again as dead.
void keep_alive(const void* buffer) { asm volatile("" : : "r"(buffer) : "memory"); }

template <typename Body>
double best_seconds(Body&& body) {
  double best = 1e30;
  for (int run = 0; run <= kRuns; ++run) {  // run 0 is the warm-up
    const auto start = std::chrono::steady_clock::now();
    body();
    const auto stop = std::chrono::steady_clock::now();
    if (run > 0) best = std::min(best, std::chrono::duration<double>(stop - start).count());
  }
  return best;
}

double gigabytes_per_second(size_t bytes_moved, double seconds) {
  return static_cast<double>(bytes_moved) / seconds / 1e9;
}

}  // namespace

int main() {
  // Activations-like values: mostly near 1, some tiny (fp16 subnormal) and some large.
  std::vector<float> source(kElements);
  std::mt19937 rng(1);
  std::normal_distribution<float> activation(0.0f, 4.0f);
  for (size_t i = 0; i < kElements; ++i)
    source[i] = activation(rng) * ((i % 97 == 0) ? 1e-6f : 1.f);

  std::vector<float> copy(kElements);
  std::vector<uint16_t> narrow(kElements);
  std::vector<float> wide(kElements);

  const double memcpy_seconds = best_seconds([&] {
    std::memcpy(copy.data(), source.data(), kBufferBytes);
    keep_alive(copy.data());
  });
  const double memcpy_gbps = gigabytes_per_second(2 * kBufferBytes, memcpy_seconds);
  const size_t narrow_bytes = kElements * sizeof(uint16_t);

  struct Line {
    const char* name;
    double seconds;
  };
  const Line lines[] = {
      {"f32_to_f16 ", best_seconds([&] {
         zs::f32_to_f16(source.data(), narrow.data(), kElements);
         keep_alive(narrow.data());
       })},
      {"f16_to_f32 ", best_seconds([&] {
         zs::f16_to_f32(narrow.data(), wide.data(), kElements);
         keep_alive(wide.data());
       })},
      {"f32_to_bf16", best_seconds([&] {
         zs::f32_to_bf16(source.data(), narrow.data(), kElements);
         keep_alive(narrow.data());
       })},
      {"bf16_to_f32", best_seconds([&] {
         zs::bf16_to_f32(narrow.data(), wide.data(), kElements);
         keep_alive(wide.data());
       })},
  };
  for (const Line& line : lines) {
    const double gbps = gigabytes_per_second(kBufferBytes + narrow_bytes, line.seconds);
    std::printf(
        "%s  64 MiB fp32 <-> 32 MiB: %6.2f GB/s  %6.3f ms  (memcpy 64 MiB: %6.2f GB/s, %.0f%%)\n",
        line.name, gbps, line.seconds * 1e3, memcpy_gbps, 100.0 * gbps / memcpy_gbps);
  }
  return 0;
}
