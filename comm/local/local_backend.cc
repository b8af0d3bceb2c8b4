// The local backend: rendezvous in shared slots, direct reads of peers' buffers, eager
// mailboxes for send/recv, and run_local_ranks.
//
// Buffer lifetime is the delicate part. A rank's buffers may be freed as soon as its call
// returns (normally or by exception), so no peer may be reading them then. The protocol:
// - Arrival is decided under the group mutex. The last rank to arrive "commits" the collective
//   (committed_generation_). A rank that gives up waiting (timeout, abort) retracts its arrival
//   under the same mutex, so a collective either commits with every rank inside it or never
//   commits, and no rank reads a peer's buffer before it has committed.
// - After the commit only bounded memory work remains on every rank (no rank waits for anything
//   outside the collective), so the later rendezvous (the all_reduce middle step, the final
//   "everyone has finished reading") wait without a deadline and ignore abort: a committed
//   collective always completes, and a rank returns only when no peer reads its buffers.
// - send/recv: a posted recv is claimed by the sender under the mailbox mutex before the copy,
//   and a receiver only gives up while its posting is unclaimed.
#include "comm/local/local_backend.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <sstream>
#include <thread>
#include <type_traits>

#include "comm/reduce.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace zs::comm {
namespace {

// all_reduce slices start on multiples of this many elements (64 bytes of fp16/bf16).
constexpr size_t kSliceAlign = 32;
// Brief spin before blocking: a peer usually arrives within microseconds, and a futex sleep and
// wake costs more than that. The spin yields the core on every turn (2-core machines run more
// rank threads than cores).
constexpr auto kSpinTime = std::chrono::microseconds(50);

// ---------------------------------------------------------------------------------------------
// Shared state.

// What a rank posts when it enters a group collective.
struct Posting {
  CollectiveKind kind = CollectiveKind::kBarrier;
  uint64_t sequence = 0;
  size_t count = 0;
  DType dtype = DType::kF32;
  int root = -1;  // broadcast, gather, scatter
  int op = -1;    // all_reduce, reduce_scatter: the ReduceOp
  const void* in = nullptr;
  void* out = nullptr;
  int color = 0;  // split
  int key = 0;
};

std::string describe(const Posting& p) {
  std::ostringstream out;
  out << collective_name(p.kind) << " #" << p.sequence;
  switch (p.kind) {
    case CollectiveKind::kBarrier:
      break;
    case CollectiveKind::kSplit:
      out << " (color " << p.color << ", key " << p.key << ")";
      break;
    default:
      out << " (" << p.count << " " << dtype_name(p.dtype);
      if (p.kind == CollectiveKind::kAllGather || p.kind == CollectiveKind::kReduceScatter ||
          p.kind == CollectiveKind::kGather || p.kind == CollectiveKind::kScatter) {
        out << " per rank";
      }
      if (p.op >= 0) out << ", " << reduce_op_name(static_cast<ReduceOp>(p.op));
      if (p.root >= 0) out << ", root " << p.root;
      out << ")";
      break;
  }
  return out.str();
}

bool same_call(const Posting& a, const Posting& b) {
  if (a.kind != b.kind) return false;
  if (a.kind == CollectiveKind::kSplit || a.kind == CollectiveKind::kBarrier) return true;
  return a.count == b.count && a.dtype == b.dtype && a.root == b.root && a.op == b.op;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream out;
  for (size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : "") << ranks[i];
  return out.str();
}

class LocalGroupImpl;

struct alignas(64) Slot {
  // Written under LocalGroupImpl::mutex_; read by peers once the collective has committed.
  uint64_t arrived = 0;  // generation of the last group collective this rank has entered
  uint64_t gave_up = 0;  // generation this rank stopped waiting for (timeout, abort), if any
  Posting postings[2];   // by generation parity (a rank is at most one generation ahead)
  // Written by rank 0 during a split before its sync(), read by this rank after it.
  std::shared_ptr<LocalGroupImpl> split_group;
  int split_rank = -1;
  // Post-commit rendezvous count (see LocalBackend::sync).
  std::atomic<uint64_t> phase{0};
  // The last call this rank issued on the group (collective or point-to-point), for timeout
  // messages; kind -1 = none yet.
  std::atomic<int> last_kind{-1};
  std::atomic<uint64_t> last_sequence{0};
};

// One message in flight from a sender to a receiver.
struct Message {
  std::vector<char> bytes;
  size_t count;
  DType dtype;
  uint64_t sequence;
};

// A recv waiting for its data. States: waiting → claimed (a sender is copying) → done/error.
struct PostedRecv {
  enum State { kWaiting, kClaimed, kDone, kError };
  void* data = nullptr;
  size_t count = 0;
  DType dtype = DType::kF32;
  uint64_t sequence = 0;
  State state = kWaiting;
  std::string error;
};

struct Channel {
  std::deque<Message> messages;
  PostedRecv* posted = nullptr;  // invariant: messages is empty while a recv is posted
};

class LocalGroupImpl final : public LocalGroup,
                             public std::enable_shared_from_this<LocalGroupImpl> {
 public:
  explicit LocalGroupImpl(int size)
      : size_(size),
        slots_(new Slot[static_cast<size_t>(size)]),
        claimed_(static_cast<size_t>(size), false),
        channels_(static_cast<size_t>(size) * static_cast<size_t>(size)) {}

  int size() const override { return size_; }
  std::unique_ptr<Backend> backend(int rank) override;
  void abort(const std::string& reason) override { abort_from(reason, -1); }
  bool aborted() const override { return aborted_.load(std::memory_order_acquire); }

  // Aborts this group and the groups split from it; `origin` is the aborting rank or -1.
  void abort_from(const std::string& reason, int origin) {
    std::vector<std::weak_ptr<LocalGroupImpl>> children;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (aborted_.load(std::memory_order_relaxed)) return;
      abort_reason_ = reason;
      abort_origin_ = origin;
      children = children_;
      std::lock_guard<std::mutex> p2p_lock(p2p_mutex_);
      aborted_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
    p2p_cv_.notify_all();
    for (auto& weak : children) {
      if (auto child = weak.lock()) child->abort_from(reason, -1);
    }
  }
  std::string abort_reason() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return abort_reason_;
  }
  int abort_origin() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return abort_origin_;
  }

  Slot& slot(int rank) { return slots_[static_cast<size_t>(rank)]; }
  Channel& channel(int from, int to) {
    return channels_[static_cast<size_t>(from) * static_cast<size_t>(size_) +
                     static_cast<size_t>(to)];
  }
  void add_child(const std::shared_ptr<LocalGroupImpl>& child) {
    bool abort_child = false;
    std::string reason;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      children_.push_back(child);
      abort_child = aborted_.load(std::memory_order_relaxed);
      reason = abort_reason_;
    }
    if (abort_child) child->abort_from(reason, -1);
  }

  const int size_;
  std::unique_ptr<Slot[]> slots_;

  // Rendezvous of group collectives.
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::atomic<uint64_t> committed_generation_{0};

  std::atomic<bool> aborted_{false};
  std::string abort_reason_;                             // guarded by mutex_
  int abort_origin_ = -1;                                // guarded by mutex_
  std::vector<std::weak_ptr<LocalGroupImpl>> children_;  // guarded by mutex_
  std::vector<bool> claimed_;                            // guarded by mutex_

  // Point-to-point mailboxes.
  std::mutex p2p_mutex_;
  std::condition_variable p2p_cv_;
  std::vector<Channel> channels_;  // [from · size + to], guarded by p2p_mutex_
};

