// The search over where the optimizer state and the parameters live, beside cuts and
// offload: one SectionSearch per placement considered (state on the device; state and update
// on the host: SectionCuts::optimizer_state_on_host; state and parameters on the host:
// SectionCuts::parameters_on_host too), each planning its candidates exactly; the answer is
// the fastest plan that fits the budget over all of them.
//
// Create() once, then Plan() for any number of budgets, Frontier(), MinimumPeakBytes().
// Keeps references to the graph and the cost model, which must outlive it.
// Thread-compatible.
#ifndef HEADROOM_PLANNER_PLACEMENT_SEARCH_H_
#define HEADROOM_PLANNER_PLACEMENT_SEARCH_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner/section_search.h"
#include "proto/headroom.pb.h"

namespace headroom::planner {

// Returns "device", "host" or "auto".
const char* OptimizerStateName(proto::OptimizerState placement);

// Returns the placement named "device", "host" or "auto"; InvalidArgument naming `name`
// otherwise.
absl::StatusOr<proto::OptimizerState> ParseOptimizerState(absl::string_view name);

// Returns "device", "host" or "auto".
const char* ParameterPlacementName(proto::ParameterPlacement placement);

// Returns the placement named "device", "host" or "auto"; InvalidArgument naming `name`
// otherwise.
absl::StatusOr<proto::ParameterPlacement> ParseParameterPlacement(absl::string_view name);

// Returns the points of `all` that no other point beats in both peak and time, largest
// peak first: the Pareto frontier of plans from several searches.
std::vector<TradeOffPoint> ParetoFrontier(std::vector<TradeOffPoint> all);

class PlacementSearch {
 public:
  // Returns the search over `graph` for the placements `placement` and `parameters` allow,
  // each a SectionSearch with `options` (its optimizer_state_on_host and parameters_on_host
  // set per placement). The state: OPTIMIZER_STATE_DEVICE the device only, HOST the host
  // only, AUTO both. The parameters: PARAMETERS_DEVICE on the device; HOST on the host only
  // (with the state on the host: the state's DEVICE is refused, its AUTO becomes HOST); AUTO
  // adds state and parameters on the host to the state's placements (unless the state is
  // DEVICE). InvalidArgument for an unknown placement, a refused pair, or
  // SectionSearch::Create's error.
  static absl::StatusOr<std::unique_ptr<PlacementSearch>> Create(
      const TrainingGraph& graph, const CostModel& cost, const SearchOptions& options,
      proto::OptimizerState placement,
      proto::ParameterPlacement parameters = proto::PARAMETERS_DEVICE);

  // Returns the plain step (no sections) of the first placement searched (the device's,
  // unless only the host is).
  absl::StatusOr<SectionPlan> Unconstrained();

  // Returns the fastest plan whose budget bytes fit `budget_bytes` over every placement
  // searched (the device's on a tie); when none fits, the FailedPrecondition of the placement
  // whose smallest plan is smallest, which says what that plan keeps on the device.
  absl::StatusOr<SectionPlan> Plan(uint64_t budget_bytes);

  // Returns the Pareto frontier over every placement's frontier (largest peak first), each
  // point marked with its placement.
  absl::StatusOr<std::vector<TradeOffPoint>> Frontier();

  // Returns the first placement's baselines.
  absl::StatusOr<std::vector<TradeOffPoint>> Baselines();

  // Returns the smallest exact peak over every placement.
  absl::StatusOr<uint64_t> MinimumPeakBytes();

  // Returns the candidates of every placement's pool.
  int num_candidates() const;

 private:
  PlacementSearch() = default;

  // One per placement searched, the device's first; whether its state is on the host, and
  // its parameters.
  std::vector<std::unique_ptr<SectionSearch>> searches_;
  std::vector<bool> on_host_;
  std::vector<bool> parameters_on_host_;
};

}  // namespace headroom::planner

#endif  // HEADROOM_PLANNER_PLACEMENT_SEARCH_H_
