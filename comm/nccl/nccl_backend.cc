// The nccl backend (see nccl_backend.h).
#include "comm/nccl/nccl_backend.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

#include "ops/cuda/kernels.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/nccl_check.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace zs::comm {
namespace {

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF16:
      return ncclFloat16;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
  }
  ZS_THROW(InvalidArgument, "nccl backend: unknown dtype ", static_cast<int>(dtype));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  ZS_THROW(InvalidArgument, "nccl backend: unknown reduce op ", static_cast<int>(op));
}

long long elapsed_ms(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

// Polls: yield the core for the first ~millisecond (most collectives finish by then), then
// sleep in short steps so a slow collective leaves the core to the compute thread.
void poll_pause(int round) {
  if (round < 1000) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(round < 5000 ? 50 : 500));
  }
}

ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

// Polls a non-blocking communicator until its state leaves ncclInProgress (what it has under
// way is done, or failed) or `deadline` passes; returns the last state: ncclInProgress when out
// of time, and the query's own failure if NCCL refuses to answer.
ncclResult_t settle(ncclComm_t comm, Clock::time_point deadline) {
  for (int round = 0;; ++round) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t queried = ZS_NCCL_CHECK_WARN(ncclCommGetAsyncError(comm, &state));
    if (queried != ncclSuccess) return queried;
    if (state != ncclInProgress || Clock::now() >= deadline) return state;
    poll_pause(round);
  }
}

// Polls a non-blocking communicator that is being formed until it is ready; aborts it and
// throws at the deadline or on an error.
void await_formed(ncclComm_t comm, Clock::time_point deadline, const std::string& what) {
  const auto start = Clock::now();
  const ncclResult_t state = settle(comm, deadline);
  if (state == ncclSuccess) return;
  if (state != ncclInProgress) {
    // Before the abort: NCCL's last-error text is about the failure, not about the abort.
    const std::string message = ::zs::cuda::detail::nccl_error_message(state, what.c_str());
    ZS_NCCL_CHECK_WARN(ncclCommAbort(comm));
    ZS_THROW(CommError, message);
  }
  ZS_NCCL_CHECK_WARN(ncclCommAbort(comm));
  ZS_THROW(CommTimeout, what, " timed out after waiting ", elapsed_ms(start),
           " ms: not every rank joined the NCCL group. Every rank must create it (and "
           "split it) in the same order; a rank that did not, is stuck, or died leaves the "
           "others here. If the start is just slow, raise the timeout (zs-train "
           "--comm-timeout, ZS_COMM_TIMEOUT_S).");
}

}  // namespace

// Whether a group was aborted and why, shared down the split tree: raise() marks this group and
// every live group split from it (children adopted by split()), as the local backend's abort
// does. Thread-safe: abort() may be called from any thread; the comm thread reads it.
struct NcclAbortFlag {
  void raise(const std::string& why) {
    std::vector<std::shared_ptr<NcclAbortFlag>> children;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (reason_.empty()) reason_ = why;
      for (const std::weak_ptr<NcclAbortFlag>& weak : children_) {
        if (std::shared_ptr<NcclAbortFlag> child = weak.lock()) children.push_back(child);
      }
    }
    raised_.store(true, std::memory_order_release);
    for (const std::shared_ptr<NcclAbortFlag>& child : children) child->raise(why);
  }
  bool raised() const { return raised_.load(std::memory_order_acquire); }
  std::string reason() {
    std::lock_guard<std::mutex> lock(mutex);
    return reason_;
  }
  // A group split from this one: aborted with it from now on (at once if this one already is).
  void adopt(const std::shared_ptr<NcclAbortFlag>& child) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      children_.push_back(child);
    }
    if (raised()) child->raise(reason());
  }

 private:
  std::mutex mutex;
  std::string reason_;
  std::atomic<bool> raised_{false};
  std::vector<std::weak_ptr<NcclAbortFlag>> children_;
};

