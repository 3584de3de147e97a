// Shape inference of every op against shapes computed by hand (the arithmetic is in the
// comments), through the same loader users go through.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "graph/graph.h"
#include "graph/graph_builder.h"
#include "gtest/gtest.h"

namespace headroom::graph {
namespace {

using ::testing::HasSubstr;

struct InputSpec {
  Shape shape;
  proto::DType dtype = proto::DTYPE_FLOAT32;
};

// Builds a graph of one `op` node over inputs "in0", "in1", ... with outputs "out0", ...,
// closes it with a loss over out0, and returns it (or the loader's error).
absl::StatusOr<Graph> OneOp(const std::string& op, const std::vector<InputSpec>& inputs,
                            const AttrList& attrs = {}, int num_outputs = 1) {
  GraphBuilder b("one_op");
  std::vector<std::string> names;
  for (size_t i = 0; i < inputs.size(); ++i) {
    names.push_back(b.Input("in" + std::to_string(i), inputs[i].shape, inputs[i].dtype));
  }
  std::vector<std::string> outs;
  for (int i = 0; i < num_outputs; ++i) outs.push_back("out" + std::to_string(i));
  b.AddNode(op, "node", names, outs, attrs);
  // loss = SoftmaxCrossEntropy(Flatten(out0, axis=0) [1, n], labels [1]).
  b.Op("Flatten", "flat", {"out0"}, {{"axis", IntAttr(0)}});
  b.Op("SoftmaxCrossEntropy", "loss", {"flat", b.Label("labels", {1})});
  b.SetLoss("loss");
  return Graph::FromProto(b.Build());
}

// Returns the inferred shape of output `i`, or fails the test with the loader's error.
Shape OutShape(const absl::StatusOr<Graph>& g, int i = 0) {
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return {};
  return g->tensor(g->FindTensor("out" + std::to_string(i))).shape;
}

TEST(Conv2DShapeTest, ResNetStem) {
  // (224 + 3 + 3 - 7) / 2 + 1 = 112.
  EXPECT_EQ(OutShape(OneOp("Conv2D", {{{2, 3, 224, 224}}, {{64, 3, 7, 7}}},
                           {{"stride", IntsAttr({2, 2})}, {"padding", IntsAttr({3, 3})}})),
            Shape({2, 64, 112, 112}));
}

TEST(Conv2DShapeTest, StridedAndDilated) {
  // Effective kernel 2*(3-1)+1 = 5: (15 + 1 + 1 - 5) / 2 + 1 = 7.
  EXPECT_EQ(OutShape(OneOp("Conv2D", {{{1, 8, 15, 15}}, {{4, 8, 3, 3}}, {{4}}},
                           {{"stride", IntsAttr({2, 2})},
                            {"padding", IntsAttr({1, 1})},
                            {"dilation", IntsAttr({2, 2})}})),
            Shape({1, 4, 7, 7}));
}

TEST(Conv2DShapeTest, DepthwiseStrided) {
  // groups = channels = 32, weight [32, 1, 3, 3]: (56 + 2 - 3) / 2 + 1 = 28.
  EXPECT_EQ(OutShape(OneOp("Conv2D", {{{1, 32, 56, 56}}, {{32, 1, 3, 3}}},
                           {{"stride", IntsAttr({2, 2})},
                            {"padding", IntsAttr({1, 1})},
                            {"groups", IntAttr(32)}})),
            Shape({1, 32, 28, 28}));
}

TEST(Conv2DShapeTest, GroupedNonDepthwise) {
  // 8 input channels in 4 groups of 2; 16 outputs: (10 - 3) / 1 + 1 = 8.
  EXPECT_EQ(OutShape(OneOp("Conv2D", {{{1, 8, 10, 10}}, {{16, 2, 3, 3}}},
                           {{"groups", IntAttr(4)}})),
            Shape({1, 16, 8, 8}));
}

TEST(Conv2DShapeTest, AsymmetricPaddingAndRectangularStride) {
  // padding [top 0, left 1, bottom 2, right 3], stride [1, 2]:
  // H = (5 + 0 + 2 - 3) / 1 + 1 = 5; W = (5 + 1 + 3 - 3) / 2 + 1 = 4.
  EXPECT_EQ(OutShape(OneOp("Conv2D", {{{1, 1, 5, 5}}, {{1, 1, 3, 3}}},
                           {{"padding", IntsAttr({0, 1, 2, 3})}, {"stride", IntsAttr({1, 2})}})),
            Shape({1, 1, 5, 4}));
}

TEST(Conv2DShapeTest, RejectsWeightNotMatchingGroups) {
  auto g = OneOp("Conv2D", {{{1, 8, 10, 10}}, {{16, 8, 3, 3}}}, {{"groups", IntAttr(4)}});
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("input 'in1'"));
  EXPECT_THAT(g.status().message(), HasSubstr("8/4 = 2"));
}

TEST(Conv2DShapeTest, RejectsGroupsNotDividingChannels) {
  auto g = OneOp("Conv2D", {{{1, 6, 10, 10}}, {{8, 2, 3, 3}}}, {{"groups", IntAttr(4)}});
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("'groups' is 4"));
}

