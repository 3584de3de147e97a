// Every rejection of Graph::FromProto, each checking that the message names the culprit;
// and what a valid graph gives back.
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "graph/graph.h"
#include "graph/graph_builder.h"
#include "graph/reversible_testing.h"
#include "gtest/gtest.h"

namespace headroom::graph {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// A small valid graph: x [4, 8] -> fc (MatMul) -> relu -> loss against labels [4].
//   fc = MatMul(x, fc.weight[3, 8], fc.bias[3], transpose_b)   [4, 3]
//   relu = ReLU(fc)                                            [4, 3]
//   loss = SoftmaxCrossEntropy(relu, labels)                   []
GraphBuilder ValidBuilder() {
  GraphBuilder b("tiny");
  b.Input("x", {4, 8});
  b.Linear("fc", "x", 8, 3);
  b.Unary("ReLU", "relu", "fc");
  b.Op("SoftmaxCrossEntropy", "loss", {"relu", b.Label("labels", {4})});
  b.SetLoss("loss");
  return b;
}

proto::NodeDef* FindNodeDef(proto::GraphDef& def, const std::string& name) {
  for (proto::NodeDef& n : *def.mutable_nodes()) {
    if (n.name() == name) return &n;
  }
  ADD_FAILURE() << "no node " << name;
  return nullptr;
}

proto::TensorDef* FindTensorDef(proto::GraphDef& def, const std::string& name) {
  for (proto::TensorDef& t : *def.mutable_tensors()) {
    if (t.name() == name) return &t;
  }
  ADD_FAILURE() << "no tensor " << name;
  return nullptr;
}

// Returns the loader's error message for `def`, failing the test if it loads.
std::string ErrorOf(const proto::GraphDef& def) {
  absl::StatusOr<Graph> g = Graph::FromProto(def);
  EXPECT_FALSE(g.ok()) << "graph loaded but should have been rejected";
  if (g.ok()) return "";
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
  return std::string(g.status().message());
}

TEST(ValidationTest, ValidGraphLoads) {
  absl::StatusOr<Graph> g = Graph::FromProto(ValidBuilder().Build());
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->nodes().size(), 3u);
  EXPECT_EQ(g->tensor(g->FindTensor("fc")).shape, Shape({4, 3}));
  EXPECT_EQ(g->tensor(g->loss()).name, "loss");
  EXPECT_EQ(g->tensor(g->FindTensor("fc.weight")).role, proto::ROLE_PARAMETER);
  EXPECT_EQ(g->tensor(g->FindTensor("relu")).role, proto::ROLE_ACTIVATION);
  // fc.weight is read by fc only; relu by loss only.
  EXPECT_EQ(g->tensor(g->FindTensor("fc.weight")).consumers,
            std::vector<NodeId>{g->FindNode("fc")});
  EXPECT_EQ(g->tensor(g->FindTensor("relu")).producer, g->FindNode("relu"));
}

TEST(ValidationTest, NodesAreOrderedTopologicallyWhateverTheirListedOrder) {
  proto::GraphDef def = ValidBuilder().Build();
  // Reverse the node list: loss, relu, fc.
  std::reverse(def.mutable_nodes()->begin(), def.mutable_nodes()->end());
  absl::StatusOr<Graph> g = Graph::FromProto(def);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->nodes().size(), 3u);
  EXPECT_EQ(g->node(0).name, "fc");
  EXPECT_EQ(g->node(1).name, "relu");
  EXPECT_EQ(g->node(2).name, "loss");
}

TEST(ValidationTest, IndependentNodesKeepTheirListedOrder) {
  // a and b both read x; listed b first, so b comes first.
  GraphBuilder b("order");
  b.Input("x", {2, 4});
  b.Unary("Tanh", "b", "x");
  b.Unary("Sigmoid", "a", "x");
  b.Add("sum", "a", "b");
  b.Op("SoftmaxCrossEntropy", "loss", {"sum", b.Label("labels", {2})});
  b.SetLoss("loss");
  absl::StatusOr<Graph> g = Graph::FromProto(b.Build());
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->node(0).name, "b");
  EXPECT_EQ(g->node(1).name, "a");
}

