// The expanded step of reversible blocks: a 2-block chain written out node by node, what is
// kept and what is rebuilt, and the planned peak against keeping everything.
#include "planner/reversible.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "graph/graph.h"
#include "graph/reversible_testing.h"
#include "gtest/gtest.h"
#include "planner/memory_planner.h"
#include "planner/offset_assigner.h"
#include "planner/sections.h"

namespace headroom::planner {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Every node one second; forward and re-run nodes 10 flops.
class UnitCostModel : public CostModel {
 public:
  std::string name() const override { return "unit"; }
  double NodeSeconds(const TrainingGraph&, NodeId) const override { return 1; }
  uint64_t NodeFlops(const TrainingGraph& graph, NodeId id) const override {
    const NodeKind kind = graph.node(id).kind;
    return kind == NodeKind::kForward || kind == NodeKind::kRecompute ? 10 : 0;
  }
  double CopySeconds(uint64_t) const override { return 0; }
};

TrainingGraph Training(const graph::Graph& g) {
  absl::StatusOr<TrainingGraph> t = TrainingGraph::Build(g, {});
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(t).value();
}

// Returns the names of the nodes from position `from` on.
std::vector<std::string> NodeNames(const TrainingGraph& g, NodeId from) {
  std::vector<std::string> names;
  for (NodeId n = from; n < static_cast<NodeId>(g.nodes().size()); ++n) {
    names.push_back(g.node(n).name);
  }
  return names;
}

// Returns whether any node at or after `from` reads tensor `name` (the forward's copy).
bool ReadAfter(const TrainingGraph& g, const std::string& name, NodeId from) {
  const TensorId t = g.FindTensor(name);
  EXPECT_NE(t, kNone) << name;
  for (NodeId c : g.tensor(t).consumers) {
    if (c >= from) return true;
  }
  return false;
}

TEST(ReversibleTest, TwoBlockChainWrittenOut) {
  graph::RevChainOptions o;
  o.blocks = 2;
  o.batch_norm = false;
  const graph::Graph forward = graph::RevChainGraph(o);
  const TrainingGraph g = Training(forward);
  UnitCostModel cost;
  absl::StatusOr<ReversibleStep> r = ExpandReversible(forward, g, cost);
  ASSERT_TRUE(r.ok()) << r.status();
  const TrainingGraph& out = r->step.graph;
  const NodeId nf = NumForwardNodes(g);
  // Forward: split b0.f.conv b0.f.relu b0.y1 b0.g.conv b0.g.relu b0.y2 (b1 likewise) concat
  // pool flat fc loss: 18 nodes, unchanged.
  ASSERT_EQ(nf, 18);
  for (NodeId n = 0; n < nf; ++n) EXPECT_EQ(out.node(n).name, g.node(n).name);
  // Backward: the head, then each block (last first) rebuilt, then differentiated from what
  // was rebuilt; accumulations and updates as in the plain step.
  const std::vector<std::string> backward = NodeNames(out, nf);
  const std::string written = absl::StrJoin(backward, "\n");
  EXPECT_THAT(
      backward,
      ElementsAre("loss.seed", "loss.backward", "fc.backward", "fc.weight.update", "fc.bias.update",
                  "flat.backward", "pool.backward", "concat.backward",
                  // Block b1: G from the kept y1, x2 = y2 - G, F from x2, x1 = y1 - F.
                  "b1.g.conv.rebuild", "b1.g.relu.rebuild", "b1.x2.rebuild", "b1.f.conv.rebuild",
                  "b1.f.relu.rebuild", "b1.x1.rebuild", "b1.y2.backward", "b1.g.relu.backward",
                  "b1.g.conv.backward", "b1.y1.grad.accumulate1", "b1.g.conv.weight.update",
                  "b1.y1.backward", "b1.f.relu.backward", "b1.f.conv.backward",
                  "b0.y2.grad.accumulate1", "b1.f.conv.weight.update",
                  // Block b0 from b1's rebuilt inputs; x needs no gradient, so nothing follows.
                  "b0.g.conv.rebuild", "b0.g.relu.rebuild", "b0.x2.rebuild", "b0.f.conv.rebuild",
                  "b0.f.relu.rebuild", "b0.x1.rebuild", "b0.y2.backward", "b0.g.relu.backward",
                  "b0.g.conv.backward", "b0.y1.grad.accumulate1", "b0.g.conv.weight.update",
                  "b0.y1.backward", "b0.f.relu.backward", "b0.f.conv.backward",
                  "b0.f.conv.weight.update"))
      << written;
  // Kept: only the chain's output (b1.y1, b1.y2) is read in the backward phase as the
  // forward wrote it. Everything inside and before the chain dies in the forward.
  EXPECT_TRUE(ReadAfter(out, "b1.y1", nf));
  EXPECT_TRUE(ReadAfter(out, "b1.y2", nf));
  for (const char* dead : {"x1", "x2", "b0.f.conv", "b0.f.relu", "b0.y1", "b0.g.conv", "b0.g.relu",
                           "b0.y2", "b1.f.conv", "b1.f.relu", "b1.g.conv", "b1.g.relu"}) {
    EXPECT_FALSE(ReadAfter(out, dead, nf)) << dead << " is kept\n" << written;
  }
  // The plain step keeps them: its backward reads the convolutions' inputs and the ReLUs'
  // outputs as the forward wrote them.
  for (const char* kept : {"x2", "b0.y1", "b0.f.relu", "b1.g.relu"}) {
    EXPECT_TRUE(ReadAfter(g, kept, nf)) << kept;
  }
  // Rebuilt: b0's inputs are read by b0's rebuild from b1's rebuilt inputs.
  const NodeId x2_rebuild = out.FindNode("b0.x2.rebuild");
  ASSERT_NE(x2_rebuild, kNone);
  EXPECT_EQ(out.node(x2_rebuild).kind, NodeKind::kRebuild);
  EXPECT_EQ(out.tensor(out.node(x2_rebuild).inputs[0]).name, "b0.y2.rebuild");
  EXPECT_EQ(out.tensor(out.node(x2_rebuild).inputs[1]).name, "b0.g.relu.rebuild");
  EXPECT_EQ(out.tensor(out.node(x2_rebuild).outputs[0]).name, "x2.rebuild");
  // b1.f.conv's backward reads the rebuilt x2 of b1 (b0.y2), not the forward's.
  const TrainingNode& conv_back = out.node(out.FindNode("b1.f.conv.backward"));
  std::vector<std::string> reads;
  for (TensorId t : conv_back.inputs) reads.push_back(out.tensor(t).name);
  EXPECT_THAT(reads, ::testing::Contains("b0.y2.rebuild")) << absl::StrJoin(reads, " ");
  EXPECT_EQ(r->rebuilt_blocks, (std::vector<int32_t>{1, 0}));
  // One extra evaluation of F and G per block: 4 convolution re-runs in all.
  int reruns = 0;
  for (const TrainingNode& n : out.nodes()) reruns += n.kind == NodeKind::kRecompute;
  EXPECT_EQ(reruns, 8);
}

TEST(ReversibleTest, OtherConsumerKeepsTheInput) {
  // A node outside the block reads b0's input x1 and its backward needs it (Mul reads its
  // other input): the forward's copy of x2 must live until that backward runs.
  graph::RevChainOptions o;
  o.blocks = 1;
  o.batch_norm = false;
  proto::GraphDef def = graph::RevChain(o);
  // concat reads (b0.y1, b0.y2); make it read (b0.y1 * x2, b0.y2).
  proto::NodeDef* mul = def.add_nodes();
  mul->set_name("skip");
  mul->set_op("Mul");
  mul->add_inputs("b0.y1");
  mul->add_inputs("x2");
  mul->add_outputs("skip");
  for (proto::NodeDef& n : *def.mutable_nodes()) {
    if (n.name() == "concat") n.set_inputs(0, "skip");
  }
  absl::StatusOr<graph::Graph> forward = graph::Graph::FromProto(def);
  ASSERT_TRUE(forward.ok()) << forward.status();
  const TrainingGraph g = Training(*forward);
  UnitCostModel cost;
  absl::StatusOr<ReversibleStep> r = ExpandReversible(*forward, g, cost);
  ASSERT_TRUE(r.ok()) << r.status();
  const TrainingGraph& out = r->step.graph;
  // skip's backward runs before b0's rebuild and reads the forward's x2 (kept for it).
  const NodeId skip_back = out.FindNode("skip.backward");
  const NodeId rebuild = out.FindNode("b0.g.conv.rebuild");
  ASSERT_LT(skip_back, rebuild);
  EXPECT_TRUE(ReadAfter(out, "x2", skip_back));
  EXPECT_FALSE(ReadAfter(out, "x2", skip_back + 1));
  // The plan verifies (no two live tensors overlap) with the forward's x2 alive that long.
  absl::StatusOr<MemoryPlan> plan =
      PlanScheduledGraph(out, r->step.schedule, 64, DefaultStrategies());
  ASSERT_TRUE(plan.ok()) << plan.status();
}

// A rebuilt batch norm normalises with the statistics its forward saved: the re-run reads
// the forward's saved mean and deviation statistic (kept from the forward to the block's
// backward, which reads the same tensors), writes only its output and updates nothing.
TEST(ReversibleTest, RebuiltBatchNormReadsTheForwardsStatistics) {
  graph::RevChainOptions o;
  o.blocks = 2;
  const graph::Graph forward = graph::RevChainGraph(o);
  const TrainingGraph g = Training(forward);
  UnitCostModel cost;
  absl::StatusOr<ReversibleStep> r = ExpandReversible(forward, g, cost);
  ASSERT_TRUE(r.ok()) << r.status();
  const TrainingGraph& out = r->step.graph;
  int rebuilt_norms = 0;
  for (const char* bn : {"b0.f.bn", "b0.g.bn", "b1.f.bn", "b1.g.bn"}) {
    SCOPED_TRACE(bn);
    const TrainingNode& fwd = out.node(out.FindNode(bn));
    ASSERT_EQ(fwd.outputs.size(), 3u);  // y, saved_mean, saved_invstd.
    ASSERT_FALSE(fwd.updates.empty());  // The running statistics, in the forward only.
    const NodeId re = out.FindNode(absl::StrCat(bn, ".rebuild"));
    ASSERT_NE(re, kNone);
    const TrainingNode& node = out.node(re);
    ++rebuilt_norms;
    EXPECT_EQ(node.outputs.size(), 1u) << "computes and saves no statistics";
    EXPECT_TRUE(node.updates.empty());
    ASSERT_EQ(node.saved_inputs_from, 3);
    EXPECT_THAT(node.inputs, ::testing::ElementsAre(::testing::_, fwd.inputs[1], fwd.inputs[2],
                                                    fwd.outputs[1], fwd.outputs[2]));
    const NodeId back = out.FindNode(absl::StrCat(bn, ".backward"));
    ASSERT_GT(back, re);
    for (int k = 1; k <= 2; ++k) {
      EXPECT_THAT(out.node(back).inputs, ::testing::Contains(fwd.outputs[k]));
      EXPECT_EQ(out.tensor(fwd.outputs[k]).consumers.back(), back)
          << out.tensor(fwd.outputs[k]).name << " lives from the forward to the backward";
    }
    EXPECT_EQ(out.FindTensor(absl::StrCat(bn, ".saved_mean.rebuild")), kNone);
  }
  EXPECT_EQ(rebuilt_norms, 4);
  absl::StatusOr<MemoryPlan> plan =
      PlanScheduledGraph(out, r->step.schedule, 64, DefaultStrategies());
  ASSERT_TRUE(plan.ok()) << plan.status();
}

TEST(ReversibleTest, RebuildPeakFlatInDepth) {
  // Keep-everything grows with depth; rebuilding keeps one block's worth plus the output.
  auto peaks = [](int blocks) {
    graph::RevChainOptions o;
    o.blocks = blocks;
    o.batch = 4;
    o.half_channels = 8;
    o.size = 16;
    const graph::Graph forward = graph::RevChainGraph(o);
    const TrainingGraph g = Training(forward);
    UnitCostModel cost;
    absl::StatusOr<SectionedStep> keep = ExpandSections(g, {}, cost);
    absl::StatusOr<ReversibleStep> rebuild = ExpandReversible(forward, g, cost);
    EXPECT_TRUE(keep.ok() && rebuild.ok());
    const uint64_t keep_bytes = ScheduledLowerBound(keep->graph, keep->schedule, 64);
    const uint64_t rebuild_bytes =
        ScheduledLowerBound(rebuild->step.graph, rebuild->step.schedule, 64);
    return std::make_pair(keep_bytes, rebuild_bytes);
  };
  const auto [keep4, rebuild4] = peaks(4);
  const auto [keep16, rebuild16] = peaks(16);
  // One activation [4, 8, 16, 16] float is 32 KiB; 12 blocks add 12 * 3 KiB of parameters
  // (a 3x3 conv 8->8 is 2.3 KiB, with its gradient and momentum about 7 KiB per conv).
  EXPECT_LT(rebuild4, keep4);
  EXPECT_GT(keep16 - keep4, 12u * 4 * 32768) << keep4 << " " << keep16;
  EXPECT_LT(rebuild16 - rebuild4, 12u * 2 * 7 * 1024) << rebuild4 << " " << rebuild16;
}

TEST(ReversibleTest, BadBlockIndex) {
  graph::RevChainOptions o;
  const graph::Graph forward = graph::RevChainGraph(o);
  const TrainingGraph g = Training(forward);
  UnitCostModel cost;
  ReversibleOptions options;
  options.blocks = {2};
  absl::StatusOr<ReversibleStep> r = ExpandReversible(forward, g, cost, options);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("reversible block index 2 is out of range"));
}

}  // namespace
}  // namespace headroom::planner
