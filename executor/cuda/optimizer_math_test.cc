// The CUDA backend's optimizer arithmetic (optimizer_math.h), run on the host, against the
// CPU backend's steps: bitwise, after several steps with weight decay. Runs without a GPU;
// cuda_backend_test checks the device kernels against the CPU backend the same way.
#include "executor/cuda/optimizer_math.h"

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "executor/backend.h"
#include "executor/cpu/cpu_backend.h"
#include "gtest/gtest.h"

namespace headroom::executor::cuda {
namespace {

// Returns the first index where a and b differ bitwise, or -1.
int64_t FirstDifference(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return static_cast<int64_t>(i);
  }
  return -1;
}

struct Case {
  std::string op;
  int num_state;
  OptimizerParams params;
};

TEST(OptimizerMathTest, StepsAreTheCpuBackendsBitwise) {
  const int64_t n = 40000;  // Past the CPU's parallel threshold.
  const int steps = 5;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> param_dist(-2, 2), grad_dist(-1e-2f, 1e-2f);
  std::vector<float> p0(n);
  for (float& x : p0) x = param_dist(rng);
  std::vector<std::vector<float>> grads(steps, std::vector<float>(n));
  for (auto& g : grads) {
    for (float& x : g) x = grad_dist(rng);
  }
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
  std::unique_ptr<Backend> cpu_backend = cpu::CreateCpuBackend();
  for (const Case& c : {Case{"AdamUpdate", 2, adam}, Case{"SgdMomentumUpdate", 1, sgd}}) {
    SCOPED_TRACE(c.op);
    // The CPU backend's steps.
    absl::StatusOr<std::unique_ptr<Buffer>> arena =
        cpu_backend->AllocateDevice((2 + c.num_state) * n * sizeof(float));
    ASSERT_TRUE(arena.ok()) << arena.status();
    float* base = static_cast<float*>((*arena)->data());
    UpdateArgs u;
    u.op = c.op;
    u.params = c.params;
    u.param = TensorView{base, {n}, proto::DTYPE_FLOAT32};
    u.grad = TensorView{base + n, {n}, proto::DTYPE_FLOAT32};
    for (int k = 0; k < c.num_state; ++k) {
      u.state.push_back(TensorView{base + (2 + k) * n, {n}, proto::DTYPE_FLOAT32});
    }
    ASSERT_TRUE(cpu_backend->Upload(u.param.data, p0.data(), n * sizeof(float)).ok());
    for (int step = 1; step <= steps; ++step) {
      ASSERT_TRUE(cpu_backend->Upload(u.grad.data, grads[step - 1].data(), n * sizeof(float)).ok());
      u.step = step;
      absl::Status status = cpu_backend->Update(u);
      ASSERT_TRUE(status.ok()) << status;
    }

    // The CUDA backend's arithmetic, on the host.
    std::vector<float> p = p0, s0(n, NAN), s1(n, NAN);  // State unread on step 1.
    for (int step = 1; step <= steps; ++step) {
      const bool first = step == 1;
      if (c.op == "AdamUpdate") {
        const AdamConstants k = AdamConstantsOf(c.params, step);
        for (int64_t i = 0; i < n; ++i)
          AdamStep(k, first, grads[step - 1][i], &p[i], &s0[i], &s1[i]);
      } else {
        const SgdConstants k = SgdConstantsOf(c.params);
        for (int64_t i = 0; i < n; ++i)
          SgdMomentumStep(k, first, grads[step - 1][i], &p[i], &s0[i]);
      }
    }

    std::vector<float> want(n);
    ASSERT_TRUE(cpu_backend->Download(want.data(), u.param.data, n * sizeof(float)).ok());
    int64_t at = FirstDifference(p, want);
    EXPECT_EQ(at, -1) << "param [" << at << "]: " << (at >= 0 ? p[at] : 0) << " vs "
                      << (at >= 0 ? want[at] : 0);
    std::vector<std::vector<float>*> mine = {&s0, &s1};
    for (int k = 0; k < c.num_state; ++k) {
      ASSERT_TRUE(cpu_backend->Download(want.data(), u.state[k].data, n * sizeof(float)).ok());
      at = FirstDifference(*mine[k], want);
      EXPECT_EQ(at, -1) << "state " << k << " [" << at << "]";
    }
  }
}

}  // namespace
}  // namespace headroom::executor::cuda
