// FaultInjectingBackend: forwarding plus the injected delay, failure and drop.
#include "comm/fault_backend.h"

#include <thread>

#include "runtime/error.h"

namespace zs::comm {

FaultInjectingBackend::FaultInjectingBackend(std::unique_ptr<Backend> target,
                                             FaultSettings settings)
    : target_(std::move(target)), settings_(settings) {
  ZS_CHECK(target_ != nullptr, "FaultInjectingBackend needs a backend to wrap");
}

void FaultInjectingBackend::before(const Call& call) {
  const int64_t index = static_cast<int64_t>(calls_.fetch_add(1));
  if (dropped_.load()) {
    ZS_THROW(CommError, "injected fault: rank ", rank(), " dropped out at call ",
             settings_.drop_call, " (FaultSettings::drop_call) and no longer participates; ",
             collective_name(call.kind), " #", call.sequence, " (call ", index, ") refused");
  }
  if (settings_.delay.count() > 0 &&
      call.tag.compare(0, settings_.delay_tag_prefix.size(), settings_.delay_tag_prefix) == 0) {
    std::this_thread::sleep_for(settings_.delay);
  }
  if (index == settings_.drop_call) {
    dropped_.store(true);
    ZS_THROW(CommError, "injected fault: rank ", rank(), " dropped out at call ", index, " (",
             collective_name(call.kind), " #", call.sequence,
             ", FaultSettings::drop_call); it no longer participates");
  }
  if (index == settings_.fail_call) {
    ZS_THROW(CommError, "injected fault: call ", index, " (", collective_name(call.kind), " #",
             call.sequence, ") on rank ", rank(), " failed (FaultSettings::fail_call)");
  }
}

void FaultInjectingBackend::all_reduce(void* data, size_t count, DType dtype, ReduceOp op,
                                       const Call& call) {
  before(call);
  target_->all_reduce(data, count, dtype, op, call);
}

void FaultInjectingBackend::all_gather(const void* shard, void* full, size_t count, DType dtype,
                                       const Call& call) {
  before(call);
  target_->all_gather(shard, full, count, dtype, call);
}

void FaultInjectingBackend::reduce_scatter(const void* full, void* shard, size_t count, DType dtype,
                                           ReduceOp op, const Call& call) {
  before(call);
  target_->reduce_scatter(full, shard, count, dtype, op, call);
}

void FaultInjectingBackend::broadcast(void* data, size_t count, DType dtype, int root,
                                      const Call& call) {
  before(call);
  target_->broadcast(data, count, dtype, root, call);
}

void FaultInjectingBackend::gather(const void* in, void* out, size_t count, DType dtype, int root,
                                   const Call& call) {
  before(call);
  target_->gather(in, out, count, dtype, root, call);
}

void FaultInjectingBackend::scatter(const void* in, void* out, size_t count, DType dtype, int root,
                                    const Call& call) {
  before(call);
  target_->scatter(in, out, count, dtype, root, call);
}

void FaultInjectingBackend::barrier(const Call& call) {
  before(call);
  target_->barrier(call);
}

void FaultInjectingBackend::send(const void* data, size_t count, DType dtype, int peer,
                                 const Call& call) {
  before(call);
  target_->send(data, count, dtype, peer, call);
}

void FaultInjectingBackend::recv(void* data, size_t count, DType dtype, int peer,
                                 const Call& call) {
  before(call);
  target_->recv(data, count, dtype, peer, call);
}

std::unique_ptr<Backend> FaultInjectingBackend::split(int color, int key, const Call& call) {
  before(call);
  return target_->split(color, key, call);
}

void FaultInjectingBackend::abort(const std::string& reason) {
  if (dropped_.load()) return;  // a dropped rank cannot reach its peers
  target_->abort(reason);
}

}  // namespace zs::comm
