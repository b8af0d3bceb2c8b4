// Stream ordering through the Communicator front, without a GPU (label unit):
//
// - CPU backends: a device stream is refused as compute stream with a message naming the
//   backend; Work::wait_on degrades to the host wait (for the host and for any device stream) and
//   rethrows the collective's error; Work::issued() has no intermediate state.
// - The device path of the front — issue-time capture on the calling thread, several
//   collectives in flight on the communicator thread, wait_on returning once a collective is
//   issued, buffers held until it completes, a timeout of an issued collective reaching wait()
//   and failing the group — over a scripted device backend: it calls itself "nccl" (so the front
//   treats its buffers as device memory), implements prepare()/poll() like the real one, and
//   lets the test decide when each collective "completes". Its tensors are host memory labelled
//   cuda:0; nothing dereferences them as device memory. The same paths over real NCCL run in
//   tests/cuda/nccl_order_test.cc (label gpu).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/fault_backend.h"
#include "comm/local/local_backend.h"
#include "runtime/allocator.h"
#include "runtime/error.h"
#include "runtime/memory_tracker.h"
#include "runtime/tensor.h"
#include "tests/support/error_text.h"
#include "tests/support/labelled_allocator.h"

namespace zs::comm {
namespace {

using Ms = std::chrono::milliseconds;
using testing::contains;
using testing::error_message;
// Host memory labelled cuda:0, tracked (to see when a Work lets go of its buffers).
using testing::LabelledAllocator;

// Eventually true, or false after a generous bound (a loaded 2-core machine).
bool eventually(const std::function<bool()>& condition) {
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (!condition()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(Ms(1));
  }
  return true;
}

// A stream handle that is never dereferenced (the scripted backend only compares it).
StreamRef fake_stream(int device, uintptr_t id) {
  return StreamRef{Device::cuda(device), reinterpret_cast<void*>(id)};
}

// ---- CPU backends

TEST(CpuStreamOrder, DeviceComputeStreamIsRefusedByName) {
  std::unique_ptr<Backend> backend = std::move(make_local_backends(1)[0]);
  Communicator comm(std::move(backend));
  EXPECT_TRUE(comm.compute_stream().is_host());
  const std::string message =
      error_message<InvalidArgument>([&] { comm.set_compute_stream(fake_stream(0, 0x10)); });
  EXPECT_TRUE(contains(message, "set_compute_stream: cuda:0 stream")) << message;
  EXPECT_TRUE(contains(message, "is a device stream, but the local backend moves host memory"))
      << message;
  EXPECT_TRUE(contains(message, "nccl backend")) << message;
  EXPECT_TRUE(comm.compute_stream().is_host());
  comm.set_compute_stream(StreamRef::host());  // the host is always fine
}

TEST(CpuStreamOrder, BackendDefaultRefusesDeviceStreams) {
  // The check is the backend's too, for callers below the front.
  std::unique_ptr<Backend> backend = std::move(make_local_backends(1)[0]);
  EXPECT_NO_THROW(backend->check_compute_stream(StreamRef::host()));
  const std::string message =
      error_message<InvalidArgument>([&] { backend->check_compute_stream(fake_stream(1, 0x20)); });
  EXPECT_TRUE(contains(message, "the local backend moves host memory")) << message;
  EXPECT_TRUE(contains(message, "cuda:1 stream")) << message;
  EXPECT_EQ(backend->prepare(CollectiveKind::kAllReduce, StreamRef::host()), nullptr);
}

TEST(CpuStreamOrder, WaitOnIsTheHostWait) {
  run_local_ranks(2, [](Communicator& comm) {
    CpuAllocator allocator(nullptr);
    Tensor data = Tensor::empty({5}, DType::kF32, allocator, "data");
    data.copy_from(std::vector<float>(5, static_cast<float>(comm.rank() + 1)));
    WorkPtr first = comm.all_reduce(data, ReduceOp::kSum);
    EXPECT_FALSE(first->issued() && !first->test());  // no "issued, not complete" on the CPU
    first->wait_on(StreamRef::host());
    EXPECT_TRUE(first->test());
    EXPECT_EQ(data.to_vector(), std::vector<float>(5, 3.0f));
    // A device stream on a CPU Work: still the host wait (the handle is never touched), and
    // everything issued afterwards on any stream is ordered after it.
    WorkPtr second = comm.all_reduce(data, ReduceOp::kSum);
    second->wait_on(fake_stream(0, 0x30));
    EXPECT_TRUE(second->test());
    EXPECT_TRUE(second->issued());
    EXPECT_EQ(data.to_vector(), std::vector<float>(5, 6.0f));
  });
}

TEST(CpuStreamOrder, WaitOnRethrowsTheCollectivesError) {
  FaultSettings faults;
  faults.fail_call = 0;
  Communicator comm(
      std::make_unique<FaultInjectingBackend>(std::move(make_local_backends(1)[0]), faults));
  CpuAllocator allocator(nullptr);
  Tensor data = Tensor::empty({3}, DType::kF32, allocator, "data");
  WorkPtr work = comm.all_reduce(data, ReduceOp::kSum);
  const std::string message = error_message<CommError>([&] { work->wait_on(StreamRef::host()); });
  EXPECT_TRUE(contains(message, "injected fault: call 0")) << message;
}

// ---- the device path of the front, over a scripted backend

struct ScriptedSync final : DeviceSync {
  void order_stream(const StreamRef& stream) override {
    std::lock_guard<std::mutex> lock(mutex);
    ordered_streams.push_back(stream.native);
  }
  int index = -1;      // in prepare() order
  StreamRef captured;  // the compute stream at issue
  std::thread::id issuing_thread;
  std::atomic<bool> issued{false};
  std::atomic<bool> complete{false};
  std::mutex mutex;
  std::vector<void*> ordered_streams;
};

// One rank named "nccl" whose collectives are issued by the primitives and completed by the test
// (complete(i)); poll() fails at the deadline and after abort(), as the real backend does.
class ScriptedDeviceBackend final : public Backend {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* name() const override { return "nccl"; }

