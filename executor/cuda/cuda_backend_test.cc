// Checks every op of the CUDA backend against naive host references: forwards against a
// double-precision reference, backwards against central differences of that reference
// (d/dx of sum(dy * y(x)) for a random dy), so each op needs only its forward written twice.
// Also the copy streams, out-of-memory, and the optimizer steps against their formulas;
// and, for issue 19's defects, against the CPU backend (activations' backward, dropout
// masks, optimizer steps, AvgPool), bitwise repeatability, cuBLAS's workspace, index
// checks, copy timing, cuDNN's element limit and a tensor past 2^31 elements.
// Without a CUDA device every test is skipped.
#include "executor/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "executor/backend.h"
#include "executor/cpu/cpu_backend.h"
#include "executor/cuda/device_info.h"
#include "executor/dropout_mask.h"
#include "graph/op_registry.h"
#include "gtest/gtest.h"

namespace headroom::executor::cuda {
namespace {

using graph::Shape;
using Values = std::vector<double>;
// A reference forward: all outputs from all float inputs (in double).
using Reference = std::function<std::vector<Values>(const std::vector<Values>&)>;

// ---- Attributes -------------------------------------------------------------------------

proto::AttrValue Int(int64_t v) {
  proto::AttrValue a;
  a.set_i(v);
  return a;
}
proto::AttrValue Float(double v) {
  proto::AttrValue a;
  a.set_f(v);
  return a;
}
proto::AttrValue Bool(bool v) {
  proto::AttrValue a;
  a.set_b(v);
  return a;
}
proto::AttrValue Str(const std::string& v) {
  proto::AttrValue a;
  a.set_s(v);
  return a;
}
proto::AttrValue Ints(const std::vector<int64_t>& v) {
  proto::AttrValue a;
  a.mutable_ints();
  for (int64_t x : v) a.mutable_ints()->add_values(x);
  return a;
}

// Returns `op`'s attributes: its schema's defaults, then `set`.
graph::Attrs AttrsOf(const std::string& op, std::map<std::string, proto::AttrValue> set = {}) {
  const graph::OpSchema* schema = graph::FindOp(op);
  EXPECT_NE(schema, nullptr) << op;
  std::map<std::string, proto::AttrValue> values;
  if (schema != nullptr) {
    for (const graph::AttrSpec& spec : schema->attrs) {
      if (!spec.required) values[spec.name] = spec.default_value;
    }
  }
  for (auto& [name, value] : set) values[name] = value;
  return graph::Attrs(std::move(values));
}

// ---- Host helpers -----------------------------------------------------------------------

int64_t Count(const Shape& s) {
  return std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<int64_t>());
}

std::vector<float> Random(int64_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Distinct values 0.01 apart, shuffled: no ties, and no two closer than the finite
// difference step, for max pooling.
std::vector<float> Distinct(int64_t n, std::mt19937& rng) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = 0.01f * static_cast<float>(i - n / 2);
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

Values ToDouble(const std::vector<float>& v) { return Values(v.begin(), v.end()); }

// Expects got ~ want elementwise: |got - want| <= 1e-3 |want| + 1e-4 (`atol`).
void ExpectNear(const std::vector<float>& got, const Values& want, const std::string& what,
                double atol = 1e-4, double rtol = 1e-3) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::abs(got[i] - want[i]) <= atol + rtol * std::abs(want[i]))) {
      if (++bad <= 5) {
        ADD_FAILURE() << what << " [" << i << "]: got " << got[i] << ", want " << want[i];
      }
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements differ";
}

// ---- The fixture: a backend, an arena and a bump allocator in it ------------------------

class CudaBackendTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kArenaBytes = uint64_t{64} << 20;

  void SetUp() override {
    absl::StatusOr<std::vector<CudaDevice>> devices = ListCudaDevices();
    if (!devices.ok()) GTEST_SKIP() << "no CUDA device: " << devices.status();
    absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCudaBackend(0);
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = *std::move(backend);
    absl::StatusOr<std::unique_ptr<Buffer>> arena = backend_->AllocateDevice(kArenaBytes);
    ASSERT_TRUE(arena.ok()) << arena.status();
    arena_ = *std::move(arena);
  }

  // Returns a view of fresh arena memory, filled with NaN (float) or 0xff bytes so a kernel
  // that leaves elements unwritten fails.
  TensorView Alloc(const Shape& shape, proto::DType dtype = proto::DTYPE_FLOAT32) {
    TensorView v;
    v.shape = shape;
    v.dtype = dtype;
    const uint64_t bytes = v.bytes();
    EXPECT_LE(used_ + bytes, kArenaBytes);
    v.data = static_cast<char*>(arena_->data()) + used_;
    used_ += (bytes + 255) / 256 * 256;
    std::vector<uint8_t> poison(bytes, 0xff);
    EXPECT_TRUE(backend_->Upload(v.data, poison.data(), bytes).ok());
    return v;
  }

  TensorView Put(const Shape& shape, const std::vector<float>& values) {
    TensorView v = Alloc(shape);
    EXPECT_EQ(static_cast<int64_t>(values.size()), Count(shape));
    EXPECT_TRUE(backend_->Upload(v.data, values.data(), v.bytes()).ok());
    return v;
  }

  template <typename T>
  TensorView PutIds(const Shape& shape, const std::vector<T>& ids) {
    TensorView v = Alloc(shape, sizeof(T) == 4 ? proto::DTYPE_INT32 : proto::DTYPE_INT64);
    EXPECT_TRUE(backend_->Upload(v.data, ids.data(), v.bytes()).ok());
    return v;
  }

  std::vector<float> Get(const TensorView& v) {
    std::vector<float> out(v.num_elements());
    absl::Status s = backend_->Download(out.data(), v.data, v.bytes());
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }
  // Runs the backward of binary `op` on a [2, 3] and b [3] with da written over dy: db
  // reduces over the broadcast dims and must read dy before da is written. Returns {da, db}.
  std::pair<std::vector<float>, std::vector<float>> BinaryBackwardOverDy(
      const std::string& op, const std::vector<float>& a, const std::vector<float>& b,
      const std::vector<float>& dy) {
    graph::Attrs attrs = AttrsOf(op);
    BackwardArgs bwd;
    bwd.op = op;
    bwd.attrs = &attrs;
    bwd.inputs = {Put({2, 3}, a), Put({3}, b)};
    bwd.outputs = {TensorView{nullptr, {2, 3}}};
    bwd.output_grads = {Put({2, 3}, dy)};
    bwd.input_grads = {bwd.output_grads[0], Alloc({3})};
    EXPECT_TRUE(backend_->Backward(bwd).ok());
    return {Get(bwd.input_grads[0]), Get(bwd.input_grads[1])};
  }


  std::vector<uint8_t> GetBytes(const TensorView& v) {
    std::vector<uint8_t> out(v.bytes());
    absl::Status s = backend_->Download(out.data(), v.data, v.bytes());
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  // One op checked end to end: forward against `reference`, then backward against central
  // differences of `reference` for the inputs in `grad_inputs`.
  struct OpCase {
    std::string op;
    graph::Attrs attrs;
    std::vector<Shape> input_shapes;
    std::vector<std::vector<float>> inputs;
    std::vector<Shape> output_shapes;
    std::vector<Shape> saved_shapes;  // float32 saved state, if any
    Reference reference;
    std::vector<bool> grad_inputs;
    double atol = 1e-4;
  };

  // Returns the case of a unary elementwise op over [3, 50] whose reference applies `f` to
  // each element of `x` (150 values).
  static OpCase ElementwiseCase(const std::string& op, graph::Attrs attrs, std::vector<float> x,
                                std::function<double(double)> f) {
    OpCase c;
    c.op = op;
    c.attrs = std::move(attrs);
    c.input_shapes = {{3, 50}};
    c.inputs = {std::move(x)};
    c.output_shapes = {{3, 50}};
    c.reference = [f](const std::vector<Values>& in) {
      Values y(in[0].size());
      for (size_t i = 0; i < y.size(); ++i) y[i] = f(in[0][i]);
      return std::vector<Values>{y};
    };
    c.grad_inputs = {true};
    return c;
  }

  void CheckOp(const OpCase& c) {
    SCOPED_TRACE(c.op);
    std::mt19937 rng(7);
    ForwardArgs fwd;
    fwd.op = c.op;
    fwd.attrs = &c.attrs;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      fwd.inputs.push_back(Put(c.input_shapes[i], c.inputs[i]));
    }
    for (const Shape& s : c.output_shapes) fwd.outputs.push_back(Alloc(s));
    for (const Shape& s : c.saved_shapes) fwd.saved.push_back(Alloc(s));
    absl::Status status = backend_->Forward(fwd);
    ASSERT_TRUE(status.ok()) << status;

    std::vector<Values> host_inputs;
    for (const auto& v : c.inputs) host_inputs.push_back(ToDouble(v));
    const std::vector<Values> want = c.reference(host_inputs);
    ASSERT_EQ(want.size(), c.output_shapes.size());
    for (size_t o = 0; o < want.size(); ++o) {
      ExpectNear(Get(fwd.outputs[o]), want[o], absl::StrCat("forward output ", o), c.atol);
    }

    // Backward: random dy per output; numerical d/dx sum(dy * y).
    BackwardArgs bwd;
    bwd.op = c.op;
    bwd.attrs = &c.attrs;
    bwd.inputs = fwd.inputs;
    bwd.outputs = fwd.outputs;
    bwd.saved = fwd.saved;
    std::vector<Values> dys;
    for (const Shape& s : c.output_shapes) {
      std::vector<float> dy = Random(Count(s), rng);
      dys.push_back(ToDouble(dy));
      bwd.output_grads.push_back(Put(s, dy));
    }
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      TensorView dx;
      dx.shape = c.input_shapes[i];
      if (c.grad_inputs[i]) dx = Alloc(c.input_shapes[i]);
      bwd.input_grads.push_back(dx);
    }
    status = backend_->Backward(bwd);
    ASSERT_TRUE(status.ok()) << status;

    auto loss = [&](const std::vector<Values>& in) {
      const std::vector<Values> y = c.reference(in);
      double l = 0;
      for (size_t o = 0; o < y.size(); ++o) {
        for (size_t k = 0; k < y[o].size(); ++k) l += dys[o][k] * y[o][k];
      }
      return l;
    };
    constexpr double kStep = 1e-4;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      if (!c.grad_inputs[i]) continue;
      Values numeric(host_inputs[i].size());
      std::vector<Values> in = host_inputs;
      for (size_t k = 0; k < numeric.size(); ++k) {
        in[i][k] = host_inputs[i][k] + kStep;
        const double up = loss(in);
        in[i][k] = host_inputs[i][k] - kStep;
        const double down = loss(in);
        in[i][k] = host_inputs[i][k];
        numeric[k] = (up - down) / (2 * kStep);
      }
      ExpectNear(Get(bwd.input_grads[i]), numeric, absl::StrCat("gradient of input ", i),
                 std::max(c.atol, 2e-4), 2e-3);
    }
  }

  template <typename Id>
  void CheckEmbedding() {
    SCOPED_TRACE(sizeof(Id) == 4 ? "int32 ids" : "int64 ids");
    std::mt19937 rng(20);
    const int64_t vocab = 5, d = 3;
    const std::vector<Id> ids = {4, 0, 4, 2, 1, 4};  // [2, 3], with repeats
    const std::vector<float> table = Random(vocab * d, rng), dy = Random(6 * d, rng);
    graph::Attrs attrs = AttrsOf("Embedding");
    ForwardArgs fwd;
    fwd.op = "Embedding";
    fwd.attrs = &attrs;
    fwd.inputs = {PutIds<Id>({2, 3}, ids), Put({vocab, d}, table)};
    fwd.outputs = {Alloc({2, 3, d})};
    ASSERT_TRUE(backend_->Forward(fwd).ok());
    Values want(6 * d);
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j < d; ++j) want[i * d + j] = table[ids[i] * d + j];
    ExpectNear(Get(fwd.outputs[0]), want, "rows");

    // dtable scatter-adds rows of dy at the ids (repeated ids sum).
    BackwardArgs bwd;
    bwd.op = "Embedding";
    bwd.attrs = &attrs;
    bwd.inputs = {fwd.inputs[0], TensorView{nullptr, {vocab, d}}};
    bwd.outputs = {TensorView{nullptr, {2, 3, d}}};
    bwd.output_grads = {Put({2, 3, d}, dy)};
    bwd.input_grads = {TensorView{nullptr, {2, 3}, fwd.inputs[0].dtype}, Alloc({vocab, d})};
    ASSERT_TRUE(backend_->Backward(bwd).ok());
    Values dtable(vocab * d, 0.0);
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j < d; ++j) dtable[ids[i] * d + j] += dy[i * d + j];
    ExpectNear(Get(bwd.input_grads[1]), dtable, "dtable");
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Buffer> arena_;
  uint64_t used_ = 0;
};

// ---- References -------------------------------------------------------------------------

// Conv2D, NCHW, weight [O, C/g, kh, kw]; pad {top, left, bottom, right}.
Values RefConv(const Values& x, const Values& w, const Values* bias, const Shape& xs,
               const Shape& ws, int64_t oh_n, int64_t ow_n, std::vector<int64_t> stride,
               std::vector<int64_t> pad, std::vector<int64_t> dil, int64_t groups) {
  const int64_t n = xs[0], c = xs[1], h = xs[2], wd = xs[3];
  const int64_t o = ws[0], cg = ws[1], kh = ws[2], kw = ws[3];
  const int64_t og = o / groups;
  Values y(n * o * oh_n * ow_n, 0.0);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oc = 0; oc < o; ++oc)
      for (int64_t oy = 0; oy < oh_n; ++oy)
        for (int64_t ox = 0; ox < ow_n; ++ox) {
          double s = bias != nullptr ? (*bias)[oc] : 0.0;
          const int64_t g = oc / og;
          for (int64_t ic = 0; ic < cg; ++ic)
            for (int64_t ky = 0; ky < kh; ++ky)
              for (int64_t kx = 0; kx < kw; ++kx) {
                const int64_t iy = oy * stride[0] - pad[0] + ky * dil[0];
                const int64_t ix = ox * stride[1] - pad[1] + kx * dil[1];
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                s += x[((b * c + g * cg + ic) * h + iy) * wd + ix] *
                     w[((oc * cg + ic) * kh + ky) * kw + kx];
              }
          y[((b * o + oc) * oh_n + oy) * ow_n + ox] = s;
        }
  return y;
}

