// The search over where the optimizer state lives, beside cuts and offload: one
// SectionSearch per placement considered (state on the device, state and update on the host:
// SectionCuts::optimizer_state_on_host), each planning its candidates exactly; the answer is
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

class PlacementSearch {
 public:
  // Returns the search over `graph` for the placements `placement` allows (OPTIMIZER_STATE_
  // DEVICE: the device only; HOST: the host only; AUTO: both), each a SectionSearch with
  // `options` (its optimizer_state_on_host set per placement); InvalidArgument for an
  // unknown placement, or SectionSearch::Create's error.
  static absl::StatusOr<std::unique_ptr<PlacementSearch>> Create(const TrainingGraph& graph,
                                                                 const CostModel& cost,
                                                                 const SearchOptions& options,
                                                                 proto::OptimizerState placement);

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

  // One per placement searched, the device's first; and whether it is the host's.
  std::vector<std::unique_ptr<SectionSearch>> searches_;
  std::vector<bool> on_host_;
};

}  // namespace headroom::planner

#endif  // HEADROOM_PLANNER_PLACEMENT_SEARCH_H_
