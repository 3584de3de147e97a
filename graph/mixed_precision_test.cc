#include "graph/mixed_precision.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "graph/graph_builder.h"
#include "graph/reversible_testing.h"
#include "graph/zoo.h"
#include "graph/zoo_testing.h"
#include "gtest/gtest.h"

namespace headroom::graph {
namespace {

using ::testing::HasSubstr;

Graph MustLoad(const proto::GraphDef& def) {
  absl::StatusOr<Graph> g = Graph::FromProto(def);
  EXPECT_TRUE(g.ok()) << g.status();
  return *std::move(g);
}

Graph Zoo(const std::string& name) {
  absl::StatusOr<proto::GraphDef> def = BuildZooModel(SmallZooSpec(name, 2));
  EXPECT_TRUE(def.ok()) << def.status();
  return MustLoad(*def);
}

Graph MustMix(const Graph& g) {
  absl::StatusOr<Graph> mixed = ToMixedPrecision(g);
  EXPECT_TRUE(mixed.ok()) << g.name() << ": " << mixed.status();
  return *std::move(mixed);
}

bool IsComputeOp(const std::string& op) {
  return op == "Conv2D" || op == "MatMul" || op == "Embedding";
}

// The policy, checked tensor by tensor: every node output bfloat16 but the loss (float32);
// leaves keep their dtypes; compute ops read no float32 tensor; one Cast per parameter a
// compute op reads and per float input, each named after its tensor.
void ExpectPolicy(const Graph& fp32, const Graph& mixed) {
  SCOPED_TRACE(fp32.name());
  EXPECT_EQ(mixed.tensor(mixed.loss()).dtype, proto::DTYPE_FLOAT32);
  int expected_casts = 0;
  for (const Tensor& t : fp32.tensors()) {
    if (t.producer != kNoNode) continue;
    const Tensor& same = mixed.tensor(mixed.FindTensor(t.name));
    EXPECT_EQ(same.dtype, t.dtype) << t.name << " is a leaf: its dtype stays";
    bool read_by_compute = false;
    for (NodeId n : t.consumers) read_by_compute |= IsComputeOp(fp32.node(n).op->name);
    const bool cast =
        t.dtype == proto::DTYPE_FLOAT32 &&
        ((t.role == proto::ROLE_PARAMETER && read_by_compute) || t.role == proto::ROLE_INPUT);
    const NodeId cast_node = mixed.FindNode(t.name + ".bf16");
    EXPECT_EQ(cast_node >= 0, cast) << t.name;
    if (cast) {
      ++expected_casts;
      EXPECT_EQ(mixed.node(cast_node).op->name, "Cast");
      EXPECT_EQ(mixed.tensor(mixed.FindTensor(t.name + ".bf16")).dtype, proto::DTYPE_BFLOAT16);
    }
  }
  int casts = 0;
  for (const Node& n : mixed.nodes()) {
    casts += n.op->name == "Cast" ? 1 : 0;
    for (TensorId out : n.outputs) {
      if (out == mixed.loss()) continue;
      EXPECT_EQ(mixed.tensor(out).dtype, proto::DTYPE_BFLOAT16)
          << mixed.tensor(out).name << " of " << n.name << " (" << n.op->name << ")";
    }
    if (IsComputeOp(n.op->name)) {
      for (TensorId in : n.inputs) {
        EXPECT_NE(mixed.tensor(in).dtype, proto::DTYPE_FLOAT32)
            << n.name << " reads " << mixed.tensor(in).name;
      }
    }
  }
  EXPECT_EQ(casts, expected_casts);
  EXPECT_EQ(mixed.nodes().size(), fp32.nodes().size() + expected_casts);
}

TEST(ChooseFasterPrecisionTest, TheFasterThatFitsFloat32OnATie) {
  const absl::Status no = absl::FailedPreconditionError("budget 1 B is below 2 B");
  EXPECT_EQ(*ChooseFasterPrecision(2.0, 1.0), proto::PRECISION_BF16);
  EXPECT_EQ(*ChooseFasterPrecision(1.0, 2.0), proto::PRECISION_FP32);
  EXPECT_EQ(*ChooseFasterPrecision(1.0, 1.0), proto::PRECISION_FP32);
  EXPECT_EQ(*ChooseFasterPrecision(no, 9.0), proto::PRECISION_BF16);
  EXPECT_EQ(*ChooseFasterPrecision(9.0, no), proto::PRECISION_FP32);
  const absl::StatusOr<proto::Precision> neither =
      ChooseFasterPrecision(absl::FailedPreconditionError("fp32 needs 3 B."),
                            absl::FailedPreconditionError("bf16 needs 2 B."));
  EXPECT_EQ(neither.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(neither.status().message(),
            "neither precision fits. In bf16 mixed precision: bf16 needs 2 B. In float32: fp32 "
            "needs 3 B.");
  // Another error (not a refusal to fit) is passed on, even beside a plan that fits.
  EXPECT_EQ(ChooseFasterPrecision(absl::InvalidArgumentError("bad"), 1.0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MixedPrecisionTest, ZooModelsFollowThePolicy) {
  for (const char* name : {"mlp", "resnet18", "transformer", "mobilenet_v2"}) {
    const Graph fp32 = Zoo(name);
    ExpectPolicy(fp32, MustMix(fp32));
  }
}

TEST(MixedPrecisionTest, TiedWeightsShareOneCast) {
  // GPT-2's head reads the token embedding's table: one cast, read by both.
  const Graph mixed = MustMix(Zoo("transformer"));
  const Tensor& wte = mixed.tensor(mixed.FindTensor("wte.weight.bf16"));
  std::vector<std::string> readers;
  for (NodeId n : wte.consumers) readers.push_back(mixed.node(n).name);
  EXPECT_THAT(readers, ::testing::ElementsAre("wte", "lm_head"));
  // The layer norms keep their float32 weights.
  const Node& ln = mixed.node(mixed.FindNode("ln_f"));
  EXPECT_EQ(mixed.tensor(ln.inputs[0]).dtype, proto::DTYPE_BFLOAT16);
  EXPECT_EQ(mixed.tensor(ln.inputs[1]).dtype, proto::DTYPE_FLOAT32);
  EXPECT_EQ(mixed.tensor(ln.inputs[1]).name, "ln_f.weight");
}

TEST(MixedPrecisionTest, ActivationBytesHalve) {
  const Graph fp32 = Zoo("resnet18");
  const Graph mixed = MustMix(fp32);
  for (const Tensor& t : fp32.tensors()) {
    if (t.producer == kNoNode || t.name == fp32.tensor(fp32.loss()).name) continue;
    EXPECT_EQ(2 * mixed.tensor(mixed.FindTensor(t.name)).bytes(), t.bytes()) << t.name;
  }
}

TEST(MixedPrecisionTest, CastsArePlacedBeforeTheirFirstReader) {
  const Graph mixed = MustMix(Zoo("mlp"));
  for (const Node& n : mixed.nodes()) {
    if (n.op->name != "Cast") continue;
    const Tensor& out = mixed.tensor(n.outputs[0]);
    ASSERT_FALSE(out.consumers.empty()) << n.name;
    // Only other casts (of the same reader's inputs) lie between a cast and its reader.
    const NodeId id = mixed.FindNode(n.name);
    ASSERT_GT(out.consumers.front(), id);
    for (NodeId between = id + 1; between < out.consumers.front(); ++between) {
      EXPECT_EQ(mixed.node(between).op->name, "Cast")
          << n.name << " is not right before its reader: " << mixed.node(between).name;
    }
  }
}

TEST(MixedPrecisionTest, ABf16LossGetsAFloat32Cast) {
  GraphBuilder b("sum_loss");
  std::string x = b.Input("x", {2, 3});
  x = b.Linear("fc", x, 3, 4);
  const std::string loss = b.Op("ReduceSum", "loss", {x}, {{"keepdims", BoolAttr(false)}});
  b.SetLoss(loss);
  const Graph mixed = MustMix(MustLoad(b.Build()));
  EXPECT_EQ(mixed.tensor(mixed.loss()).name, "loss.f32");
  EXPECT_EQ(mixed.tensor(mixed.loss()).dtype, proto::DTYPE_FLOAT32);
  EXPECT_EQ(mixed.tensor(mixed.FindTensor("loss")).dtype, proto::DTYPE_BFLOAT16);
}

TEST(MixedPrecisionTest, ReversibleBlocksTakeTheirCasts) {
  RevChainOptions o;
  const Graph fp32 = MustLoad(RevChain(o));
  const Graph mixed = MustMix(fp32);
  ASSERT_EQ(mixed.reversible_blocks().size(), fp32.reversible_blocks().size());
  const ReversibleBlock& block = mixed.reversible_blocks()[0];
  std::vector<std::string> f;
  for (NodeId n : block.f_nodes) f.push_back(mixed.node(n).name);
  EXPECT_THAT(f, ::testing::Contains("b0.f.conv.weight.bf16"));
}

TEST(MixedPrecisionTest, OpsOutsideThePolicyAreNamed) {
  GraphBuilder b("prelu");
  std::string x = b.Input("x", {2, 3});
  x = b.Linear("fc", x, 3, 4);
  x = b.Op("PReLU", "act", {x, b.Parameter("act.slope", {4})});
  b.SetLoss(b.Op("SoftmaxCrossEntropy", "loss", {x, b.Label("y", {2})}));
  absl::StatusOr<Graph> mixed = ToMixedPrecision(MustLoad(b.Build()));
  ASSERT_FALSE(mixed.ok());
  EXPECT_THAT(mixed.status().message(), HasSubstr("mixed precision (bf16)"));
  EXPECT_THAT(mixed.status().message(), HasSubstr("'act'"));
  EXPECT_THAT(mixed.status().message(), HasSubstr("slope"));
}

TEST(MixedPrecisionTest, ATakenCastNameIsRefused) {
  GraphBuilder b("taken");
  std::string x = b.Input("x", {2, 3});
  x = b.Op("ReLU", "x.bf16", {x});
  x = b.Linear("fc", x, 3, 4);
  b.SetLoss(b.Op("SoftmaxCrossEntropy", "loss", {x, b.Label("y", {2})}));
  absl::StatusOr<Graph> mixed = ToMixedPrecision(MustLoad(b.Build()));
  EXPECT_EQ(mixed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mixed.status().message(), HasSubstr("'x.bf16'"));
}

TEST(MixedPrecisionTest, CastValidatesItsTarget) {
  GraphBuilder b("cast");
  std::string x = b.Input("x", {2, 3});
  x = b.Op("Cast", "c", {x}, {{"to", IntAttr(proto::DTYPE_INT32)}});
  b.SetLoss(b.Op("ReduceSum", "loss", {x}, {{"keepdims", BoolAttr(false)}}));
  absl::StatusOr<Graph> g = Graph::FromProto(b.Build());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(), HasSubstr("'c'"));
  EXPECT_THAT(g.status().message(), HasSubstr("attribute 'to' is 4 (int32)"));
}

TEST(MixedPrecisionTest, PrecisionNamesRoundTrip) {
  for (proto::Precision p : {proto::PRECISION_FP32, proto::PRECISION_BF16, proto::PRECISION_AUTO}) {
    absl::StatusOr<proto::Precision> parsed = ParsePrecision(PrecisionName(p));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, p);
  }
  EXPECT_THAT(ParsePrecision("fp16").status().message(), HasSubstr("'fp16'"));
}

}  // namespace
}  // namespace headroom::graph
