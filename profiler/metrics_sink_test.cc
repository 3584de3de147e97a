// The metrics sink on hand-built events: roles at the step's device peak, the host peak kept
// on its own, per-step counters, and events passed on.
#include "profiler/metrics_sink.h"
#include "profiler/metrics_testing.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace headroom::profiler {
namespace {

using Kind = MemoryEvent::Kind;

MemoryEvent Mem(Kind kind, int32_t buffer, MemoryRole role, uint64_t bytes, int64_t step = 0) {
  MemoryEvent e;
  e.kind = kind;
  e.step = step;
  e.buffer = buffer;
  e.role = role;
  e.bytes = bytes;
  return e;
}

std::string Role(MemoryRole role) {
  return absl::StrCat("headroom_job_memory_bytes{device=\"cpu:0\",job=\"j\",role=\"",
                      MemoryRoleName(role), "\"}");
}

TEST(MetricsSinkTest, RolesAtTheDevicePeakHostPeakApart) {
  std::unique_ptr<Metrics> metrics = Metrics::Create().value();
  EventLog log;
  MetricsSink sink(metrics.get(), "j", "cpu:0", &log);
  sink.OnMemory(Mem(Kind::kAllocate, 0, MemoryRole::kParameter, 100, kSetupStep));
  ASSERT_TRUE(metrics->StartJob("j", "cpu:0", 1000).ok());
  // Step 0: an activation goes to host (700 host bytes), comes back and is freed; then the
  // device peaks at 100 + 500 with the host slot already free.
  sink.OnMemory(Mem(Kind::kAllocate, 1, MemoryRole::kActivation, 300));
  sink.OnMemory(Mem(Kind::kAllocate, 1, MemoryRole::kHostOffload, 700));
  sink.OnCopy({CopyEvent::Direction::kToHost, 0, 1, 700});
  sink.OnMemory(Mem(Kind::kFree, 1, MemoryRole::kActivation, 300));
  sink.OnCopy({CopyEvent::Direction::kToDevice, 0, 1, 700});
  sink.OnMemory(Mem(Kind::kFree, 1, MemoryRole::kHostOffload, 700));
  sink.OnMemory(Mem(Kind::kAllocate, 2, MemoryRole::kGradient, 500));
  sink.OnOp({0, 3, 0, 250000000, /*recompute=*/true});
  sink.OnOp({0, 4, 0, 999, /*recompute=*/false});
  sink.OnMemory(Mem(Kind::kFree, 2, MemoryRole::kGradient, 500));
  sink.OnStep({0, 0, 2000000000, 1.5});
  ASSERT_TRUE(sink.status().ok()) << sink.status();

  const std::string text = metrics->TextExposition();
  EXPECT_EQ(ExpositionValue(text, Role(MemoryRole::kParameter)), 100);
  EXPECT_EQ(ExpositionValue(text, Role(MemoryRole::kGradient)), 500);
  EXPECT_EQ(ExpositionValue(text, Role(MemoryRole::kActivation)), 0) << "not live at the device peak";
  EXPECT_EQ(ExpositionValue(text, Role(MemoryRole::kHostOffload)), 700) << "the host's own peak";
  const std::string labels = "{device=\"cpu:0\",job=\"j\"}";
  EXPECT_EQ(ExpositionValue(text, "headroom_measured_peak_bytes" + labels), 600);
  EXPECT_EQ(ExpositionValue(text, "headroom_offloaded_bytes_total" + labels), 700);
  EXPECT_EQ(ExpositionValue(text, "headroom_prefetched_bytes_total" + labels), 700);
  EXPECT_DOUBLE_EQ(ExpositionValue(text, "headroom_recompute_seconds_total" + labels), 0.25);
  EXPECT_DOUBLE_EQ(ExpositionValue(text, "headroom_step_duration_seconds_sum" + labels), 2.0);
  EXPECT_EQ(log.memory().size(), 7u) << "every event passes on";
  EXPECT_EQ(log.ops().size(), 2u);
  EXPECT_EQ(sink.last_step().measured_peak_bytes, 600u);
  EXPECT_EQ(sink.last_step().bytes(MemoryRole::kGradient), 500u);
  EXPECT_EQ(sink.last_step().offloaded_bytes, 700u);

  // Step 1 starts from what lives across steps: its peak is the parameters alone.
  sink.OnStep({1, 2000000000, 3000000000, 1.4});
  const std::string next = metrics->TextExposition();
  EXPECT_EQ(ExpositionValue(next, "headroom_measured_peak_bytes" + labels), 100);
  EXPECT_EQ(ExpositionValue(next, Role(MemoryRole::kHostOffload)), 0);
  EXPECT_EQ(ExpositionValue(next, "headroom_offloaded_bytes_total" + labels), 700) << "nothing new";
}

TEST(MetricsSinkTest, KeepsTheFirstErrorOfAJobNeverStarted) {
  std::unique_ptr<Metrics> metrics = Metrics::Create().value();
  MetricsSink sink(metrics.get(), "unknown", "cpu:0", nullptr);
  sink.OnStep({0, 0, 1000, 1.0});
  EXPECT_EQ(sink.status().code(), absl::StatusCode::kNotFound) << sink.status();
}

}  // namespace
}  // namespace headroom::profiler