TEST(Conv2DShapeTest, RejectsKernelLargerThanInput) {
  auto g = OneOp("Conv2D", {{{1, 1, 2, 2}}, {{1, 1, 3, 3}}});
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("larger than input 'in0'"));
}

TEST(Conv2DShapeTest, RejectsWrongBiasShape) {
  auto g = OneOp("Conv2D", {{{1, 3, 8, 8}}, {{4, 3, 3, 3}}, {{5}}});
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("input 'in2' has shape [5], needs [4]"));
}

TEST(PoolShapeTest, MaxPoolResNetStem) {
  // (112 + 1 + 1 - 3) / 2 + 1 = 56.
  EXPECT_EQ(OutShape(OneOp("MaxPool", {{{2, 64, 112, 112}}},
                           {{"kernel_size", IntsAttr({3, 3})},
                            {"stride", IntsAttr({2, 2})},
                            {"padding", IntsAttr({1, 1})}})),
            Shape({2, 64, 56, 56}));
}

TEST(PoolShapeTest, CeilModeAddsAPartialWindow) {
  // floor((6 - 3) / 2) + 1 = 2 windows; ceil((6 - 3) / 2) + 1 = 3, and the third starts at
  // 4 < 6, inside the input, so it stays.
  const AttrList attrs = {{"kernel_size", IntsAttr({3, 3})}, {"stride", IntsAttr({2, 2})}};
  EXPECT_EQ(OutShape(OneOp("MaxPool", {{{1, 1, 6, 6}}}, attrs)), Shape({1, 1, 2, 2}));
  AttrList ceil = attrs;
  ceil.push_back({"ceil_mode", BoolAttr(true)});
  EXPECT_EQ(OutShape(OneOp("MaxPool", {{{1, 1, 6, 6}}}, ceil)), Shape({1, 1, 3, 3}));
}

TEST(PoolShapeTest, CeilModeDropsAWindowStartingInThePadding) {
  // 5 wide, kernel 2, stride 2, pad 1: ceil((5 + 2 - 2) / 2) + 1 = 4 windows, but the fourth
  // would start at 6 >= 5 + 1, in the right padding, so PyTorch keeps 3.
  EXPECT_EQ(OutShape(OneOp("MaxPool", {{{1, 1, 5, 5}}},
                           {{"kernel_size", IntsAttr({2, 2})},
                            {"stride", IntsAttr({2, 2})},
                            {"padding", IntsAttr({1, 1})},
                            {"ceil_mode", BoolAttr(true)}})),
            Shape({1, 1, 3, 3}));
}

TEST(PoolShapeTest, AvgPoolStrideDefaultsToKernel) {
  EXPECT_EQ(OutShape(OneOp("AvgPool", {{{1, 3, 8, 6}}}, {{"kernel_size", IntsAttr({2, 3})}})),
            Shape({1, 3, 4, 2}));
}

TEST(PoolShapeTest, RejectsPaddingOverHalfTheKernel) {
  auto g = OneOp("MaxPool", {{{1, 1, 8, 8}}},
                 {{"kernel_size", IntsAttr({2, 2})}, {"padding", IntsAttr({2, 2})}});
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("exceeds half of kernel_size"));
}

TEST(PoolShapeTest, GlobalAvgPoolKeepsBatchAndChannels) {
  EXPECT_EQ(OutShape(OneOp("GlobalAvgPool", {{{4, 2048, 7, 7}}})), Shape({4, 2048, 1, 1}));
}

TEST(MatMulShapeTest, LinearInPyTorchLayout) {
  // x [8, 512] W^T where W is [1000, 512], bias [1000].
  EXPECT_EQ(OutShape(OneOp("MatMul", {{{8, 512}}, {{1000, 512}}, {{1000}}},
                           {{"transpose_b", BoolAttr(true)}})),
            Shape({8, 1000}));
}

TEST(MatMulShapeTest, BatchDimsBroadcast) {
  // Batch [2, 1] with [5] broadcasts to [2, 5]; [3, 4] x [4, 6] = [3, 6].
  EXPECT_EQ(OutShape(OneOp("MatMul", {{{2, 1, 3, 4}}, {{5, 4, 6}}})), Shape({2, 5, 3, 6}));
}

