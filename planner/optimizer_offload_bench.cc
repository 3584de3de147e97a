// Optimizer state and parameters on the host, the planner's side (issue 24, items 2 and 3
// with their search): the smallest feasible budget with the state kept on the device, with
// the state and update on the host, and with the parameters on the host between uses too,
// and the predicted step there.
//   1. GPT-2 small (transformer, batch 4, sequence 512, Adam) on the h100, h200 and gh200
//      presets.
//   2. resnet18 at batch 8 (SGD with momentum, h100): the least feasible fraction of the
//      float32 unconstrained peak.
//   3. The fastest plan the auto search (every placement) finds at the device placement's
//      floor and at the host state's.
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

struct Placement {
  const char* name;
  proto::OptimizerState state;
  proto::ParameterPlacement parameters;
};

void Row(const std::string& label, const graph::Graph& forward, proto::Optimizer::Kind optimizer,
         const std::string& device) {
  TrainingOptions training;
  training.optimizer = optimizer;
  const TrainingGraph t = OrDie(TrainingGraph::Build(forward, training), label);
  const RooflineCostModel cost(forward, OrDie(DevicePreset(device), device));
  SearchOptions options;  // Offload allowed; a GPU's host memory is separate.
  const Placement placements[] = {
      {"state device, params device", proto::OPTIMIZER_STATE_DEVICE, proto::PARAMETERS_DEVICE},
      {"state host,   params device", proto::OPTIMIZER_STATE_HOST, proto::PARAMETERS_DEVICE},
      {"state host,   params host", proto::OPTIMIZER_STATE_HOST, proto::PARAMETERS_HOST}};
  uint64_t floor[3] = {0, 0, 0};
  double plain_seconds = 0;
  uint64_t plain_peak = 0;
  for (int i = 0; i < 3; ++i) {
    const Placement& p = placements[i];
    std::unique_ptr<PlacementSearch> search =
        OrDie(PlacementSearch::Create(t, cost, options, p.state, p.parameters), "search");
    const SectionPlan plain = OrDie(search->Unconstrained(), "plain");
    if (i == 0) {
      plain_seconds = plain.step_seconds;
      plain_peak = plain.peak_bytes;
    }
    const uint64_t min_peak = OrDie(search->MinimumPeakBytes(), "minimum");
    floor[i] = min_peak;
    const SectionPlan at_floor = OrDie(search->Plan(min_peak), "plan at the floor");
    std::printf(
        "%-24s %-5s %s: unconstrained %10s  floor %10s (%5.1f%% of float32 unconstrained, "
        "%.2fx below the device placement's)  step there %.4f s (%.2fx the plain step), %zu "
        "sections, host pool %s, host update %.4f s, parameter copies %s a step\n",
        label.c_str(), device.c_str(), p.name, HumanBytes(plain.peak_bytes).c_str(),
        HumanBytes(min_peak).c_str(), 100.0 * min_peak / plain_peak,
        static_cast<double>(floor[0]) / min_peak, at_floor.step_seconds,
        at_floor.step_seconds / plain_seconds, at_floor.step->sections.size(),
        HumanBytes(at_floor.host_pool_bytes).c_str(), at_floor.step->host_update_seconds,
        HumanBytes(at_floor.step->parameter_copy_bytes).c_str());
  }
  // At the device placement's floor and at the host state's: the fastest plan when the
  // search may choose every placement.
  std::unique_ptr<PlacementSearch> any =
      OrDie(PlacementSearch::Create(t, cost, options, proto::OPTIMIZER_STATE_AUTO,
                                    proto::PARAMETERS_AUTO),
            "search");
  for (int i : {0, 1}) {
    const SectionPlan best = OrDie(any->Plan(floor[i]), "plan");
    std::printf(
        "%-24s %-5s auto at %10s (floor of %s): state on %s, parameters on %s, step %.4f s\n",
        label.c_str(), device.c_str(), HumanBytes(floor[i]).c_str(), placements[i].name,
        best.step->optimizer_state_on_host() ? "host" : "device",
        best.step->parameters_on_host() ? "host" : "device", best.step_seconds);
  }
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