namespace {

// The device-side state of one pipelined collective (backend.h, DeviceSync). Each collective
// has its own events, recorded once: a wait_on long after the collective was issued still
// waits for exactly that collective, and recording never races with a wait.
class NcclSync final : public DeviceSync {
 public:
  explicit NcclSync(int device) : done(device) {}

  void order_stream(const StreamRef& stream) override {
    ZS_CHECK(stream.device.is_cuda() && stream.native != nullptr, "Work::wait_on: ", stream.str(),
             " is not a CUDA stream; pass comm::stream_ref(zs::cuda::Stream&)");
    // A stream may wait for an event of another device; the event need not be current.
    ZS_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream.native), done.get(), 0));
  }

  // Recorded on the caller's compute stream when the collective was issued (null: no compute
  // stream attached). Set by prepare() before the sync is shared; read by the comm thread.
  std::unique_ptr<zs::cuda::Event> issued_after;
  // Recorded on the comm stream after the collective, by the comm thread, before the Work is
  // marked issued (which is what lets wait_on read it).
  zs::cuda::Event done;
  // Comm thread only:
  std::string what;                // the collective, for poll()'s errors
  Clock::time_point poll_start{};  // first poll: when the collective became the oldest in flight
  Tensor scratch;                  // fp32 buffer of a half-precision reduction, until completion
};

NcclSync& sync_of(const Call& call) {
  auto* sync = dynamic_cast<NcclSync*>(call.sync.get());
  ZS_CHECK(sync != nullptr, collective_name(call.kind), " #", call.sequence,
           ": the nccl backend was given device state made by another backend");
  return *sync;
}

}  // namespace

// ---- creation and destruction

NcclBackend::NcclBackend(ncclComm_t comm, int device, bool nonblocking, NcclBackendOptions options)
    : comm_(comm),
      device_(device),
      nonblocking_(nonblocking),
      options_(options),
      stream_(device),
      done_(device),
      abort_flag_(std::make_shared<NcclAbortFlag>()) {
  ZS_NCCL_CHECK(ncclCommUserRank(comm_, &rank_));
  ZS_NCCL_CHECK(ncclCommCount(comm_, &size_));
  zs::cuda::DeviceGuard guard(device_);
  ZS_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&barrier_word_), sizeof(int32_t)));
}

std::unique_ptr<NcclBackend> NcclBackend::own(ncclComm_t comm, int device,
                                              NcclBackendOptions options) {
  try {
    return std::unique_ptr<NcclBackend>(new NcclBackend(comm, device, true, options));
  } catch (...) {
    ZS_NCCL_CHECK_WARN(ncclCommAbort(comm));  // not owned by a backend yet
    throw;
  }
}