// Spins for up to kSpinTime (yielding) until ready() holds; returns whether it did.
template <typename Ready>
bool spin_until(Ready ready) {
  if (ready()) return true;
  const auto stop = Clock::now() + kSpinTime;
  do {
    std::this_thread::yield();
    if (ready()) return true;
  } while (Clock::now() < stop);
  return false;
}

// ---------------------------------------------------------------------------------------------

class LocalBackend final : public Backend {
 public:
  LocalBackend(std::shared_ptr<LocalGroupImpl> group, int rank)
      : group_(std::move(group)), rank_(rank), size_(group_->size()) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "local"; }
  uint64_t bytes_copied() const override { return bytes_copied_; }

  void all_reduce(void* data, size_t count, DType dtype, ReduceOp op, const Call& call) override {
    Posting p = posting(call, count, dtype);
    p.op = static_cast<int>(op);
    p.out = data;
    const Posting* all = enter(p, call);
    const size_t esize = dtype_size(dtype);
    // Slice s of the element range is reduced by rank s, into rank s's own buffer.
    const size_t ranks = static_cast<size_t>(size_);
    const size_t chunk =
        ((count + ranks - 1) / ranks + kSliceAlign - 1) / kSliceAlign * kSliceAlign;
    auto slice_begin = [&](int s) { return std::min(count, chunk * static_cast<size_t>(s)); };
    {
      const size_t begin = slice_begin(rank_);
      const size_t end = slice_begin(rank_ + 1);
      std::vector<const void*> slices(static_cast<size_t>(size_));
      for (int q = 0; q < size_; ++q) {
        slices[q] = static_cast<const char*>(all[q].out) + begin * esize;
      }
      // This rank's slice is also slices[rank_]: reduce_rank_slices allows that aliasing.
      reduce_rank_slices(static_cast<char*>(data) + begin * esize, slices.data(), size_,
                         end - begin, dtype, op);
    }
    sync();  // every slice is reduced
    for (int s = 0; s < size_; ++s) {
      if (s == rank_) continue;
      const size_t begin = slice_begin(s);
      const size_t end = slice_begin(s + 1);
      copy_bytes(static_cast<char*>(data) + begin * esize,
                 static_cast<const char*>(all[s].out) + begin * esize, (end - begin) * esize);
    }
    sync();  // nobody reads this rank's buffer any more
  }

  void all_gather(const void* shard, void* full, size_t count, DType dtype,
                  const Call& call) override {
    Posting p = posting(call, count, dtype);
    p.in = shard;
    p.out = full;
    const Posting* all = enter(p, call);
    const size_t bytes = count * dtype_size(dtype);
    // In place (shard is this rank's slot), copy_bytes skips this rank's own slice.
    for (int q = 0; q < size_; ++q) {
      copy_bytes(static_cast<char*>(full) + q * bytes, all[q].in, bytes);
    }
    sync();
  }

  void reduce_scatter(const void* full, void* shard, size_t count, DType dtype, ReduceOp op,
                      const Call& call) override {
    Posting p = posting(call, count, dtype);
    p.op = static_cast<int>(op);
    p.in = full;
    p.out = shard;
    const Posting* all = enter(p, call);
    const size_t offset = static_cast<size_t>(rank_) * count * dtype_size(dtype);
    std::vector<const void*> slices(static_cast<size_t>(size_));
    for (int q = 0; q < size_; ++q) slices[q] = static_cast<const char*>(all[q].in) + offset;
    reduce_rank_slices(shard, slices.data(), size_, count, dtype, op);
    sync();
  }

  void broadcast(void* data, size_t count, DType dtype, int root, const Call& call) override {
    check_rank("broadcast", "root", root);
    Posting p = posting(call, count, dtype);
    p.root = root;
    p.out = data;
    const Posting* all = enter(p, call);
    if (rank_ != root) copy_bytes(data, all[root].out, count * dtype_size(dtype));
    sync();
  }

  void gather(const void* in, void* out, size_t count, DType dtype, int root,
              const Call& call) override {
    check_rank("gather", "root", root);
    Posting p = posting(call, count, dtype);
    p.root = root;
    p.in = in;
    p.out = out;
    const Posting* all = enter(p, call);
    if (rank_ == root) {
      const size_t bytes = count * dtype_size(dtype);
      for (int q = 0; q < size_; ++q)
        copy_bytes(static_cast<char*>(out) + q * bytes, all[q].in, bytes);
    }
    sync();
  }

  void scatter(const void* in, void* out, size_t count, DType dtype, int root,
               const Call& call) override {
    check_rank("scatter", "root", root);
    Posting p = posting(call, count, dtype);
    p.root = root;
    p.in = in;
    p.out = out;
    const Posting* all = enter(p, call);
    const size_t bytes = count * dtype_size(dtype);
    copy_bytes(out, static_cast<const char*>(all[root].in) + rank_ * bytes, bytes);
    sync();
  }

  void barrier(const Call& call) override {
    // No buffers, so no closing rendezvous: postings are double-buffered by generation parity,
    // and a rank cannot get two generations ahead of a peer still reading them.
    enter(posting(call, 0, DType::kF32), call);
  }

  void send(const void* data, size_t count, DType dtype, int peer, const Call& call) override {
    check_rank("send", "peer", peer);
    note_call(call);
    check_not_aborted(call, nullptr);
    const size_t bytes = count * dtype_size(dtype);
    Channel& channel = group_->channel(rank_, peer);
    PostedRecv* target = nullptr;
    std::string mismatch;
    {
      std::lock_guard<std::mutex> lock(group_->p2p_mutex_);
      if (channel.posted != nullptr) {
        target = channel.posted;
        channel.posted = nullptr;
        if (target->count != count || target->dtype != dtype) {
          mismatch = p2p_mismatch(call.sequence, count, dtype, peer, target->sequence,
                                  target->count, target->dtype);
          target->state = PostedRecv::kError;
          target->error = mismatch;
        } else {
          target->state = PostedRecv::kClaimed;
        }
      }
    }
    if (target != nullptr) {
      if (!mismatch.empty()) {
        // The receiver may already have returned: `target` is not touched again.
        group_->p2p_cv_.notify_all();
        ZS_THROW(CommError, mismatch);
      }
      // Direct: the receiver is waiting and cannot give up while its recv is claimed.
      copy_bytes(target->data, data, bytes);
      {
        std::lock_guard<std::mutex> lock(group_->p2p_mutex_);
        target->state = PostedRecv::kDone;
      }
      group_->p2p_cv_.notify_all();
      return;
    }
    // Eager: stage a copy in the receiver's mailbox.
    Message message{std::vector<char>(bytes), count, dtype, call.sequence};
    copy_bytes(message.bytes.data(), data, bytes);
    {
      std::lock_guard<std::mutex> lock(group_->p2p_mutex_);
      if (channel.posted != nullptr) {
        // The receiver posted while we staged: hand the staged copy over directly.
        PostedRecv* late = channel.posted;
        channel.posted = nullptr;
        if (late->count != count || late->dtype != dtype) {
          late->state = PostedRecv::kError;
          late->error = p2p_mismatch(call.sequence, count, dtype, peer, late->sequence, late->count,
                                     late->dtype);
        } else {
          copy_bytes(late->data, message.bytes.data(), bytes);
          late->state = PostedRecv::kDone;
        }
      } else {
        channel.messages.push_back(std::move(message));
      }
    }
    group_->p2p_cv_.notify_all();
  }

  void recv(void* data, size_t count, DType dtype, int peer, const Call& call) override {
    check_rank("recv", "peer", peer);
    note_call(call);
    check_not_aborted(call, nullptr);
    const auto start = Clock::now();
    Channel& channel = group_->channel(peer, rank_);
    PostedRecv posted;
    posted.data = data;
    posted.count = count;
    posted.dtype = dtype;
    posted.sequence = call.sequence;
    std::unique_lock<std::mutex> lock(group_->p2p_mutex_);
    if (!channel.messages.empty()) {
      Message message = std::move(channel.messages.front());
      channel.messages.pop_front();
      lock.unlock();
      if (message.count != count || message.dtype != dtype) {
        ZS_THROW(CommError, p2p_mismatch(message.sequence, message.count, message.dtype, rank_,
                                         call.sequence, count, dtype, peer));
      }
      copy_bytes(data, message.bytes.data(), count * dtype_size(dtype));
      return;
    }
    channel.posted = &posted;
    auto finished = [&] {
      return posted.state == PostedRecv::kDone || posted.state == PostedRecv::kError;
    };
    auto may_leave = [&] {
      return finished() || (posted.state == PostedRecv::kWaiting &&
                            group_->aborted_.load(std::memory_order_acquire));
    };
    bool timed_out = false;
    while (!may_leave()) {
      if (posted.state == PostedRecv::kWaiting) {
        if (group_->p2p_cv_.wait_until(lock, call.deadline) == std::cv_status::timeout &&
            posted.state == PostedRecv::kWaiting) {
          timed_out = true;
          break;
        }
      } else {
        group_->p2p_cv_.wait(lock);  // claimed: the sender is copying; bounded
      }
    }
    if (finished()) {
      if (posted.state == PostedRecv::kError) ZS_THROW(CommError, posted.error);
      return;
    }
    // Still waiting and unclaimed: withdraw the posting before leaving.
    channel.posted = nullptr;
    lock.unlock();
    if (timed_out) {
      const Slot& peer_slot = group_->slot(peer);
      const int last_kind = peer_slot.last_kind.load(std::memory_order_relaxed);
      std::string peer_state =
          last_kind < 0
              ? detail::concat("rank ", peer, " has issued no call on this group")
              : detail::concat("the last call rank ", peer, " issued on this group was ",
                               collective_name(static_cast<CollectiveKind>(last_kind)), " #",
                               peer_slot.last_sequence.load(std::memory_order_relaxed));
      ZS_THROW(CommTimeout, "recv #", call.sequence, tag_suffix(call), " (", count, " ",
               dtype_name(dtype), " from rank ", peer, ") on rank ", rank_, " of ", size_,
               " timed out after ", elapsed_ms(start), " ms: rank ", peer,
               " has not sent the matching message; ", peer_state, ". Check that rank ", peer,
               " issues a send to rank ", rank_, " for every recv, in the same order.");
    }
    check_not_aborted(call, nullptr);
  }

  std::unique_ptr<Backend> split(int color, int key, const Call& call) override {
    Posting p = posting(call, 0, DType::kF32);
    p.color = color;
    p.key = key;
    const Posting* all = enter(p, call);
    if (rank_ == 0) {
      // Members of each color ordered by (key, old rank); one new group per color.
      std::vector<int> order(static_cast<size_t>(size_));
      for (int q = 0; q < size_; ++q) order[q] = q;
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        if (all[a].color != all[b].color) return all[a].color < all[b].color;
        return all[a].key < all[b].key;
      });
      size_t i = 0;
      while (i < order.size()) {
        size_t j = i;
        const int c = all[order[i]].color;
        while (j < order.size() && all[order[j]].color == c) ++j;
        if (c >= 0) {
          auto child = std::make_shared<LocalGroupImpl>(static_cast<int>(j - i));
          group_->add_child(child);
          for (size_t m = i; m < j; ++m) {
            Slot& member = group_->slot(order[m]);
            member.split_group = child;
            member.split_rank = static_cast<int>(m - i);
          }
        }
        i = j;
      }
    }
    sync();  // rank 0 has formed the groups
    Slot& mine = group_->slot(rank_);
    std::shared_ptr<LocalGroupImpl> child = std::move(mine.split_group);
    const int new_rank = mine.split_rank;
    mine.split_group.reset();
    mine.split_rank = -1;
    if (color < 0) return nullptr;
    return child->backend(new_rank);
  }

  void abort(const std::string& reason) override { group_->abort_from(reason, rank_); }

 private:
  // Every copy of the backend goes through here: it skips a copy onto itself (the in-place
  // forms) and counts the rest (bytes_copied()).
  void copy_bytes(void* dst, const void* src, size_t bytes) {
    if (bytes == 0 || dst == src) return;
    std::memcpy(dst, src, bytes);
    bytes_copied_ += bytes;
  }

  Posting posting(const Call& call, size_t count, DType dtype) const {
    Posting p;
    p.kind = call.kind;
    p.sequence = call.sequence;
    p.count = count;
    p.dtype = dtype;
    return p;
  }

  void check_rank(const char* what, const char* role, int r) const {
    ZS_CHECK(r >= 0 && r < size_, what, ": ", role, " ", r, " is out of range for a group of ",
             size_, " ranks");
  }

  void note_call(const Call& call) {
    Slot& mine = group_->slot(rank_);
    mine.last_kind.store(static_cast<int>(call.kind), std::memory_order_relaxed);
    mine.last_sequence.store(call.sequence, std::memory_order_relaxed);
  }

  static std::string tag_suffix(const Call& call) {
    return call.tag.empty() ? std::string() : detail::concat(" [", call.tag, "]");
  }

  static long long elapsed_ms(Clock::time_point start) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  }

  void check_not_aborted(const Call& call, const Posting* p) const {
    if (!group_->aborted()) return;
    ZS_THROW(CommError,
             p ? describe(*p) : detail::concat(collective_name(call.kind), " #", call.sequence),
             tag_suffix(call), " on rank ", rank_, " of ", size_,
             " failed: the group was aborted: ", group_->abort_reason());
  }

  std::string p2p_mismatch(uint64_t send_sequence, size_t send_count, DType send_dtype,
                           int receiver, uint64_t recv_sequence, size_t recv_count,
                           DType recv_dtype, int sender = -1) const {
    if (sender < 0) sender = rank_;
    return detail::concat("send/recv mismatch: rank ", sender, "'s send #", send_sequence,
                          " carries ", send_count, " ", dtype_name(send_dtype), " but rank ",
                          receiver, "'s recv #", recv_sequence, " expects ", recv_count, " ",
                          dtype_name(recv_dtype),
                          "; pair every send with a recv of the same count and dtype, in order");
  }

  // "waiting for rank 2 to arrive (arrived: 0, 1). Last call issued on this group by the
  // missing rank: rank 2: barrier #7" — who to look for when a collective times out.
  std::string arrival_diagnosis(const std::vector<int>& missing, const std::vector<int>& present,
                                const std::vector<int>& gave_up) const {
    std::ostringstream out;
    const char* plural = missing.size() == 1 ? "" : "s";
    if (missing.empty()) {
      out << "although every rank arrived: rank" << (gave_up.size() == 1 ? " " : "s ")
          << rank_list(gave_up) << " had stopped waiting before the last one came";
      return out.str();
    }
    out << "waiting for rank" << plural << " " << rank_list(missing)
        << " to arrive (arrived: " << rank_list(present) << ")";
    if (!gave_up.empty()) {
      out << "; since then rank" << (gave_up.size() == 1 ? " " : "s ") << rank_list(gave_up)
          << " stopped waiting";
    }
    out << ". Last call issued on this group by the missing rank" << plural;
    for (int q : missing) {
      const Slot& s = group_->slot(q);
      const int kind = s.last_kind.load(std::memory_order_relaxed);
      out << "; rank " << q << ": ";
      if (kind < 0) {
        out << "no call yet";
      } else {
        out << collective_name(static_cast<CollectiveKind>(kind)) << " #"
            << s.last_sequence.load(std::memory_order_relaxed);
      }
    }
    return out.str();
  }

  // Enters a group collective: posts `p`, waits until every rank has entered (or throws
  // CommTimeout / CommError), and checks that all ranks issued the same call. Returns the
  // postings of all ranks, valid until this rank's last sync() of the collective.
  const Posting* enter(const Posting& p, const Call& call) {
    note_call(call);
    check_not_aborted(call, &p);
    const auto start = Clock::now();
    const uint64_t generation = ++generation_;
    const int parity = static_cast<int>(generation & 1);
    Slot& mine = group_->slot(rank_);
    {
      std::lock_guard<std::mutex> lock(group_->mutex_);
      mine.postings[parity] = p;
      mine.arrived = generation;
      bool all_arrived = true;
      for (int q = 0; q < size_ && all_arrived; ++q) {
        all_arrived = group_->slot(q).arrived >= generation;
      }
      if (all_arrived) {
        group_->committed_generation_.store(generation, std::memory_order_release);
      }
    }
    group_->cv_.notify_all();

    auto committed = [&] {
      return group_->committed_generation_.load(std::memory_order_acquire) >= generation;
    };
    if (!spin_until([&] { return committed() || group_->aborted(); }) || !committed()) {
      std::unique_lock<std::mutex> lock(group_->mutex_);
      group_->cv_.wait_until(lock, call.deadline, [&] { return committed() || group_->aborted(); });
      if (!committed()) {
        // Give up: retract the arrival under the mutex, so the collective can no longer commit
        // and nobody will read this rank's buffers.
        mine.arrived = generation - 1;
        mine.gave_up = generation;
        --generation_;
        // Ranks that arrived and then gave up (they timed out a moment earlier) count as
        // arrived: they are not the ones to look for.
        std::vector<int> missing, present, gave_up;
        for (int q = 0; q < size_; ++q) {
          const Slot& s = group_->slot(q);
          const bool left = s.gave_up == generation && q != rank_;
          (s.arrived >= generation || left || q == rank_ ? present : missing).push_back(q);
          if (left) gave_up.push_back(q);
        }
        lock.unlock();
        check_not_aborted(call, &p);
        ZS_THROW(CommTimeout, describe(p), tag_suffix(call), " on rank ", rank_, " of ", size_,
                 " timed out after ", elapsed_ms(start), " ms ",
                 arrival_diagnosis(missing, present, gave_up),
                 ". Every rank must issue the same collectives in the same order: look for a "
                 "rank that skipped this collective, is stuck before it, or has failed.");
      }
    }
    // Committed: every rank is inside this collective and its posting is final.
    const Posting* all = nullptr;
    postings_.resize(static_cast<size_t>(size_));
    for (int q = 0; q < size_; ++q) postings_[q] = group_->slot(q).postings[parity];
    all = postings_.data();
    for (int q = 1; q < size_; ++q) {
      if (!same_call(all[0], all[q])) {
        const std::string message = detail::concat(
            "ranks disagree on a collective: rank 0 called ", describe(all[0]), " but rank ", q,
            " called ", describe(all[q]),
            "; every rank must issue the same collectives, in the same order, with the same "
            "count, dtype, reduce op and root");
        group_->abort_from(message, rank_);
        ZS_THROW(CommError, message);
      }
    }
    return all;
  }

  // A rendezvous after the commit: waits until every rank has reached it. Only bounded memory
  // work separates the ranks here, so it waits without a deadline and ignores abort (leaving
  // early would free buffers that peers are still reading).
  void sync() {
    const uint64_t target = ++phase_;
    Slot& mine = group_->slot(rank_);
    mine.phase.store(target, std::memory_order_release);
    { std::lock_guard<std::mutex> lock(group_->mutex_); }
    group_->cv_.notify_all();
    auto all_reached = [&] {
      for (int q = 0; q < size_; ++q) {
        if (group_->slot(q).phase.load(std::memory_order_acquire) < target) return false;
      }
      return true;
    };
    if (spin_until(all_reached)) return;
    std::unique_lock<std::mutex> lock(group_->mutex_);
    group_->cv_.wait(lock, all_reached);
  }

  std::shared_ptr<LocalGroupImpl> group_;
  const int rank_;
  const int size_;
  uint64_t generation_ = 0;        // group collectives entered (and not retracted)
  uint64_t phase_ = 0;             // post-commit rendezvous passed
  uint64_t bytes_copied_ = 0;      // by this rank's primitives, on its communicator's thread
  std::vector<Posting> postings_;  // this rank's copy of the committed postings
};

