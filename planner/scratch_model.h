// Kernel scratch in the plan: what each node of a training step needs beyond its inputs and
// outputs while it runs (oneDNN scratchpads and the copies a kernel stages in another layout
// on the CPU, cuDNN workspaces on a GPU), as the backend that will run the step declares it.
// TrainingGraph::Build() turns each declaration into one TEMPORARY tensor of its node, alive
// only while that node runs, so the offsets, the peak and the budget search see it like any
// other tensor, and the executor hands the kernel those bytes of the arena.
#ifndef HEADROOM_PLANNER_SCRATCH_MODEL_H_
#define HEADROOM_PLANNER_SCRATCH_MODEL_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "planner/training_graph.h"

namespace headroom::planner {

// Deciding only: an implementation allocates nothing and runs nothing. Implementations
// (executor/backend_scratch.h wraps a backend) are called from one thread at a time.
class ScratchModel {
 public:
  virtual ~ScratchModel() = default;

  // Returns the scratch bytes node `id` of `graph` (whose forward graph is `forward`) needs
  // while it runs; 0 for none. Called once per node, on the finished graph, before any
  // scratch is attached. An error (an op or shape the backend cannot run) fails the build.
  virtual absl::StatusOr<uint64_t> NodeScratchBytes(const graph::Graph& forward,
                                                    const TrainingGraph& graph,
                                                    NodeId id) const = 0;
};

}  // namespace headroom::planner

#endif  // HEADROOM_PLANNER_SCRATCH_MODEL_H_
