// Parameters on the host between uses (SectionCuts::parameters_on_host): the expanded
// schedule of a small graph with its use groups written out, what its memory plan keeps on
// the device, its predicted time, and the search over placements.
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

// x [8, 64] -> fc1 -> r1 -> fc2 -> r2 -> fc3 -> loss; each fc a MatMul with a 64x64 weight
// and a bias.
graph::Graph Chain() {
  graph::GraphBuilder b("chain3");
  std::string x = b.Input("x", {8, 64});
  x = b.Linear("fc1", x, 64, 64);
  x = b.Unary("ReLU", "r1", x);
  x = b.Linear("fc2", x, 64, 64);
  x = b.Unary("ReLU", "r2", x);
  x = b.Linear("fc3", x, 64, 64);
  b.Op("SoftmaxCrossEntropy", "loss", {x, b.Label("labels", {8})});
  b.SetLoss("loss");
  absl::StatusOr<graph::Graph> g = graph::Graph::FromProto(b.Build());
  EXPECT_TRUE(g.ok()) << g.status();
  return std::move(g).value();
}

// "name (op)" per node in schedule order, with the parameters (and copies) it reads.
std::string Written(const SectionedStep& step) {
  std::vector<std::string> out;
  for (NodeId n : step.schedule.order) {
    const TrainingNode& node = step.graph.node(n);
    std::string line = absl::StrCat(node.name, " (", node.op, ")");
    std::vector<std::string> params;
    for (TensorId t : node.inputs) {
      if (step.graph.tensor(t).role == proto::ROLE_PARAMETER) {
        params.push_back(step.graph.tensor(t).name);
      }
    }
    if (!params.empty()) absl::StrAppend(&line, " reads ", absl::StrJoin(params, " "));
    out.push_back(line);
  }
  return absl::StrJoin(out, "\n");
}

SectionedStep Expand(const TrainingGraph& t, std::vector<int32_t> cuts, bool params_on_host,
                     double copy = 0, double host = 0) {
  SectionCuts c;
  c.cuts = std::move(cuts);
  c.optimizer_state_on_host = true;
  c.parameters_on_host = params_on_host;
  const UnitCostModel cost(copy, host);
  absl::StatusOr<SectionedStep> step = ExpandSections(t, c, cost);
  EXPECT_TRUE(step.ok()) << step.status();
  return std::move(step).value();
}

