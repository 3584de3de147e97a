// Re-batching an ONNX model exported with a fixed batch: where the batch lives in each
// tensor, and the shape constants the exporter baked the export batch into, rewritten for
// another batch.
//
// torch.onnx.export(model, torch.randn(1, 3, 224, 224), path) without dynamic_axes writes
// the shapes of `x.view(n, groups, c, h, w)` as literal constants ([1, 2, 58, 28, 28] for
// shufflenet's channel shuffle). The importer follows where the batch is in every computed
// tensor (BatchAxis), starting from axis 0 of the inputs, and maps each literal Reshape target
// through that axis: the sample index keeps its place in the row-major layout, so the target's
// axis holding it is the one to scale (ReshapeBatchAxis). A reshape that would mix samples has
// no such axis, and is an error for the caller to name.
//
// Limits: with an export batch of 1 the batch can merge into either neighbour of the sample
// index (torch's attention writes [L, B * heads, d], then [L * B, E]); the smallest axis that
// keeps the samples' layout is taken, and a wrong choice shows as samples mixed later (an
// error). Pure functions; thread-safe.
#ifndef HEADROOM_GRAPH_ONNX_REBATCH_H_
#define HEADROOM_GRAPH_ONNX_REBATCH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/shape.h"

namespace headroom::graph {

// Where the batch lives in a tensor: dim `axis` is outer * batch * inner, the sample index
// being the middle factor (swin's windows [B * windows, ...] have inner = windows; an
// attention's [L * B, E] has outer = L). axis < 0: no batch (a weight, a constant).
struct BatchAxis {
  int64_t axis = -1;
  int64_t outer = 1;
  int64_t inner = 1;

  bool has_batch() const { return axis >= 0; }
  bool operator==(const BatchAxis& o) const {
    return axis == o.axis && outer == o.outer && inner == o.inner;
  }
  // Returns "axis 0" or "axis 1 (12 x batch x 1)".
  std::string DebugString() const;
};

// Returns `shape` with the batch at `b` of `from` samples changed to `to` samples.
// REQUIRES: b.has_batch(), shape[b.axis] == b.outer * from * b.inner.
Shape WithBatch(const Shape& shape, const BatchAxis& b, int64_t from, int64_t to);

// Returns where the batch lives after a row-major reshape of `in` (batch at `b`, `batch`
// samples) to `out`: an axis j of `out` whose layout holds the sample index whole (the
// elements per sample a multiple of j's stride, and the axes before j holding exactly the
// elements before the sample index); of several (only where sizes of 1 surround the sample
// index, as with a batch of 1), the smallest, the first of equals. nullopt when none does:
// the reshape mixes samples.
std::optional<BatchAxis> ReshapeBatchAxis(const Shape& in, const BatchAxis& b, int64_t batch,
                                          const Shape& out);

// Returns the shape a Reshape with the literal `target` (written for `export_batch` samples)
// gives `in` (batch at `b`, `batch` samples), and where the batch is in it: the target applied
// to the input at the export batch, its batch axis found by ReshapeBatchAxis and scaled.
// InvalidArgument saying why when the target does not fit the input at the export batch or
// mixes samples.
struct RebatchedReshape {
  Shape shape;
  BatchAxis batch;
};
absl::StatusOr<RebatchedReshape> RebatchReshape(const Shape& in, const BatchAxis& b,
                                                int64_t export_batch, int64_t batch,
                                                const std::vector<int64_t>& target,
                                                bool allow_zero);

}  // namespace headroom::graph

#endif  // HEADROOM_GRAPH_ONNX_REBATCH_H_
