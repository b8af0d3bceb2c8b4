// End-to-end tests of zs-train --trace (train/engine.cc, runtime/trace.h): a short run writes
// one Chrome trace per rank (FILE.rank<r>.json with two ranks, FILE itself with one), each a
// valid "traceEvents" JSON whose complete events are well formed (pid = the rank, ts/dur in
// microseconds, every lane's spans nested or disjoint) and cover every kind of work: steps,
// data waits, forward/backward (per micro-batch and per unit), the optimizer, checkpoint I/O,
// and — at stage 3 on two ranks — an all-gather per unit and pass and a reduce-scatter per unit
// and micro-batch; at stage 0 an all-reduce per unit and micro-batch and no gather.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/trace.h"
#include "tests/support/corpus.h"
#include "tests/support/scratch.h"
#include "tests/support/short_run.h"
#include "train/engine.h"
#include "train/report.h"

namespace zs::train {
namespace {

using nlohmann::json;
using zs::testing::file_exists;
using zs::testing::learnable_corpus;
using zs::testing::ScratchDir;
using zs::testing::write_text;

struct Event {
  std::string name, cat;
  double ts, dur;
  int tid;
};

// The complete events of a trace file, after checking the file's shape and every lane's
// nesting. Returns them in file order.
std::vector<Event> read_trace(const std::string& path, int rank) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "no trace at " << path;
  const json trace = json::parse(in);  // throws on invalid JSON
  EXPECT_TRUE(trace.contains("traceEvents"));
  std::vector<Event> events;
  std::map<int, std::string> lane_names;
  for (const json& e : trace.at("traceEvents")) {
    EXPECT_EQ(e.at("pid").get<int>(), rank);
    const std::string ph = e.at("ph").get<std::string>();
    if (ph == "M") {
      if (e.at("name") == "thread_name") {
        lane_names[e.at("tid").get<int>()] = e.at("args").at("name").get<std::string>();
      }
      continue;
    }
    EXPECT_EQ(ph, "X");
    Event event{e.at("name").get<std::string>(), e.at("cat").get<std::string>(),
                e.at("ts").get<double>(), e.at("dur").get<double>(), e.at("tid").get<int>()};
    EXPECT_GT(event.ts, 0);
    EXPECT_GE(event.dur, 0);
    EXPECT_TRUE(lane_names.count(event.tid)) << "event " << event.name << " has an unnamed tid";
    // A lane holds one kind of work: its name starts with the kind ("reduce #2").
    EXPECT_EQ(lane_names[event.tid].rfind(event.cat, 0), 0u) << lane_names[event.tid];
    events.push_back(event);
  }
  // Within a lane spans nest or follow each other (ts/dur are printed to the nanosecond).
  constexpr double kSlack = 0.002;
  std::map<int, std::vector<const Event*>> by_lane;
  for (const Event& e : events) by_lane[e.tid].push_back(&e);
  for (auto& [tid, lane] : by_lane) {
    std::stable_sort(lane.begin(), lane.end(), [](const Event* a, const Event* b) {
      return a->ts != b->ts ? a->ts < b->ts : a->dur > b->dur;
    });
    std::vector<double> open_ends;
    for (const Event* e : lane) {
      while (!open_ends.empty() && open_ends.back() <= e->ts + kSlack) open_ends.pop_back();
      EXPECT_TRUE(open_ends.empty() || e->ts + e->dur <= open_ends.back() + kSlack)
          << "span '" << e->name << "' overlaps an enclosing span of lane " << lane_names[tid]
          << " without nesting in it";
      open_ends.push_back(e->ts + e->dur);
    }
  }
  return events;
}

size_t count(const std::vector<Event>& events, const std::string& cat, const std::string& name) {
  return static_cast<size_t>(std::count_if(events.begin(), events.end(), [&](const Event& e) {
    return e.cat == cat && e.name == name;
  }));
}

// The units named by the per-unit forward spans ("forward <unit>").
std::set<std::string> units_of(const std::vector<Event>& events) {
  std::set<std::string> units;
  for (const Event& e : events) {
    if (e.cat == "compute" && e.name.rfind("forward ", 0) == 0) units.insert(e.name.substr(8));
  }
  return units;
}

TrainConfig traced_run(const ScratchDir& dir, int ranks, int stage) {
  write_text(dir.path("corpus.txt"), learnable_corpus());
  TrainConfig c = zs::testing::short_gpt_run(dir.path("corpus.txt"), ranks, stage, DType::kF32);
  c.steps = 3;
  c.checkpoint_dir = dir.path("ckpt");
  c.trace = dir.path("trace.json");
  return c;
}

TEST(TrainTrace, Stage3TwoRanksHasEveryKindAndPerUnitCollectives) {
  ScratchDir dir;
  const TrainConfig c = traced_run(dir, 2, 3);
  run_training(c);
  EXPECT_FALSE(file_exists(dir.path("trace.json")));  // one file per rank instead
  const size_t micro = static_cast<size_t>(c.steps * c.grad_accum);
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const std::vector<Event> events =
        read_trace(dir.path("trace.rank" + std::to_string(rank) + ".json"), rank);
    std::set<std::string> kinds;
    for (const Event& e : events) kinds.insert(e.cat);
    for (const char* kind :
         {"step", "compute", "wait", "gather", "reduce", "optimizer", "io", "data"}) {
      EXPECT_TRUE(kinds.count(kind)) << "no span of kind " << kind;
    }
    EXPECT_EQ(count(events, "step", "step 0"), 1u);
    EXPECT_EQ(count(events, "step", "step 2"), 1u);
    EXPECT_EQ(count(events, "data", "next batch"), micro);
    EXPECT_EQ(count(events, "compute", "forward"), micro);
    EXPECT_EQ(count(events, "compute", "backward"), micro);
    EXPECT_EQ(count(events, "optimizer", "optimizer"), static_cast<size_t>(c.steps));
    EXPECT_GE(count(events, "io", "checkpoint save"), 1u);
    // Root and two blocks. Stage 3 releases every unit after each pass, so each is gathered
    // once per pass over it — its forward in training and in the evaluation at the end, and its
    // backward — and reduce-scattered once per micro-batch.
    const std::set<std::string> units = units_of(events);
    EXPECT_EQ(units.size(), 3u);
    for (const std::string& unit : units) {
      const size_t forwards = count(events, "compute", "forward " + unit);
      EXPECT_GE(forwards, micro) << unit;  // plus the evaluation's
      EXPECT_EQ(count(events, "compute", "backward " + unit), micro) << unit;
      EXPECT_EQ(count(events, "gather", "all_gather " + unit), forwards + micro) << unit;
      EXPECT_EQ(count(events, "reduce", "reduce_scatter " + unit), micro) << unit;
    }
  }
}

