// Tests of the loop kernels (cpu_loop_kernels.cc) against naive references: forward values,
// in-place aliasing, dropout replay, broadcasting gradients, cross entropy, optimizer steps,
// and independence from the OpenMP thread count. Gradients of every op against finite
// differences are in gradient_check_test.cc.

#include <omp.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "executor/cpu/cpu_context.h"
#include "executor/cpu/cpu_kernels_testing.h"
#include "graph/op_registry.h"
#include "graph/graph_builder.h"
#include "gtest/gtest.h"

namespace headroom::executor::cpu {
namespace {

using graph::Shape;

// A tensor owning its bytes, with a view onto them.
struct Tensor {
  Shape shape;
  proto::DType dtype = proto::DTYPE_FLOAT32;
  std::vector<uint8_t> bytes;

  Tensor() = default;
  Tensor(Shape s, proto::DType t = proto::DTYPE_FLOAT32)
      : shape(std::move(s)), dtype(t), bytes(graph::NumElements(shape) * graph::DTypeSize(t)) {}
  static Tensor Of(Shape s, const std::vector<float>& values) {
    Tensor t(std::move(s));
    EXPECT_EQ(values.size(), t.size());
    std::memcpy(t.bytes.data(), values.data(), values.size() * sizeof(float));
    return t;
  }
  size_t size() const { return graph::NumElements(shape); }
  float* f() { return reinterpret_cast<float*>(bytes.data()); }
  std::vector<float> values() const {
    std::vector<float> v(size());
    std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
    return v;
  }
  TensorView view() { return TensorView{bytes.data(), shape, dtype}; }
  // A view with shape and dtype but no data.
  TensorView absent() const { return TensorView{nullptr, shape, dtype}; }
};

Tensor Random(Shape s, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  Tensor t(std::move(s));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (size_t i = 0; i < t.size(); ++i) t.f()[i] = dist(rng);
  return t;
}

Tensor Ids(Shape s, const std::vector<int64_t>& values, proto::DType dtype) {
  Tensor t(std::move(s), dtype);
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == proto::DTYPE_INT32) {
      reinterpret_cast<int32_t*>(t.bytes.data())[i] = static_cast<int32_t>(values[i]);
    } else {
      reinterpret_cast<int64_t*>(t.bytes.data())[i] = values[i];
    }
  }
  return t;
}

using graph::BoolAttr;
using graph::FloatAttr;
using graph::IntAttr;
using graph::IntsAttr;
using graph::StringAttr;

// The op's attributes: its schema's defaults with `set` on top.
graph::Attrs MakeAttrs(const std::string& op, std::map<std::string, proto::AttrValue> set = {}) {
  const graph::OpSchema* schema = graph::FindOp(op);
  EXPECT_NE(schema, nullptr) << op;
  for (const graph::AttrSpec& spec : schema->attrs) {
    if (set.count(spec.name) == 0 && !spec.required) set[spec.name] = spec.default_value;
  }
  return graph::Attrs(std::move(set));
}

class LoopKernelsTest : public ::testing::Test {
 protected:
  LoopKernelsTest() { RegisterLoopKernels(&table_); }

  absl::Status Forward(const std::string& op, const graph::Attrs& attrs,
                       std::vector<TensorView> inputs, std::vector<TensorView> outputs,
                       std::vector<TensorView> saved = {}, bool training = true,
                       uint64_t seed = 0) {
    ForwardArgs args;
    args.op = op;
    args.attrs = &attrs;
    args.inputs = std::move(inputs);
    args.outputs = std::move(outputs);
    args.saved = std::move(saved);
    args.training = training;
    args.seed = seed;
    EXPECT_TRUE(table_.contains(op)) << op;
    return RunForwardInDeclaredScratch(ctx_, table_.at(op), args);
  }

  absl::Status Backward(const std::string& op, const graph::Attrs& attrs,
                        std::vector<TensorView> inputs, std::vector<TensorView> outputs,
                        std::vector<TensorView> saved, std::vector<TensorView> output_grads,
                        std::vector<TensorView> input_grads) {
    BackwardArgs args;
    args.op = op;
    args.attrs = &attrs;
    args.inputs = std::move(inputs);
    args.outputs = std::move(outputs);
    args.saved = std::move(saved);
    args.output_grads = std::move(output_grads);
    args.input_grads = std::move(input_grads);
    // Each kernel runs in exactly the scratch it declares (cpu_kernels_testing.h).
    return RunBackwardInDeclaredScratch(ctx_, table_.at(op), args);
  }

  KernelTable table_;
  CpuContext ctx_;
};

void ExpectNear(const std::vector<float>& actual, const std::vector<double>& expected, double tol,
                const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], tol * (1 + std::fabs(expected[i]))) << what << " at " << i;
  }
}

TEST_F(LoopKernelsTest, RegistersEveryNonDnnlOp) {
  for (const char* op : {"ReLU",      "ReLU6",     "HardSigmoid", "HardSwish",
                         "LeakyReLU", "ELU",       "SELU",        "Softplus",
                         "Sqrt",      "Erf",       "Mish",        "Sigmoid",
                         "Tanh",      "GELU",      "Dropout",     "Add",
                         "Mul",       "LayerNorm", "Flatten",     "Reshape",
                         "Transpose", "Slice",     "Expand",      "Concat",
                         "Split",     "Softmax",   "Embedding",   "SoftmaxCrossEntropy"}) {
    ASSERT_TRUE(table_.contains(op)) << op;
    EXPECT_NE(table_.at(op).forward, nullptr) << op;
    EXPECT_NE(table_.at(op).backward, nullptr) << op;
  }
}

// ---- Eltwise ------------------------------------------------------------------------------

struct EltwiseCase {
  std::string op;
  std::string approximate;  // GELU only.
  double (*f)(double);
  double (*df)(double);  // Derivative in x.
  bool from_y = true;    // The gradient rule reads y, not x.
};

double GeluErf(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double GeluTanhInner(double x) { return std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x); }
double GeluTanh(double x) { return 0.5 * x * (1 + std::tanh(GeluTanhInner(x))); }
constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
constexpr double kSeluGamma = 1.0507009873554804934193349852946;
double Selu(double x) { return kSeluGamma * (x > 0 ? x : kSeluAlpha * std::expm1(x)); }
double Mish(double x) { return x * std::tanh(std::log1p(std::exp(x))); }

