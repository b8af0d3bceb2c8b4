// The `mpi` backend (see mpi_backend.h): MPI runtime, call checks, polling with deadlines, and
// the collectives over nonblocking MPI calls with rank-ordered local reductions.
#include "comm/mpi/mpi_backend.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <exception>
#include <thread>

#include "comm/mpi/mpi_check.h"
#include "comm/mpi/peer_probe.h"
#include "comm/reduce.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace zs::comm {
namespace {

// Error code passed to MPI_Abort; mpirun reports it ("MPI_ABORT was invoked … errorcode 70").
constexpr int kAbortErrorCode = 70;
// Tag of send/recv messages: base + dtype, so recv can tell a dtype mismatch from a count one.
constexpr int kP2PTagBase = 0x2A00;
// Tag of the point-to-point messages of all_gather and all_reduce (gather_slices). recv's
// MPI_ANY_TAG cannot take one of them: messages from one peer match in the order it sent them,
// and every rank issues its calls in the same order, so by the time a recv is posted every
// earlier collective's messages have been received.
constexpr int kGatherTag = 0x2B00;

const char* mpi_error_class_name(int error_class) {
  switch (error_class) {
    case MPI_ERR_BUFFER:
      return "MPI_ERR_BUFFER";
    case MPI_ERR_COUNT:
      return "MPI_ERR_COUNT";
    case MPI_ERR_TYPE:
      return "MPI_ERR_TYPE";
    case MPI_ERR_TAG:
      return "MPI_ERR_TAG";
    case MPI_ERR_COMM:
      return "MPI_ERR_COMM";
    case MPI_ERR_RANK:
      return "MPI_ERR_RANK";
    case MPI_ERR_ROOT:
      return "MPI_ERR_ROOT";
    case MPI_ERR_ARG:
      return "MPI_ERR_ARG";
    case MPI_ERR_TRUNCATE:
      return "MPI_ERR_TRUNCATE";
    case MPI_ERR_OTHER:
      return "MPI_ERR_OTHER";
    case MPI_ERR_INTERN:
      return "MPI_ERR_INTERN";
    case MPI_ERR_IN_STATUS:
      return "MPI_ERR_IN_STATUS";
    case MPI_ERR_PENDING:
      return "MPI_ERR_PENDING";
    case MPI_ERR_REQUEST:
      return "MPI_ERR_REQUEST";
    case MPI_ERR_NO_MEM:
      return "MPI_ERR_NO_MEM";
    default:
      return "MPI error";
  }
}

}  // namespace

[[noreturn]] void throw_mpi_error(const char* file, int line, const char* expression, int code,
                                  const std::string& context) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) std::strcpy(text, "(no description)");
  int error_class = MPI_ERR_OTHER;
  MPI_Error_class(code, &error_class);
  std::string function(expression);
  function = function.substr(0, function.find('('));
  std::string hint;
  if (error_class == MPI_ERR_TRUNCATE) {
    hint =
        "; a peer sent more elements than this rank posted for: every rank must pass the same"
        " count";
  } else if (error_class == MPI_ERR_NO_MEM) {
    hint = "; MPI ran out of memory";
  } else {
    hint =
        "; this is an MPI-level failure (a lost peer, a broken transport or a bug): the job"
        " cannot continue";
  }
  const std::string message =
      ::zs::detail::concat(::zs::detail::error_prefix(file, line), function, " failed during ",
                           context, ": ", text, " (", mpi_error_class_name(error_class), ")", hint);
  switch (error_class) {
    case MPI_ERR_ARG:
    case MPI_ERR_COUNT:
    case MPI_ERR_TYPE:
    case MPI_ERR_ROOT:
    case MPI_ERR_RANK:
    case MPI_ERR_BUFFER:
      throw InvalidArgument(message);
    default:
      throw CommError(message);
  }
}

namespace {

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kF16:
    case DType::kBF16:
      return MPI_UINT16_T;  // moved as raw 16-bit values; reductions widen them locally
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kI64:
      return MPI_INT64_T;
  }
  return MPI_DATATYPE_NULL;
}

const char* thread_level_name(int level) {
  if (level == MPI_THREAD_SINGLE) return "MPI_THREAD_SINGLE";
  if (level == MPI_THREAD_FUNNELED) return "MPI_THREAD_FUNNELED";
  if (level == MPI_THREAD_SERIALIZED) return "MPI_THREAD_SERIALIZED";
  if (level == MPI_THREAD_MULTIPLE) return "MPI_THREAD_MULTIPLE";
  return "unknown";
}

// MPI counts are int: larger buffers fail by name rather than wrap.
int mpi_count(size_t count, const std::string& what) {
  ZS_CHECK(count <= static_cast<size_t>(INT_MAX), what, ": ", count,
           " elements exceed MPI's per-call limit of 2^31 - 1; split the buffer into smaller "
           "collectives");
  return static_cast<int>(count);
}

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto* pa = static_cast<const unsigned char*>(a);
  const auto* pb = static_cast<const unsigned char*>(b);
  return a_bytes > 0 && b_bytes > 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

}  // namespace

