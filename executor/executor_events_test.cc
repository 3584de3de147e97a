// The executor's events as the profiler sees them: every allocation and free balances within
// its step, the timeline rebuilt from them has exactly the executor's measured peaks, every
// node and copy is reported, and recording changes nothing the step computes.
#include <cstdint>
#include <iostream>
#include <map>

#include "executor/cpu/cpu_backend.h"
#include "executor/executor_testing.h"
#include "executor/trainer.h"
#include "graph/zoo.h"
#include "graph/zoo_testing.h"
#include "gtest/gtest.h"
#include "planner/section_search.h"
#include "planner/sections.h"
#include "absl/strings/str_cat.h"
#include "profiler/events.h"
#include "profiler/metrics.h"
#include "profiler/metrics_sink.h"
#include "profiler/metrics_testing.h"
#include "profiler/step_layout.h"
#include "profiler/timeline.h"
#include "util/check.h"

namespace headroom::executor {
namespace {

using profiler::ExpositionValue;

struct TrainRun {
  std::vector<StepResult> steps;
  std::shared_ptr<const planner::SectionedStep> step;
  int offloaded_tensors = 0;
};

TrainRun Train(const graph::Graph& g, const planner::SectionCuts& cuts, int steps,
          profiler::EventSink* events) {
  std::unique_ptr<Backend> backend = cpu::CreateCpuBackend();
  TrainerOptions options;
  options.seed = 3;
  options.cuts = cuts;
  options.events = events;
  std::unique_ptr<Trainer> trainer = Trainer::Create(g, backend.get(), options).value();
  TrainRun run;
  run.step = trainer->plan().step;
  for (const planner::SectionInfo& s : run.step->sections) {
    for (const planner::CachedInput& c : s.boundary) run.offloaded_tensors += c.offloaded;
  }
  for (int i = 0; i < steps; ++i) run.steps.push_back(trainer->Step().value());
  return run;
}

void ExpectEventsMatchTheExecutor(const std::string& model, bool sections) {
  SCOPED_TRACE(model + (sections ? " with sections and offload" : " plain"));
  const graph::Graph g = ZooGraph(model, 4);
  const planner::SectionCuts cuts = sections ? SqrtCutsWithOffload(g) : planner::SectionCuts{};
  constexpr int kSteps = 3;
  profiler::EventLog log;
  const TrainRun run = Train(g, cuts, kSteps, &log);
  const profiler::StepLayout layout = profiler::DescribeStep(*run.step);

  // Allocations and frees balance within each step (Build checks it) and per step by count.
  absl::StatusOr<profiler::Timeline> timeline = profiler::Timeline::Build(log, layout);
  ASSERT_TRUE(timeline.ok()) << timeline.status();
  std::map<int64_t, int> allocations, frees;
  for (const profiler::MemoryEvent& e : log.memory()) {
    (e.kind == profiler::MemoryEvent::Kind::kAllocate ? allocations : frees)[e.step]++;
  }
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_GT(allocations[s], 0) << "step " << s;
    EXPECT_EQ(allocations[s], frees[s]) << "step " << s;
  }
  EXPECT_EQ(frees[profiler::kSetupStep], 0) << "the persistent state is never freed";

  // The timeline's peaks are the executor's, exactly.
  uint64_t high_water = 0, peak_live = 0;
  for (const StepResult& r : run.steps) {
    high_water = std::max(high_water, r.arena_high_water_bytes);
    peak_live = std::max(peak_live, r.peak_live_bytes);
  }
  EXPECT_EQ(timeline->high_water_bytes(), high_water);
  EXPECT_EQ(timeline->arena_peak_live_bytes(), peak_live);
  EXPECT_EQ(timeline->peak().device_bytes, peak_live) << "the CPU backend has no workspace";
  ASSERT_EQ(timeline->step_peak_bytes().size(), static_cast<size_t>(kSteps));
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_EQ(timeline->step_peak_bytes()[s], run.steps[s].peak_live_bytes) << "step " << s;
  }
  uint64_t live_sum = 0;
  for (const profiler::LiveBuffer& b : timeline->peak().live) live_sum += b.bytes;
  EXPECT_EQ(live_sum, timeline->peak().device_bytes) << "the live list is the whole peak";
  EXPECT_FALSE(timeline->peak().node_name.empty());