std::vector<EltwiseCase> EltwiseCases() {
  return {
      {"ReLU", "", [](double x) { return x > 0 ? x : 0; },
       [](double x) { return x > 0 ? 1.0 : 0.0; }},
      {"ReLU6", "", [](double x) { return std::min(std::max(x, 0.0), 6.0); },
       [](double x) { return x > 0 && x < 6 ? 1.0 : 0.0; }},
      {"Sigmoid", "", [](double x) { return 1 / (1 + std::exp(-x)); },
       [](double x) {
         const double s = 1 / (1 + std::exp(-x));
         return s * (1 - s);
       }},
      {"Tanh", "", [](double x) { return std::tanh(x); },
       [](double x) { return 1 - std::tanh(x) * std::tanh(x); }},
      {"GELU", "none", GeluErf,
       [](double x) { return (GeluErf(x + 1e-5) - GeluErf(x - 1e-5)) / 2e-5; }, false},
      {"GELU", "tanh", GeluTanh,
       [](double x) { return (GeluTanh(x + 1e-5) - GeluTanh(x - 1e-5)) / 2e-5; }, false},
      {"HardSigmoid", "", [](double x) { return std::min(std::max(x / 6 + 0.5, 0.0), 1.0); },
       [](double x) { return x > -3 && x < 3 ? 1.0 / 6 : 0.0; }},
      {"HardSwish", "", [](double x) { return x * std::min(std::max(x + 3, 0.0), 6.0) / 6; },
       [](double x) { return x < -3 ? 0.0 : x <= 3 ? x / 3 + 0.5 : 1.0; }, false},
      // The activations imported from ONNX, at their defaults.
      {"LeakyReLU", "", [](double x) { return x > 0 ? x : 0.01 * x; },
       [](double x) { return x > 0 ? 1.0 : 0.01; }, false},
      {"ELU", "", [](double x) { return x > 0 ? x : std::expm1(x); },
       [](double x) { return x > 0 ? 1.0 : std::exp(x); }, false},
      {"SELU", "", Selu,
       [](double x) { return kSeluGamma * (x > 0 ? 1.0 : kSeluAlpha * std::exp(x)); }, false},
      {"Softplus", "", [](double x) { return std::log1p(std::exp(x)); },
       [](double x) { return 1 / (1 + std::exp(-x)); }, false},
      {"Erf", "", [](double x) { return std::erf(x); },
       [](double x) { return 2 / std::sqrt(M_PI) * std::exp(-x * x); }, false},
      {"Mish", "", Mish, [](double x) { return (Mish(x + 1e-5) - Mish(x - 1e-5)) / 2e-5; }, false},
  };
}

TEST_F(LoopKernelsTest, EltwiseMatchesReferenceAndRunsInPlace) {
  for (const EltwiseCase& c : EltwiseCases()) {
    SCOPED_TRACE(c.op + " " + c.approximate);
    graph::Attrs attrs = c.op == "GELU"
                             ? MakeAttrs(c.op, {{"approximate", StringAttr(c.approximate)}})
                             : MakeAttrs(c.op);
    Tensor x = Random({3, 5, 7}, 1, -8.f, 8.f);
    Tensor y(x.shape);
    ASSERT_TRUE(Forward(c.op, attrs, {x.view()}, {y.view()}).ok());
    std::vector<double> want_y, want_dx;
    Tensor dy = Random(x.shape, 2);
    for (size_t i = 0; i < x.size(); ++i) {
      want_y.push_back(c.f(x.f()[i]));
      want_dx.push_back(c.df(x.f()[i]) * dy.f()[i]);
    }
    ExpectNear(y.values(), want_y, 1e-5, "y");

    // Backward out of place, given only what the gradient rule reads.
    const bool from_y = c.from_y;
    Tensor dx(x.shape);
    ASSERT_TRUE(Backward(c.op, attrs, {from_y ? x.absent() : x.view()},
                         {from_y ? y.view() : y.absent()}, {}, {dy.view()}, {dx.view()})
                    .ok());
    ExpectNear(dx.values(), want_dx, 1e-4, "dx");

    // In place: y over x, then dx over dy; bitwise the same results.
    Tensor xy = x;
    ASSERT_TRUE(Forward(c.op, attrs, {xy.view()}, {xy.view()}).ok());
    EXPECT_EQ(xy.values(), y.values());
    Tensor g = dy;
    ASSERT_TRUE(Backward(c.op, attrs, {from_y ? x.absent() : x.view()},
                         {from_y ? y.view() : y.absent()}, {}, {g.view()}, {g.view()})
                    .ok());
    EXPECT_EQ(g.values(), dx.values());
  }
}

// PyTorch's float formulas, operation for operation (aten's hardswish, hardswish_backward,
// hardsigmoid; HardSigmoid as ONNX writes it, alpha * x + beta).
float TorchHardSwish(float x) { return x * std::min(std::max(x + 3.f, 0.f), 6.f) / 6.f; }
float TorchHardSwishGrad(float dy, float x) {
  return x < -3.f ? 0.f : x <= 3.f ? dy * (x / 3.f + 0.5f) : dy;
}

TEST_F(LoopKernelsTest, HardActivationsMatchPyTorchBitwiseAndAtTheirKinks) {
  // The kinks and their neighbours, and values far out.
  const std::vector<float> xs = {-100.f, -3.5f, std::nextafter(-3.f, -4.f), -3.f,
                                 std::nextafter(-3.f, 0.f), -1.5f, 0.f, 1.f,
                                 std::nextafter(3.f, 0.f), 3.f, std::nextafter(3.f, 4.f), 7.f};
  const int64_t n = static_cast<int64_t>(xs.size());
  Tensor x = Tensor::Of({n}, xs), dy = Random({n}, 40);
  Tensor y({n}), dx({n});
  graph::Attrs swish = MakeAttrs("HardSwish");
  ASSERT_TRUE(Forward("HardSwish", swish, {x.view()}, {y.view()}).ok());
  ASSERT_TRUE(
      Backward("HardSwish", swish, {x.view()}, {y.absent()}, {}, {dy.view()}, {dx.view()}).ok());
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(y.f()[i], TorchHardSwish(xs[i])) << "x = " << xs[i];
    EXPECT_EQ(dx.f()[i], TorchHardSwishGrad(dy.f()[i], xs[i])) << "x = " << xs[i];
  }
  // At the kinks PyTorch takes the middle piece: x / 3 + 1/2 at both -3 and 3.
  EXPECT_EQ(dx.f()[3], dy.f()[3] * -0.5f);
  EXPECT_EQ(dx.f()[9], dy.f()[9] * 1.5f);
  EXPECT_EQ(dx.f()[2], 0.f);
  EXPECT_EQ(dx.f()[10], dy.f()[10]);

  // HardSigmoid with ONNX's alpha 0.2: y = clamp(0.2 x + 0.5), dx = 0.2 dy only where
  // 0 < y < 1 (x in (-2.5, 2.5)), read from y.
  graph::Attrs sigmoid = MakeAttrs("HardSigmoid", {{"alpha", FloatAttr(0.2)}});
  ASSERT_TRUE(Forward("HardSigmoid", sigmoid, {x.view()}, {y.view()}).ok());
  ASSERT_TRUE(Backward("HardSigmoid", sigmoid, {x.absent()}, {y.view()}, {}, {dy.view()},
                       {dx.view()})
                  .ok());
  for (int64_t i = 0; i < n; ++i) {
    const float want = std::min(std::max(0.2f * xs[i] + 0.5f, 0.f), 1.f);
    EXPECT_EQ(y.f()[i], want) << "x = " << xs[i];
    EXPECT_EQ(dx.f()[i], want > 0.f && want < 1.f ? dy.f()[i] * 0.2f : 0.f) << "x = " << xs[i];
  }
  EXPECT_EQ(y.f()[3], 0.f);   // x = -3: clipped, no gradient.
  EXPECT_EQ(dx.f()[3], 0.f);
  EXPECT_EQ(y.f()[6], 0.5f);  // x = 0.
  EXPECT_EQ(dx.f()[6], dy.f()[6] * 0.2f);
}