// PyTorch pooling over [N*C planes, H, W]; pad {top, left, bottom, right}.
Values RefPool(const Values& x, int64_t planes, int64_t h, int64_t w, int64_t oh_n, int64_t ow_n,
               std::vector<int64_t> k, std::vector<int64_t> s, std::vector<int64_t> pad,
               bool max, bool count_include_pad) {
  Values y(planes * oh_n * ow_n);
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t oy = 0; oy < oh_n; ++oy)
      for (int64_t ox = 0; ox < ow_n; ++ox) {
        int64_t y0 = oy * s[0] - pad[0], x0 = ox * s[1] - pad[1];
        int64_t y1 = std::min(y0 + k[0], h + pad[2]), x1 = std::min(x0 + k[1], w + pad[3]);
        const int64_t pool_size = (y1 - y0) * (x1 - x0);
        y0 = std::max<int64_t>(y0, 0);
        x0 = std::max<int64_t>(x0, 0);
        y1 = std::min(y1, h);
        x1 = std::min(x1, w);
        double acc = max ? -INFINITY : 0.0;
        for (int64_t iy = y0; iy < y1; ++iy)
          for (int64_t ix = x0; ix < x1; ++ix) {
            const double v = x[(p * h + iy) * w + ix];
            acc = max ? std::max(acc, v) : acc + v;
          }
        if (!max) acc /= count_include_pad ? pool_size : (y1 - y0) * (x1 - x0);
        y[(p * oh_n + oy) * ow_n + ox] = acc;
      }
  return y;
}

// Batched matmul: a [batch, ...] with b shared (b_batch 1) or per batch.
Values RefMatMul(const Values& a, const Values& b, const Values* bias, int64_t batch,
                 bool b_shared, int64_t m, int64_t k, int64_t n, bool ta, bool tb) {
  Values y(batch * m * n, 0.0);
  for (int64_t i = 0; i < batch; ++i) {
    const double* ai = a.data() + i * m * k;
    const double* bi = b.data() + (b_shared ? 0 : i * k * n);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t col = 0; col < n; ++col) {
        double s = bias != nullptr ? (*bias)[col] : 0.0;
        for (int64_t t = 0; t < k; ++t) {
          const double av = ta ? ai[t * m + r] : ai[r * k + t];
          const double bv = tb ? bi[col * k + t] : bi[t * n + col];
          s += av * bv;
        }
        y[(i * m + r) * n + col] = s;
      }
  }
  return y;
}

// Softmax of scale * x over `axis` of [outer, n, inner]; causal masks j > i (inner 1).
Values RefSoftmax(const Values& x, int64_t outer, int64_t n, int64_t inner, double scale,
                  bool causal) {
  Values y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      const int64_t limit = causal ? o % n + 1 : n;
      double m = -INFINITY, s = 0;
      for (int64_t j = 0; j < limit; ++j) m = std::max(m, scale * x[(o * n + j) * inner + in]);
      for (int64_t j = 0; j < limit; ++j) s += std::exp(scale * x[(o * n + j) * inner + in] - m);
      for (int64_t j = 0; j < n; ++j) {
        y[(o * n + j) * inner + in] =
            j < limit ? std::exp(scale * x[(o * n + j) * inner + in] - m) / s : 0.0;
      }
    }
  return y;
}

// Numpy broadcast of a and b into `out` (all shapes right-aligned).
// y = a (op) b with numpy broadcasting, op one of Add, Mul, Sub, Div.
Values RefArithmetic(const Values& a, const Shape& as, const Values& b, const Shape& bs,
                     const Shape& out, const std::string& op) {
  const int r = static_cast<int>(out.size());
  Values y(Count(out));
  for (int64_t i = 0; i < static_cast<int64_t>(y.size()); ++i) {
    int64_t rest = i, ai = 0, bi = 0, astride = 1, bstride = 1;
    for (int d = r - 1; d >= 0; --d) {
      const int64_t c = rest % out[d];
      rest /= out[d];
      const int da = d - (r - static_cast<int>(as.size()));
      const int db = d - (r - static_cast<int>(bs.size()));
      if (da >= 0) {
        if (as[da] != 1) ai += c * astride;
        astride *= as[da];
      }
      if (db >= 0) {
        if (bs[db] != 1) bi += c * bstride;
        bstride *= bs[db];
      }
    }
    const double u = a[ai], v = b[bi];
    y[i] = op == "Mul" ? u * v : op == "Sub" ? u - v : op == "Div" ? u / v : u + v;
  }
  return y;
}

Values RefBinary(const Values& a, const Shape& as, const Values& b, const Shape& bs,
                 const Shape& out, bool mul) {
  return RefArithmetic(a, as, b, bs, out, mul ? "Mul" : "Add");
}

// ---- Op tests ---------------------------------------------------------------------------

TEST_F(CudaBackendTest, Conv2DGroupedStridedWithBias) {
  std::mt19937 rng(1);
  const Shape xs = {2, 4, 7, 6}, ws = {6, 2, 3, 3};
  // stride 2, padding 1, dilation 1, groups 2: out (7+2-3)/2+1 = 4, (6+2-3)/2+1 = 3.
  OpCase c;
  c.op = "Conv2D";
  c.attrs = AttrsOf("Conv2D", {{"stride", Ints({2, 2})}, {"padding", Ints({1, 1})},
                               {"groups", Int(2)}});
  c.input_shapes = {xs, ws, {6}};
  c.inputs = {Random(Count(xs), rng), Random(Count(ws), rng), Random(6, rng)};
  c.output_shapes = {{2, 6, 4, 3}};
  c.reference = [&](const std::vector<Values>& in) {
    return std::vector<Values>{
        RefConv(in[0], in[1], &in[2], xs, ws, 4, 3, {2, 2}, {1, 1, 1, 1}, {1, 1}, 2)};
  };
  c.grad_inputs = {true, true, true};
  CheckOp(c);
}

TEST_F(CudaBackendTest, Conv2DAsymmetricPaddingDilated) {
  std::mt19937 rng(2);
  const Shape xs = {1, 3, 6, 6}, ws = {4, 3, 3, 2};
  // padding [top 2, left 0, bottom 1, right 1], dilation [1, 2]:
  // out h = 6+3-3+1 = 7, w = 6+1-2*1-1+1 = 5.
  OpCase c;
  c.op = "Conv2D";
  c.attrs = AttrsOf("Conv2D", {{"padding", Ints({2, 0, 1, 1})}, {"dilation", Ints({1, 2})}});
  c.input_shapes = {xs, ws};
  c.inputs = {Random(Count(xs), rng), Random(Count(ws), rng)};
  c.output_shapes = {{1, 4, 7, 5}};
  c.reference = [&](const std::vector<Values>& in) {
    return std::vector<Values>{
        RefConv(in[0], in[1], nullptr, xs, ws, 7, 5, {1, 1}, {2, 0, 1, 1}, {1, 2}, 1)};
  };
  c.grad_inputs = {true, true};
  CheckOp(c);
}

// Batch statistics over N, H, W per channel.
struct BatchStats {
  Values mean, var;  // biased variance
};
BatchStats Stats(const Values& x, int64_t n, int64_t c, int64_t hw) {
  BatchStats s{Values(c, 0.0), Values(c, 0.0)};
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t b = 0; b < n; ++b)
      for (int64_t i = 0; i < hw; ++i) s.mean[ch] += x[(b * c + ch) * hw + i];
    s.mean[ch] /= n * hw;
    for (int64_t b = 0; b < n; ++b)
      for (int64_t i = 0; i < hw; ++i) {
        const double d = x[(b * c + ch) * hw + i] - s.mean[ch];
        s.var[ch] += d * d;
      }
    s.var[ch] /= n * hw;
  }
  return s;
}

TEST_F(CudaBackendTest, BatchNormTrainingForwardBackwardAndRunningStats) {
  std::mt19937 rng(3);
  const Shape xs = {3, 4, 3, 2};
  const int64_t n = 3, c = 4, hw = 6;
  const double eps = 1e-5, momentum = 0.1;
  OpCase oc;
  oc.op = "BatchNorm";
  oc.attrs = AttrsOf("BatchNorm");
  oc.input_shapes = {xs, {c}, {c}};
  oc.inputs = {Random(Count(xs), rng, -2, 3), Random(c, rng, 0.5, 1.5), Random(c, rng)};
  oc.output_shapes = {xs};
  oc.saved_shapes = {{c}, {c}};
  oc.reference = [&](const std::vector<Values>& in) {
    const BatchStats s = Stats(in[0], n, c, hw);
    Values y(in[0].size());
    for (int64_t b = 0; b < n; ++b)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t i = 0; i < hw; ++i) {
          const int64_t k = (b * c + ch) * hw + i;
          y[k] = (in[0][k] - s.mean[ch]) / std::sqrt(s.var[ch] + eps) * in[1][ch] + in[2][ch];
        }
    return std::vector<Values>{y};
  };
  oc.grad_inputs = {true, true, true};
  CheckOp(oc);

  // Running statistics and saved state, on a second forward.
  const std::vector<float> rm0 = Random(c, rng), rv0 = Random(c, rng, 0.5, 2);
  ForwardArgs fwd;
  fwd.op = "BatchNorm";
  fwd.attrs = &oc.attrs;
  fwd.inputs = {Put(xs, oc.inputs[0]), Put({c}, oc.inputs[1]), Put({c}, oc.inputs[2])};
  fwd.outputs = {Alloc(xs)};
  fwd.saved = {Alloc({c}), Alloc({c})};
  fwd.running = {Put({c}, rm0), Put({c}, rv0)};
  absl::Status status = backend_->Forward(fwd);
  ASSERT_TRUE(status.ok()) << status;
  const BatchStats s = Stats(ToDouble(oc.inputs[0]), n, c, hw);
  Values rm(c), rv(c), invstd(c);
  for (int64_t ch = 0; ch < c; ++ch) {
    rm[ch] = (1 - momentum) * rm0[ch] + momentum * s.mean[ch];
    rv[ch] = (1 - momentum) * rv0[ch] + momentum * s.var[ch] * (n * hw) / (n * hw - 1.0);
    invstd[ch] = 1 / std::sqrt(s.var[ch] + eps);
  }
  ExpectNear(Get(fwd.running[0]), rm, "running_mean");
  ExpectNear(Get(fwd.running[1]), rv, "running_var (unbiased)");
  ExpectNear(Get(fwd.saved[0]), s.mean, "saved mean");
  ExpectNear(Get(fwd.saved[1]), invstd, "saved invstd");

  // Inference normalises with the running statistics.
  ForwardArgs inf = fwd;
  inf.training = false;
  inf.inputs.push_back(Put({c}, rm0));
  inf.inputs.push_back(Put({c}, rv0));
  inf.saved.clear();
  inf.running.clear();
  inf.outputs = {Alloc(xs)};
  status = backend_->Forward(inf);
  ASSERT_TRUE(status.ok()) << status;
  Values want(Count(xs));
  for (int64_t k = 0; k < Count(xs); ++k) {
    const int64_t ch = (k / hw) % c;
    want[k] = (oc.inputs[0][k] - rm0[ch]) / std::sqrt(rv0[ch] + eps) * oc.inputs[1][ch] +
              oc.inputs[2][ch];
  }
  ExpectNear(Get(inf.outputs[0]), want, "inference output");
}

TEST_F(CudaBackendTest, BatchNormInPlaceOn2D) {
  std::mt19937 rng(4);
  const std::vector<float> x = Random(5 * 3, rng);
  graph::Attrs attrs = AttrsOf("BatchNorm");
  ForwardArgs fwd;
  fwd.op = "BatchNorm";
  fwd.attrs = &attrs;
  fwd.inputs = {Put({5, 3}, x), Put({3}, {1, 1, 1}), Put({3}, {0, 0, 0})};
  fwd.outputs = {fwd.inputs[0]};  // y aliases x
  fwd.saved = {Alloc({3}), Alloc({3})};
  absl::Status status = backend_->Forward(fwd);
  ASSERT_TRUE(status.ok()) << status;
  const BatchStats s = Stats(ToDouble(x), 5, 3, 1);
  Values want(x.size());
  for (size_t k = 0; k < x.size(); ++k) {
    want[k] = (x[k] - s.mean[k % 3]) / std::sqrt(s.var[k % 3] + 1e-5);
  }
  ExpectNear(Get(fwd.outputs[0]), want, "in-place output");
}

TEST_F(CudaBackendTest, MatMulBatchedAgainst2DWeightWithBias) {
  std::mt19937 rng(5);
  // a [2, 3, 4, 5] x b [5, 6] (or [6, 5] transposed, or [1, 6, 5]: one matrix) + bias [6].
  for (const Shape& bs : {Shape{5, 6}, Shape{6, 5}, Shape{1, 6, 5}}) {
    const bool tb = bs != Shape{5, 6};
    SCOPED_TRACE("b " + graph::ShapeString(bs));
    OpCase c;
    c.op = "MatMul";
    c.attrs = AttrsOf("MatMul", {{"transpose_b", Bool(tb)}});
    c.input_shapes = {{2, 3, 4, 5}, bs, {6}};
    c.inputs = {Random(120, rng), Random(30, rng), Random(6, rng)};
    c.output_shapes = {{2, 3, 4, 6}};
    c.reference = [&](const std::vector<Values>& in) {
      return std::vector<Values>{RefMatMul(in[0], in[1], &in[2], 6, true, 4, 5, 6, false, tb)};
    };
    c.grad_inputs = {true, true, true};
    CheckOp(c);
  }
}

TEST_F(CudaBackendTest, MatMulTransposedAWith2DB) {
  std::mt19937 rng(6);
  for (bool tb : {false, true}) {
    SCOPED_TRACE(tb ? "transpose_b" : "plain");
    // a stored [batch, K, M] = [3, 5, 4] (M 4, K 5) x b 2-D.
    OpCase c;
    c.op = "MatMul";
    c.attrs = AttrsOf("MatMul", {{"transpose_a", Bool(true)}, {"transpose_b", Bool(tb)}});
    c.input_shapes = {{3, 5, 4}, tb ? Shape{6, 5} : Shape{5, 6}};
    c.inputs = {Random(60, rng), Random(30, rng)};
    c.output_shapes = {{3, 4, 6}};
    c.reference = [&](const std::vector<Values>& in) {
      return std::vector<Values>{RefMatMul(in[0], in[1], nullptr, 3, true, 4, 5, 6, true, tb)};
    };
    c.grad_inputs = {true, true};
    CheckOp(c);
  }
}

