// Reversible blocks on the CPU backend: a step that rebuilds every block (planner/
// reversible.h) against the same step keeping everything. The gradients agree within float32
// rounding (the post's check: under 1e-6), batch-norm running statistics are updated once
// per step, dropout replays its mask bit for bit, and the arena's measured peak is the plan's.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "executor/cpu/cpu_backend.h"
#include "executor/trainer.h"
#include "graph/graph.h"
#include "graph/reversible_testing.h"
#include "graph/zoo.h"
#include "gtest/gtest.h"
#include "util/check.h"

namespace headroom::executor {
namespace {

struct TrainRun {
  std::vector<HostTensor> initial;
  std::vector<HostTensor> state;
  std::vector<StepResult> steps;
  uint64_t predicted_peak_bytes = 0;
  int rebuild_nodes = 0;
  std::string strategy;
  std::vector<int32_t> rebuilt_blocks;
};

// Trains `steps` steps of `forward` from seed 7 with plain SGD at learning rate `lr`
// (momentum 0, so the first step moves each parameter by exactly lr * its gradient).
// With `budget_bytes`, the planner chooses what to rebuild (rebuild: true) or how to fit
// keeping every block.
TrainRun Train(const graph::Graph& forward, bool rebuild, int steps, double lr = 1,
               int64_t check_every = 0, uint64_t budget_bytes = 0, double momentum = 0) {
  std::unique_ptr<Backend> backend = cpu::CreateCpuBackend();
  TrainerOptions options;
  options.seed = 7;
  options.rebuild_reversible = rebuild;
  options.budget_bytes = budget_bytes;
  options.check_rebuild_every = check_every;
  options.optimizer_params.learning_rate = lr;
  options.optimizer_params.momentum = momentum;
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(forward, backend.get(), options);
  CHECK(trainer.ok()) << trainer.status();
  TrainRun run;
  run.initial = (*trainer)->State().value();
  run.predicted_peak_bytes = (*trainer)->plan().peak_bytes;
  run.strategy = (*trainer)->plan().strategy;
  run.rebuilt_blocks = (*trainer)->plan().rebuilt_blocks;
  for (const planner::TrainingNode& n : (*trainer)->plan().step->graph.nodes()) {
    run.rebuild_nodes += n.kind == planner::NodeKind::kRebuild;
  }
  for (int i = 0; i < steps; ++i) {
    absl::StatusOr<StepResult> r = (*trainer)->Step();
    CHECK(r.ok()) << r.status();
    run.steps.push_back(*r);
  }
  run.state = (*trainer)->State().value();
  return run;
}

// A chain of `blocks` reversible blocks at `batch`, `half_channels` and `size` x `size`.
graph::Graph Chain(int blocks, int batch, int half_channels, int size) {
  graph::RevChainOptions o;
  o.blocks = blocks;
  o.batch = batch;
  o.half_channels = half_channels;
  o.size = size;
  return graph::RevChainGraph(o);
}

bool IsRunningStat(const std::string& name) { return name.find("running_") != std::string::npos; }

// Returns the largest |a - b| over the float32 parameters (not running statistics).
double MaxParameterDifference(const std::vector<HostTensor>& a, const std::vector<HostTensor>& b) {
  CHECK(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].name == b[i].name);
    if (IsRunningStat(a[i].name) || a[i].dtype != proto::DTYPE_FLOAT32) continue;
    for (int64_t k = 0; k < a[i].num_elements(); ++k) {
      worst = std::max(worst, static_cast<double>(std::fabs(a[i].f32()[k] - b[i].f32()[k])));
    }
  }
  return worst;
}

void ExpectPredictedIsMeasured(const TrainRun& run, const std::string& what) {
  for (const StepResult& s : run.steps) {
    EXPECT_EQ(s.arena_high_water_bytes, run.predicted_peak_bytes)
        << what << " step " << s.step << ": measured high-water mark vs planned peak";
  }
}

// The post's check: one block at small sizes; the gradients of the step that rebuilds the
// block against the true ones (the step that keeps everything). Read as the first step's
// parameter change at learning rate 1, momentum 0: p1 = p0 - g, so the parameters differ by
// the gradients' difference plus the rounding of p0 - g (half an ulp of p1, below 6e-8 here).
TEST(ReversibleExecutorTest, OneBlockGradientsMatchWithin1e6) {
  const graph::Graph g = Chain(1, 4, 3, 5);
  const TrainRun keep = Train(g, false, 1);
  const TrainRun rebuild = Train(g, true, 1);
  ASSERT_EQ(keep.rebuild_nodes, 0);
  ASSERT_EQ(rebuild.rebuild_nodes, 2);
  // The gradients are not zero: the step moved the parameters.
  EXPECT_GT(MaxParameterDifference(keep.initial, keep.state), 1e-3);
  const double diff = MaxParameterDifference(keep.state, rebuild.state);
  std::cout << "one block: max |g_rebuilt - g_true| = " << diff << "\n";
  EXPECT_LT(diff, 1e-6);
  EXPECT_EQ(keep.steps[0].loss, rebuild.steps[0].loss) << "the forward pass is the same";
  ExpectPredictedIsMeasured(keep, "keep");
  ExpectPredictedIsMeasured(rebuild, "rebuild");
}

