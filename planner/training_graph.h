// The training graph: the forward graph plus its backward pass and optimizer updates as
// ordinary nodes of one graph, so every memory question is a question about which of its
// tensors are alive at each position.
#ifndef HEADROOM_PLANNER_TRAINING_GRAPH_H_
#define HEADROOM_PLANNER_TRAINING_GRAPH_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "proto/headroom.pb.h"

namespace headroom::planner {

class ScratchModel;

using TensorId = int32_t;
using NodeId = int32_t;
inline constexpr int32_t kNone = -1;

enum class NodeKind {
  kForward,     // A node of the forward graph (with any state it saves for backward).
  kLossSeed,    // Writes d(loss)/d(loss) = 1.
  kBackward,    // The gradient of one forward node.
  kAccumulate,  // Sums two gradient contributions of one tensor.
  kUpdate,      // An optimizer step for one parameter.
  // Only in a sectioned step (planner/sections.h):
  kRecompute,   // A forward node run again, from its section's cached inputs, before the
                // section's backward; it writes fresh copies and updates no running statistics.
  kOffload,     // Awaits the copy of a cached section input to host memory; the device copy
                // dies here.
  kPrefetch,    // Issues the copy of an offloaded section input back to the device; writes
                // the device copy the section's backward reads.
  // Only in a step that rebuilds reversible blocks (planner/reversible.h):
  kRebuild,     // Op "Sub": rebuilds an input of a reversible block from its output,
                // x2 = y2 - G(y1) or x1 = y1 - F(x2); inputs {y, F or G re-run}.
};

// Returns "forward", "backward", ...
const char* NodeKindName(NodeKind kind);

struct TrainingTensor {
  std::string name;
  graph::Shape shape;
  proto::DType dtype = proto::DTYPE_UNSPECIFIED;
  // INPUT, LABEL, PARAMETER, BUFFER and ACTIVATION come from the forward graph (state a
  // forward node saves for its backward is ACTIVATION too); GRADIENT and OPTIMIZER_STATE are
  // added by autodiff.
  proto::TensorRole role = proto::ROLE_UNSPECIFIED;
  uint64_t bytes = 0;
  // The forward tensor this is, or whose gradient this is; kNone for saved state and
  // optimizer state.
  graph::TensorId forward_tensor = kNone;
  // The node that writes it, or kNone for tensors that exist before the step begins.
  NodeId producer = kNone;
  // Nodes that read it or update it in place, in node order, without repeats.
  std::vector<NodeId> consumers;
  // Whether it lives in host memory, not the device arena: optimizer state placed on the host
  // (planner/sections.h, SectionCuts::optimizer_state_on_host). Its device bytes are 0.
  bool on_host = false;
  // Whether it is a device copy of a parameter kept on the host between uses
  // (SectionCuts::parameters_on_host): alive from its prefetch to its last reader only, so
  // not persistent though its role is PARAMETER.
  bool parameter_copy = false;

  // Returns the bytes it takes in the device arena: 0 for a tensor on the host.
  uint64_t device_bytes() const { return on_host ? 0 : bytes; }

