// The parity harness (parity_testing.h) proven on the CPU backend, which it needs no GPU
// for: CompareRuns on hand-made runs (what passes, what fails, and that it names where);
// then, for every model the CUDA test compares, on the CPU: sectioned with offload against
// plain is bitwise the same (what the CUDA test asks of CUDA), a 1e-6 perturbation of the
// initial weights (float32 rounding noise) stays within the model's tolerance (so the
// tolerance is not tighter than training's own amplification of rounding), and a 2% error in
// the learning rate does not (so it is tight enough to catch a real error).
#include "executor/cuda/parity_testing.h"

#include <cmath>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "executor/cpu/cpu_backend.h"
#include "executor/executor_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom::executor::parity {
namespace {

using ::testing::HasSubstr;

// ---- CompareRuns and FirstBitwiseDifference on hand-made runs ----------------------------

HostTensor Tensor(const std::string& name, const std::vector<float>& values) {
  HostTensor t = MakeHostTensor(name, {static_cast<int64_t>(values.size())}, proto::DTYPE_FLOAT32);
  for (size_t i = 0; i < values.size(); ++i) t.f32()[i] = values[i];
  return t;
}

// A run of one parameter "w" and its momentum: w moves from 1.0 by `delta` per element.
TrainRun HandRun(const std::vector<float>& delta, std::vector<double> losses = {2.0, 1.5}) {
  TrainRun run;
  run.losses = std::move(losses);
  std::vector<float> initial(delta.size(), 1.0f), final(delta.size());
  for (size_t i = 0; i < delta.size(); ++i) final[i] = 1.0f + delta[i];
  run.initial = {Tensor("w", initial), Tensor("w.momentum", std::vector<float>(delta.size()))};
  run.final = {Tensor("w", final), Tensor("w.momentum", delta)};
  return run;
}

TEST(CompareRunsTest, EqualRunsPass) {
  const TrainRun a = HandRun({0.01f, -0.02f, 0.005f});
  const ParityReport report = CompareRuns(a, a, Tolerance());
  EXPECT_TRUE(report.ok()) << report.DebugString();
  EXPECT_EQ(report.worst_update_rtol, 0);
  EXPECT_EQ(report.worst_loss_rtol, 0);
  EXPECT_EQ(FirstBitwiseDifference(a, a), "");
}

TEST(CompareRunsTest, AnUpdateOffByMoreThanTheToleranceOfItsTensorsLargestFails) {
  // The largest change is 0.02; 1e-3 of it is 2e-5. Element 2 is off by about 5e-5.
  const TrainRun want = HandRun({0.01f, -0.02f, 0.005f});
  const TrainRun got = HandRun({0.01f, -0.02f, 0.00505f});
  Tolerance tol;
  tol.update_rtol = 1e-3;
  const ParityReport report = CompareRuns(got, want, tol);
  ASSERT_FALSE(report.ok());
  EXPECT_THAT(report.DebugString(), HasSubstr("tensor 'w': 1 of 3 elements off"));
  EXPECT_THAT(report.DebugString(), HasSubstr("worst [2]"));
  EXPECT_NEAR(report.worst_update_rtol, 5e-5 / 0.02, 1e-4);
  tol.update_rtol = 5e-3;
  EXPECT_TRUE(CompareRuns(got, want, tol).ok());
  EXPECT_THAT(FirstBitwiseDifference(got, want), HasSubstr("tensor 'w' differs"));
}

TEST(CompareRunsTest, ALossOffByMoreThanItsToleranceFailsAndNaNNeverPasses) {
  const TrainRun want = HandRun({0.01f}, {2.0, 1.5});
  Tolerance tol;
  tol.loss_rtol = 1e-4;
  EXPECT_TRUE(CompareRuns(HandRun({0.01f}, {2.0, 1.50001}), want, tol).ok());
  const ParityReport report = CompareRuns(HandRun({0.01f}, {2.0, 1.5003}), want, tol);
  EXPECT_THAT(report.DebugString(), HasSubstr("step 1: loss 1.5003, the reference 1.5"));
  EXPECT_FALSE(CompareRuns(HandRun({0.01f}, {2.0, NAN}), want, tol).ok());
  EXPECT_FALSE(CompareRuns(HandRun({NAN}), want, tol).ok());
  EXPECT_THAT(FirstBitwiseDifference(HandRun({0.01f}, {2.0, 1.5000001}), want),
              HasSubstr("step 1 loss"));
}

TEST(CompareRunsTest, OutliersAreCountedAmongParametersOnlyAndBounded) {
  // 200 elements moving 0.001 each; one (element 7) goes the other way, as a parameter whose
  // gradient is rounding noise may under Adam.
  std::vector<float> delta(200, 0.001f);
  const TrainRun want = HandRun(delta);
  delta[7] = -0.001f;
  const TrainRun got = HandRun(delta);
  Tolerance tol;
  tol.update_rtol = 1e-2;
  EXPECT_FALSE(CompareRuns(got, want, tol).ok()) << "no outliers allowed by default";
  tol.outlier_fraction = 0.01;
  tol.outlier_bound = 0.0025;
  const ParityReport report = CompareRuns(got, want, tol);
  // The parameter's element is an allowed outlier; its momentum (optimizer state) never is.
  EXPECT_EQ(report.outliers, 1);
  EXPECT_EQ(report.outlier_candidates, 200);
  ASSERT_EQ(report.failures.size(), 1u) << report.DebugString();
  EXPECT_THAT(report.failures[0], HasSubstr("tensor 'w.momentum'"));
  // Too far: beyond outlier_bound.
  tol.outlier_bound = 0.001;
  EXPECT_THAT(CompareRuns(got, want, tol).DebugString(), HasSubstr("the farthest by 0.002"));
  // Too many: 3 of 200 is more than 1%.
  tol.outlier_bound = 0.0025;
  std::vector<float> many(200, 0.001f);
  many[1] = many[2] = many[3] = -0.001f;
  TrainRun three = HandRun(many);
  three.final[1] = want.final[1];  // Momentum as the reference: only the outliers differ.
  EXPECT_THAT(CompareRuns(three, want, tol).DebugString(),
              HasSubstr("3 of 200 parameter and buffer elements off (at most 0.01"));
  TrainRun one = got;
  one.final[1] = want.final[1];
  EXPECT_TRUE(CompareRuns(one, want, tol).ok()) << CompareRuns(one, want, tol).DebugString();
}

// ---- The CeilConcatNet ----------------------------------------------------------------

TEST(CeilConcatNetTest, PoolsInCeilModeConcatenatesAndSaturatesItsReLU6) {
  const graph::Graph g = CeilConcatNet(8);
  EXPECT_EQ(g.tensor(g.FindTensor("pool1")).shape, (graph::Shape{8, 8, 8, 8}));
  EXPECT_EQ(g.tensor(g.FindTensor("branch_c.pool")).shape, (graph::Shape{8, 8, 8, 8}));
  EXPECT_EQ(g.tensor(g.FindTensor("mixed")).shape, (graph::Shape{8, 14, 8, 8}));
  EXPECT_EQ(g.tensor(g.FindTensor("pool2")).shape, (graph::Shape{8, 14, 4, 4}));
  std::unique_ptr<Backend> cpu = cpu::CreateCpuBackend();
  TrainerOptions options;
  options.initial_values = CeilConcatInitialValues();
  options.capture = {"branch_b.scale"};
  absl::StatusOr<TrainRun> run = Train(g, cpu.get(), options, 1);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->captured.size(), 1u);
  const HostTensor& scaled = run->captured[0];
  int64_t above = 0, below = 0;
  for (int64_t i = 0; i < scaled.num_elements(); ++i) {
    above += scaled.f32()[i] > 6;
    below += scaled.f32()[i] < 0;
  }
  // Both flat parts of ReLU6 take a tenth of the inputs at least.
  EXPECT_GT(above * 10, scaled.num_elements()) << above << " of " << scaled.num_elements();
  EXPECT_GT(below * 10, scaled.num_elements()) << below << " of " << scaled.num_elements();
}

