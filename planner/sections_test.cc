// Expanded schedules of small sectioned steps, written out node by node.
#include "planner/sections.h"

#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "graph/graph.h"
#include "graph/graph_builder.h"
#include "graph/zoo.h"
#include "graph/zoo_testing.h"
#include "gtest/gtest.h"
#include "planner/memory_planner.h"
#include "planner/scratch_model.h"

namespace headroom::planner {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Forward and re-forward nodes take one second, backward-phase nodes `backward_seconds`,
// updates and copy nodes none; a copy takes `copy_seconds_per_byte` per byte.
class UnitCostModel : public CostModel {
 public:
  explicit UnitCostModel(double copy_seconds_per_byte, double backward_seconds = 1)
      : per_byte_(copy_seconds_per_byte), backward_seconds_(backward_seconds) {}
  std::string name() const override { return "unit"; }
  double NodeSeconds(const TrainingGraph& graph, NodeId id) const override {
    switch (graph.node(id).kind) {
      case NodeKind::kForward:
      case NodeKind::kRecompute:
        return 1;
      case NodeKind::kOffload:
      case NodeKind::kPrefetch:
      case NodeKind::kUpdate:
        return 0;
      default:
        return backward_seconds_;
    }
  }
  uint64_t NodeFlops(const TrainingGraph& graph, NodeId id) const override {
    const NodeKind kind = graph.node(id).kind;
    return kind == NodeKind::kForward || kind == NodeKind::kRecompute ? 10 : 0;
  }
  double CopySeconds(uint64_t bytes) const override { return per_byte_ * bytes; }

