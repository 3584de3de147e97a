// The CPU backend's Resize and ConvTranspose2D against PyTorch 1.13's float32 values and
// autograd gradients (F.interpolate and nn.ConvTranspose2d), written at build time by
// tools/torch_upsample.py; prints each case's largest differences.
//
// Resize: y and dx bitwise PyTorch's (the same source pixels and weights, summed in its
// order), but for one measured exception named below. ConvTranspose2D: y, dx, dweight and
// dbias against a float64 reference computed here, each element within 8 roundings of the
// sum of its terms' magnitudes, and the same bound against PyTorch's (oneDNN and PyTorch sum
// in different orders).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "executor/backend.h"
#include "executor/cpu/cpu_backend.h"
#include "graph/graph_builder.h"
#include "graph/op_registry.h"
#include "gtest/gtest.h"

namespace headroom::executor::cpu {
namespace {

using Shape = std::vector<int64_t>;
constexpr double kEpsilon = 1.1920929e-7;

int64_t Count(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

TensorView View(std::vector<float>& v, const Shape& s) {
  return TensorView{v.data(), s, proto::DTYPE_FLOAT32};
}

graph::Attrs MakeAttrs(const std::string& op, std::map<std::string, proto::AttrValue> set) {
  for (const graph::AttrSpec& spec : graph::FindOp(op)->attrs) {
    if (set.count(spec.name) == 0 && !spec.required) set[spec.name] = spec.default_value;
  }
  return graph::Attrs(std::move(set));
}

// Reads tools/torch_upsample.py's arrays of `shapes`, in order, for case `file`.
std::vector<std::vector<float>> Read(const std::string& file, const std::vector<Shape>& shapes) {
  const std::string path = "executor/cpu/torch_upsample/" + file + ".bin";
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::vector<std::vector<float>> arrays;
  for (const Shape& s : shapes) {
    std::vector<float> v(Count(s));
    in.read(reinterpret_cast<char*>(v.data()), v.size() * sizeof(float));
    EXPECT_EQ(in.gcount(), static_cast<std::streamsize>(v.size() * sizeof(float))) << path;
    arrays.push_back(std::move(v));
  }
  EXPECT_EQ(in.peek(), EOF) << path << " holds more than the test reads";
  return arrays;
}

// Returns how many elements of `got` differ from `want` in any bit, and (in *worst) the
// largest difference in units of float epsilon relative to |want|.
int64_t Mismatches(const std::vector<float>& got, const std::vector<float>& want, double* worst) {
  int64_t n = 0;
  *worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) ++n;
    const double diff = std::fabs(double{got[i]} - want[i]);
    *worst = std::max(*worst, diff / (kEpsilon * std::max(std::fabs(double{want[i]}), 1e-30)));
  }
  return n;
}

// ---- Resize -------------------------------------------------------------------------------

struct ResizeCase {
  std::string file;  // tools/torch_upsample.py's case name.
  Shape x, y;
  std::map<std::string, proto::AttrValue> attrs;  // On top of size [y[2], y[3]].
};

void PrintTo(const ResizeCase& c, std::ostream* os) { *os << c.file; }

class ResizeParityTest : public ::testing::TestWithParam<ResizeCase> {};

TEST_P(ResizeParityTest, ValuesAndGradientsAreBitwisePyTorchs) {
  const ResizeCase& c = GetParam();
  std::vector<std::vector<float>> ref = Read(c.file, {c.x, c.y, c.y, c.x});
  std::vector<float>&x = ref[0], &dy = ref[1], &want_y = ref[2], &want_dx = ref[3];
  std::map<std::string, proto::AttrValue> set = c.attrs;
  set["size"] = graph::IntsAttr({c.y[2], c.y[3]});
  const graph::Attrs attrs = MakeAttrs("Resize", set);
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  std::vector<float> y(Count(c.y)), dx(Count(c.x));
  ForwardArgs fwd;
  fwd.op = "Resize";
  fwd.attrs = &attrs;
  fwd.inputs = {View(x, c.x)};
  fwd.outputs = {View(y, c.y)};
  ASSERT_TRUE(cpu->Forward(fwd).ok());
  BackwardArgs bwd;
  bwd.op = "Resize";
  bwd.attrs = &attrs;
  bwd.inputs = {TensorView{nullptr, c.x, proto::DTYPE_FLOAT32}};  // Read by shape only.
  bwd.outputs = {TensorView{nullptr, c.y, proto::DTYPE_FLOAT32}};
  bwd.output_grads = {View(dy, c.y)};
  bwd.input_grads = {View(dx, c.x)};
  ASSERT_TRUE(cpu->Backward(bwd).ok());
  double y_ulp = 0, dx_ulp = 0;
  const int64_t y_bad = Mismatches(y, want_y, &y_ulp);
  const int64_t dx_bad = Mismatches(dx, want_dx, &dx_ulp);
  std::printf(
      "%-24s y: %lld of %lld differ (max %.2g ulp); dx: %lld of %lld differ (max %.2g ulp)\n",
      c.file.c_str(), static_cast<long long>(y_bad), static_cast<long long>(y.size()), y_ulp,
      static_cast<long long>(dx_bad), static_cast<long long>(dx.size()), dx_ulp);
  EXPECT_EQ(y_bad, 0);
  EXPECT_EQ(dx_bad, 0);
}

const auto S = &graph::StringAttr;
const auto B = &graph::BoolAttr;
const auto F = &graph::FloatAttr;

INSTANTIATE_TEST_SUITE_P(
    Torch, ResizeParityTest,
    ::testing::Values(
        ResizeCase{"nearest_up", {2, 3, 5, 7}, {2, 3, 11, 16}, {}},
        ResizeCase{
            "nearest_x2", {2, 3, 5, 7}, {2, 3, 10, 14}, {{"scale_h", F(2)}, {"scale_w", F(2)}}},
        ResizeCase{"nearest_scale",
                   {2, 3, 5, 7},
                   {2, 3, 8, 11},
                   {{"scale_h", F(1.7)}, {"scale_w", F(1.7)}}},
        ResizeCase{"nearest_down", {2, 3, 9, 11}, {2, 3, 4, 5}, {}},
        ResizeCase{"bilinear_up", {2, 3, 5, 7}, {2, 3, 13, 17}, {{"mode", S("bilinear")}}},
        ResizeCase{"bilinear_corners_up",
                   {2, 3, 5, 7},
                   {2, 3, 13, 17},
                   {{"mode", S("bilinear")}, {"align_corners", B(true)}}},
        ResizeCase{"bilinear_scale",
                   {2, 3, 5, 7},
                   {2, 3, 12, 17},
                   {{"mode", S("bilinear")}, {"scale_h", F(2.5)}, {"scale_w", F(2.5)}}},
        ResizeCase{"bilinear_down", {2, 3, 16, 15}, {2, 3, 5, 6}, {{"mode", S("bilinear")}}},
        ResizeCase{"bilinear_corners_down",
                   {2, 3, 16, 15},
                   {2, 3, 5, 6},
                   {{"mode", S("bilinear")}, {"align_corners", B(true)}}},
        ResizeCase{
            "bilinear_segmentation", {2, 4, 8, 8}, {2, 4, 64, 64}, {{"mode", S("bilinear")}}}),
    [](const ::testing::TestParamInfo<ResizeCase>& info) { return info.param.file; });

// ---- ConvTranspose2D ----------------------------------------------------------------------

struct ConvTransposeCase {
  std::string file;
  Shape x, w, y;
  bool bias;
  std::vector<int64_t> stride, padding, output_padding, dilation;
  int64_t groups;
};

void PrintTo(const ConvTransposeCase& c, std::ostream* os) { *os << c.file; }

// A float64 transposed convolution and its gradients, with the sums of their terms'
// magnitudes (the scale a float32 sum's rounding is bounded by).
struct Reference {
  std::vector<double> y, dx, dw, db, y_abs, dx_abs, dw_abs, db_abs;
};

Reference Naive(const ConvTransposeCase& c, const std::vector<float>& x,
                const std::vector<float>& w, const std::vector<float>& b,
                const std::vector<float>& dy) {
  Reference r;
  r.y.assign(Count(c.y), 0);
  r.y_abs.assign(Count(c.y), 0);
  r.dx.assign(Count(c.x), 0);
  r.dx_abs.assign(Count(c.x), 0);
  r.dw.assign(Count(c.w), 0);
  r.dw_abs.assign(Count(c.w), 0);
  r.db.assign(c.y[1], 0);
  r.db_abs.assign(c.y[1], 0);
  const int64_t cin_g = c.x[1] / c.groups, cout_g = c.w[1];
  for (int64_t n = 0; n < c.x[0]; ++n) {
    for (int64_t ci = 0; ci < c.x[1]; ++ci) {
      const int64_t group = ci / cin_g;
      for (int64_t ih = 0; ih < c.x[2]; ++ih) {
        for (int64_t iw = 0; iw < c.x[3]; ++iw) {
          const int64_t xi = ((n * c.x[1] + ci) * c.x[2] + ih) * c.x[3] + iw;
          for (int64_t k = 0; k < cout_g; ++k) {
            const int64_t co = group * cout_g + k;
            for (int64_t kh = 0; kh < c.w[2]; ++kh) {
              const int64_t oh = ih * c.stride[0] - c.padding[0] + kh * c.dilation[0];
              if (oh < 0 || oh >= c.y[2]) continue;
              for (int64_t kw = 0; kw < c.w[3]; ++kw) {
                const int64_t ow = iw * c.stride[1] - c.padding[1] + kw * c.dilation[1];
                if (ow < 0 || ow >= c.y[3]) continue;
                const int64_t yi = ((n * c.y[1] + co) * c.y[2] + oh) * c.y[3] + ow;
                const int64_t wi = ((ci * cout_g + k) * c.w[2] + kh) * c.w[3] + kw;
                r.y[yi] += double{x[xi]} * w[wi];
                r.y_abs[yi] += std::fabs(double{x[xi]} * w[wi]);
                r.dx[xi] += double{dy[yi]} * w[wi];
                r.dx_abs[xi] += std::fabs(double{dy[yi]} * w[wi]);
                r.dw[wi] += double{x[xi]} * dy[yi];
                r.dw_abs[wi] += std::fabs(double{x[xi]} * dy[yi]);
              }
            }
          }
        }
      }
    }
  }
  for (int64_t i = 0; i < Count(c.y); ++i) {
    const int64_t co = (i / (c.y[2] * c.y[3])) % c.y[1];
    if (c.bias) {
      r.y[i] += b[co];
      r.y_abs[i] += std::fabs(double{b[co]});
    }
    r.db[co] += dy[i];
    r.db_abs[co] += std::fabs(double{dy[i]});
  }
  return r;
}

// Checks that `got` is within 8 roundings of `scale` of both `exact` (float64) and PyTorch's
// `torch`; returns the largest difference from PyTorch's relative to the scale.
double Check(const std::vector<float>& got, const std::vector<double>& exact,
             const std::vector<double>& scale, const std::vector<float>& torch, const char* what) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = 8 * kEpsilon * std::max(scale[i], 1e-30);
    EXPECT_LE(std::fabs(got[i] - exact[i]), bound)
        << what << " at " << i << ": " << got[i] << ", exactly " << exact[i];
    EXPECT_LE(std::fabs(double{got[i]} - torch[i]), bound)
        << what << " at " << i << ": " << got[i] << ", PyTorch's " << torch[i];
    worst = std::max(worst, std::fabs(double{got[i]} - torch[i]) / std::max(scale[i], 1e-30));
  }
  return worst;
}

