#include "graph/onnx_rebatch.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/onnx_fold.h"

namespace headroom::graph {
namespace {

// Returns the product of shape[begin, end).
int64_t Product(const Shape& shape, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t k = begin; k < end && k < shape.size(); ++k) n *= shape[k];
  return n;
}

}  // namespace

std::string BatchAxis::DebugString() const {
  if (!has_batch()) return "no batch";
  if (outer == 1 && inner == 1) return absl::StrCat("axis ", axis);
  return absl::StrCat("axis ", axis, " (", outer, " x batch x ", inner, ")");
}

Shape WithBatch(const Shape& shape, const BatchAxis& b, int64_t from, int64_t to) {
  Shape out = shape;
  out[b.axis] = shape[b.axis] / from * to;
  return out;
}

std::optional<BatchAxis> ReshapeBatchAxis(const Shape& in, const BatchAxis& b, int64_t batch,
                                          const Shape& out) {
  if (!b.has_batch() || b.axis >= static_cast<int64_t>(in.size()) || batch <= 0) {
    return std::nullopt;
  }
  // The sample index's stride in the flat layout, and the elements above it.
  const int64_t sample_stride = b.inner * Product(in, b.axis + 1, in.size());
  const int64_t above = b.outer * Product(in, 0, b.axis);
  if (sample_stride <= 0) return std::nullopt;
  std::optional<BatchAxis> best;
  for (size_t j = 0; j < out.size(); ++j) {
    const int64_t stride = Product(out, j + 1, out.size());
    if (stride <= 0 || sample_stride % stride != 0) continue;
    const int64_t inner = sample_stride / stride;
    if (out[j] % (inner * batch) != 0) continue;
    const int64_t outer = out[j] / (inner * batch);
    if (Product(out, 0, j) * outer != above) continue;
    // Several axes hold the sample index only where sizes are 1 around it (a batch of 1):
    // the batch joins the smallest (torch's attention writes [L, B * heads, d] and
    // [L * B, E], the batch merged into the smaller neighbour each time).
    if (!best || out[j] < out[best->axis]) best = BatchAxis{static_cast<int64_t>(j), outer, inner};
  }
  return best;
}

absl::StatusOr<RebatchedReshape> RebatchReshape(const Shape& in, const BatchAxis& b,
                                                int64_t export_batch, int64_t batch,
                                                const std::vector<int64_t>& target,
                                                bool allow_zero) {
  const Shape exported_in = WithBatch(in, b, batch, export_batch);
  absl::StatusOr<Shape> exported_out = OnnxReshapeTarget(exported_in, target, allow_zero);
  if (exported_out.ok() && Product(*exported_out, 0, exported_out->size()) !=
                               Product(exported_in, 0, exported_in.size())) {
    exported_out = absl::InvalidArgumentError(
        absl::StrCat(ShapeString(*exported_out), " does not hold its elements"));
  }
  if (!exported_out.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("it does not fit the input at the export batch either (",
                     ShapeString(exported_in), "): ", exported_out.status().message()));
  }
  std::optional<BatchAxis> out_batch =
      ReshapeBatchAxis(exported_in, b, export_batch, *exported_out);
  if (!out_batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reshaping ", ShapeString(exported_in), " (batch on ", b.DebugString(), ") to ",
        ShapeString(*exported_out), " mixes samples, so no axis of it holds the batch"));
  }
  return RebatchedReshape{WithBatch(*exported_out, *out_batch, export_batch, batch), *out_batch};
}

}  // namespace headroom::graph