TEST(ParameterPlacementTest, TwoSectionsPrefetchEachGroupsCopiesAtTheGroupBefore) {
  const graph::Graph g = Chain();
  const TrainingGraph t = Training(g, proto::Optimizer::KIND_SGD_MOMENTUM);
  // Sections [fc1 r1] and [fc2 r2 fc3 loss]. Use groups: f0 (section 0's forward), f1
  // (section 1's forward and backward), b0 (section 0's re-forward and backward). f0's and
  // f1's copies are prefetched at the step's start, b0's at f1's start; fc1.backward reads no
  // weight (x needs no gradient); each parameter's host update is awaited at the end.
  const SectionedStep step = Expand(t, {2}, true);
  EXPECT_EQ(Written(step),
            "fc1.weight.f0.prefetch (ParamPrefetch)\n"
            "fc1.bias.f0.prefetch (ParamPrefetch)\n"
            "fc2.weight.f1.prefetch (ParamPrefetch)\n"
            "fc2.bias.f1.prefetch (ParamPrefetch)\n"
            "fc3.weight.f1.prefetch (ParamPrefetch)\n"
            "fc3.bias.f1.prefetch (ParamPrefetch)\n"
            "fc1 (MatMul) reads fc1.weight.f0 fc1.bias.f0\n"
            "r1 (ReLU)\n"
            "fc1.weight.b0.prefetch (ParamPrefetch)\n"
            "fc1.bias.b0.prefetch (ParamPrefetch)\n"
            "fc2 (MatMul) reads fc2.weight.f1 fc2.bias.f1\n"
            "r2 (ReLU)\n"
            "fc3 (MatMul) reads fc3.weight.f1 fc3.bias.f1\n"
            "loss (SoftmaxCrossEntropy)\n"
            "loss.seed (LossSeed)\n"
            "loss.backward (SoftmaxCrossEntropyGrad)\n"
            "fc3.backward (MatMulGrad) reads fc3.weight.f1\n"
            "fc3.weight.grad.to_host (GradToHost)\n"
            "fc3.weight.update (HostSgdMomentumUpdate)\n"
            "fc3.bias.grad.to_host (GradToHost)\n"
            "fc3.bias.update (HostSgdMomentumUpdate)\n"
            "r2.backward (ReLUGrad)\n"
            "fc2.backward (MatMulGrad) reads fc2.weight.f1\n"
            "fc2.weight.grad.to_host (GradToHost)\n"
            "fc2.weight.update (HostSgdMomentumUpdate)\n"
            "fc2.bias.grad.to_host (GradToHost)\n"
            "fc2.bias.update (HostSgdMomentumUpdate)\n"
            "fc1.recompute (MatMul) reads fc1.weight.b0 fc1.bias.b0\n"
            "r1.recompute (ReLU)\n"
            "r1.backward (ReLUGrad)\n"
            "fc1.backward (MatMulGrad)\n"
            "fc1.weight.grad.to_host (GradToHost)\n"
            "fc1.weight.update (HostSgdMomentumUpdate)\n"
            "fc1.bias.grad.to_host (GradToHost)\n"
            "fc1.bias.update (HostSgdMomentumUpdate)\n"
            "fc3.weight.host_updated (AwaitHostUpdate)\n"
            "fc3.bias.host_updated (AwaitHostUpdate)\n"
            "fc2.weight.host_updated (AwaitHostUpdate)\n"
            "fc2.bias.host_updated (AwaitHostUpdate)\n"
            "fc1.weight.host_updated (AwaitHostUpdate)\n"
            "fc1.bias.host_updated (AwaitHostUpdate)")
      << Written(step);
  ASSERT_EQ(step.parameter_copies.size(), 8u);
  const ParameterCopy& c = step.parameter_copies[6];
  EXPECT_EQ(step.graph.tensor(c.copy).name, "fc1.weight.b0");
  EXPECT_EQ(c.group, "b0");
  EXPECT_EQ(step.graph.node(c.prefetch_position).name, "fc1.weight.b0.prefetch");
  EXPECT_EQ(step.graph.node(c.first_use_position).name, "fc1.recompute");
  EXPECT_EQ(step.graph.node(c.last_use_position).name, "fc1.recompute");
  // fc1's weight and bias twice, fc2's and fc3's once: (64*64 + 64) * 4 bytes each time.
  EXPECT_EQ(step.parameter_copy_bytes, 4 * (64 * 64 + 64) * 4u);
  // Gradients go out; no parameter comes back at the end of the step.
  EXPECT_EQ(step.optimizer_copy_bytes, 3 * (64 * 64 + 64) * 4u);
}

// One section: a single use group, whose copies live from the step's start to their last
// reader in the backward (no longer to the step's end, as the parameters themselves do).
TEST(ParameterPlacementTest, MemoryPlanKeepsOnlyTheCopiesOnTheDevice) {
  const graph::Graph g = Chain();
  const TrainingGraph t = Training(g, proto::Optimizer::KIND_ADAM);
  for (const std::vector<int32_t>& cuts : {std::vector<int32_t>{}, std::vector<int32_t>{2}}) {
    const SectionedStep device = Expand(t, cuts, false);
    const SectionedStep host = Expand(t, cuts, true);
    const MemoryPlan on_device =
        PlanScheduledGraph(device.graph, device.schedule, 256, DefaultStrategies()).value();
    const MemoryPlan on_host =
        PlanScheduledGraph(host.graph, host.schedule, 256, DefaultStrategies()).value();
    const uint64_t params = 3 * (64 * 64 + 64) * 4;
    EXPECT_EQ(on_device.bytes_by_role.at(proto::ROLE_PARAMETER), params);
    EXPECT_EQ(on_host.host_bytes_by_role.at(proto::ROLE_PARAMETER), params);
    EXPECT_EQ(on_host.bytes_by_role.at(proto::ROLE_PARAMETER), host.parameter_copy_bytes);
    for (const ParameterCopy& c : host.parameter_copies) {
      const PlannedTensor& planned = on_host.tensors[c.copy];
      EXPECT_EQ(planned.lifetime.first_position, c.prefetch_position) << planned.name;
      EXPECT_EQ(planned.lifetime.last_position, c.last_use_position) << planned.name;
      EXPECT_EQ(on_host.tensors[c.param].bytes, 0u) << planned.name;
    }
    // The host pool holds the same: the master copies were there already.
    EXPECT_EQ(HostPoolBytes(host, 256), HostPoolBytes(device, 256));
    EXPECT_LT(on_host.arena_bytes, on_device.arena_bytes) << "on device:\n"
                                                          << on_device.DebugString() << "on host:\n"
                                                          << on_host.DebugString();
  }
}