std::vector<std::unique_ptr<NcclBackend>> NcclBackend::create_local(const std::vector<int>& devices,
                                                                    NcclBackendOptions options) {
  ZS_CHECK(!devices.empty(), "NcclBackend::create_local: no devices given");
  const int available = zs::cuda::cuda_device_count();
  for (size_t i = 0; i < devices.size(); ++i) {
    ZS_CHECK(devices[i] >= 0 && devices[i] < available, "NcclBackend::create_local: device ",
             devices[i], " does not exist (", available, " CUDA device(s) visible",
             available == 0 ? ": " + zs::cuda::cuda_unavailable_reason() : std::string(), ")");
    for (size_t j = 0; j < i; ++j) {
      ZS_CHECK(devices[i] != devices[j], "NcclBackend::create_local: device ", devices[i],
               " is listed twice; NCCL needs one GPU per rank");
    }
  }
  // Non-blocking communicators, as create() makes (not ncclCommInitAll's blocking ones): the
  // destructor's finalize is then bounded by destroy_timeout, so a rank thread whose peers died
  // cannot hang in it. NCCL's single-process pattern: one unique id, every rank initialized
  // inside one group with its device current.
  const int size = static_cast<int>(devices.size());
  const auto deadline = Clock::now() + default_timeout();
  ncclUniqueId id;
  ZS_NCCL_CHECK(ncclGetUniqueId(&id));
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  std::vector<std::unique_ptr<NcclBackend>> backends;
  try {
    ncclConfig_t config = nonblocking_config();
    ZS_NCCL_CHECK(ncclGroupStart());
    try {
      for (int i = 0; i < size; ++i) {
        zs::cuda::DeviceGuard guard(devices[static_cast<size_t>(i)]);
        ZS_NCCL_CHECK(ncclCommInitRankConfig(&comms[static_cast<size_t>(i)], size, id, i, &config));
      }
    } catch (...) {
      // Close the group even so: NCCL defers the calls of an open group (ncclCommInitAll does
      // the same), and the comms made so far are aborted below.
      ZS_NCCL_CHECK_WARN(ncclGroupEnd());
      throw;
    }
    ZS_NCCL_CHECK(ncclGroupEnd());  // ncclInProgress while non-blocking ranks form: awaited below
    for (int i = 0; i < size; ++i) {
      try {
        await_formed(comms[static_cast<size_t>(i)], deadline,
                     detail::concat("forming the single-process NCCL group: rank ", i, " of ", size,
                                    " (cuda:", devices[static_cast<size_t>(i)], ")"));
      } catch (...) {
        comms[static_cast<size_t>(i)] = nullptr;  // await_formed aborted it already
        throw;
      }
    }
    for (size_t i = 0; i < devices.size(); ++i) {
      // Handed to own() (which aborts it if it fails); the later ones the catch below aborts.
      const ncclComm_t comm = std::exchange(comms[i], nullptr);
      backends.push_back(own(comm, devices[i], options));
    }
  } catch (...) {
    for (ncclComm_t comm : comms) {
      if (comm != nullptr) ZS_NCCL_CHECK_WARN(ncclCommAbort(comm));
    }
    throw;
  }
  return backends;
}

std::unique_ptr<NcclBackend> NcclBackend::create(Backend& bootstrap, int device,
                                                 std::chrono::milliseconds timeout,
                                                 NcclBackendOptions options) {
  const int available = zs::cuda::cuda_device_count();
  ZS_CHECK(device >= 0 && device < available, "NcclBackend::create on rank ", bootstrap.rank(),
           ": device ", device, " does not exist (", available, " CUDA device(s) visible",
           available == 0 ? ": " + zs::cuda::cuda_unavailable_reason() : std::string(), ")");
  const auto deadline = Clock::now() + timeout;
  // Rank 0 makes the id; the bootstrap backend carries its 128 bytes as int32 words.
  static_assert(sizeof(ncclUniqueId) % sizeof(int32_t) == 0, "ncclUniqueId is whole int32 words");
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (bootstrap.rank() == 0) ZS_NCCL_CHECK(ncclGetUniqueId(&id));
  Call call{CollectiveKind::kBroadcast, 0, deadline, "nccl unique id"};
  bootstrap.broadcast(&id, sizeof(id) / sizeof(int32_t), DType::kI32, 0, call);
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return create_from_id(id, bootstrap.rank(), bootstrap.size(), device,
                        std::max(left, std::chrono::milliseconds(0)), options);
}

std::unique_ptr<NcclBackend> NcclBackend::create_from_id(const ncclUniqueId& id, int rank, int size,
                                                         int device,
                                                         std::chrono::milliseconds timeout,
                                                         NcclBackendOptions options) {
  ZS_CHECK(size >= 1 && rank >= 0 && rank < size, "NcclBackend::create_from_id: rank ", rank,
           " of ", size, " is out of range");
  const int available = zs::cuda::cuda_device_count();
  ZS_CHECK(device >= 0 && device < available, "NcclBackend::create_from_id on rank ", rank,
           ": device ", device, " does not exist (", available, " CUDA device(s) visible)");
  const auto deadline = Clock::now() + timeout;
  zs::cuda::DeviceGuard guard(device);
  ncclConfig_t config = nonblocking_config();
  ncclComm_t comm = nullptr;
  const std::string what =
      detail::concat("forming the NCCL group on rank ", rank, " of ", size, " (cuda:", device, ")");
  try {
    ZS_NCCL_CHECK(ncclCommInitRankConfig(&comm, size, id, rank, &config));
  } catch (...) {
    // A failed non-blocking init may still hand out the communicator (in an error state).
    if (comm != nullptr) ZS_NCCL_CHECK_WARN(ncclCommAbort(comm));
    throw;
  }
  await_formed(comm, deadline, what);
  return own(comm, device, options);
}

