// The CUDA backend's activation derivatives (activation_math.h), run on the host, against
// the CPU backend's backward given the same y: at y = 0, at ReLU6's ceiling, between, with
// dy of both signs. Runs without a GPU; cuda_backend_test checks the device kernel from x.
#include "executor/cuda/activation_math.h"

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "executor/backend.h"
#include "executor/cpu/cpu_backend.h"
#include "graph/op_registry.h"
#include "gtest/gtest.h"

namespace headroom::executor::cuda {
namespace {

graph::Attrs DefaultAttrs(const std::string& op) {
  const graph::OpSchema* schema = graph::FindOp(op);
  EXPECT_NE(schema, nullptr) << op;
  std::map<std::string, proto::AttrValue> values;
  if (schema != nullptr) {
    for (const graph::AttrSpec& spec : schema->attrs) {
      if (!spec.required) values[spec.name] = spec.default_value;
    }
  }
  return graph::Attrs(std::move(values));
}

// Returns the CPU backend's dx for op's output `y` and gradient `dy`.
std::vector<float> CpuGrad(Backend& cpu, const std::string& op, const std::vector<float>& y,
                           const std::vector<float>& dy) {
  const int64_t n = static_cast<int64_t>(y.size());
  const graph::Attrs attrs = DefaultAttrs(op);
  absl::StatusOr<std::unique_ptr<Buffer>> arena = cpu.AllocateDevice(3 * n * sizeof(float));
  EXPECT_TRUE(arena.ok()) << arena.status();
  float* base = static_cast<float*>((*arena)->data());
  EXPECT_TRUE(cpu.Upload(base, y.data(), n * sizeof(float)).ok());
  EXPECT_TRUE(cpu.Upload(base + n, dy.data(), n * sizeof(float)).ok());
  BackwardArgs bwd;
  bwd.op = op;
  bwd.attrs = &attrs;
  bwd.inputs = {TensorView{nullptr, {n}}};
  bwd.outputs = {TensorView{base, {n}, proto::DTYPE_FLOAT32}};
  bwd.output_grads = {TensorView{base + n, {n}, proto::DTYPE_FLOAT32}};
  bwd.input_grads = {TensorView{base + 2 * n, {n}, proto::DTYPE_FLOAT32}};
  const absl::Status status = cpu.Backward(bwd);
  EXPECT_TRUE(status.ok()) << status;
  std::vector<float> dx(n);
  EXPECT_TRUE(cpu.Download(dx.data(), base + 2 * n, n * sizeof(float)).ok());
  return dx;
}

template <ActivationKind kKind>
std::vector<float> HostGrad(const std::vector<float>& y, const std::vector<float>& dy) {
  std::vector<float> dx(y.size());
  for (size_t i = 0; i < y.size(); ++i) dx[i] = ActivationGradFromY<kKind>(y[i], dy[i]);
  return dx;
}

void ExpectBitwise(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
        << "[" << i << "]: got " << got[i] << ", want " << want[i];
  }
}

TEST(ActivationMathTest, DerivativesFromYAreTheCpuBackends) {
  std::unique_ptr<Backend> cpu = cpu::CreateCpuBackend();
  // Outputs each activation can give, with its boundaries; 37 of them (not a multiple of a
  // vector width, so oneDNN's tail runs too); dy of both signs.
  std::vector<float> relu_y = {0, 0, 1e-30f, 1e-7f, 0.5f, 1, 5.999999f, 6, 6, 6.5f, 100};
  std::vector<float> unit_y = {0, 1e-7f, 0.1f, 0.25f, 0.5f, 0.75f, 0.999f, 0.9999999f, 1};
  std::vector<float> tanh_y = {-1, -0.9999999f, -0.5f, -1e-7f, 0, 1e-7f, 0.3f, 0.9999f, 1};
  auto pad = [](std::vector<float> v) {
    for (int i = 0; v.size() < 37; ++i) v.push_back(v[i % v.size()] * 0.5f);
    return v;
  };
  relu_y = pad(relu_y);
  unit_y = pad(unit_y);
  tanh_y = pad(tanh_y);
  std::vector<float> dy(37);
  for (int i = 0; i < 37; ++i) dy[i] = (i % 2 == 0 ? 1.0f : -1.0f) * (0.25f + 0.37f * i);

  {
    SCOPED_TRACE("ReLU");
    ExpectBitwise(HostGrad<ActivationKind::kRelu>(relu_y, dy), CpuGrad(*cpu, "ReLU", relu_y, dy));
  }
  {
    SCOPED_TRACE("ReLU6");
    const std::vector<float> dx = HostGrad<ActivationKind::kRelu6>(relu_y, dy);
    ExpectBitwise(dx, CpuGrad(*cpu, "ReLU6", relu_y, dy));
    // Stopped at 0 and at the ceiling (6 is y for every x >= 6), through between.
    EXPECT_EQ(dx[0], 0.0f);
    EXPECT_EQ(dx[6], dy[6]);
    EXPECT_EQ(dx[7], 0.0f);
    EXPECT_TRUE(std::signbit(dx[1]));  // dy < 0 stopped: -0, as oneDNN's.
  }
  {
    SCOPED_TRACE("Sigmoid");
    ExpectBitwise(HostGrad<ActivationKind::kSigmoid>(unit_y, dy),
                  CpuGrad(*cpu, "Sigmoid", unit_y, dy));
  }
  {
    SCOPED_TRACE("Tanh");
    ExpectBitwise(HostGrad<ActivationKind::kTanh>(tanh_y, dy), CpuGrad(*cpu, "Tanh", tanh_y, dy));
  }
}

}  // namespace
}  // namespace headroom::executor::cuda
