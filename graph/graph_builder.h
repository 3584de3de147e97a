// Builds a GraphDef in code: leaf tensors, nodes, and common layers in torchvision's
// parameter naming. Used by the model zoo and by tests.
#ifndef HEADROOM_GRAPH_GRAPH_BUILDER_H_
#define HEADROOM_GRAPH_GRAPH_BUILDER_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "graph/shape.h"
#include "proto/headroom.pb.h"

namespace headroom::graph {

// Attribute values, for GraphBuilder::AddNode.
proto::AttrValue IntAttr(int64_t v);
proto::AttrValue FloatAttr(double v);
proto::AttrValue BoolAttr(bool v);
proto::AttrValue StringAttr(std::string v);
proto::AttrValue IntsAttr(std::vector<int64_t> v);

using AttrList = std::vector<std::pair<std::string, proto::AttrValue>>;

// Accumulates tensors and nodes, then Build() returns the GraphDef. It checks nothing:
// Graph::FromProto validates the result. Layer helpers declare their parameters as
// "<name>.weight", "<name>.bias" (and batch norm's buffers as "<name>.running_mean",
// "<name>.running_var"), name the node `name`, and return its output tensor, also `name`.
// Not thread-safe.
class GraphBuilder {
 public:
  explicit GraphBuilder(std::string graph_name);

  // Declares a leaf tensor and returns its name.
  std::string Input(const std::string& name, Shape shape,
                    proto::DType dtype = proto::DTYPE_FLOAT32);
  std::string Label(const std::string& name, Shape shape,
                    proto::DType dtype = proto::DTYPE_INT64);
  std::string Parameter(const std::string& name, Shape shape,
                        proto::DType dtype = proto::DTYPE_FLOAT32);
  std::string Buffer(const std::string& name, Shape shape,
                     proto::DType dtype = proto::DTYPE_FLOAT32);

  // Adds a node with the given outputs; returns `outputs`.
  std::vector<std::string> AddNode(const std::string& op, const std::string& name,
                                   const std::vector<std::string>& inputs,
                                   const std::vector<std::string>& outputs,
                                   const AttrList& attrs = {});
  // Adds a node with one output named `name`; returns it.
  std::string Op(const std::string& op, const std::string& name,
                 const std::vector<std::string>& inputs, const AttrList& attrs = {});

  // Conv2D over NCHW with a square kernel; weight [out, in/groups, k, k].
  std::string Conv2D(const std::string& name, const std::string& x, int64_t in_channels,
                     int64_t out_channels, int64_t kernel, int64_t stride, int64_t padding,
                     int64_t groups = 1, bool bias = false);
  // BatchNorm over channels (dim 1): weight, bias, running_mean, running_var, all [channels].
  std::string BatchNorm(const std::string& name, const std::string& x, int64_t channels,
                        double epsilon = 1e-5, double momentum = 0.1);
  // LayerNorm over the last dimension: weight and bias [dim].
  std::string LayerNorm(const std::string& name, const std::string& x, int64_t dim,
                        double epsilon = 1e-5);
  // y = x W^T + b in PyTorch's layout: weight [out, in], bias [out].
  std::string Linear(const std::string& name, const std::string& x, int64_t in_features,
                     int64_t out_features, bool bias = true);
  // An op with one input and no attributes (ReLU, ReLU6, Sigmoid, Tanh, ...).
  std::string Unary(const std::string& op, const std::string& name, const std::string& x);
  std::string Add(const std::string& name, const std::string& a, const std::string& b);

  // Declares a reversible block over nodes already added (proto::ReversibleBlock):
  // y1 = x1 + F(x2) written by Add node `y1_node`, y2 = x2 + G(y1) by Add node `y2_node`.
  void ReversibleBlock(const std::string& name, const std::string& y1_node,
                       const std::string& y2_node, const std::vector<std::string>& f_nodes,
                       const std::vector<std::string>& g_nodes);

  // Sets the scalar loss tensor.
  void SetLoss(const std::string& tensor);

  // Returns the description built so far.
  const proto::GraphDef& graph() const { return def_; }
  // Returns the description and leaves the builder empty.
  proto::GraphDef Build();

 private:
  std::string Leaf(const std::string& name, Shape shape, proto::DType dtype,
                   proto::TensorRole role);
  proto::GraphDef def_;
};

}  // namespace headroom::graph

#endif  // HEADROOM_GRAPH_GRAPH_BUILDER_H_