TEST_F(CudaBackendTest, MatMulEqualBatchDimsAllTransposes) {
  std::mt19937 rng(7);
  for (int mode = 0; mode < 4; ++mode) {
    const bool ta = mode & 1, tb = mode & 2;
    SCOPED_TRACE(absl::StrCat("transpose_a=", ta, " transpose_b=", tb));
    const int64_t m = 3, k = 4, n = 5;
    OpCase c;
    c.op = "MatMul";
    c.attrs = AttrsOf("MatMul", {{"transpose_a", Bool(ta)}, {"transpose_b", Bool(tb)}});
    c.input_shapes = {ta ? Shape{2, k, m} : Shape{2, m, k}, tb ? Shape{2, n, k} : Shape{2, k, n}};
    c.inputs = {Random(2 * m * k, rng), Random(2 * k * n, rng)};
    c.output_shapes = {{2, m, n}};
    c.reference = [&](const std::vector<Values>& in) {
      return std::vector<Values>{RefMatMul(in[0], in[1], nullptr, 2, false, m, k, n, ta, tb)};
    };
    c.grad_inputs = {true, true};
    CheckOp(c);
  }
}

TEST_F(CudaBackendTest, MatMulBroadcastBatchDims) {
  // [2,1,M,K] x [1,3,K,N] -> [2,3,M,N]: output matrix (i, j) is a's matrix i times b's j; the
  // gradients sum over the products each matrix fed (checked by finite differences).
  std::mt19937 rng(21);
  const int64_t m = 3, k = 4, n = 5;
  OpCase c;
  c.op = "MatMul";
  c.attrs = AttrsOf("MatMul");
  c.input_shapes = {{2, 1, m, k}, {1, 3, k, n}};
  c.inputs = {Random(2 * m * k, rng), Random(3 * k * n, rng)};
  c.output_shapes = {{2, 3, m, n}};
  c.reference = [&](const std::vector<Values>& in) {
    Values y;
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t j = 0; j < 3; ++j) {
        const Values ai(in[0].begin() + i * m * k, in[0].begin() + (i + 1) * m * k);
        const Values bj(in[1].begin() + j * k * n, in[1].begin() + (j + 1) * k * n);
        const Values yij = RefMatMul(ai, bj, nullptr, 1, false, m, k, n, false, false);
        y.insert(y.end(), yij.begin(), yij.end());
      }
    }
    return std::vector<Values>{y};
  };
  c.grad_inputs = {true, true};
  CheckOp(c);
}

struct PoolCase {
  const char* name;
  bool max;
  std::vector<int64_t> kernel, stride, padding;  // padding as the attribute holds it
  bool ceil_mode, count_include_pad;
  Shape out;
};

TEST_F(CudaBackendTest, PoolingCudnnAndOwnKernels) {
  const Shape xs = {2, 3, 7, 6};
  const PoolCase cases[] = {
      // cuDNN: symmetric padding, floor rule.
      {"max k3 s2 p1", true, {3, 3}, {2, 2}, {1, 1}, false, true, {2, 3, 4, 3}},
      {"avg k3 s2 p1 include", false, {3, 3}, {2, 2}, {1, 1}, false, true, {2, 3, 4, 3}},
      {"avg k3 s2 p1 exclude", false, {3, 3}, {2, 2}, {1, 1}, false, false, {2, 3, 4, 3}},
      // Own kernels: ceil_mode where it adds a window (k2 s2 on h 7: 4, floor 3; k3 s2 p1
      // on w 6: 4, floor 3), and asymmetric padding.
      {"max k2 s2 ceil", true, {2, 2}, {2, 2}, {0, 0}, true, true, {2, 3, 4, 3}},
      {"avg k3 s2 ceil p1", false, {3, 3}, {2, 2}, {1, 1}, true, true, {2, 3, 4, 4}},
      {"avg k3 s2 ceil p1 exclude", false, {3, 3}, {2, 2}, {1, 1}, true, false, {2, 3, 4, 4}},
      {"max asym", true, {2, 2}, {2, 2}, {1, 0, 0, 1}, false, true, {2, 3, 4, 3}},
      {"avg asym", false, {2, 2}, {2, 2}, {1, 0, 0, 1}, false, true, {2, 3, 4, 3}},
  };
  for (const PoolCase& pc : cases) {
    SCOPED_TRACE(pc.name);
    std::mt19937 rng(8);
    OpCase c;
    c.op = pc.max ? "MaxPool" : "AvgPool";
    std::map<std::string, proto::AttrValue> set = {{"kernel_size", Ints(pc.kernel)},
                                                   {"stride", Ints(pc.stride)},
                                                   {"padding", Ints(pc.padding)},
                                                   {"ceil_mode", Bool(pc.ceil_mode)}};
    if (!pc.max) set["count_include_pad"] = Bool(pc.count_include_pad);
    c.attrs = AttrsOf(c.op, set);
    c.input_shapes = {xs};
    c.inputs = {pc.max ? Distinct(Count(xs), rng) : Random(Count(xs), rng)};
    c.output_shapes = {pc.out};
    std::vector<int64_t> pad = pc.padding;
    if (pad.size() == 2) pad = {pad[0], pad[1], pad[0], pad[1]};
    c.reference = [&](const std::vector<Values>& in) {
      return std::vector<Values>{RefPool(in[0], 6, 7, 6, pc.out[2], pc.out[3], pc.kernel,
                                         pc.stride, pad, pc.max, pc.count_include_pad)};
    };
    c.grad_inputs = {true};
    CheckOp(c);
  }
}

TEST_F(CudaBackendTest, GlobalAvgPool) {
  std::mt19937 rng(9);
  OpCase c;
  c.op = "GlobalAvgPool";
  c.attrs = AttrsOf("GlobalAvgPool");
  c.input_shapes = {{2, 3, 5, 7}};
  c.inputs = {Random(210, rng)};
  c.output_shapes = {{2, 3, 1, 1}};
  c.reference = [](const std::vector<Values>& in) {
    Values y(6, 0.0);
    for (int64_t i = 0; i < 210; ++i) y[i / 35] += in[0][i] / 35;
    return std::vector<Values>{y};
  };
  c.grad_inputs = {true};
  CheckOp(c);
}

TEST_F(CudaBackendTest, Activations) {
  const std::map<std::string, std::function<double(double)>> ops = {
      {"ReLU", [](double v) { return std::max(v, 0.0); }},
      {"ReLU6", [](double v) { return std::min(std::max(v, 0.0), 6.0); }},
      {"Sigmoid", [](double v) { return 1 / (1 + std::exp(-v)); }},
      {"Tanh", [](double v) { return std::tanh(v); }},
      {"GELU", [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }},
  };
  for (const auto& [op, f] : ops) {
    std::mt19937 rng(10);
    // [-8, 8) covers ReLU6's upper clip.
    CheckOp(ElementwiseCase(op, AttrsOf(op), Random(150, rng, -8, 8), f));
  }
}

TEST_F(CudaBackendTest, GeluTanhApproximation) {
  std::mt19937 rng(11);
  OpCase c;
  c.op = "GELU";
  c.attrs = AttrsOf("GELU", {{"approximate", Str("tanh")}});
  c.input_shapes = {{100}};
  c.inputs = {Random(100, rng, -4, 4)};
  c.output_shapes = {{100}};
  c.reference = [](const std::vector<Values>& in) {
    Values y(in[0].size());
    for (size_t i = 0; i < y.size(); ++i) {
      const double v = in[0][i];
      y[i] = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    }
    return std::vector<Values>{y};
  };
  c.grad_inputs = {true};
  CheckOp(c);
}

TEST_F(CudaBackendTest, ActivationBackwardInPlace) {
  // dx aliases dy (the gradient rule allows it): ReLU from y.
  graph::Attrs attrs = AttrsOf("ReLU");
  const std::vector<float> y = {0, 1, 0, 2.5f}, dy = {1, 2, 3, 4};
  BackwardArgs bwd;
  bwd.op = "ReLU";
  bwd.attrs = &attrs;
  bwd.inputs = {TensorView{nullptr, {4}}};
  bwd.outputs = {Put({4}, y)};
  bwd.output_grads = {Put({4}, dy)};
  bwd.input_grads = {bwd.output_grads[0]};
  absl::Status status = backend_->Backward(bwd);
  ASSERT_TRUE(status.ok()) << status;
  ExpectNear(Get(bwd.input_grads[0]), {0, 2, 0, 4}, "dx");
}

// n values uniform in [lo, hi), each at least 0.01 from every kink: central differences
// (step 1e-4) do not straddle a jump of the derivative.
std::vector<float> AwayFromKinks(int64_t n, std::mt19937& rng, float lo, float hi,
                                 const std::vector<float>& kinks) {
  std::vector<float> v = Random(n, rng, lo, hi);
  for (float& x : v) {
    for (float k : kinks) {
      if (std::abs(x - k) < 0.01f) x = k + 0.02f;
    }
  }
  return v;
}

TEST_F(CudaBackendTest, HardSigmoidAndHardSwish) {
  struct Case {
    std::string name, op;
    std::map<std::string, proto::AttrValue> attrs;
    std::function<double(double)> f;
    std::vector<float> kinks;
  };
  const std::vector<Case> cases = {
      {"HardSigmoid (PyTorch)", "HardSigmoid", {},
       [](double v) { return std::min(std::max(v / 6 + 0.5, 0.0), 1.0); }, {-3, 3}},
      {"HardSigmoid (alpha 0.2, beta 0.4)", "HardSigmoid",
       {{"alpha", Float(0.2)}, {"beta", Float(0.4)}},
       [](double v) { return std::min(std::max(0.2 * v + 0.4, 0.0), 1.0); }, {-2, 3}},
      {"HardSwish", "HardSwish", {},
       [](double v) { return v * std::min(std::max(v + 3, 0.0), 6.0) / 6; }, {-3, 3}},
  };
  for (const Case& hard : cases) {
    SCOPED_TRACE(hard.name);
    std::mt19937 rng(22);
    CheckOp(ElementwiseCase(hard.op, AttrsOf(hard.op, hard.attrs),
                            AwayFromKinks(150, rng, -5, 5, hard.kinks), hard.f));
  }
}

TEST_F(CudaBackendTest, ActivationsFromOnnx) {
  struct Case {
    std::string name, op;
    std::map<std::string, proto::AttrValue> attrs;
    std::function<double(double)> f;
    float lo, hi;
  };
  const double selu_alpha = 1.6732632423543772848170429916717;
  const double selu_gamma = 1.0507009873554804934193349852946;
  const std::vector<Case> cases = {
      {"LeakyReLU", "LeakyReLU", {}, [](double v) { return v > 0 ? v : 0.01 * v; }, -5, 5},
      {"LeakyReLU (alpha 0.2)",
       "LeakyReLU",
       {{"alpha", Float(0.2)}},
       [](double v) { return v > 0 ? v : 0.2 * v; },
       -5,
       5},
      {"ELU (alpha 0.5)",
       "ELU",
       {{"alpha", Float(0.5)}},
       [](double v) { return v > 0 ? v : 0.5 * std::expm1(v); },
       -5,
       5},
      {"SELU",
       "SELU",
       {},
       [&](double v) { return selu_gamma * (v > 0 ? v : selu_alpha * std::expm1(v)); },
       -5,
       5},
      {"Softplus",
       "Softplus",
       {},
       [](double v) { return v > 20 ? v : std::log1p(std::exp(v)); },
       -30,
       30},
      {"Sqrt", "Sqrt", {}, [](double v) { return std::sqrt(v); }, 0.1f, 5},
      {"Erf", "Erf", {}, [](double v) { return std::erf(v); }, -3, 3},
      {"Mish", "Mish", {}, [](double v) { return v * std::tanh(std::log1p(std::exp(v))); }, -6, 6},
  };
  for (const Case& act : cases) {
    SCOPED_TRACE(act.name);
    std::mt19937 rng(23);
    CheckOp(ElementwiseCase(act.op, AttrsOf(act.op, act.attrs),
                            AwayFromKinks(150, rng, act.lo, act.hi, {0, 20}), act.f));
  }
}

TEST_F(CudaBackendTest, HardSwishAtItsKinksAndInPlace) {
  // PyTorch's hardswish_backward takes the middle piece x / 3 + 1/2 at x = -3 and x = 3.
  const std::vector<float> x = {-4, -3, -1.5f, 0, 3, 4}, dy = {1, 1, 1, 1, 1, 2};
  graph::Attrs attrs = AttrsOf("HardSwish");
  ForwardArgs fwd;
  fwd.op = "HardSwish";
  fwd.attrs = &attrs;
  fwd.inputs = {Put({6}, x)};
  fwd.outputs = {Alloc({6})};
  ASSERT_TRUE(backend_->Forward(fwd).ok());
  ExpectNear(Get(fwd.outputs[0]), {0, 0, -0.375, 0, 3, 4}, "y");
  BackwardArgs bwd;
  bwd.op = "HardSwish";
  bwd.attrs = &attrs;
  bwd.inputs = fwd.inputs;
  bwd.outputs = {TensorView{nullptr, {6}}};
  bwd.output_grads = {Put({6}, dy)};
  bwd.input_grads = {bwd.output_grads[0]};  // dx over dy.
  ASSERT_TRUE(backend_->Backward(bwd).ok());
  ExpectNear(Get(bwd.input_grads[0]), {0, -0.5, 0, 0.5, 1.5, 2}, "dx");
  fwd.outputs = {fwd.inputs[0]};  // y over x.
  ASSERT_TRUE(backend_->Forward(fwd).ok());
  ExpectNear(Get(fwd.inputs[0]), {0, 0, -0.375, 0, 3, 4}, "y in place");
}

