// Checks the CPU backend's bfloat16 kernels (--precision bf16) through CpuKernels, as the
// backend runs them: each op of the mixed-precision op set, forward and backward, against
// its own float32 kernel on the same bf16-representable values, with bf16 tolerances stated
// per op; float32 gradient checks of the mixed reductions (batch and layer norm statistics,
// softmax cross-entropy with bf16 logits); Cast's rounding; errors for ops without a
// bfloat16 kernel. Every call runs in exactly the scratch it declares.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "executor/cpu/cpu_kernels.h"
#include "executor/cpu/cpu_kernels_testing.h"
#include "executor/kernel_args.h"
#include "graph/graph_builder.h"
#include "graph/op_registry.h"
#include "graph/shape.h"
#include "gtest/gtest.h"
#include "util/bfloat16.h"

namespace headroom::executor::cpu {
namespace {

constexpr proto::DType kF32 = proto::DTYPE_FLOAT32;
constexpr proto::DType kBf16 = proto::DTYPE_BFLOAT16;
// bfloat16's machine epsilon, the spacing of its values at 1 (7 stored mantissa bits):
// rounding to nearest moves a value by at most half of it, 2^-8, relatively.
constexpr double kBf16Eps = 1.0 / 128;

// Returns `v` rounded to the nearest bfloat16.
float RoundBf16(float v) { return BFloat16ToFloat(FloatToBFloat16(v)); }

// A tensor of the float32 run and its twin of the bfloat16 run, holding the same values
// (bf16-representable where the twin is bfloat16). `bf16` says whether the twin is
// bfloat16; otherwise it has `dtype` too (parameters, statistics, labels, masks).
class Dual {
 public:
  Dual(graph::Shape shape, bool bf16, proto::DType dtype = kF32)
      : shape_(std::move(shape)), dtype_(dtype), bf16_(bf16) {
    const int64_t n = graph::NumElements(shape_);
    f32_run_.assign(n * graph::DTypeSize(dtype_), 0);
    bf16_run_.assign(n * (bf16_ ? 2 : graph::DTypeSize(dtype_)), 0);
  }

  // Fills both runs with uniform values in [lo, hi), rounded to bfloat16 (float tensors).
  Dual& Random(std::mt19937& rng, float lo = -1.f, float hi = 1.f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(num_elements());
    for (float& x : v) x = RoundBf16(dist(rng));
    return Set(v);
  }
  Dual& Set(const std::vector<float>& v) {
    std::memcpy(f32_run_.data(), v.data(), v.size() * sizeof(float));
    for (size_t i = 0; i < v.size(); ++i) {
      if (bf16_) {
        reinterpret_cast<uint16_t*>(bf16_run_.data())[i] = FloatToBFloat16(v[i]);
      } else {
        reinterpret_cast<float*>(bf16_run_.data())[i] = v[i];
      }
    }
    return *this;
  }
  // Sets both runs' int32 (or bool) values.
  template <typename T>
  Dual& SetRaw(const std::vector<T>& v) {
    std::memcpy(f32_run_.data(), v.data(), v.size() * sizeof(T));
    std::memcpy(bf16_run_.data(), v.data(), v.size() * sizeof(T));
    return *this;
  }

  TensorView View(bool bf16_run) {
    if (!bf16_run) return {f32_run_.data(), shape_, dtype_};
    return {bf16_run_.data(), shape_, bf16_ ? kBf16 : dtype_};
  }
  // Returns the run's values as float (float tensors only).
  std::vector<float> Values(bool bf16_run) const {
    std::vector<float> v(num_elements());
    const std::vector<uint8_t>& raw = bf16_run ? bf16_run_ : f32_run_;
    for (int64_t i = 0; i < num_elements(); ++i) {
      v[i] = bf16_run && bf16_ ? BFloat16ToFloat(reinterpret_cast<const uint16_t*>(raw.data())[i])
                               : reinterpret_cast<const float*>(raw.data())[i];
    }
    return v;
  }
  int64_t num_elements() const { return graph::NumElements(shape_); }
  const graph::Shape& shape() const { return shape_; }
  bool bf16() const { return bf16_; }

 private:
  graph::Shape shape_;
  proto::DType dtype_;
  bool bf16_;
  std::vector<uint8_t> f32_run_, bf16_run_;
};

// How close the bfloat16 run must come to the float32 run: |bf16 - f32| <= rel * |f32| +
// abs * max|f32| over the tensor.
struct Tolerance {
  double rel = 0;
  double abs = 0;
};

// One node of the mixed-precision op set, run forward (and backward) in both runs.
struct OpCase {
  std::string op;
  graph::Attrs attrs;
  std::vector<Dual*> inputs, outputs, saved;
  // Backward: one gradient per output (flowing in) and per input (nullptr: not wanted).
  std::vector<Dual*> output_grads, input_grads;
  uint64_t seed = 7;
  Tolerance forward_tol, backward_tol;
};

graph::Attrs MakeAttrs(const std::string& op,
                       const std::map<std::string, proto::AttrValue>& set = {}) {
  const graph::OpSchema* schema = graph::FindOp(op);
  EXPECT_NE(schema, nullptr) << op;
  std::map<std::string, proto::AttrValue> values;
  if (schema != nullptr) {
    for (const graph::AttrSpec& spec : schema->attrs) values[spec.name] = spec.default_value;
  }
  for (const auto& [name, value] : set) values[name] = value;
  return graph::Attrs(values);
}

void ExpectWithin(const Dual& t, Tolerance tol, const std::string& what) {
  const std::vector<float> want = t.Values(false), got = t.Values(true);
  double max_abs = 0;
  for (float v : want) max_abs = std::max(max_abs, std::fabs(static_cast<double>(v)));
  int misses = 0;
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double bound = tol.rel * std::fabs(want[i]) + tol.abs * max_abs;
    worst = std::max(worst, err / (max_abs > 0 ? max_abs : 1));
    if (err <= bound || (std::isnan(got[i]) && std::isnan(want[i]))) continue;
    if (++misses <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: float32 " << want[i] << ", bfloat16 " << got[i]
                    << " (bound " << bound << ")";
    }
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << want.size()
                       << " elements outside the tolerance; worst error / max|f32| " << worst;
}

class Bf16KernelsTest : public ::testing::Test {
 public:
  absl::Status Forward(const ForwardArgs& args) {
    return RunInDeclaredScratch(
        args, [&](const ForwardArgs& a) { return kernels_.ScratchBytes(a); },
        [&](const ForwardArgs& a) { return kernels_.Forward(a); },
        [&] { return kernels_.unplanned_scratch_bytes(); });
  }
  absl::Status Backward(const BackwardArgs& args) {
    return RunInDeclaredScratch(
        args, [&](const BackwardArgs& a) { return kernels_.ScratchBytes(a); },
        [&](const BackwardArgs& a) { return kernels_.Backward(a); },
        [&] { return kernels_.unplanned_scratch_bytes(); });
  }

