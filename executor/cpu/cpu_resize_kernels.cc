// The CPU backend's Resize kernels: nearest and bilinear interpolation of x[N,C,H,W], forward
// and backward, with PyTorch 1.13's source pixels, weights and roundings
// (executor/resize_math.h) and its CPU kernels' order of operations: the forward blends each
// row along w, then the two rows along h; the backward walks the output pixels row by row and
// adds each one's share to its input pixels in PyTorch's order (upsample_bilinear2d_backward:
// top-left, top-right, bottom-left, bottom-right), so every input pixel's gradient is summed
// in float in the order PyTorch sums it. Parallel over the N*C planes only, so deterministic.
// No scratch.

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "executor/cpu/cpu_context.h"
#include "executor/resize_math.h"
#include "graph/op_registry.h"
#include "graph/shape.h"
#include "util/status_macros.h"

namespace headroom::executor::cpu {
namespace {

// Resize over planes of x [planes, in_h, in_w] to y [planes, out_h, out_w].
struct ResizeGeometry {
  int64_t planes = 0, in_h = 0, in_w = 0, out_h = 0, out_w = 0;
  bool bilinear = false;
  bool align_corners = false;
  float step_h = 0, step_w = 0;  // ResizeStep of each dim.
};

// Returns the geometry of a Resize of x to y (shapes only, so a backward without data works);
// InvalidArgument for what the kernel does not take.
absl::StatusOr<ResizeGeometry> ResizeGeometryOf(const std::string& op, const graph::Attrs& attrs,
                                                const TensorView& x, const TensorView& y) {
  for (const TensorView* t : {&x, &y}) {
    if (t->dtype != proto::DTYPE_FLOAT32 || t->rank() != 4) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CPU ", op, ": ", t == &x ? "input 'x' " : "output 'y' ", graph::ShapeString(t->shape),
          " of dtype ", graph::DTypeName(t->dtype), "; needs float32 with 4 dims"));
    }
  }
  if (x.dim(0) != y.dim(0) || x.dim(1) != y.dim(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("CPU ", op, ": output 'y' ", graph::ShapeString(y.shape),
                     " does not keep the N and C of input 'x' ", graph::ShapeString(x.shape)));
  }
  const std::string& mode = attrs.String("mode");
  if (mode != "nearest" && mode != "bilinear") {
    return absl::InvalidArgumentError(
        absl::StrCat("CPU ", op, ": mode '", mode, "' is neither 'nearest' nor 'bilinear'"));
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

void NearestForward(const ResizeGeometry& g, const float* x, float* y) {
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < g.planes; ++p) {
    const float* in = x + p * g.in_h * g.in_w;
    float* out = y + p * g.out_h * g.out_w;
    for (int64_t oh = 0; oh < g.out_h; ++oh) {
      const float* row = in + NearestSource(oh, g.in_h, g.step_h) * g.in_w;
      for (int64_t ow = 0; ow < g.out_w; ++ow) {
        out[oh * g.out_w + ow] = row[NearestSource(ow, g.in_w, g.step_w)];
      }
    }
  }
}

void BilinearForward(const ResizeGeometry& g, const float* x, float* y) {
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < g.planes; ++p) {
    const float* in = x + p * g.in_h * g.in_w;
    float* out = y + p * g.out_h * g.out_w;
    for (int64_t oh = 0; oh < g.out_h; ++oh) {
      const LinearTaps h = LinearSource(oh, g.in_h, g.out_h, g.step_h, g.align_corners);
      const float* r0 = in + h.i0 * g.in_w;
      const float* r1 = in + h.i1 * g.in_w;
      for (int64_t ow = 0; ow < g.out_w; ++ow) {
        const LinearTaps w = LinearSource(ow, g.in_w, g.out_w, g.step_w, g.align_corners);
        out[oh * g.out_w + ow] = BilinearBlend(r0[w.i0], r0[w.i1], r1[w.i0], r1[w.i1], h, w);
      }
    }
  }
}

