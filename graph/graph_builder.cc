#include "graph/graph_builder.h"

namespace headroom::graph {

proto::AttrValue IntAttr(int64_t v) {
  proto::AttrValue a;
  a.set_i(v);
  return a;
}

proto::AttrValue FloatAttr(double v) {
  proto::AttrValue a;
  a.set_f(v);
  return a;
}

proto::AttrValue BoolAttr(bool v) {
  proto::AttrValue a;
  a.set_b(v);
  return a;
}

proto::AttrValue StringAttr(std::string v) {
  proto::AttrValue a;
  a.set_s(std::move(v));
  return a;
}

proto::AttrValue IntsAttr(std::vector<int64_t> v) {
  proto::AttrValue a;
  for (int64_t x : v) a.mutable_ints()->add_values(x);
  return a;
}

GraphBuilder::GraphBuilder(std::string graph_name) { def_.set_name(std::move(graph_name)); }

std::string GraphBuilder::Leaf(const std::string& name, Shape shape, proto::DType dtype,
                               proto::TensorRole role) {
  proto::TensorDef* t = def_.add_tensors();
  t->set_name(name);
  for (int64_t d : shape) t->add_shape(d);
  t->set_dtype(dtype);
  t->set_role(role);
  return name;
}

std::string GraphBuilder::Input(const std::string& name, Shape shape, proto::DType dtype) {
  return Leaf(name, std::move(shape), dtype, proto::ROLE_INPUT);
}

std::string GraphBuilder::Label(const std::string& name, Shape shape, proto::DType dtype) {
  return Leaf(name, std::move(shape), dtype, proto::ROLE_LABEL);
}

std::string GraphBuilder::Parameter(const std::string& name, Shape shape, proto::DType dtype) {
  return Leaf(name, std::move(shape), dtype, proto::ROLE_PARAMETER);
}

std::string GraphBuilder::Buffer(const std::string& name, Shape shape, proto::DType dtype) {
  return Leaf(name, std::move(shape), dtype, proto::ROLE_BUFFER);
}

std::vector<std::string> GraphBuilder::AddNode(const std::string& op, const std::string& name,
                                               const std::vector<std::string>& inputs,
                                               const std::vector<std::string>& outputs,
                                               const AttrList& attrs) {
  proto::NodeDef* n = def_.add_nodes();
  n->set_name(name);
  n->set_op(op);
  for (const std::string& in : inputs) n->add_inputs(in);
  for (const std::string& out : outputs) n->add_outputs(out);
  for (const auto& [key, value] : attrs) (*n->mutable_attrs())[key] = value;
  return outputs;
}

std::string GraphBuilder::Op(const std::string& op, const std::string& name,
                             const std::vector<std::string>& inputs, const AttrList& attrs) {
  return AddNode(op, name, inputs, {name}, attrs)[0];
}

std::string GraphBuilder::Conv2D(const std::string& name, const std::string& x,
                                 int64_t in_channels, int64_t out_channels, int64_t kernel,
                                 int64_t stride, int64_t padding, int64_t groups, bool bias) {
  std::vector<std::string> inputs = {
      x, Parameter(name + ".weight", {out_channels, in_channels / groups, kernel, kernel})};
  if (bias) inputs.push_back(Parameter(name + ".bias", {out_channels}));
  return Op("Conv2D", name, inputs,
            {{"stride", IntsAttr({stride, stride})},
             {"padding", IntsAttr({padding, padding})},
             {"groups", IntAttr(groups)}});
}

std::string GraphBuilder::BatchNorm(const std::string& name, const std::string& x,
                                    int64_t channels, double epsilon, double momentum) {
  return Op("BatchNorm", name,
            {x, Parameter(name + ".weight", {channels}), Parameter(name + ".bias", {channels}),
             Buffer(name + ".running_mean", {channels}),
             Buffer(name + ".running_var", {channels})},
            {{"epsilon", FloatAttr(epsilon)}, {"momentum", FloatAttr(momentum)}});
}

std::string GraphBuilder::LayerNorm(const std::string& name, const std::string& x, int64_t dim,
                                    double epsilon) {
  return Op("LayerNorm", name,
            {x, Parameter(name + ".weight", {dim}), Parameter(name + ".bias", {dim})},
            {{"epsilon", FloatAttr(epsilon)}});
}

std::string GraphBuilder::Linear(const std::string& name, const std::string& x,
                                 int64_t in_features, int64_t out_features, bool bias) {
  std::vector<std::string> inputs = {x,
                                     Parameter(name + ".weight", {out_features, in_features})};
  if (bias) inputs.push_back(Parameter(name + ".bias", {out_features}));
  return Op("MatMul", name, inputs, {{"transpose_b", BoolAttr(true)}});
}

std::string GraphBuilder::Unary(const std::string& op, const std::string& name,
                                const std::string& x) {
  return Op(op, name, {x});
}

std::string GraphBuilder::Add(const std::string& name, const std::string& a,
                              const std::string& b) {
  return Op("Add", name, {a, b});
}

void GraphBuilder::ReversibleBlock(const std::string& name, const std::string& y1_node,
                                   const std::string& y2_node,
                                   const std::vector<std::string>& f_nodes,
                                   const std::vector<std::string>& g_nodes) {
  proto::ReversibleBlock* b = def_.add_reversible_blocks();
  b->set_name(name);
  b->set_y1_node(y1_node);
  b->set_y2_node(y2_node);
  for (const std::string& n : f_nodes) b->add_f_nodes(n);
  for (const std::string& n : g_nodes) b->add_g_nodes(n);
}

void GraphBuilder::SetLoss(const std::string& tensor) { def_.set_loss(tensor); }

proto::GraphDef GraphBuilder::Build() {
  proto::GraphDef out = std::move(def_);
  def_ = proto::GraphDef();
  return out;
}

}  // namespace headroom::graph