  // Every node is reported once per step; every offloaded tensor is copied out and back.
  EXPECT_EQ(log.ops().size(), run.step->graph.nodes().size() * kSteps);
  EXPECT_EQ(log.steps().size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(log.copies().size(), static_cast<size_t>(2 * run.offloaded_tensors * kSteps));
  for (const profiler::CopyEvent& c : log.copies()) {
    EXPECT_TRUE(c.measured) << "the CPU backend times its copies";
    EXPECT_LE(c.issue_ns, c.begin_ns);
    EXPECT_LE(c.begin_ns, c.end_ns);
  }
  if (sections) {
    EXPECT_GT(run.offloaded_tensors, 0);
    EXPECT_GT(timeline->peak_host_bytes(), 0u);
  }
  std::cout << model << (sections ? " sectioned" : " plain") << ": " << log.memory().size()
            << " memory events, peak " << timeline->peak().device_bytes << " B at '"
            << timeline->peak().node_name << "', high-water " << timeline->high_water_bytes()
            << " B\n";
}

TEST(ExecutorEventsTest, MlpPlain) { ExpectEventsMatchTheExecutor("mlp", false); }
TEST(ExecutorEventsTest, MlpSectioned) { ExpectEventsMatchTheExecutor("mlp", true); }
TEST(ExecutorEventsTest, ResNet18Sectioned) { ExpectEventsMatchTheExecutor("resnet18", true); }
TEST(ExecutorEventsTest, TransformerSectioned) {
  ExpectEventsMatchTheExecutor("transformer", true);
}

// Cuts before h.1.ln_1, h.1.add_1 and h.1.add_2: the residual h.0.add_2 is read by the
// section of layer 1's attention (ln_1's backward needs it) and re-read by the next one
// (its re-forward of add_1 feeds ln_2's backward), so it is a cached input of both, and must
// still be copied out and back once per step.
TEST(ExecutorEventsTest, TensorsCachedBySeveralSectionsAreCopiedOnce) {
  const graph::Graph g = ZooGraph("transformer", 2);
  planner::TrainingGraph training =
      planner::TrainingGraph::Build(g, planner::TrainingOptions()).value();
  const planner::RooflineCostModel cost(g, planner::DevicePreset("cpu").value());
  planner::SectionCuts cuts;
  for (const char* name : {"h.1.ln_1", "h.1.add_1", "h.1.add_2"}) {
    const planner::NodeId n = training.FindNode(name);
    ASSERT_NE(n, planner::kNone) << name;
    cuts.cuts.push_back(n);
  }
  cuts.offload = planner::OffloadableTensors(training, cuts.cuts, cost).value();
  profiler::EventLog log;
  const TrainRun run = Train(g, cuts, 2, &log);
  int shared = 0;
  std::map<planner::TensorId, int> sections_caching;
  for (const planner::SectionInfo& s : run.step->sections) {
    for (const planner::CachedInput& c : s.boundary) {
      if (c.offloaded && ++sections_caching[c.tensor] == 2) ++shared;
    }
  }
  ASSERT_GT(shared, 0) << "the cuts should make some tensor a cached input of two sections";
  for (const StepResult& r : run.steps) {
    EXPECT_EQ(r.offloaded_bytes, run.step->offloaded_bytes) << "step " << r.step;
  }
  absl::StatusOr<profiler::Timeline> timeline =
      profiler::Timeline::Build(log, profiler::DescribeStep(*run.step));
  EXPECT_TRUE(timeline.ok()) << timeline.status();
}

TEST(ExecutorEventsTest, RecordingChangesNothing) {
  const graph::Graph g = ZooGraph("resnet18", 2);
  const planner::SectionCuts cuts = SqrtCutsWithOffload(g);
  profiler::EventLog log;
  const TrainRun recorded = Train(g, cuts, 2, &log);
  const TrainRun plain = Train(g, cuts, 2, nullptr);
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(recorded.steps[s].loss, plain.steps[s].loss) << "step " << s;
    EXPECT_EQ(recorded.steps[s].arena_high_water_bytes, plain.steps[s].arena_high_water_bytes);
  }
}

TEST(ExecutorEventsTest, MetricsFollowTheSteps) {
  const graph::Graph g = ZooGraph("resnet18", 2);
  const planner::SectionCuts cuts = SqrtCutsWithOffload(g);
  std::unique_ptr<profiler::Metrics> metrics = profiler::Metrics::Create().value();
  ASSERT_TRUE(metrics->StartJob("job-1", "cpu:0", 0).ok());
  profiler::EventLog log;
  profiler::MetricsSink sink(metrics.get(), "job-1", "cpu:0", &log);
  constexpr int kSteps = 3;
  const TrainRun run = Train(g, cuts, kSteps, &sink);
  ASSERT_TRUE(sink.status().ok()) << sink.status();
  const std::string text = metrics->TextExposition();
  const std::string labels = "{device=\"cpu:0\",job=\"job-1\"}";

  uint64_t offloaded = 0;
  for (const StepResult& r : run.steps) offloaded += r.offloaded_bytes;
  ASSERT_GT(offloaded, 0u);
  EXPECT_EQ(ExpositionValue(text, "headroom_offloaded_bytes_total" + labels), offloaded);
  EXPECT_EQ(ExpositionValue(text, "headroom_prefetched_bytes_total" + labels), offloaded);
  EXPECT_EQ(ExpositionValue(text, "headroom_measured_peak_bytes" + labels), run.steps.back().peak_live_bytes);
  EXPECT_EQ(ExpositionValue(text, "headroom_step_duration_seconds_count" + labels), kSteps);
  EXPECT_GT(ExpositionValue(text, "headroom_recompute_seconds_total" + labels), 0);
  // Memory by role at the last step's peak adds up to that peak.
  double device = 0;
  for (profiler::MemoryRole role : profiler::kAllMemoryRoles) {
    if (profiler::IsHostRole(role)) continue;
    device += ExpositionValue(text, absl::StrCat("headroom_job_memory_bytes{device=\"cpu:0\",job=\"job-1\",role=\"",
                                        profiler::MemoryRoleName(role), "\"}"));
  }
  EXPECT_EQ(device, run.steps.back().peak_live_bytes);
  EXPECT_EQ(log.steps().size(), static_cast<size_t>(kSteps)) << "events pass through the sink";
}

}  // namespace
}  // namespace headroom::executor
