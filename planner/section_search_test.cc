// The search under budgets: monotone, exact peaks, honest infeasibility, and optimal against
// every set of cuts on small graphs.
#include "planner/section_search.h"

#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "graph/graph.h"
#include "graph/graph_builder.h"
#include "graph/zoo.h"
#include "graph/zoo_testing.h"
#include "gtest/gtest.h"

namespace headroom::planner {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

graph::Graph Zoo(const std::string& name, uint64_t batch,
                 const std::map<std::string, int64_t>& options = {}) {
  proto::ZooModel spec = graph::SmallZooSpec(name, batch);
  for (const auto& [k, v] : options) (*spec.mutable_options())[k] = v;
  absl::StatusOr<proto::GraphDef> def = graph::BuildZooModel(spec);
  EXPECT_TRUE(def.ok()) << def.status();
  absl::StatusOr<graph::Graph> g = graph::Graph::FromProto(*def);
  EXPECT_TRUE(g.ok()) << g.status();
  return std::move(g).value();
}

// A model, its training graph, a cost model and the search, kept together.
struct Fixture {
  explicit Fixture(graph::Graph g, const std::string& device = "h100", bool offload = true)
      : forward(std::move(g)),
        training(TrainingGraph::Build(forward, {}).value()),
        cost(forward, DevicePreset(device).value()) {
    SearchOptions options;
    options.allow_offload = offload;
    search = SectionSearch::Create(training, cost, options).value();
  }
  graph::Graph forward;
  TrainingGraph training;
  RooflineCostModel cost;
  std::unique_ptr<SectionSearch> search;
};

std::vector<uint64_t> Budgets(SectionSearch& search, int n) {
  const uint64_t lo = search.MinimumPeakBytes().value();
  const uint64_t hi = search.Unconstrained().value().peak_bytes;
  std::vector<uint64_t> budgets;
  for (int i = 0; i <= n; ++i) budgets.push_back(lo + (hi - lo) * i / n);
  return budgets;
}

TEST(SectionSearchTest, LargerBudgetsAreNeverSlowerAndAlwaysFit) {
  for (const std::string name : {"resnet18", "transformer", "mlp"}) {
    Fixture f(Zoo(name, 8, name == "mlp" ? std::map<std::string, int64_t>{{"depth", 12}, {"width", 256}}
                                         : std::map<std::string, int64_t>{}));
    double previous = 1e300;
    for (uint64_t budget : Budgets(*f.search, 24)) {
      absl::StatusOr<SectionPlan> plan = f.search->Plan(budget);
      ASSERT_TRUE(plan.ok()) << name << " " << budget << ": " << plan.status();
      EXPECT_LE(plan->peak_bytes, budget) << name;
      EXPECT_LE(plan->step_seconds, previous) << name << " at " << budget;
      previous = plan->step_seconds;
    }
  }
}

TEST(SectionSearchTest, ReportedPeakIsTheVerifiedArenaOfTheExpandedSchedule) {
  Fixture f(Zoo("resnet18", 8));
  for (uint64_t budget : Budgets(*f.search, 6)) {
    const SectionPlan plan = f.search->Plan(budget).value();
    // Planned again from the expanded step alone; PlanScheduledGraph runs the verifier.
    absl::StatusOr<MemoryPlan> again = PlanScheduledGraph(
        plan.step->graph, plan.step->schedule, kDefaultAlignmentBytes, DefaultStrategies());
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(plan.peak_bytes, again->arena_bytes);
    EXPECT_GE(plan.peak_bytes, again->lower_bound_bytes);
  }
}

TEST(SectionSearchTest, AnInfeasibleBudgetStatesTheSmallestThatWorks) {
  Fixture f(Zoo("resnet18", 8));
  const uint64_t smallest = f.search->MinimumPeakBytes().value();
  EXPECT_TRUE(f.search->Plan(smallest).ok());
  absl::StatusOr<SectionPlan> too_small = f.search->Plan(smallest - 1);
  ASSERT_FALSE(too_small.ok());
  EXPECT_EQ(too_small.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(too_small.status().message(), HasSubstr(std::to_string(smallest) + " bytes"));
  EXPECT_THAT(too_small.status().message(), HasSubstr("Parameters, buffers and optimizer state alone need"));
  EXPECT_THAT(too_small.status().message(), HasSubstr("parameter "));
  // Far below: the parameters alone do not fit.
  EXPECT_FALSE(f.search->Plan(1024).ok());
}

TEST(SectionSearchTest, NoSlowerThanAnyBaselineAtItsPeak) {
  for (const std::string device : {"cpu", "h100"}) {
    Fixture f(Zoo("resnet34", 8), device);
    const std::vector<TradeOffPoint> baselines = f.search->Baselines().value();
    ASSERT_EQ(baselines.size(), 3u);
    for (const TradeOffPoint& b : baselines) {
      const SectionPlan ours = f.search->Plan(b.peak_bytes).value();
      EXPECT_LE(ours.step_seconds, b.step_seconds) << device << " " << b.strategy;
    }
  }
}

TEST(SectionSearchTest, FrontierFallsInPeakAndRisesInTime) {
  Fixture f(Zoo("transformer", 4));
  const std::vector<TradeOffPoint> frontier = f.search->Frontier().value();
  ASSERT_GE(frontier.size(), 3u);
  EXPECT_EQ(frontier.front().peak_bytes, f.search->Unconstrained().value().peak_bytes);
  EXPECT_EQ(frontier.back().peak_bytes, f.search->MinimumPeakBytes().value());
  for (size_t i = 1; i < frontier.size(); ++i) {
    EXPECT_LT(frontier[i].peak_bytes, frontier[i - 1].peak_bytes);
    EXPECT_GT(frontier[i].step_seconds, frontier[i - 1].step_seconds);
  }
}

// Inner cuts (nested sections) reach below the smallest peak one re-forward per section can,
// only there: at every budget the search without them meets, the same plan.
void ExpectNestedOnlyBelowTheOldMinimum(const std::string& what, const graph::Graph& g) {
  const TrainingGraph training = TrainingGraph::Build(g, {}).value();
  const RooflineCostModel cost(g, DevicePreset("h100").value());
  SearchOptions flat_options;
  flat_options.allow_offload = false;
  flat_options.nested = false;
  SearchOptions nested_options = flat_options;
  nested_options.nested = true;
  std::unique_ptr<SectionSearch> flat = SectionSearch::Create(training, cost, flat_options).value();
  std::unique_ptr<SectionSearch> nested =
      SectionSearch::Create(training, cost, nested_options).value();
  const uint64_t old_min = flat->MinimumPeakBytes().value();
  const uint64_t new_min = nested->MinimumPeakBytes().value();
  std::cout << what << ": smallest peak " << old_min << " B, with inner cuts " << new_min << " B\n";
  EXPECT_LT(new_min, old_min) << what;
  const SectionPlan smallest = nested->Plan(new_min).value();
  EXPECT_FALSE(smallest.cuts.inner_cuts.empty()) << what;
  EXPECT_EQ(smallest.strategy, "nested") << what;
  EXPECT_LE(smallest.peak_bytes, new_min) << what;
  absl::StatusOr<MemoryPlan> again = PlanScheduledGraph(
      smallest.step->graph, smallest.step->schedule, kDefaultAlignmentBytes, DefaultStrategies());
  ASSERT_TRUE(again.ok()) << what << ": " << again.status();
  EXPECT_EQ(again->arena_bytes, smallest.peak_bytes) << what;
  EXPECT_FALSE(nested->Plan(new_min - 1).ok()) << what;
  const uint64_t hi = flat->Unconstrained().value().peak_bytes;
  for (int i = 0; i <= 6; ++i) {
    const uint64_t budget = old_min + (hi - old_min) * i / 6;
    const SectionPlan a = flat->Plan(budget).value();
    const SectionPlan b = nested->Plan(budget).value();
    EXPECT_EQ(a.cuts.cuts, b.cuts.cuts) << what << " at " << budget;
    EXPECT_EQ(a.cuts.keep, b.cuts.keep) << what << " at " << budget;
    EXPECT_TRUE(b.cuts.inner_cuts.empty()) << what << " at " << budget;
    EXPECT_EQ(a.peak_bytes, b.peak_bytes) << what << " at " << budget;
    EXPECT_EQ(a.step_seconds, b.step_seconds) << what << " at " << budget;
  }
  // The frontier extends to the new smallest peak; above the old one it is the same.
  const std::vector<TradeOffPoint> frontier = nested->Frontier().value();
  const std::vector<TradeOffPoint> flat_frontier = flat->Frontier().value();
  EXPECT_EQ(frontier.back().peak_bytes, new_min) << what;
  EXPECT_EQ(frontier.back().strategy, "nested") << what;
  ASSERT_GT(frontier.size(), flat_frontier.size()) << what;
  for (size_t i = 0; i < flat_frontier.size(); ++i) {
    EXPECT_EQ(frontier[i].peak_bytes, flat_frontier[i].peak_bytes) << what << " point " << i;
    EXPECT_EQ(frontier[i].step_seconds, flat_frontier[i].step_seconds) << what << " point " << i;
  }
}

TEST(SectionSearchTest, InnerCutsLowerTheSmallestPeakAndChangeNothingAboveTheOld) {
  ExpectNestedOnlyBelowTheOldMinimum("mlp depth 8",
                                     Zoo("mlp", 512, {{"depth", 8}, {"width", 256}}));
  ExpectNestedOnlyBelowTheOldMinimum("transformer 1 layer", Zoo("transformer", 8, {{"layers", 1}}));
}

// The search (recompute only) against every set of cuts, at budgets across the range: the
// pool alone finds the best cut set; refined, keeping tensors too, it is never slower.
// Cut sets only: below the smallest peak they reach, plans with inner cuts (SearchOptions::
// nested) are not held to the best cut set (on the depth-6 mlp a cut set the descent missed
// fits 18.5 MB at about 1.22x, where the nested plan takes 1.380x; docs/sections.md, Not
// done).
void ExpectOptimal(const graph::Graph& g) {
  Fixture f(g, "h100", /*offload=*/false);
  SearchOptions flat;
  flat.allow_offload = false;
  flat.nested = false;
  f.search = SectionSearch::Create(f.training, f.cost, flat).value();
  SearchOptions pool_only = flat;
  pool_only.refine = false;
  std::unique_ptr<SectionSearch> pool =
      SectionSearch::Create(f.training, f.cost, pool_only).value();
  for (uint64_t budget : Budgets(*f.search, 5)) {
    absl::StatusOr<ExhaustiveResult> best = ExhaustiveSearch(f.training, f.cost, budget);
    ASSERT_TRUE(best.ok()) << best.status();
    const SectionPlan cuts_only = pool->Plan(budget).value();
    EXPECT_NEAR(cuts_only.step_seconds, best->step_seconds, 1e-12 * best->step_seconds)
        << g.name() << " at " << budget << ": ours " << cuts_only.DebugString();
    const SectionPlan refined = f.search->Plan(budget).value();
    EXPECT_LE(refined.step_seconds, best->step_seconds * (1 + 1e-12))
        << g.name() << " at " << budget << ": ours " << refined.DebugString();
    EXPECT_LE(refined.peak_bytes, budget);
  }
}

// The resnet18 point: at 70% of what is not persistent state, the pool alone re-runs
// most of the network (1.265x); refined, the plan keeps convolution outputs and recomputes
// cheap tensors around them, within 2% of the best schedule a MILP found (1.029).
TEST(SectionSearchTest, RefinementKeepsTensorsAndClosesTheGap) {
  const graph::Graph g = [] {
    absl::StatusOr<proto::GraphDef> def =
        graph::BuildZooModel(graph::ZooSpec("resnet18", 16, {{"image_size", 64}}));
    return graph::Graph::FromProto(*def).value();
  }();
  const TrainingGraph t = TrainingGraph::Build(g, {}).value();
  const RooflineCostModel cost(g, DevicePreset("cpu").value());
  SearchOptions options;
  options.allow_offload = false;
  options.refine = false;
  std::unique_ptr<SectionSearch> pool = SectionSearch::Create(t, cost, options).value();
  options.refine = true;
  std::unique_ptr<SectionSearch> refined = SectionSearch::Create(t, cost, options).value();
  uint64_t state = 0;
  for (const TrainingTensor& tensor : t.tensors()) state += tensor.persistent() ? tensor.bytes : 0;
  const uint64_t plain = pool->Unconstrained().value().peak_bytes;
  const uint64_t budget = state + (plain - state) * 7 / 10;
  const SectionPlan before = pool->Plan(budget).value();
  const SectionPlan after = refined->Plan(budget).value();
  EXPECT_GT(before.overhead_ratio, 1.2);
  EXPECT_LE(after.overhead_ratio, 1.05) << after.DebugString();
  EXPECT_LE(after.peak_bytes, budget);
  EXPECT_EQ(after.strategy, "refined");
  size_t kept = 0;
  for (const SectionInfo& s : after.step->sections) kept += s.kept.size();
  EXPECT_GT(kept, 0u);
  // The reported peak is the verified arena of the refined schedule.
  absl::StatusOr<MemoryPlan> again = PlanScheduledGraph(
      after.step->graph, after.step->schedule, kDefaultAlignmentBytes, DefaultStrategies());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(after.peak_bytes, again->arena_bytes);
  // Asked again, the same plan; a larger budget is never slower.
  EXPECT_EQ(refined->Plan(budget).value().step_seconds, after.step_seconds);
  EXPECT_LE(refined->Plan(budget + (plain - budget) / 2).value().step_seconds, after.step_seconds);
  // With little work allowed, less is found, and what is found still fits.
  options.refine_max_work = 2000;
  std::unique_ptr<SectionSearch> starved = SectionSearch::Create(t, cost, options).value();
  const SectionPlan less = starved->Plan(budget).value();
  EXPECT_LE(less.peak_bytes, budget);
  EXPECT_GT(less.step_seconds, after.step_seconds);
  EXPECT_LE(less.step_seconds, before.step_seconds);
}

// small_cnn at 90% (h100, recompute only): the proven optimum (the oracle, 1.030) re-runs
// only conv1, just before bn1.backward. A cut after bn1 keeping bn1's three outputs says
// exactly that, and fits; but keeping any one of them alone spares nothing (bn1 re-runs for
// the other two), so the climb must be able to keep all of a node's outputs in one move.
TEST(SectionSearchTest, RefinementKeepsEveryOutputOfANodeAtOnce) {
  const graph::Graph g = [] {
    absl::StatusOr<proto::GraphDef> def = graph::BuildZooModel(graph::ZooSpec("small_cnn", 64));
    return graph::Graph::FromProto(*def).value();
  }();
  const TrainingGraph t = TrainingGraph::Build(g, {}).value();
  const RooflineCostModel cost(g, DevicePreset("h100").value());
  SearchOptions options;
  options.allow_offload = false;
  std::unique_ptr<SectionSearch> search = SectionSearch::Create(t, cost, options).value();
  uint64_t state = 0;
  for (const TrainingTensor& tensor : t.tensors()) state += tensor.persistent() ? tensor.bytes : 0;
  const uint64_t plain = search->Unconstrained().value().peak_bytes;
  const SectionPlan plan = search->Plan(state + (plain - state) * 9 / 10).value();
  EXPECT_LE(plan.overhead_ratio, 1.031) << plan.DebugString();
  std::vector<std::string> kept;
  for (TensorId k : plan.cuts.keep) kept.push_back(t.tensor(k).name);
  EXPECT_THAT(kept, ::testing::IsSupersetOf({"bn1", "bn1.saved_mean", "bn1.saved_invstd"}))
      << plan.DebugString();
}

TEST(SectionSearchTest, OptimalAgainstEveryCutSetOnAnMlp) {
  ExpectOptimal(Zoo("mlp", 512, {{"depth", 6}, {"width", 512}}));  // 12 forward nodes.
}

// stem -> two residual blocks (fc, relu, fc, add the block input, relu) -> head -> loss:
// 13 forward nodes, where skip connections cross cuts inside the blocks.
graph::Graph ResidualMlp() {
  graph::GraphBuilder b("residual_mlp");
  std::string x = b.Linear("stem", b.Input("x", {256, 128}), 128, 256);
  for (int i = 0; i < 2; ++i) {
    const std::string p = "block" + std::to_string(i);
    std::string y = b.Linear(p + ".fc1", x, 256, 512);
    y = b.Unary("ReLU", p + ".relu1", y);
    y = b.Linear(p + ".fc2", y, 512, 256);
    y = b.Add(p + ".add", y, x);
    x = b.Unary("ReLU", p + ".relu2", y);
  }
  x = b.Linear("head", x, 256, 10);
  b.Op("SoftmaxCrossEntropy", "loss", {x, b.Label("labels", {256})});
  b.SetLoss("loss");
  absl::StatusOr<graph::Graph> g = graph::Graph::FromProto(b.Build());
  EXPECT_TRUE(g.ok()) << g.status();
  return std::move(g).value();
}

TEST(SectionSearchTest, OptimalAgainstEveryCutSetWithSkipConnections) {
  ExpectOptimal(ResidualMlp());
}

TEST(SectionSearchTest, EqualAndLayerCuts) {
  EXPECT_THAT(SqrtCuts(16), ElementsAre(4, 8, 12));
  EXPECT_THAT(SqrtCuts(10), ElementsAre(3, 7));
  EXPECT_TRUE(SqrtCuts(1).empty());
  const graph::Graph g = Zoo("resnet18", 2);
  const TrainingGraph t = TrainingGraph::Build(g, {}).value();
  const std::vector<int32_t> layers = LayerCuts(t);
  // conv1 bn1 relu maxpool, eight blocks, then avgpool/flatten/fc/loss: a cut before every
  // block ("layer1.0" ...) and at each change among the stem and head names.
  int blocks = 0;
  for (int32_t c : layers) blocks += absl::StartsWith(t.node(c).name, "layer") ? 1 : 0;
  EXPECT_GE(blocks, 8);
  for (int32_t c : layers) {
    EXPECT_GT(c, 0);
    EXPECT_LT(c, NumForwardNodes(t));
  }
}

// The search made faster (the dynamic program's fast path, its bisection stopping at the
// first cuts that fit, its two passes on two threads) against the search as it was
// (SearchOptions::reference_search, one thread): the same pool, so the same frontier and, at
// every budget, the same plan to the byte and the last bit of its predicted time.
void ExpectSameAsReference(const std::string& label, const graph::Graph& g,
                           const std::string& device, bool offload, bool host_pool_in_budget,
                           bool refine) {
  SCOPED_TRACE(label + " on " + device + (offload ? ", offload" : ", recompute only") +
               (host_pool_in_budget ? ", host pool in budget" : "") + (refine ? ", refined" : ""));
  const TrainingGraph t = TrainingGraph::Build(g, {}).value();
  const RooflineCostModel cost(g, DevicePreset(device).value());
  SearchOptions fast;
  fast.allow_offload = offload;
  fast.host_pool_in_budget = host_pool_in_budget;
  fast.search_threads = 2;
  // Refinement starts from the pool's candidates; a little of it is enough to compare.
  fast.refine = refine;
  fast.refine_max_work = 100000;
  SearchOptions reference = fast;
  reference.reference_search = true;
  reference.search_threads = 1;
  std::unique_ptr<SectionSearch> a = SectionSearch::Create(t, cost, fast).value();
  std::unique_ptr<SectionSearch> b = SectionSearch::Create(t, cost, reference).value();
  ASSERT_EQ(a->num_candidates(), b->num_candidates());
  auto same_point = [](const TradeOffPoint& x, const TradeOffPoint& y) {
    return x.peak_bytes == y.peak_bytes && x.step_seconds == y.step_seconds &&
           x.strategy == y.strategy && x.num_sections == y.num_sections &&
           x.offloaded_bytes == y.offloaded_bytes;
  };
  // The pool's own candidates first (Baselines() lists those that are not the program's;
  // the smallest peak is the pool's after its descent), then plans and the frontier.
  const std::vector<TradeOffPoint> base_a = a->Baselines().value();
  const std::vector<TradeOffPoint> base_b = b->Baselines().value();
  ASSERT_EQ(base_a.size(), base_b.size());
  for (size_t i = 0; i < base_a.size(); ++i) EXPECT_TRUE(same_point(base_a[i], base_b[i])) << i;
  const uint64_t lo = a->MinimumPeakBytes().value();
  EXPECT_EQ(lo, b->MinimumPeakBytes().value());
  const uint64_t hi = a->Unconstrained().value().peak_bytes;
  int compared = 0;
  for (int i = 0; i <= 8; ++i) {
    const uint64_t budget = lo + (hi - lo) * i / 8;
    absl::StatusOr<SectionPlan> x = a->Plan(budget);
    absl::StatusOr<SectionPlan> y = b->Plan(budget);
    ASSERT_EQ(x.ok(), y.ok()) << budget;
    if (!x.ok()) continue;
    EXPECT_EQ(x->cuts.cuts, y->cuts.cuts) << budget;
    EXPECT_EQ(x->cuts.keep, y->cuts.keep) << budget;
    EXPECT_EQ(x->cuts.offload, y->cuts.offload) << budget;
    EXPECT_EQ(x->peak_bytes, y->peak_bytes) << budget;
    EXPECT_EQ(x->step_seconds, y->step_seconds) << budget;
    EXPECT_EQ(x->strategy, y->strategy) << budget;
    ++compared;
  }
  EXPECT_GT(compared, 0);
  EXPECT_EQ(a->num_candidates(), b->num_candidates());
  const std::vector<TradeOffPoint> fa = a->Frontier().value();
  const std::vector<TradeOffPoint> fb = b->Frontier().value();
  ASSERT_EQ(fa.size(), fb.size());
  for (size_t i = 0; i < fa.size(); ++i) {
    EXPECT_TRUE(same_point(fa[i], fb[i]))
        << i << ": " << fa[i].peak_bytes << " " << fa[i].step_seconds << " against "
        << fb[i].peak_bytes << " " << fb[i].step_seconds;
  }
}

TEST(SectionSearchTest, FastSearchFindsWhatTheReferenceFinds) {
  const graph::Graph resnet = Zoo("resnet18", 8);
  const graph::Graph transformer = Zoo("transformer", 8, {{"layers", 4}});
  const graph::Graph mlp = Zoo("mlp", 512, {{"depth", 24}, {"width", 256}});
  const graph::Graph residual = ResidualMlp();
  for (bool offload : {true, false}) {
    ExpectSameAsReference("resnet18", resnet, "h100", offload, false, false);
    ExpectSameAsReference("transformer 4 layers", transformer, "h100", offload, false, false);
    ExpectSameAsReference("mlp depth 24", mlp, "h100", offload, false, false);
    ExpectSameAsReference("residual mlp", residual, "cpu", offload, false, false);
  }
  ExpectSameAsReference("transformer 4 layers", transformer, "cpu", true, true, false);
  ExpectSameAsReference("resnet18", resnet, "h100", true, false, true);
}

}  // namespace
}  // namespace headroom::planner
