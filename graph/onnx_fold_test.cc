#include "graph/onnx_fold.h"

#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "graph/onnx_tensor.h"

namespace headroom::graph {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using TP = onnx::TensorProto;

onnx::NodeProto Node(const std::string& op, int inputs = 1) {
  onnx::NodeProto n;
  n.set_op_type(op);
  n.set_name("/" + op);
  for (int i = 0; i < inputs; ++i) n.add_input("in" + std::to_string(i));
  n.add_output("out");
  return n;
}

void SetInt(onnx::NodeProto& n, const std::string& name, int64_t v) {
  onnx::AttributeProto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

// Folds `n` on `inputs` at opset 17; fails the test on an error.
OnnxTensor Fold(const onnx::NodeProto& n, const std::vector<const OnnxTensor*>& inputs) {
  absl::StatusOr<std::vector<OnnxTensor>> out = FoldOnnxNode(n, inputs, 17);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? (*out)[0] : OnnxTensor();
}

TEST(OnnxFoldTest, ShapeArithmeticAsTorchExportsIt) {
  // shape[0] of [8, 3, 224, 224], unsqueezed and joined with [-1]: Reshape's target.
  const OnnxTensor shape = OnnxTensor::Ints({8, 3, 224, 224}, {4});
  const OnnxTensor zero = OnnxTensor::Ints({0}, {});
  const OnnxTensor batch = Fold(Node("Gather", 2), {&shape, &zero});
  EXPECT_THAT(batch.shape(), ElementsAre());
  EXPECT_EQ(batch.int_at(0), 8);
  const OnnxTensor axes = OnnxTensor::Ints({0}, {1});
  const OnnxTensor vec = Fold(Node("Unsqueeze", 2), {&batch, &axes});
  const OnnxTensor minus_one = OnnxTensor::Ints({-1}, {1});
  onnx::NodeProto concat = Node("Concat", 2);
  SetInt(concat, "axis", 0);
  const OnnxTensor target = Fold(concat, {&vec, &minus_one});
  EXPECT_THAT(target.ints(), ElementsAre(8, -1));
  EXPECT_THAT(*OnnxReshapeTarget({8, 3, 224, 224}, target.ints(), false),
              ElementsAre(8, 3 * 224 * 224));
  EXPECT_THAT(*OnnxReshapeTarget({8, 3, 4}, {0, -1}, false), ElementsAre(8, 12));
  EXPECT_FALSE(OnnxReshapeTarget({8, 3}, {-1, -1}, false).ok());
  EXPECT_FALSE(OnnxReshapeTarget({8, 3}, {5, -1}, false).ok());
}

TEST(OnnxFoldTest, IntegerDivisionModAndCast) {
  const OnnxTensor c = OnnxTensor::Ints({116}, {});
  const OnnxTensor two = OnnxTensor::Ints({2}, {});
  EXPECT_EQ(Fold(Node("Div", 2), {&c, &two}).int_at(0), 58);
  // Mod follows the divisor's sign unless fmod is set (Python's % against C's fmod).
  const OnnxTensor a = OnnxTensor::Ints({-7}, {});
  const OnnxTensor seven = OnnxTensor::Ints({3}, {});
  EXPECT_EQ(Fold(Node("Mod", 2), {&a, &seven}).int_at(0), 2);
  onnx::NodeProto fmod = Node("Mod", 2);
  SetInt(fmod, "fmod", 1);
  EXPECT_EQ(Fold(fmod, {&a, &seven}).int_at(0), -1);
  onnx::NodeProto cast = Node("Cast");
  SetInt(cast, "to", TP::FLOAT);
  const OnnxTensor f = Fold(cast, {&c});
  EXPECT_TRUE(f.is_float());
  EXPECT_EQ(f.float_at(0), 116.0);
  const OnnxTensor half = OnnxTensor::Floats({-0.5}, {});
  const OnnxTensor p = Fold(Node("Pow", 2), {&f, &half});
  EXPECT_NEAR(p.float_at(0), 1.0 / std::sqrt(116.0), 1e-12);
}

TEST(OnnxFoldTest, SliceTakesOnnxRangesNegativeStepsAndInt64Ends) {
  const OnnxTensor x = OnnxTensor::Ints({0, 1, 2, 3, 4, 5}, {6});
  const OnnxTensor start = OnnxTensor::Ints({-1}, {1});
  const OnnxTensor end = OnnxTensor::Ints({std::numeric_limits<int64_t>::min() + 1}, {1});
  const OnnxTensor axis = OnnxTensor::Ints({0}, {1});
  const OnnxTensor back = OnnxTensor::Ints({-1}, {1});
  EXPECT_THAT(Fold(Node("Slice", 5), {&x, &start, &end, &axis, &back}).ints(),
              ElementsAre(5, 4, 3, 2, 1, 0));
  const OnnxTensor one = OnnxTensor::Ints({1}, {1});
  const OnnxTensor big = OnnxTensor::Ints({std::numeric_limits<int64_t>::max()}, {1});
  const OnnxTensor two = OnnxTensor::Ints({2}, {1});
  EXPECT_THAT(Fold(Node("Slice", 5), {&x, &one, &big, &axis, &two}).ints(), ElementsAre(1, 3, 5));
  // Without axes and steps.
  EXPECT_THAT(Fold(Node("Slice", 3), {&x, &one, &two}).ints(), ElementsAre(1));
  EXPECT_EQ(NormalizeSliceRange(6, 0, 6, 0).status().code(), absl::StatusCode::kInvalidArgument);
  const SliceRange r = *NormalizeSliceRange(56, 0, std::numeric_limits<int64_t>::max(), 2);
  EXPECT_EQ(r.start, 0);
  EXPECT_EQ(r.count, 28);
}

TEST(OnnxFoldTest, ExpandsTheClassTokenShapeAsVitWritesIt) {
  // vit: shape [B, -1, -1] -> Where(Equal(shape, -1), ones, shape) -> Expand.
  const OnnxTensor shape = OnnxTensor::Ints({4, -1, -1}, {3});
  const OnnxTensor dims = OnnxTensor::Ints({3}, {1});
  onnx::NodeProto cos = Node("ConstantOfShape");
  onnx::AttributeProto* value = cos.add_attribute();
  value->set_name("value");
  value->set_type(onnx::AttributeProto::TENSOR);
  value->mutable_t()->set_data_type(TP::INT64);
  value->mutable_t()->add_dims(1);
  value->mutable_t()->add_int64_data(1);
  const OnnxTensor ones = Fold(cos, {&dims});
  EXPECT_THAT(ones.ints(), ElementsAre(1, 1, 1));
  const OnnxTensor minus = OnnxTensor::Ints({-1}, {});
  const OnnxTensor mask = Fold(Node("Equal", 2), {&shape, &minus});
  EXPECT_EQ(mask.type(), TP::BOOL);
  const OnnxTensor target = Fold(Node("Where", 3), {&mask, &ones, &shape});
  EXPECT_THAT(target.ints(), ElementsAre(4, 1, 1));
  const OnnxTensor token = OnnxTensor::Floats({0.5, -1.5}, {1, 1, 2});
  const OnnxTensor expanded = Fold(Node("Expand", 2), {&token, &target});
  EXPECT_THAT(expanded.shape(), ElementsAre(4, 1, 2));
  EXPECT_THAT(expanded.floats(), ElementsAre(0.5, -1.5, 0.5, -1.5, 0.5, -1.5, 0.5, -1.5));
}

TEST(OnnxFoldTest, ScatterRangeTransposeAndNot) {
  // swin's mask: zeros, then a slice of rows set by ScatterND.
  const OnnxTensor zeros = OnnxTensor::Floats(std::vector<double>(6, 0.0), {3, 2});
  const OnnxTensor rows = OnnxTensor::Ints({2, 0}, {2, 1});
  const OnnxTensor updates = OnnxTensor::Floats({7, 8, 9, 10}, {2, 2});
  EXPECT_THAT(Fold(Node("ScatterND", 3), {&zeros, &rows, &updates}).floats(),
              ElementsAre(9, 10, 0, 0, 7, 8));
  const OnnxTensor lo = OnnxTensor::Ints({0}, {}), hi = OnnxTensor::Ints({7}, {}),
                   step = OnnxTensor::Ints({3}, {});
  EXPECT_THAT(Fold(Node("Range", 3), {&lo, &hi, &step}).ints(), ElementsAre(0, 3, 6));
  const OnnxTensor m = OnnxTensor::Ints({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_THAT(Fold(Node("Transpose"), {&m}).ints(), ElementsAre(1, 4, 2, 5, 3, 6));
  const OnnxTensor b = OnnxTensor::Ints({0, 1}, {2}, TP::BOOL);
  EXPECT_THAT(Fold(Node("Not"), {&b}).ints(), ElementsAre(1, 0));
}

TEST(OnnxFoldTest, ErrorsNameTheNode) {
  const OnnxTensor x = OnnxTensor::Ints({1, 2, 3}, {3});
  const OnnxTensor y = OnnxTensor::Ints({1, 2}, {2});
  absl::StatusOr<std::vector<OnnxTensor>> out = FoldOnnxNode(Node("Add", 2), {&x, &y}, 17);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("node '/Add' (Add)"));
  EXPECT_THAT(out.status().message(), HasSubstr("do not broadcast"));
  const OnnxTensor idx = OnnxTensor::Ints({5}, {});
  out = FoldOnnxNode(Node("Gather", 2), {&x, &idx}, 17);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("index 5 is outside axis 0"));
  EXPECT_FALSE(IsFoldableOnnxOp("Conv"));
  EXPECT_TRUE(IsFoldableOnnxOp("ScatterND"));
}

}  // namespace
}  // namespace headroom::graph
