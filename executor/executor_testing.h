// For executor tests: small zoo graphs and the sectioned plan that exercises the most (about
// sqrt(n) sections, every cached input that can go to host memory offloaded).
#ifndef HEADROOM_EXECUTOR_EXECUTOR_TESTING_H_
#define HEADROOM_EXECUTOR_EXECUTOR_TESTING_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "executor/host_tensor.h"
#include "graph/graph.h"
#include "graph/zoo.h"
#include "graph/zoo_testing.h"
#include "planner/cost_model.h"
#include "planner/section_search.h"
#include "planner/sections.h"
#include "util/check.h"

namespace headroom::executor {

// Returns the name of the first tensor whose bytes differ, or "".
inline std::string FirstDifference(const std::vector<HostTensor>& a,
                                   const std::vector<HostTensor>& b) {
  if (a.size() != b.size()) return "(different tensor counts)";
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].bytes != b[i].bytes) return a[i].name;
  }
  return "";
}

// Returns zoo model `name` at `batch`, small (graph::SmallZooSpec), with `options` on top.
inline graph::Graph ZooGraph(const std::string& name, uint64_t batch,
                             const std::map<std::string, int64_t>& options = {}) {
  proto::ZooModel spec = graph::SmallZooSpec(name, batch);
  for (const auto& [k, v] : options) (*spec.mutable_options())[k] = v;
  absl::StatusOr<proto::GraphDef> def = graph::BuildZooModel(spec);
  CHECK(def.ok()) << def.status();
  absl::StatusOr<graph::Graph> g = graph::Graph::FromProto(*def);
  CHECK(g.ok()) << g.status();
  return *std::move(g);
}

// Returns the training graph of `forward` with `optimizer`.
inline planner::TrainingGraph TrainingOf(const graph::Graph& forward,
                                         proto::Optimizer::Kind optimizer) {
  planner::TrainingOptions options;
  options.optimizer = optimizer;
  return planner::TrainingGraph::Build(forward, options).value();
}

// Returns cuts into about sqrt(n) sections, offloading every cached input that can go to
// host memory, for the training graph of `forward` with `optimizer`.
inline planner::SectionCuts SqrtCutsWithOffload(
    const graph::Graph& forward,
    proto::Optimizer::Kind optimizer = proto::Optimizer::KIND_SGD_MOMENTUM) {
  const planner::TrainingGraph training = TrainingOf(forward, optimizer);
  const planner::RooflineCostModel cost(forward, planner::DevicePreset("cpu").value());
  planner::SectionCuts cuts;
  cuts.cuts = planner::SqrtCuts(planner::NumForwardNodes(training));
  cuts.offload = planner::OffloadableTensors(training, cuts.cuts, cost).value();
  return cuts;
}

// The same cuts, keeping every other tensor the re-run sections would recompute (the
// planner's per-tensor choice), and offloading every cached input and kept tensor that can go.
inline planner::SectionCuts SqrtCutsKeepingHalf(
    const graph::Graph& forward,
    proto::Optimizer::Kind optimizer = proto::Optimizer::KIND_SGD_MOMENTUM) {
  const planner::TrainingGraph training = TrainingOf(forward, optimizer);
  const planner::RooflineCostModel cost(forward, planner::DevicePreset("cpu").value());
  planner::SectionCuts cuts;
  cuts.cuts = planner::SqrtCuts(planner::NumForwardNodes(training));
  const std::vector<planner::TensorId> keepable =
      planner::KeepableTensors(training, cuts.cuts, cost).value();
  for (size_t i = 0; i < keepable.size(); i += 2) cuts.keep.push_back(keepable[i]);
  cuts.offload = planner::OffloadableTensors(training, cuts.cuts, cost, cuts.keep).value();
  return cuts;
}

// The same cuts, each re-run section split in two by an inner cut at its middle
// (SectionCuts::inner_cuts: nested sections, a node re-run twice where both halves need it).
inline planner::SectionCuts SqrtCutsNested(
    const graph::Graph& forward,
    proto::Optimizer::Kind optimizer = proto::Optimizer::KIND_SGD_MOMENTUM) {
  const planner::TrainingGraph training = TrainingOf(forward, optimizer);
  planner::SectionCuts cuts;
  cuts.cuts = planner::SqrtCuts(planner::NumForwardNodes(training));
  int32_t begin = 0;
  for (int32_t end : cuts.cuts) {
    if (end - begin >= 2) cuts.inner_cuts.push_back((begin + end) / 2);
    begin = end;
  }
  return cuts;
}

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_EXECUTOR_TESTING_H_
