// How ReduceSum, ReduceMax and ReduceMin read their input: output element o (row-major over
// the kept axes) reduces the elements of x that a walk over the reduced axes visits from o's
// base offset. Deciding only: each backend's kernels do the arithmetic, so the CPU and CUDA
// backends visit the same elements in the same order.
#ifndef HEADROOM_EXECUTOR_REDUCE_WALK_H_
#define HEADROOM_EXECUTOR_REDUCE_WALK_H_

#include "absl/status/statusor.h"
#include "executor/strided_walk.h"
#include "graph/op_registry.h"
#include "graph/shape.h"

namespace headroom::executor {

// Output element (k0, k1, ...) in the row-major order of kept.dims is the reduction of the
// elements kept.offset + sum(k_d * kept.strides[d]) + sum(r_d * reduced.strides[d]) of x over
// every (r0, r1, ...) of reduced.dims, visited in row-major order.
struct ReduceWalk {
  StridedWalk kept;     // The kept axes of x in order (dims [] when every axis is reduced).
  StridedWalk reduced;  // The reduced axes of x in order.

  // Returns the number of output elements (1 when every axis is reduced).
  int64_t outputs() const { return static_cast<int64_t>(graph::NumElements(kept.dims)); }
  // Returns the number of elements each output reduces.
  int64_t reduced_count() const { return static_cast<int64_t>(graph::NumElements(reduced.dims)); }
};

// Returns the walk of a reduction of x to y, or InvalidArgument (naming the attributes and
// both shapes) unless `attrs` (axes, keepdims) reduce x to y under the op set's rules:
// distinct axes in [-rank, rank), none for all.
absl::StatusOr<ReduceWalk> ReduceWalkOf(const graph::Attrs& attrs, const graph::Shape& x,
                                        const graph::Shape& y);

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_REDUCE_WALK_H_
