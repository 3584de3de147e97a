// Planner III's targets, measured (docs/sections.md records a run):
//   1. The table: resnet18 (batch 16, 64x64), a 4-layer transformer (d_model 256,
//      sequence 128, batch 8) and an mlp (depth 16, width 1024, batch 512), recompute only,
//      cpu preset, at budgets persistent state + f x the rest of the plain peak: the overhead
//      of the pool alone (Planner II) and with refinement, side by side.
//   2. Search time (pool, then one budget) for resnet152 at batch 64 and the 48-layer
//      transformer at batch 8 on the h100 preset, and how it grows with depth.
//
//   bazel run -c opt //planner:refine_bench [-- --quick]
//   bazel run -c opt //planner:refine_bench -- --depth [RUNS [MODEL [THREADS]]]
//   (search time by depth; only models whose label contains MODEL; SearchOptions::search_threads)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "graph/graph.h"
#include "graph/summary.h"
#include "graph/zoo.h"
#include "planner/bench_util.h"
#include "planner/cost_model.h"
#include "planner/memory_planner.h"
#include "planner/section_search.h"
#include "planner/training_graph.h"

namespace headroom::planner {
namespace {

using graph::HumanBytes;

using bench::OrDie;
using bench::Load;

struct Model {
  std::string label;
  graph::Graph forward;
};

uint64_t PersistentBytes(const TrainingGraph& t) {
  uint64_t bytes = 0;
  for (const TrainingTensor& tensor : t.tensors()) bytes += tensor.persistent() ? tensor.bytes : 0;
  return bytes;
}

// The pool alone against the refined search at each share f of the non-persistent peak.
int64_t work_limit = SearchOptions().refine_max_work;

void Table(const Model& m, const std::string& device, bool offload) {
  const TrainingGraph t = OrDie(TrainingGraph::Build(m.forward, {}), m.label);
  const RooflineCostModel cost(m.forward, OrDie(DevicePreset(device), device));
  SearchOptions pool_only;
  pool_only.allow_offload = offload;
  pool_only.refine = false;
  SearchOptions refined = pool_only;
  refined.refine = true;
  refined.refine_max_work = work_limit;
  std::unique_ptr<SectionSearch> before = OrDie(SectionSearch::Create(t, cost, pool_only), "pool");
  std::unique_ptr<SectionSearch> after = OrDie(SectionSearch::Create(t, cost, refined), "refined");
  const SectionPlan plain = OrDie(before->Unconstrained(), "plain");
  const uint64_t state = PersistentBytes(t);
  const uint64_t minimum = OrDie(before->MinimumPeakBytes(), "minimum");
  std::printf(
      "\n%s, %s preset, offload %s: %d forward nodes, plain peak %s (state %s), "
      "step %.4f s; the pool's smallest peak %s (f = %.1f%%)\n",
      m.label.c_str(), device.c_str(), offload ? "on" : "off", NumForwardNodes(t),
      HumanBytes(plain.peak_bytes).c_str(), HumanBytes(state).c_str(), plain.step_seconds,
      HumanBytes(minimum).c_str(),
      100.0 * (minimum - state) / static_cast<double>(plain.peak_bytes - state));
  std::printf("  %6s %12s | %8s %9s | %8s %9s %5s %5s %8s | %6s\n", "f", "budget", "pool", "peak",
              "refined", "peak", "sect", "kept", "seconds", "ratio");
  for (double f : {0.9, 0.7, 0.5, 0.35, 0.3, -1.0}) {
    const uint64_t budget =
        f < 0 ? minimum : state + static_cast<uint64_t>(f * (plain.peak_bytes - state));
    absl::StatusOr<SectionPlan> a = before->Plan(budget);
    const absl::Time start = absl::Now();
    absl::StatusOr<SectionPlan> b = after->Plan(budget);
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    const std::string label = f < 0 ? "min" : absl::StrFormat("%.0f%%", 100 * f);
    if (!a.ok() || !b.ok()) {
      std::printf("  %6s %12s | infeasible%s\n", label.c_str(), HumanBytes(budget).c_str(),
                  b.ok() ? " for the pool (refined fits)" : "");
      continue;
    }
    size_t kept = 0;
    for (const SectionInfo& s : b->step->sections) kept += s.kept.size();
    std::printf("  %6s %12s | %8.3f %9s | %8.3f %9s %5zu %5zu %8.2f | %6.3f\n", label.c_str(),
                HumanBytes(budget).c_str(), a->overhead_ratio, HumanBytes(a->peak_bytes).c_str(),
                b->overhead_ratio, HumanBytes(b->peak_bytes).c_str(), b->step->sections.size(),
                kept, seconds, b->step_seconds / a->step_seconds);
  }
}

// Search time: the pool, then one budget at `share` of the plain peak.
void Timing(const std::string& label, const graph::Graph& g, double share) {
  const TrainingGraph t = OrDie(TrainingGraph::Build(g, {}), label);
  const RooflineCostModel cost(g, OrDie(DevicePreset("h100"), "h100"));
  const absl::Time start = absl::Now();
  std::unique_ptr<SectionSearch> search = OrDie(SectionSearch::Create(t, cost, {}), "search");
  const uint64_t plain = OrDie(search->Unconstrained(), "plain").peak_bytes;
  const double pool_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  absl::StatusOr<SectionPlan> p = search->Plan(static_cast<uint64_t>(share * plain));
  std::printf("  %-30s %5d forward nodes, budget %3.0f%%: pool %.2f s, total %.2f s, %s\n",
              label.c_str(), NumForwardNodes(t), 100 * share, pool_seconds,
              absl::ToDoubleSeconds(absl::Now() - start),
              p.ok() ? absl::StrFormat("overhead %.3f (%s)", p->overhead_ratio, p->strategy).c_str()
                     : "infeasible");
}

// Returns a fingerprint of `p`'s plan: its cuts, kept and offloaded tensors, peak and
// predicted time (to the last bit), so runs before and after a change of the search can be
// compared.
uint64_t Fingerprint(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a.
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}
uint64_t Fingerprint(const SectionPlan& p) {
  return Fingerprint(absl::StrFormat(
      "%s|%s|%s|%d|%a%s", absl::StrJoin(p.cuts.cuts, ","), absl::StrJoin(p.cuts.keep, ","),
      absl::StrJoin(p.cuts.offload, ","), p.peak_bytes, p.step_seconds,
      // Inner cuts only where there are some, so plans without match older fingerprints.
      p.cuts.inner_cuts.empty() ? "" : absl::StrCat("|", absl::StrJoin(p.cuts.inner_cuts, ","))));
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Search time by depth: medians of `runs` fresh searches (the pool, then one budget at
// `share` of the plain peak; wall-clock seconds, and the process's CPU seconds, which a
// loaded machine inflates less), with the plan's fingerprint (the same in every run, or the
// bench says so).
void DepthTable(int runs, const std::string& only, int threads) {
  struct Row {
    std::string label;
    graph::Graph g;
  };
  std::vector<Row> rows;
  for (int layers : {6, 12, 24, 48}) {
    rows.push_back({"transformer " + std::to_string(layers) + " layers bs8",
                    Load("transformer", 8, {{"layers", layers}})});
  }
  for (const char* resnet : {"resnet50", "resnet101", "resnet152"}) {
    rows.push_back({std::string(resnet) + " bs64", Load(resnet, 64)});
  }
  SearchOptions options;
  options.search_threads = threads;
  std::printf(
      "Search time by depth (h100 preset, offload allowed; median of %d runs, %d threads)\n", runs,
      threads);
  std::printf("  %-28s %6s %6s | %8s %8s %8s %8s | %8s %s\n", "model", "nodes", "budget", "pool s",
              "refine s", "total s", "cpu s", "overhead", "plan fingerprint");
  for (const Row& row : rows) {
    if (row.label.find(only) == std::string::npos) continue;
    const TrainingGraph t = OrDie(TrainingGraph::Build(row.g, {}), row.label);
    const RooflineCostModel cost(row.g, OrDie(DevicePreset("h100"), "h100"));
    for (double share : {0.3, 0.5}) {
      std::vector<double> pool, total, cpu;
      std::vector<uint64_t> prints;
      double overhead = 0;
      for (int r = 0; r < runs; ++r) {
        const absl::Time start = absl::Now();
        const std::clock_t cpu_start = std::clock();
        std::unique_ptr<SectionSearch> search =
            OrDie(SectionSearch::Create(t, cost, options), "search");
        const uint64_t plain = OrDie(search->Unconstrained(), "plain").peak_bytes;
        pool.push_back(absl::ToDoubleSeconds(absl::Now() - start));
        const absl::StatusOr<SectionPlan> p = search->Plan(static_cast<uint64_t>(share * plain));
        total.push_back(absl::ToDoubleSeconds(absl::Now() - start));
        cpu.push_back(static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC);
        // An infeasible budget: the message states the smallest peak, so it is fingerprinted.
        prints.push_back(p.ok() ? Fingerprint(*p) : Fingerprint(p.status().ToString()));
        overhead = p.ok() ? p->overhead_ratio : 0;
      }
      const bool same = std::all_of(prints.begin(), prints.end(),
                                    [&](uint64_t f) { return f == prints.front(); });
      std::printf("  %-28s %6d %5.0f%% | %8.3f %8.3f %8.3f %8.3f | %8.4f %016llx%s\n",
                  row.label.c_str(), NumForwardNodes(t), 100 * share, Median(pool),
                  Median(total) - Median(pool), Median(total), Median(cpu), overhead,
                  static_cast<unsigned long long>(prints.front()),
                  same ? "" : "  DIFFERS BETWEEN RUNS");
      std::fflush(stdout);
    }
  }
}

// What one move costs: expanding a step, its lower bound, its exact plan.
void Primitives(const std::string& label, const graph::Graph& g) {
  const TrainingGraph t = OrDie(TrainingGraph::Build(g, {}), label);
  const RooflineCostModel cost(g, OrDie(DevicePreset("h100"), "h100"));
  const SectionCuts cuts{SqrtCuts(NumForwardNodes(t)), {}, {}};
  const int n = 20;
  absl::Time start = absl::Now();
  for (int i = 0; i < n; ++i) OrDie(ExpandSections(t, cuts, cost), "expand");
  const double expand = absl::ToDoubleSeconds(absl::Now() - start) / n;
  const SectionedStep step = OrDie(ExpandSections(t, cuts, cost), "expand");
  start = absl::Now();
  for (int i = 0; i < n; ++i) ScheduledLowerBound(step.graph, step.schedule, 256);
  const double bound = absl::ToDoubleSeconds(absl::Now() - start) / n;
  start = absl::Now();
  for (int i = 0; i < n; ++i) {
    OrDie(PlanScheduledGraph(step.graph, step.schedule, 256, DefaultStrategies()), "plan");
  }
  const double plan = absl::ToDoubleSeconds(absl::Now() - start) / n;
  std::printf("  %-30s %5zu nodes: expand %.3f ms, lower bound %.3f ms, exact plan %.3f ms\n",
              label.c_str(), step.graph.nodes().size(), 1e3 * expand, 1e3 * bound, 1e3 * plan);
}

}  // namespace
}  // namespace headroom::planner

int main(int argc, char** argv) {
  using namespace headroom::planner;
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  if (argc > 3 && std::strcmp(argv[2], "--work") == 0) work_limit = std::atoll(argv[3]);
  if (argc > 1 && std::strcmp(argv[1], "--depth") == 0) {
    DepthTable(argc > 2 ? std::atoi(argv[2]) : 3, argc > 3 ? argv[3] : "",
               argc > 4 ? std::atoi(argv[4]) : SearchOptions().search_threads);
    return 0;
  }
  std::vector<Model> models;
  models.push_back({"resnet18 bs16 64x64", Load("resnet18", 16, {{"image_size", 64}})});
  // The transformer: its figures (1.047 at 70%, the smallest peak at 30%) are those
  // of a vocabulary of 2048 (GPT-2's 50257 makes the logits most of the peak).
  models.push_back(
      {"transformer 4 layers d256 seq128 vocab2048 bs8",
       Load("transformer", 8,
            {{"layers", 4}, {"d_model", 256}, {"sequence", 128}, {"heads", 4}, {"vocab", 2048}})});
  models.push_back(
      {"mlp depth 16 width 1024 bs512", Load("mlp", 512, {{"depth", 16}, {"width", 1024}})});
  std::printf("What one move costs (sqrt(n) cuts)\n");
  Primitives("resnet18 bs16", Load("resnet18", 16, {{"image_size", 64}}));
  Primitives("resnet152 bs64", Load("resnet152", 64));
  Primitives("transformer 48 bs8", Load("transformer", 8, {{"layers", 48}}));
  if (argc > 1 && std::strcmp(argv[1], "--primitives") == 0) return 0;
  std::printf("Planner III: the pool (Planner II) against refinement, recompute only\n");
  for (const Model& m : models) Table(m, "cpu", /*offload=*/false);
  if (!quick) {
    std::printf("\nWith offload, h100 preset\n");
    for (const Model& m : models) Table(m, "h100", /*offload=*/true);
  }
  std::printf("\nSearch time (h100 preset, offload allowed)\n");
  for (double share : {0.3, 0.5}) {
    Timing("resnet152 bs64", Load("resnet152", 64), share);
    if (!quick)
      Timing("transformer 48 layers bs8", Load("transformer", 8, {{"layers", 48}}), share);
  }
  if (!quick) {
    for (int layers : {6, 12, 24}) {
      Timing("transformer " + std::to_string(layers) + " layers bs8",
             Load("transformer", 8, {{"layers", layers}}), 0.3);
    }
    for (const char* resnet : {"resnet18", "resnet50", "resnet101"}) {
      Timing(std::string(resnet) + " bs64", Load(resnet, 64), 0.3);
    }
  }
  return 0;
}
