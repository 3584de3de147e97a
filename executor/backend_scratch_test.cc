// Kernel scratch in the plan, on the CPU backend: every node's scratch is a tensor of the
// plan, each kernel runs in it and takes no byte outside the arena; a plan made without the
// backend's scratch model still runs, on scratch the backend reports as unplanned.
#include "executor/backend_scratch.h"

#include <memory>
#include <string>

#include "executor/cpu/cpu_backend.h"
#include "executor/executor.h"
#include "executor/executor_testing.h"
#include "executor/synthetic_data.h"
#include "executor/trainer.h"
#include "gtest/gtest.h"
#include "planner/memory_planner.h"
#include "planner/sections.h"

namespace headroom::executor {
namespace {

struct Model {
  std::string name;
  graph::Graph forward;
};

std::vector<Model> Models() {
  std::vector<Model> models;
  models.push_back({"mlp", ZooGraph("mlp", 64)});
  models.push_back({"resnet18", ZooGraph("resnet18", 4)});
  models.push_back({"transformer", ZooGraph("transformer", 2)});
  models.push_back({"mobilenet_v2", ZooGraph("mobilenet_v2", 2)});
  return models;
}

TEST(BackendScratchTest, EveryKernelRunsInThePlansScratchAndNothingElse) {
  for (const Model& m : Models()) {
    for (const bool sectioned : {false, true}) {
      SCOPED_TRACE(m.name + (sectioned ? ", sqrt(n) sections with offload" : ", plain"));
      std::unique_ptr<Backend> backend = cpu::CreateCpuBackend();
      TrainerOptions options;
      if (sectioned) options.cuts = SqrtCutsWithOffload(m.forward);
      absl::StatusOr<std::unique_ptr<Trainer>> trainer =
          Trainer::Create(m.forward, backend.get(), options);
      ASSERT_TRUE(trainer.ok()) << trainer.status();
      const planner::MemoryPlan& plan = *(*trainer)->plan().memory;
      // The plan holds scratch, at the nodes that declared it and nowhere else.
      const auto temporary = plan.bytes_by_role.find(proto::ROLE_TEMPORARY);
      ASSERT_NE(temporary, plan.bytes_by_role.end());
      EXPECT_GT(temporary->second, 0u);
      for (const planner::PlannedTensor& t : plan.tensors) {
        if (t.role != proto::ROLE_TEMPORARY) continue;
        EXPECT_EQ(t.lifetime.first_position, t.lifetime.last_position) << t.name;
      }
      for (int step = 0; step < 2; ++step) {
        absl::StatusOr<StepResult> r = (*trainer)->Step();
        ASSERT_TRUE(r.ok()) << r.status();
        EXPECT_EQ(r->arena_high_water_bytes, (*trainer)->plan().peak_bytes);
      }
      EXPECT_EQ(backend->workspace_bytes(), 0u) << "a kernel ran outside its planned scratch";
    }
  }
}

// The same under --precision bf16 (the rewrite of graph/mixed_precision.h, every op of the
// three models on the CPU backend's bf16 kernels): each step's arena high-water is the
// plan's peak and no kernel takes a byte outside its planned scratch.
TEST(BackendScratchTest, Bf16StepsRunInThePlansScratchAndNothingElse) {
  for (const Model& m : Models()) {
    if (m.name == "mobilenet_v2") continue;  // The three models of docs/planner.md.
    SCOPED_TRACE(m.name + ", bf16");
    std::unique_ptr<Backend> backend = cpu::CreateCpuBackend();
    TrainerOptions options;
    options.precision = proto::PRECISION_BF16;
    absl::StatusOr<std::unique_ptr<Trainer>> trainer =
        Trainer::Create(m.forward, backend.get(), options);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    for (int step = 0; step < 2; ++step) {
      absl::StatusOr<StepResult> r = (*trainer)->Step();
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->arena_high_water_bytes, (*trainer)->plan().peak_bytes);
      EXPECT_EQ(r->peak_live_bytes, r->planned_peak_bytes);
    }
    EXPECT_EQ(backend->workspace_bytes(), 0u) << "a kernel ran outside its planned scratch";
  }
}

// The same step planned without the backend's scratch model: the kernels fall back to
// scratch outside the arena, which workspace_bytes() reports, and compute the same bytes.
TEST(BackendScratchTest, APlanWithoutScratchRunsOnScratchTheBackendReportsAsUnplanned) {
  const graph::Graph forward = ZooGraph("resnet18", 4);
  std::unique_ptr<Backend> planned_backend = cpu::CreateCpuBackend();
  absl::StatusOr<std::unique_ptr<Trainer>> planned =
      Trainer::Create(forward, planned_backend.get(), {});
  ASSERT_TRUE(planned.ok()) << planned.status();
  absl::StatusOr<std::vector<HostTensor>> initial = (*planned)->State();
  ASSERT_TRUE(initial.ok()) << initial.status();
  absl::StatusOr<StepResult> planned_step = (*planned)->Step();
  ASSERT_TRUE(planned_step.ok()) << planned_step.status();

  absl::StatusOr<planner::TrainingGraph> training = planner::TrainingGraph::Build(forward, {});
  ASSERT_TRUE(training.ok());
  const planner::RooflineCostModel cost(forward, planner::DevicePreset("cpu").value());
  absl::StatusOr<planner::SectionedStep> step = planner::ExpandSections(*training, {}, cost);
  ASSERT_TRUE(step.ok());
  auto shared_step = std::make_shared<const planner::SectionedStep>(*std::move(step));
  absl::StatusOr<planner::MemoryPlan> memory = planner::PlanScheduledGraph(
      shared_step->graph, shared_step->schedule, planner::kDefaultAlignmentBytes,
      planner::DefaultStrategies());
  ASSERT_TRUE(memory.ok());
  EXPECT_EQ(memory->bytes_by_role.count(proto::ROLE_TEMPORARY), 0u);
  EXPECT_LT(memory->arena_bytes, (*planned)->plan().peak_bytes);
  std::unique_ptr<Backend> backend = cpu::CreateCpuBackend();
  absl::StatusOr<std::unique_ptr<Executor>> executor = Executor::Create(
      forward, shared_step, std::make_shared<const planner::MemoryPlan>(*std::move(memory)),
      backend.get(), *initial, {});
  ASSERT_TRUE(executor.ok()) << executor.status();
  absl::StatusOr<StepResult> r = (*executor)->RunStep((*planned)->task().Batch(0));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(backend->workspace_bytes(), 0u);
  EXPECT_EQ(r->loss, planned_step->loss);
}

}  // namespace
}  // namespace headroom::executor
