#include "graph/graph.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/reversible_block.h"
#include "util/printable.h"
#include "util/status_macros.h"

namespace headroom::graph {

using absl::InvalidArgumentError;
using absl::StrCat;

namespace {

bool IsLeafRole(proto::TensorRole role) {
  return role == proto::ROLE_INPUT || role == proto::ROLE_LABEL ||
         role == proto::ROLE_PARAMETER || role == proto::ROLE_BUFFER;
}

std::string NodeLabel(const proto::NodeDef& node) {
  return StrCat("node '", node.name(), "' (", node.op(), ")");
}

// Returns the attribute names an op accepts, for messages.
std::string AcceptedAttrs(const OpSchema& op) {
  if (op.attrs.empty()) return StrCat(op.name, " takes no attributes");
  std::vector<std::string> names;
  for (const AttrSpec& spec : op.attrs) names.push_back(spec.name);
  return StrCat(op.name, " accepts ", absl::StrJoin(names, ", "));
}

// Checks a node's attributes against its op and returns them with defaults filled in.
absl::StatusOr<Attrs> ResolveAttrs(const proto::NodeDef& node, const OpSchema& op) {
  std::map<std::string, proto::AttrValue> values;
  for (const auto& [name, value] : node.attrs()) {
    const std::string& attr = name;  // a structured binding cannot be captured before C++20
    auto spec = std::find_if(op.attrs.begin(), op.attrs.end(),
                             [&](const AttrSpec& s) { return s.name == attr; });
    if (spec == op.attrs.end()) {
      return InvalidArgumentError(StrCat(NodeLabel(node), ": unknown attribute '", name, "' (",
                                         AcceptedAttrs(op), ")"));
    }
    absl::StatusOr<AttrType> type = AttrTypeOf(value);
    if (!type.ok() || *type != spec->type) {
      return InvalidArgumentError(StrCat(NodeLabel(node), ": attribute '", name, "' is ",
                                         type.ok() ? AttrTypeName(*type) : "unset",
                                         ", needs ", AttrTypeName(spec->type)));
    }
    values[name] = value;
  }
  for (const AttrSpec& spec : op.attrs) {
    if (values.count(spec.name)) continue;
    if (spec.required) {
      return InvalidArgumentError(StrCat(NodeLabel(node), ": missing required attribute '",
                                         spec.name, "' (", AttrTypeName(spec.type), ")"));
    }
    values[spec.name] = spec.default_value;
  }
  return Attrs(std::move(values));
}

// Checks the number of inputs and outputs against the op.
absl::Status CheckArity(const proto::NodeDef& node, const OpSchema& op) {
  const int n_in = node.inputs_size();
  const int max_in = static_cast<int>(op.input_names.size());
  const int min_in = max_in - op.num_optional_inputs;
  const bool in_ok = op.variadic_inputs ? n_in >= min_in : (n_in >= min_in && n_in <= max_in);
  if (!in_ok) {
    std::string expected = op.variadic_inputs        ? StrCat("at least ", min_in)
                           : min_in == max_in        ? StrCat(min_in)
                                                     : StrCat(min_in, " to ", max_in);
    return InvalidArgumentError(StrCat(NodeLabel(node), ": has ", n_in, " inputs, needs ",
                                       expected, " (", absl::StrJoin(op.input_names, ", "),
                                       ")"));
  }
  const int n_out = node.outputs_size();
  const int want_out = static_cast<int>(op.output_names.size());
  if (op.variadic_outputs ? n_out < 1 : n_out != want_out) {
    return InvalidArgumentError(StrCat(NodeLabel(node), ": has ", n_out, " outputs, needs ",
                                       op.variadic_outputs ? "at least 1" : StrCat(want_out)));
  }
  return absl::OkStatus();
}

}  // namespace

// Builds a Graph from a GraphDef in ordered phases; each returns the first error found.
// Call Load() once.
class GraphLoader {
 public:
  explicit GraphLoader(const proto::GraphDef& def) : def_(def) {}

  absl::StatusOr<Graph> Load() {
    RETURN_IF_ERROR(CheckNamesAreUtf8());
    graph_.name_ = def_.name();
    RETURN_IF_ERROR(DeclareTensors());
    RETURN_IF_ERROR(DeclareNodes());
    RETURN_IF_ERROR(CheckLeaves());
    ASSIGN_OR_RETURN(std::vector<int> order, TopologicalOrder());
    RETURN_IF_ERROR(BuildNodes(order));
    RETURN_IF_ERROR(FindLoss());
    ASSIGN_OR_RETURN(graph_.reversible_blocks_, ResolveReversibleBlocks(graph_, def_));
    return std::move(graph_);
  }

