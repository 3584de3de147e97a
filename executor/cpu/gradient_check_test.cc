// Finite-difference check of every op's backward on the CPU backend (CpuKernels, so both
// the oneDNN kernels and the loop kernels), one or more cases per op of the op set.
//
// For each case: L = sum over outputs of sum(w_out * y) with fixed random w_out; the
// backward, given output gradients w_out, must match central differences of L in every
// element of every float input. The backward is handed exactly what the executor would
// hand it: data only for the forward tensors the op's gradient rule reads (the rest have
// data == nullptr, so a kernel that reads more crashes here), input gradients prefilled
// with NaN (so an element the kernel fails to overwrite shows). Each case also reruns the
// backward with one input needing a gradient at a time (fewer reads) and expects the same
// gradient. A test fails if any op of the op set has no case.

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "executor/cpu/cpu_kernels.h"
#include "executor/cpu/cpu_kernels_testing.h"
#include "graph/op_registry.h"
#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "planner/gradient_rules.h"

namespace headroom::executor::cpu {
namespace {

using graph::Shape;
using planner::GradientRule;
using planner::SavedState;
using planner::TensorRef;

// ---- Tensors and attributes ---------------------------------------------------------------

// A tensor owning its bytes.
struct Tensor {
  Shape shape;
  proto::DType dtype = proto::DTYPE_FLOAT32;
  std::vector<uint8_t> bytes;

  Tensor() = default;
  explicit Tensor(Shape s, proto::DType t = proto::DTYPE_FLOAT32)
      : shape(std::move(s)), dtype(t), bytes(graph::NumElements(shape) * graph::DTypeSize(t)) {}
  int64_t size() const { return static_cast<int64_t>(graph::NumElements(shape)); }
  bool is_float() const { return dtype == proto::DTYPE_FLOAT32; }
  float* f() { return reinterpret_cast<float*>(bytes.data()); }
  const float* f() const { return reinterpret_cast<const float*>(bytes.data()); }
  TensorView view() const { return TensorView{const_cast<uint8_t*>(bytes.data()), shape, dtype}; }
  TensorView absent() const { return TensorView{nullptr, shape, dtype}; }
};

// Uniform in [lo, hi).
Tensor Uniform(Shape s, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  Tensor t(std::move(s));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < t.size(); ++i) t.f()[i] = dist(rng);
  return t;
}

// Uniform in [lo, hi) but at least `gap` from every point of `kinks` (ReLU's 0, ReLU6's 6).
Tensor AwayFrom(Shape s, uint32_t seed, float lo, float hi, std::vector<float> kinks,
                float gap = 0.1f) {
  Tensor t(std::move(s));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < t.size(); ++i) {
    float v;
    bool near;
    do {
      v = dist(rng);
      near = false;
      for (float k : kinks) near = near || std::fabs(v - k) < gap;
    } while (near);
    t.f()[i] = v;
  }
  return t;
}

// Distinct values 0.05 apart in random order: no ties for MaxPool under a 1e-2 step.
Tensor Distinct(Shape s, uint32_t seed) {
  Tensor t(std::move(s));
  std::vector<float> v(t.size());
  for (int64_t i = 0; i < t.size(); ++i) v[i] = 0.05f * (i - t.size() / 2);
  std::shuffle(v.begin(), v.end(), std::mt19937(seed));
  std::memcpy(t.f(), v.data(), v.size() * sizeof(float));
  return t;
}

Tensor Ints(Shape s, const std::vector<int64_t>& values, proto::DType dtype) {
  Tensor t(std::move(s), dtype);
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == proto::DTYPE_INT32) {
      reinterpret_cast<int32_t*>(t.bytes.data())[i] = static_cast<int32_t>(values[i]);
    } else {
      reinterpret_cast<int64_t*>(t.bytes.data())[i] = values[i];
    }
  }
  return t;
}

// Short names for the attribute values the cases set (graph/graph_builder.h).
const auto I = &graph::IntAttr;
const auto F = &graph::FloatAttr;
const auto B = &graph::BoolAttr;
const auto S = &graph::StringAttr;
const auto Is = &graph::IntsAttr;

// ---- Cases --------------------------------------------------------------------------------

