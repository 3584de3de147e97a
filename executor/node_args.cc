#include "executor/node_args.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "planner/gradient_rules.h"

namespace headroom::executor {
namespace {

using planner::NodeId;
using planner::NodeKind;
using planner::TensorId;
using planner::TrainingGraph;
using planner::TrainingNode;

// A forward-graph tensor's shape and dtype, with no data.
TensorView Shaped(const graph::Graph& forward, graph::TensorId t) {
  return {nullptr, forward.tensor(t).shape, forward.tensor(t).dtype};
}

// Sets the scratch of a node's arguments from its scratch tensor, if it has one.
template <typename Args>
void SetScratch(const TrainingGraph& g, const TrainingNode& node, ViewOf view, Args& args) {
  if (node.scratch == planner::kNone) return;
  args.scratch = view(node.scratch).data;
  args.scratch_bytes = g.tensor(node.scratch).bytes;
}

}  // namespace

std::vector<NodeId> ForwardNodeIndex(const graph::Graph& forward, const TrainingGraph& g) {
  std::vector<NodeId> index(forward.nodes().size(), planner::kNone);
  for (NodeId n = 0; n < static_cast<NodeId>(g.nodes().size()); ++n) {
    const TrainingNode& node = g.node(n);
    if (node.kind == NodeKind::kForward) index[node.forward_node] = n;
  }
  return index;
}

ForwardArgs MakeForwardArgs(const graph::Graph& forward, const TrainingGraph& g,
                            const TrainingNode& node, ViewOf view) {
  const graph::Node& fn = forward.node(node.forward_node);
  ForwardArgs args;
  args.op = fn.op->name;
  args.attrs = &fn.attrs;
  args.training = !g.inference();
  for (TensorId t : node.inputs) args.inputs.push_back(view(t));
  for (size_t o = 0; o < node.outputs.size(); ++o) {
    (o < fn.outputs.size() ? args.outputs : args.saved).push_back(view(node.outputs[o]));
  }
  for (TensorId t : node.updates) args.running.push_back(view(t));
  SetScratch(g, node, view, args);
  return args;
}

absl::StatusOr<BackwardArgs> MakeBackwardArgs(const graph::Graph& forward,
                                              const TrainingGraph& g, const TrainingNode& node,
                                              const TrainingNode& forward_node, ViewOf view) {
  const graph::Node& fn = forward.node(node.forward_node);
  const planner::GradientRule* rule = planner::FindGradientRule(fn.op->name);
  if (rule == nullptr) {
    return absl::InternalError(
        absl::StrCat("backward of '", fn.name, "' (", fn.op->name, "): no gradient rule"));
  }
  BackwardArgs args;
  args.op = fn.op->name;
  args.attrs = &fn.attrs;
  for (graph::TensorId t : fn.inputs) args.inputs.push_back(Shaped(forward, t));
  for (graph::TensorId t : fn.outputs) args.outputs.push_back(Shaped(forward, t));
  for (size_t o = fn.outputs.size(); o < forward_node.outputs.size(); ++o) {
    const planner::TrainingTensor& s = g.tensor(forward_node.outputs[o]);
    args.saved.push_back({nullptr, s.shape, s.dtype});
  }
  // Inputs of the backward node: the output gradients that flow, then the forward tensors
  // the rule reads, each once (training_graph.cc builds them in this order).
  size_t pos = 0;
  for (graph::TensorId t : fn.outputs) {
    args.output_grads.push_back(Shaped(forward, t));
    if (g.final_gradient_of(t) != planner::kNone) {
      args.output_grads.back().data = view(node.inputs[pos++]).data;
    }
  }
  // Input gradients: the backward node's outputs, by the forward tensor they are of.
  std::vector<TensorId> grad_of_input(fn.inputs.size(), planner::kNone);
  for (size_t i = 0; i < fn.inputs.size(); ++i) {
    for (TensorId out : node.outputs) {
      if (g.tensor(out).forward_tensor != fn.inputs[i]) continue;
      if (std::count(fn.inputs.begin(), fn.inputs.end(), fn.inputs[i]) > 1) {
        return absl::UnimplementedError(absl::StrCat(
            "node '", fn.name, "' (", fn.op->name, ") reads '",
            forward.tensor(fn.inputs[i]).name,
            "' twice; its gradient would need summing, which the executor lacks"));
      }
      grad_of_input[i] = out;
    }
  }
  for (size_t i = 0; i < fn.inputs.size(); ++i) {
    args.input_grads.push_back(Shaped(forward, fn.inputs[i]));
    if (grad_of_input[i] != planner::kNone) {
      args.input_grads.back().data = view(grad_of_input[i]).data;
    }
  }
  // The forward tensors the rule reads, in the order they follow the output gradients.
  std::vector<TensorId> seen;
  for (const planner::GradientRead& read : rule->reads) {
    if (read.only_if_input_needs_grad >= 0 &&
        grad_of_input[read.only_if_input_needs_grad] == planner::kNone) {
      continue;
    }
    TensorView* slot = nullptr;
    TensorId original = planner::kNone;
    switch (read.tensor.kind) {
      case planner::TensorRef::Kind::kInput:
        slot = &args.inputs[read.tensor.index];
        original = fn.inputs[read.tensor.index];
        break;
      case planner::TensorRef::Kind::kOutput:
        slot = &args.outputs[read.tensor.index];
        original = fn.outputs[read.tensor.index];
        break;
      case planner::TensorRef::Kind::kSaved:
        slot = &args.saved[read.tensor.index];
        original = forward_node.outputs[fn.outputs.size() + read.tensor.index];
        break;
    }
    auto it = std::find(seen.begin(), seen.end(), original);
    const size_t at = pos + (it - seen.begin());
    if (it == seen.end()) seen.push_back(original);
    if (at >= node.inputs.size()) {
      return absl::InternalError(absl::StrCat("backward of '", fn.name,
                                              "' has fewer inputs than its rule reads"));
    }
    slot->data = view(node.inputs[at]).data;
  }
  SetScratch(g, node, view, args);
  return args;
}

}  // namespace headroom::executor
