// The sharing plan of a training step: every tensor's offset in one device arena.
#ifndef HEADROOM_PLANNER_MEMORY_PLANNER_H_
#define HEADROOM_PLANNER_MEMORY_PLANNER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "planner/offset_assigner.h"
#include "planner/schedule.h"
#include "planner/training_graph.h"

namespace headroom::planner {

struct PlannerOptions {
  TrainingOptions training;
  // Every offset is a multiple of this, every size rounded up to it. Default 256.
  uint64_t alignment_bytes = kDefaultAlignmentBytes;
};

// One tensor of the plan.
struct PlannedTensor {
  std::string name;
  proto::TensorRole role = proto::ROLE_UNSPECIFIED;
  uint64_t bytes = 0;
  uint64_t offset = 0;
  Lifetime lifetime;
  // Tensors with the same buffer share bytes (in place, or a view).
  int32_t buffer = 0;
};

struct MemoryPlan {
  // Every tensor of the training graph, by training-graph id.
  std::vector<PlannedTensor> tensors;
  // Size of the arena the plan lays out.
  uint64_t arena_bytes = 0;
  // Largest sum of live buffer bytes at any position (after in-place sharing): no offset
  // assignment can be smaller.
  uint64_t lower_bound_bytes = 0;
  // Largest sum of live tensor bytes at any position, before in-place sharing.
  uint64_t live_tensor_peak_bytes = 0;
  // Every tensor's bytes added up: the memory with no sharing at all.
  uint64_t no_sharing_bytes = 0;
  // Tensor bytes by role, with no sharing.
  std::map<proto::TensorRole, uint64_t> bytes_by_role;
  // Bytes of tensors on the host (TrainingTensor::on_host), by role: outside the arena and
  // every figure above.
  std::map<proto::TensorRole, uint64_t> host_bytes_by_role;
  uint64_t num_buffers = 0;
  int32_t num_positions = 0;
  uint64_t alignment_bytes = 0;
  // The offset strategy that won.
  std::string strategy;
  // Wall time of autodiff, scheduling and sharing.
  double planning_seconds = 0;

  // Returns a table for people.
  std::string DebugString() const;
};

// Plans the training step (or, with options.training.inference, the forward pass) of
// `forward`: builds the training graph, schedules it, shares buffers in place, assigns
// offsets with each of `strategies` keeping the smallest, and verifies that no two live
// tensors overlap. Returns InvalidArgument for an op without a gradient, Internal if the
// verifier fails (a bug).
absl::StatusOr<MemoryPlan> PlanMemory(const graph::Graph& forward, const PlannerOptions& options,
                                      const std::vector<std::unique_ptr<OffsetStrategy>>& strategies);

// Returns the plan of `graph` run in the order of `schedule` (shared in place, offsets by
// the smallest of `strategies`, verified); planning_seconds covers only this call.
// REQUIRES: `schedule` is a topological order of `graph`.
absl::StatusOr<MemoryPlan> PlanScheduledGraph(
    const TrainingGraph& graph, const Schedule& schedule, uint64_t alignment_bytes,
    const std::vector<std::unique_ptr<OffsetStrategy>>& strategies);

// Returns the aligned lower bound of PlanScheduledGraph's arena for the same arguments (the
// largest sum of live buffer sizes at one position), without assigning offsets: cheap.
uint64_t ScheduledLowerBound(const TrainingGraph& graph, const Schedule& schedule,
                             uint64_t alignment_bytes);

// As PlanMemory above, with DefaultStrategies().
absl::StatusOr<MemoryPlan> PlanMemory(const graph::Graph& forward, const PlannerOptions& options);

}  // namespace headroom::planner

#endif  // HEADROOM_PLANNER_MEMORY_PLANNER_H_
