// The in-memory forward graph, built from a GraphDef: validated, with every tensor's shape
// and dtype inferred, and a deterministic topological order.
#ifndef HEADROOM_GRAPH_GRAPH_H_
#define HEADROOM_GRAPH_GRAPH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "graph/op_registry.h"
#include "graph/shape.h"
#include "proto/headroom.pb.h"

namespace headroom::graph {

using TensorId = int32_t;
using NodeId = int32_t;
inline constexpr NodeId kNoNode = -1;

struct Tensor {
  std::string name;
  Shape shape;
  proto::DType dtype = proto::DTYPE_UNSPECIFIED;
  // INPUT, LABEL, PARAMETER or BUFFER for leaves; ACTIVATION for node outputs.
  proto::TensorRole role = proto::ROLE_UNSPECIFIED;
  // The node that writes it, or kNoNode for a leaf.
  NodeId producer = kNoNode;
  // Nodes that read it, in topological order (a node reading it twice appears once).
  std::vector<NodeId> consumers;

  // Returns the number of elements.
  uint64_t num_elements() const { return NumElements(shape); }
  // Returns the size in bytes.
  uint64_t bytes() const { return num_elements() * DTypeSize(dtype); }
};

struct Node {
  std::string name;
  const OpSchema* op = nullptr;
  std::vector<TensorId> inputs;
  std::vector<TensorId> outputs;
  // Every attribute the op declares, defaults filled in.
  Attrs attrs;
};

// A validated reversible block (proto::ReversibleBlock): y1 = x1 + F(x2), y2 = x2 + G(y1).
struct ReversibleBlock {
  std::string name;
  TensorId x1 = -1, x2 = -1, y1 = -1, y2 = -1;
  // The outputs of F and G that the coupling adds.
  TensorId f_output = -1, g_output = -1;
  NodeId y1_node = kNoNode, y2_node = kNoNode;
  // F's and G's nodes, in topological order.
  std::vector<NodeId> f_nodes, g_nodes;
};

// The most nodes, and the most tensors (listed ones plus node outputs), a graph description
// may have: a bound on what one request can make the planner hold (the largest zoo model,
// a 1000-layer transformer, has about 30k nodes).
inline constexpr int kMaxGraphNodes = 100000;
inline constexpr int kMaxGraphTensors = 400000;

// A validated forward graph. Build one with FromProto(); it is immutable afterwards and safe
// to read from several threads. Tensor and node ids index tensors() and nodes(); nodes() is
// in topological order (ties broken by the description's order), so a node's inputs are
// always produced by earlier nodes.
class Graph {
 public:
  // Returns the graph of `def`, or InvalidArgument naming the node and tensor at fault when
  // `def` has a cycle, a tensor used but never produced, a name defined twice, a shape or
  // dtype that does not fit its op, a zero, negative or overflowing dimension, an unknown op
  // or attribute, no scalar floating-point loss, a malformed reversible block (naming the
  // block and the node or tensor), or more than kMaxGraphNodes nodes or kMaxGraphTensors
  // tensors (checked first, before anything is built).
  static absl::StatusOr<Graph> FromProto(const proto::GraphDef& def);

  // Returns the description of this graph with every tensor listed, its inferred shape and
  // dtype, and nodes in topological order.
  proto::GraphDef ToProto() const;

  const std::string& name() const { return name_; }
  const std::vector<Tensor>& tensors() const { return tensors_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const Tensor& tensor(TensorId id) const { return tensors_[id]; }
  const Node& node(NodeId id) const { return nodes_[id]; }
  // Returns the scalar loss tensor.
  TensorId loss() const { return loss_; }
  // Returns the reversible blocks, in the order of their y1 nodes.
  const std::vector<ReversibleBlock>& reversible_blocks() const { return reversible_blocks_; }

  // Returns the id of the tensor named `name`, or -1.
  TensorId FindTensor(const std::string& name) const;
  // Returns the id of the node named `name`, or -1.
  NodeId FindNode(const std::string& name) const;

 private:
  Graph() = default;
  friend class GraphLoader;

  std::string name_;
  std::vector<Tensor> tensors_;
  std::vector<Node> nodes_;
  TensorId loss_ = -1;
  std::vector<ReversibleBlock> reversible_blocks_;
  absl::flat_hash_map<std::string, TensorId> tensor_index_;
  absl::flat_hash_map<std::string, NodeId> node_index_;
};

// The shape and dtype inferred for one output of a node.
struct InferredOutput {
  Shape shape;
  proto::DType dtype = proto::DTYPE_UNSPECIFIED;
};

// Returns the shapes and dtypes of `node`'s outputs for inputs of these shapes and dtypes,
// checking its op, its input and output counts and its attributes as FromProto() does (the
// same messages). For building a graph node by node, as the ONNX importer does.
absl::StatusOr<std::vector<InferredOutput>> InferNodeOutputs(
    const proto::NodeDef& node, const std::vector<Shape>& input_shapes,
    const std::vector<proto::DType>& input_dtypes);

}  // namespace headroom::graph

#endif  // HEADROOM_GRAPH_GRAPH_H_