  static std::vector<TensorView> Views(const std::vector<Dual*>& ts, bool bf16_run) {
    std::vector<TensorView> views;
    for (Dual* t : ts) views.push_back(t->View(bf16_run));
    return views;
  }

  // Returns the arguments both directions share: op, attributes, inputs, outputs, saved.
  template <typename Args>
  static Args CommonOf(const OpCase& c, bool bf16_run) {
    Args args;
    args.op = c.op;
    args.attrs = &c.attrs;
    args.inputs = Views(c.inputs, bf16_run);
    args.outputs = Views(c.outputs, bf16_run);
    args.saved = Views(c.saved, bf16_run);
    return args;
  }

  ForwardArgs ForwardOf(const OpCase& c, bool bf16_run) {
    ForwardArgs f = CommonOf<ForwardArgs>(c, bf16_run);
    f.seed = c.seed;
    return f;
  }

  BackwardArgs BackwardOf(const OpCase& c, bool bf16_run) {
    BackwardArgs b = CommonOf<BackwardArgs>(c, bf16_run);
    b.output_grads = Views(c.output_grads, bf16_run);
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      Dual* g = i < c.input_grads.size() ? c.input_grads[i] : nullptr;
      if (g != nullptr) {
        b.input_grads.push_back(g->View(bf16_run));
      } else {
        TensorView absent = c.inputs[i]->View(bf16_run);
        absent.data = nullptr;
        b.input_grads.push_back(absent);
      }
    }
    return b;
  }

  // Runs `c` forward and (if it has output gradients) backward in both runs and checks the
  // bfloat16 run's outputs and input gradients against the float32 run's.
  void Check(const OpCase& c) {
    for (bool bf16_run : {false, true}) {
      const absl::Status s = Forward(ForwardOf(c, bf16_run));
      ASSERT_TRUE(s.ok()) << c.op << (bf16_run ? " bf16" : " f32") << " forward: " << s;
    }
    for (size_t i = 0; i < c.outputs.size(); ++i) {
      ExpectWithin(*c.outputs[i], c.forward_tol, absl::StrCat(c.op, " output ", i));
    }
    if (c.output_grads.empty()) return;
    for (bool bf16_run : {false, true}) {
      const absl::Status s = Backward(BackwardOf(c, bf16_run));
      ASSERT_TRUE(s.ok()) << c.op << (bf16_run ? " bf16" : " f32") << " backward: " << s;
    }
    for (size_t i = 0; i < c.input_grads.size(); ++i) {
      if (c.input_grads[i] == nullptr) continue;
      ExpectWithin(*c.input_grads[i], c.backward_tol, absl::StrCat(c.op, " gradient of input ", i));
    }
  }

