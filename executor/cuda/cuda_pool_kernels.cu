// The CUDA backend's pooling: MaxPool and AvgPool on cuDNN where cuDNN computes what PyTorch
// does (symmetric padding, and an output size the floor rule gives), on kernels of its own
// otherwise (ceil_mode windows, asymmetric padding), following PyTorch's max_pool2d and
// avg_pool2d (count_include_pad counts padding but not the ceil_mode overhang). AvgPool's
// backward always runs on the own kernel (the plan keeps no x or y for it). Own backward
// kernels gather per input element, so they are deterministic; the max goes to
// the first maximum of a window in scan order, as in PyTorch. cuDNN's max backward gives a
// tied window's gradient to one of its maxima, not necessarily the first. GlobalAvgPool:
// own kernels.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "executor/cuda/cuda_context.h"
#include "executor/cuda/cuda_device_utils.h"
#include "executor/cuda/window_geometry.h"

namespace headroom::executor::cuda {
namespace {

// A pooling node's geometry (NCHW).
struct PoolGeometry : WindowGeometry {
  int64_t kernel_h = 0, kernel_w = 0;
  bool count_include_pad = true;
};

PoolGeometry GeometryOf(const TensorView& x, const TensorView& y, const graph::Attrs& attrs,
                        bool average) {
  const std::vector<int64_t> kernel = attrs.Ints("kernel_size");
  std::vector<int64_t> stride = attrs.Ints("stride");
  if (stride.empty()) stride = kernel;
  PoolGeometry g{WindowGeometryOf(x, y, stride, attrs)};
  g.kernel_h = kernel[0];
  g.kernel_w = kernel[1];
  g.count_include_pad = average ? attrs.Bool("count_include_pad") : true;
  return g;
}

// Returns whether cuDNN's pooling computes exactly this node: symmetric padding, the
// floor-rule output size, and x within cuDNN's 2^31 - 1 elements (larger ones go to the own
// kernels, which index in 64 bits).
bool CudnnCanPool(const PoolGeometry& g) {
  return g.n * g.c * g.h * g.w <= INT32_MAX && g.pad_top == g.pad_bottom &&
         g.pad_left == g.pad_right &&
         g.out_h == (g.h + 2 * g.pad_top - g.kernel_h) / g.stride_h + 1 &&
         g.out_w == (g.w + 2 * g.pad_left - g.kernel_w) / g.stride_w + 1;
}

// ---- Own kernels, for what cuDNN cannot express -----------------------------------------

// One window along one dim, as PyTorch: [start, end) clamped to the input, and the
// count_include_pad divisor's extent (padding counted, the ceil overhang not).
struct Window {
  int64_t start, end, padded_extent;
};

__device__ Window WindowAt(int64_t o, int64_t stride, int64_t pad_begin, int64_t pad_end,
                           int64_t kernel, int64_t in) {
  int64_t start = o * stride - pad_begin;
  int64_t end = min(start + kernel, in + pad_end);
  const int64_t padded_extent = end - start;
  start = max(start, int64_t{0});
  end = min(end, in);
  return {start, end, padded_extent};
}

// The windows of output row `oh` and output column `ow`.
__device__ Window WindowH(const PoolGeometry& g, int64_t oh) {
  return WindowAt(oh, g.stride_h, g.pad_top, g.pad_bottom, g.kernel_h, g.h);
}
__device__ Window WindowW(const PoolGeometry& g, int64_t ow) {
  return WindowAt(ow, g.stride_w, g.pad_left, g.pad_right, g.kernel_w, g.w);
}

// Returns the offset (within one image plane) of the first maximum of window (oh, ow); NaN
// counts as the maximum, as in PyTorch.
__device__ int64_t ArgMax(const float* plane, const PoolGeometry& g, int64_t oh, int64_t ow) {
  const Window wh = WindowH(g, oh);
  const Window ww = WindowW(g, ow);
  int64_t best = wh.start * g.w + ww.start;
  float best_value = -INFINITY;
  for (int64_t ih = wh.start; ih < wh.end; ++ih) {
    for (int64_t iw = ww.start; iw < ww.end; ++iw) {
      const float v = plane[ih * g.w + iw];
      if (v > best_value || isnan(v)) {
        best_value = v;
        best = ih * g.w + iw;
        if (isnan(v)) return best;
      }
    }
  }
  return best;
}

__device__ float AvgDivisor(const PoolGeometry& g, const Window& wh, const Window& ww) {
  return g.count_include_pad
             ? static_cast<float>(wh.padded_extent * ww.padded_extent)
             : static_cast<float>((wh.end - wh.start) * (ww.end - ww.start));
}

template <bool kMax>
__global__ void PoolForwardKernel(const float* x, float* y, PoolGeometry g) {
  const int64_t total = g.n * g.c * g.out_h * g.out_w;
  GRID_STRIDE_LOOP(i, total) {
    const int64_t ow = i % g.out_w;
    const int64_t oh = (i / g.out_w) % g.out_h;
    const int64_t plane_index = i / (g.out_w * g.out_h);
    const float* plane = x + plane_index * g.h * g.w;
    if (kMax) {
      y[i] = plane[ArgMax(plane, g, oh, ow)];
    } else {
      const Window wh = WindowH(g, oh);
      const Window ww = WindowW(g, ow);
      float sum = 0.0f;
      for (int64_t ih = wh.start; ih < wh.end; ++ih) {
        for (int64_t iw = ww.start; iw < ww.end; ++iw) sum += plane[ih * g.w + iw];
      }
      y[i] = sum / AvgDivisor(g, wh, ww);
    }
  }
}

// Returns the first output index along one dim whose window may hold input position p.
__device__ int64_t FirstWindow(int64_t p, int64_t pad_begin, int64_t kernel, int64_t stride) {
  const int64_t num = p + pad_begin - kernel + 1;
  return num <= 0 ? 0 : (num + stride - 1) / stride;
}

// One thread per input element: sums dy over the windows that hold it (for max, those whose
// first maximum it is). x is read only for max.
template <bool kMax>
__global__ void PoolBackwardKernel(const float* x, const float* dy, float* dx, PoolGeometry g) {
  const int64_t total = g.n * g.c * g.h * g.w;
  GRID_STRIDE_LOOP(i, total) {
    const int64_t iw = i % g.w;
    const int64_t ih = (i / g.w) % g.h;
    const int64_t plane_index = i / (g.w * g.h);
    const float* dy_plane = dy + plane_index * g.out_h * g.out_w;
    const int64_t oh_end = min((ih + g.pad_top) / g.stride_h + 1, g.out_h);
    const int64_t ow_end = min((iw + g.pad_left) / g.stride_w + 1, g.out_w);
    float sum = 0.0f;
    for (int64_t oh = FirstWindow(ih, g.pad_top, g.kernel_h, g.stride_h); oh < oh_end; ++oh) {
      const Window wh = WindowH(g, oh);
      if (ih < wh.start || ih >= wh.end) continue;
      for (int64_t ow = FirstWindow(iw, g.pad_left, g.kernel_w, g.stride_w); ow < ow_end;
           ++ow) {
        const Window ww = WindowW(g, ow);
        if (iw < ww.start || iw >= ww.end) continue;
        const float grad = dy_plane[oh * g.out_w + ow];
        if (kMax) {
          const float* plane = x + plane_index * g.h * g.w;
          if (ArgMax(plane, g, oh, ow) == ih * g.w + iw) sum += grad;
        } else {
          sum += grad / AvgDivisor(g, wh, ww);
        }
      }
    }
    dx[i] = sum;
  }
}

// ---- cuDNN pooling ----------------------------------------------------------------------

struct CudnnPoolPlan {
  cudnnTensorDescriptor_t x = nullptr;
  cudnnTensorDescriptor_t y = nullptr;
  cudnnPoolingDescriptor_t pool = nullptr;
  ~CudnnPoolPlan() {
    if (x != nullptr) cudnnDestroyTensorDescriptor(x);
    if (y != nullptr) cudnnDestroyTensorDescriptor(y);
    if (pool != nullptr) cudnnDestroyPoolingDescriptor(pool);
  }
};

absl::Status CheckIntDims(std::initializer_list<int64_t> dims) {
  for (int64_t d : dims) {
    if (d > INT32_MAX) {
      return absl::UnimplementedError(absl::StrCat("dimension ", d, " exceeds cuDNN's limit"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<CudnnPoolPlan*> PoolPlan(CudaContext& ctx, const PoolGeometry& g, bool average) {
  const std::string key =
      absl::StrCat(average ? "AvgPool" : "MaxPool", ":", g.n, ",", g.c, ",", g.h, ",", g.w, ":",
                   g.kernel_h, ",", g.kernel_w, ":", g.stride_h, ",", g.stride_w, ":", g.pad_top,
                   ",", g.pad_left, ":", g.count_include_pad);
  return ctx.Cached<CudnnPoolPlan>(key, [&]() -> absl::StatusOr<std::shared_ptr<CudnnPoolPlan>> {
    RETURN_IF_ERROR(CheckIntDims({g.n, g.c, g.h, g.w, g.out_h, g.out_w}));
    auto plan = std::make_shared<CudnnPoolPlan>();
    HR_CUDNN(cudnnCreateTensorDescriptor(&plan->x));
    HR_CUDNN(cudnnCreateTensorDescriptor(&plan->y));
    HR_CUDNN(cudnnCreatePoolingDescriptor(&plan->pool));
    HR_CUDNN(cudnnSetTensor4dDescriptor(plan->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, g.n, g.c,
                                        g.h, g.w));
    HR_CUDNN(cudnnSetTensor4dDescriptor(plan->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, g.n, g.c,
                                        g.out_h, g.out_w));
    const cudnnPoolingMode_t mode =
        !average ? CUDNN_POOLING_MAX_DETERMINISTIC
                 : (g.count_include_pad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                        : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING);
    HR_CUDNN(cudnnSetPooling2dDescriptor(plan->pool, mode, CUDNN_PROPAGATE_NAN, g.kernel_h,
                                         g.kernel_w, g.pad_top, g.pad_left, g.stride_h,
                                         g.stride_w));
    return plan;
  });
}

template <bool kAverage>
absl::Status PoolForward(CudaContext& ctx, const ForwardArgs& args) {
  const TensorView& x = args.inputs[0];
  const TensorView& y = args.outputs[0];
  RETURN_IF_ERROR(RequireF32(x, "input 'x'"));
  const PoolGeometry g = GeometryOf(x, y, *args.attrs, kAverage);
  if (CudnnCanPool(g)) {
    ASSIGN_OR_RETURN(CudnnPoolPlan * plan, PoolPlan(ctx, g, kAverage));
    const float one = 1.0f, zero = 0.0f;
    HR_CUDNN(cudnnPoolingForward(ctx.cudnn, plan->pool, &one, plan->x, x.data, &zero, plan->y,
                                 y.data));
    return absl::OkStatus();
  }
  PoolForwardKernel<!kAverage>
      <<<GridFor(y.num_elements()), kThreads, 0, ctx.compute>>>(x.f32(), y.f32(), g);
  HR_CUDA_LAUNCHED("PoolForwardKernel");
  return absl::OkStatus();
}

template <bool kAverage>
absl::Status PoolBackward(CudaContext& ctx, const BackwardArgs& args) {
  const TensorView& dx = args.input_grads[0];
  if (!dx.present()) return absl::OkStatus();
  const TensorView& dy = args.output_grads[0];
  const PoolGeometry g = GeometryOf(args.inputs[0], args.outputs[0], *args.attrs, kAverage);
  if (kAverage) {
    // Own kernel always: the plan keeps neither x nor y for an average pooling's backward,
    // and cuDNN's backward takes both (its average mode reads neither, but does not
    // promise so). It gathers per input element: deterministic.
    PoolBackwardKernel<false>
        <<<GridFor(dx.num_elements()), kThreads, 0, ctx.compute>>>(nullptr, dy.f32(), dx.f32(), g);
    HR_CUDA_LAUNCHED("PoolBackwardKernel");
    return absl::OkStatus();
  }
  const TensorView& x = args.inputs[0];
  const TensorView& y = args.outputs[0];
  RETURN_IF_ERROR(RequireF32(x, "input 'x'"));
  RETURN_IF_ERROR(RequireF32(y, "output 'y'"));
  if (CudnnCanPool(g)) {
    // CUDNN_POOLING_MAX_DETERMINISTIC: deterministic, but a tied window's gradient goes to
    // one of its maxima, not necessarily the first as in PyTorch.
    ASSIGN_OR_RETURN(CudnnPoolPlan * plan, PoolPlan(ctx, g, kAverage));
    const float one = 1.0f, zero = 0.0f;
    HR_CUDNN(cudnnPoolingBackward(ctx.cudnn, plan->pool, &one, plan->y, y.data, plan->y, dy.data,
                                  plan->x, x.data, &zero, plan->x, dx.data));
    return absl::OkStatus();
  }
  PoolBackwardKernel<true>
      <<<GridFor(dx.num_elements()), kThreads, 0, ctx.compute>>>(x.f32(), dy.f32(), dx.f32(), g);
  HR_CUDA_LAUNCHED("PoolBackwardKernel");
  return absl::OkStatus();
}

// ---- GlobalAvgPool ----------------------------------------------------------------------

// One block per (n, c) plane of hw elements.
__global__ void GlobalAvgPoolKernel(const float* x, float* y, int64_t planes, int64_t hw) {
  __shared__ float shared[32];
  BLOCK_ROW_LOOP(p, planes) {
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < hw; i += blockDim.x) sum += x[p * hw + i];
    sum = BlockSum(sum, shared);
    if (threadIdx.x == 0) y[p] = sum / static_cast<float>(hw);
  }
}

__global__ void GlobalAvgPoolGradKernel(const float* dy, float* dx, int64_t total, int64_t hw) {
  GRID_STRIDE_LOOP(i, total) dx[i] = dy[i / hw] / static_cast<float>(hw);
}

absl::Status GlobalAvgPoolForward(CudaContext& ctx, const ForwardArgs& args) {
  const TensorView& x = args.inputs[0];
  RETURN_IF_ERROR(RequireF32(x, "input 'x'"));
  const int64_t planes = x.dim(0) * x.dim(1);
  const int64_t hw = x.dim(2) * x.dim(3);
  GlobalAvgPoolKernel<<<RowGrid(planes), kThreads, 0, ctx.compute>>>(
      x.f32(), args.outputs[0].f32(), planes, hw);
  HR_CUDA_LAUNCHED("GlobalAvgPoolKernel");
  return absl::OkStatus();
}

absl::Status GlobalAvgPoolBackward(CudaContext& ctx, const BackwardArgs& args) {
  const TensorView& dx = args.input_grads[0];
  if (!dx.present()) return absl::OkStatus();
  const int64_t hw = dx.dim(2) * dx.dim(3);
  const int64_t total = dx.num_elements();
  GlobalAvgPoolGradKernel<<<GridFor(total), kThreads, 0, ctx.compute>>>(
      args.output_grads[0].f32(), dx.f32(), total, hw);
  HR_CUDA_LAUNCHED("GlobalAvgPoolGradKernel");
  return absl::OkStatus();
}

}  // namespace

void RegisterPoolKernels(KernelTable* table) {
  (*table)["MaxPool"] = {PoolForward<false>, PoolBackward<false>};
  (*table)["AvgPool"] = {PoolForward<true>, PoolBackward<true>};
  (*table)["GlobalAvgPool"] = {GlobalAvgPoolForward, GlobalAvgPoolBackward};
}

}  // namespace headroom::executor::cuda
