// The TCP rendezvous that bootstraps NCCL without MPI (see tcp_rendezvous.h): POSIX sockets,
// non-blocking, every wait bounded by poll() against the caller's deadline.
#include "comm/tcp_rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <thread>

#include "comm/backend.h"
#include "runtime/error.h"

namespace zs::comm {

namespace {

constexpr uint32_t kMagic = 0x5A535256;  // "ZSRV"
constexpr uint32_t kVersion = 1;
enum class FrameKind : uint32_t { kHello = 1, kBlob = 2, kRefusal = 3 };
constexpr size_t kHeaderWords = 6;
constexpr size_t kHeaderBytes = kHeaderWords * sizeof(uint32_t);
// A peer gets this long to send its hello once connected: a real rank sends it at once, so
// waiting longer only keeps rank 0 from the next connection.
constexpr std::chrono::milliseconds kHelloWindow{5000};

struct Frame {
  uint32_t magic = kMagic;
  uint32_t version = kVersion;
  uint32_t kind = 0;
  uint32_t world_size = 0;
  uint32_t rank = 0;
  uint32_t length = 0;
};

std::string errno_text(int error) { return std::strerror(error); }

long long remaining_ms(Clock::time_point deadline) {
  return std::max<long long>(
      0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
}

void set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  ZS_CHECK_AS(CommError, flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0,
              "rendezvous: cannot make a socket non-blocking: ", errno_text(errno));
}

// Waits until `fd` is ready for `events` or the deadline passes; false at the deadline.
bool wait_ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd entry{fd, events, 0};
    const long long wait = remaining_ms(deadline);
    const int ready = ::poll(&entry, 1, static_cast<int>(std::min<long long>(wait, 1 << 30)));
    if (ready > 0) return true;
    if (ready == 0) {
      if (wait == 0) return false;
      continue;  // poll may return a little early; the deadline decides
    }
    ZS_CHECK_AS(CommError, errno == EINTR, "rendezvous: poll failed: ", errno_text(errno));
  }
}

enum class IoResult { kDone, kClosed, kTimedOut, kFailed };

// Writes all of `bytes`; never raises SIGPIPE (a peer that went away is kFailed).
IoResult write_all(int fd, const void* bytes, size_t size, Clock::time_point deadline) {
  const char* at = static_cast<const char*>(bytes);
  while (size > 0) {
    const ssize_t sent = ::send(fd, at, size, MSG_NOSIGNAL);
    if (sent > 0) {
      at += sent;
      size -= static_cast<size_t>(sent);
    } else if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_ready(fd, POLLOUT, deadline)) return IoResult::kTimedOut;
    } else if (sent < 0 && errno == EINTR) {
      continue;
    } else {
      return IoResult::kFailed;
    }
  }
  return IoResult::kDone;
}

IoResult read_all(int fd, void* bytes, size_t size, Clock::time_point deadline) {
  char* at = static_cast<char*>(bytes);
  while (size > 0) {
    const ssize_t got = ::recv(fd, at, size, 0);
    if (got > 0) {
      at += got;
      size -= static_cast<size_t>(got);
    } else if (got == 0) {
      return IoResult::kClosed;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_ready(fd, POLLIN, deadline)) return IoResult::kTimedOut;
    } else if (errno == EINTR) {
      continue;
    } else {
      return IoResult::kFailed;
    }
  }
  return IoResult::kDone;
}

std::array<uint32_t, kHeaderWords> encode(const Frame& frame) {
  return {htonl(frame.magic),      htonl(frame.version), htonl(frame.kind),
          htonl(frame.world_size), htonl(frame.rank),    htonl(frame.length)};
}

Frame decode(const std::array<uint32_t, kHeaderWords>& words) {
  return Frame{ntohl(words[0]), ntohl(words[1]), ntohl(words[2]),
               ntohl(words[3]), ntohl(words[4]), ntohl(words[5])};
}