 private:
  // Phase 0: every name (the graph's, tensors', nodes' and their operands', the loss's) is
  // UTF-8. Plans, profiles and errors carry them in proto3 strings, which a reader refuses to
  // parse otherwise (an ONNX model's names, proto2 strings, are not checked when it parses).
  absl::Status CheckNamesAreUtf8() const {
    auto check = [](const std::string& name, const std::string& what) -> absl::Status {
      if (IsValidUtf8(name)) return absl::OkStatus();
      return InvalidArgumentError(StrCat(what, " \"", absl::CHexEscape(name),
                                         "\" is not valid UTF-8"));
    };
    RETURN_IF_ERROR(check(def_.name(), "the graph's name"));
    for (const proto::TensorDef& t : def_.tensors()) RETURN_IF_ERROR(check(t.name(), "tensor"));
    for (int i = 0; i < def_.nodes_size(); ++i) {
      const proto::NodeDef& n = def_.nodes(i);
      const std::string node = StrCat("node ", i);
      RETURN_IF_ERROR(check(n.name(), StrCat(node, "'s name")));
      RETURN_IF_ERROR(check(n.op(), StrCat(node, "'s op")));
      for (const std::string& in : n.inputs()) RETURN_IF_ERROR(check(in, StrCat(node, "'s input")));
      for (const std::string& out : n.outputs()) {
        RETURN_IF_ERROR(check(out, StrCat(node, "'s output")));
      }
    }
    return check(def_.loss(), "the loss");
  }

  // Phase 1: every listed tensor, with unique names.
  absl::Status DeclareTensors() {
    for (const proto::TensorDef& t : def_.tensors()) {
      if (t.name().empty()) return InvalidArgumentError("a tensor has an empty name");
      if (graph_.tensor_index_.count(t.name())) {
        return InvalidArgumentError(StrCat("tensor '", t.name(), "' is defined twice"));
      }
      graph_.tensor_index_[t.name()] = static_cast<TensorId>(graph_.tensors_.size());
      Tensor tensor;
      tensor.name = t.name();
      tensor.shape.assign(t.shape().begin(), t.shape().end());
      tensor.dtype = t.dtype();
      tensor.role = t.role();
      graph_.tensors_.push_back(std::move(tensor));
      declared_shape_.push_back(t.shape_size() > 0);
    }
    return absl::OkStatus();
  }

  // Phase 2: node names, ops, arity, attributes, and each output's single producer.
  absl::Status DeclareNodes() {
    std::set<std::string> names;
    producer_def_.assign(graph_.tensors_.size(), -1);
    for (int i = 0; i < def_.nodes_size(); ++i) {
      const proto::NodeDef& node = def_.nodes(i);
      if (node.name().empty()) {
        return InvalidArgumentError(StrCat("node ", i, " (", node.op(), ") has an empty name"));
      }
      if (!names.insert(node.name()).second) {
        return InvalidArgumentError(StrCat("node '", node.name(), "' is defined twice"));
      }
      const OpSchema* op = FindOp(node.op());
      if (op == nullptr) {
        return InvalidArgumentError(StrCat(NodeLabel(node), ": unknown op '", node.op(),
                                           "'; run 'headroom ops' for the op set"));
      }
      RETURN_IF_ERROR(CheckArity(node, *op));
      ASSIGN_OR_RETURN(Attrs attrs, ResolveAttrs(node, *op));
      ops_.push_back(op);
      attrs_.push_back(std::move(attrs));
      for (const std::string& out : node.outputs()) RETURN_IF_ERROR(DeclareOutput(node, i, out));
    }
    return absl::OkStatus();
  }

