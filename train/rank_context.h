// What the parts of one rank's run share: the configuration, the rank's communicator, memory,
// device, task and sharded model, and where rank 0 records the result; plus the helpers that
// move exact figures between ranks and bytes between the host and the rank's device.
//
// A RankContext refers to objects the engine's rank run owns; it owns nothing and lives as long
// as that run. One rank's thread uses it.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "runtime/allocator.h"
#include "runtime/memory_tracker.h"
#include "runtime/tensor.h"
#include "sharding/sharded_model.h"
#include "train/config.h"
#include "train/device.h"
#include "train/records.h"
#include "train/tasks.h"

namespace zs::offload {
class NvmePager;
}  // namespace zs::offload

namespace zs::train {

struct RankContext {
  const TrainConfig& config;
  const TaskData& data;
  comm::Communicator& comm;
  bool lead;               // rank 0: logs and keeps the result
  MemoryTracker& tracker;  // the rank's device: the CPU, or its GPU
  Allocator& host;         // host memory: batches, evaluation and sample windows
  Allocator& compute;      // where the model, the shards and the scalar collectives live
  RankDevice* device;      // --device cuda: the rank's GPU; null on the CPU
  Task& task;
  sharding::ShardedModel& sharded;
  const sharding::ShardingConfig& sharding;
  int64_t seq;          // tokens per sequence
  TrainResult& result;  // filled on rank 0 (the lead)
  // --offload-optimizer host: the rank's host tier (offload/host_pool.h); null otherwise.
  MemoryTracker* host_tier;
  // --offload-optimizer nvme: the optimizer state's pager (offload/nvme_pager.h); null
  // otherwise.
  const offload::NvmePager* state_pager = nullptr;
  // --offload-param nvme: the parameter shards' pager; null otherwise.
  const offload::NvmePager* param_pager = nullptr;
  // --offload-optimizer nvme: the masters' pager; null otherwise.
  const offload::NvmePager* master_pager = nullptr;

  // A host tensor where the rank computes: itself on the CPU, else a synchronous upload.
  Tensor to_compute(const Tensor& host_tensor) const;
  // The NVMe tier's pagers this rank has, each with what it holds ("optimizer state", "master
  // weights", "parameter shards"), in that order; empty without an NVMe tier.
  std::vector<std::pair<const offload::NvmePager*, const char*>> nvme_pagers() const;
  // Their traffic so far, summed: bytes read and written, seconds waited for the disk.
  struct NvmeTraffic {
    uint64_t read = 0;
    uint64_t written = 0;
    double wait_seconds = 0;
  };
  NvmeTraffic nvme_traffic() const;
};

// Every rank's values, by rank (one int64 all-gather).
std::vector<std::vector<uint64_t>> gather_u64(comm::Communicator& comm, Allocator& allocator,
                                              const std::vector<uint64_t>& values);

// Σ over ranks, in rank order, of each of the doubles every rank holds (exact bits travel:
// each double goes as its 64-bit pattern through gather_u64), the same on every rank.
std::vector<double> sum_over_ranks(comm::Communicator& comm, Allocator& allocator,
                                   const std::vector<double>& values);

}  // namespace zs::train
