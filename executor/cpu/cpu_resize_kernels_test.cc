// Resize's CPU kernels on small cases whose values are worked out by hand from PyTorch's
// definitions (//executor/cpu:upsample_parity_test compares against PyTorch itself).

#include <map>
#include <string>
#include <vector>

#include "executor/cpu/cpu_context.h"
#include "executor/cpu/cpu_kernels_testing.h"
#include "graph/graph_builder.h"
#include "graph/op_registry.h"
#include "gtest/gtest.h"

namespace headroom::executor::cpu {
namespace {

graph::Attrs MakeAttrs(std::map<std::string, proto::AttrValue> set) {
  for (const graph::AttrSpec& spec : graph::FindOp("Resize")->attrs) {
    if (set.count(spec.name) == 0 && !spec.required) set[spec.name] = spec.default_value;
  }
  return graph::Attrs(std::move(set));
}

class ResizeKernelsTest : public ::testing::Test {
 protected:
  ResizeKernelsTest() { RegisterResizeKernels(&table_); }

  // Returns y = Resize(x) of shape `ys`, run in exactly the scratch it declares.
  std::vector<float> Forward(const graph::Attrs& attrs, std::vector<float> x,
                             const graph::Shape& xs, const graph::Shape& ys) {
    std::vector<float> y(graph::NumElements(ys), -1.0f);
    ForwardArgs args;
    args.op = "Resize";
    args.attrs = &attrs;
    args.inputs = {TensorView{x.data(), xs}};
    args.outputs = {TensorView{y.data(), ys}};
    const absl::Status status = RunForwardInDeclaredScratch(ctx_, table_.at("Resize"), args);
    EXPECT_TRUE(status.ok()) << status;
    return y;
  }

  // Returns dx for dy, with x and y given as shapes only (the gradient rule reads neither).
  std::vector<float> Backward(const graph::Attrs& attrs, std::vector<float> dy,
                              const graph::Shape& xs, const graph::Shape& ys) {
    std::vector<float> dx(graph::NumElements(xs), -1.0f);
    BackwardArgs args;
    args.op = "Resize";
    args.attrs = &attrs;
    args.inputs = {TensorView{nullptr, xs}};
    args.outputs = {TensorView{nullptr, ys}};
    args.output_grads = {TensorView{dy.data(), ys}};
    args.input_grads = {TensorView{dx.data(), xs}};
    const absl::Status status = RunBackwardInDeclaredScratch(ctx_, table_.at("Resize"), args);
    EXPECT_TRUE(status.ok()) << status;
    return dx;
  }

  KernelTable table_;
  CpuContext ctx_;
};

TEST_F(ResizeKernelsTest, BilinearAlignCornersBlendsTheCorners) {
  // [[1, 2], [3, 4]] to 3x3 with the corners aligned: the middle row and column are means.
  const graph::Attrs attrs = MakeAttrs({{"size", graph::IntsAttr({3, 3})},
                                        {"mode", graph::StringAttr("bilinear")},
                                        {"align_corners", graph::BoolAttr(true)}});
  EXPECT_EQ(Forward(attrs, {1, 2, 3, 4}, {1, 1, 2, 2}, {1, 1, 3, 3}),
            (std::vector<float>{1, 1.5f, 2, 2, 2.5f, 3, 3, 3.5f, 4}));
  // dy all 1: each corner takes 1 + 2 * 0.5 + 0.25 = 2.25.
  EXPECT_EQ(Backward(attrs, std::vector<float>(9, 1.0f), {1, 1, 2, 2}, {1, 1, 3, 3}),
            (std::vector<float>{2.25f, 2.25f, 2.25f, 2.25f}));
}

TEST_F(ResizeKernelsTest, BilinearHalfPixelClampsAtTheEdges) {
  // [1, 3] to 4 wide (step 0.5): sources max(0.5 (o + 0.5) - 0.5, 0) = 0, 0.25, 0.75, 1.25;
  // the last clamps to pixel 1.
  const graph::Attrs attrs =
      MakeAttrs({{"size", graph::IntsAttr({1, 4})}, {"mode", graph::StringAttr("bilinear")}});
  EXPECT_EQ(Forward(attrs, {1, 3}, {1, 1, 1, 2}, {1, 1, 1, 4}),
            (std::vector<float>{1, 1.5f, 2.5f, 3}));
  // dx[0] = 1 + 0.75 * 2 + 0.25 * 3 = 3.25; dx[1] = 0.25 * 2 + 0.75 * 3 + 4 = 6.75.
  EXPECT_EQ(Backward(attrs, {1, 2, 3, 4}, {1, 1, 1, 2}, {1, 1, 1, 4}),
            (std::vector<float>{3.25f, 6.75f}));
}

TEST_F(ResizeKernelsTest, NearestFloorsAndSumsItsReaders) {
  // 3 to 5 (step 0.6): sources floor(0, 0.6, 1.2, 1.8, 2.4) = 0, 0, 1, 1, 2; down 4 to 2
  // (step 2): 0, 2.
  const graph::Attrs up = MakeAttrs({{"size", graph::IntsAttr({1, 5})}});
  EXPECT_EQ(Forward(up, {7, 8, 9}, {1, 1, 1, 3}, {1, 1, 1, 5}),
            (std::vector<float>{7, 7, 8, 8, 9}));
  EXPECT_EQ(Backward(up, {1, 2, 3, 4, 5}, {1, 1, 1, 3}, {1, 1, 1, 5}),
            (std::vector<float>{3, 7, 5}));
  const graph::Attrs down = MakeAttrs({{"size", graph::IntsAttr({1, 2})}});
  EXPECT_EQ(Forward(down, {1, 2, 3, 4}, {1, 1, 1, 4}, {1, 1, 1, 2}), (std::vector<float>{1, 3}));
  // Pixels no output reads get a zero gradient.
  EXPECT_EQ(Backward(down, {5, 6}, {1, 1, 1, 4}, {1, 1, 1, 2}), (std::vector<float>{5, 0, 6, 0}));
}

TEST_F(ResizeKernelsTest, AScaleFactorSetsTheStep) {
  // 5 to 7 by scale_factor 1.5: the step is 1 / 1.5, not 5 / 7. Output 1's source is
  // 1.5 / 1.5 - 0.5 = 0.5, halfway between pixels 0 and 1; by in / out it would be
  // 1.5 * 5 / 7 - 0.5 = 0.571.
  const graph::Attrs by_scale = MakeAttrs({{"size", graph::IntsAttr({1, 7})},
                                           {"mode", graph::StringAttr("bilinear")},
                                           {"scale_h", graph::FloatAttr(1.0)},
                                           {"scale_w", graph::FloatAttr(1.5)}});
  const std::vector<float> y = Forward(by_scale, {0, 2, 4, 6, 8}, {1, 1, 1, 5}, {1, 1, 1, 7});
  EXPECT_FLOAT_EQ(y[1], 1.0f);  // Halfway between 0 and 2.
  const graph::Attrs by_size =
      MakeAttrs({{"size", graph::IntsAttr({1, 7})}, {"mode", graph::StringAttr("bilinear")}});
  EXPECT_NEAR(Forward(by_size, {0, 2, 4, 6, 8}, {1, 1, 1, 5}, {1, 1, 1, 7})[1], 8.0 / 7, 1e-6);
}

}  // namespace
}  // namespace headroom::executor::cpu
