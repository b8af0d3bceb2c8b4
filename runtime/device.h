// Devices: the CPU (first-class: every feature runs and is tested on it) and CUDA GPUs.
// A Device is a small value; equality compares kind and index.
#pragma once

#include <string>

namespace zs {

struct Device {
  enum class Kind : unsigned char { kCPU, kCUDA };
  Kind kind = Kind::kCPU;
  int index = 0;

  static Device cpu() { return Device{Kind::kCPU, 0}; }
  static Device cuda(int index) { return Device{Kind::kCUDA, index}; }
  // "cpu", "cuda" (= cuda:0) or "cuda:N"; throws InvalidArgument naming the accepted forms.
  static Device parse(const std::string& text);

  bool is_cpu() const { return kind == Kind::kCPU; }
  bool is_cuda() const { return kind == Kind::kCUDA; }
  std::string str() const;  // "cpu" or "cuda:N"

  bool operator==(const Device& other) const {
    return kind == other.kind && (kind == Kind::kCPU || index == other.index);
  }
  bool operator!=(const Device& other) const { return !(*this == other); }
};

}  // namespace zs