struct GradCase {
  std::string name;  // Unique; the test's name.
  std::string op;
  std::map<std::string, proto::AttrValue> attrs;  // On top of the schema's defaults.
  std::vector<Tensor> inputs;                     // In schema order (running stats included).
  int num_outputs = 1;                            // Split: one per piece.
  std::set<int> absent_output_grads;              // Outputs no gradient flows from.
  uint64_t seed = 0;                              // Dropout's stream.
  double step = 1e-2;                             // Finite-difference step.
};

// Prints a case by its name in test output.
void PrintTo(const GradCase& c, std::ostream* os) { *os << c.name << " (" << c.op << ")"; }

// The ops oneDNN runs: MatMul, Conv2D, BatchNorm and the pools.
std::vector<GradCase> DnnlCases() {
  std::vector<GradCase> c;
  c.push_back({"MatMulLinear",
               "MatMul",
               {{"transpose_b", B(true)}},
               {Uniform({2, 3, 4}, 1), Uniform({5, 4}, 2), Uniform({5}, 3)}});
  c.push_back({"MatMulBatched", "MatMul", {}, {Uniform({2, 3, 4}, 4), Uniform({2, 4, 5}, 5)}});
  c.push_back({"MatMulBroadcastTransposeA",
               "MatMul",
               {{"transpose_a", B(true)}},
               {Uniform({2, 4, 3}, 6), Uniform({4, 5}, 7)}});
  c.push_back({"MatMulAttentionScores4D",
               "MatMul",
               {{"transpose_b", B(true)}},
               {Uniform({2, 2, 3, 4}, 65), Uniform({2, 2, 5, 4}, 66)}});
  c.push_back({"MatMulLinear4DUnitBatchWeight",
               "MatMul",
               {{"transpose_b", B(true)}},
               {Uniform({2, 2, 3, 4}, 67), Uniform({1, 5, 4}, 68), Uniform({5}, 69)}});
  // Batch dims broadcast both ways ([B,1,M,K] x [1,H,K,N]), a single a against a batched b,
  // ranks that differ, transposes and a bias: each gradient sums over the products it fed.
  c.push_back({"MatMulBatchBroadcastBothWays",
               "MatMul",
               {},
               {Uniform({2, 1, 3, 4}, 190), Uniform({1, 3, 4, 5}, 191)}});
  c.push_back({"MatMulOneMatrixTimesBatch",
               "MatMul",
               {{"transpose_a", B(true)}},
               {Uniform({4, 3}, 192), Uniform({2, 4, 5}, 193)}});
  c.push_back({"MatMulBatchBroadcastTransposedBias",
               "MatMul",
               {{"transpose_b", B(true)}},
               {Uniform({3, 1, 2, 4}, 194), Uniform({2, 5, 4}, 195), Uniform({5}, 196)}});
  c.push_back({"Conv2DGroupedStridedBias",
               "Conv2D",
               {{"stride", Is({2, 2})}, {"padding", Is({1, 1})}, {"groups", I(2)}},
               {Uniform({2, 4, 6, 6}, 8), Uniform({6, 2, 3, 3}, 9), Uniform({6}, 10)}});
  c.push_back({"Conv2DDilatedAsymmetricPadding",
               "Conv2D",
               {{"dilation", Is({2, 1})}, {"padding", Is({1, 0, 2, 1})}},
               {Uniform({1, 3, 5, 6}, 11), Uniform({2, 3, 2, 3}, 12)}});
  c.push_back({"BatchNorm4D",
               "BatchNorm",
               {},
               {Uniform({3, 2, 3, 3}, 13), Uniform({2}, 14, 0.5f, 1.5f), Uniform({2}, 15),
                Uniform({2}, 16), Uniform({2}, 17, 0.5f, 1.5f)}});
  c.push_back({"BatchNorm2D",
               "BatchNorm",
               {{"epsilon", F(1e-3)}},
               {Uniform({5, 3}, 18), Uniform({3}, 19, 0.5f, 1.5f), Uniform({3}, 20),
                Uniform({3}, 21), Uniform({3}, 22, 0.5f, 1.5f)}});
  c.push_back({"MaxPoolCeil",
               "MaxPool",
               {{"kernel_size", Is({2, 2})}, {"ceil_mode", B(true)}},
               {Distinct({2, 2, 5, 5}, 23)}});
  c.push_back({"MaxPoolPadded",
               "MaxPool",
               {{"kernel_size", Is({3, 3})}, {"stride", Is({2, 2})}, {"padding", Is({1, 1})}},
               {Distinct({1, 2, 6, 5}, 24)}});
  c.push_back({"AvgPoolCeilExcludePad",
               "AvgPool",
               {{"kernel_size", Is({3, 3})},
                {"stride", Is({2, 2})},
                {"padding", Is({1, 1})},
                {"ceil_mode", B(true)},
                {"count_include_pad", B(false)}},
               {Uniform({2, 2, 6, 6}, 25)}});
  c.push_back({"AvgPoolIncludePad",
               "AvgPool",
               {{"kernel_size", Is({2, 3})}, {"stride", Is({1, 2})}, {"padding", Is({1, 1})}},
               {Uniform({1, 3, 5, 5}, 26)}});
  c.push_back({"GlobalAvgPool", "GlobalAvgPool", {}, {Uniform({2, 3, 4, 5}, 27)}});
  return c;
}

