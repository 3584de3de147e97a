// bf16 mixed precision as a graph rewrite: the forward graph a `--precision bf16` step runs.
#ifndef HEADROOM_GRAPH_MIXED_PRECISION_H_
#define HEADROOM_GRAPH_MIXED_PRECISION_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/graph.h"
#include "proto/headroom.pb.h"

namespace headroom::graph {

// Returns "fp32", "bf16" or "auto".
const char* PrecisionName(proto::Precision precision);

// Returns the precision named "fp32", "bf16" or "auto"; InvalidArgument naming `name`
// otherwise.
absl::StatusOr<proto::Precision> ParsePrecision(absl::string_view name);

// Returns the precision PRECISION_AUTO takes, given the predicted step seconds of the
// fastest plan that fits in each precision (or why none fits): PRECISION_BF16 where its
// plan is faster, or where float32's does not fit; PRECISION_FP32 on a tie or where bf16's
// does not fit. The one rule of `plan --precision auto` and `train --precision auto`.
// Errors: FailedPrecondition giving both refusals where neither fits; any other error of
// either (not a refusal to fit) as it is.
absl::StatusOr<proto::Precision> ChooseFasterPrecision(
    const absl::StatusOr<double>& fp32_step_seconds,
    const absl::StatusOr<double>& bf16_step_seconds);

// Returns the bf16 mixed-precision form of the validated forward graph `forward` (Headroom's
// policy, docs/training.md):
//   - parameters, their gradients as the optimizer sees them and optimizer state stay
//     float32 (master weights);
//   - each float32 parameter that a Conv2D, MatMul or Embedding reads gets one Cast node to
//     bfloat16, named "<param>.bf16" (node and tensor), which every such reader then reads
//     (its other readers keep the float32 parameter: a norm's weight and bias);
//   - each float32 graph INPUT gets one Cast "<input>.bf16", read by all its readers;
//   - every other op computes in the dtype of its activation inputs, so activations and
//     their gradients are bfloat16 throughout; BatchNorm, LayerNorm and GroupNorm keep
//     float32 weights, biases, running and saved statistics; SoftmaxCrossEntropy's loss is
//     float32. A loss that ends bfloat16 gets a final Cast "<loss>.f32", the new loss.
// Each Cast is placed just before its first reader. A Cast of a parameter whose readers all
// lie in one reversible block's F (or G) joins that F (or G).
// Errors: InvalidArgument naming the node when a name "<t>.bf16" is taken, or the graph
// loader's error (node and input) when an op cannot take a bfloat16 input beside a float32
// one (ConvTranspose2D's weight, PReLU's slope: ops outside the policy).
absl::StatusOr<Graph> ToMixedPrecision(const Graph& forward);

// Returns the description ToMixedPrecision builds its graph from (for `headroom graph`
// and tests).
absl::StatusOr<proto::GraphDef> MixedPrecisionDef(const Graph& forward);

}  // namespace headroom::graph

#endif  // HEADROOM_GRAPH_MIXED_PRECISION_H_
