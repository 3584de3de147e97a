// The recompute oracle against Headroom's section search (docs/sections.md, "The oracle",
// records a run). For small graphs at budgets of persistent state + f x the rest of the plain
// step's peak, f in {90, 70, 50, 35}%: SectionSearch::Plan's overhead (recompute only) beside
// the oracle's best and its bound; then the oracle's least peak beside
// SectionSearch::MinimumPeakBytes. The oracle starts from Headroom's plan (a MIP start), so its
// best is never worse; its bound says how far from optimal Headroom can be.
//
//   bazel run -c opt //planner:remat_oracle_bench [-- --seconds 10] [-- --cold]
//
// --seconds: CBC's limit per solve (default 10). --cold: no MIP start from Headroom's plan.
// --only: the models whose label contains this ("mlp", "small_cnn", "transformer").
// --least-only: only the least peak (and what the oracle's least-peak schedule runs again).
// The least peak is printed without inner cuts (SearchOptions::nested off) and with them,
// then the frontier's range.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "graph/graph.h"
#include "graph/summary.h"
#include "graph/zoo.h"
#include "planner/bench_util.h"
#include "planner/cost_model.h"
#include "planner/remat_oracle.h"
#include "planner/section_search.h"
#include "planner/training_graph.h"

namespace headroom::planner {
namespace {

using graph::HumanBytes;

using bench::OrDie;

struct Model {
  std::string label;
  std::string zoo;
  uint64_t batch;
  std::map<std::string, int64_t> options;
};

std::string Proven(const OracleResult& r) {
  if (!r.feasible) return r.proven_infeasible ? "infeasible" : "none found";
  return r.proven_optimal ? "optimal" : "best found";
}

// Returns "fc1 before fc2.backward, relu1 before ..." for the forward nodes `schedule` runs
// again and the stage each re-run precedes, or "none".
std::string ReRuns(const TrainingGraph& t, const RecomputeSchedule& schedule) {
  std::string out;
  for (NodeId stage = 0; stage < static_cast<NodeId>(schedule.recompute.size()); ++stage) {
    if (schedule.recompute[stage].empty()) continue;
    std::string nodes;
    for (NodeId k : schedule.recompute[stage]) {
      absl::StrAppend(&nodes, nodes.empty() ? "" : " ", t.node(k).name);
    }
    absl::StrAppend(&out, out.empty() ? "" : "; ", nodes, " before ", t.node(stage).name);
  }
  return out.empty() ? "none" : out;
}

// Returns the number of re-forward nodes `step` runs (a node re-run twice counts twice).
int RecomputedNodes(const SectionedStep& step) {
  int n = 0;
  for (const SectionInfo& s : step.sections) n += s.recompute_nodes;
  return n;
}

void Run(const Model& m, double seconds, bool cold, bool least_only) {
  const graph::Graph forward =
      OrDie(graph::Graph::FromProto(
                OrDie(graph::BuildZooModel(graph::ZooSpec(m.zoo, m.batch, m.options)), m.label)),
            m.label);
  const TrainingGraph t = OrDie(TrainingGraph::Build(forward, {}), m.label);
  const RooflineCostModel cost(forward, OrDie(DevicePreset("h100"), "h100"));
  SearchOptions search_options;
  search_options.allow_offload = false;
  std::unique_ptr<SectionSearch> search =
      OrDie(SectionSearch::Create(t, cost, search_options), "search");
  const SectionPlan plain = OrDie(search->Unconstrained(), "plain");
  OracleOptions options;
  options.time_limit_seconds = seconds;
  std::unique_ptr<RematOracle> oracle = OrDie(RematOracle::Create(t, cost, options), "oracle");
  const uint64_t persistent = oracle->persistent_bytes();
  std::printf(
      "\n%s: %d forward nodes, %zu nodes; plain step %.6f s, peak %s (oracle's "
      "accounting %s), persistent %s\n",
      m.label.c_str(), NumForwardNodes(t), t.nodes().size(), plain.step_seconds,
      HumanBytes(plain.peak_bytes).c_str(), HumanBytes(oracle->plain().peak_bytes).c_str(),
      HumanBytes(persistent).c_str());
  std::printf("  %4s %12s | %9s %9s | %9s %9s %-10s %7s | %8s %8s\n", "f", "budget", "headroom",
              "sections", "oracle", "bound", "status", "solve s", "gap best", "gap bnd");
  for (int f : {90, 70, 50, 35}) {
    if (least_only) break;
    const uint64_t budget = persistent + (plain.peak_bytes - persistent) * f / 100;
    absl::StatusOr<SectionPlan> ours = search->Plan(budget);
    OracleOptions o = options;
    if (ours.ok() && !cold) {
      o.start = OrDie(RecomputeScheduleOf(t, *ours->step), "schedule of the plan");
    }
    std::unique_ptr<RematOracle> solver = OrDie(RematOracle::Create(t, cost, o), "oracle");
    const OracleResult r = OrDie(solver->Solve(budget), "solve");
    const std::string headroom =
        ours.ok() ? absl::StrFormat("%.4f", ours->overhead_ratio) : std::string("none fits");
    const std::string sections =
        ours.ok() ? absl::StrFormat("%d", static_cast<int>(ours->cuts.cuts.size()) + 1) : "-";
    std::string gap_best = "-", gap_bound = "-";
    if (ours.ok() && r.feasible) {
      gap_best = absl::StrFormat("%.2f%%", 100 * (ours->step_seconds / r.step_seconds - 1));
      gap_bound = absl::StrFormat("%.2f%%", 100 * (ours->step_seconds / r.bound_step_seconds - 1));
    }
    std::printf("  %3d%% %12s | %9s %9s | %9s %9s %-10s %7.1f | %8s %8s\n", f,
                HumanBytes(budget).c_str(), headroom.c_str(), sections.c_str(),
                r.feasible ? absl::StrFormat("%.4f", r.overhead_ratio).c_str() : "-",
                r.proven_infeasible ? "-" : absl::StrFormat("%.4f", r.bound_overhead_ratio).c_str(),
                Proven(r).c_str(), r.solve_seconds, gap_best.c_str(), gap_bound.c_str());
    if (r.feasible) std::printf("        oracle re-runs: %s\n", ReRuns(t, r.schedule).c_str());
  }
  // The smallest peak without inner cuts (one re-forward per section), then with them.
  SearchOptions flat_options = search_options;
  flat_options.nested = false;
  const uint64_t flat_min =
      OrDie(OrDie(SectionSearch::Create(t, cost, flat_options), "search")->MinimumPeakBytes(),
            "minimum without inner cuts");
  const auto begin = std::chrono::steady_clock::now();
  const uint64_t headroom_min = OrDie(search->MinimumPeakBytes(), "minimum");
  const double min_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  const SectionPlan smallest_plan = OrDie(search->Plan(headroom_min), "smallest plan");
  std::printf(
      "  smallest peak: without inner cuts %llu B, with them %llu B (%.4f of it; %s, %zu "
      "sections, %zu inner cuts, overhead %.3f, %d nodes re-run; found in %.2f s)\n",
      static_cast<unsigned long long>(flat_min), static_cast<unsigned long long>(headroom_min),
      static_cast<double>(headroom_min) / flat_min, smallest_plan.strategy.c_str(),
      smallest_plan.cuts.cuts.size() + 1, smallest_plan.cuts.inner_cuts.size(),
      smallest_plan.overhead_ratio, RecomputedNodes(*smallest_plan.step), min_seconds);
  const std::vector<TradeOffPoint> frontier = OrDie(search->Frontier(), "frontier");
  int nested_points = 0;
  for (const TradeOffPoint& p : frontier) nested_points += p.strategy == "nested" ? 1 : 0;
  std::printf(
      "  frontier: %zu points (%d with inner cuts), peak %llu B at %.3fx down to %llu B at "
      "%.3fx\n",
      frontier.size(), nested_points, static_cast<unsigned long long>(frontier.front().peak_bytes),
      frontier.front().step_seconds / plain.step_seconds,
      static_cast<unsigned long long>(frontier.back().peak_bytes),
      frontier.back().step_seconds / plain.step_seconds);
  OracleOptions o = options;
  if (!cold) {
    const SectionPlan smallest = OrDie(search->Plan(headroom_min), "smallest plan");
    o.start = OrDie(RecomputeScheduleOf(t, *smallest.step), "schedule of the smallest plan");
  }
  const OracleResult least =
      OrDie(OrDie(RematOracle::Create(t, cost, o), "oracle")->LeastPeak(), "least peak");
  std::printf(
      "  least peak: headroom %s (%llu B); oracle %s (%llu B, %s, bound %llu B, %.1f s, "
      "overhead %.3f); headroom / oracle %.4f\n",
      HumanBytes(headroom_min).c_str(), static_cast<unsigned long long>(headroom_min),
      HumanBytes(least.peak_bytes).c_str(), static_cast<unsigned long long>(least.peak_bytes),
      Proven(least).c_str(), static_cast<unsigned long long>(least.bound_peak_bytes),
      least.solve_seconds, least.overhead_ratio,
      least.feasible ? static_cast<double>(headroom_min) / least.peak_bytes : 0.0);
  if (least.feasible) std::printf("    oracle re-runs: %s\n", ReRuns(t, least.schedule).c_str());
}

}  // namespace
}  // namespace headroom::planner

