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
// Returns where training-graph tensor `t`'s bytes are (non-null).
using DataOf = absl::FunctionRef<void*(planner::TensorId t)>;

// The training-graph tensor behind each view of a node's kernel arguments, field by field
// as in ForwardArgs and BackwardArgs; planner::kNone where the kernel is given no data.
// For UpdateArgs: `inputs` holds its grad, `outputs` its param, `state` its optimizer state.
struct ArgTensors {
  std::vector<planner::TensorId> inputs;
  std::vector<planner::TensorId> outputs;
  std::vector<planner::TensorId> saved;
  std::vector<planner::TensorId> running;
  std::vector<planner::TensorId> output_grads;
  std::vector<planner::TensorId> input_grads;
  std::vector<planner::TensorId> state;
  planner::TensorId scratch = planner::kNone;
};

// A node's kernel arguments with shapes and dtypes but no data, and the tensor behind each
// view: what a caller binds to memory with SetData().
template <typename Args>
struct DescribedArgs {
  Args args;
  ArgTensors tensors;
};

// Returns, indexed by forward-graph node, the node of `g` that runs it forward (kForward),
// or planner::kNone where none does.
std::vector<planner::NodeId> ForwardNodeIndex(const graph::Graph& forward,
                                              const planner::TrainingGraph& g);

// Returns the described arguments of forward or re-forward node `node` (see
// MakeForwardArgs); for a rebuild node (kRebuild), those of its Sub.
DescribedArgs<ForwardArgs> DescribeForwardArgs(const graph::Graph& forward,
                                               const planner::TrainingGraph& g,
                                               const planner::TrainingNode& node);

// Returns the described arguments of backward node `node` (see MakeBackwardArgs, with its
// errors).
absl::StatusOr<DescribedArgs<BackwardArgs>> DescribeBackwardArgs(
    const graph::Graph& forward, const planner::TrainingGraph& g,
    const planner::TrainingNode& node, const planner::TrainingNode& forward_node);

// Returns the described arguments of optimizer node `node` (kUpdate) with hyper-parameters
// `params`: the gradient it reads, the parameter and the optimizer state it updates.
DescribedArgs<UpdateArgs> DescribeUpdateArgs(const planner::TrainingGraph& g,
                                             const planner::TrainingNode& node,
                                             const OptimizerParams& params);

// Returns `described.args` with the data of every view that names a tensor (and the
// scratch) set from `data`; views with no tensor keep nullptr.
ForwardArgs Bind(const DescribedArgs<ForwardArgs>& described, DataOf data);
BackwardArgs Bind(const DescribedArgs<BackwardArgs>& described, DataOf data);
UpdateArgs Bind(const DescribedArgs<UpdateArgs>& described, DataOf data);

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