  CpuKernels kernels_;
  std::mt19937 rng_{2024};
};

// ---- Ops whose bfloat16 result is the float32 result rounded once ------------------------
//
// Same inputs, float32 arithmetic in both runs: the bf16 output is the f32 output rounded
// to nearest, |error| <= 2^-8 |f32| (plus the backward's dependence on the forward's
// rounded output, where it reads y).

TEST_F(Bf16KernelsTest, ElementwiseOpsRoundTheFloat32ResultOnce) {
  const Tolerance once{kBf16Eps / 2, 0};
  for (const char* op : {"ReLU", "GELU"}) {
    Dual x({4, 33}, true), y({4, 33}, true), dy({4, 33}, true), dx({4, 33}, true);
    x.Random(rng_, -3, 3);
    dy.Random(rng_);
    OpCase c{op, MakeAttrs(op), {&x}, {&y}, {}, {&dy}, {&dx}};
    c.forward_tol = once;
    c.backward_tol = once;
    Check(c);
  }
  {
    Dual a({3, 40}, true), b({3, 40}, true), y({3, 40}, true), dy({3, 40}, true);
    Dual da({3, 40}, true), db({3, 40}, true);
    a.Random(rng_);
    b.Random(rng_);
    dy.Random(rng_);
    for (const char* op : {"Add", "Mul"}) {
      OpCase c{op, MakeAttrs(op), {&a, &b}, {&y}, {}, {&dy}, {&da, &db}};
      c.forward_tol = once;
      c.backward_tol = once;
      Check(c);
    }
  }
  {
    Dual x({8, 64}, true), y({8, 64}, true), mask({8, 64}, false, proto::DTYPE_BOOL);
    Dual dy({8, 64}, true), dx({8, 64}, true);
    x.Random(rng_);
    dy.Random(rng_);
    OpCase c{"Dropout", MakeAttrs("Dropout", {{"rate", graph::FloatAttr(0.25)}}),
             {&x},      {&y},
             {&mask},   {&dy},
             {&dx}};
    c.forward_tol = once;
    c.backward_tol = once;
    Check(c);
  }
}

// Softmax's backward reads its rounded output y: dx = y (dy - sum(dy y)), so dx's error is
// about 2^-8 |y| |dy| per term (y within 2^-8 relative), bounded by 2^-6 of the tensor's
// largest gradient.
TEST_F(Bf16KernelsTest, SoftmaxMatchesFloat32) {
  Dual x({6, 50}, true), y({6, 50}, true), dy({6, 50}, true), dx({6, 50}, true);
  x.Random(rng_, -4, 4);
  dy.Random(rng_);
  OpCase c{"Softmax", MakeAttrs("Softmax"), {&x}, {&y}, {}, {&dy}, {&dx}};
  c.forward_tol = {kBf16Eps / 2, 0};
  c.backward_tol = {kBf16Eps, 2 * kBf16Eps};
  Check(c);
}

TEST_F(Bf16KernelsTest, PoolsMatchFloat32) {
  for (const char* op : {"MaxPool", "AvgPool"}) {
    const graph::Attrs attrs = MakeAttrs(op, {{"kernel_size", graph::IntsAttr({3, 3})},
                                              {"stride", graph::IntsAttr({2, 2})},
                                              {"padding", graph::IntsAttr({1, 1})}});
    Dual x({2, 3, 9, 9}, true), y({2, 3, 5, 5}, true), dy({2, 3, 5, 5}, true);
    Dual dx({2, 3, 9, 9}, true);
    x.Random(rng_);
    dy.Random(rng_);
    OpCase c{op, attrs, {&x}, {&y}, {}, {&dy}, {&dx}};
    // Max pool copies values (exact); an average of up to 9 values and the spread of dy
    // (sums of up to 4 windows' shares) are rounded once.
    c.forward_tol = {kBf16Eps / 2, 0};
    c.backward_tol = {kBf16Eps / 2, 0};
    Check(c);
  }
  Dual x({2, 4, 5, 5}, true), y({2, 4, 1, 1}, true), dy({2, 4, 1, 1}, true);
  Dual dx({2, 4, 5, 5}, true);
  x.Random(rng_);
  dy.Random(rng_);
  OpCase c{"GlobalAvgPool", MakeAttrs("GlobalAvgPool"), {&x}, {&y}, {}, {&dy}, {&dx}};
  c.forward_tol = {kBf16Eps / 2, 0};
  c.backward_tol = {kBf16Eps / 2, 0};
  Check(c);
}

// The data-movement ops copy bytes of any dtype: bitwise what the float32 run holds.
TEST_F(Bf16KernelsTest, DataMovementIsExact) {
  Dual x({2, 3, 4}, true), y({4, 2, 3}, true), dy({4, 2, 3}, true), dx({2, 3, 4}, true);
  x.Random(rng_);
  dy.Random(rng_);
  Check({"Transpose",
         MakeAttrs("Transpose", {{"perm", graph::IntsAttr({2, 0, 1})}}),
         {&x},
         {&y},
         {},
         {&dy},
         {&dx}});
  Dual flat({2, 12}, true), dflat({2, 12}, true), dx2({2, 3, 4}, true);
  dflat.Random(rng_);
  Check({"Flatten", MakeAttrs("Flatten"), {&x}, {&flat}, {}, {&dflat}, {&dx2}});
  Dual s0({2, 3, 1}, true), s1({2, 3, 3}, true), ds0({2, 3, 1}, true), ds1({2, 3, 3}, true);
  Dual dx3({2, 3, 4}, true);
  ds0.Random(rng_);
  ds1.Random(rng_);
  Check({"Split",
         MakeAttrs("Split", {{"axis", graph::IntAttr(2)}, {"sizes", graph::IntsAttr({1, 3})}}),
         {&x},
         {&s0, &s1},
         {},
         {&ds0, &ds1},
         {&dx3}});
}

// ---- Products: float32 accumulation ------------------------------------------------------
//
// Both runs multiply the same values and accumulate in float32; the bf16 output is rounded
// once (2^-8 relative), and the two kernels may sum in different orders (float32
// roundoff, far below bf16's: bounded here by 2^-11 of the tensor's largest value).

TEST_F(Bf16KernelsTest, Conv2DMatchesFloat32) {
  const graph::Attrs attrs = MakeAttrs(
      "Conv2D", {{"stride", graph::IntsAttr({2, 2})}, {"padding", graph::IntsAttr({1, 1})}});
  Dual x({2, 16, 9, 9}, true), w({32, 16, 3, 3}, true), b({32}, true), y({2, 32, 5, 5}, true);
  Dual dy({2, 32, 5, 5}, true), dx({2, 16, 9, 9}, true), dw({32, 16, 3, 3}, true), db({32}, true);
  x.Random(rng_);
  w.Random(rng_, -0.2f, 0.2f);
  b.Random(rng_);
  dy.Random(rng_);
  OpCase c{"Conv2D", attrs, {&x, &w, &b}, {&y}, {}, {&dy}, {&dx, &dw, &db}};
  c.forward_tol = {kBf16Eps / 2, kBf16Eps / 16};
  c.backward_tol = {kBf16Eps / 2, kBf16Eps / 16};
  Check(c);
  // The bias gradient alone (no weight gradient) comes from its own loop.
  OpCase bias_only{"Conv2D", attrs, {&x, &w, &b}, {&y}, {}, {&dy}, {nullptr, nullptr, &db}};
  bias_only.forward_tol = c.forward_tol;
  bias_only.backward_tol = c.backward_tol;
  Check(bias_only);
}

TEST_F(Bf16KernelsTest, MatMulMatchesFloat32) {
  // GPT-2-like: [batch, seq, d] x [d, 4d] + bias, and attention's batched a x b^T.
  Dual a({2, 8, 64}, true), w({64, 96}, true), bias({96}, true), y({2, 8, 96}, true);
  Dual dy({2, 8, 96}, true), da({2, 8, 64}, true), dw({64, 96}, true), dbias({96}, true);
  a.Random(rng_);
  w.Random(rng_, -0.2f, 0.2f);
  bias.Random(rng_);
  dy.Random(rng_);
  OpCase c{"MatMul", MakeAttrs("MatMul"), {&a, &w, &bias}, {&y}, {}, {&dy}, {&da, &dw, &dbias}};
  c.forward_tol = {kBf16Eps / 2, kBf16Eps / 16};
  c.backward_tol = {kBf16Eps / 2, kBf16Eps / 16};
  Check(c);

  Dual q({4, 16, 32}, true), k({4, 16, 32}, true), s({4, 16, 16}, true), ds({4, 16, 16}, true);
  Dual dq({4, 16, 32}, true), dk({4, 16, 32}, true);
  q.Random(rng_);
  k.Random(rng_);
  ds.Random(rng_);
  OpCase t{"MatMul",  MakeAttrs("MatMul", {{"transpose_b", graph::BoolAttr(true)}}),
           {&q, &k},  {&s},
           {},        {&ds},
           {&dq, &dk}};
  t.forward_tol = c.forward_tol;
  t.backward_tol = c.backward_tol;
  Check(t);
}

// The MatMul backwards the bf16 dispatch stages through the float32 kernel: a transposed a
// whose db sums over a's batch, and batch dims broadcast pairwise ([2,1,M,K] x [1,3,K,N]).
TEST_F(Bf16KernelsTest, StagedMatMulBackwardsMatchFloat32) {
  Dual a({3, 24, 8}, true), w({24, 16}, true), y({3, 8, 16}, true), dy({3, 8, 16}, true);
  Dual da({3, 24, 8}, true), dw({24, 16}, true);
  a.Random(rng_);
  w.Random(rng_);
  dy.Random(rng_);
  OpCase c{"MatMul",  MakeAttrs("MatMul", {{"transpose_a", graph::BoolAttr(true)}}),
           {&a, &w},  {&y},
           {},        {&dy},
           {&da, &dw}};
  c.forward_tol = {kBf16Eps / 2, kBf16Eps / 16};
  c.backward_tol = {kBf16Eps / 2, kBf16Eps / 16};
  Check(c);

  Dual p({2, 1, 4, 8}, true), q({1, 3, 8, 5}, true), r({2, 3, 4, 5}, true), dr({2, 3, 4, 5}, true);
  Dual dp({2, 1, 4, 8}, true), dq({1, 3, 8, 5}, true);
  p.Random(rng_);
  q.Random(rng_);
  dr.Random(rng_);
  OpCase b{"MatMul", MakeAttrs("MatMul"), {&p, &q}, {&r}, {}, {&dr}, {&dp, &dq}};
  b.forward_tol = c.forward_tol;
  b.backward_tol = c.backward_tol;
  Check(b);
}

// Embedding: a bf16 table and int32 ids; the backward scatter-adds dy rows in float32 and
// rounds the table gradient once.
TEST_F(Bf16KernelsTest, EmbeddingMatchesFloat32) {
  Dual ids({3, 5}, false, proto::DTYPE_INT32), table({10, 16}, true), y({3, 5, 16}, true);
  Dual dy({3, 5, 16}, true), dtable({10, 16}, true);
  std::vector<int32_t> id_values;
  for (int i = 0; i < 15; ++i) id_values.push_back((i * 7) % 10);
  ids.SetRaw(id_values);
  table.Random(rng_);
  dy.Random(rng_);
  OpCase c{"Embedding", MakeAttrs("Embedding"), {&ids, &table}, {&y}, {},
           {&dy},       {nullptr, &dtable}};
  c.forward_tol = {0, 0};
  c.backward_tol = {kBf16Eps / 2, 0};
  Check(c);
}

// ---- Normalisations and the loss: bf16 data, float32 parameters and statistics ---------

// Runs a norm (BatchNorm, LayerNorm) with bf16 x and y, float32 weight, bias and saved
// statistics (shapes `params` and `stats`). The statistics come from the same values in
// float32: equal up to float32 roundoff. y is the float32 result rounded once; so is dx,
// which reads x and the float32 statistics (not y).
void CheckNorm(Bf16KernelsTest* test, const std::string& op, const graph::Shape& xs,
               const graph::Shape& params, const graph::Shape& stats) {
  Dual x(xs, true), w(params, false), b(params, false), y(xs, true);
  Dual s0(stats, false), s1(stats, false);
  Dual dy(xs, true), dx(xs, true), dw(params, false), db(params, false);
  x.Random(test->rng_, -2, 3);
  w.Random(test->rng_);
  b.Random(test->rng_);
  dy.Random(test->rng_);
  OpCase c{op, MakeAttrs(op), {&x, &w, &b}, {&y}, {&s0, &s1}, {&dy}, {&dx, &dw, &db}};
  c.forward_tol = {kBf16Eps / 2, 1e-6};
  c.backward_tol = {kBf16Eps / 2, 1e-6};
  test->Check(c);
  ExpectWithin(s0, {1e-6, 1e-6}, op + " saved mean");
  ExpectWithin(s1, {1e-6, 1e-6}, op + " saved deviation statistic");
}

TEST_F(Bf16KernelsTest, BatchNormKeepsFloat32StatisticsAndParameters) {
  CheckNorm(this, "BatchNorm", {4, 6, 5, 5}, {6}, {6});
}

TEST_F(Bf16KernelsTest, LayerNormKeepsFloat32StatisticsAndParameters) {
  CheckNorm(this, "LayerNorm", {3, 4, 48}, {48}, {3, 4});
}

// Softmax cross-entropy of bf16 logits against integer labels: a float32 loss, bf16 dlogits.
OpCase CrossEntropyCase(Dual& logits, Dual& labels, Dual& loss, Dual& dloss, Dual& dlogits) {
  return {"SoftmaxCrossEntropy",
          MakeAttrs("SoftmaxCrossEntropy"),
          {&logits, &labels},
          {&loss},
          {},
          {&dloss},
          {&dlogits, nullptr}};
}

TEST_F(Bf16KernelsTest, CrossEntropyLossIsFloat32) {
  Dual logits({8, 40}, true), labels({8}, false, proto::DTYPE_INT64), loss({}, false);
  Dual dloss({}, false), dlogits({8, 40}, true);
  logits.Random(rng_, -5, 5);
  std::vector<int64_t> label_values;
  for (int i = 0; i < 8; ++i) label_values.push_back((i * 13) % 40);
  labels.SetRaw(label_values);
  dloss.Set({1.5f});
  OpCase c = CrossEntropyCase(logits, labels, loss, dloss, dlogits);
  // The loss is float32 from the same logits: equal up to float32 roundoff.
  c.forward_tol = {1e-6, 0};
  c.backward_tol = {kBf16Eps / 2, 0};
  Check(c);
}

// ---- Gradient checks in float32 of the mixed reductions ---------------------------------
//
// The bfloat16 path's float32 results (statistics, the loss, parameter gradients) against
// finite differences of its own float32 outputs. Perturbations of bf16 tensors must stay
// bf16-representable, so they are large (2^-4) and the check central (error O(h^2)).

// Returns sum(y * r) in double for the bf16 run's y.
double Project(const Dual& y, const std::vector<float>& r) {
  const std::vector<float> v = y.Values(true);
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += static_cast<double>(v[i]) * r[i];
  return s;
}

TEST_F(Bf16KernelsTest, NormParameterGradientsMatchFiniteDifferences) {
  for (const char* op : {"BatchNorm", "LayerNorm"}) {
    const bool bn = std::string(op) == "BatchNorm";
    const graph::Shape xs = bn ? graph::Shape{4, 3, 4, 4} : graph::Shape{6, 32};
    const int64_t params = bn ? 3 : 32;
    const graph::Shape stat_shape = bn ? graph::Shape{3} : graph::Shape{6};
    Dual x(xs, true), w({params}, false), b({params}, false), y(xs, true);
    Dual s0(stat_shape, false), s1(stat_shape, false);
    Dual dy(xs, true), dx(xs, true), dw({params}, false), db({params}, false);
    x.Random(rng_, -2, 2);
    w.Random(rng_);
    b.Random(rng_);
    dy.Random(rng_);
    const std::vector<float> r = dy.Values(true);  // L = sum(y * dy): dL/dy = dy.
    OpCase c{op, MakeAttrs(op), {&x, &w, &b}, {&y}, {&s0, &s1}, {&dy}, {nullptr, &dw, &db}};
    ASSERT_TRUE(Forward(ForwardOf(c, true)).ok());
    ASSERT_TRUE(Backward(BackwardOf(c, true)).ok());
    // y is linear in weight and bias, so the central difference is exact up to y's
    // rounding: 2^-8 |y| per element, summed at random signs.
    const double h = 0.5;
    for (Dual* p : {&w, &b}) {
      Dual* g = p == &w ? &dw : &db;
      const std::vector<float> base = p->Values(true), grad = g->Values(true);
      for (int64_t i = 0; i < params; ++i) {
        std::vector<float> v = base;
        v[i] = base[i] + h;
        p->Set(v);
        ASSERT_TRUE(Forward(ForwardOf(c, true)).ok());
        const double up = Project(y, r);
        v[i] = base[i] - h;
        p->Set(v);
        ASSERT_TRUE(Forward(ForwardOf(c, true)).ok());
        const double down = Project(y, r);
        p->Set(base);
        const double fd = (up - down) / (2 * h);
        EXPECT_NEAR(grad[i], fd, 1e-2 * (1 + std::fabs(fd)))
            << op << (p == &w ? " dweight[" : " dbias[") << i << "]";
      }
    }
  }
}

TEST_F(Bf16KernelsTest, CrossEntropyGradientMatchesFiniteDifferences) {
  Dual logits({4, 10}, true), labels({4}, false, proto::DTYPE_INT32), loss({}, false);
  Dual dloss({}, false), dlogits({4, 10}, true);
  // Logits on a 1/16 grid in [-1.5, 1.5], so that every logit +- h (1/16) is a bf16 value.
  std::uniform_int_distribution<int> grid(-24, 24);
  std::vector<float> z0(40);
  for (float& z : z0) z = grid(rng_) / 16.0f;
  logits.Set(z0);
  labels.SetRaw(std::vector<int32_t>{3, 0, 9, 5});
  dloss.Set({1.0f});
  OpCase c = CrossEntropyCase(logits, labels, loss, dloss, dlogits);
  ASSERT_TRUE(Forward(ForwardOf(c, true)).ok());
  // The float32 loss from bf16 logits equals the double-precision loss of those values.
  {
    const std::vector<float> z = logits.Values(true);
    const std::vector<int32_t> lab = {3, 0, 9, 5};
    double want = 0;
    for (int n = 0; n < 4; ++n) {
      double sum = 0;
      for (int k = 0; k < 10; ++k) sum += std::exp(static_cast<double>(z[n * 10 + k]));
      want += (std::log(sum) - z[n * 10 + lab[n]]) / 4;
    }
    EXPECT_NEAR(loss.Values(true)[0], want, 1e-6 * (1 + std::fabs(want)));
  }
  ASSERT_TRUE(Backward(BackwardOf(c, true)).ok());
  const std::vector<float> base = logits.Values(true), grad = dlogits.Values(true);
  const double h = 1.0 / 16;
  for (size_t i = 0; i < base.size(); ++i) {
    std::vector<float> v = base;
    v[i] = base[i] + h;
    ASSERT_EQ(RoundBf16(v[i]), v[i]);
    logits.Set(v);
    ASSERT_TRUE(Forward(ForwardOf(c, true)).ok());
    const double up = loss.Values(true)[0];
    v[i] = base[i] - h;
    logits.Set(v);
    ASSERT_TRUE(Forward(ForwardOf(c, true)).ok());
    const double down = loss.Values(true)[0];
    logits.Set(base);
    // Central difference error: h^2 / 6 * |d3L| <= h^2 / 24 here, plus dlogits' rounding.
    const double fd = (up - down) / (2 * h);
    EXPECT_NEAR(grad[i], fd, h * h / 24 + kBf16Eps / 2 * std::fabs(fd) + 1e-6)
        << "dlogits[" << i << "]";
  }
}

// ---- Cast ----------------------------------------------------------------------------------

graph::Attrs CastTo(proto::DType to) {
  return graph::Attrs({{"to", graph::IntAttr(static_cast<int64_t>(to))}});
}

TEST_F(Bf16KernelsTest, CastRoundTripsRepresentableValuesExactly) {
  std::vector<float> values;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1e4f, 1e4f);
  for (int i = 0; i < 1000; ++i) values.push_back(RoundBf16(dist(rng)));
  for (float v : {0.f, -0.f, 1.f, -2.5f, 1e-40f /* subnormal */, 3.3895314e38f /* max */,
                  std::numeric_limits<float>::infinity()}) {
    values.push_back(RoundBf16(v));
  }
  const graph::Shape shape{static_cast<int64_t>(values.size())};
  std::vector<uint16_t> half(values.size());
  std::vector<float> back(values.size());
  const graph::Attrs to_bf16 = CastTo(kBf16), to_f32 = CastTo(kF32);
  ForwardArgs down{"Cast", &to_bf16, {{values.data(), shape, kF32}}, {{half.data(), shape, kBf16}}};
  ASSERT_TRUE(Forward(down).ok());
  ForwardArgs up{"Cast", &to_f32, {{half.data(), shape, kBf16}}, {{back.data(), shape, kF32}}};
  ASSERT_TRUE(Forward(up).ok());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(std::memcmp(&back[i], &values[i], 4), 0)
        << i << ": " << values[i] << " -> " << back[i];
  }
}

