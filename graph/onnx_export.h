// Exports a Headroom forward graph with its weights as an ONNX model in inference form: the
// inverse of graph/onnx_import for the op set, for serving a trained model.
//
// What the export holds:
//   - the nodes that compute the logits (the loss's first input), and nothing after them:
//     the loss and its labels are left out, so the model's one output is the logits;
//   - every parameter and buffer those nodes read as a float32 (or integer) initializer
//     under its Headroom name, its value taken from `values` (a checkpoint's);
//   - batch norms as BatchNormalization with training_mode 0, which normalises with the
//     running statistics (ONNX's momentum is 1 - Headroom's); dropouts are removed (the
//     identity at inference);
//   - the inputs' and logits' first dimension symbolic ("batch") where the graph's batch
//     flows to the logits, so the model serves any batch; OnnxExportOptions::dynamic_batch
//     false keeps the graph's own.
// Ops without one ONNX node of their own are written as the decomposition torch 1.13 writes
// at opset 17, which the importer fuses back: GELU as its Erf (or GPT-2's Tanh) form, ReLU6
// as Clip, a Linear as Gemm (a MatMul of a transposed weight as Transpose and MatMul, its
// bias an Add), a scaled or causal Softmax as Mul and Add of a mask before Softmax, Mish as
// x * Tanh(Softplus(x)), Embedding as Gather.
//
// ExportOnnx() checks the model with ONNX's own checker (onnx::checker::check_model, what
// Python's onnx.checker.check_model runs) and its strict shape inference before returning it.
// Stateless and thread-safe.
#ifndef HEADROOM_GRAPH_ONNX_EXPORT_H_
#define HEADROOM_GRAPH_ONNX_EXPORT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "onnx/onnx_pb.h"
#include "proto/headroom.pb.h"

namespace headroom::graph {

struct OnnxExportOptions {
  // Make the batch (the logits' first dimension, and every input's that it comes from)
  // symbolic. A node that mixes the batch axis with others (a Reshape that folds it, a
  // Slice or Split of it, an Expand to it) is then an error naming the node. Default true.
  bool dynamic_batch = true;
  // The name of the symbolic batch dimension. Default "batch".
  std::string batch_name = "batch";
  // The ONNX graph's name; empty takes the forward graph's. Default empty.
  std::string name;
  // Key/value pairs for the model's metadata_props (the job, the checkpoint's step).
  // Default none.
  std::vector<std::pair<std::string, std::string>> metadata;
  // Run ONNX's checker and strict shape inference on the result. Default true.
  bool check = true;
};

// What an export wrote, for people.
struct OnnxExportStats {
  int headroom_nodes = 0;  // Nodes on the way to the logits.
  int onnx_nodes = 0;
  int dropped = 0;  // Dropouts left out.
  int initializers = 0;
  uint64_t parameter_elements = 0;  // Elements of the weights and buffers.
  std::string output;               // The logits' name.
  std::vector<std::string> inputs;  // The data inputs' names.

  // Returns "12 Headroom nodes -> 13 ONNX nodes (1 dropout removed); 10 initializers
  // (26474 elements); inputs images; output fc2".
  std::string DebugString() const;
};

struct OnnxExport {
  onnx::ModelProto model;
  OnnxExportStats stats;
};

// The opset the export writes (torch 1.13's default for new exports is 14; 17 has
// LayerNormalization).
inline constexpr int64_t kOnnxExportOpset = 17;

// Returns `forward` with `values` as an ONNX model. `values` must hold every parameter and
// buffer the logits depend on, by name, with the graph's shape and dtype; others (optimizer
// state, tensors of other graphs) are ignored. InvalidArgument naming the tensor for a
// missing value or one whose shape, dtype or byte count differs from the graph's (a
// checkpoint of another model); naming the node and op for a node with no ONNX form or one
// the batch cannot be made symbolic through; Internal with the checker's message when ONNX's
// checker refuses the result (a bug).
absl::StatusOr<OnnxExport> ExportOnnx(const Graph& forward,
                                      const std::vector<proto::TensorValue>& values,
                                      const OnnxExportOptions& options = {});

// Returns OK if ONNX's checker and strict shape inference accept `model`; InvalidArgument
// with their message otherwise.
absl::Status CheckOnnxModel(const onnx::ModelProto& model);

// Returns the Headroom ops ExportOnnx() writes, sorted (every op but the loss).
std::vector<std::string> OnnxExportableOps();

}  // namespace headroom::graph

#endif  // HEADROOM_GRAPH_ONNX_EXPORT_H_
