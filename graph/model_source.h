// Where a model comes from on the wire: ModelSource names a graph description, a zoo model
// or an ONNX model; ResolveModel() turns any of them into the graph description the rest of
// Headroom takes. What headroomd's handlers and the remote clients share.
#ifndef HEADROOM_GRAPH_MODEL_SOURCE_H_
#define HEADROOM_GRAPH_MODEL_SOURCE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "proto/headroom.pb.h"

namespace headroom::graph {

// A model resolved with its weights: an ONNX model's initializers (empty for the others).
struct ResolvedModel {
  proto::GraphDef graph;
  std::vector<proto::TensorValue> values;
};

// Returns the forward graph description `source` names: the description itself, the zoo
// model built, or the ONNX model imported with source.onnx's batch, loss and classes.
// InvalidArgument when no source is set or the zoo spec or ONNX model is bad (naming the
// model, option, op or node). The graph is not validated here: Graph::FromProto does that.
absl::StatusOr<proto::GraphDef> ResolveModel(const proto::ModelSource& source);

// Returns ResolveModel(source) and, for an ONNX model, its weights to train from.
absl::StatusOr<ResolvedModel> ResolveModelWithValues(const proto::ModelSource& source);

}  // namespace headroom::graph

#endif  // HEADROOM_GRAPH_MODEL_SOURCE_H_