TEST_F(CudaBackendTest, DropoutReplaysItsMaskAndScales) {
  std::mt19937 rng(12);
  const int64_t n = 4096;
  const float rate = 0.25f;
  graph::Attrs attrs = AttrsOf("Dropout", {{"rate", Float(rate)}});
  const std::vector<float> x = Random(n, rng);
  ForwardArgs fwd;
  fwd.op = "Dropout";
  fwd.attrs = &attrs;
  fwd.seed = 1234;
  fwd.inputs = {Put({n}, x)};
  fwd.outputs = {Alloc({n})};
  fwd.saved = {Alloc({n}, proto::DTYPE_BOOL)};
  ASSERT_TRUE(backend_->Forward(fwd).ok());
  const std::vector<float> y = Get(fwd.outputs[0]);
  const std::vector<uint8_t> mask = GetBytes(fwd.saved[0]);
  int kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(mask[i] == 0 || mask[i] == 1) << i;
    kept += mask[i];
    EXPECT_NEAR(y[i], mask[i] ? x[i] / (1 - rate) : 0.0f, 1e-6) << i;
  }
  EXPECT_NEAR(kept / static_cast<double>(n), 1 - rate, 0.05);

  // A re-forward with the same seed writes the same mask and output; another seed differs.
  ForwardArgs again = fwd;
  again.outputs = {Alloc({n})};
  again.saved = {Alloc({n}, proto::DTYPE_BOOL)};
  ASSERT_TRUE(backend_->Forward(again).ok());
  EXPECT_EQ(GetBytes(again.saved[0]), mask);
  EXPECT_EQ(Get(again.outputs[0]), y);
  again.seed = 99;
  ASSERT_TRUE(backend_->Forward(again).ok());
  EXPECT_NE(GetBytes(again.saved[0]), mask);

  // Backward in place: dx = dy * mask / (1 - rate).
  const std::vector<float> dy = Random(n, rng);
  BackwardArgs bwd;
  bwd.op = "Dropout";
  bwd.attrs = &attrs;
  bwd.inputs = {TensorView{nullptr, {n}}};
  bwd.outputs = {TensorView{nullptr, {n}}};
  bwd.saved = fwd.saved;
  bwd.output_grads = {Put({n}, dy)};
  bwd.input_grads = {bwd.output_grads[0]};
  ASSERT_TRUE(backend_->Backward(bwd).ok());
  Values want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = mask[i] ? dy[i] / (1 - rate) : 0.0;
  ExpectNear(Get(bwd.input_grads[0]), want, "dx");

  // Not training: the identity.
  ForwardArgs eval = fwd;
  eval.training = false;
  eval.saved.clear();
  eval.outputs = {Alloc({n})};
  ASSERT_TRUE(backend_->Forward(eval).ok());
  EXPECT_EQ(Get(eval.outputs[0]), x);
}

TEST_F(CudaBackendTest, AddAndMulBroadcast) {
  const Shape as = {2, 3, 4}, bs = {3, 1}, out = {2, 3, 4};
  for (bool mul : {false, true}) {
    SCOPED_TRACE(mul ? "Mul" : "Add");
    std::mt19937 rng(13);
    OpCase c;
    c.op = mul ? "Mul" : "Add";
    c.attrs = AttrsOf(c.op);
    c.input_shapes = {as, bs};
    c.inputs = {Random(24, rng), Random(3, rng)};
    c.output_shapes = {out};
    c.reference = [&](const std::vector<Values>& in) {
      return std::vector<Values>{RefBinary(in[0], as, in[1], bs, out, mul)};
    };
    c.grad_inputs = {true, true};
    CheckOp(c);
  }
  // Both operands broadcast: [2, 1, 4] and [3, 1] into [2, 3, 4].
  for (bool mul : {false, true}) {
    SCOPED_TRACE(mul ? "Mul both" : "Add both");
    std::mt19937 rng(14);
    OpCase c;
    c.op = mul ? "Mul" : "Add";
    c.attrs = AttrsOf(c.op);
    c.input_shapes = {{2, 1, 4}, bs};
    c.inputs = {Random(8, rng), Random(3, rng)};
    c.output_shapes = {out};
    c.reference = [&](const std::vector<Values>& in) {
      return std::vector<Values>{RefBinary(in[0], {2, 1, 4}, in[1], bs, out, mul)};
    };
    c.grad_inputs = {true, true};
    CheckOp(c);
  }
}

TEST_F(CudaBackendTest, SubAndDivBroadcast) {
  // Both operands broadcast: [2, 1, 4] and [3, 1] into [2, 3, 4]; Div's divisor in [0.5, 1.5).
  const Shape as = {2, 1, 4}, bs = {3, 1}, out = {2, 3, 4};
  for (const std::string op : {"Sub", "Div"}) {
    SCOPED_TRACE(op);
    std::mt19937 rng(17);
    OpCase c;
    c.op = op;
    c.attrs = AttrsOf(c.op);
    c.input_shapes = {as, bs};
    std::vector<float> b = Random(3, rng);
    if (op == "Div") {
      for (float& v : b) v = 1.0f + 0.5f * v;
    }
    c.inputs = {Random(8, rng), b};
    c.output_shapes = {out};
    c.reference = [&](const std::vector<Values>& in) {
      return std::vector<Values>{RefArithmetic(in[0], as, in[1], bs, out, op)};
    };
    c.grad_inputs = {true, true};
    CheckOp(c);
  }
}

TEST_F(CudaBackendTest, PReluPerChannel) {
  // x[2, 3, 2, 2] with slope [3, 1, 1], x away from the kink at 0.
  const Shape xs = {2, 3, 2, 2}, ss = {3, 1, 1};
  std::mt19937 rng(19);
  OpCase c;
  c.op = "PReLU";
  c.attrs = AttrsOf(c.op);
  c.input_shapes = {xs, ss};
  std::vector<float> x = Random(24, rng);
  for (float& v : x) v += v < 0 ? -0.2f : 0.2f;
  c.inputs = {x, Random(3, rng, 0.1f, 0.5f)};
  c.output_shapes = {xs};
  c.reference = [&](const std::vector<Values>& in) {
    Values y(24);
    for (int i = 0; i < 24; ++i) y[i] = in[0][i] > 0 ? in[0][i] : in[1][(i / 4) % 3] * in[0][i];
    return std::vector<Values>{y};
  };
  c.grad_inputs = {true, true};
  CheckOp(c);
}

TEST_F(CudaBackendTest, ReductionsOverAxes) {
  // x[2, 3, 4] reduced over axes 0 and -1 to [3]: sum, max and min of 8 values each.
  std::mt19937 rng(20);
  const std::vector<float> x = Random(24, rng);
  for (const char* op : {"ReduceSum", "ReduceMax", "ReduceMin"}) {
    OpCase c;
    c.op = op;
    proto::AttrValue keep;
    keep.set_b(false);
    c.attrs = AttrsOf(op, {{"axes", Ints({0, -1})}, {"keepdims", keep}});
    c.input_shapes = {{2, 3, 4}};
    c.inputs = {x};
    c.output_shapes = {{3}};
    const std::string name = op;
    c.reference = [name](const std::vector<Values>& in) {
      Values y(3);
      for (int j = 0; j < 3; ++j) {
        y[j] = name == "ReduceSum" ? 0.0 : in[0][j * 4];
        for (int i = 0; i < 2; ++i)
          for (int k = 0; k < 4; ++k) {
            const double v = in[0][(i * 3 + j) * 4 + k];
            if (name == "ReduceSum") y[j] += v;
            if (name == "ReduceMax") y[j] = std::max(y[j], v);
            if (name == "ReduceMin") y[j] = std::min(y[j], v);
          }
      }
      return std::vector<Values>{y};
    };
    c.grad_inputs = {true};
    CheckOp(c);
  }
}

TEST_F(CudaBackendTest, DivBackwardWithGradientAliasingDy) {
  std::mt19937 rng(18);
  std::vector<float> a = Random(6, rng), b = Random(3, rng), dy = Random(6, rng);
  for (float& v : b) v = 1.0f + 0.5f * v;
  const auto [got_da, got_db] = BinaryBackwardOverDy("Div", a, b, dy);
  Values da(6), db(3, 0.0);
  for (int i = 0; i < 6; ++i) {
    da[i] = dy[i] / b[i % 3];
    db[i % 3] -= dy[i] * a[i] / (double{b[i % 3]} * b[i % 3]);
  }
  ExpectNear(got_da, da, "da");
  ExpectNear(got_db, db, "db");
}

TEST_F(CudaBackendTest, MulBackwardWithGradientAliasingDy) {
  std::mt19937 rng(15);
  const std::vector<float> a = Random(6, rng), b = Random(3, rng), dy = Random(6, rng);
  const auto [got_da, got_db] = BinaryBackwardOverDy("Mul", a, b, dy);
  Values da(6), db(3, 0.0);
  for (int i = 0; i < 6; ++i) {
    da[i] = dy[i] * b[i % 3];
    db[i % 3] += dy[i] * a[i];
  }
  ExpectNear(got_da, da, "da");
  ExpectNear(got_db, db, "db");
}

TEST_F(CudaBackendTest, LayerNorm) {
  std::mt19937 rng(16);
  const int64_t rows = 6, d = 40;
  const double eps = 1e-5;
  OpCase c;
  c.op = "LayerNorm";
  c.attrs = AttrsOf("LayerNorm");
  c.input_shapes = {{2, 3, d}, {d}, {d}};
  c.inputs = {Random(rows * d, rng, -2, 2), Random(d, rng, 0.5, 1.5), Random(d, rng)};
  c.output_shapes = {{2, 3, d}};
  c.saved_shapes = {{2, 3}, {2, 3}};
  c.reference = [&](const std::vector<Values>& in) {
    Values y(rows * d);
    for (int64_t r = 0; r < rows; ++r) {
      double mean = 0, var = 0;
      for (int64_t i = 0; i < d; ++i) mean += in[0][r * d + i] / d;
      for (int64_t i = 0; i < d; ++i) var += std::pow(in[0][r * d + i] - mean, 2) / d;
      for (int64_t i = 0; i < d; ++i) {
        y[r * d + i] = (in[0][r * d + i] - mean) / std::sqrt(var + eps) * in[1][i] + in[2][i];
      }
    }
    return std::vector<Values>{y};
  };
  c.grad_inputs = {true, true, true};
  CheckOp(c);
}

TEST_F(CudaBackendTest, SoftmaxLastAxisScaledCausal) {
  std::mt19937 rng(17);
  const int64_t t = 5;
  OpCase c;
  c.op = "Softmax";
  c.attrs = AttrsOf("Softmax", {{"scale", Float(0.5)}, {"causal", Bool(true)}});
  c.input_shapes = {{2, t, t}};
  c.inputs = {Random(2 * t * t, rng, -3, 3)};
  c.output_shapes = {{2, t, t}};
  c.reference = [&](const std::vector<Values>& in) {
    return std::vector<Values>{RefSoftmax(in[0], 2 * t, t, 1, 0.5, true)};
  };
  c.grad_inputs = {true};
  CheckOp(c);
}

TEST_F(CudaBackendTest, SoftmaxInnerAxis) {
  std::mt19937 rng(18);
  OpCase c;
  c.op = "Softmax";
  c.attrs = AttrsOf("Softmax", {{"axis", Int(1)}});
  c.input_shapes = {{2, 7, 3}};
  c.inputs = {Random(42, rng, -3, 3)};
  c.output_shapes = {{2, 7, 3}};
  c.reference = [&](const std::vector<Values>& in) {
    return std::vector<Values>{RefSoftmax(in[0], 2, 7, 3, 1.0, false)};
  };
  c.grad_inputs = {true};
  CheckOp(c);
}

TEST_F(CudaBackendTest, TransposeConcatSplit) {
  std::mt19937 rng(19);
  {
    const Shape xs = {2, 3, 4};  // perm [2, 0, 1] -> [4, 2, 3]
    OpCase c;
    c.op = "Transpose";
    c.attrs = AttrsOf("Transpose", {{"perm", Ints({2, 0, 1})}});
    c.input_shapes = {xs};
    c.inputs = {Random(24, rng)};
    c.output_shapes = {{4, 2, 3}};
    c.reference = [](const std::vector<Values>& in) {
      Values y(24);
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 3; ++j)
          for (int k = 0; k < 4; ++k) y[(k * 2 + i) * 3 + j] = in[0][(i * 3 + j) * 4 + k];
      return std::vector<Values>{y};
    };
    c.grad_inputs = {true};
    CheckOp(c);
  }
  // Concat along axis 1 of [2, 1, 3] and [2, 2, 3]; Split undoes it.
  auto concat = [](const Values& a, const Values& b) {
    Values y;
    for (int i = 0; i < 2; ++i) {
      y.insert(y.end(), a.begin() + i * 3, a.begin() + (i + 1) * 3);
      y.insert(y.end(), b.begin() + i * 6, b.begin() + (i + 1) * 6);
    }
    return y;
  };
  {
    OpCase c;
    c.op = "Concat";
    c.attrs = AttrsOf("Concat", {{"axis", Int(1)}});
    c.input_shapes = {{2, 1, 3}, {2, 2, 3}};
    c.inputs = {Random(6, rng), Random(12, rng)};
    c.output_shapes = {{2, 3, 3}};
    c.reference = [&](const std::vector<Values>& in) {
      return std::vector<Values>{concat(in[0], in[1])};
    };
    c.grad_inputs = {true, true};
    CheckOp(c);
  }
  {
    OpCase c;
    c.op = "Split";
    c.attrs = AttrsOf("Split", {{"axis", Int(-2)}, {"sizes", Ints({1, 2})}});
    c.input_shapes = {{2, 3, 3}};
    c.inputs = {Random(18, rng)};
    c.output_shapes = {{2, 1, 3}, {2, 2, 3}};
    c.reference = [](const std::vector<Values>& in) {
      Values a, b;
      for (int i = 0; i < 2; ++i) {
        a.insert(a.end(), in[0].begin() + i * 9, in[0].begin() + i * 9 + 3);
        b.insert(b.end(), in[0].begin() + i * 9 + 3, in[0].begin() + (i + 1) * 9);
      }
      return std::vector<Values>{a, b};
    };
    c.grad_inputs = {true};
    CheckOp(c);
  }
}

