// ReduceSum, ReduceMax and ReduceMin against naive references over every axis set, and the
// ties of max and min sharing their gradient as PyTorch 1.13's amax and amin do.
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "executor/cpu/cpu_context.h"
#include "executor/cpu/cpu_kernels_testing.h"
#include "graph/graph_builder.h"
#include "graph/op_registry.h"
#include "gtest/gtest.h"

namespace headroom::executor::cpu {
namespace {

using graph::Shape;

struct Tensor {
  Shape shape;
  std::vector<float> values;

  explicit Tensor(Shape s) : shape(std::move(s)), values(graph::NumElements(shape)) {}
  TensorView view() { return TensorView{values.data(), shape, proto::DTYPE_FLOAT32}; }
};

Tensor Random(Shape s, uint32_t seed) {
  Tensor t(std::move(s));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (float& v : t.values) v = dist(rng);
  return t;
}

graph::Attrs ReduceAttrs(std::vector<int64_t> axes, bool keepdims) {
  proto::AttrValue a;
  a.mutable_ints();
  for (int64_t v : axes) a.mutable_ints()->add_values(v);
  return graph::Attrs(std::map<std::string, proto::AttrValue>{
      {"axes", a}, {"keepdims", graph::BoolAttr(keepdims)}});
}

class ReduceKernelsTest : public ::testing::Test {
 protected:
  ReduceKernelsTest() { RegisterReduceKernels(&table_); }

  absl::Status Forward(const std::string& op, const graph::Attrs& attrs, Tensor& x, Tensor& y) {
    ForwardArgs args;
    args.op = op;
    args.attrs = &attrs;
    args.inputs = {x.view()};
    args.outputs = {y.view()};
    return RunForwardInDeclaredScratch(ctx_, table_.at(op), args);
  }

  absl::Status Backward(const std::string& op, const graph::Attrs& attrs, Tensor& x, Tensor& y,
                        Tensor& dy, Tensor& dx) {
    BackwardArgs args;
    args.op = op;
    args.attrs = &attrs;
    args.inputs = {x.view()};
    args.outputs = {y.view()};
    args.output_grads = {dy.view()};
    args.input_grads = {dx.view()};
    return RunBackwardInDeclaredScratch(ctx_, table_.at(op), args);
  }

  KernelTable table_;
  CpuContext ctx_;
};

// For x [2,3,4], the output index of element (i, j, k) when the axes in `reduced` collapse.
int64_t OutIndex(const std::vector<bool>& reduced, int i, int j, int k) {
  const int idx[3] = {i, j, k};
  const int dims[3] = {2, 3, 4};
  int64_t o = 0;
  for (int d = 0; d < 3; ++d) {
    if (!reduced[d]) o = o * dims[d] + idx[d];
  }
  return o;
}

TEST_F(ReduceKernelsTest, EveryAxisSetMatchesANaiveReduction) {
  Tensor x = Random({2, 3, 4}, 1);
  for (int mask = 0; mask < 8; ++mask) {
    std::vector<int64_t> axes;
    std::vector<bool> reduced(3, mask == 0);
    Shape kept_dims, y_shape;
    for (int d = 0; d < 3; ++d) {
      if (mask & (1 << d)) {
        // Negative axes for odd masks: the same axes counted from the end.
        axes.push_back(mask % 2 ? d - 3 : d);
        reduced[d] = true;
      }
    }
    for (int d = 0; d < 3; ++d) y_shape.push_back(reduced[d] ? 1 : x.shape[d]);
    const graph::Attrs attrs = ReduceAttrs(axes, true);
    const int64_t outputs = graph::NumElements(y_shape);
    std::vector<double> sum(outputs, 0.0);
    std::vector<float> max(outputs, -INFINITY), min(outputs, INFINITY);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 4; ++k) {
          const int64_t o = OutIndex(reduced, i, j, k);
          const float v = x.values[(i * 3 + j) * 4 + k];
          sum[o] += v;
          max[o] = std::max(max[o], v);
          min[o] = std::min(min[o], v);
        }
    Tensor y(y_shape);
    ASSERT_TRUE(Forward("ReduceSum", attrs, x, y).ok()) << mask;
    for (int64_t o = 0; o < outputs; ++o) EXPECT_EQ(y.values[o], static_cast<float>(sum[o]));
    ASSERT_TRUE(Forward("ReduceMax", attrs, x, y).ok()) << mask;
    EXPECT_EQ(y.values, max) << mask;
    ASSERT_TRUE(Forward("ReduceMin", attrs, x, y).ok()) << mask;
    EXPECT_EQ(y.values, min) << mask;

    // ReduceSum's backward broadcasts dy back.
    Tensor dy = Random(y_shape, 2 + mask), dx = Random(x.shape, 20);
    ASSERT_TRUE(Backward("ReduceSum", attrs, x, y, dy, dx).ok());
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 4; ++k)
          ASSERT_EQ(dx.values[(i * 3 + j) * 4 + k], dy.values[OutIndex(reduced, i, j, k)]);
  }
}