TEST(MatMulShapeTest, AttentionScoresAndTransposeA) {
  EXPECT_EQ(OutShape(OneOp("MatMul", {{{2, 12, 16, 64}}, {{2, 12, 16, 64}}},
                           {{"transpose_b", BoolAttr(true)}})),
            Shape({2, 12, 16, 16}));
  EXPECT_EQ(OutShape(OneOp("MatMul", {{{7, 3}}, {{7, 5}}}, {{"transpose_a", BoolAttr(true)}})),
            Shape({3, 5}));
}

TEST(MatMulShapeTest, RejectsInnerDimensionMismatch) {
  auto g = OneOp("MatMul", {{{8, 512}}, {{1000, 256}}}, {{"transpose_b", BoolAttr(true)}});
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("node 'node' (MatMul)"));
  EXPECT_THAT(g.status().message(), HasSubstr("inner dimensions 512 and 256"));
}

TEST(ElementwiseShapeTest, BinaryOpsBroadcast) {
  EXPECT_EQ(OutShape(OneOp("Add", {{{2, 3, 4}}, {{4}}})), Shape({2, 3, 4}));
  EXPECT_EQ(OutShape(OneOp("Mul", {{{2, 1}}, {{1, 3}}})), Shape({2, 3}));
  auto g = OneOp("Add", {{{2, 3}}, {{4}}});
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("do not broadcast"));
}

TEST(ElementwiseShapeTest, UnaryOpsKeepTheShape) {
  for (const char* op :
       {"ReLU", "ReLU6", "HardSigmoid", "HardSwish", "GELU", "Sigmoid", "Tanh", "Dropout",
        "LeakyReLU", "ELU", "SELU", "Softplus", "Sqrt", "Erf", "Mish", "Pow"}) {
    EXPECT_EQ(OutShape(OneOp(op, {{{3, 5, 7}}})), Shape({3, 5, 7})) << op;
  }
}

TEST(ElementwiseShapeTest, HardSigmoidTakesOnnxAttributesButNeedsFiniteOnes) {
  EXPECT_EQ(OutShape(OneOp("HardSigmoid", {{{4}}}, {{"alpha", FloatAttr(0.2)}})), Shape({4}));
  auto g = OneOp("HardSigmoid", {{{4}}}, {{"beta", FloatAttr(std::nan(""))}});
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("node 'node' (HardSigmoid)"));
  EXPECT_THAT(g.status().message(), HasSubstr("attribute 'beta' is nan"));
  auto ints = OneOp("HardSwish", {{{4}, proto::DTYPE_INT64}});
  ASSERT_FALSE(ints.ok());
  EXPECT_THAT(ints.status().message(), HasSubstr("needs a floating-point type"));
}

TEST(ElementwiseShapeTest, OnnxActivationsNeedFiniteAttributesAndFloats) {
  EXPECT_EQ(OutShape(OneOp("LeakyReLU", {{{2, 3}}}, {{"alpha", FloatAttr(0.2)}})), Shape({2, 3}));
  EXPECT_EQ(OutShape(OneOp("SELU", {{{2}}}, {{"gamma", FloatAttr(1.0)}})), Shape({2}));
  for (const auto& [op, attr] :
       std::vector<std::pair<std::string, std::string>>{{"LeakyReLU", "alpha"},
                                                        {"ELU", "alpha"},
                                                        {"SELU", "alpha"},
                                                        {"SELU", "gamma"},
                                                        {"Pow", "exponent"}}) {
    auto g = OneOp(op, {{{4}}}, {{attr, FloatAttr(std::numeric_limits<double>::infinity())}});
    ASSERT_FALSE(g.ok()) << op;
    EXPECT_THAT(g.status().message(), HasSubstr("node 'node' (" + op + ")"));
    EXPECT_THAT(g.status().message(), HasSubstr("attribute '" + attr + "' is inf"));
  }
  auto ints = OneOp("Sqrt", {{{4}, proto::DTYPE_INT64}});
  ASSERT_FALSE(ints.ok());
  EXPECT_THAT(ints.status().message(), HasSubstr("needs a floating-point type"));
}

TEST(ElementwiseShapeTest, PReluSlopeBroadcastsToX) {
  EXPECT_EQ(OutShape(OneOp("PReLU", {{{2, 4, 5, 5}}, {{4, 1, 1}}})), Shape({2, 4, 5, 5}));
  EXPECT_EQ(OutShape(OneOp("PReLU", {{{2, 4, 5, 5}}, {{1}}})), Shape({2, 4, 5, 5}));
  // A slope that would widen x is no PReLU.
  auto g = OneOp("PReLU", {{{4, 1}}, {{4, 3}}});
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("node 'node' (PReLU)"));
  EXPECT_THAT(g.status().message(), HasSubstr("[4,3] does not broadcast to input 'in0' [4,1]"));
}

