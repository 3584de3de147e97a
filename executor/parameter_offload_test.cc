// Parameters on the host between uses (planner::SectionCuts::parameters_on_host), on the CPU
// backend: plans change memory, never math (bitwise the same parameters, optimizer state and
// losses as with the parameters on the device, SGD with momentum and Adam, with and without
// sections; evaluation too); predicted is measured (the arena's high-water mark is the
// planned peak every step; the executor's host pool is the planned one); the parameters
// leave the arena (only their per-group copies are planned there).
#include <algorithm>
#include <cstring>
#include <iostream>
#include <map>

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
  ExecutorState initial;
  double eval_loss = 0;
  uint64_t peak_bytes = 0;
  uint64_t host_pool_bytes = 0;
  uint64_t param_bytes = 0;  // Parameters, by the forward graph.
  // Parameters in the memory plan's arena (their copies) and on the host.
  uint64_t arena_param_bytes = 0;
  uint64_t host_param_bytes = 0;
  size_t parameter_copies = 0;
};

// Returns a batch for `forward`'s inputs and labels: float inputs deterministic values, the
// rest (labels, token ids) 0.
std::vector<HostTensor> Batch(const graph::Graph& forward) {
  std::vector<HostTensor> batch;
  for (graph::TensorId t = 0; t < static_cast<graph::TensorId>(forward.tensors().size()); ++t) {
    const graph::Tensor& tensor = forward.tensor(t);
    if (tensor.role != proto::ROLE_INPUT && tensor.role != proto::ROLE_LABEL) continue;
    HostTensor value = MakeHostTensor(tensor.name, tensor.shape, tensor.dtype);
    std::fill(value.bytes.begin(), value.bytes.end(), 0);
    if (tensor.role == proto::ROLE_INPUT && tensor.dtype == proto::DTYPE_FLOAT32) {
      float* f = reinterpret_cast<float*>(value.bytes.data());
      for (size_t i = 0; i < value.bytes.size() / 4; ++i) f[i] = 0.01f * static_cast<float>(i % 97);
    }
    batch.push_back(std::move(value));
  }
  return batch;
}

Run Train(const graph::Graph& forward, int steps, planner::SectionCuts cuts,
          proto::Optimizer::Kind optimizer) {
  std::unique_ptr<Backend> backend = cpu::CreateCpuBackend();
  TrainerOptions options;
  options.seed = 5;
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
  run.parameter_copies = plan.step->parameter_copies.size();
  for (const graph::Tensor& t : forward.tensors()) {
    if (t.role == proto::ROLE_PARAMETER)
      run.param_bytes += plan.step->graph.tensor(plan.step->graph.FindTensor(t.name)).bytes;
  }
  auto role_bytes = [](const std::map<proto::TensorRole, uint64_t>& by_role) {
    auto it = by_role.find(proto::ROLE_PARAMETER);
    return it == by_role.end() ? uint64_t{0} : it->second;
  };
  run.arena_param_bytes = role_bytes(plan.memory->bytes_by_role);
  run.host_param_bytes = role_bytes(plan.memory->host_bytes_by_role);
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
  absl::StatusOr<EvalResult> eval = (*trainer)->Evaluate(Batch(forward), {});
  CHECK(eval.ok()) << eval.status();
  run.eval_loss = eval->loss;
  EXPECT_LE(eval->arena_high_water_bytes, plan.peak_bytes) << forward.name() << " evaluation";
  return run;
}