// A chain of 8 blocks in float32 (the CPU backend has no float64): the rebuild error grows
// with depth; the bound stated here is 1e-5.
TEST(ReversibleExecutorTest, EightBlockGradientsMatchWithin1e5) {
  const graph::Graph g = Chain(8, 4, 3, 5);
  const TrainRun keep = Train(g, false, 1);
  const TrainRun rebuild = Train(g, true, 1, 1, /*check_every=*/1);
  ASSERT_EQ(rebuild.rebuild_nodes, 16);
  const double diff = MaxParameterDifference(keep.state, rebuild.state);
  std::cout << "8 blocks: max |g_rebuilt - g_true| = " << diff
            << ", max_rebuild_error = " << rebuild.steps[0].max_rebuild_error << "\n";
  EXPECT_LT(diff, 1e-5);
  EXPECT_GE(rebuild.steps[0].max_rebuild_error, 0) << "the step was checked";
  EXPECT_LT(rebuild.steps[0].max_rebuild_error, 1e-5);
  ExpectPredictedIsMeasured(rebuild, "rebuild");
  // Rebuilding keeps less than keeping everything.
  EXPECT_LT(rebuild.predicted_peak_bytes, keep.predicted_peak_bytes);
}

// Batch norm's running statistics are updated once per step: by the forward, never by the
// rebuild's re-run of F and G. After one step they are bitwise those of the step that keeps
// everything (whose forward is the same); a second update would move them again.
TEST(ReversibleExecutorTest, BatchNormStatisticsUpdatedOncePerStep) {
  graph::RevChainOptions o;
  o.blocks = 2;
  o.batch = 4;
  const graph::Graph g = graph::RevChainGraph(o);
  const TrainRun keep = Train(g, false, 1);
  const TrainRun rebuild = Train(g, true, 1);
  int stats = 0;
  for (size_t i = 0; i < keep.state.size(); ++i) {
    if (!IsRunningStat(keep.state[i].name)) continue;
    ++stats;
    EXPECT_NE(keep.state[i].bytes, keep.initial[i].bytes) << keep.state[i].name << " moved";
    EXPECT_EQ(keep.state[i].bytes, rebuild.state[i].bytes) << keep.state[i].name;
  }
  EXPECT_EQ(stats, 8);  // 2 blocks x (F, G) x (mean, var).
}

// Dropout inside F and G: the rebuild replays each mask bit for bit (checked against the
// forward's copies every step), and the gradients still agree.
TEST(ReversibleExecutorTest, DropoutMaskReplayedBitwise) {
  graph::RevChainOptions o;
  o.blocks = 2;
  o.batch = 4;
  o.dropout = 0.3;
  const graph::Graph g = graph::RevChainGraph(o);
  const TrainRun keep = Train(g, false, 3, 0.05);
  const TrainRun rebuild = Train(g, true, 3, 0.05, /*check_every=*/1);
  for (const StepResult& s : rebuild.steps) {
    EXPECT_GE(s.max_rebuild_error, 0) << "step " << s.step << " checked";
    EXPECT_LT(s.max_rebuild_error, 1e-5) << "step " << s.step;
    EXPECT_EQ(s.rebuild_mismatches, 0) << "step " << s.step << ": a mask differs";
  }
  EXPECT_LT(MaxParameterDifference(keep.state, rebuild.state), 1e-6);
  ExpectPredictedIsMeasured(rebuild, "rebuild with dropout");
}

// Measured peak equals predicted, and the plan is flat in depth where keeping grows.
TEST(ReversibleExecutorTest, MeasuredPeakIsPlannedAndFlatInDepth) {
  auto peaks = [](int blocks) {
    const graph::Graph g = Chain(blocks, 8, 8, 16);
    const TrainRun keep = Train(g, false, 2, 0.01);
    const TrainRun rebuild = Train(g, true, 2, 0.01);
    ExpectPredictedIsMeasured(keep, "keep");
    ExpectPredictedIsMeasured(rebuild, "rebuild");
    for (int i = 0; i < 2; ++i) {
      EXPECT_NEAR(keep.steps[i].loss, rebuild.steps[i].loss, 1e-5) << blocks << " step " << i;
    }
    std::cout << blocks << " blocks: keep peak " << keep.predicted_peak_bytes << " B, rebuild peak "
              << rebuild.predicted_peak_bytes << " B\n";
    return std::make_pair(keep.predicted_peak_bytes, rebuild.predicted_peak_bytes);
  };
  const auto [keep2, rebuild2] = peaks(2);
  const auto [keep8, rebuild8] = peaks(8);
  // 6 more blocks: keeping adds at least 6 x 4 activations of [8, 8, 16, 16] floats (64 KiB
  // each); rebuilding adds at most their persistent bytes: per block two 3x3 8->8
  // convolutions (2304 B each) and two batch norms (4 x 32 B each), three times over
  // (parameters, gradients, optimizer state).
  const uint64_t block_parameter_bytes = 2 * 2304 + 2 * 4 * 32;
  EXPECT_GT(keep8 - keep2, 6u * 4 * 65536);
  EXPECT_LE(rebuild8 - rebuild2, 6u * 3 * block_parameter_bytes);
}

