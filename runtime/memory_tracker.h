// MemoryTracker: current and peak bytes per category on one device, an optional budget and an
// optional timeline. This is zeroshard's memory profiler: every allocation of a device goes
// through its Allocator (runtime/allocator.h), which charges the tracker before it allocates.
//
// The category of an allocation comes from the allocation site: code sets it with a
// MemoryCategoryScope (thread-local, nests), or passes it explicitly. A budget emulates the
// size of a device: exceeding it raises OutOfMemory with the per-category breakdown and a hint,
// and the allocation does not happen.
//
// Thread-safety: all methods are safe to call concurrently (a rank's compute thread and its
// communicator thread both allocate). The tracker must outlive the allocators that use it.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace zs {

enum class MemoryCategory : uint8_t {
  kParameters,
  kGradients,
  kMasterWeights,
  kOptimizerState,
  kActivations,
  kCommBuffers,
  kWorkspace,
  kOther,
};
constexpr int kNumMemoryCategories = 8;

const char* category_name(MemoryCategory category);  // "parameters", "gradients", ...
// Parses a name printed by category_name; throws InvalidArgument.
MemoryCategory parse_memory_category(const std::string& name);

// The calling thread's current allocation category (kOther outside any scope).
MemoryCategory current_memory_category();

// Sets the calling thread's allocation category for its lifetime.
class MemoryCategoryScope {
 public:
  explicit MemoryCategoryScope(MemoryCategory category);
  ~MemoryCategoryScope();
  MemoryCategoryScope(const MemoryCategoryScope&) = delete;
  MemoryCategoryScope& operator=(const MemoryCategoryScope&) = delete;

 private:
  MemoryCategory previous_;
};

// One timeline record: after an allocation (delta > 0) or a free (delta < 0), or a mark.
struct MemoryEvent {
  double time_ms = 0;  // since the tracker was created
  MemoryCategory category = MemoryCategory::kOther;
  int64_t delta = 0;          // bytes; 0 for a mark
  size_t category_bytes = 0;  // current bytes of the category after the event
  size_t total_bytes = 0;     // current bytes of all categories after the event
  std::string label;          // what was allocated, or the mark's text
};

class MemoryTracker {
 public:
  // `device_name` appears in errors and reports ("cpu", "cuda:1", "rank 3 cpu").
  explicit MemoryTracker(std::string device_name = "cpu");
  MemoryTracker(const MemoryTracker&) = delete;
  MemoryTracker& operator=(const MemoryTracker&) = delete;

  // Budget in bytes for the sum of all categories; 0 means unlimited.
  void set_budget(size_t bytes);
  size_t budget() const;

  // Charges `bytes` to `category`, or throws OutOfMemory (charging nothing) if that would exceed
  // the budget. `what` names the allocation in the error and the timeline.
  void charge(MemoryCategory category, size_t bytes, const std::string& what);
  void uncharge(MemoryCategory category, size_t bytes, const std::string& what);

  size_t current(MemoryCategory category) const;
  size_t peak(MemoryCategory category) const;
  size_t current_total() const;
  size_t peak_total() const;  // peak of the sum, not the sum of the peaks
  // Peaks restart from the current values (e.g. at the start of a step).
  void reset_peaks();

  // Timeline recording (off by default: it costs a lock-held push per allocation).
  void enable_timeline(bool enabled);
  void mark(const std::string& label);  // a labelled point, e.g. "step 3 backward"
  std::vector<MemoryEvent> timeline() const;
  // {"device": ..., "budget": ..., "categories": [...], "events": [{"t_ms":..,"category":..,
  //  "delta":..,"category_bytes":..,"total_bytes":..,"label":..}, ...], "peak": {...}}
  std::string timeline_json() const;
  void write_timeline_json(const std::string& path) const;  // throws IoError

  // A table of current and peak bytes per category, with the budget if any.
  std::string breakdown() const;
  const std::string& device_name() const { return device_name_; }

 private:
  std::string breakdown_locked() const;
  void record_locked(MemoryCategory category, int64_t delta, const std::string& label);

  const std::string device_name_;
  const std::chrono::steady_clock::time_point start_;
  mutable std::mutex mutex_;
  size_t budget_ = 0;
  std::array<size_t, kNumMemoryCategories> current_{};
  std::array<size_t, kNumMemoryCategories> peak_{};
  size_t current_total_ = 0;
  size_t peak_total_ = 0;
  bool timeline_enabled_ = false;
  std::vector<MemoryEvent> timeline_;
};

// "1.50 GiB", "12.0 MiB", "512 B".
std::string format_bytes(size_t bytes);

}  // namespace zs
