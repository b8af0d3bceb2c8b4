// Trace: span recording, the Chrome trace JSON (with lanes packed so that every lane's spans
// nest or follow each other), and the exposed-communication arithmetic on interval unions.
#include "runtime/trace.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <utility>

#include "runtime/file_io.h"
#include "runtime/json_escape.h"

namespace zs {

const char* trace_lane_name(TraceLane lane) {
  switch (lane) {
    case TraceLane::kStep:
      return "step";
    case TraceLane::kCompute:
      return "compute";
    case TraceLane::kWait:
      return "wait";
    case TraceLane::kGather:
      return "gather";
    case TraceLane::kReduce:
      return "reduce";
    case TraceLane::kOptimizer:
      return "optimizer";
    case TraceLane::kIo:
      return "io";
    case TraceLane::kData:
      return "data";
  }
  return "unknown";
}

void Trace::record(TraceLane lane, std::string name, SteadyClock::time_point begin,
                   SteadyClock::time_point end) {
  const double begin_us = trace_us(begin);
  const double end_us = std::max(begin_us, trace_us(end));
  std::lock_guard<std::mutex> lock(mutex_);
  spans_.push_back({lane, std::move(name), begin_us, end_us});
}

std::vector<TraceSpan> Trace::spans() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return spans_;
}

void Trace::write(const std::string& path) const {
  const std::string json = chrome_trace_json(spans(), rank_);
  detail::AtomicFileWriter file(path);
  file.write(json.data(), json.size());
  file.commit();
}

namespace {

std::string microseconds(double us) {
  char text[40];
  std::snprintf(text, sizeof text, "%.3f", us);
  return text;
}

using Intervals = std::vector<std::pair<double, double>>;  // sorted, disjoint, non-empty

Intervals merged(Intervals raw) {
  std::sort(raw.begin(), raw.end());
  Intervals out;
  for (const auto& [begin, end] : raw) {
    if (end <= begin) continue;
    if (!out.empty() && begin <= out.back().second) {
      out.back().second = std::max(out.back().second, end);
    } else {
      out.emplace_back(begin, end);
    }
  }
  return out;
}

Intervals intersection(const Intervals& a, const Intervals& b) {
  Intervals out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double begin = std::max(a[i].first, b[j].first);
    const double end = std::min(a[i].second, b[j].second);
    if (begin < end) out.emplace_back(begin, end);
    (a[i].second < b[j].second ? i : j)++;
  }
  return out;
}

// a minus b.
Intervals difference(const Intervals& a, const Intervals& b) {
  Intervals out;
  size_t j = 0;
  for (auto [begin, end] : a) {
    while (j < b.size() && b[j].second <= begin) ++j;
    for (size_t k = j; k < b.size() && b[k].first < end; ++k) {
      if (b[k].first > begin) out.emplace_back(begin, b[k].first);
      begin = std::max(begin, b[k].second);
    }
    if (begin < end) out.emplace_back(begin, end);
  }
  return out;
}

double total(const Intervals& intervals) {
  double sum = 0;
  for (const auto& [begin, end] : intervals) sum += end - begin;
  return sum;
}

Intervals of_lanes(const std::vector<TraceSpan>& spans, std::initializer_list<TraceLane> lanes) {
  Intervals raw;
  for (const TraceSpan& s : spans) {
    if (std::find(lanes.begin(), lanes.end(), s.lane) != lanes.end()) {
      raw.emplace_back(s.begin_us, s.end_us);
    }
  }
  return merged(std::move(raw));
}

}  // namespace

std::string chrome_trace_json(const std::vector<TraceSpan>& spans, int rank) {
  // Outer spans first among equal starts, so that an enclosing span opens its lane's stack.
  std::vector<const TraceSpan*> order;
  for (const TraceSpan& s : spans) order.push_back(&s);
  std::stable_sort(order.begin(), order.end(), [](const TraceSpan* a, const TraceSpan* b) {
    if (a->begin_us != b->begin_us) return a->begin_us < b->begin_us;
    return a->end_us > b->end_us;
  });
  // Lanes of one kind: each keeps the ends of its open spans; a span goes to the first lane of
  // its kind where it follows or nests in what is open there.
  struct Lane {
    TraceLane kind;
    int index;  // 0: "compute", 1: "compute #2", …
    std::vector<double> open_ends;
  };
  std::vector<Lane> lanes;
  std::ostringstream events;
  const std::string pid = std::to_string(rank);
  for (const TraceSpan* s : order) {
    size_t chosen = lanes.size();
    int same_kind = 0;
    for (size_t l = 0; l < lanes.size(); ++l) {
      Lane& lane = lanes[l];
      if (lane.kind != s->lane) continue;
      ++same_kind;
      while (!lane.open_ends.empty() && lane.open_ends.back() <= s->begin_us) {
        lane.open_ends.pop_back();
      }
      if (lane.open_ends.empty() || s->end_us <= lane.open_ends.back()) {
        chosen = l;
        break;
      }
    }
    if (chosen == lanes.size()) lanes.push_back({s->lane, same_kind, {}});
    lanes[chosen].open_ends.push_back(s->end_us);
    events << "{\"name\":\"" << json_escape(s->name) << "\",\"cat\":\"" << trace_lane_name(s->lane)
           << "\",\"ph\":\"X\",\"ts\":" << microseconds(s->begin_us)
           << ",\"dur\":" << microseconds(s->end_us - s->begin_us) << ",\"pid\":" << pid
           << ",\"tid\":" << chosen + 1 << "},\n";
  }
  std::ostringstream out;
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  out << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" << pid << ",\"tid\":0,"
      << "\"args\":{\"name\":\"rank " << rank << "\"}},\n";
  for (size_t l = 0; l < lanes.size(); ++l) {
    std::string name = trace_lane_name(lanes[l].kind);
    if (lanes[l].index > 0) name += " #" + std::to_string(lanes[l].index + 1);
    // Lanes sorted by kind, then by their index within the kind.
    const int sort = static_cast<int>(lanes[l].kind) * 100 + lanes[l].index;
    out << "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" << pid << ",\"tid\":" << l + 1
        << ",\"args\":{\"name\":\"" << name << "\"}},\n"
        << "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":" << pid << ",\"tid\":" << l + 1
        << ",\"args\":{\"sort_index\":" << sort << "}},\n";
  }
  out << events.str();
  // Every line above ends in ",\n": one more metadata event closes the list validly.
  out << "{\"name\":\"trace_end\",\"ph\":\"M\",\"pid\":" << pid << ",\"tid\":0,\"args\":{}}\n]}\n";
  return out.str();
}

std::vector<StepExposure> exposed_communication(const std::vector<TraceSpan>& spans) {
  const Intervals communication = of_lanes(spans, {TraceLane::kGather, TraceLane::kReduce});
  const Intervals computing =
      difference(of_lanes(spans, {TraceLane::kCompute, TraceLane::kOptimizer}),
                 of_lanes(spans, {TraceLane::kWait}));
  Intervals steps;
  for (const TraceSpan& s : spans) {
    if (s.lane == TraceLane::kStep) steps.emplace_back(s.begin_us, s.end_us);
  }
  std::sort(steps.begin(), steps.end());
  std::vector<StepExposure> out;
  for (const auto& step : steps) {
    const Intervals window{step};
    const Intervals in_step = intersection(communication, window);
    StepExposure e;
    e.step_us = step.second - step.first;
    e.communication_us = total(in_step);
    e.exposed_us = total(difference(in_step, computing));
    out.push_back(e);
  }
  return out;
}

}  // namespace zs