TEST(NormShapeTest, BatchNormOverChannels) {
  EXPECT_EQ(OutShape(OneOp("BatchNorm", {{{2, 16, 4, 4}}, {{16}}, {{16}}, {{16}}, {{16}}})),
            Shape({2, 16, 4, 4}));
  EXPECT_EQ(OutShape(OneOp("BatchNorm", {{{2, 16}}, {{16}}, {{16}}, {{16}}, {{16}}})),
            Shape({2, 16}));
  auto g = OneOp("BatchNorm", {{{2, 16, 4, 4}}, {{16}}, {{16}}, {{8}}, {{16}}});
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("input 'in3' has shape [8], needs [16]"));
}

TEST(NormShapeTest, NormEpsilonMustBePositiveAndFinite) {
  // NaN and infinity passed an `epsilon <= 0` check.
  const double kBad[] = {std::nan(""), std::numeric_limits<double>::infinity(), 0.0, -1e-5};
  for (const double epsilon : kBad) {
    auto bn = OneOp("BatchNorm", {{{2, 16}}, {{16}}, {{16}}, {{16}}, {{16}}},
                    {{"epsilon", FloatAttr(epsilon)}});
    ASSERT_FALSE(bn.ok()) << epsilon;
    EXPECT_THAT(bn.status().message(), HasSubstr("attribute 'epsilon' is "));
    EXPECT_THAT(bn.status().message(), HasSubstr("must be positive and finite"));
    auto ln = OneOp("LayerNorm", {{{2, 64}}, {{64}}, {{64}}}, {{"epsilon", FloatAttr(epsilon)}});
    ASSERT_FALSE(ln.ok()) << epsilon;
    EXPECT_THAT(ln.status().message(), HasSubstr("must be positive and finite"));
  }
  auto momentum = OneOp("BatchNorm", {{{2, 16}}, {{16}}, {{16}}, {{16}}, {{16}}},
                        {{"momentum", FloatAttr(std::nan(""))}});
  ASSERT_FALSE(momentum.ok());
  EXPECT_THAT(momentum.status().message(), HasSubstr("attribute 'momentum' is nan, needs [0, 1]"));
}

TEST(NormShapeTest, LayerNormOverLastDim) {
  EXPECT_EQ(OutShape(OneOp("LayerNorm", {{{2, 10, 64}}, {{64}}, {{64}}})), Shape({2, 10, 64}));
}

TEST(NormShapeTest, GroupNormGroupsDivideTheChannels) {
  EXPECT_EQ(
      OutShape(OneOp("GroupNorm", {{{2, 8, 5, 5}}, {{8}}, {{8}}}, {{"num_groups", IntAttr(4)}})),
      Shape({2, 8, 5, 5}));
  EXPECT_EQ(
      OutShape(OneOp("GroupNorm", {{{2, 3, 100}}, {{3}}, {{3}}}, {{"num_groups", IntAttr(3)}})),
      Shape({2, 3, 100}));
  auto g = OneOp("GroupNorm", {{{2, 8, 5, 5}}, {{8}}, {{8}}}, {{"num_groups", IntAttr(3)}});
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("'num_groups' is 3; it must divide the 8 channels"));
  auto w = OneOp("GroupNorm", {{{2, 8, 5, 5}}, {{4}}, {{8}}}, {{"num_groups", IntAttr(2)}});
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(w.status().message(), HasSubstr("input 'in1' has shape [4], needs [8]"));
}

TEST(LayoutShapeTest, FlattenAtEachAxis) {
  EXPECT_EQ(OutShape(OneOp("Flatten", {{{2, 3, 4, 5}}})), Shape({2, 60}));
  EXPECT_EQ(OutShape(OneOp("Flatten", {{{2, 3, 4, 5}}}, {{"axis", IntAttr(2)}})),
            Shape({6, 20}));
  EXPECT_EQ(OutShape(OneOp("Flatten", {{{2, 3, 4, 5}}}, {{"axis", IntAttr(0)}})),
            Shape({1, 120}));
}

TEST(LayoutShapeTest, ReshapeInfersOneDimension) {
  EXPECT_EQ(OutShape(OneOp("Reshape", {{{2, 12}}}, {{"shape", IntsAttr({-1, 3, 4})}})),
            Shape({2, 3, 4}));
  auto g = OneOp("Reshape", {{{2, 12}}}, {{"shape", IntsAttr({5, -1})}});
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("does not hold the 24 elements"));
}

