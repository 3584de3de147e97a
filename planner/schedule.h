// When each node runs and how long each tensor lives.
#ifndef HEADROOM_PLANNER_SCHEDULE_H_
#define HEADROOM_PLANNER_SCHEDULE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/training_graph.h"

namespace headroom::planner {

// A sequential order of the nodes: step s runs node order[s].
struct Schedule {
  std::vector<NodeId> order;
  // Indexed by node: its step.
  std::vector<int32_t> position_of;

  int32_t num_positions() const { return static_cast<int32_t>(order.size()); }
};

// Returns a deterministic topological order (respecting tensor edges and `after` edges;
// among ready nodes the one added to the graph first), or Internal on a cycle.
absl::StatusOr<Schedule> ScheduleGraph(const TrainingGraph& graph);

// The steps a tensor is alive, both ends included.
struct Lifetime {
  int32_t first_position = 0;
  int32_t last_position = 0;
};

// Returns each tensor's lifetime under `schedule`: persistent tensors (parameters, buffers,
// optimizer state) live through every step; tensors that exist before the step (inputs,
// labels) from step 0 to their last use; the rest from the step that writes them to their
// last use. The loss lives to the end, to be reported.
std::vector<Lifetime> ComputeLifetimes(const TrainingGraph& graph, const Schedule& schedule);

// Returns the largest sum of `bytes[i]` over the items alive at one step.
uint64_t PeakLiveBytes(const std::vector<uint64_t>& bytes, const std::vector<Lifetime>& lifetimes);

}  // namespace headroom::planner

#endif  // HEADROOM_PLANNER_SCHEDULE_H_