TEST_F(CudaBackendTest, SliceStridedAndExpandBroadcast) {
  std::mt19937 rng(23);
  {
    // x [2, 5, 6][:, 1::2, 0::3] -> [2, 2, 2]: y[n, h, w] = x[n, 1 + 2h, 3w].
    OpCase c;
    c.op = "Slice";
    c.attrs = AttrsOf("Slice", {{"axes", Ints({1, -1})},
                                {"starts", Ints({1, 0})},
                                {"ends", Ints({5, 6})},
                                {"steps", Ints({2, 3})}});
    c.input_shapes = {{2, 5, 6}};
    c.inputs = {Random(60, rng)};
    c.output_shapes = {{2, 2, 2}};
    c.reference = [](const std::vector<Values>& in) {
      Values y;
      for (int n = 0; n < 2; ++n)
        for (int h = 0; h < 2; ++h)
          for (int w = 0; w < 2; ++w) y.push_back(in[0][(n * 5 + 1 + 2 * h) * 6 + 3 * w]);
      return std::vector<Values>{y};
    };
    c.grad_inputs = {true};
    CheckOp(c);
  }
  for (const auto& [xs, out] : std::vector<std::pair<Shape, Shape>>{{{3, 1}, {2, 3, 4}},
                                                                     {{1, 1, 4}, {3, 2, 4}}}) {
    SCOPED_TRACE("Expand " + graph::ShapeString(xs) + " -> " + graph::ShapeString(out));
    OpCase c;
    c.op = "Expand";
    c.attrs = AttrsOf("Expand", {{"shape", Ints(out)}});
    c.input_shapes = {xs};
    c.inputs = {Random(Count(xs), rng)};
    c.output_shapes = {out};
    const Shape x_shape = xs, y_shape = out;
    c.reference = [x_shape, y_shape](const std::vector<Values>& in) {
      const Values zeros(Count(y_shape), 0.0);  // x broadcast = x + zeros of y's shape.
      return std::vector<Values>{RefBinary(in[0], x_shape, zeros, y_shape, y_shape, false)};
    };
    c.grad_inputs = {true};
    CheckOp(c);
  }
}

TEST_F(CudaBackendTest, SliceCopiesInt64) {
  graph::Attrs attrs =
      AttrsOf("Slice", {{"axes", Ints({1})}, {"starts", Ints({1})}, {"ends", Ints({3})}});
  ForwardArgs fwd;
  fwd.op = "Slice";
  fwd.attrs = &attrs;
  fwd.inputs = {PutIds<int64_t>({2, 4}, {0, 1, 2, 3, 10, 11, 12, 13})};
  fwd.outputs = {Alloc({2, 2}, proto::DTYPE_INT64)};
  ASSERT_TRUE(backend_->Forward(fwd).ok());
  const std::vector<uint8_t> bytes = GetBytes(fwd.outputs[0]);
  std::vector<int64_t> y(4);
  std::memcpy(y.data(), bytes.data(), bytes.size());
  EXPECT_EQ(y, std::vector<int64_t>({1, 2, 11, 12}));
}

TEST_F(CudaBackendTest, SplitBackwardZeroesPiecesWithoutGradient) {
  graph::Attrs attrs = AttrsOf("Split", {{"axis", Int(0)}, {"sizes", Ints({1, 2})}});
  BackwardArgs bwd;
  bwd.op = "Split";
  bwd.attrs = &attrs;
  bwd.inputs = {TensorView{nullptr, {3, 2}}};
  bwd.outputs = {TensorView{nullptr, {1, 2}}, TensorView{nullptr, {2, 2}}};
  bwd.output_grads = {TensorView{nullptr, {1, 2}}, Put({2, 2}, {1, 2, 3, 4})};
  bwd.input_grads = {Alloc({3, 2})};
  ASSERT_TRUE(backend_->Backward(bwd).ok());
  ExpectNear(Get(bwd.input_grads[0]), {0, 0, 1, 2, 3, 4}, "dx");
}

TEST_F(CudaBackendTest, ViewsCopyOnlyWhenNotAliased) {
  graph::Attrs attrs = AttrsOf("Flatten");
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  ForwardArgs fwd;
  fwd.op = "Flatten";
  fwd.attrs = &attrs;
  fwd.inputs = {Put({2, 3, 1}, x)};
  fwd.outputs = {fwd.inputs[0]};
  fwd.outputs[0].shape = {2, 3};
  ASSERT_TRUE(backend_->Forward(fwd).ok());
  ExpectNear(Get(fwd.outputs[0]), ToDouble(x), "aliased");
  fwd.outputs[0] = Alloc({2, 3});
  ASSERT_TRUE(backend_->Forward(fwd).ok());
  ExpectNear(Get(fwd.outputs[0]), ToDouble(x), "copied");

  graph::Attrs reshape_attrs = AttrsOf("Reshape", {{"shape", Ints({3, 2})}});
  BackwardArgs bwd;
  bwd.op = "Reshape";
  bwd.attrs = &reshape_attrs;
  bwd.inputs = {TensorView{nullptr, {6}}};
  bwd.outputs = {TensorView{nullptr, {3, 2}}};
  bwd.output_grads = {Put({3, 2}, x)};
  bwd.input_grads = {Alloc({6})};
  ASSERT_TRUE(backend_->Backward(bwd).ok());
  ExpectNear(Get(bwd.input_grads[0]), ToDouble(x), "dx");
}

TEST_F(CudaBackendTest, EmbeddingInt32AndInt64) {
  CheckEmbedding<int32_t>();
  CheckEmbedding<int64_t>();
}

TEST_F(CudaBackendTest, SoftmaxCrossEntropy) {
  std::mt19937 rng(21);
  const int64_t rows = 6, classes = 7;
  const std::vector<float> logits = Random(rows * classes, rng, -3, 3);
  const std::vector<int64_t> labels = {0, 6, 3, 3, 1, 5};
  graph::Attrs attrs = AttrsOf("SoftmaxCrossEntropy");
  ForwardArgs fwd;
  fwd.op = "SoftmaxCrossEntropy";
  fwd.attrs = &attrs;
  fwd.inputs = {Put({2, 3, classes}, logits), PutIds<int64_t>({2, 3}, labels)};
  fwd.outputs = {Alloc({})};
  ASSERT_TRUE(backend_->Forward(fwd).ok());
  double loss = 0;
  Values probs(rows * classes);
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < classes; ++j) m = std::max<double>(m, logits[r * classes + j]);
    for (int64_t j = 0; j < classes; ++j) s += std::exp(logits[r * classes + j] - m);
    for (int64_t j = 0; j < classes; ++j) {
      probs[r * classes + j] = std::exp(logits[r * classes + j] - m) / s;
    }
    loss += (m + std::log(s) - logits[r * classes + labels[r]]) / rows;
  }
  ExpectNear(Get(fwd.outputs[0]), {loss}, "loss");

  BackwardArgs bwd;
  bwd.op = "SoftmaxCrossEntropy";
  bwd.attrs = &attrs;
  bwd.inputs = fwd.inputs;
  bwd.outputs = {TensorView{nullptr, {}}};
  bwd.output_grads = {Put({}, {2.0f})};
  bwd.input_grads = {Alloc({2, 3, classes}), TensorView{nullptr, {2, 3}, proto::DTYPE_INT64}};
  ASSERT_TRUE(backend_->Backward(bwd).ok());
  Values want(rows * classes);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < classes; ++j) {
      want[r * classes + j] =
          (probs[r * classes + j] - (j == labels[r] ? 1.0 : 0.0)) * 2.0 / rows;
    }
  ExpectNear(Get(bwd.input_grads[0]), want, "dlogits");
}

TEST_F(CudaBackendTest, GroupNormTwoGroups) {
  // x[2, 4, 3, 5] in 2 groups of 2 channels; CheckOp takes the gradients by finite
  // differences of the reference.
  std::mt19937 rng(23);
  const int64_t n = 2, c = 4, groups = 2, spatial = 15, m = c / groups * spatial;
  const double eps = 1e-5;
  OpCase k;
  k.op = "GroupNorm";
  k.attrs = AttrsOf("GroupNorm", {{"num_groups", Int(groups)}});
  k.input_shapes = {{n, c, 3, 5}, {c}, {c}};
  k.inputs = {Random(n * c * spatial, rng, -2, 2), Random(c, rng, 0.5, 1.5), Random(c, rng)};
  k.output_shapes = {{n, c, 3, 5}};
  k.saved_shapes = {{n, groups}, {n, groups}};
  k.reference = [&](const std::vector<Values>& in) {
    Values y(n * c * spatial);
    for (int64_t r = 0; r < n * groups; ++r) {
      double mean = 0, var = 0;
      for (int64_t i = 0; i < m; ++i) mean += in[0][r * m + i] / m;
      for (int64_t i = 0; i < m; ++i) var += std::pow(in[0][r * m + i] - mean, 2) / m;
      for (int64_t i = 0; i < m; ++i) {
        const int64_t ch = (r % groups) * (c / groups) + i / spatial;
        y[r * m + i] = (in[0][r * m + i] - mean) / std::sqrt(var + eps) * in[1][ch] + in[2][ch];
      }
    }
    return std::vector<Values>{y};
  };
  k.grad_inputs = {true, true, true};
  CheckOp(k);
}

TEST_F(CudaBackendTest, PixelSoftmaxCrossEntropyIgnoresVoidPixels) {
  // logits[2, 3, 2, 2], labels[2, 2, 2] with two pixels labelled 255.
  std::mt19937 rng(24);
  const int64_t classes = 3, pixels = 4, total = 8;
  const std::vector<float> logits = Random(2 * classes * pixels, rng, -3, 3);
  const std::vector<int64_t> labels = {0, 2, 255, 1, 2, 255, 0, 1};
  graph::Attrs attrs = AttrsOf("PixelSoftmaxCrossEntropy", {{"ignore_index", Int(255)}});
  ForwardArgs fwd;
  fwd.op = "PixelSoftmaxCrossEntropy";
  fwd.attrs = &attrs;
  fwd.inputs = {Put({2, classes, 2, 2}, logits), PutIds<int64_t>({2, 2, 2}, labels)};
  fwd.outputs = {Alloc({})};
  ASSERT_TRUE(backend_->Forward(fwd).ok());
  double loss = 0;
  const int counted = 6;
  Values want(2 * classes * pixels, 0.0);
  for (int64_t i = 0; i < total; ++i) {
    if (labels[i] == 255) continue;
    const int64_t base = (i / pixels) * classes * pixels + i % pixels;
    double mx = -INFINITY, s = 0;
    for (int64_t k = 0; k < classes; ++k) mx = std::max<double>(mx, logits[base + k * pixels]);
    for (int64_t k = 0; k < classes; ++k) s += std::exp(logits[base + k * pixels] - mx);
    loss += (mx + std::log(s) - logits[base + labels[i] * pixels]) / counted;
    for (int64_t k = 0; k < classes; ++k) {
      want[base + k * pixels] =
          (std::exp(logits[base + k * pixels] - mx) / s - (k == labels[i] ? 1.0 : 0.0)) * 2.0 /
          counted;
    }
  }
  ExpectNear(Get(fwd.outputs[0]), {loss}, "loss");
  BackwardArgs bwd;
  bwd.op = "PixelSoftmaxCrossEntropy";
  bwd.attrs = &attrs;
  bwd.inputs = fwd.inputs;
  bwd.outputs = {TensorView{nullptr, {}}};
  bwd.output_grads = {Put({}, {2.0f})};
  bwd.input_grads = {Alloc({2, classes, 2, 2}), TensorView{nullptr, {2, 2, 2}, proto::DTYPE_INT64}};
  ASSERT_TRUE(backend_->Backward(bwd).ok());
  ExpectNear(Get(bwd.input_grads[0]), want, "dlogits");
}

TEST_F(CudaBackendTest, BackwardWithoutIncomingGradientWritesZeros) {
  graph::Attrs attrs = AttrsOf("Tanh");
  BackwardArgs bwd;
  bwd.op = "Tanh";
  bwd.attrs = &attrs;
  bwd.inputs = {TensorView{nullptr, {4}}};
  bwd.outputs = {Put({4}, {0.1f, 0.2f, 0.3f, 0.4f})};
  bwd.output_grads = {TensorView{nullptr, {4}}};
  bwd.input_grads = {Alloc({4})};
  ASSERT_TRUE(backend_->Backward(bwd).ok());
  ExpectNear(Get(bwd.input_grads[0]), {0, 0, 0, 0}, "dx");
}

// ---- Optimizer steps, Accumulate, Fill --------------------------------------------------

TEST_F(CudaBackendTest, SgdMomentumTwoSteps) {
  const std::vector<float> p0 = {1.0f, -2.0f, 0.5f}, g1 = {0.1f, 0.2f, -0.3f},
                           g2 = {-0.2f, 0.4f, 0.1f};
  UpdateArgs u;
  u.op = "SgdMomentumUpdate";
  u.param = Put({3}, p0);
  u.grad = Put({3}, g1);
  u.state = {Alloc({3})};  // Poisoned: step 1 must not read it.
  u.params.learning_rate = 0.1;
  u.params.momentum = 0.9;
  u.params.weight_decay = 0.01;
  u.step = 1;
  ASSERT_TRUE(backend_->Update(u).ok());
  ASSERT_TRUE(backend_->Upload(u.grad.data, g2.data(), 12).ok());
  u.step = 2;
  ASSERT_TRUE(backend_->Update(u).ok());
  Values p(3), buf(3);
  for (int i = 0; i < 3; ++i) {
    double gi = g1[i] + 0.01 * p0[i];
    buf[i] = gi;
    p[i] = p0[i] - 0.1 * buf[i];
    gi = g2[i] + 0.01 * p[i];
    buf[i] = 0.9 * buf[i] + gi;
    p[i] -= 0.1 * buf[i];
  }
  ExpectNear(Get(u.param), p, "param", 1e-6);
  ExpectNear(Get(u.state[0]), buf, "momentum buffer", 1e-6);
}