// Loop kernels of one input and one output of its shape: LayerNorm, the activations, Dropout.
std::vector<GradCase> ElementwiseLoopCases() {
  std::vector<GradCase> c;
  c.push_back({"LayerNorm",
               "LayerNorm",
               {},
               {Uniform({2, 3, 5}, 28), Uniform({5}, 29, 0.5f, 1.5f), Uniform({5}, 30)}});
  c.push_back({"ReLU", "ReLU", {}, {AwayFrom({3, 7}, 31, -2, 2, {0})}});
  // Cast to its own dtype: the float32 path (bf16 casts: cpu_bf16_kernels_test).
  c.push_back({"CastToFloat32", "Cast", {{"to", I(proto::DTYPE_FLOAT32)}},
               {Uniform({3, 4}, 300)}});
  c.push_back({"ReLU6", "ReLU6", {}, {AwayFrom({3, 7}, 32, -1, 7, {0, 6})}});
  c.push_back({"HardSigmoid", "HardSigmoid", {}, {AwayFrom({3, 7}, 58, -4, 4, {-3, 3})}});
  c.push_back({"HardSigmoidOnnxAlpha",
               "HardSigmoid",
               {{"alpha", F(0.2)}, {"beta", F(0.4)}},
               {AwayFrom({3, 7}, 59, -4, 4, {-2, 3})}});
  c.push_back({"HardSwish", "HardSwish", {}, {AwayFrom({3, 7}, 60, -5, 5, {-3, 3})}});
  c.push_back({"LeakyReLU", "LeakyReLU", {}, {AwayFrom({3, 7}, 70, -2, 2, {0})}});
  c.push_back({"PowCube", "Pow", {{"exponent", F(3)}}, {Uniform({3, 7}, 172)}});
  c.push_back({"PowHalf", "Pow", {{"exponent", F(0.5)}}, {Uniform({3, 7}, 173, 0.5f, 2.f)}});
  c.push_back({"PowGeneral", "Pow", {{"exponent", F(1.7)}}, {Uniform({3, 7}, 174, 0.5f, 2.f)}});
  c.push_back({"PReLUPerChannel",
               "PReLU",
               {},
               {AwayFrom({2, 3, 2, 2}, 170, -2, 2, {0}), Uniform({3, 1, 1}, 171, 0.1f, 0.5f)}});
  c.push_back(
      {"LeakyReLUAlpha", "LeakyReLU", {{"alpha", F(0.3)}}, {AwayFrom({3, 7}, 71, -2, 2, {0})}});
  c.push_back({"ELU", "ELU", {{"alpha", F(0.7)}}, {AwayFrom({3, 7}, 72, -3, 3, {0})}});
  c.push_back({"SELU", "SELU", {}, {AwayFrom({3, 7}, 73, -3, 3, {0})}});
  c.push_back({"Softplus", "Softplus", {}, {Uniform({3, 7}, 74, -4, 4)}});
  c.push_back({"SoftplusPastThreshold", "Softplus", {}, {Uniform({3, 7}, 75, 20.5f, 24)}});
  c.push_back({"Sqrt", "Sqrt", {}, {Uniform({3, 7}, 76, 0.5f, 3)}});
  c.push_back({"Erf", "Erf", {}, {Uniform({3, 7}, 77, -2, 2)}});
  c.push_back({"Mish", "Mish", {}, {Uniform({3, 7}, 78, -4, 4)}});
  c.push_back({"Sigmoid", "Sigmoid", {}, {Uniform({3, 7}, 33, -3, 3)}});
  c.push_back({"Tanh", "Tanh", {}, {Uniform({3, 7}, 34, -2, 2)}});
  c.push_back({"GELUErf", "GELU", {{"approximate", S("none")}}, {Uniform({3, 7}, 35, -3, 3)}});
  c.push_back({"GELUTanh", "GELU", {{"approximate", S("tanh")}}, {Uniform({3, 7}, 36, -3, 3)}});
  c.push_back({"Dropout", "Dropout", {{"rate", F(0.4)}}, {Uniform({4, 6}, 37)}, 1, {}, 123});
  return c;
}

