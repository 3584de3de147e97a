#include "profiler/profile_report.h"

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "graph/summary.h"
#include "profiler/measured_cost_model.h"
#include "util/median.h"

namespace headroom::profiler {
proto::ProfileResponse BuildProfileReport(const graph::Graph& forward,
                                          const planner::SectionPlan& plan,
                                          const EventLog& log, const StepLayout& layout,
                                          const Timeline& timeline, const MeasuredCosts& costs,
                                          const ProfileReportOptions& options) {
  proto::ProfileResponse r;
  // 1. The plan it ran under.
  proto::PlanSummary& summary = *r.mutable_plan();
  summary.set_budget_bytes(options.budget_bytes);
  summary.set_arena_bytes(plan.memory->arena_bytes);
  summary.set_lower_bound_bytes(plan.memory->lower_bound_bytes);
  summary.set_no_sharing_bytes(plan.memory->no_sharing_bytes);
  summary.set_predicted_peak_bytes(plan.peak_bytes);
  summary.set_predicted_step_seconds(plan.step_seconds);
  summary.set_overhead_ratio(plan.overhead_ratio);
  summary.set_recompute_flops(plan.step->recompute_flops);
  summary.set_offloaded_bytes(plan.step->offloaded_bytes);
  summary.set_num_tensors(plan.step->graph.tensors().size());
  summary.set_num_steps(plan.step->graph.nodes().size());

  // 2. What was measured.
  r.set_backend(options.backend);
  r.set_graph_name(forward.name());
  r.set_graph_fingerprint(GraphFingerprint(forward));
  *r.mutable_timeline() = timeline.ToProto(layout, options.max_samples);
  uint64_t workspace = 0;
  for (const MemoryEvent& e : log.memory()) {
    if (e.role == MemoryRole::kWorkspace) workspace = std::max(workspace, e.bytes);
  }
  r.set_workspace_bytes(workspace);
  r.set_measured_peak_bytes(timeline.high_water_bytes() + workspace);
  std::vector<double> seconds;
  for (const StepEvent& s : log.steps()) {
    r.add_step_seconds((s.end_ns - s.begin_ns) * 1e-9);
    seconds.push_back((s.end_ns - s.begin_ns) * 1e-9);
  }
  // Like the costs, the median leaves out the first step when there are more.
  if (seconds.size() > 1) seconds.erase(seconds.begin());
  r.set_median_step_seconds(Median(seconds));
  r.set_predicted_step_seconds(plan.step_seconds);
  r.set_offloaded_bytes(plan.step->offloaded_bytes);
  r.set_recompute_seconds(costs.recompute_seconds);
  r.set_copy_to_host_bytes_per_second(costs.copy_to_host_bytes_per_second);
  r.set_copy_to_device_bytes_per_second(costs.copy_to_device_bytes_per_second);
  for (const proto::OpCost& op : costs.ops) {
    proto::OpCost* out = r.add_op_costs();
    *out = op;
    if (!options.node_times_measured) out->set_runs(0);
  }
  return r;
}

bool UnplannedWithinBound(const proto::ProcessMemory& p) {
  return !p.unavailable_reason().empty() || p.unplanned_bytes() <= p.unplanned_limit_bytes();
}

}  // namespace headroom::profiler