TEST_F(CudaBackendTest, AdamTwoSteps) {
  const std::vector<float> p0 = {1.0f, -2.0f, 0.5f}, g1 = {0.1f, 0.2f, -0.3f},
                           g2 = {-0.2f, 0.4f, 0.1f};
  UpdateArgs u;
  u.op = "AdamUpdate";
  u.param = Put({3}, p0);
  u.grad = Put({3}, g1);
  u.state = {Alloc({3}), Alloc({3})};
  u.params.learning_rate = 0.01;
  u.params.weight_decay = 0.1;
  u.step = 1;
  ASSERT_TRUE(backend_->Update(u).ok());
  ASSERT_TRUE(backend_->Upload(u.grad.data, g2.data(), 12).ok());
  u.step = 2;
  ASSERT_TRUE(backend_->Update(u).ok());
  const double b1 = 0.9, b2 = 0.999, eps = 1e-8, lr = 0.01;
  Values p(p0.begin(), p0.end()), m(3, 0.0), v(3, 0.0);
  for (int step = 1; step <= 2; ++step) {
    for (int i = 0; i < 3; ++i) {
      const double g = (step == 1 ? g1[i] : g2[i]) + 0.1 * p[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      const double bc1 = 1 - std::pow(b1, step), bc2 = 1 - std::pow(b2, step);
      p[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + eps);
    }
  }
  ExpectNear(Get(u.param), p, "param", 1e-6);
  ExpectNear(Get(u.state[0]), m, "m", 1e-6);
  ExpectNear(Get(u.state[1]), v, "v", 1e-8);
}

TEST_F(CudaBackendTest, AccumulateInPlaceAndFill) {
  TensorView a = Put({3}, {1, 2, 3});
  TensorView b = Put({3}, {10, 20, 30});
  ASSERT_TRUE(backend_->Accumulate(a, a, b).ok());
  ExpectNear(Get(a), {11, 22, 33}, "a += b");
  ASSERT_TRUE(backend_->Fill(b, 0.5f).ok());
  ExpectNear(Get(b), {0.5, 0.5, 0.5}, "fill");
}

// ---- Memory and streams -----------------------------------------------------------------

TEST_F(CudaBackendTest, CopyStreamsRoundTrip) {
  const int64_t n = 1 << 20;
  std::vector<float> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>(i) * 0.5f;
  absl::StatusOr<std::unique_ptr<Buffer>> host = backend_->AllocateHost(n * sizeof(float));
  ASSERT_TRUE(host.ok()) << host.status();
  TensorView device = Put({n}, values);
  TensorView back = Alloc({n});

  // Device -> pinned host after the compute that wrote `device` (a Fill then an
  // Accumulate, so the copy must wait for them), then host -> another device tensor.
  TensorView twice = Alloc({n});
  ASSERT_TRUE(backend_->Fill(twice, 0.0f).ok());
  ASSERT_TRUE(backend_->Accumulate(twice, device, device).ok());
  absl::StatusOr<std::unique_ptr<Event>> out =
      backend_->CopyAsync(CopyDirection::kToHost, (*host)->data(), twice.data, twice.bytes());
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE((*out)->Wait().ok());
  const float* h = static_cast<const float*>((*host)->data());
  for (int64_t i = 0; i < n; i += 4099) ASSERT_EQ(h[i], 2 * values[i]) << i;

  absl::StatusOr<std::unique_ptr<Event>> in =
      backend_->CopyAsync(CopyDirection::kToDevice, back.data, (*host)->data(), back.bytes());
  ASSERT_TRUE(in.ok()) << in.status();
  ASSERT_TRUE(backend_->ComputeWaits(**in).ok());
  // Compute after ComputeWaits sees the copied bytes.
  TensorView sum = Alloc({n});
  ASSERT_TRUE(backend_->Accumulate(sum, back, back).ok());
  ASSERT_TRUE(backend_->Synchronize().ok());
  const std::vector<float> got = Get(sum);
  for (int64_t i = 0; i < n; i += 4099) ASSERT_EQ(got[i], 4 * values[i]) << i;
}

TEST_F(CudaBackendTest, OutOfMemoryIsResourceExhausted) {
  absl::StatusOr<std::unique_ptr<Buffer>> huge = backend_->AllocateDevice(uint64_t{1} << 50);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  EXPECT_NE(huge.status().message().find(std::to_string(uint64_t{1} << 50)), std::string::npos)
      << huge.status();
  // The backend still works.
  TensorView v = Put({2}, {1, 2});
  ASSERT_TRUE(backend_->Accumulate(v, v, v).ok());
  ExpectNear(Get(v), {2, 4}, "after OOM");
}

TEST_F(CudaBackendTest, WorkspaceIsReportedAndReservable) {
  auto* cuda = dynamic_cast<CudaBackend*>(backend_.get());
  ASSERT_NE(cuda, nullptr);
  EXPECT_EQ(backend_->name(), "cuda");
  ASSERT_TRUE(cuda->ReserveWorkspace(3 << 20).ok());
  EXPECT_GE(cuda->workspace_bytes(), uint64_t{3} << 20);
}

// ---- Against the CPU backend (issue 19's defects) -------------------------------------

// A backend with a bump-allocated arena of its own, fed and read through host vectors: the
// CPU backend beside the fixture's CUDA one.
class Bench {
 public:
  Bench(Backend* backend, uint64_t bytes) : backend_(backend) {
    absl::StatusOr<std::unique_ptr<Buffer>> arena = backend_->AllocateDevice(bytes);
    EXPECT_TRUE(arena.ok()) << arena.status();
    if (arena.ok()) arena_ = *std::move(arena);
  }
  TensorView Alloc(const Shape& shape, proto::DType dtype = proto::DTYPE_FLOAT32) {
    TensorView v{nullptr, shape, dtype};
    EXPECT_LE(used_ + v.bytes(), arena_->bytes());
    v.data = static_cast<char*>(arena_->data()) + used_;
    used_ += (v.bytes() + 255) / 256 * 256;
    return v;
  }
  template <typename T>
  TensorView Put(const Shape& shape, const std::vector<T>& values,
                 proto::DType dtype = proto::DTYPE_FLOAT32) {
    TensorView v = Alloc(shape, dtype);
    EXPECT_EQ(v.bytes(), values.size() * sizeof(T));
    EXPECT_TRUE(backend_->Upload(v.data, values.data(), v.bytes()).ok());
    return v;
  }
  template <typename T = float>
  std::vector<T> Get(const TensorView& v) {
    std::vector<T> out(v.bytes() / sizeof(T));
    absl::Status s = backend_->Download(out.data(), v.data, v.bytes());
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }
  Backend* backend() const { return backend_; }

 private:
  Backend* backend_;
  std::unique_ptr<Buffer> arena_;
  uint64_t used_ = 0;
};

// Expects got == want bit for bit (the first few differences printed).
void ExpectBitwise(const std::vector<float>& got, const std::vector<float>& want,
                   const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && ++bad <= 5) {
      ADD_FAILURE() << what << " [" << i << "]: got " << got[i] << ", want " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements differ";
}

// Defect 1: the activations' backward from y, at x = 0, 6, beyond 6 and below 0, against
// the CPU backend (oneDNN's *_use_dst_for_bwd, PyTorch's semantics) and written out.
TEST_F(CudaBackendTest, ActivationBackwardMatchesCpuAtKinksAndSaturation) {
  std::unique_ptr<Backend> cpu_backend = cpu::CreateCpuBackend();
  const std::vector<float> x = {-3, -0.0f, 0, 1e-7f, 2.5f, 5.999f, 6, 6.001f, 7, 100};
  const std::vector<float> dy = {1, -2, 3, 4, -5, 6, 7, -8, 9, 10};
  const int64_t n = static_cast<int64_t>(x.size());
  // ReLU passes dy where x > 0; ReLU6 where 0 < x < 6 (PyTorch's hardtanh_backward); both
  // as dy times 1 or 0, as oneDNN computes them (-0 for a negative dy that stops).
  const std::vector<float> relu_passes = {0, 0, 0, 1, 1, 1, 1, 1, 1, 1};
  const std::vector<float> relu6_passes = {0, 0, 0, 1, 1, 1, 0, 0, 0, 0};
  std::map<std::string, std::vector<float>> exact = {{"ReLU", dy}, {"ReLU6", dy}};
  for (int64_t i = 0; i < n; ++i) {
    exact["ReLU"][i] *= relu_passes[i];
    exact["ReLU6"][i] *= relu6_passes[i];
  }
  for (const char* op : {"ReLU", "ReLU6", "Sigmoid", "Tanh"}) {
    SCOPED_TRACE(op);
    graph::Attrs attrs = AttrsOf(op);
    std::vector<std::vector<float>> dx;
    for (Backend* b : {backend_.get(), cpu_backend.get()}) {
      Bench bench(b, 1 << 20);
      ForwardArgs fwd;
      fwd.op = op;
      fwd.attrs = &attrs;
      fwd.inputs = {bench.Put({n}, x)};
      fwd.outputs = {bench.Alloc({n})};
      ASSERT_TRUE(b->Forward(fwd).ok());
      BackwardArgs bwd;
      bwd.op = op;
      bwd.attrs = &attrs;
      bwd.inputs = {TensorView{nullptr, {n}}};  // The plan keeps only y.
      bwd.outputs = fwd.outputs;
      bwd.output_grads = {bench.Put({n}, dy)};
      bwd.input_grads = {bench.Alloc({n})};
      absl::Status status = b->Backward(bwd);
      ASSERT_TRUE(status.ok()) << status;
      dx.push_back(bench.Get(bwd.input_grads[0]));
    }
    if (exact.count(op)) {
      ExpectBitwise(dx[0], exact.at(op), "CUDA dx");
      ExpectBitwise(dx[1], exact.at(op), "CPU dx");
    } else {
      // cuDNN's and oneDNN's forwards may differ in the last bits of y (and 1 - y^2 near
      // saturation magnifies that by dy).
      ExpectNear(dx[0], ToDouble(dx[1]), "CUDA dx against the CPU's", 1e-5, 1e-5);
    }
  }
}

// Defect 6: CUDA's dropout mask and output are the shared function's, so the CPU's.
TEST_F(CudaBackendTest, DropoutMaskIsTheCpuBackendsMask) {
  const int64_t n = 200003;
  for (const auto& [seed, rate] :
       std::vector<std::pair<uint64_t, double>>{{1234, 0.25}, {uint64_t{1} << 40, 0.1}}) {
    SCOPED_TRACE(seed);
    graph::Attrs attrs = AttrsOf("Dropout", {{"rate", Float(rate)}});
    std::vector<float> x(n);
    for (int64_t i = 0; i < n; ++i) x[i] = 0.001f * static_cast<float>(i % 997) - 0.4f;
    ForwardArgs fwd;
    fwd.op = "Dropout";
    fwd.attrs = &attrs;
    fwd.seed = seed;
    fwd.inputs = {Put({n}, x)};
    fwd.outputs = {Alloc({n})};
    fwd.saved = {Alloc({n}, proto::DTYPE_BOOL)};
    ASSERT_TRUE(backend_->Forward(fwd).ok());
    const std::vector<float> y = Get(fwd.outputs[0]);
    const std::vector<uint8_t> mask = GetBytes(fwd.saved[0]);
    const uint64_t stream = DropoutStream(seed);
    const uint64_t threshold = DropoutKeepThreshold(rate);
    const float scale = DropoutScale(rate);
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      const bool keep = DropoutKeeps(stream, i, threshold);
      const float want = keep ? x[i] * scale : 0.0f;
      if ((mask[i] != (keep ? 1 : 0) || std::memcmp(&y[i], &want, sizeof(float)) != 0) &&
          ++bad <= 5) {
        ADD_FAILURE() << "element " << i << ": mask " << int{mask[i]} << " y " << y[i] << ", want "
                      << keep << " " << want;
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

// Defect 7: Adam and SGD steps give bitwise the CPU backend's parameters and state.
TEST_F(CudaBackendTest, OptimizerStepsMatchTheCpuBackendBitwise) {
  std::unique_ptr<Backend> cpu_backend = cpu::CreateCpuBackend();
  const int64_t n = 40000;  // Past the CPU's parallel threshold.
  std::mt19937 rng(33);
  const std::vector<float> p0 = Random(n, rng, -2, 2);
  std::vector<std::vector<float>> grads;
  for (int step = 0; step < 4; ++step) grads.push_back(Random(n, rng, -1e-2f, 1e-2f));
  struct Case {
    std::string op;
    int num_state;
    OptimizerParams params;
  };
  OptimizerParams adam;
  adam.learning_rate = 1e-3;
  adam.beta1 = 0.9;
  adam.beta2 = 0.999;
  adam.epsilon = 1e-8;
  adam.weight_decay = 0.01;
  OptimizerParams sgd;
  sgd.learning_rate = 0.05;
  sgd.momentum = 0.9;
  sgd.weight_decay = 1e-4;
  for (const Case& c : {Case{"AdamUpdate", 2, adam}, Case{"SgdMomentumUpdate", 1, sgd}}) {
    SCOPED_TRACE(c.op);
    std::vector<std::vector<std::vector<float>>> results;  // [backend][param, state...]
    for (Backend* b : {backend_.get(), cpu_backend.get()}) {
      Bench bench(b, 8 << 20);
      UpdateArgs u;
      u.op = c.op;
      u.params = c.params;
      u.param = bench.Put({n}, p0);
      u.grad = bench.Alloc({n});
      for (int k = 0; k < c.num_state; ++k) u.state.push_back(bench.Alloc({n}));
      for (int step = 1; step <= 4; ++step) {
        ASSERT_TRUE(b->Upload(u.grad.data, grads[step - 1].data(), u.grad.bytes()).ok());
        u.step = step;
        absl::Status status = b->Update(u);
        ASSERT_TRUE(status.ok()) << status;
      }
      std::vector<std::vector<float>> r = {bench.Get(u.param)};
      for (const TensorView& t : u.state) r.push_back(bench.Get(t));
      results.push_back(std::move(r));
    }
    ExpectBitwise(results[0][0], results[1][0], "param");
    for (int k = 0; k < c.num_state; ++k) {
      ExpectBitwise(results[0][1 + k], results[1][1 + k], absl::StrCat("state ", k));
    }
  }
}

// Defect 8: AvgPool's backward reads neither x nor y (the plan keeps neither), also where
// cuDNN could pool; dx (poisoned) is the CPU backend's.
TEST_F(CudaBackendTest, AvgPoolBackwardNeedsNoXOrY) {
  std::unique_ptr<Backend> cpu_backend = cpu::CreateCpuBackend();
  const Shape xs = {2, 3, 7, 6}, ys = {2, 3, 4, 3};
  std::mt19937 rng(34);
  const std::vector<float> dy = Random(Count(ys), rng);
  for (bool include : {true, false}) {
    SCOPED_TRACE(include ? "count_include_pad" : "exclude pad");
    graph::Attrs attrs = AttrsOf("AvgPool", {{"kernel_size", Ints({3, 3})},
                                             {"stride", Ints({2, 2})},
                                             {"padding", Ints({1, 1})},
                                             {"count_include_pad", Bool(include)}});
    std::vector<std::vector<float>> dx;
    for (Backend* b : {backend_.get(), cpu_backend.get()}) {
      Bench bench(b, 1 << 20);
      BackwardArgs bwd;
      bwd.op = "AvgPool";
      bwd.attrs = &attrs;
      bwd.inputs = {TensorView{nullptr, xs}};
      bwd.outputs = {TensorView{nullptr, ys}};
      bwd.output_grads = {bench.Put(ys, dy)};
      bwd.input_grads = {bench.Put(xs, std::vector<float>(Count(xs), NAN))};
      absl::Status status = b->Backward(bwd);
      ASSERT_TRUE(status.ok()) << status;
      dx.push_back(bench.Get(bwd.input_grads[0]));
    }
    ExpectNear(dx[0], ToDouble(dx[1]), "dx against the CPU's", 1e-7, 1e-6);
  }
}

// Defect 2: backward kernels that sum (convolution, embedding, batch norm, pooling) give
// bitwise the same results run after run; Embedding's are the CPU backend's sums exactly.
TEST_F(CudaBackendTest, BackwardIsBitwiseRepeatable) {
  std::mt19937 rng(35);
  // Conv2D with bias: dx, dw, db.
  const Shape xs = {8, 16, 20, 20}, ws = {32, 16, 3, 3}, ys = {8, 32, 20, 20};
  graph::Attrs conv = AttrsOf("Conv2D", {{"stride", Ints({1, 1})}, {"padding", Ints({1, 1})}});
  const TensorView x = Put(xs, Random(Count(xs), rng));
  const TensorView w = Put(ws, Random(Count(ws), rng, -0.1f, 0.1f));
  const TensorView b = Put({32}, Random(32, rng));
  const TensorView dy = Put(ys, Random(Count(ys), rng));
  std::vector<std::vector<float>> first;
  for (int run = 0; run < 2; ++run) {
    BackwardArgs bwd;
    bwd.op = "Conv2D";
    bwd.attrs = &conv;
    bwd.inputs = {x, w, b};
    bwd.outputs = {TensorView{nullptr, ys}};
    bwd.output_grads = {dy};
    bwd.input_grads = {Alloc(xs), Alloc(ws), Alloc({32})};
    absl::Status status = backend_->Backward(bwd);
    ASSERT_TRUE(status.ok()) << status;
    for (int i = 0; i < 3; ++i) {
      std::vector<float> got = Get(bwd.input_grads[i]);
      if (run == 0) {
        first.push_back(std::move(got));
      } else {
        ExpectBitwise(got, first[i], absl::StrCat("Conv2D gradient ", i, ", second run"));
      }
    }
  }

  // BatchNorm (cuDNN's spatial backward): dx, dweight, dbias.
  graph::Attrs bn = AttrsOf("BatchNorm");
  ForwardArgs norm;
  norm.op = "BatchNorm";
  norm.attrs = &bn;
  norm.inputs = {x, Put({16}, Random(16, rng)), Put({16}, Random(16, rng))};
  norm.outputs = {Alloc(xs)};
  norm.saved = {Alloc({16}), Alloc({16})};
  ASSERT_TRUE(backend_->Forward(norm).ok());
  const TensorView norm_dy = Put(xs, Random(Count(xs), rng));
  std::vector<std::vector<float>> norm_first;
  for (int run = 0; run < 2; ++run) {
    BackwardArgs bwd;
    bwd.op = "BatchNorm";
    bwd.attrs = &bn;
    bwd.inputs = norm.inputs;
    bwd.outputs = {TensorView{nullptr, xs}};
    bwd.saved = norm.saved;
    bwd.output_grads = {norm_dy};
    bwd.input_grads = {Alloc(xs), Alloc({16}), Alloc({16})};
    absl::Status status = backend_->Backward(bwd);
    ASSERT_TRUE(status.ok()) << status;
    for (int i = 0; i < 3; ++i) {
      std::vector<float> got = Get(bwd.input_grads[i]);
      if (run == 0) {
        norm_first.push_back(std::move(got));
      } else {
        ExpectBitwise(got, norm_first[i], absl::StrCat("BatchNorm gradient ", i, ", second run"));
      }
    }
  }

  // Embedding: many repeats of few ids, so that an atomic scatter would reorder sums.
  std::unique_ptr<Backend> cpu_backend = cpu::CreateCpuBackend();
  const int64_t vocab = 7, d = 33, count = 5000;
  std::vector<int64_t> ids(count);
  for (int64_t i = 0; i < count; ++i) ids[i] = static_cast<int64_t>(rng() % vocab);
  const std::vector<float> edy = Random(count * d, rng);
  graph::Attrs emb = AttrsOf("Embedding");
  std::vector<std::vector<float>> dtables;
  for (Backend* backend : {backend_.get(), backend_.get(), cpu_backend.get()}) {
    Bench bench(backend, 4 << 20);
    BackwardArgs bwd;
    bwd.op = "Embedding";
    bwd.attrs = &emb;
    bwd.inputs = {bench.Put({count}, ids, proto::DTYPE_INT64), TensorView{nullptr, {vocab, d}}};
    bwd.outputs = {TensorView{nullptr, {count, d}}};
    bwd.output_grads = {bench.Put({count, d}, edy)};
    bwd.input_grads = {TensorView{nullptr, {count}, proto::DTYPE_INT64}, bench.Alloc({vocab, d})};
    // The sort's scratch as the plan would give it.
    absl::StatusOr<uint64_t> scratch = backend->ScratchBytes(bwd);
    ASSERT_TRUE(scratch.ok()) << scratch.status();
    if (backend == backend_.get()) {
      EXPECT_GE(*scratch, uint64_t{count} * 12) << "the sort's scratch is not declared";
    }
    if (*scratch > 0) {
      bwd.scratch = bench.Alloc({static_cast<int64_t>(*scratch)}, proto::DTYPE_BOOL).data;
      bwd.scratch_bytes = *scratch;
    }
    absl::Status status = backend->Backward(bwd);
    ASSERT_TRUE(status.ok()) << status;
    dtables.push_back(bench.Get(bwd.input_grads[1]));
  }
  ExpectBitwise(dtables[1], dtables[0], "Embedding dtable, second run");
  ExpectBitwise(dtables[0], dtables[2], "Embedding dtable against the CPU backend's");
}

// Defect 2: the option reaches the algorithm choice; either way the convolution is right.
TEST_F(CudaBackendTest, NondeterministicBackendStillConvolvesCorrectly) {
  CudaBackendOptions options;
  options.deterministic = false;
  absl::StatusOr<std::unique_ptr<Backend>> fast = CreateCudaBackend(0, options);
  ASSERT_TRUE(fast.ok()) << fast.status();
  std::mt19937 rng(36);
  const Shape xs = {4, 8, 12, 12}, ws = {16, 8, 3, 3}, ys = {4, 16, 12, 12};
  graph::Attrs conv = AttrsOf("Conv2D", {{"stride", Ints({1, 1})}, {"padding", Ints({1, 1})}});
  const std::vector<float> xv = Random(Count(xs), rng), wv = Random(Count(ws), rng),
                           dyv = Random(Count(ys), rng);
  std::vector<std::vector<float>> dw;
  for (Backend* backend : {backend_.get(), fast->get()}) {
    Bench bench(backend, 8 << 20);
    BackwardArgs bwd;
    bwd.op = "Conv2D";
    bwd.attrs = &conv;
    bwd.inputs = {bench.Put(xs, xv), bench.Put(ws, wv)};
    bwd.outputs = {TensorView{nullptr, ys}};
    bwd.output_grads = {bench.Put(ys, dyv)};
    bwd.input_grads = {bench.Alloc(xs), bench.Alloc(ws)};
    absl::Status status = backend->Backward(bwd);
    ASSERT_TRUE(status.ok()) << status;
    dw.push_back(bench.Get(bwd.input_grads[1]));
  }
  ExpectNear(dw[1], ToDouble(dw[0]), "dw, nondeterministic against deterministic", 1e-4, 1e-4);
}

// Defect 4: MatMul declares cuBLAS's workspace (NVIDIA's size for the device) and cuBLAS
// runs in it: nothing outside the plan, and without planned scratch the fallback counts.
TEST_F(CudaBackendTest, MatMulHandsCublasItsPlannedWorkspace) {
  absl::StatusOr<std::vector<CudaDevice>> devices = ListCudaDevices();
  ASSERT_TRUE(devices.ok());
  const uint64_t want = (*devices)[0].sm_major >= 9 ? uint64_t{32} << 20 : uint64_t{4} << 20;
  const int64_t m = 512, k = 1024, nn = 768;
  std::mt19937 rng(37);
  graph::Attrs attrs = AttrsOf("MatMul");
  ForwardArgs fwd;
  fwd.op = "MatMul";
  fwd.attrs = &attrs;
  fwd.inputs = {Put({m, k}, Random(m * k, rng)), Put({k, nn}, Random(k * nn, rng))};
  fwd.outputs = {Alloc({m, nn})};
  absl::StatusOr<uint64_t> fwd_bytes = backend_->ScratchBytes(fwd);
  ASSERT_TRUE(fwd_bytes.ok()) << fwd_bytes.status();
  EXPECT_GE(*fwd_bytes, want);
  BackwardArgs bwd;
  bwd.op = "MatMul";
  bwd.attrs = &attrs;
  bwd.inputs = fwd.inputs;
  bwd.outputs = fwd.outputs;
  bwd.output_grads = {Put({m, nn}, Random(m * nn, rng))};
  bwd.input_grads = {Alloc({m, k}), Alloc({k, nn})};
  absl::StatusOr<uint64_t> bwd_bytes = backend_->ScratchBytes(bwd);
  ASSERT_TRUE(bwd_bytes.ok()) << bwd_bytes.status();
  EXPECT_GE(*bwd_bytes, want);

  // With the planned scratch: no workspace outside the plan, and no device memory taken.
  absl::StatusOr<std::unique_ptr<Buffer>> scratch = backend_->AllocateDevice(*bwd_bytes);
  ASSERT_TRUE(scratch.ok()) << scratch.status();
  fwd.scratch = bwd.scratch = (*scratch)->data();
  fwd.scratch_bytes = *fwd_bytes;
  bwd.scratch_bytes = *bwd_bytes;
  // A first run loads cuBLAS's kernels (lazy module loading takes device memory).
  ASSERT_TRUE(backend_->Forward(fwd).ok());
  ASSERT_TRUE(backend_->Backward(bwd).ok());
  ASSERT_TRUE(backend_->Synchronize().ok());
  const uint64_t free_before = (*ListCudaDevices())[0].free_bytes;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(backend_->Forward(fwd).ok());
    ASSERT_TRUE(backend_->Backward(bwd).ok());
  }
  ASSERT_TRUE(backend_->Synchronize().ok());
  const uint64_t free_after = (*ListCudaDevices())[0].free_bytes;
  EXPECT_EQ(backend_->workspace_bytes(), 0u);
  // Another process may allocate meanwhile; cuBLAS's own pool would take >= 4 MiB.
  EXPECT_LT(free_before - std::min(free_before, free_after), uint64_t{2} << 20)
      << "device memory went from " << free_before << " to " << free_after << " free";
  Values want_y = RefMatMul(ToDouble(Get(fwd.inputs[0])), ToDouble(Get(fwd.inputs[1])), nullptr, 1,
                            true, m, k, nn, false, false);
  ExpectNear(Get(fwd.outputs[0]), want_y, "y", 1e-3, 1e-3);

  // Without planned scratch: the fallback workspace, which workspace_bytes() counts.
  fwd.scratch = nullptr;
  fwd.scratch_bytes = 0;
  ASSERT_TRUE(backend_->Forward(fwd).ok());
  EXPECT_GE(backend_->workspace_bytes(), want);
}

// Defect 11: ids and labels out of range fail the next synchronising call, worded as the
// CPU backend's errors; the backend works on after.
TEST_F(CudaBackendTest, OutOfRangeIdsAndLabelsAreInvalidArgument) {
  graph::Attrs emb = AttrsOf("Embedding");
  ForwardArgs fwd;
  fwd.op = "Embedding";
  fwd.attrs = &emb;
  fwd.inputs = {PutIds<int32_t>({2, 3}, {4, 0, 7, 2, 9, 1}), Put({5, 4}, std::vector<float>(20))};
  fwd.outputs = {Alloc({2, 3, 4})};
  ASSERT_TRUE(backend_->Forward(fwd).ok());  // Issued; the check reports at the sync.
  absl::Status status = backend_->Synchronize();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("op 'Embedding': input 'ids' [2,3] holds 7 at flat index 2, "
                                  "outside [0, 5) for input 'table' [5,4]"),
            std::string::npos)
      << status;
  EXPECT_TRUE(backend_->Synchronize().ok());  // Reported once.

  graph::Attrs ce = AttrsOf("SoftmaxCrossEntropy");
  ForwardArgs loss;
  loss.op = "SoftmaxCrossEntropy";
  loss.attrs = &ce;
  loss.inputs = {Put({3, 4}, std::vector<float>(12, 0.5f)), PutIds<int64_t>({3}, {1, 3, -1})};
  loss.outputs = {Alloc({})};
  loss.scratch = Alloc({64}).data;
  loss.scratch_bytes = 256;
  ASSERT_TRUE(backend_->Forward(loss).ok());
  std::vector<float> out(1);
  status = backend_->Download(out.data(), loss.outputs[0].data, 4);  // Synchronises first.
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("op 'SoftmaxCrossEntropy': input 'labels' [3] holds -1 at "
                                  "flat index 2, outside [0, 4)"),
            std::string::npos)
      << status;

  // In range: no error.
  fwd.inputs[0] = PutIds<int64_t>({2, 3}, {4, 0, 3, 2, 1, 1});
  ASSERT_TRUE(backend_->Forward(fwd).ok());
  EXPECT_TRUE(backend_->Synchronize().ok());
}

// Defect 11: a copy's event says when it ran, on the host's clock.
TEST_F(CudaBackendTest, CopyEventsReportWhenTheyRan) {
  const int64_t n = 8 << 20;  // 32 MiB: long enough to measure.
  TensorView device = Alloc({n});
  absl::StatusOr<std::unique_ptr<Buffer>> host = backend_->AllocateHost(n * sizeof(float));
  ASSERT_TRUE(host.ok()) << host.status();
  ASSERT_TRUE(backend_->Synchronize().ok());
  const auto issued = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<Event>> copy =
      backend_->CopyAsync(CopyDirection::kToHost, (*host)->data(), device.data, device.bytes());
  ASSERT_TRUE(copy.ok()) << copy.status();
  ASSERT_TRUE((*copy)->Wait().ok());
  const auto waited = std::chrono::steady_clock::now();
  std::optional<Event::Interval> ran = (*copy)->interval();
  ASSERT_TRUE(ran.has_value());
  const auto slack = std::chrono::milliseconds(2);  // The clocks' anchoring.
  EXPECT_LE(ran->begin, ran->end);
  EXPECT_GE(ran->begin, issued - slack);
  EXPECT_LE(ran->end, waited + slack);
  EXPECT_GT(ran->end - ran->begin, std::chrono::microseconds(0));
}

// Defect 11: the compute stream's wait for a copy is measured, where the host never blocks
// (copy_wait_seconds was the host's time around ComputeWaits(), about 0 on a GPU). A 48 MiB
// copy to the device with no compute before it: the stream waits about the copy's length.
TEST_F(CudaBackendTest, TheStreamsWaitForACopyIsMeasured) {
  const int64_t n = 12 << 20;  // 48 MiB (the fixture's arena is 64): milliseconds over PCIe
  TensorView device = Alloc({n});
  absl::StatusOr<std::unique_ptr<Buffer>> host = backend_->AllocateHost(n * sizeof(float));
  ASSERT_TRUE(host.ok()) << host.status();
  ASSERT_TRUE(backend_->Synchronize().ok());
  EXPECT_EQ(backend_->TakeStreamWaitSeconds(), 0.0);  // nothing waited yet
  absl::StatusOr<std::unique_ptr<Event>> copy =
      backend_->CopyAsync(CopyDirection::kToDevice, device.data, (*host)->data(), device.bytes());
  ASSERT_TRUE(copy.ok()) << copy.status();
  ASSERT_TRUE(backend_->ComputeWaits(**copy).ok());
  ASSERT_TRUE(backend_->Fill(device, 1.0f).ok());
  ASSERT_TRUE(backend_->Synchronize().ok());
  std::optional<Event::Interval> ran = (*copy)->interval();
  ASSERT_TRUE(ran.has_value());
  const double copy_seconds = std::chrono::duration<double>(ran->end - ran->begin).count();
  const double waited = backend_->TakeStreamWaitSeconds();
  // The stream arrived before the copy began (nothing else queued) and went on at its end.
  EXPECT_GT(waited, 0.5 * copy_seconds) << "copy " << copy_seconds << " s";
  EXPECT_LT(waited, copy_seconds + 2e-3) << "copy " << copy_seconds << " s";
  EXPECT_EQ(backend_->TakeStreamWaitSeconds(), 0.0);  // taken once
}

// Defect 11: destroying a device buffer leaves the thread's current device alone.
TEST_F(CudaBackendTest, DestroyingABufferKeepsTheCurrentDevice) {
  absl::StatusOr<std::vector<CudaDevice>> devices = ListCudaDevices();
  if (!devices.ok() || devices->size() < 2) GTEST_SKIP() << "needs two CUDA devices";
  absl::StatusOr<std::unique_ptr<Backend>> second = CreateCudaBackend(1);
  ASSERT_TRUE(second.ok()) << second.status();
  absl::StatusOr<std::unique_ptr<Buffer>> buffer = (*second)->AllocateDevice(1 << 20);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  buffer->reset();
  int current = -1;
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, 0);
}

