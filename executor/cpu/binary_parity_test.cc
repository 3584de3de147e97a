// The CPU backend's Sub, Div and PReLU against PyTorch 1.13's float32 values and autograd
// gradients, written at build time by tools/torch_binary.py, same-shape and with both
// operands broadcast (PReLU: a slope per channel, x with its kink at 0 and -0). Prints each case's
// largest differences. y and the gradients are one rounding of PyTorch's own formulas (db's is -dy
// * ((a / b) / b)), so bitwise where nothing is summed; a gradient summed over broadcast dims
// (PyTorch in float, Headroom in double) within 8 roundings of the sum of its terms' magnitudes.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "executor/backend.h"
#include "executor/cpu/cpu_backend.h"
#include "graph/op_registry.h"
#include "gtest/gtest.h"

namespace headroom::executor::cpu {
namespace {

using Shape = std::vector<int64_t>;

struct Case {
  std::string file;  // tools/torch_binary.py's case name.
  std::string op;
  Shape a, b, out;
};

int64_t Count(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// PyTorch's a, b, dy, y, da, db for one case.
struct Reference {
  std::vector<float> a, b, dy, y, da, db;
};

Reference Read(const Case& c) {
  const std::string path = "executor/cpu/torch_binary/" + c.file + ".bin";
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  auto next = [&](const Shape& s) {
    std::vector<float> v(Count(s));
    in.read(reinterpret_cast<char*>(v.data()), v.size() * sizeof(float));
    EXPECT_EQ(in.gcount(), static_cast<std::streamsize>(v.size() * sizeof(float))) << path;
    return v;
  };
  Reference r;
  r.a = next(c.a);
  r.b = next(c.b);
  r.dy = next(c.out);
  r.y = next(c.out);
  r.da = next(c.a);
  r.db = next(c.b);
  return r;
}

// Index into `in` (right-aligned to `out`, broadcast along its dims of 1) of flat index i
// of `out`.
int64_t BroadcastIndex(const Shape& out, const Shape& in, int64_t i) {
  int64_t index = 0, stride = 1;
  for (int d = static_cast<int>(out.size()) - 1; d >= 0; --d) {
    const int64_t c = i % out[d];
    i /= out[d];
    const int k = d - static_cast<int>(out.size() - in.size());
    if (k < 0) continue;
    if (in[k] != 1) index += c * stride;
    stride *= in[k];
  }
  return index;
}

TensorView View(std::vector<float>& v, const Shape& s) {
  return TensorView{v.data(), s, proto::DTYPE_FLOAT32};
}

// Checks `got` against PyTorch's `want`, bitwise where `exact`, else within 8 roundings of
// `scale` (the sum of the terms' magnitudes); returns the largest difference.
double Compare(const std::vector<float>& got, const std::vector<float>& want,
               const std::vector<double>& scale, bool exact, const char* what) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = std::fabs(double{got[i]} - want[i]);
    if (exact) {
      EXPECT_EQ(got[i], want[i]) << what << " at " << i;
      EXPECT_EQ(std::signbit(got[i]), std::signbit(want[i])) << what << " at " << i;
    } else {
      EXPECT_LE(diff, 8 * 1.1920929e-7 * scale[i])
          << what << " at " << i << ": " << got[i] << ", PyTorch's " << want[i];
    }
    worst = std::max(worst, diff / std::max(std::fabs(double{want[i]}), 1e-30));
  }
  return worst;
}

class BinaryParityTest : public ::testing::TestWithParam<Case> {};

TEST_P(BinaryParityTest, MatchesPyTorch) {
  const Case& c = GetParam();
  Reference ref = Read(c);
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  const graph::Attrs attrs;
  std::vector<float> y(Count(c.out)), da(Count(c.a)), db(Count(c.b));
  ForwardArgs fwd;
  fwd.op = c.op;
  fwd.attrs = &attrs;
  fwd.inputs = {View(ref.a, c.a), View(ref.b, c.b)};
  fwd.outputs = {View(y, c.out)};
  ASSERT_TRUE(cpu->Forward(fwd).ok());
  BackwardArgs bwd;
  bwd.op = c.op;
  bwd.attrs = &attrs;
  bwd.inputs = fwd.inputs;
  bwd.outputs = {View(y, c.out)};
  bwd.output_grads = {View(ref.dy, c.out)};
  bwd.input_grads = {View(da, c.a), View(db, c.b)};
  ASSERT_TRUE(cpu->Backward(bwd).ok());

  // The magnitudes each gradient element sums.
  std::vector<double> da_scale(da.size(), 0), db_scale(db.size(), 0);
  for (int64_t i = 0; i < Count(c.out); ++i) {
    const int64_t ia = BroadcastIndex(c.out, c.a, i), ib = BroadcastIndex(c.out, c.b, i);
    const double g = std::fabs(double{ref.dy[i]}), u = ref.a[ia], v = ref.b[ib];
    da_scale[ia] += c.op == "Div" ? g / std::fabs(v) : g;
    if (c.op == "PReLU") {
      db_scale[ib] += u > 0 ? 0 : g * std::fabs(u);
    } else {
      db_scale[ib] += c.op == "Div" ? g * std::fabs(u) / (v * v) : g;
    }
  }
  const double y_rel = Compare(y, ref.y, {}, true, "y");
  const double da_rel = Compare(da, ref.da, da_scale, c.a == c.out, "da");
  const double db_rel = Compare(db, ref.db, db_scale, c.b == c.out, "db");
  std::printf("%-14s y: max rel %.3g; da: max rel %.3g; db: max rel %.3g\n", c.file.c_str(), y_rel,
              da_rel, db_rel);
}

INSTANTIATE_TEST_SUITE_P(
    Torch, BinaryParityTest,
    ::testing::Values(Case{"Sub_same", "Sub", {64, 64}, {64, 64}, {64, 64}},
                      Case{"Sub_broadcast", "Sub", {8, 1, 32}, {16, 1}, {8, 16, 32}},
                      Case{"Div_same", "Div", {64, 64}, {64, 64}, {64, 64}},
                      Case{"Div_broadcast", "Div", {8, 1, 32}, {16, 1}, {8, 16, 32}},
                      Case{"PReLU_channels", "PReLU", {4, 3, 5, 5}, {3, 1, 1}, {4, 3, 5, 5}}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.file; });

}  // namespace
}  // namespace headroom::executor::cpu
