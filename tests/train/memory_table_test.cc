// train/report.h's memory table: its header says which ranks' memory it shows — for CPU ranks
// as before (no device), for GPU ranks each rank's GPU in rank order — and the rows are the
// categories any rank used, min and max over ranks, and the rank holding the max.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "train/report.h"

namespace zs::train {
namespace {

std::vector<RankMemory> ranks_with_parameters(const std::vector<uint64_t>& bytes,
                                              const std::vector<std::string>& devices) {
  std::vector<RankMemory> ranks(bytes.size());
  for (size_t r = 0; r < bytes.size(); ++r) {
    ranks[r].peak.bytes[static_cast<int>(MemoryCategory::kParameters)] = bytes[r];
    ranks[r].peak_total = bytes[r];
    ranks[r].device = devices.empty() ? "" : devices[r];
  }
  return ranks;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

TEST(MemoryTable, CpuRanksNameNoDevice) {
  const MemorySpread spread = memory_spread(ranks_with_parameters({1024, 2048}, {}));
  EXPECT_TRUE(spread.devices.empty());
  const std::string table = memory_table(spread, 0);
  EXPECT_EQ(first_line(table), "memory per rank, peak over the run (2 ranks):");
  EXPECT_NE(table.find("parameters"), std::string::npos) << table;
  EXPECT_EQ(first_line(memory_table(spread, size_t{1} << 30)),
            "memory per rank, peak over the run (2 ranks, budget " + format_bytes(size_t{1} << 30) +
                "):");
}

TEST(MemoryTable, GpuRanksNameTheirDevicesInRankOrder) {
  const MemorySpread one = memory_spread(ranks_with_parameters({4096}, {"cuda:0"}));
  EXPECT_EQ(first_line(memory_table(one, 0)),
            "memory per rank, peak over the run (1 rank on cuda:0):");
  const MemorySpread two = memory_spread(ranks_with_parameters({4096, 1024}, {"cuda:1", "cuda:0"}));
  EXPECT_EQ(first_line(memory_table(two, 8192)),
            "memory per rank, peak over the run (2 ranks on cuda:1, cuda:0, budget " +
                format_bytes(8192) + "):");
}

TEST(MemoryTable, ManyGpuRanksListTheFirstEightAndCountTheRest) {
  std::vector<std::string> devices;
  for (int r = 0; r < 10; ++r) devices.push_back("cuda:" + std::to_string(r % 4));
  const MemorySpread spread =
      memory_spread(ranks_with_parameters(std::vector<uint64_t>(10, 512), devices));
  EXPECT_EQ(first_line(memory_table(spread, 0)),
            "memory per rank, peak over the run (10 ranks on cuda:0, cuda:1, cuda:2, cuda:3, "
            "cuda:0, cuda:1, cuda:2, cuda:3 and 2 more):");
}

}  // namespace
}  // namespace zs::train
