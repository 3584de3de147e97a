#include "executor/node_args.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "planner/gradient_rules.h"
#include "util/status_macros.h"

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

// A training-graph tensor's shape and dtype, with no data.
TensorView Shaped(const TrainingGraph& g, TensorId t) {
  return {nullptr, g.tensor(t).shape, g.tensor(t).dtype};
}

// Appends training-graph tensor `t` to a list of views and to its tensors.
void Append(const TrainingGraph& g, TensorId t, std::vector<TensorView>& views,
            std::vector<TensorId>& tensors) {
  views.push_back(Shaped(g, t));
  tensors.push_back(t);
}

// Sets the scratch of a node's arguments from its scratch tensor, if it has one.
template <typename Args>
void SetScratch(const TrainingGraph& g, const TrainingNode& node, DescribedArgs<Args>& d) {
  if (node.scratch == planner::kNone) return;
  d.tensors.scratch = node.scratch;
  d.args.scratch_bytes = g.tensor(node.scratch).bytes;
}

// Sets each view's data from the tensor beside it (nullptr where none).
void SetViews(const std::vector<TensorId>& tensors, DataOf data,
              std::vector<TensorView>& views) {
  for (size_t i = 0; i < views.size(); ++i) {
    views[i].data = tensors[i] == planner::kNone ? nullptr : data(tensors[i]);
  }
}

// Returns the arguments with the views forward and backward arguments share (inputs,
// outputs, saved state) and the scratch bound; the rest still without data.
template <typename Args>
Args BindKernelViews(const DescribedArgs<Args>& described, DataOf data) {
  Args args = described.args;
  SetViews(described.tensors.inputs, data, args.inputs);
  SetViews(described.tensors.outputs, data, args.outputs);
  SetViews(described.tensors.saved, data, args.saved);
  const TensorId scratch = described.tensors.scratch;
  args.scratch = scratch == planner::kNone ? nullptr : data(scratch);
  return args;
}

// Returns, by forward input, the backward node's output that is its gradient (kNone where
// none flows). Unimplemented when one forward tensor is read twice.
absl::StatusOr<std::vector<TensorId>> GradientsOfInputs(const graph::Graph& forward,
                                                        const TrainingGraph& g,
                                                        const TrainingNode& node,
                                                        const graph::Node& fn) {
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
  return grad_of_input;
}