TEST(TrainTrace, Stage0AllReducesPerUnitAndOneRankWritesTheFileItself) {
  {
    ScratchDir dir;
    const TrainConfig c = traced_run(dir, 2, 0);
    run_training(c);
    const size_t micro = static_cast<size_t>(c.steps * c.grad_accum);
    const std::vector<Event> events = read_trace(dir.path("trace.rank1.json"), 1);
    const std::set<std::string> units = units_of(events);
    EXPECT_EQ(units.size(), 3u);
    for (const std::string& unit : units) {
      EXPECT_EQ(count(events, "reduce", "all_reduce " + unit), micro) << unit;
      EXPECT_EQ(count(events, "gather", "all_gather " + unit), 0u) << unit;
    }
  }
  ScratchDir dir;
  TrainConfig c = traced_run(dir, 1, 3);
  c.checkpoint_dir.clear();
  run_training(c);
  const std::vector<Event> events = read_trace(dir.path("trace.json"), 0);
  EXPECT_EQ(count(events, "compute", "forward"), static_cast<size_t>(c.steps * c.grad_accum));
  EXPECT_EQ(count(events, "io", "checkpoint save"), 0u);  // no checkpoint directory
  // One rank shards nothing: no collective to trace.
  EXPECT_EQ(std::count_if(events.begin(), events.end(),
                          [](const Event& e) { return e.cat == "gather" || e.cat == "reduce"; }),
            0);
}

