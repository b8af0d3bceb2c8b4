// CommStats accounting and the closed-form traffic of each collective.
#include "comm/stats.h"

#include <cstdio>
#include <sstream>

#include "runtime/memory_tracker.h"

namespace zs::comm {

CollectiveStats& CollectiveStats::operator+=(const CollectiveStats& other) {
  calls += other.calls;
  bytes_sent += other.bytes_sent;
  bytes_received += other.bytes_received;
  bytes_copied += other.bytes_copied;
  seconds += other.seconds;
  return *this;
}

void CommStats::record(CollectiveKind kind, uint64_t bytes_sent, uint64_t bytes_received,
                       uint64_t bytes_copied, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  CollectiveStats& s = by_kind_[static_cast<int>(kind)];
  s.calls += 1;
  s.bytes_sent += bytes_sent;
  s.bytes_received += bytes_received;
  s.bytes_copied += bytes_copied;
  s.seconds += seconds;
}

CollectiveStats CommStats::get(CollectiveKind kind) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return by_kind_[static_cast<int>(kind)];
}

CollectiveStats CommStats::total() const {
  std::lock_guard<std::mutex> lock(mutex_);
  CollectiveStats t;
  for (const auto& s : by_kind_) t += s;
  return t;
}

void CommStats::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  by_kind_ = {};
}

std::string CommStats::table() const {
  std::ostringstream out;
  char line[160];
  std::snprintf(line, sizeof line, "  %-15s %8s %14s %14s %14s %10s\n", "collective", "calls",
                "sent", "received", "copied", "ms");
  out << line;
  for (int k = 0; k < kNumCollectiveKinds; ++k) {
    const CollectiveStats s = get(static_cast<CollectiveKind>(k));
    if (s.calls == 0) continue;
    std::snprintf(line, sizeof line, "  %-15s %8llu %14s %14s %14s %10.1f\n",
                  collective_name(static_cast<CollectiveKind>(k)),
                  static_cast<unsigned long long>(s.calls), format_bytes(s.bytes_sent).c_str(),
                  format_bytes(s.bytes_received).c_str(), format_bytes(s.bytes_copied).c_str(),
                  s.seconds * 1e3);
    out << line;
  }
  const CollectiveStats t = total();
  std::snprintf(line, sizeof line, "  %-15s %8llu %14s %14s %14s %10.1f\n", "total",
                static_cast<unsigned long long>(t.calls), format_bytes(t.bytes_sent).c_str(),
                format_bytes(t.bytes_received).c_str(), format_bytes(t.bytes_copied).c_str(),
                t.seconds * 1e3);
  out << line;
  return out.str();
}

Traffic collective_traffic(CollectiveKind kind, uint64_t bytes, int size, int rank, int root) {
  const uint64_t n = static_cast<uint64_t>(size);
  if (size <= 1) return {};
  Traffic t;
  switch (kind) {
    case CollectiveKind::kAllReduce:  // ring: reduce-scatter then all-gather
      t.sent = t.received = 2 * (n - 1) * bytes / n;
      break;
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:  // ring over the full buffer
      t.sent = t.received = (n - 1) * bytes / n;
      break;
    case CollectiveKind::kBroadcast: {  // a chain from the root: root → root+1 → …
      const int position = (rank - root + size) % size;
      t.sent = position == size - 1 ? 0 : bytes;
      t.received = position == 0 ? 0 : bytes;
      break;
    }
    case CollectiveKind::kGather:  // bytes = the gathered buffer
      t.sent = rank == root ? 0 : bytes / n;
      t.received = rank == root ? (n - 1) * bytes / n : 0;
      break;
    case CollectiveKind::kScatter:
      t.sent = rank == root ? (n - 1) * bytes / n : 0;
      t.received = rank == root ? 0 : bytes / n;
      break;
    case CollectiveKind::kSend:
      t.sent = bytes;
      break;
    case CollectiveKind::kRecv:
      t.received = bytes;
      break;
    case CollectiveKind::kBarrier:
    case CollectiveKind::kSplit:
      break;
  }
  return t;
}

}  // namespace zs::comm
