// The kernel arguments of one node of a training step, decided from the graphs alone: what
// the executor hands a backend for a forward, re-forward or backward node, and what a
// backend is asked about before planning (Backend::ScratchBytes). Each tensor is seen through
// a function the caller gives (the executor: a placeholder it later rebases into the arena;
// a scratch query: any non-null placeholder); nothing here reads or writes tensor data.
#ifndef HEADROOM_EXECUTOR_NODE_ARGS_H_
#define HEADROOM_EXECUTOR_NODE_ARGS_H_

#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "executor/kernel_args.h"
#include "graph/graph.h"
#include "planner/training_graph.h"

namespace headroom::executor {

// Returns the view of training-graph tensor `t`: its shape, dtype and some non-null data.
using ViewOf = absl::FunctionRef<TensorView(planner::TensorId t)>;

// Returns, indexed by forward-graph node, the node of `g` that runs it forward (kForward),
// or planner::kNone where none does.
std::vector<planner::NodeId> ForwardNodeIndex(const graph::Graph& forward,
                                              const planner::TrainingGraph& g);

// Returns the arguments of forward or re-forward node `node` of `g` (whose forward graph is
// `forward`): inputs, outputs, saved state, running statistics, training mode and scratch.
ForwardArgs MakeForwardArgs(const graph::Graph& forward, const planner::TrainingGraph& g,
                            const planner::TrainingNode& node, ViewOf view);

// Returns the arguments of backward node `node` of `g`, whose forward node is `forward_node`:
// every forward tensor's shape, data for those its gradient rule reads, the output gradients
// that flow and the input gradients it writes, and its scratch. Unimplemented for a node that
// reads one tensor twice (its gradient would need summing); Internal when `node` does not
// match its gradient rule.
absl::StatusOr<BackwardArgs> MakeBackwardArgs(const graph::Graph& forward,
                                              const planner::TrainingGraph& g,
                                              const planner::TrainingNode& node,
                                              const planner::TrainingNode& forward_node,
                                              ViewOf view);

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_NODE_ARGS_H_
