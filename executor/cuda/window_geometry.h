// Internal to the CUDA backend: the NCHW sizes, strides and padding that a 2-D window op
// (Conv2D, MaxPool, AvgPool) reads from its tensors and attributes. Plain data, so a kernel
// can take it (or a struct extending it) by value.
#ifndef HEADROOM_EXECUTOR_CUDA_WINDOW_GEOMETRY_H_
#define HEADROOM_EXECUTOR_CUDA_WINDOW_GEOMETRY_H_

#include <cstdint>
#include <vector>

#include "executor/tensor_view.h"
#include "graph/op_registry.h"

namespace headroom::executor::cuda {

struct WindowGeometry {
  int64_t n = 0, c = 0, h = 0, w = 0;  // x [n, c, h, w]
  int64_t out_h = 0, out_w = 0;        // y [n, ..., out_h, out_w]
  int64_t stride_h = 0, stride_w = 0;
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
};

// Returns the geometry of x and y with `stride` ([h, w]) and the attribute 'padding' ([h, w],
// the same on both sides, or [top, left, bottom, right]).
inline WindowGeometry WindowGeometryOf(const TensorView& x, const TensorView& y,
                                       const std::vector<int64_t>& stride,
                                       const graph::Attrs& attrs) {
  std::vector<int64_t> pad = attrs.Ints("padding");
  if (pad.size() == 2) pad = {pad[0], pad[1], pad[0], pad[1]};
  WindowGeometry g;
  g.n = x.dim(0);
  g.c = x.dim(1);
  g.h = x.dim(2);
  g.w = x.dim(3);
  g.out_h = y.dim(2);
  g.out_w = y.dim(3);
  g.stride_h = stride[0];
  g.stride_w = stride[1];
  g.pad_top = pad[0];
  g.pad_left = pad[1];
  g.pad_bottom = pad[2];
  g.pad_right = pad[3];
  return g;
}

}  // namespace headroom::executor::cuda

#endif  // HEADROOM_EXECUTOR_CUDA_WINDOW_GEOMETRY_H_
