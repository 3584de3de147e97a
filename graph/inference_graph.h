// The inference form of a forward graph, for Headroom's own executor, which always runs a
// training step: what an ONNX runtime computes from graph/onnx_export's model, in Headroom's
// ops, so the two can be compared (and a trained model's logits read) with a forward pass.
//
//   - A batch norm becomes the affine map of its running statistics: Mul by
//     scale = weight / sqrt(running_var + epsilon), then Add of
//     shift = bias - running_mean * scale (both computed in double, kept as float32
//     BUFFERs "<node>.inference_scale" and "<node>.inference_shift", shaped [C, 1, 1] for
//     images), so the step's batch statistics play no part.
//   - A dropout is removed: its readers read its input.
//   - Everything else, the loss included (the trainer needs one), is kept; the loss's first
//     input is the logits.
// Pure function; thread-safe.
#ifndef HEADROOM_GRAPH_INFERENCE_GRAPH_H_
#define HEADROOM_GRAPH_INFERENCE_GRAPH_H_

#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "proto/headroom.pb.h"

namespace headroom::graph {

struct InferenceModel {
  proto::GraphDef graph;
  // Every parameter and buffer `graph` reads, by name: the given values and the batch
  // norms' scales and shifts.
  std::vector<proto::TensorValue> values;
};

// Returns the inference form of `forward` with `values` (its parameters and buffers by name;
// others are ignored). InvalidArgument naming the tensor when a value a batch norm needs is
// missing or is not float32 of the graph's shape.
absl::StatusOr<InferenceModel> InferenceForm(const Graph& forward,
                                             const std::vector<proto::TensorValue>& values);

}  // namespace headroom::graph

#endif  // HEADROOM_GRAPH_INFERENCE_GRAPH_H_
