// The ShardedModel's device preconditions, checked without a GPU: an allocator whose memory is on
// another device than the communicator's buffers is refused by name before anything is
// allocated (the GPU-side checks — no compute stream attached, gather_scatter on a GPU — are in
// tests/cuda/sharding_parity_test.cc, label gpu).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "comm/local/local_backend.h"
#include "models/gpt.h"
#include "runtime/allocator.h"
#include "runtime/error.h"
#include "sharding/sharded_model.h"
#include "tests/sharding/sharding_test_util.h"

namespace zs::sharding {
namespace {

// Host memory labelled cuda:0 (never touched here: the check comes first).
class LabelledAllocator : public Allocator {
 public:
  LabelledAllocator() : Allocator(Device::cuda(0), nullptr) {}

 protected:
  void* raw_allocate(size_t nbytes) override { return std::malloc(nbytes); }
  void raw_deallocate(void* ptr, size_t) override { std::free(ptr); }
};

TEST(ShardingDevice, RefusesAnAllocatorOnAnotherDeviceThanTheCommunicator) {
  comm::run_local_ranks(1, [](comm::Communicator& comm) {
    LabelledAllocator allocator;
    models::Gpt model(testing::uneven_config());
    try {
      ShardedModel sharded(model, comm, allocator, ShardingConfig{});
      ADD_FAILURE() << "a cuda:0 allocator was accepted with a local communicator";
    } catch (const InvalidArgument& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("cuda:0"), std::string::npos) << message;
      EXPECT_NE(message.find("nccl"), std::string::npos) << message;
      EXPECT_NE(message.find("'local'"), std::string::npos) << message;
    }
  });
}

}  // namespace
}  // namespace zs::sharding
