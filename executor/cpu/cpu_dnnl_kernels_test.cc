// Checks every oneDNN-backed kernel, forward and backward, against a naive reference loop in
// double precision written here from PyTorch's definitions, on small random shapes; and that
// the kernels are deterministic (two calls give bitwise the same bytes).

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "executor/cpu/cpu_context.h"
#include "executor/cpu/cpu_kernels_testing.h"
#include "executor/kernel_args.h"
#include "graph/op_registry.h"
#include "graph/shape.h"
#include "graph/graph_builder.h"
#include "gtest/gtest.h"

namespace headroom::executor::cpu {
namespace {

// ---- Test helpers ---------------------------------------------------------------------------

// A float32 tensor the test owns.
struct Tensor {
  graph::Shape shape;
  std::vector<float> values;

  static Tensor Zeros(const graph::Shape& shape) {
    return {shape, std::vector<float>(graph::NumElements(shape), 0.0f)};
  }
  TensorView View() { return TensorView{values.data(), shape, proto::DTYPE_FLOAT32}; }
  float operator[](int64_t i) const { return values[i]; }
};

// A view with shape but no data: a tensor the kernel is not given.
TensorView Absent(const graph::Shape& shape) {
  TensorView v;
  v.shape = shape;
  return v;
}

// Short names for attribute values (graph/graph_builder.h).
const auto Int = &graph::IntAttr;
const auto Ints = &graph::IntsAttr;
const auto Bool = &graph::BoolAttr;
const auto Float = &graph::FloatAttr;

// Returns the op's attributes: its schema's defaults, overridden by `set`.
graph::Attrs MakeAttrs(const std::string& op, const std::map<std::string, proto::AttrValue>& set) {
  const graph::OpSchema* schema = graph::FindOp(op);
  EXPECT_NE(schema, nullptr) << op;
  std::map<std::string, proto::AttrValue> values;
  for (const graph::AttrSpec& spec : schema->attrs) values[spec.name] = spec.default_value;
  for (const auto& [name, value] : set) values[name] = value;
  return graph::Attrs(values);
}

// Returns the output shape the op set's own inference gives.
graph::Shape InferOutput(const std::string& op, const graph::Attrs& attrs,
                         const std::vector<graph::Shape>& inputs) {
  graph::InferenceContext ic;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ic.input_names.push_back(absl::StrCat("in", i));
    ic.input_dtypes.push_back(proto::DTYPE_FLOAT32);
  }
  ic.input_shapes = inputs;
  ic.attrs = attrs;
  ic.output_shapes.resize(1);
  ic.output_dtypes.resize(1);
  const absl::Status status = graph::FindOp(op)->infer(ic);
  EXPECT_TRUE(status.ok()) << status;
  return ic.output_shapes[0];
}

// Expects |actual - expected| <= tol * (1 + |expected|) everywhere; prints the first misses.
void ExpectClose(const std::vector<float>& actual, const std::vector<double>& expected,
                 const std::string& what, double tol = 1e-4) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  int misses = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (std::abs(actual[i] - expected[i]) <= tol * (1 + std::abs(expected[i]))) continue;
    if (++misses <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: expected " << expected[i] << ", got " << actual[i];
    }
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << actual.size() << " elements differ";
}

void ExpectBitwiseEqual(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.values.size(), b.values.size()) << what;
  EXPECT_EQ(std::memcmp(a.values.data(), b.values.data(), a.values.size() * sizeof(float)), 0)
      << what << " differs between two identical calls";
}

class DnnlKernelsTest : public ::testing::Test {
 protected:
  DnnlKernelsTest() { RegisterDnnlKernels(&table_); }

  // Each kernel runs in exactly the scratch it declares (cpu_kernels_testing.h).
  absl::Status Forward(const ForwardArgs& args) {
    return RunForwardInDeclaredScratch(ctx_, table_.at(args.op), args);
  }
  absl::Status Backward(const BackwardArgs& args) {
    return RunBackwardInDeclaredScratch(ctx_, table_.at(args.op), args);
  }

  Tensor Random(const graph::Shape& shape) {
    Tensor t = Tensor::Zeros(shape);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& v : t.values) v = dist(rng_);
    return t;
  }

  KernelTable table_;
  CpuContext ctx_;
  std::mt19937 rng_{1234};
};

TEST_F(DnnlKernelsTest, RegistersEveryOp) {
  for (const char* op : {"Conv2D", "ConvTranspose2D", "BatchNorm", "MatMul", "MaxPool", "AvgPool",
                         "GlobalAvgPool"}) {
    ASSERT_TRUE(table_.contains(op)) << op;
    EXPECT_NE(table_.at(op).forward, nullptr) << op;
    EXPECT_NE(table_.at(op).backward, nullptr) << op;
  }
}

// ---- Conv2D ---------------------------------------------------------------------------------

struct ConvCase {
  std::string name;
  graph::Shape x, w;
  std::vector<int64_t> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
  bool bias = true;
};

struct ConvReference {
  std::vector<double> y, dx, dw, db;
};

// PyTorch's conv2d and its gradients, all in one loop over (n, o, oh, ow, ci, i, j).
ConvReference ReferenceConv(const ConvCase& c, const Tensor& x, const Tensor& w, const Tensor& b,
                            const graph::Shape& ys, const Tensor& dy) {
  const int64_t n_ = c.x[0], cin = c.x[1], h = c.x[2], wd = c.x[3];
  const int64_t o_ = c.w[0], cg = c.w[1], kh = c.w[2], kw = c.w[3];
  const int64_t oh_ = ys[2], ow_ = ys[3], og = o_ / c.groups;
  const int64_t pt = c.padding[0], pl = c.padding[1];
  ConvReference r;
  r.y.assign(graph::NumElements(ys), 0);
  r.dx.assign(x.values.size(), 0);
  r.dw.assign(w.values.size(), 0);
  r.db.assign(o_, 0);
  for (int64_t n = 0; n < n_; ++n) {
    for (int64_t o = 0; o < o_; ++o) {
      const int64_t g = o / og;
      for (int64_t oh = 0; oh < oh_; ++oh) {
        for (int64_t ow = 0; ow < ow_; ++ow) {
          const int64_t yi = ((n * o_ + o) * oh_ + oh) * ow_ + ow;
          const double g_out = dy[yi];
          double acc = c.bias ? b[o] : 0.0;
          for (int64_t ci = 0; ci < cg; ++ci) {
            for (int64_t i = 0; i < kh; ++i) {
              const int64_t ih = oh * c.stride[0] - pt + i * c.dilation[0];
              if (ih < 0 || ih >= h) continue;
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t iw = ow * c.stride[1] - pl + j * c.dilation[1];
                if (iw < 0 || iw >= wd) continue;
                const int64_t xi = ((n * cin + g * cg + ci) * h + ih) * wd + iw;
                const int64_t wi = ((o * cg + ci) * kh + i) * kw + j;
                acc += static_cast<double>(x[xi]) * w[wi];
                r.dx[xi] += g_out * w[wi];
                r.dw[wi] += g_out * x[xi];
              }
            }
          }
          r.y[yi] = acc;
          r.db[o] += g_out;
        }
      }
    }
  }
  return r;
}

