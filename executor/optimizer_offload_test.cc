// Optimizer state on the host, update on the host (planner::SectionCuts::
// optimizer_state_on_host), on the CPU backend: plans change memory, never math (bitwise the
// same parameters, optimizer state and losses as the device update, SGD with momentum and
// Adam, with and without sections); predicted is measured for the arena (its high-water
// mark is the planned peak every step) and the host pool (the executor's pool is the
// planned one); the device peak falls by at least the optimizer state.
#include <iostream>
#include <map>
#include <optional>

#include "executor/cpu/cpu_backend.h"
#include "executor/executor_testing.h"
#include "executor/trainer.h"
#include "gtest/gtest.h"
#include "planner/sections.h"
#include "util/check.h"

namespace headroom::executor {
namespace {

struct Run {
  std::vector<double> losses;
  ExecutorState state;  // Parameters, buffers and optimizer state.
  uint64_t peak_bytes = 0;
  uint64_t host_pool_bytes = 0;
  uint64_t optimizer_host_bytes = 0;
  uint64_t state_bytes = 0;  // Optimizer state, by the training graph.
  // Optimizer state in the memory plan's arena and on the host.
  uint64_t arena_state_bytes = 0;
  uint64_t host_state_bytes = 0;
  ExecutorState initial;
};

Run Train(const graph::Graph& forward, int steps, planner::SectionCuts cuts,
          proto::Optimizer::Kind optimizer) {
  std::unique_ptr<Backend> backend = cpu::CreateCpuBackend();
  TrainerOptions options;
  options.seed = 11;
  options.cuts = cuts;
  options.optimizer = optimizer;
  if (optimizer == proto::Optimizer::KIND_ADAM) options.optimizer_params.learning_rate = 1e-3;
  options.optimizer_params.weight_decay = 1e-4;
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(forward, backend.get(), options);
  CHECK(trainer.ok()) << trainer.status();
  const planner::SectionPlan& plan = (*trainer)->plan();
  Run run;
  run.peak_bytes = plan.peak_bytes;
  run.host_pool_bytes = plan.host_pool_bytes;
  run.optimizer_host_bytes = planner::OptimizerHostBytes(*plan.step, plan.memory->alignment_bytes);
  for (const planner::TrainingTensor& t : plan.step->graph.tensors()) {
    if (t.role == proto::ROLE_OPTIMIZER_STATE) run.state_bytes += t.bytes;
  }
  auto role_bytes = [](const std::map<proto::TensorRole, uint64_t>& by_role) {
    auto it = by_role.find(proto::ROLE_OPTIMIZER_STATE);
    return it == by_role.end() ? uint64_t{0} : it->second;
  };
  run.arena_state_bytes = role_bytes(plan.memory->bytes_by_role);
  run.host_state_bytes = role_bytes(plan.memory->host_bytes_by_role);
  run.initial = (*trainer)->SaveState().value();
  EXPECT_EQ((*trainer)->executor().host_pool_bytes(), plan.host_pool_bytes)
      << "the executor's host pool is not the planned one";
  for (int i = 0; i < steps; ++i) {
    absl::StatusOr<StepResult> r = (*trainer)->Step();
    CHECK(r.ok()) << r.status();
    EXPECT_EQ(r->arena_high_water_bytes, plan.peak_bytes)
        << forward.name() << " step " << i << ": measured high-water mark vs planned peak";
    run.losses.push_back(r->loss);
  }
  run.state = (*trainer)->SaveState().value();
  return run;
}

void ExpectSameMath(const graph::Graph& g, proto::Optimizer::Kind optimizer, bool sections) {
  planner::SectionCuts device =
      sections ? SqrtCutsWithOffload(g, optimizer) : planner::SectionCuts{};
  planner::SectionCuts host = device;
  host.optimizer_state_on_host = true;
  const int steps = 4;
  const Run on_device = Train(g, steps, device, optimizer);
  const Run on_host = Train(g, steps, host, optimizer);
  const std::string what = g.name() + (sections ? " with sections" : "") +
                           (optimizer == proto::Optimizer::KIND_ADAM ? " Adam" : " SGD");
  EXPECT_EQ(FirstDifference(on_device.state.tensors, on_host.state.tensors), "")
      << what << ": parameters or optimizer state differ after " << steps << " steps";
  EXPECT_EQ(on_device.losses, on_host.losses) << what;
  EXPECT_NE(FirstDifference(on_device.state.tensors, on_device.initial.tensors), "")
      << what << ": training changed nothing";
  // The state leaves the arena (the gradients live until their copy is awaited).
  EXPECT_EQ(on_host.arena_state_bytes, 0u) << what;
  EXPECT_EQ(on_host.host_state_bytes, on_device.state_bytes) << what;
  EXPECT_EQ(on_device.arena_state_bytes, on_device.state_bytes) << what;
  EXPECT_LT(on_host.peak_bytes, on_device.peak_bytes) << what;
  EXPECT_EQ(on_device.optimizer_host_bytes, 0u);
  // Host pool: the offloaded inputs' slots plus master parameters, gradients and state.
  EXPECT_EQ(on_host.host_pool_bytes, on_device.host_pool_bytes + on_host.optimizer_host_bytes)
      << what;
  EXPECT_GE(on_host.optimizer_host_bytes,
            3 * on_device.state_bytes / (optimizer == proto::Optimizer::KIND_ADAM ? 2 : 1))
      << what;
  std::cout << what << ": device peak " << on_device.peak_bytes << " -> " << on_host.peak_bytes
            << " B (state " << on_device.state_bytes << " B), host pool "
            << on_device.host_pool_bytes << " -> " << on_host.host_pool_bytes << " B\n";
}

TEST(OptimizerOffloadTest, MlpSgdIsBitwiseTheDeviceUpdate) {
  ExpectSameMath(ZooGraph("mlp", 4), proto::Optimizer::KIND_SGD_MOMENTUM, false);
}

TEST(OptimizerOffloadTest, MlpAdamIsBitwiseTheDeviceUpdate) {
  ExpectSameMath(ZooGraph("mlp", 4), proto::Optimizer::KIND_ADAM, false);
}

TEST(OptimizerOffloadTest, SmallCnnAdamWithSectionsIsBitwiseTheDeviceUpdate) {
  ExpectSameMath(ZooGraph("small_cnn", 2), proto::Optimizer::KIND_ADAM, true);
}

TEST(OptimizerOffloadTest, Resnet18SgdWithSectionsIsBitwiseTheDeviceUpdate) {
  ExpectSameMath(ZooGraph("resnet18", 2), proto::Optimizer::KIND_SGD_MOMENTUM, true);
}

TEST(OptimizerOffloadTest, TransformerAdamIsBitwiseTheDeviceUpdate) {
  ExpectSameMath(ZooGraph("transformer", 2), proto::Optimizer::KIND_ADAM, false);
}

// A checkpoint taken under one placement resumes under the other: the state on the host is
// saved and restored like the state in the arena.
TEST(OptimizerOffloadTest, StateMovesBetweenPlacements) {
  const graph::Graph g = ZooGraph("mlp", 4);
  std::unique_ptr<Backend> backend = cpu::CreateCpuBackend();
  TrainerOptions options;
  options.optimizer = proto::Optimizer::KIND_ADAM;
  options.cuts = planner::SectionCuts{};
  options.cuts->optimizer_state_on_host = true;
  auto on_host = Trainer::Create(g, backend.get(), options).value();
  options.cuts->optimizer_state_on_host = false;
  auto on_device = Trainer::Create(g, backend.get(), options).value();
  ASSERT_TRUE(on_host->Step().ok());
  ASSERT_TRUE(on_host->Step().ok());
  const ExecutorState saved = on_host->SaveState().value();
  ASSERT_TRUE(on_device->RestoreState(saved).ok());
  EXPECT_EQ(FirstDifference(on_device->SaveState()->tensors, saved.tensors), "");
  // Both go on identically from there.
  ASSERT_TRUE(on_host->Step().ok());
  ASSERT_TRUE(on_device->Step().ok());
  EXPECT_EQ(FirstDifference(on_device->SaveState()->tensors, on_host->SaveState()->tensors), "");
}

}  // namespace
}  // namespace headroom::executor
