// The timeline on hand-built events: memory by role, the peak and its attribution, and the
// balance checks.
#include "profiler/timeline.h"

#include "gtest/gtest.h"

namespace headroom::profiler {
namespace {

using Kind = MemoryEvent::Kind;

// Nodes: 0 "fc" (MatMul, forward), 1 "relu" (Relu, forward), 2 "fc.backward" (MatMulGrad).
// Tensors: 0 "w" (parameter), 1 "x" (batch), 2 "h" (activation, fc), 3 "y" (relu),
// 4 "dh" (gradient, fc.backward), 5 "w.momentum" (optimizer state).
StepLayout TinyLayout() {
  StepLayout layout;
  layout.nodes = {{"fc", "MatMul", planner::NodeKind::kForward, 0},
                  {"relu", "Relu", planner::NodeKind::kForward, 0},
                  {"fc.backward", "MatMulGrad", planner::NodeKind::kBackward, 0}};
  layout.tensors = {{"w", MemoryRole::kParameter, -1},      {"x", MemoryRole::kBatch, -1},
                    {"h", MemoryRole::kActivation, 0},      {"y", MemoryRole::kActivation, 1},
                    {"dh", MemoryRole::kGradient, 2},       {"w.momentum", MemoryRole::kOptimizerState, -1}};
  return layout;
}

MemoryEvent Event(Kind kind, int64_t time, int64_t step, int32_t node, int32_t tensor,
                  MemoryRole role, uint64_t offset, uint64_t bytes) {
  MemoryEvent e;
  e.kind = kind;
  e.time_ns = time;
  e.step = step;
  e.node = node;
  e.buffer = tensor;
  e.tensor = tensor;
  e.role = role;
  e.offset = offset;
  e.bytes = bytes;
  return e;
}

// Setup: +w(100 @0) +w.momentum(100 @100). Step 0: +x(50 @200) at fc, +h(400 @256) at fc,
// -x after fc, +y(400 @700) at relu, -h after relu, +dh(300 @256) at fc.backward, then
// everything of the step freed after it. Peak: 100+100+400+300 = 900 at fc.backward
// (y, dh live); after fc: 100+100+50+400 = 650; at relu: 100+100+400+400 = 1000!
EventLog TinyLog() {
  EventLog log;
  const int64_t s0 = 0;
  log.OnMemory(Event(Kind::kAllocate, 1000, kSetupStep, -1, 0, MemoryRole::kParameter, 0, 100));
  log.OnMemory(Event(Kind::kAllocate, 1001, kSetupStep, -1, 5, MemoryRole::kOptimizerState, 100, 100));
  log.OnMemory(Event(Kind::kAllocate, 2000, s0, 0, 1, MemoryRole::kBatch, 200, 50));
  log.OnMemory(Event(Kind::kAllocate, 2001, s0, 0, 2, MemoryRole::kActivation, 256, 400));
  log.OnMemory(Event(Kind::kFree, 2100, s0, 0, 1, MemoryRole::kBatch, 200, 50));
  log.OnMemory(Event(Kind::kAllocate, 2200, s0, 1, 3, MemoryRole::kActivation, 700, 400));
  log.OnMemory(Event(Kind::kFree, 2300, s0, 1, 2, MemoryRole::kActivation, 256, 400));
  log.OnMemory(Event(Kind::kAllocate, 2400, s0, 2, 4, MemoryRole::kGradient, 256, 300));
  log.OnMemory(Event(Kind::kFree, 2500, s0, 2, 3, MemoryRole::kActivation, 700, 400));
  log.OnMemory(Event(Kind::kFree, 2501, s0, 2, 4, MemoryRole::kGradient, 256, 300));
  return log;
}

TEST(TimelineTest, PeakAndItsAttribution) {
  const StepLayout layout = TinyLayout();
  absl::StatusOr<Timeline> t = Timeline::Build(TinyLog(), layout);
  ASSERT_TRUE(t.ok()) << t.status();
  const PeakAttribution& peak = t->peak();
  EXPECT_EQ(peak.device_bytes, 1000u);
  EXPECT_EQ(peak.node, 1);
  EXPECT_EQ(peak.node_name, "relu");
  EXPECT_EQ(peak.op, "Relu");
  EXPECT_EQ(peak.step, 0);
  EXPECT_EQ(peak.time_ns, 1200) << "relative to the first event";
  EXPECT_EQ(peak.bytes[static_cast<size_t>(MemoryRole::kActivation)], 800u);
  EXPECT_EQ(peak.bytes[static_cast<size_t>(MemoryRole::kParameter)], 100u);
  EXPECT_EQ(peak.bytes[static_cast<size_t>(MemoryRole::kOptimizerState)], 100u);
  ASSERT_EQ(peak.live.size(), 4u);
  // Largest first, ties by name: h and y (400), then w and w.momentum (100).
  EXPECT_EQ(peak.live[0].name, "h");
  EXPECT_EQ(peak.live[0].producer, "fc");
  EXPECT_EQ(peak.live[1].name, "y");
  EXPECT_EQ(peak.live[1].producer, "relu");
  EXPECT_EQ(peak.live[2].name, "w");
  EXPECT_EQ(peak.live[2].producer, "");
  EXPECT_EQ(peak.live[3].name, "w.momentum");
  EXPECT_EQ(t->arena_peak_live_bytes(), 1000u);
  EXPECT_EQ(t->high_water_bytes(), 1100u) << "y ends at 700 + 400";
  ASSERT_EQ(t->step_peak_bytes().size(), 1u);
  EXPECT_EQ(t->step_peak_bytes()[0], 1000u);
}

TEST(TimelineTest, OnePointPerRunOfSameKindEventsAtANode) {
  absl::StatusOr<Timeline> t = Timeline::Build(TinyLog(), TinyLayout());
  ASSERT_TRUE(t.ok()) << t.status();
  // w, w.momentum (no node: one each); fc +x+h; fc -x; relu +y; relu -h; bwd +dh; bwd -y-dh.
  std::vector<uint64_t> device;
  for (const TimelinePoint& p : t->points()) device.push_back(p.device_bytes);
  EXPECT_EQ(device, (std::vector<uint64_t>{100, 200, 650, 600, 1000, 600, 900, 200}));
  EXPECT_EQ(t->points().back().bytes[static_cast<size_t>(MemoryRole::kActivation)], 0u);
}

TEST(TimelineTest, ProtoKeepsThePeakSampleWhenThinned) {
  const StepLayout layout = TinyLayout();
  absl::StatusOr<Timeline> t = Timeline::Build(TinyLog(), layout);
  ASSERT_TRUE(t.ok()) << t.status();
  const proto::MemoryTimeline p = t->ToProto(layout, 3);
  EXPECT_LE(p.samples_size(), 3);
  const proto::MemoryTimeline one = t->ToProto(layout, 1);
  ASSERT_EQ(one.samples_size(), 1);
  EXPECT_EQ(one.samples(0).device_bytes(), 1000u) << "the one sample left is the peak's";
  bool has_peak = false;
  for (const proto::TimelineSample& s : p.samples()) has_peak |= s.device_bytes() == 1000;
  EXPECT_TRUE(has_peak);
  EXPECT_EQ(p.peak_bytes(), 1000u);
  EXPECT_EQ(p.peak_node(), "relu");
  EXPECT_EQ(p.peak_op(), "Relu");
  ASSERT_GE(p.peak_live_size(), 2);
  EXPECT_GE(p.peak_live(0).bytes(), p.peak_live(1).bytes()) << "largest first";
  EXPECT_EQ(p.high_water_bytes(), 1100u);
  EXPECT_EQ(p.peak_bytes_by_role().at("activations"), 800u);
  ASSERT_EQ(p.peak_live_size(), 4);
  EXPECT_EQ(p.peak_live(0).memory_role(), "activations");
}

TEST(TimelineTest, SampleIndicesKeepAtMostMaxWithThePeakAndTheLast) {
  for (size_t n : {1, 2, 7, 100, 1001}) {
    for (size_t max : {1, 2, 3, 10, 64}) {
      for (size_t keep : {size_t{0}, n / 2, n - 1}) {
        const std::vector<size_t> i = SampleIndices(n, max, keep);
        EXPECT_LE(i.size(), std::max(max, size_t{1})) << n << " " << max;
        EXPECT_EQ(i.size(), std::min(n, max)) << n << " " << max << " " << keep;
        EXPECT_TRUE(std::is_sorted(i.begin(), i.end()));
        EXPECT_NE(std::find(i.begin(), i.end(), keep), i.end()) << n << " " << max;
        if (max >= 2) {
          EXPECT_EQ(i.back(), n - 1);
        }
      }
    }
  }
  EXPECT_EQ(SampleIndices(5, 0, 2).size(), 5u);
}

TEST(TimelineTest, ThinSamplesOfAStoredTimelineKeepsItsPeak) {
  proto::MemoryTimeline stored;
  for (int i = 0; i < 70; ++i) stored.add_samples()->set_device_bytes(i == 33 ? 900 : i);
  ThinSamples(stored, 5);
  ASSERT_EQ(stored.samples_size(), 5);
  bool has_peak = false;
  for (const proto::TimelineSample& s : stored.samples()) has_peak |= s.device_bytes() == 900;
  EXPECT_TRUE(has_peak);
  EXPECT_EQ(stored.samples(4).device_bytes(), 69u);
}

TEST(TimelineTest, HostBytesAreNotDeviceBytes) {
  EventLog log = TinyLog();
  log.OnMemory(Event(Kind::kAllocate, 3000, 1, 0, 2, MemoryRole::kHostOffload, 0, 5000));
  log.OnMemory(Event(Kind::kFree, 3100, 1, 2, 2, MemoryRole::kHostOffload, 0, 5000));
  absl::StatusOr<Timeline> t = Timeline::Build(log, TinyLayout());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->peak().device_bytes, 1000u);
  EXPECT_EQ(t->peak_host_bytes(), 5000u);
}

TEST(TimelineTest, UnbalancedEventsAreErrorsNamingTheTensor) {
  {
    EventLog log = TinyLog();
    log.OnMemory(Event(Kind::kFree, 3000, 0, 2, 2, MemoryRole::kActivation, 256, 400));
    absl::StatusOr<Timeline> t = Timeline::Build(log, TinyLayout());
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.status().message().find("'h' freed at step 0 while it is not live"),
              std::string::npos) << t.status();
  }
  {
    EventLog log;
    log.OnMemory(Event(Kind::kAllocate, 1, 0, 0, 2, MemoryRole::kActivation, 0, 8));
    log.OnMemory(Event(Kind::kAllocate, 2, 0, 1, 2, MemoryRole::kActivation, 0, 8));
    absl::StatusOr<Timeline> t = Timeline::Build(log, TinyLayout());
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.status().message().find("'h' allocated at step 0 while it is live already"),
              std::string::npos) << t.status();
  }
  {
    // y allocated in step 0 and never freed: a leak into step 1.
    EventLog log;
    log.OnMemory(Event(Kind::kAllocate, 1, 0, 1, 3, MemoryRole::kActivation, 0, 8));
    log.OnMemory(Event(Kind::kAllocate, 2, 1, 0, 1, MemoryRole::kBatch, 8, 8));
    absl::StatusOr<Timeline> t = Timeline::Build(log, TinyLayout());
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.status().message().find("'y' allocated in step 0 is still live when step 1"),
              std::string::npos) << t.status();
  }
  {
    // Leaked at the end of the last step.
    EventLog log;
    log.OnMemory(Event(Kind::kAllocate, 1, 0, 1, 3, MemoryRole::kActivation, 0, 8));
    absl::StatusOr<Timeline> t = Timeline::Build(log, TinyLayout());
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.status().message().find("still live at the end of step 0"), std::string::npos)
        << t.status();
  }
}

TEST(TimelineTest, EmptyLogHasNoPeak) {
  absl::StatusOr<Timeline> t = Timeline::Build(EventLog(), TinyLayout());
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->points().empty());
  EXPECT_EQ(t->peak().device_bytes, 0u);
}

}  // namespace
}  // namespace headroom::profiler
