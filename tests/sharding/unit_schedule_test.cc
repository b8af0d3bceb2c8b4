// UnitSchedule (sharding/unit_schedule.h) on its own, without a model: the first step's orders
// are recorded and later ones compared (a change turns prefetch off for good); prefetch issues
// while it decides, within the byte bound and the live limit, skips a unit listed twice, and
// names the first unit it did not gather; the check across ranks passes for equal orders and
// fails on every rank, naming the first difference, for different ones. The ShardedModel's own
// use of it is held by overlap_test, prefetch_bytes_test and sharded_model_test.
#include "sharding/unit_schedule.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/local/local_backend.h"
#include "runtime/error.h"

namespace zs::sharding {
namespace {

std::vector<std::string> names(size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) out.push_back("u" + std::to_string(i));
  return out;
}

// Units of given sizes; a started gather makes a unit gathered and in flight.
class FakeUnits final : public UnitStates {
 public:
  explicit FakeUnits(std::vector<size_t> bytes)
      : bytes_(std::move(bytes)), gathered_(bytes_.size(), false), gathering_(bytes_.size(), false) {}
  size_t full_bytes(size_t unit) const override { return bytes_[unit]; }
  bool released(size_t unit) const override { return !gathered_[unit]; }
  bool gathering(size_t unit) const override { return gathering_[unit]; }
  size_t count() const override { return bytes_.size(); }
  // What prefetch calls: the unit is gathered, in flight, and counted live by the schedule.
  void start(UnitSchedule& schedule, size_t unit) {
    started.push_back(unit);
    gathered_[unit] = gathering_[unit] = true;
    schedule.gathered(bytes_[unit]);
  }
  // The unit ran: its gather was waited for; release() frees it.
  void used(size_t unit) { gathering_[unit] = false; }
  void release(UnitSchedule& schedule, size_t unit) {
    gathered_[unit] = gathering_[unit] = false;
    schedule.released(bytes_[unit]);
  }
  std::vector<size_t> started;

