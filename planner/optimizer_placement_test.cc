// Optimizer state on the host (SectionCuts::optimizer_state_on_host): the expanded schedule
// of a small graph written out, what its memory plan keeps on the device, its host pool, its
// predicted time, and the search over placements.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "graph/graph.h"
#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "planner/memory_planner.h"
#include "planner/placement_search.h"
#include "planner/placement_testing.h"
#include "planner/sections.h"

namespace headroom::planner {
namespace {

using ::testing::HasSubstr;

// x [8, 32] -> fc1 (a MatMul with a 32x32 weight and a bias) -> r1 -> fc2 -> loss.
graph::Graph Chain() {
  graph::GraphBuilder b("chain");
  std::string x = b.Input("x", {8, 32});
  x = b.Linear("fc1", x, 32, 32);
  x = b.Unary("ReLU", "r1", x);
  x = b.Linear("fc2", x, 32, 32);
  b.Op("SoftmaxCrossEntropy", "loss", {x, b.Label("labels", {8})});
  b.SetLoss("loss");
  absl::StatusOr<graph::Graph> g = graph::Graph::FromProto(b.Build());
  EXPECT_TRUE(g.ok()) << g.status();
  return std::move(g).value();
}

// "name (op)" per node in schedule order.
std::string Written(const SectionedStep& step) {
  std::vector<std::string> out;
  for (NodeId n : step.schedule.order) {
    out.push_back(absl::StrCat(step.graph.node(n).name, " (", step.graph.node(n).op, ")"));
  }
  return absl::StrJoin(out, "\n");
}

SectionedStep Expand(const TrainingGraph& t, bool on_host, double copy, double host = 0) {
  SectionCuts cuts;
  cuts.optimizer_state_on_host = on_host;
  const UnitCostModel cost(copy, host);
  absl::StatusOr<SectionedStep> step = ExpandSections(t, cuts, cost);
  EXPECT_TRUE(step.ok()) << step.status();
  return std::move(step).value();
}

TEST(OptimizerPlacementTest, FreeCopiesAwaitEachGradientRightAfterItsWriter) {
  const graph::Graph g = Chain();
  const TrainingGraph t = Training(g, proto::Optimizer::KIND_ADAM);
  const SectionedStep step = Expand(t, true, 0);
  // Each gradient's copy is issued after its writer and awaited at once (copies are free);
  // the update is queued on the host; the parameters come back at the end of the step.
  EXPECT_EQ(Written(step),
            "fc1 (MatMul)\n"
            "r1 (ReLU)\n"
            "fc2 (MatMul)\n"
            "loss (SoftmaxCrossEntropy)\n"
            "loss.seed (LossSeed)\n"
            "loss.backward (SoftmaxCrossEntropyGrad)\n"
            "fc2.backward (MatMulGrad)\n"
            "fc2.weight.grad.to_host (GradToHost)\n"
            "fc2.weight.update (HostAdamUpdate)\n"
            "fc2.bias.grad.to_host (GradToHost)\n"
            "fc2.bias.update (HostAdamUpdate)\n"
            "r1.backward (ReLUGrad)\n"
            "fc1.backward (MatMulGrad)\n"
            "fc1.weight.grad.to_host (GradToHost)\n"
            "fc1.weight.update (HostAdamUpdate)\n"
            "fc1.bias.grad.to_host (GradToHost)\n"
            "fc1.bias.update (HostAdamUpdate)\n"
            "fc2.weight.to_device (ParamToDevice)\n"
            "fc2.bias.to_device (ParamToDevice)\n"
            "fc1.weight.to_device (ParamToDevice)\n"
            "fc1.bias.to_device (ParamToDevice)")
      << Written(step);
  ASSERT_EQ(step.host_updates.size(), 4u);
  const HostUpdate& u = step.host_updates[0];
  EXPECT_EQ(step.graph.tensor(u.param).name, "fc2.weight");
  EXPECT_EQ(step.graph.tensor(u.grad).name, "fc2.weight.grad");
  ASSERT_EQ(u.state.size(), 2u);
  EXPECT_EQ(step.graph.tensor(u.state[0]).name, "fc2.weight.adam_m");
  EXPECT_TRUE(step.graph.tensor(u.state[0]).on_host);
  EXPECT_EQ(step.graph.node(u.grad_copy_after_position).name, "fc2.backward");
  EXPECT_EQ(step.graph.node(u.grad_await_position).name, "fc2.weight.grad.to_host");
  EXPECT_EQ(step.graph.node(u.update_position).name, "fc2.weight.update");
  EXPECT_EQ(step.graph.node(u.copy_back_position).name, "fc2.weight.to_device");
  EXPECT_EQ(step.optimizer_copy_bytes, 2 * (32 * 32 + 32 + 32 * 32 + 32) * 4u);
}

TEST(OptimizerPlacementTest, SlowCopiesAwaitWhereTheCopyIsDone) {
  const graph::Graph g = Chain();
  const TrainingGraph t = Training(g, proto::Optimizer::KIND_SGD_MOMENTUM);
  // fc2.weight's gradient (4096 B) takes 4096 * 1e-3 = 4.1 s to copy: r1.backward and
  // fc1.backward (1 s each) run before it is awaited, at the end.
  const SectionedStep step = Expand(t, true, 1e-3);
  std::vector<std::string> order;
  for (NodeId n : step.schedule.order) order.push_back(step.graph.node(n).name);
  const auto at = [&](const std::string& name) {
    return std::find(order.begin(), order.end(), name) - order.begin();
  };
  EXPECT_GT(at("fc2.weight.grad.to_host"), at("fc1.backward")) << Written(step);
  EXPECT_LT(at("fc2.weight.grad.to_host"), at("fc2.weight.to_device")) << Written(step);
}

// The device plan keeps no optimizer state, every gradient dies at its GradToHost node, and
// the host pool holds master parameters, gradients and state.
TEST(OptimizerPlacementTest, MemoryPlanKeepsTheStateOnTheHost) {
  const graph::Graph g = Chain();
  const TrainingGraph t = Training(g, proto::Optimizer::KIND_ADAM);
  const SectionedStep device = Expand(t, false, 0);
  const SectionedStep host = Expand(t, true, 0);
  const MemoryPlan on_device =
      PlanScheduledGraph(device.graph, device.schedule, 256, DefaultStrategies()).value();
  const MemoryPlan on_host =
      PlanScheduledGraph(host.graph, host.schedule, 256, DefaultStrategies()).value();
  const uint64_t params = (32 * 32 + 32) * 2 * 4;  // fc1 and fc2, float32.
  EXPECT_EQ(on_device.bytes_by_role.at(proto::ROLE_OPTIMIZER_STATE), 2 * params);
  EXPECT_EQ(on_host.bytes_by_role.count(proto::ROLE_OPTIMIZER_STATE), 0u);
  EXPECT_EQ(on_host.host_bytes_by_role.at(proto::ROLE_OPTIMIZER_STATE), 2 * params);
  EXPECT_LE(on_host.arena_bytes + 2 * params, on_device.arena_bytes)
      << "on device:\n"
      << on_device.DebugString() << "on host:\n"
      << on_host.DebugString();
  for (const HostUpdate& u : host.host_updates) {
    EXPECT_EQ(on_host.tensors[u.grad].lifetime.last_position, u.grad_await_position)
        << host.graph.tensor(u.grad).name;
    for (TensorId s : u.state) EXPECT_EQ(on_host.tensors[s].bytes, 0u);
  }
  // Each of fc1/fc2 weight (4096 B) and bias (128 B, aligned to 256): master, gradient, m, v.
  EXPECT_EQ(OptimizerHostBytes(host, 256), 4 * (4096 + 256) * 2u);
  EXPECT_EQ(HostPoolBytes(host, 256), OptimizerHostBytes(host, 256));
  EXPECT_EQ(OptimizerHostBytes(device, 256), 0u);
}

TEST(OptimizerPlacementTest, PredictedStepWaitsForTheLastParameterBack) {
  const graph::Graph g = Chain();
  const TrainingGraph t = Training(g, proto::Optimizer::KIND_SGD_MOMENTUM);
  const SectionedStep device = Expand(t, false, 0);
  // Free copies, a host update of 1 s per megabyte moved: fc1.weight's update (1024
  // elements, 20 bytes each) takes 0.02048 s after the last backward node, fc1.bias 0.00064 s.
  const SectionedStep host = Expand(t, true, 0, 1e-6);
  EXPECT_GT(host.host_update_seconds, 0.04);
  // Device: 4 forward + seed + 4 backward + 4 updates of 1 s; host: no updates on the
  // compute stream, then fc1's two host updates after its backward ends at 9 s.
  EXPECT_DOUBLE_EQ(device.step_seconds, 13);
  EXPECT_NEAR(host.step_seconds, 9 + 1024 * 20 * 1e-6 + 32 * 20 * 1e-6, 1e-9);
}

TEST(OptimizerPlacementTest, AutoPicksTheHostOnlyWhereTheDeviceCannotFit) {
  const graph::Graph g = Chain();
  const TrainingGraph t = Training(g, proto::Optimizer::KIND_ADAM);
  const UnitCostModel cost(1e-6, 1e-6);
  SearchOptions options;
  auto search = PlacementSearch::Create(t, cost, options, proto::OPTIMIZER_STATE_AUTO).value();
  auto device = PlacementSearch::Create(t, cost, options, proto::OPTIMIZER_STATE_DEVICE).value();
  const uint64_t device_floor = device->MinimumPeakBytes().value();
  const uint64_t floor = search->MinimumPeakBytes().value();
  EXPECT_LT(floor, device_floor);
  const SectionPlan below = search->Plan(device_floor - 1).value();
  EXPECT_TRUE(below.step->optimizer_state_on_host());
  EXPECT_LE(below.peak_bytes, device_floor - 1);
  // Below every placement's floor: the message says the state lives on the host.
  const absl::Status too_small = search->Plan(floor - 1).status();
  EXPECT_EQ(too_small.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(too_small.message(), HasSubstr("lives on the host; it keeps on the device"));
  EXPECT_THAT(ParseOptimizerState("gpu").status().message(),
              HasSubstr("'gpu' is not one of device, host, auto"));
}

}  // namespace
}  // namespace headroom::planner
