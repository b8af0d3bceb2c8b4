// Tests of the trace recorder (runtime/trace.h): exposed communication on hand-made spans in
// closed form (hidden, exposed, waits inside compute, several steps, overlapping collectives),
// recording from threads, and the lanes of the written JSON.
#include "runtime/trace.h"

#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace zs {
namespace {

TraceSpan span(TraceLane lane, double begin, double end) { return {lane, "s", begin, end}; }

// The exposure of the one step of `spans`.
StepExposure only_step(const std::vector<TraceSpan>& spans) {
  const std::vector<StepExposure> steps = exposed_communication(spans);
  EXPECT_EQ(steps.size(), 1u);
  return steps.empty() ? StepExposure{} : steps[0];
}

TEST(ExposedCommunication, CollectiveInsideComputeIsHidden) {
  const std::vector<TraceSpan> spans{span(TraceLane::kStep, 0, 100),
                                     span(TraceLane::kCompute, 0, 80),
                                     span(TraceLane::kGather, 10, 50)};
  const StepExposure step = only_step(spans);
  EXPECT_DOUBLE_EQ(step.step_us, 100);
  EXPECT_DOUBLE_EQ(step.communication_us, 40);
  EXPECT_DOUBLE_EQ(step.exposed_us, 0);
}

TEST(ExposedCommunication, TailAfterComputeIsExposed) {
  // A reduction issued at 70 runs until 95; compute ends at 80: 15 µs exposed.
  const std::vector<TraceSpan> spans{span(TraceLane::kStep, 0, 100),
                                     span(TraceLane::kCompute, 0, 80),
                                     span(TraceLane::kReduce, 70, 95)};
  const StepExposure step = only_step(spans);
  EXPECT_DOUBLE_EQ(step.communication_us, 25);
  EXPECT_DOUBLE_EQ(step.exposed_us, 15);
}

TEST(ExposedCommunication, WaitInsideComputeIsNotCompute) {
  // The forward [0, 60) blocks on an all-gather from 20 to 30; the gather ran 5..30, so 10 µs
  // of it are exposed (the wait). The optimizer [60, 90) hides the reduction 70..80.
  const std::vector<TraceSpan> spans{
      span(TraceLane::kStep, 0, 100),      span(TraceLane::kCompute, 0, 60),
      span(TraceLane::kWait, 20, 30),      span(TraceLane::kGather, 5, 30),
      span(TraceLane::kOptimizer, 60, 90), span(TraceLane::kReduce, 70, 80)};
  const StepExposure step = only_step(spans);
  EXPECT_DOUBLE_EQ(step.communication_us, 35);
  EXPECT_DOUBLE_EQ(step.exposed_us, 10);
}

TEST(ExposedCommunication, OverlappingCollectivesCountOnceAndStepsSplit) {
  // Step 1 [0, 50): gather 40..60 and reduce 45..70 overlap (union 40..70); compute 0..42.
  // Step 2 [50, 100): compute 65..100.
  const std::vector<TraceSpan> spans{
      span(TraceLane::kStep, 50, 100),  span(TraceLane::kStep, 0, 50),
      span(TraceLane::kCompute, 0, 42), span(TraceLane::kGather, 40, 60),
      span(TraceLane::kReduce, 45, 70), span(TraceLane::kCompute, 65, 100),
      span(TraceLane::kData, 50, 65)};  // a data wait is not compute
  const auto steps = exposed_communication(spans);
  ASSERT_EQ(steps.size(), 2u);
  // Step 1 (in time order): communication 40..50, computing until 42 → 8 exposed.
  EXPECT_DOUBLE_EQ(steps[0].communication_us, 10);
  EXPECT_DOUBLE_EQ(steps[0].exposed_us, 8);
  // Step 2: communication 50..70, computing from 65 → 15 exposed.
  EXPECT_DOUBLE_EQ(steps[1].communication_us, 20);
  EXPECT_DOUBLE_EQ(steps[1].exposed_us, 15);
}

TEST(ExposedCommunication, NestedComputeAndNoCommunication) {
  const std::vector<TraceSpan> spans{span(TraceLane::kStep, 0, 10),
                                     span(TraceLane::kCompute, 0, 10),
                                     span(TraceLane::kCompute, 2, 4)};
  const StepExposure step = only_step(spans);
  EXPECT_DOUBLE_EQ(step.communication_us, 0);
  EXPECT_DOUBLE_EQ(step.exposed_us, 0);
  EXPECT_TRUE(exposed_communication({span(TraceLane::kGather, 0, 5)}).empty());  // no step
}

TEST(Trace, RecordsFromSeveralThreads) {
  Trace trace(3);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&trace] {
      for (int i = 0; i < 100; ++i) {
        TraceScope scope(&trace, TraceLane::kCompute, "work");
      }
    });
  }
  for (auto& thread : threads) thread.join();
  const auto spans = trace.spans();
  ASSERT_EQ(spans.size(), 400u);
  for (const TraceSpan& s : spans) {
    EXPECT_EQ(s.lane, TraceLane::kCompute);
    EXPECT_LE(s.begin_us, s.end_us);
  }
  TraceScope disabled(nullptr, TraceLane::kIo, "nothing");  // a null trace records nothing
}

TEST(ChromeTraceJson, OverlappingSpansOfOneKindGetLanesOfTheirOwn) {
  // Two reductions in flight together (neither nests in the other) and a nested compute pair.
  const std::vector<TraceSpan> spans{{TraceLane::kReduce, "a", 0, 10},
                                     {TraceLane::kReduce, "b", 5, 15},
                                     {TraceLane::kReduce, "c", 12, 20},
                                     {TraceLane::kCompute, "fwd", 0, 30},
                                     {TraceLane::kCompute, "unit", 1, 2}};
  const std::string json = chrome_trace_json(spans, 1);
  EXPECT_NE(json.find("\"name\":\"reduce\""), std::string::npos);
  EXPECT_NE(json.find("\"name\":\"reduce #2\""), std::string::npos);
  EXPECT_EQ(json.find("\"name\":\"reduce #3\""), std::string::npos);   // c follows a on lane 1
  EXPECT_EQ(json.find("\"name\":\"compute #2\""), std::string::npos);  // unit nests in fwd
  EXPECT_NE(json.find("\"name\":\"rank 1\""), std::string::npos);
  EXPECT_NE(json.find("\"ph\":\"X\""), std::string::npos);
}

}  // namespace
}  // namespace zs