// Defect 11: cuDNN's 2^31 - 1 element limit is a clear error naming the tensor, decided
// before any memory is touched (the views below point at a few bytes).
TEST_F(CudaBackendTest, CudnnElementLimitIsAClearError) {
  const Shape huge = {1, 1, 46341, 46341};  // 2^31 + 88,440 elements
  TensorView x = Alloc({4});
  x.shape = huge;
  TensorView y = x;
  graph::Attrs bn = AttrsOf("BatchNorm");
  ForwardArgs fwd;
  fwd.op = "BatchNorm";
  fwd.attrs = &bn;
  fwd.training = false;
  fwd.inputs = {x, Put({1}, {1}), Put({1}, {0}), Put({1}, {0}), Put({1}, {1})};
  fwd.outputs = {y};
  absl::Status status = backend_->Forward(fwd);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << status;
  EXPECT_NE(status.message().find("BatchNorm"), std::string::npos) << status;
  EXPECT_NE(status.message().find("input 'x' [1,1,46341,46341] has 2147488281 elements"),
            std::string::npos)
      << status;
  EXPECT_NE(status.message().find("2^31 - 1"), std::string::npos) << status;

  graph::Attrs conv = AttrsOf("Conv2D", {{"stride", Ints({1, 1})}, {"padding", Ints({0, 0})}});
  ForwardArgs c;
  c.op = "Conv2D";
  c.attrs = &conv;
  c.inputs = {x, Put({1, 1, 1, 1}, {1})};
  c.outputs = {y};
  absl::StatusOr<uint64_t> scratch = backend_->ScratchBytes(c);
  ASSERT_FALSE(scratch.ok());
  EXPECT_EQ(scratch.status().code(), absl::StatusCode::kUnimplemented) << scratch.status();
  EXPECT_NE(scratch.status().message().find("Conv2D"), std::string::npos) << scratch.status();
}