std::unique_ptr<NcclBackend> NcclBackend::create(std::unique_ptr<Backend> bootstrap, int device,
                                                 std::chrono::milliseconds timeout,
                                                 NcclBackendOptions options) {
  ZS_CHECK(bootstrap != nullptr, "NcclBackend::create: the bootstrap backend is null");
  std::unique_ptr<NcclBackend> backend = create(*bootstrap, device, timeout, options);
  backend->bootstrap_ = std::move(bootstrap);
  return backend;
}

NcclBackend::~NcclBackend() {
  try {
    zs::cuda::DeviceGuard guard(device_);
    if (barrier_word_ != nullptr) ZS_CUDA_CHECK_WARN(cudaFree(barrier_word_));
    if (comm_ == nullptr) return;  // aborted: ncclCommAbort freed it
    if (abort_flag_->raised()) {
      // Flagged by abort() but no call ran since: finalizing would wait for peers that aborted.
      ZS_NCCL_CHECK_WARN(ncclCommAbort(comm_));
      return;
    }
    // Finalize flushes what was issued and waits for the peers to be quiescent; bounded, so a
    // dead peer cannot hang the destructor: past the bound the communicator is aborted instead.
    // NCCL refuses to finalize a non-blocking communicator whose previous call is still in
    // progress, so it is first awaited too, within the same bound.
    const auto deadline = Clock::now() + options_.destroy_timeout;
    ncclResult_t state = settle(comm_, deadline);
    if (state == ncclSuccess) {
      // For a non-blocking communicator a successful finalize only starts it: NCCL says the
      // state then reads ncclInProgress until it is done, and only then may it be destroyed.
      state = ZS_NCCL_CHECK_WARN(ncclCommFinalize(comm_));
      if (state == ncclSuccess || state == ncclInProgress) state = settle(comm_, deadline);
    }
    if (state == ncclSuccess) {
      ZS_NCCL_CHECK_WARN(ncclCommDestroy(comm_));
      return;
    }
    if (state == ncclInProgress) {
      ZS_LOG_WARN(
          "nccl backend rank {} of {}: ncclCommFinalize did not finish within {} ms ({}); "
          "aborting the communicator",
          rank_, size_, options_.destroy_timeout.count(), ncclGetErrorString(state));
    } else {
      ZS_LOG_WARN(
          "nccl backend rank {} of {}: finalizing the communicator failed ({}); aborting it", rank_,
          size_, ncclGetErrorString(state));
    }
    ZS_NCCL_CHECK_WARN(ncclCommAbort(comm_));
  } catch (const std::exception& e) {
    // A destructor must not throw (DeviceGuard can, if the device is gone).
    ZS_LOG_ERROR("nccl backend rank {} of {}: destroying the communicator failed: {}", rank_, size_,
                 e.what());
  }
}

// ---- waiting, errors, abort

std::string NcclBackend::describe(const Call& call, size_t count, DType dtype,
                                  const char* extra) const {
  std::string text = detail::concat(collective_name(call.kind), " #", call.sequence);
  if (!call.tag.empty()) text += " '" + call.tag + "'";
  if (call.kind != CollectiveKind::kBarrier && call.kind != CollectiveKind::kSplit) {
    text += detail::concat(" (", count, " ", dtype_name(dtype), extra[0] ? ", " : "", extra, ")");
  }
  return text;
}

void NcclBackend::bind_thread() {
  // A failure here is not fatal: every primitive still guards its device.
  ZS_CUDA_CHECK_WARN(cudaSetDevice(device_));
}

