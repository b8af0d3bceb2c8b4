// RankContext's helpers: a host tensor where the rank computes, and cross-rank figures.
#include "train/rank_context.h"

#include <cstring>

#include "offload/nvme_pager.h"

namespace zs::train {

Tensor RankContext::to_compute(const Tensor& host_tensor) const {
  if (!device) return host_tensor;
  Tensor placed =
      Tensor::empty(host_tensor.shape(), host_tensor.dtype(), compute, host_tensor.name());
  placed.copy_from_host(host_tensor.raw_data());
  return placed;
}

std::vector<std::pair<const offload::NvmePager*, const char*>> RankContext::nvme_pagers() const {
  std::vector<std::pair<const offload::NvmePager*, const char*>> pagers;
  if (state_pager) pagers.emplace_back(state_pager, "optimizer state");
  if (master_pager) pagers.emplace_back(master_pager, "master weights");
  if (param_pager) pagers.emplace_back(param_pager, "parameter shards");
  return pagers;
}

RankContext::NvmeTraffic RankContext::nvme_traffic() const {
  NvmeTraffic sum;
  for (const auto& entry : nvme_pagers()) {
    const offload::NvmeStoreStats io = entry.first->store().stats();
    sum.read += io.bytes_read;
    sum.written += io.bytes_written;
    sum.wait_seconds += entry.first->wait_seconds();
  }
  return sum;
}

std::vector<std::vector<uint64_t>> gather_u64(comm::Communicator& comm, Allocator& allocator,
                                              const std::vector<uint64_t>& values) {
  return comm::all_gather_u64(comm, allocator, values, "figures for the log");
}

std::vector<double> sum_over_ranks(comm::Communicator& comm, Allocator& allocator,
                                   const std::vector<double>& values) {
  std::vector<uint64_t> bits(values.size());
  std::memcpy(bits.data(), values.data(), values.size() * sizeof(double));
  std::vector<double> totals(values.size(), 0.0);
  for (const std::vector<uint64_t>& rank : gather_u64(comm, allocator, bits)) {
    for (size_t i = 0; i < values.size(); ++i) {
      double value;
      std::memcpy(&value, &rank[i], sizeof value);
      totals[i] += value;
    }
  }
  return totals;
}

}  // namespace zs::train