  absl::Status DeclareOutput(const proto::NodeDef& node, int node_index,
                             const std::string& out) {
    if (out.empty()) return InvalidArgumentError(StrCat(NodeLabel(node), ": an output has an empty name"));
    auto it = graph_.tensor_index_.find(out);
    if (it == graph_.tensor_index_.end()) {
      it = graph_.tensor_index_.emplace(out, static_cast<TensorId>(graph_.tensors_.size())).first;
      Tensor tensor;
      tensor.name = out;
      graph_.tensors_.push_back(std::move(tensor));
      declared_shape_.push_back(false);
      producer_def_.push_back(-1);
    }
    Tensor& tensor = graph_.tensors_[it->second];
    int& producer = producer_def_[it->second];
    if (producer >= 0) {
      return InvalidArgumentError(StrCat("tensor '", out, "' is defined twice: written by node '",
                                         def_.nodes(producer).name(), "' and node '",
                                         node.name(), "'"));
    }
    if (IsLeafRole(tensor.role)) {
      return InvalidArgumentError(StrCat("tensor '", out, "' is defined twice: declared as ",
                                         RoleName(tensor.role), " and written by ",
                                         NodeLabel(node)));
    }
    if (tensor.role != proto::ROLE_UNSPECIFIED && tensor.role != proto::ROLE_ACTIVATION) {
      return InvalidArgumentError(StrCat("tensor '", out, "' written by ", NodeLabel(node),
                                         " is declared ", RoleName(tensor.role),
                                         "; node outputs are activations"));
    }
    tensor.role = proto::ROLE_ACTIVATION;
    producer = node_index;
    return absl::OkStatus();
  }

  // Phase 3: tensors no node writes must be declared leaves with a valid shape and dtype.
  absl::Status CheckLeaves() {
    for (int i = 0; i < def_.nodes_size(); ++i) {
      for (const std::string& in : def_.nodes(i).inputs()) {
        if (!graph_.tensor_index_.count(in)) {
          return InvalidArgumentError(StrCat(NodeLabel(def_.nodes(i)), ": input '", in,
                                             "' is never produced: no node writes it and it is "
                                             "not declared as an input, label, parameter or "
                                             "buffer"));
        }
      }
    }
    for (size_t t = 0; t < graph_.tensors_.size(); ++t) {
      if (producer_def_[t] >= 0) continue;
      const Tensor& tensor = graph_.tensors_[t];
      if (!IsLeafRole(tensor.role)) {
        return InvalidArgumentError(StrCat("tensor '", tensor.name, "' is never produced: no ",
                                           "node writes it, so it must be declared as an ",
                                           "input, label, parameter or buffer (it is ",
                                           RoleName(tensor.role), ")"));
      }
      if (DTypeSize(tensor.dtype) == 0) {
        return InvalidArgumentError(StrCat("tensor '", tensor.name, "' (", RoleName(tensor.role),
                                           ") has no dtype"));
      }
      RETURN_IF_ERROR(CheckedNumElements(tensor.shape, tensor.dtype,
                                         StrCat("tensor '", tensor.name, "'"))
                          .status());
    }
    return absl::OkStatus();
  }

  // Phase 4: Kahn's algorithm, taking the earliest ready node in description order.
  absl::StatusOr<std::vector<int>> TopologicalOrder() {
    const int n = def_.nodes_size();
    std::vector<int> missing(n, 0);
    std::vector<std::vector<int>> readers(n);
    for (int i = 0; i < n; ++i) {
      for (const std::string& in : def_.nodes(i).inputs()) {
        const int producer = producer_def_[graph_.tensor_index_.at(in)];
        if (producer < 0) continue;
        ++missing[i];
        readers[producer].push_back(i);
      }
    }
    std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
    for (int i = 0; i < n; ++i) {
      if (missing[i] == 0) ready.push(i);
    }
    std::vector<int> order;
    while (!ready.empty()) {
      const int i = ready.top();
      ready.pop();
      order.push_back(i);
      for (int r : readers[i]) {
        if (--missing[r] == 0) ready.push(r);
      }
    }
    if (static_cast<int>(order.size()) != n) return CycleError(missing);
    return order;
  }

  // Names one cycle among the nodes Kahn's algorithm could not order.
  absl::Status CycleError(const std::vector<int>& missing) {
    int start = static_cast<int>(std::find_if(missing.begin(), missing.end(),
                                              [](int m) { return m > 0; }) -
                                 missing.begin());
    // Walk backwards through unordered producers until a node repeats.
    std::vector<int> path;
    std::vector<int> seen_at(def_.nodes_size(), -1);
    int node = start;
    while (seen_at[node] < 0) {
      seen_at[node] = static_cast<int>(path.size());
      path.push_back(node);
      for (const std::string& in : def_.nodes(node).inputs()) {
        const int producer = producer_def_[graph_.tensor_index_.at(in)];
        if (producer >= 0 && missing[producer] > 0) {
          node = producer;
          break;
        }
      }
    }
    std::vector<std::string> names;
    for (size_t k = path.size(); k-- > static_cast<size_t>(seen_at[node]);) {
      names.push_back(StrCat("'", def_.nodes(path[k]).name(), "'"));
    }
    names.push_back(names.front());
    return InvalidArgumentError(StrCat("graph has a cycle: node ", absl::StrJoin(names, " -> ")));
  }