class ConvTransposeParityTest : public ::testing::TestWithParam<ConvTransposeCase> {};

TEST_P(ConvTransposeParityTest, ValuesAndGradientsMatchPyTorch) {
  const ConvTransposeCase& c = GetParam();
  const Shape b_shape = {c.y[1]};
  std::vector<Shape> shapes = {c.x, c.w};
  if (c.bias) shapes.push_back(b_shape);
  for (const Shape& s : {c.y, c.y, c.x, c.w}) shapes.push_back(s);
  if (c.bias) shapes.push_back(b_shape);
  std::vector<std::vector<float>> ref = Read(c.file, shapes);
  int at = 0;
  std::vector<float> x = ref[at++], w = ref[at++], b = c.bias ? ref[at++] : std::vector<float>();
  std::vector<float> dy = ref[at++], want_y = ref[at++], want_dx = ref[at++], want_dw = ref[at++];
  std::vector<float> want_db = c.bias ? ref[at++] : std::vector<float>();

  const graph::Attrs attrs =
      MakeAttrs("ConvTranspose2D", {{"stride", graph::IntsAttr(c.stride)},
                                    {"padding", graph::IntsAttr(c.padding)},
                                    {"output_padding", graph::IntsAttr(c.output_padding)},
                                    {"dilation", graph::IntsAttr(c.dilation)},
                                    {"groups", graph::IntAttr(c.groups)}});
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  std::vector<float> y(Count(c.y)), dx(Count(c.x)), dw(Count(c.w)), db(c.y[1]);
  ForwardArgs fwd;
  fwd.op = "ConvTranspose2D";
  fwd.attrs = &attrs;
  fwd.inputs = {View(x, c.x), View(w, c.w)};
  if (c.bias) fwd.inputs.push_back(View(b, b_shape));
  fwd.outputs = {View(y, c.y)};
  absl::Status s = cpu->Forward(fwd);
  ASSERT_TRUE(s.ok()) << s;
  BackwardArgs bwd;
  bwd.op = "ConvTranspose2D";
  bwd.attrs = &attrs;
  bwd.inputs = fwd.inputs;
  bwd.outputs = fwd.outputs;
  bwd.output_grads = {View(dy, c.y)};
  bwd.input_grads = {View(dx, c.x), View(dw, c.w)};
  if (c.bias) bwd.input_grads.push_back(View(db, b_shape));
  s = cpu->Backward(bwd);
  ASSERT_TRUE(s.ok()) << s;

  const Reference r = Naive(c, x, w, b, dy);
  const double y_rel = Check(y, r.y, r.y_abs, want_y, "y");
  const double dx_rel = Check(dx, r.dx, r.dx_abs, want_dx, "dx");
  const double dw_rel = Check(dw, r.dw, r.dw_abs, want_dw, "dweight");
  double db_rel = 0;
  if (c.bias) db_rel = Check(db, r.db, r.db_abs, want_db, "dbias");
  std::printf(
      "%-32s against PyTorch, in float epsilons of the terms' magnitude: y %.2g, dx %.2g, "
      "dweight %.2g, dbias %.2g\n",
      c.file.c_str(), y_rel / kEpsilon, dx_rel / kEpsilon, dw_rel / kEpsilon, db_rel / kEpsilon);
}