// The request of one nonblocking MPI call and the memory MPI may touch until it completes.
// Point-to-point exchanges (gather_slices) have one request per message instead, in `requests`.
struct MpiBackend::Pending {
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Status status;
  std::vector<MPI_Request> requests;
  std::vector<unsigned char> staging;
  std::vector<int> send_counts, send_displs, recv_counts, recv_displs;
  int64_t signature[12] = {};
  int64_t agreed[12] = {};
  int color_key[2] = {};
  std::vector<int> color_keys;
  MPI_Comm new_comm = MPI_COMM_NULL;
};

// --- MpiRuntime ---

MpiRuntime::MpiRuntime() : uncaught_at_init_(std::uncaught_exceptions()) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  ZS_CHECK_AS(CommError, !finalized,
              "MPI was already finalized in this process, and MPI can be initialized only once "
              "per process: keep the world communicator (which owns the MpiRuntime) alive until "
              "the program has finished communicating");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) {
    MPI_Query_thread(&thread_level_);
  } else {
    ZS_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &thread_level_),
                 "MPI initialization");
    owns_mpi_ = true;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int length = 0;
  MPI_Get_library_version(version, &length);
  library_version_ = std::string(version, static_cast<size_t>(std::max(length, 0)));
  // The first line up to its first comma ("Open MPI v4.1.4", "MPICH Version: 4.0.2").
  library_version_ = library_version_.substr(0, library_version_.find_first_of(",\r\n"));
  std::replace(library_version_.begin(), library_version_.end(), '\t', ' ');
  if (thread_level_ < MPI_THREAD_SERIALIZED) {
    const int level = thread_level_;
    if (owns_mpi_) MPI_Finalize();
    owns_mpi_ = false;
    ZS_THROW(CommError, "MPI (", library_version_, ") provides ", thread_level_name(level),
             ", but zeroshard calls MPI from its communicator threads and needs at least "
             "MPI_THREAD_SERIALIZED (MPI_THREAD_MULTIPLE preferred): use an MPI built with "
             "thread support, or initialize MPI with MPI_Init_thread(MPI_THREAD_MULTIPLE)");
  }
  if (serialized()) {
    ZS_LOG_WARN(
        "MPI ({}) provides {} only: every MPI call of this process is serialized "
        "through one mutex, so communicators cannot overlap their MPI calls",
        library_version_, thread_level_name(thread_level_));
  }
  ZS_LOG_DEBUG("MPI initialized: {}, {}, world rank {} of {}", library_version_,
               thread_level_name(thread_level_), world_rank_, world_size_);
}

MpiRuntime::~MpiRuntime() {
  if (!owns_mpi_) return;
  if (std::uncaught_exceptions() > uncaught_at_init_) {
    // A rank leaving on an exception would otherwise block in MPI_Finalize (or leave its peers
    // waiting in a collective until their timeout): end the job now, with the reason logged.
    ZS_LOG_ERROR(
        "world rank {} is leaving on an exception; aborting the MPI job so that the "
        "other ranks stop now instead of waiting for it",
        world_rank_);
    logger().flush();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // see MpiBackend::abort
    MPI_Abort(MPI_COMM_WORLD, kAbortErrorCode);
  }
  MPI_Finalize();
}

std::unique_lock<std::mutex> MpiRuntime::lock() {
  if (!serialized()) return {};
  return std::unique_lock<std::mutex>(mutex_);
}

// --- MpiComm ---

MpiComm::~MpiComm() {
  if (comm_ == MPI_COMM_NULL || comm_ == MPI_COMM_WORLD || comm_ == MPI_COMM_SELF) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm_);
}

MpiComm& MpiComm::operator=(MpiComm&& other) noexcept {
  if (this != &other) {
    MpiComm dropped(comm_);  // frees the old handle
    comm_ = other.comm_;
    other.comm_ = MPI_COMM_NULL;
  }
  return *this;
}

// --- MpiBackend ---

MpiBackend::MpiBackend(std::shared_ptr<MpiRuntime> runtime, MpiComm comm, MpiBackendOptions options,
                       std::shared_ptr<PeerProbe> probe)
    : runtime_(std::move(runtime)),
      probe_(std::move(probe)),
      comm_(std::move(comm)),
      options_(options) {
  auto lock = runtime_->lock();
  ZS_MPI_CHECK(MPI_Comm_set_errhandler(comm_.get(), MPI_ERRORS_RETURN), "backend setup");
  ZS_MPI_CHECK(MPI_Comm_rank(comm_.get(), &rank_), "backend setup");
  ZS_MPI_CHECK(MPI_Comm_size(comm_.get(), &size_), "backend setup");
  // The probe addresses peers by world rank (its communicator duplicates MPI_COMM_WORLD).
  MPI_Group group = MPI_GROUP_NULL, world_group = MPI_GROUP_NULL;
  ZS_MPI_CHECK(MPI_Comm_group(comm_.get(), &group), "backend setup");
  ZS_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world_group), "backend setup");
  std::vector<int> ranks(static_cast<size_t>(size_));
  for (int j = 0; j < size_; ++j) ranks[j] = j;
  world_ranks_.resize(ranks.size());
  const int translated =
      MPI_Group_translate_ranks(group, size_, ranks.data(), world_group, world_ranks_.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  ZS_MPI_CHECK(translated, "backend setup");
  // FNV-1a over the world ranks: the same number on every member, naming the group in answers.
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const int world_rank : world_ranks_) {
    hash = (hash ^ static_cast<uint64_t>(world_rank)) * 0x100000001b3ull;
  }
  group_id_ = static_cast<int64_t>(hash >> 1);
}

