// Probes of where a benchmark's time goes on a shared CPU machine: wall and thread CPU clocks,
// this process's CPU time and page faults, the machine's busy and stolen time (/proc/stat), a
// thread's runqueue wait (/proc/self/task/<tid>/schedstat), the cost of first-touching a page,
// and a communicator backend that charges the communicator thread's CPU time to each collective.
// Used by zs-bench-sharding; header-only, because each bench/<name>.cc is one program.
//
// Thread-safety: the free functions read the calling thread's or the process's counters and may
// be called from any thread; TimedBackend's readers may run concurrently with its collectives.
#pragma once

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>

#include "comm/backend.h"
#include "comm/stats.h"

namespace zs::bench {

using Clock = std::chrono::steady_clock;
using zs::comm::CollectiveKind;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

inline double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// This process's CPU time (all threads) and minor page faults so far.
struct ProcessUsage {
  double cpu = 0;     // user + system seconds
  double system = 0;  // of which in the kernel (page faults, futexes, mmap/munmap)
  double minor_faults = 0;
};

inline ProcessUsage process_usage() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) + 1e-6 * static_cast<double>(tv.tv_usec);
  };
  return {seconds(usage.ru_utime) + seconds(usage.ru_stime), seconds(usage.ru_stime),
          static_cast<double>(usage.ru_minflt)};
}

// CPU seconds of the whole machine since boot, from /proc/stat: busy (all processes) and stolen
// by the hypervisor (this is a VM: a stolen tick is time no thread of the guest ran).
struct MachineTimes {
  double busy = 0;
  double steal = 0;
};

inline MachineTimes machine_times() {
  std::ifstream stat("/proc/stat");
  std::string cpu;
  unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0,
                     steal = 0;
  stat >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  return {static_cast<double>(user + nice + system + irq + softirq) / tick,
          static_cast<double>(steal) / tick};
}

// Seconds a thread of this process has been runnable but waiting for a core (schedstat's
// second field). Charged when the thread gets a core, so exact when the thread reads its own.
inline double runqueue_seconds(long tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/schedstat");
  unsigned long long running_ns = 0, runqueue_ns = 0;
  in >> running_ns >> runqueue_ns;
  return 1e-9 * static_cast<double>(runqueue_ns);
}

inline long current_tid() { return static_cast<long>(syscall(SYS_gettid)); }

// What a freshly mapped page costs on first touch (the page fault and the kernel zeroing it),
// beyond writing it when it is already mapped: microseconds per 4 KiB page, best of 3. Stage 2/3
// free and re-allocate their gathered parameters and gradient buffers every step; when the
// allocator hands the memory back to the kernel, each reuse pays this per page.
inline double first_touch_us_per_page() {
  constexpr size_t kBytes = 64 << 20;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  double best = 1e30;
  for (int r = 0; r < 3; ++r) {
    void* memory =
        mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) return 0;
    auto start = Clock::now();
    std::memset(memory, 1, kBytes);
    const double fresh = seconds_since(start);
    start = Clock::now();
    std::memset(memory, 2, kBytes);
    const double warm = seconds_since(start);
    munmap(memory, kBytes);
    best = std::min(best, (fresh - warm) / static_cast<double>(kBytes / page) * 1e6);
  }
  return best;
}

// Forwards every call to the local backend and charges the communicator thread's CPU time
// inside it to the collective's kind. Methods run on the communicator thread; the readers run
// on the rank thread, hence the mutex.
class TimedBackend final : public zs::comm::Backend {
 public:
  explicit TimedBackend(std::unique_ptr<Backend> target) : target_(std::move(target)) {}
  TimedBackend(const TimedBackend&) = delete;
  TimedBackend& operator=(const TimedBackend&) = delete;

  int rank() const override { return target_->rank(); }
  int size() const override { return target_->size(); }
  const char* name() const override { return target_->name(); }
  uint64_t bytes_copied() const override { return target_->bytes_copied(); }

  void all_reduce(void* data, size_t count, zs::DType dtype, zs::comm::ReduceOp op,
                  const zs::comm::Call& call) override {
    Charge charge(*this, call.kind);
    target_->all_reduce(data, count, dtype, op, call);
  }
  void all_gather(const void* shard, void* full, size_t count, zs::DType dtype,
                  const zs::comm::Call& call) override {
    Charge charge(*this, call.kind);
    target_->all_gather(shard, full, count, dtype, call);
  }
  void reduce_scatter(const void* full, void* shard, size_t count, zs::DType dtype,
                      zs::comm::ReduceOp op, const zs::comm::Call& call) override {
    Charge charge(*this, call.kind);
    target_->reduce_scatter(full, shard, count, dtype, op, call);
  }
  void broadcast(void* data, size_t count, zs::DType dtype, int root,
                 const zs::comm::Call& call) override {
    Charge charge(*this, call.kind);
    target_->broadcast(data, count, dtype, root, call);
  }
  void gather(const void* in, void* out, size_t count, zs::DType dtype, int root,
              const zs::comm::Call& call) override {
    Charge charge(*this, call.kind);
    target_->gather(in, out, count, dtype, root, call);
  }
  void scatter(const void* in, void* out, size_t count, zs::DType dtype, int root,
               const zs::comm::Call& call) override {
    Charge charge(*this, call.kind);
    target_->scatter(in, out, count, dtype, root, call);
  }
  void barrier(const zs::comm::Call& call) override {
    Charge charge(*this, call.kind);
    target_->barrier(call);
  }
  void send(const void* data, size_t count, zs::DType dtype, int peer,
            const zs::comm::Call& call) override {
    Charge charge(*this, call.kind);
    target_->send(data, count, dtype, peer, call);
  }
  void recv(void* data, size_t count, zs::DType dtype, int peer,
            const zs::comm::Call& call) override {
    Charge charge(*this, call.kind);
    target_->recv(data, count, dtype, peer, call);
  }
  std::unique_ptr<Backend> split(int color, int key, const zs::comm::Call& call) override {
    return target_->split(color, key, call);
  }
  void abort(const std::string& reason) override { target_->abort(reason); }

  double cpu_seconds(CollectiveKind kind) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return cpu_seconds_[static_cast<size_t>(kind)];
  }
  // The communicator thread's id (0 before its first collective).
  long thread_id() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return thread_id_;
  }

 private:
  class Charge {
   public:
    Charge(TimedBackend& backend, CollectiveKind kind)
        : backend_(backend), kind_(kind), start_(thread_cpu_seconds()) {}
    ~Charge() {
      const double spent = thread_cpu_seconds() - start_;
      std::lock_guard<std::mutex> lock(backend_.mutex_);
      backend_.cpu_seconds_[static_cast<size_t>(kind_)] += spent;
      backend_.thread_id_ = current_tid();
    }
    Charge(const Charge&) = delete;
    Charge& operator=(const Charge&) = delete;

   private:
    TimedBackend& backend_;
    const CollectiveKind kind_;
    const double start_;
  };

  std::unique_ptr<Backend> target_;
  mutable std::mutex mutex_;
  std::array<double, zs::comm::kNumCollectiveKinds> cpu_seconds_{};
  long thread_id_ = 0;
};

}  // namespace zs::bench
