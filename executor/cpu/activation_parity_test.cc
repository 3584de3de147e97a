// The CPU backend's activations imported from ONNX (LeakyReLU, ELU, SELU, Softplus, Sqrt,
// Erf, Mish, Pow to a constant exponent) against PyTorch 1.13's float32 values and autograd
// gradients, written at build time by tools/torch_activations.py over [-30, 30], the kinks,
// Softplus's threshold and values far out. Prints each case's largest differences; every
// value must be within 8 float32 roundings of PyTorch's, every gradient within 8 (or, where
// it cancels, 8 of its terms'), and the branch taken at the kinks PyTorch's, bitwise.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "executor/backend.h"
#include "executor/cpu/cpu_backend.h"
#include "graph/op_registry.h"
#include "gtest/gtest.h"

namespace headroom::executor::cpu {
namespace {

constexpr int64_t kN = 4096;

struct Case {
  std::string file;  // tools/torch_activations.py's case name.
  std::string op;
  std::map<std::string, double> attrs;
};

// The op's attributes: its defaults, then `set`.
graph::Attrs AttrsOf(const std::string& op, const std::map<std::string, double>& set) {
  const graph::OpSchema* schema = graph::FindOp(op);
  EXPECT_NE(schema, nullptr) << op;
  std::map<std::string, proto::AttrValue> values;
  if (schema != nullptr) {
    for (const graph::AttrSpec& spec : schema->attrs) values[spec.name] = spec.default_value;
  }
  for (const auto& [name, v] : set) values[name].set_f(v);
  return graph::Attrs(std::move(values));
}

// PyTorch's x, dy, y, dx for one case.
struct Reference {
  std::vector<float> x, dy, y, dx;
};

Reference Read(const std::string& file) {
  const std::string path = "executor/cpu/torch_activations/" + file + ".bin";
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::vector<float> all(4 * kN);
  in.read(reinterpret_cast<char*>(all.data()), all.size() * sizeof(float));
  EXPECT_EQ(in.gcount(), static_cast<std::streamsize>(all.size() * sizeof(float))) << path;
  auto part = [&](int i) {
    return std::vector<float>(all.begin() + i * kN, all.begin() + (i + 1) * kN);
  };
  return {part(0), part(1), part(2), part(3)};
}

// |a - b| in units of b's float32 spacing (at least the smallest normal's), 0 for equal
// values (infinities and NaNs included).
double Ulps(float a, float b) {
  if (a == b || (std::isnan(a) && std::isnan(b))) return 0;
  if (!std::isfinite(a) || !std::isfinite(b)) return INFINITY;
  const float spacing = std::max(std::fabs(std::nextafter(b, INFINITY) - b), 1.17549435e-38f);
  return std::fabs(double{a} - double{b}) / spacing;
}

class ActivationParityTest : public ::testing::TestWithParam<Case> {};

TEST_P(ActivationParityTest, MatchesPyTorch) {
  const Case& c = GetParam();
  const Reference ref = Read(c.file);
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  const graph::Attrs attrs = AttrsOf(c.op, c.attrs);
  std::vector<float> y(kN), dx(kN);
  ForwardArgs fwd;
  fwd.op = c.op;
  fwd.attrs = &attrs;
  fwd.inputs = {TensorView{const_cast<float*>(ref.x.data()), {kN}, proto::DTYPE_FLOAT32}};
  fwd.outputs = {TensorView{y.data(), {kN}, proto::DTYPE_FLOAT32}};
  ASSERT_TRUE(cpu->Forward(fwd).ok());
  BackwardArgs bwd;
  bwd.op = c.op;
  bwd.attrs = &attrs;
  bwd.inputs = fwd.inputs;
  bwd.outputs = {TensorView{y.data(), {kN}, proto::DTYPE_FLOAT32}};
  bwd.output_grads = {TensorView{const_cast<float*>(ref.dy.data()), {kN}, proto::DTYPE_FLOAT32}};
  bwd.input_grads = {TensorView{dx.data(), {kN}, proto::DTYPE_FLOAT32}};
  ASSERT_TRUE(cpu->Backward(bwd).ok());

  double y_ulps = 0, dx_ulps = 0, y_abs = 0, dx_abs = 0;
  int y_equal = 0, dx_equal = 0;
  for (int64_t i = 0; i < kN; ++i) {
    const double yu = Ulps(y[i], ref.y[i]), du = Ulps(dx[i], ref.dx[i]);
    EXPECT_LE(yu, 8) << "y at x = " << ref.x[i] << ": " << y[i] << ", PyTorch's " << ref.y[i];
    // Where a gradient is a difference of terms of size |dy| (1 + |x|) (Mish's, near its
    // zero at x = -1.19), 8 roundings of the terms rather than of the result.
    const double terms = std::fabs(double{ref.dy[i]}) * (1 + std::fabs(double{ref.x[i]}));
    EXPECT_TRUE(du <= 8 || std::fabs(double{dx[i]} - ref.dx[i]) <= 8 * 1.1920929e-7 * terms)
        << "dx at x = " << ref.x[i] << ": " << dx[i] << ", PyTorch's " << ref.dx[i] << " (" << du
        << " ulp)";
    y_ulps = std::max(y_ulps, yu);
    dx_ulps = std::max(dx_ulps, du);
    if (std::isfinite(yu)) y_abs = std::max(y_abs, std::fabs(double{y[i]} - ref.y[i]));
    if (std::isfinite(du)) dx_abs = std::max(dx_abs, std::fabs(double{dx[i]} - ref.dx[i]));
    y_equal += y[i] == ref.y[i] || (std::isnan(y[i]) && std::isnan(ref.y[i]));
    dx_equal += dx[i] == ref.dx[i] || (std::isnan(dx[i]) && std::isnan(ref.dx[i]));
    // At the kinks, 0 and -0 (the last values but one of the grid's specials), bitwise.
    if (ref.x[i] == 0.f) {
      EXPECT_EQ(y[i], ref.y[i]) << "y at x = " << ref.x[i];
      EXPECT_EQ(dx[i], ref.dx[i]) << "dx at x = " << ref.x[i];
    }
  }
  std::printf(
      "%-20s y: max %.3g ulp, max |diff| %.3g, %d/%lld equal; dx: max %.3g ulp, "
      "max |diff| %.3g, %d/%lld equal\n",
      c.file.c_str(), y_ulps, y_abs, y_equal, static_cast<long long>(kN), dx_ulps, dx_abs, dx_equal,
      static_cast<long long>(kN));
}

INSTANTIATE_TEST_SUITE_P(
    Torch, ActivationParityTest,
    ::testing::Values(Case{"LeakyReLU", "LeakyReLU", {}},
                      Case{"LeakyReLU_alpha0.2", "LeakyReLU", {{"alpha", 0.2}}},
                      Case{"ELU", "ELU", {}}, Case{"ELU_alpha0.5", "ELU", {{"alpha", 0.5}}},
                      Case{"SELU", "SELU", {}}, Case{"Softplus", "Softplus", {}},
                      Case{"Sqrt", "Sqrt", {}}, Case{"Erf", "Erf", {}}, Case{"Mish", "Mish", {}},
                      Case{"Pow_exponent2", "Pow", {{"exponent", 2}}},
                      Case{"Pow_exponent3", "Pow", {{"exponent", 3}}},
                      Case{"Pow_exponent0.5", "Pow", {{"exponent", 0.5}}},
                      Case{"Pow_exponent-1", "Pow", {{"exponent", -1}}},
                      Case{"Pow_exponent1.5", "Pow", {{"exponent", 1.5}}}),
    [](const ::testing::TestParamInfo<Case>& info) {
      std::string name = info.param.file;
      for (char& ch : name) {
        if (ch == '.' || ch == '-') ch = '_';
      }
      return name;
    });

}  // namespace
}  // namespace headroom::executor::cpu