MpiBackend::~MpiBackend() {
  auto lock = runtime_->lock();
  MpiComm freed(std::move(comm_));  // MPI_Comm_free, serialized like every MPI call
}

MpiBackend::MpiBackend(std::shared_ptr<MpiRuntime> runtime, int rank, int size)
    : runtime_(std::move(runtime)), rank_(rank), size_(size) {}

std::unique_ptr<MpiBackend> MpiBackend::world(std::shared_ptr<MpiRuntime> runtime,
                                              std::chrono::milliseconds timeout,
                                              MpiBackendOptions options) {
  ZS_CHECK(runtime != nullptr, "MpiBackend::world needs an MpiRuntime");
  const Call call{CollectiveKind::kSplit, 0, Clock::now() + timeout, "world communicator"};
  // Two duplicates of MPI_COMM_WORLD: the collectives' and the peer probe's (so that probe
  // traffic never matches a collective's message), then every rank's processor name for the
  // probe's errors, gathered on the probe's communicator.
  const int world_size = runtime->world_size();
  auto pending = std::make_unique<Pending>();
  Pending* creation = pending.get();
  auto probe_pending = std::make_unique<Pending>();
  Pending* probe_creation = probe_pending.get();
  auto names_pending = std::make_unique<Pending>();
  Pending* names = names_pending.get();
  {
    auto lock = runtime->lock();
    ZS_MPI_CHECK(MPI_Comm_idup(MPI_COMM_WORLD, &creation->new_comm, &creation->request),
                 "duplicating MPI_COMM_WORLD");
    ZS_MPI_CHECK(MPI_Comm_idup(MPI_COMM_WORLD, &probe_creation->new_comm, &probe_creation->request),
                 "duplicating MPI_COMM_WORLD for the peer probe");
  }
  // The duplicates exist once every rank has joined; poll for them like for any call.
  MpiBackend bootstrap(runtime, runtime->world_rank(), world_size);
  const std::string what = detail::concat(
      "creating the world communicator (MPI_Comm_idup of MPI_COMM_WORLD, ", world_size, " ranks)");
  try {
    bootstrap.wait(pending, call, what, "for every rank of MPI_COMM_WORLD to start");
    bootstrap.wait(probe_pending, call, what, "for every rank of MPI_COMM_WORLD to start");
    names->staging.resize(static_cast<size_t>(world_size + 1) * MPI_MAX_PROCESSOR_NAME);
    char* own_name = reinterpret_cast<char*>(names->staging.data());
    int length = 0;
    {
      auto lock = runtime->lock();
      ZS_MPI_CHECK(MPI_Comm_set_errhandler(probe_creation->new_comm, MPI_ERRORS_RETURN), what);
      ZS_MPI_CHECK(MPI_Get_processor_name(own_name, &length), what);
      ZS_MPI_CHECK(MPI_Iallgather(own_name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                                  own_name + MPI_MAX_PROCESSOR_NAME, MPI_MAX_PROCESSOR_NAME,
                                  MPI_CHAR, probe_creation->new_comm, &names->request),
                   what);
    }
    bootstrap.wait(names_pending, call, what, "for every rank's processor name");
  } catch (...) {
    // MPI still owns the pending calls and will write `new_comm` and the names: leak them on
    // purpose.
    for (auto& abandoned : bootstrap.abandoned_) (void)abandoned.release();
    for (auto* unfinished : {&pending, &probe_pending, &names_pending}) (void)unfinished->release();
    throw;
  }
  std::vector<std::string> hosts(static_cast<size_t>(world_size));
  for (int j = 0; j < world_size; ++j) {
    const char* name =
        reinterpret_cast<const char*>(names->staging.data()) + (j + 1) * MPI_MAX_PROCESSOR_NAME;
    hosts[j] = std::string(name, strnlen(name, MPI_MAX_PROCESSOR_NAME));
  }
  auto probe =
      std::make_shared<PeerProbe>(runtime, MpiComm(probe_creation->new_comm), std::move(hosts));
  return std::unique_ptr<MpiBackend>(
      new MpiBackend(std::move(runtime), MpiComm(creation->new_comm), options, std::move(probe)));
}

std::string MpiBackend::describe(const Call& call, size_t count, DType dtype,
                                 const char* extra) const {
  std::string text = detail::concat(collective_name(call.kind), " #", call.sequence);
  if (!call.tag.empty()) text += " '" + call.tag + "'";
  if (call.kind != CollectiveKind::kBarrier && call.kind != CollectiveKind::kSplit) {
    text += detail::concat(" (", count, " ", dtype_name(dtype), extra[0] ? ", " : "", extra, ")");
  }
  return text;
}

void MpiBackend::abandon(std::unique_ptr<Pending> pending) {
  if (pending) abandoned_.push_back(std::move(pending));
}

