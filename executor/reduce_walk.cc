#include "executor/reduce_walk.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace headroom::executor {

absl::StatusOr<ReduceWalk> ReduceWalkOf(const graph::Attrs& attrs, const graph::Shape& x,
                                        const graph::Shape& y) {
  const std::vector<int64_t> axes = attrs.Ints("axes");
  const bool keepdims = attrs.Bool("keepdims");
  const int64_t rank = static_cast<int64_t>(x.size());
  std::vector<bool> reduced(rank, axes.empty());
  bool valid = true;
  for (int64_t a : axes) {
    const int64_t axis = a < 0 ? a + rank : a;
    valid = axis >= 0 && axis < rank && !reduced[axis];
    if (!valid) break;
    reduced[axis] = true;
  }
  ReduceWalk walk;
  graph::Shape out;
  int64_t stride = 1;
  std::vector<int64_t> strides(rank);
  for (int64_t d = rank - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= x[d];
  }
  for (int64_t d = 0; valid && d < rank; ++d) {
    StridedWalk& part = reduced[d] ? walk.reduced : walk.kept;
    part.dims.push_back(x[d]);
    part.strides.push_back(strides[d]);
    if (!reduced[d] || keepdims) out.push_back(reduced[d] ? 1 : x[d]);
  }
  if (!valid || out != y) {
    return absl::InvalidArgumentError(
        absl::StrCat("attributes 'axes' [", absl::StrJoin(axes, ","), "], 'keepdims' ", keepdims,
                     " do not reduce input 'x' ", graph::ShapeString(x), " to output 'y' ",
                     graph::ShapeString(y)));
  }
  return walk;
}

}  // namespace headroom::executor
