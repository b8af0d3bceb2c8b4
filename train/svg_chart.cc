// SVG bar and line charts (train/svg_chart.h).
#include "train/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace zs::train {
namespace {

// Tableau-10: distinguishable, and still readable in greyscale print.
const char* const kColours[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
constexpr int kNumColours = sizeof kColours / sizeof kColours[0];

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// The frame every chart shares: title, plot area, y axis with ticks and grid, axis labels and
// the legend to the right; the chart fills the plot area in between.
class Frame {
 public:
  static constexpr int kLeft = 78, kRight = 180, kTop = 44, kBottom = 70;

  Frame(const Chart& chart, double y_max) : chart_(chart), ticks_(nice_ticks(y_max)) {
    plot_w_ = chart.width - kLeft - kRight;
    // kBottom holds two lines of category labels and the axis label; each further line of the
    // longest category takes its height from the plot, so the axis label stays below them.
    size_t lines = 1;
    for (const std::string& c : chart.categories) {
      lines = std::max(lines, 1 + static_cast<size_t>(std::count(c.begin(), c.end(), '\n')));
    }
    plot_h_ = chart.height - kTop - kBottom - 14 * static_cast<int>(lines > 2 ? lines - 2 : 0);
    svg_ << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << chart.width << "\" height=\""
         << chart.height << "\" viewBox=\"0 0 " << chart.width << " " << chart.height
         << "\" font-family=\"DejaVu Sans, Arial, sans-serif\" font-size=\"12\">\n"
         << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
         << "<text x=\"" << kLeft << "\" y=\"24\" font-size=\"15\" font-weight=\"bold\">"
         << escape(chart.title) << "</text>\n";
    for (double t : ticks_) {
      svg_ << "<line x1=\"" << kLeft << "\" y1=\"" << y(t) << "\" x2=\"" << kLeft + plot_w_
           << "\" y2=\"" << y(t) << "\" stroke=\"#e0e0e0\"/>\n"
           << "<line x1=\"" << kLeft - 5 << "\" y1=\"" << y(t) << "\" x2=\"" << kLeft << "\" y2=\""
           << y(t) << "\" stroke=\"black\"/>\n"
           << "<text x=\"" << kLeft - 8 << "\" y=\"" << y(t) + 4 << "\" text-anchor=\"end\">"
           << tick_label(t) << "</text>\n";
    }
    const int mid_y = kTop + plot_h_ / 2;
    svg_ << "<text x=\"18\" y=\"" << mid_y << "\" text-anchor=\"middle\" transform=\"rotate(-90 18 "
         << mid_y << ")\">" << escape(chart.y_label) << "</text>\n"
         << "<text x=\"" << kLeft + plot_w_ / 2 << "\" y=\"" << chart.height - 14
         << "\" text-anchor=\"middle\">" << escape(chart.x_label) << "</text>\n";
  }

  double top_value() const { return ticks_.back(); }
  int plot_w() const { return plot_w_; }
  double y(double value) const { return kTop + plot_h_ - value / top_value() * plot_h_; }
  double bottom() const { return kTop + plot_h_; }
  std::ostringstream& svg() { return svg_; }

  // A label with '\n' is set on several lines (long category names in narrow groups).
  void x_tick(double at, const std::string& label) {
    svg_ << "<line x1=\"" << at << "\" y1=\"" << bottom() << "\" x2=\"" << at << "\" y2=\""
         << bottom() + 5 << "\" stroke=\"black\"/>\n"
         << "<text x=\"" << at << "\" y=\"" << bottom() + 20 << "\" text-anchor=\"middle\">";
    size_t begin = 0;
    for (int line = 0; begin <= label.size(); ++line) {
      const size_t end = std::min(label.find('\n', begin), label.size());
      svg_ << "<tspan x=\"" << at << "\" dy=\"" << (line == 0 ? 0 : 14) << "\">"
           << escape(label.substr(begin, end - begin)) << "</tspan>";
      begin = end + 1;
    }
    svg_ << "</text>\n";
  }

  // `line`: a line sample (dashed or not) instead of a box.
  void legend_entry(int index, const std::string& name, const std::string& colour, bool line,
                    bool dashed) {
    const int x = chart_.width - kRight + 16, y_at = kTop + 8 + 22 * index;
    if (line) {
      svg_ << "<line x1=\"" << x << "\" y1=\"" << y_at << "\" x2=\"" << x + 22 << "\" y2=\"" << y_at
           << "\" stroke=\"" << colour << "\" stroke-width=\"2.5\""
           << (dashed ? " stroke-dasharray=\"6,4\"" : "") << "/>\n";
    } else {
      svg_ << "<rect x=\"" << x + 4 << "\" y=\"" << y_at - 7 << "\" width=\"14\" height=\"14\" "
           << "fill=\"" << colour << "\"/>\n";
    }
    svg_ << "<text x=\"" << x + 30 << "\" y=\"" << y_at + 4 << "\">" << escape(name) << "</text>\n";
  }

  std::string finish() {
    svg_ << "<line x1=\"" << kLeft << "\" y1=\"" << bottom() << "\" x2=\"" << kLeft + plot_w_
         << "\" y2=\"" << bottom() << "\" stroke=\"black\"/>\n"
         << "<line x1=\"" << kLeft << "\" y1=\"" << kTop << "\" x2=\"" << kLeft << "\" y2=\""
         << bottom() << "\" stroke=\"black\"/>\n</svg>\n";
    return svg_.str();
  }

 private:
  const Chart& chart_;
  std::vector<double> ticks_;
  int plot_w_ = 0;
  int plot_h_ = 0;
  std::ostringstream svg_;
};

}  // namespace

std::vector<double> nice_ticks(double max) {
  if (!(max > 0) || !std::isfinite(max)) max = 1;
  const double raw = max / 5;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (max / step <= 8) break;
  }
  std::vector<double> ticks;
  const int n = static_cast<int>(std::ceil(max / step - 1e-9));
  for (int i = 0; i <= std::max(n, 1); ++i) ticks.push_back(i * step);
  return ticks;
}

