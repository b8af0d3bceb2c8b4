// NvmePager (offload/nvme_pager.h) under the optimizers: AdamW and SGD with momentum
// over views of different sizes give bit for bit the masters and state of the same optimizer with
// resident state, with 1, 2 and 3 host buffers; the host memory is the buffers alone, charged as
// optimizer_state; state written through access_state() (a checkpoint load) is what the next step
// reads; a write-out that fails (a full disk) fails the next step that needs its buffer, with an
// IoError naming the swap file, and loses nothing (the buffer keeps its view until a write-out
// lands); misuse is refused by name; sweeps read and write 1 of 5 views a round where LRU in one
// order reads and writes all 5.
#include "offload/nvme_pager.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "offload/host_pool.h"
#include "optim/adamw.h"
#include "optim/sgd.h"
#include "runtime/error.h"
#include "runtime/fault_file_system.h"
#include "tests/support/scratch.h"

namespace zs::offload {
namespace {

using testing::ScratchDir;

// Views of 3 sizes (the largest sets the buffers'), with a gap not covered in one.
struct Model {
  Model(Allocator& allocator, uint32_t seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (int64_t n : {3000, 10000, 1, 4500}) {
      std::vector<float> m(static_cast<size_t>(n));
      for (float& x : m) x = dist(gen);
      Tensor master = Tensor::empty({n}, DType::kF32, allocator, "master");
      master.copy_from(m);
      Tensor grad = Tensor::zeros({n}, DType::kF32, allocator, "grad");
      std::vector<ShardSegment> segments = {{0, n, true}};
      if (n == 10000) segments = {{0, 4000, true}, {5000, 10000, false}};
      views.emplace_back("unit" + std::to_string(views.size()), master, grad, segments);
    }
  }
  void set_grads(uint32_t seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(-0.1f, 0.1f);
    for (ShardView& view : views) {
      std::vector<float> g(static_cast<size_t>(view.grad.numel()));
      for (float& x : g) x = dist(gen);
      view.grad.copy_from(g);
    }
  }
  std::vector<ShardView> views;
};

std::vector<uint32_t> bits(const Tensor& t) {
  std::vector<float> values = t.to_vector();
  std::vector<uint32_t> out(values.size());
  std::memcpy(out.data(), values.data(), values.size() * sizeof(float));
  return out;
}

NvmeStoreOptions store_options(const std::string& dir) {
  NvmeStoreOptions o;
  o.paths = {dir};
  o.name = "rank-00000-optimizer";
  o.stripe_bytes = 16 * 1024;
  o.queue_depth = 4;
  o.direct = false;  // the test's scratch may be tmpfs; the store's own tests cover O_DIRECT
  return o;
}

// `steps` steps of `make(views, pager)` with and without paging; every master and state bit
// equal.
template <typename Make>
void expect_same_bits(const std::string& dir, int buffers, int steps, Make make) {
  HostPool resident_pool("resident", {});
  HostPool paged_pool("paged", {});
  Model resident(resident_pool.allocator(), 3);
  Model paged(paged_pool.allocator(), 3);
  NvmePager pager(store_options(dir), paged_pool.allocator(), buffers);
  std::unique_ptr<optim::Optimizer> a = make(resident.views, nullptr);
  std::unique_ptr<optim::Optimizer> b = make(paged.views, &pager);
  EXPECT_TRUE(b->paged());
  for (int s = 0; s < steps; ++s) {
    resident.set_grads(100 + s);
    paged.set_grads(100 + s);
    a->step(1e-2f);
    b->step(1e-2f);
  }
  for (size_t v = 0; v < resident.views.size(); ++v) {
    EXPECT_EQ(bits(resident.views[v].master), bits(paged.views[v].master)) << "view " << v;
    optim::Optimizer::StateAccess access = b->access_state(v);
    ASSERT_EQ(access.tensors().size(), a->state(v).size());
    for (size_t k = 0; k < access.tensors().size(); ++k) {
      EXPECT_EQ(bits(a->state(v)[k]), bits(access.tensors()[k])) << "view " << v << " state " << k;
    }
  }
  // The host tier holds the buffers, not the state.
  EXPECT_EQ(paged_pool.tracker().current(MemoryCategory::kOptimizerState), pager.buffer_bytes());
  // Each buffer: every state tensor of the largest view (10000 floats, rounded up to 4 KiB), and
  // 4 KiB of slack for the alignment.
  const uint64_t per_state = (10000 * 4 + 4095) / 4096 * 4096;
  EXPECT_EQ(pager.buffer_bytes(),
            static_cast<uint64_t>(buffers) * (a->state_names().size() * per_state + 4096));
  EXPECT_GT(pager.store().stats().bytes_read, 0u);
  // Sized for the state exactly: every view's tensors, each rounded up to 4 KiB.
  uint64_t capacity = 0;
  for (int64_t n : {3000, 10000, 1, 4500}) {
    capacity += a->state_names().size() * ((static_cast<uint64_t>(n) * 4 + 4095) / 4096 * 4096);
  }
  EXPECT_EQ(pager.store().reserved(), capacity);
}

TEST(NvmePager, AdamWIsBitwiseTheResidentOptimizerWithOneTwoAndThreeBuffers) {
  ScratchDir scratch;
  for (int buffers : {1, 2, 3}) {
    SCOPED_TRACE("buffers " + std::to_string(buffers));
    expect_same_bits(scratch.path(""), buffers, 4,
                     [](std::vector<ShardView> views, TensorPager* pager) {
                       optim::AdamWOptions options;
                       options.weight_decay = 0.1f;
                       return std::unique_ptr<optim::Optimizer>(
                           new optim::AdamW(std::move(views), options, pager));
                     });
  }
}

TEST(NvmePager, SgdWithMomentumIsBitwiseTheResidentOptimizer) {
  ScratchDir scratch;
  expect_same_bits(scratch.path(""), 2, 3, [](std::vector<ShardView> views, TensorPager* pager) {
    optim::SgdOptions options;
    options.momentum = 0.9f;
    options.nesterov = true;
    return std::unique_ptr<optim::Optimizer>(new optim::Sgd(std::move(views), options, pager));
  });
}

TEST(NvmePager, StateWrittenThroughAccessIsWhatTheNextStepReads) {
  ScratchDir scratch;
  HostPool pool("rank 0 host", {});
  Model model(pool.allocator(), 5);
  NvmePager pager(store_options(scratch.path("")), pool.allocator(), 2);
  optim::AdamW adam(model.views, optim::AdamWOptions{}, &pager);
  EXPECT_THROW((void)adam.state(0), InvalidArgument);
  EXPECT_THROW((void)adam.state_dict(), InvalidArgument);
  for (size_t v = 0; v < model.views.size(); ++v) {
    optim::Optimizer::StateAccess access = adam.access_state(v);
    for (size_t k = 0; k < 2; ++k) {
      access.tensors()[k].copy_from(std::vector<float>(
          static_cast<size_t>(access.tensors()[k].numel()), 0.25f * static_cast<float>(k + 1)));
    }
    access.mark_written();
  }
  adam.flush_state();
  for (size_t v = 0; v < model.views.size(); ++v) {
    optim::Optimizer::StateAccess access = adam.access_state(v);
    EXPECT_EQ(access.tensors()[1].to_vector().back(), 0.5f) << "view " << v;
  }
  // A second acquire of a view held is refused; so is a release of one not held.
  optim::Optimizer::StateAccess held = adam.access_state(1);
  EXPECT_THROW((void)pager.acquire(1), InvalidArgument);
  EXPECT_THROW(pager.release(2, false), InvalidArgument);
}

TEST(NvmePager, AFailedWriteOutFailsTheStepNamingTheSwapFile) {
  ScratchDir scratch;
  FaultFileSystem faults;
  HostPool pool("rank 0 host", {});
  Model model(pool.allocator(), 7);
  NvmePager pager(store_options(scratch.path("")), pool.allocator(), 3, faults);
  optim::AdamW adam(model.views, optim::AdamWOptions{}, &pager);
  model.set_grads(1);
  adam.step(1e-3f);
  faults.add_rule(parse_fault_rule("write:rank-00000-optimizer.swap:enospc"));
  // The write-outs of a step run on after it returns; the step that next needs one of their
  // buffers (here the next one) fails with the error.
  try {
    for (uint32_t s = 2; s < 4; ++s) {
      model.set_grads(s);
      adam.step(1e-3f);
    }
    adam.flush_state();
    ADD_FAILURE() << "steps whose state could not be written out succeeded";
  } catch (const IoError& e) {
    EXPECT_CONTAINS(e.what(), "rank-00000-optimizer.swap");
    EXPECT_CONTAINS(e.what(), "No space left on device");
  }
  // Nothing was lost: each buffer whose write-out failed kept its view. With the disk back, a
  // flush reports the failures of write-outs still in flight when the step threw (each wait that
  // finds one throws it, and its buffer is changed again); the next flush writes them all, and
  // the steps go on reading what the buffers and the disk hold.
  EXPECT_GT(faults.fired(0), 0);
  faults.clear_rules();
  bool flushed = false;
  for (int attempt = 0; attempt < 4 && !flushed; ++attempt) {
    try {
      adam.flush_state();
      flushed = true;
    } catch (const IoError& e) {
      EXPECT_CONTAINS(e.what(), "No space left on device");
    }
  }
  ASSERT_TRUE(flushed);
  for (uint32_t s = 4; s < 7; ++s) {
    model.set_grads(s);
    adam.step(1e-3f);
  }
  adam.flush_state();
}

// A flush whose write-outs fail (the disk full between two steps) throws and loses nothing: with
// the disk back, the buffers' views are written out when their buffers are needed, and the state
// and masters end bit for bit those of the resident optimizer.
TEST(NvmePager, AFailedFlushLosesNothing) {
  ScratchDir scratch;
  FaultFileSystem faults;
  HostPool resident_pool("resident", {});
  HostPool paged_pool("paged", {});
  Model resident(resident_pool.allocator(), 9);
  Model paged(paged_pool.allocator(), 9);
  NvmePager pager(store_options(scratch.path("")), paged_pool.allocator(), 3, faults);
  optim::AdamW a(resident.views, optim::AdamWOptions{});
  optim::AdamW b(paged.views, optim::AdamWOptions{}, &pager);
  const auto step_both = [&](uint32_t s) {
    resident.set_grads(s);
    paged.set_grads(s);
    a.step(1e-2f);
    b.step(1e-2f);
  };
  for (uint32_t s = 1; s <= 3; ++s) step_both(s);
  faults.add_rule(parse_fault_rule("write:rank-00000-optimizer.swap:enospc"));
  EXPECT_THROW(b.flush_state(), IoError);
  EXPECT_GT(faults.fired(0), 0);
  faults.clear_rules();
  // A checkpoint's reads of every view, before any step: 4 views through 3 buffers evict views
  // whose write-out failed, before anything acquires them again.
  for (size_t v = 0; v < paged.views.size(); ++v) (void)b.access_state(v);
  for (uint32_t s = 4; s <= 6; ++s) step_both(s);
  for (size_t v = 0; v < resident.views.size(); ++v) {
    EXPECT_EQ(bits(resident.views[v].master), bits(paged.views[v].master)) << "view " << v;
    optim::Optimizer::StateAccess access = b.access_state(v);
    for (size_t k = 0; k < access.tensors().size(); ++k) {
      EXPECT_EQ(bits(a.state(v)[k]), bits(access.tensors()[k])) << "view " << v << " state " << k;
    }
  }
}

// acquire_for_overwrite reads nothing in (the store's read counter stays), and its dirty release
// is what the next acquire reads; a write-out that fails keeps the view in its buffer until one
// lands; the buffers are charged to the category given (here parameters, as stage 3's shards).
TEST(NvmePager, OverwriteReadsNothingAndAFailedWriteOutLosesNothing) {
  ScratchDir scratch;
  FaultFileSystem faults;
  HostPool pool("rank 0 host", {});
  NvmePager pager(store_options(scratch.path("")), pool.allocator(), 1, faults, "parameter shards",
                  MemoryCategory::kParameters);
  pager.attach({2048, 0, 1024}, 1);
  EXPECT_GT(pool.tracker().current(MemoryCategory::kParameters), 4u * 2048);
  EXPECT_EQ(pool.tracker().current(MemoryCategory::kOptimizerState), 0u);
  auto write_view = [&](size_t view, float value) {
    std::vector<Tensor> pages = pager.acquire_for_overwrite(view);
    ASSERT_EQ(pages.size(), 1u);
    pages[0].copy_from(std::vector<float>(static_cast<size_t>(pages[0].numel()), value));
    pager.release(view, true);
  };
  write_view(0, 1.5f);
  write_view(2, 2.5f);  // evicts view 0 (one buffer): its write-out lands first
  pager.flush();
  const uint64_t read_before = pager.store().stats().bytes_read;
  write_view(0, 3.5f);
  EXPECT_EQ(pager.store().stats().bytes_read, read_before);
  pager.flush();
  std::vector<Tensor> pages = pager.acquire(2);
  EXPECT_EQ(pages[0].to_vector().front(), 2.5f);
  EXPECT_GT(pager.store().stats().bytes_read, read_before);
  pager.release(2, false);
  // A failed write-out loses nothing: the flush throws, the buffer keeps view 0 changed, an
  // eviction of it fails the same way, and with the disk back the eviction writes it out.
  faults.add_rule(parse_fault_rule("write:rank-00000-optimizer.swap:eio"));
  write_view(0, 4.5f);
  EXPECT_THROW(pager.flush(), IoError);
  EXPECT_THROW((void)pager.acquire(2), IoError);
  EXPECT_GT(faults.fired(0), 0);
  faults.clear_rules();
  const uint64_t written_before = pager.store().stats().bytes_written;
  pages = pager.acquire(2);  // evicts view 0: its write-out lands first
  EXPECT_GT(pager.store().stats().bytes_written, written_before);
  EXPECT_EQ(pages[0].to_vector().front(), 2.5f);
  pager.release(2, false);
  pages = pager.acquire(0);  // from the disk
  EXPECT_EQ(pages[0].to_vector().back(), 4.5f);
  pager.release(0, false);
}

// The optimizer's use, round after round: prefetch every view in the round's order (the
// forward's prefetch_state), then acquire, prefetch the next and release written each view in
// that order (the step). With 5 views of 4 KiB and 4 buffers, least-recently-used eviction and
// the same order every round throw out exactly the view needed next and read all 5 every round;
// kSweeps with rounds alternately up and down keeps the last round's views and reads 1 and writes
// 1 a round (writing a view out only when its buffer is needed), with the same values.
TEST(NvmePager, SweepsReadAndWriteOneViewARoundWithOneBufferLessThanViews) {
  ScratchDir scratch;
  const std::vector<int64_t> numel(5, 1024);
  struct Traffic {
    std::vector<uint64_t> reads;  // per round
    uint64_t written = 0;         // in all, the final flush's included
  };
  const auto rounds = [&](NvmePager::Eviction eviction, bool alternate) {
    HostPool pool("rank 0 host", {});
    NvmePager pager(store_options(scratch.path("")), pool.allocator(), 4, posix_file_system(),
                    "optimizer state", MemoryCategory::kOptimizerState, eviction);
    pager.attach(numel, 1);
    Traffic traffic;
    for (int round = 0; round < 5; ++round) {
      const uint64_t read_before = pager.store().stats().bytes_read;
      const auto at = [&](size_t k) { return alternate && round % 2 == 1 ? 4 - k : k; };
      for (size_t k = 0; k < numel.size(); ++k) pager.prefetch(at(k), true);
      for (size_t k = 0; k < numel.size(); ++k) {
        const size_t v = at(k);
        std::vector<Tensor> pages = pager.acquire(v);
        if (k + 1 < numel.size()) pager.prefetch(at(k + 1), true);
        // Each view holds round * 10 + v after its update: what a later round reads must be it.
        const float expected = round == 0 ? 0.0f : static_cast<float>((round - 1) * 10 + v);
        EXPECT_EQ(pages[0].to_vector().front(), expected) << "round " << round << " view " << v;
        pages[0].copy_from(std::vector<float>(1024, static_cast<float>(round * 10 + v)));
        pager.release(v, true);
      }
      traffic.reads.push_back(pager.store().stats().bytes_read - read_before);
    }
    // flush() writes out what the buffers still hold changed (4 views) and waits for every
    // write (the store counts a write when it lands, so only the total is exact); every view
    // then reads its last value (most from the buffers, the others from the disk).
    pager.flush();
    traffic.written = pager.store().stats().bytes_written;
    for (size_t v = 0; v < numel.size(); ++v) {
      std::vector<Tensor> pages = pager.acquire(v);
      EXPECT_EQ(pages[0].to_vector().back(), static_cast<float>(40 + v)) << "view " << v;
      pager.release(v, false);
    }
    return traffic;
  };
  const Traffic lru = rounds(NvmePager::Eviction::kLeastRecentlyUsed, false);
  const Traffic sweeps = rounds(NvmePager::Eviction::kSweeps, true);
  // Round 0 reads nothing (never written: zeros); from round 2 on the pattern is steady.
  EXPECT_EQ(lru.reads[0], 0u);
  EXPECT_EQ(sweeps.reads[0], 0u);
  for (size_t round = 2; round < lru.reads.size(); ++round) {
    EXPECT_EQ(lru.reads[round], 5u * 4096) << "round " << round;
    EXPECT_EQ(sweeps.reads[round], 1u * 4096) << "round " << round;
  }
  // Round 0 evicts 1 view (the fifth needs a buffer); LRU then evicts 5 a round, sweeps 1; the
  // flush writes the 4 the buffers hold.
  EXPECT_EQ(lru.written, (1u + 4 * 5 + 4) * 4096);
  EXPECT_EQ(sweeps.written, (1u + 4 * 1 + 4) * 4096);
}

}  // namespace
}  // namespace zs::offload
