// Stream, Event and DeviceGuard (see stream.h).
#include "runtime/cuda/stream.h"

#include <utility>

#include "runtime/cuda/check.h"
#include "runtime/error.h"

namespace zs::cuda {

DeviceGuard::DeviceGuard(int device) {
  ZS_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) {
    ZS_CUDA_CHECK(cudaSetDevice(device));
    changed_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (changed_) ZS_CUDA_CHECK_WARN(cudaSetDevice(previous_));
}

// ---- Event

Event::Event(int device) : device_(device) {
  DeviceGuard guard(device);
  ZS_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
}

Event::~Event() {
  if (event_ != nullptr) ZS_CUDA_CHECK_WARN(cudaEventDestroy(event_));
}

Event::Event(Event&& other) noexcept
    : event_(std::exchange(other.event_, nullptr)), device_(other.device_) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) ZS_CUDA_CHECK_WARN(cudaEventDestroy(event_));
    event_ = std::exchange(other.event_, nullptr);
    device_ = other.device_;
  }
  return *this;
}

void Event::record(const Stream& stream) {
  ZS_CHECK(stream.device() == device_, "Event::record: the event is on cuda:", device_,
           " but the stream is on cuda:", stream.device(), "; record on a stream of its device");
  ZS_CUDA_CHECK(cudaEventRecord(event_, stream.get()));
}

bool Event::query() const {
  const cudaError_t status = cudaEventQuery(event_);  // zs-unchecked: NotReady is an answer
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();  // zs-unchecked: NotReady is not an error to keep
    return false;
  }
  ZS_CUDA_CHECK(status);
  return true;
}

void Event::synchronize() const { ZS_CUDA_CHECK(cudaEventSynchronize(event_)); }

// ---- Stream

Stream::Stream(int device) : device_(device) {
  DeviceGuard guard(device);
  ZS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

Stream::~Stream() {
  ordering_event_.reset();
  if (stream_ != nullptr) ZS_CUDA_CHECK_WARN(cudaStreamDestroy(stream_));
}

Stream::Stream(Stream&& other) noexcept
    : stream_(std::exchange(other.stream_, nullptr)),
      device_(other.device_),
      ordering_event_(std::move(other.ordering_event_)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    ordering_event_.reset();
    if (stream_ != nullptr) ZS_CUDA_CHECK_WARN(cudaStreamDestroy(stream_));
    stream_ = std::exchange(other.stream_, nullptr);
    device_ = other.device_;
    ordering_event_ = std::move(other.ordering_event_);
  }
  return *this;
}

void Stream::wait(const Event& event) const {
  ZS_CUDA_CHECK(cudaStreamWaitEvent(stream_, event.get(), 0));
}

void Stream::wait_for(const Stream& other) {
  ZS_CHECK(other.stream_ != stream_, "Stream::wait_for: a stream cannot wait for itself");
  // The event belongs to `other`'s device (an event must be recorded on a stream of its
  // device); a stream may wait on an event of another device.
  if (ordering_event_ == nullptr || ordering_event_->device() != other.device()) {
    ordering_event_ = std::make_unique<Event>(other.device());
  }
  // Reusing the event is safe: cudaStreamWaitEvent captures the event's state at the call,
  // so re-recording it later does not change what this wait waits for.
  ordering_event_->record(other);
  wait(*ordering_event_);
}

void Stream::synchronize() const { ZS_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

bool Stream::query() const {
  const cudaError_t status = cudaStreamQuery(stream_);  // zs-unchecked: NotReady is an answer
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();  // zs-unchecked: NotReady is not an error to keep
    return false;
  }
  ZS_CUDA_CHECK(status);
  return true;
}

}  // namespace zs::cuda
