// Optimizer state on the host, the planner's side (issue 24, item 2 with its search): the
// smallest feasible budget with the state kept on the device and with the state and update
// on the host, and the predicted step there.
//   1. GPT-2 small (transformer, batch 4, sequence 512, Adam) on the h100, h200 and gh200
//      presets.
//   2. resnet18 at batch 8 (SGD with momentum, h100): the least feasible fraction of the
//      float32 unconstrained peak.
//   3. The fastest plan at the device placement's floor, with each placement.
//
//   bazel run -c opt //planner:optimizer_offload_bench
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "graph/summary.h"
#include "planner/bench_util.h"
#include "planner/cost_model.h"
#include "planner/placement_search.h"
#include "planner/training_graph.h"

namespace headroom::planner {
namespace {

using bench::Load;
using bench::OrDie;
using graph::HumanBytes;

void Row(const std::string& label, const graph::Graph& forward, proto::Optimizer::Kind optimizer,
         const std::string& device) {
  TrainingOptions training;
  training.optimizer = optimizer;
  const TrainingGraph t = OrDie(TrainingGraph::Build(forward, training), label);
  const RooflineCostModel cost(forward, OrDie(DevicePreset(device), device));
  SearchOptions options;  // Offload allowed; a GPU's host memory is separate.
  uint64_t floor[2] = {0, 0};
  double plain_seconds = 0;
  uint64_t plain_peak = 0;
  for (proto::OptimizerState placement :
       {proto::OPTIMIZER_STATE_DEVICE, proto::OPTIMIZER_STATE_HOST}) {
    const bool host = placement == proto::OPTIMIZER_STATE_HOST;
    std::unique_ptr<PlacementSearch> search =
        OrDie(PlacementSearch::Create(t, cost, options, placement), "search");
    const SectionPlan plain = OrDie(search->Unconstrained(), "plain");
    if (!host) {
      plain_seconds = plain.step_seconds;
      plain_peak = plain.peak_bytes;
    }
    const uint64_t min_peak = OrDie(search->MinimumPeakBytes(), "minimum");
    floor[host] = min_peak;
    const SectionPlan at_floor = OrDie(search->Plan(min_peak), "plan at the floor");
    std::printf(
        "%-26s %-6s state on %-6s unconstrained %10s  floor %10s (%5.1f%% of float32 "
        "unconstrained)  step there %.4f s (%.2fx the plain step), %zu sections, "
        "host pool %s, host update %.4f s\n",
        label.c_str(), device.c_str(), host ? "host" : "device",
        HumanBytes(plain.peak_bytes).c_str(), HumanBytes(min_peak).c_str(),
        100.0 * min_peak / plain_peak, at_floor.step_seconds, at_floor.step_seconds / plain_seconds,
        at_floor.step->sections.size(), HumanBytes(at_floor.host_pool_bytes).c_str(),
        at_floor.step->host_update_seconds);
  }
  // At the device placement's floor: the fastest plan with the state on the host.
  std::unique_ptr<PlacementSearch> host =
      OrDie(PlacementSearch::Create(t, cost, options, proto::OPTIMIZER_STATE_AUTO), "search");
  const SectionPlan best = OrDie(host->Plan(floor[0]), "plan");
  std::printf(
      "%-26s %-6s floor ratio device/host %.2fx; at the device floor %s the auto "
      "search picks state on %s, step %.4f s\n",
      label.c_str(), device.c_str(), static_cast<double>(floor[0]) / floor[1],
      HumanBytes(floor[0]).c_str(), best.step->optimizer_state_on_host() ? "host" : "device",
      best.step_seconds);
}

}  // namespace
}  // namespace headroom::planner

int main() {
  using namespace headroom::planner;
  const headroom::graph::Graph gpt2 = bench::Load("transformer", 4, {{"sequence", 512}});
  for (const char* device : {"h100", "h200", "gh200"}) {
    Row("gpt2-small b4 s512 adam", gpt2, headroom::proto::Optimizer::KIND_ADAM, device);
  }
  const headroom::graph::Graph resnet = bench::Load("resnet18", 8);
  Row("resnet18 b8 sgd", resnet, headroom::proto::Optimizer::KIND_SGD_MOMENTUM, "h100");
  Row("resnet18 b8 adam", resnet, headroom::proto::Optimizer::KIND_ADAM, "h100");
  return 0;
}