// ---- Every CUDA parity case, on the CPU -------------------------------------------------

class ParityCaseTest : public ::testing::TestWithParam<ParityCase> {
 protected:
  // Returns `c` trained on a fresh CPU backend with `options`.
  static TrainRun Cpu(const ParityCase& c, const graph::Graph& g, const TrainerOptions& options) {
    std::unique_ptr<Backend> cpu = cpu::CreateCpuBackend();
    absl::StatusOr<TrainRun> run = Train(g, cpu.get(), options, c.steps);
    CHECK(run.ok()) << c.name << ": " << run.status();
    return *std::move(run);
  }
};

TEST_P(ParityCaseTest, SectionedWithOffloadIsBitwisePlainAndTheToleranceIsRight) {
  const ParityCase& c = GetParam();
  const graph::Graph g = c.graph();
  const TrainRun plain = Cpu(c, g, OptionsOf(c));
  for (const uint64_t high_water : plain.high_water_bytes) {
    EXPECT_EQ(high_water, plain.planned_peak_bytes) << c.name;
  }

  // What the CUDA test asks of CUDA: sections and offload change memory, never math.
  TrainerOptions sectioned_options = OptionsOf(c);
  sectioned_options.cuts = SqrtCutsWithOffload(g, c.optimizer);
  const TrainRun sectioned = Cpu(c, g, sectioned_options);
  EXPECT_GT(sectioned.sections, 1) << c.name;
  EXPECT_GT(sectioned.recomputed_nodes, 0) << c.name;
  EXPECT_GT(sectioned.offloaded_bytes, 0u) << c.name;
  EXPECT_EQ(FirstBitwiseDifference(sectioned, plain), "") << c.name;

  // Rounding noise (1e-6 of every initial weight) carried through training stays within
  // the tolerance, and moves something (the runs are not bitwise the same).
  TrainerOptions perturbed_options = OptionsOf(c);
  perturbed_options.initial_values =
      PerturbedInitialState(g, perturbed_options.seed, c.initial_values, 1e-6);
  const TrainRun perturbed = Cpu(c, g, perturbed_options);
  const ParityReport noise = CompareRuns(perturbed, plain, c.tolerance);
  EXPECT_TRUE(noise.ok()) << c.name << ": " << noise.DebugString();
  EXPECT_GT(noise.worst_update_rtol + noise.worst_loss_rtol, 0) << c.name;
  std::cout << c.name << " with 1e-6 noise: " << noise.DebugString() << "\n";

  // A 2% error in the learning rate fails (where updates are compared).
  if (!c.tolerance.compare_state) return;
  TrainerOptions off_options = OptionsOf(c);
  off_options.optimizer_params.learning_rate *= 1.02;
  const ParityReport off = CompareRuns(Cpu(c, g, off_options), plain, c.tolerance);
  EXPECT_FALSE(off.ok()) << c.name << ": " << off.DebugString();
  std::cout << c.name << " with lr x 1.02: " << off.DebugString().substr(0, 300) << "\n";
}