  // Phase 5: nodes in order, with shape and dtype inference.
  absl::Status BuildNodes(const std::vector<int>& order) {
    for (int def_index : order) {
      const proto::NodeDef& def = def_.nodes(def_index);
      const NodeId id = static_cast<NodeId>(graph_.nodes_.size());
      Node node;
      node.name = def.name();
      node.op = ops_[def_index];
      node.attrs = attrs_[def_index];
      InferenceContext ctx;
      ctx.attrs = node.attrs;
      for (const std::string& in : def.inputs()) {
        const TensorId t = graph_.tensor_index_.at(in);
        node.inputs.push_back(t);
        ctx.input_names.push_back(in);
        ctx.input_shapes.push_back(graph_.tensors_[t].shape);
        ctx.input_dtypes.push_back(graph_.tensors_[t].dtype);
        std::vector<NodeId>& consumers = graph_.tensors_[t].consumers;
        if (consumers.empty() || consumers.back() != id) consumers.push_back(id);
      }
      ctx.output_shapes.resize(def.outputs_size());
      ctx.output_dtypes.resize(def.outputs_size());
      absl::Status inferred = node.op->infer(ctx);
      if (!inferred.ok()) {
        return InvalidArgumentError(StrCat(NodeLabel(def), ": ", inferred.message()));
      }
      for (int k = 0; k < def.outputs_size(); ++k) {
        const TensorId t = graph_.tensor_index_.at(def.outputs(k));
        RETURN_IF_ERROR(SetInferred(def, t, ctx.output_shapes[k], ctx.output_dtypes[k]));
        graph_.tensors_[t].producer = id;
        node.outputs.push_back(t);
      }
      graph_.node_index_[node.name] = id;
      graph_.nodes_.push_back(std::move(node));
    }
    return absl::OkStatus();
  }

  // Records an output's inferred shape and dtype, checking any declared ones and the size.
  absl::Status SetInferred(const proto::NodeDef& def, TensorId t, const Shape& shape,
                           proto::DType dtype) {
    Tensor& tensor = graph_.tensors_[t];
    if (declared_shape_[t] && tensor.shape != shape) {
      return InvalidArgumentError(StrCat(NodeLabel(def), ": output '", tensor.name,
                                         "' is declared with shape ", ShapeString(tensor.shape),
                                         " but the op produces ", ShapeString(shape)));
    }
    if (tensor.dtype != proto::DTYPE_UNSPECIFIED && tensor.dtype != dtype) {
      return InvalidArgumentError(StrCat(NodeLabel(def), ": output '", tensor.name,
                                         "' is declared ", DTypeName(tensor.dtype),
                                         " but the op produces ", DTypeName(dtype)));
    }
    RETURN_IF_ERROR(CheckedNumElements(shape, dtype,
                                       StrCat(NodeLabel(def), ": output '", tensor.name, "'"))
                        .status());
    tensor.shape = shape;
    tensor.dtype = dtype;
    return absl::OkStatus();
  }

  // Phase 6: the loss must name a scalar floating-point tensor.
  absl::Status FindLoss() {
    if (def_.loss().empty()) {
      return InvalidArgumentError(
          "graph has no scalar loss: set 'loss' to the name of a scalar floating-point tensor "
          "(e.g. the output of SoftmaxCrossEntropy)");
    }
    const TensorId loss = graph_.FindTensor(def_.loss());
    if (loss < 0) {
      return InvalidArgumentError(StrCat("graph has no scalar loss: loss tensor '", def_.loss(),
                                         "' does not exist"));
    }
    const Tensor& t = graph_.tensors_[loss];
    if (!t.shape.empty() || !IsFloating(t.dtype) || t.producer == kNoNode) {
      return InvalidArgumentError(
          StrCat("graph has no scalar loss: loss tensor '", t.name, "' is ", RoleName(t.role),
                 " ", DTypeName(t.dtype), " ", ShapeString(t.shape),
                 "; it must be a scalar [] floating-point tensor computed by a node"));
    }
    graph_.loss_ = loss;
    return absl::OkStatus();
  }

