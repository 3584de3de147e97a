// Training on the CUDA backend: the arena's measured peak is the planned one on every step,
// every kernel runs in its planned scratch (cuDNN workspaces included), and losses follow the CPU backend's within float tolerance (cuDNN and cuBLAS sum in other
// orders, so not bitwise). Skipped without a GPU.
#include <cmath>

#include "executor/cpu/cpu_backend.h"
#include "executor/cuda/cuda_backend.h"
#include "executor/trainer.h"
#include "graph/zoo.h"
#include "graph/zoo_testing.h"
#include "gtest/gtest.h"
#include "planner/section_search.h"
#include "planner/sections.h"

namespace headroom::executor {
namespace {

graph::Graph Zoo(const std::string& name, uint64_t batch, std::map<std::string, int64_t> opts) {
  proto::ZooModel spec = graph::SmallZooSpec(name, batch);
  for (const auto& [k, v] : opts) (*spec.mutable_options())[k] = v;
  return graph::Graph::FromProto(graph::BuildZooModel(spec).value()).value();
}

std::vector<double> Losses(const graph::Graph& g, Backend* backend, int steps,
                           bool sectioned) {
  TrainerOptions options;
  options.seed = 3;
  if (sectioned) {
    planner::TrainingGraph t = planner::TrainingGraph::Build(g, {}).value();
    const planner::RooflineCostModel cost(g, planner::DevicePreset("h100").value());
    planner::SectionCuts cuts;
    cuts.cuts = planner::SqrtCuts(planner::NumForwardNodes(t));
    cuts.offload = planner::OffloadableTensors(t, cuts.cuts, cost).value();
    options.cuts = cuts;
  } else {
    options.cuts = planner::SectionCuts{};
  }
  std::unique_ptr<Trainer> trainer = Trainer::Create(g, backend, options).value();
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) {
    StepResult r = trainer->Step().value();
    EXPECT_EQ(r.arena_high_water_bytes, trainer->plan().peak_bytes) << g.name() << " step " << i;
    losses.push_back(r.loss);
  }
  // Every kernel ran in its node's planned scratch: no workspace outside the arena.
  EXPECT_EQ(backend->workspace_bytes(), 0u) << g.name() << " on " << backend->name();
  return losses;
}

class CudaTrainingTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Backend>> b = cuda::CreateCudaBackend(0);
    if (!b.ok()) GTEST_SKIP() << "no CUDA device: " << b.status();
    cuda_ = *std::move(b);
  }
  std::unique_ptr<Backend> cuda_;
};

TEST_P(CudaTrainingTest, FollowsTheCpuBackendWithAndWithoutSections) {
  const std::string name = GetParam();
  const graph::Graph g = name == "transformer"
                             ? Zoo(name, 4, {{"dropout_percent", 0}})
                             : Zoo(name, name == "mlp" ? 256 : 4, {});
  std::unique_ptr<Backend> cpu = cpu::CreateCpuBackend();
  const std::vector<double> reference = Losses(g, cpu.get(), 4, false);
  for (bool sectioned : {false, true}) {
    const std::vector<double> losses = Losses(g, cuda_.get(), 4, sectioned);
    for (size_t i = 0; i < losses.size(); ++i) {
      EXPECT_NEAR(losses[i], reference[i], 1e-3 * std::abs(reference[i]) + 1e-4)
          << name << (sectioned ? " sectioned" : "") << " step " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, CudaTrainingTest,
                         ::testing::Values("mlp", "resnet18", "transformer"));

}  // namespace
}  // namespace headroom::executor
