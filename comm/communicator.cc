// Communicator front: argument checks (including the device of every tensor against the
// backend's: host memory for local/mpi, the rank's GPU for nccl), the issue-order queue and its
// thread — which for a device backend keeps several collectives in flight and polls the oldest
// — traffic accounting, and group-wide failure on the first timeout or peer error.
#include "comm/communicator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "runtime/error.h"
#include "runtime/logging.h"

namespace zs::comm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "?";
}

const char* collective_name(CollectiveKind kind) {
  static const char* const kNames[kNumCollectiveKinds] = {
      "all_reduce", "all_gather", "reduce_scatter", "broadcast", "gather",
      "scatter",    "barrier",    "send",           "recv",      "split"};
  return kNames[static_cast<int>(kind)];
}

std::chrono::milliseconds default_timeout() {
  static const std::chrono::milliseconds timeout = [] {
    const char* env = std::getenv("ZS_COMM_TIMEOUT_S");
    const double seconds = env ? std::atof(env) : 0.0;
    return std::chrono::milliseconds(seconds > 0 ? static_cast<int64_t>(seconds * 1000) : 600000);
  }();
  return timeout;
}

namespace {

// The one backend whose buffers are device memory. By name, so that this shared code needs
// neither the CUDA headers nor an #if on the CUDA build (comm/factory.cc makes nccl backends).
bool moves_device_memory(const Backend* backend) {
  return backend != nullptr && std::strcmp(backend->name(), "nccl") == 0;
}

std::string describe_call(const char* what, uint64_t sequence, const Tensor& t,
                          const char* extra = "") {
  return detail::concat(what, " #", sequence, " (", t.numel(), " ", dtype_name(t.dtype()),
                        extra[0] ? ", " : "", extra, ")");
}

}  // namespace

Communicator::Communicator(std::unique_ptr<Backend> backend, std::chrono::milliseconds timeout)
    : backend_(std::move(backend)),
      rank_(backend_ ? backend_->rank() : -1),
      size_(backend_ ? backend_->size() : 0),
      log_rank_(current_log_rank()),
      buffer_device_(moves_device_memory(backend_.get()) ? Device::cuda(0) : Device::cpu()),
      check_device_index_(false),
      timeout_(timeout) {
  start();
}

Communicator::Communicator(std::unique_ptr<Backend> backend, Device buffer_device,
                           std::chrono::milliseconds timeout)
    : backend_(std::move(backend)),
      rank_(backend_ ? backend_->rank() : -1),
      size_(backend_ ? backend_->size() : 0),
      log_rank_(current_log_rank()),
      buffer_device_(buffer_device),
      check_device_index_(true),
      timeout_(timeout) {
  start();
}

void Communicator::start() {
  ZS_CHECK(backend_ != nullptr, "Communicator needs a backend");
  ZS_CHECK(timeout_.count() > 0, "Communicator: the collective timeout must be positive, got ",
           timeout_.count(), " ms");
  if (moves_device_memory(backend_.get())) {
    ZS_CHECK(buffer_device_.is_cuda(), "Communicator: the ", backend_->name(),
             " backend moves device memory, but the buffer device given is ", buffer_device_.str(),
             "; pass the backend's GPU (cuda:N)");
  } else {
    ZS_CHECK(buffer_device_.is_cpu(), "Communicator: the ", backend_->name(),
             " backend moves host memory, but the buffer device given is ", buffer_device_.str(),
             "; pass Device::cpu() (device tensors go over the nccl backend)");
  }
  // Last: a constructor that throws after the thread started would leave it joinable.
  thread_ = std::thread([this] { thread_main(); });
}

Communicator::~Communicator() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  thread_.join();
}

void Communicator::check_root(const char* what, int root) const {
  ZS_CHECK(root >= 0 && root < size_, what, ": root ", root, " is out of range for a group of ",
           size_, " ranks");
}