void MpiBackend::wait(std::unique_ptr<Pending>& pending, const Call& call, const std::string& what,
                      const char* stage) {
  const auto start = Clock::now();
  for (;;) {
    int done = 0;
    try {
      auto lock = runtime_->lock();
      if (pending->requests.empty()) {
        ZS_MPI_CHECK(MPI_Test(&pending->request, &done, &pending->status), what, " on rank ", rank_,
                     " of ", size_, " (waiting ", stage, ")");
      } else {
        ZS_MPI_CHECK(MPI_Testall(static_cast<int>(pending->requests.size()),
                                 pending->requests.data(), &done, MPI_STATUSES_IGNORE),
                     what, " on rank ", rank_, " of ", size_, " (waiting ", stage, ")");
      }
    } catch (const Error&) {
      abandon(std::move(pending));
      throw;
    }
    if (done) return;
    const auto now = Clock::now();
    if (probe_) {
      try {
        probe_->answer(PeerProbe::Activity{static_cast<int64_t>(call.kind),
                                           static_cast<int64_t>(call.sequence), group_id_, false},
                       now);
      } catch (const Error&) {
        abandon(std::move(pending));
        throw;
      }
    }
    if (aborted_.load(std::memory_order_acquire)) {
      abandon(std::move(pending));
      std::string reason;
      {
        std::lock_guard<std::mutex> lock(abort_mutex_);
        reason = abort_reason_;
      }
      ZS_THROW(CommError, what, " on rank ", rank_, " of ", size_,
               " failed: the group was aborted: ", reason);
    }
    if (now >= call.deadline) {
      abandon(std::move(pending));
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - start);
      const std::string peers = probe_peers(call, now - start);
      ZS_THROW(CommTimeout, what, " timed out on rank ", rank_, " of ", size_, " after waiting ",
               waited.count(), " ms ", stage, ". ", peers,
               "Every rank must issue the same collectives in the same order; a rank that "
               "skipped this one, is stuck, or died leaves the others here. If the work is just "
               "slow, raise the timeout (zs-train --comm-timeout, ZS_COMM_TIMEOUT_S).");
    }
    // MPI progresses only inside MPI calls (no progress thread in Debian's Open MPI or MPICH),
    // so poll tightly at first, yielding the core on every turn — a collective usually
    // completes within a millisecond, and a large one needs MPI_Test to keep moving its
    // fragments — then back off to sleeps that leave the core to the compute thread (and, with
    // more ranks than cores, to the peer being waited for).
    const auto waited = now - start;
    if (waited < std::chrono::milliseconds(2)) {
      std::this_thread::yield();
    } else if (waited < std::chrono::milliseconds(100)) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
}

std::string MpiBackend::probe_peers(const Call& call, Clock::duration waited) {
  if (!probe_ || size_ < 2 || options_.probe_window.count() <= 0) return "";
  const auto window =
      std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(waited / 2),
                 MpiBackendOptions::kMinProbeWindow,
                 std::max(options_.probe_window, MpiBackendOptions::kMinProbeWindow));
  std::vector<int> peers;
  for (int j = 0; j < size_; ++j) {
    if (j != rank_) peers.push_back(world_ranks_[j]);
  }
  const PeerProbe::Activity self{static_cast<int64_t>(call.kind),
                                 static_cast<int64_t>(call.sequence), group_id_, true};
  const PeerProbe::Result result = probe_->probe(peers, self, window, aborted_);
  if (!result.failure.empty())
    return detail::concat("The peer probe failed: ", result.failure, ". ");
  if (result.cut_short) return "The peer probe was cut short: the group was aborted. ";
  // "rank 2 (host n1)", or "rank 2 (world rank 5, host n1)" in a group split from the world.
  const auto peer_name = [&](size_t i, const std::string& more) {
    const int group_rank =
        static_cast<int>(i) < rank_ ? static_cast<int>(i) : static_cast<int>(i) + 1;
    const int world_rank = result.answers[i].world_rank;
    return detail::concat(
        "rank ", group_rank, " (",
        world_rank == group_rank ? std::string() : detail::concat("world rank ", world_rank, ", "),
        "host ", probe_->host(world_rank), more, ")");
  };
  std::string silent, elsewhere, here;
  const auto append = [](std::string& list, const std::string& item) {
    list += (list.empty() ? "" : ", ") + item;
  };
  for (size_t i = 0; i < result.answers.size(); ++i) {
    const PeerProbe::Answer& answer = result.answers[i];
    const PeerProbe::Activity& a = answer.activity;
    if (!answer.answered) {
      append(silent, peer_name(i, ""));
    } else if (a.group == group_id_ && a.kind == static_cast<int64_t>(call.kind) &&
               a.sequence == static_cast<int64_t>(call.sequence)) {
      append(here, peer_name(i, a.timed_out ? ", timed out too" : ""));
    } else {
      const bool known = a.kind >= 0 && a.kind < kNumCollectiveKinds;
      append(elsewhere,
             peer_name(i, detail::concat(
                              ", waiting in ",
                              known ? collective_name(static_cast<CollectiveKind>(a.kind)) : "call",
                              " #", a.sequence, a.group == group_id_ ? "" : " of another group")));
    }
  }
  std::string text;
  if (!silent.empty()) {
    text += detail::concat("Peers not answering within ", window.count(), " ms: ", silent,
                           " — dead, frozen, cut off from this rank, or busy outside every MPI "
                           "call (stuck in computation or I/O). ");
  }
  if (!elsewhere.empty()) {
    text += detail::concat("Peers alive but not in this collective: ", elsewhere, ". ");
  }
  if (!here.empty()) {
    text += detail::concat("Peers alive and waiting in this collective too: ", here, ". ");
  }
  return text;
}