std::string tick_label(double value) {
  const double a = std::fabs(value);
  const char* suffix = "";
  double v = value;
  if (a >= 1e9) {
    v = value / 1e9;
    suffix = "G";
  } else if (a >= 1e6) {
    v = value / 1e6;
    suffix = "M";
  } else if (a >= 1e4) {
    v = value / 1e3;
    suffix = "k";
  }
  char text[32];
  if (*suffix == '\0' && v == std::floor(v)) {
    std::snprintf(text, sizeof text, "%.0f", v);  // 1200, not 1.2e+03
  } else {
    std::snprintf(text, sizeof text, "%.3g%s", v, suffix);
  }
  return text;
}

std::string bar_chart_svg(const Chart& chart) {
  const size_t groups = chart.categories.size();
  double max = 0;
  bool references = false;
  for (size_t g = 0; g < groups; ++g) {
    double stack = 0;
    for (const ChartSeries& s : chart.series) {
      const double v = g < s.values.size() ? s.values[g] : 0;
      stack += v;
      max = std::max(max, chart.stacked ? stack : v);
      if (g < s.reference.size()) {
        max = std::max(max, s.reference[g]);
        references = true;
      }
    }
  }
  Frame frame(chart, max);
  const double group_w = static_cast<double>(frame.plot_w()) / std::max<size_t>(groups, 1);
  const size_t per_group = chart.stacked ? 1 : std::max<size_t>(chart.series.size(), 1);
  const double bar_w = group_w * 0.8 / static_cast<double>(per_group);
  std::ostringstream& svg = frame.svg();
  for (size_t g = 0; g < groups; ++g) {
    const double group_x = Frame::kLeft + group_w * static_cast<double>(g) + group_w * 0.1;
    double base = 0;
    for (size_t i = 0; i < chart.series.size(); ++i) {
      const ChartSeries& s = chart.series[i];
      const double v = g < s.values.size() ? s.values[g] : 0;
      const double x = chart.stacked ? group_x : group_x + bar_w * static_cast<double>(i);
      const double y0 = frame.y(base), y1 = frame.y(base + v);
      svg << "<rect x=\"" << x << "\" y=\"" << y1 << "\" width=\"" << bar_w * 0.92 << "\" height=\""
          << std::max(0.0, y0 - y1) << "\" fill=\"" << kColours[i % kNumColours] << "\"><title>"
          << escape(s.name) << ", " << escape(chart.categories[g]) << ": " << tick_label(v)
          << "</title></rect>\n";
      if (g < s.reference.size()) {
        const double ry = frame.y((chart.stacked ? base : 0) + s.reference[g]);
        svg << "<line x1=\"" << x - 2 << "\" y1=\"" << ry << "\" x2=\"" << x + bar_w * 0.92 + 2
            << "\" y2=\"" << ry << "\" stroke=\"black\" stroke-width=\"2\"/>\n";
      }
      if (chart.stacked) base += v;
    }
    frame.x_tick(group_x + group_w * 0.4, chart.categories[g]);
  }
  for (size_t i = 0; i < chart.series.size(); ++i) {
    frame.legend_entry(static_cast<int>(i), chart.series[i].name, kColours[i % kNumColours], false,
                       false);
  }
  if (references) {
    frame.legend_entry(static_cast<int>(chart.series.size()),
                       chart.reference_label.empty() ? "expected" : chart.reference_label, "black",
                       true, false);
  }
  return frame.finish();
}