// What one unary forward and backward gave.
struct UnaryRun {
  std::vector<float> y, dx;
};

TEST_F(LoopKernelsTest, PReluPerChannelTakesTheSlopeAtZero) {
  // x[1, 2, 3] with slope [2, 1]: channel 0's slope 0.25, channel 1's 0.5. PyTorch 1.13
  // (F.prelu): y = 0 * slope at x = 0, dx = slope * dy there, dslope sums x * dy for x <= 0.
  const Shape xs = {1, 2, 3}, ss = {2, 1};
  Tensor x(xs), slope(ss), y(xs), dy(xs);
  const std::vector<float> xv = {-2, 0, 3, -1, -0.f, 4}, dyv = {1, 2, 3, 4, 5, 6};
  std::copy(xv.begin(), xv.end(), x.f());
  std::copy(dyv.begin(), dyv.end(), dy.f());
  slope.f()[0] = 0.25f;
  slope.f()[1] = 0.5f;
  graph::Attrs attrs = MakeAttrs("PReLU");
  ASSERT_TRUE(Forward("PReLU", attrs, {x.view(), slope.view()}, {y.view()}).ok());
  EXPECT_EQ(y.values(), (std::vector<float>{-0.5f, 0, 3, -0.5f, -0.f, 4}));
  Tensor dx(xs), ds(ss);
  ASSERT_TRUE(Backward("PReLU", attrs, {x.view(), slope.view()}, {y.absent()}, {}, {dy.view()},
                       {dx.view(), ds.view()})
                  .ok());
  EXPECT_EQ(dx.values(), (std::vector<float>{0.25f, 0.5f, 3, 2, 2.5f, 6}));
  EXPECT_EQ(ds.values(), (std::vector<float>{-2, -4}));  // -2 * 1 + 0 * 2; -1 * 4 + -0 * 5.
  // In place: dx over dy, the slope's gradient read from dy first.
  Tensor g = dy, ds2(ss);
  ASSERT_TRUE(Backward("PReLU", attrs, {x.view(), slope.view()}, {y.absent()}, {}, {g.view()},
                       {g.view(), ds2.view()})
                  .ok());
  EXPECT_EQ(g.values(), dx.values());
  EXPECT_EQ(ds2.values(), ds.values());
}

TEST_F(LoopKernelsTest, OnnxActivationsTakePyTorchsSideAtTheirKinks) {
  // Runs op's forward on xs and its backward (reading x, or y where `from_y`) on dy.
  auto RunUnary = [this](const std::string& op, const graph::Attrs& attrs,
                         const std::vector<float>& xs, const std::vector<float>& dys,
                         bool from_y = false) {
    const int64_t n = static_cast<int64_t>(xs.size());
    Tensor x = Tensor::Of({n}, xs), dy = Tensor::Of({n}, dys);
    Tensor y({n}), dx({n});
    EXPECT_TRUE(Forward(op, attrs, {x.view()}, {y.view()}).ok());
    EXPECT_TRUE(Backward(op, attrs, {from_y ? x.absent() : x.view()},
                         {from_y ? y.view() : y.absent()}, {}, {dy.view()}, {dx.view()})
                    .ok());
    return UnaryRun{y.values(), dx.values()};
  };
  const std::vector<float> xs = {-1.f, -0.f, 0.f, 1e-30f, 2.f};
  const std::vector<float> dy = {1.f, 1.f, 1.f, 1.f, 1.f};
  // LeakyReLU: x > 0 is the identity; at 0 (either sign) the gradient is alpha.
  UnaryRun leaky =
      RunUnary("LeakyReLU", MakeAttrs("LeakyReLU", {{"alpha", FloatAttr(0.2)}}), xs, dy);
  EXPECT_EQ(leaky.y, (std::vector<float>{-0.2f, -0.f, 0.f, 1e-30f, 2.f}));
  EXPECT_EQ(leaky.dx, (std::vector<float>{0.2f, 0.2f, 0.2f, 1.f, 1.f}));
  // ELU: at 0 the gradient is alpha exp(0) = alpha (PyTorch's x <= 0 branch).
  UnaryRun elu = RunUnary("ELU", MakeAttrs("ELU", {{"alpha", FloatAttr(0.5)}}), xs, dy);
  EXPECT_FLOAT_EQ(elu.y[0], 0.5f * (std::exp(-1.f) - 1.f));
  EXPECT_EQ(elu.y[2], 0.f);
  EXPECT_EQ(elu.dx[2], 0.5f);
  EXPECT_EQ(elu.dx[3], 1.f);
  // SELU: gamma on the right, gamma alpha exp(x) on the left, gamma alpha at 0.
  UnaryRun selu = RunUnary("SELU", MakeAttrs("SELU"), xs, dy);
  EXPECT_FLOAT_EQ(selu.y[4], 2 * kSeluGamma);
  EXPECT_FLOAT_EQ(selu.dx[2], kSeluGamma * kSeluAlpha);
  EXPECT_FLOAT_EQ(selu.dx[4], kSeluGamma);
  // Softplus: above threshold 20 it is x itself with gradient dy; below, log1p(exp(x)).
  UnaryRun softplus = RunUnary("Softplus", MakeAttrs("Softplus"), {-100.f, 0.f, 20.f, 20.5f, 1e4f},
                               {1.f, 1.f, 1.f, 1.f, 1.f});
  EXPECT_EQ(softplus.y[0], std::log1p(std::exp(-100.f)));
  EXPECT_FLOAT_EQ(softplus.y[1], std::log(2.f));
  EXPECT_EQ(softplus.y[2], std::log1p(std::exp(20.f)));  // Not above the threshold.
  EXPECT_EQ(softplus.y[3], 20.5f);
  EXPECT_EQ(softplus.y[4], 1e4f);  // No overflow.
  EXPECT_EQ(softplus.dx[1], 0.5f);
  EXPECT_EQ(softplus.dx[3], 1.f);
  EXPECT_EQ(softplus.dx[4], 1.f);
  // Sqrt reads y: dy / (2 y); infinite at 0, NaN below, as PyTorch's.
  UnaryRun sqrt = RunUnary("Sqrt", MakeAttrs("Sqrt"), {4.f, 0.25f, 0.f, -1.f}, {1.f, 3.f, 1.f, 1.f},
                           /*from_y=*/true);
  EXPECT_EQ(sqrt.y[0], 2.f);
  EXPECT_EQ(sqrt.y[1], 0.5f);
  EXPECT_EQ(sqrt.dx[0], 0.25f);
  EXPECT_EQ(sqrt.dx[1], 3.f);
  EXPECT_TRUE(std::isinf(sqrt.dx[2]));
  EXPECT_TRUE(std::isnan(sqrt.y[3]));
  // Erf at 0: 2 / sqrt(pi). Mish at 0: 0 with gradient tanh(log 2) = 0.6.
  UnaryRun erf = RunUnary("Erf", MakeAttrs("Erf"), {0.f, 10.f}, {1.f, 1.f});
  EXPECT_EQ(erf.y, (std::vector<float>{0.f, 1.f}));
  EXPECT_FLOAT_EQ(erf.dx[0], 2 / std::sqrt(M_PI));
  EXPECT_NEAR(erf.dx[1], 0.f, 1e-40);  // exp(-100) is a float denormal.
  UnaryRun mish = RunUnary("Mish", MakeAttrs("Mish"), {0.f, -100.f, 100.f}, {1.f, 1.f, 1.f});
  EXPECT_EQ(mish.y[0], 0.f);
  EXPECT_FLOAT_EQ(mish.dx[0], 0.6f);
  EXPECT_EQ(mish.y[2], 100.f);
  EXPECT_EQ(mish.dx[2], 1.f);
  EXPECT_NEAR(mish.y[1], 0.f, 1e-40);
}