void MpiBackend::check_call(const Call& call, const std::string& what, size_t count, DType dtype,
                            int op, int root) {
  const uint64_t index = collectives_++;
  if (!options_.check_calls) return;
  auto pending = std::make_unique<Pending>();
  constexpr int kFields = 6;
  const int64_t fields[kFields] = {static_cast<int64_t>(call.kind),
                                   static_cast<int64_t>(count),
                                   static_cast<int64_t>(dtype),
                                   op,
                                   root,
                                   static_cast<int64_t>(index)};
  // One MAX all-reduce of (x, −x) gives the maximum and minimum of every field over the group.
  for (int i = 0; i < kFields; ++i) {
    pending->signature[i] = fields[i];
    pending->signature[kFields + i] = -fields[i];
  }
  {
    auto lock = runtime_->lock();
    ZS_MPI_CHECK(MPI_Iallreduce(pending->signature, pending->agreed, 2 * kFields, MPI_INT64_T,
                                MPI_MAX, comm_.get(), &pending->request),
                 what, " (call check)");
  }
  wait(pending, call, what,
       "for every rank of the group to issue it (a peer has not reached this collective)");
  const int64_t* max = pending->agreed;
  std::string differences;
  for (int i = 0; i < kFields; ++i) {
    const int64_t min = -pending->agreed[kFields + i];
    if (min == fields[i] && max[i] == fields[i]) continue;
    // Names for the enum fields; plain numbers for the others.
    auto value = [i](int64_t v) -> std::string {
      if (i == 0 && v >= 0 && v < kNumCollectiveKinds) {
        return collective_name(static_cast<CollectiveKind>(v));
      }
      if (i == 2 && v >= 0 && v <= static_cast<int64_t>(DType::kI64)) {
        return dtype_name(static_cast<DType>(v));
      }
      if (i == 3 && v >= 0 && v <= static_cast<int64_t>(ReduceOp::kMin)) {
        return reduce_op_name(static_cast<ReduceOp>(v));
      }
      return std::to_string(v);
    };
    static const char* const kNames[kFields] = {"collective", "count", "dtype",
                                                "reduce op",  "root",  "collective number"};
    differences +=
        detail::concat(differences.empty() ? "" : "; ", kNames[i], " ranges from ", value(min),
                       " to ", value(max[i]), " (this rank: ", value(fields[i]), ")");
  }
  if (differences.empty()) return;
  ZS_THROW(CommError, "ranks disagree on ", what, " (rank ", rank_, " of ", size_,
           ", its group collective #", index, "): ", differences,
           ". Every rank must issue the same collectives, with the same sizes, in the same "
           "order.");
}

void MpiBackend::gather_slices(const void* own, void* full, const std::vector<size_t>& counts,
                               const std::vector<size_t>& displs, DType dtype, const Call& call,
                               const std::string& what, const char* stage) {
  const size_t esize = dtype_size(dtype);
  auto* full_bytes = static_cast<unsigned char*>(full);
  unsigned char* own_slot = full_bytes + displs[rank_] * esize;
  const size_t own_bytes = counts[rank_] * esize;
  auto pending = std::make_unique<Pending>();
  const void* send = own;
  if (own != own_slot && overlaps(own, own_bytes, full, (displs.back() + counts.back()) * esize)) {
    // Sent from a copy: the receives may overwrite `own` before the sends have read it.
    pending->staging.assign(static_cast<const unsigned char*>(own),
                            static_cast<const unsigned char*>(own) + own_bytes);
    bytes_copied_ += own_bytes;
    send = pending->staging.data();
  }
  pending->requests.reserve(2 * static_cast<size_t>(size_));  // no reallocation: MPI holds them
  try {
    auto lock = runtime_->lock();
    for (int j = 0; j < size_; ++j) {
      if (j == rank_) continue;
      pending->requests.push_back(MPI_REQUEST_NULL);
      ZS_MPI_CHECK(
          MPI_Irecv(full_bytes + displs[j] * esize, mpi_count(counts[j], what), mpi_type(dtype), j,
                    kGatherTag, comm_.get(), &pending->requests.back()),
          what);
    }
    for (int k = 1; k < size_; ++k) {
      // Rank r sends to r+1, r+2, … first, so the ranks do not all start on the same peer.
      const int j = (rank_ + k) % size_;
      pending->requests.push_back(MPI_REQUEST_NULL);
      ZS_MPI_CHECK(MPI_Isend(send, mpi_count(counts[rank_], what), mpi_type(dtype), j, kGatherTag,
                             comm_.get(), &pending->requests.back()),
                   what);
    }
  } catch (const Error&) {
    abandon(std::move(pending));  // the messages posted so far may still use its buffers
    throw;
  }
  wait(pending, call, what, stage);
  // This rank's own slice goes into place last: MPI_Allgather's order (Open MPI's tuned
  // component), which measured 5–10% faster at 16 MiB on 2 ranks than copying it first.
  if (own != own_slot && own_bytes > 0) {
    std::memmove(own_slot, pending->staging.empty() ? own : pending->staging.data(), own_bytes);
    bytes_copied_ += own_bytes;
  }
}

size_t MpiBackend::staging_piece(size_t element_size) const {
  const size_t peers = static_cast<size_t>(std::max(size_ - 1, 1));
  return std::max<size_t>(1, options_.max_staging_bytes / (element_size * peers));
}