std::string line_chart_svg(const Chart& chart) {
  double max_x = 0, max_y = 0;
  for (const ChartSeries& s : chart.series) {
    for (double x : s.x) max_x = std::max(max_x, x);
    for (double y : s.values) max_y = std::max(max_y, y);
  }
  Frame frame(chart, max_y);
  std::vector<double> x_ticks = nice_ticks(max_x);
  // Counts along x (ranks, GPUs): ticks at whole numbers only.
  bool whole = true;
  for (const ChartSeries& s : chart.series) {
    for (double v : s.x) whole &= v == std::floor(v);
  }
  if (whole && x_ticks.size() > 1 && x_ticks[1] < 1) {
    x_ticks.clear();
    for (int i = 0; i <= static_cast<int>(std::ceil(max_x)); ++i) x_ticks.push_back(i);
  }
  const double x_top = x_ticks.back();
  auto x = [&](double value) { return Frame::kLeft + value / x_top * frame.plot_w(); };
  for (double t : x_ticks) frame.x_tick(x(t), tick_label(t));
  std::ostringstream& svg = frame.svg();
  for (size_t i = 0; i < chart.series.size(); ++i) {
    const ChartSeries& s = chart.series[i];
    const char* colour = kColours[i % kNumColours];
    std::ostringstream points;
    for (size_t k = 0; k < s.values.size() && k < s.x.size(); ++k) {
      points << x(s.x[k]) << "," << frame.y(s.values[k]) << " ";
    }
    svg << "<polyline fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"2.5\""
        << (s.dashed ? " stroke-dasharray=\"6,4\"" : "") << " points=\"" << points.str()
        << "\"/>\n";
    for (size_t k = 0; k < s.values.size() && k < s.x.size(); ++k) {
      svg << "<circle cx=\"" << x(s.x[k]) << "\" cy=\"" << frame.y(s.values[k])
          << "\" r=\"3.5\" fill=\"" << colour << "\"><title>" << escape(s.name) << ": "
          << tick_label(s.values[k]) << "</title></circle>\n";
    }
    frame.legend_entry(static_cast<int>(i), s.name, colour, true, s.dashed);
  }
  return frame.finish();
}

}  // namespace zs::train
