// Figures quoted against a limit measured on this machine — a GEMM or FMA peak, a disk's raw
// rate — are printed only when they can be right. A rate above the limit it is quoted against
// means the limit was measured low (the machine was busy then): it is re-measured, and if it
// still reads low the figure is shown as unknown ("—"), never as it stands. The training log's
// MFU (train/compute_peak.h) and the benches' "% of peak" and "% of raw disk" go through here.
//
// Header-only, no state; thread-safe.
#pragma once

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

namespace zs {

// How a figure that cannot be right is shown.
inline constexpr const char* kUnknownFigure = "—";

// achieved / limit, or nothing when the limit is unknown (<= 0) or below what was achieved.
inline std::optional<double> fraction_of_limit(double achieved, double limit) {
  if (!(limit > 0) || !(achieved >= 0) || achieved > limit) return std::nullopt;
  return achieved / limit;
}

// achieved / limit as a percentage through `format` ("%.1f%%"), or kUnknownFigure.
inline std::string percent_of_limit(double achieved, double limit, const char* format = "%.1f%%") {
  const std::optional<double> fraction = fraction_of_limit(achieved, limit);
  if (!fraction) return kUnknownFigure;
  char text[64];
  std::snprintf(text, sizeof text, format, 100.0 * *fraction);
  return text;
}

// The limit to quote `achieved` against: `limit` itself when achieved fits under it, else the
// best of `limit` and up to `tries` new measurements (`measure()` returns one), stopping as soon
// as achieved fits. The result may still be below achieved: fraction_of_limit then says unknown.
template <class Measure>
double remeasured_limit(double limit, double achieved, Measure&& measure, int tries = 2) {
  for (int t = 0; t < tries && achieved > limit; ++t) limit = std::max(limit, measure());
  return limit;
}

}  // namespace zs