 private:
  double per_byte_;
  double backward_seconds_;
};

// x -> fc1 -> r1 -> fc2 -> r2 -> fc3 -> loss. Forward positions: fc1 0, r1 1, fc2 2, r2 3,
// fc3 4, loss 5. Every activation is [8, 32] floats: 1024 bytes.
graph::Graph Chain() {
  graph::GraphBuilder b("chain");
  std::string x = b.Input("x", {8, 32});
  x = b.Linear("fc1", x, 32, 32);
  x = b.Unary("ReLU", "r1", x);
  x = b.Linear("fc2", x, 32, 32);
  x = b.Unary("ReLU", "r2", x);
  x = b.Linear("fc3", x, 32, 32);
  b.Op("SoftmaxCrossEntropy", "loss", {x, b.Label("labels", {8})});
  b.SetLoss("loss");
  absl::StatusOr<graph::Graph> g = graph::Graph::FromProto(b.Build());
  EXPECT_TRUE(g.ok()) << g.status();
  return std::move(g).value();
}

graph::Graph SmallZoo(const std::string& name) {
  absl::StatusOr<proto::GraphDef> def = graph::BuildZooModel(graph::SmallZooSpec(name, 2));
  EXPECT_TRUE(def.ok()) << def.status();
  absl::StatusOr<graph::Graph> g = graph::Graph::FromProto(*def);
  EXPECT_TRUE(g.ok()) << g.status();
  return std::move(g).value();
}

TrainingGraph Training(const graph::Graph& g) {
  absl::StatusOr<TrainingGraph> t = TrainingGraph::Build(g, {});
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(t).value();
}

SectionedStep Expand(const TrainingGraph& t, SectionCuts cuts, double copy_per_byte = 0,
                     double backward_seconds = 1) {
  const UnitCostModel cost(copy_per_byte, backward_seconds);
  absl::StatusOr<SectionedStep> step = ExpandSections(t, cuts, cost);
  EXPECT_TRUE(step.ok()) << step.status();
  return std::move(step).value();
}

// Node names in schedule order, leaving out updates (they follow each weight's gradient).
std::string Order(const SectionedStep& step) {
  std::vector<std::string> names;
  for (NodeId n : step.schedule.order) {
    if (step.graph.node(n).kind != NodeKind::kUpdate) names.push_back(step.graph.node(n).name);
  }
  return absl::StrJoin(names, " ");
}

const CachedInput* FindCached(const SectionedStep& step, int section, const std::string& name) {
  for (const CachedInput& c : step.sections[section].boundary) {
    if (step.graph.tensor(c.tensor).name == name) return &c;
  }
  return nullptr;
}

TEST(SectionsTest, ThreeSectionsRecomputeAllButTheLast) {
  const graph::Graph g = Chain();
  const TrainingGraph t = Training(g);
  const SectionedStep step = Expand(t, {{2, 4}, {}});
  // Forward; the last section's backward; then each earlier section re-runs what its
  // backward reads (r2 reads its output, which fc2 writes) before its backward.
  EXPECT_EQ(Order(step),
            "fc1 r1 fc2 r2 fc3 loss loss.seed loss.backward fc3.backward "
            "fc2.recompute r2.recompute r2.backward fc2.backward "
            "fc1.recompute r1.recompute r1.backward fc1.backward");
  ASSERT_EQ(step.sections.size(), 3u);
  EXPECT_TRUE(step.sections[0].recomputed);
  EXPECT_TRUE(step.sections[1].recomputed);
  EXPECT_FALSE(step.sections[2].recomputed);
  EXPECT_EQ(step.recompute_flops, 40u);
  // Cached inputs: x for section 0 (fc1's weight gradient reads it), r1 for section 1, r2
  // (and the labels) for the last.
  EXPECT_NE(FindCached(step, 0, "x"), nullptr);
  EXPECT_NE(FindCached(step, 1, "r1"), nullptr);
  EXPECT_NE(FindCached(step, 2, "r2"), nullptr);
  EXPECT_NE(FindCached(step, 2, "labels"), nullptr);
  EXPECT_EQ(step.sections[1].boundary.size(), 1u);
  // r1's original is kept from the forward to section 1's backward; the re-forward's r2
  // copy, not the original, is what r2.backward reads.
  EXPECT_EQ(step.graph.tensor(t.FindTensor("r1")).role, proto::ROLE_CACHED_INPUT);
  const TrainingNode& r2_backward = step.graph.node(step.graph.FindNode("r2.backward"));
  EXPECT_EQ(step.graph.tensor(r2_backward.inputs[1]).name, "r2.recompute");
  // The original r2 dies at fc3's backward (its weight gradient), before section 1 runs.
  EXPECT_EQ(step.graph.tensor(t.FindTensor("r2")).consumers.back(),
            step.graph.FindNode("fc3.backward"));
}

TEST(SectionsTest, ReForwardSkipsNodesTheBackwardDoesNotRead) {
  const TrainingGraph t = Training(Chain());
  // Section 0 is fc1 r1 fc2: fc2's backward reads r1, not fc2's output, so fc2 is not re-run.
  const SectionedStep step = Expand(t, {{3}, {}});
  EXPECT_EQ(Order(step),
            "fc1 r1 fc2 r2 fc3 loss loss.seed loss.backward fc3.backward r2.backward "
            "fc1.recompute r1.recompute fc2.backward r1.backward fc1.backward");
  EXPECT_EQ(step.sections[0].recompute_nodes, 2);
}

TEST(SectionsTest, InnerCutsReForwardEachChunkJustBeforeItsBackward) {
  const TrainingGraph t = Training(Chain());
  SectionCuts cuts{{4}, {}};
  cuts.inner_cuts = {2};
  const SectionedStep step = Expand(t, cuts);
  // Section 0 (fc1 r1 fc2 r2) runs backward in two chunks: [fc2 r2] re-runs the whole prefix
  // its backward reads, then [fc1 r1] re-runs fc1 and r1 a second time.
  EXPECT_EQ(Order(step),
            "fc1 r1 fc2 r2 fc3 loss loss.seed loss.backward fc3.backward "
            "fc1.recompute r1.recompute fc2.recompute r2.recompute r2.backward fc2.backward "
            "fc1.recompute2 r1.recompute2 r1.backward fc1.backward");
  EXPECT_THAT(step.sections[0].inner_cuts, ElementsAre(2));
  EXPECT_EQ(step.sections[0].recompute_nodes, 6);
  EXPECT_EQ(step.recompute_flops, 60u);
  // The first re-run copy of r1 dies at fc2's backward; r1.backward reads the second.
  EXPECT_EQ(step.graph.tensor(step.graph.FindTensor("r1.recompute")).consumers.back(),
            step.graph.FindNode("fc2.backward"));
  const TrainingNode& r1_backward = step.graph.node(step.graph.FindNode("r1.backward"));
  EXPECT_EQ(step.graph.tensor(r1_backward.inputs[1]).name, "r1.recompute2");
  EXPECT_TRUE(ValidateSchedule(step.graph, step.schedule).ok());
}

TEST(SectionsTest, InnerCutsLowerTheLeastPeakOfADeepMlpForMoreRecompute) {
  absl::StatusOr<proto::GraphDef> def =
      graph::BuildZooModel(graph::ZooSpec("mlp", 64, {{"depth", 12}, {"width", 128}}));
  ASSERT_TRUE(def.ok()) << def.status();
  absl::StatusOr<graph::Graph> g = graph::Graph::FromProto(*def);
  ASSERT_TRUE(g.ok()) << g.status();
  const TrainingGraph t = Training(*g);
  const int32_t n = NumForwardNodes(t);
  // One re-run section of all but the last two nodes, then the same with an inner cut every
  // two nodes.
  SectionCuts flat{{n - 2}, {}};
  SectionCuts nested = flat;
  for (int32_t c = 2; c < n - 2; c += 2) nested.inner_cuts.push_back(c);
  const SectionedStep a = Expand(t, flat);
  const SectionedStep b = Expand(t, nested);
  absl::StatusOr<MemoryPlan> pa =
      PlanScheduledGraph(a.graph, a.schedule, kDefaultAlignmentBytes, DefaultStrategies());
  absl::StatusOr<MemoryPlan> pb =
      PlanScheduledGraph(b.graph, b.schedule, kDefaultAlignmentBytes, DefaultStrategies());
  ASSERT_TRUE(pa.ok() && pb.ok());
  EXPECT_LT(pb->arena_bytes, pa->arena_bytes);
  EXPECT_GT(b.recompute_flops, a.recompute_flops);
  EXPECT_GT(b.step_seconds, a.step_seconds);
  std::cout << "mlp depth 12: one re-run section " << pa->arena_bytes << " B, "
            << a.sections[0].recompute_nodes << " nodes re-run; with "
            << nested.inner_cuts.size() << " inner cuts " << pb->arena_bytes << " B, "
            << b.sections[0].recompute_nodes << " re-run\n";
}

TEST(SectionsTest, BadInnerCutsAreErrors) {
  const TrainingGraph t = Training(Chain());
  const UnitCostModel cost(0);
  SectionCuts cuts{{4}, {}};
  cuts.inner_cuts = {4};  // On a cut.
  EXPECT_THAT(ExpandSections(t, cuts, cost).status().message(),
              HasSubstr("inner cut at forward position 4"));
  cuts.inner_cuts = {5};  // In the last section, which is not re-run.
  EXPECT_THAT(ExpandSections(t, cuts, cost).status().message(),
              HasSubstr("not inside a re-run section"));
  cuts.inner_cuts = {3, 2};
  EXPECT_THAT(ExpandSections(t, cuts, cost).status().message(), HasSubstr("out of order"));
  cuts.cuts.clear();
  cuts.inner_cuts = {1};  // No re-run section at all.
  EXPECT_THAT(ExpandSections(t, cuts, cost).status().message(),
              HasSubstr("not inside a re-run section"));
}

TEST(SectionsTest, AKeptTensorSparesItsProducersReForward) {
  const TrainingGraph t = Training(Chain());
  // Cuts {2, 4} with fc2's output kept: section 1's backward reads the forward's copy, so
  // only r2 is re-run (from it), and fc2 is not.
  const TensorId fc2 = t.node(t.FindNode("fc2")).outputs[0];
  const SectionedStep step = Expand(t, {{2, 4}, {}, {fc2}});
  EXPECT_EQ(Order(step),
            "fc1 r1 fc2 r2 fc3 loss loss.seed loss.backward fc3.backward "
            "r2.recompute r2.backward fc2.backward "
            "fc1.recompute r1.recompute r1.backward fc1.backward");
  EXPECT_EQ(step.sections[1].recompute_nodes, 1);
  ASSERT_EQ(step.sections[1].kept.size(), 1u);
  EXPECT_EQ(step.sections[1].kept[0].tensor, fc2);
  EXPECT_EQ(step.sections[1].kept[0].bytes, 1024u);
  EXPECT_TRUE(step.sections[0].kept.empty());
  // The kept tensor stays an activation, live from fc2 to r2.recompute, its last reader.
  EXPECT_EQ(step.graph.tensor(fc2).role, proto::ROLE_ACTIVATION);
  EXPECT_EQ(step.graph.tensor(fc2).consumers.back(), step.graph.FindNode("r2.recompute"));
  // Keeping r2 as well spares the whole re-forward of section 1.
  const TensorId r2 = t.FindTensor("r2");
  const SectionedStep both = Expand(t, {{2, 4}, {}, {fc2, r2}});
  EXPECT_FALSE(both.sections[1].recomputed);
  EXPECT_EQ(both.sections[1].recompute_nodes, 0);
  EXPECT_EQ(both.recompute_flops, 20u);  // Section 0 alone: fc1 and r1.
  // Exact peaks: keeping holds more than recomputing, never less.
  const absl::StatusOr<MemoryPlan> none = PlanScheduledGraph(
      Expand(t, {{2, 4}, {}}).graph, Expand(t, {{2, 4}, {}}).schedule, 256, DefaultStrategies());
  const absl::StatusOr<MemoryPlan> kept =
      PlanScheduledGraph(both.graph, both.schedule, 256, DefaultStrategies());
  ASSERT_TRUE(none.ok() && kept.ok());
  EXPECT_LE(none->arena_bytes, kept->arena_bytes);
}

TEST(SectionsTest, KeepableTensorsAreWhatReRunSectionsRecompute) {
  const TrainingGraph t = Training(Chain());
  const UnitCostModel cost(0);
  absl::StatusOr<std::vector<TensorId>> keepable = KeepableTensors(t, {2, 4}, cost);
  ASSERT_TRUE(keepable.ok()) << keepable.status();
  std::vector<std::string> names;
  for (TensorId id : *keepable) names.push_back(t.tensor(id).name);
  // Section 0 re-runs fc1 and r1, section 1 fc2 and r2; the last is not re-run.
  EXPECT_EQ(names.size(), 4u);
  EXPECT_THAT(names, ::testing::Contains("r1"));
  EXPECT_THAT(names, ::testing::Contains("r2"));
  // A kept tensor read by a later section can go to host memory like a cached input; one
  // read only by its own section's backward is first read in the group visited after the
  // one before it, so it can too.
  const TensorId fc2 = t.node(t.FindNode("fc2")).outputs[0];
  absl::StatusOr<std::vector<TensorId>> offloadable = OffloadableTensors(t, {2, 4}, cost, {fc2});
  ASSERT_TRUE(offloadable.ok());
  EXPECT_THAT(*offloadable, ::testing::Contains(fc2));
  const SectionedStep step = Expand(t, {{2, 4}, {fc2}, {fc2}}, 0.5 / 1024);
  ASSERT_EQ(step.sections[1].kept.size(), 1u);
  EXPECT_TRUE(step.sections[1].kept[0].offloaded);
  EXPECT_NE(step.graph.FindNode(t.tensor(fc2).name + ".prefetch"), kNone);
}

TEST(SectionsTest, BadKeepsAreErrors) {
  const TrainingGraph t = Training(Chain());
  const UnitCostModel cost(0);
  // fc3 is in the last section, which is not re-run; x is written by no node.
  const TensorId fc3 = t.node(t.FindNode("fc3")).outputs[0];
  EXPECT_THAT(ExpandSections(t, {{2, 4}, {}, {fc3}}, cost).status().message(),
              HasSubstr("cannot be kept"));
  EXPECT_THAT(ExpandSections(t, {{2, 4}, {}, {t.FindTensor("x")}}, cost).status().message(),
              HasSubstr("cannot be kept"));
  EXPECT_THAT(ExpandSections(t, {{}, {}, {t.FindTensor("r1")}}, cost).status().message(),
              HasSubstr("cannot be kept"));
  const TensorId r1 = t.FindTensor("r1"), r2 = t.FindTensor("r2");
  EXPECT_THAT(ExpandSections(t, {{2, 4}, {}, {r2, r1}}, cost).status().message(),
              HasSubstr("increasing"));
  EXPECT_THAT(ExpandSections(t, {{2, 4}, {}, {99999}}, cost).status().message(),
              HasSubstr("unknown tensor"));
}

TEST(SectionsTest, OffloadCopiesOutAndPrefetchesWhileTheSectionBeforeRunsBackward) {
  const TrainingGraph t = Training(Chain());
  // r1 (1024 bytes) is copied out after r1 (step 1, done at 2 + 0.5 s): its device copy is
  // freed before r2; it is prefetched when the last section's backward group begins and read
  // by fc2's re-forward.
  const SectionedStep step = Expand(t, {{2, 4}, {t.FindTensor("r1")}}, 0.5 / 1024);
  EXPECT_EQ(Order(step),
            "fc1 r1 fc2 r1.offload r2 fc3 loss r1.prefetch loss.seed loss.backward fc3.backward "
            "fc2.recompute r2.recompute r2.backward fc2.backward "
            "fc1.recompute r1.recompute r1.backward fc1.backward");
  const CachedInput* r1 = FindCached(step, 1, "r1");
  ASSERT_NE(r1, nullptr);
  EXPECT_TRUE(r1->offloaded);
  EXPECT_EQ(r1->copy_out_after_position, step.graph.FindNode("r1"));
  EXPECT_EQ(r1->copy_out_await_position, step.graph.FindNode("r1.offload"));
  EXPECT_EQ(r1->prefetch_position, step.graph.FindNode("r1.prefetch"));
  EXPECT_EQ(r1->first_use_position, step.graph.FindNode("fc2.recompute"));
  EXPECT_EQ(step.offloaded_bytes, 1024u);
  EXPECT_EQ(step.stall_seconds, 0);
  // Both fc2.recompute and fc2.backward read the prefetched copy.
  const TensorId device = step.graph.FindTensor("r1.prefetched");
  ASSERT_NE(device, kNone);
  EXPECT_EQ(step.graph.tensor(device).role, proto::ROLE_CACHED_INPUT);
  EXPECT_EQ(step.graph.tensor(device).consumers.size(), 2u);
}

TEST(SectionsTest, SlowCopiesAreAwaitedLaterOrDropped) {
  const TrainingGraph t = Training(Chain());
  // A 2.5 s copy out of r1, issued at 2 s, is done at 4.5 s: awaited before loss (5 s), not
  // before r2 (3 s) or fc3 (4 s).
  const SectionedStep slow = Expand(t, {{2, 4}, {t.FindTensor("r1")}}, 2.5 / 1024);
  EXPECT_THAT(Order(slow), HasSubstr("fc3 r1.offload loss r1.prefetch"));
  EXPECT_EQ(slow.stall_seconds, 0);  // Prefetched 6 s to 8.5 s, first read at 9 s.
  // With instant backward nodes the same prefetch is first read at 6 s: a 2.5 s wait.
  const SectionedStep waits = Expand(t, {{2, 4}, {t.FindTensor("r1")}}, 2.5 / 1024, 0);
  EXPECT_DOUBLE_EQ(waits.stall_seconds, 2.5);
  EXPECT_DOUBLE_EQ(waits.step_seconds, 6 + 2.5 + 4);  // Forward, wait, four re-forwards.
  // A copy out that cannot finish before the prefetch is issued is dropped.
  const SectionedStep hopeless = Expand(t, {{2, 4}, {t.FindTensor("r1")}}, 100.0 / 1024);
  EXPECT_EQ(hopeless.offloaded_bytes, 0u);
  EXPECT_THAT(hopeless.offload_dropped, ElementsAre(t.FindTensor("r1")));
  EXPECT_EQ(hopeless.graph.FindNode("r1.prefetch"), kNone);
}

TEST(SectionsTest, BadCutsAndOffloadsAreErrors) {
  const TrainingGraph t = Training(Chain());
  const UnitCostModel cost(0);
  EXPECT_THAT(ExpandSections(t, {{0}, {}}, cost).status().message(), HasSubstr("position 0"));
  EXPECT_THAT(ExpandSections(t, {{3, 2}, {}}, cost).status().message(), HasSubstr("out of order"));
  EXPECT_THAT(ExpandSections(t, {{6}, {}}, cost).status().message(), HasSubstr("(0, 6)"));
  // r2 is first read backward by the last section, which nothing runs before.
  EXPECT_THAT(ExpandSections(t, {{2, 4}, {t.FindTensor("r2")}}, cost).status().message(),
              HasSubstr("'r2' cannot be offloaded"));
  EXPECT_THAT(ExpandSections(t, {{2}, {t.FindTensor("fc1.weight")}}, cost).status().message(),
              HasSubstr("'fc1.weight' cannot be offloaded"));
}

TEST(SectionsTest, NoCutsIsThePlainStepWithTheSamePlan) {
  for (const std::string name : {"resnet18", "transformer", "mobilenet_v2"}) {
    const graph::Graph g = SmallZoo(name);
    const TrainingGraph t = Training(g);
    const SectionedStep step = Expand(t, {});
    ASSERT_EQ(step.graph.nodes().size(), t.nodes().size()) << name;
    absl::StatusOr<MemoryPlan> plain = PlanMemory(g, {});
    absl::StatusOr<MemoryPlan> expanded =
        PlanScheduledGraph(step.graph, step.schedule, kDefaultAlignmentBytes, DefaultStrategies());
    ASSERT_TRUE(plain.ok() && expanded.ok()) << name;
    EXPECT_EQ(expanded->arena_bytes, plain->arena_bytes) << name;
  }
}

TEST(SectionsTest, EveryZooModelExpandsToAValidVerifiedPlan) {
  for (const graph::ZooModelInfo& info : graph::ZooModels()) {
    const std::string& name = info.name;
    const graph::Graph g = SmallZoo(name);
    const TrainingGraph t = Training(g);
    const int32_t n = NumForwardNodes(t);
    SectionCuts cuts;
    for (int32_t c = n / 5; c < n; c += n / 5) cuts.cuts.push_back(c);
    const SectionedStep step = Expand(t, cuts);
    EXPECT_TRUE(ValidateSchedule(step.graph, step.schedule).ok()) << name;
    // Batch-norm running statistics are updated once per step, by the first forward.
    for (const TrainingTensor& tensor : step.graph.tensors()) {
      if (tensor.role != proto::ROLE_BUFFER) continue;
      EXPECT_EQ(tensor.consumers.size(), 1u) << name << " " << tensor.name;
    }
    absl::StatusOr<MemoryPlan> plan =
        PlanScheduledGraph(step.graph, step.schedule, kDefaultAlignmentBytes, DefaultStrategies());
    EXPECT_TRUE(plan.ok()) << name << ": " << plan.status();
  }
}

// Declares `bytes` of scratch for every forward and backward node of a MatMul.
class MatMulScratch : public ScratchModel {
 public:
  explicit MatMulScratch(uint64_t bytes) : bytes_(bytes) {}
  absl::StatusOr<uint64_t> NodeScratchBytes(const graph::Graph& forward, const TrainingGraph& graph,
                                            NodeId id) const override {
    const TrainingNode& node = graph.node(id);
    if (node.forward_node == kNone) return 0;
    return forward.node(node.forward_node).op->name == "MatMul" ? bytes_ : 0;
  }

