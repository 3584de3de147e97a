// How the data-movement ops read their input: a strided walk over the input's elements in the
// row-major order of the output. Transpose permutes the input's strides, Slice starts at the
// first element it takes and multiplies each sliced dim's stride by its step, Expand puts 0 on
// the dims it broadcasts. Deciding only: each backend's kernels do the copy, so the CPU and
// CUDA backends walk the same elements.
#ifndef HEADROOM_EXECUTOR_STRIDED_WALK_H_
#define HEADROOM_EXECUTOR_STRIDED_WALK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/op_registry.h"
#include "graph/shape.h"

namespace headroom::executor {

// Element (i0, i1, ...) of the walk, in the row-major order of `dims`, is element
// offset + sum(i_d * strides[d]) of the walked tensor (in elements, not bytes).
struct StridedWalk {
  graph::Shape dims;
  std::vector<int64_t> strides;
  int64_t offset = 0;

  // Returns "dims [..] strides [..] offset N", for messages and test failures.
  std::string DebugString() const;
};

// Returns the walk over x that Transpose's output y follows: y.dim(k) = x.dim(perm[k]).
// REQUIRES: perm is a permutation of x's dims.
StridedWalk TransposeWalk(const graph::Shape& x, const std::vector<int64_t>& perm);

// Returns the walk over x that Slice's output y follows, or InvalidArgument (naming the
// attributes and both shapes) unless `attrs` (axes, starts, ends, steps) cut x to y under
// the op set's rules: distinct axes in [-rank, rank), and 0 <= start < end <= dim with
// step >= 1 or -1 <= end < start < dim with step <= -1 (a negative stride from start).
absl::StatusOr<StridedWalk> SliceWalk(const graph::Attrs& attrs, const graph::Shape& x,
                                      const graph::Shape& y);

// Returns the walk over x that Expand's output y follows (stride 0 along broadcast dims), or
// InvalidArgument unless x broadcasts to y (numpy rules, x right-aligned).
absl::StatusOr<StridedWalk> ExpandWalk(const graph::Shape& x, const graph::Shape& y);

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_STRIDED_WALK_H_