void MpiBackend::exchange_and_reduce(std::unique_ptr<Pending> pending, const void* send,
                                     const void* own, void* out, size_t len, DType dtype,
                                     ReduceOp op, const Call& call, const std::string& what) {
  const size_t esize = dtype_size(dtype);
  const size_t peers = static_cast<size_t>(size_ - 1);
  // slices[q]: rank q's `len` elements, in staging for the peers (packed in rank order, with no
  // slot for this rank), and where they already are for this rank.
  std::vector<const void*> slices(static_cast<size_t>(size_));
  slices[rank_] = own;
  if (peers > 0) {
    Pending& p = *pending;
    p.recv_counts.resize(size_);
    p.recv_displs.resize(size_);
    for (int j = 0; j < size_; ++j) {
      const int slot = j < rank_ ? j : j - 1;
      p.recv_counts[j] = j == rank_ ? 0 : static_cast<int>(len);
      p.recv_displs[j] = j == rank_ ? 0 : static_cast<int>(len * slot);
    }
    // This rank's own elements stay out of the exchange: copying them to staging and reading
    // them back cost about a third of the time of a 16 MiB all_reduce (bench/mpi --phases).
    p.send_counts[rank_] = 0;
    p.staging = std::move(staging_);  // reused across pieces and calls: no page faults per piece
    p.staging.resize(len * peers * esize);
    {
      auto lock = runtime_->lock();
      ZS_MPI_CHECK(MPI_Ialltoallv(send, p.send_counts.data(), p.send_displs.data(), mpi_type(dtype),
                                  p.staging.data(), p.recv_counts.data(), p.recv_displs.data(),
                                  mpi_type(dtype), comm_.get(), &p.request),
                   what);
    }
    wait(pending, call, what, "while exchanging slices to reduce");
    for (int q = 0; q < size_; ++q) {
      if (q != rank_) slices[q] = pending->staging.data() + pending->recv_displs[q] * esize;
    }
  }
  // comm/reduce.h's arithmetic, shared with the local backend; `out` may be `own`.
  if (len > 0) reduce_rank_slices(out, slices.data(), size_, len, dtype, op);
  if (peers > 0) staging_ = std::move(pending->staging);
}

void MpiBackend::all_reduce(void* data, size_t count, DType dtype, ReduceOp op, const Call& call) {
  const std::string what = describe(call, count, dtype, reduce_op_name(op));
  mpi_count(count, what);
  check_call(call, what, count, dtype, static_cast<int>(op), -1);
  const size_t esize = dtype_size(dtype);
  auto* bytes = static_cast<unsigned char*>(data);
  // Rank j owns the contiguous slice [offset[j], offset[j] + slice[j]) of the elements.
  std::vector<size_t> slice(size_), offset(size_);
  for (int j = 0, at = 0; j < size_; ++j) {
    slice[j] = count / size_ + (static_cast<size_t>(j) < count % size_ ? 1 : 0);
    offset[j] = static_cast<size_t>(at);
    at += static_cast<int>(slice[j]);
  }
  // Phase 1 (reduce-scatter), in pieces of at most `piece` elements per slice so the staging
  // buffer (a piece from each peer) stays under options_.max_staging_bytes. This rank's slice is
  // reduced in place, where it lies in `data`.
  const size_t piece = staging_piece(esize);
  const size_t mine = slice[rank_];
  for (size_t begin = 0; begin == 0 || begin < slice[0]; begin += piece) {
    auto pending = std::make_unique<Pending>();
    Pending& p = *pending;
    p.send_counts.resize(size_);
    p.send_displs.resize(size_);
    for (int j = 0; j < size_; ++j) {
      const size_t len = begin < slice[j] ? std::min(piece, slice[j] - begin) : 0;
      p.send_counts[j] = static_cast<int>(len);
      p.send_displs[j] = static_cast<int>(offset[j] + std::min(begin, slice[j]));
    }
    const size_t my_len = begin < mine ? std::min(piece, mine - begin) : 0;
    unsigned char* own = bytes + (offset[rank_] + std::min(begin, mine)) * esize;
    exchange_and_reduce(std::move(pending), data, own, own, my_len, dtype, op, call, what);
    if (count == 0) break;
  }
  if (size_ == 1) return;
  // Phase 2: every rank gathers the reduced slices in place.
  gather_slices(bytes + offset[rank_] * esize, data, slice, offset, dtype, call, what,
                "while gathering the reduced slices");
}

void MpiBackend::reduce_scatter(const void* full, void* shard, size_t count, DType dtype,
                                ReduceOp op, const Call& call) {
  const std::string what = describe(call, count * size_, dtype, reduce_op_name(op));
  mpi_count(count * size_, what);
  const size_t esize = dtype_size(dtype);
  const auto* full_bytes = static_cast<const unsigned char*>(full);
  auto* shard_bytes = static_cast<unsigned char*>(shard);
  const size_t slice_bytes = count * esize;
  // `shard` may be a slice of `full` (FSDP's in-place use): pieces of a slice are written only
  // after they have been sent and reduced. Any other overlap would overwrite elements before
  // they are read.
  if (overlaps(shard, slice_bytes, full, slice_bytes * size_)) {
    const std::ptrdiff_t at = shard_bytes - full_bytes;
    ZS_CHECK(at >= 0 && static_cast<size_t>(at) % slice_bytes == 0, what,
             ": shard overlaps full at byte offset ", at,
             ", which is not the start of a rank's slice (", slice_bytes,
             " bytes each); pass a separate shard or exactly a slice of full");
  }
  check_call(call, what, count, dtype, static_cast<int>(op), -1);
  const unsigned char* own_slice = full_bytes + slice_bytes * rank_;
  const size_t piece = staging_piece(esize);
  for (size_t begin = 0; begin == 0 || begin < count; begin += piece) {
    const size_t len = std::min(piece, count - begin);
    auto pending = std::make_unique<Pending>();
    Pending& p = *pending;
    p.send_counts.assign(size_, static_cast<int>(len));
    p.send_displs.resize(size_);
    for (int j = 0; j < size_; ++j) p.send_displs[j] = static_cast<int>(count * j + begin);
    exchange_and_reduce(std::move(pending), full, own_slice + begin * esize,
                        shard_bytes + begin * esize, len, dtype, op, call, what);
    if (count == 0) break;
  }
}