// Sets the forward tensors `rule` reads, which follow the `pos` output gradients among the
// backward node's inputs, each once (training_graph.cc builds them in this order).
absl::Status SetRuleReads(const planner::GradientRule& rule, const TrainingNode& node,
                          const TrainingNode& forward_node, const graph::Node& fn, size_t pos,
                          DescribedArgs<BackwardArgs>& d) {
  std::vector<TensorId> seen;
  for (const planner::GradientRead& read : rule.reads) {
    if (read.only_if_input_needs_grad >= 0 &&
        d.tensors.input_grads[read.only_if_input_needs_grad] == planner::kNone) {
      continue;
    }
    TensorId* slot = nullptr;
    TensorId original = planner::kNone;
    switch (read.tensor.kind) {
      case planner::TensorRef::Kind::kInput:
        slot = &d.tensors.inputs[read.tensor.index];
        original = fn.inputs[read.tensor.index];
        break;
      case planner::TensorRef::Kind::kOutput:
        slot = &d.tensors.outputs[read.tensor.index];
        original = fn.outputs[read.tensor.index];
        break;
      case planner::TensorRef::Kind::kSaved:
        slot = &d.tensors.saved[read.tensor.index];
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
    *slot = node.inputs[at];
  }
  return absl::OkStatus();
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

DescribedArgs<ForwardArgs> DescribeForwardArgs(const graph::Graph& forward, const TrainingGraph& g,
                                               const TrainingNode& node) {
  DescribedArgs<ForwardArgs> d;
  if (node.kind == NodeKind::kRebuild) {  // x = y - F(..): a Sub of two tensors of one shape.
    static const graph::Attrs* const kNoAttrs = new graph::Attrs();
    d.args.op = node.op;
    d.args.attrs = kNoAttrs;
    for (TensorId t : node.inputs) Append(g, t, d.args.inputs, d.tensors.inputs);
    for (TensorId t : node.outputs) Append(g, t, d.args.outputs, d.tensors.outputs);
    SetScratch(g, node, d);
    return d;
  }
  const graph::Node& fn = forward.node(node.forward_node);
  d.args.op = fn.op->name;
  d.args.attrs = &fn.attrs;
  d.args.training = !g.inference();
  // A rebuilt batch norm's inputs end with its forward's saved statistics (saved state the
  // kernel reads, not an input of the op).
  const size_t saved_from =
      node.saved_inputs_from == planner::kNone ? node.inputs.size() : node.saved_inputs_from;
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    const bool input = i < saved_from;
    Append(g, node.inputs[i], input ? d.args.inputs : d.args.saved,
           input ? d.tensors.inputs : d.tensors.saved);
  }
  d.args.saved_statistics_given = saved_from < node.inputs.size();
  for (size_t o = 0; o < node.outputs.size(); ++o) {
    const bool output = o < fn.outputs.size();
    Append(g, node.outputs[o], output ? d.args.outputs : d.args.saved,
           output ? d.tensors.outputs : d.tensors.saved);
  }
  for (TensorId t : node.updates) Append(g, t, d.args.running, d.tensors.running);
  SetScratch(g, node, d);
  return d;
}

absl::StatusOr<DescribedArgs<BackwardArgs>> DescribeBackwardArgs(
    const graph::Graph& forward, const TrainingGraph& g, const TrainingNode& node,
    const TrainingNode& forward_node) {
  const graph::Node& fn = forward.node(node.forward_node);
  const planner::GradientRule* rule = planner::FindGradientRule(fn.op->name);
  if (rule == nullptr) {
    return absl::InternalError(
        absl::StrCat("backward of '", fn.name, "' (", fn.op->name, "): no gradient rule"));
  }
  DescribedArgs<BackwardArgs> d;
  BackwardArgs& args = d.args;
  args.op = fn.op->name;
  args.attrs = &fn.attrs;
  for (graph::TensorId t : fn.inputs) args.inputs.push_back(Shaped(forward, t));
  for (graph::TensorId t : fn.outputs) args.outputs.push_back(Shaped(forward, t));
  for (size_t o = fn.outputs.size(); o < forward_node.outputs.size(); ++o) {
    args.saved.push_back(Shaped(g, forward_node.outputs[o]));
  }
  d.tensors.inputs.assign(args.inputs.size(), planner::kNone);
  d.tensors.outputs.assign(args.outputs.size(), planner::kNone);
  d.tensors.saved.assign(args.saved.size(), planner::kNone);
  // Inputs of the backward node: the output gradients that flow, then the forward tensors
  // the rule reads.
  size_t pos = 0;
  for (graph::TensorId t : fn.outputs) {
    args.output_grads.push_back(Shaped(forward, t));
    const bool flows = g.final_gradient_of(t) != planner::kNone;
    d.tensors.output_grads.push_back(flows ? node.inputs[pos++] : planner::kNone);
  }
  // Input gradients: the backward node's outputs, by the forward tensor they are of.
  ASSIGN_OR_RETURN(d.tensors.input_grads, GradientsOfInputs(forward, g, node, fn));
  for (graph::TensorId t : fn.inputs) args.input_grads.push_back(Shaped(forward, t));
  RETURN_IF_ERROR(SetRuleReads(*rule, node, forward_node, fn, pos, d));
  SetScratch(g, node, d);
  return d;
}

DescribedArgs<UpdateArgs> DescribeUpdateArgs(const TrainingGraph& g, const TrainingNode& node,
                                             const OptimizerParams& params) {
  DescribedArgs<UpdateArgs> d;
  d.args.op = node.op;
  d.args.grad = Shaped(g, node.inputs[0]);
  d.tensors.inputs = {node.inputs[0]};
  d.args.param = Shaped(g, node.updates[0]);
  d.tensors.outputs = {node.updates[0]};
  for (size_t i = 1; i < node.updates.size(); ++i) {
    Append(g, node.updates[i], d.args.state, d.tensors.state);
  }
  d.args.params = params;
  return d;
}

ForwardArgs Bind(const DescribedArgs<ForwardArgs>& described, DataOf data) {
  ForwardArgs args = BindKernelViews(described, data);
  SetViews(described.tensors.running, data, args.running);
  return args;
}

BackwardArgs Bind(const DescribedArgs<BackwardArgs>& described, DataOf data) {
  BackwardArgs args = BindKernelViews(described, data);
  SetViews(described.tensors.output_grads, data, args.output_grads);
  SetViews(described.tensors.input_grads, data, args.input_grads);
  return args;
}

UpdateArgs Bind(const DescribedArgs<UpdateArgs>& described, DataOf data) {
  UpdateArgs args = described.args;
  args.grad.data = data(described.tensors.inputs[0]);
  args.param.data = data(described.tensors.outputs[0]);
  SetViews(described.tensors.state, data, args.state);
  return args;
}

ForwardArgs MakeForwardArgs(const graph::Graph& forward, const TrainingGraph& g,
                            const TrainingNode& node, ViewOf view) {
  return Bind(DescribeForwardArgs(forward, g, node), [&](TensorId t) { return view(t).data; });
}

absl::StatusOr<BackwardArgs> MakeBackwardArgs(const graph::Graph& forward,
                                              const TrainingGraph& g, const TrainingNode& node,
                                              const TrainingNode& forward_node, ViewOf view) {
  ASSIGN_OR_RETURN(DescribedArgs<BackwardArgs> d,
                   DescribeBackwardArgs(forward, g, node, forward_node));
  return Bind(d, [&](TensorId t) { return view(t).data; });
}

}  // namespace headroom::executor
