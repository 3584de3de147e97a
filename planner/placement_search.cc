#include "planner/placement_search.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "util/status_macros.h"

namespace headroom::planner {

std::vector<TradeOffPoint> ParetoFrontier(std::vector<TradeOffPoint> all) {
  // Largest peak first; a point stays if it is faster than every point with a smaller peak.
  std::sort(all.begin(), all.end(), [](const TradeOffPoint& a, const TradeOffPoint& b) {
    return a.peak_bytes != b.peak_bytes ? a.peak_bytes > b.peak_bytes
                                        : a.step_seconds < b.step_seconds;
  });
  std::vector<TradeOffPoint> frontier;
  double fastest_below = std::numeric_limits<double>::infinity();
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (it->step_seconds < fastest_below) {
      frontier.push_back(*it);
      fastest_below = it->step_seconds;
    }
  }
  std::reverse(frontier.begin(), frontier.end());
  return frontier;
}

const char* OptimizerStateName(proto::OptimizerState placement) {
  switch (placement) {
    case proto::OPTIMIZER_STATE_HOST:
      return "host";
    case proto::OPTIMIZER_STATE_AUTO:
      return "auto";
    default:
      return "device";
  }
}

absl::StatusOr<proto::OptimizerState> ParseOptimizerState(absl::string_view name) {
  if (name == "device") return proto::OPTIMIZER_STATE_DEVICE;
  if (name == "host") return proto::OPTIMIZER_STATE_HOST;
  if (name == "auto") return proto::OPTIMIZER_STATE_AUTO;
  return absl::InvalidArgumentError(
      absl::StrCat("optimizer state placement '", name, "' is not one of device, host, auto"));
}

const char* ParameterPlacementName(proto::ParameterPlacement placement) {
  switch (placement) {
    case proto::PARAMETERS_HOST:
      return "host";
    case proto::PARAMETERS_AUTO:
      return "auto";
    default:
      return "device";
  }
}

absl::StatusOr<proto::ParameterPlacement> ParseParameterPlacement(absl::string_view name) {
  if (name == "device") return proto::PARAMETERS_DEVICE;
  if (name == "host") return proto::PARAMETERS_HOST;
  if (name == "auto") return proto::PARAMETERS_AUTO;
  return absl::InvalidArgumentError(
      absl::StrCat("parameter placement '", name, "' is not one of device, host, auto"));
}

absl::StatusOr<std::unique_ptr<PlacementSearch>> PlacementSearch::Create(
    const TrainingGraph& graph, const CostModel& cost, const SearchOptions& options,
    proto::OptimizerState placement, proto::ParameterPlacement parameters) {
  if (!proto::OptimizerState_IsValid(placement)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer_state: ", placement, " is not an OptimizerState (0 device, 1 host, 2 auto)"));
  }
  if (!proto::ParameterPlacement_IsValid(parameters)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameters: ", parameters, " is not a ParameterPlacement (0 device, 1 host, 2 auto)"));
  }
  if (parameters == proto::PARAMETERS_HOST && placement == proto::OPTIMIZER_STATE_DEVICE) {
    return absl::InvalidArgumentError(
        "parameters on the host need the optimizer state on the host (its master copies are "
        "what each use prefetches): use optimizer state host or auto");
  }
  // (state on the host, parameters on the host) pairs, the device's first.
  std::vector<std::pair<bool, bool>> pairs;
  if (parameters != proto::PARAMETERS_HOST) {
    if (placement != proto::OPTIMIZER_STATE_HOST) pairs.push_back({false, false});
    if (placement != proto::OPTIMIZER_STATE_DEVICE) pairs.push_back({true, false});
  }
  if (parameters != proto::PARAMETERS_DEVICE && placement != proto::OPTIMIZER_STATE_DEVICE) {
    pairs.push_back({true, true});
  }
  std::unique_ptr<PlacementSearch> search(new PlacementSearch());
  for (const auto& [on_host, params_on_host] : pairs) {
    SearchOptions o = options;
    o.optimizer_state_on_host = on_host;
    o.parameters_on_host = params_on_host;
    ASSIGN_OR_RETURN(std::unique_ptr<SectionSearch> s, SectionSearch::Create(graph, cost, o));
    search->searches_.push_back(std::move(s));
    search->on_host_.push_back(on_host);
    search->parameters_on_host_.push_back(params_on_host);
  }
  return search;
}

absl::StatusOr<SectionPlan> PlacementSearch::Unconstrained() {
  return searches_.front()->Unconstrained();
}

absl::StatusOr<SectionPlan> PlacementSearch::Plan(uint64_t budget_bytes) {
  std::optional<SectionPlan> best;
  absl::Status smallest_error;
  uint64_t smallest = std::numeric_limits<uint64_t>::max();
  for (const std::unique_ptr<SectionSearch>& s : searches_) {
    absl::StatusOr<SectionPlan> plan = s->Plan(budget_bytes);
    if (plan.ok()) {
      if (!best.has_value() || plan->step_seconds < best->step_seconds) best = *std::move(plan);
      continue;
    }
    if (plan.status().code() != absl::StatusCode::kFailedPrecondition) return plan.status();
    ASSIGN_OR_RETURN(const uint64_t minimum, s->MinimumPeakBytes());
    if (minimum < smallest) {
      smallest = minimum;
      smallest_error = plan.status();
    }
  }
  if (best.has_value()) return *std::move(best);
  return smallest_error;
}

absl::StatusOr<std::vector<TradeOffPoint>> PlacementSearch::Frontier() {
  std::vector<TradeOffPoint> all;
  for (size_t i = 0; i < searches_.size(); ++i) {
    ASSIGN_OR_RETURN(std::vector<TradeOffPoint> points, searches_[i]->Frontier());
    for (TradeOffPoint& p : points) {
      p.optimizer_state_on_host = on_host_[i];
      p.parameters_on_host = parameters_on_host_[i];
    }
    all.insert(all.end(), points.begin(), points.end());
  }
  return ParetoFrontier(std::move(all));
}

absl::StatusOr<std::vector<TradeOffPoint>> PlacementSearch::Baselines() {
  return searches_.front()->Baselines();
}

absl::StatusOr<uint64_t> PlacementSearch::MinimumPeakBytes() {
  uint64_t smallest = std::numeric_limits<uint64_t>::max();
  for (const std::unique_ptr<SectionSearch>& s : searches_) {
    ASSIGN_OR_RETURN(const uint64_t m, s->MinimumPeakBytes());
    smallest = std::min(smallest, m);
  }
  return smallest;
}

int PlacementSearch::num_candidates() const {
  int n = 0;
  for (const std::unique_ptr<SectionSearch>& s : searches_) n += s->num_candidates();
  return n;
}

}  // namespace headroom::planner