TEST(ValidationTest, ToProtoRoundTripsWithInferredShapes) {
  absl::StatusOr<Graph> g = Graph::FromProto(ValidBuilder().Build());
  ASSERT_TRUE(g.ok()) << g.status();
  proto::GraphDef again = g->ToProto();
  // Every tensor is now listed with its shape, so reloading checks them all.
  EXPECT_EQ(again.tensors_size(), static_cast<int>(g->tensors().size()));
  absl::StatusOr<Graph> g2 = Graph::FromProto(again);
  ASSERT_TRUE(g2.ok()) << g2.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(g2->ToProto(), again))
      << g2->ToProto().DebugString() << "\nvs\n" << again.DebugString();
}

TEST(RejectionTest, TooManyNodesOrTensors) {
  // A chain of kMaxGraphNodes ReLUs plus the valid graph's three nodes: one request could
  // otherwise make the daemon build (and plan) a graph of any size.
  proto::GraphDef nodes = ValidBuilder().Build();
  for (int i = 0; i < kMaxGraphNodes; ++i) {
    proto::NodeDef* n = nodes.add_nodes();
    n->set_name(absl::StrCat("r", i));
    n->set_op("ReLU");
    n->add_inputs(i == 0 ? "relu" : absl::StrCat("r", i - 1));
    n->add_outputs(absl::StrCat("r", i));
  }
  EXPECT_THAT(ErrorOf(nodes), HasSubstr("graph 'tiny' has 100003 nodes; at most 100000"));
  proto::GraphDef tensors = ValidBuilder().Build();
  for (int i = 0; i <= kMaxGraphTensors; ++i) tensors.add_tensors()->set_name(absl::StrCat("t", i));
  EXPECT_THAT(ErrorOf(tensors), HasSubstr("tensors (listed and node outputs); at most 400000"));
}

TEST(RejectionTest, NamesThatAreNotUtf8) {
  // Plans and errors carry names in proto3 strings, which a client would refuse to parse
  // (an ONNX model's names, proto2 strings, arrive unchecked).
  proto::GraphDef node = ValidBuilder().Build();
  FindNodeDef(node, "relu")->set_name("re\xe0lu");
  EXPECT_THAT(ErrorOf(node), HasSubstr("node 1's name \"re\\xe0lu\" is not valid UTF-8"));
  proto::GraphDef tensor = ValidBuilder().Build();
  FindTensorDef(tensor, "x")->set_name("x\xff");
  EXPECT_THAT(ErrorOf(tensor), HasSubstr("tensor \"x\\xff\" is not valid UTF-8"));
  // Valid multi-byte names load.
  proto::GraphDef accented = ValidBuilder().Build();
  FindNodeDef(accented, "relu")->set_name("r\xc3\xa9lu");
  EXPECT_TRUE(Graph::FromProto(accented).ok());
}

TEST(RejectionTest, Cycle) {
  // relu2 reads relu1's output and relu1 reads relu2's: relu1 -> relu2 -> relu1.
  GraphBuilder b("cycle");
  b.Input("x", {4, 3});
  b.Add("sum", "x", "relu2");
  b.Unary("ReLU", "relu1", "sum");
  b.Unary("ReLU", "relu2", "relu1");
  b.Op("SoftmaxCrossEntropy", "loss", {"relu2", b.Label("labels", {4})});
  b.SetLoss("loss");
  EXPECT_THAT(ErrorOf(b.Build()),
              AllOf(HasSubstr("cycle"), HasSubstr("'sum'"), HasSubstr("'relu1'"),
                    HasSubstr("'relu2'")));
}

