#include "planner/training_graph.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "planner/gradient_rules.h"
#include "planner/scratch_model.h"
#include "util/check.h"
#include "util/status_macros.h"

namespace headroom::planner {

const char* NodeKindName(NodeKind kind) {
  switch (kind) {
    case NodeKind::kForward:
      return "forward";
    case NodeKind::kLossSeed:
      return "loss_seed";
    case NodeKind::kBackward:
      return "backward";
    case NodeKind::kAccumulate:
      return "accumulate";
    case NodeKind::kUpdate:
      return "update";
    case NodeKind::kRecompute:
      return "recompute";
    case NodeKind::kOffload:
      return "offload";
    case NodeKind::kPrefetch:
      return "prefetch";
    case NodeKind::kRebuild:
      return "rebuild";
  }
  return "unknown";
}

// Builds a TrainingGraph in phases: Forward(), then (for training) Backward(), which adds
// the loss seed, backward nodes in reverse forward order, gradient accumulation and each
// parameter's update as soon as its gradient is complete. Call Build() once.
class TrainingGraphBuilder {
 public:
  TrainingGraphBuilder(const graph::Graph& forward, const TrainingOptions& options)
      : fwd_(forward), options_(options) {}

  absl::StatusOr<TrainingGraph> Build() {
    g_.inference_ = options_.inference;
    g_.loss_ = fwd_.loss();
    g_.final_gradient_.assign(fwd_.tensors().size(), kNone);
    RETURN_IF_ERROR(Forward());
    if (!options_.inference) Backward();
    if (options_.scratch != nullptr) RETURN_IF_ERROR(AttachScratch(*options_.scratch));
    return std::move(g_);
  }

 private:
  // ---- Forward -------------------------------------------------------------------------

  absl::Status Forward() {
    for (const graph::Tensor& t : fwd_.tensors()) {
      TrainingTensor tt;
      tt.name = t.name;
      tt.shape = t.shape;
      tt.dtype = t.dtype;
      tt.role = t.role;
      tt.bytes = t.bytes();
      tt.forward_tensor = static_cast<graph::TensorId>(g_.tensors_.size());
      g_.AppendTensor(std::move(tt));
    }
    saved_.resize(fwd_.nodes().size());
    for (graph::NodeId id = 0; id < static_cast<graph::NodeId>(fwd_.nodes().size()); ++id) {
      RETURN_IF_ERROR(ForwardNode(id));
    }
    return absl::OkStatus();
  }

  absl::Status ForwardNode(graph::NodeId id) {
    const graph::Node& n = fwd_.node(id);
    const GradientRule* rule = FindGradientRule(n.op->name);
    if (rule == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node '", n.name, "' (", n.op->name, "): Headroom has no gradient for this op"));
    }
    TrainingNode node;
    node.name = n.name;
    node.op = n.op->name;
    node.kind = NodeKind::kForward;
    node.forward_node = id;
    node.inputs.assign(n.inputs.begin(), n.inputs.end());
    node.outputs.assign(n.outputs.begin(), n.outputs.end());
    if (!options_.inference) {
      for (const SavedState& s : rule->saved) {
        const graph::Shape shape = SavedShape(s, fwd_, n);
        const proto::DType dtype =
            s.dtype == proto::DTYPE_UNSPECIFIED ? fwd_.tensor(n.inputs[0]).dtype : s.dtype;
        const TensorId t = AddTensor(absl::StrCat(n.name, ".", s.suffix), shape, dtype,
                                     proto::ROLE_ACTIVATION, kNone);
        node.outputs.push_back(t);
        saved_[id].push_back(t);
      }
      if (rule->updates_inputs_from >= 0) {
        for (size_t i = rule->updates_inputs_from; i < n.inputs.size(); ++i) {
          node.updates.push_back(n.inputs[i]);
        }
        node.inputs.resize(rule->updates_inputs_from);
      }
    }
    // In place and views apply to output 0 (the op's result).
    if (rule->forward_view) node.views.push_back({0, 0});
    if (rule->forward_inplace) {
      for (int i = 0; i < static_cast<int>(n.inputs.size()); ++i) {
        if (SameBytes(n.outputs[0], n.inputs[i])) node.inplace.push_back({0, i});
      }
    }
    AddNode(std::move(node));
    return absl::OkStatus();
  }

