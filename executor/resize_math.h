// The index and weight arithmetic of Resize (PyTorch 1.13's upsample_nearest2d and
// upsample_bilinear2d, aten/src/ATen/native/UpSample.h), shared by the CPU and CUDA backends so
// both compute bitwise the same source pixels and weights. All of it is float arithmetic, as
// PyTorch's for float tensors; on a device each product and sum is a __f*_rn intrinsic (nvcc
// would otherwise fuse a * b + c into one rounding, the host never does).
#ifndef HEADROOM_EXECUTOR_RESIZE_MATH_H_
#define HEADROOM_EXECUTOR_RESIZE_MATH_H_

#include <cmath>
#include <cstdint>

#include "util/host_device.h"

namespace headroom::executor {

HEADROOM_HOST_DEVICE inline float ResizeMul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

HEADROOM_HOST_DEVICE inline float ResizeAdd(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// Returns PyTorch's area_pixel_compute_scale: the step in input pixels per output pixel.
// align_corners maps the corner pixels onto each other, (in - 1) / (out - 1); otherwise
// 1 / scale_factor where F.interpolate was given one (scale_factor > 0), else in / out.
HEADROOM_HOST_DEVICE inline float ResizeStep(int64_t in, int64_t out, bool align_corners,
                                             double scale_factor) {
  if (align_corners) {
    return out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.0f;
  }
  if (scale_factor > 0) return static_cast<float>(1.0 / scale_factor);
  return static_cast<float>(in) / static_cast<float>(out);
}

// Returns the input pixel nearest mode reads for output pixel `o`: min(floor(o * step),
// in - 1), PyTorch's forward (OpenCV's INTER_NEAREST). Headroom's backward uses it too.
HEADROOM_HOST_DEVICE inline int64_t NearestSource(int64_t o, int64_t in, float step) {
  const int64_t i = static_cast<int64_t>(floorf(ResizeMul(static_cast<float>(o), step)));
  return i < in - 1 ? i : in - 1;
}

// The two input pixels bilinear mode blends for one output pixel along one dim, and their
// weights (w0 + w1 = 1; i1 = i0 at the last pixel).
struct LinearTaps {
  int64_t i0, i1;
  float w0, w1;
};

// Returns PyTorch's compute_source_index_and_lambda: where out == in, the pixel itself;
// else the source coordinate step * o (align_corners) or max(step * (o + 0.5) - 0.5, 0), its
// floor and the fraction beyond it.
HEADROOM_HOST_DEVICE inline LinearTaps LinearSource(int64_t o, int64_t in, int64_t out, float step,
                                                    bool align_corners) {
  if (out == in) return {o, o, 1.0f, 0.0f};
  const float of = static_cast<float>(o);
  float real =
      align_corners ? ResizeMul(step, of) : ResizeAdd(ResizeMul(step, ResizeAdd(of, 0.5f)), -0.5f);
  if (!align_corners && real < 0.0f) real = 0.0f;
  LinearTaps t;
  t.i0 = static_cast<int64_t>(real);
  t.i1 = t.i0 + (t.i0 < in - 1 ? 1 : 0);
  float lambda = ResizeAdd(real, -static_cast<float>(t.i0));
  lambda = lambda < 0.0f ? 0.0f : (lambda > 1.0f ? 1.0f : lambda);
  t.w1 = lambda;
  t.w0 = ResizeAdd(1.0f, -lambda);
  return t;
}

// Returns the bilinear blend of x[i0/i1 of h][i0/i1 of w] as PyTorch 1.13's CPU kernel sums
// it: each row blended along w first, then the two rows along h.
HEADROOM_HOST_DEVICE inline float BilinearBlend(float x00, float x01, float x10, float x11,
                                                const LinearTaps& h, const LinearTaps& w) {
  const float top = ResizeAdd(ResizeMul(x00, w.w0), ResizeMul(x01, w.w1));
  const float bottom = ResizeAdd(ResizeMul(x10, w.w0), ResizeMul(x11, w.w1));
  return ResizeAdd(ResizeMul(top, h.w0), ResizeMul(bottom, h.w1));
}

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_RESIZE_MATH_H_
