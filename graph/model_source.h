// Where a model comes from on the wire: ModelSource names a graph description, a zoo model
// or an ONNX file; ResolveModel() turns any of them into the graph description the rest of
// Headroom takes. What headroomd's handlers and the remote clients share.
#ifndef HEADROOM_GRAPH_MODEL_SOURCE_H_
#define HEADROOM_GRAPH_MODEL_SOURCE_H_

#include "absl/status/statusor.h"
#include "proto/headroom.pb.h"

namespace headroom::graph {

// Returns the forward graph description `source` names: the description itself, or the zoo
// model built. InvalidArgument when no source is set or the zoo spec is bad (naming the
// model or option); Unimplemented for ONNX, which this build cannot import yet. The graph is
// not validated here: Graph::FromProto does that.
absl::StatusOr<proto::GraphDef> ResolveModel(const proto::ModelSource& source);

}  // namespace headroom::graph

#endif  // HEADROOM_GRAPH_MODEL_SOURCE_H_