// The tightest budget the CUDA test plans resnet18 and the transformer under forces sections
// on the CPU backend too, and changes nothing of the math.
TEST(BudgetOptionsTest, ForcesSectionsAndIsBitwisePlain) {
  for (const ParityCase& c : ParityCases()) {
    if (c.name != "resnet18" && c.name != "transformer") continue;
    const graph::Graph g = c.graph();
    std::unique_ptr<Backend> cpu = cpu::CreateCpuBackend();
    absl::StatusOr<TrainRun> plain = Train(g, cpu.get(), OptionsOf(c), c.steps);
    ASSERT_TRUE(plain.ok()) << c.name << ": " << plain.status();
    TrainerOptions options;
    absl::StatusOr<TrainRun> budgeted = TrainUnderTightBudget(
        c, g, []() -> absl::StatusOr<std::unique_ptr<Backend>> { return cpu::CreateCpuBackend(); },
        plain->planned_peak_bytes, &options);
    ASSERT_TRUE(budgeted.ok()) << c.name << ": " << budgeted.status();
    EXPECT_GT(budgeted->sections, 1) << c.name;
    EXPECT_GT(budgeted->offloaded_bytes, 0u) << c.name;
    EXPECT_LE(budgeted->planned_peak_bytes, options.budget_bytes) << c.name;
    EXPECT_EQ(FirstBitwiseDifference(*budgeted, *plain), "") << c.name;
    std::cout << c.name << " under " << options.budget_bytes << " B (plain "
              << plain->planned_peak_bytes << " B): " << budgeted->sections << " sections, "
              << budgeted->offloaded_bytes / c.steps << " B offloaded per step\n";
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ParityCaseTest, ::testing::ValuesIn(ParityCases()),
                         [](const ::testing::TestParamInfo<ParityCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace headroom::executor::parity