TEST(RejectionTest, SelfLoop) {
  GraphBuilder b("self");
  b.Input("x", {4, 3});
  b.AddNode("Add", "acc", {"x", "acc_out"}, {"acc_out"});
  b.Op("SoftmaxCrossEntropy", "loss", {"acc_out", b.Label("labels", {4})});
  b.SetLoss("loss");
  EXPECT_THAT(ErrorOf(b.Build()), HasSubstr("cycle: node 'acc' -> 'acc'"));
}

TEST(RejectionTest, TensorUsedButNeverProduced) {
  proto::GraphDef def = ValidBuilder().Build();
  FindNodeDef(def, "relu")->set_inputs(0, "fc_out");
  EXPECT_THAT(ErrorOf(def), AllOf(HasSubstr("node 'relu' (ReLU)"), HasSubstr("'fc_out'"),
                                  HasSubstr("never produced")));
}

TEST(RejectionTest, DeclaredActivationThatNoNodeWrites) {
  proto::GraphDef def = ValidBuilder().Build();
  proto::TensorDef* t = def.add_tensors();
  t->set_name("orphan");
  t->add_shape(3);
  t->set_dtype(proto::DTYPE_FLOAT32);
  t->set_role(proto::ROLE_ACTIVATION);
  EXPECT_THAT(ErrorOf(def), AllOf(HasSubstr("tensor 'orphan'"), HasSubstr("never produced")));
}

TEST(RejectionTest, TensorDeclaredTwice) {
  proto::GraphDef def = ValidBuilder().Build();
  *def.add_tensors() = *FindTensorDef(def, "fc.bias");
  EXPECT_THAT(ErrorOf(def), HasSubstr("tensor 'fc.bias' is defined twice"));
}

TEST(RejectionTest, NodeDefinedTwice) {
  GraphBuilder b = ValidBuilder();
  b.Unary("Tanh", "relu", "fc");  // Second node named relu.
  EXPECT_THAT(ErrorOf(b.Build()), HasSubstr("node 'relu' is defined twice"));
}

TEST(RejectionTest, TwoNodesWriteOneTensor) {
  GraphBuilder b = ValidBuilder();
  b.AddNode("Tanh", "tanh", {"fc"}, {"relu"});
  EXPECT_THAT(ErrorOf(b.Build()), AllOf(HasSubstr("tensor 'relu' is defined twice"),
                                        HasSubstr("node 'relu'"), HasSubstr("node 'tanh'")));
}

TEST(RejectionTest, NodeOverwritesAParameter) {
  GraphBuilder b = ValidBuilder();
  b.AddNode("Tanh", "tanh", {"fc"}, {"fc.bias"});
  EXPECT_THAT(ErrorOf(b.Build()), AllOf(HasSubstr("tensor 'fc.bias' is defined twice"),
                                        HasSubstr("parameter"), HasSubstr("node 'tanh'")));
}

TEST(RejectionTest, ShapeThatDoesNotFitTheOp) {
  proto::GraphDef def = ValidBuilder().Build();
  FindTensorDef(def, "fc.weight")->set_shape(1, 7);  // [3, 7] against x [4, 8].
  EXPECT_THAT(ErrorOf(def), AllOf(HasSubstr("node 'fc' (MatMul)"), HasSubstr("input 'x'"),
                                  HasSubstr("input 'fc.weight'"), HasSubstr("8 and 7")));
}

TEST(RejectionTest, RankThatDoesNotFitTheOp) {
  GraphBuilder b("rank");
  b.Input("images", {3, 32, 32});  // Missing the batch dimension.
  b.Conv2D("conv1", "images", 3, 8, 3, 1, 1);
  EXPECT_THAT(ErrorOf(b.Build()), AllOf(HasSubstr("node 'conv1' (Conv2D)"),
                                        HasSubstr("input 'images' has 3 dims [3,32,32], needs 4")));
}

