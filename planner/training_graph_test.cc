// Autodiff on small graphs: which forward tensors each backward node keeps, gradient
// accumulation, optimizer updates and their placement, inference mode; and the zoo.
#include "planner/training_graph.h"

#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "graph/graph.h"
#include "graph/graph_builder.h"
#include "graph/zoo.h"
#include "graph/zoo_testing.h"
#include "gtest/gtest.h"
#include "planner/scratch_model.h"

namespace headroom::planner {
namespace {

using graph::GraphBuilder;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

TrainingGraph Train(const proto::GraphDef& def, TrainingOptions options = {}) {
  absl::StatusOr<graph::Graph> g = graph::Graph::FromProto(def);
  EXPECT_TRUE(g.ok()) << g.status();
  absl::StatusOr<TrainingGraph> t = TrainingGraph::Build(*g, options);
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(t).value();
}

// Returns the names of the non-gradient tensors the backward of forward node `name` reads:
// what the training step must keep alive for it.
std::vector<std::string> Kept(const TrainingGraph& t, const std::string& name) {
  const NodeId id = t.FindNode(name + ".backward");
  EXPECT_NE(id, kNone) << "no backward node for " << name;
  std::vector<std::string> kept;
  if (id == kNone) return kept;
  for (TensorId in : t.node(id).inputs) {
    if (t.tensor(in).role != proto::ROLE_GRADIENT) kept.push_back(t.tensor(in).name);
  }
  return kept;
}

std::vector<std::string> OutputNames(const TrainingGraph& t, const std::string& node) {
  std::vector<std::string> names;
  for (TensorId out : t.node(t.FindNode(node)).outputs) names.push_back(t.tensor(out).name);
  return names;
}

// A CNN: images -> conv1 -> bn1 -> relu -> pool -> flatten -> fc -> loss.
proto::GraphDef SmallCnn() {
  GraphBuilder b("cnn");
  b.Input("images", {2, 3, 8, 8});
  b.Conv2D("conv1", "images", 3, 4, 3, 1, 1);
  b.BatchNorm("bn1", "conv1", 4);
  b.Unary("ReLU", "relu", "bn1");
  b.Op("MaxPool", "pool", {"relu"}, {{"kernel_size", graph::IntsAttr({2, 2})}});
  b.Op("Flatten", "flatten", {"pool"});
  b.Linear("fc", "flatten", 64, 5);
  b.Op("SoftmaxCrossEntropy", "loss", {"fc", b.Label("labels", {2})});
  b.SetLoss("loss");
  return b.Build();
}

TEST(KeptTensorsTest, ConvNet) {
  const TrainingGraph t = Train(SmallCnn());
  // The loss recomputes softmax from the logits.
  EXPECT_THAT(Kept(t, "loss"), UnorderedElementsAre("fc", "labels"));
  // dx needs the weight, dW the input.
  EXPECT_THAT(Kept(t, "fc"), UnorderedElementsAre("flatten", "fc.weight"));
  // Flatten is a reshape of dy: nothing kept.
  EXPECT_THAT(Kept(t, "flatten"), IsEmpty());
  // Max pool routes dy to where the max was: input and output.
  EXPECT_THAT(Kept(t, "pool"), UnorderedElementsAre("relu", "pool"));
  // ReLU's backward needs its output, not its input.
  EXPECT_THAT(Kept(t, "relu"), ElementsAre("relu"));
  // Batch norm: input, saved mean and inverse deviation, scale; never the running stats.
  EXPECT_THAT(Kept(t, "bn1"), UnorderedElementsAre("conv1", "bn1.saved_mean",
                                                   "bn1.saved_invstd", "bn1.weight"));
  // The first conv's input needs no gradient, so dx (and with it the weight) is not needed.
  EXPECT_THAT(Kept(t, "conv1"), ElementsAre("images"));
}

TEST(KeptTensorsTest, ConvWithAGradientInputKeepsInputAndWeight) {
  GraphBuilder b("two_convs");
  b.Input("images", {1, 3, 8, 8});
  b.Conv2D("conv1", "images", 3, 4, 3, 1, 1);
  b.Conv2D("conv2", "conv1", 4, 4, 3, 1, 1, /*groups=*/1, /*bias=*/true);
  b.Op("Flatten", "flat", {"conv2"});
  b.Op("SoftmaxCrossEntropy", "loss", {"flat", b.Label("labels", {1})});
  b.SetLoss("loss");
  const TrainingGraph t = Train(b.Build());
  EXPECT_THAT(Kept(t, "conv2"), UnorderedElementsAre("conv1", "conv2.weight"));
  EXPECT_THAT(OutputNames(t, "conv2.backward"),
              ElementsAre("conv1.grad", "conv2.weight.grad", "conv2.bias.grad"));
  EXPECT_THAT(OutputNames(t, "conv1.backward"), ElementsAre("conv1.weight.grad"));
}

TEST(KeptTensorsTest, ElementwiseOps) {
  GraphBuilder b("elementwise");
  b.Input("x", {4, 6});
  b.Linear("fc", "x", 6, 6);
  b.Unary("Sigmoid", "sig", "fc");
  b.Unary("Tanh", "tanh", "sig");
  b.Unary("GELU", "gelu", "tanh");
  b.Op("Dropout", "drop", {"gelu"}, {{"rate", graph::FloatAttr(0.1)}});
  b.Unary("ReLU6", "relu6", "drop");
  b.Op("Mul", "mul", {"relu6", "fc"});
  b.Add("add", "mul", "sig");
  b.Op("Softmax", "soft", {"add"});
  b.Op("SoftmaxCrossEntropy", "loss", {"soft", b.Label("labels", {4})});
  b.SetLoss("loss");
  const TrainingGraph t = Train(b.Build());
  EXPECT_THAT(Kept(t, "sig"), ElementsAre("sig"));
  EXPECT_THAT(Kept(t, "tanh"), ElementsAre("tanh"));
  EXPECT_THAT(Kept(t, "gelu"), ElementsAre("tanh"));  // GELU needs its input.
  EXPECT_THAT(Kept(t, "drop"), ElementsAre("drop.mask"));
  EXPECT_THAT(Kept(t, "relu6"), ElementsAre("relu6"));
  EXPECT_THAT(Kept(t, "mul"), UnorderedElementsAre("relu6", "fc"));
  EXPECT_THAT(Kept(t, "add"), IsEmpty());
  EXPECT_THAT(Kept(t, "soft"), ElementsAre("soft"));
  // The mask is one byte per element.
  EXPECT_EQ(t.tensor(t.FindTensor("drop.mask")).bytes, 4u * 6u);
}

TEST(KeptTensorsTest, HardActivationsSliceAndExpand) {
  // mobilenet_v3's activations, vit's x[:, 1:] and class token expand, joined by Concat.
  GraphBuilder b("vision");
  b.Input("x", {2, 3, 8});
  b.Linear("fc", "x", 8, 8);
  b.Unary("HardSigmoid", "hsig", "fc");
  b.Unary("HardSwish", "hswish", "hsig");
  b.Op("Slice", "slice", {"hswish"},
       {{"axes", graph::IntsAttr({1})}, {"starts", graph::IntsAttr({1})},
        {"ends", graph::IntsAttr({3})}});  // [2, 2, 8]
  b.Parameter("token", {1, 1, 8});
  b.Op("Expand", "expand", {"token"}, {{"shape", graph::IntsAttr({2, 1, 8})}});
  b.Op("Concat", "cat", {"expand", "slice"}, {{"axis", graph::IntAttr(1)}});  // [2, 3, 8]
  b.Op("Flatten", "flat", {"cat"});
  b.Op("SoftmaxCrossEntropy", "loss", {"flat", b.Label("labels", {2})});
  b.SetLoss("loss");
  const TrainingGraph t = Train(b.Build());
  EXPECT_THAT(Kept(t, "hsig"), ElementsAre("hsig"));  // alpha where 0 < y < 1.
  EXPECT_THAT(Kept(t, "hswish"), ElementsAre("hsig"));  // HardSwish needs its input.
  EXPECT_THAT(Kept(t, "slice"), IsEmpty());
  EXPECT_THAT(Kept(t, "expand"), IsEmpty());
  EXPECT_THAT(OutputNames(t, "expand.backward"), ElementsAre("token.grad"));
  EXPECT_EQ(t.tensor(t.FindTensor("token.grad")).shape, graph::Shape({1, 1, 8}));
  EXPECT_EQ(t.tensor(t.FindTensor("hswish.grad")).shape, graph::Shape({2, 3, 8}));
}

TEST(KeptTensorsTest, TransformerPieces) {
  GraphBuilder b("attn");
  b.Input("tokens", {2, 4}, proto::DTYPE_INT64);
  b.Parameter("wte", {10, 8});
  b.Op("Embedding", "embed", {"tokens", "wte"});
  b.LayerNorm("ln", "embed", 8);
  b.AddNode("Split", "split", {"ln"}, {"q", "k"}, {{"axis", graph::IntAttr(2)},
                                                   {"sizes", graph::IntsAttr({4, 4})}});
  b.Op("Transpose", "kt", {"k"}, {{"perm", graph::IntsAttr({0, 2, 1})}});
  b.Op("MatMul", "scores", {"q", "kt"});
  b.Op("Softmax", "probs", {"scores"}, {{"causal", graph::BoolAttr(true)}});
  b.Op("Reshape", "flat", {"probs"}, {{"shape", graph::IntsAttr({8, 4})}});
  b.Op("SoftmaxCrossEntropy", "loss", {"flat", b.Label("labels", {8})});
  b.SetLoss("loss");
  const TrainingGraph t = Train(b.Build());
  EXPECT_THAT(Kept(t, "embed"), ElementsAre("tokens"));
  EXPECT_THAT(Kept(t, "ln"), UnorderedElementsAre("embed", "ln.saved_mean", "ln.saved_rstd",
                                                  "ln.weight"));
  EXPECT_THAT(Kept(t, "split"), IsEmpty());
  EXPECT_THAT(Kept(t, "kt"), IsEmpty());
  EXPECT_THAT(Kept(t, "scores"), UnorderedElementsAre("q", "kt"));
  EXPECT_THAT(Kept(t, "probs"), ElementsAre("probs"));
  EXPECT_EQ(t.tensor(t.FindTensor("ln.saved_mean")).shape, graph::Shape({2, 4}));
}

TEST(AccumulationTest, ATensorWithTwoConsumersSumsItsGradients) {
  // h feeds both a and b; its gradient is the sum of two contributions.
  GraphBuilder b("fork");
  b.Input("x", {2, 4});
  b.Linear("h", "x", 4, 4);
  b.Unary("Tanh", "a", "h");
  b.Unary("Sigmoid", "s", "h");
  b.Add("sum", "a", "s");
  b.Op("SoftmaxCrossEntropy", "loss", {"sum", b.Label("labels", {2})});
  b.SetLoss("loss");
  const TrainingGraph t = Train(b.Build());
  const NodeId acc = t.FindNode("h.grad.accumulate1");
  ASSERT_NE(acc, kNone);
  EXPECT_EQ(t.node(acc).kind, NodeKind::kAccumulate);
  std::vector<std::string> inputs;
  for (TensorId in : t.node(acc).inputs) inputs.push_back(t.tensor(in).name);
  // s's backward runs first (reverse forward order), then a's.
  EXPECT_THAT(inputs, ElementsAre("h.grad", "h.grad.part1"));
  EXPECT_EQ(t.tensor(t.FinalGradient("h")).name, "h.grad.sum1");
  // h's backward reads the accumulated gradient.
  const TrainingNode& h_backward = t.node(t.FindNode("h.backward"));
  EXPECT_EQ(t.tensor(h_backward.inputs[0]).name, "h.grad.sum1");
}

TEST(AccumulationTest, TiedWeightsGetOneUpdateAfterBothContributions) {
  // wte is read by the embedding and, transposed, by the output projection.
  GraphBuilder b("tied");
  b.Input("tokens", {2, 3}, proto::DTYPE_INT64);
  b.Parameter("wte", {10, 4});
  b.Op("Embedding", "embed", {"tokens", "wte"});
  b.Op("MatMul", "logits", {"embed", "wte"}, {{"transpose_b", graph::BoolAttr(true)}});
  b.Op("SoftmaxCrossEntropy", "loss", {"logits", b.Label("labels", {2, 3})});
  b.SetLoss("loss");
  const TrainingGraph t = Train(b.Build());
  const NodeId update = t.FindNode("wte.update");
  ASSERT_NE(update, kNone);
  EXPECT_EQ(t.tensor(t.node(update).inputs[0]).name, "wte.grad.sum1");
  // After both readers of wte: the MatMul's backward (which reads it) and the embedding's.
  EXPECT_GT(update, t.FindNode("logits.backward"));
  EXPECT_GT(update, t.FindNode("embed.backward"));
}

TEST(UpdateTest, SgdMomentumUpdatesRunAsSoonAsTheGradientIsComplete) {
  const TrainingGraph t = Train(SmallCnn());
  int updates = 0, params = 0;
  for (const TrainingNode& n : t.nodes()) updates += n.kind == NodeKind::kUpdate;
  for (const TrainingTensor& x : t.tensors()) params += x.role == proto::ROLE_PARAMETER;
  EXPECT_EQ(updates, params);
  // fc's weight is updated right after fc's backward, before the earlier layers' backward,
  // so its gradient dies early.
  const NodeId fc_backward = t.FindNode("fc.backward");
  EXPECT_GT(t.FindNode("fc.weight.update"), fc_backward);
  EXPECT_LT(t.FindNode("fc.weight.update"), t.FindNode("flatten.backward"));
  const TrainingNode& update = t.node(t.FindNode("conv1.weight.update"));
  EXPECT_EQ(update.op, "SgdMomentumUpdate");
  std::vector<std::string> updated;
  for (TensorId u : update.updates) updated.push_back(t.tensor(u).name);
  EXPECT_THAT(updated, ElementsAre("conv1.weight", "conv1.weight.momentum"));
  EXPECT_EQ(t.tensor(t.FindTensor("conv1.weight.momentum")).role, proto::ROLE_OPTIMIZER_STATE);
}

TEST(UpdateTest, AdamKeepsTwoMomentsPerParameter) {
  TrainingOptions options;
  options.optimizer = proto::Optimizer::KIND_ADAM;
  const TrainingGraph t = Train(SmallCnn(), options);
  const TrainingNode& update = t.node(t.FindNode("fc.bias.update"));
  EXPECT_EQ(update.op, "AdamUpdate");
  std::vector<std::string> updated;
  for (TensorId u : update.updates) updated.push_back(t.tensor(u).name);
  EXPECT_THAT(updated, ElementsAre("fc.bias", "fc.bias.adam_m", "fc.bias.adam_v"));
}

TEST(UpdateTest, BatchNormUpdatesItsRunningStatisticsInTheForward) {
  const TrainingGraph t = Train(SmallCnn());
  const TrainingNode& bn = t.node(t.FindNode("bn1"));
  std::vector<std::string> updated, outputs;
  for (TensorId u : bn.updates) updated.push_back(t.tensor(u).name);
  EXPECT_THAT(updated, ElementsAre("bn1.running_mean", "bn1.running_var"));
  EXPECT_THAT(OutputNames(t, "bn1"), ElementsAre("bn1", "bn1.saved_mean", "bn1.saved_invstd"));
}

TEST(InferenceTest, ForwardOnlyWithNothingSaved) {
  TrainingOptions options;
  options.inference = true;
  const TrainingGraph t = Train(SmallCnn(), options);
  for (const TrainingNode& n : t.nodes()) EXPECT_EQ(n.kind, NodeKind::kForward) << n.name;
  for (const TrainingTensor& x : t.tensors()) {
    EXPECT_NE(x.role, proto::ROLE_GRADIENT) << x.name;
    EXPECT_NE(x.role, proto::ROLE_OPTIMIZER_STATE) << x.name;
  }
  EXPECT_EQ(t.FindTensor("bn1.saved_mean"), kNone);
  EXPECT_THAT(OutputNames(t, "bn1"), ElementsAre("bn1"));
}

// Every node's inputs are written by earlier nodes or exist before the step.
void ExpectWellFormed(const TrainingGraph& t) {
  std::set<std::string> names;
  for (const TrainingTensor& x : t.tensors()) EXPECT_TRUE(names.insert(x.name).second) << x.name;
  for (NodeId id = 0; id < static_cast<NodeId>(t.nodes().size()); ++id) {
    for (TensorId in : t.node(id).inputs) {
      EXPECT_LT(t.tensor(in).producer, id) << t.node(id).name << " reads " << t.tensor(in).name;
    }
  }
}

TEST(ZooTrainingGraphTest, EveryModelDifferentiates) {
  for (const graph::ZooModelInfo& info : graph::ZooModels()) {
    const proto::ZooModel spec = graph::SmallZooSpec(info.name, 2);
    absl::StatusOr<proto::GraphDef> def = graph::BuildZooModel(spec);
    ASSERT_TRUE(def.ok()) << def.status();
    SCOPED_TRACE(info.name);
    const TrainingGraph t = Train(*def);
    ExpectWellFormed(t);
    int updates = 0, params = 0, states = 0;
    for (const TrainingNode& n : t.nodes()) updates += n.kind == NodeKind::kUpdate;
    for (const TrainingTensor& x : t.tensors()) {
      params += x.role == proto::ROLE_PARAMETER;
      states += x.role == proto::ROLE_OPTIMIZER_STATE;
    }
    EXPECT_EQ(updates, params);
    EXPECT_EQ(states, params);
  }
}


// Declares `bytes` for every node of op `op` (forward and backward), none for the rest; an
// error for op `fail_op`.
class OpScratch : public ScratchModel {
 public:
  OpScratch(std::string op, uint64_t bytes, std::string fail_op = "")
      : op_(std::move(op)), bytes_(bytes), fail_op_(std::move(fail_op)) {}
  absl::StatusOr<uint64_t> NodeScratchBytes(const graph::Graph& forward,
                                            const TrainingGraph& graph,
                                            NodeId id) const override {
    const TrainingNode& node = graph.node(id);
    if (node.forward_node == kNone) return 0;
    const std::string& op = forward.node(node.forward_node).op->name;
    if (op == fail_op_) return absl::InvalidArgumentError("no kernel for this shape");
    return op == op_ ? bytes_ : 0;
  }