// Under a budget below keeping everything the planner chooses per block, with cuts: the
// plan it chooses runs, its measured peak is its planned one and within the budget, the
// rebuilt tensors match the forward's, and the losses follow keeping everything.
TEST(ReversibleExecutorTest, BudgetedChoiceRunsAsPlanned) {
  const graph::Graph g = Chain(8, 8, 8, 16);
  constexpr int kSteps = 4;
  const TrainRun keep = Train(g, false, kSteps, 0.01);
  const TrainRun all = Train(g, true, kSteps, 0.01);
  ASSERT_LT(all.predicted_peak_bytes, keep.predicted_peak_bytes);
  // Room for every block rebuilt: the choice is no slower, and may keep some blocks.
  const TrainRun chosen = Train(g, true, kSteps, 0.01, /*check_every=*/1, all.predicted_peak_bytes);
  std::cout << "budget " << all.predicted_peak_bytes << " B: plan '" << chosen.strategy << "', "
            << chosen.rebuilt_blocks.size() << " of 8 blocks rebuilt, peak "
            << chosen.predicted_peak_bytes << " B\n";
  EXPECT_FALSE(chosen.rebuilt_blocks.empty()) << chosen.strategy;
  EXPECT_EQ(chosen.rebuild_nodes, 2 * static_cast<int>(chosen.rebuilt_blocks.size()));
  EXPECT_LE(chosen.predicted_peak_bytes, all.predicted_peak_bytes);
  ExpectPredictedIsMeasured(chosen, "budgeted");
  for (int i = 0; i < kSteps; ++i) {
    EXPECT_GE(chosen.steps[i].max_rebuild_error, 0) << "step " << i << " checked";
    EXPECT_LT(chosen.steps[i].max_rebuild_error, 1e-5) << "step " << i;
    EXPECT_NEAR(chosen.steps[i].loss, keep.steps[i].loss, 1e-5) << "step " << i;
  }
}

// --max-rebuild-error with a threshold every rebuild passes: after each checked step the
// trainer replans keeping a block in every k (k = 8 / 2 = 4, then 2, then 1: everything), and
// goes on from the same step with the same state: the next step's loss (the forward pass,
// before any rebuild) is bitwise that of a run that never replanned, the error after the last
// replan is below the threshold (nothing is rebuilt), the losses go on within 1e-5 of that
// run's, and every step's measured peak is the plan it ran under.
TEST(ReversibleExecutorTest, ErrorAboveTheThresholdReplansKeepingOneBlockInK) {
  const graph::Graph g = Chain(8, 4, 3, 5);
  constexpr double kThreshold = 1e-12;
  constexpr int kSteps = 8;
  auto run = [&](double threshold, std::vector<StepResult>* steps) {
    std::unique_ptr<Backend> backend = cpu::CreateCpuBackend();
    TrainerOptions options;
    options.seed = 7;
    options.rebuild_reversible = true;
    options.check_rebuild_every = 1;
    options.max_rebuild_error = threshold;
    options.optimizer_params.learning_rate = 0.05;
    std::unique_ptr<Trainer> trainer = Trainer::Create(g, backend.get(), options).value();
    for (int i = 0; i < kSteps; ++i) {
      absl::StatusOr<StepResult> r = trainer->Step();
      CHECK(r.ok()) << r.status();
      EXPECT_EQ(r->arena_high_water_bytes, r->planned_peak_bytes) << "step " << i;
      steps->push_back(*r);
    }
    return trainer->replans();
  };
  std::vector<StepResult> plain, replanned;
  EXPECT_TRUE(run(0, &plain).empty()) << "no threshold, no replan";
  const std::vector<RebuildReplan> replans = run(kThreshold, &replanned);
  ASSERT_EQ(replans.size(), 3u);
  const int32_t ks[] = {4, 2, 1};
  const int32_t rebuilt_after[] = {6, 4, 0};
  for (size_t i = 0; i < replans.size(); ++i) {
    const RebuildReplan& r = replans[i];
    std::cout << "replan after step " << r.after_step << ": error " << r.error_before
              << " -> keep 1 in " << r.keep_every << ", rebuilt " << r.rebuilt_before << " -> "
              << r.rebuilt_after << " ('" << r.strategy << "', peak " << r.peak_bytes
              << " B), error after " << r.error_after << "\n";
    EXPECT_EQ(r.after_step, static_cast<int64_t>(i));
    EXPECT_EQ(r.keep_every, ks[i]);
    EXPECT_EQ(r.rebuilt_after, rebuilt_after[i]);
    EXPECT_TRUE(r.failure.empty()) << r.failure;
    EXPECT_GT(r.error_before, kThreshold);
    EXPECT_GE(r.error_after, 0) << "measured";
  }
  EXPECT_EQ(replans[0].rebuilt_before, 8);
  EXPECT_LT(replans.back().error_after, kThreshold);
  // The replan changes no state: the step after it sees the parameters the plain run has.
  EXPECT_EQ(replanned[1].loss, plain[1].loss) << "same parameters after the first replan";
  for (int i = 0; i < kSteps; ++i) {
    EXPECT_NEAR(replanned[i].loss, plain[i].loss, 1e-5 * plain[i].loss) << "step " << i;
  }
  for (int i = 4; i < kSteps; ++i) {
    EXPECT_EQ(replanned[i].max_rebuild_error, -1) << "step " << i << ": nothing rebuilt";
  }
  for (const StepResult& r : replanned) EXPECT_TRUE(std::isfinite(r.loss)) << "step " << r.step;
}

