// The planner's targets, measured:
//   1. arena_bytes <= 1.02 x lower_bound_bytes for every zoo model at batch 1, 32 and 128
//      (the transformer at its default sequence, 1024);
//   2. planning time (autodiff, schedule, sharing, offsets) of the largest graphs, median of
//      several runs, against 200 ms;
//   3. how planning time grows with depth (1, 2, 4, 8 times as deep), against n log n;
//   4. with --pytorch, PyTorch 1.13's measured peak for a resnet50 training step at batch 32
//      beside our arena (bench/pytorch_peak.py; see bench/README.md).
//
//   bazel run //planner:planner_bench [-- --pytorch] [-- --runs N]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "graph/graph.h"
#include "graph/summary.h"
#include "graph/zoo.h"
#include "planner/memory_planner.h"

namespace headroom::planner {
namespace {

using graph::ZooSpec;

struct Measured {
  MemoryPlan plan;
  double median_seconds = 0;
  uint64_t num_tensors = 0;
};

// Plans `spec` `runs` times; returns the last plan and the median wall time of the whole
// planning (autodiff, schedule, sharing, offsets, verification). Aborts on error.
Measured Measure(const proto::ZooModel& spec, int runs) {
  absl::StatusOr<proto::GraphDef> def = graph::BuildZooModel(spec);
  absl::StatusOr<graph::Graph> g =
      def.ok() ? graph::Graph::FromProto(*def) : absl::StatusOr<graph::Graph>(def.status());
  if (!g.ok()) {
    std::fprintf(stderr, "%s: %s\n", spec.name().c_str(), std::string(g.status().message()).c_str());
    std::exit(1);
  }
  Measured m;
  std::vector<double> seconds;
  for (int i = 0; i < runs; ++i) {
    const absl::Time start = absl::Now();
    absl::StatusOr<MemoryPlan> plan = PlanMemory(*g, PlannerOptions());
    seconds.push_back(absl::ToDoubleSeconds(absl::Now() - start));
    if (!plan.ok()) {
      std::fprintf(stderr, "%s: %s\n", spec.name().c_str(),
                   std::string(plan.status().message()).c_str());
      std::exit(1);
    }
    m.plan = std::move(plan).value();
  }
  std::sort(seconds.begin(), seconds.end());
  m.median_seconds = seconds[seconds.size() / 2];
  m.num_tensors = m.plan.tensors.size();
  return m;
}

double Ratio(const MemoryPlan& p) {
  return static_cast<double>(p.arena_bytes) / static_cast<double>(p.lower_bound_bytes);
}

// Target 1. Returns the number of configurations over 1.02.
int ArenaAgainstLowerBound(int runs) {
  std::printf("== arena_bytes against lower_bound_bytes (target: ratio <= 1.02) ==\n");
  std::printf("%-14s %6s %14s %14s %8s %14s %10s %s\n", "model", "batch", "arena", "lower bound",
              "ratio", "no sharing", "plan ms", "strategy");
  int over = 0;
  for (const graph::ZooModelInfo& info : graph::ZooModels()) {
    for (uint64_t batch : {1, 32, 128}) {
      const Measured m = Measure(ZooSpec(info.name, batch), runs);
      const double ratio = Ratio(m.plan);
      over += ratio > 1.02;
      std::printf("%-14s %6d %14s %14s %8.4f %14s %10.1f %s%s\n", info.name.c_str(),
                  static_cast<int>(batch), graph::HumanBytes(m.plan.arena_bytes).c_str(),
                  graph::HumanBytes(m.plan.lower_bound_bytes).c_str(), ratio,
                  graph::HumanBytes(m.plan.no_sharing_bytes).c_str(), m.median_seconds * 1e3,
                  m.plan.strategy.c_str(), ratio > 1.02 ? "  OVER" : "");
    }
  }
  std::printf("%d configuration(s) over 1.02\n\n", over);
  return over;
}

// Target 2.
void LargestGraphs(int runs) {
  std::printf("== planning time of the largest graphs (target: < 200 ms), median of %d ==\n",
              runs);
  const std::vector<std::pair<std::string, proto::ZooModel>> cases = {
      {"resnet152, batch 64", ZooSpec("resnet152", 64)},
      {"transformer, 48 layers, batch 8", ZooSpec("transformer", 8, {{"layers", 48}})},
  };
  for (const auto& [what, spec] : cases) {
    const Measured m = Measure(spec, runs);
    std::printf("%-34s %6d tensors %6d positions %9.1f ms %s\n", what.c_str(),
                static_cast<int>(m.num_tensors), m.plan.num_positions, m.median_seconds * 1e3,
                m.median_seconds < 0.2 ? "ok" : "OVER");
  }
  std::printf("\n");
}

// Target 3: time against depth, normalised by n log n of the first graph.
void Scaling(const std::string& model, const std::string& option, int64_t base, int runs,
             const std::map<std::string, int64_t>& fixed, uint64_t batch) {
  std::printf("== scaling: %s, %s x1 x2 x4 x8 (time / (n log n) relative to x1) ==\n",
              model.c_str(), option.c_str());
  std::printf("%6s %10s %10s %12s %16s\n", "depth", "tensors", "ms", "ms ratio", "per n log n");
  double first_ms = 0, first_nlogn = 0;
  for (int64_t factor : {1, 2, 4, 8}) {
    std::map<std::string, int64_t> options = fixed;
    options[option] = base * factor;
    const Measured m = Measure(ZooSpec(model, batch, options), runs);
    const double n = static_cast<double>(m.num_tensors);
    const double nlogn = n * std::log2(n);
    const double ms = m.median_seconds * 1e3;
    if (factor == 1) {
      first_ms = ms;
      first_nlogn = nlogn;
    }
    std::printf("%6d %10d %10.1f %12.2f %16.2f\n", static_cast<int>(base * factor),
                static_cast<int>(m.num_tensors), ms, ms / first_ms,
                (ms / nlogn) / (first_ms / first_nlogn));
  }
  std::printf("\n");
}

// Returns the integer after "key": in a JSON text, or -1.
int64_t JsonInt(const std::string& json, const std::string& key) {
  std::smatch m;
  if (std::regex_search(json, m, std::regex("\"" + key + "\":\\s*([0-9]+)"))) {
    return std::stoll(m[1]);
  }
  return -1;
}

// Target 4.
void AgainstPyTorch(int runs) {
  std::printf("== against PyTorch 1.13 (CPU), resnet50 training step at batch 32 ==\n");
  // `bazel run` starts us in the runfiles tree; the script is in the workspace.
  const char* workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  const std::string cmd = absl::StrFormat(
      "/usr/bin/python3 %s/bench/pytorch_peak.py --model resnet50 --batch 32 --json",
      workspace ? workspace : ".");
  std::printf("running: %s\n", cmd.c_str());
  std::fflush(stdout);
  std::string json;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buffer[4096];
    while (size_t n = fread(buffer, 1, sizeof(buffer), p)) json.append(buffer, n);
    if (pclose(p) != 0) json.clear();
  }
  const int64_t torch_peak = JsonInt(json, "peak_bytes");
  if (torch_peak <= 0) {
    std::printf("could not run it (is python3-torch installed?)\n\n");
    return;
  }
  const Measured m = Measure(ZooSpec("resnet50", 32), runs);
  std::printf("%-28s %14s (%lld)\n", "PyTorch peak", graph::HumanBytes(torch_peak).c_str(),
              static_cast<long long>(torch_peak));
  std::printf("%-28s %14s (%llu)\n", "Headroom arena_bytes",
              graph::HumanBytes(m.plan.arena_bytes).c_str(),
              static_cast<unsigned long long>(m.plan.arena_bytes));
  std::printf("%-28s %14.3f\n\n", "arena / PyTorch peak",
              static_cast<double>(m.plan.arena_bytes) / static_cast<double>(torch_peak));
}

}  // namespace
}  // namespace headroom::planner

int main(int argc, char** argv) {
  using namespace headroom::planner;
  int runs = 5;
  bool pytorch = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--pytorch") == 0) {
      pytorch = true;
    } else if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: planner_bench [--runs N] [--pytorch]\n");
      return 2;
    }
  }
  const int over = ArenaAgainstLowerBound(1);
  LargestGraphs(runs);
  Scaling("transformer", "layers", 48, std::min(runs, 3),
          {{"d_model", 768}, {"heads", 12}, {"sequence", 1024}}, 8);
  Scaling("mlp", "depth", 64, std::min(runs, 3), {{"width", 1024}}, 32);
  if (pytorch) AgainstPyTorch(runs);
  return over == 0 ? 0 : 1;
}