TEST_F(LoopKernelsTest, EltwiseRejectsFloat16) {
  Tensor x({4}, proto::DTYPE_FLOAT16);
  Tensor y({4}, proto::DTYPE_FLOAT16);
  graph::Attrs attrs = MakeAttrs("ReLU");
  absl::Status s = Forward("ReLU", attrs, {x.view()}, {y.view()});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("ReLU"), std::string::npos) << s;
  EXPECT_NE(s.message().find("float16"), std::string::npos) << s;
  EXPECT_NE(s.message().find("[4]"), std::string::npos) << s;
}

// ---- Softmax ------------------------------------------------------------------------------

TEST_F(LoopKernelsTest, SoftmaxOverMiddleAxisWithScale) {
  graph::Attrs attrs = MakeAttrs("Softmax", {{"axis", IntAttr(1)}, {"scale", FloatAttr(0.5)}});
  Tensor x = Random({2, 4, 3}, 3, -3.f, 3.f);
  Tensor y(x.shape);
  ASSERT_TRUE(Forward("Softmax", attrs, {x.view()}, {y.view()}).ok());
  std::vector<double> want(x.size());
  for (int n = 0; n < 2; ++n) {
    for (int k = 0; k < 3; ++k) {
      double sum = 0;
      for (int j = 0; j < 4; ++j) sum += std::exp(0.5 * x.f()[n * 12 + j * 3 + k]);
      for (int j = 0; j < 4; ++j) {
        want[n * 12 + j * 3 + k] = std::exp(0.5 * x.f()[n * 12 + j * 3 + k]) / sum;
      }
    }
  }
  ExpectNear(y.values(), want, 1e-6, "y");
}

TEST_F(LoopKernelsTest, CausalSoftmaxMasksTheFutureAndRunsInPlace) {
  graph::Attrs attrs = MakeAttrs("Softmax", {{"causal", BoolAttr(true)}, {"scale", FloatAttr(2)}});
  const int t = 5;
  Tensor x = Random({2, t, t}, 4, -2.f, 2.f);
  Tensor y(x.shape);
  ASSERT_TRUE(Forward("Softmax", attrs, {x.view()}, {y.view()}).ok());
  std::vector<double> want(x.size(), 0.0);
  for (int r = 0; r < 2 * t; ++r) {
    const int i = r % t;
    double sum = 0;
    for (int j = 0; j <= i; ++j) sum += std::exp(2.0 * x.f()[r * t + j]);
    for (int j = 0; j <= i; ++j) want[r * t + j] = std::exp(2.0 * x.f()[r * t + j]) / sum;
  }
  ExpectNear(y.values(), want, 1e-6, "y");

  Tensor dy = Random(x.shape, 5);
  Tensor dx(x.shape);
  ASSERT_TRUE(
      Backward("Softmax", attrs, {x.absent()}, {y.view()}, {}, {dy.view()}, {dx.view()}).ok());
  std::vector<double> want_dx(x.size());
  for (int r = 0; r < 2 * t; ++r) {
    double dot = 0;
    for (int j = 0; j < t; ++j) dot += dy.f()[r * t + j] * y.f()[r * t + j];
    for (int j = 0; j < t; ++j) {
      want_dx[r * t + j] = 2.0 * y.f()[r * t + j] * (dy.f()[r * t + j] - dot);
    }
  }
  ExpectNear(dx.values(), want_dx, 1e-5, "dx");

  Tensor xy = x;
  ASSERT_TRUE(Forward("Softmax", attrs, {xy.view()}, {xy.view()}).ok());
  EXPECT_EQ(xy.values(), y.values());
  Tensor g = dy;
  ASSERT_TRUE(
      Backward("Softmax", attrs, {x.absent()}, {y.view()}, {}, {g.view()}, {g.view()}).ok());
  EXPECT_EQ(g.values(), dx.values());
}

// ---- Dropout ------------------------------------------------------------------------------

TEST_F(LoopKernelsTest, DropoutReplaysItsMaskFromTheSeed) {
  const double rate = 0.3;
  graph::Attrs attrs = MakeAttrs("Dropout", {{"rate", FloatAttr(rate)}});
  Tensor x = Random({200, 500}, 6);
  auto run = [&](uint64_t seed, int threads, Tensor* y, Tensor* mask) {
    *y = Tensor(x.shape);
    *mask = Tensor(x.shape, proto::DTYPE_BOOL);
    omp_set_num_threads(threads);
    ASSERT_TRUE(Forward("Dropout", attrs, {x.view()}, {y->view()}, {mask->view()},
                        /*training=*/true, seed)
                    .ok());
  };
  Tensor y1, m1, y2, m2, y3, m3;
  run(42, 2, &y1, &m1);
  run(42, 1, &y2, &m2);
  run(43, 2, &y3, &m3);
  omp_set_num_threads(omp_get_num_procs());
  EXPECT_EQ(m1.bytes, m2.bytes) << "same seed, other thread count: other mask";
  EXPECT_EQ(y1.values(), y2.values());
  EXPECT_NE(m1.bytes, m3.bytes) << "another seed gave the same mask";

  int64_t kept = 0;
  const float scale = 1.0f / static_cast<float>(1.0 - rate);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_LE(m1.bytes[i], 1);
    kept += m1.bytes[i];
    ASSERT_EQ(y1.f()[i], m1.bytes[i] ? x.f()[i] * scale : 0.f) << i;
  }
  const double keep_fraction = static_cast<double>(kept) / x.size();
  EXPECT_NEAR(keep_fraction, 1 - rate, 0.01);

  // In place over x: the same output.
  Tensor xy = x;
  Tensor m4(x.shape, proto::DTYPE_BOOL);
  ASSERT_TRUE(Forward("Dropout", attrs, {xy.view()}, {xy.view()}, {m4.view()}, true, 42).ok());
  EXPECT_EQ(xy.values(), y1.values());

  // Backward reads only the mask; in place over dy as well.
  Tensor dy = Random(x.shape, 7);
  Tensor g = dy;
  ASSERT_TRUE(
      Backward("Dropout", attrs, {x.absent()}, {y1.absent()}, {m1.view()}, {g.view()}, {g.view()})
          .ok());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(g.f()[i], m1.bytes[i] ? dy.f()[i] * scale : 0.f) << i;
  }

  // Not training: identity, no mask.
  Tensor y5(x.shape);
  ASSERT_TRUE(Forward("Dropout", attrs, {x.view()}, {y5.view()}, {}, /*training=*/false).ok());
  EXPECT_EQ(y5.values(), x.values());
}