TEST(RejectionTest, DTypeThatDoesNotFitTheOp) {
  proto::GraphDef def = ValidBuilder().Build();
  FindTensorDef(def, "labels")->set_dtype(proto::DTYPE_FLOAT32);
  EXPECT_THAT(ErrorOf(def), AllOf(HasSubstr("node 'loss' (SoftmaxCrossEntropy)"),
                                  HasSubstr("input 'labels' has dtype float32")));
}

TEST(RejectionTest, MixedFloatTypes) {
  proto::GraphDef def = ValidBuilder().Build();
  FindTensorDef(def, "fc.bias")->set_dtype(proto::DTYPE_FLOAT16);
  EXPECT_THAT(ErrorOf(def), AllOf(HasSubstr("node 'fc' (MatMul)"),
                                  HasSubstr("input 'fc.bias' has dtype float16")));
}

TEST(RejectionTest, DeclaredOutputShapeDisagrees) {
  proto::GraphDef def = ValidBuilder().Build();
  proto::TensorDef* t = def.add_tensors();
  t->set_name("relu");
  t->add_shape(4);
  t->add_shape(5);
  EXPECT_THAT(ErrorOf(def), AllOf(HasSubstr("node 'relu' (ReLU)"), HasSubstr("output 'relu'"),
                                  HasSubstr("[4,5]"), HasSubstr("[4,3]")));
}

TEST(RejectionTest, ZeroDimension) {
  proto::GraphDef def = ValidBuilder().Build();
  FindTensorDef(def, "x")->set_shape(0, 0);
  EXPECT_THAT(ErrorOf(def), AllOf(HasSubstr("tensor 'x'"), HasSubstr("dimension 0"),
                                  HasSubstr("is 0")));
}

TEST(RejectionTest, NegativeDimension) {
  proto::GraphDef def = ValidBuilder().Build();
  FindTensorDef(def, "fc.weight")->set_shape(1, -8);
  EXPECT_THAT(ErrorOf(def), AllOf(HasSubstr("tensor 'fc.weight'"), HasSubstr("is -8")));
}

TEST(RejectionTest, LeafOver2To48Bytes) {
  // 2^24 * 2^23 float32 elements = 2^47 elements = 2^49 bytes; 2^48 bytes exactly is allowed.
  proto::GraphDef def = ValidBuilder().Build();
  proto::TensorDef* x = FindTensorDef(def, "x");
  x->set_shape(0, int64_t{1} << 24);
  x->set_shape(1, int64_t{1} << 23);
  EXPECT_THAT(ErrorOf(def), AllOf(HasSubstr("tensor 'x'"), HasSubstr("2^48 bytes")));
}

TEST(ValidationTest, LeafOfExactly2To48BytesIsAccepted) {
  // 2^23 * 2^23 float32 elements = 2^46 * 4 = 2^48 bytes: the largest tensor accepted.
  GraphBuilder b("big");
  b.Input("x", {int64_t{1} << 23, int64_t{1} << 23});
  b.Op("SoftmaxCrossEntropy", "loss", {"x", b.Label("labels", {int64_t{1} << 23})});
  b.SetLoss("loss");
  absl::StatusOr<Graph> g = Graph::FromProto(b.Build());
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->tensor(g->FindTensor("x")).bytes(), kMaxTensorBytes);
}

TEST(RejectionTest, DimensionsWhoseProductWrapsAround) {
  // 2^32 * 2^32 = 2^64 wraps to 0 in uint64: must be an error, never a zero-byte tensor.
  proto::GraphDef def = ValidBuilder().Build();
  proto::TensorDef* x = FindTensorDef(def, "x");
  x->set_shape(0, int64_t{1} << 32);
  x->set_shape(1, int64_t{1} << 32);
  EXPECT_THAT(ErrorOf(def), AllOf(HasSubstr("tensor 'x'"), HasSubstr("2^48 bytes")));
}

