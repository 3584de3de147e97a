// When each node runs and how long each tensor lives.
#ifndef HEADROOM_PLANNER_SCHEDULE_H_
#define HEADROOM_PLANNER_SCHEDULE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/training_graph.h"

namespace headroom::planner {

// A place in a schedule: the index into Schedule::order (not a training step, which runs the
// whole schedule once).
using Position = int32_t;

// A sequential order of the nodes: position p runs node order[p].
struct Schedule {
  std::vector<NodeId> order;
  // Indexed by node: its position.
  std::vector<Position> position_of;

  Position num_positions() const { return static_cast<Position>(order.size()); }
};

// Returns a deterministic topological order (respecting tensor edges and `after` edges;
// among ready nodes the one added to the graph first), or Internal on a cycle.
absl::StatusOr<Schedule> ScheduleGraph(const TrainingGraph& graph);

// The positions a tensor is alive at, both ends included.
struct Lifetime {
  Position first_position = 0;
  Position last_position = 0;
};

// Returns each tensor's lifetime under `schedule`: persistent tensors (parameters, buffers,
// optimizer state) live through every position; tensors that exist before the step (inputs,
// labels) from position 0 to their last use; the rest from the position that writes them to
// their last use. The loss lives to the end, to be reported.
std::vector<Lifetime> ComputeLifetimes(const TrainingGraph& graph, const Schedule& schedule);

// Where the live bytes peak: the first position with the largest sum, and that sum.
struct LivePeak {
  Position position = 0;
  uint64_t bytes = 0;
};

// Returns where the sum of `bytes[i]` over the items alive at one position peaks (position 0
// and 0 bytes when there are no items).
LivePeak FindLivePeak(const std::vector<uint64_t>& bytes, const std::vector<Lifetime>& lifetimes);

// Returns the largest sum of `bytes[i]` over the items alive at one position.
uint64_t PeakLiveBytes(const std::vector<uint64_t>& bytes, const std::vector<Lifetime>& lifetimes);

}  // namespace headroom::planner

#endif  // HEADROOM_PLANNER_SCHEDULE_H_