  void all_reduce(void*, size_t, DType, ReduceOp, const Call& call) override { issue(call); }
  void all_gather(const void*, void*, size_t, DType, const Call& call) override { issue(call); }
  void reduce_scatter(const void*, void*, size_t, DType, ReduceOp, const Call& call) override {
    issue(call);
  }
  void broadcast(void*, size_t, DType, int, const Call& call) override { issue(call); }
  void gather(const void*, void*, size_t, DType, int, const Call& call) override { issue(call); }
  void scatter(const void*, void*, size_t, DType, int, const Call& call) override { issue(call); }
  void barrier(const Call& call) override { issue(call); }
  void send(const void*, size_t, DType, int, const Call& call) override { issue(call); }
  void recv(void*, size_t, DType, int, const Call& call) override { issue(call); }
  std::unique_ptr<Backend> split(int, int, const Call& call) override {
    EXPECT_EQ(call.sync, nullptr);
    // Completes on its own: every collective before it must have completed already.
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& sync : syncs_) EXPECT_TRUE(sync->complete.load()) << sync->index;
    split_ran_ = true;
    return nullptr;
  }
  void abort(const std::string& reason) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (abort_reason_.empty()) abort_reason_ = reason;
  }

  void check_compute_stream(const StreamRef& stream) const override {
    ZS_CHECK(stream.is_host() || stream.device == Device::cuda(0), "scripted: wrong device");
  }
  std::shared_ptr<DeviceSync> prepare(CollectiveKind kind, const StreamRef& compute) override {
    if (kind == CollectiveKind::kSplit) return nullptr;
    auto sync = std::make_shared<ScriptedSync>();
    sync->captured = compute;
    sync->issuing_thread = std::this_thread::get_id();
    std::lock_guard<std::mutex> lock(mutex_);
    sync->index = static_cast<int>(syncs_.size());
    syncs_.push_back(sync);
    return sync;
  }
  bool poll(const Call& call) override {
    auto& sync = static_cast<ScriptedSync&>(*call.sync);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!abort_reason_.empty()) {
        ZS_THROW(CommError, "scripted #", call.sequence,
                 ": the group was aborted: ", abort_reason_);
      }
    }
    if (sync.complete.load()) return true;
    if (Clock::now() >= call.deadline)
      ZS_THROW(CommTimeout, "scripted #", call.sequence, " timed out");
    return false;
  }

  std::shared_ptr<ScriptedSync> sync(int index) {
    std::lock_guard<std::mutex> lock(mutex_);
    return index < static_cast<int>(syncs_.size()) ? syncs_[static_cast<size_t>(index)] : nullptr;
  }
  void complete(int index) { sync(index)->complete.store(true); }
  bool split_ran() {
    std::lock_guard<std::mutex> lock(mutex_);
    return split_ran_;
  }

 private:
  void issue(const Call& call) {
    ASSERT_NE(call.sync, nullptr) << "a device collective came without its sync";
    static_cast<ScriptedSync&>(*call.sync).issued.store(true);
  }

  std::mutex mutex_;
  std::vector<std::shared_ptr<ScriptedSync>> syncs_;
  std::string abort_reason_;
  bool split_ran_ = false;
};