IoResult send_frame(int fd, FrameKind kind, int world_size, int rank, const void* payload,
                    size_t length, Clock::time_point deadline) {
  Frame frame;
  frame.kind = static_cast<uint32_t>(kind);
  frame.world_size = static_cast<uint32_t>(world_size);
  frame.rank = static_cast<uint32_t>(rank);
  frame.length = static_cast<uint32_t>(length);
  const std::array<uint32_t, kHeaderWords> header = encode(frame);
  const IoResult sent = write_all(fd, header.data(), kHeaderBytes, deadline);
  if (sent != IoResult::kDone || length == 0) return sent;
  return write_all(fd, payload, length, deadline);
}

// "10.0.0.5:41234" for a connected socket's peer.
std::string peer_name(int fd) {
  sockaddr_storage address{};
  socklen_t size = sizeof(address);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0) return "?";
  if (address.ss_family == AF_INET6) {
    // An IPv4 peer of the dual-stack listener: name it as IPv4 ("10.0.0.5", not
    // "::ffff:10.0.0.5"), as the other ranks' MASTER_ADDR and logs do.
    const sockaddr_in6 v6 = *reinterpret_cast<sockaddr_in6*>(&address);
    if (IN6_IS_ADDR_V4MAPPED(&v6.sin6_addr)) {
      sockaddr_in v4{};
      v4.sin_family = AF_INET;
      v4.sin_port = v6.sin6_port;
      std::memcpy(&v4.sin_addr, &v6.sin6_addr.s6_addr[12], sizeof(v4.sin_addr));
      std::memcpy(&address, &v4, sizeof(v4));
      size = sizeof(v4);
    }
  }
  std::array<char, NI_MAXHOST> host{};
  std::array<char, NI_MAXSERV> service{};
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&address), size, host.data(), host.size(),
                    service.data(), service.size(), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  return std::string(host.data()) + ":" + service.data();
}

// A listening socket on every interface: IPv6 with IPv4-mapped addresses where the host has
// IPv6, else IPv4. SO_REUSEADDR lets a restarted job bind the port its previous run left in
// TIME_WAIT.
SocketFd listen_on(int port, int* bound_port) {
  ZS_CHECK(port >= 0 && port <= 65535, "rendezvous: port ", port, " is not in [0, 65535]");
  int last_error = 0;
  for (const int family : {AF_INET6, AF_INET}) {
    SocketFd fd(::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) {
      last_error = errno;
      continue;
    }
    const int on = 1;
    const int off = 0;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    sockaddr_storage address{};
    socklen_t size = 0;
    if (family == AF_INET6) {
      ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
      auto* v6 = reinterpret_cast<sockaddr_in6*>(&address);
      v6->sin6_family = AF_INET6;
      v6->sin6_addr = in6addr_any;
      v6->sin6_port = htons(static_cast<uint16_t>(port));
      size = sizeof(sockaddr_in6);
    } else {
      auto* v4 = reinterpret_cast<sockaddr_in*>(&address);
      v4->sin_family = AF_INET;
      v4->sin_addr.s_addr = htonl(INADDR_ANY);
      v4->sin_port = htons(static_cast<uint16_t>(port));
      size = sizeof(sockaddr_in);
    }
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), size) != 0) {
      last_error = errno;
      // In use or forbidden is the same answer for both families; anything else (IPv6 disabled
      // on the host) falls back to IPv4.
      if (last_error == EADDRINUSE || last_error == EACCES) break;
      continue;
    }
    ZS_CHECK_AS(CommError, ::listen(fd.get(), SOMAXCONN) == 0, "rendezvous: listen on port ", port,
                " failed: ", errno_text(errno));
    set_nonblocking(fd.get());
    size = sizeof(address);
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &size);
    *bound_port =
        ntohs(address.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&address)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&address)->sin_port);
    return fd;
  }
  ZS_THROW(CommError, "rank 0 cannot listen for the rendezvous on port ", port, ": ",
           errno_text(last_error),
           last_error == EADDRINUSE
               ? "; another program (or another job, or torchrun's own store) holds that port on "
                 "this host: pick a free one with ZS_RENDEZVOUS_PORT (or torchrun --master-port)"
               : "; pick another port with ZS_RENDEZVOUS_PORT (or torchrun --master-port)");
}

