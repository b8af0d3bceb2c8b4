// CallLog: every collective one rank issued, with what it moved — kind, the caller's tag (e.g.
// "gradients of blocks.0", "gradient of blocks.0.attn.qkv.weight"), elements, dtype, payload
// bytes and the bytes this rank sent and received — recorded by RecordingBackend, a Backend
// that forwards each primitive to the one it wraps. CommStats (comm/stats.h) keeps sums per
// collective kind; a study that reports each call's shape wraps the rank's backend in this
// instead (comm::LocalRunOptions::wrap_backend), so comm/ stays unchanged.
//
// Bytes follow CommStats' definitions exactly: the payload is the full buffer (all_reduce,
// broadcast) or the gathered/full one (all_gather, reduce_scatter, gather, scatter), and sent /
// received come from comm::collective_traffic, so a log's sums equal the communicator's stats.
// Collectives reach a backend as flat buffers, so a call's shape is its element count.
//
// Thread-safety: the backend records on the communicator's thread; take() may be called from
// any thread (a mutex guards the records). The backend owns the wrapped backend; the CallLog
// must outlive it.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/backend.h"
#include "comm/types.h"
#include "runtime/dtype.h"

namespace zs::study {

struct CallRecord {
  comm::CollectiveKind kind = comm::CollectiveKind::kAllReduce;
  std::string tag;
  int64_t numel = 0;  // elements this rank passed (its input; gather/scatter: one rank's slot)
  DType dtype = DType::kF32;
  uint64_t bytes = 0;  // payload as CommStats counts it (see the file comment)
  uint64_t sent = 0;
  uint64_t received = 0;
};

class CallLog {
 public:
  void add(CallRecord record);
  // The records since the last take(), in issue order; the log is left empty.
  std::vector<CallRecord> take();

 private:
  std::mutex mutex_;
  std::vector<CallRecord> records_;
};

class RecordingBackend final : public comm::Backend {
 public:
  RecordingBackend(std::unique_ptr<comm::Backend> target, CallLog& log);
  RecordingBackend(const RecordingBackend&) = delete;
  RecordingBackend& operator=(const RecordingBackend&) = delete;

  int rank() const override { return target_->rank(); }
  int size() const override { return target_->size(); }
  const char* name() const override { return target_->name(); }

  void all_reduce(void* data, size_t count, DType dtype, comm::ReduceOp op,
                  const comm::Call& call) override;
  void all_gather(const void* shard, void* full, size_t count, DType dtype,
                  const comm::Call& call) override;
  void reduce_scatter(const void* full, void* shard, size_t count, DType dtype, comm::ReduceOp op,
                      const comm::Call& call) override;
  void broadcast(void* data, size_t count, DType dtype, int root, const comm::Call& call) override;
  void gather(const void* in, void* out, size_t count, DType dtype, int root,
              const comm::Call& call) override;
  void scatter(const void* in, void* out, size_t count, DType dtype, int root,
               const comm::Call& call) override;
  void barrier(const comm::Call& call) override;
  void send(const void* data, size_t count, DType dtype, int peer, const comm::Call& call) override;
  void recv(void* data, size_t count, DType dtype, int peer, const comm::Call& call) override;
  // The sub-group's backend is not recorded (the studies use the world only).
  std::unique_ptr<comm::Backend> split(int color, int key, const comm::Call& call) override {
    return target_->split(color, key, call);
  }
  void abort(const std::string& reason) override { target_->abort(reason); }
  void check_compute_stream(const comm::StreamRef& stream) const override {
    target_->check_compute_stream(stream);
  }
  std::shared_ptr<comm::DeviceSync> prepare(comm::CollectiveKind kind,
                                            const comm::StreamRef& compute) override {
    return target_->prepare(kind, compute);
  }
  bool poll(const comm::Call& call) override { return target_->poll(call); }

 private:
  // Records a call that completed on the wrapped backend (`bytes`: CommStats' payload).
  void record(const comm::Call& call, size_t count, DType dtype, uint64_t bytes, int root);

  std::unique_ptr<comm::Backend> target_;
  CallLog& log_;
};

}  // namespace zs::study