// Defect 11: an elementwise op past 2^31 elements (64-bit indexing, cuDNN's activation in
// chunks, the own backward kernel), where the device has the 17 GiB it needs.
TEST_F(CudaBackendTest, ReluPast2To31Elements) {
  const int64_t n = (int64_t{1} << 31) + 5;
  const uint64_t bytes = n * sizeof(float);
  absl::StatusOr<std::vector<CudaDevice>> devices = ListCudaDevices();
  ASSERT_TRUE(devices.ok());
  if ((*devices)[0].free_bytes < 2 * bytes + (uint64_t{1} << 30)) {
    GTEST_SKIP() << "needs " << 2 * bytes << " bytes free: " << (*devices)[0].DebugString();
  }
  absl::StatusOr<std::unique_ptr<Buffer>> big = backend_->AllocateDevice(2 * bytes);
  ASSERT_TRUE(big.ok()) << big.status();
  float* base = static_cast<float*>((*big)->data());
  const TensorView x{base, {n}, proto::DTYPE_FLOAT32};
  const TensorView y{base + n, {n}, proto::DTYPE_FLOAT32};
  ASSERT_TRUE(backend_->Fill(x, -1.0f).ok());
  // Positive values around 2^31 and at the very end.
  const std::vector<int64_t> at = {0, (int64_t{1} << 30) + 1, (int64_t{1} << 31) - 1,
                                   int64_t{1} << 31, n - 1};
  for (size_t k = 0; k < at.size(); ++k) {
    const float v = 1.0f + static_cast<float>(k);
    ASSERT_TRUE(backend_->Upload(base + at[k], &v, sizeof(float)).ok());
  }
  graph::Attrs attrs = AttrsOf("ReLU");
  ForwardArgs fwd;
  fwd.op = "ReLU";
  fwd.attrs = &attrs;
  fwd.inputs = {x};
  fwd.outputs = {y};
  ASSERT_TRUE(backend_->Forward(fwd).ok());
  // Backward in place over x's bytes: dy = 3 everywhere, dx = dy where y > 0.
  ASSERT_TRUE(backend_->Fill(x, 3.0f).ok());
  BackwardArgs bwd;
  bwd.op = "ReLU";
  bwd.attrs = &attrs;
  bwd.inputs = {TensorView{nullptr, {n}}};
  bwd.outputs = {y};
  bwd.output_grads = {x};
  bwd.input_grads = {x};
  ASSERT_TRUE(backend_->Backward(bwd).ok());
  auto read = [&](const float* p) {
    float v = NAN;
    EXPECT_TRUE(backend_->Download(&v, p, sizeof(float)).ok());
    return v;
  };
  for (size_t k = 0; k < at.size(); ++k) {
    SCOPED_TRACE(at[k]);
    EXPECT_EQ(read(base + n + at[k]), 1.0f + static_cast<float>(k));  // y
    EXPECT_EQ(read(base + at[k]), 3.0f);                              // dx
    if (at[k] + 1 < n && std::find(at.begin(), at.end(), at[k] + 1) == at.end()) {
      EXPECT_EQ(read(base + n + at[k] + 1), 0.0f);
      EXPECT_EQ(read(base + at[k] + 1), 0.0f);
    }
  }
}

TEST(CudaBackendFactoryTest, NoDeviceIsFailedPreconditionElseOutOfRangeOrdinal) {
  absl::StatusOr<std::vector<CudaDevice>> devices = ListCudaDevices();
  if (!devices.ok()) {
    absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCudaBackend(0);
    ASSERT_FALSE(backend.ok());
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(backend.status().message().find("no CUDA device"), std::string::npos);
    GTEST_SKIP() << "no CUDA device: " << devices.status();
  }
  EXPECT_EQ(CreateCudaBackend(static_cast<int>(devices->size())).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Resize's forward and backward are bitwise the CPU backend's (shared source pixels, weights
// and roundings; the backward sums each input pixel's shares in the CPU's order, no atomics).
TEST_F(CudaBackendTest, ResizeIsBitwiseTheCpuBackends) {
  std::unique_ptr<Backend> cpu_backend = cpu::CreateCpuBackend();
  struct Config {
    Shape x, y;
    std::map<std::string, proto::AttrValue> attrs;
  };
  const std::vector<Config> configs = {
      {{2, 3, 5, 7}, {2, 3, 11, 16}, {}},
      {{2, 3, 5, 7}, {2, 3, 8, 11}, {{"scale_h", Float(1.7)}, {"scale_w", Float(1.7)}}},
      {{2, 3, 9, 11}, {2, 3, 4, 5}, {}},
      {{2, 3, 5, 7}, {2, 3, 13, 17}, {{"mode", Str("bilinear")}}},
      {{2, 3, 5, 7}, {2, 3, 13, 17}, {{"mode", Str("bilinear")}, {"align_corners", Bool(true)}}},
      {{2, 3, 16, 15}, {2, 3, 5, 6}, {{"mode", Str("bilinear")}}},
      {{2, 4, 8, 8}, {2, 4, 64, 64}, {{"mode", Str("bilinear")}}},
  };
  std::mt19937 rng(31);
  for (const Config& c : configs) {
    std::map<std::string, proto::AttrValue> set = c.attrs;
    set["size"] = Ints({c.y[2], c.y[3]});
    graph::Attrs attrs = AttrsOf("Resize", set);
    const std::vector<float> x = Random(Count(c.x), rng), dy = Random(Count(c.y), rng);
    std::vector<std::vector<float>> y, dx;
    for (Backend* b : {backend_.get(), cpu_backend.get()}) {
      Bench bench(b, 1 << 20);
      ForwardArgs fwd;
      fwd.op = "Resize";
      fwd.attrs = &attrs;
      fwd.inputs = {bench.Put(c.x, x)};
      fwd.outputs = {bench.Alloc(c.y)};
      ASSERT_TRUE(b->Forward(fwd).ok());
      BackwardArgs bwd;
      bwd.op = "Resize";
      bwd.attrs = &attrs;
      bwd.inputs = {TensorView{nullptr, c.x}};  // The gradient rule reads no forward tensor.
      bwd.outputs = {TensorView{nullptr, c.y}};
      bwd.output_grads = {bench.Put(c.y, dy)};
      bwd.input_grads = {bench.Alloc(c.x)};
      absl::Status status = b->Backward(bwd);
      ASSERT_TRUE(status.ok()) << status;
      y.push_back(bench.Get(fwd.outputs[0]));
      dx.push_back(bench.Get(bwd.input_grads[0]));
    }
    ExpectBitwise(y[0], y[1], "CUDA y against the CPU's");
    ExpectBitwise(dx[0], dx[1], "CUDA dx against the CPU's");
  }
}

TEST_F(CudaBackendTest, ConvTranspose2DStridedGroupedWithOutputPaddingAndBias) {
  // x[2, 4, 3, 3], weight [4, 3, 3, 3] in 2 groups (C_out 6), stride 2, padding 1, output
  // padding 1: y [2, 6, 6, 6], its last row and column past the full output's crop.
  const Shape xs = {2, 4, 3, 3}, ws = {4, 3, 3, 3}, bs = {6}, ys = {2, 6, 6, 6};
  std::mt19937 rng(32);
  OpCase c;
  c.op = "ConvTranspose2D";
  c.attrs = AttrsOf(c.op, {{"stride", Ints({2, 2})},
                           {"padding", Ints({1, 1})},
                           {"output_padding", Ints({1, 1})},
                           {"groups", Int(2)}});
  c.input_shapes = {xs, ws, bs};
  c.inputs = {Random(Count(xs), rng), Random(Count(ws), rng), Random(Count(bs), rng)};
  c.output_shapes = {ys};
  c.reference = [&](const std::vector<Values>& in) {
    Values y(Count(ys), 0);
    for (int64_t i = 0; i < Count(ys); ++i) y[i] = in[2][(i / 36) % 6];
    for (int64_t n = 0; n < 2; ++n) {
      for (int64_t ci = 0; ci < 4; ++ci) {
        for (int64_t ih = 0; ih < 3; ++ih) {
          for (int64_t iw = 0; iw < 3; ++iw) {
            for (int64_t k = 0; k < 3; ++k) {
              const int64_t co = (ci / 2) * 3 + k;
              for (int64_t kh = 0; kh < 3; ++kh) {
                for (int64_t kw = 0; kw < 3; ++kw) {
                  const int64_t oh = ih * 2 - 1 + kh, ow = iw * 2 - 1 + kw;
                  if (oh < 0 || oh >= 6 || ow < 0 || ow >= 6) continue;
                  y[((n * 6 + co) * 6 + oh) * 6 + ow] += in[0][((n * 4 + ci) * 3 + ih) * 3 + iw] *
                                                         in[1][((ci * 3 + k) * 3 + kh) * 3 + kw];
                }
              }
            }
          }
        }
      }
    }
    return std::vector<Values>{y};
  };
  c.grad_inputs = {true, true, true};
  CheckOp(c);
}

}  // namespace
}  // namespace headroom::executor::cuda