// Per-rank and per-attempt file names: the tag goes before the file name's extension, never into
// a directory's name.
TEST(ReportPaths, RankAndAttemptTagsGoBeforeTheExtension) {
  EXPECT_EQ(rank_path("out/trace.json", 1, 4, ""), "out/trace.rank1.json");
  EXPECT_EQ(rank_path("out/trace.json", 0, 1, ""), "out/trace.json");
  EXPECT_EQ(rank_path("report.json", 1, 4, ".svg"), "report.rank1.svg");
  EXPECT_EQ(tagged_path("out/trace.rank1.json", ".attempt2", ""), "out/trace.rank1.attempt2.json");
  EXPECT_EQ(tagged_path("run.v1/trace", ".attempt1", ""), "run.v1/trace.attempt1");
}

// --max-restarts: the failed attempt's trace stays (what ran up to the failure), and the restarted
// attempt writes its own file beside it.
TEST(TrainTrace, ARestartedAttemptWritesAFileOfItsOwn) {
  ScratchDir dir;
  TrainConfig c = traced_run(dir, 2, 3);
  c.steps = 4;
  c.checkpoint_interval = 2;
  // Synchronous saves, as in restarts_test.cc: an asynchronous save of step 2 is published at
  // the first step boundary after its write ends, which under load can be after the fault before
  // step 3, and the restart would then start from scratch.
  c.checkpoint_async = false;
  c.max_restarts = 1;
  InjectedFault fault;
  fault.rank = 1;
  fault.step = 3;
  fault.attempt = 0;
  c.injected_faults = {fault};
  const TrainResult r = run_training(c);
  ASSERT_EQ(r.restarts, 1);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string rank_file = "trace.rank" + std::to_string(rank);
    const std::vector<Event> first = read_trace(dir.path(rank_file + ".json"), rank);
    const std::vector<Event> again = read_trace(dir.path(rank_file + ".attempt1.json"), rank);
    // The first attempt ran steps 0-2 and failed before step 3; the restart resumed from step
    // 2's checkpoint (after 2 steps: steps 0 and 1) and ran steps 2 and 3.
    EXPECT_EQ(count(first, "step", "step 0"), 1u) << rank;
    EXPECT_EQ(count(first, "step", "step 3"), 0u) << rank;
    EXPECT_EQ(count(again, "step", "step 0"), 0u) << rank;
    EXPECT_EQ(count(again, "step", "step 3"), 1u) << rank;
  }
}

TEST(TrainTrace, ExposedCommunicationOfARunIsWithinItsCommunication) {
  // The figure the report prints, from a real run's spans: per step, 0 <= exposed <=
  // communication, and the communication lies inside the step.
  ScratchDir dir;
  const TrainConfig c = traced_run(dir, 2, 3);
  run_training(c);
  const std::vector<Event> events = read_trace(dir.path("trace.rank0.json"), 0);
  std::vector<TraceSpan> spans;
  const std::map<std::string, TraceLane> lanes{
      {"step", TraceLane::kStep},     {"compute", TraceLane::kCompute},
      {"wait", TraceLane::kWait},     {"gather", TraceLane::kGather},
      {"reduce", TraceLane::kReduce}, {"optimizer", TraceLane::kOptimizer},
      {"io", TraceLane::kIo},         {"data", TraceLane::kData}};
  for (const Event& e : events) spans.push_back({lanes.at(e.cat), e.name, e.ts, e.ts + e.dur});
  const std::vector<StepExposure> steps = exposed_communication(spans);
  ASSERT_EQ(steps.size(), static_cast<size_t>(c.steps));
  for (const StepExposure& s : steps) {
    EXPECT_GT(s.communication_us, 0);
    EXPECT_GE(s.exposed_us, 0);
    EXPECT_LE(s.exposed_us, s.communication_us + 1e-6);
    EXPECT_LE(s.communication_us, s.step_us + 1e-6);
  }
}

}  // namespace
}  // namespace zs::train
