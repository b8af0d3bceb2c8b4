// Memory and traffic tables, the memory SVG chart.
#include "train/report.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <sstream>

namespace zs::train {

MemorySpread memory_spread(const std::vector<RankMemory>& ranks) {
  MemorySpread spread;
  spread.ranks = static_cast<int>(ranks.size());
  auto over_ranks = [&](const std::function<uint64_t(const RankMemory&)>& figure) {
    Spread s;
    for (size_t r = 0; r < ranks.size(); ++r) {
      const uint64_t value = figure(ranks[r]);
      s.min = r == 0 ? value : std::min(s.min, value);
      if (r == 0 || value > s.max) {
        s.max = value;
        s.max_rank = static_cast<int>(r);
      }
    }
    return s;
  };
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    spread.peak[c] = over_ranks([c](const RankMemory& m) { return m.peak.bytes[c]; });
  }
  spread.peak_total = over_ranks([](const RankMemory& m) { return m.peak_total; });
  const bool any_device = std::any_of(ranks.begin(), ranks.end(),
                                      [](const RankMemory& m) { return !m.device.empty(); });
  if (any_device) {
    for (const RankMemory& m : ranks) spread.devices.push_back(m.device.empty() ? "cpu" : m.device);
  }
  return spread;
}

namespace {

std::string category_table(const char* title, const MemorySpread& spread, size_t budget) {
  std::ostringstream out;
  char line[200];
  // The ranks' GPUs, in rank order; the first kListedDevices, then how many more.
  constexpr size_t kListedDevices = 8;
  std::string devices;
  for (size_t r = 0; r < spread.devices.size() && r < kListedDevices; ++r) {
    devices += (r == 0 ? " on " : ", ") + spread.devices[r];
  }
  if (spread.devices.size() > kListedDevices) {
    devices += " and " + std::to_string(spread.devices.size() - kListedDevices) + " more";
  }
  out << title << ", peak over the run (" << spread.ranks << " rank"
      << (spread.ranks == 1 ? "" : "s") << devices
      << (budget ? ", budget " + format_bytes(budget) : std::string()) << "):\n";
  std::snprintf(line, sizeof line, "  %-16s %12s %12s %8s\n", "category", "min", "max", "at rank");
  out << line;
  auto row = [&](const char* name, const Spread& s) {
    std::snprintf(line, sizeof line, "  %-16s %12s %12s %8d\n", name, format_bytes(s.min).c_str(),
                  format_bytes(s.max).c_str(), s.max_rank);
    out << line;
  };
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    if (spread.peak[c].max > 0) row(category_name(static_cast<MemoryCategory>(c)), spread.peak[c]);
  }
  row("total (peak)", spread.peak_total);
  return out.str();
}

}  // namespace

std::string memory_table(const MemorySpread& spread, size_t budget) {
  return category_table("memory per rank", spread, budget);
}

std::string host_memory_table(const MemorySpread& spread, size_t budget) {
  return category_table("host tier per rank (optimizer offload)", spread, budget);
}

std::array<uint64_t, comm::kNumCollectiveKinds> formula_bytes_sent(const TrafficFormula& f) {
  std::array<uint64_t, comm::kNumCollectiveKinds> sent{};
  auto add = [&](comm::CollectiveKind kind, uint64_t bytes, uint64_t times) {
    sent[static_cast<int>(kind)] +=
        times * comm::collective_traffic(kind, bytes, f.shard_group, f.rank_in_group, 0).sent;
  };
  const uint64_t micro = static_cast<uint64_t>(f.micro_batches);
  // Stages 0/1 reduce every micro-batch, or once per step with --grad-sync per-step.
  const uint64_t reductions = f.reduce_once_per_step && f.stage <= 1 ? 1 : micro;
  for (size_t u = 0; u < f.padded_numel.size(); ++u) {
    const uint64_t n = static_cast<uint64_t>(f.padded_numel[u]);
    const bool kept = u < f.kept_gathered.size() && f.kept_gathered[u];
    switch (f.stage) {
      case 0:  // DDP: every micro-batch's gradients all-reduced (per-step: their local sum)
        add(comm::CollectiveKind::kAllReduce, n * f.reduce_bytes, reductions);
        break;
      case 1:
      case 2:  // reduce-scatter per micro-batch, all-gather of the updated shards per step
        add(comm::CollectiveKind::kReduceScatter, n * f.reduce_bytes, reductions);
        add(comm::CollectiveKind::kAllGather, n * f.param_bytes, 1);
        break;
      default: {  // 3: gathered in forward and in backward of each micro-batch
        add(comm::CollectiveKind::kReduceScatter, n * f.reduce_bytes, micro);
        add(comm::CollectiveKind::kAllGather, n * f.param_bytes, kept ? 1 : 2 * micro);
        // Hybrid: each micro-batch's reduced shard is averaged over the replicas.
        const uint64_t shard = n / static_cast<uint64_t>(f.shard_group);
        sent[static_cast<int>(comm::CollectiveKind::kAllReduce)] +=
            micro * comm::collective_traffic(comm::CollectiveKind::kAllReduce,
                                             shard * f.reduce_bytes, f.replica_group,
                                             f.rank_in_replicas, 0)
                        .sent;
        break;
      }
    }
  }
  return sent;
}