// dx[source of (oh, ow)] += dy[oh, ow], row by row (PyTorch's upsample_nearest2d_backward).
void NearestBackward(const ResizeGeometry& g, const float* dy, float* dx) {
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < g.planes; ++p) {
    const float* out = dy + p * g.out_h * g.out_w;
    float* in = dx + p * g.in_h * g.in_w;
    std::fill(in, in + g.in_h * g.in_w, 0.0f);
    for (int64_t oh = 0; oh < g.out_h; ++oh) {
      float* row = in + NearestSource(oh, g.in_h, g.step_h) * g.in_w;
      for (int64_t ow = 0; ow < g.out_w; ++ow) {
        row[NearestSource(ow, g.in_w, g.step_w)] += out[oh * g.out_w + ow];
      }
    }
  }
}

// dx at the four source pixels of (oh, ow) += their weight (wh * ww) * dy[oh, ow], in
// PyTorch's order (upsample_bilinear2d_backward).
void BilinearBackward(const ResizeGeometry& g, const float* dy, float* dx) {
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < g.planes; ++p) {
    const float* out = dy + p * g.out_h * g.out_w;
    float* in = dx + p * g.in_h * g.in_w;
    std::fill(in, in + g.in_h * g.in_w, 0.0f);
    for (int64_t oh = 0; oh < g.out_h; ++oh) {
      const LinearTaps h = LinearSource(oh, g.in_h, g.out_h, g.step_h, g.align_corners);
      float* r0 = in + h.i0 * g.in_w;
      float* r1 = in + h.i1 * g.in_w;
      for (int64_t ow = 0; ow < g.out_w; ++ow) {
        const LinearTaps w = LinearSource(ow, g.in_w, g.out_w, g.step_w, g.align_corners);
        const float d = out[oh * g.out_w + ow];
        r0[w.i0] = BilinearGradTerm(r0[w.i0], h.w0, w.w0, d);
        r0[w.i1] = BilinearGradTerm(r0[w.i1], h.w0, w.w1, d);
        r1[w.i0] = BilinearGradTerm(r1[w.i0], h.w1, w.w0, d);
        r1[w.i1] = BilinearGradTerm(r1[w.i1], h.w1, w.w1, d);
      }
    }
  }
}

absl::Status ResizeForward(CpuContext&, const ForwardArgs& args) {
  if (args.attrs == nullptr || args.inputs.size() != 1 || args.outputs.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("CPU ", args.op, ": needs attributes, 1 input and 1 output"));
  }
  const TensorView& x = args.inputs[0];
  const TensorView& y = args.outputs[0];
  ASSIGN_OR_RETURN(const ResizeGeometry g, ResizeGeometryOf(args.op, *args.attrs, x, y));
  if (g.bilinear) {
    BilinearForward(g, x.f32(), y.f32());
  } else {
    NearestForward(g, x.f32(), y.f32());
  }
  return absl::OkStatus();
}

// dx only: the gradient rule reads no forward tensor, so x and y come as shapes.
absl::Status ResizeBackward(CpuContext&, const BackwardArgs& args) {
  if (args.attrs == nullptr || args.inputs.size() != 1 || args.outputs.size() != 1 ||
      args.input_grads.size() != 1 || args.output_grads.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("CPU ", args.op, ": needs attributes, 1 input, 1 output and their gradients"));
  }
  const TensorView& dx = args.input_grads[0];
  const TensorView& dy = args.output_grads[0];
  ASSIGN_OR_RETURN(const ResizeGeometry g,
                   ResizeGeometryOf(args.op, *args.attrs, args.inputs[0], args.outputs[0]));
  if (!dx.present()) return absl::OkStatus();
  if (!dy.present()) {
    std::memset(dx.data, 0, dx.bytes());
    return absl::OkStatus();
  }
  if (g.bilinear) {
    BilinearBackward(g, dy.f32(), dx.f32());
  } else {
    NearestBackward(g, dy.f32(), dx.f32());
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterResizeKernels(KernelTable* table) {
  (*table)["Resize"] = {ResizeForward, ResizeBackward};
}

}  // namespace headroom::executor::cpu