// Loop kernels that broadcast, move or gather elements: Add, Mul, the view and layout ops,
// Concat and Split.
std::vector<GradCase> BroadcastAndLayoutCases() {
  std::vector<GradCase> c;
  c.push_back({"AddBroadcast", "Add", {}, {Uniform({2, 3, 4}, 38), Uniform({3, 1}, 39)}});
  c.push_back({"AddBothBroadcast", "Add", {}, {Uniform({1, 4}, 40), Uniform({3, 1}, 41)}});
  c.push_back({"MulBroadcast", "Mul", {}, {Uniform({2, 3, 4}, 42), Uniform({4}, 43)}});
  c.push_back({"MulBothBroadcast", "Mul", {}, {Uniform({2, 1, 4}, 44), Uniform({3, 1}, 45)}});
  c.push_back({"SubBothBroadcast", "Sub", {}, {Uniform({2, 1, 4}, 144), Uniform({3, 1}, 145)}});
  c.push_back(
      {"DivBothBroadcast", "Div", {}, {Uniform({2, 1, 4}, 146), Uniform({3, 1}, 147, 0.5f, 2.f)}});
  c.push_back(
      {"DivSameShape", "Div", {}, {Uniform({2, 3}, 148), Uniform({2, 3}, 149, -2.f, -0.5f)}});
  c.push_back({"Flatten", "Flatten", {{"axis", I(2)}}, {Uniform({2, 3, 2, 2}, 46)}});
  c.push_back({"Reshape", "Reshape", {{"shape", Is({4, -1})}}, {Uniform({2, 3, 2}, 47)}});
  c.push_back({"Transpose", "Transpose", {{"perm", Is({1, 2, 0})}}, {Uniform({2, 3, 4}, 48)}});
  c.push_back({"SliceStrided",
               "Slice",
               {{"axes", Is({1, 2})}, {"starts", Is({1, 0})}, {"ends", Is({5, 6})},
                {"steps", Is({2, 3})}},
               {Uniform({2, 5, 6}, 61)}});
  c.push_back({"SliceReversed",
               "Slice",
               {{"axes", Is({1, 2})},
                {"starts", Is({4, 5})},
                {"ends", Is({-1, 0})},
                {"steps", Is({-1, -2})}},
               {Uniform({2, 5, 6}, 65)}});
  c.push_back({"SliceNegativeAxis",
               "Slice",
               {{"axes", Is({-1})}, {"starts", Is({1})}, {"ends", Is({3})}},
               {Uniform({3, 4}, 62)}});
  c.push_back({"ExpandClassToken", "Expand", {{"shape", Is({3, 2, 4})}}, {Uniform({1, 1, 4}, 63)}});
  c.push_back({"ExpandNewLeadingDim", "Expand", {{"shape", Is({2, 3, 4})}}, {Uniform({3, 1}, 64)}});
  c.push_back({"Concat",
               "Concat",
               {{"axis", I(1)}},
               {Uniform({2, 1, 3}, 49), Uniform({2, 2, 3}, 50), Uniform({2, 3, 3}, 51)}});
  c.push_back({"SplitOneGradAbsent",
               "Split",
               {{"axis", I(2)}, {"sizes", Is({1, 2, 3})}},
               {Uniform({2, 3, 6}, 52)},
               3,
               {1}});
  return c;
}

