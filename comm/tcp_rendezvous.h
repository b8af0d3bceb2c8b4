// A small TCP rendezvous: rank 0 hands one byte blob to every other rank of a job whose launcher
// (torchrun) gives no MPI. It exists to bootstrap NCCL — the blob is the 128-byte ncclUniqueId,
// after which NCCL forms its own connections and carries all traffic. zeroshard never carries
// training traffic over these sockets; each rank's connection is closed right after the exchange.
//
// Rank 0 listens (RendezvousServer, on all interfaces at the given port); ranks 1..N-1 connect to
// the host and port with retries until the timeout (rank 0 may start later than they do). Each
// connection carries one framed message each way; a frame is six big-endian uint32 — magic
// "ZSRV", protocol version, kind (hello / blob / refusal), world size, rank, payload length —
// followed by the payload:
//   rank r → rank 0:  hello   (its world size and rank, no payload)
//   rank 0 → rank r:  blob    (once ranks 1..N-1 have all said hello; payload = the blob), or
//                     refusal (payload = the reason, which rank r then throws too).
// Rank 0 sends the blobs only when every rank has joined, so the exchange is also a barrier: a
// rank that returns knows the whole world has started. Errors name the address, the rank and what
// to do: a peer that does not speak this protocol (another program on the port), a different
// protocol version, a world size that differs from rank 0's, a rank out of range or joined twice
// are CommError on rank 0 and, through a refusal, on every rank already connected; a rank that
// cannot reach rank 0 in time, or rank 0 waiting in vain for some ranks, is CommTimeout.
//
// Threading: the functions are reentrant (no shared state); a RendezvousServer is used by one
// thread. Tests run all ranks as threads of one process over 127.0.0.1.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/types.h"
#include "runtime/file_system.h"

namespace zs::comm {

// Where rank 0's rendezvous is and who this rank is.
struct RendezvousSpec {
  std::string host;  // rank 0's host name or address, as the other ranks dial it
  int port = 0;      // rank 0's port
  int rank = 0;
  int world_size = 1;
  // Bounds the whole exchange on every rank (connecting with retries, waiting for the others).
  std::chrono::milliseconds timeout = default_timeout();
};

// An owned socket, closed on destruction (move-only): the runtime's file descriptor.
using SocketFd = zs::detail::FileDescriptor;

// Rank 0's side. The socket listens from construction, so ranks that connect before serve() runs
// wait in the backlog, and a port of 0 takes a free port (port() says which).
class RendezvousServer {
 public:
  // Listens on every interface (IPv6 and IPv4 where the host has IPv6, else IPv4) at `port`.
  // Throws CommError if the port cannot be bound (in use, privileged), naming it.
  explicit RendezvousServer(int port);

  int port() const { return port_; }

  // Waits for ranks 1..world_size-1 to say hello, then sends each of them `blob` and closes their
  // connections. Throws CommTimeout (naming the ranks that never joined) or CommError (above).
  void serve(const std::vector<uint8_t>& blob, int world_size, std::chrono::milliseconds timeout);

 private:
  SocketFd listener_;
  int port_ = 0;
};

// Ranks 1..N-1: connects to spec.host:spec.port (retrying until spec.timeout), says hello and
// returns the blob rank 0 sends.
std::vector<uint8_t> fetch_rendezvous_blob(const RendezvousSpec& spec);

// Either side: rank 0 listens on spec.port, serves `blob` and returns it; every other rank
// returns what rank 0 sent (its `blob` is ignored).
std::vector<uint8_t> exchange_rendezvous_blob(const RendezvousSpec& spec,
                                              const std::vector<uint8_t>& blob);

// The largest blob the protocol carries (a length above it is a garbled frame).
constexpr uint32_t kMaxRendezvousBlob = 1u << 20;

}  // namespace zs::comm
