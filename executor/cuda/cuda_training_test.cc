// Training on the CUDA backend, model by model (parity_testing.h's ParityCases: mlp,
// resnet18, mobilenet_v2 with ReLU6 and dropout, the transformer with dropout and Adam, and
// a CNN with ceil-mode pooling, Concat and a saturating ReLU6), same seed, a few steps:
//   - against the CPU backend: losses, and every parameter's, buffer's and optimizer
//     state's change over the run, within each case's stated tolerance (float32 summed in
//     other orders; parity_testing.h says why each is what it is, and parity_testing_test
//     measures it on the CPU);
//   - against itself: two plain runs, and a run in about sqrt(n) sections with every
//     cached input that can go to host memory offloaded, bitwise the same as plain (plans
//     change memory, never math, with deterministic algorithms, the backend's default);
//     and a budget that forces sections and offload, the same;
//   - predicted is measured: the arena's high-water mark is the plan's peak on every step,
//     and no kernel needed workspace outside the plan.
// Dropout masks are the CPU backend's on CUDA too (the same function of seed, step and
// node), so dropout models are compared like any other. Skipped without a GPU.
#include <iostream>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "executor/cpu/cpu_backend.h"
#include "executor/cuda/cuda_backend.h"
#include "executor/cuda/parity_testing.h"
#include "executor/executor_testing.h"
#include "executor/trainer.h"
#include "gtest/gtest.h"
#include "planner/cost_model.h"

