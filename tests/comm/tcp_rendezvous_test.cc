// The TCP rendezvous that bootstraps NCCL under torchrun (comm/tcp_rendezvous.h), run with every
// rank as a thread of this process over 127.0.0.1: the blob reaches every rank, ranks that start
// before rank 0 retry, and a wrong world size, a duplicate rank, a stray connection and an absent
// rank 0 fail with messages that name the address, the rank and what to do. Ports: rank 0 binds
// port 0 (a free port) where it can; where a test needs the port before rank 0 exists, a probe
// socket binds port 0 first, so concurrent tests never share one.
#include "comm/tcp_rendezvous.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/error.h"
#include "tests/support/error_text.h"
#include "tests/support/threads.h"

namespace zs::comm {
namespace {

using testing::contains;
using testing::error_message;
using testing::run_threads;

// A port nothing listens on right now: bound with port 0, read back, closed.
int free_port() {
  SocketFd probe(::socket(AF_INET, SOCK_STREAM, 0));
  EXPECT_TRUE(probe.valid());
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  EXPECT_EQ(::bind(probe.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  socklen_t size = sizeof(address);
  ::getsockname(probe.get(), reinterpret_cast<sockaddr*>(&address), &size);
  return ntohs(address.sin_port);
}

// A plain TCP connection to 127.0.0.1:port (invalid if it fails), to speak to rank 0 by hand.
SocketFd connect_raw(int port) {
  SocketFd fd(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    return SocketFd();
  }
  return fd;
}

std::vector<uint8_t> unique_id_like() {
  std::vector<uint8_t> blob(128);  // the size of an ncclUniqueId
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<uint8_t>(i * 37 + 11);
  return blob;
}

RendezvousSpec spec_for(int port, int rank, int world_size, std::chrono::milliseconds timeout) {
  RendezvousSpec spec;
  spec.host = "127.0.0.1";
  spec.port = port;
  spec.rank = rank;
  spec.world_size = world_size;
  spec.timeout = timeout;
  return spec;
}

class RendezvousWorld : public ::testing::TestWithParam<int> {};

TEST_P(RendezvousWorld, EveryRankGetsRankZerosBlob) {
  const int world = GetParam();
  const std::vector<uint8_t> blob = unique_id_like();
  RendezvousServer server(0);
  ASSERT_GT(server.port(), 0);
  std::vector<std::vector<uint8_t>> got(static_cast<size_t>(world));
  run_threads(world, [&](int rank) {
    if (rank == 0) {
      server.serve(blob, world, std::chrono::seconds(20));
      got[0] = blob;
    } else {
      got[static_cast<size_t>(rank)] =
          fetch_rendezvous_blob(spec_for(server.port(), rank, world, std::chrono::seconds(20)));
    }
  });
  for (int rank = 0; rank < world; ++rank) {
    EXPECT_EQ(got[static_cast<size_t>(rank)], blob) << "rank " << rank;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, RendezvousWorld, ::testing::Values(1, 2, 4));

TEST(Rendezvous, ExchangeOnEveryRankIncludingALateRankZero) {
  // The other ranks start first and retry (connection refused) until rank 0 listens.
  const int world = 4;
  const int port = free_port();
  const std::vector<uint8_t> blob = unique_id_like();
  std::vector<std::vector<uint8_t>> got(world);
  run_threads(world, [&](int rank) {
    if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(400));
    got[static_cast<size_t>(rank)] =
        exchange_rendezvous_blob(spec_for(port, rank, world, std::chrono::seconds(20)),
                                 rank == 0 ? blob : std::vector<uint8_t>{9, 9, 9});
  });
  for (int rank = 0; rank < world; ++rank) {
    EXPECT_EQ(got[static_cast<size_t>(rank)], blob) << "rank " << rank;
  }
}

TEST(Rendezvous, ExchangeOnARankOfOneNeedsNoSocket) {
  const std::vector<uint8_t> blob = unique_id_like();
  // Port 1 is privileged: binding it would fail, so this also shows nothing is bound.
  EXPECT_EQ(exchange_rendezvous_blob(spec_for(1, 0, 1, std::chrono::seconds(1)), blob), blob);
}

// Rank 0 serving a world of `world_size` within `timeout` on one thread, and each of `peers`
// (given rank 0's port) on a thread of its own; the message of the CommError (or CommTimeout)
// rank 0 throws, "" if it served. `*port` (if given) receives rank 0's port.
std::string serve_against(int world_size, std::chrono::milliseconds timeout,
                          const std::vector<std::function<void(int port)>>& peers,
                          int* port = nullptr) {
  RendezvousServer server(0);
  if (port) *port = server.port();
  std::string error;
  run_threads(1 + static_cast<int>(peers.size()), [&](int thread) {
    if (thread == 0) {
      error =
          error_message<CommError>([&] { server.serve(unique_id_like(), world_size, timeout); });
    } else {
      peers[static_cast<size_t>(thread - 1)](server.port());
    }
  });
  return error;
}

// A peer that fetches as `rank` of `world_size` after `delay`, keeping what it throws.
std::function<void(int)> fetching_peer(int rank, int world_size, std::string* error,
                                       std::chrono::milliseconds delay = {}) {
  return [=](int port) {
    std::this_thread::sleep_for(delay);
    *error = error_message<CommError>(
        [&] { fetch_rendezvous_blob(spec_for(port, rank, world_size, std::chrono::seconds(20))); });
  };
}

// A peer that connects and sends `bytes` as they are, then waits for rank 0 to close.
std::function<void(int)> raw_peer(std::vector<char> bytes) {
  return [bytes](int port) {
    const SocketFd fd = connect_raw(port);
    ASSERT_TRUE(fd.valid());
    ASSERT_EQ(::send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
    char reply[256];
    (void)::recv(fd.get(), reply, sizeof(reply), 0);  // a refusal or nothing, then the close
  };
}

TEST(Rendezvous, WrongWorldSizeIsRefusedOnBothSides) {
  std::string client_error;
  int port = 0;
  const std::string server_error =
      serve_against(2, std::chrono::seconds(20), {fetching_peer(1, 3, &client_error)}, &port);
  EXPECT_TRUE(contains(server_error, "rank 1 (127.0.0.1:")) << server_error;
  EXPECT_TRUE(contains(server_error, "with world size 3, but rank 0 has world size 2"))
      << server_error;
  EXPECT_TRUE(contains(server_error, "same WORLD_SIZE")) << server_error;
  EXPECT_TRUE(contains(client_error, "rank 1: rank 0's rendezvous at 127.0.0.1:" +
                                         std::to_string(port) + " refused: "))
      << client_error;
  EXPECT_TRUE(contains(client_error, "with world size 3, but rank 0 has world size 2"))
      << client_error;
}

TEST(Rendezvous, DuplicateRankIsRefused) {
  // Both claim rank 1; the second one only once the first has surely joined.
  std::vector<std::string> client_errors(2);
  int port = 0;
  const std::string server_error =
      serve_against(3, std::chrono::seconds(20),
                    {fetching_peer(1, 3, &client_errors[0]),
                     fetching_peer(1, 3, &client_errors[1], std::chrono::milliseconds(300))},
                    &port);
  EXPECT_TRUE(contains(server_error, "rank 1 joined the rendezvous on port " +
                                         std::to_string(port) + " twice: from 127.0.0.1:"))
      << server_error;
  EXPECT_TRUE(contains(server_error, "two processes have RANK=1")) << server_error;
  for (const std::string& error : client_errors) {
    EXPECT_TRUE(contains(error, "refused: rank 1 joined the rendezvous")) << error;
  }
}

TEST(Rendezvous, RankOutOfRangeIsRefused) {
  // A second process with RANK=0 that dials rank 0: fetch_rendezvous_blob refuses rank 0 itself,
  // so the hello (magic, version 1, kind hello, world 2, rank 0, length 0) is written by hand.
  const uint32_t hello[6] = {htonl(0x5A535256), htonl(1), htonl(1), htonl(2), htonl(0), 0};
  const auto* bytes = reinterpret_cast<const char*>(hello);
  const std::string server_error = serve_against(
      2, std::chrono::seconds(20), {raw_peer(std::vector<char>(bytes, bytes + sizeof(hello)))});
  EXPECT_TRUE(
      contains(server_error, "as rank 0, which is not in [1, 1] (two processes have RANK=0)"))
      << server_error;
}

TEST(Rendezvous, StrayConnectionIsAnErrorNamingThePeer) {
  const std::string request = "GET / HTTP/1.0\r\nHost: x\r\n\r\n";
  const std::string server_error = serve_against(
      2, std::chrono::seconds(20), {raw_peer(std::vector<char>(request.begin(), request.end()))});
  EXPECT_TRUE(contains(server_error, "got a connection from 127.0.0.1:")) << server_error;
  EXPECT_TRUE(contains(server_error, "does not speak zeroshard's rendezvous protocol"))
      << server_error;
  EXPECT_TRUE(contains(server_error, "ZS_RENDEZVOUS_PORT")) << server_error;
}

TEST(Rendezvous, ARankWaitsForRankZeroOnlyUntilTheTimeout) {
  const int port = free_port();
  const auto start = std::chrono::steady_clock::now();
  const std::string error = error_message<CommTimeout>(
      [&] { fetch_rendezvous_blob(spec_for(port, 2, 4, std::chrono::milliseconds(600))); });
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(contains(error, "rank 2 of 4 could not reach rank 0's rendezvous at 127.0.0.1:" +
                                  std::to_string(port) + " within 600 ms"))
      << error;
  EXPECT_TRUE(contains(error, "Connection refused")) << error;
  EXPECT_TRUE(contains(error, "MASTER_ADDR and MASTER_PORT")) << error;
  EXPECT_GE(waited, std::chrono::milliseconds(500));
  EXPECT_LT(waited, std::chrono::seconds(10));
}

TEST(Rendezvous, RankZeroNamesTheRanksThatNeverJoined) {
  std::string client_error;
  const std::string server_error =
      serve_against(4, std::chrono::milliseconds(800), {fetching_peer(2, 4, &client_error)});
  EXPECT_TRUE(contains(server_error, "rank(s) 1, 3 never came")) << server_error;
  EXPECT_TRUE(contains(server_error, "waited 800 ms")) << server_error;
  // The rank that did join learns why it gets no blob.
  EXPECT_TRUE(contains(client_error, "refused: rank 0 waited 800 ms")) << client_error;
}

TEST(Rendezvous, APortInUseIsNamed) {
  RendezvousServer first(0);
  const std::string error =
      error_message<CommError>([&] { RendezvousServer second(first.port()); });
  EXPECT_TRUE(
      contains(error, "cannot listen for the rendezvous on port " + std::to_string(first.port())))
      << error;
  EXPECT_TRUE(contains(error, "ZS_RENDEZVOUS_PORT")) << error;
}

}  // namespace
}  // namespace zs::comm