// Loop kernels over rows: Softmax, Embedding and the loss.
std::vector<GradCase> RowLoopCases() {
  std::vector<GradCase> c;
  c.push_back({"Softmax", "Softmax", {}, {Uniform({3, 5}, 53, -2, 2)}});
  c.push_back({"SoftmaxAxisScale",
               "Softmax",
               {{"axis", I(1)}, {"scale", F(0.5)}},
               {Uniform({2, 4, 3}, 54, -2, 2)}});
  c.push_back({"SoftmaxCausal",
               "Softmax",
               {{"causal", B(true)}, {"scale", F(0.7)}},
               {Uniform({2, 4, 4}, 55, -2, 2)}});
  c.push_back({"Embedding",
               "Embedding",
               {},
               {Ints({2, 3}, {4, 0, 4, 2, 4, 1}, proto::DTYPE_INT64), Uniform({5, 4}, 56)}});
  c.push_back(
      {"SoftmaxCrossEntropy",
       "SoftmaxCrossEntropy",
       {},
       {Uniform({2, 3, 4}, 57, -2, 2), Ints({2, 3}, {0, 3, 1, 2, 2, 0}, proto::DTYPE_INT32)}});
  return c;
}

// Reductions over axes. Max and min on distinct values, away from ties (where the gradient
// is shared and no derivative exists).
std::vector<GradCase> ReductionCases() {
  std::vector<GradCase> c;
  c.push_back({"ReduceSumKeepDims",
               "ReduceSum",
               {{"axes", Is({1, -1})}, {"keepdims", B(true)}},
               {Uniform({2, 3, 2, 4}, 180)}});
  c.push_back({"ReduceSumAll", "ReduceSum", {{"keepdims", B(false)}}, {Uniform({3, 4}, 181)}});
  c.push_back({"ReduceMax",
               "ReduceMax",
               {{"axes", Is({0, 2})}, {"keepdims", B(false)}},
               {Uniform({3, 2, 4}, 182)}});
  c.push_back({"ReduceMin", "ReduceMin", {{"axes", Is({-1})}}, {Uniform({3, 5}, 183)}});
  return c;
}

// Resize (nearest and bilinear, up and down, sizes and scale factors) and ConvTranspose2D.
std::vector<GradCase> ResizeAndTransposedConvCases() {
  std::vector<GradCase> c;
  const auto size = [](int64_t h, int64_t w) { return Is({h, w}); };
  c.push_back({"ResizeNearestUp", "Resize", {{"size", size(5, 9)}}, {Uniform({2, 2, 3, 4}, 180)}});
  c.push_back(
      {"ResizeNearestDown", "Resize", {{"size", size(3, 4)}}, {Uniform({1, 2, 7, 6}, 181)}});
  c.push_back({"ResizeNearestScaleFactor",
               "Resize",
               {{"size", size(7, 10)}, {"scale_h", F(1.5)}, {"scale_w", F(1.5)}},
               {Uniform({1, 1, 5, 7}, 182)}});
  c.push_back({"ResizeBilinearHalfPixel",
               "Resize",
               {{"size", size(7, 5)}, {"mode", S("bilinear")}},
               {Uniform({2, 2, 3, 4}, 183)}});
  c.push_back({"ResizeBilinearAlignCorners",
               "Resize",
               {{"size", size(6, 8)}, {"mode", S("bilinear")}, {"align_corners", B(true)}},
               {Uniform({1, 2, 4, 3}, 184)}});
  c.push_back(
      {"ResizeBilinearDownScaleFactor",
       "Resize",
       {{"size", size(4, 3)}, {"mode", S("bilinear")}, {"scale_h", F(0.5)}, {"scale_w", F(0.4)}},
       {Uniform({1, 1, 9, 8}, 185)}});
  c.push_back({"ConvTranspose2DStridedGroupedOutputPadding",
               "ConvTranspose2D",
               {{"stride", Is({2, 2})},
                {"padding", Is({1, 1})},
                {"output_padding", Is({1, 1})},
                {"groups", I(2)}},
               {Uniform({2, 4, 3, 3}, 186), Uniform({4, 3, 3, 3}, 187), Uniform({6}, 188)}});
  c.push_back({"ConvTranspose2DDilatedAsymmetricPadding",
               "ConvTranspose2D",
               {{"stride", Is({2, 1})},
                {"dilation", Is({2, 1})},
                {"padding", Is({1, 0, 0, 1})},
                {"output_padding", Is({1, 0})}},
               {Uniform({1, 3, 4, 3}, 189), Uniform({3, 2, 2, 3}, 190)}});
  return c;
}

