// The CUDA backend's Resize kernels: nearest and bilinear interpolation of x[N,C,H,W],
// bitwise the CPU backend's (and PyTorch 1.13's CPU kernels'): the same source pixels,
// weights and roundings from executor/resize_math.h. The forward computes one output pixel
// per thread. The backward owns one input pixel per thread, without atomics: it finds the
// output rows and columns that read its pixel (the source index grows with the output
// index, so they are one run each, found by bisection) and adds their shares in the CPU's
// order (row by row, then the four taps top-left to bottom-right), so each gradient is the
// CPU's sum, rounding for rounding. No scratch.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "executor/cuda/cuda_context.h"
#include "executor/cuda/cuda_device_utils.h"
#include "executor/resize_math.h"

namespace headroom::executor::cuda {
namespace {

struct ResizeGeometry {
  int64_t planes = 0, in_h = 0, in_w = 0, out_h = 0, out_w = 0;
  bool bilinear = false;
  bool align_corners = false;
  float step_h = 0, step_w = 0;
};

absl::StatusOr<ResizeGeometry> ResizeGeometryOf(const std::string& op, const graph::Attrs& attrs,
                                                const TensorView& x, const TensorView& y) {
  if (x.rank() != 4 || y.rank() != 4 || x.dim(0) != y.dim(0) || x.dim(1) != y.dim(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA ", op, ": input 'x' ", graph::ShapeString(x.shape), " and output 'y' ",
                     graph::ShapeString(y.shape), " must both be [N,C,H,W] with the same N and C"));
  }
  const std::string& mode = attrs.String("mode");
  if (mode != "nearest" && mode != "bilinear") {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA ", op, ": mode '", mode, "' is neither 'nearest' nor 'bilinear'"));
  }
  ResizeGeometry g;
  g.planes = x.dim(0) * x.dim(1);
  g.in_h = x.dim(2);
  g.in_w = x.dim(3);
  g.out_h = y.dim(2);
  g.out_w = y.dim(3);
  g.bilinear = mode == "bilinear";
  g.align_corners = g.bilinear && attrs.Bool("align_corners");
  g.step_h = ResizeStep(g.in_h, g.out_h, g.align_corners, attrs.Float("scale_h"));
  g.step_w = ResizeStep(g.in_w, g.out_w, g.align_corners, attrs.Float("scale_w"));
  return g;
}

__global__ void ResizeForwardKernel(const float* x, float* y, ResizeGeometry g) {
  GRID_STRIDE_LOOP(i, g.planes * g.out_h * g.out_w) {
    const int64_t ow = i % g.out_w;
    const int64_t oh = (i / g.out_w) % g.out_h;
    const float* in = x + (i / (g.out_w * g.out_h)) * g.in_h * g.in_w;
    if (!g.bilinear) {
      y[i] = in[NearestSource(oh, g.in_h, g.step_h) * g.in_w + NearestSource(ow, g.in_w, g.step_w)];
      continue;
    }
    const LinearTaps h = LinearSource(oh, g.in_h, g.out_h, g.step_h, g.align_corners);
    const LinearTaps w = LinearSource(ow, g.in_w, g.out_w, g.step_w, g.align_corners);
    const float* r0 = in + h.i0 * g.in_w;
    const float* r1 = in + h.i1 * g.in_w;
    y[i] = BilinearBlend(r0[w.i0], r0[w.i1], r1[w.i0], r1[w.i1], h, w);
  }
}

// The first and last source pixel output pixel `o` reads along one dim.
struct SourceSpan {
  int64_t first, last;
  LinearTaps taps;  // Bilinear only.
};

__device__ SourceSpan SpanOf(int64_t o, int64_t in, int64_t out, float step, bool bilinear,
                             bool align_corners) {
  SourceSpan s;
  if (!bilinear) {
    s.first = s.last = NearestSource(o, in, step);
    return s;
  }
  s.taps = LinearSource(o, in, out, step, align_corners);
  s.first = s.taps.i0;
  s.last = s.taps.i1;
  return s;
}

// Returns the first output index along one dim whose last source pixel is at least `i`
// (out if none): where the run of outputs reading pixel i starts.
__device__ int64_t FirstReader(int64_t i, int64_t in, int64_t out, float step, bool bilinear,
                               bool align_corners) {
  int64_t lo = 0, hi = out;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (SpanOf(mid, in, out, step, bilinear, align_corners).last < i) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

__global__ void ResizeBackwardKernel(const float* dy, float* dx, ResizeGeometry g) {
  GRID_STRIDE_LOOP(i, g.planes * g.in_h * g.in_w) {
    const int64_t iw = i % g.in_w;
    const int64_t ih = (i / g.in_w) % g.in_h;
    const float* grad = dy + (i / (g.in_w * g.in_h)) * g.out_h * g.out_w;
    const int64_t ow_first =
        FirstReader(iw, g.in_w, g.out_w, g.step_w, g.bilinear, g.align_corners);
    float sum = 0.0f;
    for (int64_t oh = FirstReader(ih, g.in_h, g.out_h, g.step_h, g.bilinear, g.align_corners);
         oh < g.out_h; ++oh) {
      const SourceSpan h = SpanOf(oh, g.in_h, g.out_h, g.step_h, g.bilinear, g.align_corners);
      if (h.first > ih) break;
      for (int64_t ow = ow_first; ow < g.out_w; ++ow) {
        const SourceSpan w = SpanOf(ow, g.in_w, g.out_w, g.step_w, g.bilinear, g.align_corners);
        if (w.first > iw) break;
        const float d = grad[oh * g.out_w + ow];
        if (!g.bilinear) {
          sum = ResizeAdd(sum, d);
          continue;
        }
        // The CPU's four terms in its order, those that land on (ih, iw).
        if (h.taps.i0 == ih && w.taps.i0 == iw)
          sum = BilinearGradTerm(sum, h.taps.w0, w.taps.w0, d);
        if (h.taps.i0 == ih && w.taps.i1 == iw)
          sum = BilinearGradTerm(sum, h.taps.w0, w.taps.w1, d);
        if (h.taps.i1 == ih && w.taps.i0 == iw)
          sum = BilinearGradTerm(sum, h.taps.w1, w.taps.w0, d);
        if (h.taps.i1 == ih && w.taps.i1 == iw)
          sum = BilinearGradTerm(sum, h.taps.w1, w.taps.w1, d);
      }
    }
    dx[i] = sum;
  }
}

absl::Status ResizeForward(CudaContext& ctx, const ForwardArgs& args) {
  const TensorView& x = args.inputs[0];
  const TensorView& y = args.outputs[0];
  RETURN_IF_ERROR(RequireF32(x, "input 'x'"));
  ASSIGN_OR_RETURN(const ResizeGeometry g, ResizeGeometryOf(args.op, *args.attrs, x, y));
  const int64_t n = y.num_elements();
  ResizeForwardKernel<<<GridFor(n), kThreads, 0, ctx.compute>>>(x.f32(), y.f32(), g);
  HR_CUDA_LAUNCHED("ResizeForwardKernel");
  return absl::OkStatus();
}

// dx only; the gradient rule reads no forward tensor.
absl::Status ResizeBackward(CudaContext& ctx, const BackwardArgs& args) {
  const TensorView& dx = args.input_grads[0];
  const TensorView& dy = args.output_grads[0];
  if (!dx.present()) return absl::OkStatus();
  if (!dy.present()) return ZeroIfPresent(ctx, dx);
  ASSIGN_OR_RETURN(const ResizeGeometry g,
                   ResizeGeometryOf(args.op, *args.attrs, args.inputs[0], args.outputs[0]));
  const int64_t n = dx.num_elements();
  ResizeBackwardKernel<<<GridFor(n), kThreads, 0, ctx.compute>>>(dy.f32(), dx.f32(), g);
  HR_CUDA_LAUNCHED("ResizeBackwardKernel");
  return absl::OkStatus();
}

}  // namespace

void RegisterResizeKernels(KernelTable* table) {
  (*table)["Resize"] = {ResizeForward, ResizeBackward};
}

}  // namespace headroom::executor::cuda