void NcclBackend::abort(const std::string& reason) {
  ZS_LOG_ERROR("nccl backend rank {} of {}: aborting the group: {}", rank_, size_, reason);
  abort_flag_->raise(reason);
}

void NcclBackend::abort_comm(const std::string& reason) {
  abort_flag_->raise(reason);
  if (comm_ != nullptr) {
    ZS_NCCL_CHECK_WARN(ncclCommAbort(comm_));
    comm_ = nullptr;
  }
}

void NcclBackend::check_not_aborted(const Call& call, const std::string& what) {
  (void)call;
  if (!abort_flag_->raised()) return;
  const std::string reason = abort_flag_->reason();
  abort_comm(reason);  // performs the ncclCommAbort that abort() requested, once
  ZS_THROW(CommError, what, " on rank ", rank_, " of ", size_,
           " failed: the group was aborted: ", reason);
}

void NcclBackend::fail_async(ncclResult_t error, const Call& call, const std::string& what) {
  (void)call;
  const std::string message = detail::concat(
      what, " on rank ", rank_, " of ", size_, " failed: NCCL reported ", ncclGetErrorString(error),
      " (", ncclGetLastError(comm_), "); a peer may have died or the network failed");
  abort_comm(message);
  ZS_THROW(CommError, message);
}

void NcclBackend::fail_timeout(const Call& call, const std::string& what, const char* stage,
                               Clock::time_point start) {
  (void)call;
  const std::string message = detail::concat(
      what, " timed out on rank ", rank_, " of ", size_, " after waiting ", elapsed_ms(start),
      " ms ", stage,
      ". Every rank must issue the same collectives in the same order; a rank that skipped this "
      "one, is stuck, or died leaves the others here. If the work is just slow, raise "
      "the timeout (zs-train --comm-timeout, ZS_COMM_TIMEOUT_S).");
  abort_comm(message);
  ZS_THROW(CommTimeout, message);
}

void NcclBackend::await_issued(ncclResult_t issued, const Call& call, const std::string& what) {
  if (issued != ncclInProgress) return;
  const auto start = Clock::now();
  for (int round = 0;; ++round) {
    ncclResult_t state = ncclSuccess;
    ZS_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state));
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) fail_async(state, call, what);
    check_not_aborted(call, what);
    if (Clock::now() >= call.deadline) fail_timeout(call, what, "for NCCL to issue it", start);
    poll_pause(round);
  }
}

void NcclBackend::await_completion(const Call& call, const std::string& what) {
  done_.record(stream_);
  const auto start = Clock::now();
  for (int round = 0;; ++round) {
    if (done_.query()) return;
    ncclResult_t state = ncclSuccess;
    ZS_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state));
    if (state != ncclSuccess && state != ncclInProgress) fail_async(state, call, what);
    check_not_aborted(call, what);
    if (Clock::now() >= call.deadline) {
      fail_timeout(call, what, "for the collective to complete", start);
    }
    poll_pause(round);
  }
}

// ---- stream ordering

void NcclBackend::check_compute_stream(const StreamRef& stream) const {
  if (stream.is_host()) return;
  ZS_CHECK(stream.device.is_cuda() && stream.device.index == device_ && stream.native != nullptr,
           "nccl backend rank ", rank_, " of ", size_, ": the compute stream ", stream.str(),
           " must be a stream of cuda:", device_,
           ", the backend's GPU: collectives are ordered after it by an event recorded on it");
}

std::shared_ptr<DeviceSync> NcclBackend::prepare(CollectiveKind kind, const StreamRef& compute) {
  if (kind == CollectiveKind::kSplit) return nullptr;
  zs::cuda::DeviceGuard guard(device_);
  auto sync = std::make_shared<NcclSync>(device_);
  if (!compute.is_host()) {
    // Now, on the issuing thread: exactly the work enqueued before the collective was issued.
    sync->issued_after = std::make_unique<zs::cuda::Event>(device_);
    ZS_CUDA_CHECK(
        cudaEventRecord(sync->issued_after->get(), static_cast<cudaStream_t>(compute.native)));
  }
  return sync;
}