class ConvTest : public DnnlKernelsTest, public ::testing::WithParamInterface<ConvCase> {};

TEST_P(ConvTest, ForwardAndBackwardMatchReference) {
  const ConvCase& c = GetParam();
  const graph::Attrs attrs = MakeAttrs("Conv2D", {{"stride", Ints(c.stride)},
                                                  {"padding", Ints(c.padding)},
                                                  {"dilation", Ints(c.dilation)},
                                                  {"groups", Int(c.groups)}});
  Tensor x = Random(c.x), w = Random(c.w), b = Random({c.w[0]});
  std::vector<graph::Shape> in_shapes = {c.x, c.w};
  if (c.bias) in_shapes.push_back({c.w[0]});
  const graph::Shape ys = InferOutput("Conv2D", attrs, in_shapes);
  Tensor y = Tensor::Zeros(ys), dy = Random(ys);
  ConvCase ref_case = c;
  if (c.padding.size() == 4) ref_case.padding = {c.padding[0], c.padding[1]};
  const ConvReference ref = ReferenceConv(ref_case, x, w, b, ys, dy);

  ForwardArgs fwd;
  fwd.op = "Conv2D";
  fwd.attrs = &attrs;
  fwd.inputs = {x.View(), w.View()};
  if (c.bias) fwd.inputs.push_back(b.View());
  fwd.outputs = {y.View()};
  ASSERT_TRUE(Forward(fwd).ok()) << Forward(fwd);
  ExpectClose(y.values, ref.y, "y");

  Tensor dx = Tensor::Zeros(c.x), dw = Tensor::Zeros(c.w), db = Tensor::Zeros({c.w[0]});
  BackwardArgs bwd;
  bwd.op = "Conv2D";
  bwd.attrs = &attrs;
  bwd.inputs = fwd.inputs;
  bwd.outputs = {Absent(ys)};
  bwd.output_grads = {dy.View()};
  bwd.input_grads = {dx.View(), dw.View()};
  if (c.bias) bwd.input_grads.push_back(db.View());
  const absl::Status status = Backward(bwd);
  ASSERT_TRUE(status.ok()) << status;
  ExpectClose(dx.values, ref.dx, "dx");
  ExpectClose(dw.values, ref.dw, "dweight");
  if (c.bias) ExpectClose(db.values, ref.db, "dbias");

  // Determinism: a second forward and backward give the same bytes.
  Tensor y2 = Tensor::Zeros(ys), dx2 = Tensor::Zeros(c.x), dw2 = Tensor::Zeros(c.w);
  fwd.outputs = {y2.View()};
  ASSERT_TRUE(Forward(fwd).ok());
  bwd.input_grads[0] = dx2.View();
  bwd.input_grads[1] = dw2.View();
  ASSERT_TRUE(Backward(bwd).ok());
  ExpectBitwiseEqual(y, y2, "y");
  ExpectBitwiseEqual(dx, dx2, "dx");
  ExpectBitwiseEqual(dw, dw2, "dweight");

  // x needs no gradient: the weight is not given, dx is absent.
  Tensor dw3 = Tensor::Zeros(c.w);
  bwd.inputs[1] = Absent(c.w);
  bwd.input_grads[0] = Absent(c.x);
  bwd.input_grads[1] = dw3.View();
  ASSERT_TRUE(Backward(bwd).ok());
  ExpectBitwiseEqual(dw, dw3, "dweight without dx");

  // Only the bias needs a gradient: neither x nor the weight is given.
  if (c.bias) {
    Tensor db4 = Tensor::Zeros({c.w[0]});
    bwd.inputs[0] = Absent(c.x);
    bwd.input_grads = {Absent(c.x), Absent(c.w), db4.View()};
    ASSERT_TRUE(Backward(bwd).ok());
    ExpectClose(db4.values, ref.db, "dbias alone");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ConvTest,
    ::testing::Values(
        ConvCase{"Pad1Bias", {2, 3, 7, 6}, {4, 3, 3, 3}, {1, 1}, {1, 1}},
        ConvCase{"Stride2AsymmetricPadNoBias", {2, 3, 9, 8}, {5, 3, 3, 3}, {2, 2}, {1, 0, 2, 1},
                 {1, 1}, 1, false},
        ConvCase{"Stride2Rect", {1, 2, 8, 9}, {3, 2, 3, 2}, {2, 1}, {1, 1}},
        ConvCase{"Groups2", {2, 4, 6, 6}, {6, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 2},
        ConvCase{"Depthwise", {2, 8, 9, 9}, {8, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 8},
        ConvCase{"DepthwiseMultiplier2", {1, 4, 7, 7}, {8, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 4,
                 false},
        ConvCase{"Dilation2", {2, 3, 9, 9}, {4, 3, 3, 3}, {1, 1}, {2, 2}, {2, 2}},
        ConvCase{"Dilation2Stride2", {1, 3, 11, 10}, {4, 3, 3, 3}, {2, 2}, {1, 1}, {2, 3}},
        ConvCase{"OneByOne", {2, 16, 5, 5}, {8, 16, 1, 1}},
        ConvCase{"OneByOneStride2NoBias", {2, 8, 6, 6}, {16, 8, 1, 1}, {2, 2}, {0, 0}, {1, 1}, 1,
                 false},
        ConvCase{"WideChannels", {2, 32, 8, 8}, {32, 32, 3, 3}, {1, 1}, {1, 1}}),
    [](const ::testing::TestParamInfo<ConvCase>& info) { return info.param.name; });

// The scratch a convolution declares is what it needs: given that much it takes nothing
// else; given a byte less it computes the same bytes in scratch held outside any plan, which
// the context reports (the executor's accounting then shows the unplanned bytes).
TEST_F(DnnlKernelsTest, AConvolutionHandedLessThanItDeclaredRunsOnUnplannedScratch) {
  const graph::Attrs attrs = MakeAttrs("Conv2D", {{"padding", Ints({1, 1})}});
  Tensor x = Random({2, 32, 8, 8}), w = Random({32, 32, 3, 3}), b = Random({32});
  Tensor planned = Tensor::Zeros({2, 32, 8, 8}), unplanned = Tensor::Zeros({2, 32, 8, 8});
  ForwardArgs fwd;
  fwd.op = "Conv2D";
  fwd.attrs = &attrs;
  fwd.inputs = {x.View(), w.View(), b.View()};
  fwd.outputs = {planned.View()};
  const OpKernels& k = table_.at("Conv2D");
  absl::StatusOr<uint64_t> bytes = k.forward_scratch(ctx_, fwd);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  // 32 channels take oneDNN's blocked layouts: x, w and y are staged.
  EXPECT_GE(*bytes, (x.values.size() + w.values.size() + planned.values.size()) * 4);
  std::vector<uint8_t> scratch(*bytes + 64);
  fwd.scratch = scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
  fwd.scratch_bytes = *bytes;
  ASSERT_TRUE(k.forward(ctx_, fwd).ok());
  EXPECT_EQ(ctx_.unplanned_bytes, 0u);
  fwd.scratch_bytes = *bytes - 1;
  fwd.outputs = {unplanned.View()};
  ASSERT_TRUE(k.forward(ctx_, fwd).ok());
  EXPECT_EQ(ctx_.unplanned_bytes, *bytes);
  ExpectBitwiseEqual(planned, unplanned, "y");
}

// ---- BatchNorm ------------------------------------------------------------------------------

struct BatchNormReference {
  std::vector<double> y, mean, var, dx, dw, db;
};

// Training batch norm with batch statistics (biased variance) and its gradients.
BatchNormReference ReferenceBatchNorm(const Tensor& x, const Tensor& w, const Tensor& b,
                                      const Tensor& dy, double eps) {
  const int64_t n_ = x.shape[0], c_ = x.shape[1];
  const int64_t plane = x.shape.size() == 4 ? x.shape[2] * x.shape[3] : 1;
  const double m = static_cast<double>(n_ * plane);
  BatchNormReference r;
  r.y.assign(x.values.size(), 0);
  r.dx.assign(x.values.size(), 0);
  for (int64_t c = 0; c < c_; ++c) {
    auto index = [&](int64_t n, int64_t j) { return (n * c_ + c) * plane + j; };
    double mean = 0, var = 0, sum_dy = 0, sum_dy_xhat = 0;
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t j = 0; j < plane; ++j) mean += x[index(n, j)];
    mean /= m;
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t j = 0; j < plane; ++j) var += std::pow(x[index(n, j)] - mean, 2);
    var /= m;
    const double inv_std = 1 / std::sqrt(var + eps);
    for (int64_t n = 0; n < n_; ++n) {
      for (int64_t j = 0; j < plane; ++j) {
        const double xhat = (x[index(n, j)] - mean) * inv_std;
        r.y[index(n, j)] = xhat * w[c] + b[c];
        sum_dy += dy[index(n, j)];
        sum_dy_xhat += dy[index(n, j)] * xhat;
      }
    }
    for (int64_t n = 0; n < n_; ++n) {
      for (int64_t j = 0; j < plane; ++j) {
        const double xhat = (x[index(n, j)] - mean) * inv_std;
        r.dx[index(n, j)] = w[c] * inv_std / m * (m * dy[index(n, j)] - sum_dy - xhat * sum_dy_xhat);
      }
    }
    r.mean.push_back(mean);
    r.var.push_back(var);
    r.dw.push_back(sum_dy_xhat);
    r.db.push_back(sum_dy);
  }
  return r;
}

class BatchNormTest : public DnnlKernelsTest, public ::testing::WithParamInterface<graph::Shape> {
};

TEST_P(BatchNormTest, TrainingMatchesReferenceAndUpdatesRunningStats) {
  const graph::Shape shape = GetParam();
  const int64_t c = shape[1];
  const int64_t m = shape[0] * (shape.size() == 4 ? shape[2] * shape[3] : 1);
  const double eps = 1e-3, momentum = 0.2;
  const graph::Attrs attrs =
      MakeAttrs("BatchNorm", {{"epsilon", Float(eps)}, {"momentum", Float(momentum)}});
  Tensor x = Random(shape), w = Random({c}), b = Random({c}), dy = Random(shape);
  for (float& v : x.values) v = 3 * v + 0.5f;  // A mean and spread away from 0 and 1.
  Tensor running_mean = Random({c}), running_var = Random({c});
  for (float& v : running_var.values) v = std::abs(v) + 0.5f;
  const Tensor old_mean = running_mean, old_var = running_var;
  const BatchNormReference ref = ReferenceBatchNorm(x, w, b, dy, eps);

  Tensor y = Tensor::Zeros(shape), saved_mean = Tensor::Zeros({c}), saved_stat = Tensor::Zeros({c});
  ForwardArgs fwd;
  fwd.op = "BatchNorm";
  fwd.attrs = &attrs;
  fwd.training = true;
  fwd.inputs = {x.View(), w.View(), b.View()};
  fwd.outputs = {y.View()};
  fwd.saved = {saved_mean.View(), saved_stat.View()};
  fwd.running = {running_mean.View(), running_var.View()};
  absl::Status status = Forward(fwd);
  ASSERT_TRUE(status.ok()) << status;
  ExpectClose(y.values, ref.y, "y");
  ExpectClose(saved_mean.values, ref.mean, "saved mean");
  std::vector<double> want_mean, want_var;
  for (int64_t i = 0; i < c; ++i) {
    want_mean.push_back((1 - momentum) * old_mean[i] + momentum * ref.mean[i]);
    want_var.push_back((1 - momentum) * old_var[i] + momentum * ref.var[i] * m / (m - 1));
  }
  ExpectClose(running_mean.values, want_mean, "running_mean");
  ExpectClose(running_var.values, want_var, "running_var (unbiased)");

  Tensor dx = Tensor::Zeros(shape), dw = Tensor::Zeros({c}), db = Tensor::Zeros({c});
  BackwardArgs bwd;
  bwd.op = "BatchNorm";
  bwd.attrs = &attrs;
  bwd.inputs = {x.View(), w.View(), Absent({c})};
  bwd.outputs = {Absent(shape)};
  bwd.saved = fwd.saved;
  bwd.output_grads = {dy.View()};
  bwd.input_grads = {dx.View(), dw.View(), db.View()};
  status = Backward(bwd);
  ASSERT_TRUE(status.ok()) << status;
  ExpectClose(dx.values, ref.dx, "dx");
  ExpectClose(dw.values, ref.dw, "dweight");
  ExpectClose(db.values, ref.db, "dbias");

  // x needs no gradient: no weight, no dx; the parameter gradients agree.
  Tensor dw2 = Tensor::Zeros({c}), db2 = Tensor::Zeros({c});
  bwd.inputs[1] = Absent({c});
  bwd.input_grads = {Absent(shape), dw2.View(), db2.View()};
  ASSERT_TRUE(Backward(bwd).ok());
  ExpectClose(dw2.values, ref.dw, "dweight without dx");
  ExpectClose(db2.values, ref.db, "dbias without dx");

  // A re-forward (no running statistics) is bitwise the first forward and leaves them alone.
  const Tensor updated_mean = running_mean;
  Tensor y2 = Tensor::Zeros(shape);
  fwd.outputs = {y2.View()};
  fwd.running = {};
  ASSERT_TRUE(Forward(fwd).ok());
  ExpectBitwiseEqual(y, y2, "y");
  ExpectBitwiseEqual(running_mean, updated_mean, "running_mean after a re-forward");
}

// A training batch norm's forward arguments: x, weight, bias in; y out; mean and the
// deviation statistic saved (no running statistics).
ForwardArgs TrainingBatchNorm(const graph::Attrs& attrs, Tensor& x, Tensor& w, Tensor& b, Tensor& y,
                              Tensor& mean, Tensor& stat) {
  ForwardArgs fwd;
  fwd.op = "BatchNorm";
  fwd.attrs = &attrs;
  fwd.inputs = {x.View(), w.View(), b.View()};
  fwd.outputs = {y.View()};
  fwd.saved = {mean.View(), stat.View()};
  return fwd;
}

// A re-forward given the forward's statistics (a reversible block's rebuild): on the same x
// it is bitwise the forward; on another x' it normalises with the given statistics, not x''s
// own; it changes neither the statistics nor the running ones.
TEST_P(BatchNormTest, GivenStatisticsAreUsedNotComputed) {
  const graph::Shape shape = GetParam();
  const int64_t c = shape[1];
  const double eps = 1e-3;
  const graph::Attrs attrs = MakeAttrs("BatchNorm", {{"epsilon", Float(eps)}});
  Tensor x = Random(shape), w = Random({c}), b = Random({c});
  for (float& v : x.values) v = 3 * v + 0.5f;
  Tensor running_mean = Random({c}), running_var = Random({c});
  for (float& v : running_var.values) v = std::abs(v) + 0.5f;
  Tensor y = Tensor::Zeros(shape), mean = Tensor::Zeros({c}), stat = Tensor::Zeros({c});
  ForwardArgs fwd = TrainingBatchNorm(attrs, x, w, b, y, mean, stat);
  fwd.running = {running_mean.View(), running_var.View()};
  ASSERT_TRUE(Forward(fwd).ok());
  const Tensor saved_mean = mean, saved_stat = stat, updated_mean = running_mean;

  ForwardArgs again = fwd;
  again.running = {};
  again.saved_statistics_given = true;
  Tensor y_same = Tensor::Zeros(shape);
  again.outputs = {y_same.View()};
  absl::Status status = Forward(again);
  ASSERT_TRUE(status.ok()) << status;
  ExpectBitwiseEqual(y, y_same, "y re-run on the same x with the statistics given");

  // x' = x + 0.25: its own mean is 0.25 higher; normalised with x's statistics, y' = y +
  // 0.25 w / sqrt(var + eps) (with its own, y' would be y).
  Tensor x2 = x;
  for (float& v : x2.values) v += 0.25f;
  Tensor y2 = Tensor::Zeros(shape);
  again.inputs[0] = x2.View();
  again.outputs = {y2.View()};
  status = Forward(again);
  ASSERT_TRUE(status.ok()) << status;
  const int64_t plane = shape.size() == 4 ? shape[2] * shape[3] : 1;
  std::vector<double> want(x2.values.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const int64_t ch = static_cast<int64_t>(i) / plane % c;
    want[i] = (x2.values[i] - saved_mean[ch]) / std::sqrt(saved_stat[ch] + eps) * w[ch] + b[ch];
  }
  ExpectClose(y2.values, want, "y' normalised with the given statistics");
  ExpectBitwiseEqual(mean, saved_mean, "saved mean");
  ExpectBitwiseEqual(stat, saved_stat, "saved deviation statistic");
  ExpectBitwiseEqual(running_mean, updated_mean, "running_mean");
}

TEST_P(BatchNormTest, InPlaceForwardMatchesOutOfPlace) {
  const graph::Shape shape = GetParam();
  const int64_t c = shape[1];
  const graph::Attrs attrs = MakeAttrs("BatchNorm", {});
  Tensor x = Random(shape), w = Random({c}), b = Random({c});
  Tensor y = Tensor::Zeros(shape), mean = Tensor::Zeros({c}), stat = Tensor::Zeros({c});
  ForwardArgs fwd = TrainingBatchNorm(attrs, x, w, b, y, mean, stat);
  ASSERT_TRUE(Forward(fwd).ok());

  Tensor x_inplace = x, mean2 = Tensor::Zeros({c}), stat2 = Tensor::Zeros({c});
  fwd.inputs[0] = x_inplace.View();
  fwd.outputs = {x_inplace.View()};
  fwd.saved = {mean2.View(), stat2.View()};
  ASSERT_TRUE(Forward(fwd).ok());
  ExpectBitwiseEqual(x_inplace, y, "in-place y");
  ExpectBitwiseEqual(mean2, mean, "in-place saved mean");
  ExpectBitwiseEqual(stat2, stat, "in-place saved statistic");
}

TEST_P(BatchNormTest, InferenceUsesRunningStats) {
  const graph::Shape shape = GetParam();
  const int64_t c = shape[1];
  const double eps = 1e-5;
  const graph::Attrs attrs = MakeAttrs("BatchNorm", {});
  Tensor x = Random(shape), w = Random({c}), b = Random({c});
  Tensor mean = Random({c}), var = Random({c});
  for (float& v : var.values) v = std::abs(v) + 0.1f;
  Tensor y = Tensor::Zeros(shape);
  ForwardArgs fwd;
  fwd.op = "BatchNorm";
  fwd.attrs = &attrs;
  fwd.training = false;
  fwd.inputs = {x.View(), w.View(), b.View(), mean.View(), var.View()};
  fwd.outputs = {y.View()};
  const absl::Status status = Forward(fwd);
  ASSERT_TRUE(status.ok()) << status;
  const int64_t plane = shape.size() == 4 ? shape[2] * shape[3] : 1;
  std::vector<double> want(x.values.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const int64_t ch = (i / plane) % c;
    want[i] = (x[i] - mean[ch]) / std::sqrt(var[ch] + eps) * w[ch] + b[ch];
  }
  ExpectClose(y.values, want, "inference y");
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormTest,
                         ::testing::Values(graph::Shape{8, 5}, graph::Shape{3, 4, 5, 6},
                                           graph::Shape{2, 16, 7, 7}));

// ---- MatMul ---------------------------------------------------------------------------------

struct MatMulCase {
  std::string name;
  graph::Shape a, b;  // As stored (transposes already applied).
  bool ta = false, tb = false, bias = false;
};

struct MatMulReference {
  std::vector<double> y, da, db, dbias;
};

// y = op(a) op(b) (+ bias) with numpy's broadcasting of batch dims, written directly: the
// output's batch index, right-aligned, read back in a's and b's dims (0 where one is 1).
MatMulReference ReferenceMatMul(const MatMulCase& c, const Tensor& a, const Tensor& b,
                                const Tensor& bias, const Tensor& dy) {
  const int ra = c.a.size(), rb = c.b.size();
  const int64_t m_ = c.ta ? c.a[ra - 1] : c.a[ra - 2], k_ = c.ta ? c.a[ra - 2] : c.a[ra - 1];
  const int64_t n_ = c.tb ? c.b[rb - 2] : c.b[rb - 1];
  const int rank = std::max(ra, rb) - 2;
  std::vector<int64_t> ad(rank, 1), bd(rank, 1), od(rank);
  for (int i = 0; i < ra - 2; ++i) ad[rank - (ra - 2) + i] = c.a[i];
  for (int i = 0; i < rb - 2; ++i) bd[rank - (rb - 2) + i] = c.b[i];
  int64_t batch = 1;
  for (int i = 0; i < rank; ++i) batch *= (od[i] = std::max(ad[i], bd[i]));
  // Returns the matrix of an operand with batch dims `d` that output matrix `bi` reads.
  auto matrix = [&](const std::vector<int64_t>& d, int64_t bi) {
    int64_t index = 0, stride = 1;
    for (int i = rank - 1; i >= 0; --i) {
      if (d[i] != 1) index += (bi % od[i]) * stride;
      bi /= od[i];
      stride *= d[i];
    }
    return index;
  };
  auto a_at = [&](int64_t bi, int64_t m, int64_t k) {
    const int64_t ai = matrix(ad, bi);
    return c.ta ? (ai * k_ + k) * m_ + m : (ai * m_ + m) * k_ + k;
  };
  auto b_at = [&](int64_t bi, int64_t k, int64_t n) {
    const int64_t bb = matrix(bd, bi);
    return c.tb ? (bb * n_ + n) * k_ + k : (bb * k_ + k) * n_ + n;
  };
  MatMulReference r;
  r.y.assign(batch * m_ * n_, 0);
  r.da.assign(a.values.size(), 0);
  r.db.assign(b.values.size(), 0);
  r.dbias.assign(n_, 0);
  for (int64_t bi = 0; bi < batch; ++bi) {
    for (int64_t m = 0; m < m_; ++m) {
      for (int64_t n = 0; n < n_; ++n) {
        const int64_t yi = (bi * m_ + m) * n_ + n;
        double acc = c.bias ? bias[n] : 0.0;
        for (int64_t k = 0; k < k_; ++k) {
          acc += static_cast<double>(a[a_at(bi, m, k)]) * b[b_at(bi, k, n)];
          r.da[a_at(bi, m, k)] += static_cast<double>(dy[yi]) * b[b_at(bi, k, n)];
          r.db[b_at(bi, k, n)] += static_cast<double>(dy[yi]) * a[a_at(bi, m, k)];
        }
        r.y[yi] = acc;
        r.dbias[n] += dy[yi];
      }
    }
  }
  return r;
}

class MatMulTest : public DnnlKernelsTest, public ::testing::WithParamInterface<MatMulCase> {};

TEST_P(MatMulTest, ForwardAndBackwardMatchReference) {
  const MatMulCase& c = GetParam();
  const graph::Attrs attrs =
      MakeAttrs("MatMul", {{"transpose_a", Bool(c.ta)}, {"transpose_b", Bool(c.tb)}});
  std::vector<graph::Shape> in_shapes = {c.a, c.b};
  const int64_t n = c.tb ? c.b[c.b.size() - 2] : c.b.back();
  if (c.bias) in_shapes.push_back({n});
  const graph::Shape ys = InferOutput("MatMul", attrs, in_shapes);
  Tensor a = Random(c.a), b = Random(c.b), bias = Random({n}), dy = Random(ys);
  const MatMulReference ref = ReferenceMatMul(c, a, b, bias, dy);

  Tensor y = Tensor::Zeros(ys);
  ForwardArgs fwd;
  fwd.op = "MatMul";
  fwd.attrs = &attrs;
  fwd.inputs = {a.View(), b.View()};
  if (c.bias) fwd.inputs.push_back(bias.View());
  fwd.outputs = {y.View()};
  absl::Status status = Forward(fwd);
  ASSERT_TRUE(status.ok()) << status;
  ExpectClose(y.values, ref.y, "y");

  Tensor da = Tensor::Zeros(c.a), db = Tensor::Zeros(c.b), dbias = Tensor::Zeros({n});
  BackwardArgs bwd;
  bwd.op = "MatMul";
  bwd.attrs = &attrs;
  bwd.inputs = fwd.inputs;
  bwd.outputs = {Absent(ys)};
  bwd.output_grads = {dy.View()};
  bwd.input_grads = {da.View(), db.View()};
  if (c.bias) bwd.input_grads.push_back(dbias.View());
  status = Backward(bwd);
  ASSERT_TRUE(status.ok()) << status;
  ExpectClose(da.values, ref.da, "da");
  ExpectClose(db.values, ref.db, "db");
  if (c.bias) ExpectClose(dbias.values, ref.dbias, "dbias");

  // Determinism.
  Tensor y2 = Tensor::Zeros(ys), da2 = Tensor::Zeros(c.a), db2 = Tensor::Zeros(c.b);
  fwd.outputs = {y2.View()};
  ASSERT_TRUE(Forward(fwd).ok());
  bwd.input_grads[0] = da2.View();
  bwd.input_grads[1] = db2.View();
  ASSERT_TRUE(Backward(bwd).ok());
  ExpectBitwiseEqual(y, y2, "y");
  ExpectBitwiseEqual(da, da2, "da");
  ExpectBitwiseEqual(db, db2, "db");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MatMulTest,
    ::testing::Values(
        MatMulCase{"Plain", {5, 7}, {7, 3}},
        MatMulCase{"PlainBias", {5, 7}, {7, 3}, false, false, true},
        MatMulCase{"TransposeA", {7, 5}, {7, 3}, true, false},
        MatMulCase{"TransposeB", {5, 7}, {3, 7}, false, true, true},
        MatMulCase{"TransposeBoth", {7, 5}, {3, 7}, true, true},
        MatMulCase{"Linear3D", {2, 5, 7}, {3, 7}, false, true, true},
        MatMulCase{"A3DTransposeA", {3, 7, 5}, {7, 4}, true, false, true},
        MatMulCase{"A3DTransposeBoth", {3, 7, 5}, {4, 7}, true, true},
        MatMulCase{"A4DShared", {2, 3, 4, 6}, {6, 5}, false, false, true},
        MatMulCase{"Batched3D", {3, 4, 6}, {3, 6, 5}},
        MatMulCase{"Batched4D", {2, 3, 4, 5}, {2, 3, 5, 6}, false, false, true},
        MatMulCase{"Batched4DTransposeA", {2, 3, 5, 4}, {2, 3, 5, 6}, true, false},
        MatMulCase{"Batched4DTransposeB", {2, 3, 4, 5}, {2, 3, 6, 5}, false, true},
        MatMulCase{"Batched4DTransposeBoth", {2, 3, 5, 4}, {2, 3, 6, 5}, true, true},
        MatMulCase{"Large", {64, 96}, {80, 96}, false, true, true},
        // vit's shapes, scaled down (the full-size ones, a[197,8,768] x
        // b[2304,768]^T and [8,12,197,64] attention, pass too but take 15 s
        // against the double-precision reference).
        MatMulCase{"VitQkvLinear", {17, 3, 48}, {144, 48}, false, true, true},
        MatMulCase{"VitQkvLinear4D", {2, 17, 3, 48}, {144, 48}, false, true, true},
        MatMulCase{"VitScores", {2, 3, 17, 16}, {2, 3, 17, 16}, false, true},
        MatMulCase{"VitContext", {2, 3, 17, 17}, {2, 3, 17, 16}},
        MatMulCase{"BWithUnitBatchDims", {2, 3, 5, 7}, {1, 7, 4}, false, false, true},
        MatMulCase{"BWithMoreUnitBatchDimsThanA", {3, 7, 5}, {1, 1, 4, 7}, true, true},
        MatMulCase{"A2DWithUnitBatchB", {5, 7}, {1, 7, 4}, false, false, true},
        // Any other broadcast of batch dims: one product per output matrix.
        MatMulCase{"BroadcastBothWays", {2, 1, 4, 6}, {1, 3, 6, 5}},
        MatMulCase{"OneAAgainstBatchedB", {4, 5}, {2, 5, 3}, false, false, true},
        MatMulCase{"RankMismatchTransposeA", {3, 1, 6, 4}, {2, 6, 5}, true},
        MatMulCase{"BroadcastTransposeBoth", {2, 1, 6, 4}, {3, 5, 6}, true, true, true}),
    [](const ::testing::TestParamInfo<MatMulCase>& info) { return info.param.name; });

TEST_F(DnnlKernelsTest, MatMulBatchDimsThatDoNotBroadcastAreNamed) {
  const graph::Attrs attrs = MakeAttrs("MatMul", {});
  Tensor a = Random({3, 4, 5}), b = Random({2, 5, 3}), y = Tensor::Zeros({3, 4, 3});
  ForwardArgs fwd;
  fwd.op = "MatMul";
  fwd.attrs = &attrs;
  fwd.inputs = {a.View(), b.View()};
  fwd.outputs = {y.View()};
  const absl::Status status = Forward(fwd);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("batch dims [3] and [2] do not broadcast"), std::string::npos)
      << status;
}

// ---- Pools ----------------------------------------------------------------------------------

struct PoolCase {
  std::string name;
  std::string op;
  graph::Shape x;
  std::vector<int64_t> kernel, stride, padding{0, 0};
  bool ceil_mode = false, count_include_pad = true;
  bool ties = false;  // x from a few distinct values, so windows hold equal maxima.
};

// PyTorch's max_pool2d / avg_pool2d and their gradients (max: the first maximum row-major).
void ReferencePool(const PoolCase& c, const Tensor& x, const graph::Shape& ys, const Tensor& dy,
                   std::vector<double>* y, std::vector<double>* dx) {
  const std::vector<int64_t> stride = c.stride.empty() ? c.kernel : c.stride;
  const int64_t h = c.x[2], w = c.x[3], oh_ = ys[2], ow_ = ys[3];
  const int64_t pad = c.padding[0], pad_w = c.padding[1];
  y->assign(graph::NumElements(ys), 0);
  dx->assign(x.values.size(), 0);
  for (int64_t plane = 0; plane < c.x[0] * c.x[1]; ++plane) {
    for (int64_t oh = 0; oh < oh_; ++oh) {
      for (int64_t ow = 0; ow < ow_; ++ow) {
        int64_t hs = oh * stride[0] - pad, ws = ow * stride[1] - pad_w;
        int64_t he = std::min(hs + c.kernel[0], h + pad), we = std::min(ws + c.kernel[1], w + pad_w);
        const int64_t pool_size = (he - hs) * (we - ws);
        hs = std::max<int64_t>(hs, 0), ws = std::max<int64_t>(ws, 0);
        he = std::min(he, h), we = std::min(we, w);
        const int64_t yi = (plane * oh_ + oh) * ow_ + ow;
        if (c.op == "MaxPool") {
          int64_t best = -1;
          for (int64_t i = hs; i < he; ++i)
            for (int64_t j = ws; j < we; ++j) {
              const int64_t xi = (plane * h + i) * w + j;
              if (best < 0 || x[xi] > x[best]) best = xi;
            }
          (*y)[yi] = x[best];
          (*dx)[best] += dy[yi];
        } else {
          const double divisor = c.count_include_pad ? pool_size : (he - hs) * (we - ws);
          double sum = 0;
          for (int64_t i = hs; i < he; ++i)
            for (int64_t j = ws; j < we; ++j) sum += x[(plane * h + i) * w + j];
          (*y)[yi] = sum / divisor;
          for (int64_t i = hs; i < he; ++i)
            for (int64_t j = ws; j < we; ++j) (*dx)[(plane * h + i) * w + j] += dy[yi] / divisor;
        }
      }
    }
  }
}

class PoolTest : public DnnlKernelsTest, public ::testing::WithParamInterface<PoolCase> {};

TEST_P(PoolTest, ForwardAndBackwardMatchReference) {
  const PoolCase& c = GetParam();
  std::map<std::string, proto::AttrValue> set = {{"kernel_size", Ints(c.kernel)},
                                                 {"stride", Ints(c.stride)},
                                                 {"padding", Ints(c.padding)},
                                                 {"ceil_mode", Bool(c.ceil_mode)}};
  if (c.op == "AvgPool") set["count_include_pad"] = Bool(c.count_include_pad);
  const graph::Attrs attrs = MakeAttrs(c.op, set);
  const graph::Shape ys = InferOutput(c.op, attrs, {c.x});
  Tensor x = Random(c.x), dy = Random(ys);
  if (c.ties) {
    for (float& v : x.values) v = std::round(v * 2);  // {-2, ..., 2}.
  }
  std::vector<double> ref_y, ref_dx;
  ReferencePool(c, x, ys, dy, &ref_y, &ref_dx);

  Tensor y = Tensor::Zeros(ys);
  ForwardArgs fwd;
  fwd.op = c.op;
  fwd.attrs = &attrs;
  fwd.inputs = {x.View()};
  fwd.outputs = {y.View()};
  absl::Status status = Forward(fwd);
  ASSERT_TRUE(status.ok()) << status;
  ExpectClose(y.values, ref_y, "y");

  Tensor dx = Tensor::Zeros(c.x);
  for (float& v : dx.values) v = 99;  // The kernel overwrites, never accumulates.
  BackwardArgs bwd;
  bwd.op = c.op;
  bwd.attrs = &attrs;
  bwd.inputs = {c.op == "MaxPool" ? x.View() : Absent(c.x)};
  bwd.outputs = {c.op == "MaxPool" ? y.View() : Absent(ys)};
  bwd.output_grads = {dy.View()};
  bwd.input_grads = {dx.View()};
  status = Backward(bwd);
  ASSERT_TRUE(status.ok()) << status;
  ExpectClose(dx.values, ref_dx, "dx");

  Tensor y2 = Tensor::Zeros(ys), dx2 = Tensor::Zeros(c.x);
  fwd.outputs = {y2.View()};
  ASSERT_TRUE(Forward(fwd).ok());
  bwd.input_grads = {dx2.View()};
  ASSERT_TRUE(Backward(bwd).ok());
  ExpectBitwiseEqual(y, y2, "y");
  ExpectBitwiseEqual(dx, dx2, "dx");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PoolTest,
    ::testing::Values(
        PoolCase{"MaxK2", "MaxPool", {2, 3, 8, 8}, {2, 2}, {}},
        PoolCase{"MaxK3S2P1", "MaxPool", {2, 3, 9, 7}, {3, 3}, {2, 2}, {1, 1}},
        PoolCase{"MaxK3S1Ties", "MaxPool", {2, 2, 6, 6}, {3, 3}, {1, 1}, {1, 1}, false, true,
                 true},
        PoolCase{"MaxCeil", "MaxPool", {1, 3, 7, 6}, {2, 2}, {2, 2}, {0, 0}, true},
        PoolCase{"MaxCeilPad", "MaxPool", {2, 2, 8, 10}, {3, 3}, {2, 2}, {1, 1}, true},
        PoolCase{"MaxCeilTies", "MaxPool", {2, 2, 7, 7}, {3, 3}, {2, 2}, {0, 0}, true, true,
                 true},
        PoolCase{"AvgK2", "AvgPool", {2, 3, 8, 8}, {2, 2}, {}},
        PoolCase{"AvgK3S2P1", "AvgPool", {2, 3, 9, 7}, {3, 3}, {2, 2}, {1, 1}},
        PoolCase{"AvgK3S2P1ExcludePad", "AvgPool", {2, 3, 9, 7}, {3, 3}, {2, 2}, {1, 1}, false,
                 false},
        PoolCase{"AvgCeilIncludePad", "AvgPool", {1, 3, 7, 6}, {3, 3}, {2, 2}, {1, 1}, true},
        PoolCase{"AvgCeilExcludePad", "AvgPool", {1, 3, 7, 6}, {3, 3}, {2, 2}, {1, 1}, true, false},
        PoolCase{"AvgCeilNoPad", "AvgPool", {2, 2, 7, 5}, {2, 2}, {2, 2}, {0, 0}, true},
        PoolCase{"AvgRectStride1", "AvgPool", {1, 2, 6, 5}, {3, 2}, {1, 1}, {1, 0}}),
    [](const ::testing::TestParamInfo<PoolCase>& info) { return info.param.name; });

TEST_F(DnnlKernelsTest, GlobalAvgPoolMatchesReference) {
  const graph::Attrs attrs = MakeAttrs("GlobalAvgPool", {});
  Tensor x = Random({3, 4, 5, 6}), y = Tensor::Zeros({3, 4, 1, 1}), dy = Random({3, 4, 1, 1});
  ForwardArgs fwd;
  fwd.op = "GlobalAvgPool";
  fwd.attrs = &attrs;
  fwd.inputs = {x.View()};
  fwd.outputs = {y.View()};
  ASSERT_TRUE(Forward(fwd).ok());
  std::vector<double> want_y(12, 0), want_dx(x.values.size());
  for (size_t i = 0; i < x.values.size(); ++i) {
    want_y[i / 30] += x[i] / 30.0;
    want_dx[i] = dy[i / 30] / 30.0;
  }
  ExpectClose(y.values, want_y, "y");
  Tensor dx = Tensor::Zeros(x.shape);
  BackwardArgs bwd;
  bwd.op = "GlobalAvgPool";
  bwd.attrs = &attrs;
  bwd.inputs = {Absent(x.shape)};
  bwd.outputs = {Absent(y.shape)};
  bwd.output_grads = {dy.View()};
  bwd.input_grads = {dx.View()};
  ASSERT_TRUE(Backward(bwd).ok());
  ExpectClose(dx.values, want_dx, "dx");
}

// ---- Errors -----------------------------------------------------------------------------------

TEST_F(DnnlKernelsTest, RejectsNonFloat32) {
  const graph::Attrs attrs = MakeAttrs("Conv2D", {});
  Tensor x = Random({1, 2, 4, 4}), w = Random({2, 2, 3, 3}), y = Tensor::Zeros({1, 2, 2, 2});
  ForwardArgs fwd;
  fwd.op = "Conv2D";
  fwd.attrs = &attrs;
  fwd.inputs = {x.View(), w.View()};
  fwd.inputs[0].dtype = proto::DTYPE_BFLOAT16;
  fwd.outputs = {y.View()};
  const absl::Status status = Forward(fwd);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("Conv2D"), std::string::npos) << status;
}