int main(int argc, char** argv) {
  double seconds = 10;
  bool cold = false;
  bool least_only = false;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (std::strcmp(argv[i], "--cold") == 0) {
      cold = true;
    } else if (std::strcmp(argv[i], "--least-only") == 0) {
      least_only = true;
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: remat_oracle_bench [--seconds S] [--cold] [--only LABEL_PART] [--least-only]\n");
      return 2;
    }
  }
  using headroom::planner::Model;
  const std::vector<Model> models = {
      {"mlp depth 8, width 1024, batch 512", "mlp", 512, {{"depth", 8}, {"width", 1024}}},
      {"mlp depth 16, width 1024, batch 512", "mlp", 512, {{"depth", 16}, {"width", 1024}}},
      {"small_cnn batch 64", "small_cnn", 64, {}},
      {"transformer 1 layer (d_model 256, seq 128, batch 8)",
       "transformer",
       8,
       {{"layers", 1},
        {"d_model", 256},
        {"heads", 4},
        {"sequence", 128},
        {"vocab", 1000},
        {"positions", 128}}},
  };
  std::printf(
      "recompute oracle (CBC, %.0f s per solve%s) against SectionSearch (h100 preset, "
      "recompute only); budget = persistent + f x (plain peak - persistent)\n",
      seconds, cold ? ", cold" : ", started from Headroom's plan");
  for (const Model& m : models) {
    if (m.label.find(only) != std::string::npos) headroom::planner::Run(m, seconds, cold, least_only);
  }
  return 0;
}
