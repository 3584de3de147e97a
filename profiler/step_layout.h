// Names for what the executor's events refer to by number: the node at each position of an
// expanded training step (planner/sections.h), the section it belongs to, and each tensor's
// name, producer and memory role. Built once per plan, before the run; the executor uses
// the tensor roles to class its allocations, the timeline and the trace use the names.
//
// Roles: a tensor with a planner role keeps it (parameters, gradients, ...); inputs and
// labels are the batch; a section's cached input (every tensor in a section's boundary that
// a forward node produced, and the device copy a prefetch writes back) is a cached input;
// every other forward output or saved state is an activation. Immutable; thread-safe.
#ifndef HEADROOM_PROFILER_STEP_LAYOUT_H_
#define HEADROOM_PROFILER_STEP_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "planner/sections.h"
#include "planner/training_graph.h"
#include "profiler/memory_role.h"

namespace headroom::profiler {

struct StepLayout {
  struct Node {
    std::string name;
    std::string op;
    planner::NodeKind kind = planner::NodeKind::kForward;
    // The section it belongs to: a forward node to the one whose range holds it; a
    // backward-phase node to the section whose backward group it runs in.
    int32_t section = 0;
  };
  struct Tensor {
    std::string name;
    MemoryRole role = MemoryRole::kActivation;
    // Position of the node that writes it, or -1 for tensors that exist before the step.
    int32_t producer = -1;
  };

  // By schedule position.
  std::vector<Node> nodes;
  // By training-graph tensor id.
  std::vector<Tensor> tensors;
  int32_t num_sections = 1;

  // Returns the name of the node at `position`, or "" for -1.
  const std::string& NodeName(int32_t position) const;
  // Returns the producer's name of tensor `t`, or "" for one that exists before the step.
  const std::string& ProducerName(int32_t t) const;
};

// Returns the layout of `step`.
StepLayout DescribeStep(const planner::SectionedStep& step);

}  // namespace headroom::profiler

#endif  // HEADROOM_PROFILER_STEP_LAYOUT_H_
