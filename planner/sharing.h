// In-place sharing: decides which tensors share one buffer (views always; an op's output and
// an input that dies at that op, where the op allows it). Deciding only.
#ifndef HEADROOM_PLANNER_SHARING_H_
#define HEADROOM_PLANNER_SHARING_H_

#include <cstdint>
#include <vector>

#include "planner/schedule.h"
#include "planner/training_graph.h"

namespace headroom::planner {

// A run of bytes that one or more tensors use in turn (or at once, for views).
struct Buffer {
  uint64_t bytes = 0;
  // From the first member's first position to the last member's last position.
  Lifetime lifetime;
  // Its tensors, in the order they joined.
  std::vector<TensorId> tensors;
};

struct BufferAssignment {
  std::vector<Buffer> buffers;
  // Indexed by tensor: its buffer.
  std::vector<int32_t> buffer_of;
};

// Returns the buffers of `graph` under `schedule`. Walking the schedule, a view joins its
// input's buffer; an in-place pair (output, input) joins when the input's buffer dies at
// this step, holds no tensor that exists across or before the step (parameters, buffers,
// optimizer state, inputs, labels), has the output's size, and was not already taken by
// another output of the same node. Every other tensor gets a buffer of its own.
BufferAssignment AssignBuffers(const TrainingGraph& graph, const Schedule& schedule,
                               const std::vector<Lifetime>& lifetimes);

}  // namespace headroom::planner

#endif  // HEADROOM_PLANNER_SHARING_H_
