#include "executor/backend_scratch.h"

#include "executor/node_args.h"
#include "util/status_macros.h"

namespace headroom::executor {

absl::StatusOr<uint64_t> BackendScratchModel::NodeScratchBytes(
    const graph::Graph& forward, const planner::TrainingGraph& graph, planner::NodeId id) const {
  absl::MutexLock lock(&mu_);
  const planner::TrainingNode& node = graph.node(id);
  // Any non-null data will do: the backend only decides, from shapes and presence.
  auto placeholder = [&](planner::TensorId t) {
    const planner::TrainingTensor& tensor = graph.tensor(t);
    return TensorView{reinterpret_cast<void*>(static_cast<uintptr_t>(t) + 1), tensor.shape,
                      tensor.dtype};
  };
  switch (node.kind) {
    case planner::NodeKind::kForward:
    case planner::NodeKind::kRecompute:
    case planner::NodeKind::kRebuild:
      return backend_->ScratchBytes(MakeForwardArgs(forward, graph, node, placeholder));
    case planner::NodeKind::kBackward: {
      // A training graph built from `forward` lists its forward nodes first, in order.
      const planner::NodeId f = node.forward_node;
      if (f >= static_cast<planner::NodeId>(graph.nodes().size()) ||
          graph.node(f).kind != planner::NodeKind::kForward ||
          graph.node(f).forward_node != node.forward_node) {
        return absl::InternalError("its forward node is not where Build() puts it");
      }
      ASSIGN_OR_RETURN(BackwardArgs args,
                       MakeBackwardArgs(forward, graph, node, graph.node(f), placeholder));
      return backend_->ScratchBytes(args);
    }
    default:
      return 0;
  }
}

}  // namespace headroom::executor