void Communicator::check_tensor(const char* what, const char* arg, const Tensor& t) const {
  ZS_CHECK(t.defined(), what, ": '", arg, "' is undefined");
  const Device device = t.device();
  if (buffer_device_.is_cpu()) {
    ZS_CHECK(device.is_cpu(), what, ": '", arg, "' ", t.describe(), " is on ", device.str(),
             ", but the ", backend_->name(),
             " backend moves host memory: copy the tensor to the host first (zs::cuda::to_host), "
             "or communicate device tensors over the nccl backend");
  } else {
    ZS_CHECK(device.is_cuda(), what, ": '", arg, "' ", t.describe(), " is on ", device.str(),
             ", but the ", backend_->name(), " backend moves device memory: pass a tensor on ",
             check_device_index_ ? buffer_device_.str() : std::string("this rank's GPU"),
             " (copy it there with zs::cuda::to_device), or communicate host tensors over the "
             "local or mpi backend");
    ZS_CHECK(!check_device_index_ || device == buffer_device_, what, ": '", arg, "' ", t.describe(),
             " is on ", device.str(), ", but this rank's ", backend_->name(),
             " communicator runs on ", buffer_device_.str(),
             ", and NCCL needs the buffers on the communicator's GPU: allocate or copy the "
             "tensor there");
  }
  if (t.is_released()) (void)t.raw_device_data();  // throws ReleasedTensor naming the tensor
}

void Communicator::check_peer(const char* what, int peer) const {
  ZS_CHECK(peer >= 0 && peer < size_ && peer != rank_, what, ": peer ", peer,
           " is invalid for rank ", rank_, " of ", size_, " (must be another rank of the group)");
}

WorkPtr Communicator::enqueue(CollectiveKind kind, std::string description,
                              std::vector<Tensor> buffers, uint64_t bytes, int root,
                              const CollectiveOptions& options,
                              std::function<void(const Call&)> run) {
  // Here, on the issuing thread and before the call returns: the device backend captures what
  // the compute stream has enqueued so far (backend.h, prepare()).
  std::shared_ptr<DeviceSync> sync = backend_->prepare(kind, compute_stream_);
  auto work = std::make_shared<Work>(std::move(description), std::move(buffers), sync);
  Task task{work,
            kind,
            bytes,
            root,
            std::move(run),
            Call{kind, 0, {}, options.tag, std::move(sync)},
            options.timeout.value_or(timeout_)};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    task.call.sequence = next_sequence_++;
    queue_.push_back(std::move(task));
  }
  queue_cv_.notify_one();
  return work;
}

void Communicator::thread_main() {
  RankScope rank_scope(log_rank_);
  backend_->bind_thread();
  // Device collectives issued and not yet complete, oldest first. They complete in issue order
  // (one comm stream), so only the oldest is polled.
  std::deque<Task> in_flight;
  for (int round = 0;;) {
    Task task;
    bool have_task = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // The next task may start now if nothing is in flight, or if it is itself a device
      // collective and there is room. A task that completes on its own (split, any CPU
      // backend's) waits until everything before it has completed: its primitive assumes
      // that, as it did before collectives could be in flight.
      auto startable = [&] {
        return !queue_.empty() && (in_flight.empty() || (queue_.front().call.sync != nullptr &&
                                                         in_flight.size() < kMaxInFlight));
      };
      if (in_flight.empty()) {
        queue_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping and drained
      } else if (!startable() && round >= 1000) {
        // A slow collective: sleep in short steps, but wake at once for a new collective.
        queue_cv_.wait_for(lock, std::chrono::microseconds(round < 5000 ? 50 : 500), startable);
      }
      if (startable()) {
        task = std::move(queue_.front());
        queue_.pop_front();
        have_task = true;
      }
    }
    if (have_task) {
      if (start_task(task)) in_flight.push_back(std::move(task));
      continue;
    }
    if (poll_oldest(in_flight)) {
      round = 0;
    } else if (++round < 1000) {
      // Most collectives finish within a few hundred polls: keep the core for them first.
      std::this_thread::yield();
    }
  }
}

std::exception_ptr Communicator::capture_failure(const Task& task) {
  try {
    throw;
  } catch (const CommError& e) {
    // A timed-out or inconsistent collective leaves the group unusable: fail it everywhere.
    backend_->abort(
        detail::concat("rank ", rank_, " failed ", task.work->description(), ": ", e.what()));
  } catch (...) {
  }
  return std::current_exception();
}

bool Communicator::start_task(Task& task) {
  task.started = Clock::now();
  // The timeout counts from when the collective starts, not from when it was queued.
  task.call.deadline = task.started + task.timeout;
  std::exception_ptr error;
  // The primitive copies (or, on a device, enqueues its copies) before it returns.
  const uint64_t copied_before = backend_->bytes_copied();
  try {
    task.run(task.call);
  } catch (...) {
    error = capture_failure(task);
  }
  task.copied = backend_->bytes_copied() - copied_before;
  if (!error && task.call.sync != nullptr) {
    task.work->mark_issued();  // wait_on() may return: the collective is on the device
    return true;
  }
  finish_task(task, error);
  return false;
}