TEST(LayoutShapeTest, TransposePermutes) {
  EXPECT_EQ(OutShape(OneOp("Transpose", {{{2, 3, 4}}}, {{"perm", IntsAttr({2, 0, 1})}})),
            Shape({4, 2, 3}));
  auto g = OneOp("Transpose", {{{2, 3, 4}}}, {{"perm", IntsAttr({0, 0, 1})}});
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("not a permutation"));
}

TEST(LayoutShapeTest, ConcatAndSplit) {
  EXPECT_EQ(OutShape(OneOp("Concat", {{{2, 3}}, {{2, 5}}, {{2, 1}}}, {{"axis", IntAttr(1)}})),
            Shape({2, 9}));
  auto split = OneOp("Split", {{{2, 9}}}, {{"axis", IntAttr(-1)}, {"sizes", IntsAttr({2, 3, 4})}},
                     /*num_outputs=*/3);
  EXPECT_EQ(OutShape(split, 0), Shape({2, 2}));
  EXPECT_EQ(OutShape(split, 1), Shape({2, 3}));
  EXPECT_EQ(OutShape(split, 2), Shape({2, 4}));
  auto bad = OneOp("Split", {{{2, 9}}}, {{"axis", IntAttr(1)}, {"sizes", IntsAttr({2, 3})}}, 2);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("sums to 5"));
}

AttrList SliceAttrs(std::vector<int64_t> axes, std::vector<int64_t> starts,
                    std::vector<int64_t> ends, std::vector<int64_t> steps = {}) {
  AttrList attrs = {{"axes", IntsAttr(std::move(axes))},
                    {"starts", IntsAttr(std::move(starts))},
                    {"ends", IntsAttr(std::move(ends))}};
  if (!steps.empty()) attrs.push_back({"steps", IntsAttr(std::move(steps))});
  return attrs;
}

TEST(LayoutShapeTest, SliceCutsEachListedAxis) {
  // vit's x[:, 1:]: 197 - 1 = 196 tokens.
  EXPECT_EQ(OutShape(OneOp("Slice", {{{2, 197, 768}}}, SliceAttrs({1}, {1}, {197}))),
            Shape({2, 196, 768}));
  // swin's x[..., 1::2, 0::2, :] on 7x7: ceil(6 / 2) = 3 rows, ceil(7 / 2) = 4 columns.
  EXPECT_EQ(OutShape(OneOp("Slice", {{{2, 7, 7, 96}}},
                           SliceAttrs({1, 2}, {1, 0}, {7, 7}, {2, 2}))),
            Shape({2, 3, 4, 96}));
  // A negative axis counts from the end.
  EXPECT_EQ(OutShape(OneOp("Slice", {{{4, 6}}}, SliceAttrs({-1}, {2}, {5}))), Shape({4, 3}));
  // torch.flip and x[:, ::-1]: from the last element through element 0 (end -1).
  EXPECT_EQ(OutShape(OneOp("Slice", {{{4, 6}}}, SliceAttrs({1}, {5}, {-1}, {-1}))), Shape({4, 6}));
  // x[:, 4:0:-2] on 6 columns: columns 4, 2.
  EXPECT_EQ(OutShape(OneOp("Slice", {{{4, 6}}}, SliceAttrs({1}, {4}, {0}, {-2}))), Shape({4, 2}));
}

// An ints attribute that is set but holds no values.
proto::AttrValue EmptyInts() {
  proto::AttrValue v;
  v.mutable_ints();
  return v;
}

