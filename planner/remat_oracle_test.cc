// The recompute oracle: its accounting against Headroom's planner on plain and sectioned
// steps, its optimum against Headroom's every cut set, and its program against brute force.
#include "planner/remat_oracle.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "graph/graph.h"
#include "graph/graph_builder.h"
#include "graph/zoo.h"
#include "graph/zoo_testing.h"
#include "gtest/gtest.h"
#include "planner/memory_planner.h"
#include "planner/schedule.h"
#include "planner/section_search.h"
#include "planner/sections.h"

namespace headroom::planner {
namespace {

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

// stem -> a residual block (fc, relu, fc, add the block input, relu) -> head -> loss: a skip
// connection crosses cuts, and Add and ReLU share in place.
graph::Graph ResidualMlp() {
  graph::GraphBuilder b("residual_mlp");
  std::string x = b.Linear("stem", b.Input("x", {256, 128}), 128, 256);
  std::string y = b.Linear("block.fc1", x, 256, 512);
  y = b.Unary("ReLU", "block.relu1", y);
  y = b.Linear("block.fc2", y, 512, 256);
  y = b.Add("block.add", y, x);
  x = b.Unary("ReLU", "block.relu2", y);
  x = b.Linear("head", x, 256, 10);
  b.Op("SoftmaxCrossEntropy", "loss", {x, b.Label("labels", {256})});
  b.SetLoss("loss");
  absl::StatusOr<graph::Graph> g = graph::Graph::FromProto(b.Build());
  EXPECT_TRUE(g.ok()) << g.status();
  return std::move(g).value();
}

struct Fixture {
  explicit Fixture(graph::Graph g, const std::string& device = "h100")
      : forward(std::move(g)),
        training(TrainingGraph::Build(forward, {}).value()),
        cost(forward, DevicePreset(device).value()) {}
  graph::Graph forward;
  TrainingGraph training;
  RooflineCostModel cost;
};

std::vector<std::pair<std::string, graph::Graph>> Graphs() {
  std::vector<std::pair<std::string, graph::Graph>> graphs;
  graphs.emplace_back("mlp", Zoo("mlp", 64, {{"depth", 4}, {"width", 256}}));
  graphs.emplace_back("residual_mlp", ResidualMlp());
  graphs.emplace_back("small_cnn", Zoo("small_cnn", 8));
  graphs.emplace_back("transformer", Zoo("transformer", 2, {{"layers", 1}}));
  return graphs;
}

// The plain step's peak is Headroom's aligned lower bound of its arena, and its time the
// plain step's.
TEST(RematOracleTest, PlainStepCostsWhatHeadroomPlans) {
  for (auto& [name, g] : Graphs()) {
    Fixture f(std::move(g));
    const Schedule plain = ScheduleGraph(f.training).value();
    const ScheduleCost ours = EvaluateRecomputeSchedule(f.training, f.cost, {}).value();
    EXPECT_EQ(ours.peak_bytes, ScheduledLowerBound(f.training, plain, kDefaultAlignmentBytes))
        << name;
    const MemoryPlan arena =
        PlanScheduledGraph(f.training, plain, kDefaultAlignmentBytes, DefaultStrategies()).value();
    EXPECT_LE(ours.peak_bytes, arena.arena_bytes) << name;
    const SectionedStep step = ExpandSections(f.training, {}, f.cost).value();
    EXPECT_NEAR(ours.step_seconds, step.step_seconds, 1e-12 * step.step_seconds) << name;
  }
}

// Every sectioned step, as a recompute schedule, costs exactly what Headroom predicts for it:
// the aligned lower bound of its expanded schedule's arena, and its step time.
TEST(RematOracleTest, SectionedStepsCostWhatHeadroomPlans) {
  for (auto& [name, g] : Graphs()) {
    Fixture f(std::move(g));
    const int32_t nf = NumForwardNodes(f.training);
    std::vector<std::vector<int32_t>> cut_sets = {LayerCuts(f.training), SqrtCuts(nf)};
    for (int sections : {2, 3, 5, nf}) cut_sets.push_back(EvenCuts(nf, sections));
    int recomputing = 0;
    for (const std::vector<int32_t>& cuts : cut_sets) {
      const SectionedStep step = ExpandSections(f.training, {cuts, {}}, f.cost).value();
      const RecomputeSchedule schedule = RecomputeScheduleOf(f.training, step).value();
      recomputing += schedule.num_recomputes() > 0 ? 1 : 0;
      const ScheduleCost ours = EvaluateRecomputeSchedule(f.training, f.cost, schedule).value();
      EXPECT_EQ(ours.peak_bytes,
                ScheduledLowerBound(step.graph, step.schedule, kDefaultAlignmentBytes))
          << name << " with " << cuts.size() << " cuts";
      EXPECT_NEAR(ours.step_seconds, step.step_seconds, 1e-12 * step.step_seconds)
          << name << " with " << cuts.size() << " cuts";
    }
    EXPECT_GE(recomputing, 3) << name;
  }
}

TEST(RematOracleTest, EvaluateRejectsBadSchedules) {
  Fixture f(Zoo("mlp", 8, {{"depth", 2}, {"width", 16}}));
  const int32_t n = static_cast<int32_t>(f.training.nodes().size());
  const int32_t nf = NumForwardNodes(f.training);
  RecomputeSchedule backward_node;
  backward_node.recompute.resize(n);
  backward_node.recompute[n - 1] = {nf};  // Not a forward node.
  EXPECT_EQ(EvaluateRecomputeSchedule(f.training, f.cost, backward_node).status().code(),
            absl::StatusCode::kInvalidArgument);
  RecomputeSchedule unsorted;
  unsorted.recompute.resize(n);
  unsorted.recompute[n - 1] = {1, 0};
  EXPECT_EQ(EvaluateRecomputeSchedule(f.training, f.cost, unsorted).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RematOracleTest, RefusesLargeGraphs) {
  Fixture f(Zoo("mlp", 8, {{"depth", 30}, {"width", 16}}));
  OracleOptions options;
  options.max_forward_nodes = 40;
  absl::StatusOr<std::unique_ptr<RematOracle>> oracle =
      RematOracle::Create(f.training, f.cost, options);
  ASSERT_FALSE(oracle.ok());
  EXPECT_EQ(oracle.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(oracle.status().message(), HasSubstr("at most 40 forward nodes"));
}

// With the plain step's peak as the budget, nothing runs again.
TEST(RematOracleTest, TheUnconstrainedPeakNeedsNoRecompute) {
  for (auto& [name, g] : Graphs()) {
    Fixture f(std::move(g));
    OracleOptions options;
    options.time_limit_seconds = 60;  // A bound for a loaded machine; it takes a second or two.
    std::unique_ptr<RematOracle> oracle = RematOracle::Create(f.training, f.cost, options).value();
    const Schedule plain = ScheduleGraph(f.training).value();
    for (uint64_t budget :
         {ScheduledLowerBound(f.training, plain, kDefaultAlignmentBytes),
          PlanScheduledGraph(f.training, plain, kDefaultAlignmentBytes, DefaultStrategies())
              .value()
              .arena_bytes}) {
      const OracleResult r = oracle->Solve(budget).value();
      ASSERT_TRUE(r.feasible) << name;
      EXPECT_TRUE(r.proven_optimal) << name;
      EXPECT_DOUBLE_EQ(r.overhead_ratio, 1.0) << name;
      EXPECT_EQ(r.schedule.num_recomputes(), 0) << name;
      EXPECT_EQ(r.peak_bytes, oracle->plain().peak_bytes) << name;
      std::printf("%s: budget %llu solved in %.2f s, %d columns (%d binary), %d rows\n",
                  name.c_str(), static_cast<unsigned long long>(budget), r.solve_seconds,
                  r.num_variables, r.num_binaries, r.num_constraints);
    }
  }
}

// Budgets from the smallest peak any cut set reaches to the plain step's.
std::vector<uint64_t> SectionBudgets(const Fixture& f, int n) {
  SearchOptions options;
  options.allow_offload = false;
  options.nested = false;  // Cut sets only: inner cuts reach below what ExhaustiveSearch can.
  std::unique_ptr<SectionSearch> search =
      SectionSearch::Create(f.training, f.cost, options).value();
  const uint64_t lo = search->MinimumPeakBytes().value();
  const uint64_t hi = search->Unconstrained().value().peak_bytes;
  std::vector<uint64_t> budgets;
  for (int i = 0; i <= n; ++i) budgets.push_back(lo + (hi - lo) * i / n);
  return budgets;
}

// The oracle is never slower than the best of every set of cuts at the same budget, and runs
// something again wherever the budget is below the plain step's peak.
void ExpectNoWorseThanEveryCutSet(const std::string& name, graph::Graph g) {
  Fixture f(std::move(g));
  OracleOptions options;
  options.time_limit_seconds = 60;  // A bound; each solve takes about a second.
  std::unique_ptr<RematOracle> oracle = RematOracle::Create(f.training, f.cost, options).value();
  int strictly_better = 0;
  for (uint64_t budget : SectionBudgets(f, 4)) {
    absl::StatusOr<ExhaustiveResult> cuts = ExhaustiveSearch(f.training, f.cost, budget);
    ASSERT_TRUE(cuts.ok()) << cuts.status();
    const OracleResult r = oracle->Solve(budget).value();
    ASSERT_TRUE(r.feasible) << name << " at " << budget;
    EXPECT_TRUE(r.proven_optimal) << name << " at " << budget;
    EXPECT_LE(r.peak_bytes, budget);
    EXPECT_LE(r.step_seconds, cuts->step_seconds * (1 + 1e-12)) << name << " at " << budget << ":\n"
                                                                << r.DebugString();
    if (budget < oracle->plain().peak_bytes) {
      EXPECT_GT(r.overhead_ratio, 1.0) << name;
    }
    strictly_better += r.step_seconds < cuts->step_seconds * (1 - 1e-9) ? 1 : 0;
    std::printf("%s budget %llu: oracle %.5f (%lld re-runs), every cut set %.5f (%d cuts)\n",
                name.c_str(), static_cast<unsigned long long>(budget), r.overhead_ratio,
                static_cast<long long>(r.schedule.num_recomputes()),
                cuts->step_seconds / oracle->plain().step_seconds,
                static_cast<int>(cuts->cuts.size()));
  }
}

TEST(RematOracleTest, NoWorseThanEveryCutSetOnAnMlp) {
  ExpectNoWorseThanEveryCutSet("mlp", Zoo("mlp", 512, {{"depth", 5}, {"width", 512}}));
}

TEST(RematOracleTest, NoWorseThanEveryCutSetWithASkipConnection) {
  ExpectNoWorseThanEveryCutSet("residual_mlp", ResidualMlp());
}

// The least peak is no larger than the smallest any cut set reaches.
TEST(RematOracleTest, LeastPeakIsAtMostTheSectionsSmallest) {
  Fixture f(Zoo("mlp", 512, {{"depth", 5}, {"width", 512}}));
  OracleOptions options;
  options.time_limit_seconds = 60;  // A bound; it takes a few seconds.
  std::unique_ptr<RematOracle> oracle = RematOracle::Create(f.training, f.cost, options).value();
  const OracleResult least = oracle->LeastPeak().value();
  ASSERT_TRUE(least.proven_optimal);
  const uint64_t sections = SectionBudgets(f, 1).front();
  EXPECT_LE(least.peak_bytes, sections);
  EXPECT_LE(least.bound_peak_bytes, least.peak_bytes);
  // Its peak is a budget the oracle meets; a byte less is one it cannot, if proven.
  const OracleResult at = oracle->Solve(least.peak_bytes).value();
  EXPECT_TRUE(at.feasible);
  const OracleResult below = oracle->Solve(least.peak_bytes - 1).value();
  EXPECT_FALSE(below.feasible) << below.DebugString();
  EXPECT_TRUE(below.proven_infeasible);
}

// x -> fc1 (wide) -> fc2 (narrow) -> fc3 (wide logits) -> loss, no biases: 4 forward nodes.
// Without re-runs fc1's output is still held while the loss's backward writes the logits'
// gradient; running fc1 again before fc2's backward lowers the peak by a third.
graph::Graph TinyChain() {
  graph::GraphBuilder b("tiny_chain");
  std::string x = b.Linear("fc1", b.Input("x", {512, 8}), 8, 1024, /*bias=*/false);
  x = b.Linear("fc2", x, 1024, 8, /*bias=*/false);
  x = b.Linear("fc3", x, 8, 1024, /*bias=*/false);
  b.Op("SoftmaxCrossEntropy", "loss", {x, b.Label("labels", {512})});
  b.SetLoss("loss");
  absl::StatusOr<graph::Graph> g = graph::Graph::FromProto(b.Build());
  EXPECT_TRUE(g.ok()) << g.status();
  return std::move(g).value();
}

// The program against brute force: every recompute schedule of a tiny chain, costed by
// simulation (no solver), gives the same least time at each budget and the same least peak.
// Re-running forward node k in stage t is enumerated wherever one of k's outputs can still be
// read at stage t or later (any other re-run only adds time and memory).
TEST(RematOracleTest, MatchesBruteForceOnATinyChain) {
  Fixture f(TinyChain());
  const TrainingGraph& g = f.training;
  const int32_t n = static_cast<int32_t>(g.nodes().size());
  const int32_t nf = NumForwardNodes(g);
  ASSERT_EQ(nf, 4);
  // useful[t][k]: some output of forward node k is read by a node that may run at stage >= t.
  std::vector<std::vector<bool>> useful(n, std::vector<bool>(nf, false));
  for (NodeId t = 1; t < n; ++t) {
    for (NodeId k = nf - 1; k >= 0; --k) {
      for (TensorId o : g.node(k).outputs) {
        for (NodeId c : g.tensor(o).consumers) {
          if ((c >= nf && c >= t) || (c < nf && useful[t][c])) useful[t][k] = true;
        }
      }
    }
  }
  std::vector<std::pair<NodeId, NodeId>> pairs;  // (stage, node)
  for (NodeId t = 1; t < n; ++t) {
    for (NodeId k = 0; k < std::min(t, nf); ++k) {
      if (useful[t][k]) pairs.push_back({t, k});
    }
  }
  ASSERT_LE(pairs.size(), 20u);
  const ScheduleEvaluator evaluator(g, f.cost);
  // Every schedule's (peak, time).
  std::vector<std::pair<uint64_t, double>> all;
  for (uint32_t mask = 0; mask < (1u << pairs.size()); ++mask) {
    RecomputeSchedule s;
    s.recompute.resize(n);
    for (size_t i = 0; i < pairs.size(); ++i) {
      if (mask & (1u << i)) s.recompute[pairs[i].first].push_back(pairs[i].second);
    }
    const ScheduleCost c = evaluator.Evaluate(s).value();
    all.push_back({c.peak_bytes, c.step_seconds});
  }
  uint64_t least = all[0].first;
  for (const auto& [peak, seconds] : all) least = std::min(least, peak);
  OracleOptions options;
  options.time_limit_seconds = 60;  // A bound; each solve takes well under a second.
  std::unique_ptr<RematOracle> oracle = RematOracle::Create(g, f.cost, options).value();
  const OracleResult least_peak = oracle->LeastPeak().value();
  ASSERT_TRUE(least_peak.proven_optimal);
  EXPECT_EQ(least_peak.peak_bytes, least);
  const uint64_t plain = all[0].first;
  ASSERT_LT(least, plain);
  int recomputing = 0;
  for (int i = 0; i <= 6; ++i) {
    const uint64_t budget = least + (plain - least) * i / 6;
    double best = 1e300;
    for (const auto& [peak, seconds] : all) {
      if (peak <= budget) best = std::min(best, seconds);
    }
    const OracleResult r = oracle->Solve(budget).value();
    ASSERT_TRUE(r.proven_optimal) << budget;
    EXPECT_NEAR(r.step_seconds, best, 1e-9 * best) << "budget " << budget << "\n"
                                                   << r.DebugString();
    recomputing += r.schedule.num_recomputes() > 0 ? 1 : 0;
  }
  EXPECT_GE(recomputing, 3);
  std::printf(
      "tiny chain: %zu (stage, node) re-run choices, %zu schedules, least peak %llu of "
      "%llu\n",
      pairs.size(), all.size(), static_cast<unsigned long long>(least),
      static_cast<unsigned long long>(plain));
}

}  // namespace
}  // namespace headroom::planner