TEST_F(Bf16KernelsTest, CastRoundsToNearestEven) {
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1).
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties to even (1 + 2^-6).
  // Just above a tie rounds up; just below rounds down. NaN stays NaN; a finite value
  // beyond bf16's largest rounds to infinity.
  const float tie_even = 1.0f + 1.0f / 256, tie_odd = 1.0f + 3.0f / 256;
  const float above = std::nextafter(tie_even, 2.f), below = std::nextafter(tie_odd, 0.f);
  const std::vector<float> in = {tie_even,
                                 tie_odd,
                                 above,
                                 below,
                                 -tie_even,
                                 std::numeric_limits<float>::quiet_NaN(),
                                 std::numeric_limits<float>::max()};
  const std::vector<float> want = {1.0f,
                                   1.0f + 1.0f / 64,
                                   1.0f + 1.0f / 128,
                                   1.0f + 1.0f / 128,
                                   -1.0f,
                                   std::numeric_limits<float>::quiet_NaN(),
                                   std::numeric_limits<float>::infinity()};
  const graph::Shape shape{static_cast<int64_t>(in.size())};
  std::vector<uint16_t> out(in.size());
  const graph::Attrs attrs = CastTo(kBf16);
  ForwardArgs f{
      "Cast", &attrs, {{const_cast<float*>(in.data()), shape, kF32}}, {{out.data(), shape, kBf16}}};
  ASSERT_TRUE(Forward(f).ok());
  for (size_t i = 0; i < in.size(); ++i) {
    const float got = BFloat16ToFloat(out[i]);
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got)) << i;
    } else {
      EXPECT_EQ(got, want[i]) << i << ": " << in[i];
    }
  }
}