TEST_F(DnnlKernelsTest, NoOutputGradientGivesZeroInputGradients) {
  const graph::Attrs attrs = MakeAttrs("MatMul", {});
  Tensor a = Random({3, 4}), b = Random({4, 2}), da = Random({3, 4}), db = Random({4, 2});
  BackwardArgs bwd;
  bwd.op = "MatMul";
  bwd.attrs = &attrs;
  bwd.inputs = {a.View(), b.View()};
  bwd.outputs = {Absent({3, 2})};
  bwd.output_grads = {Absent({3, 2})};
  bwd.input_grads = {da.View(), db.View()};
  ASSERT_TRUE(Backward(bwd).ok());
  ExpectClose(da.values, std::vector<double>(12, 0), "da");
  ExpectClose(db.values, std::vector<double>(8, 0), "db");
}

// ---- ConvTranspose2D -------------------------------------------------------------------------

struct ConvTransposeCase {
  std::string name;
  graph::Shape x, w;                                               // w [C_in, C_out/groups, kh, kw]
  std::vector<int64_t> stride, padding, output_padding, dilation;  // padding: 4 values
  int64_t groups;
  bool bias;
};

void PrintTo(const ConvTransposeCase& c, std::ostream* os) { *os << c.name; }

class ConvTransposeTest : public DnnlKernelsTest,
                          public ::testing::WithParamInterface<ConvTransposeCase> {};

