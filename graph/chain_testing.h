// For tests: a graph description as long as a test needs, whose planning time grows with
// the square of its length (issue 18: 10,000 nodes planned in 46 s).
#ifndef HEADROOM_GRAPH_CHAIN_TESTING_H_
#define HEADROOM_GRAPH_CHAIN_TESTING_H_

#include <string>

#include "proto/headroom.pb.h"

namespace headroom::graph {

// Returns x [8, 16] -> MatMul -> `length` ReLUs -> SoftmaxCrossEntropy, named "relu_chain":
// length + 2 nodes.
inline proto::GraphDef ReluChain(int length) {
  proto::GraphDef def;
  def.set_name("relu_chain");
  auto leaf = [&def](const char* name, std::initializer_list<int64_t> shape, proto::DType dtype,
                     proto::TensorRole role) {
    proto::TensorDef* t = def.add_tensors();
    t->set_name(name);
    for (int64_t d : shape) t->add_shape(d);
    t->set_dtype(dtype);
    t->set_role(role);
  };
  leaf("x", {8, 16}, proto::DTYPE_FLOAT32, proto::ROLE_INPUT);
  leaf("labels", {8}, proto::DTYPE_INT64, proto::ROLE_LABEL);
  leaf("w", {16, 16}, proto::DTYPE_FLOAT32, proto::ROLE_PARAMETER);
  auto node = [&def](const std::string& name, const std::string& op,
                     std::initializer_list<std::string> inputs, const std::string& output) {
    proto::NodeDef* n = def.add_nodes();
    n->set_name(name);
    n->set_op(op);
    for (const std::string& i : inputs) n->add_inputs(i);
    n->add_outputs(output);
  };
  node("fc", "MatMul", {"x", "w"}, "t0");
  for (int i = 1; i <= length; ++i) {
    node("relu" + std::to_string(i), "ReLU", {"t" + std::to_string(i - 1)},
         "t" + std::to_string(i));
  }
  node("loss", "SoftmaxCrossEntropy", {"t" + std::to_string(length), "labels"}, "loss");
  def.set_loss("loss");
  return def;
}

}  // namespace headroom::graph

#endif  // HEADROOM_GRAPH_CHAIN_TESTING_H_