// One connection attempt to host:port; an invalid fd (and `error` set) if it failed.
SocketFd try_connect(const std::string& host, int port, Clock::time_point deadline,
                     std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int resolved = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
  if (resolved != 0) {
    *error = std::string("cannot resolve the host name: ") + ::gai_strerror(resolved);
    return SocketFd();
  }
  SocketFd connected;
  for (addrinfo* at = found; at != nullptr && !connected.valid(); at = at->ai_next) {
    SocketFd fd(::socket(at->ai_family, at->ai_socktype | SOCK_CLOEXEC, at->ai_protocol));
    if (!fd.valid()) {
      *error = errno_text(errno);
      continue;
    }
    set_nonblocking(fd.get());
    if (::connect(fd.get(), at->ai_addr, at->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        *error = errno_text(errno);
        continue;
      }
      if (!wait_ready(fd.get(), POLLOUT, deadline)) {
        *error = "connecting timed out";
        continue;
      }
      int status = 0;
      socklen_t size = sizeof(status);
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &status, &size);
      if (status != 0) {
        *error = errno_text(status);
        continue;
      }
    }
    connected = std::move(fd);
  }
  ::freeaddrinfo(found);
  return connected;
}

std::string endpoint(const std::string& host, int port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(port);
}

void check_spec(const RendezvousSpec& spec) {
  ZS_CHECK(spec.world_size >= 1 && spec.rank >= 0 && spec.rank < spec.world_size,
           "rendezvous: rank ", spec.rank, " of world size ", spec.world_size, " is out of range");
  ZS_CHECK(spec.port >= 0 && spec.port <= 65535, "rendezvous: port ", spec.port,
           " is not in [0, 65535]");
}

// What rank 0 holds for a joined rank.
struct Joined {
  SocketFd fd;
  std::string peer;
};

}  // namespace

RendezvousServer::RendezvousServer(int port) {
  // In the body: port_ is set by listen_on, after the members are initialized.
  listener_ = listen_on(port, &port_);
}

