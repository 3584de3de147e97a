#include "graph/onnx_export.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <numeric>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "onnx/checker.h"
#include "onnx/defs/schema.h"
#include "onnx/shape_inference/implementation.h"
#include "util/status_macros.h"

namespace headroom::graph {
namespace {

using absl::InvalidArgumentError;
using absl::StrCat;

// ONNX's IR version for opset 17 (onnx 1.12).
constexpr int64_t kIrVersion = 8;
// No batch on any axis.
constexpr int kNoBatch = -1;

absl::StatusOr<int32_t> OnnxType(proto::DType dtype) {
  switch (dtype) {
    case proto::DTYPE_FLOAT32:
      return onnx::TensorProto::FLOAT;
    case proto::DTYPE_FLOAT16:
      return onnx::TensorProto::FLOAT16;
    case proto::DTYPE_BFLOAT16:
      return onnx::TensorProto::BFLOAT16;
    case proto::DTYPE_INT32:
      return onnx::TensorProto::INT32;
    case proto::DTYPE_INT64:
      return onnx::TensorProto::INT64;
    case proto::DTYPE_BOOL:
      return onnx::TensorProto::BOOL;
    default:
      return InvalidArgumentError(StrCat("dtype ", DTypeName(dtype), " has no ONNX type"));
  }
}

void SetInt(onnx::NodeProto* n, const std::string& name, int64_t v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

void SetFloat(onnx::NodeProto* n, const std::string& name, double v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(static_cast<float>(v));
}

void SetString(onnx::NodeProto* n, const std::string& name, const std::string& v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

void SetInts(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

// Returns {top, left, bottom, right} of Headroom's 2- or 4-value padding: ONNX's pads order
// (every axis's begin, then every axis's end).
std::vector<int64_t> Pads4(const std::vector<int64_t>& p) {
  if (p.size() == 2) return {p[0], p[1], p[0], p[1]};
  return p;
}

class Exporter;
using Converter = absl::Status (Exporter::*)(const Node&);

class Exporter {
 public:
  Exporter(const Graph& g, const std::vector<proto::TensorValue>& values,
           const OnnxExportOptions& options)
      : g_(g),
        values_(values),
        options_(options),
        batch_axis_(g.tensors().size(), kNoBatch),
        onnx_name_(g.tensors().size()) {}

  static const absl::flat_hash_map<std::string, Converter>& Converters();

  absl::StatusOr<OnnxExport> Run() {
    // 1. What the logits need: the loss's first input and the nodes behind it.
    RETURN_IF_ERROR(FindLogits());
    // 2. Their parameters' and buffers' values, checked against the graph.
    RETURN_IF_ERROR(CheckValues());
    // 3. The model, its inputs (batch symbolic where it flows to the logits), its nodes in
    //    topological order, its output.
    onnx::ModelProto& m = out_.model;
    m.set_ir_version(kIrVersion);
    m.set_producer_name("headroom");
    m.set_doc_string(StrCat("Headroom forward graph '", g_.name(), "' in inference form"));
    onnx::OperatorSetIdProto* opset = m.add_opset_import();
    opset->set_domain("");
    opset->set_version(kOnnxExportOpset);
    for (const auto& [key, value] : options_.metadata) {
      onnx::StringStringEntryProto* p = m.add_metadata_props();
      p->set_key(key);
      p->set_value(value);
    }
    graph_ = m.mutable_graph();
    graph_->set_name(options_.name.empty() ? g_.name() : options_.name);
    for (const Tensor& t : g_.tensors()) used_names_.insert(t.name);
    RETURN_IF_ERROR(DeclareInputs());
    for (NodeId id = 0; id < static_cast<NodeId>(g_.nodes().size()); ++id) {
      if (!needed_[id]) continue;
      const Node& n = g_.node(id);
      auto it = Converters().find(n.op->name);
      if (it == Converters().end()) {
        return Fail(n, "has no ONNX form in Headroom's exporter");
      }
      ++out_.stats.headroom_nodes;
      RETURN_IF_ERROR((this->*(it->second))(n));
    }
    RETURN_IF_ERROR(DeclareOutput());
    out_.stats.onnx_nodes = graph_->node_size();
    out_.stats.initializers = graph_->initializer_size();
    if (options_.check) {
      if (absl::Status s = CheckOnnxModel(m); !s.ok()) {
        return absl::InternalError(StrCat("the exported model fails ONNX's checks (a bug in ",
                                          "Headroom's exporter): ", s.message()));
      }
    }
    return std::move(out_);
  }

 private:
  // ---- Steps ------------------------------------------------------------------------------

  absl::Status FindLogits() {
    const NodeId loss = g_.tensor(g_.loss()).producer;
    if (loss == kNoNode || g_.node(loss).inputs.empty()) {
      return InvalidArgumentError(
          StrCat("graph '", g_.name(), "': its loss is not computed from logits"));
    }
    logits_ = g_.node(loss).inputs[0];
    if (g_.tensor(logits_).producer == kNoNode) {
      return InvalidArgumentError(StrCat("graph '", g_.name(), "': its logits '",
                                         g_.tensor(logits_).name, "' are not computed"));
    }
    needed_.assign(g_.nodes().size(), false);
    std::vector<TensorId> stack = {logits_};
    std::vector<bool> seen(g_.tensors().size(), false);
    seen[logits_] = true;
    while (!stack.empty()) {
      const TensorId t = stack.back();
      stack.pop_back();
      const NodeId p = g_.tensor(t).producer;
      if (p == kNoNode) {
        leaves_.push_back(t);
        continue;
      }
      needed_[p] = true;
      for (TensorId in : g_.node(p).inputs) {
        if (!seen[in]) {
          seen[in] = true;
          stack.push_back(in);
        }
      }
    }
    std::sort(leaves_.begin(), leaves_.end());
    return absl::OkStatus();
  }

  absl::Status CheckValues() {
    absl::flat_hash_map<std::string, const proto::TensorValue*> by_name;
    for (const proto::TensorValue& v : values_) by_name[v.name()] = &v;
    std::vector<std::string> missing;
    for (TensorId t : leaves_) {
      const Tensor& tensor = g_.tensor(t);
      if (tensor.role != proto::ROLE_PARAMETER && tensor.role != proto::ROLE_BUFFER) continue;
      auto it = by_name.find(tensor.name);
      if (it == by_name.end()) {
        missing.push_back(tensor.name);
        continue;
      }
      const proto::TensorValue& v = *it->second;
      const Shape shape(v.shape().begin(), v.shape().end());
      if (shape != tensor.shape || v.dtype() != tensor.dtype) {
        return InvalidArgumentError(StrCat("value '", v.name(), "' is ", DTypeName(v.dtype()), " ",
                                           ShapeString(shape), ", but graph '", g_.name(), "' has ",
                                           RoleName(tensor.role), " '", tensor.name, "' ",
                                           DTypeName(tensor.dtype), " ", ShapeString(tensor.shape),
                                           ": the values are of another model"));
      }
      if (v.data().size() != tensor.bytes()) {
        return InvalidArgumentError(StrCat("value '", v.name(), "' holds ", v.data().size(),
                                           " bytes; ", DTypeName(tensor.dtype), " ",
                                           ShapeString(tensor.shape), " takes ", tensor.bytes()));
      }
      value_of_[t] = &v;
    }
    if (!missing.empty()) {
      const size_t shown = std::min<size_t>(missing.size(), 5);
      return InvalidArgumentError(
          StrCat("no value for ", missing.size(), " parameter(s) and buffer(s) of graph '",
                 g_.name(), "': ", absl::StrJoin(missing.begin(), missing.begin() + shown, ", "),
                 missing.size() > shown ? ", ..." : "", " (the values are of another model)"));
    }
    return absl::OkStatus();
  }

  absl::Status DeclareInputs() {
    const int64_t batch = g_.tensor(logits_).shape.empty() ? 0 : g_.tensor(logits_).shape[0];
    for (TensorId t : leaves_) {
      const Tensor& tensor = g_.tensor(t);
      onnx_name_[t] = tensor.name;
      if (tensor.role == proto::ROLE_PARAMETER || tensor.role == proto::ROLE_BUFFER) {
        RETURN_IF_ERROR(AddInitializer(t));
        continue;
      }
      // An input (or a label some node reads): its first dimension is the batch when it is
      // the logits'.
      const bool batched =
          options_.dynamic_batch && !tensor.shape.empty() && tensor.shape[0] == batch;
      if (batched) batch_axis_[t] = 0;
      onnx::ValueInfoProto* in = graph_->add_input();
      in->set_name(tensor.name);
      ASSIGN_OR_RETURN(const int32_t type, OnnxType(tensor.dtype));
      SetType(in, type, tensor.shape, batched ? 0 : kNoBatch);
      out_.stats.inputs.push_back(tensor.name);
    }
    return absl::OkStatus();
  }

  absl::Status DeclareOutput() {
    const Tensor& logits = g_.tensor(logits_);
    onnx::ValueInfoProto* out = graph_->add_output();
    out->set_name(Name(logits_));
    ASSIGN_OR_RETURN(const int32_t type, OnnxType(logits.dtype));
    SetType(out, type, logits.shape, batch_axis_[logits_]);
    out_.stats.output = out->name();
    return absl::OkStatus();
  }

  void SetType(onnx::ValueInfoProto* v, int32_t type, const Shape& shape, int batch_axis) {
    onnx::TypeProto::Tensor* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(type);
    onnx::TensorShapeProto* s = t->mutable_shape();
    for (size_t d = 0; d < shape.size(); ++d) {
      if (static_cast<int>(d) == batch_axis) {
        s->add_dim()->set_dim_param(options_.batch_name);
      } else {
        s->add_dim()->set_dim_value(shape[d]);
      }
    }
  }

  absl::Status AddInitializer(TensorId t) {
    const Tensor& tensor = g_.tensor(t);
    const proto::TensorValue& v = *value_of_.at(t);
    onnx::TensorProto* init = graph_->add_initializer();
    init->set_name(tensor.name);
    ASSIGN_OR_RETURN(const int32_t type, OnnxType(tensor.dtype));
    init->set_data_type(type);
    for (int64_t d : tensor.shape) init->add_dims(d);
    init->set_raw_data(v.data());
    out_.stats.parameter_elements += tensor.num_elements();
    return absl::OkStatus();
  }

  // ---- Helpers ----------------------------------------------------------------------------

  absl::Status Fail(const Node& n, const std::string& message) const {
    return InvalidArgumentError(StrCat("node '", n.name, "' (", n.op->name, "): ", message));
  }

  // Returns the ONNX value holding tensor `t`.
  const std::string& Name(TensorId t) const { return onnx_name_[t]; }
  std::string In(const Node& n, int i) const { return Name(n.inputs[i]); }
  const std::string& Out(const Node& n, int i = 0) const { return g_.tensor(n.outputs[i]).name; }
  const Shape& ShapeOf(TensorId t) const { return g_.tensor(t).shape; }

  // Returns a value name, `base` or `base_<k>`, no tensor or earlier value has.
  std::string Fresh(const std::string& base) {
    std::string name = base;
    for (int k = 1; used_names_.contains(name); ++k) name = StrCat(base, "_", k);
    used_names_.insert(name);
    return name;
  }

  onnx::NodeProto* Emit(const std::string& op, const std::string& name,
                        const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs) {
    onnx::NodeProto* node = graph_->add_node();
    node->set_op_type(op);
    node->set_name(name);
    for (const std::string& in : inputs) node->add_input(in);
    for (const std::string& out : outputs) node->add_output(out);
    return node;
  }

  // Emits `op` writing node n's (first) output, and binds it.
  onnx::NodeProto* EmitFor(const Node& n, const std::string& op,
                           const std::vector<std::string>& inputs) {
    onnx_name_[n.outputs[0]] = Out(n);
    return Emit(op, n.name, inputs, {Out(n)});
  }

  // Returns a new value of `base` for an intermediate result of node `n`.
  std::string Temp(const Node& n, const std::string& what) {
    return Fresh(StrCat(Out(n), "/", what));
  }

  // Returns a 0-dim float32 initializer holding `v`: a literal the importer folds (and
  // matches in its GELU patterns).
  std::string Scalar(const std::string& base, double v) {
    onnx::TensorProto* init = graph_->add_initializer();
    init->set_name(Fresh(base));
    init->set_data_type(onnx::TensorProto::FLOAT);
    init->add_float_data(static_cast<float>(v));
    return init->name();
  }

  // Returns a 1-D int64 initializer holding `v` (shapes, axes, bounds).
  std::string Int64s(const std::string& base, const std::vector<int64_t>& v) {
    onnx::TensorProto* init = graph_->add_initializer();
    init->set_name(Fresh(base));
    init->set_data_type(onnx::TensorProto::INT64);
    init->add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) init->add_int64_data(x);
    return init->name();
  }

  // Returns the output of a Constant node holding the 1-D float32 `v` (scales, a group
  // norm's unit scale and zero bias), as torch writes them: a float initializer of more than
  // one element would read back as a weight.
  std::string FloatConstant(const std::string& base, const std::vector<float>& v) {
    const std::string name = Fresh(base);
    onnx::NodeProto* c = Emit("Constant", name, {}, {name});
    onnx::AttributeProto* value = c->add_attribute();
    value->set_name("value");
    value->set_type(onnx::AttributeProto::TENSOR);
    onnx::TensorProto* t = value->mutable_t();
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_dims(static_cast<int64_t>(v.size()));
    for (float x : v) t->add_float_data(x);
    return name;
  }

  // Returns the batch axis of input i in the coordinates of an output of rank `out_rank`
  // (numpy broadcasting aligns trailing axes), or kNoBatch.
  int AlignedBatch(const Node& n, int i, size_t out_rank) const {
    const int axis = batch_axis_[n.inputs[i]];
    if (axis == kNoBatch) return kNoBatch;
    return axis + static_cast<int>(out_rank - ShapeOf(n.inputs[i]).size());
  }

  // Sets the batch axis of node n's outputs from inputs that broadcast together (binary ops,
  // Concat, elementwise ops): they must agree on it, and an input without it must not hold
  // the batch's size on it literally (it would not follow another batch).
  absl::Status PropagateBroadcast(const Node& n) {
    const size_t rank = ShapeOf(n.outputs[0]).size();
    int axis = kNoBatch;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const int a = AlignedBatch(n, static_cast<int>(i), rank);
      if (a == kNoBatch) continue;
      if (axis != kNoBatch && a != axis) {
        return Fail(n, StrCat("its inputs hold the batch on axes ", axis, " and ", a,
                              "; export with a fixed batch"));
      }
      axis = a;
    }
    if (axis == kNoBatch) return absl::OkStatus();
    const int64_t batch = ShapeOf(n.outputs[0])[axis];
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (batch_axis_[n.inputs[i]] != kNoBatch) continue;
      const Shape& s = ShapeOf(n.inputs[i]);
      const int k = axis - static_cast<int>(rank - s.size());
      if (k >= 0 && s[k] == batch && batch > 1) {
        return Fail(n, StrCat("input '", g_.tensor(n.inputs[i]).name, "' ", ShapeString(s),
                              " holds the batch (", batch, ") on axis ", k,
                              " as a literal; export with a fixed batch"));
      }
    }
    for (TensorId out : n.outputs) batch_axis_[out] = axis;
    return absl::OkStatus();
  }

  // The same batch axis as input 0 (ops that keep their input's layout).
  absl::Status Same(const Node& n) {
    for (TensorId out : n.outputs) batch_axis_[out] = batch_axis_[n.inputs[0]];
    return absl::OkStatus();
  }

  // ---- Converters, one per Headroom op ----------------------------------------------------

  absl::Status Elementwise(const Node& n, const std::string& op) {
    EmitFor(n, op, {In(n, 0)});
    return Same(n);
  }
  absl::Status Relu(const Node& n) { return Elementwise(n, "Relu"); }
  absl::Status Sigmoid(const Node& n) { return Elementwise(n, "Sigmoid"); }
  absl::Status Tanh(const Node& n) { return Elementwise(n, "Tanh"); }
  absl::Status HardSwish(const Node& n) { return Elementwise(n, "HardSwish"); }
  absl::Status Softplus(const Node& n) { return Elementwise(n, "Softplus"); }
  absl::Status Sqrt(const Node& n) { return Elementwise(n, "Sqrt"); }
  absl::Status Erf(const Node& n) { return Elementwise(n, "Erf"); }
  absl::Status GlobalAvgPool(const Node& n) { return Elementwise(n, "GlobalAveragePool"); }

  // ONNX's Cast names its target by TensorProto's element type.
  absl::Status Cast(const Node& n) {
    SetInt(EmitFor(n, "Cast", {In(n, 0)}), "to",
           n.attrs.Int("to") == proto::DTYPE_BFLOAT16 ? onnx::TensorProto::BFLOAT16
                                                      : onnx::TensorProto::FLOAT);
    return Same(n);
  }

  absl::Status LeakyRelu(const Node& n) {
    SetFloat(EmitFor(n, "LeakyRelu", {In(n, 0)}), "alpha", n.attrs.Float("alpha"));
    return Same(n);
  }
  absl::Status Elu(const Node& n) {
    SetFloat(EmitFor(n, "Elu", {In(n, 0)}), "alpha", n.attrs.Float("alpha"));
    return Same(n);
  }
  absl::Status Selu(const Node& n) {
    onnx::NodeProto* node = EmitFor(n, "Selu", {In(n, 0)});
    SetFloat(node, "alpha", n.attrs.Float("alpha"));
    SetFloat(node, "gamma", n.attrs.Float("gamma"));
    return Same(n);
  }
  absl::Status HardSigmoid(const Node& n) {
    onnx::NodeProto* node = EmitFor(n, "HardSigmoid", {In(n, 0)});
    SetFloat(node, "alpha", n.attrs.Float("alpha"));
    SetFloat(node, "beta", n.attrs.Float("beta"));
    return Same(n);
  }
  absl::Status Pow(const Node& n) {
    EmitFor(n, "Pow", {In(n, 0), Scalar(StrCat(Out(n), "/exponent"), n.attrs.Float("exponent"))});
    return Same(n);
  }
  // ReLU6 is Clip to [0, 6] (opset 11 on: the bounds are inputs).
  absl::Status Relu6(const Node& n) {
    EmitFor(n, "Clip",
            {In(n, 0), Scalar(StrCat(Out(n), "/min"), 0.0), Scalar(StrCat(Out(n), "/max"), 6.0)});
    return Same(n);
  }
  // Mish has no ONNX op before opset 18: x * tanh(softplus(x)), as torch 1.13 writes it.
  absl::Status Mish(const Node& n) {
    const std::string sp = Temp(n, "softplus"), th = Temp(n, "tanh");
    Emit("Softplus", StrCat(n.name, "/softplus"), {In(n, 0)}, {sp});
    Emit("Tanh", StrCat(n.name, "/tanh"), {sp}, {th});
    EmitFor(n, "Mul", {In(n, 0), th});
    return Same(n);
  }
  // GELU as the decompositions torch writes and the importer fuses back:
  //   none: x / sqrt(2) -> Erf -> + 1 -> * x -> * 0.5
  //   tanh: x^3 * 0.044715 + x -> * sqrt(2/pi) -> Tanh -> + 1 -> * x -> * 0.5
  absl::Status Gelu(const Node& n) {
    const std::string x = In(n, 0);
    std::string inner;
    if (n.attrs.String("approximate") == "tanh") {
      const std::string cube = Temp(n, "cube"), scaled = Temp(n, "cubic"), sum = Temp(n, "sum");
      inner = Temp(n, "inner");
      Emit("Pow", StrCat(n.name, "/pow"), {x, Scalar(StrCat(Out(n), "/three"), 3.0)}, {cube});
      Emit("Mul", StrCat(n.name, "/mul_cubic"),
           {cube, Scalar(StrCat(Out(n), "/coefficient"), 0.044715)}, {scaled});
      Emit("Add", StrCat(n.name, "/add_cubic"), {x, scaled}, {sum});
      Emit("Mul", StrCat(n.name, "/mul_scale"),
           {sum, Scalar(StrCat(Out(n), "/sqrt_2_over_pi"), std::sqrt(2.0 / M_PI))}, {inner});
    } else {
      inner = Temp(n, "scaled");
      Emit("Div", StrCat(n.name, "/div"), {x, Scalar(StrCat(Out(n), "/sqrt_2"), std::sqrt(2.0))},
           {inner});
    }
    const std::string f = Temp(n, "f"), one_plus = Temp(n, "one_plus"),
                      times_x = Temp(n, "times_x");
    Emit(n.attrs.String("approximate") == "tanh" ? "Tanh" : "Erf", StrCat(n.name, "/f"), {inner},
         {f});
    Emit("Add", StrCat(n.name, "/add_one"), {f, Scalar(StrCat(Out(n), "/one"), 1.0)}, {one_plus});
    Emit("Mul", StrCat(n.name, "/mul_x"), {x, one_plus}, {times_x});
    onnx_name_[n.outputs[0]] = Out(n);
    Emit("Mul", n.name, {times_x, Scalar(StrCat(Out(n), "/half"), 0.5)}, {Out(n)});
    return Same(n);
  }

  // Dropout is the identity at inference: its output is its input.
  absl::Status Dropout(const Node& n) {
    onnx_name_[n.outputs[0]] = In(n, 0);
    ++out_.stats.dropped;
    return Same(n);
  }

  absl::Status Binary(const Node& n) {
    EmitFor(n, n.op->name, {In(n, 0), In(n, 1)});
    return PropagateBroadcast(n);
  }
  absl::Status PRelu(const Node& n) {
    EmitFor(n, "PRelu", {In(n, 0), In(n, 1)});
    return PropagateBroadcast(n);
  }

  absl::Status Conv(const Node& n) {
    std::vector<std::string> inputs = {In(n, 0), In(n, 1)};
    if (n.inputs.size() > 2) inputs.push_back(In(n, 2));
    onnx::NodeProto* node = EmitFor(n, "Conv", inputs);
    const Shape& w = ShapeOf(n.inputs[1]);
    SetInts(node, "kernel_shape", {w[2], w[3]});
    SetInts(node, "strides", n.attrs.Ints("stride"));
    SetInts(node, "pads", Pads4(n.attrs.Ints("padding")));
    SetInts(node, "dilations", n.attrs.Ints("dilation"));
    SetInt(node, "group", n.attrs.Int("groups"));
    return Same(n);
  }

  // ONNX's ConvTranspose has PyTorch's weight layout [C, O/groups, kh, kw] and its
  // output_padding (added at the end of each axis).
  absl::Status ConvTranspose(const Node& n) {
    std::vector<std::string> inputs = {In(n, 0), In(n, 1)};
    if (n.inputs.size() > 2) inputs.push_back(In(n, 2));
    onnx::NodeProto* node = EmitFor(n, "ConvTranspose", inputs);
    const Shape& w = ShapeOf(n.inputs[1]);
    SetInts(node, "kernel_shape", {w[2], w[3]});
    SetInts(node, "strides", n.attrs.Ints("stride"));
    SetInts(node, "pads", Pads4(n.attrs.Ints("padding")));
    SetInts(node, "output_padding", n.attrs.Ints("output_padding"));
    SetInts(node, "dilations", n.attrs.Ints("dilation"));
    SetInt(node, "group", n.attrs.Int("groups"));
    return Same(n);
  }

  // A group per channel is ONNX's InstanceNormalization. Fewer groups as torch 1.13 exports
  // nn.GroupNorm at opset 17 (GroupNormalization is opset 18's): a Reshape to [N, G, -1], an
  // InstanceNormalization of that with unit scale and zero bias, a Reshape back, then the
  // per-channel weight and bias (as [C, 1, ...]) by Mul and Add. The importer reads either
  // form back as GroupNorm's arithmetic.
  absl::Status GroupNorm(const Node& n) {
    const Shape& x = ShapeOf(n.inputs[0]);
    const int64_t groups = n.attrs.Int("num_groups");
    const float epsilon = static_cast<float>(n.attrs.Float("epsilon"));
    const int b = batch_axis_[n.inputs[0]];
    if (b != kNoBatch && b != 0) {
      return Fail(n, StrCat("holds the batch on axis ", b, " of ", ShapeString(x),
                            ", not the samples' axis 0; export with a fixed batch"));
    }
    if (groups == x[1]) {
      SetFloat(EmitFor(n, "InstanceNormalization", {In(n, 0), In(n, 1), In(n, 2)}), "epsilon",
               epsilon);
      return Same(n);
    }
    const std::string grouped = Temp(n, "grouped");
    Emit("Reshape", StrCat(n.name, "/group"),
         {In(n, 0), Int64s(StrCat(Out(n), "/grouped_shape"), {b == 0 ? 0 : x[0], groups, -1})},
         {grouped});
    const std::string normed = Temp(n, "normalized");
    SetFloat(
        Emit("InstanceNormalization", StrCat(n.name, "/normalize"),
             {grouped, FloatConstant(StrCat(Out(n), "/ones"), std::vector<float>(groups, 1.0f)),
              FloatConstant(StrCat(Out(n), "/zeros"), std::vector<float>(groups, 0.0f))},
             {normed}),
        "epsilon", epsilon);
    Shape back = x;
    if (b == 0) back[0] = 0;
    const std::string ungrouped = Temp(n, "ungrouped");
    Emit("Reshape", StrCat(n.name, "/ungroup"), {normed, Int64s(StrCat(Out(n), "/shape"), back)},
         {ungrouped});
    // weight[C] and bias[C] broadcast over the axes after the channels.
    std::vector<int64_t> affine(x.size() - 1, 1);
    affine[0] = x[1];
    const std::string affine_shape = Int64s(StrCat(Out(n), "/affine_shape"), affine);
    const std::string weight = Temp(n, "weight"), bias = Temp(n, "bias"),
                      scaled = Temp(n, "scaled");
    Emit("Reshape", StrCat(n.name, "/weight"), {In(n, 1), affine_shape}, {weight});
    Emit("Reshape", StrCat(n.name, "/bias"), {In(n, 2), affine_shape}, {bias});
    Emit("Mul", StrCat(n.name, "/scale"), {ungrouped, weight}, {scaled});
    onnx_name_[n.outputs[0]] = Out(n);
    Emit("Add", StrCat(n.name, "/shift"), {scaled, bias}, {Out(n)});
    return Same(n);
  }

  // Inference mode: normalised with the running statistics. ONNX's momentum weighs the
  // running value; Headroom's (PyTorch's) the batch's.
  absl::Status BatchNorm(const Node& n) {
    onnx::NodeProto* node =
        EmitFor(n, "BatchNormalization", {In(n, 0), In(n, 1), In(n, 2), In(n, 3), In(n, 4)});
    SetFloat(node, "epsilon", n.attrs.Float("epsilon"));
    SetFloat(node, "momentum", 1.0 - n.attrs.Float("momentum"));
    SetInt(node, "training_mode", 0);
    return Same(n);
  }

  absl::Status LayerNorm(const Node& n) {
    if (batch_axis_[n.inputs[0]] == static_cast<int>(ShapeOf(n.inputs[0]).size()) - 1) {
      return Fail(n, "normalises over the batch axis; export with a fixed batch");
    }
    onnx::NodeProto* node = EmitFor(n, "LayerNormalization", {In(n, 0), In(n, 1), In(n, 2)});
    SetInt(node, "axis", -1);
    SetFloat(node, "epsilon", n.attrs.Float("epsilon"));
    return Same(n);
  }

  // A Linear (2-D x, weight) is Gemm; any other product a MatMul of the operands transposed
  // as asked (a transposed weight as the Transpose torch writes, which the importer reads
  // back as transpose_b), then its bias added.
  absl::Status MatMul(const Node& n) {
    const bool ta = n.attrs.Bool("transpose_a"), tb = n.attrs.Bool("transpose_b");
    const Shape& a = ShapeOf(n.inputs[0]);
    const Shape& b = ShapeOf(n.inputs[1]);
    RETURN_IF_ERROR(MatMulBatch(n, ta, tb));
    if (a.size() == 2 && b.size() == 2 && !ta) {
      std::vector<std::string> inputs = {In(n, 0), In(n, 1)};
      if (n.inputs.size() > 2) inputs.push_back(In(n, 2));
      onnx::NodeProto* node = EmitFor(n, "Gemm", inputs);
      if (tb) SetInt(node, "transB", 1);
      return absl::OkStatus();
    }
    auto operand = [&](int i, bool transposed) {
      if (!transposed) return In(n, i);
      const size_t rank = ShapeOf(n.inputs[i]).size();
      std::vector<int64_t> perm(rank);
      std::iota(perm.begin(), perm.end(), 0);
      std::swap(perm[rank - 1], perm[rank - 2]);
      const std::string t = Temp(n, i == 0 ? "a_t" : "b_t");
      SetInts(Emit("Transpose", StrCat(n.name, i == 0 ? "/transpose_a" : "/transpose_b"),
                   {In(n, i)}, {t}),
              "perm", perm);
      return t;
    };
    const std::string x = operand(0, ta), y = operand(1, tb);
    if (n.inputs.size() < 3) {
      EmitFor(n, "MatMul", {x, y});
      return absl::OkStatus();
    }
    const std::string product = Temp(n, "product");
    Emit("MatMul", n.name, {x, y}, {product});
    onnx_name_[n.outputs[0]] = Out(n);
    Emit("Add", StrCat(n.name, "/bias"), {product, In(n, 2)}, {Out(n)});
    return absl::OkStatus();
  }

  // A product's batch: on a broadcast dim or the rows of a (or the columns of b), never
  // contracted.
  absl::Status MatMulBatch(const Node& n, bool ta, bool tb) {
    const size_t rank = ShapeOf(n.outputs[0]).size();
    int axis = kNoBatch;
    for (int i = 0; i < 2; ++i) {
      const int own = batch_axis_[n.inputs[i]];
      if (own == kNoBatch) continue;
      const int r = static_cast<int>(ShapeOf(n.inputs[i]).size());
      const bool transposed = i == 0 ? ta : tb;
      // The operand's contracted axis: a's last (or its rows' when transposed), b's rows.
      const int contracted = i == 0 ? (transposed ? r - 2 : r - 1) : (transposed ? r - 1 : r - 2);
      if (own == contracted)
        return Fail(n, "contracts over the batch axis; export with a fixed batch");
      int a = own + static_cast<int>(rank) - r;
      if (own >= r - 2) a = static_cast<int>(rank) - (i == 0 ? 2 : 1);
      if (axis != kNoBatch && a != axis) {
        return Fail(n, "its operands hold the batch on different axes; export with a fixed batch");
      }
      axis = a;
    }
    batch_axis_[n.outputs[0]] = axis;
    return absl::OkStatus();
  }

  absl::Status Pool(const Node& n, const std::string& op) {
    onnx::NodeProto* node = EmitFor(n, op, {In(n, 0)});
    const std::vector<int64_t> kernel = n.attrs.Ints("kernel_size");
    std::vector<int64_t> stride = n.attrs.Ints("stride");
    if (stride.empty()) stride = kernel;
    SetInts(node, "kernel_shape", kernel);
    SetInts(node, "strides", stride);
    SetInts(node, "pads", Pads4(n.attrs.Ints("padding")));
    SetInt(node, "ceil_mode", n.attrs.Bool("ceil_mode") ? 1 : 0);
    if (op == "AveragePool") {
      SetInt(node, "count_include_pad", n.attrs.Bool("count_include_pad") ? 1 : 0);
    }
    return Same(n);
  }
  absl::Status MaxPool(const Node& n) { return Pool(n, "MaxPool"); }
  absl::Status AvgPool(const Node& n) { return Pool(n, "AveragePool"); }

  absl::Status Flatten(const Node& n) {
    const Shape& x = ShapeOf(n.inputs[0]);
    int64_t axis = n.attrs.Int("axis");
    if (axis < 0) axis += static_cast<int64_t>(x.size());
    const int b = batch_axis_[n.inputs[0]];
    if (b != kNoBatch) {
      const int64_t before = std::accumulate(x.begin() + 1, x.begin() + std::max<int64_t>(axis, 1),
                                             int64_t{1}, std::multiplies<int64_t>());
      if (b != 0 || axis == 0 || before != 1) {
        return Fail(n, StrCat("flattens the batch (axis ", b, ") of ", ShapeString(x),
                              " with other axes; export with a fixed batch"));
      }
      batch_axis_[n.outputs[0]] = 0;
    }
    SetInt(EmitFor(n, "Flatten", {In(n, 0)}), "axis", axis);
    return absl::OkStatus();
  }

  // Reshape to the inferred shape; a batch kept on its axis (with the same axes before it)
  // is written 0 (ONNX: copy the input's), so the target follows any batch.
  absl::Status Reshape(const Node& n) {
    const Shape& x = ShapeOf(n.inputs[0]);
    Shape target = ShapeOf(n.outputs[0]);
    const int b = batch_axis_[n.inputs[0]];
    if (b != kNoBatch) {
      const bool kept = static_cast<int>(target.size()) > b &&
                        std::equal(x.begin(), x.begin() + b + 1, target.begin());
      if (!kept) {
        return Fail(n, StrCat("reshapes ", ShapeString(x), " (batch on axis ", b, ") to ",
                              ShapeString(target),
                              ", which does not keep the batch on its axis; export with a "
                              "fixed batch"));
      }
      target[b] = 0;
      batch_axis_[n.outputs[0]] = b;
    }
    EmitFor(n, "Reshape", {In(n, 0), Int64s(StrCat(Out(n), "/shape"), target)});
    return absl::OkStatus();
  }

  absl::Status Transpose(const Node& n) {
    const std::vector<int64_t> perm = n.attrs.Ints("perm");
    SetInts(EmitFor(n, "Transpose", {In(n, 0)}), "perm", perm);
    const int b = batch_axis_[n.inputs[0]];
    if (b != kNoBatch) {
      batch_axis_[n.outputs[0]] =
          static_cast<int>(std::find(perm.begin(), perm.end(), b) - perm.begin());
    }
    return absl::OkStatus();
  }

  absl::Status Slice(const Node& n) {
    const int rank = static_cast<int>(ShapeOf(n.inputs[0]).size());
    std::vector<int64_t> axes = n.attrs.Ints("axes");
    for (int64_t& a : axes) {
      if (a < 0) a += rank;
      if (a == batch_axis_[n.inputs[0]]) {
        return Fail(n, "slices the batch axis; export with a fixed batch");
      }
    }
    std::vector<int64_t> steps = n.attrs.Ints("steps");
    if (steps.empty()) steps.assign(axes.size(), 1);
    // Headroom's end -1 of a negative step runs through element 0; ONNX's -1 is the last
    // element, and a bound below -dim clamps to "through element 0" (torch writes INT64_MIN).
    std::vector<int64_t> ends = n.attrs.Ints("ends");
    for (size_t i = 0; i < ends.size(); ++i) {
      if (steps[i] < 0 && ends[i] == -1) ends[i] = std::numeric_limits<int64_t>::min();
    }
    EmitFor(n, "Slice",
            {In(n, 0), Int64s(StrCat(Out(n), "/starts"), n.attrs.Ints("starts")),
             Int64s(StrCat(Out(n), "/ends"), ends),
             Int64s(StrCat(Out(n), "/axes"), axes), Int64s(StrCat(Out(n), "/steps"), steps)});
    return Same(n);
  }

  // Expand to the output's shape; where the input holds the batch, the target says 1 (ONNX
  // broadcasts both ways), so it follows any batch.
  absl::Status Expand(const Node& n) {
    Shape target = ShapeOf(n.outputs[0]);
    const int b = AlignedBatch(n, 0, target.size());
    if (b != kNoBatch) target[b] = 1;
    batch_axis_[n.outputs[0]] = b;
    EmitFor(n, "Expand", {In(n, 0), Int64s(StrCat(Out(n), "/shape"), target)});
    return absl::OkStatus();
  }

  absl::Status Concat(const Node& n) {
    std::vector<std::string> inputs;
    for (size_t i = 0; i < n.inputs.size(); ++i) inputs.push_back(In(n, static_cast<int>(i)));
    const int rank = static_cast<int>(ShapeOf(n.outputs[0]).size());
    int64_t axis = n.attrs.Int("axis");
    if (axis < 0) axis += rank;
    SetInt(EmitFor(n, "Concat", inputs), "axis", axis);
    for (TensorId in : n.inputs) {
      if (batch_axis_[in] == axis)
        return Fail(n, "joins along the batch axis; export with a fixed batch");
    }
    return PropagateBroadcast(n);
  }

  absl::Status Split(const Node& n) {
    const int rank = static_cast<int>(ShapeOf(n.inputs[0]).size());
    int64_t axis = n.attrs.Int("axis");
    if (axis < 0) axis += rank;
    if (axis == batch_axis_[n.inputs[0]]) {
      return Fail(n, "splits the batch axis; export with a fixed batch");
    }
    std::vector<std::string> outputs;
    for (TensorId out : n.outputs) {
      outputs.push_back(g_.tensor(out).name);
      onnx_name_[out] = g_.tensor(out).name;
    }
    onnx::NodeProto* node =
        Emit("Split", n.name, {In(n, 0), Int64s(StrCat(n.name, "/split"), n.attrs.Ints("sizes"))},
             outputs);
    SetInt(node, "axis", axis);
    return Same(n);
  }

  // softmax(scale * x) with the causal mask: Mul by the scale, Add of a constant mask (0 on
  // and below the diagonal, -inf above: exp gives exactly 0, as Headroom's mask), Softmax.
  absl::Status Softmax(const Node& n) {
    const Shape& x = ShapeOf(n.inputs[0]);
    const int rank = static_cast<int>(x.size());
    int64_t axis = n.attrs.Int("axis");
    if (axis < 0) axis += rank;
    if (axis == batch_axis_[n.inputs[0]]) {
      return Fail(n, "normalises over the batch axis; export with a fixed batch");
    }
    std::string v = In(n, 0);
    const double scale = n.attrs.Float("scale");
    if (scale != 1.0) {
      const std::string scaled = Temp(n, "scaled");
      Emit("Mul", StrCat(n.name, "/scale"), {v, Scalar(StrCat(Out(n), "/scale"), scale)}, {scaled});
      v = scaled;
    }
    if (n.attrs.Bool("causal")) {
      const int64_t t = x.back();
      const std::string mask = Fresh(StrCat(Out(n), "/causal_mask"));
      onnx::NodeProto* c = Emit("Constant", StrCat(n.name, "/causal_mask"), {}, {mask});
      onnx::AttributeProto* value = c->add_attribute();
      value->set_name("value");
      value->set_type(onnx::AttributeProto::TENSOR);
      onnx::TensorProto* m = value->mutable_t();
      m->set_data_type(onnx::TensorProto::FLOAT);
      m->add_dims(t);
      m->add_dims(t);
      for (int64_t i = 0; i < t; ++i) {
        for (int64_t j = 0; j < t; ++j) {
          m->add_float_data(j > i ? -std::numeric_limits<float>::infinity() : 0.0f);
        }
      }
      const std::string masked = Temp(n, "masked");
      Emit("Add", StrCat(n.name, "/mask"), {v, mask}, {masked});
      v = masked;
    }
    SetInt(EmitFor(n, "Softmax", {v}), "axis", axis);
    return Same(n);
  }

  // Resize as torch 1.13 exports F.interpolate at opset 17: nearest is 'asymmetric' with
  // 'floor', bilinear 'half_pixel' (PyTorch's coordinates at align_corners=False, including
  // an output of one pixel) or 'align_corners'. A scale factor given to the op is passed as
  // ONNX's scales, which then also set the coordinates, as PyTorch's do; otherwise the sizes,
  // the batch and channels taken from the input's shape so that any batch serves.
  absl::Status Resize(const Node& n) {
    const std::vector<int64_t> size = n.attrs.Ints("size");
    const double scale_h = n.attrs.Float("scale_h"), scale_w = n.attrs.Float("scale_w");
    if ((scale_h > 0) != (scale_w > 0)) {
      return Fail(n, "has a scale factor for one axis only; ONNX's Resize takes both or sizes");
    }
    std::vector<std::string> inputs = {In(n, 0), ""};
    if (scale_h > 0) {
      inputs.push_back(
          FloatConstant(StrCat(Out(n), "/scales"),
                        {1.0f, 1.0f, static_cast<float>(scale_h), static_cast<float>(scale_w)}));
    } else {
      const std::string shape = Temp(n, "input_shape"), leading = Temp(n, "batch_channels");
      Emit("Shape", StrCat(n.name, "/shape"), {In(n, 0)}, {shape});
      Emit("Slice", StrCat(n.name, "/leading"),
           {shape, Int64s(StrCat(Out(n), "/zero"), {0}), Int64s(StrCat(Out(n), "/two"), {2})},
           {leading});
      const std::string sizes = Temp(n, "sizes");
      SetInt(Emit("Concat", StrCat(n.name, "/sizes"),
                  {leading, Int64s(StrCat(Out(n), "/spatial"), size)}, {sizes}),
             "axis", 0);
      inputs.push_back("");
      inputs.push_back(sizes);
    }
    onnx::NodeProto* node = EmitFor(n, "Resize", inputs);
    if (n.attrs.String("mode") == "nearest") {
      SetString(node, "mode", "nearest");
      SetString(node, "coordinate_transformation_mode", "asymmetric");
      SetString(node, "nearest_mode", "floor");
    } else {
      SetString(node, "mode", "linear");
      SetString(node, "coordinate_transformation_mode",
                n.attrs.Bool("align_corners") ? "align_corners" : "half_pixel");
    }
    return Same(n);
  }

  // ReduceSum takes its axes as an input (opset 13 on), ReduceMax and ReduceMin as an
  // attribute (until opset 18); no axes reduce all of them, as Headroom's do.
  absl::Status Reduce(const Node& n) {
    const int rank = static_cast<int>(ShapeOf(n.inputs[0]).size());
    std::vector<int64_t> axes = n.attrs.Ints("axes");
    if (axes.empty()) {
      axes.resize(rank);
      std::iota(axes.begin(), axes.end(), 0);
    }
    for (int64_t& a : axes) {
      if (a < 0) a += rank;
    }
    const bool keepdims = n.attrs.Bool("keepdims");
    const int b = batch_axis_[n.inputs[0]];
    int out_batch = b;
    for (int64_t a : axes) {
      if (b == kNoBatch) break;
      if (a == b) return Fail(n, "reduces over the batch axis; export with a fixed batch");
      if (a < b && !keepdims) --out_batch;
    }
    const std::string op = n.op->name;
    onnx::NodeProto* node = op == "ReduceSum"
                                ? EmitFor(n, op, {In(n, 0), Int64s(StrCat(Out(n), "/axes"), axes)})
                                : EmitFor(n, op, {In(n, 0)});
    if (op != "ReduceSum") SetInts(node, "axes", axes);
    SetInt(node, "keepdims", keepdims ? 1 : 0);
    batch_axis_[n.outputs[0]] = out_batch;
    return absl::OkStatus();
  }

  // Embedding(ids, table) is Gather(table, ids) along the rows.
  absl::Status Embedding(const Node& n) {
    SetInt(EmitFor(n, "Gather", {In(n, 1), In(n, 0)}), "axis", 0);
    batch_axis_[n.outputs[0]] = batch_axis_[n.inputs[0]];
    return absl::OkStatus();
  }

  const Graph& g_;
  const std::vector<proto::TensorValue>& values_;
  const OnnxExportOptions& options_;
  OnnxExport out_;
  onnx::GraphProto* graph_ = nullptr;
  TensorId logits_ = -1;
  // Nodes the logits depend on; leaves they read, by id.
  std::vector<bool> needed_;
  std::vector<TensorId> leaves_;
  absl::flat_hash_map<TensorId, const proto::TensorValue*> value_of_;
  // Where each tensor holds the (symbolic) batch, or kNoBatch.
  std::vector<int> batch_axis_;
  // The ONNX value of each tensor (its own name, or its input's for a removed Dropout).
  std::vector<std::string> onnx_name_;
  absl::flat_hash_set<std::string> used_names_;
};

const absl::flat_hash_map<std::string, Converter>& Exporter::Converters() {
  static const auto* converters = new absl::flat_hash_map<std::string, Converter>{
      {"Add", &Exporter::Binary},
      {"AvgPool", &Exporter::AvgPool},
      {"BatchNorm", &Exporter::BatchNorm},
      {"Cast", &Exporter::Cast},
      {"Concat", &Exporter::Concat},
      {"Conv2D", &Exporter::Conv},
      {"ConvTranspose2D", &Exporter::ConvTranspose},
      {"Div", &Exporter::Binary},
      {"Dropout", &Exporter::Dropout},
      {"ELU", &Exporter::Elu},
      {"Embedding", &Exporter::Embedding},
      {"Erf", &Exporter::Erf},
      {"Expand", &Exporter::Expand},
      {"Flatten", &Exporter::Flatten},
      {"GELU", &Exporter::Gelu},
      {"GlobalAvgPool", &Exporter::GlobalAvgPool},
      {"GroupNorm", &Exporter::GroupNorm},
      {"HardSigmoid", &Exporter::HardSigmoid},
      {"HardSwish", &Exporter::HardSwish},
      {"LayerNorm", &Exporter::LayerNorm},
      {"LeakyReLU", &Exporter::LeakyRelu},
      {"MatMul", &Exporter::MatMul},
      {"MaxPool", &Exporter::MaxPool},
      {"Mish", &Exporter::Mish},
      {"Mul", &Exporter::Binary},
      {"PReLU", &Exporter::PRelu},
      {"Pow", &Exporter::Pow},
      {"ReLU", &Exporter::Relu},
      {"ReLU6", &Exporter::Relu6},
      {"ReduceMax", &Exporter::Reduce},
      {"ReduceMin", &Exporter::Reduce},
      {"ReduceSum", &Exporter::Reduce},
      {"Reshape", &Exporter::Reshape},
      {"Resize", &Exporter::Resize},
      {"SELU", &Exporter::Selu},
      {"Sigmoid", &Exporter::Sigmoid},
      {"Slice", &Exporter::Slice},
      {"Softmax", &Exporter::Softmax},
      {"Softplus", &Exporter::Softplus},
      {"Split", &Exporter::Split},
      {"Sqrt", &Exporter::Sqrt},
      {"Sub", &Exporter::Binary},
      {"Tanh", &Exporter::Tanh},
      {"Transpose", &Exporter::Transpose},
  };
  return *converters;
}

}  // namespace

std::string OnnxExportStats::DebugString() const {
  return StrCat(headroom_nodes, " Headroom nodes -> ", onnx_nodes, " ONNX nodes (", dropped,
                " dropout(s) removed); ", initializers, " initializers (", parameter_elements,
                " weight and buffer elements); inputs ", absl::StrJoin(inputs, ", "), "; output ",
                output);
}

absl::StatusOr<OnnxExport> ExportOnnx(const Graph& forward,
                                      const std::vector<proto::TensorValue>& values,
                                      const OnnxExportOptions& options) {
  return Exporter(forward, values, options).Run();
}

absl::Status CheckOnnxModel(const onnx::ModelProto& model) {
  try {
    onnx::checker::check_model(model);
    // Strict shape inference, as onnx.checker.check_model(model, full_check=True): every
    // node's shapes must infer and agree with the declared output.
    onnx::ModelProto inferred = model;
    onnx::shape_inference::InferShapes(inferred, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(/*check_type_val=*/true,
                                                                   /*strict_mode_val=*/1,
                                                                   /*data_prop_val=*/true));
  } catch (const std::exception& e) {
    return InvalidArgumentError(StrCat("ONNX checker: ", e.what()));
  }
  return absl::OkStatus();
}

std::vector<std::string> OnnxExportableOps() {
  std::vector<std::string> ops;
  for (const auto& [op, converter] : Exporter::Converters()) ops.push_back(op);
  std::sort(ops.begin(), ops.end());
  return ops;
}

}  // namespace headroom::graph