class DeviceFrontTest : public ::testing::Test {
 protected:
  DeviceFrontTest() {
    auto backend = std::make_unique<ScriptedDeviceBackend>();
    backend_ = backend.get();
    comm_ = std::make_unique<Communicator>(std::move(backend), Device::cuda(0));
  }
  ~DeviceFrontTest() override {
    // Let every collective finish so the communicator drains.
    for (int i = 0; backend_->sync(i) != nullptr; ++i) backend_->complete(i);
    comm_.reset();
  }
  Tensor device_tensor(int64_t n, const char* name) {
    return Tensor::empty({n}, DType::kF32, allocator_, MemoryCategory::kCommBuffers, name);
  }

  MemoryTracker tracker_{"cuda:0"};
  LabelledAllocator allocator_{Device::cuda(0), &tracker_};
  ScriptedDeviceBackend* backend_ = nullptr;
  std::unique_ptr<Communicator> comm_;
};

TEST_F(DeviceFrontTest, CaptureHappensOnTheIssuingThreadWithTheAttachedStream) {
  const StreamRef compute = fake_stream(0, 0x1000);
  comm_->set_compute_stream(compute);
  Tensor data = device_tensor(4, "grads");
  WorkPtr work = comm_->all_reduce(data, ReduceOp::kSum);
  std::shared_ptr<ScriptedSync> sync = backend_->sync(0);
  ASSERT_NE(sync, nullptr) << "prepare() did not run inside the call";
  EXPECT_EQ(sync->issuing_thread, std::this_thread::get_id());
  EXPECT_EQ(sync->captured.native, compute.native);
  // Detached again: the next collective captures nothing.
  comm_->set_compute_stream(StreamRef::host());
  comm_->barrier();
  ASSERT_NE(backend_->sync(1), nullptr);
  EXPECT_TRUE(backend_->sync(1)->captured.is_host());
}

TEST_F(DeviceFrontTest, WaitOnReturnsOnceIssuedAndBuffersLiveUntilComplete) {
  Tensor data = device_tensor(1024, "params");
  const size_t bytes = tracker_.current(MemoryCategory::kCommBuffers);
  EXPECT_EQ(bytes, 1024u * 4u);
  WorkPtr work = comm_->all_gather(data, data);  // one rank: full == shard in size
  data = Tensor();                               // the caller lets go at once
  work->wait_on(fake_stream(0, 0x2000));         // returns although nothing completes
  EXPECT_TRUE(work->issued());
  EXPECT_FALSE(work->test());
  std::shared_ptr<ScriptedSync> sync = backend_->sync(0);
  ASSERT_NE(sync, nullptr);
  EXPECT_TRUE(sync->issued.load());
  {
    std::lock_guard<std::mutex> lock(sync->mutex);
    EXPECT_EQ(sync->ordered_streams, std::vector<void*>{reinterpret_cast<void*>(0x2000)});
  }
  // Issued is not complete: the Work still holds the buffer.
  EXPECT_EQ(tracker_.current(MemoryCategory::kCommBuffers), bytes);
  backend_->complete(0);
  work->wait();
  EXPECT_TRUE(work->test());
  EXPECT_EQ(tracker_.current(MemoryCategory::kCommBuffers), 0u);
  // wait_on after completion: nothing left to order (no device wait), no error.
  work->wait_on(fake_stream(0, 0x2000));
  std::lock_guard<std::mutex> lock(sync->mutex);
  EXPECT_EQ(sync->ordered_streams.size(), 1u);
}

