// Work: the handle of one enqueued collective.
//
// A Work completes when the communicator's thread has run the collective. wait() blocks until
// then and rethrows the collective's error (CommTimeout, CommError, InvalidArgument) on the
// waiting thread — an error on the communicator thread is never lost. A Work keeps the tensors
// of its collective alive until it completes. Thread-safe.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace zs::comm {

class Work {
 public:
  Work(std::string description, std::vector<Tensor> buffers)
      : description_(std::move(description)), buffers_(std::move(buffers)) {}
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // Blocks until the collective has run; rethrows its error.
  void wait();
  // True once the collective has run (successfully or not); never blocks, never throws.
  bool test() const;
  // "all_reduce #12 (4096 fp32, sum)".
  const std::string& description() const { return description_; }

  // Called by the communicator thread.
  void complete(std::exception_ptr error);

 private:
  const std::string description_;
  std::vector<Tensor> buffers_;  // released on completion
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

using WorkPtr = std::shared_ptr<Work>;

}  // namespace zs::comm