 private:
  std::string op_;
  uint64_t bytes_;
  std::string fail_op_;
};

TEST(ScratchTest, EachNodeThatDeclaresScratchWritesATemporaryNobodyReads) {
  const OpScratch scratch("Conv2D", 1000);
  TrainingOptions options;
  options.scratch = &scratch;
  const TrainingGraph plain = Train(SmallCnn());
  const TrainingGraph t = Train(SmallCnn(), options);
  // The same nodes; two more tensors, after all the others.
  ASSERT_EQ(t.nodes().size(), plain.nodes().size());
  ASSERT_EQ(t.tensors().size(), plain.tensors().size() + 2);
  for (const std::string name : {"conv1", "conv1.backward"}) {
    const TrainingNode& node = t.node(t.FindNode(name));
    ASSERT_NE(node.scratch, kNone) << name;
    const TrainingTensor& tensor = t.tensor(node.scratch);
    EXPECT_EQ(tensor.name, name + ".scratch");
    EXPECT_EQ(tensor.role, proto::ROLE_TEMPORARY);
    EXPECT_EQ(tensor.bytes, 1000u);
    EXPECT_EQ(tensor.producer, t.FindNode(name));
    EXPECT_THAT(tensor.consumers, IsEmpty());
    EXPECT_GE(node.scratch, static_cast<TensorId>(plain.tensors().size()));
  }
  for (const TrainingNode& node : t.nodes()) {
    if (node.name != "conv1" && node.name != "conv1.backward") {
      EXPECT_EQ(node.scratch, kNone) << node.name;
    }
  }
  ExpectWellFormed(t);
}

TEST(ScratchTest, AScratchErrorNamesTheNode) {
  const OpScratch scratch("Conv2D", 1000, /*fail_op=*/"MaxPool");
  TrainingOptions options;
  options.scratch = &scratch;
  absl::StatusOr<graph::Graph> g = graph::Graph::FromProto(SmallCnn());
  ASSERT_TRUE(g.ok());
  absl::StatusOr<TrainingGraph> t = TrainingGraph::Build(*g, options);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()),
              ::testing::HasSubstr("node 'pool' (MaxPool): scratch: no kernel for this shape"));
}

}  // namespace
}  // namespace headroom::planner