TEST(ParameterPlacementTest, PredictedStepWaitsForSlowPrefetches) {
  const graph::Graph g = Chain();
  const TrainingGraph t = Training(g, proto::Optimizer::KIND_SGD_MOMENTUM);
  // Free copies: the compute stream never waits; 6 forward + seed + 6 backward + 2
  // re-forward nodes of 1 s (fc1's host updates are free here).
  const SectionedStep free = Expand(t, {2}, true);
  EXPECT_DOUBLE_EQ(free.step_seconds, 6 + 1 + 6 + 2);
  EXPECT_DOUBLE_EQ(free.stall_seconds, 0);
  // 1 ms a byte: the six copies of f0 and f1 (16384 B weights, 256 B biases) queue on the
  // stream to the device from the step's start, so fc3 cannot start before 3 * 16.64 s,
  // where 4 nodes of compute would have it start at 4 s. Every wait is a stall.
  const SectionedStep slow = Expand(t, {2}, true, 1e-3);
  const double pair = (16384 + 256) * 1e-3;
  EXPECT_GE(slow.stall_seconds, 3 * pair - 4) << "step " << slow.step_seconds << " s";
  EXPECT_NEAR(slow.step_seconds, free.step_seconds + slow.stall_seconds, 1e-9);
}

TEST(ParameterPlacementTest, ParametersOnTheHostNeedTheStateThere) {
  const graph::Graph g = Chain();
  const TrainingGraph t = Training(g, proto::Optimizer::KIND_ADAM);
  SectionCuts cuts;
  cuts.parameters_on_host = true;
  const UnitCostModel cost(0, 0);
  EXPECT_THAT(ExpandSections(t, cuts, cost).status().message(),
              HasSubstr("parameters on the host need the optimizer state on the host"));
}

// Auto: parameters go to the host only where nothing else fits; the frontier marks them.
TEST(ParameterPlacementTest, AutoPicksParametersOnTheHostOnlyBelowTheStatesFloor) {
  const graph::Graph g = Chain();
  const TrainingGraph t = Training(g, proto::Optimizer::KIND_ADAM);
  const UnitCostModel cost(1e-6, 1e-6);
  SearchOptions options;
  auto state_host = PlacementSearch::Create(t, cost, options, proto::OPTIMIZER_STATE_HOST).value();
  auto any =
      PlacementSearch::Create(t, cost, options, proto::OPTIMIZER_STATE_AUTO, proto::PARAMETERS_AUTO)
          .value();
  const uint64_t state_floor = state_host->MinimumPeakBytes().value();
  const uint64_t floor = any->MinimumPeakBytes().value();
  EXPECT_LT(floor, state_floor);
  const SectionPlan below = any->Plan(state_floor - 1).value();
  EXPECT_TRUE(below.step->parameters_on_host());
  EXPECT_TRUE(below.step->optimizer_state_on_host());
  EXPECT_LE(below.peak_bytes, state_floor - 1);
  const SectionPlan roomy = any->Plan(1 << 30).value();
  EXPECT_FALSE(roomy.step->parameters_on_host()) << "copies cost time; room enough without";
  const std::vector<TradeOffPoint> frontier = any->Frontier().value();
  bool marked = false;
  for (const TradeOffPoint& p : frontier) marked = marked || p.parameters_on_host;
  EXPECT_TRUE(marked) << "the frontier's smallest point keeps the parameters on the host";
  // Far below every floor (the search may refine a plan a little below MinimumPeakBytes).
  const absl::Status too_small = any->Plan(floor / 4).status();
  EXPECT_EQ(too_small.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(too_small.message(), HasSubstr("Its optimizer state and parameters"));
  EXPECT_THAT(PlacementSearch::Create(t, cost, options, proto::OPTIMIZER_STATE_DEVICE,
                                      proto::PARAMETERS_HOST)
                  .status()
                  .message(),
              HasSubstr("parameters on the host need the optimizer state on the host"));
  EXPECT_THAT(ParseParameterPlacement("cpu").status().message(),
              HasSubstr("'cpu' is not one of device, host, auto"));
}

}  // namespace
}  // namespace headroom::planner
