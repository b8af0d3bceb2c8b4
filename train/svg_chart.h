// SVG charts for reports: grouped or stacked bar charts and line charts, with axes, "nice"
// ticks, axis labels, a title and a legend, as one self-contained SVG document (no scripts, no
// external fonts; renders in browsers and rsvg-convert). zs-study's figures and zs-bench-train's
// scaling chart are drawn with it. Pure functions of their arguments (thread-safe).
#pragma once

#include <string>
#include <vector>

namespace zs::train {

struct ChartSeries {
  std::string name;            // legend entry
  std::vector<double> values;  // one per category (bars) or per x (lines)
  // Bars: an expected value per category drawn as a black tick across the bar (e.g. a formula);
  // empty: none. Lines: unused.
  std::vector<double> reference;
  std::vector<double> x;  // lines: the x of each value
  bool dashed = false;    // lines: drawn dashed (e.g. an ideal)
};

struct Chart {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<std::string> categories;  // bars: the groups along x, left to right
  std::vector<ChartSeries> series;
  bool stacked = false;         // bars: series stacked in each category instead of side by side
  std::string reference_label;  // legend text of the reference ticks (when any series has them)
  int width = 760;
  int height = 420;
};

// Bars per category: one per series side by side, or stacked. The y axis starts at 0.
std::string bar_chart_svg(const Chart& chart);
// One polyline with point markers per series over numeric x; both axes start at 0.
std::string line_chart_svg(const Chart& chart);

// The tick positions of an axis from 0 to at least `max`: 4 to 10 steps of 1, 2 or 5 × 10^k.
std::vector<double> nice_ticks(double max);
// A tick label: "0", "0.25", "12", "1.5k", "3M", "2G".
std::string tick_label(double value);

}  // namespace zs::train