bool NcclBackend::poll(const Call& call) {
  NcclSync& sync = sync_of(call);
  if (sync.poll_start == Clock::time_point{}) sync.poll_start = Clock::now();
  try {
    // Aborted first: an aborted collective's kernels end too, and must not count as done.
    check_not_aborted(call, sync.what);
    if (sync.done.query()) {
      sync.scratch = Tensor();  // freed on the comm stream, after the collective's last use
      return true;
    }
    ncclResult_t state = ncclSuccess;
    ZS_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state));
    if (state != ncclSuccess && state != ncclInProgress) fail_async(state, call, sync.what);
    if (Clock::now() >= call.deadline) {
      fail_timeout(call, sync.what, "for the collective to complete", sync.poll_start);
    }
    return false;
  } catch (...) {
    // The allocator belongs to this backend, which may die before the Work holding the sync.
    sync.scratch = Tensor();
    throw;
  }
}

// ---- collectives

void NcclBackend::run(const Call& call, const std::string& what, const EnqueueFn& enqueue,
                      const std::function<void(cudaStream_t)>& after, Tensor* scratch) {
  check_not_aborted(call, what);
  zs::cuda::DeviceGuard guard(device_);
  NcclSync* sync = call.sync != nullptr ? &sync_of(call) : nullptr;
  // Issue side: the comm stream waits, on the device, for what the compute stream had enqueued
  // when the caller issued the collective.
  if (sync != nullptr && sync->issued_after != nullptr) stream_.wait(*sync->issued_after);
  await_issued(enqueue(stream_.get()), call, what);
  if (after) after(stream_.get());
  if (sync == nullptr) {
    await_completion(call, what);
    return;
  }
  sync->what = what;
  if (scratch != nullptr) sync->scratch = std::move(*scratch);
  sync->done.record(stream_);
}

bool NcclBackend::widens(DType dtype, ReduceOp op) const {
  return options_.reduce_half_in_fp32 && (dtype == DType::kF16 || dtype == DType::kBF16) &&
         (op == ReduceOp::kSum || op == ReduceOp::kAvg);
}

Tensor NcclBackend::fp32_scratch(size_t count, const std::string& what) {
  if (scratch_allocator_ == nullptr) {
    scratch_allocator_ = std::make_unique<zs::cuda::CudaAllocator>(stream_, options_.tracker);
  }
  return Tensor::empty({static_cast<int64_t>(count)}, DType::kF32, *scratch_allocator_,
                       MemoryCategory::kCommBuffers, "fp32 accumulation of " + what);
}

void NcclBackend::all_reduce(void* data, size_t count, DType dtype, ReduceOp op, const Call& call) {
  const std::string what = describe(call, count, dtype, reduce_op_name(op));
  if (!widens(dtype, op)) {
    run(call, what, [&](cudaStream_t stream) {
      return ZS_NCCL_CHECK(
          ncclAllReduce(data, data, count, nccl_type(dtype), nccl_op(op), comm_, stream));
    });
    return;
  }
  // fp32 accumulation: widen into scratch, reduce it in place, round once back into data.
  Tensor wide;
  run(
      call, what,
      [&](cudaStream_t stream) {
        wide = fp32_scratch(count, what);
        ops::cuda::cast(data, dtype, wide.raw_device_data(), DType::kF32,
                        static_cast<int64_t>(count), stream);
        return ZS_NCCL_CHECK(ncclAllReduce(wide.raw_device_data(), wide.raw_device_data(), count,
                                           ncclFloat32, nccl_op(op), comm_, stream));
      },
      [&](cudaStream_t stream) {
        ops::cuda::cast(wide.raw_device_data(), DType::kF32, data, dtype,
                        static_cast<int64_t>(count), stream);
      },
      &wide);
}