bool Communicator::poll_oldest(std::deque<Task>& in_flight) {
  Task& task = in_flight.front();
  if (!task.oldest) {
    // Its own time starts when the collectives before it have completed: one slow collective
    // must not make every collective queued behind it on the comm stream time out too.
    task.oldest = true;
    task.call.deadline = std::max(task.call.deadline, Clock::now() + task.timeout);
  }
  std::exception_ptr error;
  bool done = false;
  try {
    done = backend_->poll(task.call);
  } catch (...) {
    error = capture_failure(task);
  }
  if (!done && !error) return false;
  Task finished = std::move(task);
  in_flight.pop_front();
  finish_task(finished, error);
  return true;
}

void Communicator::finish_task(Task& task, std::exception_ptr error) {
  const double seconds = std::chrono::duration<double>(Clock::now() - task.started).count();
  if (!error && task.counted) {
    const Traffic traffic = collective_traffic(task.kind, task.bytes, size_, rank_, task.root);
    stats_->record(task.kind, traffic.sent, traffic.received, task.copied, seconds);
  }
  task.run = nullptr;  // the closure holds tensor copies: release them before completing
  task.call.sync = nullptr;
  task.work->complete(error);
}

void Communicator::set_compute_stream(const StreamRef& stream) {
  if (!stream.is_host()) {
    ZS_CHECK(buffer_device_.is_cuda(), "Communicator::set_compute_stream: ", stream.str(),
             " is a device stream, but the ", backend_->name(),
             " backend moves host memory and runs each collective on the communicator's "
             "thread, so there is no device work to order; a CPU communicator is ordered by the "
             "calling thread (issue after the producer, Work::wait() before the consumer). "
             "Communicate device tensors over the nccl backend");
    ZS_CHECK(stream.device.is_cuda(), "Communicator::set_compute_stream: ", stream.str(),
             " is not a CUDA stream, but the ", backend_->name(), " backend runs on ",
             buffer_device_.str());
    ZS_CHECK(stream.native != nullptr, "Communicator::set_compute_stream: the stream on ",
             stream.device.str(),
             " has a null handle (the legacy default stream); pass a stream of your own, e.g. "
             "comm::stream_ref(zs::cuda::Stream&)");
    ZS_CHECK(!check_device_index_ || stream.device == buffer_device_,
             "Communicator::set_compute_stream: the stream is on ", stream.device.str(),
             ", but this rank's ", backend_->name(), " communicator runs on ", buffer_device_.str(),
             "; order against a stream of the communicator's GPU");
  }
  backend_->check_compute_stream(stream);
  compute_stream_ = stream;
}

WorkPtr Communicator::all_reduce(const Tensor& tensor, ReduceOp op,
                                 const CollectiveOptions& options) {
  check_tensor("all_reduce", "tensor", tensor);
  const std::string desc = describe_call("all_reduce", next_sequence_, tensor, reduce_op_name(op));
  return enqueue(CollectiveKind::kAllReduce, desc, {tensor}, tensor.nbytes(), 0, options,
                 [this, tensor, op](const Call& call) {
                   backend_->all_reduce(tensor.raw_device_data(),
                                        static_cast<size_t>(tensor.numel()), tensor.dtype(), op,
                                        call);
                 });
}

WorkPtr Communicator::all_gather(const Tensor& shard, const Tensor& full,
                                 const CollectiveOptions& options) {
  check_tensor("all_gather", "shard", shard);
  check_tensor("all_gather", "full", full);
  ZS_CHECK(shard.dtype() == full.dtype(), "all_gather: shard ", shard.describe(), " and full ",
           full.describe(), " have different dtypes");
  ZS_CHECK(full.numel() == shard.numel() * size_, "all_gather: full ", full.describe(),
           " must hold size() × shard = ", size_, " × ", shard.numel(), " elements");
  // The in-place form, or buffers apart: a shard elsewhere inside full would be overwritten by
  // the other ranks' slices before every peer has read it.
  if (shard.numel() > 0 && shard.storage() == full.storage()) {
    const size_t shard_begin = shard.offset_bytes();
    const size_t full_begin = full.offset_bytes();
    const bool apart =
        shard_begin + shard.nbytes() <= full_begin || full_begin + full.nbytes() <= shard_begin;
    ZS_CHECK(apart || shard_begin == full_begin + static_cast<size_t>(rank_) * shard.nbytes(),
             "all_gather: shard ", shard.describe(), " overlaps full ", full.describe(),
             " at byte offset ",
             static_cast<long long>(shard_begin) - static_cast<long long>(full_begin),
             ", which is not rank ", rank_, "'s slot (byte ",
             static_cast<size_t>(rank_) * shard.nbytes(),
             "); pass a separate shard or exactly this rank's slice (rank_slice(full))");
  }
  const std::string desc = describe_call("all_gather", next_sequence_, full);
  return enqueue(CollectiveKind::kAllGather, desc, {shard, full}, full.nbytes(), 0, options,
                 [this, shard, full](const Call& call) {
                   backend_->all_gather(shard.raw_device_data(), full.raw_device_data(),
                                        static_cast<size_t>(shard.numel()), shard.dtype(), call);
                 });
}

