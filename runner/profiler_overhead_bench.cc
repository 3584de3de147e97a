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
#include "util/median.h"

namespace headroom {
namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

struct Model {
  std::string name;
  uint64_t batch;
};

// The models measured: the MLP (few large ops), the transformer of the executor's benchmark
// (4 layers of width 256, sequence 128: many small ops, where per-event costs show most) and
// ResNet-18 at 224x224.
Model Named(absl::string_view name) {
  if (name == "mlp") return {"mlp", 64};
  if (name == "transformer") return {"transformer", 16};
  return {std::string(name), 16};
}

proto::ZooModel Spec(const Model& m) {
  if (m.name != "transformer") return graph::ZooSpec(m.name, m.batch);
  return graph::ZooSpec(m.name, m.batch,
                        {{"layers", 4}, {"d_model", 256}, {"heads", 4}, {"sequence", 128},
                         {"positions", 128}, {"vocab", 8192}});
}

// Returns the seconds one event costs to record: an allocation, a free and a node into an
// EventLog, a million times, with the clock reads the executor makes.
double SecondsPerEvent() {
  constexpr int kRounds = 1000000;
  profiler::EventLog log;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kRounds; ++i) {
    profiler::MemoryEvent e;
    e.time_ns = profiler::NowNanos();
    e.buffer = i;
    log.OnMemory(e);
    e.kind = profiler::MemoryEvent::Kind::kFree;
    e.time_ns = profiler::NowNanos();
    log.OnMemory(e);
    log.OnOp({0, i, profiler::NowNanos(), profiler::NowNanos()});
  }
  return Seconds(start) / (3.0 * kRounds);
}

int RunModel(const Model& m, int steps, double seconds_per_event) {
  absl::StatusOr<proto::GraphDef> def = graph::BuildZooModel(Spec(m));
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
  // Each step's pair (the same step number on both sides) gives a ratio; the median ratio
  // is robust to the machine's noise, the spread shows it.
  std::vector<double> ratios;
  for (size_t i = 0; i < on.size() && i < off.size(); ++i) ratios.push_back(on[i] / off[i]);
  std::sort(ratios.begin(), ratios.end());
  std::printf("%-12s batch %3llu  %4zu nodes  %5zu events/step  off %.4f s  on %.4f s  "
              "overhead %+.2f%% (pairs %+.1f%% .. %+.1f%%), recording bound %.4f%%  "
              "post-processing %.3f s, trace %.1f MB\n",
              m.name.c_str(), static_cast<unsigned long long>(m.batch), layout.nodes.size(),
              (log.memory().size() + log.ops().size() + log.copies().size()) / steps,
              Median(off), Median(on), 100.0 * (Median(ratios) - 1),
              100.0 * (ratios.front() - 1), 100.0 * (ratios.back() - 1),
              100.0 * seconds_per_event * static_cast<double>(log.memory().size() +
                                                              log.ops().size() +
                                                              log.copies().size()) /
                  steps / Median(off),
              post_seconds,
              trace->json.size() / 1e6);
  std::fflush(stdout);
  (void)costs;
  return 0;
}

}  // namespace
}  // namespace headroom

int main(int argc, char** argv) {
  int steps = 9;
  std::vector<headroom::Model> models = {headroom::Named("mlp"), headroom::Named("transformer"),
                                         headroom::Named("resnet18")};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--steps") == 0 && absl::SimpleAtoi(argv[i + 1], &steps) && steps > 1) {
      continue;
    }
    if (std::strcmp(argv[i], "--models") == 0) {
      models.clear();
      for (absl::string_view name : absl::StrSplit(argv[i + 1], ',')) {
        models.push_back(headroom::Named(name));
      }
      continue;
    }
    std::fprintf(stderr, "usage: profiler_overhead_bench [--steps N>1] [--models mlp,resnet18,...]\n");
    return 2;
  }
  std::printf("profiling overhead, CPU backend: two trainers of one plan, one recording every "
              "event, steps alternating;\nmedians of steps 1..%d; overhead is the median of "
              "the per-step ratios recorded/plain\n", steps - 1);
  const double per_event = headroom::SecondsPerEvent();
  std::printf("recording one event costs %.1f ns (the recording bound below is events per "
              "step times that, over the plain step)\n", per_event * 1e9);
  for (const headroom::Model& m : models) {
    if (int rc = headroom::RunModel(m, steps, per_event); rc != 0) return rc;
  }
  return 0;
}