  // ---- Backward ------------------------------------------------------------------------

  void Backward() {
    MarkGradients();
    AddNode(SeedNode());
    for (graph::NodeId id = static_cast<graph::NodeId>(fwd_.nodes().size()) - 1; id >= 0; --id) {
      if (active_[id]) BackwardNode(id);
    }
  }

  // Decides, in reverse forward order, which forward nodes get a backward node (some output
  // has a gradient and some input needs one) and counts, for each tensor, how many backward
  // nodes will contribute to its gradient.
  void MarkGradients() {
    const size_t n_tensors = fwd_.tensors().size();
    requires_grad_.assign(n_tensors, false);
    for (size_t t = 0; t < n_tensors; ++t) {
      requires_grad_[t] = fwd_.tensor(t).role == proto::ROLE_PARAMETER;
    }
    for (const graph::Node& n : fwd_.nodes()) {
      bool any = false;
      for (graph::TensorId in : n.inputs) any = any || requires_grad_[in];
      for (graph::TensorId out : n.outputs) {
        requires_grad_[out] = any && graph::IsFloating(fwd_.tensor(out).dtype);
      }
    }
    std::vector<bool> has_grad(n_tensors, false);
    has_grad[fwd_.loss()] = true;
    contributions_.assign(n_tensors, 0);
    active_.assign(fwd_.nodes().size(), false);
    for (graph::NodeId id = static_cast<graph::NodeId>(fwd_.nodes().size()) - 1; id >= 0; --id) {
      const graph::Node& n = fwd_.node(id);
      bool output_grad = false;
      for (graph::TensorId out : n.outputs) output_grad = output_grad || has_grad[out];
      if (!output_grad) continue;
      for (graph::TensorId in : DistinctGradInputs(n)) {
        active_[id] = true;
        has_grad[in] = true;
        ++contributions_[in];
      }
    }
  }

  // Returns the distinct inputs of `n` that need a gradient, in input order.
  std::vector<graph::TensorId> DistinctGradInputs(const graph::Node& n) const {
    std::vector<graph::TensorId> out;
    for (graph::TensorId in : n.inputs) {
      if (requires_grad_[in] && std::find(out.begin(), out.end(), in) == out.end()) {
        out.push_back(in);
      }
    }
    return out;
  }

  TrainingNode SeedNode() {
    TrainingNode seed;
    seed.name = absl::StrCat(fwd_.tensor(fwd_.loss()).name, ".seed");
    seed.op = "LossSeed";
    seed.kind = NodeKind::kLossSeed;
    const graph::Tensor& loss = fwd_.tensor(fwd_.loss());
    seed.outputs.push_back(AddTensor(absl::StrCat(loss.name, ".grad"), loss.shape, loss.dtype,
                                     proto::ROLE_GRADIENT, fwd_.loss()));
    seed.after.push_back(g_.tensors_[fwd_.loss()].producer);
    g_.final_gradient_[fwd_.loss()] = seed.outputs[0];
    return seed;
  }

  void BackwardNode(graph::NodeId id) {
    const graph::Node& n = fwd_.node(id);
    const GradientRule& rule = *FindGradientRule(n.op->name);
    TrainingNode node;
    node.name = absl::StrCat(n.name, ".backward");
    node.op = absl::StrCat(n.op->name, "Grad");
    node.kind = NodeKind::kBackward;
    node.forward_node = id;
    // Inputs: the gradients of the outputs that have one, then the forward tensors it reads.
    for (graph::TensorId out : n.outputs) {
      if (g_.final_gradient_[out] != kNone) node.inputs.push_back(g_.final_gradient_[out]);
    }
    const int num_output_grads = static_cast<int>(node.inputs.size());
    for (const GradientRead& read : rule.reads) {
      if (read.only_if_input_needs_grad >= 0 &&
          !requires_grad_[n.inputs[read.only_if_input_needs_grad]]) {
        continue;
      }
      const TensorId t = Resolve(id, read.tensor);
      if (std::find(node.inputs.begin(), node.inputs.end(), t) == node.inputs.end()) {
        node.inputs.push_back(t);
      }
    }
    // Outputs: one gradient per distinct input that needs one.
    const std::vector<graph::TensorId> grad_inputs = DistinctGradInputs(n);
    for (graph::TensorId in : grad_inputs) {
      node.outputs.push_back(NewGradient(in));
    }
    ShareBackward(rule, num_output_grads, &node);
    const NodeId backward = AddNode(std::move(node));
    for (size_t k = 0; k < grad_inputs.size(); ++k) {
      Contribute(grad_inputs[k], g_.nodes_[backward].outputs[k]);
    }
  }