// ---- Add and Mul --------------------------------------------------------------------------

// Returns the flat index into `in` (right-aligned, broadcast) of flat index i of `out`.
size_t BroadcastIndex(const Shape& out, const Shape& in, size_t i) {
  size_t idx = 0, stride = 1;
  for (int d = static_cast<int>(out.size()) - 1; d >= 0; --d) {
    const size_t coord = i % out[d];
    i /= out[d];
    const int id = d - static_cast<int>(out.size() - in.size());
    if (id >= 0) {
      if (in[id] != 1) idx += coord * stride;
      stride *= in[id];
    }
  }
  return idx;
}

TEST_F(LoopKernelsTest, BroadcastAddMulSubAndDivForwardAndBackward) {
  struct Case {
    Shape a, b, out;
  };
  for (const Case& c : std::vector<Case>{{{2, 3, 4}, {3, 1}, {2, 3, 4}},
                                         {{1, 4}, {3, 1}, {3, 4}},
                                         {{4}, {2, 3, 4}, {2, 3, 4}},
                                         {{2, 1, 4}, {2, 3, 1}, {2, 3, 4}},
                                         {{5}, {5}, {5}}}) {
    for (const std::string op : {"Add", "Mul", "Sub", "Div"}) {
      SCOPED_TRACE(op + " " + graph::ShapeString(c.a) + " " + graph::ShapeString(c.b));
      graph::Attrs attrs = MakeAttrs(op);
      Tensor a = Random(c.a, 8), b = Random(c.b, 9), y(c.out);
      if (op == "Div") {
        for (size_t k = 0; k < b.size(); ++k) b.f()[k] += b.f()[k] < 0 ? -0.5f : 0.5f;  // Off 0.
      }
      ASSERT_TRUE(Forward(op, attrs, {a.view(), b.view()}, {y.view()}).ok());
      Tensor dy = Random(c.out, 10);
      std::vector<double> want_y(y.size()), want_da(a.size(), 0), want_db(b.size(), 0);
      for (size_t i = 0; i < y.size(); ++i) {
        const size_t ia = BroadcastIndex(c.out, c.a, i), ib = BroadcastIndex(c.out, c.b, i);
        const double u = a.f()[ia], v = b.f()[ib], g = dy.f()[i];
        if (op == "Add") want_y[i] = u + v, want_da[ia] += g, want_db[ib] += g;
        if (op == "Mul") want_y[i] = u * v, want_da[ia] += g * v, want_db[ib] += g * u;
        if (op == "Sub") want_y[i] = u - v, want_da[ia] += g, want_db[ib] -= g;
        if (op == "Div") want_y[i] = u / v, want_da[ia] += g / v, want_db[ib] -= g * u / (v * v);
      }
      ExpectNear(y.values(), want_y, 1e-6, "y");
      const bool mul = op == "Mul" || op == "Div";  // Their gradients read the inputs.
      Tensor da(c.a), db(c.b);
      ASSERT_TRUE(Backward(op, attrs, {mul ? a.view() : a.absent(), mul ? b.view() : b.absent()},
                           {y.absent()}, {}, {dy.view()}, {da.view(), db.view()})
                      .ok());
      ExpectNear(da.values(), want_da, 1e-5, "da");
      ExpectNear(db.values(), want_db, 1e-5, "db");

      // Only one gradient needed: Mul gets only the other input, Div's divisor both.
      Tensor db_only(c.b);
      ASSERT_TRUE(Backward(op, attrs,
                           {mul ? a.view() : a.absent(), op == "Div" ? b.view() : b.absent()},
                           {y.absent()}, {}, {dy.view()}, {a.absent(), db_only.view()})
                      .ok());
      EXPECT_EQ(db_only.values(), db.values());

      // In place: the full-size input's gradient over dy.
      for (int i = 0; i < 2; ++i) {
        if (graph::NumElements(i == 0 ? c.a : c.b) != graph::NumElements(c.out)) continue;
        Tensor g = dy;
        Tensor other(i == 0 ? c.b : c.a);
        std::vector<TensorView> grads = {g.view(), other.view()};
        if (i == 1) std::swap(grads[0], grads[1]);
        ASSERT_TRUE(Backward(op, attrs, {mul ? a.view() : a.absent(), mul ? b.view() : b.absent()},
                             {y.absent()}, {}, {g.view()}, grads)
                        .ok());
        EXPECT_EQ(g.values(), (i == 0 ? da : db).values()) << "in place over dy, input " << i;
        EXPECT_EQ(other.values(), (i == 0 ? db : da).values()) << "beside in place, input " << i;
      }
      // In place forward over a full-size input.
      if (c.a == c.out) {
        Tensor ay = a;
        ASSERT_TRUE(Forward(op, attrs, {ay.view(), b.view()}, {ay.view()}).ok());
        EXPECT_EQ(ay.values(), y.values());
      }
    }
  }
}

TEST_F(LoopKernelsTest, ReductionsDoNotDependOnThreadCount) {
  graph::Attrs add = MakeAttrs("Add");
  Tensor a = Random({300, 257}, 11), b = Random({257}, 12), y(a.shape);
  Tensor dy = Random(a.shape, 13);
  graph::Attrs ln = MakeAttrs("LayerNorm");
  Tensor w = Random({257}, 14), bias = Random({257}, 15), mean({300}), rstd({300});
  ASSERT_TRUE(Forward("LayerNorm", ln, {a.view(), w.view(), bias.view()}, {y.view()},
                      {mean.view(), rstd.view()})
                  .ok());
  std::vector<std::vector<float>> results[2];
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    Tensor db(b.shape), dx(a.shape), dw(w.shape), dbias(w.shape);
    ASSERT_TRUE(Backward("Add", add, {a.absent(), b.absent()}, {y.absent()}, {}, {dy.view()},
                         {a.absent(), db.view()})
                    .ok());
    ASSERT_TRUE(Backward("LayerNorm", ln, {a.view(), w.view(), bias.absent()}, {y.absent()},
                         {mean.view(), rstd.view()}, {dy.view()},
                         {dx.view(), dw.view(), dbias.view()})
                    .ok());
    results[threads - 1] = {db.values(), dx.values(), dw.values(), dbias.values()};
  }
  omp_set_num_threads(omp_get_num_procs());
  EXPECT_EQ(results[0], results[1]);
}

// ---- LayerNorm ----------------------------------------------------------------------------