  // Returns whether it lives across training steps (parameters, buffers, optimizer state).
  bool persistent() const {
    if (parameter_copy) return false;
    return role == proto::ROLE_PARAMETER || role == proto::ROLE_BUFFER ||
           role == proto::ROLE_OPTIMIZER_STATE;
  }
};

struct TrainingNode {
  // "layer1.0.conv1" (forward), "layer1.0.conv1.backward", "fc.weight.grad.accumulate1",
  // "fc.weight.update", "loss.seed".
  std::string name;
  // The forward op ("Conv2D"), its gradient ("Conv2DGrad"), "LossSeed", "AccumulateGrad",
  // "SgdMomentumUpdate" or "AdamUpdate".
  std::string op;
  NodeKind kind = NodeKind::kForward;
  // For forward and backward nodes, the forward node; else kNone.
  graph::NodeId forward_node = kNone;
  // Tensors read.
  std::vector<TensorId> inputs;
  // Tensors written, new at this node.
  std::vector<TensorId> outputs;
  // Persistent tensors modified in place (parameters and optimizer state by an update,
  // batch-norm running statistics by a training-mode forward).
  std::vector<TensorId> updates;
  // Nodes that must run before this one though no tensor links them (readers of a
  // parameter before its update).
  std::vector<NodeId> after;
  // (output index, input index): the output may take the input's bytes if the input dies
  // at this node.
  std::vector<std::pair<int, int>> inplace;
  // (output index, input index): the output is a view of the input (Reshape, Flatten) and
  // always shares its bytes.
  std::vector<std::pair<int, int>> views;
  // The bytes its kernel uses while it runs (planner/scratch_model.h): a TEMPORARY tensor
  // this node writes and nobody reads, so it lives only at this node; kNone for none.
  TensorId scratch = kNone;
  // A batch norm re-run in a reversible block's rebuild (planner/reversible.h): its inputs
  // from this index on are the statistics its forward saved, which it normalises with (it
  // computes, saves and updates none); kNone otherwise.
  int32_t saved_inputs_from = kNone;
};

struct TrainingOptions {
  // The optimizer whose update nodes and state are added. Default SGD with momentum.
  proto::Optimizer::Kind optimizer = proto::Optimizer::KIND_SGD_MOMENTUM;
  // Forward only: no saved state, no backward, no optimizer (batch norm uses its running
  // statistics, dropout is the identity).
  bool inference = false;
  // Declares each node's kernel scratch (borrowed; used only during Build()). Default none:
  // no node gets a scratch tensor, as for a backend whose kernels need none.
  const ScratchModel* scratch = nullptr;
};

// The training graph of a validated forward graph. Build it with Build(); immutable after.
// Forward tensors keep their forward ids (tensor i of the forward graph is tensor i here);
// nodes are in a valid execution order: forward, the loss seed, then backward in reverse
// forward order, each parameter's update right after its gradient is complete.
// With options.scratch, every node that declares scratch gets a TEMPORARY tensor of that many
// bytes (dtype bool, shape [bytes]), named "<node>.scratch", after every other tensor.
// Thread-compatible.
class TrainingGraph {
 public:
  // Returns the training graph of `forward`, or InvalidArgument if an op has no gradient;
  // the scratch model's error, naming the node, if it fails.
  static absl::StatusOr<TrainingGraph> Build(const graph::Graph& forward,
                                             const TrainingOptions& options);

  const std::vector<TrainingTensor>& tensors() const { return tensors_; }
  const std::vector<TrainingNode>& nodes() const { return nodes_; }
  const TrainingTensor& tensor(TensorId id) const { return tensors_[id]; }
  const TrainingNode& node(NodeId id) const { return nodes_[id]; }
  TensorId loss() const { return loss_; }
  bool inference() const { return inference_; }

  // Returns the id of the tensor or node with that name, or kNone.
  TensorId FindTensor(const std::string& name) const;
  NodeId FindNode(const std::string& name) const;

  // Returns the gradient tensor of forward tensor `name` as the optimizer or the previous
  // layer sees it (after accumulation), or kNone.
  TensorId FinalGradient(const std::string& forward_name) const;
  // As above, by forward tensor id.
  TensorId final_gradient_of(graph::TensorId forward_tensor) const {
    return final_gradient_[forward_tensor];
  }
  // Returns the number of forward graph tensors (tensors 0 .. n-1 of this graph).
  int32_t num_forward_tensors() const { return static_cast<int32_t>(final_gradient_.size()); }

 private:
  friend class TrainingGraphBuilder;
  friend class SectionExpander;
  friend class ReversibleExpander;
  friend class GradientBucketAdder;
  TrainingGraph() = default;

  // Returns the id of `tensor`, appended.
  TensorId AppendTensor(TrainingTensor tensor);
  // Returns the id of `node`, appended; records it as the producer of its outputs and its
  // scratch and a consumer of its inputs and updates.
  NodeId AppendNode(TrainingNode node);

  std::vector<TrainingTensor> tensors_;
  std::vector<TrainingNode> nodes_;
  TensorId loss_ = kNone;
  bool inference_ = false;
  // Indexed by forward tensor id: its final gradient, or kNone.
  std::vector<TensorId> final_gradient_;
};

}  // namespace headroom::planner

#endif  // HEADROOM_PLANNER_TRAINING_GRAPH_H_