  // In-place and view pairs of a backward node: an input gradient over an output gradient.
  void ShareBackward(const GradientRule& rule, int num_output_grads, TrainingNode* node) {
    for (int o = 0; o < static_cast<int>(node->outputs.size()); ++o) {
      for (int i = 0; i < num_output_grads; ++i) {
        if (!SameBytes(node->outputs[o], node->inputs[i])) continue;
        if (rule.backward_view) node->views.push_back({o, i});
        if (rule.backward_inplace) node->inplace.push_back({o, i});
      }
    }
  }

  // Records `grad` as a contribution to the gradient of forward tensor `t`, accumulating
  // with earlier ones; adds the optimizer update once a parameter's gradient is complete.
  void Contribute(graph::TensorId t, TensorId grad) {
    TensorId& final = g_.final_gradient_[t];
    if (final == kNone) {
      final = grad;
    } else {
      const int k = ++accumulations_[t];
      TrainingNode acc;
      acc.name = absl::StrCat(fwd_.tensor(t).name, ".grad.accumulate", k);
      acc.op = "AccumulateGrad";
      acc.kind = NodeKind::kAccumulate;
      acc.inputs = {final, grad};
      acc.outputs = {AddTensor(absl::StrCat(fwd_.tensor(t).name, ".grad.sum", k),
                               fwd_.tensor(t).shape, fwd_.tensor(t).dtype,
                               proto::ROLE_GRADIENT, t)};
      acc.inplace = {{0, 0}, {0, 1}};
      final = acc.outputs[0];
      AddNode(std::move(acc));
    }
    if (--contributions_[t] == 0 && fwd_.tensor(t).role == proto::ROLE_PARAMETER) Update(t);
  }

  void Update(graph::TensorId p) {
    const bool adam = options_.optimizer == proto::Optimizer::KIND_ADAM;
    const graph::Tensor& param = fwd_.tensor(p);
    TrainingNode update;
    update.name = absl::StrCat(param.name, ".update");
    update.op = adam ? "AdamUpdate" : "SgdMomentumUpdate";
    update.kind = NodeKind::kUpdate;
    update.inputs = {g_.final_gradient_[p]};
    update.updates = {p};
    for (const char* state : adam ? std::vector<const char*>{"adam_m", "adam_v"}
                                  : std::vector<const char*>{"momentum"}) {
      update.updates.push_back(AddTensor(absl::StrCat(param.name, ".", state), param.shape,
                                         param.dtype, proto::ROLE_OPTIMIZER_STATE, kNone));
    }
    // Every reader of the parameter runs before it changes.
    update.after = g_.tensors_[p].consumers;
    AddNode(std::move(update));
  }

  // ---- Scratch -------------------------------------------------------------------------

  // Asks `model` about every node of the finished graph, then gives each node that declares
  // scratch its TEMPORARY tensor (asking first, so every answer sees the same graph).
  absl::Status AttachScratch(const ScratchModel& model) {
    std::vector<uint64_t> bytes(g_.nodes_.size(), 0);
    for (NodeId id = 0; id < static_cast<NodeId>(g_.nodes_.size()); ++id) {
      absl::StatusOr<uint64_t> b = model.NodeScratchBytes(fwd_, g_, id);
      if (!b.ok()) {
        return absl::Status(b.status().code(),
                            absl::StrCat("node '", g_.nodes_[id].name, "' (", g_.nodes_[id].op,
                                         "): scratch: ", b.status().message()));
      }
      bytes[id] = *b;
    }
    for (NodeId id = 0; id < static_cast<NodeId>(g_.nodes_.size()); ++id) {
      if (bytes[id] == 0) continue;
      TrainingNode& node = g_.nodes_[id];
      node.scratch = AddTensor(absl::StrCat(node.name, ".scratch"),
                               {static_cast<int64_t>(bytes[id])}, proto::DTYPE_BOOL,
                               proto::ROLE_TEMPORARY, kNone);
      g_.tensors_[node.scratch].producer = id;
    }
    return absl::OkStatus();
  }

