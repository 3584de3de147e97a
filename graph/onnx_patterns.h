// Subgraphs of an ONNX graph that the importer turns into one Headroom op: the
// decompositions exporters write for ops ONNX lacked at their opset.
//
//   GELU (erf)   y = x * 0.5 * (1 + erf(x / sqrt(2)))                 torch's nn.GELU()
//   GELU (tanh)  y = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))   GPT-2's gelu
//   LayerNorm    mean over the last axis, Sub, Pow 2 (or Mul), mean, Add eps, Sqrt, Div,
//                optionally Mul weight and Add bias                   opset <= 16 exports
//
// A match requires every inner value to have no consumer outside the pattern, so fusing
// never drops a value something else reads.
#ifndef HEADROOM_GRAPH_ONNX_PATTERNS_H_
#define HEADROOM_GRAPH_ONNX_PATTERNS_H_

#include <string>
#include <vector>

#include "onnx/onnx_pb.h"

namespace headroom::graph {

struct OnnxFusion {
  // "GELU" or "LayerNorm".
  std::string op;
  // Indices into graph.node() of every node the pattern covers, in graph order; the first
  // is where the fused op is emitted (every input of the pattern is ready there).
  std::vector<int> nodes;
  // The pattern's input x and its final output.
  std::string input;
  std::string output;
  // GELU: "none" (erf) or "tanh".
  std::string approximate;
  // LayerNorm: epsilon, and the weight and bias names ("" when the pattern has none).
  double epsilon = 1e-5;
  std::string weight;
  std::string bias;
};

// Returns every fusion found in `graph` (no node is in two).
std::vector<OnnxFusion> FindOnnxFusions(const onnx::GraphProto& graph);

}  // namespace headroom::graph

#endif  // HEADROOM_GRAPH_ONNX_PATTERNS_H_