// Segmentation kernels: GroupNorm (InstanceNorm as a group per channel) and the pixel loss,
// with ignored pixels (255) and int32 or int64 labels.
std::vector<GradCase> SegmentationCases() {
  std::vector<GradCase> c;
  c.push_back(
      {"GroupNorm",
       "GroupNorm",
       {{"num_groups", I(2)}},
       {Uniform({2, 4, 3, 2}, 180, -2, 2), Uniform({4}, 181, 0.5f, 1.5f), Uniform({4}, 182)}});
  c.push_back({"GroupNormInstance",
               "GroupNorm",
               {{"num_groups", I(3)}, {"epsilon", F(1e-3)}},
               {Uniform({2, 3, 5}, 183, -2, 2), Uniform({3}, 184, 0.5f, 1.5f), Uniform({3}, 185)}});
  c.push_back({"PixelSoftmaxCrossEntropy",
               "PixelSoftmaxCrossEntropy",
               {{"ignore_index", I(255)}},
               {Uniform({2, 3, 2, 2}, 186, -2, 2),
                Ints({2, 2, 2}, {0, 2, 255, 1, 2, 255, 0, 1}, proto::DTYPE_INT64)}});
  c.push_back(
      {"PixelSoftmaxCrossEntropyInt32",
       "PixelSoftmaxCrossEntropy",
       {},
       {Uniform({2, 4, 3}, 187, -2, 2), Ints({2, 3}, {3, 0, -100, 1, 2, 2}, proto::DTYPE_INT32)}});
  return c;
}

std::vector<GradCase> Cases() {
  std::vector<GradCase> all;
  for (std::vector<GradCase> (*group)() :
       {DnnlCases, ElementwiseLoopCases, BroadcastAndLayoutCases, RowLoopCases, ReductionCases,
        ResizeAndTransposedConvCases, SegmentationCases}) {
    for (GradCase& c : group()) all.push_back(std::move(c));
  }
  return all;
}

// ---- The check ----------------------------------------------------------------------------

graph::Attrs MakeAttrs(const graph::OpSchema& schema, std::map<std::string, proto::AttrValue> set) {
  for (const graph::AttrSpec& spec : schema.attrs) {
    if (set.count(spec.name) == 0 && !spec.required) set[spec.name] = spec.default_value;
  }
  return graph::Attrs(std::move(set));
}

// Everything about a case that does not change between forward runs.
struct CaseState {
  const graph::OpSchema* schema = nullptr;
  const GradientRule* rule = nullptr;
  graph::Attrs attrs;
  // Inputs the kernels see as inputs: all but the ones the training forward updates.
  int num_inputs = 0;
  std::vector<Tensor> outputs;  // Shapes and dtypes (zeroed buffers).
  std::vector<Tensor> saved;
  std::vector<Tensor> w_out;  // Weights of the loss; empty tensor where the grad is absent.
};

std::string CaseSetup(const GradCase& c, CaseState* s) {
  s->schema = graph::FindOp(c.op);
  if (s->schema == nullptr) return "op not in the op set";
  s->rule = planner::FindGradientRule(c.op);
  if (s->rule == nullptr) return "op has no gradient rule";
  s->attrs = MakeAttrs(*s->schema, c.attrs);
  s->num_inputs = s->rule->updates_inputs_from >= 0 ? s->rule->updates_inputs_from
                                                    : static_cast<int>(c.inputs.size());
  graph::InferenceContext ictx;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    ictx.input_names.push_back(
        s->schema->input_names[std::min(i, s->schema->input_names.size() - 1)]);
    ictx.input_shapes.push_back(c.inputs[i].shape);
    ictx.input_dtypes.push_back(c.inputs[i].dtype);
  }
  ictx.attrs = s->attrs;
  ictx.output_shapes.resize(c.num_outputs);
  ictx.output_dtypes.resize(c.num_outputs);
  absl::Status inferred = s->schema->infer(ictx);
  if (!inferred.ok()) return "shape inference: " + std::string(inferred.message());
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (int o = 0; o < c.num_outputs; ++o) {
    s->outputs.emplace_back(ictx.output_shapes[o], ictx.output_dtypes[o]);
    Tensor w(ictx.output_shapes[o]);
    for (int64_t i = 0; i < w.size(); ++i) w.f()[i] = dist(rng);
    s->w_out.push_back(c.absent_output_grads.count(o) ? Tensor() : w);
  }
  const Shape& x = c.inputs[0].shape;
  for (const SavedState& st : s->rule->saved) {
    Shape shape;
    switch (st.shape_of) {
      case SavedState::ShapeOf::kChannels:
        shape = {x[1]};
        break;
      case SavedState::ShapeOf::kRows:
        shape = Shape(x.begin(), x.end() - 1);
        break;
      case SavedState::ShapeOf::kOutput:
        shape = ictx.output_shapes[0];
        break;
      case SavedState::ShapeOf::kGroups:
        shape = {x[0], s->attrs.Int("num_groups")};
        break;
    }
    s->saved.emplace_back(shape,
                          st.dtype == proto::DTYPE_UNSPECIFIED ? c.inputs[0].dtype : st.dtype);
  }
  return "";
}