void NcclBackend::all_gather(const void* shard, void* full, size_t count, DType dtype,
                             const Call& call) {
  // A shard at full + rank·count is ncclAllGather's documented in-place form: NCCL then sends
  // the slot from where it lies and writes only the other ranks' slices.
  run(call, describe(call, count, dtype, ""), [&](cudaStream_t stream) {
    return ZS_NCCL_CHECK(ncclAllGather(shard, full, count, nccl_type(dtype), comm_, stream));
  });
}

void NcclBackend::reduce_scatter(const void* full, void* shard, size_t count, DType dtype,
                                 ReduceOp op, const Call& call) {
  const std::string what = describe(call, count, dtype, reduce_op_name(op));
  if (!widens(dtype, op)) {
    run(call, what, [&](cudaStream_t stream) {
      return ZS_NCCL_CHECK(
          ncclReduceScatter(full, shard, count, nccl_type(dtype), nccl_op(op), comm_, stream));
    });
    return;
  }
  // fp32 accumulation: widen full into scratch and reduce-scatter it in place (NCCL's in-place
  // form: the output is this rank's slice of the input), then round that slice into shard.
  const size_t full_count = count * static_cast<size_t>(size_);
  Tensor wide;
  auto my_slice = [&] { return wide.device_data<float>() + static_cast<size_t>(rank_) * count; };
  run(
      call, what,
      [&](cudaStream_t stream) {
        wide = fp32_scratch(full_count, what);
        ops::cuda::cast(full, dtype, wide.raw_device_data(), DType::kF32,
                        static_cast<int64_t>(full_count), stream);
        return ZS_NCCL_CHECK(ncclReduceScatter(wide.raw_device_data(), my_slice(), count,
                                               ncclFloat32, nccl_op(op), comm_, stream));
      },
      [&](cudaStream_t stream) {
        ops::cuda::cast(my_slice(), DType::kF32, shard, dtype, static_cast<int64_t>(count), stream);
      },
      &wide);
}

void NcclBackend::broadcast(void* data, size_t count, DType dtype, int root, const Call& call) {
  run(call, describe(call, count, dtype, detail::concat("root ", root).c_str()),
      [&](cudaStream_t stream) {
        return ZS_NCCL_CHECK(
            ncclBroadcast(data, data, count, nccl_type(dtype), root, comm_, stream));
      });
}

ncclResult_t NcclBackend::exchange_with_root(bool to_root, const void* in, void* out, size_t count,
                                             DType dtype, int root, cudaStream_t stream) {
  const size_t piece_bytes = count * dtype_size(dtype);
  const ncclDataType_t type = nccl_type(dtype);
  // One group: NCCL matches the sends and receives of all ranks as one operation.
  ZS_NCCL_CHECK(ncclGroupStart());
  if (rank_ == root) {
    for (int q = 0; q < size_; ++q) {
      const size_t offset = static_cast<size_t>(q) * piece_bytes;
      // gather: root's buffer is `out`, pieces come in; scatter: it is `in`, pieces go out.
      void* gathered = to_root ? static_cast<char*>(out) + offset : nullptr;
      const void* scattered = to_root ? nullptr : static_cast<const char*>(in) + offset;
      if (q == rank_) {
        void* own_dst = to_root ? gathered : out;
        const void* own_src = to_root ? in : scattered;
        // The root's own slice already in place (a slice of the full buffer): nothing to copy.
        if (own_dst != own_src && piece_bytes > 0) {
          ZS_CUDA_CHECK(
              cudaMemcpyAsync(own_dst, own_src, piece_bytes, cudaMemcpyDeviceToDevice, stream));
          bytes_copied_ += piece_bytes;
        }
      } else if (to_root) {
        ZS_NCCL_CHECK(ncclRecv(gathered, count, type, q, comm_, stream));
      } else {
        ZS_NCCL_CHECK(ncclSend(scattered, count, type, q, comm_, stream));
      }
    }
  } else if (to_root) {
    ZS_NCCL_CHECK(ncclSend(in, count, type, root, comm_, stream));
  } else {
    ZS_NCCL_CHECK(ncclRecv(out, count, type, root, comm_, stream));
  }
  return ZS_NCCL_CHECK(ncclGroupEnd());
}