// y[n, g*Cog + k, ih*s - top + kh*d, ...] += x[n, ci, ih, iw] w[ci, k, kh, kw] (+ bias), and
// its three gradients, in double: PyTorch's nn.ConvTranspose2d by its definition.
TEST_P(ConvTransposeTest, ForwardAndBackwardMatchReference) {
  const ConvTransposeCase& c = GetParam();
  const graph::Attrs attrs =
      MakeAttrs("ConvTranspose2D", {{"stride", Ints(c.stride)},
                                    {"padding", Ints(c.padding)},
                                    {"output_padding", Ints(c.output_padding)},
                                    {"dilation", Ints(c.dilation)},
                                    {"groups", Int(c.groups)}});
  const int64_t cout = c.w[1] * c.groups;
  std::vector<graph::Shape> in_shapes = {c.x, c.w};
  if (c.bias) in_shapes.push_back({cout});
  const graph::Shape ys = InferOutput("ConvTranspose2D", attrs, in_shapes);
  Tensor x = Random(c.x), w = Random(c.w), b = Random({cout}), y = Tensor::Zeros(ys);
  Tensor dy = Random(ys);
  std::vector<double> ry(graph::NumElements(ys), 0), rdx(x.values.size(), 0),
      rdw(w.values.size(), 0), rdb(cout, 0);
  const int64_t cin_g = c.x[1] / c.groups;
  for (int64_t n = 0; n < c.x[0]; ++n) {
    for (int64_t ci = 0; ci < c.x[1]; ++ci) {
      for (int64_t ih = 0; ih < c.x[2]; ++ih) {
        for (int64_t iw = 0; iw < c.x[3]; ++iw) {
          const int64_t xi = ((n * c.x[1] + ci) * c.x[2] + ih) * c.x[3] + iw;
          for (int64_t k = 0; k < c.w[1]; ++k) {
            const int64_t co = (ci / cin_g) * c.w[1] + k;
            for (int64_t kh = 0; kh < c.w[2]; ++kh) {
              for (int64_t kw = 0; kw < c.w[3]; ++kw) {
                const int64_t oh = ih * c.stride[0] - c.padding[0] + kh * c.dilation[0];
                const int64_t ow = iw * c.stride[1] - c.padding[1] + kw * c.dilation[1];
                if (oh < 0 || oh >= ys[2] || ow < 0 || ow >= ys[3]) continue;
                const int64_t yi = ((n * cout + co) * ys[2] + oh) * ys[3] + ow;
                const int64_t wi = ((ci * c.w[1] + k) * c.w[2] + kh) * c.w[3] + kw;
                ry[yi] += double{x[xi]} * w[wi];
                rdx[xi] += double{dy[yi]} * w[wi];
                rdw[wi] += double{x[xi]} * dy[yi];
              }
            }
          }
        }
      }
    }
  }
  for (size_t i = 0; i < ry.size(); ++i) {
    const int64_t co = (i / (ys[2] * ys[3])) % cout;
    if (c.bias) ry[i] += b[co];
    rdb[co] += dy[i];
  }

  ForwardArgs fwd;
  fwd.op = "ConvTranspose2D";
  fwd.attrs = &attrs;
  fwd.inputs = {x.View(), w.View()};
  if (c.bias) fwd.inputs.push_back(b.View());
  fwd.outputs = {y.View()};
  absl::Status status = Forward(fwd);
  ASSERT_TRUE(status.ok()) << status;
  ExpectClose(y.values, ry, "y");

  Tensor dx = Tensor::Zeros(c.x), dw = Tensor::Zeros(c.w), db = Tensor::Zeros({cout});
  BackwardArgs bwd;
  bwd.op = "ConvTranspose2D";
  bwd.attrs = &attrs;
  bwd.inputs = fwd.inputs;
  bwd.outputs = {Absent(ys)};
  bwd.output_grads = {dy.View()};
  bwd.input_grads = {dx.View(), dw.View()};
  if (c.bias) bwd.input_grads.push_back(db.View());
  status = Backward(bwd);
  ASSERT_TRUE(status.ok()) << status;
  ExpectClose(dx.values, rdx, "dx");
  ExpectClose(dw.values, rdw, "dweight");
  if (c.bias) ExpectClose(db.values, rdb, "dbias");

  // Determinism, and dx alone (the weight's gradient not wanted: x is not read).
  Tensor y2 = Tensor::Zeros(ys), dx2 = Tensor::Zeros(c.x);
  fwd.outputs = {y2.View()};
  ASSERT_TRUE(Forward(fwd).ok());
  ExpectBitwiseEqual(y, y2, "y");
  bwd.inputs[0] = Absent(c.x);
  bwd.input_grads = {dx2.View(), Absent(c.w)};
  if (c.bias) bwd.input_grads.push_back(Absent({cout}));
  status = Backward(bwd);
  ASSERT_TRUE(status.ok()) << status;
  ExpectBitwiseEqual(dx, dx2, "dx alone");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ConvTransposeTest,
    ::testing::Values(
        // FCN's 2x: kernel 4, stride 2, padding 1.
        ConvTransposeCase{
            "Fcn2x", {2, 3, 4, 4}, {3, 2, 4, 4}, {2, 2}, {1, 1, 1, 1}, {0, 0}, {1, 1}, 1, true},
        // Output padding beyond the bottom padding: oneDNN's right padding is negative.
        ConvTransposeCase{"OutputPaddingPastPadding",
                          {1, 4, 3, 5},
                          {4, 3, 3, 3},
                          {2, 3},
                          {0, 1, 0, 1},
                          {1, 2},
                          {1, 1},
                          2,
                          true},
        // Dilated, asymmetric padding, no bias.
        ConvTransposeCase{"DilatedAsymmetric",
                          {2, 2, 4, 3},
                          {2, 3, 2, 3},
                          {2, 1},
                          {1, 0, 2, 1},
                          {1, 0},
                          {2, 2},
                          1,
                          false}),
    [](const ::testing::TestParamInfo<ConvTransposeCase>& info) { return info.param.name; });

TEST_F(DnnlKernelsTest, ConvTransposeOutputPaddingNotBelowTheStrideIsUnimplemented) {
  // PyTorch allows output padding below the dilation; oneDNN's right padding must exceed
  // -stride.
  const graph::Attrs attrs =
      MakeAttrs("ConvTranspose2D", {{"dilation", Ints({2, 2})}, {"output_padding", Ints({1, 1})}});
  Tensor x = Random({1, 2, 3, 3}), w = Random({2, 2, 2, 2});
  const graph::Shape ys = InferOutput("ConvTranspose2D", attrs, {x.shape, w.shape});
  Tensor y = Tensor::Zeros(ys);
  ForwardArgs fwd;
  fwd.op = "ConvTranspose2D";
  fwd.attrs = &attrs;
  fwd.inputs = {x.View(), w.View()};
  fwd.outputs = {y.View()};
  const absl::Status status = Forward(fwd);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << status;
  EXPECT_NE(status.message().find("output_padding [1,1] not below the stride [1,1]"),
            std::string::npos)
      << status;
}

}  // namespace
}  // namespace headroom::executor::cpu