TEST_F(Bf16KernelsTest, CastBackwardConvertsToTheInputsDtype) {
  // A parameter's bf16 gradient becomes float32 exactly; a float32 gradient of a bf16 input
  // is rounded.
  const graph::Shape shape{3};
  std::vector<float> x = {1, 2, 3};
  std::vector<uint16_t> x_bf16 = {FloatToBFloat16(1), FloatToBFloat16(2), FloatToBFloat16(3)};
  std::vector<uint16_t> dy = {FloatToBFloat16(0.5f), FloatToBFloat16(-1.25f),
                              FloatToBFloat16(1e-3f)};
  std::vector<float> dx(3);
  const graph::Attrs to_bf16 = CastTo(kBf16);
  BackwardArgs b;
  b.op = "Cast";
  b.attrs = &to_bf16;
  b.inputs = {{x.data(), shape, kF32}};
  b.outputs = {{nullptr, shape, kBf16}};
  b.output_grads = {{dy.data(), shape, kBf16}};
  b.input_grads = {{dx.data(), shape, kF32}};
  ASSERT_TRUE(Backward(b).ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(dx[i], BFloat16ToFloat(dy[i])) << i;

  const graph::Attrs to_f32 = CastTo(kF32);
  std::vector<float> dy32 = {1.0f + 1.0f / 256, 2.0f, -3.0f};
  std::vector<uint16_t> dx16(3);
  b.attrs = &to_f32;
  b.inputs = {{x_bf16.data(), shape, kBf16}};
  b.outputs = {{nullptr, shape, kF32}};
  b.output_grads = {{dy32.data(), shape, kF32}};
  b.input_grads = {{dx16.data(), shape, kBf16}};
  ASSERT_TRUE(Backward(b).ok());
  EXPECT_EQ(BFloat16ToFloat(dx16[0]), 1.0f);
  EXPECT_EQ(BFloat16ToFloat(dx16[2]), -3.0f);
}

TEST_F(Bf16KernelsTest, CastRejectsOtherDtypesAndAMismatchedOutput) {
  const graph::Shape shape{2};
  std::vector<float> x = {1, 2};
  std::vector<int32_t> ints = {1, 2};
  std::vector<uint16_t> y(2);
  const graph::Attrs to_bf16 = CastTo(kBf16), to_int = CastTo(proto::DTYPE_INT32);
  ForwardArgs f{
      "Cast", &to_int, {{x.data(), shape, kF32}}, {{ints.data(), shape, proto::DTYPE_INT32}}};
  absl::Status s = kernels_.Forward(f);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("'to'"), std::string::npos) << s;
  f = {"Cast", &to_bf16, {{x.data(), shape, kF32}}, {{x.data(), shape, kF32}}};
  s = kernels_.Forward(f);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("output 'y'"), std::string::npos) << s;
  f = {"Cast", &to_bf16, {{ints.data(), shape, proto::DTYPE_INT32}}, {{y.data(), shape, kBf16}}};
  s = kernels_.Forward(f);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("int32"), std::string::npos) << s;
}

