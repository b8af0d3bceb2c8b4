// MemoryTracker implementation: counters under one mutex, budget check before charging.
#include "runtime/memory_tracker.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "runtime/error.h"
#include "runtime/json_escape.h"

namespace zs {
namespace {

thread_local MemoryCategory t_category = MemoryCategory::kOther;

constexpr const char* kCategoryNames[kNumMemoryCategories] = {
    "parameters",  "gradients",    "master_weights", "optimizer_state",
    "activations", "comm_buffers", "workspace",      "other"};

// What to do about an OOM, from the category that holds the most memory.
std::string oom_hint(MemoryCategory largest) {
  switch (largest) {
    case MemoryCategory::kActivations:
      return "activations dominate: lower the micro-batch size or sequence length, or enable "
             "activation checkpointing";
    case MemoryCategory::kParameters:
    case MemoryCategory::kGradients:
      return "model states dominate: use a higher ZeRO stage (--zero-stage 3 shards parameters "
             "and gradients), more ranks, or parameter offload";
    case MemoryCategory::kMasterWeights:
    case MemoryCategory::kOptimizerState:
      return "optimizer state dominates: use --zero-stage 1 or higher to shard it, or offload "
             "the optimizer to host memory or NVMe";
    case MemoryCategory::kCommBuffers:
      return "communication buffers dominate: lower the bucket size or the prefetch limit "
             "(max live gathered bytes)";
    default:
      return "raise the budget if the device really has more memory, or reduce the batch size";
  }
}

}  // namespace

const char* category_name(MemoryCategory category) {
  return kCategoryNames[static_cast<int>(category)];
}

MemoryCategory parse_memory_category(const std::string& name) {
  for (int i = 0; i < kNumMemoryCategories; ++i) {
    if (name == kCategoryNames[i]) return static_cast<MemoryCategory>(i);
  }
  ZS_THROW(InvalidArgument, "unknown memory category '", name,
           "'; expected parameters, gradients, master_weights, optimizer_state, activations, "
           "comm_buffers, workspace or other");
}

MemoryCategory current_memory_category() { return t_category; }

MemoryCategoryScope::MemoryCategoryScope(MemoryCategory category) : previous_(t_category) {
  t_category = category;
}
MemoryCategoryScope::~MemoryCategoryScope() { t_category = previous_; }

std::string format_bytes(size_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (bytes >= (size_t{1} << 30)) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1 << 30));
  } else if (bytes >= (size_t{1} << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1 << 20));
  } else if (bytes >= (size_t{1} << 10)) {
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / (1 << 10));
  } else {
    std::snprintf(buf, sizeof buf, "%zu B", bytes);
  }
  return buf;
}

MemoryTracker::MemoryTracker(std::string device_name)
    : device_name_(std::move(device_name)), start_(std::chrono::steady_clock::now()) {}

void MemoryTracker::set_budget(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  budget_ = bytes;
}

size_t MemoryTracker::budget() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return budget_;
}

void MemoryTracker::charge(MemoryCategory category, size_t bytes, const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int c = static_cast<int>(category);
  if (budget_ != 0 && current_total_ + bytes > budget_) {
    int largest = 0;
    for (int i = 1; i < kNumMemoryCategories; ++i) {
      if (current_[i] > current_[largest]) largest = i;
    }
    if (current_[largest] < bytes) largest = c;
    ZS_THROW(OutOfMemory, "out of memory on ", device_name_, ": allocating ", format_bytes(bytes),
             " (", bytes, " bytes) of ", kCategoryNames[c], " for '", what,
             "' would bring the total to ", format_bytes(current_total_ + bytes),
             ", over the budget of ", format_bytes(budget_), " (", budget_, " bytes).\n",
             breakdown_locked(), "hint: ", oom_hint(static_cast<MemoryCategory>(largest)));
  }
  current_[c] += bytes;
  peak_[c] = std::max(peak_[c], current_[c]);
  current_total_ += bytes;
  peak_total_ = std::max(peak_total_, current_total_);
  if (timeline_enabled_) record_locked(category, static_cast<int64_t>(bytes), what);
}

void MemoryTracker::uncharge(MemoryCategory category, size_t bytes, const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int c = static_cast<int>(category);
  ZS_CHECK(current_[c] >= bytes, "memory tracker of ", device_name_, ": freeing ", bytes,
           " bytes of ", kCategoryNames[c], " for '", what, "' but only ", current_[c],
           " are charged; an allocation was freed twice or charged to another category");
  current_[c] -= bytes;
  current_total_ -= bytes;
  if (timeline_enabled_) record_locked(category, -static_cast<int64_t>(bytes), what);
}

