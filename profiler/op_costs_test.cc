// Measured costs from hand-built events: medians leave out the first step, re-forward time
// adds up per step, copy rates come from measured copies only.
#include "profiler/op_costs.h"

#include "gtest/gtest.h"

namespace headroom::profiler {
namespace {

StepLayout TwoNodes() {
  StepLayout layout;
  layout.nodes = {{"conv", "Conv2D", planner::NodeKind::kForward, 0},
                  {"conv.recompute", "Conv2D", planner::NodeKind::kRecompute, 0}};
  return layout;
}

TEST(OpCostsTest, MediansLeaveOutTheFirstStep) {
  EventLog log;
  // conv: 100 ms in step 0 (warm-up), then 10, 30, 20 ms. conv.recompute: 5 ms each step.
  const int64_t ms = 1000000;
  const int64_t conv[] = {100, 10, 30, 20};
  for (int64_t s = 0; s < 4; ++s) {
    log.OnOp({s, 0, s * 1000 * ms, s * 1000 * ms + conv[s] * ms});
    log.OnOp({s, 1, s * 1000 * ms + 500 * ms, s * 1000 * ms + 505 * ms});
  }
  MemoryEvent workspace;
  workspace.role = MemoryRole::kWorkspace;
  workspace.node = 0;
  workspace.bytes = 4096;
  log.OnMemory(workspace);
  const MeasuredCosts costs = MeasureCosts(log, TwoNodes());
  ASSERT_EQ(costs.ops.size(), 2u);
  EXPECT_EQ(costs.ops[0].node(), "conv");
  EXPECT_EQ(costs.ops[0].kind(), "forward");
  EXPECT_EQ(costs.ops[0].runs(), 3u);
  EXPECT_NEAR(costs.ops[0].seconds(), 0.020, 1e-12);
  EXPECT_EQ(costs.ops[0].workspace_bytes(), 4096u);
  EXPECT_EQ(costs.ops[1].kind(), "recompute");
  EXPECT_NEAR(costs.ops[1].seconds(), 0.005, 1e-12);
  EXPECT_EQ(costs.ops[1].workspace_bytes(), 0u);
  EXPECT_NEAR(costs.recompute_seconds, 0.005, 1e-12);
}

TEST(OpCostsTest, OneStepIsKept) {
  EventLog log;
  log.OnOp({0, 0, 0, 7000});
  const MeasuredCosts costs = MeasureCosts(log, TwoNodes());
  EXPECT_EQ(costs.ops[0].runs(), 1u);
  EXPECT_NEAR(costs.ops[0].seconds(), 7e-6, 1e-15);
  EXPECT_EQ(costs.ops[1].runs(), 0u);
  EXPECT_EQ(costs.recompute_seconds, 0);
}

TEST(OpCostsTest, CopyRatesFromMeasuredCopiesOnly) {
  EventLog log;
  CopyEvent out;
  out.direction = CopyEvent::Direction::kToHost;
  out.bytes = 2000000000;
  out.begin_ns = 0;
  out.end_ns = 1000000000;  // 2 GB/s.
  out.measured = true;
  log.OnCopy(out);
  CopyEvent guessed = out;
  guessed.measured = false;  // Issue-to-wait times say nothing of the copy's rate.
  guessed.end_ns = 100;
  log.OnCopy(guessed);
  CopyEvent back = out;
  back.direction = CopyEvent::Direction::kToDevice;
  back.end_ns = 500000000;  // 4 GB/s.
  log.OnCopy(back);
  const MeasuredCosts costs = MeasureCosts(log, TwoNodes());
  EXPECT_NEAR(costs.copy_to_host_bytes_per_second, 2e9, 1);
  EXPECT_NEAR(costs.copy_to_device_bytes_per_second, 4e9, 1);
}

}  // namespace
}  // namespace headroom::profiler