// The training target, 20 steps (`revnet_bench curve` runs 300): revnet38 at 16x16, batch
// 8, SGD with momentum, under a budget below its keep-everything peak (the peak of rebuilding
// every block; the planner's choice) and with every block rebuilt, against keeping everything from
// the same seed. The arena's measured high-water mark is the planned peak in every step; a plan
// that rebuilds nothing gives bitwise the same losses; rebuilding stays within 1e-3 relative.
TEST(ReversibleExecutorTest, RevNet38LossCurveUnderABudget) {
  absl::StatusOr<proto::GraphDef> def =
      graph::BuildZooModel(graph::ZooSpec("revnet38", 8, {{"image_size", 16}}));
  ASSERT_TRUE(def.ok()) << def.status();
  const graph::Graph g = graph::Graph::FromProto(*def).value();
  constexpr int kSteps = 20;
  const TrainRun keep = Train(g, false, kSteps, 0.01, 0, 0, 0.9);
  const TrainRun all = Train(g, true, kSteps, 0.01, /*check_every=*/5, 0, 0.9);
  // The budget: what rebuilding every block needs, below keeping everything.
  const uint64_t budget = all.predicted_peak_bytes;
  ASSERT_LT(budget, keep.predicted_peak_bytes);
  const TrainRun chosen = Train(g, true, kSteps, 0.01, /*check_every=*/5, budget, 0.9);
  EXPECT_LE(chosen.predicted_peak_bytes, budget);
  EXPECT_EQ(all.rebuilt_blocks.size(), g.reversible_blocks().size());
  ExpectPredictedIsMeasured(keep, "keep");
  ExpectPredictedIsMeasured(chosen, "budget");
  ExpectPredictedIsMeasured(all, "rebuild all");
  for (const TrainRun* run : {&chosen, &all}) {
    double worst = 0;
    for (int i = 0; i < kSteps; ++i) {
      const double rel = std::fabs(run->steps[i].loss - keep.steps[i].loss) / keep.steps[i].loss;
      worst = std::max(worst, rel);
      if (run->rebuilt_blocks.empty()) {
        EXPECT_EQ(run->steps[i].loss, keep.steps[i].loss) << run->strategy << " step " << i;
      }
    }
    double max_rebuild_error = -1;
    for (const StepResult& r : run->steps) {
      max_rebuild_error = std::max(max_rebuild_error, r.max_rebuild_error);
    }
    if (!run->rebuilt_blocks.empty()) {
      EXPECT_GE(max_rebuild_error, 0) << run->strategy << ": the rebuilds were checked";
      EXPECT_LT(max_rebuild_error, 1e-4) << run->strategy;
    }
    std::cout << "max_rebuild_error " << max_rebuild_error << "; ";
    std::cout << "plan '" << run->strategy << "' (" << run->rebuilt_blocks.size() << " of "
              << g.reversible_blocks().size() << " blocks rebuilt), peak "
              << run->predicted_peak_bytes << " B against " << keep.predicted_peak_bytes
              << " B kept: max relative loss difference " << worst << " over " << kSteps
              << " steps\n";
    EXPECT_LT(worst, 1e-3) << run->strategy;
  }
  EXPECT_LT(keep.steps.back().loss, keep.steps.front().loss) << "it trains";
}

}  // namespace
}  // namespace headroom::executor