std::unique_ptr<Backend> LocalGroupImpl::backend(int rank) {
  ZS_CHECK(rank >= 0 && rank < size_, "LocalGroup::backend: rank ", rank,
           " is out of range for a group of ", size_, " ranks");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ZS_CHECK(!claimed_[static_cast<size_t>(rank)], "LocalGroup::backend: the backend of rank ",
             rank, " was already taken; each rank's backend can be taken once");
    claimed_[static_cast<size_t>(rank)] = true;
  }
  return std::make_unique<LocalBackend>(shared_from_this(), rank);
}

}  // namespace

std::shared_ptr<LocalGroup> LocalGroup::create(int size) {
  ZS_CHECK(size >= 1, "LocalGroup::create: a group needs at least 1 rank, got ", size);
  return std::make_shared<LocalGroupImpl>(size);
}

std::vector<std::unique_ptr<Backend>> make_local_backends(int size) {
  std::shared_ptr<LocalGroup> group = LocalGroup::create(size);
  std::vector<std::unique_ptr<Backend>> backends;
  backends.reserve(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) backends.push_back(group->backend(r));
  return backends;
}

void run_local_ranks(int size, const std::function<void(Communicator&)>& fn,
                     const LocalRunOptions& options) {
  ZS_CHECK(size >= 1, "run_local_ranks: need at least 1 rank, got ", size);
  auto group = std::static_pointer_cast<LocalGroupImpl>(LocalGroup::create(size));
  std::vector<std::unique_ptr<Backend>> backends;
  for (int r = 0; r < size; ++r) {
    std::unique_ptr<Backend> backend = group->backend(r);
    if (options.wrap_backend) backend = options.wrap_backend(std::move(backend), r);
    backends.push_back(std::move(backend));
  }
  std::vector<std::exception_ptr> errors(static_cast<size_t>(size));
  // Communicators from options.make_communicator, registered while they exist, so that a
  // failing rank can abort them all (their backends do not watch the local group).
  std::mutex made_mutex;
  std::vector<Communicator*> made(static_cast<size_t>(size), nullptr);
  auto abort_all = [&](const std::string& reason, int origin) {
    group->abort_from(reason, origin);
    std::lock_guard<std::mutex> lock(made_mutex);
    for (Communicator* comm : made) {
      if (comm != nullptr) comm->abort(reason);
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      RankScope rank_scope(r);
      try {
        // Declared outside the inner try: on an error the group is aborted before the
        // Communicator's destructor drains its queue, so queued collectives fail fast.
        std::unique_ptr<Communicator> comm =
            options.make_communicator
                ? options.make_communicator(std::move(backends[r]), r)
                : std::make_unique<Communicator>(std::move(backends[r]), options.timeout);
        ZS_CHECK(comm != nullptr, "run_local_ranks: make_communicator returned null for rank ", r);
        // Registered while it exists: the guard (declared after `comm`, so destroyed before it)
        // takes it out of the registry on every path, also when an exception leaves the scope.
        struct Registration {
          std::mutex& mutex;
          Communicator*& slot;
          ~Registration() {
            std::lock_guard<std::mutex> lock(mutex);
            slot = nullptr;
          }
        } registration{made_mutex, made[static_cast<size_t>(r)]};
        if (options.make_communicator) {
          std::lock_guard<std::mutex> lock(made_mutex);
          made[static_cast<size_t>(r)] = comm.get();
          // A rank that failed before this one registered has aborted the others already.
          if (group->aborted()) comm->abort("another rank failed while this one was starting");
        }
        try {
          fn(*comm);
        } catch (const std::exception& e) {
          errors[r] = std::current_exception();
          abort_all(detail::concat("rank ", r, " failed: ", e.what()), r);
        } catch (...) {
          errors[r] = std::current_exception();
          abort_all(detail::concat("rank ", r, " failed with a non-standard exception"), r);
        }
      } catch (...) {  // the Communicator itself could not be built
        if (!errors[r]) errors[r] = std::current_exception();
        abort_all(detail::concat("rank ", r, " could not start its communicator"), r);
      }
    });
  }
  for (auto& thread : threads) thread.join();

  auto is_a = [](const std::exception_ptr& error, auto* tag) {
    using E = std::remove_pointer_t<decltype(tag)>;
    try {
      std::rethrow_exception(error);
    } catch (const E&) {
      return true;
    } catch (...) {
      return false;
    }
  };
  for (const auto& error : errors) {
    if (error && !is_a(error, static_cast<CommError*>(nullptr))) std::rethrow_exception(error);
  }
  const int origin = group->abort_origin();
  if (origin >= 0 && errors[static_cast<size_t>(origin)]) {
    std::rethrow_exception(errors[static_cast<size_t>(origin)]);
  }
  for (const auto& error : errors) {
    if (error && is_a(error, static_cast<CommTimeout*>(nullptr))) std::rethrow_exception(error);
  }
  for (const auto& error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

}  // namespace zs::comm
