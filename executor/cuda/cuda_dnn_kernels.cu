// The CUDA backend's cuDNN kernels: Conv2D (forward, backward data, backward filter, bias
// gradient), ConvTranspose2D (the same three the other way round), BatchNorm (spatial:
// training, inference, backward) and the activations ReLU, ReLU6, Sigmoid, Tanh (forward on
// cuDNN; backward from y on an own kernel).
//
// Convolution algorithms come from cuDNN's heuristics (cudnnGet*_v7), not from timing runs
// (cudnnFind* allocates device memory of its own, which the arena may already hold): the
// first algorithm cuDNN ranks that runs with the descriptor's math type (FMA only unless
// TF32 is allowed; never FP16 down-conversion) within the workspace cap, and that is
// deterministic unless the backend was made with deterministic = false. Descriptors, algorithms and
// workspace sizes are cached per shape and attributes. Asymmetric padding, which cuDNN lacks, pads
// x into the workspace explicitly.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <climits>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "executor/cuda/activation_math.h"
#include "executor/cuda/cuda_context.h"
#include "executor/cuda/cuda_device_utils.h"
#include "executor/cuda/window_geometry.h"

namespace headroom::executor::cuda {
namespace {

absl::Status CheckIntDims(const std::vector<int64_t>& dims) {
  for (int64_t d : dims) {
    if (d > INT_MAX) {
      return absl::UnimplementedError(absl::StrCat("dimension ", d, " exceeds cuDNN's limit"));
    }
  }
  return absl::OkStatus();
}

// Sets `desc` to float32 NCHW [n, c, h, w]; Unimplemented past cuDNN's 2^31 - 1 elements
// (`what` names the tensor), which cuDNN would report as an opaque NOT_SUPPORTED.
absl::Status SetNchw(cudnnTensorDescriptor_t desc, int64_t n, int64_t c, int64_t h, int64_t w,
                     const char* what) {
  RETURN_IF_ERROR(CheckCudnnElements({n, c, h, w}, what));
  HR_CUDNN(cudnnSetTensor4dDescriptor(desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                      static_cast<int>(n), static_cast<int>(c),
                                      static_cast<int>(h), static_cast<int>(w)));
  return absl::OkStatus();
}

// ---- Conv2D -----------------------------------------------------------------------------

struct ConvGeometry : WindowGeometry {
  int64_t o, kh, kw;  // weight [o, c / groups, kh, kw]
  int64_t dilation_h, dilation_w, groups;

  bool symmetric() const { return pad_top == pad_bottom && pad_left == pad_right; }
  // x as cuDNN sees it: padded explicitly where the padding is asymmetric.
  int64_t cudnn_h() const { return symmetric() ? h : h + pad_top + pad_bottom; }
  int64_t cudnn_w() const { return symmetric() ? w : w + pad_left + pad_right; }
  uint64_t padded_bytes() const { return n * c * cudnn_h() * cudnn_w() * sizeof(float); }
};

ConvGeometry ConvGeometryOf(const TensorView& x, const TensorView& weight, const TensorView& y,
                            const graph::Attrs& attrs) {
  ConvGeometry g{WindowGeometryOf(x, y, attrs.Ints("stride"), attrs)};
  g.o = weight.dim(0);
  g.kh = weight.dim(2);
  g.kw = weight.dim(3);
  const std::vector<int64_t> dilation = attrs.Ints("dilation");
  g.dilation_h = dilation[0];
  g.dilation_w = dilation[1];
  g.groups = attrs.Int("groups");
  return g;
}

std::string ConvKey(const ConvGeometry& g, bool bias) {
  return absl::StrCat("Conv2D:", absl::StrJoin({g.n, g.c, g.h, g.w, g.o, g.kh, g.kw, g.out_h,
                                                g.out_w, g.stride_h, g.stride_w, g.dilation_h,
                                                g.dilation_w, g.groups, g.pad_top, g.pad_left,
                                                g.pad_bottom, g.pad_right},
                                               ","),
                      bias ? ":bias" : "");
}

struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr;  // The padded x where padding is explicit.
  cudnnTensorDescriptor_t y = nullptr;
  cudnnTensorDescriptor_t bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgo_t fwd_algo{};
  cudnnMathType_t fwd_math{};
  size_t fwd_bytes = 0;
  cudnnConvolutionBwdDataAlgo_t bwd_data_algo{};
  cudnnMathType_t bwd_data_math{};
  size_t bwd_data_bytes = 0;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo{};
  cudnnMathType_t bwd_filter_math{};
  size_t bwd_filter_bytes = 0;