// ---- Errors, scratch, accumulation --------------------------------------------------------

TEST_F(Bf16KernelsTest, OpWithoutBf16KernelIsAnErrorNamingOpAndTensor) {
  const graph::Shape shape{4};
  std::vector<uint16_t> x(4), y(4);
  const graph::Attrs attrs = MakeAttrs("Sigmoid");
  ForwardArgs f{"Sigmoid", &attrs, {{x.data(), shape, kBf16}}, {{y.data(), shape, kBf16}}};
  for (const absl::Status& s : {kernels_.Forward(f), kernels_.ScratchBytes(f).status()}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("Sigmoid"), std::string::npos) << s;
    EXPECT_NE(s.message().find("bfloat16"), std::string::npos) << s;
    EXPECT_NE(s.message().find("input 'x'"), std::string::npos) << s;
  }
}

TEST_F(Bf16KernelsTest, Conv2DRejectsMixedDtypes) {
  std::vector<uint16_t> x(2 * 4 * 4), y(2 * 2 * 2);
  std::vector<float> w(2 * 2 * 3 * 3);
  const graph::Attrs attrs = MakeAttrs("Conv2D");
  ForwardArgs f{"Conv2D",
                &attrs,
                {{x.data(), {1, 2, 4, 4}, kBf16}, {w.data(), {2, 2, 3, 3}, kF32}},
                {{y.data(), {1, 2, 2, 2}, kBf16}}};
  const absl::Status s = kernels_.Forward(f);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("weight"), std::string::npos) << s;
  EXPECT_NE(s.message().find("bfloat16"), std::string::npos) << s;
}