class GradientCheck : public ::testing::TestWithParam<GradCase> {
 protected:
  // Runs the training forward on `inputs`, writing s.outputs and s.saved.
  absl::Status Forward(const GradCase& c, const std::vector<Tensor>& inputs, CaseState& s) {
    ForwardArgs args;
    args.op = c.op;
    args.attrs = &s.attrs;
    for (int i = 0; i < s.num_inputs; ++i) args.inputs.push_back(inputs[i].view());
    for (size_t i = s.num_inputs; i < inputs.size(); ++i) {
      running_.resize(inputs.size());
      running_[i] = inputs[i];  // Fresh copies: the forward updates them.
      args.running.push_back(running_[i].view());
    }
    for (const Tensor& t : s.outputs) args.outputs.push_back(t.view());
    for (const Tensor& t : s.saved) args.saved.push_back(t.view());
    args.training = true;
    args.seed = c.seed;
    return RunInDeclaredScratch(
        args, [&](const ForwardArgs& a) { return kernels_.ScratchBytes(a); },
        [&](const ForwardArgs& a) { return kernels_.Forward(a); },
        [&] { return kernels_.unplanned_scratch_bytes(); });
  }

  // Returns L = sum over outputs with a gradient of sum(w_out * y), in double.
  static double Loss(const CaseState& s) {
    double l = 0;
    for (size_t o = 0; o < s.outputs.size(); ++o) {
      if (s.w_out[o].bytes.empty()) continue;
      for (int64_t i = 0; i < s.outputs[o].size(); ++i) {
        l += static_cast<double>(s.w_out[o].f()[i]) * s.outputs[o].f()[i];
      }
    }
    return l;
  }

  // Runs the backward after a forward on `inputs`, with input gradients for the inputs in
  // `needs` (prefilled with NaN) and data only for the tensors the gradient rule reads.
  absl::Status Backward(const GradCase& c, const std::vector<Tensor>& inputs, const CaseState& s,
                        const std::set<int>& needs, std::vector<Tensor>* grads) {
    std::set<std::pair<int, int>> reads;  // (kind, index)
    for (const planner::GradientRead& r : s.rule->reads) {
      if (r.only_if_input_needs_grad < 0 || needs.count(r.only_if_input_needs_grad)) {
        reads.insert({static_cast<int>(r.tensor.kind), r.tensor.index});
      }
    }
    auto pass = [&](TensorRef::Kind kind, int i, const Tensor& t) {
      return reads.count({static_cast<int>(kind), i}) ? t.view() : t.absent();
    };
    BackwardArgs args;
    args.op = c.op;
    args.attrs = &s.attrs;
    for (int i = 0; i < s.num_inputs; ++i) {
      args.inputs.push_back(pass(TensorRef::Kind::kInput, i, inputs[i]));
    }
    for (size_t i = 0; i < s.outputs.size(); ++i) {
      args.outputs.push_back(pass(TensorRef::Kind::kOutput, i, s.outputs[i]));
      args.output_grads.push_back(s.w_out[i].bytes.empty() ? s.outputs[i].absent()
                                                           : s.w_out[i].view());
    }
    for (size_t i = 0; i < s.saved.size(); ++i) {
      args.saved.push_back(pass(TensorRef::Kind::kSaved, i, s.saved[i]));
    }
    grads->clear();
    for (int i = 0; i < s.num_inputs; ++i) {
      Tensor g(inputs[i].shape, inputs[i].dtype);
      if (needs.count(i)) {
        std::fill(g.f(), g.f() + g.size(), std::numeric_limits<float>::quiet_NaN());
        args.input_grads.push_back(g.view());
      } else {
        args.input_grads.push_back(g.absent());
      }
      grads->push_back(std::move(g));
    }
    // The views point into the tensors now owned by *grads (moving a vector keeps its buffer).
    for (int i = 0; i < s.num_inputs; ++i) {
      if (needs.count(i)) args.input_grads[i].data = (*grads)[i].bytes.data();
    }
    return RunInDeclaredScratch(
        args, [&](const BackwardArgs& a) { return kernels_.ScratchBytes(a); },
        [&](const BackwardArgs& a) { return kernels_.Backward(a); },
        [&] { return kernels_.unplanned_scratch_bytes(); });
  }