 private:
  std::vector<size_t> bytes_;
  std::vector<bool> gathered_, gathering_;
};

// A schedule whose forward order `order` is recorded and checked (on a world of one).
UnitSchedule checked_schedule(UnitSchedule::Options options, const std::vector<size_t>& order,
                              size_t units) {
  UnitSchedule schedule(options, names(units));
  schedule.begin(Pass::kForward);
  for (size_t u : order) schedule.on_unit_start(Pass::kForward, u);
  schedule.complete(Pass::kForward);
  comm::run_local_ranks(1, [&](comm::Communicator& world) {
    CpuAllocator allocator(nullptr);
    schedule.check_recorded_orders(world, allocator);
  });
  return schedule;
}

TEST(UnitSchedule, RecordsTheFirstStepAndTurnsPrefetchOffWhenALaterOneDiffers) {
  UnitSchedule schedule({}, names(3));
  schedule.begin(Pass::kBackward);
  for (size_t u : {2, 1, 0}) schedule.on_unit_start(Pass::kBackward, u);
  schedule.complete(Pass::kBackward);
  EXPECT_EQ(schedule.recorded(Pass::kBackward), (std::vector<size_t>{2, 1, 0}));
  EXPECT_FALSE(schedule.checked(Pass::kBackward));
  // The same order again: recorded once, prefetch stays on.
  schedule.begin(Pass::kBackward);
  for (size_t u : {2, 1, 0}) schedule.on_unit_start(Pass::kBackward, u);
  EXPECT_EQ(schedule.recorded(Pass::kBackward).size(), 3u);
  EXPECT_TRUE(schedule.prefetching());
  // Another order: prefetch off for good, the recorded order unchanged.
  schedule.begin(Pass::kBackward);
  for (size_t u : {2, 0, 1}) schedule.on_unit_start(Pass::kBackward, u);
  EXPECT_FALSE(schedule.prefetching());
  schedule.begin(Pass::kBackward);
  for (size_t u : {2, 1, 0}) schedule.on_unit_start(Pass::kBackward, u);
  EXPECT_FALSE(schedule.prefetching());
  EXPECT_EQ(schedule.recorded(Pass::kBackward), (std::vector<size_t>{2, 1, 0}));
  // Reductions are recorded until their pass is complete.
  schedule.record_reduction(1);
  schedule.complete(Pass::kReductions);
  schedule.record_reduction(0);
  EXPECT_EQ(schedule.recorded(Pass::kReductions), (std::vector<size_t>{1}));
}

TEST(UnitSchedule, PrefetchesWithinTheByteBoundAndNamesTheFirstUnitItDidNotGather) {
  UnitSchedule::Options options;
  options.prefetch_bytes = 250;
  UnitSchedule schedule = checked_schedule(options, {0, 1, 2, 3, 4}, 5);
  FakeUnits units({100, 100, 100, 100, 100});
  const auto start = [&](size_t u) { units.start(schedule, u); };
  // The forward of the next step: unit 0 runs (gathered on demand), then prefetch.
  schedule.begin(Pass::kForward);
  schedule.on_unit_start(Pass::kForward, 0);
  units.start(schedule, 0);
  units.used(0);
  units.started.clear();
  // 100 + 100 fit in 250, a third does not: units 1 and 2, and unit 3 is the first not gathered.
  EXPECT_EQ(schedule.prefetch_ahead(Pass::kForward, units, start), std::optional<size_t>(3));
  EXPECT_EQ(units.started, (std::vector<size_t>{1, 2}));
  EXPECT_EQ(schedule.peak_prefetched_bytes(), 200u);
  EXPECT_EQ(schedule.live_gathered_bytes(), 300u);
  EXPECT_EQ(schedule.peak_live_gathered_bytes(), 300u);
  // Unit 1 runs: its gather is used, so 100 are ahead (unit 2) and unit 3 fits, unit 4 does not.
  units.release(schedule, 0);
  schedule.on_unit_start(Pass::kForward, 1);
  units.used(1);
  units.started.clear();
  EXPECT_EQ(schedule.prefetch_ahead(Pass::kForward, units, start), std::optional<size_t>(4));
  EXPECT_EQ(units.started, (std::vector<size_t>{3}));
  EXPECT_EQ(schedule.live_gathered_bytes(), 300u);
  // Unchecked passes and a schedule that prefetches nothing issue nothing.
  units.started.clear();
  EXPECT_FALSE(schedule.prefetch_ahead(Pass::kBackward, units, start));
  EXPECT_TRUE(units.started.empty());
}

TEST(UnitSchedule, OneUnitAheadWithinTheLiveLimitAndAUnitListedTwiceIsGatheredOnce) {
  UnitSchedule::Options options;
  options.prefetch_bytes = 0;             // the next unit only
  options.max_live_gathered_bytes = 250;  // two units of 100 live, not three
  UnitSchedule schedule = checked_schedule(options, {0, 1, 1, 2}, 3);
  FakeUnits units({100, 100, 100});
  const auto start = [&](size_t u) { units.start(schedule, u); };
  schedule.begin(Pass::kForward);
  schedule.on_unit_start(Pass::kForward, 0);
  units.start(schedule, 0);
  units.started.clear();
  EXPECT_EQ(schedule.prefetch_ahead(Pass::kForward, units, start), std::optional<size_t>(1));
  EXPECT_EQ(units.started, (std::vector<size_t>{1}));
  // Unit 1 again at position 2: gathered already, nothing is issued; the unit after it (2) is
  // the first not gathered.
  schedule.on_unit_start(Pass::kForward, 1);
  units.started.clear();
  EXPECT_EQ(schedule.prefetch_ahead(Pass::kForward, units, start), std::optional<size_t>(2));
  EXPECT_TRUE(units.started.empty());
  // Position 3 is unit 2, but 200 live + 100 exceed the limit: not gathered.
  schedule.on_unit_start(Pass::kForward, 1);
  EXPECT_FALSE(schedule.prefetch_ahead(Pass::kForward, units, start));
  EXPECT_TRUE(units.started.empty());
  EXPECT_EQ(schedule.live_gathered_bytes(), 200u);
  // Past the order's end: nothing.
  schedule.on_unit_start(Pass::kForward, 2);
  EXPECT_FALSE(schedule.prefetch_ahead(Pass::kForward, units, start));
}

TEST(UnitSchedule, RanksWithTheSameOrdersAgreeAndDifferentOnesAllFailNamingTheFirstDifference) {
  constexpr int kWorld = 3;
  for (const bool differ : {false, true}) {
    std::vector<std::string> errors(kWorld);
    std::vector<char> checked(kWorld, 0);  // one byte a rank: the rank threads write at once
    comm::run_local_ranks(kWorld, [&](comm::Communicator& world) {
      CpuAllocator allocator(nullptr);
      UnitSchedule::Options options;
      options.reductions_followed = true;  // hybrid: the reductions' order is checked too
      UnitSchedule schedule(options, names(3));
      for (size_t u : {0, 1, 2}) schedule.on_unit_start(Pass::kForward, u);
      schedule.complete(Pass::kForward);
      const bool swapped = differ && world.rank() == 2;
      for (size_t u : {2, 1, 0}) schedule.record_reduction(swapped && u != 0 ? 3 - u : u);
      schedule.complete(Pass::kReductions);
      try {
        schedule.check_recorded_orders(world, allocator);
        checked[static_cast<size_t>(world.rank())] = schedule.checked(Pass::kForward) &&
                                                     schedule.checked(Pass::kReductions) &&
                                                     !schedule.checked(Pass::kBackward);
      } catch (const InvalidArgument& e) {
        errors[static_cast<size_t>(world.rank())] = e.what();
      }
    });
    for (int r = 0; r < kWorld; ++r) {
      const std::string& error = errors[static_cast<size_t>(r)];
      if (!differ) {
        EXPECT_TRUE(error.empty()) << error;
        EXPECT_TRUE(checked[static_cast<size_t>(r)]) << r;
        continue;
      }
      EXPECT_NE(error.find("position 0 of the backward's reductions pass, where rank 0 ran unit "
                           "'u2' and rank 2 ran unit 'u1' (ranks differing from rank 0 there: 2)"),
                std::string::npos)
          << r << ": " << error;
    }
  }
}

}  // namespace
}  // namespace zs::sharding