TEST(RejectionTest, InferredOutputOver2To48Bytes) {
  // [2^24, 1] x [1, 2^24] = 2^48 elements: each input is small, the output is 2^50 bytes.
  GraphBuilder b("outer");
  b.Input("a", {int64_t{1} << 24, 1});
  b.Input("b", {1, int64_t{1} << 24});
  b.Op("MatMul", "outer", {"a", "b"});
  b.Op("SoftmaxCrossEntropy", "loss", {"outer", b.Label("labels", {int64_t{1} << 24})});
  b.SetLoss("loss");
  EXPECT_THAT(ErrorOf(b.Build()), AllOf(HasSubstr("node 'outer' (MatMul)"),
                                        HasSubstr("output 'outer'"), HasSubstr("2^48 bytes")));
}

TEST(RejectionTest, UnknownOp) {
  proto::GraphDef def = ValidBuilder().Build();
  FindNodeDef(def, "relu")->set_op("Conv3D");
  EXPECT_THAT(ErrorOf(def), AllOf(HasSubstr("node 'relu'"), HasSubstr("unknown op 'Conv3D'")));
}

TEST(RejectionTest, UnknownAttribute) {
  proto::GraphDef def = ValidBuilder().Build();
  (*FindNodeDef(def, "fc")->mutable_attrs())["transpose_c"] = BoolAttr(true);
  EXPECT_THAT(ErrorOf(def), AllOf(HasSubstr("node 'fc' (MatMul)"),
                                  HasSubstr("unknown attribute 'transpose_c'"),
                                  HasSubstr("transpose_a, transpose_b")));
}

TEST(RejectionTest, AttributeOfTheWrongType) {
  GraphBuilder b("attr");
  b.Input("images", {1, 3, 8, 8});
  b.Parameter("w", {4, 3, 3, 3});
  b.Op("Conv2D", "conv", {"images", "w"}, {{"stride", IntAttr(2)}});
  EXPECT_THAT(ErrorOf(b.Build()), AllOf(HasSubstr("node 'conv' (Conv2D)"),
                                        HasSubstr("attribute 'stride' is int"),
                                        HasSubstr("needs list of ints")));
}

TEST(RejectionTest, MissingRequiredAttribute) {
  GraphBuilder b = ValidBuilder();
  b.Op("Reshape", "reshape", {"relu"});
  EXPECT_THAT(ErrorOf(b.Build()), AllOf(HasSubstr("node 'reshape' (Reshape)"),
                                        HasSubstr("missing required attribute 'shape'")));
}

TEST(RejectionTest, WrongNumberOfInputs) {
  GraphBuilder b = ValidBuilder();
  b.Op("Add", "add3", {"relu", "relu", "relu"});
  EXPECT_THAT(ErrorOf(b.Build()), AllOf(HasSubstr("node 'add3' (Add)"),
                                        HasSubstr("has 3 inputs, needs 2")));
}

TEST(RejectionTest, LeafWithoutDType) {
  proto::GraphDef def = ValidBuilder().Build();
  FindTensorDef(def, "fc.bias")->set_dtype(proto::DTYPE_UNSPECIFIED);
  EXPECT_THAT(ErrorOf(def), AllOf(HasSubstr("tensor 'fc.bias'"), HasSubstr("no dtype")));
}

TEST(RejectionTest, NoLoss) {
  proto::GraphDef def = ValidBuilder().Build();
  def.clear_loss();
  EXPECT_THAT(ErrorOf(def), HasSubstr("graph has no scalar loss"));
}

TEST(RejectionTest, LossNamesAMissingTensor) {
  proto::GraphDef def = ValidBuilder().Build();
  def.set_loss("lossy");
  EXPECT_THAT(ErrorOf(def), AllOf(HasSubstr("no scalar loss"), HasSubstr("'lossy'")));
}

TEST(RejectionTest, LossThatIsNotAScalar) {
  proto::GraphDef def = ValidBuilder().Build();
  def.set_loss("relu");
  EXPECT_THAT(ErrorOf(def), AllOf(HasSubstr("no scalar loss"), HasSubstr("'relu'"),
                                  HasSubstr("[4,3]")));
}

