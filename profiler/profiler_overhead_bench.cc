// Profiling overhead on the CPU backend: the same plan trained twice side by side, one
// trainer recording every event and one not, steps alternating so that both see the same
// machine; prints the median step times, their ratio, and the time to build the timeline,
// the costs and the trace afterwards.
//
//   bazel run -c opt //profiler:profiler_overhead_bench -- [--steps N] [--models a,b]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "executor/cpu/cpu_backend.h"
#include "executor/trainer.h"
#include "graph/zoo.h"
#include "profiler/chrome_trace.h"
#include "profiler/events.h"
#include "profiler/op_costs.h"
#include "profiler/step_layout.h"
#include "profiler/timeline.h"

namespace headroom {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

struct Model {
  std::string name;
  uint64_t batch;
};

int RunModel(const Model& m, int steps) {
  proto::ZooModel spec;
  spec.set_name(m.name);
  spec.set_batch(m.batch);
  absl::StatusOr<proto::GraphDef> def = graph::BuildZooModel(spec);
  if (!def.ok()) return std::fprintf(stderr, "%s\n", def.status().ToString().c_str()), 1;
  absl::StatusOr<graph::Graph> g = graph::Graph::FromProto(*def);
  if (!g.ok()) return std::fprintf(stderr, "%s\n", g.status().ToString().c_str()), 1;
  std::unique_ptr<executor::Backend> plain_backend = executor::cpu::CreateCpuBackend();
  std::unique_ptr<executor::Backend> profiled_backend = executor::cpu::CreateCpuBackend();
  profiler::EventLog log;
  executor::TrainerOptions options;
  auto plain = executor::Trainer::Create(*g, plain_backend.get(), options);
  options.events = &log;
  auto profiled = executor::Trainer::Create(*g, profiled_backend.get(), options);
  if (!plain.ok() || !profiled.ok()) {
    std::fprintf(stderr, "%s\n", (plain.ok() ? profiled.status() : plain.status()).ToString().c_str());
    return 1;
  }
  // Alternate, starting with each side in turn; step 0 of each is warm-up.
  std::vector<double> off, on;
  for (int s = 0; s < steps; ++s) {
    for (int side = 0; side < 2; ++side) {
      const bool record = (side + s) % 2 == 1;
      absl::StatusOr<executor::StepResult> r = (record ? *profiled : *plain)->Step();
      if (!r.ok()) return std::fprintf(stderr, "%s\n", r.status().ToString().c_str()), 1;
      if (s > 0) (record ? on : off).push_back(r->seconds);
    }
  }
  const auto post = std::chrono::steady_clock::now();
  const profiler::StepLayout layout = profiler::DescribeStep(*(*profiled)->plan().step);
  absl::StatusOr<profiler::Timeline> timeline = profiler::Timeline::Build(log, layout);
  if (!timeline.ok()) return std::fprintf(stderr, "%s\n", timeline.status().ToString().c_str()), 1;
  const profiler::MeasuredCosts costs = profiler::MeasureCosts(log, layout);
  absl::StatusOr<profiler::ChromeTrace> trace =
      profiler::BuildChromeTrace(log, layout, *timeline, profiler::ChromeTraceOptions());
  if (!trace.ok()) return std::fprintf(stderr, "%s\n", trace.status().ToString().c_str()), 1;
  const double post_seconds = Seconds(post);
  const double median_off = Median(off), median_on = Median(on);
  std::printf("%-12s batch %3llu  %4zu nodes  %6zu events/step  off %.4f s  on %.4f s  "
              "overhead %+.2f%%  (post-processing %.3f s, trace %.1f MB)\n",
              m.name.c_str(), static_cast<unsigned long long>(m.batch), layout.nodes.size(),
              (log.memory().size() + log.ops().size() + log.copies().size()) / steps,
              median_off, median_on, 100.0 * (median_on / median_off - 1), post_seconds,
              trace->json.size() / 1e6);
  std::fflush(stdout);
  (void)costs;
  return 0;
}

}  // namespace
}  // namespace headroom

int main(int argc, char** argv) {
  int steps = 7;
  std::vector<headroom::Model> models = {{"mlp", 64}, {"transformer", 8}, {"resnet18", 16}};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--steps") == 0 && absl::SimpleAtoi(argv[i + 1], &steps) && steps > 1) {
      continue;
    }
    if (std::strcmp(argv[i], "--models") == 0) {
      models.clear();
      for (absl::string_view name : absl::StrSplit(argv[i + 1], ',')) {
        models.push_back({std::string(name), name == "mlp" ? 64u : name == "transformer" ? 8u : 16u});
      }
      continue;
    }
    std::fprintf(stderr, "usage: profiler_overhead_bench [--steps N>1] [--models mlp,resnet18,...]\n");
    return 2;
  }
  std::printf("profiling overhead, CPU backend, medians of steps 1..%d of each side, "
              "alternating steps\n", steps - 1);
  for (const headroom::Model& m : models) {
    if (int rc = headroom::RunModel(m, steps); rc != 0) return rc;
  }
  return 0;
}
