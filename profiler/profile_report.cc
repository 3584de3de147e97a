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

std::string ProcessMemoryLine(const proto::ProcessMemory& p) {
  if (!p.unavailable_reason().empty()) return absl::StrCat("not measured: ", p.unavailable_reason());
  return absl::StrFormat("peak %s = baseline %s + arena %s + host pool %s + unplanned %s "
                         "(bound %s)%s",
                         graph::HumanBytes(p.physical_peak_bytes()),
                         graph::HumanBytes(p.baseline_bytes()), graph::HumanBytes(p.arena_bytes()),
                         graph::HumanBytes(p.host_pool_bytes()),
                         graph::HumanBytes(p.unplanned_bytes()),
                         graph::HumanBytes(p.unplanned_limit_bytes()),
                         UnplannedWithinBound(p) ? "" : ": OVER THE BOUND");
}

bool UnplannedWithinBound(const proto::ProcessMemory& p) {
  return !p.unavailable_reason().empty() || p.unplanned_bytes() <= p.unplanned_limit_bytes();
}

std::string ProfileSummaryText(const proto::ProfileResponse& report, const Timeline& timeline,
                               int rows) {
  std::string out;
  const proto::PlanSummary& plan = report.plan();
  absl::StrAppendFormat(&out, "%-26s %s on %s, %d step(s)\n", "profiled", report.graph_name(),
                        report.backend(), report.step_seconds_size());
  absl::StrAppendFormat(&out, "%-26s %s (predicted %s)\n", "measured peak",
                        graph::HumanBytes(report.measured_peak_bytes()),
                        graph::HumanBytes(plan.predicted_peak_bytes()));
  absl::StrAppendFormat(&out, "%-26s %s live at most; arena high-water %s\n", "device memory",
                        graph::HumanBytes(report.timeline().peak_bytes()),
                        graph::HumanBytes(report.timeline().high_water_bytes()));
  const double measured = report.median_step_seconds();
  const double predicted = report.predicted_step_seconds();
  absl::StrAppendFormat(&out, "%-26s %.4f s (cost model predicted %.4f s, %.2fx)\n",
                        "median step", measured, predicted,
                        predicted > 0 ? measured / predicted : 0.0);
  if (report.offloaded_bytes() > 0) {
    absl::StrAppendFormat(&out, "%-26s %s per step; copy rates %.2f GB/s to host, %.2f GB/s back\n",
                          "offloaded", graph::HumanBytes(report.offloaded_bytes()),
                          report.copy_to_host_bytes_per_second() * 1e-9,
                          report.copy_to_device_bytes_per_second() * 1e-9);
  }
  if (report.recompute_seconds() > 0) {
    absl::StrAppendFormat(&out, "%-26s %.4f s per step\n", "recomputed forward",
                          report.recompute_seconds());
  }
  if (report.has_process()) {
    absl::StrAppendFormat(&out, "%-26s %s\n", "physical (process)",
                          ProcessMemoryLine(report.process()));
  }
  if (!report.physical().unavailable_reason().empty()) {
    absl::StrAppendFormat(&out, "%-26s %s\n", "physical (CUPTI)",
                          report.physical().unavailable_reason());
  } else if (report.physical().allocations() > 0) {
    const proto::PhysicalMemory& p = report.physical();
    absl::StrAppendFormat(&out, "%-26s peak %s in %d allocation(s); arena + workspace %s (%+.1f%%)\n",
                          "physical (CUPTI)", graph::HumanBytes(p.peak_device_bytes()),
                          p.allocations(), graph::HumanBytes(p.expected_bytes()),
                          p.expected_bytes() > 0
                              ? 100.0 * (static_cast<double>(p.peak_device_bytes()) /
                                             p.expected_bytes() - 1)
                              : 0.0);
    if (p.dropped_records() + p.unmatched_frees() + p.replaced_allocations() > 0) {
      absl::StrAppendFormat(&out, "%-26s incomplete: %d record(s) dropped, %d unmatched free(s), "
                            "%d replaced allocation(s)\n", "", p.dropped_records(),
                            p.unmatched_frees(), p.replaced_allocations());
    }
  }
  out += "\n";
  out += timeline.PeakTable(rows);

  // The slowest nodes.
  std::vector<const proto::OpCost*> ops;
  double total = 0;
  for (const proto::OpCost& op : report.op_costs()) {
    ops.push_back(&op);
    total += op.seconds();
  }
  std::sort(ops.begin(), ops.end(), [](const proto::OpCost* a, const proto::OpCost* b) {
    return a->seconds() > b->seconds();
  });
  absl::StrAppendFormat(&out, "\nslowest nodes (median of %d step(s); %.4f s in all):\n",
                        ops.empty() ? 0 : ops.front()->runs(), total);
  for (int i = 0; i < rows && i < static_cast<int>(ops.size()); ++i) {
    absl::StrAppendFormat(&out, "  %-44s %-22s %9.3f ms %5.1f%%\n", ops[i]->node(), ops[i]->op(),
                          ops[i]->seconds() * 1e3,
                          total > 0 ? 100.0 * ops[i]->seconds() / total : 0.0);
  }
  return out;
}

}  // namespace headroom::profiler
