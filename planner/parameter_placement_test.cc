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
#include "planner/sections.h"

namespace headroom::planner {
namespace {

using ::testing::HasSubstr;

// Every compute node takes one second; copies `copy_seconds_per_byte` a byte; a host update
// `host_seconds_per_byte` a byte it moves.
class UnitCostModel : public CostModel {
 public:
  UnitCostModel(double copy_seconds_per_byte, double host_seconds_per_byte)
      : copy_(copy_seconds_per_byte), host_(host_seconds_per_byte) {}
  std::string name() const override { return "unit"; }
  double NodeSeconds(const TrainingGraph& graph, NodeId id) const override {
    const NodeKind kind = graph.node(id).kind;
    return kind == NodeKind::kOffload || kind == NodeKind::kPrefetch ? 0 : 1;
  }
  uint64_t NodeFlops(const TrainingGraph& graph, NodeId id) const override { return 1; }
  double CopySeconds(uint64_t bytes) const override { return copy_ * bytes; }
  double HostUpdateSeconds(uint64_t bytes) const override { return host_ * bytes; }

 private:
  double copy_, host_;
};

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

TrainingGraph Training(const graph::Graph& g, proto::Optimizer::Kind optimizer) {
  TrainingOptions options;
  options.optimizer = optimizer;
  absl::StatusOr<TrainingGraph> t = TrainingGraph::Build(g, options);
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(t).value();
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

TEST(ParameterPlacementTest, ScheduleWithTwoSections) {
  const graph::Graph g = Chain();
  const TrainingGraph t = Training(g, proto::Optimizer::KIND_SGD_MOMENTUM);
  const SectionedStep step = Expand(t, {2}, true);
  std::cout << Written(step) << "\n";
}

}  // namespace
}  // namespace headroom::planner