namespace headroom::executor {
namespace {

using parity::ParityCase;
using parity::TrainRun;

// Returns a fresh CUDA backend on device 0, or null (the reason in `why`).
std::unique_ptr<Backend> NewCuda(std::string* why) {
  absl::StatusOr<std::unique_ptr<Backend>> b = cuda::CreateCudaBackend(0);
  if (!b.ok()) {
    *why = b.status().ToString();
    return nullptr;
  }
  return *std::move(b);
}

// Expects what every run on CUDA keeps: the plan's peak is the arena's high-water mark on
// every step, and every kernel ran in its planned scratch (no workspace outside the arena).
void ExpectPredictedIsMeasured(const TrainRun& run, const std::string& what) {
  for (size_t s = 0; s < run.high_water_bytes.size(); ++s) {
    EXPECT_EQ(run.high_water_bytes[s], run.planned_peak_bytes) << what << " step " << s;
  }
  EXPECT_EQ(run.workspace_bytes, 0u) << what << ": workspace outside the plan";
}

// Returns `c` trained with `options` on a fresh CUDA backend (each run chooses its own
// algorithms, as a new process would), having checked that predicted is measured.
absl::StatusOr<TrainRun> OnCuda(const ParityCase& c, const graph::Graph& g,
                                const TrainerOptions& options, const std::string& what) {
  absl::StatusOr<std::unique_ptr<Backend>> backend = cuda::CreateCudaBackend(0);
  if (!backend.ok()) return backend.status();
  absl::StatusOr<TrainRun> run = parity::Train(g, backend->get(), options, c.steps);
  if (run.ok()) ExpectPredictedIsMeasured(*run, c.name + " " + what);
  return run;
}

class CudaTrainingTest : public ::testing::TestWithParam<ParityCase> {
 protected:
  void SetUp() override {
    std::string why;
    if (NewCuda(&why) == nullptr) GTEST_SKIP() << "no CUDA device: " << why;
  }
};

TEST_P(CudaTrainingTest, FollowsTheCpuBackendWithinTolerance) {
  const ParityCase& c = GetParam();
  const graph::Graph g = c.graph();
  std::unique_ptr<Backend> cpu = cpu::CreateCpuBackend();
  absl::StatusOr<TrainRun> reference = parity::Train(g, cpu.get(), parity::OptionsOf(c), c.steps);
  ASSERT_TRUE(reference.ok()) << reference.status();
  absl::StatusOr<TrainRun> cuda = OnCuda(c, g, parity::OptionsOf(c), "plain");
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  const parity::ParityReport report = parity::CompareRuns(*cuda, *reference, c.tolerance);
  EXPECT_TRUE(report.ok()) << c.name
                           << " on CUDA against the CPU backend: " << report.DebugString();
  std::cout << c.name << " CUDA vs CPU: " << report.DebugString() << "\n";
}

TEST_P(CudaTrainingTest, SectionedWithOffloadIsBitwisePlain) {
  const ParityCase& c = GetParam();
  const graph::Graph g = c.graph();
  absl::StatusOr<TrainRun> plain = OnCuda(c, g, parity::OptionsOf(c), "plain");
  ASSERT_TRUE(plain.ok()) << plain.status();
  // Deterministic algorithms: a second run on a fresh backend is the same.
  absl::StatusOr<TrainRun> again = OnCuda(c, g, parity::OptionsOf(c), "plain again");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(parity::FirstBitwiseDifference(*again, *plain), "") << c.name << ": plain twice";

  TrainerOptions options = parity::OptionsOf(c);
  options.cuts = SqrtCutsWithOffload(g, c.optimizer);
  absl::StatusOr<TrainRun> sectioned = OnCuda(c, g, options, "sectioned");
  ASSERT_TRUE(sectioned.ok()) << sectioned.status();
  EXPECT_GT(sectioned->sections, 1) << c.name;
  EXPECT_GT(sectioned->recomputed_nodes, 0) << c.name;
  EXPECT_GT(sectioned->offloaded_bytes, 0u) << c.name;
  EXPECT_EQ(parity::FirstBitwiseDifference(*sectioned, *plain), "")
      << c.name << ": " << sectioned->sections << " sections, "
      << sectioned->offloaded_bytes / c.steps << " B offloaded per step";
}

INSTANTIATE_TEST_SUITE_P(Models, CudaTrainingTest, ::testing::ValuesIn(parity::ParityCases()),
                         [](const ::testing::TestParamInfo<ParityCase>& info) {
                           return info.param.name;
                         });

// The tightest budget (of 70% to 95% of the plain peak) that has a plan, which the search
// meets with sections and offload (planned for an H100, whose copies hide behind compute),
// against the unconstrained plan: bitwise the same.
TEST(CudaBudgetTest, ABudgetForcingSectionsIsBitwisePlain) {
  std::string why;
  if (NewCuda(&why) == nullptr) GTEST_SKIP() << "no CUDA device: " << why;
  for (const ParityCase& c : parity::ParityCases()) {
    if (c.name != "resnet18" && c.name != "transformer") continue;
    const graph::Graph g = c.graph();
    absl::StatusOr<TrainRun> plain = OnCuda(c, g, parity::OptionsOf(c), "plain");
    ASSERT_TRUE(plain.ok()) << c.name << ": " << plain.status();
    TrainerOptions options;
    absl::StatusOr<TrainRun> budgeted = parity::TrainUnderTightBudget(
        c, g, [] { return cuda::CreateCudaBackend(0); }, plain->planned_peak_bytes, &options);
    ASSERT_TRUE(budgeted.ok()) << c.name << ": " << budgeted.status();
    ExpectPredictedIsMeasured(*budgeted, c.name + " budgeted");
    EXPECT_GT(budgeted->sections, 1) << c.name;
    EXPECT_GT(budgeted->offloaded_bytes, 0u) << c.name;
    EXPECT_LE(budgeted->planned_peak_bytes, options.budget_bytes) << c.name;
    EXPECT_EQ(parity::FirstBitwiseDifference(*budgeted, *plain), "")
        << c.name << ": " << budgeted->sections << " sections, "
        << budgeted->offloaded_bytes / c.steps << " B offloaded per step";
    std::cout << c.name << " under " << options.budget_bytes << " B (plain "
              << plain->planned_peak_bytes << " B): " << budgeted->sections << " sections, "
              << budgeted->offloaded_bytes / c.steps << " B offloaded per step\n";
  }
}

}  // namespace
}  // namespace headroom::executor
