// The index and weight arithmetic of Resize (PyTorch 1.13's upsample_nearest2d and
// upsample_bilinear2d on the CPU), shared by the CPU and CUDA backends so both compute bitwise
// the same source pixels, weights and sums. It follows what PyTorch's kernels compute on a CPU
// with AVX2 (its kernels for AVX2 and AVX-512 are compiled with FMA contraction), measured
// against Debian's torch 1.13 by //executor/cpu:upsample_parity_test: the step per output
// pixel in float; bilinear's source coordinate from it in double (so the weight keeps the
// excess a float coordinate would round away); each blend and each gradient sum one fused
// multiply-add. On a device every product and sum is a __f*_rn intrinsic, so nvcc fuses
// nothing else.
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

// a * b + c, rounded once.
HEADROOM_HOST_DEVICE inline float ResizeFma(float a, float b, float c) {
#ifdef __CUDA_ARCH__
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
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

// Returns PyTorch's compute_source_index_and_lambda: where out == in, the pixel itself; else
// the source coordinate, step * o (align_corners) or max(step * (o + 0.5) - 0.5, 0) in double,
// its integer part i0 and the fraction beyond it, w1 (w0 = 1 - w1 in float).
HEADROOM_HOST_DEVICE inline LinearTaps LinearSource(int64_t o, int64_t in, int64_t out, float step,
                                                    bool align_corners) {
  if (out == in) return {o, o, 1.0f, 0.0f};
  const double s = step;
  const double od = static_cast<double>(o);
  double real = align_corners ? s * od : s * (od + 0.5) - 0.5;
  if (real < 0.0) real = 0.0;
  LinearTaps t;
  t.i0 = static_cast<int64_t>(real);
  t.i1 = t.i0 + (t.i0 < in - 1 ? 1 : 0);
  double lambda = real - static_cast<double>(t.i0);
  lambda = lambda < 0.0 ? 0.0 : (lambda > 1.0 ? 1.0 : lambda);
  t.w1 = static_cast<float>(lambda);
  t.w0 = ResizeAdd(1.0f, -t.w1);
  return t;
}

// Returns the blend of x0 and x1 at weights w0 and w1 as PyTorch sums it: x0 w0 + (x1 w1),
// the outer sum fused.
HEADROOM_HOST_DEVICE inline float LinearBlend(float x0, float w0, float x1, float w1) {
  return ResizeFma(x0, w0, ResizeMul(x1, w1));
}

// Returns the bilinear blend of x[i0/i1 of h][i0/i1 of w]: each row blended along w, then the
// two rows along h.
HEADROOM_HOST_DEVICE inline float BilinearBlend(float x00, float x01, float x10, float x11,
                                                const LinearTaps& h, const LinearTaps& w) {
  return LinearBlend(LinearBlend(x00, w.w0, x01, w.w1), h.w0, LinearBlend(x10, w.w0, x11, w.w1),
                     h.w1);
}

// Returns sum + (wh * ww) * dy, the sum fused: one term of PyTorch's
// upsample_bilinear2d_backward.
HEADROOM_HOST_DEVICE inline float BilinearGradTerm(float sum, float wh, float ww, float dy) {
  return ResizeFma(ResizeMul(wh, ww), dy, sum);
}

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_RESIZE_MATH_H_