  // ---- Helpers -------------------------------------------------------------------------

  TensorId Resolve(graph::NodeId id, const TensorRef& ref) const {
    const graph::Node& n = fwd_.node(id);
    switch (ref.kind) {
      case TensorRef::Kind::kInput:
        return n.inputs[ref.index];
      case TensorRef::Kind::kOutput:
        return n.outputs[ref.index];
      case TensorRef::Kind::kSaved:
        return saved_[id][ref.index];
    }
    return kNone;
  }

  TensorId NewGradient(graph::TensorId t) {
    const graph::Tensor& x = fwd_.tensor(t);
    const int part = parts_[t]++;
    const std::string name = part == 0 ? absl::StrCat(x.name, ".grad")
                                       : absl::StrCat(x.name, ".grad.part", part);
    return AddTensor(name, x.shape, x.dtype, proto::ROLE_GRADIENT, t);
  }

  bool SameBytes(TensorId a, TensorId b) const {
    return g_.tensors_[a].bytes == g_.tensors_[b].bytes;
  }

  TensorId AddTensor(std::string name, graph::Shape shape, proto::DType dtype,
                     proto::TensorRole role, graph::TensorId forward_tensor) {
    TrainingTensor t;
    t.name = std::move(name);
    t.bytes = graph::NumElements(shape) * graph::DTypeSize(dtype);
    t.shape = std::move(shape);
    t.dtype = dtype;
    t.role = role;
    t.forward_tensor = forward_tensor;
    return g_.AppendTensor(std::move(t));
  }

  NodeId AddNode(TrainingNode node) { return g_.AppendNode(std::move(node)); }

  const graph::Graph& fwd_;
  const TrainingOptions options_;
  TrainingGraph g_;
  // Indexed by forward node: the saved-state tensors of its training forward.
  std::vector<std::vector<TensorId>> saved_;
  // Indexed by forward tensor.
  std::vector<bool> requires_grad_;
  std::vector<int> contributions_;
  // Indexed by forward node: whether it gets a backward node.
  std::vector<bool> active_;
  absl::flat_hash_map<graph::TensorId, int> parts_;
  absl::flat_hash_map<graph::TensorId, int> accumulations_;
};

absl::StatusOr<TrainingGraph> TrainingGraph::Build(const graph::Graph& forward,
                                                   const TrainingOptions& options) {
  return TrainingGraphBuilder(forward, options).Build();
}

TensorId TrainingGraph::AppendTensor(TrainingTensor tensor) {
  tensors_.push_back(std::move(tensor));
  return static_cast<TensorId>(tensors_.size()) - 1;
}

NodeId TrainingGraph::AppendNode(TrainingNode node) {
  const NodeId id = static_cast<NodeId>(nodes_.size());
  auto touch = [&](TensorId t) {
    std::vector<NodeId>& c = tensors_[t].consumers;
    if (c.empty() || c.back() != id) c.push_back(id);
  };
  for (TensorId t : node.inputs) touch(t);
  for (TensorId t : node.updates) touch(t);
  for (TensorId t : node.outputs) {
    CHECK(tensors_[t].producer == kNone) << tensors_[t].name << " written twice";
    tensors_[t].producer = id;
  }
  if (node.scratch != kNone) {
    CHECK(tensors_[node.scratch].producer == kNone) << tensors_[node.scratch].name << " used twice";
    tensors_[node.scratch].producer = id;
  }
  nodes_.push_back(std::move(node));
  return id;
}

TensorId TrainingGraph::FindTensor(const std::string& name) const {
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (tensors_[i].name == name) return static_cast<TensorId>(i);
  }
  return kNone;
}

NodeId TrainingGraph::FindNode(const std::string& name) const {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].name == name) return static_cast<NodeId>(i);
  }
  return kNone;
}

TensorId TrainingGraph::FinalGradient(const std::string& forward_name) const {
  for (size_t i = 0; i < final_gradient_.size(); ++i) {
    if (tensors_[i].name == forward_name) return final_gradient_[i];
  }
  return kNone;
}

}  // namespace headroom::planner
