// UnitSchedule (sharding/unit_schedule.h).
#include "sharding/unit_schedule.h"

#include <algorithm>
#include <utility>

#include "runtime/error.h"
#include "runtime/logging.h"

namespace zs::sharding {
namespace {

const char* pass_name(Pass pass) {
  switch (pass) {
    case Pass::kForward:
      return "forward";
    case Pass::kBackward:
      return "backward";
    case Pass::kReductions:
      return "backward's reductions";
  }
  return "?";
}

// FNV-1a over the unit indices of a recorded order.
uint64_t order_hash(const std::vector<uint64_t>& indices) {
  uint64_t hash = 14695981039346656037ull;
  for (uint64_t index : indices) {
    for (int byte = 0; byte < 8; ++byte) {
      hash ^= (index >> (8 * byte)) & 0xff;
      hash *= 1099511628211ull;
    }
  }
  return hash;
}

}  // namespace

UnitSchedule::UnitSchedule(Options options, std::vector<std::string> unit_names)
    : options_(options), unit_names_(std::move(unit_names)) {}

void UnitSchedule::begin(Pass pass) { order(pass).position = 0; }

void UnitSchedule::on_unit_start(Pass pass, size_t unit) {
  Order& o = order(pass);
  if (!o.complete) {
    o.recorded.push_back(unit);
  } else if (!order_changed_) {
    const size_t at = o.position;
    if (at >= o.recorded.size() || o.recorded[at] != unit) {
      order_changed_ = true;
      ZS_LOG_WARN(
          "sharding: unit '{}' ran at position {} of the {} pass, which differs from the order "
          "recorded on the first step; prefetching is off from now on (gathers happen on "
          "demand)",
          unit_names_[unit], at, pass_name(pass));
    }
  }
  ++o.position;
}

void UnitSchedule::record_reduction(size_t unit) {
  Order& o = order(Pass::kReductions);
  if (!o.complete) o.recorded.push_back(unit);
}

void UnitSchedule::complete(Pass pass) { order(pass).complete = true; }

std::optional<size_t> UnitSchedule::prefetch_ahead(
    Pass pass, const UnitStates& units, const std::function<void(size_t)>& start_gather) {
  const Order& o = order(pass);
  if (!options_.gathers_just_in_time || !prefetching() || !o.checked) return std::nullopt;
  const auto fits_live = [&](size_t next) {
    return options_.max_live_gathered_bytes == 0 ||
           live_gathered_bytes_ + units.full_bytes(next) <= options_.max_live_gathered_bytes;
  };
  // Gathered ahead and not yet used: a prefetch holds its Work until the gather takes it.
  size_t ahead = 0;
  for (size_t u = 0; u < units.count(); ++u) ahead += units.gathering(u) ? units.full_bytes(u) : 0;
  const std::vector<size_t>& recorded = o.recorded;
  size_t reached = o.position;  // the first unit of the order this call did not gather
  if (options_.prefetch_bytes == 0) {  // one unit ahead
    if (o.position < recorded.size()) {
      const size_t next = recorded[o.position];
      if (units.released(next) && fits_live(next)) {
        start_gather(next);
        ahead += units.full_bytes(next);
      }
      reached = o.position + 1;
    }
  } else {
    for (; reached < recorded.size(); ++reached) {
      const size_t next = recorded[reached];
      if (!units.released(next)) continue;  // gathered already: costs nothing more
      if (ahead + units.full_bytes(next) > options_.prefetch_bytes || !fits_live(next)) break;
      start_gather(next);
      ahead += units.full_bytes(next);
    }
  }
  peak_prefetched_bytes_ = std::max(peak_prefetched_bytes_, ahead);
  if (reached < recorded.size()) return recorded[reached];
  return std::nullopt;
}

void UnitSchedule::gathered(size_t bytes) {
  live_gathered_bytes_ += bytes;
  peak_live_gathered_bytes_ = std::max(peak_live_gathered_bytes_, live_gathered_bytes_);
}

void UnitSchedule::released(size_t bytes) { live_gathered_bytes_ -= bytes; }

void UnitSchedule::check_recorded_orders(comm::Communicator& world, Allocator& allocator) {
  // What follows the recorded order: stage 3's prefetches, and hybrid's replica all-reduces
  // (issued in backward order, across the groups: hence the world, not the shard group).
  const bool prefetches = options_.gathers_just_in_time && options_.prefetch;
  if (!prefetches && !options_.reductions_followed) return;
  std::vector<Pass> passes;
  for (const Pass pass : {Pass::kForward, Pass::kBackward, Pass::kReductions}) {
    // The reductions' order is followed only by hybrid's all-reduces across the groups.
    if (pass == Pass::kReductions && !options_.reductions_followed) continue;
    if (order(pass).complete && !order(pass).checked) passes.push_back(pass);
  }
  if (passes.empty()) return;
  // Every rank comes here at the same point of its calls (the first finish_backward, or the
  // forward that follows a forward), so this is a collective like the others on the queue.
  std::vector<std::vector<uint64_t>> orders;
  std::vector<uint64_t> summary;  // per pass: hash, length
  for (const Pass pass : passes) {
    std::vector<uint64_t> indices(order(pass).recorded.begin(), order(pass).recorded.end());
    summary.push_back(order_hash(indices));
    summary.push_back(indices.size());
    orders.push_back(std::move(indices));
    order(pass).checked = true;
  }
  const std::vector<std::vector<uint64_t>> summaries =
      comm::all_gather_u64(world, allocator, summary, "unit order check");
  if (std::all_of(summaries.begin(), summaries.end(),
                  [&](const std::vector<uint64_t>& other) { return other == summaries[0]; })) {
    return;
  }
  throw_first_difference(world, allocator, passes, std::move(orders), summaries);
}

std::string UnitSchedule::unit_name(uint64_t index) const {
  if (index == ~uint64_t{0}) return "no unit (its pass had ended)";
  if (index >= unit_names_.size()) {  // a rank whose model has more units than this one's
    return "unit #" + std::to_string(index) + " (this rank's model has " +
           std::to_string(unit_names_.size()) + " units)";
  }
  return "unit '" + unit_names_[static_cast<size_t>(index)] + "'";
}

void UnitSchedule::throw_first_difference(comm::Communicator& world, Allocator& allocator,
                                          const std::vector<Pass>& passes,
                                          std::vector<std::vector<uint64_t>> orders,
                                          const std::vector<std::vector<uint64_t>>& summaries) {
  // Every rank gathers every order (padded to the longest of its pass) and finds the same first
  // difference, so all of them fail with the same message.
  constexpr uint64_t kNoUnit = ~uint64_t{0};  // past the end of a shorter order
  std::vector<size_t> longest(passes.size(), 0);
  for (const std::vector<uint64_t>& other : summaries) {
    for (size_t p = 0; p < passes.size(); ++p) {
      longest[p] = std::max(longest[p], static_cast<size_t>(other[2 * p + 1]));
    }
  }
  std::vector<uint64_t> padded;
  for (size_t p = 0; p < passes.size(); ++p) {
    orders[p].resize(longest[p], kNoUnit);
    padded.insert(padded.end(), orders[p].begin(), orders[p].end());
  }
  const std::vector<std::vector<uint64_t>> all =
      comm::all_gather_u64(world, allocator, padded, "unit orders");
  size_t offset = 0;
  for (size_t p = 0; p < passes.size(); ++p) {
    for (size_t at = 0; at < longest[p]; ++at) {
      const uint64_t reference = all[0][offset + at];
      std::string differing;
      int first = -1;
      for (size_t r = 1; r < all.size(); ++r) {
        if (all[r][offset + at] == reference) continue;
        if (first < 0) first = static_cast<int>(r);
        differing += (differing.empty() ? "" : ", ") + std::to_string(r);
      }
      if (first < 0) continue;
      ZS_THROW(InvalidArgument,
               "sharding: the ranks recorded different unit orders on the first step, and stage "
               "3 prefetches along that order (hybrid: all-reduces across the groups too), so "
               "their collectives would pair different units (a hang, or wrong parameters). "
               "First difference: position ",
               at, " of the ", pass_name(passes[p]), " pass, where rank 0 ran ",
               unit_name(reference), " and rank ", first, " ran ",
               unit_name(all[static_cast<size_t>(first)][offset + at]),
               " (ranks differing from rank 0 there: ", differing,
               "). Make every rank run the same modules in the same order (no rank- or "
               "data-dependent control flow around wrapped units), or turn prefetch off");
    }
    offset += longest[p];
  }
  ZS_THROW(InvalidArgument,
           "sharding: the ranks recorded unit orders whose hashes differ but whose entries are "
           "equal; this is a bug in the unit order check");
}

}  // namespace zs::sharding