void MemoryTracker::record_locked(MemoryCategory category, int64_t delta,
                                  const std::string& label) {
  MemoryEvent event;
  event.time_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  event.category = category;
  event.delta = delta;
  event.category_bytes = current_[static_cast<int>(category)];
  event.total_bytes = current_total_;
  event.label = label;
  timeline_.push_back(std::move(event));
}

size_t MemoryTracker::current(MemoryCategory category) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return current_[static_cast<int>(category)];
}

size_t MemoryTracker::peak(MemoryCategory category) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_[static_cast<int>(category)];
}

size_t MemoryTracker::current_total() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return current_total_;
}

size_t MemoryTracker::peak_total() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_total_;
}

void MemoryTracker::reset_peaks() {
  std::lock_guard<std::mutex> lock(mutex_);
  peak_ = current_;
  peak_total_ = current_total_;
}

void MemoryTracker::enable_timeline(bool enabled) {
  std::lock_guard<std::mutex> lock(mutex_);
  timeline_enabled_ = enabled;
}

void MemoryTracker::mark(const std::string& label) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (timeline_enabled_) record_locked(MemoryCategory::kOther, 0, label);
}

std::vector<MemoryEvent> MemoryTracker::timeline() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return timeline_;
}

std::string MemoryTracker::timeline_json() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream out;
  out << "{\"device\": \"" << json_escape(device_name_) << "\", \"budget\": " << budget_
      << ",\n \"categories\": [";
  for (int i = 0; i < kNumMemoryCategories; ++i) {
    out << (i ? ", " : "") << '"' << kCategoryNames[i] << '"';
  }
  out << "],\n \"peak\": {";
  for (int i = 0; i < kNumMemoryCategories; ++i) {
    out << (i ? ", " : "") << '"' << kCategoryNames[i] << "\": " << peak_[i];
  }
  out << ", \"total\": " << peak_total_ << "},\n \"events\": [";
  char time_buf[32];
  for (size_t i = 0; i < timeline_.size(); ++i) {
    const MemoryEvent& e = timeline_[i];
    std::snprintf(time_buf, sizeof time_buf, "%.3f", e.time_ms);
    out << (i ? ",\n  " : "\n  ") << "{\"t_ms\": " << time_buf << ", \"category\": \""
        << category_name(e.category) << "\", \"delta\": " << e.delta
        << ", \"category_bytes\": " << e.category_bytes << ", \"total_bytes\": " << e.total_bytes
        << ", \"label\": \"" << json_escape(e.label) << "\"}";
  }
  out << "\n ]}\n";
  return out.str();
}

void MemoryTracker::write_timeline_json(const std::string& path) const {
  const std::string json = timeline_json();
  const std::string temp = path + ".tmp";
  {
    std::ofstream file(temp, std::ios::binary | std::ios::trunc);
    ZS_CHECK_AS(IoError, file.good(), "cannot open '", temp,
                "' to write the memory timeline; check that the directory exists and is writable");
    file << json;
    file.flush();
    ZS_CHECK_AS(IoError, file.good(), "writing the memory timeline to '", temp,
                "' failed (disk full?)");
  }
  ZS_CHECK_AS(IoError, std::rename(temp.c_str(), path.c_str()) == 0, "cannot rename '", temp,
              "' to '", path, "'");
}

std::string MemoryTracker::breakdown() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return breakdown_locked();
}

std::string MemoryTracker::breakdown_locked() const {
  std::ostringstream out;
  char line[160];
  std::snprintf(line, sizeof line, "  %-16s %14s %14s\n", "category", "current", "peak");
  out << "memory on " << device_name_ << ":\n" << line;
  for (int i = 0; i < kNumMemoryCategories; ++i) {
    std::snprintf(line, sizeof line, "  %-16s %14s %14s\n", kCategoryNames[i],
                  format_bytes(current_[i]).c_str(), format_bytes(peak_[i]).c_str());
    out << line;
  }
  std::snprintf(line, sizeof line, "  %-16s %14s %14s\n", "total",
                format_bytes(current_total_).c_str(), format_bytes(peak_total_).c_str());
  out << line;
  if (budget_ != 0) {
    std::snprintf(line, sizeof line, "  %-16s %14s\n", "budget", format_bytes(budget_).c_str());
    out << line;
  }
  return out.str();
}

}  // namespace zs