void RendezvousServer::serve(const std::vector<uint8_t>& blob, int world_size,
                             std::chrono::milliseconds timeout) {
  ZS_CHECK(world_size >= 1, "rendezvous: world size ", world_size, " must be at least 1");
  ZS_CHECK(blob.size() <= kMaxRendezvousBlob, "rendezvous: a blob of ", blob.size(),
           " bytes is larger than the protocol's ", kMaxRendezvousBlob);
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  std::vector<Joined> joined(static_cast<size_t>(world_size));
  int count = 1;  // rank 0 itself
  // A fatal problem reaches every rank already connected (best effort), then rank 0 throws it.
  const auto refuse_all = [&](const std::string& reason, int extra_fd, int extra_rank) {
    const auto soon = std::min(deadline, Clock::now() + std::chrono::milliseconds(1000));
    for (size_t r = 1; r < joined.size(); ++r) {
      if (!joined[r].fd.valid()) continue;
      send_frame(joined[r].fd.get(), FrameKind::kRefusal, world_size, static_cast<int>(r),
                 reason.data(), reason.size(), soon);
    }
    if (extra_fd >= 0) {
      send_frame(extra_fd, FrameKind::kRefusal, world_size, extra_rank, reason.data(),
                 reason.size(), soon);
    }
  };
  while (count < world_size) {
    if (!wait_ready(listener_.get(), POLLIN, deadline)) {
      std::string missing;
      for (int r = 1; r < world_size; ++r) {
        if (!joined[static_cast<size_t>(r)].fd.valid()) {
          missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        }
      }
      const std::string reason = detail::concat(
          "rank 0 waited ", timeout.count(), " ms on port ", port_, " for ", world_size - 1,
          " rank(s) to join the rendezvous, but rank(s) ", missing,
          " never came. Start every rank with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE; "
          "check that those hosts can reach this one on that port (firewall) and did not fail "
          "before joining (their logs), or raise the timeout (zs-train --comm-timeout, "
          "ZS_COMM_TIMEOUT_S) if they start late");
      refuse_all(reason, -1, 0);
      ZS_THROW(CommTimeout, reason);
    }
    SocketFd peer(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!peer.valid()) {
      ZS_CHECK_AS(
          CommError,
          errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED,
          "rank 0: accepting a rendezvous connection on port ", port_,
          " failed: ", errno_text(errno));
      continue;
    }
    const std::string name = peer_name(peer.get());
    std::array<uint32_t, kHeaderWords> words{};
    const IoResult got = read_all(peer.get(), words.data(), kHeaderBytes,
                                  std::min(deadline, Clock::now() + kHelloWindow));
    const Frame hello = decode(words);
    std::string reason;
    bool speaks_protocol = false;
    if (got != IoResult::kDone || hello.magic != kMagic) {
      reason = detail::concat(
          "rank 0's rendezvous on port ", port_, " got a connection from ", name,
          got == IoResult::kDone ? " that does not speak zeroshard's rendezvous protocol"
                                 : " that sent no rendezvous hello",
          ": another program is using this port (another job, or torchrun's store). Pick a port "
          "nothing else uses with ZS_RENDEZVOUS_PORT (or torchrun --master-port) on every rank");
    } else if (hello.version != kVersion) {
      speaks_protocol = true;
      reason = detail::concat("rank 0's rendezvous on port ", port_, " got protocol version ",
                              hello.version, " from ", name, ", but speaks version ", kVersion,
                              ": run the same zeroshard build on every rank");
    } else if (hello.kind != static_cast<uint32_t>(FrameKind::kHello) || hello.length != 0) {
      speaks_protocol = true;
      reason = detail::concat("rank 0's rendezvous on port ", port_, " got a malformed hello from ",
                              name, " (kind ", hello.kind, ", length ", hello.length,
                              "): run the same zeroshard build on every rank");
    } else if (hello.world_size != static_cast<uint32_t>(world_size)) {
      speaks_protocol = true;
      reason = detail::concat("rank ", hello.rank, " (", name, ") joined the rendezvous on port ",
                              port_, " with world size ", hello.world_size,
                              ", but rank 0 has world size ", world_size,
                              ": every rank must be started with the same WORLD_SIZE (torchrun "
                              "--nnodes and --nproc-per-node the same on every node)");
    } else if (hello.rank < 1 || hello.rank >= static_cast<uint32_t>(world_size)) {
      speaks_protocol = true;
      reason = detail::concat("a peer at ", name, " joined the rendezvous on port ", port_,
                              " as rank ", hello.rank, ", which is not in [1, ", world_size - 1,
                              "]", hello.rank == 0 ? " (two processes have RANK=0)" : "",
                              ": every process needs its own RANK below WORLD_SIZE");
    } else if (joined[hello.rank].fd.valid()) {
      speaks_protocol = true;
      reason = detail::concat("rank ", hello.rank, " joined the rendezvous on port ", port_,
                              " twice: from ", joined[hello.rank].peer, " and from ", name,
                              ": two processes have RANK=", hello.rank,
                              "; every process needs its own RANK (check --node-rank / "
                              "--nnodes of each torchrun)");
    }
    if (!reason.empty()) {
      refuse_all(reason, speaks_protocol ? peer.get() : -1, static_cast<int>(hello.rank));
      ZS_THROW(CommError, reason);
    }
    joined[hello.rank] = Joined{std::move(peer), name};
    ++count;
  }
  for (int r = 1; r < world_size; ++r) {
    Joined& peer = joined[static_cast<size_t>(r)];
    const IoResult sent = send_frame(peer.fd.get(), FrameKind::kBlob, world_size, r, blob.data(),
                                     blob.size(), deadline);
    ZS_CHECK_AS(CommError, sent == IoResult::kDone, "rank 0 could not send the rendezvous blob to ",
                "rank ", r, " at ", peer.peer,
                sent == IoResult::kTimedOut ? ": timed out" : ": the connection failed",
                "; that rank probably stopped (see its log)");
    peer.fd = SocketFd();  // closed: the exchange is over for this rank
  }
}