Tensor Communicator::rank_slice(const Tensor& full) const {
  ZS_CHECK(full.defined() && full.numel() % size_ == 0, "rank_slice: ", full.describe(),
           " does not split into ", size_, " equal slices; pad it to a multiple of the group size");
  const int64_t count = full.numel() / size_;
  return full.slice(count * rank_, {count});
}

WorkPtr Communicator::reduce_scatter(const Tensor& full, const Tensor& shard, ReduceOp op,
                                     const CollectiveOptions& options) {
  check_tensor("reduce_scatter", "full", full);
  check_tensor("reduce_scatter", "shard", shard);
  ZS_CHECK(shard.dtype() == full.dtype(), "reduce_scatter: full ", full.describe(), " and shard ",
           shard.describe(), " have different dtypes");
  ZS_CHECK(full.numel() == shard.numel() * size_, "reduce_scatter: full ", full.describe(),
           " must hold size() × shard = ", size_, " × ", shard.numel(),
           " elements; pad the buffer to a multiple of the world size");
  const std::string desc =
      describe_call("reduce_scatter", next_sequence_, full, reduce_op_name(op));
  return enqueue(CollectiveKind::kReduceScatter, desc, {full, shard}, full.nbytes(), 0, options,
                 [this, full, shard, op](const Call& call) {
                   backend_->reduce_scatter(full.raw_device_data(), shard.raw_device_data(),
                                            static_cast<size_t>(shard.numel()), full.dtype(), op,
                                            call);
                 });
}

WorkPtr Communicator::broadcast(const Tensor& tensor, int root, const CollectiveOptions& options) {
  check_tensor("broadcast", "tensor", tensor);
  check_root("broadcast", root);
  const std::string desc = describe_call("broadcast", next_sequence_, tensor);
  return enqueue(CollectiveKind::kBroadcast, desc, {tensor}, tensor.nbytes(), root, options,
                 [this, tensor, root](const Call& call) {
                   backend_->broadcast(tensor.raw_device_data(),
                                       static_cast<size_t>(tensor.numel()), tensor.dtype(), root,
                                       call);
                 });
}

WorkPtr Communicator::gather(const Tensor& in, const Tensor& out, int root,
                             const CollectiveOptions& options) {
  check_tensor("gather", "in", in);
  check_root("gather", root);
  if (rank_ == root) {
    check_tensor("gather", "out", out);
    ZS_CHECK(out.dtype() == in.dtype() && out.numel() == in.numel() * size_, "gather: out ",
             out.describe(), " must be ", size_, " × in ", in.describe());
  }
  const std::string desc = describe_call("gather", next_sequence_, in);
  return enqueue(CollectiveKind::kGather, desc, {in, out}, in.nbytes() * size_, root, options,
                 [this, in, out, root](const Call& call) {
                   backend_->gather(in.raw_device_data(),
                                    rank_ == root ? out.raw_device_data() : nullptr,
                                    static_cast<size_t>(in.numel()), in.dtype(), root, call);
                 });
}

WorkPtr Communicator::scatter(const Tensor& in, const Tensor& out, int root,
                              const CollectiveOptions& options) {
  check_tensor("scatter", "out", out);
  check_root("scatter", root);
  if (rank_ == root) {
    check_tensor("scatter", "in", in);
    ZS_CHECK(in.dtype() == out.dtype() && in.numel() == out.numel() * size_, "scatter: in ",
             in.describe(), " must be ", size_, " × out ", out.describe());
  }
  const std::string desc = describe_call("scatter", next_sequence_, out);
  return enqueue(CollectiveKind::kScatter, desc, {in, out}, out.nbytes() * size_, root, options,
                 [this, in, out, root](const Call& call) {
                   backend_->scatter(rank_ == root ? in.raw_device_data() : nullptr,
                                     out.raw_device_data(), static_cast<size_t>(out.numel()),
                                     out.dtype(), root, call);
                 });
}

