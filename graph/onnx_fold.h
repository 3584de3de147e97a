// Evaluation of ONNX nodes whose inputs the importer knows at import time: the shape
// arithmetic torch.onnx exports (Shape -> Gather -> Unsqueeze -> Concat -> Reshape), the
// masks swin builds (ConstantOfShape, Range, ScatterND, Equal, Where), casts and scalar math.
// Nothing here is a Headroom op; the folded values become attributes or constant buffers.
#ifndef HEADROOM_GRAPH_ONNX_FOLD_H_
#define HEADROOM_GRAPH_ONNX_FOLD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/onnx_tensor.h"
#include "onnx/onnx_pb.h"

namespace headroom::graph {

// Returns true if FoldOnnxNode() can evaluate `op_type` on constant inputs.
bool IsFoldableOnnxOp(const std::string& op_type);

// Returns the outputs of `node` (of the default domain at `opset`) evaluated on `inputs`
// (nullptr for an omitted optional input). InvalidArgument naming the node when an input
// does not fit or the node uses a mode the folder lacks.
absl::StatusOr<std::vector<OnnxTensor>> FoldOnnxNode(const onnx::NodeProto& node,
                                                     const std::vector<const OnnxTensor*>& inputs,
                                                     int64_t opset);

// One axis of a Slice after ONNX's rules: negative starts and ends count from the end,
// both are clamped to the axis (to [-1, dim-1] for a negative step), and `count` elements
// are taken: start, start + step, ... before end.
struct SliceRange {
  int64_t start = 0;
  int64_t step = 1;
  int64_t count = 0;
};

// Returns the normalised range of Slice(start, end, step) along an axis of `dim` elements.
// InvalidArgument for step 0.
absl::StatusOr<SliceRange> NormalizeSliceRange(int64_t dim, int64_t start, int64_t end,
                                               int64_t step);

// Returns the range of every axis of Slice `node` over a tensor of `shape` (all of an axis it
// does not name): starts, ends, axes and steps from its attributes (opset < 10) or from
// `inputs` 1 to 4 (nullptr where omitted; starts and ends are required).
absl::StatusOr<std::vector<SliceRange>> OnnxSliceRanges(
    const onnx::NodeProto& node, const std::vector<const OnnxTensor*>& inputs,
    const Shape& shape, int64_t opset);

// Returns the shape Reshape gives `in` for the target `shape` (0 copies the input's dim
// unless `allow_zero`; one -1 is inferred).
absl::StatusOr<Shape> OnnxReshapeTarget(const Shape& in, const std::vector<int64_t>& shape,
                                        bool allow_zero);
// Returns `in` with size-1 dims inserted at `axes` (of the output's rank; may be negative).
absl::StatusOr<Shape> OnnxUnsqueezeShape(const Shape& in, std::vector<int64_t> axes);
// Returns `in` without the size-1 dims at `axes` (all size-1 dims when empty).
absl::StatusOr<Shape> OnnxSqueezeShape(const Shape& in, std::vector<int64_t> axes);
// Returns the numpy broadcast of `shapes`.
absl::StatusOr<Shape> OnnxBroadcastShapes(const std::vector<Shape>& shapes);

// Returns an attribute of `node` by name, or nullptr.
const onnx::AttributeProto* FindOnnxAttr(const onnx::NodeProto& node, const std::string& name);
// Returns an int / ints / float attribute, or `fallback` when absent.
int64_t OnnxIntAttr(const onnx::NodeProto& node, const std::string& name, int64_t fallback);
std::vector<int64_t> OnnxIntsAttr(const onnx::NodeProto& node, const std::string& name,
                                  std::vector<int64_t> fallback = {});
double OnnxFloatAttr(const onnx::NodeProto& node, const std::string& name, double fallback);
std::string OnnxStringAttr(const onnx::NodeProto& node, const std::string& name,
                           std::string fallback = "");

// Returns "node '/layer1/Conv' (Conv)" for messages.
std::string OnnxNodeLabel(const onnx::NodeProto& node);

}  // namespace headroom::graph

#endif  // HEADROOM_GRAPH_ONNX_FOLD_H_
