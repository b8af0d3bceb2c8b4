// Bus bandwidth of the local backend's all_reduce, all_gather and reduce_scatter (nccl-tests'
// definition: busbw = algbw × 2(N−1)/N for all_reduce and × (N−1)/N for the other two, where
// algbw = bytes / time and bytes is the full buffer) from 1 MiB to 128 MiB on 2 and 4 ranks as
// threads, next to memcpy bandwidth measured in the same run (the physical limit: the local
// backend moves data with plain loads and stores). fp32 sum. Prints; never asserts.
//
//   zs-bench-comm [max_MiB] [repeats]
// The MPI backend's figures against plain MPI come from zs-bench-comm-mpi under mpirun.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "comm/communicator.h"
#include "comm/local/local_backend.h"
#include "runtime/allocator.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Best single-thread memcpy bandwidth of `bytes`: bytes copied per second (GB/s), the figure
// busbw is compared with (both count each byte moved once).
double memcpy_gbps(size_t bytes, int repeats) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  double best = 1e30;
  for (int r = 0; r < repeats + 1; ++r) {
    auto start = Clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    if (r > 0) best = std::min(best, seconds_since(start));
  }
  return static_cast<double>(bytes) / best / 1e9;
}

enum class Kind { kAllReduce, kAllGather, kReduceScatter };

// Best time over ranks-synchronized repeats of one collective of `bytes` (the full buffer).
double time_collective(Kind kind, int ranks, size_t bytes, int repeats) {
  std::mutex mutex;
  double best = 1e30;
  zs::comm::run_local_ranks(ranks, [&](zs::comm::Communicator& comm) {
    zs::CpuAllocator allocator(nullptr);
    const int64_t full = static_cast<int64_t>(bytes / sizeof(float));
    const int64_t shard = full / ranks;
    zs::Tensor buffer = zs::Tensor::zeros({shard * ranks}, zs::DType::kF32, allocator, "full");
    zs::Tensor part = zs::Tensor::zeros({shard}, zs::DType::kF32, allocator, "shard");
    for (int r = 0; r < repeats + 1; ++r) {
      comm.barrier()->wait();
      auto start = Clock::now();
      switch (kind) {
        case Kind::kAllReduce:
          comm.all_reduce(buffer, zs::comm::ReduceOp::kSum)->wait();
          break;
        case Kind::kAllGather:
          comm.all_gather(part, buffer)->wait();
          break;
        case Kind::kReduceScatter:
          comm.reduce_scatter(buffer, part, zs::comm::ReduceOp::kSum)->wait();
          break;
      }
      const double t = seconds_since(start);
      // Rank 0's wait ends when its part is done; collectives end together within a rendezvous.
      if (r > 0 && comm.rank() == 0) {
        std::lock_guard<std::mutex> lock(mutex);
        best = std::min(best, t);
      }
    }
  });
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int max_mib = argc > 1 ? std::atoi(argv[1]) : 128;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  std::printf(
      "local backend (ranks as threads), fp32 sum, best of %d; busbw in GB/s "
      "(nccl-tests definition)\n",
      repeats);
  std::printf("%8s %6s | %12s %12s %12s | %14s %10s\n", "size", "ranks", "all_reduce", "all_gather",
              "red_scatter", "memcpy GB/s", "AR/memcpy");
  for (int ranks : {2, 4}) {
    for (int mib = 1; mib <= max_mib; mib *= 4) {
      const size_t bytes = static_cast<size_t>(mib) << 20;
      const double n = ranks;
      const double ar = time_collective(Kind::kAllReduce, ranks, bytes, repeats);
      const double ag = time_collective(Kind::kAllGather, ranks, bytes, repeats);
      const double rs = time_collective(Kind::kReduceScatter, ranks, bytes, repeats);
      const double memcpy_bw = memcpy_gbps(bytes, repeats);
      const double ar_bus = bytes / ar / 1e9 * 2 * (n - 1) / n;
      std::printf("%5d MiB %6d | %12.2f %12.2f %12.2f | %14.2f %9.0f%%\n", mib, ranks, ar_bus,
                  bytes / ag / 1e9 * (n - 1) / n, bytes / rs / 1e9 * (n - 1) / n, memcpy_bw,
                  100 * ar_bus / memcpy_bw);
    }
  }
  std::printf("memcpy GB/s = bytes copied per second by one thread; busbw = bytes a rank moves.\n");
  return 0;
}