  const proto::GraphDef& def_;
  Graph graph_;
  // Indexed by tensor id: whether the description gave a shape.
  std::vector<bool> declared_shape_;
  // Indexed by tensor id: the description index of the node writing it, or -1.
  std::vector<int> producer_def_;
  // Indexed by description node index.
  std::vector<const OpSchema*> ops_;
  std::vector<Attrs> attrs_;
};

namespace {

// Returns InvalidArgument if `def` has more nodes or tensors than the documented maxima.
absl::Status CheckGraphSize(const proto::GraphDef& def) {
  if (def.nodes_size() > kMaxGraphNodes) {
    return InvalidArgumentError(StrCat("graph '", def.name(), "' has ", def.nodes_size(),
                                       " nodes; at most ", kMaxGraphNodes, " are allowed"));
  }
  int64_t tensors = def.tensors_size();
  for (const proto::NodeDef& node : def.nodes()) tensors += node.outputs_size();
  if (tensors > kMaxGraphTensors) {
    return InvalidArgumentError(StrCat("graph '", def.name(), "' has ", tensors,
                                       " tensors (listed and node outputs); at most ",
                                       kMaxGraphTensors, " are allowed"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Graph> Graph::FromProto(const proto::GraphDef& def) {
  RETURN_IF_ERROR(CheckGraphSize(def));
  return GraphLoader(def).Load();
}

proto::GraphDef Graph::ToProto() const {
  proto::GraphDef def;
  def.set_name(name_);
  def.set_format_version(1);
  for (const Tensor& t : tensors_) {
    proto::TensorDef* out = def.add_tensors();
    out->set_name(t.name);
    for (int64_t d : t.shape) out->add_shape(d);
    out->set_dtype(t.dtype);
    out->set_role(t.role);
  }
  for (const Node& n : nodes_) {
    proto::NodeDef* out = def.add_nodes();
    out->set_name(n.name);
    out->set_op(n.op->name);
    for (TensorId t : n.inputs) out->add_inputs(tensors_[t].name);
    for (TensorId t : n.outputs) out->add_outputs(tensors_[t].name);
    for (const auto& [key, value] : n.attrs.values()) (*out->mutable_attrs())[key] = value;
  }
  def.set_loss(tensors_[loss_].name);
  for (const ReversibleBlock& b : reversible_blocks_) {
    proto::ReversibleBlock* out = def.add_reversible_blocks();
    out->set_name(b.name);
    out->set_y1_node(nodes_[b.y1_node].name);
    out->set_y2_node(nodes_[b.y2_node].name);
    for (NodeId n : b.f_nodes) out->add_f_nodes(nodes_[n].name);
    for (NodeId n : b.g_nodes) out->add_g_nodes(nodes_[n].name);
  }
  return def;
}

TensorId Graph::FindTensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? -1 : it->second;
}

NodeId Graph::FindNode(const std::string& name) const {
  auto it = node_index_.find(name);
  return it == node_index_.end() ? -1 : it->second;
}

absl::StatusOr<std::vector<InferredOutput>> InferNodeOutputs(
    const proto::NodeDef& node, const std::vector<Shape>& input_shapes,
    const std::vector<proto::DType>& input_dtypes) {
  const OpSchema* op = FindOp(node.op());
  if (op == nullptr) {
    return InvalidArgumentError(StrCat(NodeLabel(node), ": unknown op '", node.op(), "'"));
  }
  RETURN_IF_ERROR(CheckArity(node, *op));
  InferenceContext ctx;
  ASSIGN_OR_RETURN(ctx.attrs, ResolveAttrs(node, *op));
  ctx.input_names.assign(node.inputs().begin(), node.inputs().end());
  ctx.input_shapes = input_shapes;
  ctx.input_dtypes = input_dtypes;
  ctx.output_shapes.resize(node.outputs_size());
  ctx.output_dtypes.resize(node.outputs_size());
  if (absl::Status s = op->infer(ctx); !s.ok()) {
    return InvalidArgumentError(StrCat(NodeLabel(node), ": ", s.message()));
  }
  std::vector<InferredOutput> outputs;
  for (int k = 0; k < node.outputs_size(); ++k) {
    outputs.push_back({ctx.output_shapes[k], ctx.output_dtypes[k]});
  }
  return outputs;
}

}  // namespace headroom::graph