TEST(LayoutShapeTest, SliceRejectsEachBadAttribute) {
  struct Bad {
    AttrList attrs;
    std::string message;
  };
  const std::vector<Bad> cases = {
      {{{"axes", EmptyInts()}, {"starts", EmptyInts()}, {"ends", EmptyInts()}},
       "needs at least one axis"},
      {SliceAttrs({0, 1}, {0}, {1, 1}), "have 2, 1, 2, 0 values"},
      {SliceAttrs({0}, {0}, {1}, {1, 1}), "have 1, 1, 1, 2 values"},
      {SliceAttrs({3}, {0}, {1}), "attribute 'axes' [3] holds 3, outside [-3, 3) for input 'in0'"},
      {SliceAttrs({1, -2}, {0, 0}, {1, 1}), "attribute 'axes' [1,-2] names axis 1 twice"},
      {SliceAttrs({1}, {2}, {2}), "give [2, 2) on axis 1; needs 0 <= start < end <= 5"},
      {SliceAttrs({1}, {-1}, {2}), "give [-1, 2) on axis 1"},
      {SliceAttrs({2}, {0}, {7}), "needs 0 <= start < end <= 6 (dim 2 of input 'in0' [4,5,6])"},
      {SliceAttrs({0}, {0}, {4}, {0}), "attribute 'steps' [0] has 0 for axis 0"},
      {SliceAttrs({1}, {5}, {-1}, {-1}),
       "give start 5, end -1 with step -1 on axis 1; a negative step needs -1 <= end < start < 5"},
      {SliceAttrs({1}, {2}, {3}, {-1}), "a negative step needs -1 <= end < start < 5"},
      {SliceAttrs({1}, {2}, {-2}, {-1}), "a negative step needs -1 <= end < start < 5"},
  };
  for (const Bad& c : cases) {
    auto g = OneOp("Slice", {{{4, 5, 6}}}, c.attrs);
    ASSERT_FALSE(g.ok()) << c.message;
    const std::string message(g.status().message());
    EXPECT_THAT(message, HasSubstr("node 'node' (Slice)"));
    EXPECT_THAT(message, HasSubstr(c.message));
  }
}

TEST(LayoutShapeTest, ReductionsKeepOrDropTheirAxes) {
  for (const char* op : {"ReduceSum", "ReduceMax", "ReduceMin"}) {
    EXPECT_EQ(OutShape(OneOp(op, {{{2, 3, 4}}}, {{"axes", IntsAttr({1, -1})}})), Shape({2, 1, 1}))
        << op;
    EXPECT_EQ(OutShape(OneOp(op, {{{2, 3, 4}}},
                             {{"axes", IntsAttr({-1, 0})}, {"keepdims", BoolAttr(false)}})),
              Shape({3}))
        << op;
    // No axes: all of them.
    EXPECT_EQ(OutShape(OneOp(op, {{{2, 3}}}, {{"keepdims", BoolAttr(false)}})), Shape({})) << op;
    EXPECT_EQ(OutShape(OneOp(op, {{{2, 3}}})), Shape({1, 1})) << op;
  }
  struct Bad {
    AttrList attrs;
    std::string message;
  };
  for (const Bad& c : std::vector<Bad>{
           {{{"axes", IntsAttr({3})}}, "attribute 'axes' [3] holds 3, outside [-3, 3)"},
           {{{"axes", IntsAttr({1, -2})}}, "attribute 'axes' [1,-2] names axis 1 twice"},
       }) {
    auto g = OneOp("ReduceMax", {{{4, 5, 6}}}, c.attrs);
    ASSERT_FALSE(g.ok()) << c.message;
    EXPECT_THAT(g.status().message(), HasSubstr("node 'node' (ReduceMax)"));
    EXPECT_THAT(g.status().message(), HasSubstr(c.message));
  }
  auto ints = OneOp("ReduceSum", {{{4}, proto::DTYPE_INT64}});
  ASSERT_FALSE(ints.ok());
  EXPECT_THAT(ints.status().message(), HasSubstr("needs a floating-point type"));
}

TEST(LayoutShapeTest, ExpandBroadcastsToTheShape) {
  // vit's class_token.expand(8, -1, -1), with -1 resolved by the caller.
  EXPECT_EQ(OutShape(OneOp("Expand", {{{1, 1, 768}}}, {{"shape", IntsAttr({8, 1, 768})}})),
            Shape({8, 1, 768}));
  // New leading dims and a size-1 dim broadcast together.
  EXPECT_EQ(OutShape(OneOp("Expand", {{{3, 1}}}, {{"shape", IntsAttr({2, 3, 4})}})),
            Shape({2, 3, 4}));
}

TEST(LayoutShapeTest, ExpandRejectsShapesXDoesNotBroadcastTo) {
  struct Bad {
    std::vector<int64_t> shape;
    std::string message;
  };
  const std::vector<Bad> cases = {
      {{8, -1, 768}, "attribute 'shape' [8,-1,768] holds -1; every value must be positive"},
      {{768}, "attribute 'shape' [768] has 1 dims, fewer than input 'in0' [1,1,768]"},
      {{8, 2, 512}, "input 'in0' [1,1,768] does not broadcast to attribute 'shape' "
                    "[8,2,512]: its dim 2 is 768, needs 1 or 512"},
  };
  for (const Bad& c : cases) {
    auto g = OneOp("Expand", {{{1, 1, 768}}}, {{"shape", IntsAttr(c.shape)}});
    ASSERT_FALSE(g.ok()) << c.message;
    const std::string message(g.status().message());
    EXPECT_THAT(message, HasSubstr("node 'node' (Expand)"));
    EXPECT_THAT(message, HasSubstr(c.message));
  }
}

