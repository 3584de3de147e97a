// The step layout of a real sectioned step: names and kinds by position, sections of the
// forward and backward phases, and the roles of cached inputs.
#include "profiler/step_layout.h"

#include "graph/zoo.h"
#include "graph/zoo_testing.h"
#include "gtest/gtest.h"
#include "planner/section_search.h"

namespace headroom::profiler {
namespace {

using planner::NodeKind;

TEST(StepLayoutTest, SectionsOfASectionedStepWithOffload) {
  const graph::Graph g =
      graph::Graph::FromProto(graph::BuildZooModel(graph::SmallZooSpec("resnet18", 2)).value())
          .value();
  const planner::TrainingGraph t =
      planner::TrainingGraph::Build(g, planner::TrainingOptions()).value();
  const planner::RooflineCostModel cost(g, planner::DevicePreset("cpu").value());
  planner::SectionCuts cuts;
  cuts.cuts = planner::SqrtCuts(planner::NumForwardNodes(t));
  cuts.offload = planner::OffloadableTensors(t, cuts.cuts, cost).value();
  ASSERT_FALSE(cuts.offload.empty());
  const planner::SectionedStep step = planner::ExpandSections(t, cuts, cost).value();
  const StepLayout layout = DescribeStep(step);
  ASSERT_EQ(layout.nodes.size(), step.graph.nodes().size());
  EXPECT_EQ(layout.num_sections, static_cast<int32_t>(step.sections.size()));

  // Forward nodes, offloads among them included, go through the sections in order, each
  // section holding as many forward nodes as its range.
  std::vector<int32_t> forward_count(step.sections.size(), 0);
  int32_t last_section = 0;
  size_t s = 0;
  for (; s < layout.nodes.size(); ++s) {
    const StepLayout::Node& node = layout.nodes[s];
    if (node.kind != NodeKind::kForward && node.kind != NodeKind::kOffload) break;
    EXPECT_GE(node.section, last_section) << node.name;
    last_section = node.section;
    if (node.kind == NodeKind::kForward) ++forward_count[node.section];
  }
  for (size_t i = 0; i < step.sections.size(); ++i) {
    EXPECT_EQ(forward_count[i], step.sections[i].end - step.sections[i].begin) << "section " << i;
  }
  // The backward phase visits sections from the last; a section's group starts at its
  // backward_position.
  for (size_t i = 0; i < step.sections.size(); ++i) {
    const int32_t first = step.sections[i].backward_position;
    if (first < 0) continue;
    EXPECT_EQ(layout.nodes[first].section, static_cast<int32_t>(i)) << layout.nodes[first].name;
  }
  for (; s + 1 < layout.nodes.size(); ++s) {
    EXPECT_GE(layout.nodes[s].section, layout.nodes[s + 1].section) << layout.nodes[s + 1].name;
  }

  // Cached inputs are cached inputs, prefetched copies too; parameters stay parameters.
  for (const planner::SectionInfo& info : step.sections) {
    for (const planner::CachedInput& c : info.boundary) {
      const MemoryRole role = layout.tensors[c.tensor].role;
      EXPECT_TRUE(role == MemoryRole::kCachedInput || role == MemoryRole::kBatch)
          << layout.tensors[c.tensor].name << " is " << MemoryRoleName(role);
    }
  }
  int prefetched = 0;
  for (size_t n = 0; n < layout.nodes.size(); ++n) {
    if (layout.nodes[n].kind != NodeKind::kPrefetch) continue;
    for (planner::TensorId out : step.graph.node(n).outputs) {
      EXPECT_EQ(layout.tensors[out].role, MemoryRole::kCachedInput);
      EXPECT_EQ(layout.tensors[out].producer, static_cast<int32_t>(n));
      ++prefetched;
    }
  }
  EXPECT_GT(prefetched, 0);
  EXPECT_EQ(layout.tensors[t.FindTensor("conv1.weight")].role, MemoryRole::kParameter);
  EXPECT_EQ(layout.ProducerName(t.FindTensor("conv1.weight")), "");
  EXPECT_EQ(layout.NodeName(-1), "");
}

}  // namespace
}  // namespace headroom::profiler