TEST_F(LoopKernelsTest, LayerNormMatchesReferenceInPlace) {
  graph::Attrs attrs = MakeAttrs("LayerNorm", {{"epsilon", FloatAttr(1e-3)}});
  Tensor x = Random({3, 2, 6}, 16, -2.f, 3.f), w = Random({6}, 17), b = Random({6}, 18);
  Tensor y(x.shape), mean({3, 2}), rstd({3, 2});
  ASSERT_TRUE(Forward("LayerNorm", attrs, {x.view(), w.view(), b.view()}, {y.view()},
                      {mean.view(), rstd.view()})
                  .ok());
  std::vector<double> want(x.size()), want_mean, want_rstd;
  for (int r = 0; r < 6; ++r) {
    double m = 0, v = 0;
    for (int k = 0; k < 6; ++k) m += x.f()[r * 6 + k] / 6.0;
    for (int k = 0; k < 6; ++k) v += (x.f()[r * 6 + k] - m) * (x.f()[r * 6 + k] - m) / 6.0;
    want_mean.push_back(m);
    want_rstd.push_back(1 / std::sqrt(v + 1e-3));
    for (int k = 0; k < 6; ++k) {
      want[r * 6 + k] = (x.f()[r * 6 + k] - m) * want_rstd.back() * w.f()[k] + b.f()[k];
    }
  }
  ExpectNear(y.values(), want, 1e-5, "y");
  ExpectNear(mean.values(), want_mean, 1e-6, "mean");
  ExpectNear(rstd.values(), want_rstd, 1e-6, "rstd");

  Tensor xy = x;
  ASSERT_TRUE(Forward("LayerNorm", attrs, {xy.view(), w.view(), b.view()}, {xy.view()},
                      {mean.view(), rstd.view()})
                  .ok());
  EXPECT_EQ(xy.values(), y.values());
  Tensor y_eval(x.shape);
  ASSERT_TRUE(Forward("LayerNorm", attrs, {x.view(), w.view(), b.view()}, {y_eval.view()}, {},
                      /*training=*/false)
                  .ok());
  EXPECT_EQ(y_eval.values(), y.values());
}

// ---- Views, Transpose, Concat, Split ------------------------------------------------------

TEST_F(LoopKernelsTest, ViewsCopyOnlyWhenNotAliased) {
  for (const std::string op : {"Flatten", "Reshape"}) {
    graph::Attrs attrs =
        op == "Flatten" ? MakeAttrs(op) : MakeAttrs(op, {{"shape", IntsAttr({6, -1})}});
    Tensor x = Random({2, 3, 4}, 19), y({6, 4});
    ASSERT_TRUE(Forward(op, attrs, {x.view()}, {y.view()}).ok());
    EXPECT_EQ(y.values(), x.values());
    TensorView alias = x.view();
    alias.shape = {6, 4};
    const std::vector<float> before = x.values();
    ASSERT_TRUE(Forward(op, attrs, {x.view()}, {alias}).ok());
    EXPECT_EQ(x.values(), before);
    Tensor dx(x.shape);
    ASSERT_TRUE(Backward(op, attrs, {x.absent()}, {y.absent()}, {}, {y.view()}, {dx.view()}).ok());
    EXPECT_EQ(dx.values(), y.values());
  }
}

TEST_F(LoopKernelsTest, TransposeAndItsBackward) {
  graph::Attrs attrs = MakeAttrs("Transpose", {{"perm", IntsAttr({2, 0, 1})}});
  Tensor x = Random({2, 3, 4}, 20), y({4, 2, 3});
  ASSERT_TRUE(Forward("Transpose", attrs, {x.view()}, {y.view()}).ok());
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      for (int k = 0; k < 4; ++k) {
        ASSERT_EQ(y.f()[k * 6 + i * 3 + j], x.f()[i * 12 + j * 4 + k]);
      }
    }
  }
  Tensor dx(x.shape);
  ASSERT_TRUE(
      Backward("Transpose", attrs, {x.absent()}, {y.absent()}, {}, {y.view()}, {dx.view()}).ok());
  EXPECT_EQ(dx.values(), x.values());
}

TEST_F(LoopKernelsTest, ConcatAndSplitRoundTrip) {
  Tensor a = Random({2, 1, 3}, 21), b = Random({2, 2, 3}, 22), y({2, 3, 3});
  graph::Attrs concat = MakeAttrs("Concat", {{"axis", IntAttr(-2)}});
  ASSERT_TRUE(Forward("Concat", concat, {a.view(), b.view()}, {y.view()}).ok());
  for (int n = 0; n < 2; ++n) {
    for (int k = 0; k < 3; ++k) {
      ASSERT_EQ(y.f()[n * 9 + k], a.f()[n * 3 + k]);
      for (int j = 0; j < 2; ++j)
        ASSERT_EQ(y.f()[n * 9 + (1 + j) * 3 + k], b.f()[n * 6 + j * 3 + k]);
    }
  }
  graph::Attrs split = MakeAttrs("Split", {{"axis", IntAttr(1)}, {"sizes", IntsAttr({1, 2})}});
  Tensor s0(a.shape), s1(b.shape);
  ASSERT_TRUE(Forward("Split", split, {y.view()}, {s0.view(), s1.view()}).ok());
  EXPECT_EQ(s0.values(), a.values());
  EXPECT_EQ(s1.values(), b.values());

  // Concat backward slices dy; Split backward joins them, zeros where a gradient is absent.
  Tensor da(a.shape), db(b.shape);
  ASSERT_TRUE(Backward("Concat", concat, {a.absent(), b.absent()}, {y.absent()}, {}, {y.view()},
                       {da.view(), db.view()})
                  .ok());
  EXPECT_EQ(da.values(), a.values());
  EXPECT_EQ(db.values(), b.values());
  Tensor dx = Random(y.shape, 23);
  ASSERT_TRUE(Backward("Split", split, {y.absent()}, {s0.absent(), s1.absent()}, {},
                       {a.absent(), b.view()}, {dx.view()})
                  .ok());
  for (int n = 0; n < 2; ++n) {
    for (int k = 0; k < 3; ++k) {
      ASSERT_EQ(dx.f()[n * 9 + k], 0.f);
      for (int j = 0; j < 2; ++j)
        ASSERT_EQ(dx.f()[n * 9 + (1 + j) * 3 + k], b.f()[n * 6 + j * 3 + k]);
    }
  }
}

TEST_F(LoopKernelsTest, SliceTakesStridedElementsAndItsBackwardScattersThem) {
  // swin's x[:, 1::2, 0::2, :] on [2, 5, 6, 3]: rows 1, 3 and columns 0, 2, 4 -> [2, 2, 3, 3].
  graph::Attrs attrs = MakeAttrs("Slice", {{"axes", IntsAttr({1, -2})},
                                           {"starts", IntsAttr({1, 0})},
                                           {"ends", IntsAttr({5, 6})},
                                           {"steps", IntsAttr({2, 2})}});
  Tensor x = Random({2, 5, 6, 3}, 30), y({2, 2, 3, 3});
  ASSERT_TRUE(Forward("Slice", attrs, {x.view()}, {y.view()}).ok());
  auto x_at = [](int n, int h, int w, int c) { return ((n * 5 + h) * 6 + w) * 3 + c; };
  auto y_at = [](int n, int h, int w, int c) { return ((n * 2 + h) * 3 + w) * 3 + c; };
  for (int n = 0; n < 2; ++n)
    for (int h = 0; h < 2; ++h)
      for (int w = 0; w < 3; ++w)
        for (int c = 0; c < 3; ++c)
          ASSERT_EQ(y.f()[y_at(n, h, w, c)], x.f()[x_at(n, 1 + 2 * h, 2 * w, c)]);

  // Backward: dy where the forward read, zeros elsewhere (dx starts as garbage).
  Tensor dy = Random(y.shape, 31), dx = Random(x.shape, 32);
  ASSERT_TRUE(
      Backward("Slice", attrs, {x.absent()}, {y.absent()}, {}, {dy.view()}, {dx.view()}).ok());
  std::vector<double> want(x.size(), 0.0);
  for (int n = 0; n < 2; ++n)
    for (int h = 0; h < 2; ++h)
      for (int w = 0; w < 3; ++w)
        for (int c = 0; c < 3; ++c) want[x_at(n, 1 + 2 * h, 2 * w, c)] = dy.f()[y_at(n, h, w, c)];
  ExpectNear(dx.values(), want, 0, "dx");

  // No gradient flowing in: zeros.
  ASSERT_TRUE(
      Backward("Slice", attrs, {x.absent()}, {y.absent()}, {}, {y.absent()}, {dx.view()}).ok());
  EXPECT_EQ(dx.values(), std::vector<float>(x.size(), 0.f));
}