TEST_F(DeviceFrontTest, SeveralCollectivesAreInFlightAndCompleteInOrder) {
  Tensor a = device_tensor(8, "a");
  std::vector<WorkPtr> works;
  for (int i = 0; i < 3; ++i) works.push_back(comm_->all_reduce(a, ReduceOp::kSum));
  // All three issued while none has completed: the thread does not wait between them.
  ASSERT_TRUE(eventually([&] {
    for (const WorkPtr& w : works) {
      if (!w->issued()) return false;
    }
    return true;
  }));
  for (const WorkPtr& w : works) EXPECT_FALSE(w->test());
  backend_->complete(1);  // a later one done first: still reported in issue order
  std::this_thread::sleep_for(Ms(20));
  EXPECT_FALSE(works[1]->test());
  backend_->complete(0);
  works[0]->wait();
  works[1]->wait();
  EXPECT_FALSE(works[2]->test());
  backend_->complete(2);
  works[2]->wait();
  EXPECT_EQ(comm_->stats().get(CollectiveKind::kAllReduce).calls, 3u);
}

TEST_F(DeviceFrontTest, ASelfCompletingCallWaitsForTheCollectivesInFlight) {
  Tensor a = device_tensor(8, "a");
  WorkPtr work = comm_->all_reduce(a, ReduceOp::kSum);
  ASSERT_TRUE(eventually([&] { return work->issued(); }));
  std::thread completer([&] {
    std::this_thread::sleep_for(Ms(50));
    backend_->complete(0);
  });
  // split completes in its primitive; the scripted split checks that #0 completed first.
  EXPECT_EQ(comm_->split(-1, 0), nullptr);
  completer.join();
  EXPECT_TRUE(backend_->split_ran());
  EXPECT_TRUE(work->test());
}

TEST_F(DeviceFrontTest, TimeoutAfterWaitOnReachesWaitAndFailsTheGroup) {
  Tensor a = device_tensor(8, "a");
  CollectiveOptions options;
  options.timeout = Ms(200);
  const auto start = Clock::now();
  WorkPtr stuck = comm_->all_reduce(a, ReduceOp::kSum, options);
  stuck->wait_on(fake_stream(0, 0x3000));  // issued: returns
  const std::string message = error_message<CommTimeout>([&] { stuck->wait(); });
  EXPECT_TRUE(contains(message, "scripted #0 timed out")) << message;
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(15));
  // The timeout aborted the group: the next collective fails with the reason, on wait_on too.
  WorkPtr next = comm_->all_reduce(a, ReduceOp::kSum);
  const std::string later =
      error_message<CommError>([&] { next->wait_on(fake_stream(0, 0x3000)); });
  // Issued before the abort was seen, or refused after: either way the error arrives.
  if (later.empty()) {
    const std::string waited = error_message<CommError>([&] { next->wait(); });
    EXPECT_TRUE(contains(waited, "the group was aborted")) << waited;
  } else {
    EXPECT_TRUE(contains(later, "the group was aborted")) << later;
  }
}

TEST_F(DeviceFrontTest, ComputeStreamMisuseIsRefusedWithReasons) {
  const std::string null_handle = error_message<InvalidArgument>([&] {
    comm_->set_compute_stream(StreamRef{Device::cuda(0), nullptr});
  });
  EXPECT_TRUE(contains(null_handle, "has a null handle")) << null_handle;
  const std::string other_gpu =
      error_message<InvalidArgument>([&] { comm_->set_compute_stream(fake_stream(1, 0x40)); });
  EXPECT_TRUE(contains(other_gpu,
                       "the stream is on cuda:1, but this rank's nccl communicator "
                       "runs on cuda:0"))
      << other_gpu;
  EXPECT_TRUE(comm_->compute_stream().is_host());
  EXPECT_EQ(comm_->calls_issued(), 0u);
}

}  // namespace
}  // namespace zs::comm
