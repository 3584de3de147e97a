// Imports an ONNX model as a Headroom forward graph.
//
// The model's data inputs become INPUT tensors (its symbolic batch dimension replaced by
// OnnxImportOptions::batch), its float initializers PARAMETERs (batch norm's running
// statistics and constants become BUFFERs), and its first output the logits of the loss
// attached (softmax cross entropy against integer labels). Along the way the importer
//   - evaluates what is known at import: the shape arithmetic exporters write (Shape,
//     Gather, Concat, ...), masks, casts and scalar math (graph/onnx_fold.h);
//   - fuses the decompositions of GELU and LayerNorm (graph/onnx_patterns.h), a MatMul's
//     transposed weight and its bias, and a zero Pad into the pool after it;
//   - drops what changes nothing: Identity, Dropout with ratio 0, zero Pads, full Slices.
// Every ONNX op the importer does not know is reported in one error with its count; a
// known op used in a way Headroom cannot express (Sub of two tensors, a dilated pool) is an
// error naming the node.
//
// Handles opsets 7 to 18 of the default domain; the ops torchvision's classification models
// and GPT-2-style transformers export to (see OnnxImportableOps()).
#ifndef HEADROOM_GRAPH_ONNX_IMPORT_H_
#define HEADROOM_GRAPH_ONNX_IMPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/headroom.pb.h"

namespace headroom::graph {

// The label of pixels a segmentation loss leaves out (its ignore_index): 255, the void label
// of Pascal VOC and Cityscapes and torchvision's segmentation references.
inline constexpr int64_t kIgnoredPixelLabel = 255;

struct OnnxImportOptions {
  // Samples per step, put in place of the inputs' symbolic first dimension. 0 keeps the
  // model's own batch, which must then be a number. Default 0.
  uint64_t batch = 0;
  // The loss attached to the model's first output: "softmax_cross_entropy" (logits
  // [N, ..., C] against int64 labels [N, ...]; a segmentation model's [N, C, H, W] logits
  // per pixel over axis 1 against labels [N, H, W], pixels labelled kIgnoredPixelLabel left
  // out: PixelSoftmaxCrossEntropy) or "pixel_cross_entropy" (that per-pixel form for logits
  // [N, C, ...] of any rank from 3). Default "softmax_cross_entropy".
  std::string loss = "softmax_cross_entropy";
  // Classes of the loss; 0 takes the output's last dimension, which must otherwise equal
  // it. Default 0.
  uint64_t classes = 0;
  // Keep the initializers' values in ImportedModel::values (planning needs none).
  // Default true.
  bool keep_values = true;
  // The graph's name; empty takes the ONNX graph's name (or "onnx"). Default empty.
  std::string name;
  // Refuse an export of the inference graph (graph/onnx_export_mode.h) instead of warning.
  // Default false.
  bool strict_training = false;
};

// What an import did, for people.
struct OnnxImportStats {
  int64_t opset = 0;
  int onnx_nodes = 0;
  // Evaluated at import (shape arithmetic, masks, constants).
  int folded = 0;
  // Absorbed into another node (GELU, LayerNorm, transposed weights, biases, pads).
  int fused = 0;
  // Dropped because they change nothing (Identity, Dropout 0, zero Pad, full Slice).
  int elided = 0;
  int headroom_nodes = 0;
  int parameters = 0;
  uint64_t parameter_elements = 0;
  int buffers = 0;

  // Returns "opset 17: 187 ONNX nodes -> 69 Headroom nodes (12 folded, 3 fused, 40 elided);
  // 62 parameters (11689512 elements), 40 buffers".
  std::string DebugString() const;
};

struct ImportedModel {
  proto::GraphDef graph;
  // The initial value of every parameter and buffer, by tensor name (when keep_values).
  std::vector<proto::TensorValue> values;
  OnnxImportStats stats;
  // The model was exported for inference (batch norms in inference mode or folded into the
  // convolutions): the graph is not the one training runs.
  bool inference_export = false;
  // What people should know about the import (why inference_export is set, and what to do).
  std::vector<std::string> warnings;
};

// Returns the graph of a serialized onnx.ModelProto. Initializers stored in external files
// are read from `external_dir` (the model's folder; empty: none may be external).
// A model whose inputs have a fixed first dimension other than options.batch is re-batched:
// the shape constants the exporter wrote for its batch (Reshape targets, Expand shapes,
// Slices of the batch axis, known operands) are rewritten where the batch is attributed
// (graph/onnx_rebatch.h). InvalidArgument for a model that does not parse, an unsupported
// opset, every unknown op (listed with counts in one message), a node Headroom cannot
// express or a constant it cannot re-batch (named); FailedPrecondition for an inference
// export with options.strict_training.
absl::StatusOr<ImportedModel> ImportOnnx(const std::string& model_bytes,
                                         const OnnxImportOptions& options,
                                         const std::string& external_dir = "");

// Returns the graph of the ONNX file at `path` (external data beside it), as ImportOnnx.
absl::StatusOr<ImportedModel> ImportOnnxFile(const std::string& path,
                                             const OnnxImportOptions& options);

// Returns the ONNX op types the importer handles, sorted.
std::vector<std::string> OnnxImportableOps();

}  // namespace headroom::graph

#endif  // HEADROOM_GRAPH_ONNX_IMPORT_H_
