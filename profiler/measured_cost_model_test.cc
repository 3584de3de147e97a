// The measured cost model: node times from a profile where it has them, the roofline's
// elsewhere; refused for another graph; read back from the JSON `headroom profile` writes.
#include "profiler/measured_cost_model.h"

#include <cstdio>
#include <fstream>

#include "google/protobuf/util/json_util.h"
#include "graph/zoo.h"
#include "graph/zoo_testing.h"
#include "gtest/gtest.h"
#include "planner/section_search.h"
#include "planner/sections.h"

namespace headroom::profiler {
namespace {

graph::Graph Mlp(uint64_t batch) {
  return graph::Graph::FromProto(graph::BuildZooModel(graph::SmallZooSpec("mlp", batch)).value())
      .value();
}

planner::DeviceSpec Cpu() { return planner::DevicePreset("cpu").value(); }

std::unique_ptr<planner::CostModel> Roofline(const graph::Graph& g) {
  return std::make_unique<planner::RooflineCostModel>(g, planner::DevicePreset("cpu").value());
}

// A profile of `g` timing every forward node at 1 ms plus its index in microseconds.
proto::ProfileResponse ForwardProfile(const graph::Graph& g, const planner::TrainingGraph& t) {
  proto::ProfileResponse p;
  p.set_graph_name(g.name());
  p.set_graph_fingerprint(GraphFingerprint(g));
  p.set_backend("cpu");
  p.add_step_seconds(0.5);
  for (planner::NodeId n = 0; n < planner::NumForwardNodes(t); ++n) {
    proto::OpCost* op = p.add_op_costs();
    op->set_node(t.node(n).name);
    op->set_seconds(1e-3 + n * 1e-6);
    op->set_runs(2);
  }
  return p;
}

TEST(MeasuredCostModelTest, FingerprintIsTheGraphAndItsBatch) {
  EXPECT_EQ(GraphFingerprint(Mlp(4)), GraphFingerprint(Mlp(4)));
  EXPECT_NE(GraphFingerprint(Mlp(4)), GraphFingerprint(Mlp(8)));
  EXPECT_EQ(GraphFingerprint(Mlp(4)).size(), 16u);
}

TEST(MeasuredCostModelTest, MeasuredTimesWhereTheProfileHasThemRooflineElsewhere) {
  const graph::Graph g = Mlp(4);
  const planner::TrainingGraph t =
      planner::TrainingGraph::Build(g, planner::TrainingOptions()).value();
  auto model = MeasuredCostModel::Create(g, ForwardProfile(g, t), Cpu());
  ASSERT_TRUE(model.ok()) << model.status();
  const auto roofline = Roofline(g);
  const int32_t nf = planner::NumForwardNodes(t);
  for (planner::NodeId n = 0; n < static_cast<planner::NodeId>(t.nodes().size()); ++n) {
    if (n < nf) {
      EXPECT_DOUBLE_EQ((*model)->NodeSeconds(t, n), 1e-3 + n * 1e-6) << t.node(n).name;
    } else {
      EXPECT_DOUBLE_EQ((*model)->NodeSeconds(t, n), roofline->NodeSeconds(t, n)) << t.node(n).name;
    }
    EXPECT_EQ((*model)->NodeFlops(t, n), roofline->NodeFlops(t, n));
  }
  EXPECT_NEAR((*model)->Coverage(t), static_cast<double>(nf) / t.nodes().size(), 1e-12);
  EXPECT_NE((*model)->name().find("measured (cpu profile, 1 steps) over roofline"),
            std::string::npos) << (*model)->name();
}

TEST(MeasuredCostModelTest, ReForwardNodesTakeTheirForwardNodesTime) {
  const graph::Graph g = Mlp(4);
  const planner::TrainingGraph t =
      planner::TrainingGraph::Build(g, planner::TrainingOptions()).value();
  auto model = MeasuredCostModel::Create(g, ForwardProfile(g, t), Cpu());
  ASSERT_TRUE(model.ok()) << model.status();
  planner::SectionCuts cuts;
  cuts.cuts = planner::SqrtCuts(planner::NumForwardNodes(t));
  const planner::SectionedStep step = planner::ExpandSections(t, cuts, **model).value();
  int recomputed = 0;
  for (planner::NodeId n = 0; n < static_cast<planner::NodeId>(step.graph.nodes().size()); ++n) {
    const planner::TrainingNode& node = step.graph.node(n);
    if (node.kind != planner::NodeKind::kRecompute) continue;
    ++recomputed;
    const planner::NodeId original = t.FindNode(node.name.substr(0, node.name.size() - 10));
    ASSERT_NE(original, planner::kNone) << node.name;
    EXPECT_DOUBLE_EQ((*model)->NodeSeconds(step.graph, n), 1e-3 + original * 1e-6) << node.name;
  }
  EXPECT_GT(recomputed, 0);
  EXPECT_GT(step.recompute_seconds, 0);
}

TEST(MeasuredCostModelTest, CopiesTakeTheSlowerMeasuredRate) {
  const graph::Graph g = Mlp(4);
  const planner::TrainingGraph t =
      planner::TrainingGraph::Build(g, planner::TrainingOptions()).value();
  proto::ProfileResponse p = ForwardProfile(g, t);
  auto without = MeasuredCostModel::Create(g, p, Cpu());
  ASSERT_TRUE(without.ok());
  EXPECT_DOUBLE_EQ((*without)->CopySeconds(1 << 20), Roofline(g)->CopySeconds(1 << 20));
  p.set_copy_to_host_bytes_per_second(4e9);
  p.set_copy_to_device_bytes_per_second(2e9);
  auto with = MeasuredCostModel::Create(g, p, Cpu());
  ASSERT_TRUE(with.ok());
  EXPECT_DOUBLE_EQ((*with)->CopySeconds(2000000000), 1.0);
}

TEST(MeasuredCostModelTest, RefusesAProfileOfAnotherDevice) {
  const graph::Graph g = Mlp(4);
  const planner::TrainingGraph t =
      planner::TrainingGraph::Build(g, planner::TrainingOptions()).value();
  auto model = MeasuredCostModel::Create(g, ForwardProfile(g, t),
                                         planner::DevicePreset("h100").value());
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(model.status().message().find("cpu backend"), std::string::npos) << model.status();
}

TEST(MeasuredCostModelTest, RefusesAProfileOfAnotherGraph) {
  const graph::Graph g4 = Mlp(4);
  const graph::Graph g8 = Mlp(8);
  const planner::TrainingGraph t =
      planner::TrainingGraph::Build(g4, planner::TrainingOptions()).value();
  auto model = MeasuredCostModel::Create(g8, ForwardProfile(g4, t), Cpu());
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(model.status().message().find("same batch size"), std::string::npos)
      << model.status();
  proto::ProfileResponse empty;
  empty.set_graph_fingerprint(GraphFingerprint(g4));
  empty.set_backend("cpu");
  auto unmeasured = MeasuredCostModel::Create(g4, empty, Cpu());
  EXPECT_EQ(unmeasured.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(unmeasured.status().message().find("no measured node times"), std::string::npos)
      << unmeasured.status();
}

TEST(MeasuredCostModelTest, ReadsTheProfileJson) {
  const graph::Graph g = Mlp(4);
  const planner::TrainingGraph t =
      planner::TrainingGraph::Build(g, planner::TrainingOptions()).value();
  const proto::ProfileResponse p = ForwardProfile(g, t);
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(p, &json, options).ok());
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  const std::string path = dir + "/prof.json";
  std::ofstream(path) << json;
  absl::StatusOr<proto::ProfileResponse> read = ReadProfileFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->graph_fingerprint(), p.graph_fingerprint());
  EXPECT_EQ(read->op_costs_size(), p.op_costs_size());

  std::ofstream(dir + "/bad.json") << "{\"op_costs\": [";
  absl::StatusOr<proto::ProfileResponse> bad = ReadProfileFile(dir + "/bad.json");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("bad.json"), std::string::npos) << bad.status();
  EXPECT_EQ(ReadProfileFile(dir + "/missing.json").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace headroom::profiler