std::vector<uint8_t> fetch_rendezvous_blob(const RendezvousSpec& spec) {
  check_spec(spec);
  ZS_CHECK(spec.rank != 0, "rendezvous: rank 0 serves the blob; it does not fetch it");
  const auto deadline = Clock::now() + spec.timeout;
  const std::string where = endpoint(spec.host, spec.port);
  std::string last_error = "no attempt finished";
  SocketFd fd;
  auto pause = std::chrono::milliseconds(20);
  for (;;) {
    fd = try_connect(spec.host, spec.port, deadline, &last_error);
    if (fd.valid() || Clock::now() >= deadline) break;
    // Rank 0 may not listen yet: retry, backing off to at most 1 s between attempts.
    std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(
        pause, std::chrono::milliseconds(remaining_ms(deadline))));
    pause = std::min(pause * 2, std::chrono::milliseconds(1000));
  }
  ZS_CHECK_AS(CommTimeout, fd.valid(), "rank ", spec.rank, " of ", spec.world_size,
              " could not reach rank 0's rendezvous at ", where, " within ", spec.timeout.count(),
              " ms (last error: ", last_error,
              "). Rank 0 listens there once it starts: check that rank 0 is running, that "
              "MASTER_ADDR and MASTER_PORT are the same on every rank and reachable from this "
              "host (no firewall between the nodes), or raise the timeout (zs-train "
              "--comm-timeout, ZS_COMM_TIMEOUT_S) if rank 0 starts "
              "late");
  const IoResult said =
      send_frame(fd.get(), FrameKind::kHello, spec.world_size, spec.rank, nullptr, 0, deadline);
  ZS_CHECK_AS(CommError, said == IoResult::kDone, "rank ", spec.rank,
              " could not send its hello to rank 0's rendezvous at ", where,
              "; rank 0 closed the connection (see its log)");
  std::array<uint32_t, kHeaderWords> words{};
  const IoResult got = read_all(fd.get(), words.data(), kHeaderBytes, deadline);
  ZS_CHECK_AS(CommTimeout, got != IoResult::kTimedOut, "rank ", spec.rank, " of ", spec.world_size,
              " joined the rendezvous at ", where, ", but rank 0 did not send the blob within ",
              spec.timeout.count(),
              " ms: some other rank has not joined (rank 0's log names them); start every rank, "
              "or raise the timeout (zs-train --comm-timeout, ZS_COMM_TIMEOUT_S)");
  ZS_CHECK_AS(CommError, got == IoResult::kDone, "rank ", spec.rank, ": rank 0's rendezvous at ",
              where,
              " closed the connection before sending the blob: rank 0 refused this job or "
              "failed (see rank 0's log)");
  const Frame reply = decode(words);
  ZS_CHECK_AS(CommError, reply.magic == kMagic && reply.version == kVersion, "rank ", spec.rank,
              ": the server at ", where,
              " does not speak zeroshard's rendezvous protocol (version ", kVersion,
              "): MASTER_PORT names a port another program uses; pick a free one");
  ZS_CHECK_AS(CommError, reply.length <= kMaxRendezvousBlob, "rank ", spec.rank,
              ": rank 0's rendezvous at ", where, " announced ", reply.length,
              " bytes, more than the protocol's ", kMaxRendezvousBlob);
  std::vector<uint8_t> payload(reply.length);
  const IoResult body = read_all(fd.get(), payload.data(), payload.size(), deadline);
  ZS_CHECK_AS(CommError, body == IoResult::kDone, "rank ", spec.rank, ": rank 0's rendezvous at ",
              where, " stopped in the middle of its reply");
  if (reply.kind == static_cast<uint32_t>(FrameKind::kRefusal)) {
    ZS_THROW(CommError, "rank ", spec.rank, ": rank 0's rendezvous at ", where,
             " refused: ", std::string(payload.begin(), payload.end()));
  }
  ZS_CHECK_AS(CommError,
              reply.kind == static_cast<uint32_t>(FrameKind::kBlob) &&
                  reply.world_size == static_cast<uint32_t>(spec.world_size) &&
                  reply.rank == static_cast<uint32_t>(spec.rank),
              "rank ", spec.rank, ": rank 0's rendezvous at ", where,
              " sent an unexpected frame (kind ", reply.kind, ", world size ", reply.world_size,
              ", rank ", reply.rank, "): run the same zeroshard build on every rank");
  return payload;
}

std::vector<uint8_t> exchange_rendezvous_blob(const RendezvousSpec& spec,
                                              const std::vector<uint8_t>& blob) {
  check_spec(spec);
  if (spec.rank != 0) return fetch_rendezvous_blob(spec);
  if (spec.world_size > 1) RendezvousServer(spec.port).serve(blob, spec.world_size, spec.timeout);
  return blob;
}

}  // namespace zs::comm