void NcclBackend::gather(const void* in, void* out, size_t count, DType dtype, int root,
                         const Call& call) {
  run(call, describe(call, count, dtype, detail::concat("root ", root).c_str()),
      [&](cudaStream_t stream) {
        return exchange_with_root(true, in, out, count, dtype, root, stream);
      });
}

void NcclBackend::scatter(const void* in, void* out, size_t count, DType dtype, int root,
                          const Call& call) {
  run(call, describe(call, count, dtype, detail::concat("root ", root).c_str()),
      [&](cudaStream_t stream) {
        return exchange_with_root(false, in, out, count, dtype, root, stream);
      });
}

void NcclBackend::barrier(const Call& call) {
  run(call, describe(call, 1, DType::kI32, ""), [&](cudaStream_t stream) {
    return ZS_NCCL_CHECK(
        ncclAllReduce(barrier_word_, barrier_word_, 1, ncclInt32, ncclSum, comm_, stream));
  });
}

void NcclBackend::send(const void* data, size_t count, DType dtype, int peer, const Call& call) {
  run(call, describe(call, count, dtype, detail::concat("to rank ", peer).c_str()),
      [&](cudaStream_t stream) {
        return ZS_NCCL_CHECK(ncclSend(data, count, nccl_type(dtype), peer, comm_, stream));
      });
}

void NcclBackend::recv(void* data, size_t count, DType dtype, int peer, const Call& call) {
  run(call, describe(call, count, dtype, detail::concat("from rank ", peer).c_str()),
      [&](cudaStream_t stream) {
        return ZS_NCCL_CHECK(ncclRecv(data, count, nccl_type(dtype), peer, comm_, stream));
      });
}

std::unique_ptr<Backend> NcclBackend::split(int color, int key, const Call& call) {
  const std::string what = describe(call, 0, DType::kI32, "");
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
  check_not_aborted(call, what);
  zs::cuda::DeviceGuard guard(device_);
  ncclConfig_t config = nonblocking_config();
  // NCCL writes the new communicator into new_comm from its own thread when the split is done,
  // so new_comm must outlive that: split() returns only once the split has finished or the
  // parent is aborted (ncclCommAbort joins the split's thread).
  ncclComm_t new_comm = nullptr;
  try {
    ZS_NCCL_CHECK(
        ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &new_comm, &config));
    // On a non-blocking parent the split goes on in the background whatever ncclCommSplit
    // returned (NCCL 2.28's returned ncclSuccess on the first GPU run): the parent stays
    // ncclInProgress, refusing every call, until the split is done, and only then is new_comm
    // set (NVIDIA/nccl#1472). So the parent is always polled back to ncclSuccess, under the
    // call's deadline, before anything looks at new_comm or uses the parent again.
    await_issued(ncclInProgress, call, what);
  } catch (const std::exception& e) {
    // A split that failed on this rank leaves the group unusable. NCCL's way to stop a split:
    // abort the parent (done already if await_issued failed), then the new communicator.
    abort_comm(e.what());
    if (new_comm != nullptr) ZS_NCCL_CHECK_WARN(ncclCommAbort(new_comm));
    throw;
  }
  if (color < 0) return nullptr;
  ZS_CHECK_AS(CommError, new_comm != nullptr, what, " on rank ", rank_, " of ", size_,
              ": ncclCommSplit returned no communicator for color ", color);
  await_formed(
      new_comm, call.deadline,
      detail::concat(what, " on rank ", rank_, " of ", size_, " (forming color ", color, ")"));
  std::unique_ptr<NcclBackend> child = own(new_comm, device_, options_);
  abort_flag_->adopt(child->abort_flag_);  // an abort of this group reaches the new one
  return child;
#else
  (void)color;
  (void)key;
  ZS_THROW(NotImplemented, what, ": ncclCommSplit needs NCCL 2.18 or newer; this build has ",
           NCCL_MAJOR, ".", NCCL_MINOR, ".", NCCL_PATCH);
#endif
}

}  // namespace zs::comm