StepTraffic snapshot(const comm::CommStats& stats) {
  StepTraffic out{};
  for (int k = 0; k < comm::kNumCollectiveKinds; ++k) {
    out[k] = stats.get(static_cast<comm::CollectiveKind>(k));
  }
  return out;
}

std::string traffic_table(const StepTraffic& measured, const TrafficFormula& formula) {
  const auto expected = formula_bytes_sent(formula);
  std::ostringstream out;
  char line[200];
  std::snprintf(
      line, sizeof line,
      "traffic of one step on this rank (ZeRO stage %d, %zu units sharded over %d "
      "ranks, %lld micro-batch%s%s):\n",
      formula.stage, formula.padded_numel.size(), formula.shard_group,
      static_cast<long long>(formula.micro_batches), formula.micro_batches == 1 ? "" : "es",
      formula.reduce_once_per_step && formula.stage <= 1 ? ", reduced once per step" : "");
  out << line;
  std::snprintf(line, sizeof line, "  %-15s %7s %14s %14s %12s %12s %10s\n", "collective", "calls",
                "sent", "formula", "difference", "copied", "ms");
  out << line;
  uint64_t total_sent = 0, total_formula = 0, total_copied = 0;
  for (int k = 0; k < comm::kNumCollectiveKinds; ++k) {
    const auto kind = static_cast<comm::CollectiveKind>(k);
    const comm::CollectiveStats& s = measured[k];
    if (s.calls == 0 && expected[k] == 0) continue;
    total_sent += s.bytes_sent;
    total_formula += expected[k];
    total_copied += s.bytes_copied;
    const long long diff =
        static_cast<long long>(s.bytes_sent) - static_cast<long long>(expected[k]);
    std::snprintf(line, sizeof line, "  %-15s %7llu %14s %14s %+12lld %12s %10.1f\n",
                  comm::collective_name(kind), static_cast<unsigned long long>(s.calls),
                  format_bytes(s.bytes_sent).c_str(), format_bytes(expected[k]).c_str(), diff,
                  format_bytes(s.bytes_copied).c_str(), s.seconds * 1e3);
    out << line;
  }
  std::snprintf(line, sizeof line, "  %-15s %7s %14s %14s %+12lld %12s\n", "total", "",
                format_bytes(total_sent).c_str(), format_bytes(total_formula).c_str(),
                static_cast<long long>(total_sent) - static_cast<long long>(total_formula),
                format_bytes(total_copied).c_str());
  out << line;
  out << "  (formula: units' padded sizes through the stage's collectives; the differences are "
         "the run's own small all-reduces: the logged loss, the grad norm, the fp16 overflow "
         "flag. copied: what the backend copied locally on this rank, measured — on local its "
         "transport; an in-place all-gather skips the rank's own slice)\n";
  return out.str();
}

namespace {

// Colours per category, in MemoryCategory order.
const char* kColours[kNumMemoryCategories] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                              "#59a14f", "#edc948", "#b07aa1", "#9c755f"};

}  // namespace

