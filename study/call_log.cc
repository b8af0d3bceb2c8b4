// CallLog and RecordingBackend (study/call_log.h).
#include "study/call_log.h"

#include <utility>

#include "comm/stats.h"

namespace zs::study {

void CallLog::add(CallRecord record) {
  std::lock_guard<std::mutex> lock(mutex_);
  records_.push_back(std::move(record));
}

std::vector<CallRecord> CallLog::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<CallRecord> out;
  out.swap(records_);
  return out;
}

RecordingBackend::RecordingBackend(std::unique_ptr<comm::Backend> target, CallLog& log)
    : target_(std::move(target)), log_(log) {}

void RecordingBackend::record(const comm::Call& call, size_t count, DType dtype, uint64_t bytes,
                              int root) {
  const comm::Traffic traffic = comm::collective_traffic(call.kind, bytes, size(), rank(), root);
  CallRecord r;
  r.kind = call.kind;
  r.tag = call.tag;
  r.numel = static_cast<int64_t>(count);
  r.dtype = dtype;
  r.bytes = bytes;
  r.sent = traffic.sent;
  r.received = traffic.received;
  log_.add(std::move(r));
}

void RecordingBackend::all_reduce(void* data, size_t count, DType dtype, comm::ReduceOp op,
                                  const comm::Call& call) {
  target_->all_reduce(data, count, dtype, op, call);
  record(call, count, dtype, count * dtype_size(dtype), 0);
}

void RecordingBackend::all_gather(const void* shard, void* full, size_t count, DType dtype,
                                  const comm::Call& call) {
  target_->all_gather(shard, full, count, dtype, call);
  record(call, count, dtype, count * static_cast<size_t>(size()) * dtype_size(dtype), 0);
}

void RecordingBackend::reduce_scatter(const void* full, void* shard, size_t count, DType dtype,
                                      comm::ReduceOp op, const comm::Call& call) {
  target_->reduce_scatter(full, shard, count, dtype, op, call);
  record(call, count, dtype, count * static_cast<size_t>(size()) * dtype_size(dtype), 0);
}

void RecordingBackend::broadcast(void* data, size_t count, DType dtype, int root,
                                 const comm::Call& call) {
  target_->broadcast(data, count, dtype, root, call);
  record(call, count, dtype, count * dtype_size(dtype), root);
}

void RecordingBackend::gather(const void* in, void* out, size_t count, DType dtype, int root,
                              const comm::Call& call) {
  target_->gather(in, out, count, dtype, root, call);
  record(call, count, dtype, count * static_cast<size_t>(size()) * dtype_size(dtype), root);
}

void RecordingBackend::scatter(const void* in, void* out, size_t count, DType dtype, int root,
                               const comm::Call& call) {
  target_->scatter(in, out, count, dtype, root, call);
  record(call, count, dtype, count * static_cast<size_t>(size()) * dtype_size(dtype), root);
}

void RecordingBackend::barrier(const comm::Call& call) {
  target_->barrier(call);
  record(call, 0, DType::kF32, 0, 0);
}

void RecordingBackend::send(const void* data, size_t count, DType dtype, int peer,
                            const comm::Call& call) {
  target_->send(data, count, dtype, peer, call);
  record(call, count, dtype, count * dtype_size(dtype), 0);
}

void RecordingBackend::recv(void* data, size_t count, DType dtype, int peer,
                            const comm::Call& call) {
  target_->recv(data, count, dtype, peer, call);
  record(call, count, dtype, count * dtype_size(dtype), 0);
}

}  // namespace zs::study