  CpuKernels kernels_;
  std::vector<Tensor> running_;
};

TEST_P(GradientCheck, BackwardMatchesFiniteDifferences) {
  const GradCase& c = GetParam();
  CaseState s;
  const std::string setup_error = CaseSetup(c, &s);
  ASSERT_EQ(setup_error, "");
  ASSERT_TRUE(kernels_.Supports(c.op)) << c.op;

  std::set<int> needs;  // Every float input the forward sees.
  for (int i = 0; i < s.num_inputs; ++i) {
    if (c.inputs[i].is_float()) needs.insert(i);
  }
  ASSERT_FALSE(needs.empty());

  // Analytic gradients.
  std::vector<Tensor> inputs = c.inputs;
  absl::Status fwd = Forward(c, inputs, s);
  ASSERT_TRUE(fwd.ok()) << fwd;
  for (const Tensor& o : s.outputs) {
    for (int64_t i = 0; i < o.size(); ++i) ASSERT_TRUE(std::isfinite(o.f()[i])) << "output " << i;
  }
  std::vector<Tensor> grads;
  absl::Status bwd = Backward(c, inputs, s, needs, &grads);
  ASSERT_TRUE(bwd.ok()) << bwd;

  // Central differences of L, input by input, element by element.
  const double rel_tol = 1e-2, abs_tol = 2e-3;
  for (int in : needs) {
    int failures = 0;
    for (int64_t j = 0; j < inputs[in].size(); ++j) {
      const float x0 = c.inputs[in].f()[j];
      const float xp = static_cast<float>(x0 + c.step);
      const float xm = static_cast<float>(x0 - c.step);
      inputs[in].f()[j] = xp;
      ASSERT_TRUE(Forward(c, inputs, s).ok());
      const double lp = Loss(s);
      inputs[in].f()[j] = xm;
      ASSERT_TRUE(Forward(c, inputs, s).ok());
      const double lm = Loss(s);
      inputs[in].f()[j] = x0;
      const double numeric = (lp - lm) / (static_cast<double>(xp) - xm);
      const double analytic = grads[in].f()[j];
      const double tol = abs_tol + rel_tol * std::max(std::fabs(numeric), std::fabs(analytic));
      if (!(std::fabs(numeric - analytic) <= tol) && ++failures <= 8) {
        ADD_FAILURE()
            << c.op << " d/d "
            << s.schema->input_names[std::min<size_t>(in, s.schema->input_names.size() - 1)] << "["
            << in << "] element " << j << ": backward " << analytic << ", finite difference "
            << numeric;
      }
    }
    EXPECT_EQ(failures, 0) << "input " << in << " has " << failures << " mismatched elements of "
                           << inputs[in].size();
  }

  // One input needing a gradient at a time: fewer tensors read, the same gradient.
  if (needs.size() > 1) {
    ASSERT_TRUE(Forward(c, inputs, s).ok());
    for (int in : needs) {
      std::vector<Tensor> alone;
      absl::Status st = Backward(c, inputs, s, {in}, &alone);
      ASSERT_TRUE(st.ok()) << "only input " << in << " needs a gradient: " << st;
      for (int64_t j = 0; j < alone[in].size(); ++j) {
        const float a = alone[in].f()[j], b = grads[in].f()[j];
        ASSERT_NEAR(a, b, 1e-5 * (1 + std::fabs(b)))
            << "input " << in << " element " << j << " alone vs with the others";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryOp, GradientCheck, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<GradCase>& info) {
                           return info.param.name;
                         });

TEST(GradientCheckCoverage, EveryOpOfTheOpSetHasACase) {
  std::set<std::string> covered;
  for (const GradCase& c : Cases()) covered.insert(c.op);
  std::vector<std::string> missing;
  for (const graph::OpSchema* op : graph::AllOps()) {
    if (covered.count(op->name) == 0) missing.push_back(op->name);
  }
  std::ostringstream names;
  for (const std::string& m : missing) names << m << " ";
  EXPECT_TRUE(missing.empty()) << "ops without a gradient-check case: " << names.str();
}

}  // namespace
}  // namespace headroom::executor::cpu