TEST(RejectionTest, LossThatIsAnInput) {
  GraphBuilder b = ValidBuilder();
  b.Input("given_loss", {});
  b.SetLoss("given_loss");
  EXPECT_THAT(ErrorOf(b.Build()), AllOf(HasSubstr("no scalar loss"), HasSubstr("'given_loss'"),
                                        HasSubstr("computed by a node")));
}

TEST(RejectionTest, EmptyNames) {
  proto::GraphDef def = ValidBuilder().Build();
  FindNodeDef(def, "relu")->set_name("");
  EXPECT_THAT(ErrorOf(def), HasSubstr("empty name"));
}

// ---- Reversible blocks ------------------------------------------------------------------

// Returns the 2-block chain of reversible_testing.h (blocks b0 and b1), batch norm on.
proto::GraphDef TwoBlocks() {
  RevChainOptions o;
  o.blocks = 2;
  return RevChain(o);
}

proto::ReversibleBlock* Block(proto::GraphDef& def, int k) {
  return def.mutable_reversible_blocks(k);
}

TEST(ReversibleBlockTest, ValidChainResolves) {
  absl::StatusOr<Graph> g = Graph::FromProto(TwoBlocks());
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->reversible_blocks().size(), 2u);
  const ReversibleBlock& b0 = g->reversible_blocks()[0];
  const ReversibleBlock& b1 = g->reversible_blocks()[1];
  EXPECT_EQ(b0.name, "b0");
  EXPECT_EQ(g->tensor(b0.x1).name, "x1");
  EXPECT_EQ(g->tensor(b0.x2).name, "x2");
  EXPECT_EQ(g->tensor(b0.f_output).name, "b0.f.relu");
  EXPECT_EQ(g->tensor(b0.g_output).name, "b0.g.relu");
  EXPECT_EQ(b1.x1, b0.y1);
  EXPECT_EQ(b1.x2, b0.y2);
  EXPECT_EQ(b0.f_nodes.size(), 3u);
  // The declaration survives ToProto.
  absl::StatusOr<Graph> again = Graph::FromProto(g->ToProto());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->reversible_blocks().size(), 2u);
  EXPECT_EQ(again->reversible_blocks()[1].g_nodes, b1.g_nodes);
}

TEST(ReversibleBlockTest, UnknownNode) {
  proto::GraphDef def = TwoBlocks();
  Block(def, 0)->add_f_nodes("nowhere");
  EXPECT_THAT(ErrorOf(def), AllOf(HasSubstr("reversible block 'b0'"), HasSubstr("'nowhere'"),
                                  HasSubstr("does not exist")));
}

TEST(ReversibleBlockTest, NodeInTwoBlocks) {
  proto::GraphDef def = TwoBlocks();
  Block(def, 1)->add_f_nodes("b0.f.conv");
  EXPECT_THAT(ErrorOf(def), AllOf(HasSubstr("reversible block 'b1'"), HasSubstr("'b0.f.conv'"),
                                  HasSubstr("already in block 'b0'")));
}

TEST(ReversibleBlockTest, DuplicateName) {
  proto::GraphDef def = TwoBlocks();
  Block(def, 1)->set_name("b0");
  EXPECT_THAT(ErrorOf(def), HasSubstr("reversible block 'b0' is defined twice"));
}

TEST(ReversibleBlockTest, CouplingNotAdd) {
  proto::GraphDef def = TwoBlocks();
  FindNodeDef(def, "b0.y1")->set_op("Mul");
  EXPECT_THAT(ErrorOf(def), AllOf(HasSubstr("reversible block 'b0'"), HasSubstr("'b0.y1'"),
                                  HasSubstr("is Mul, needs Add")));
}

TEST(ReversibleBlockTest, CouplingWithoutF) {
  proto::GraphDef def = TwoBlocks();
  // y1 = x1 + x1: no input comes from F.
  FindNodeDef(def, "b0.y1")->set_inputs(1, "x1");
  EXPECT_THAT(ErrorOf(def), AllOf(HasSubstr("reversible block 'b0'"),
                                  HasSubstr("coupling node 'b0.y1' must add one output of F")));
}