void MpiBackend::all_gather(const void* shard, void* full, size_t count, DType dtype,
                            const Call& call) {
  const std::string what = describe(call, count * size_, dtype, "");
  mpi_count(count, what);
  mpi_count(count * size_, what);
  check_call(call, what, count, dtype, -1, -1);
  std::vector<size_t> counts(size_, count), displs(size_);
  for (int j = 0; j < size_; ++j) displs[j] = count * j;
  gather_slices(shard, full, counts, displs, dtype, call, what, "while gathering");
}

void MpiBackend::broadcast(void* data, size_t count, DType dtype, int root, const Call& call) {
  const std::string what = describe(call, count, dtype, detail::concat("root ", root).c_str());
  const int n = mpi_count(count, what);
  check_call(call, what, count, dtype, -1, root);
  auto pending = std::make_unique<Pending>();
  {
    auto lock = runtime_->lock();
    ZS_MPI_CHECK(MPI_Ibcast(data, n, mpi_type(dtype), root, comm_.get(), &pending->request), what);
  }
  wait(pending, call, what, "while broadcasting");
}

void MpiBackend::gather(const void* in, void* out, size_t count, DType dtype, int root,
                        const Call& call) {
  const std::string what =
      describe(call, count * size_, dtype, detail::concat("root ", root).c_str());
  const int n = mpi_count(count, what);
  mpi_count(count * size_, what);
  check_call(call, what, count, dtype, -1, root);
  const size_t bytes = count * dtype_size(dtype);
  auto pending = std::make_unique<Pending>();
  const void* send = in;
  if (rank_ == root && in == static_cast<unsigned char*>(out) + bytes * rank_) {
    send = MPI_IN_PLACE;
  } else if (rank_ == root && overlaps(in, bytes, out, bytes * size_)) {
    pending->staging.assign(static_cast<const unsigned char*>(in),
                            static_cast<const unsigned char*>(in) + bytes);
    bytes_copied_ += bytes;
    send = pending->staging.data();
  }
  {
    auto lock = runtime_->lock();
    ZS_MPI_CHECK(MPI_Igather(send, n, mpi_type(dtype), out, n, mpi_type(dtype), root, comm_.get(),
                             &pending->request),
                 what);
  }
  wait(pending, call, what, "while gathering to the root");
}

void MpiBackend::scatter(const void* in, void* out, size_t count, DType dtype, int root,
                         const Call& call) {
  const std::string what =
      describe(call, count * size_, dtype, detail::concat("root ", root).c_str());
  const int n = mpi_count(count, what);
  mpi_count(count * size_, what);
  check_call(call, what, count, dtype, -1, root);
  const size_t bytes = count * dtype_size(dtype);
  auto pending = std::make_unique<Pending>();
  void* receive = out;
  const void* send = in;
  if (rank_ == root && out == static_cast<const unsigned char*>(in) + bytes * rank_) {
    receive = MPI_IN_PLACE;  // the root's own slice is already where it belongs
  } else if (rank_ == root && overlaps(in, bytes * size_, out, bytes)) {
    pending->staging.assign(static_cast<const unsigned char*>(in),
                            static_cast<const unsigned char*>(in) + bytes * size_);
    bytes_copied_ += bytes * size_;
    send = pending->staging.data();
  }
  {
    auto lock = runtime_->lock();
    ZS_MPI_CHECK(MPI_Iscatter(send, n, mpi_type(dtype), receive, n, mpi_type(dtype), root,
                              comm_.get(), &pending->request),
                 what);
  }
  wait(pending, call, what, "while scattering from the root");
}

void MpiBackend::barrier(const Call& call) {
  const std::string what = describe(call, 0, DType::kF32, "");
  check_call(call, what, 0, DType::kF32, -1, -1);
  if (options_.check_calls) return;  // the call check completes only once every rank is here
  auto pending = std::make_unique<Pending>();
  {
    auto lock = runtime_->lock();
    ZS_MPI_CHECK(MPI_Ibarrier(comm_.get(), &pending->request), what);
  }
  wait(pending, call, what, "for every rank of the group to reach the barrier");
}

