// For tests of optimizer-state and parameter placement: a cost model of round figures and
// the training graph of a forward graph.
#ifndef HEADROOM_PLANNER_PLACEMENT_TESTING_H_
#define HEADROOM_PLANNER_PLACEMENT_TESTING_H_

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "gtest/gtest.h"
#include "planner/cost_model.h"
#include "planner/training_graph.h"

namespace headroom::planner {

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

// Returns the training graph of `g` with `optimizer` (default SGD with momentum, as
// TrainingOptions'; a test failure where it cannot be built).
inline TrainingGraph Training(
    const graph::Graph& g, proto::Optimizer::Kind optimizer = proto::Optimizer::KIND_SGD_MOMENTUM) {
  TrainingOptions options;
  options.optimizer = optimizer;
  absl::StatusOr<TrainingGraph> t = TrainingGraph::Build(g, options);
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(t).value();
}

}  // namespace headroom::planner

#endif  // HEADROOM_PLANNER_PLACEMENT_TESTING_H_
