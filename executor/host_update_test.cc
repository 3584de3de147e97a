#include "executor/host_update.h"

#include <cstring>
#include <random>
#include <vector>

#include "executor/cpu/cpu_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom::executor {
namespace {

using ::testing::HasSubstr;

TensorView Float(std::vector<float>& v) {
  return TensorView{v.data(), {static_cast<int64_t>(v.size())}, proto::DTYPE_FLOAT32};
}

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// The host update against the CPU backend's device update: the same parameters and state,
// bit for bit, over several steps with fresh gradients, on sizes below and above the
// threshold where both go parallel.
void ExpectBitwiseEqual(const std::string& op, int num_state, int64_t n) {
  std::unique_ptr<Backend> backend = cpu::CreateCpuBackend();
  std::vector<float> p_device = Random(n, 1), p_host = p_device;
  std::vector<std::vector<float>> s_device(num_state, std::vector<float>(n, 0.f));
  std::vector<std::vector<float>> s_host = s_device;
  OptimizerParams params;
  params.learning_rate = 0.05;
  params.weight_decay = 1e-3;
  for (int64_t step = 1; step <= 4; ++step) {
    std::vector<float> grad = Random(n, 100 + step);
    UpdateArgs device{op, Float(p_device), Float(grad), {}, params, step};
    UpdateArgs host{op, Float(p_host), Float(grad), {}, params, step};
    for (int i = 0; i < num_state; ++i) {
      device.state.push_back(Float(s_device[i]));
      host.state.push_back(Float(s_host[i]));
    }
    ASSERT_TRUE(backend->Update(device).ok());
    ASSERT_TRUE(RunHostUpdate(host).ok());
  }
  EXPECT_EQ(std::memcmp(p_device.data(), p_host.data(), n * sizeof(float)), 0) << op << " n=" << n;
  for (int i = 0; i < num_state; ++i) {
    EXPECT_EQ(std::memcmp(s_device[i].data(), s_host[i].data(), n * sizeof(float)), 0)
        << op << " state " << i;
  }
  EXPECT_NE(p_host, Random(n, 1)) << "the update changed nothing";
}

TEST(HostUpdateTest, SgdMomentumIsBitwiseTheCpuBackendsUpdate) {
  ExpectBitwiseEqual("SgdMomentumUpdate", 1, 1000);
  ExpectBitwiseEqual("SgdMomentumUpdate", 1, 100000);
}

TEST(HostUpdateTest, AdamIsBitwiseTheCpuBackendsUpdate) {
  ExpectBitwiseEqual("AdamUpdate", 2, 1000);
  ExpectBitwiseEqual("AdamUpdate", 2, 100000);
}

TEST(HostUpdateTest, BadArgumentsAreNamed) {
  std::vector<float> p(4), g(3), m(4);
  UpdateArgs args{"AdamUpdate", Float(p), Float(g), {Float(m), Float(m)}, {}, 1};
  EXPECT_THAT(RunHostUpdate(args).message(), HasSubstr("grad needs 4 float32 elements"));
  args.grad = Float(p);
  args.state.pop_back();
  EXPECT_THAT(RunHostUpdate(args).message(), HasSubstr("got 1 state tensors, needs 2"));
  args.op = "Lamb";
  EXPECT_THAT(RunHostUpdate(args).message(), HasSubstr("no optimizer step 'Lamb'"));
  args.op = "SgdMomentumUpdate";
  args.step = 0;
  EXPECT_THAT(RunHostUpdate(args).message(), HasSubstr("step is 0"));
}

TEST(HostUpdateTest, QueueRunsInOrderAndReportsTheFirstError) {
  HostUpdateQueue queue;
  // Two SGD steps on one parameter: the second must see the first's buffer (in order).
  std::vector<float> p = {1.f}, g = {1.f}, buf = {0.f};
  OptimizerParams params;
  params.learning_rate = 0.5;
  params.momentum = 0.5;
  const int64_t a =
      queue.Submit({"SgdMomentumUpdate", Float(p), Float(g), {Float(buf)}, params, 1});
  const int64_t b =
      queue.Submit({"SgdMomentumUpdate", Float(p), Float(g), {Float(buf)}, params, 2});
  EXPECT_EQ(b, a + 1);
  ASSERT_TRUE(queue.Wait(b).ok());
  // Step 1: buf = 1, p = 0.5; step 2: buf = 0.5 * 1 + 1 = 1.5, p = 0.5 - 0.75 = -0.25.
  EXPECT_FLOAT_EQ(buf[0], 1.5f);
  EXPECT_FLOAT_EQ(p[0], -0.25f);
  const int64_t c = queue.Submit({"Nope", Float(p), Float(g), {}, params, 1});
  EXPECT_THAT(queue.Wait(c).message(), HasSubstr("no optimizer step 'Nope'"));
  EXPECT_GT(queue.TakeBusySeconds(), 0.0);
}

}  // namespace
}  // namespace headroom::executor
