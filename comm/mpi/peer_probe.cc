// PeerProbe (see peer_probe.h): pings and answers on the probe's own communicator.
#include "comm/mpi/peer_probe.h"

#include <algorithm>
#include <thread>

#include "comm/mpi/mpi_check.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace zs::comm {
namespace {

constexpr int kPingTag = 1;
constexpr int kAnswerTag = 2;
// answer() does its MPI calls at most this often: a waiting peer answers within about this
// long, and a collective's polling loop is not slowed by a second MPI_Test on every turn.
constexpr std::chrono::milliseconds kAnswerInterval(1);

int64_t nanoseconds(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

PeerProbe::PeerProbe(std::shared_ptr<MpiRuntime> runtime, MpiComm comm,
                     std::vector<std::string> hosts)
    : runtime_(std::move(runtime)), comm_(std::move(comm)), hosts_(std::move(hosts)) {
  auto lock = runtime_->lock();
  ZS_MPI_CHECK(MPI_Comm_set_errhandler(comm_.get(), MPI_ERRORS_RETURN), "peer probe setup");
  ZS_MPI_CHECK(MPI_Irecv(ping_in_, kFields, MPI_INT64_T, MPI_ANY_SOURCE, kPingTag, comm_.get(),
                         &ping_request_),
               "peer probe setup");
  ZS_MPI_CHECK(MPI_Irecv(answer_in_, kFields, MPI_INT64_T, MPI_ANY_SOURCE, kAnswerTag, comm_.get(),
                         &answer_request_),
               "peer probe setup");
}

PeerProbe::~PeerProbe() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  std::lock_guard<std::mutex> guard(mutex_);
  auto lock = runtime_->lock();
  // A posted receive that nothing matched is cancelled locally; one that a ping matched
  // meanwhile completes instead. Either way MPI_Wait returns at once.
  for (MPI_Request* request : {&ping_request_, &answer_request_}) {
    if (*request == MPI_REQUEST_NULL) continue;
    MPI_Cancel(request);
    MPI_Wait(request, MPI_STATUS_IGNORE);
  }
  for (auto it = outgoing_.begin(); it != outgoing_.end();) {
    int done = 0;
    MPI_Test(&it->request, &done, MPI_STATUS_IGNORE);
    if (done) {
      it = outgoing_.erase(it);
      continue;
    }
    // A message a peer never took: MPI completes (or drops) it on its own and may read its
    // payload until then, so the payload is left to MPI — a leak of a few bytes per lost peer.
    MPI_Request_free(&it->request);
    auto* left_to_mpi = new std::list<Outgoing>;
    left_to_mpi->splice(left_to_mpi->end(), outgoing_, it++);
  }
  MpiComm freed(std::move(comm_));  // MPI_Comm_free, serialized like every MPI call
}

void PeerProbe::send_locked(const int64_t (&payload)[kFields], int world_rank, int tag) {
  Outgoing& send = outgoing_.emplace_back();
  std::copy(payload, payload + kFields, send.payload);
  auto lock = runtime_->lock();
  ZS_MPI_CHECK(
      MPI_Isend(send.payload, kFields, MPI_INT64_T, world_rank, tag, comm_.get(), &send.request),
      "the peer probe (sending to world rank ", world_rank, ")");
}

void PeerProbe::answer_locked(const Activity& activity) {
  for (;;) {
    int done = 0;
    MPI_Status status;
    {
      auto lock = runtime_->lock();
      ZS_MPI_CHECK(MPI_Test(&ping_request_, &done, &status), "answering a peer probe");
    }
    if (!done) break;
    const int64_t answer[kFields] = {ping_in_[0], activity.kind, activity.sequence, activity.group,
                                     activity.timed_out ? 1 : 0};
    send_locked(answer, status.MPI_SOURCE, kAnswerTag);
    auto lock = runtime_->lock();
    ZS_MPI_CHECK(MPI_Irecv(ping_in_, kFields, MPI_INT64_T, MPI_ANY_SOURCE, kPingTag, comm_.get(),
                           &ping_request_),
                 "answering a peer probe");
  }
  for (auto it = outgoing_.begin(); it != outgoing_.end();) {
    int done = 0;
    {
      auto lock = runtime_->lock();
      ZS_MPI_CHECK(MPI_Test(&it->request, &done, MPI_STATUS_IGNORE), "the peer probe");
    }
    it = done ? outgoing_.erase(it) : std::next(it);
  }
}

void PeerProbe::answer(const Activity& activity, std::chrono::steady_clock::time_point now) {
  const int64_t now_ns = nanoseconds(now);
  const int64_t interval_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(kAnswerInterval).count();
  if (now_ns - last_answer_ns_.load(std::memory_order_relaxed) < interval_ns) return;
  std::unique_lock<std::mutex> guard(mutex_, std::try_to_lock);
  if (!guard.owns_lock()) return;  // the holder answers
  last_answer_ns_.store(now_ns, std::memory_order_relaxed);
  answer_locked(activity);
}

PeerProbe::Result PeerProbe::probe(const std::vector<int>& peers, const Activity& self,
                                   std::chrono::milliseconds window,
                                   const std::atomic<bool>& aborted) {
  Result result;
  result.answers.resize(peers.size());
  for (size_t i = 0; i < peers.size(); ++i) result.answers[i].world_rank = peers[i];
  std::lock_guard<std::mutex> guard(mutex_);
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + window;
  try {
    const int64_t ping[kFields] = {++round_, 0, 0, 0, 0};
    for (const int peer : peers) send_locked(ping, peer, kPingTag);
    size_t answered = 0;
    while (answered < peers.size()) {
      answer_locked(self);
      int done = 0;
      MPI_Status status;
      {
        auto lock = runtime_->lock();
        ZS_MPI_CHECK(MPI_Test(&answer_request_, &done, &status), "the peer probe");
      }
      if (done) {
        const auto it = std::find(peers.begin(), peers.end(), status.MPI_SOURCE);
        if (answer_in_[0] == round_ && it != peers.end()) {
          Answer& answer = result.answers[static_cast<size_t>(it - peers.begin())];
          if (!answer.answered) ++answered;
          answer.answered = true;
          answer.activity =
              Activity{answer_in_[1], answer_in_[2], answer_in_[3], answer_in_[4] != 0};
        }
        // Otherwise an answer to an earlier probe, come late: read and dropped.
        auto lock = runtime_->lock();
        ZS_MPI_CHECK(MPI_Irecv(answer_in_, kFields, MPI_INT64_T, MPI_ANY_SOURCE, kAnswerTag,
                               comm_.get(), &answer_request_),
                     "the peer probe");
        continue;
      }
      if (aborted.load(std::memory_order_acquire)) {
        result.cut_short = true;
        break;
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) break;
      // Peers that wait answer within about a millisecond; the window is for loaded machines.
      if (now - start < std::chrono::milliseconds(2)) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
  } catch (const Error& e) {
    result.failure = e.what();
  }
  return result;
}

}  // namespace zs::comm