void MpiBackend::send(const void* data, size_t count, DType dtype, int peer, const Call& call) {
  const std::string what = describe(call, count, dtype, detail::concat("to rank ", peer).c_str());
  const int n = mpi_count(count, what);
  auto pending = std::make_unique<Pending>();
  {
    auto lock = runtime_->lock();
    ZS_MPI_CHECK(MPI_Isend(data, n, mpi_type(dtype), peer, kP2PTagBase + static_cast<int>(dtype),
                           comm_.get(), &pending->request),
                 what);
  }
  wait(pending, call, what, "for the peer to take the message");
}

void MpiBackend::recv(void* data, size_t count, DType dtype, int peer, const Call& call) {
  const std::string what = describe(call, count, dtype, detail::concat("from rank ", peer).c_str());
  const int n = mpi_count(count, what);
  auto pending = std::make_unique<Pending>();
  {
    auto lock = runtime_->lock();
    ZS_MPI_CHECK(
        MPI_Irecv(data, n, mpi_type(dtype), peer, MPI_ANY_TAG, comm_.get(), &pending->request),
        what);
  }
  wait(pending, call, what, "for the peer's message");
  const MPI_Status& status = pending->status;
  const int sent_dtype = status.MPI_TAG - kP2PTagBase;
  ZS_CHECK_AS(CommError, sent_dtype == static_cast<int>(dtype), what, ": rank ", peer, " sent ",
              sent_dtype >= 0 && sent_dtype <= 3 ? dtype_name(static_cast<DType>(sent_dtype)) : "?",
              " elements but this rank receives ", dtype_name(dtype),
              "; send and recv must use the same dtype");
  int received = 0;
  MPI_Get_count(&status, mpi_type(dtype), &received);
  ZS_CHECK_AS(CommError, received == n, what, ": rank ", peer, " sent ", received,
              " elements but this rank expected ", count,
              "; send and recv must use the same count");
}

std::unique_ptr<Backend> MpiBackend::split(int color, int key, const Call& call) {
  const std::string what = describe(call, 0, DType::kI32, "");
  check_call(call, what, 0, DType::kI32, -1, -1);
  // Gather (color, key) under the deadline: MPI_Comm_split has no nonblocking form, but once
  // this completes every rank has arrived, so the blocking split below cannot hang on a peer.
  auto pending = std::make_unique<Pending>();
  pending->color_key[0] = color;
  pending->color_key[1] = key;
  pending->color_keys.resize(2 * static_cast<size_t>(size_));
  {
    auto lock = runtime_->lock();
    ZS_MPI_CHECK(MPI_Iallgather(pending->color_key, 2, MPI_INT, pending->color_keys.data(), 2,
                                MPI_INT, comm_.get(), &pending->request),
                 what);
  }
  wait(pending, call, what, "for every rank of the group to issue the split");
  int members = 0;
  for (int j = 0; j < size_; ++j) members += color >= 0 && pending->color_keys[2 * j] == color;
  MPI_Comm sub = MPI_COMM_NULL;
  {
    auto lock = runtime_->lock();
    ZS_MPI_CHECK(MPI_Comm_split(comm_.get(), color < 0 ? MPI_UNDEFINED : color, key, &sub), what);
  }
  if (color < 0) {
    MpiComm dropped(sub);
    return nullptr;
  }
  auto backend =
      std::unique_ptr<MpiBackend>(new MpiBackend(runtime_, MpiComm(sub), options_, probe_));
  ZS_CHECK_AS(CommError, backend->size() == members, what, ": MPI_Comm_split formed a group of ",
              backend->size(), " ranks for color ", color, ", but ", members,
              " ranks passed that color");
  return backend;
}

std::unique_ptr<MpiBackend> MpiBackend::split_node_local(const Call& call) {
  const std::string what = describe(call, 0, DType::kI32, "node-local");
  // op = 1 tells a node-local split from split(color, key) in the call check.
  check_call(call, what, 0, DType::kI32, 1, -1);
  if (!options_.check_calls) {
    auto pending = std::make_unique<Pending>();
    {
      auto lock = runtime_->lock();
      ZS_MPI_CHECK(MPI_Ibarrier(comm_.get(), &pending->request), what);
    }
    wait(pending, call, what, "for every rank of the group to issue the split");
  }
  MPI_Comm sub = MPI_COMM_NULL;
  {
    auto lock = runtime_->lock();
    ZS_MPI_CHECK(MPI_Comm_split_type(comm_.get(), MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &sub),
                 what);
  }
  return std::unique_ptr<MpiBackend>(new MpiBackend(runtime_, MpiComm(sub), options_, probe_));
}

void MpiBackend::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    if (abort_reason_.empty()) abort_reason_ = reason;
  }
  aborted_.store(true, std::memory_order_release);
  ZS_LOG_ERROR(
      "{} — aborting the MPI job (MPI_Abort on a group of {} ranks; mpirun ends every "
      "rank of the job)",
      reason, size_);
  logger().flush();
  // Give the launcher's output forwarding a moment to carry the reason out: MPI_Abort tears the
  // job down at once, and Hydra (MPICH) then drops what it has not forwarded yet.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // On MPI_COMM_WORLD, not on this group's communicator: MPICH aborts only the calling process
  // for any other communicator (even a duplicate of the world), which would leave the other
  // ranks waiting until their own timeouts; Open MPI ends the job either way. MPI_Abort is the
  // last MPI call of this process; it is not serialized, because a thread that holds the mutex
  // may be blocked in MPI itself.
  MPI_Abort(MPI_COMM_WORLD, kAbortErrorCode);
}

}  // namespace zs::comm
