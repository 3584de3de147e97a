// Planner II's targets, measured (docs/planner.md records a run):
//   1. For resnet152 at batch 64, the 48-layer transformer and mlp of depth 200: at every
//      baseline's peak, our predicted step time against the baseline's; at 30% of the
//      unconstrained peak without offload, the overhead (target <= 1.35); the smallest peak
//      recompute alone reaches, and with offload on the H100 preset.
//   2. Optimality on small graphs: the search against every set of cuts (the gap, target 0).
//   3. Search time (pool, then one budget) for resnet152 at batch 64 (target < 2 s), and how
//      it grows with depth.
//
//   bazel run -c opt //planner:section_search_bench [-- --quick]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "graph/graph.h"
#include "graph/summary.h"
#include "graph/zoo.h"
#include "planner/bench_util.h"
#include "planner/cost_model.h"
#include "planner/section_search.h"
#include "planner/training_graph.h"

namespace headroom::planner {
namespace {

using graph::HumanBytes;

using bench::OrDie;
using bench::Load;

// One model on one device: the search against the baselines.
struct Model {
  std::string label;
  graph::Graph forward;
};

void CompareWithBaselines(const Model& m, const std::string& device) {
  const TrainingGraph t = OrDie(TrainingGraph::Build(m.forward, {}), m.label);
  const RooflineCostModel cost(m.forward, OrDie(DevicePreset(device), device));
  for (bool offload : {false, true}) {
    SearchOptions options;
    options.allow_offload = offload;
    const absl::Time start = absl::Now();
    std::unique_ptr<SectionSearch> search = OrDie(SectionSearch::Create(t, cost, options), "search");
    const SectionPlan plain = OrDie(search->Unconstrained(), "plain");
    const double pool_seconds = absl::ToDoubleSeconds(absl::Now() - start);
    const uint64_t min_peak = OrDie(search->MinimumPeakBytes(), "minimum");
    std::printf("\n%s on %s, offload %s: %d candidates in %.2f s; plain step %s, %.4f s; "
                "smallest peak %s = %llu B (%.1f%% of plain)\n",
                m.label.c_str(), device.c_str(), offload ? "on" : "off",
                search->num_candidates(), pool_seconds, HumanBytes(plain.peak_bytes).c_str(),
                plain.step_seconds, HumanBytes(min_peak).c_str(),
                static_cast<unsigned long long>(min_peak), 100.0 * min_peak / plain.peak_bytes);
    std::printf("  %-12s %12s %10s | %-8s %12s %10s %8s\n", "baseline", "peak", "step s",
                "ours", "peak", "step s", "ratio");
    for (const TradeOffPoint& b : OrDie(search->Baselines(), "baselines")) {
      const SectionPlan ours = OrDie(search->Plan(b.peak_bytes), "plan");
      std::printf("  %-12s %12s %10.4f | %-8s %12s %10.4f %8.3f%s\n", b.strategy.c_str(),
                  HumanBytes(b.peak_bytes).c_str(), b.step_seconds, ours.strategy.c_str(),
                  HumanBytes(ours.peak_bytes).c_str(), ours.step_seconds,
                  ours.step_seconds / b.step_seconds,
                  ours.step_seconds <= b.step_seconds + 1e-12 ? "" : "  WORSE");
    }
    for (double share : {0.5, 0.3, 0.2}) {
      const uint64_t budget = static_cast<uint64_t>(share * plain.peak_bytes);
      absl::StatusOr<SectionPlan> p = search->Plan(budget);
      if (!p.ok()) {
        std::printf("  budget %3.0f%% (%s): infeasible\n", share * 100, HumanBytes(budget).c_str());
        continue;
      }
      std::printf("  budget %3.0f%% (%s): %s peak %s, overhead %.3f, %zu sections, "
                  "offloaded %s, recompute %.1f GFLOP\n",
                  share * 100, HumanBytes(budget).c_str(), p->strategy.c_str(),
                  HumanBytes(p->peak_bytes).c_str(), p->overhead_ratio, p->step->sections.size(),
                  HumanBytes(p->step->offloaded_bytes).c_str(), p->step->recompute_flops / 1e9);
    }
  }
}

// The search (recompute only) against every set of cuts, at budgets across the range.
void Optimality(const Model& m) {
  const TrainingGraph t = OrDie(TrainingGraph::Build(m.forward, {}), m.label);
  const RooflineCostModel cost(m.forward, OrDie(DevicePreset("h100"), "h100"));
  SearchOptions options;
  options.allow_offload = false;
  std::unique_ptr<SectionSearch> search = OrDie(SectionSearch::Create(t, cost, options), "search");
  const uint64_t lo = OrDie(search->MinimumPeakBytes(), "min");
  const uint64_t hi = OrDie(search->Unconstrained(), "plain").peak_bytes;
  double worst = 0;
  int64_t evaluated = 0;
  const absl::Time start = absl::Now();
  for (int i = 0; i <= 8; ++i) {
    const uint64_t budget = lo + (hi - lo) * i / 8;
    const SectionPlan ours = OrDie(search->Plan(budget), "plan");
    const ExhaustiveResult best = OrDie(ExhaustiveSearch(t, cost, budget, 24), "exhaustive");
    evaluated = best.evaluated;
    worst = std::max(worst, ours.step_seconds / best.step_seconds - 1);
  }
  std::printf("  %-28s %2d forward nodes, %7lld cut sets each, 9 budgets: worst gap %.6f%% "
              "(%.1f s)\n",
              m.label.c_str(), NumForwardNodes(t), static_cast<long long>(evaluated), 100 * worst,
              absl::ToDoubleSeconds(absl::Now() - start));
}

// Search time (pool and one budget at 30% of the plain peak) as models grow.
void Scaling(const std::string& label, const graph::Graph& g) {
  const TrainingGraph t = OrDie(TrainingGraph::Build(g, {}), label);
  const RooflineCostModel cost(g, OrDie(DevicePreset("h100"), "h100"));
  const absl::Time start = absl::Now();
  std::unique_ptr<SectionSearch> search = OrDie(SectionSearch::Create(t, cost, {}), "search");
  const uint64_t plain = OrDie(search->Unconstrained(), "plain").peak_bytes;
  const bool fits = search->Plan(plain * 3 / 10).ok();
  std::printf("  %-28s %5d forward nodes %6zu nodes : %.3f s%s\n", label.c_str(),
              NumForwardNodes(t), t.nodes().size(), absl::ToDoubleSeconds(absl::Now() - start),
              fits ? "" : " (30% infeasible)");
}

}  // namespace
}  // namespace headroom::planner

