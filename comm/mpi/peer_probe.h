// PeerProbe: who is still there when an MPI collective times out (comm/mpi/mpi_backend.h).
//
// A timed-out collective by itself cannot say which peer is missing: every rank only sees that
// its own requests did not complete. So at the timeout the rank pings every peer of its group
// and waits a bounded time for the answers. The answer is not sent by a thread of its own but
// by the polling loop of whatever MPI call the peer is waiting in (MpiBackend::wait calls
// answer() about once a millisecond), and it says which call that is. Three outcomes per peer:
// - no answer within the window: the peer's process is dead, frozen, cut off from this one, or
//   outside every zeroshard MPI call (stuck in computation or I/O, or its communicator idle);
// - an answer naming the same call on the same group: it waits in this collective too (it
//   probes as well once its own deadline passes; both sides keep answering while they probe);
// - an answer naming another call: it is alive but stuck elsewhere (it skipped or reordered a
//   collective, or waits on another group).
// A merely slow peer that is polling its part of the collective answers and shows as alive.
//
// Traffic. The probe runs on a duplicate of MPI_COMM_WORLD of its own (made by
// MpiBackend::world with the world communicator), so a ping or an answer never matches a
// message of a collective or of the application. Each rank keeps two receives posted for its
// whole life (any source: a ping, an answer); a ping carries a round number that its answers
// echo, so a late answer to an earlier round is read and ignored. Sends (pings, answers) are
// kept with their payloads until they complete; at destruction the posted receives are
// cancelled and the sends still pending are released to MPI (MPI_Request_free), their payloads
// left to it. The world backend and every group split from it share one probe (shared_ptr);
// answers come only from backends of the same world() call.
//
// Thread-safety: every member function may be called from any thread. One mutex guards the
// requests; answer() only tries it (another thread answering or probing answers for it), and
// probe() holds it for its whole window while answering pings itself. MPI calls go through
// MpiRuntime::lock() (taken inside the mutex, never around it).
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/mpi/mpi_backend.h"

namespace zs::comm {

class PeerProbe {
 public:
  // What a rank is doing when it answers: the call it polls (kind and sequence number of its
  // communicator) on which group (MpiBackend's group id, the same on every member).
  struct Activity {
    int64_t kind = -1;
    int64_t sequence = -1;
    int64_t group = 0;
    bool timed_out = false;  // it is probing after that call timed out
  };
  // One peer's part of a probe result.
  struct Answer {
    int world_rank = -1;
    bool answered = false;
    Activity activity;
  };

  // `comm`: this probe's own duplicate of MPI_COMM_WORLD; `hosts`: the processor name of every
  // world rank (MPI_Get_processor_name). Posts the two standing receives.
  PeerProbe(std::shared_ptr<MpiRuntime> runtime, MpiComm comm, std::vector<std::string> hosts);
  ~PeerProbe();
  PeerProbe(const PeerProbe&) = delete;
  PeerProbe& operator=(const PeerProbe&) = delete;

  // Answers the pings that have arrived with `activity`; at most about once per millisecond
  // (cheaper calls return at once), and not at all while another thread holds the probe (it
  // answers instead). Throws CommError if MPI fails.
  void answer(const Activity& activity, std::chrono::steady_clock::time_point now);

  // Pings `peers` (world ranks) and waits up to `window` for their answers, answering pings
  // meanwhile as `self`. Returns early once every peer answered or `aborted` is set (then
  // `cut_short`). MPI failures do not throw: they end the probe and are described in `failure`.
  struct Result {
    std::vector<Answer> answers;  // one per peer, in the order of `peers`
    bool cut_short = false;
    std::string failure;
  };
  Result probe(const std::vector<int>& peers, const Activity& self,
               std::chrono::milliseconds window, const std::atomic<bool>& aborted);

  // MPI_Get_processor_name of world rank `world_rank`.
  const std::string& host(int world_rank) const { return hosts_[world_rank]; }

 private:
  static constexpr int kFields = 5;  // round, kind, sequence, group, timed_out
  struct Outgoing {
    MPI_Request request = MPI_REQUEST_NULL;
    int64_t payload[kFields] = {};
  };

  // With mutex_ held: answers every ping received so far and drops the sends that completed.
  void answer_locked(const Activity& activity);
  // With mutex_ held: an MPI_Isend of `payload` to `world_rank`, kept in outgoing_.
  void send_locked(const int64_t (&payload)[kFields], int world_rank, int tag);

  std::shared_ptr<MpiRuntime> runtime_;
  MpiComm comm_;
  std::vector<std::string> hosts_;
  std::mutex mutex_;
  std::atomic<int64_t> last_answer_ns_{0};
  int64_t round_ = 0;  // the latest probe's round; answers to other rounds are ignored
  int64_t ping_in_[kFields] = {};
  MPI_Request ping_request_ = MPI_REQUEST_NULL;
  int64_t answer_in_[kFields] = {};
  MPI_Request answer_request_ = MPI_REQUEST_NULL;
  std::list<Outgoing> outgoing_;  // a list: MPI holds the payloads' addresses
};

}  // namespace zs::comm