TEST_F(LoopKernelsTest, SliceWithNegativeStepsReversesAndItsBackwardScattersBack) {
  // x[:, ::-1, 4::-2] on [2, 3, 5] (torch.flip of dim 1, every other column from the last).
  graph::Attrs attrs = MakeAttrs("Slice", {{"axes", IntsAttr({1, 2})},
                                           {"starts", IntsAttr({2, 4})},
                                           {"ends", IntsAttr({-1, -1})},
                                           {"steps", IntsAttr({-1, -2})}});
  Tensor x = Random({2, 3, 5}, 33), y({2, 3, 3});
  ASSERT_TRUE(Forward("Slice", attrs, {x.view()}, {y.view()}).ok());
  auto x_at = [](int n, int h, int w) { return (n * 3 + h) * 5 + w; };
  auto y_at = [](int n, int h, int w) { return (n * 3 + h) * 3 + w; };
  for (int n = 0; n < 2; ++n)
    for (int h = 0; h < 3; ++h)
      for (int w = 0; w < 3; ++w) ASSERT_EQ(y.f()[y_at(n, h, w)], x.f()[x_at(n, 2 - h, 4 - 2 * w)]);
  Tensor dy = Random(y.shape, 34), dx = Random(x.shape, 35);
  ASSERT_TRUE(
      Backward("Slice", attrs, {x.absent()}, {y.absent()}, {}, {dy.view()}, {dx.view()}).ok());
  std::vector<double> want(x.size(), 0.0);
  for (int n = 0; n < 2; ++n)
    for (int h = 0; h < 3; ++h)
      for (int w = 0; w < 3; ++w) want[x_at(n, 2 - h, 4 - 2 * w)] = dy.f()[y_at(n, h, w)];
  ExpectNear(dx.values(), want, 0, "dx");
}

TEST_F(LoopKernelsTest, SliceCopiesAnyDtypeAndRejectsAttributesThatDoNotFit) {
  // x[:, 1:3] of int64 [2, 4] (torch.chunk's pieces).
  graph::Attrs attrs = MakeAttrs("Slice", {{"axes", IntsAttr({1})}, {"starts", IntsAttr({1})},
                                           {"ends", IntsAttr({3})}});
  Tensor x = Ids({2, 4}, {0, 1, 2, 3, 10, 11, 12, 13}, proto::DTYPE_INT64);
  Tensor y({2, 2}, proto::DTYPE_INT64);
  ASSERT_TRUE(Forward("Slice", attrs, {x.view()}, {y.view()}).ok());
  const int64_t* out = reinterpret_cast<const int64_t*>(y.bytes.data());
  EXPECT_EQ(std::vector<int64_t>(out, out + 4), std::vector<int64_t>({1, 2, 11, 12}));

  Tensor wrong({2, 3}, proto::DTYPE_INT64);
  absl::Status s = Forward("Slice", attrs, {x.view()}, {wrong.view()});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("do not cut input 'x' [2,4] to output 'y' [2,3]"),
            std::string::npos)
      << s;
  graph::Attrs past_end = MakeAttrs("Slice", {{"axes", IntsAttr({1})}, {"starts", IntsAttr({3})},
                                              {"ends", IntsAttr({5})}});
  s = Forward("Slice", past_end, {x.view()}, {y.view()});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

TEST_F(LoopKernelsTest, ExpandBroadcastsAndItsBackwardSumsLikeAdds) {
  // vit's class token [1, 1, 4] to [3, 1, 4]; and [3, 1] to [2, 3, 4] (new leading dim).
  struct Case {
    Shape x, y;
  };
  for (const Case& c : std::vector<Case>{{{1, 1, 4}, {3, 1, 4}}, {{3, 1}, {2, 3, 4}}}) {
    SCOPED_TRACE(graph::ShapeString(c.x) + " -> " + graph::ShapeString(c.y));
    graph::Attrs attrs = MakeAttrs("Expand", {{"shape", IntsAttr(c.y)}});
    Tensor x = Random(c.x, 33), y(c.y);
    ASSERT_TRUE(Forward("Expand", attrs, {x.view()}, {y.view()}).ok());
    Tensor dy = Random(c.y, 34);
    std::vector<double> want_dx(x.size(), 0.0);
    for (size_t i = 0; i < y.size(); ++i) {
      const size_t xi = BroadcastIndex(c.y, c.x, i);
      ASSERT_EQ(y.f()[i], x.f()[xi]) << i;
      want_dx[xi] += dy.f()[i];
    }
    Tensor dx = Random(c.x, 35);
    ASSERT_TRUE(
        Backward("Expand", attrs, {x.absent()}, {y.absent()}, {}, {dy.view()}, {dx.view()}).ok());
    ExpectNear(dx.values(), want_dx, 1e-6, "dx");

    // The same reduction as Add's gradient of its broadcast operand.
    graph::Attrs add = MakeAttrs("Add");
    Tensor da(c.y), db(c.x);
    ASSERT_TRUE(Backward("Add", add, {y.absent(), x.absent()}, {y.absent()}, {}, {dy.view()},
                         {da.view(), db.view()})
                    .ok());
    EXPECT_EQ(dx.values(), db.values());
  }
  graph::Attrs attrs = MakeAttrs("Expand", {{"shape", IntsAttr({2, 3})}});
  Tensor x = Random({2, 2}, 36), y({2, 3});
  absl::Status s = Forward("Expand", attrs, {x.view()}, {y.view()});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("input 'x' [2,2] does not broadcast to output 'y' [2,3]"),
            std::string::npos)
      << s;
}

// ---- Embedding ----------------------------------------------------------------------------