int main(int argc, char** argv) {
  using namespace headroom::planner;
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  std::vector<Model> models;
  models.push_back({"resnet152 bs64", Load("resnet152", 64)});
  if (!quick) {
    models.push_back({"transformer 48 layers bs8", Load("transformer", 8, {{"layers", 48}})});
    models.push_back({"mlp depth 200 bs16384", Load("mlp", 16384, {{"depth", 200}})});
  }
  for (const Model& m : models) {
    for (const char* device : {"cpu", "h100"}) CompareWithBaselines(m, device);
  }
  std::printf("\nOptimality: the search against every set of cuts (no offload, h100 preset)\n");
  for (int depth : {5, 6, 7, 8}) {
    Optimality({"mlp depth " + std::to_string(depth) + " bs512",
                Load("mlp", 512, {{"depth", depth}, {"width", 512}})});
  }
  std::printf("\nSearch time (h100 preset, offload allowed; pool plus a 30%% budget)\n");
  for (int layers : {6, 12, 24, 48}) {
    Scaling("transformer " + std::to_string(layers) + " layers bs8",
            Load("transformer", 8, {{"layers", layers}}));
  }
  for (const char* resnet : {"resnet18", "resnet50", "resnet101", "resnet152"}) {
    Scaling(std::string(resnet) + " bs64", Load(resnet, 64));
  }
  for (int depth : {50, 100, 200, 400}) {
    Scaling("mlp depth " + std::to_string(depth) + " bs4096",
            Load("mlp", 4096, {{"depth", depth}}));
  }
  return 0;
}