void ExpectSameMath(const graph::Graph& g, proto::Optimizer::Kind optimizer, bool sections) {
  planner::SectionCuts device =
      sections ? SqrtCutsWithOffload(g, optimizer) : planner::SectionCuts{};
  device.optimizer_state_on_host = true;
  planner::SectionCuts host = device;
  host.parameters_on_host = true;
  const int steps = 4;
  const Run on_device = Train(g, steps, device, optimizer);
  const Run on_host = Train(g, steps, host, optimizer);
  const std::string what = g.name() + (sections ? " with sections" : "") +
                           (optimizer == proto::Optimizer::KIND_ADAM ? " Adam" : " SGD");
  EXPECT_EQ(FirstDifference(on_device.state.tensors, on_host.state.tensors), "")
      << what << ": parameters or optimizer state differ after " << steps << " steps";
  EXPECT_EQ(on_device.losses, on_host.losses) << what;
  EXPECT_EQ(on_device.eval_loss, on_host.eval_loss) << what << ": evaluation";
  EXPECT_NE(FirstDifference(on_device.state.tensors, on_device.initial.tensors), "")
      << what << ": training changed nothing";
  // The parameters leave the arena; only their copies are planned there.
  EXPECT_EQ(on_device.arena_param_bytes, on_device.param_bytes) << what;
  EXPECT_EQ(on_device.host_param_bytes, 0u) << what;
  EXPECT_EQ(on_host.host_param_bytes, on_host.param_bytes) << what;
  EXPECT_GE(on_host.parameter_copies, 1u) << what;
  // The host pool is the same: the master copies were there already.
  EXPECT_EQ(on_host.host_pool_bytes, on_device.host_pool_bytes) << what;
  if (sections) {
    EXPECT_LT(on_host.peak_bytes, on_device.peak_bytes) << what;
  }
  std::cout << what << ": device peak " << on_device.peak_bytes << " -> " << on_host.peak_bytes
            << " B (parameters " << on_device.param_bytes << " B, " << on_host.parameter_copies
            << " copies), host pool " << on_host.host_pool_bytes << " B\n";
}

TEST(ParameterOffloadTest, MlpSgdIsBitwiseTheDevicePlacement) {
  ExpectSameMath(ZooGraph("mlp", 4), proto::Optimizer::KIND_SGD_MOMENTUM, false);
}

TEST(ParameterOffloadTest, MlpAdamWithSectionsIsBitwiseTheDevicePlacement) {
  ExpectSameMath(ZooGraph("mlp", 4), proto::Optimizer::KIND_ADAM, true);
}

TEST(ParameterOffloadTest, SmallCnnAdamWithSectionsIsBitwiseTheDevicePlacement) {
  ExpectSameMath(ZooGraph("small_cnn", 2), proto::Optimizer::KIND_ADAM, true);
}

TEST(ParameterOffloadTest, Resnet18SgdWithSectionsIsBitwiseTheDevicePlacement) {
  ExpectSameMath(ZooGraph("resnet18", 2), proto::Optimizer::KIND_SGD_MOMENTUM, true);
}

TEST(ParameterOffloadTest, TransformerAdamWithSectionsIsBitwiseTheDevicePlacement) {
  ExpectSameMath(ZooGraph("transformer", 2), proto::Optimizer::KIND_ADAM, true);
}

// A checkpoint taken with the parameters on the host resumes with them on the device.
TEST(ParameterOffloadTest, StateMovesBetweenPlacements) {
  const graph::Graph g = ZooGraph("mlp", 4);
  std::unique_ptr<Backend> backend = cpu::CreateCpuBackend();
  TrainerOptions options;
  options.optimizer = proto::Optimizer::KIND_ADAM;
  options.cuts = planner::SectionCuts{};
  options.cuts->optimizer_state_on_host = true;
  options.cuts->parameters_on_host = true;
  auto on_host = Trainer::Create(g, backend.get(), options).value();
  options.cuts->optimizer_state_on_host = false;
  options.cuts->parameters_on_host = false;
  auto on_device = Trainer::Create(g, backend.get(), options).value();
  ASSERT_TRUE(on_host->Step().ok());
  ASSERT_TRUE(on_host->Step().ok());
  const ExecutorState saved = on_host->SaveState().value();
  ASSERT_TRUE(on_device->RestoreState(saved).ok());
  EXPECT_EQ(FirstDifference(on_device->SaveState()->tensors, saved.tensors), "");
  ASSERT_TRUE(on_host->Step().ok());
  ASSERT_TRUE(on_device->Step().ok());
  EXPECT_EQ(FirstDifference(on_device->SaveState()->tensors, on_host->SaveState()->tensors), "");
}

}  // namespace
}  // namespace headroom::executor