WorkPtr Communicator::barrier(const CollectiveOptions& options) {
  const std::string desc = detail::concat("barrier #", next_sequence_);
  return enqueue(CollectiveKind::kBarrier, desc, {}, 0, 0, options,
                 [this](const Call& call) { backend_->barrier(call); });
}

WorkPtr Communicator::send(const Tensor& tensor, int peer, const CollectiveOptions& options) {
  check_tensor("send", "tensor", tensor);
  check_peer("send", peer);
  const std::string desc = describe_call("send", next_sequence_, tensor);
  return enqueue(CollectiveKind::kSend, desc, {tensor}, tensor.nbytes(), peer, options,
                 [this, tensor, peer](const Call& call) {
                   backend_->send(tensor.raw_device_data(), static_cast<size_t>(tensor.numel()),
                                  tensor.dtype(), peer, call);
                 });
}

WorkPtr Communicator::recv(const Tensor& tensor, int peer, const CollectiveOptions& options) {
  check_tensor("recv", "tensor", tensor);
  check_peer("recv", peer);
  const std::string desc = describe_call("recv", next_sequence_, tensor);
  return enqueue(CollectiveKind::kRecv, desc, {tensor}, tensor.nbytes(), peer, options,
                 [this, tensor, peer](const Call& call) {
                   backend_->recv(tensor.raw_device_data(), static_cast<size_t>(tensor.numel()),
                                  tensor.dtype(), peer, call);
                 });
}

std::unique_ptr<Communicator> Communicator::split(int color, int key,
                                                  const CollectiveOptions& options) {
  std::unique_ptr<Backend> sub;
  const std::string desc = detail::concat("split #", next_sequence_, " (color ", color, ")");
  WorkPtr work = enqueue(
      CollectiveKind::kSplit, desc, {}, 0, 0, options,
      [this, color, key, &sub](const Call& call) { sub = backend_->split(color, key, call); });
  work->wait();
  if (!sub) return nullptr;
  // A sub-group of an nccl communicator runs on the same GPU, after the same compute stream.
  std::unique_ptr<Communicator> group =
      check_device_index_ ? std::make_unique<Communicator>(std::move(sub), buffer_device_, timeout_)
                          : std::make_unique<Communicator>(std::move(sub), timeout_);
  group->set_compute_stream(compute_stream_);
  return group;
}

std::unique_ptr<Communicator> Communicator::duplicate(const CollectiveOptions& options) {
  std::unique_ptr<Communicator> twin = split(0, rank_, options);
  twin->stats_ = stats_;  // before its first collective: its thread has not read it yet
  return twin;
}

void Communicator::abort(const std::string& reason) {
  backend_->abort(detail::concat("rank ", rank_, " aborted: ", reason));
}

void Communicator::flush() {
  // A no-op task without a device sync: the thread starts it only once nothing is in flight, and
  // tasks start in queue order, so when it completes every earlier task has completed and its
  // closure and buffers are gone (finish_task, and the thread's Task going out of scope).
  auto work = std::make_shared<Work>("flush", std::vector<Tensor>{}, nullptr);
  Task task{
      work,     CollectiveKind::kBarrier, 0,
      -1,       [](const Call&) {},       Call{CollectiveKind::kBarrier, 0, {}, "flush", nullptr},
      timeout()};
  task.counted = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    task.call.sequence = next_sequence_;  // not a collective: the sequence does not advance
    queue_.push_back(std::move(task));
  }
  queue_cv_.notify_one();
  work->wait();
}

std::vector<std::vector<uint64_t>> all_gather_u64(Communicator& comm, Allocator& allocator,
                                                  const std::vector<uint64_t>& values,
                                                  const std::string& tag) {
  const int64_t n = static_cast<int64_t>(values.size());
  Tensor mine = Tensor::empty({n}, DType::kI64, allocator, MemoryCategory::kCommBuffers, tag);
  Tensor all = Tensor::empty({n * comm.size()}, DType::kI64, allocator,
                             MemoryCategory::kCommBuffers, tag + " (gathered)");
  // Staged on the host (the tensors live on the communicator's buffer device).
  mine.copy_from_host(values.data());
  comm.all_gather(mine, all, {{}, tag})->wait();
  std::vector<uint64_t> gathered(static_cast<size_t>(n * comm.size()));
  all.copy_to_host(gathered.data());
  std::vector<std::vector<uint64_t>> out(static_cast<size_t>(comm.size()));
  for (int r = 0; r < comm.size(); ++r) {
    out[r].assign(gathered.begin() + r * n, gathered.begin() + (r + 1) * n);
  }
  return out;
}

}  // namespace zs::comm