TEST(AttentionShapeTest, CausalSoftmaxNeedsSquareScores) {
  EXPECT_EQ(OutShape(OneOp("Softmax", {{{2, 4, 8, 8}}},
                           {{"causal", BoolAttr(true)}, {"scale", FloatAttr(0.125)}})),
            Shape({2, 4, 8, 8}));
  auto g = OneOp("Softmax", {{{2, 4, 8, 6}}}, {{"causal", BoolAttr(true)}});
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("square"));
}

TEST(EmbeddingShapeTest, AppendsTheEmbeddingWidth) {
  EXPECT_EQ(OutShape(OneOp("Embedding", {{{2, 5}, proto::DTYPE_INT64}, {{100, 16}}})),
            Shape({2, 5, 16}));
}

TEST(LossShapeTest, SoftmaxCrossEntropyIsAScalar) {
  EXPECT_EQ(OutShape(OneOp("SoftmaxCrossEntropy", {{{8, 10}}, {{8}, proto::DTYPE_INT64}})),
            Shape({}));
  EXPECT_EQ(OutShape(OneOp("SoftmaxCrossEntropy",
                           {{{2, 5, 100}}, {{2, 5}, proto::DTYPE_INT32}})),
            Shape({}));
  auto g = OneOp("SoftmaxCrossEntropy", {{{8, 10}}, {{4}, proto::DTYPE_INT64}});
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("input 'in1' has shape [4], needs [8]"));
}

TEST(LossShapeTest, PixelSoftmaxCrossEntropyReadsClassesOnAxisOne) {
  EXPECT_EQ(OutShape(OneOp("PixelSoftmaxCrossEntropy",
                           {{{2, 21, 64, 64}}, {{2, 64, 64}, proto::DTYPE_INT64}},
                           {{"ignore_index", IntAttr(255)}})),
            Shape({}));
  auto g =
      OneOp("PixelSoftmaxCrossEntropy", {{{2, 21, 64, 64}}, {{2, 21, 64}, proto::DTYPE_INT64}});
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("input 'in1' has shape [2,21,64], needs [2,64,64]"));
}

TEST(DTypeInferenceTest, OutputsTakeTheFloatInputsType) {
  auto g = OneOp("ReLU", {{{4}, proto::DTYPE_BFLOAT16}});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->tensor(g->FindTensor("out0")).dtype, proto::DTYPE_BFLOAT16);
  auto e = OneOp("Embedding", {{{3}, proto::DTYPE_INT32}, {{10, 4}, proto::DTYPE_FLOAT16}});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->tensor(e->FindTensor("out0")).dtype, proto::DTYPE_FLOAT16);
}

TEST(ConvTranspose2DShapeTest, StridedGroupedWithOutputPadding) {
  // torch: nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1, groups=2) on
  // [2, 8, 5, 7] gives [2, 6, 10, 14]; its weight is [8, 3, 3, 3].
  EXPECT_EQ(OutShape(OneOp("ConvTranspose2D", {{{2, 8, 5, 7}}, {{8, 3, 3, 3}}, {{6}}},
                           {{"stride", IntsAttr({2, 2})},
                            {"padding", IntsAttr({1, 1})},
                            {"output_padding", IntsAttr({1, 1})},
                            {"groups", IntAttr(2)}})),
            Shape({2, 6, 10, 14}));
  // nn.ConvTranspose2d(4, 2, (2, 3), dilation=(2, 1), output_padding=(1, 0)): output padding
  // below the dilation, not the stride.
  EXPECT_EQ(OutShape(OneOp("ConvTranspose2D", {{{1, 4, 4, 4}}, {{4, 2, 2, 3}}},
                           {{"dilation", IntsAttr({2, 1})}, {"output_padding", IntsAttr({1, 0})}})),
            Shape({1, 2, 7, 6}));
}