TEST(ReversibleBlockTest, FReadsX1) {
  proto::GraphDef def = TwoBlocks();
  // F's convolution reads x1 instead of x2.
  FindNodeDef(def, "b0.f.conv")->set_inputs(0, "x1");
  EXPECT_THAT(ErrorOf(def),
              AllOf(HasSubstr("reversible block 'b0'"), HasSubstr("F node 'b0.f.conv' reads 'x1'"),
                    HasSubstr("only x2 'x2'")));
}

TEST(ReversibleBlockTest, GReadsX2) {
  proto::GraphDef def = TwoBlocks();
  FindNodeDef(def, "b1.g.conv")->set_inputs(0, "b0.y2");
  EXPECT_THAT(ErrorOf(def),
              AllOf(HasSubstr("reversible block 'b1'"),
                    HasSubstr("G node 'b1.g.conv' reads 'b0.y2'"), HasSubstr("only y1 'b1.y1'")));
}

TEST(ReversibleBlockTest, GReadsInsideF) {
  proto::GraphDef def = TwoBlocks();
  FindNodeDef(def, "b0.g.conv")->set_inputs(0, "b0.f.bn");
  EXPECT_THAT(ErrorOf(def), AllOf(HasSubstr("reversible block 'b0'"),
                                  HasSubstr("G node 'b0.g.conv' reads 'b0.f.bn'")));
}

TEST(ReversibleBlockTest, InsideTensorReadOutside) {
  proto::GraphDef def = TwoBlocks();
  // A node after the chain reads F's batch norm of block 1 besides the coupling.
  proto::NodeDef* spy = def.add_nodes();
  spy->set_name("spy");
  spy->set_op("ReLU");
  spy->add_inputs("b1.f.bn");
  spy->add_outputs("spy");
  EXPECT_THAT(ErrorOf(def),
              AllOf(HasSubstr("reversible block 'b1'"),
                    HasSubstr("tensor 'b1.f.bn' written inside F is read outside the block "
                              "by node 'spy'")));
}

TEST(ReversibleBlockTest, StridedFDoesNotCouple) {
  RevChainOptions o;
  o.blocks = 1;
  o.batch_norm = false;
  proto::GraphDef def = RevChain(o);
  // F ends in a global pool: [2, 2, 1, 1] broadcasts against x1 [2, 2, 4, 4] in the Add,
  // but cannot be inverted.
  proto::NodeDef* relu = FindNodeDef(def, "b0.f.relu");
  relu->set_op("GlobalAvgPool");
  EXPECT_THAT(ErrorOf(def),
              AllOf(HasSubstr("reversible block 'b0'"),
                    HasSubstr("F's output 'b0.f.relu' is float32 [2,2,1,1]"),
                    HasSubstr("x1 'x1' is float32 [2,2,4,4]"), HasSubstr("stride 1")));
}

TEST(ReversibleBlockTest, SameHalves) {
  RevChainOptions o;
  o.blocks = 1;
  proto::GraphDef def = RevChain(o);
  // y1 = x2 + F(x2): x1 is x2.
  FindNodeDef(def, "b0.y1")->set_inputs(0, "x2");
  EXPECT_THAT(ErrorOf(def), AllOf(HasSubstr("reversible block 'b0'"),
                                  HasSubstr("x1 and x2 are the same tensor 'x2'")));
}

TEST(ReversibleBlockTest, EmptyG) {
  proto::GraphDef def = TwoBlocks();
  Block(def, 0)->clear_g_nodes();
  EXPECT_THAT(ErrorOf(def), AllOf(HasSubstr("reversible block 'b0'"),
                                  HasSubstr("at least one node in F and in G")));
}

}  // namespace
}  // namespace headroom::graph