 private:
  uint64_t bytes_;
};

TEST(SectionsTest, AReForwardGetsScratchOfItsOwnAliveOnlyWhileItRuns) {
  const graph::Graph g = Chain();
  const MatMulScratch scratch(4096);
  TrainingOptions options;
  options.scratch = &scratch;
  absl::StatusOr<TrainingGraph> t = TrainingGraph::Build(g, options);
  ASSERT_TRUE(t.ok()) << t.status();
  const SectionedStep step = Expand(*t, {{2, 4}, {}});
  const TrainingGraph& e = step.graph;
  const TrainingNode& fc2 = e.node(e.FindNode("fc2"));
  const TrainingNode& again = e.node(e.FindNode("fc2.recompute"));
  ASSERT_NE(fc2.scratch, kNone);
  ASSERT_NE(again.scratch, kNone);
  EXPECT_NE(again.scratch, fc2.scratch);
  EXPECT_EQ(e.tensor(again.scratch).name, "fc2.scratch.recompute");
  EXPECT_EQ(e.tensor(again.scratch).producer, e.FindNode("fc2.recompute"));
  EXPECT_EQ(e.tensor(fc2.scratch).producer, e.FindNode("fc2"));

  // Every scratch tensor lives at its node alone, and the plan holds it there: the arena
  // grows by exactly one scratch over the plain chain's (no two MatMul nodes run at once).
  absl::StatusOr<MemoryPlan> plan =
      PlanScheduledGraph(e, step.schedule, kDefaultAlignmentBytes, DefaultStrategies());
  ASSERT_TRUE(plan.ok()) << plan.status();
  int scratch_tensors = 0;
  for (TensorId id = 0; id < static_cast<TensorId>(e.tensors().size()); ++id) {
    if (e.tensor(id).role != proto::ROLE_TEMPORARY) continue;
    ++scratch_tensors;
    const NodeId producer = e.tensor(id).producer;
    EXPECT_EQ(plan->tensors[id].lifetime.first_position, step.schedule.position_of[producer]);
    EXPECT_EQ(plan->tensors[id].lifetime.last_position, step.schedule.position_of[producer]);
  }
  // fc1..fc3 forward and backward, and the re-forwards of fc1 and fc2.
  EXPECT_EQ(scratch_tensors, 8);
  const SectionedStep plain_step = Expand(Training(g), {{2, 4}, {}});
  absl::StatusOr<MemoryPlan> plain = PlanScheduledGraph(
      plain_step.graph, plain_step.schedule, kDefaultAlignmentBytes, DefaultStrategies());
  ASSERT_TRUE(plain.ok());
  EXPECT_LE(plan->lower_bound_bytes, plain->lower_bound_bytes + 4096);
  EXPECT_GT(plan->lower_bound_bytes, plain->lower_bound_bytes);
}

}  // namespace
}  // namespace headroom::planner
