// CUDA streams and events as RAII objects, and a scope that selects a device.
//
// A Stream owns a cudaStream_t created with cudaStreamNonBlocking (it never synchronizes with
// the legacy default stream, so library code that uses stream 0 cannot serialize ours) on one
// device. An Event owns a cudaEvent_t created with cudaEventDisableTiming: it exists to order
// work across streams (record on the producer, wait on the consumer — no host synchronization),
// and timing-disabled events are the cheap kind to record and wait on. Each Stream also owns
// one such event, reused by Stream::wait_for(Stream&) so a one-off ordering needs no allocation
// (llm.c: "by using an event instead of cudaSyncStream, we avoid having to synchronize the
// host").
//
// Ownership: Stream and Event are move-only; the destructor destroys the handle (CUDA defers
// the destruction until the work already enqueued completes, so destroying a busy stream or a
// recorded event is safe). The device must outlive them (no cudaDeviceReset meanwhile).
//
// Thread-safety: enqueueing on one Stream from several threads is allowed by CUDA, but the order
// between those threads' work is then unspecified; zeroshard gives each stream one owner thread
// (the compute thread, or a communicator's thread). query()/synchronize() are safe from any
// thread.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "runtime/device.h"
#include "runtime/macros.h"

namespace zs::cuda {

// Makes `device` the calling thread's current CUDA device for the scope and restores the
// previous one on exit (CUDA's current device is per host thread).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  ZS_DISALLOW_COPY(DeviceGuard);

 private:
  int previous_ = 0;
  bool changed_ = false;
};

class Stream;

class Event {
 public:
  // A timing-disabled event on `device` (the current device while it is created).
  explicit Event(int device);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Captures the work enqueued on `stream` so far; later waits wait for exactly that work.
  void record(const Stream& stream);
  // True when the captured work has completed (or nothing was recorded); never blocks.
  bool query() const;
  // Blocks the host until the captured work completes.
  void synchronize() const;

  cudaEvent_t get() const { return event_; }
  int device() const { return device_; }

 private:
  cudaEvent_t event_ = nullptr;
  int device_ = 0;
};

class Stream {
 public:
  // A new non-blocking stream on `device`.
  explicit Stream(int device);
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Work enqueued on this stream after the call waits for the work `event` captured (on the
  // GPU; the host does not block).
  void wait(const Event& event) const;
  // Work enqueued here after the call waits for everything enqueued on `other` so far (records
  // this stream's own reusable event on `other`). `other` must not be this stream.
  void wait_for(const Stream& other);
  // Blocks the host until all work enqueued so far completes.
  void synchronize() const;
  // True when all work enqueued so far has completed; never blocks.
  bool query() const;

  cudaStream_t get() const { return stream_; }
  int device() const { return device_; }
  Device zs_device() const { return Device::cuda(device_); }

 private:
  cudaStream_t stream_ = nullptr;
  int device_ = 0;
  std::unique_ptr<Event> ordering_event_;  // created lazily by wait_for
};

}  // namespace zs::cuda