INSTANTIATE_TEST_SUITE_P(Torch, ConvTransposeParityTest,
                         ::testing::Values(ConvTransposeCase{"conv_transpose_stride2",
                                                             {2, 6, 7, 7},
                                                             {6, 4, 3, 3},
                                                             {2, 4, 14, 14},
                                                             true,
                                                             {2, 2},
                                                             {1, 1},
                                                             {1, 1},
                                                             {1, 1},
                                                             1},
                                           ConvTransposeCase{"conv_transpose_grouped_dilated",
                                                             {2, 6, 5, 6},
                                                             {6, 3, 3, 2},
                                                             {2, 9, 10, 17},
                                                             true,
                                                             {2, 3},
                                                             {2, 1},
                                                             {1, 2},
                                                             {2, 1},
                                                             3},
                                           ConvTransposeCase{"conv_transpose_fcn_nobias",
                                                             {2, 4, 6, 6},
                                                             {4, 4, 4, 4},
                                                             {2, 4, 12, 12},
                                                             false,
                                                             {2, 2},
                                                             {1, 1},
                                                             {0, 0},
                                                             {1, 1},
                                                             1}),
                         [](const ::testing::TestParamInfo<ConvTransposeCase>& info) {
                           return info.param.file;
                         });

}  // namespace
}  // namespace headroom::executor::cpu