TEST_F(Bf16KernelsTest, StagedOpsDeclareTheirFloat32Copies) {
  // A staged GroupNorm's scratch holds float32 copies of x and y (forward): at least 4 bytes
  // per element of each, beyond the float32 kernel's own.
  Dual x({2, 8, 16, 16}, true), w({8}, false), b({8}, false), y({2, 8, 16, 16}, true);
  Dual mean({2, 4}, false), rstd({2, 4}, false);
  OpCase c{"GroupNorm",
           MakeAttrs("GroupNorm", {{"num_groups", graph::IntAttr(4)}}),
           {&x, &w, &b},
           {&y},
           {&mean, &rstd}};
  const absl::StatusOr<uint64_t> f32 = kernels_.ScratchBytes(ForwardOf(c, false));
  const absl::StatusOr<uint64_t> bf16 = kernels_.ScratchBytes(ForwardOf(c, true));
  ASSERT_TRUE(f32.ok() && bf16.ok()) << f32.status() << bf16.status();
  EXPECT_GE(*bf16, *f32 + 2 * x.num_elements() * sizeof(float));
}

// The ops with bfloat16 kernels of their own declare no float32 copy: a bfloat16 call's
// scratch is at most the float32 call's, forward and backward (Embedding's backward aside:
// it groups the ids' positions by id, (V + 1 + n) int64, no copy of any float tensor).
TEST_F(Bf16KernelsTest, NativeOpsDeclareNoFloat32Copies) {
  auto expect_no_more = [&](const OpCase& c) {
    for (bool backward : {false, true}) {
      if (backward && c.output_grads.empty()) continue;
      absl::StatusOr<uint64_t> bytes[2];
      for (bool bf16_run : {false, true}) {
        bytes[bf16_run] = backward ? kernels_.ScratchBytes(BackwardOf(c, bf16_run))
                                   : kernels_.ScratchBytes(ForwardOf(c, bf16_run));
        ASSERT_TRUE(bytes[bf16_run].ok()) << c.op << ": " << bytes[bf16_run].status();
      }
      EXPECT_LE(*bytes[1], *bytes[0]) << c.op << (backward ? " backward" : " forward");
    }
  };
  Dual x({8, 256}, true), w({256}, false), b({256}, false), y({8, 256}, true);
  Dual mean({8}, false), rstd({8}, false), dy({8, 256}, true), dx({8, 256}, true);
  Dual dw({256}, false), db({256}, false), x2({8, 256}, true), dx2({8, 256}, true);
  Dual mask({8, 256}, false, proto::DTYPE_BOOL);
  expect_no_more({"LayerNorm",
                  MakeAttrs("LayerNorm"),
                  {&x, &w, &b},
                  {&y},
                  {&mean, &rstd},
                  {&dy},
                  {&dx, &dw, &db}});
  expect_no_more({"Softmax", MakeAttrs("Softmax"), {&x}, {&y}, {}, {&dy}, {&dx}});
  expect_no_more({"Add", MakeAttrs("Add"), {&x, &x2}, {&y}, {}, {&dy}, {&dx, &dx2}});
  expect_no_more({"Mul", MakeAttrs("Mul"), {&x, &x2}, {&y}, {}, {&dy}, {&dx, &dx2}});
  expect_no_more({"Dropout",
                  MakeAttrs("Dropout", {{"rate", graph::FloatAttr(0.25)}}),
                  {&x},
                  {&y},
                  {&mask},
                  {&dy},
                  {&dx}});
  Dual logits({8, 256}, true), labels({8}, false, proto::DTYPE_INT64), loss({}, false);
  Dual dloss({}, false), dlogits({8, 256}, true);
  labels.SetRaw(std::vector<int64_t>(8, 3));
  expect_no_more(CrossEntropyCase(logits, labels, loss, dloss, dlogits));

  Dual ids({3, 5}, false, proto::DTYPE_INT32), table({10, 16}, true), ey({3, 5, 16}, true);
  Dual edy({3, 5, 16}, true), dtable({10, 16}, true);
  ids.SetRaw(std::vector<int32_t>(15, 2));
  OpCase e{"Embedding", MakeAttrs("Embedding"), {&ids, &table}, {&ey}, {},
           {&edy},      {nullptr, &dtable}};
  const absl::StatusOr<uint64_t> bytes = kernels_.ScratchBytes(BackwardOf(e, true));
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, (10 + 1 + 15) * sizeof(int64_t));
}

