// Tells an ONNX model exported for inference from one exported for training.
//
// torch.onnx.export's default is the inference graph: batch norm in inference mode
// (training_mode 0 from opset 14; a single output before) or, with constant folding, folded
// into the convolution before it, and dropout gone. Headroom trains what it imports, so a
// plan of such an export is a plan of a different model (resnet50 at batch 8: 513 MiB for
// the folded export, 849 MiB for the training graph). InspectOnnxExportMode() finds the
// signs and Warnings() says what to do. Pure function; thread-safe.
//
// The folded-batch-norm sign is a heuristic on how torch names initializers: a module's
// parameters keep their module path ("layer1.0.conv1.weight"); tensors the exporter computes
// are named "onnx::<Op>_<n>". A convolution whose weight and bias are both computed ones is
// a convolution with a batch norm folded in (torchvision's convolutions before a batch norm
// have no bias). Exports whose names were all replaced otherwise, and dropout (which an
// inference export leaves no trace of), are not found.
#ifndef HEADROOM_GRAPH_ONNX_EXPORT_MODE_H_
#define HEADROOM_GRAPH_ONNX_EXPORT_MODE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"

namespace headroom::graph {

struct OnnxExportMode {
  int batch_norms = 0;
  // Batch norms in inference mode: training_mode 0 (opset >= 14) or one output (before).
  int inference_batch_norms = 0;
  int convolutions = 0;
  // Convolutions whose weight and bias are exporter-computed initializers ("onnx::Conv_12").
  int folded_convolutions = 0;

  // Returns true when the export is of the inference graph.
  bool inference() const { return inference_batch_norms > 0 || folded_convolutions > 0; }
  // Returns one warning per sign found, each saying what the plan is of and how to export
  // for training; empty for a training export.
  std::vector<std::string> Warnings(const std::string& model_name) const;
};

// Returns the signs of an inference export in `graph`, of the default domain at `opset`.
OnnxExportMode InspectOnnxExportMode(const onnx::GraphProto& graph, int64_t opset);

}  // namespace headroom::graph

#endif  // HEADROOM_GRAPH_ONNX_EXPORT_MODE_H_