std::string memory_svg(const std::vector<MemoryEvent>& events, const CategoryBytes& start,
                       const std::string& title) {
  const int width = 900, height = 420, left = 80, right = 170, top = 40, bottom = 50;
  const int plot_w = width - left - right, plot_h = height - top - bottom;
  // Category bytes after each event (and at the start), and the time of each sample.
  std::vector<CategoryBytes> samples{start};
  std::vector<double> times{events.empty() ? 0.0 : events.front().time_ms};
  CategoryBytes current = start;
  for (const MemoryEvent& e : events) {
    if (e.delta == 0) continue;  // marks
    current[e.category] = e.category_bytes;
    samples.push_back(current);
    times.push_back(e.time_ms);
  }
  const double t0 = times.front();
  const double t1 = std::max(times.back(), t0 + 1e-3);
  size_t max_total = 1;
  for (const CategoryBytes& s : samples) {
    size_t total = 0;
    for (uint64_t b : s.bytes) total += b;
    max_total = std::max(max_total, total);
  }
  auto x = [&](double t) { return left + (t - t0) / (t1 - t0) * plot_w; };
  auto y = [&](double bytes) {
    return top + plot_h - bytes / static_cast<double>(max_total) * plot_h;
  };
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << left << "\" y=\"22\" font-size=\"15\">" << title << "</text>\n";
  // Stacked areas as step functions, bottom category first.
  std::vector<double> base(samples.size(), 0.0);
  int legend = 0;
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    bool used = false;
    for (const CategoryBytes& s : samples) used |= s.bytes[c] > 0;
    if (!used) continue;
    std::ostringstream points;
    // Upper edge left to right, then the lower edge back.
    for (size_t i = 0; i < samples.size(); ++i) {
      const double next_t = i + 1 < samples.size() ? times[i + 1] : t1;
      const double upper = base[i] + static_cast<double>(samples[i].bytes[c]);
      points << x(times[i]) << "," << y(upper) << " " << x(next_t) << "," << y(upper) << " ";
    }
    for (size_t i = samples.size(); i-- > 0;) {
      const double next_t = i + 1 < samples.size() ? times[i + 1] : t1;
      points << x(next_t) << "," << y(base[i]) << " " << x(times[i]) << "," << y(base[i]) << " ";
    }
    for (size_t i = 0; i < samples.size(); ++i) base[i] += static_cast<double>(samples[i].bytes[c]);
    svg << "<polygon fill=\"" << kColours[c] << "\" fill-opacity=\"0.85\" points=\"" << points.str()
        << "\"/>\n";
    const int ly = top + 10 + 20 * legend++;
    svg << "<rect x=\"" << width - right + 15 << "\" y=\"" << ly - 10 << "\" width=\"12\" "
        << "height=\"12\" fill=\"" << kColours[c] << "\"/><text x=\"" << width - right + 32
        << "\" y=\"" << ly << "\">" << category_name(static_cast<MemoryCategory>(c)) << "</text>\n";
  }
  // Axes with labels.
  svg << "<line x1=\"" << left << "\" y1=\"" << top + plot_h << "\" x2=\"" << left + plot_w
      << "\" y2=\"" << top + plot_h << "\" stroke=\"black\"/>\n"
      << "<line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left << "\" y2=\""
      << top + plot_h << "\" stroke=\"black\"/>\n";
  for (int i = 0; i <= 4; ++i) {
    const double bytes = static_cast<double>(max_total) * i / 4;
    svg << "<text x=\"" << left - 6 << "\" y=\"" << y(bytes) + 4 << "\" text-anchor=\"end\">"
        << format_bytes(static_cast<size_t>(bytes)) << "</text>\n";
    const double t = t0 + (t1 - t0) * i / 4;
    char label[32];
    std::snprintf(label, sizeof label, "%.1f ms", t - t0);
    svg << "<text x=\"" << x(t) << "\" y=\"" << top + plot_h + 18 << "\" text-anchor=\"middle\">"
        << label << "</text>\n";
  }
  svg << "<text x=\"" << left + plot_w / 2 << "\" y=\"" << height - 10
      << "\" text-anchor=\"middle\">time into the step</text>\n</svg>\n";
  return svg.str();
}

std::string tagged_path(const std::string& path, const std::string& tag,
                        const std::string& extension) {
  const size_t slash = path.find_last_of('/');
  size_t dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) dot = path.size();
  const std::string ext = extension.empty() ? path.substr(dot) : extension;
  return path.substr(0, dot) + tag + ext;
}

std::string rank_path(const std::string& path, int rank, int world, const std::string& extension) {
  return tagged_path(path, world > 1 ? ".rank" + std::to_string(rank) : "", extension);
}

}  // namespace zs::train