// BatchNorm on oneDNN's bf16 primitives and the pools: what a bfloat16 call declares beyond
// the float32 call's stays below one float32 copy of x (oneDNN's bf16 batch norm converts
// in per-thread blocks; a pool's backward accumulates one float32 plane per thread).
TEST_F(Bf16KernelsTest, NormAndPoolScratchHoldsNoFloat32Copy) {
  const graph::Shape xs{16, 64, 32, 32};
  const uint64_t copy_bytes = graph::NumElements(xs) * sizeof(float);
  Dual x(xs, true), w({64}, false), b({64}, false), y(xs, true), s0({64}, false);
  Dual s1({64}, false), dy(xs, true), dx(xs, true), dw({64}, false), db({64}, false);
  const graph::Attrs pool = MakeAttrs("MaxPool", {{"kernel_size", graph::IntsAttr({3, 3})},
                                                  {"stride", graph::IntsAttr({2, 2})},
                                                  {"padding", graph::IntsAttr({1, 1})}});
  Dual py({16, 64, 16, 16}, true), pdy({16, 64, 16, 16}, true);
  const std::vector<OpCase> cases = {
      {"BatchNorm", MakeAttrs("BatchNorm"), {&x, &w, &b}, {&y}, {&s0, &s1}, {&dy}, {&dx, &dw, &db}},
      {"MaxPool", pool, {&x}, {&py}, {}, {&pdy}, {&dx}},
      {"AvgPool", MakeAttrs("AvgPool", pool.values()), {&x}, {&py}, {}, {&pdy}, {&dx}}};
  for (const OpCase& c : cases) {
    for (bool backward : {false, true}) {
      absl::StatusOr<uint64_t> bytes[2];
      for (bool bf16_run : {false, true}) {
        bytes[bf16_run] = backward ? kernels_.ScratchBytes(BackwardOf(c, bf16_run))
                                   : kernels_.ScratchBytes(ForwardOf(c, bf16_run));
        ASSERT_TRUE(bytes[bf16_run].ok()) << c.op << ": " << bytes[bf16_run].status();
      }
      EXPECT_LT(*bytes[1], *bytes[0] + copy_bytes)
          << c.op << (backward ? " backward" : " forward") << ": float32 " << *bytes[0]
          << " B, bfloat16 " << *bytes[1] << " B";
      std::printf("%s %s scratch: float32 %llu B, bfloat16 %llu B\n", c.op.c_str(),
                  backward ? "backward" : "forward", static_cast<unsigned long long>(*bytes[0]),
                  static_cast<unsigned long long>(*bytes[1]));
    }
  }
}

// Add and Mul broadcast in bfloat16 as in float32: a [C] bias over [N, T, C], its gradient
// summed over N and T in double and rounded once; Mul's broadcast gradient sums products
// rounded to bfloat16 (as its kernel stages them in dy's dtype), so within 2^-8 per term:
// 2^-8 of the sum of |terms| <= 2^-8 * 12 * max|dy| * max|other| (12 terms a column).
TEST_F(Bf16KernelsTest, BroadcastAddAndMulMatchFloat32) {
  for (const char* op : {"Add", "Mul"}) {
    Dual a({3, 4, 24}, true), b({24}, true), y({3, 4, 24}, true), dy({3, 4, 24}, true);
    Dual da({3, 4, 24}, true), db({24}, true);
    a.Random(rng_);
    b.Random(rng_);
    dy.Random(rng_);
    OpCase c{op, MakeAttrs(op), {&a, &b}, {&y}, {}, {&dy}, {&da, &db}};
    c.forward_tol = {kBf16Eps / 2, 0};
    c.backward_tol = {kBf16Eps / 2, std::string(op) == "Mul" ? 12 * kBf16Eps : 1e-6};
    Check(c);
  }
}

TEST_F(Bf16KernelsTest, AccumulateAddsBf16InFloat32) {
  const graph::Shape shape{3};
  std::vector<uint16_t> a = {FloatToBFloat16(1.0f), FloatToBFloat16(256.0f),
                             FloatToBFloat16(-2.0f)};
  std::vector<uint16_t> b = {FloatToBFloat16(1.0f / 256), FloatToBFloat16(1.0f),
                             FloatToBFloat16(0.5f)};
  ASSERT_TRUE(
      kernels_
          .Accumulate({a.data(), shape, kBf16}, {a.data(), shape, kBf16}, {b.data(), shape, kBf16})
          .ok());
  EXPECT_EQ(BFloat16ToFloat(a[0]), 1.0f);    // 1 + 2^-8: a tie, to even.
  EXPECT_EQ(BFloat16ToFloat(a[1]), 256.0f);  // 257: a tie at spacing 2, to even.
  EXPECT_EQ(BFloat16ToFloat(a[2]), -1.5f);
  std::vector<float> f = {1, 2, 3};
  const absl::Status s = kernels_.Accumulate({a.data(), shape, kBf16}, {f.data(), shape, kF32},
                                             {b.data(), shape, kBf16});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

}  // namespace
}  // namespace headroom::executor::cpu