TEST_F(ReduceKernelsTest, TiesShareTheGradientEvenly) {
  // Rows of x [3,4] reduced over the last axis: a max three times, twice, once.
  Tensor x({3, 4});
  x.values = {2, 2, 1, 2, 5, -1, 5, 0, 0.5f, -3, -3, 0.25f};
  Tensor y({3}), dy({3}), dx({3, 4});
  dy.values = {0.3f, -1.f, 2.f};
  const graph::Attrs attrs = ReduceAttrs({1}, false);
  ASSERT_TRUE(Forward("ReduceMax", attrs, x, y).ok());
  EXPECT_EQ(y.values, std::vector<float>({2, 5, 0.5f}));
  ASSERT_TRUE(Backward("ReduceMax", attrs, x, y, dy, dx).ok());
  const float a = 0.3f / 3.f, b = -1.f / 2.f;
  EXPECT_EQ(dx.values, std::vector<float>({a, a, 0, a, b, 0, b, 0, 2.f, 0, 0, 0}));
  // Every zero of a row is (dy / count) * 0: -0 where dy is negative, as PyTorch's.
  EXPECT_TRUE(std::signbit(dx.values[5]));
  EXPECT_FALSE(std::signbit(dx.values[2]));

  ASSERT_TRUE(Forward("ReduceMin", attrs, x, y).ok());
  EXPECT_EQ(y.values, std::vector<float>({1, -1, -3}));
  ASSERT_TRUE(Backward("ReduceMin", attrs, x, y, dy, dx).ok());
  EXPECT_EQ(dx.values, std::vector<float>({0, 0, 0.3f, 0, 0, -1.f, 0, 0, 0, 1.f, 1.f, 0}));
}

TEST_F(ReduceKernelsTest, MaxAndMinPropagateNaN) {
  Tensor x({2, 3});
  x.values = {1, std::numeric_limits<float>::quiet_NaN(), 3, -1, -2, -3};
  Tensor y({2});
  const graph::Attrs attrs = ReduceAttrs({-1}, false);
  ASSERT_TRUE(Forward("ReduceMax", attrs, x, y).ok());
  EXPECT_TRUE(std::isnan(y.values[0]));
  EXPECT_EQ(y.values[1], -1.f);
  ASSERT_TRUE(Forward("ReduceMin", attrs, x, y).ok());
  EXPECT_TRUE(std::isnan(y.values[0]));
  EXPECT_EQ(y.values[1], -3.f);
}

TEST_F(ReduceKernelsTest, RejectsAnOutputTheAttributesDoNotMake) {
  Tensor x = Random({2, 3}, 3), y({2, 1});
  const absl::Status s = Forward("ReduceSum", ReduceAttrs({1}, false), x, y);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("op 'ReduceSum': attributes 'axes' [1], 'keepdims' 0 do not reduce "
                             "input 'x' [2,3] to output 'y' [2,1]"),
            std::string::npos)
      << s;
}

}  // namespace
}  // namespace headroom::executor::cpu
