// FaultInjectingBackend: a Backend that forwards to another one and injects faults, for tests
// (in the spirit of LevelDB's EnvWrapper / ErrorEnv).
//
// Faults, counted over the calls this wrapper sees (every primitive except abort, numbered from
// 0 in issue order):
// - delay: sleep before each call reaches the wrapped backend (exposes missing waits and shows
//   that collectives run asynchronously); with delay_tag_prefix set, only before the calls whose
//   tag (CollectiveOptions::tag) starts with it, so a test can slow one kind of traffic (the
//   gradient reductions) by a wide margin without slowing the rest;
// - fail_call = k: call k throws CommError without reaching the wrapped backend (the
//   Communicator then aborts the group, so peers fail fast);
// - drop_call = k: this rank drops out at call k: that call and every later one throw CommError
//   without reaching the wrapped backend, and abort() is no longer forwarded (a dead rank cannot
//   warn its peers), so peers time out — or fail fast if something else aborts the group.
// Every injected error names the call (index, collective, sequence) and the setting that fired.
//
// Stream ordering (prepare, poll, check_compute_stream) is forwarded unchanged.
// The wrapper owns the wrapped backend. split() returns the wrapped backend's sub-backend
// unwrapped: faults apply to this group only. Calls come from the owning communicator's thread;
// abort() may come from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "comm/backend.h"

namespace zs::comm {

struct FaultSettings {
  std::chrono::milliseconds delay{0};
  int64_t fail_call = -1;        // -1: never
  int64_t drop_call = -1;        // -1: never
  std::string delay_tag_prefix;  // empty: the delay applies to every call
};

class FaultInjectingBackend final : public Backend {
 public:
  FaultInjectingBackend(std::unique_ptr<Backend> target, FaultSettings settings);
  FaultInjectingBackend(const FaultInjectingBackend&) = delete;
  FaultInjectingBackend& operator=(const FaultInjectingBackend&) = delete;

  int rank() const override { return target_->rank(); }
  int size() const override { return target_->size(); }
  const char* name() const override { return target_->name(); }
  uint64_t bytes_copied() const override { return target_->bytes_copied(); }

  void all_reduce(void* data, size_t count, DType dtype, ReduceOp op, const Call& call) override;
  void all_gather(const void* shard, void* full, size_t count, DType dtype,
                  const Call& call) override;
  void reduce_scatter(const void* full, void* shard, size_t count, DType dtype, ReduceOp op,
                      const Call& call) override;
  void broadcast(void* data, size_t count, DType dtype, int root, const Call& call) override;
  void gather(const void* in, void* out, size_t count, DType dtype, int root,
              const Call& call) override;
  void scatter(const void* in, void* out, size_t count, DType dtype, int root,
               const Call& call) override;
  void barrier(const Call& call) override;
  void send(const void* data, size_t count, DType dtype, int peer, const Call& call) override;
  void recv(void* data, size_t count, DType dtype, int peer, const Call& call) override;
  std::unique_ptr<Backend> split(int color, int key, const Call& call) override;
  void abort(const std::string& reason) override;
  // Stream ordering is the wrapped backend's (faults apply to the primitives).
  void check_compute_stream(const StreamRef& stream) const override {
    target_->check_compute_stream(stream);
  }
  std::shared_ptr<DeviceSync> prepare(CollectiveKind kind, const StreamRef& compute) override {
    return target_->prepare(kind, compute);
  }
  bool poll(const Call& call) override { return target_->poll(call); }

  // Calls seen so far (including the failed and dropped ones).
  uint64_t calls() const { return calls_.load(); }
  bool dropped() const { return dropped_.load(); }

 private:
  // Applies the delay and the fail/drop settings to the next call; throws if one fires.
  void before(const Call& call);

  std::unique_ptr<Backend> target_;
  const FaultSettings settings_;
  std::atomic<uint64_t> calls_{0};
  std::atomic<bool> dropped_{false};
};

}  // namespace zs::comm
