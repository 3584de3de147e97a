#include "profiler/op_costs.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "planner/training_graph.h"
#include "util/median.h"

namespace headroom::profiler {
MeasuredCosts MeasureCosts(const EventLog& log, const StepLayout& layout) {
  MeasuredCosts costs;
  int64_t last_step = -1;
  for (const StepEvent& s : log.steps()) last_step = std::max(last_step, s.step);
  for (const OpEvent& op : log.ops()) last_step = std::max(last_step, op.step);
  // The first step is left out when there are more.
  const int64_t first_counted = last_step >= 1 ? 1 : 0;

  // 1. Each node's times over the counted steps; each step's recompute seconds.
  const size_t n = layout.nodes.size();
  std::vector<std::vector<double>> seconds(n);
  absl::flat_hash_map<int64_t, double> recompute_by_step;
  for (const OpEvent& op : log.ops()) {
    if (op.step < first_counted || op.node < 0 || static_cast<size_t>(op.node) >= n) continue;
    const double s = (op.end_ns - op.begin_ns) * 1e-9;
    seconds[op.node].push_back(s);
    if (layout.nodes[op.node].kind == planner::NodeKind::kRecompute) {
      recompute_by_step[op.step] += s;
    }
  }
  std::vector<uint64_t> workspace(n, 0);
  for (const MemoryEvent& e : log.memory()) {
    if (e.role != MemoryRole::kWorkspace || e.kind != MemoryEvent::Kind::kAllocate) continue;
    if (e.node >= 0 && static_cast<size_t>(e.node) < n) {
      workspace[e.node] = std::max(workspace[e.node], e.bytes);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    proto::OpCost& c = costs.ops.emplace_back();
    c.set_node(layout.nodes[i].name);
    c.set_op(layout.nodes[i].op);
    c.set_kind(planner::NodeKindName(layout.nodes[i].kind));
    c.set_seconds(Median(seconds[i]));
    c.set_runs(static_cast<uint32_t>(seconds[i].size()));
    c.set_workspace_bytes(workspace[i]);
  }
  std::vector<double> recompute;
  for (int64_t step = first_counted; step <= last_step; ++step) {
    auto it = recompute_by_step.find(step);
    recompute.push_back(it == recompute_by_step.end() ? 0.0 : it->second);
  }
  costs.recompute_seconds = Median(recompute);

  // 2. Copy rates over measured copies.
  double to_host_bytes = 0, to_host_seconds = 0, to_device_bytes = 0, to_device_seconds = 0;
  for (const CopyEvent& c : log.copies()) {
    if (!c.measured || c.end_ns <= c.begin_ns) continue;
    const double s = (c.end_ns - c.begin_ns) * 1e-9;
    if (c.direction == CopyEvent::Direction::kToHost) {
      to_host_bytes += c.bytes;
      to_host_seconds += s;
    } else {
      to_device_bytes += c.bytes;
      to_device_seconds += s;
    }
  }
  if (to_host_seconds > 0) costs.copy_to_host_bytes_per_second = to_host_bytes / to_host_seconds;
  if (to_device_seconds > 0) {
    costs.copy_to_device_bytes_per_second = to_device_bytes / to_device_seconds;
  }
  return costs;
}

}  // namespace headroom::profiler
