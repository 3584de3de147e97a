// Resolving and validating the reversible blocks of a graph description
// (proto::ReversibleBlock): part of Graph::FromProto.
#ifndef HEADROOM_GRAPH_REVERSIBLE_BLOCK_H_
#define HEADROOM_GRAPH_REVERSIBLE_BLOCK_H_

#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "proto/headroom.pb.h"

namespace headroom::graph {

// Returns the blocks of `def` resolved against `graph` (built from `def` without them), in the
// order of their y1 nodes; InvalidArgument naming the block and the node or tensor at fault
// for: an empty or repeated block name; an unknown node or one listed in two places; a
// coupling node that is not Add, or whose inputs are not one output of F (G) and one tensor
// from outside; F reading anything but x2, parameters, buffers and F's own outputs (G: y1);
// a tensor F or G writes read outside the block; F's output shaped or typed unlike x1 (G's
// unlike x2); x1 equal to x2.
absl::StatusOr<std::vector<ReversibleBlock>> ResolveReversibleBlocks(const Graph& graph,
                                                                     const proto::GraphDef& def);

}  // namespace headroom::graph

#endif  // HEADROOM_GRAPH_REVERSIBLE_BLOCK_H_