  ~ConvPlan() {
    if (x != nullptr) cudnnDestroyTensorDescriptor(x);
    if (y != nullptr) cudnnDestroyTensorDescriptor(y);
    if (bias != nullptr) cudnnDestroyTensorDescriptor(bias);
    if (w != nullptr) cudnnDestroyFilterDescriptor(w);
    if (conv != nullptr) cudnnDestroyConvolutionDescriptor(conv);
  }
};

// Picks the first of cuDNN's ranked algorithms `perf` whose workspace size query (run with
// its math type) succeeds within the cap. `size_of(algo)` queries the size. Passed over:
// nondeterministic algorithms (atomics) unless ctx.deterministic is off; tensor-op math
// unless TF32 is allowed; and always CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION, which would
// round float32 operands to half precision.
template <typename Perf, typename Algo, typename SizeOf>
absl::Status PickAlgorithm(CudaContext& ctx, ConvPlan& plan, const std::vector<Perf>& perf,
                           int returned, const char* what, SizeOf size_of, Algo* algo,
                           cudnnMathType_t* math, size_t* bytes) {
  std::vector<std::string> rejected;
  for (int i = 0; i < returned; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
    if (!ctx.allow_tf32 && perf[i].mathType != CUDNN_FMA_MATH &&
        perf[i].mathType != CUDNN_DEFAULT_MATH) {
      continue;
    }
    if (ctx.deterministic && perf[i].determinism != CUDNN_DETERMINISTIC) {
      rejected.push_back(
          absl::StrCat("algorithm ", static_cast<int>(perf[i].algo), " is nondeterministic"));
      continue;
    }
    const cudnnMathType_t m = ctx.allow_tf32 ? perf[i].mathType : CUDNN_FMA_MATH;
    HR_CUDNN(cudnnSetConvolutionMathType(plan.conv, m));
    size_t size = 0;
    if (size_of(perf[i].algo, &size) != CUDNN_STATUS_SUCCESS) continue;
    if (size > ctx.max_conv_workspace_bytes) {
      rejected.push_back(absl::StrCat("algorithm ", static_cast<int>(perf[i].algo), " needs ",
                                      size, " bytes"));
      continue;
    }
    *algo = perf[i].algo;
    *math = m;
    *bytes = size;
    return absl::OkStatus();
  }
  return absl::UnimplementedError(
      absl::StrCat("cuDNN offers no ", ctx.deterministic ? "deterministic " : "", what,
                   " algorithm within the workspace cap of ", ctx.max_conv_workspace_bytes,
                   " bytes", ctx.allow_tf32 ? "" : " in float32 (FMA) math",
                   rejected.empty() ? "" : ": ", absl::StrJoin(rejected, "; "),
                   ctx.deterministic ? " (the nondeterministic option admits the others)" : ""));
}

// Creates and sets `plan`'s descriptors for `g` (and a bias descriptor if `bias`); checks
// that cuDNN computes the graph's output size.
absl::Status DescribeConv(CudaContext& ctx, const ConvGeometry& g, bool bias, ConvPlan* plan) {
  HR_CUDNN(cudnnCreateTensorDescriptor(&plan->x));
  HR_CUDNN(cudnnCreateTensorDescriptor(&plan->y));
  HR_CUDNN(cudnnCreateFilterDescriptor(&plan->w));
  HR_CUDNN(cudnnCreateConvolutionDescriptor(&plan->conv));
  RETURN_IF_ERROR(SetNchw(plan->x, g.n, g.c, g.cudnn_h(), g.cudnn_w(), "input 'x'"));
  RETURN_IF_ERROR(CheckCudnnElements({g.o, g.c / g.groups, g.kh, g.kw}, "input 'weight'"));
  RETURN_IF_ERROR(SetNchw(plan->y, g.n, g.o, g.out_h, g.out_w, "output 'y'"));
  HR_CUDNN(cudnnSetFilter4dDescriptor(plan->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                      static_cast<int>(g.o), static_cast<int>(g.c / g.groups),
                                      static_cast<int>(g.kh), static_cast<int>(g.kw)));
  const int pad_h = g.symmetric() ? static_cast<int>(g.pad_top) : 0;
  const int pad_w = g.symmetric() ? static_cast<int>(g.pad_left) : 0;
  HR_CUDNN(cudnnSetConvolution2dDescriptor(
      plan->conv, pad_h, pad_w, static_cast<int>(g.stride_h), static_cast<int>(g.stride_w),
      static_cast<int>(g.dilation_h), static_cast<int>(g.dilation_w), CUDNN_CROSS_CORRELATION,
      CUDNN_DATA_FLOAT));
  HR_CUDNN(cudnnSetConvolutionGroupCount(plan->conv, static_cast<int>(g.groups)));
  HR_CUDNN(cudnnSetConvolutionMathType(plan->conv,
                                       ctx.allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
  if (bias) {
    HR_CUDNN(cudnnCreateTensorDescriptor(&plan->bias));
    RETURN_IF_ERROR(SetNchw(plan->bias, 1, g.o, 1, 1, "input 'bias'"));
  }

  // cuDNN's output size must be the node's.
  int dims[4] = {0, 0, 0, 0};
  HR_CUDNN(cudnnGetConvolution2dForwardOutputDim(plan->conv, plan->x, plan->w, &dims[0],
                                                 &dims[1], &dims[2], &dims[3]));
  if (dims[0] != g.n || dims[1] != g.o || dims[2] != g.out_h || dims[3] != g.out_w) {
    return absl::InternalError(absl::StrCat("cuDNN computes output [", absl::StrJoin(dims, ","),
                                            "], the graph [", g.n, ",", g.o, ",", g.out_h, ",",
                                            g.out_w, "]"));
  }

  return absl::OkStatus();
}

// Picks `p`'s forward, backward-data and backward-filter algorithms and their workspaces.
absl::Status ChooseConvAlgorithms(CudaContext& ctx, ConvPlan& p) {
  {
    int max_count = 0, returned = 0;
    HR_CUDNN(cudnnGetConvolutionForwardAlgorithmMaxCount(ctx.cudnn, &max_count));
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(std::max(max_count, 1));
    HR_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(ctx.cudnn, p.x, p.w, p.conv, p.y, max_count,
                                                    &returned, perf.data()));
    RETURN_IF_ERROR(PickAlgorithm(
        ctx, p, perf, returned, "forward convolution",
        [&](cudnnConvolutionFwdAlgo_t algo, size_t* size) {
          return cudnnGetConvolutionForwardWorkspaceSize(ctx.cudnn, p.x, p.w, p.conv, p.y, algo,
                                                         size);
        },
        &p.fwd_algo, &p.fwd_math, &p.fwd_bytes));
  }
  {
    int max_count = 0, returned = 0;
    HR_CUDNN(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(ctx.cudnn, &max_count));
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(std::max(max_count, 1));
    HR_CUDNN(cudnnSetConvolutionMathType(p.conv,
                                         ctx.allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
    HR_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(ctx.cudnn, p.w, p.y, p.conv, p.x,
                                                         max_count, &returned, perf.data()));
    RETURN_IF_ERROR(PickAlgorithm(
        ctx, p, perf, returned, "backward-data convolution",
        [&](cudnnConvolutionBwdDataAlgo_t algo, size_t* size) {
          return cudnnGetConvolutionBackwardDataWorkspaceSize(ctx.cudnn, p.w, p.y, p.conv, p.x,
                                                              algo, size);
        },
        &p.bwd_data_algo, &p.bwd_data_math, &p.bwd_data_bytes));
  }
  {
    int max_count = 0, returned = 0;
    HR_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(ctx.cudnn, &max_count));
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(std::max(max_count, 1));
    HR_CUDNN(cudnnSetConvolutionMathType(p.conv,
                                         ctx.allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
    HR_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(ctx.cudnn, p.x, p.y, p.conv, p.w,
                                                           max_count, &returned, perf.data()));
    RETURN_IF_ERROR(PickAlgorithm(
        ctx, p, perf, returned, "backward-filter convolution",
        [&](cudnnConvolutionBwdFilterAlgo_t algo, size_t* size) {
          return cudnnGetConvolutionBackwardFilterWorkspaceSize(ctx.cudnn, p.x, p.y, p.conv, p.w,
                                                                algo, size);
        },
        &p.bwd_filter_algo, &p.bwd_filter_math, &p.bwd_filter_bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<ConvPlan>> BuildConvPlan(CudaContext& ctx, const ConvGeometry& g,
                                                        bool bias) {
  RETURN_IF_ERROR(CheckIntDims({g.stride_h, g.stride_w, g.dilation_h, g.dilation_w, g.groups,
                                g.pad_top, g.pad_left, g.o, g.kh, g.kw}));
  auto plan = std::make_shared<ConvPlan>();
  RETURN_IF_ERROR(DescribeConv(ctx, g, bias, plan.get()));
  RETURN_IF_ERROR(ChooseConvAlgorithms(ctx, *plan));
  return plan;
}

absl::StatusOr<ConvPlan*> ConvPlanFor(CudaContext& ctx, const ConvGeometry& g, bool bias) {
  return ctx.Cached<ConvPlan>(ConvKey(g, bias), [&] { return BuildConvPlan(ctx, g, bias); });
}

// padded[n, c, ph, pw] = x[n, c, ph - top, pw - left], zero outside x.
__global__ void PadKernel(const float* x, float* padded, int64_t planes, int64_t h, int64_t w,
                          int64_t ph, int64_t pw, int64_t top, int64_t left) {
  GRID_STRIDE_LOOP(i, planes * ph * pw) {
    const int64_t iw = i % pw - left;
    const int64_t ih = (i / pw) % ph - top;
    const int64_t plane = i / (ph * pw);
    padded[i] = ih >= 0 && ih < h && iw >= 0 && iw < w ? x[(plane * h + ih) * w + iw] : 0.0f;
  }
}

// x[n, c, ih, iw] = padded[n, c, ih + top, iw + left].
__global__ void CropKernel(const float* padded, float* x, int64_t planes, int64_t h, int64_t w,
                           int64_t ph, int64_t pw, int64_t top, int64_t left) {
  GRID_STRIDE_LOOP(i, planes * h * w) {
    const int64_t iw = i % w;
    const int64_t ih = (i / w) % h;
    const int64_t plane = i / (h * w);
    x[i] = padded[(plane * ph + ih + top) * pw + iw + left];
  }
}

absl::Status LaunchPad(CudaContext& ctx, const ConvGeometry& g, const float* x, float* padded) {
  const int64_t total = g.n * g.c * g.cudnn_h() * g.cudnn_w();
  PadKernel<<<GridFor(total), kThreads, 0, ctx.compute>>>(
      x, padded, g.n * g.c, g.h, g.w, g.cudnn_h(), g.cudnn_w(), g.pad_top, g.pad_left);
  HR_CUDA_LAUNCHED("PadKernel");
  return absl::OkStatus();
}

absl::Status LaunchCrop(CudaContext& ctx, const ConvGeometry& g, const float* padded, float* x) {
  const int64_t total = g.n * g.c * g.h * g.w;
  CropKernel<<<GridFor(total), kThreads, 0, ctx.compute>>>(
      padded, x, g.n * g.c, g.h, g.w, g.cudnn_h(), g.cudnn_w(), g.pad_top, g.pad_left);
  HR_CUDA_LAUNCHED("CropKernel");
  return absl::OkStatus();
}

// The scratch of a forward convolution: its algorithm's workspace, then x padded explicitly
// where the padding is asymmetric.
std::vector<uint64_t> ConvForwardPieces(const ConvPlan& plan, const ConvGeometry& g) {
  return {plan.fwd_bytes, g.symmetric() ? 0 : g.padded_bytes()};
}

// The scratch of a convolution's backward: the larger algorithm workspace (data and filter
// run one after the other), then padded x and padded dx where the padding is asymmetric.
std::vector<uint64_t> ConvBackwardPieces(const ConvPlan& plan, const ConvGeometry& g) {
  const uint64_t padded = g.symmetric() ? 0 : g.padded_bytes();
  return {std::max(plan.bwd_data_bytes, plan.bwd_filter_bytes), padded, padded};
}

absl::StatusOr<uint64_t> ConvForwardScratch(CudaContext& ctx, const ForwardArgs& args) {
  RETURN_IF_ERROR(RequireF32(args.inputs[0], "input 'x'"));
  RETURN_IF_ERROR(RequireF32(args.inputs[1], "input 'weight'"));
  const bool has_bias = args.inputs.size() > 2 && args.inputs[2].present();
  const ConvGeometry g =
      ConvGeometryOf(args.inputs[0], args.inputs[1], args.outputs[0], *args.attrs);
  ASSIGN_OR_RETURN(ConvPlan * plan, ConvPlanFor(ctx, g, has_bias));
  return CudaContext::ScratchTotal(ConvForwardPieces(*plan, g));
}

absl::StatusOr<uint64_t> ConvBackwardScratch(CudaContext& ctx, const BackwardArgs& args) {
  const bool has_bias = args.inputs.size() > 2;
  const ConvGeometry g =
      ConvGeometryOf(args.inputs[0], args.inputs[1], args.outputs[0], *args.attrs);
  ASSIGN_OR_RETURN(ConvPlan * plan, ConvPlanFor(ctx, g, has_bias));
  return CudaContext::ScratchTotal(ConvBackwardPieces(*plan, g));
}

absl::Status ConvForward(CudaContext& ctx, const ForwardArgs& args) {
  const TensorView& x = args.inputs[0];
  const TensorView& weight = args.inputs[1];
  const TensorView& y = args.outputs[0];
  RETURN_IF_ERROR(RequireF32(x, "input 'x'"));
  RETURN_IF_ERROR(RequireF32(weight, "input 'weight'"));
  const bool has_bias = args.inputs.size() > 2 && args.inputs[2].present();
  const ConvGeometry g = ConvGeometryOf(x, weight, y, *args.attrs);
  ASSIGN_OR_RETURN(ConvPlan * plan, ConvPlanFor(ctx, g, has_bias));
  ASSIGN_OR_RETURN(std::vector<void*> scratch, ctx.Scratch(args, ConvForwardPieces(*plan, g)));
  const void* x_data = x.data;
  if (!g.symmetric()) {
    RETURN_IF_ERROR(LaunchPad(ctx, g, x.f32(), static_cast<float*>(scratch[1])));
    x_data = scratch[1];
  }
  const float one = 1.0f, zero = 0.0f;
  HR_CUDNN(cudnnSetConvolutionMathType(plan->conv, plan->fwd_math));
  HR_CUDNN(cudnnConvolutionForward(ctx.cudnn, &one, plan->x, x_data, plan->w, weight.data,
                                   plan->conv, plan->fwd_algo, scratch[0], plan->fwd_bytes,
                                   &zero, plan->y, y.data));
  if (has_bias) {
    RETURN_IF_ERROR(RequireF32(args.inputs[2], "input 'bias'"));
    HR_CUDNN(cudnnAddTensor(ctx.cudnn, &one, plan->bias, args.inputs[2].data, &one, plan->y,
                            y.data));
  }
  return absl::OkStatus();
}

absl::Status ConvBackward(CudaContext& ctx, const BackwardArgs& args) {
  const TensorView& x = args.inputs[0];
  const TensorView& weight = args.inputs[1];
  const TensorView& dy = args.output_grads[0];
  const TensorView& dx = args.input_grads[0];
  const TensorView& dw = args.input_grads[1];
  const bool has_bias = args.inputs.size() > 2;
  const TensorView* db = args.input_grads.size() > 2 && args.input_grads[2].present()
                             ? &args.input_grads[2]
                             : nullptr;
  const ConvGeometry g = ConvGeometryOf(x, weight, args.outputs[0], *args.attrs);
  ASSIGN_OR_RETURN(ConvPlan * plan, ConvPlanFor(ctx, g, has_bias));
  ASSIGN_OR_RETURN(std::vector<void*> scratch, ctx.Scratch(args, ConvBackwardPieces(*plan, g)));
  const float one = 1.0f, zero = 0.0f;
  if (dw.present()) {
    RETURN_IF_ERROR(RequireF32(x, "input 'x'"));
    const void* x_data = x.data;
    if (!g.symmetric()) {
      RETURN_IF_ERROR(LaunchPad(ctx, g, x.f32(), static_cast<float*>(scratch[1])));
      x_data = scratch[1];
    }
    HR_CUDNN(cudnnSetConvolutionMathType(plan->conv, plan->bwd_filter_math));
    HR_CUDNN(cudnnConvolutionBackwardFilter(ctx.cudnn, &one, plan->x, x_data, plan->y, dy.data,
                                            plan->conv, plan->bwd_filter_algo, scratch[0],
                                            plan->bwd_filter_bytes, &zero, plan->w, dw.data));
  }
  if (dx.present()) {
    RETURN_IF_ERROR(RequireF32(weight, "input 'weight'"));
    void* dx_data = g.symmetric() ? dx.data : scratch[2];
    HR_CUDNN(cudnnSetConvolutionMathType(plan->conv, plan->bwd_data_math));
    HR_CUDNN(cudnnConvolutionBackwardData(ctx.cudnn, &one, plan->w, weight.data, plan->y,
                                          dy.data, plan->conv, plan->bwd_data_algo, scratch[0],
                                          plan->bwd_data_bytes, &zero, plan->x, dx_data));
    if (!g.symmetric()) {
      RETURN_IF_ERROR(LaunchCrop(ctx, g, static_cast<const float*>(dx_data), dx.f32()));
    }
  }
  if (db != nullptr) {
    HR_CUDNN(cudnnConvolutionBackwardBias(ctx.cudnn, &one, plan->y, dy.data, &zero, plan->bias,
                                          db->data));
  }
  return absl::OkStatus();
}

// ---- ConvTranspose2D --------------------------------------------------------------------

// A transposed convolution is the data gradient of a convolution: here of the unpadded one
// from the full output F [N, C_out, Hf, Wf], Hf = (H - 1) stride + dilation (kh - 1) + 1,
// to x [N, C_in, H, W] (PyTorch's weight [C_in, C_out/groups, kh, kw] is that convolution's
// [O, I/groups, kh, kw]). The forward writes F into the workspace (cuDNN backward data) and
// crops y from it at the top-left padding (rows past F, which output padding can add, get
// no contribution: 0), adding the bias; the backward pads dy into F's shape, then dx =
// conv(F(dy), w) and dw = backward_filter(F(dy), x); dbias sums dy per channel in a fixed
// order. cuDNN's convolutions have symmetric padding only, so F takes every padding and
// output padding this way.
struct ConvTransposeGeometry {
  ConvGeometry conv;  // x: F, y: our x.
  int64_t out_c = 0;  // y [conv.n, out_c, out_h, out_w]
  int64_t out_h = 0, out_w = 0;
  int64_t pad_top = 0, pad_left = 0;
  uint64_t full_bytes() const { return conv.n * conv.c * conv.h * conv.w * sizeof(float); }
};

absl::StatusOr<ConvTransposeGeometry> ConvTransposeGeometryOf(const TensorView& x,
                                                              const TensorView& weight,
                                                              const TensorView& y,
                                                              const graph::Attrs& attrs) {
  if (x.rank() != 4 || weight.rank() != 4 || y.rank() != 4) {
    return absl::InvalidArgumentError("CUDA ConvTranspose2D: x, weight and y need 4 dims");
  }
  const std::vector<int64_t> stride = attrs.Ints("stride");
  const std::vector<int64_t> dilation = attrs.Ints("dilation");
  std::vector<int64_t> pad = attrs.Ints("padding");
  if (pad.size() == 2) pad = {pad[0], pad[1], pad[0], pad[1]};
  ConvTransposeGeometry t;
  ConvGeometry& g = t.conv;
  g.n = x.dim(0);
  g.c = y.dim(1);
  g.h = (x.dim(2) - 1) * stride[0] + dilation[0] * (weight.dim(2) - 1) + 1;
  g.w = (x.dim(3) - 1) * stride[1] + dilation[1] * (weight.dim(3) - 1) + 1;
  g.out_h = x.dim(2);
  g.out_w = x.dim(3);
  g.stride_h = stride[0];
  g.stride_w = stride[1];
  g.o = weight.dim(0);
  g.kh = weight.dim(2);
  g.kw = weight.dim(3);
  g.dilation_h = dilation[0];
  g.dilation_w = dilation[1];
  g.groups = attrs.Int("groups");
  t.out_c = y.dim(1);
  t.out_h = y.dim(2);
  t.out_w = y.dim(3);
  t.pad_top = pad[0];
  t.pad_left = pad[1];
  return t;
}

// y[n, c, oh, ow] = F[n, c, oh + top, ow + left] (0 past F) + bias[c].
__global__ void CropFullKernel(const float* full, const float* bias, float* y, int64_t channels,
                               int64_t fh, int64_t fw, int64_t oh_size, int64_t ow_size,
                               int64_t top, int64_t left, int64_t total) {
  GRID_STRIDE_LOOP(i, total) {
    const int64_t ow = i % ow_size;
    const int64_t oh = (i / ow_size) % oh_size;
    const int64_t plane = i / (ow_size * oh_size);
    const int64_t r = oh + top, q = ow + left;
    const float v = r < fh && q < fw ? full[(plane * fh + r) * fw + q] : 0.0f;
    y[i] = bias == nullptr ? v : __fadd_rn(v, bias[plane % channels]);
  }
}

// F[n, c, r, q] = dy[n, c, r - top, q - left], 0 outside dy.
__global__ void PadToFullKernel(const float* dy, float* full, int64_t fh, int64_t fw,
                                int64_t oh_size, int64_t ow_size, int64_t top, int64_t left,
                                int64_t total) {
  GRID_STRIDE_LOOP(i, total) {
    const int64_t q = i % fw - left;
    const int64_t r = (i / fw) % fh - top;
    const int64_t plane = i / (fw * fh);
    full[i] = r >= 0 && r < oh_size && q >= 0 && q < ow_size
                  ? dy[(plane * oh_size + r) * ow_size + q]
                  : 0.0f;
  }
}

// db[c] = sum of dy[:, c, :, :], one block per channel, in a fixed order.
__global__ void ChannelSumsKernel(const float* dy, float* db, int64_t n, int64_t channels,
                                  int64_t plane) {
  __shared__ float shared[32];
  BLOCK_ROW_LOOP(c, channels) {
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < n * plane; j += blockDim.x) {
      sum += dy[((j / plane) * channels + c) * plane + j % plane];
    }
    sum = BlockSum(sum, shared);
    if (threadIdx.x == 0) db[c] = sum;
  }
}

std::vector<uint64_t> ConvTransposeForwardPieces(const ConvPlan& plan,
                                                 const ConvTransposeGeometry& t) {
  return {plan.bwd_data_bytes, t.full_bytes()};
}

std::vector<uint64_t> ConvTransposeBackwardPieces(const ConvPlan& plan,
                                                  const ConvTransposeGeometry& t) {
  return {std::max(plan.fwd_bytes, plan.bwd_filter_bytes), t.full_bytes()};
}

absl::StatusOr<uint64_t> ConvTransposeForwardScratch(CudaContext& ctx, const ForwardArgs& args) {
  ASSIGN_OR_RETURN(
      const ConvTransposeGeometry t,
      ConvTransposeGeometryOf(args.inputs[0], args.inputs[1], args.outputs[0], *args.attrs));
  ASSIGN_OR_RETURN(ConvPlan * plan, ConvPlanFor(ctx, t.conv, /*bias=*/false));
  return CudaContext::ScratchTotal(ConvTransposeForwardPieces(*plan, t));
}

absl::StatusOr<uint64_t> ConvTransposeBackwardScratch(CudaContext& ctx, const BackwardArgs& args) {
  ASSIGN_OR_RETURN(
      const ConvTransposeGeometry t,
      ConvTransposeGeometryOf(args.inputs[0], args.inputs[1], args.outputs[0], *args.attrs));
  ASSIGN_OR_RETURN(ConvPlan * plan, ConvPlanFor(ctx, t.conv, /*bias=*/false));
  return CudaContext::ScratchTotal(ConvTransposeBackwardPieces(*plan, t));
}

absl::Status ConvTransposeForward(CudaContext& ctx, const ForwardArgs& args) {
  const TensorView& x = args.inputs[0];
  const TensorView& weight = args.inputs[1];
  const TensorView& y = args.outputs[0];
  RETURN_IF_ERROR(RequireF32(x, "input 'x'"));
  RETURN_IF_ERROR(RequireF32(weight, "input 'weight'"));
  const bool has_bias = args.inputs.size() > 2 && args.inputs[2].present();
  if (has_bias) RETURN_IF_ERROR(RequireF32(args.inputs[2], "input 'bias'"));
  ASSIGN_OR_RETURN(const ConvTransposeGeometry t,
                   ConvTransposeGeometryOf(x, weight, y, *args.attrs));
  ASSIGN_OR_RETURN(ConvPlan * plan, ConvPlanFor(ctx, t.conv, /*bias=*/false));
  ASSIGN_OR_RETURN(std::vector<void*> scratch,
                   ctx.Scratch(args, ConvTransposeForwardPieces(*plan, t)));
  const float one = 1.0f, zero = 0.0f;
  HR_CUDNN(cudnnSetConvolutionMathType(plan->conv, plan->bwd_data_math));
  HR_CUDNN(cudnnConvolutionBackwardData(ctx.cudnn, &one, plan->w, weight.data, plan->y, x.data,
                                        plan->conv, plan->bwd_data_algo, scratch[0],
                                        plan->bwd_data_bytes, &zero, plan->x, scratch[1]));
  const int64_t total = y.num_elements();
  CropFullKernel<<<GridFor(total), kThreads, 0, ctx.compute>>>(
      static_cast<const float*>(scratch[1]), has_bias ? args.inputs[2].f32() : nullptr, y.f32(),
      t.out_c, t.conv.h, t.conv.w, t.out_h, t.out_w, t.pad_top, t.pad_left, total);
  HR_CUDA_LAUNCHED("CropFullKernel");
  return absl::OkStatus();
}

absl::Status ConvTransposeBackward(CudaContext& ctx, const BackwardArgs& args) {
  const TensorView& x = args.inputs[0];
  const TensorView& weight = args.inputs[1];
  const TensorView& dy = args.output_grads[0];
  const TensorView& dx = args.input_grads[0];
  const TensorView& dw = args.input_grads[1];
  const TensorView* db =
      args.input_grads.size() > 2 && args.input_grads[2].present() ? &args.input_grads[2] : nullptr;
  if (!dy.present()) {
    for (const TensorView& g : args.input_grads) RETURN_IF_ERROR(ZeroIfPresent(ctx, g));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(const ConvTransposeGeometry t,
                   ConvTransposeGeometryOf(x, weight, args.outputs[0], *args.attrs));
  ASSIGN_OR_RETURN(ConvPlan * plan, ConvPlanFor(ctx, t.conv, /*bias=*/false));
  ASSIGN_OR_RETURN(std::vector<void*> scratch,
                   ctx.Scratch(args, ConvTransposeBackwardPieces(*plan, t)));
  const float one = 1.0f, zero = 0.0f;
  if (dx.present() || dw.present()) {
    const int64_t total = t.conv.n * t.conv.c * t.conv.h * t.conv.w;
    PadToFullKernel<<<GridFor(total), kThreads, 0, ctx.compute>>>(
        dy.f32(), static_cast<float*>(scratch[1]), t.conv.h, t.conv.w, t.out_h, t.out_w, t.pad_top,
        t.pad_left, total);
    HR_CUDA_LAUNCHED("PadToFullKernel");
  }
  if (dw.present()) {
    RETURN_IF_ERROR(RequireF32(x, "input 'x'"));
    HR_CUDNN(cudnnSetConvolutionMathType(plan->conv, plan->bwd_filter_math));
    HR_CUDNN(cudnnConvolutionBackwardFilter(ctx.cudnn, &one, plan->x, scratch[1], plan->y, x.data,
                                            plan->conv, plan->bwd_filter_algo, scratch[0],
                                            plan->bwd_filter_bytes, &zero, plan->w, dw.data));
  }
  if (dx.present()) {
    RETURN_IF_ERROR(RequireF32(weight, "input 'weight'"));
    HR_CUDNN(cudnnSetConvolutionMathType(plan->conv, plan->fwd_math));
    HR_CUDNN(cudnnConvolutionForward(ctx.cudnn, &one, plan->x, scratch[1], plan->w, weight.data,
                                     plan->conv, plan->fwd_algo, scratch[0], plan->fwd_bytes, &zero,
                                     plan->y, dx.data));
  }
  if (db != nullptr) {
    ChannelSumsKernel<<<RowGrid(t.out_c), kThreads, 0, ctx.compute>>>(dy.f32(), db->f32(), t.conv.n,
                                                                      t.out_c, t.out_h * t.out_w);
    HR_CUDA_LAUNCHED("ChannelSumsKernel");
  }
  return absl::OkStatus();
}

// ---- BatchNorm --------------------------------------------------------------------------

struct BatchNormPlan {
  cudnnTensorDescriptor_t x = nullptr;
  cudnnTensorDescriptor_t channel = nullptr;  // [1, C, 1, 1]
  ~BatchNormPlan() {
    if (x != nullptr) cudnnDestroyTensorDescriptor(x);
    if (channel != nullptr) cudnnDestroyTensorDescriptor(channel);
  }
};

// x is [N, C] or [N, C, H, W]; seen as [N, C, H, W] with H = W = 1 for 2 dims.
absl::StatusOr<BatchNormPlan*> BatchNormPlanFor(CudaContext& ctx, const TensorView& x) {
  const int64_t n = x.dim(0), c = x.dim(1);
  const int64_t h = x.rank() == 4 ? x.dim(2) : 1;
  const int64_t w = x.rank() == 4 ? x.dim(3) : 1;
  return ctx.Cached<BatchNormPlan>(
      absl::StrCat("BatchNorm:", n, ",", c, ",", h, ",", w),
      [&]() -> absl::StatusOr<std::shared_ptr<BatchNormPlan>> {
        auto plan = std::make_shared<BatchNormPlan>();
        HR_CUDNN(cudnnCreateTensorDescriptor(&plan->x));
        HR_CUDNN(cudnnCreateTensorDescriptor(&plan->channel));
        RETURN_IF_ERROR(SetNchw(plan->x, n, c, h, w, "input 'x'"));
        HR_CUDNN(cudnnDeriveBNTensorDescriptor(plan->channel, plan->x, CUDNN_BATCHNORM_SPATIAL));
        return plan;
      });
}

// y = (x - mean[c]) invstd[c] weight[c] + bias[c] over x [N, C, plane]: a training
// re-forward normalising with the statistics its forward saved (cuDNN's mean and inverse
// std). Elementwise: y may be x.
__global__ void GivenStatisticsKernel(const float* x, const float* mean, const float* invstd,
                                      const float* weight, const float* bias, float* y,
                                      int64_t total, int64_t channels, int64_t plane) {
  GRID_STRIDE_LOOP(i, total) {
    const int64_t c = (i / plane) % channels;
    y[i] = (x[i] - mean[c]) * invstd[c] * weight[c] + bias[c];
  }
}

absl::Status BatchNormForward(CudaContext& ctx, const ForwardArgs& args) {
  const TensorView& x = args.inputs[0];
  const TensorView& y = args.outputs[0];
  RETURN_IF_ERROR(RequireF32(x, "input 'x'"));
  RETURN_IF_ERROR(RequireF32(args.inputs[1], "input 'weight'"));
  RETURN_IF_ERROR(RequireF32(args.inputs[2], "input 'bias'"));
  if (x.rank() != 2 && x.rank() != 4) {
    return absl::InvalidArgumentError(absl::StrCat("input 'x' has ", x.rank(), " dims"));
  }
  ASSIGN_OR_RETURN(BatchNormPlan * plan, BatchNormPlanFor(ctx, x));
  const double eps = args.attrs->Float("epsilon");
  const float one = 1.0f, zero = 0.0f;
  if (!args.training) {
    if (args.inputs.size() < 5) {
      return absl::InvalidArgumentError("inference needs running_mean and running_var inputs");
    }
    RETURN_IF_ERROR(RequireF32(args.inputs[3], "input 'running_mean'"));
    RETURN_IF_ERROR(RequireF32(args.inputs[4], "input 'running_var'"));
    HR_CUDNN(cudnnBatchNormalizationForwardInference(
        ctx.cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, plan->x, x.data, plan->x, y.data,
        plan->channel, args.inputs[1].data, args.inputs[2].data, args.inputs[3].data,
        args.inputs[4].data, eps));
    return absl::OkStatus();
  }
  if (args.saved_statistics_given) {  // A re-forward: the forward's statistics, no update.
    if (args.saved.size() < 2) {
      return absl::InvalidArgumentError("statistics given but no saved mean and invstd");
    }
    RETURN_IF_ERROR(RequireF32(args.saved[0], "saved mean"));
    RETURN_IF_ERROR(RequireF32(args.saved[1], "saved invstd"));
    const int64_t total = x.num_elements();
    GivenStatisticsKernel<<<GridFor(total), kThreads, 0, ctx.compute>>>(
        x.f32(), args.saved[0].f32(), args.saved[1].f32(), args.inputs[1].f32(),
        args.inputs[2].f32(), y.f32(), total, x.dim(1), total / (x.dim(0) * x.dim(1)));
    HR_CUDA_LAUNCHED("GivenStatisticsKernel");
    return absl::OkStatus();
  }
  // In place (y aliases x): normalise a copy, cuDNN does not promise to read x before
  // writing y.
  const void* x_data = x.data;
  if (y.data == x.data) {
    // Never planned: a training step keeps x for the backward, so y never takes its bytes.
    ASSIGN_OR_RETURN(std::vector<void*> scratch, ctx.Scratch(args, {x.bytes()}));
    HR_CUDA(cudaMemcpyAsync(scratch[0], x.data, x.bytes(), cudaMemcpyDeviceToDevice,
                            ctx.compute));
    x_data = scratch[0];
  }
  void* running_mean = nullptr;
  void* running_var = nullptr;
  if (args.running.size() >= 2) {
    RETURN_IF_ERROR(RequireF32(args.running[0], "running_mean"));
    RETURN_IF_ERROR(RequireF32(args.running[1], "running_var"));
    running_mean = args.running[0].data;
    running_var = args.running[1].data;
  }
  void* saved_mean = nullptr;
  void* saved_invstd = nullptr;
  if (args.saved.size() >= 2 && args.saved[0].present() && args.saved[1].present()) {
    saved_mean = args.saved[0].data;
    saved_invstd = args.saved[1].data;
  }
  // cuDNN updates the running variance with the unbiased batch variance, as PyTorch.
  HR_CUDNN(cudnnBatchNormalizationForwardTraining(
      ctx.cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, plan->x, x_data, plan->x, y.data,
      plan->channel, args.inputs[1].data, args.inputs[2].data, args.attrs->Float("momentum"),
      running_mean, running_var, eps, saved_mean, saved_invstd));
  return absl::OkStatus();
}

// cuDNN computes all three gradients; absent ones go to scratch. Without dx the weight is
// not given either; it scales only dx, so any C floats do.
std::vector<uint64_t> BatchNormBackwardPieces(const BackwardArgs& args) {
  const TensorView& x = args.inputs[0];
  const uint64_t channel_bytes = x.dim(1) * sizeof(float);
  return {args.input_grads[0].present() ? 0 : x.bytes(),
          args.input_grads[1].present() ? 0 : channel_bytes,
          args.input_grads[2].present() ? 0 : channel_bytes,
          args.inputs[1].present() ? 0 : channel_bytes};
}

absl::StatusOr<uint64_t> BatchNormBackwardScratch(CudaContext&, const BackwardArgs& args) {
  if (args.inputs.size() < 3 || args.input_grads.size() < 3 || args.inputs[0].rank() < 2) {
    return absl::InvalidArgumentError("BatchNorm backward needs x, weight, bias and their "
                                      "gradients");
  }
  return CudaContext::ScratchTotal(BatchNormBackwardPieces(args));
}

absl::Status BatchNormBackward(CudaContext& ctx, const BackwardArgs& args) {
  const TensorView& x = args.inputs[0];
  RETURN_IF_ERROR(RequireF32(x, "input 'x'"));
  if (args.saved.size() < 2) return absl::InvalidArgumentError("needs saved mean and invstd");
  RETURN_IF_ERROR(RequireF32(args.saved[0], "saved mean"));
  RETURN_IF_ERROR(RequireF32(args.saved[1], "saved invstd"));
  const TensorView& dx = args.input_grads[0];
  const TensorView& dw = args.input_grads[1];
  const TensorView& db = args.input_grads[2];
  const TensorView& weight = args.inputs[1];
  ASSIGN_OR_RETURN(BatchNormPlan * plan, BatchNormPlanFor(ctx, x));
  ASSIGN_OR_RETURN(std::vector<void*> scratch, ctx.Scratch(args, BatchNormBackwardPieces(args)));
  if (dx.present()) RETURN_IF_ERROR(RequireF32(weight, "input 'weight'"));
  const float one = 1.0f, zero = 0.0f;
  HR_CUDNN(cudnnBatchNormalizationBackward(
      ctx.cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, plan->x, x.data, plan->x,
      args.output_grads[0].data, plan->x, dx.present() ? dx.data : scratch[0], plan->channel,
      weight.present() ? weight.data : scratch[3], dw.present() ? dw.data : scratch[1],
      db.present() ? db.data : scratch[2], args.attrs->Float("epsilon"), args.saved[0].data,
      args.saved[1].data));
  return absl::OkStatus();
}

// ---- Activations ------------------------------------------------------------------------

// Elementwise cuDNN calls see a tensor as [1, 1, 1, count], in chunks of at most this many.
constexpr int64_t kActivationChunk = int64_t{1} << 30;

struct ActivationPlan {
  cudnnActivationDescriptor_t act = nullptr;
  ~ActivationPlan() {
    if (act != nullptr) cudnnDestroyActivationDescriptor(act);
  }
};

absl::StatusOr<ActivationPlan*> ActivationPlanFor(CudaContext& ctx, const std::string& op) {
  return ctx.Cached<ActivationPlan>(
      absl::StrCat("Activation:", op), [&]() -> absl::StatusOr<std::shared_ptr<ActivationPlan>> {
        cudnnActivationMode_t mode;
        double coef = 0.0;
        if (op == "ReLU") {
          mode = CUDNN_ACTIVATION_RELU;
        } else if (op == "ReLU6") {
          mode = CUDNN_ACTIVATION_CLIPPED_RELU;
          coef = 6.0;
        } else if (op == "Sigmoid") {
          mode = CUDNN_ACTIVATION_SIGMOID;
        } else if (op == "Tanh") {
          mode = CUDNN_ACTIVATION_TANH;
        } else {
          return absl::InternalError(absl::StrCat("no cuDNN activation for ", op));
        }
        auto plan = std::make_shared<ActivationPlan>();
        HR_CUDNN(cudnnCreateActivationDescriptor(&plan->act));
        HR_CUDNN(cudnnSetActivationDescriptor(plan->act, mode, CUDNN_PROPAGATE_NAN, coef));
        return plan;
      });
}

// A [1, 1, 1, count] descriptor, destroyed with the object.
class FlatDesc {
 public:
  ~FlatDesc() {
    if (desc_ != nullptr) cudnnDestroyTensorDescriptor(desc_);
  }
  absl::Status Set(int64_t count) {
    if (desc_ == nullptr) HR_CUDNN(cudnnCreateTensorDescriptor(&desc_));
    return SetNchw(desc_, 1, 1, 1, count, "a chunk");
  }
  cudnnTensorDescriptor_t get() const { return desc_; }

 private:
  cudnnTensorDescriptor_t desc_ = nullptr;
};

absl::Status ActivationForward(CudaContext& ctx, const ForwardArgs& args) {
  const TensorView& x = args.inputs[0];
  RETURN_IF_ERROR(RequireF32(x, "input 'x'"));
  ASSIGN_OR_RETURN(ActivationPlan * plan, ActivationPlanFor(ctx, args.op));
  const float one = 1.0f, zero = 0.0f;
  const int64_t n = x.num_elements();
  FlatDesc desc;
  for (int64_t at = 0; at < n; at += kActivationChunk) {
    RETURN_IF_ERROR(desc.Set(std::min(kActivationChunk, n - at)));
    HR_CUDNN(cudnnActivationForward(ctx.cudnn, plan->act, &one, desc.get(), x.f32() + at, &zero,
                                    desc.get(), args.outputs[0].f32() + at));
  }
  return absl::OkStatus();
}

// The activations' backward from y on an own kernel (activation_math.h: the CPU backend's
// and PyTorch's derivatives), not cuDNN's, which takes x: given y in its place, its clipped
// ReLU let the gradient through where x > 6.
template <ActivationKind kKind>
__global__ void ActivationBackwardKernel(const float* y, const float* dy, float* dx, int64_t n) {
  GRID_STRIDE_LOOP(i, n) dx[i] = ActivationGradFromY<kKind>(y[i], dy[i]);
}

// dx may alias dy: each element reads its own dy before writing dx.
absl::Status ActivationBackward(CudaContext& ctx, const BackwardArgs& args) {
  const TensorView& dx = args.input_grads[0];
  if (!dx.present()) return absl::OkStatus();
  const TensorView& y = args.outputs[0];
  RETURN_IF_ERROR(RequireF32(y, "output 'y'"));
  RETURN_IF_ERROR(RequireF32(args.output_grads[0], "gradient of output 'y'"));
  RETURN_IF_ERROR(RequireF32(dx, "gradient of input 'x'"));
  const int64_t n = y.num_elements();
  if (dx.num_elements() != n || args.output_grads[0].num_elements() != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "output 'y' ", graph::ShapeString(y.shape), ", its gradient ",
        graph::ShapeString(args.output_grads[0].shape), " and the gradient of input 'x' ",
        graph::ShapeString(dx.shape), " differ in size"));
  }
  const float* v = y.f32();
  const float* dy = args.output_grads[0].f32();
  float* out = dx.f32();
  const unsigned grid = GridFor(n);
  if (args.op == "ReLU") {
    ActivationBackwardKernel<ActivationKind::kRelu>
        <<<grid, kThreads, 0, ctx.compute>>>(v, dy, out, n);
  } else if (args.op == "ReLU6") {
    ActivationBackwardKernel<ActivationKind::kRelu6>
        <<<grid, kThreads, 0, ctx.compute>>>(v, dy, out, n);
  } else if (args.op == "Sigmoid") {
    ActivationBackwardKernel<ActivationKind::kSigmoid>
        <<<grid, kThreads, 0, ctx.compute>>>(v, dy, out, n);
  } else if (args.op == "Tanh") {
    ActivationBackwardKernel<ActivationKind::kTanh>
        <<<grid, kThreads, 0, ctx.compute>>>(v, dy, out, n);
  } else {
    return absl::InternalError(absl::StrCat("no activation backward for ", args.op));
  }
  HR_CUDA_LAUNCHED("ActivationBackwardKernel");
  return absl::OkStatus();
}

}  // namespace

void RegisterDnnKernels(KernelTable* table) {
  (*table)["Conv2D"] = {ConvForward, ConvBackward, ConvForwardScratch, ConvBackwardScratch};
  (*table)["ConvTranspose2D"] = {ConvTransposeForward, ConvTransposeBackward,
                                 ConvTransposeForwardScratch, ConvTransposeBackwardScratch};
  (*table)["BatchNorm"] = {BatchNormForward, BatchNormBackward, nullptr,
                           BatchNormBackwardScratch};
  for (const char* op : {"ReLU", "ReLU6", "Sigmoid", "Tanh"}) {
    (*table)[op] = {ActivationForward, ActivationBackward};
  }
}

}  // namespace headroom::executor::cuda
