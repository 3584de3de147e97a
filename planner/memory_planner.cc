#include "planner/memory_planner.h"

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "graph/shape.h"
#include "graph/summary.h"
#include "planner/sharing.h"
#include "util/status_macros.h"

namespace headroom::planner {
namespace {

// Whether buffer `b` holds tensors on the host only (optimizer state placed there).
bool OnHost(const TrainingGraph& graph, const Buffer& b) {
  for (TensorId t : b.tensors) {
    if (!graph.tensor(t).on_host) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<MemoryPlan> PlanMemory(const graph::Graph& forward, const PlannerOptions& options,
                                      const std::vector<std::unique_ptr<OffsetStrategy>>& strategies) {
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(TrainingGraph graph, TrainingGraph::Build(forward, options.training));
  ASSIGN_OR_RETURN(Schedule schedule, ScheduleGraph(graph));
  ASSIGN_OR_RETURN(MemoryPlan plan,
                   PlanScheduledGraph(graph, schedule, options.alignment_bytes, strategies));
  plan.planning_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return plan;
}

absl::StatusOr<MemoryPlan> PlanScheduledGraph(
    const TrainingGraph& graph, const Schedule& schedule, uint64_t alignment_bytes,
    const std::vector<std::unique_ptr<OffsetStrategy>>& strategies) {
  const absl::Time start = absl::Now();
  const std::vector<Lifetime> lifetimes = ComputeLifetimes(graph, schedule);
  const BufferAssignment buffers = AssignBuffers(graph, schedule, lifetimes);

  // Tensors on the host (optimizer state placed there) take no arena bytes: their buffers
  // get no request (offset 0) and count nothing below.
  std::vector<BufferRequest> requests;
  std::vector<uint64_t> buffer_bytes;
  std::vector<Lifetime> buffer_lifetimes;
  std::vector<std::string> names;
  std::vector<int32_t> request_of(buffers.buffers.size(), -1);
  for (size_t i = 0; i < buffers.buffers.size(); ++i) {
    const Buffer& b = buffers.buffers[i];
    if (OnHost(graph, b)) continue;
    request_of[i] = static_cast<int32_t>(requests.size());
    requests.push_back({b.bytes, b.lifetime.first_position, b.lifetime.last_position});
    buffer_bytes.push_back(b.bytes);
    buffer_lifetimes.push_back(b.lifetime);
    names.push_back(graph.tensor(b.tensors.front()).name);
  }
  RETURN_IF_ERROR(CheckAssignable(requests, alignment_bytes, names));
  ASSIGN_OR_RETURN(const OffsetAssignment assignment,
                   AssignOffsets(requests, alignment_bytes, strategies));
  RETURN_IF_ERROR(VerifyNoOverlap(requests, assignment, alignment_bytes, names));

  MemoryPlan plan;
  std::vector<uint64_t> tensor_bytes;
  for (TensorId t = 0; t < static_cast<TensorId>(graph.tensors().size()); ++t) {
    const TrainingTensor& tensor = graph.tensor(t);
    const int32_t b = buffers.buffer_of[t];
    const int32_t r = request_of[b];
    plan.tensors.push_back({tensor.name, tensor.role, tensor.device_bytes(),
                            r < 0 ? 0 : assignment.offsets[r], lifetimes[t], b});
    if (tensor.on_host) {
      plan.host_bytes_by_role[tensor.role] += tensor.bytes;
      continue;
    }
    plan.no_sharing_bytes += tensor.bytes;
    plan.bytes_by_role[tensor.role] += tensor.bytes;
    tensor_bytes.push_back(tensor.bytes);
  }
  std::vector<Lifetime> device_lifetimes;
  for (TensorId t = 0; t < static_cast<TensorId>(graph.tensors().size()); ++t) {
    if (!graph.tensor(t).on_host) device_lifetimes.push_back(lifetimes[t]);
  }
  plan.arena_bytes = assignment.arena_bytes;
  plan.lower_bound_bytes = PeakLiveBytes(buffer_bytes, buffer_lifetimes);
  plan.live_tensor_peak_bytes = PeakLiveBytes(tensor_bytes, device_lifetimes);
  plan.num_buffers = buffers.buffers.size();
  plan.num_positions = schedule.num_positions();
  plan.alignment_bytes = alignment_bytes;
  plan.strategy = assignment.strategy;
  plan.planning_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return plan;
}

uint64_t ScheduledLowerBound(const TrainingGraph& graph, const Schedule& schedule,
                             uint64_t alignment_bytes) {
  const std::vector<Lifetime> lifetimes = ComputeLifetimes(graph, schedule);
  const BufferAssignment buffers = AssignBuffers(graph, schedule, lifetimes);
  std::vector<BufferRequest> requests;
  for (const Buffer& b : buffers.buffers) {
    if (OnHost(graph, b)) continue;
    requests.push_back({b.bytes, b.lifetime.first_position, b.lifetime.last_position});
  }
  return AlignedLowerBound(requests, alignment_bytes);
}

absl::StatusOr<MemoryPlan> PlanMemory(const graph::Graph& forward, const PlannerOptions& options) {
  return PlanMemory(forward, options, DefaultStrategies());
}

std::string MemoryPlan::DebugString() const {
  using graph::HumanBytes;
  std::string out;
  auto line = [&](const char* what, uint64_t bytes) {
    absl::StrAppendFormat(&out, "%-24s %12s  (%d)\n", what, HumanBytes(bytes), bytes);
  };
  line("arena", arena_bytes);
  line("lower bound", lower_bound_bytes);
  line("peak, no in-place", live_tensor_peak_bytes);
  line("no sharing", no_sharing_bytes);
  absl::StrAppendFormat(&out, "%-24s %12.4f\n", "arena / lower bound",
                        lower_bound_bytes ? static_cast<double>(arena_bytes) / lower_bound_bytes : 0.0);
  absl::StrAppendFormat(&out, "%-24s %12.4f\n", "arena / no sharing",
                        no_sharing_bytes ? static_cast<double>(arena_bytes) / no_sharing_bytes : 0.0);
  absl::StrAppendFormat(&out, "%-24s %12d tensors in %d buffers, %d positions\n", "schedule",
                        tensors.size(), num_buffers, num_positions);
  absl::StrAppendFormat(&out, "%-24s %12s (alignment %d B)\n", "offset strategy", strategy,
                        alignment_bytes);
  absl::StrAppendFormat(&out, "%-24s %12.1f ms\n", "planning time", planning_seconds * 1e3);
  out += "bytes by role (no sharing):\n";
  for (const auto& [role, bytes] : bytes_by_role) {
    absl::StrAppendFormat(&out, "  %-22s %12s  (%d)\n", graph::RoleName(role), HumanBytes(bytes),
                          bytes);
  }
  if (!host_bytes_by_role.empty()) out += "on the host, outside the arena:\n";
  for (const auto& [role, bytes] : host_bytes_by_role) {
    absl::StrAppendFormat(&out, "  %-22s %12s  (%d)\n", graph::RoleName(role), HumanBytes(bytes),
                          bytes);
  }
  return out;
}

}  // namespace headroom::planner
