// The budgeted choice between rebuilding and keeping reversible blocks: at every budget of a
// grid the answer fits (its peak re-planned here), and is no slower than rebuilding every
// block or checkpointing alone where those fit; some budget takes a partial rebuild set.
#include "planner/reversible_search.h"

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "graph/graph.h"
#include "graph/reversible_testing.h"
#include "gtest/gtest.h"
#include "planner/memory_planner.h"
#include "planner/placement_testing.h"
#include "planner/reversible.h"

namespace headroom::planner {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

graph::RevChainOptions EightBlocks() {
  graph::RevChainOptions o;
  o.blocks = 8;
  o.batch = 8;
  o.half_channels = 8;
  o.size = 16;
  return o;
}

std::unique_ptr<ReversibleSearch> Search(const graph::Graph& g, const TrainingGraph& t,
                                         const CostModel& cost) {
  SearchOptions options;
  options.refine_max_plans = 20;
  absl::StatusOr<std::unique_ptr<ReversibleSearch>> s =
      ReversibleSearch::Create(g, t, cost, options, proto::OPTIMIZER_STATE_DEVICE);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(s).value();
}

// Chains follow the blocks' tensors: the 8-block chain is one chain; keep_1_in_k keeps the
// k-th of each run of k along it; a run of rebuilt blocks ends at a kept one.
TEST(ReversibleSearchTest, ChainsAndKeepOneInK) {
  const graph::Graph g = graph::RevChainGraph(EightBlocks());
  EXPECT_THAT(ChainPositions(g), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
  EXPECT_EQ(LongestChain(g), 8);
  EXPECT_THAT(KeepOneInK(g, 4), ElementsAre(0, 1, 2, 4, 5, 6));
  EXPECT_THAT(KeepOneInK(g, 2), ElementsAre(0, 2, 4, 6));
  EXPECT_TRUE(KeepOneInK(g, 1).empty());
  EXPECT_EQ(KeepOneInK(g, 8).size(), 7u);
  EXPECT_EQ(LongestRebuiltRun(g, KeepOneInK(g, 4)), 3);
  EXPECT_EQ(LongestRebuiltRun(g, {0, 1, 2, 3, 4, 5, 6, 7}), 8);
  EXPECT_EQ(LongestRebuiltRun(g, {0, 2, 3, 5}), 2);
  EXPECT_EQ(LongestRebuiltRun(g, {}), 0);
}

// Plan(budget, k): every answer keeps an activation at least every k blocks (no run of k
// rebuilt blocks) and fits, or no such plan fits (FailedPrecondition); k = 1 keeps every
// block. At the budget tried, the unrestricted choice rebuilds a run of at least 2 blocks
// (all 8: measured, the largest such budget of the grid is 800.8 KiB, where keeping one
// block of the 8 still fits and keeping more does not).
TEST(ReversibleSearchTest, KeepEveryKRestrictsTheRebuildSets) {
  const graph::Graph g = graph::RevChainGraph(EightBlocks());
  const TrainingGraph t = Training(g);
  const RooflineCostModel cost(g, DevicePreset("cpu").value());
  std::unique_ptr<ReversibleSearch> search = Search(g, t, cost);
  const SectionPlan plain = search->Unconstrained().value();
  const uint64_t smallest = search->MinimumPeakBytes().value();
  // The largest budget of a grid from the smallest peak up whose choice rebuilds a run.
  uint64_t budget = 0;
  SectionPlan free_choice;
  for (int i = 0; i <= 6; ++i) {
    const uint64_t b = smallest + (plain.peak_bytes - smallest) * i / 48;
    SectionPlan choice = search->Plan(b).value();
    if (LongestRebuiltRun(g, choice.rebuilt_blocks) < 2) continue;
    budget = b;
    free_choice = std::move(choice);
  }
  ASSERT_GT(budget, 0u) << "no budget of the grid rebuilds two blocks in a row";
  std::cout << "budget " << budget << ": free choice '" << free_choice.strategy << "' rebuilds "
            << free_choice.rebuilt_blocks.size() << ", longest run "
            << LongestRebuiltRun(g, free_choice.rebuilt_blocks) << "\n";
  for (int32_t k : {8, 4, 2, 1}) {
    absl::StatusOr<SectionPlan> plan = search->Plan(budget, k);
    // Keeping one block of the eight fits here (and is added to the pool when asked for).
    if (k == 8) ASSERT_TRUE(plan.ok()) << plan.status();
    if (!plan.ok()) {
      std::cout << "k " << k << ": " << plan.status() << "\n";
      EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition) << plan.status();
      continue;
    }
    std::cout << "k " << k << ": '" << plan->strategy << "', rebuilt "
              << plan->rebuilt_blocks.size() << ", peak " << plan->peak_bytes << " B, "
              << plan->step_seconds << " s\n";
    EXPECT_LT(LongestRebuiltRun(g, plan->rebuilt_blocks), k) << "k " << k;
    EXPECT_LE(plan->peak_bytes, budget) << "k " << k;
    // The restriction only removes choices.
    EXPECT_GE(plan->step_seconds, free_choice.step_seconds) << "k " << k;
  }
  // With room, k = 1 keeps every block; keep_1_in_8 is in the pool once asked for.
  EXPECT_TRUE(search->Plan(plain.peak_bytes, 1)->rebuilt_blocks.empty());
  bool in_pool = false;
  for (const RebuildCandidate& c : search->RebuildCandidates()) {
    in_pool |= c.rebuilt_blocks == KeepOneInK(g, 8);
  }
  EXPECT_TRUE(in_pool);
}

TEST(ReversibleSearchTest, ChoiceFitsAndIsNoSlowerThanEitherAlone) {
  const graph::Graph g = graph::RevChainGraph(EightBlocks());
  const TrainingGraph t = Training(g);
  const RooflineCostModel cost(g, DevicePreset("cpu").value());
  std::unique_ptr<ReversibleSearch> search = Search(g, t, cost);
  const SectionPlan plain = search->Unconstrained().value();
  const SectionPlan all = search->RebuildAll().value();
  EXPECT_EQ(all.rebuilt_blocks.size(), 8u);
  ASSERT_LT(all.peak_bytes, plain.peak_bytes);
  ASSERT_GT(all.step_seconds, plain.step_seconds);
  int partial = 0;
  constexpr int kBudgets = 6;
  // From the smallest peak any plan reaches (below every block rebuilt: its step keeps each
  // batch norm's saved statistics from the forward to the block's backward) to keeping
  // everything.
  const uint64_t smallest = search->MinimumPeakBytes().value();
  ASSERT_LE(smallest, all.peak_bytes);
  for (int i = 0; i <= kBudgets; ++i) {
    const uint64_t budget = smallest + (plain.peak_bytes - smallest) * i / kBudgets;
    absl::StatusOr<SectionPlan> chosen = search->Plan(budget);
    ASSERT_TRUE(chosen.ok()) << "budget " << budget << ": " << chosen.status();
    // Its peak is the arena its own step plans to, and fits.
    const MemoryPlan replanned = PlanScheduledGraph(chosen->step->graph, chosen->step->schedule,
                                                    kDefaultAlignmentBytes, DefaultStrategies())
                                     .value();
    EXPECT_EQ(replanned.arena_bytes, chosen->peak_bytes) << "budget " << budget;
    EXPECT_LE(chosen->peak_bytes, budget);
    // No slower than every block rebuilt where that fits ...
    if (all.peak_bytes <= budget) {
      EXPECT_LE(chosen->step_seconds, all.step_seconds) << "budget " << budget;
    }
    // ... nor than checkpointing alone where that fits.
    absl::StatusOr<SectionPlan> kept = search->PlanKeepingBlocks(budget);
    if (kept.ok()) {
      EXPECT_LE(chosen->step_seconds, kept->step_seconds) << "budget " << budget;
    } else {
      EXPECT_EQ(kept.status().code(), absl::StatusCode::kFailedPrecondition);
    }
    // A rebuild plan's step holds exactly the rebuilds of its blocks.
    int rebuild_nodes = 0;
    for (const TrainingNode& n : chosen->step->graph.nodes()) {
      rebuild_nodes += n.kind == NodeKind::kRebuild ? 1 : 0;
    }
    EXPECT_EQ(rebuild_nodes, 2 * static_cast<int>(chosen->rebuilt_blocks.size()));
    if (!chosen->rebuilt_blocks.empty() && chosen->rebuilt_blocks.size() < 8) ++partial;
  }
  // Between the two ends some budget is met fastest by rebuilding only some blocks.
  EXPECT_GT(partial, 0);
  // With room for everything kept, nothing is rebuilt.
  const SectionPlan roomy = search->Plan(plain.peak_bytes).value();
  EXPECT_TRUE(roomy.rebuilt_blocks.empty());
  EXPECT_EQ(roomy.step_seconds, plain.step_seconds);
}

TEST(ReversibleSearchTest, KeepOneInKKeepsThoseBlocks) {
  const graph::Graph g = graph::RevChainGraph(EightBlocks());
  const TrainingGraph t = Training(g);
  const RooflineCostModel cost(g, DevicePreset("cpu").value());
  std::unique_ptr<ReversibleSearch> search = Search(g, t, cost);
  std::vector<std::string> names;
  for (const RebuildCandidate& c : search->RebuildCandidates()) {
    names.push_back(c.name);
    if (c.name == "keep_1_in_3") {
      EXPECT_THAT(c.rebuilt_blocks, ElementsAre(0, 1, 3, 4, 6, 7));
      EXPECT_THAT(BlockNames(g, c.rebuilt_blocks, false), ElementsAre("b2", "b5"));
    }
  }
  EXPECT_THAT(absl::StrJoin(names, " "), HasSubstr("keep_1_in_3"));
  EXPECT_THAT(absl::StrJoin(names, " "), HasSubstr("rebuild_all"));
  // Fastest first.
  const std::vector<RebuildCandidate> c = search->RebuildCandidates();
  for (size_t i = 1; i < c.size(); ++i) EXPECT_LE(c[i - 1].step_seconds, c[i].step_seconds);
}

// Rebuilding one block of two: the kept block's backward reads the forward's tensors, the
// rebuilt one's its rebuilt copies, and the kept block's inputs (the rebuilt block's outputs)
// are the forward's.
TEST(ReversibleSearchTest, PartialRebuildWritesOnlyItsBlocks) {
  graph::RevChainOptions o;
  o.batch_norm = false;
  const graph::Graph g = graph::RevChainGraph(o);
  const TrainingGraph t = Training(g);
  const RooflineCostModel cost(g, DevicePreset("cpu").value());
  ReversibleOptions rebuild_b0;
  rebuild_b0.blocks = {0};
  const ReversibleStep step = ExpandReversible(g, t, cost, rebuild_b0).value();
  std::vector<std::string> rebuilds;
  for (const TrainingNode& n : step.step.graph.nodes()) {
    if (n.kind == NodeKind::kRebuild || n.kind == NodeKind::kRecompute) {
      rebuilds.push_back(n.name);
    }
  }
  EXPECT_THAT(rebuilds, ElementsAre("b0.g.conv.rebuild", "b0.g.relu.rebuild", "b0.x2.rebuild",
                                    "b0.f.conv.rebuild", "b0.f.relu.rebuild", "b0.x1.rebuild"))
      << absl::StrJoin(rebuilds, " ");
  // b0's rebuild starts from b1's inputs as the forward wrote them (b1 kept them).
  const TrainingGraph& s = step.step.graph;
  const TrainingNode& x2 = s.node(s.FindNode("b0.x2.rebuild"));
  EXPECT_EQ(s.tensor(x2.inputs[0]).name, "b0.y2");
  EXPECT_THAT(BlockNames(g, step.rebuilt_blocks, true), ElementsAre("b0"));
  EXPECT_THAT(BlockNames(g, step.rebuilt_blocks, false), ElementsAre("b1"));
}

TEST(ReversibleSearchTest, BudgetBelowEveryCandidateNamesTheSmallest) {
  const graph::Graph g = graph::RevChainGraph(EightBlocks());
  const TrainingGraph t = Training(g);
  const RooflineCostModel cost(g, DevicePreset("cpu").value());
  std::unique_ptr<ReversibleSearch> search = Search(g, t, cost);
  const absl::StatusOr<SectionPlan> plan = search->Plan(1000);
  ASSERT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition) << plan.status();
  EXPECT_THAT(plan.status().message(), HasSubstr("the smallest needs"));
  EXPECT_LE(search->MinimumPeakBytes().value(), search->RebuildAll().value().peak_bytes);
}

TEST(ReversibleSearchTest, GraphWithoutBlocksIsRefused) {
  graph::RevChainOptions o;
  o.declare = false;
  const graph::Graph g = graph::RevChainGraph(o);
  const TrainingGraph t = Training(g);
  const RooflineCostModel cost(g, DevicePreset("cpu").value());
  const auto s = ReversibleSearch::Create(g, t, cost, {}, proto::OPTIMIZER_STATE_DEVICE);
  ASSERT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("declares no reversible block"));
}

}  // namespace
}  // namespace headroom::planner
