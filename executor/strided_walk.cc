#include "executor/strided_walk.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace headroom::executor {
namespace {

using graph::Shape;

// Returns the row-major strides of `shape`, in elements.
std::vector<int64_t> RowMajorStrides(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * shape[d + 1];
  return s;
}

}  // namespace

std::string StridedWalk::DebugString() const {
  return absl::StrCat("dims ", graph::ShapeString(dims), " strides [",
                      absl::StrJoin(strides, ","), "] offset ", offset);
}

StridedWalk TransposeWalk(const Shape& x, const std::vector<int64_t>& perm) {
  const std::vector<int64_t> xs = RowMajorStrides(x);
  StridedWalk walk;
  for (int64_t p : perm) {
    walk.dims.push_back(x[p]);
    walk.strides.push_back(xs[p]);
  }
  return walk;
}

absl::StatusOr<StridedWalk> SliceWalk(const graph::Attrs& attrs, const Shape& x, const Shape& y) {
  const std::vector<int64_t> axes = attrs.Ints("axes");
  const std::vector<int64_t> starts = attrs.Ints("starts");
  const std::vector<int64_t> ends = attrs.Ints("ends");
  std::vector<int64_t> steps = attrs.Ints("steps");
  if (steps.empty()) steps.assign(axes.size(), 1);
  const int64_t rank = static_cast<int64_t>(x.size());
  StridedWalk walk{x, RowMajorStrides(x), 0};
  bool valid = !axes.empty() && starts.size() == axes.size() && ends.size() == axes.size() &&
               steps.size() == axes.size();
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; valid && i < axes.size(); ++i) {
    const int64_t axis = axes[i] < 0 ? axes[i] + rank : axes[i];
    valid = axis >= 0 && axis < rank && !seen[axis] &&
            (steps[i] >= 1
                 ? 0 <= starts[i] && starts[i] < ends[i] && ends[i] <= x[axis]
                 : steps[i] <= -1 && -1 <= ends[i] && ends[i] < starts[i] && starts[i] < x[axis]);
    if (!valid) break;
    seen[axis] = true;
    // A negative step walks backwards from start: a negative stride.
    walk.offset += starts[i] * walk.strides[axis];
    walk.strides[axis] *= steps[i];
    walk.dims[axis] = steps[i] > 0 ? (ends[i] - starts[i] + steps[i] - 1) / steps[i]
                                   : (starts[i] - ends[i] - steps[i] - 1) / -steps[i];
  }
  if (!valid || walk.dims != y) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attributes 'axes' [", absl::StrJoin(axes, ","), "], 'starts' [",
        absl::StrJoin(starts, ","), "], 'ends' [", absl::StrJoin(ends, ","), "], 'steps' [",
        absl::StrJoin(attrs.Ints("steps"), ","), "] do not cut input 'x' ",
        graph::ShapeString(x), " to output 'y' ", graph::ShapeString(y)));
  }
  return walk;
}

absl::StatusOr<StridedWalk> ExpandWalk(const Shape& x, const Shape& y) {
  bool fits = x.size() <= y.size();
  const size_t lead = fits ? y.size() - x.size() : 0;
  for (size_t d = 0; fits && d < x.size(); ++d) fits = x[d] == 1 || x[d] == y[lead + d];
  if (!fits) {
    return absl::InvalidArgumentError(absl::StrCat("input 'x' ", graph::ShapeString(x),
                                                   " does not broadcast to output 'y' ",
                                                   graph::ShapeString(y)));
  }
  StridedWalk walk{y, std::vector<int64_t>(y.size(), 0), 0};
  const std::vector<int64_t> xs = RowMajorStrides(x);
  for (size_t d = 0; d < x.size(); ++d) walk.strides[lead + d] = x[d] == 1 ? 0 : xs[d];
  return walk;
}

}  // namespace headroom::executor
