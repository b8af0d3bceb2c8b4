// UnitSchedule: the order a ShardedModel's units run in, recorded on the first step, and what
// follows that order — stage 3's prefetch within its byte bounds, the gathered-byte counters, and
// the check that every rank recorded the same order before anything is issued along it.
//
// Three passes are recorded as unit indices: the forward (pre-hooks), the backward (the "end"
// boundaries, where a unit's parameters come back) and the backward's reductions (the "begin"
// boundaries, where a unit's gradients are complete; hybrid issues its all-reduces across the
// groups along it). A later step that runs a unit at another place turns prefetch off for good,
// with a warning (gathers then happen on demand, which needs no agreement between ranks).
//
// The check is a collective over the world: every rank calls check_recorded_orders at the same
// point of its calls (the first finish_backward, or a forward after a forward), and all throw
// the same InvalidArgument naming the first difference when the orders differ.
//
// Prefetch issues while it decides: each gather it starts raises the live bytes the next
// decision reads, and a unit listed twice in an order is skipped at its second place because it
// is no longer released. One UnitSchedule per ShardedModel, used by its rank's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "runtime/allocator.h"

namespace zs::sharding {

// The passes a schedule records.
enum class Pass { kForward, kBackward, kReductions };

// What prefetch reads of the units, live; implemented by the model that owns them.
class UnitStates {
 public:
  virtual ~UnitStates() = default;
  virtual size_t full_bytes(size_t unit) const = 0;
  // Its full parameters are not gathered (nor being gathered).
  virtual bool released(size_t unit) const = 0;
  // A prefetch of it is in flight.
  virtual bool gathering(size_t unit) const = 0;
  virtual size_t count() const = 0;
};

class UnitSchedule {
 public:
  struct Options {
    bool prefetch = true;              // ShardingConfig::prefetch
    bool gathers_just_in_time = true;  // the full parameters are released after use (stage 3)
    bool reductions_followed = false;  // hybrid: all-reduces across groups follow kReductions
    size_t prefetch_bytes = 0;           // ShardingConfig::prefetch_bytes (0: one unit ahead)
    size_t max_live_gathered_bytes = 0;  // ShardingConfig::max_live_gathered_bytes (0: none)
  };
  // `unit_names` by unit index: for the order-change warning and the check's message.
  UnitSchedule(Options options, std::vector<std::string> unit_names);

  // A new pass starts: its position goes back to the first unit.
  void begin(Pass pass);
  // `unit` starts in `pass`: recorded until the pass is complete, then compared with the
  // recorded order (a difference turns prefetch off for good, with a warning).
  void on_unit_start(Pass pass, size_t unit);
  // `unit`'s gradients are complete: recorded until the reductions' pass is complete.
  void record_reduction(size_t unit);
  // The first `pass` ended: its order is recorded.
  void complete(Pass pass);

  // Compares every complete pass not checked yet across `world` (see above); a collective when
  // anything follows the orders (prefetch, or hybrid's reductions), else nothing.
  void check_recorded_orders(comm::Communicator& world, Allocator& allocator);

  const std::vector<size_t>& recorded(Pass pass) const { return order(pass).recorded; }
  // The ranks agreed on recorded(pass).
  bool checked(Pass pass) const { return order(pass).checked; }
  // False once an order change disabled prefetching.
  bool prefetching() const { return options_.prefetch && !order_changed_; }

  // Stage 3: starts (through `start_gather`) the all-gathers of the units after `pass`'s
  // position in its checked order, while the bytes gathered ahead and not yet used stay within
  // prefetch_bytes (0: the next unit) and the live bytes within max_live_gathered_bytes. Returns
  // the first unit of the order it did not gather, or nothing (prefetch off, the order not yet
  // checked, or the order's end reached).
  std::optional<size_t> prefetch_ahead(Pass pass, const UnitStates& units,
                                       const std::function<void(size_t)>& start_gather);

  // A unit's full parameters were gathered into memory (`bytes`), or released.
  void gathered(size_t bytes);
  void released(size_t bytes);
  size_t live_gathered_bytes() const { return live_gathered_bytes_; }
  size_t peak_live_gathered_bytes() const { return peak_live_gathered_bytes_; }
  size_t peak_prefetched_bytes() const { return peak_prefetched_bytes_; }

 private:
  struct Order {
    std::vector<size_t> recorded;
    bool complete = false;
    bool checked = false;  // the ranks agreed on `recorded`
    size_t position = 0;   // where the current pass is in it
  };
  Order& order(Pass pass) { return orders_[static_cast<size_t>(pass)]; }
  const Order& order(Pass pass) const { return orders_[static_cast<size_t>(pass)]; }
  std::string unit_name(uint64_t index) const;
  // Every rank gathers every order and throws the same message naming the first difference.
  [[noreturn]] void throw_first_difference(comm::Communicator& world, Allocator& allocator,
                                           const std::vector<Pass>& passes,
                                           std::vector<std::vector<uint64_t>> orders,
                                           const std::vector<std::vector<uint64_t>>& summaries);

  Options options_;
  std::vector<std::string> unit_names_;
  Order orders_[3];
  bool order_changed_ = false;
  size_t live_gathered_bytes_ = 0;
  size_t peak_live_gathered_bytes_ = 0;
  size_t peak_prefetched_bytes_ = 0;
};

}  // namespace zs::sharding