TEST_F(LoopKernelsTest, EmbeddingGathersAndScatterAdds) {
  for (proto::DType dtype : {proto::DTYPE_INT32, proto::DTYPE_INT64}) {
    graph::Attrs attrs = MakeAttrs("Embedding");
    Tensor ids = Ids({2, 2}, {3, 0, 3, 1}, dtype);
    Tensor table = Random({4, 5}, 24), y({2, 2, 5});
    ASSERT_TRUE(Forward("Embedding", attrs, {ids.view(), table.view()}, {y.view()}).ok());
    const int rows[4] = {3, 0, 3, 1};
    for (int i = 0; i < 4; ++i) {
      for (int k = 0; k < 5; ++k) ASSERT_EQ(y.f()[i * 5 + k], table.f()[rows[i] * 5 + k]);
    }
    Tensor dy = Random(y.shape, 25), dtable = Random(table.shape, 26);  // Overwritten.
    ASSERT_TRUE(Backward("Embedding", attrs, {ids.view(), table.absent()}, {y.absent()}, {},
                         {dy.view()}, {ids.absent(), dtable.view()})
                    .ok());
    std::vector<double> want(table.size(), 0.0);
    for (int i = 0; i < 4; ++i) {
      for (int k = 0; k < 5; ++k) want[rows[i] * 5 + k] += dy.f()[i * 5 + k];
    }
    ExpectNear(dtable.values(), want, 1e-6, "dtable");

    Tensor bad = Ids({2}, {1, 4}, dtype);
    Tensor y2({2, 5});
    absl::Status s = Forward("Embedding", attrs, {bad.view(), table.view()}, {y2.view()});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("'ids'"), std::string::npos) << s;
    EXPECT_NE(s.message().find("4"), std::string::npos) << s;
  }
}

// ---- SoftmaxCrossEntropy ------------------------------------------------------------------

TEST_F(LoopKernelsTest, CrossEntropyByHand) {
  graph::Attrs attrs = MakeAttrs("SoftmaxCrossEntropy");
  // Row 0: logits [1, 2, 3], label 2; row 1: logits [0, 0, 0], label 0.
  Tensor logits = Tensor::Of({2, 3}, {1, 2, 3, 0, 0, 0});
  Tensor labels = Ids({2}, {2, 0}, proto::DTYPE_INT64);
  Tensor loss(Shape{});
  ASSERT_TRUE(
      Forward("SoftmaxCrossEntropy", attrs, {logits.view(), labels.view()}, {loss.view()}).ok());
  const double lse0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  const double row0 = lse0 - 3, row1 = std::log(3.0);
  EXPECT_NEAR(loss.f()[0], (row0 + row1) / 2, 1e-6);

  Tensor dloss = Tensor::Of({}, {2.0f});
  Tensor dlogits(logits.shape);
  ASSERT_TRUE(Backward("SoftmaxCrossEntropy", attrs, {logits.view(), labels.view()},
                       {loss.absent()}, {}, {dloss.view()}, {dlogits.view(), labels.absent()})
                  .ok());
  std::vector<double> want;
  for (int k = 0; k < 3; ++k) want.push_back((std::exp(1.0 + k - lse0) - (k == 2)) * 2 / 2);
  for (int k = 0; k < 3; ++k) want.push_back((1.0 / 3 - (k == 0)) * 2 / 2);
  ExpectNear(dlogits.values(), want, 1e-6, "dlogits");

  Tensor bad = Ids({2}, {2, 3}, proto::DTYPE_INT32);
  absl::Status s =
      Forward("SoftmaxCrossEntropy", attrs, {logits.view(), bad.view()}, {loss.view()});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'labels'"), std::string::npos) << s;
}

// ---- Optimizer steps and Accumulate -------------------------------------------------------

TEST_F(LoopKernelsTest, SgdMomentumTwoSteps) {
  Tensor p = Tensor::Of({2}, {1.0f, -2.0f}), buf = Tensor::Of({2}, {99.f, 99.f});  // Garbage.
  const float g1[2] = {0.5f, 0.25f}, g2[2] = {-1.0f, 2.0f};
  UpdateArgs args;
  args.op = "SgdMomentumUpdate";
  args.params.learning_rate = 0.1;
  args.params.momentum = 0.9;
  args.params.weight_decay = 0.01;
  double pw[2] = {1.0, -2.0}, bw[2];
  for (int step = 1; step <= 2; ++step) {
    Tensor g = Tensor::Of({2}, {step == 1 ? g1[0] : g2[0], step == 1 ? g1[1] : g2[1]});
    args.param = p.view();
    args.grad = g.view();
    args.state = {buf.view()};
    args.step = step;
    ASSERT_TRUE(RunUpdate(ctx_, args).ok());
    for (int i = 0; i < 2; ++i) {
      const double gi = g.f()[i] + 0.01 * pw[i];
      bw[i] = step == 1 ? gi : 0.9 * bw[i] + gi;
      pw[i] -= 0.1 * bw[i];
      EXPECT_NEAR(p.f()[i], pw[i], 1e-6) << "step " << step;
      EXPECT_NEAR(buf.f()[i], bw[i], 1e-6) << "step " << step;
    }
  }
}

TEST_F(LoopKernelsTest, AdamTwoSteps) {
  Tensor p = Tensor::Of({2}, {1.0f, -2.0f});
  Tensor m = Tensor::Of({2}, {7.f, 7.f}), v = Tensor::Of({2}, {7.f, 7.f});  // Garbage.
  UpdateArgs args;
  args.op = "AdamUpdate";
  args.params.learning_rate = 0.01;
  args.params.weight_decay = 0.1;
  double pw[2] = {1.0, -2.0}, mw[2] = {0, 0}, vw[2] = {0, 0};
  const float grads[2][2] = {{0.5f, -0.25f}, {-1.0f, 2.0f}};
  for (int step = 1; step <= 2; ++step) {
    Tensor g = Tensor::Of({2}, {grads[step - 1][0], grads[step - 1][1]});
    args.param = p.view();
    args.grad = g.view();
    args.state = {m.view(), v.view()};
    args.step = step;
    ASSERT_TRUE(RunUpdate(ctx_, args).ok());
    for (int i = 0; i < 2; ++i) {
      const double gi = g.f()[i] + 0.1 * pw[i];
      mw[i] = 0.9 * mw[i] + 0.1 * gi;
      vw[i] = 0.999 * vw[i] + 0.001 * gi * gi;
      const double mhat = mw[i] / (1 - std::pow(0.9, step));
      const double vhat = vw[i] / (1 - std::pow(0.999, step));
      pw[i] -= 0.01 * mhat / (std::sqrt(vhat) + 1e-8);
      EXPECT_NEAR(p.f()[i], pw[i], 1e-6) << "step " << step;
      EXPECT_NEAR(m.f()[i], mw[i], 1e-6) << "step " << step;
      EXPECT_NEAR(v.f()[i], vw[i], 1e-7) << "step " << step;
    }
  }
  args.op = "Lion";
  EXPECT_EQ(RunUpdate(ctx_, args).code(), absl::StatusCode::kUnimplemented);
}

TEST_F(LoopKernelsTest, AccumulateInPlace) {
  Tensor a = Random({100}, 27), b = Random({100}, 28), out({100});
  ASSERT_TRUE(RunAccumulate(ctx_, out.view(), a.view(), b.view()).ok());
  Tensor a2 = a, b2 = b;
  ASSERT_TRUE(RunAccumulate(ctx_, a2.view(), a2.view(), b.view()).ok());
  ASSERT_TRUE(RunAccumulate(ctx_, b2.view(), a.view(), b2.view()).ok());
  for (int i = 0; i < 100; ++i) ASSERT_EQ(out.f()[i], a.f()[i] + b.f()[i]);
  EXPECT_EQ(a2.values(), out.values());
  EXPECT_EQ(b2.values(), out.values());
  Tensor small({99});
  EXPECT_EQ(RunAccumulate(ctx_, small.view(), a.view(), b.view()).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace headroom::executor::cpu