TEST(ConvTranspose2DShapeTest, ErrorsNameTheFault) {
  auto bad_out_pad = OneOp("ConvTranspose2D", {{{1, 4, 4, 4}}, {{4, 2, 3, 3}}},
                           {{"stride", IntsAttr({2, 2})}, {"output_padding", IntsAttr({2, 0})}});
  ASSERT_FALSE(bad_out_pad.ok());
  EXPECT_THAT(bad_out_pad.status().message(), HasSubstr("node 'node' (ConvTranspose2D)"));
  EXPECT_THAT(bad_out_pad.status().message(),
              HasSubstr("'output_padding' [2,0] must be smaller than either stride [2,2]"));
  auto bad_weight = OneOp("ConvTranspose2D", {{{1, 4, 4, 4}}, {{2, 4, 3, 3}}});
  ASSERT_FALSE(bad_weight.ok());
  EXPECT_THAT(bad_weight.status().message(), HasSubstr("dim 0 must be the input channels 4"));
  auto bad_bias = OneOp("ConvTranspose2D", {{{1, 4, 4, 4}}, {{4, 3, 3, 3}}, {{4}}});
  ASSERT_FALSE(bad_bias.ok());
  EXPECT_THAT(bad_bias.status().message(), HasSubstr("input 'in2' has shape [4], needs [3]"));
  auto bad_groups =
      OneOp("ConvTranspose2D", {{{1, 4, 4, 4}}, {{4, 3, 3, 3}}}, {{"groups", IntAttr(3)}});
  ASSERT_FALSE(bad_groups.ok());
  EXPECT_THAT(bad_groups.status().message(), HasSubstr("attribute 'groups' is 3"));
  auto nothing_left =
      OneOp("ConvTranspose2D", {{{1, 4, 1, 1}}, {{4, 3, 1, 1}}}, {{"padding", IntsAttr({1, 1})}});
  ASSERT_FALSE(nothing_left.ok());
  EXPECT_THAT(nothing_left.status().message(), HasSubstr("leaves no output"));
}

TEST(ResizeShapeTest, SizesAndScaleFactors) {
  EXPECT_EQ(OutShape(OneOp("Resize", {{{2, 3, 5, 7}}},
                           {{"size", IntsAttr({10, 14})},
                            {"mode", StringAttr("bilinear")},
                            {"align_corners", BoolAttr(true)}})),
            Shape({2, 3, 10, 14}));
  // torch: F.interpolate([1, 1, 5, 7], scale_factor=1.5) is [1, 1, 7, 10].
  EXPECT_EQ(
      OutShape(OneOp(
          "Resize", {{{1, 1, 5, 7}}},
          {{"size", IntsAttr({7, 10})}, {"scale_h", FloatAttr(1.5)}, {"scale_w", FloatAttr(1.5)}})),
      Shape({1, 1, 7, 10}));
  // Downsampling too.
  EXPECT_EQ(OutShape(OneOp("Resize", {{{1, 1, 8, 8}}}, {{"size", IntsAttr({3, 5})}})),
            Shape({1, 1, 3, 5}));
}

TEST(ResizeShapeTest, ErrorsNameTheFault) {
  auto cubic = OneOp("Resize", {{{1, 1, 4, 4}}},
                     {{"size", IntsAttr({8, 8})}, {"mode", StringAttr("bicubic")}});
  ASSERT_FALSE(cubic.ok());
  EXPECT_THAT(cubic.status().message(), HasSubstr("node 'node' (Resize)"));
  EXPECT_THAT(cubic.status().message(),
              HasSubstr("attribute 'mode' is 'bicubic', needs 'nearest' or 'bilinear'"));
  auto corners = OneOp("Resize", {{{1, 1, 4, 4}}},
                       {{"size", IntsAttr({8, 8})}, {"align_corners", BoolAttr(true)}});
  ASSERT_FALSE(corners.ok());
  EXPECT_THAT(corners.status().message(), HasSubstr("mode 'nearest' has no corners"));
  auto bad_scale =
      OneOp("Resize", {{{1, 1, 5, 7}}}, {{"size", IntsAttr({8, 10})}, {"scale_h", FloatAttr(1.5)}});
  ASSERT_FALSE(bad_scale.ok());
  EXPECT_THAT(bad_scale.status().message(), HasSubstr("needs floor(5 * 1.5) = 7"));
  auto negative =
      OneOp("Resize", {{{1, 1, 5, 7}}}, {{"size", IntsAttr({8, 10})}, {"scale_w", FloatAttr(-2)}});
  ASSERT_FALSE(negative.ok());
  EXPECT_THAT(negative.status().message(), HasSubstr("'scale_w' is -2"));
  auto rank3 = OneOp("Resize", {{{1, 5, 7}}}, {{"size", IntsAttr({8, 10})}});
  ASSERT_FALSE(rank3.ok());
  EXPECT_THAT(rank3.status().message(), HasSubstr("has 3 dims [1,5,7], needs 4"));
  auto zero = OneOp("Resize", {{{1, 1, 5, 7}}}, {{"size", IntsAttr({0, 10})}});
  ASSERT_FALSE(zero.ok());
  EXPECT_THAT(zero.status().message(), HasSubstr("attribute 'size'"));
}

}  // namespace
}  // namespace headroom::graph
