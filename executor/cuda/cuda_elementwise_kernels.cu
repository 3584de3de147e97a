// The CUDA backend's elementwise and data-movement kernels: GELU, Dropout, Add and Mul with
// numpy broadcasting, Flatten, Reshape, Transpose, Slice, Expand (the strided walks of
// executor/strided_walk.h), Concat, Split; the optimizer steps, Accumulate, Fill, and the
// column sums bias gradients use.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "executor/cuda/cuda_context.h"
#include "executor/cuda/cuda_device_utils.h"
#include "executor/cuda/optimizer_math.h"
#include "executor/dropout_mask.h"
#include "executor/strided_walk.h"

namespace headroom::executor::cuda {
namespace {

constexpr int kMaxRank = 8;

// ---- Small kernels ----------------------------------------------------------------------

__global__ void FillKernel(float* out, int64_t n, float value) {
  GRID_STRIDE_LOOP(i, n) out[i] = value;
}

__global__ void AddKernel(const float* a, const float* b, float* out, int64_t n) {
  GRID_STRIDE_LOOP(i, n) out[i] = a[i] + b[i];
}

// ---- GELU -------------------------------------------------------------------------------

constexpr float kSqrtHalf = 0.70710678118654752f;     // 1/sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143268f;   // 1/sqrt(2 pi)
constexpr float kSqrt2OverPi = 0.79788456080286536f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

template <bool kTanh>
__global__ void GeluForwardKernel(const float* x, float* y, int64_t n) {
  GRID_STRIDE_LOOP(i, n) {
    const float v = x[i];
    if (kTanh) {
      y[i] = 0.5f * v * (1.0f + tanhf(kSqrt2OverPi * (v + kGeluCubic * v * v * v)));
    } else {
      y[i] = 0.5f * v * (1.0f + erff(v * kSqrtHalf));
    }
  }
}

template <bool kTanh>
__global__ void GeluBackwardKernel(const float* x, const float* dy, float* dx, int64_t n) {
  GRID_STRIDE_LOOP(i, n) {
    const float v = x[i];
    float grad;
    if (kTanh) {
      const float t = tanhf(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
      grad = 0.5f * (1.0f + t) +
             0.5f * v * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
    } else {
      grad = 0.5f * (1.0f + erff(v * kSqrtHalf)) + v * kInvSqrt2Pi * expf(-0.5f * v * v);
    }
    dx[i] = dy[i] * grad;
  }
}

absl::Status GeluForward(CudaContext& ctx, const ForwardArgs& args) {
  const TensorView& x = args.inputs[0];
  const TensorView& y = args.outputs[0];
  RETURN_IF_ERROR(RequireF32(x, "input 'x'"));
  const int64_t n = x.num_elements();
  if (args.attrs->String("approximate") == "tanh") {
    GeluForwardKernel<true><<<GridFor(n), kThreads, 0, ctx.compute>>>(x.f32(), y.f32(), n);
  } else {
    GeluForwardKernel<false><<<GridFor(n), kThreads, 0, ctx.compute>>>(x.f32(), y.f32(), n);
  }
  HR_CUDA_LAUNCHED("GeluForwardKernel");
  return absl::OkStatus();
}

absl::Status GeluBackward(CudaContext& ctx, const BackwardArgs& args) {
  const TensorView& dx = args.input_grads[0];
  if (!dx.present()) return absl::OkStatus();
  const TensorView& x = args.inputs[0];
  const TensorView& dy = args.output_grads[0];
  RETURN_IF_ERROR(RequireF32(x, "input 'x'"));
  const int64_t n = x.num_elements();
  if (args.attrs->String("approximate") == "tanh") {
    GeluBackwardKernel<true>
        <<<GridFor(n), kThreads, 0, ctx.compute>>>(x.f32(), dy.f32(), dx.f32(), n);
  } else {
    GeluBackwardKernel<false>
        <<<GridFor(n), kThreads, 0, ctx.compute>>>(x.f32(), dy.f32(), dx.f32(), n);
  }
  HR_CUDA_LAUNCHED("GeluBackwardKernel");
  return absl::OkStatus();
}

// ---- Dropout ----------------------------------------------------------------------------

// Keeps element i as the CPU backend does (executor/dropout_mask.h): a pure function of
// (seed, i), so a re-forward with the same seed writes the same mask.
__global__ void DropoutForwardKernel(const float* x, float* y, uint8_t* mask, int64_t n,
                                     uint64_t stream, uint64_t threshold, float scale) {
  GRID_STRIDE_LOOP(i, n) {
    const bool keep = DropoutKeeps(stream, i, threshold);
    if (mask != nullptr) mask[i] = keep ? 1 : 0;
    y[i] = keep ? x[i] * scale : 0.0f;
  }
}

__global__ void DropoutBackwardKernel(const float* dy, const uint8_t* mask, float* dx, int64_t n,
                                      float scale) {
  GRID_STRIDE_LOOP(i, n) dx[i] = mask[i] != 0 ? dy[i] * scale : 0.0f;
}

absl::Status DropoutForward(CudaContext& ctx, const ForwardArgs& args) {
  const TensorView& x = args.inputs[0];
  const TensorView& y = args.outputs[0];
  RETURN_IF_ERROR(RequireF32(x, "input 'x'"));
  const double rate = args.attrs->Float("rate");
  if (!(rate >= 0.0 && rate < 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'rate' is ", rate, ", needs [0, 1)"));
  }
  const int64_t n = x.num_elements();
  uint8_t* mask = args.saved.empty() ? nullptr : args.saved[0].u8();
  if (!args.training || rate == 0.0) {
    // The identity; a training forward still writes its all-keep mask.
    RETURN_IF_ERROR(CopyIfDistinct(ctx, y.data, x.data, x.bytes()));
    if (args.training && mask != nullptr) {
      HR_CUDA(cudaMemsetAsync(mask, 1, n, ctx.compute));
    }
    return absl::OkStatus();
  }
  DropoutForwardKernel<<<GridFor(n), kThreads, 0, ctx.compute>>>(
      x.f32(), y.f32(), mask, n, DropoutStream(args.seed), DropoutKeepThreshold(rate),
      DropoutScale(rate));
  HR_CUDA_LAUNCHED("DropoutForwardKernel");
  return absl::OkStatus();
}

absl::Status DropoutBackward(CudaContext& ctx, const BackwardArgs& args) {
  const TensorView& dx = args.input_grads[0];
  if (!dx.present()) return absl::OkStatus();
  if (args.saved.empty() || !args.saved[0].present()) {
    return absl::InvalidArgumentError("the saved keep-mask is not given");
  }
  const TensorView& dy = args.output_grads[0];
  const int64_t n = dx.num_elements();
  DropoutBackwardKernel<<<GridFor(n), kThreads, 0, ctx.compute>>>(
      dy.f32(), args.saved[0].u8(), dx.f32(), n, DropoutScale(args.attrs->Float("rate")));
  HR_CUDA_LAUNCHED("DropoutBackwardKernel");
  return absl::OkStatus();
}

// ---- Broadcasting binary ops ------------------------------------------------------------

// Returns the contiguous strides of `shape`.
std::vector<int64_t> ContiguousStrides(const graph::Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) {
    strides[d] = strides[d + 1] * shape[d + 1];
  }
  return strides;
}

// Returns the strides of `shape` seen as `rank` dims aligned to the right, 0 on dims of
// size 1 (and on missing leading dims): where a broadcast input repeats.
std::vector<int64_t> BroadcastStrides(const graph::Shape& shape, int rank) {
  std::vector<int64_t> own = ContiguousStrides(shape);
  std::vector<int64_t> out(rank, 0);
  const int lead = rank - static_cast<int>(shape.size());
  for (int d = 0; d < static_cast<int>(shape.size()); ++d) {
    out[lead + d] = shape[d] == 1 ? 0 : own[d];
  }
  return out;
}

// Output dims and each operand's strides into them, passed to kernels by value.
struct BroadcastPlan {
  int rank = 0;
  int64_t dims[kMaxRank];
  int64_t a_strides[kMaxRank];
  int64_t b_strides[kMaxRank];
};

absl::StatusOr<BroadcastPlan> MakeBroadcastPlan(const graph::Shape& out, const graph::Shape& a,
                                                const graph::Shape& b) {
  if (out.size() > kMaxRank) {
    return absl::UnimplementedError(
        absl::StrCat("broadcasting over ", out.size(), " dims; at most ", kMaxRank));
  }
  BroadcastPlan p;
  p.rank = static_cast<int>(out.size());
  std::vector<int64_t> sa = BroadcastStrides(a, p.rank);
  std::vector<int64_t> sb = BroadcastStrides(b, p.rank);
  for (int d = 0; d < p.rank; ++d) {
    p.dims[d] = out[d];
    p.a_strides[d] = sa[d];
    p.b_strides[d] = sb[d];
  }
  return p;
}

// Two element offsets of one position: into operands laid out with different strides.
struct OffsetPair {
  int64_t first, second;
};

// Returns the offsets of flat (row-major) index `i` over `dims` [rank] into tensors with
// strides `first` and `second`, each added to its `base`.
__device__ OffsetPair OffsetsOf(int64_t i, int rank, const int64_t* dims, const int64_t* first,
                                const int64_t* second, OffsetPair base = {0, 0}) {
  int64_t rest = i;
  for (int d = rank - 1; d >= 0; --d) {
    const int64_t c = rest % dims[d];
    rest /= dims[d];
    base.first += c * first[d];
    base.second += c * second[d];
  }
  return base;
}

// The elementwise op of a binary kernel: the four arithmetic ops, and -a * b (Div's
// divisor gradient, dy times (a / b) / b negated as PyTorch rounds it).
enum class BinaryOp { kAdd, kMul, kSub, kDiv, kNegMul };

template <BinaryOp kOp>
__device__ float ApplyBinary(float u, float v) {
  if constexpr (kOp == BinaryOp::kAdd) return u + v;
  if constexpr (kOp == BinaryOp::kMul) return u * v;
  if constexpr (kOp == BinaryOp::kSub) return u - v;
  if constexpr (kOp == BinaryOp::kDiv) return u / v;
  return -u * v;
}

template <BinaryOp kOp>
__global__ void BroadcastBinaryKernel(const float* a, const float* b, float* out, int64_t n,
                                      BroadcastPlan p) {
  GRID_STRIDE_LOOP(i, n) {
    const OffsetPair at = OffsetsOf(i, p.rank, p.dims, p.a_strides, p.b_strides);
    out[i] = ApplyBinary<kOp>(a[at.first], b[at.second]);
  }
}

template <BinaryOp kOp>
__global__ void SameShapeBinaryKernel(const float* a, const float* b, float* out, int64_t n) {
  GRID_STRIDE_LOOP(i, n) out[i] = ApplyBinary<kOp>(a[i], b[i]);
}

// out = a (op) b over out's shape, a and b broadcasting into it. out may alias an operand
// of out's size (each element reads only its own index of that operand).
template <BinaryOp kOp>
absl::Status LaunchBinary(CudaContext& ctx, const TensorView& a, const TensorView& b,
                          const TensorView& out) {
  const int64_t n = out.num_elements();
  if (a.shape == out.shape && b.shape == out.shape) {
    SameShapeBinaryKernel<kOp>
        <<<GridFor(n), kThreads, 0, ctx.compute>>>(a.f32(), b.f32(), out.f32(), n);
  } else {
    ASSIGN_OR_RETURN(BroadcastPlan plan, MakeBroadcastPlan(out.shape, a.shape, b.shape));
    BroadcastBinaryKernel<kOp>
        <<<GridFor(n), kThreads, 0, ctx.compute>>>(a.f32(), b.f32(), out.f32(), n, plan);
  }
  HR_CUDA_LAUNCHED("BroadcastBinaryKernel");
  return absl::OkStatus();
}

__global__ void NegateKernel(float* x, int64_t n) { GRID_STRIDE_LOOP(i, n) x[i] = -x[i]; }

// How dy (over the output's dims) reduces to an input's shape: the dims kept (the input's
// own, in order) and the dims summed over, with dy's strides and those of the other operand
// of a Mul along each.
struct ReducePlan {
  int kept_rank = 0;
  int64_t kept_dims[kMaxRank];
  int64_t kept_dy[kMaxRank];
  int64_t kept_other[kMaxRank];
  int reduced_rank = 0;
  int64_t reduced_dims[kMaxRank];
  int64_t reduced_dy[kMaxRank];
  int64_t reduced_other[kMaxRank];
  int64_t reduced_count = 1;
};

absl::StatusOr<ReducePlan> MakeReducePlan(const graph::Shape& out, const graph::Shape& target,
                                          const graph::Shape& other) {
  if (out.size() > kMaxRank) {
    return absl::UnimplementedError(
        absl::StrCat("broadcasting over ", out.size(), " dims; at most ", kMaxRank));
  }
  const int rank = static_cast<int>(out.size());
  std::vector<int64_t> dy_strides = ContiguousStrides(out);
  std::vector<int64_t> other_strides = BroadcastStrides(other, rank);
  const int lead = rank - static_cast<int>(target.size());
  ReducePlan p;
  for (int d = 0; d < rank; ++d) {
    const int64_t target_dim = d < lead ? 1 : target[d - lead];
    if (target_dim == 1 && out[d] > 1) {
      p.reduced_dims[p.reduced_rank] = out[d];
      p.reduced_dy[p.reduced_rank] = dy_strides[d];
      p.reduced_other[p.reduced_rank] = other_strides[d];
      ++p.reduced_rank;
      p.reduced_count *= out[d];
    } else {
      p.kept_dims[p.kept_rank] = out[d];
      p.kept_dy[p.kept_rank] = dy_strides[d];
      p.kept_other[p.kept_rank] = other_strides[d];
      ++p.kept_rank;
    }
  }
  return p;
}

// One block per element j of the input's gradient: sums dy (times the broadcast other
// operand, for Mul) over the dims the input was broadcast along.
__global__ void ReduceBroadcastKernel(const float* dy, const float* other, float* out,
                                      int64_t out_n, ReducePlan p) {
  __shared__ float partial[kThreads];
  for (int64_t j = blockIdx.x; j < out_n; j += gridDim.x) {
    // The element's dy offset first, the other operand's second.
    const OffsetPair base = OffsetsOf(j, p.kept_rank, p.kept_dims, p.kept_dy, p.kept_other);
    float sum = 0.0f;
    for (int64_t r = threadIdx.x; r < p.reduced_count; r += blockDim.x) {
      const OffsetPair at =
          OffsetsOf(r, p.reduced_rank, p.reduced_dims, p.reduced_dy, p.reduced_other, base);
      sum += other != nullptr ? dy[at.first] * other[at.second] : dy[at.first];
    }
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
      __syncthreads();
    }
    if (threadIdx.x == 0) out[j] = partial[0];
    __syncthreads();
  }
}

// Writes the gradient of one operand of Add (other == nullptr) or Mul (other: the other
// operand) into dx. dx may alias dy.
absl::Status BinaryInputGrad(CudaContext& ctx, const TensorView& dy, const TensorView* other,
                             const TensorView& dx) {
  if (dx.num_elements() == dy.num_elements()) {
    // No broadcast along any dim: elementwise.
    if (other == nullptr) return CopyIfDistinct(ctx, dx.data, dy.data, dx.bytes());
    TensorView out = dx;
    out.shape = dy.shape;
    return LaunchBinary<BinaryOp::kMul>(ctx, dy, *other, out);
  }
  const graph::Shape other_shape = other != nullptr ? other->shape : graph::Shape{};
  ASSIGN_OR_RETURN(ReducePlan plan, MakeReducePlan(dy.shape, dx.shape, other_shape));
  float* out = dx.f32();
  if (dx.data == dy.data) {
    // Reduce into scratch, then copy: blocks would overwrite dy others still read. Never
    // planned: a plan lets dx take dy's bytes only when they are the same size, and then
    // nothing is reduced.
    ASSIGN_OR_RETURN(std::vector<void*> scratch, ctx.Scratch(nullptr, 0, {dx.bytes()}));
    out = static_cast<float*>(scratch[0]);
  }
  const int64_t n = dx.num_elements();
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(n, int64_t{1} << 20));
  ReduceBroadcastKernel<<<blocks, kThreads, 0, ctx.compute>>>(
      dy.f32(), other != nullptr ? other->f32() : nullptr, out, n, plan);
  HR_CUDA_LAUNCHED("ReduceBroadcastKernel");
  return CopyIfDistinct(ctx, dx.data, out, dx.bytes());
}

template <BinaryOp kOp>
absl::Status BinaryForward(CudaContext& ctx, const ForwardArgs& args) {
  RETURN_IF_ERROR(RequireF32(args.inputs[0], "input 'a'"));
  RETURN_IF_ERROR(RequireF32(args.inputs[1], "input 'b'"));
  return LaunchBinary<kOp>(ctx, args.inputs[0], args.inputs[1], args.outputs[0]);
}

// The order in which to write the two input gradients: the one that aliases dy (if one
// does) goes last, so the other still reads dy intact.
std::vector<int> BinaryGradOrder(const BackwardArgs& args) {
  if (args.input_grads[0].data == args.output_grads[0].data) return {1, 0};
  return {0, 1};
}

template <BinaryOp kOp>
absl::Status BinaryBackward(CudaContext& ctx, const BackwardArgs& args) {
  const TensorView& dy = args.output_grads[0];
  for (int i : BinaryGradOrder(args)) {
    const TensorView& dx = args.input_grads[i];
    if (!dx.present()) continue;
    const TensorView* other = nullptr;
    if (kOp == BinaryOp::kMul) {
      other = &args.inputs[1 - i];
      RETURN_IF_ERROR(RequireF32(*other, i == 0 ? "input 'b'" : "input 'a'"));
    }
    RETURN_IF_ERROR(BinaryInputGrad(ctx, dy, other, dx));
    if (kOp == BinaryOp::kSub && i == 1) {
      // -(sum of dy) equals PyTorch's sum of -dy: negation is exact.
      const int64_t n = dx.num_elements();
      NegateKernel<<<GridFor(n), kThreads, 0, ctx.compute>>>(dx.f32(), n);
      HR_CUDA_LAUNCHED("NegateKernel");
    }
  }
  return absl::OkStatus();
}

// da = dy / b and db = -dy * ((a / b) / b), PyTorch 1.13's formulas, each staged over dy's
// shape in the workspace (it reads a, b and dy before a gradient that aliases dy is written),
// then summed over its broadcast dims.
absl::Status DivBackward(CudaContext& ctx, const BackwardArgs& args) {
  const TensorView& dy = args.output_grads[0];
  const TensorView& a = args.inputs[0];
  const TensorView& b = args.inputs[1];
  RETURN_IF_ERROR(RequireF32(b, "input 'b'"));
  for (int i : BinaryGradOrder(args)) {
    const TensorView& dx = args.input_grads[i];
    if (!dx.present()) continue;
    if (i == 0 && dx.num_elements() == dy.num_elements()) {
      TensorView out = dx;
      out.shape = dy.shape;
      RETURN_IF_ERROR(LaunchBinary<BinaryOp::kDiv>(ctx, dy, b, out));
      continue;
    }
    ASSIGN_OR_RETURN(std::vector<void*> scratch, ctx.Scratch(nullptr, 0, {dy.bytes()}));
    TensorView t = dy;
    t.data = scratch[0];
    if (i == 0) {
      RETURN_IF_ERROR(LaunchBinary<BinaryOp::kDiv>(ctx, dy, b, t));
    } else {
      RETURN_IF_ERROR(RequireF32(a, "input 'a'"));
      RETURN_IF_ERROR(LaunchBinary<BinaryOp::kDiv>(ctx, a, b, t));
      RETURN_IF_ERROR(LaunchBinary<BinaryOp::kDiv>(ctx, t, b, t));
      RETURN_IF_ERROR(LaunchBinary<BinaryOp::kNegMul>(ctx, dy, t, t));
    }
    RETURN_IF_ERROR(BinaryInputGrad(ctx, t, nullptr, dx));
  }
  return absl::OkStatus();
}

// ---- PReLU ------------------------------------------------------------------------------

// y = x where x > 0, else slope * x; the slope is read through `p`'s b strides.
__global__ void PReluForwardKernel(const float* x, const float* slope, float* y, int64_t n,
                                   BroadcastPlan p) {
  GRID_STRIDE_LOOP(i, n) {
    const OffsetPair at = OffsetsOf(i, p.rank, p.dims, p.a_strides, p.b_strides);
    const float u = x[i];
    y[i] = u > 0 ? u : slope[at.second] * u;
  }
}

// dx = dy where x > 0, else slope * dy (dx may alias dy).
__global__ void PReluInputGradKernel(const float* x, const float* slope, const float* dy, float* dx,
                                     int64_t n, BroadcastPlan p) {
  GRID_STRIDE_LOOP(i, n) {
    const OffsetPair at = OffsetsOf(i, p.rank, p.dims, p.a_strides, p.b_strides);
    dx[i] = x[i] > 0 ? dy[i] : slope[at.second] * dy[i];
  }
}

// t = 0 where x > 0, else x * dy: the slope's gradient before it is summed.
__global__ void PReluSlopeTermsKernel(const float* x, const float* dy, float* t, int64_t n) {
  GRID_STRIDE_LOOP(i, n) t[i] = x[i] > 0 ? 0.0f : x[i] * dy[i];
}

absl::Status PReluForward(CudaContext& ctx, const ForwardArgs& args) {
  const TensorView& x = args.inputs[0];
  const TensorView& slope = args.inputs[1];
  RETURN_IF_ERROR(RequireF32(x, "input 'x'"));
  RETURN_IF_ERROR(RequireF32(slope, "input 'slope'"));
  ASSIGN_OR_RETURN(BroadcastPlan plan, MakeBroadcastPlan(x.shape, x.shape, slope.shape));
  const int64_t n = x.num_elements();
  PReluForwardKernel<<<GridFor(n), kThreads, 0, ctx.compute>>>(x.f32(), slope.f32(),
                                                               args.outputs[0].f32(), n, plan);
  HR_CUDA_LAUNCHED("PReluForwardKernel");
  return absl::OkStatus();
}

// PyTorch 1.13's prelu backward; the slope's gradient first (staged over x's shape in the
// workspace, then summed over the broadcast dims), since dx may overwrite dy.
absl::Status PReluBackward(CudaContext& ctx, const BackwardArgs& args) {
  const TensorView& x = args.inputs[0];
  const TensorView& slope = args.inputs[1];
  const TensorView& dy = args.output_grads[0];
  const TensorView& dx = args.input_grads[0];
  const TensorView& ds = args.input_grads[1];
  RETURN_IF_ERROR(RequireF32(x, "input 'x'"));
  const int64_t n = x.num_elements();
  if (ds.present()) {
    ASSIGN_OR_RETURN(std::vector<void*> scratch, ctx.Scratch(nullptr, 0, {dy.bytes()}));
    TensorView t = dy;
    t.data = scratch[0];
    PReluSlopeTermsKernel<<<GridFor(n), kThreads, 0, ctx.compute>>>(x.f32(), dy.f32(), t.f32(), n);
    HR_CUDA_LAUNCHED("PReluSlopeTermsKernel");
    RETURN_IF_ERROR(BinaryInputGrad(ctx, t, nullptr, ds));
  }
  if (dx.present()) {
    RETURN_IF_ERROR(RequireF32(slope, "input 'slope'"));
    ASSIGN_OR_RETURN(BroadcastPlan plan, MakeBroadcastPlan(x.shape, x.shape, slope.shape));
    PReluInputGradKernel<<<GridFor(n), kThreads, 0, ctx.compute>>>(x.f32(), slope.f32(), dy.f32(),
                                                                   dx.f32(), n, plan);
    HR_CUDA_LAUNCHED("PReluInputGradKernel");
  }
  return absl::OkStatus();
}

// dx = dy summed over the dims Expand broadcast x along: Add's reduction.
absl::Status ExpandBackward(CudaContext& ctx, const BackwardArgs& args) {
  const TensorView& dx = args.input_grads[0];
  if (!dx.present()) return absl::OkStatus();
  RETURN_IF_ERROR(RequireF32(dx, "gradient of input 'x'"));
  RETURN_IF_ERROR(RequireF32(args.output_grads[0], "gradient of output 'y'"));
  RETURN_IF_ERROR(ExpandWalk(args.inputs[0].shape, args.outputs[0].shape).status());
  return BinaryInputGrad(ctx, args.output_grads[0], nullptr, dx);
}

// ---- Views and data movement ------------------------------------------------------------

absl::Status ViewForward(CudaContext& ctx, const ForwardArgs& args) {
  return CopyIfDistinct(ctx, args.outputs[0].data, args.inputs[0].data, args.inputs[0].bytes());
}

absl::Status ViewBackward(CudaContext& ctx, const BackwardArgs& args) {
  const TensorView& dx = args.input_grads[0];
  if (!dx.present()) return absl::OkStatus();
  return CopyIfDistinct(ctx, dx.data, args.output_grads[0].data, dx.bytes());
}

// A StridedWalk passed to kernels by value.
struct StridedPlan {
  int rank = 0;
  int64_t dims[kMaxRank];
  int64_t strides[kMaxRank];
  int64_t offset = 0;
};

// Copies between the elements of `strided` the plan walks and the contiguous `dense`:
// gather (strided -> dense) or scatter (dense -> strided, which needs no 0 strides).
template <typename T, bool kGather>
__global__ void StridedCopyKernel(T* strided, T* dense, int64_t n, StridedPlan p) {
  GRID_STRIDE_LOOP(i, n) {
    int64_t rest = i, si = p.offset;
    for (int d = p.rank - 1; d >= 0; --d) {
      si += (rest % p.dims[d]) * p.strides[d];
      rest /= p.dims[d];
    }
    if (kGather) {
      dense[i] = strided[si];
    } else {
      strided[si] = dense[i];
    }
  }
}

template <typename T>
void LaunchStridedCopy(CudaContext& ctx, void* strided, void* dense, int64_t n,
                       const StridedPlan& p, bool gather) {
  if (gather) {
    StridedCopyKernel<T, true><<<GridFor(n), kThreads, 0, ctx.compute>>>(
        static_cast<T*>(strided), static_cast<T*>(dense), n, p);
  } else {
    StridedCopyKernel<T, false><<<GridFor(n), kThreads, 0, ctx.compute>>>(
        static_cast<T*>(strided), static_cast<T*>(dense), n, p);
  }
}

// Copies between the elements of `strided` that `walk` visits and the contiguous `dense` of
// shape walk.dims, for any element size of `dtype`.
absl::Status CopyStrided(CudaContext& ctx, proto::DType dtype, void* strided,
                         const StridedWalk& walk, void* dense, bool gather) {
  if (walk.dims.size() > kMaxRank) {
    return absl::UnimplementedError(absl::StrCat("a strided copy over ", walk.dims.size(),
                                                 " dims; at most ", kMaxRank));
  }
  StridedPlan p;
  p.rank = static_cast<int>(walk.dims.size());
  p.offset = walk.offset;
  for (int d = 0; d < p.rank; ++d) {
    p.dims[d] = walk.dims[d];
    p.strides[d] = walk.strides[d];
  }
  const int64_t n = static_cast<int64_t>(graph::NumElements(walk.dims));
  switch (graph::DTypeSize(dtype)) {
    case 1:
      LaunchStridedCopy<uint8_t>(ctx, strided, dense, n, p, gather);
      break;
    case 2:
      LaunchStridedCopy<uint16_t>(ctx, strided, dense, n, p, gather);
      break;
    case 4:
      LaunchStridedCopy<uint32_t>(ctx, strided, dense, n, p, gather);
      break;
    case 8:
      LaunchStridedCopy<uint64_t>(ctx, strided, dense, n, p, gather);
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("cannot copy dtype ", graph::DTypeName(dtype)));
  }
  HR_CUDA_LAUNCHED("StridedCopyKernel");
  return absl::OkStatus();
}

// dst[..] = src permuted: dst dim d is src dim perm[d].
absl::Status LaunchTranspose(CudaContext& ctx, const TensorView& src, const TensorView& dst,
                             const std::vector<int64_t>& perm) {
  if (perm.size() != src.shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat("transposing ", src.rank(), " dims by [",
                                                   absl::StrJoin(perm, ","), "]"));
  }
  if (src.data == dst.data) {
    return absl::InvalidArgumentError("transpose output aliases its input");
  }
  return CopyStrided(ctx, src.dtype, src.data, TransposeWalk(src.shape, perm), dst.data,
                     /*gather=*/true);
}

absl::Status TransposeForward(CudaContext& ctx, const ForwardArgs& args) {
  return LaunchTranspose(ctx, args.inputs[0], args.outputs[0], args.attrs->Ints("perm"));
}

absl::Status TransposeBackward(CudaContext& ctx, const BackwardArgs& args) {
  const TensorView& dx = args.input_grads[0];
  if (!dx.present()) return absl::OkStatus();
  const std::vector<int64_t> perm = args.attrs->Ints("perm");
  std::vector<int64_t> inverse(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) inverse[perm[d]] = static_cast<int64_t>(d);
  return LaunchTranspose(ctx, args.output_grads[0], dx, inverse);
}

// Returns the walk over x (shape `x`) that the output (shape `y`) of a Slice or Expand
// node follows.
absl::StatusOr<StridedWalk> GatherWalk(const ForwardArgs& args) {
  const graph::Shape& x = args.inputs[0].shape;
  const graph::Shape& y = args.outputs[0].shape;
  return args.op == "Slice" ? SliceWalk(*args.attrs, x, y) : ExpandWalk(x, y);
}

// Slice and Expand: y = the elements of x their walk visits. Any dtype.
absl::Status GatherForward(CudaContext& ctx, const ForwardArgs& args) {
  const TensorView& x = args.inputs[0];
  const TensorView& y = args.outputs[0];
  ASSIGN_OR_RETURN(const StridedWalk walk, GatherWalk(args));
  if (x.dtype != y.dtype || x.data == y.data) {
    return absl::InvalidArgumentError(absl::StrCat(
        "output 'y' (", graph::DTypeName(y.dtype), ") must be another tensor than input 'x' (",
        graph::DTypeName(x.dtype), ") of the same dtype"));
  }
  return CopyStrided(ctx, x.dtype, x.data, walk, y.data, /*gather=*/true);
}

// dx = zeros, then dy scattered to the elements the forward took.
absl::Status SliceBackward(CudaContext& ctx, const BackwardArgs& args) {
  const TensorView& dx = args.input_grads[0];
  if (!dx.present()) return absl::OkStatus();
  RETURN_IF_ERROR(RequireF32(dx, "gradient of input 'x'"));
  RETURN_IF_ERROR(RequireF32(args.output_grads[0], "gradient of output 'y'"));
  ASSIGN_OR_RETURN(const StridedWalk walk,
                   SliceWalk(*args.attrs, args.inputs[0].shape, args.outputs[0].shape));
  HR_CUDA(cudaMemsetAsync(dx.data, 0, dx.bytes(), ctx.compute));
  return CopyStrided(ctx, dx.dtype, dx.data, walk, args.output_grads[0].data, /*gather=*/false);
}

// A tensor seen as [outer, axis dim, inner] around `axis`.
struct AxisSplit {
  int64_t outer = 1;
  int64_t inner = 1;
};

AxisSplit SplitAround(const graph::Shape& shape, int axis) {
  AxisSplit s;
  for (int d = 0; d < axis; ++d) s.outer *= shape[d];
  for (int d = axis + 1; d < static_cast<int>(shape.size()); ++d) s.inner *= shape[d];
  return s;
}

int NormalizedAxis(int64_t axis, int rank) {
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

// Copies each piece's [outer, piece_dim * inner] block to or from its columns of the whole
// [outer, whole_dim * inner]; a piece whose view is absent is zero-filled in the whole
// (to_whole) or skipped (from the whole).
absl::Status MovePieces(CudaContext& ctx, const TensorView& whole,
                        const std::vector<TensorView>& pieces, int axis, bool to_whole) {
  const AxisSplit split = SplitAround(whole.shape, axis);
  const uint64_t element = graph::DTypeSize(whole.dtype);
  const uint64_t whole_row = whole.shape[axis] * split.inner * element;
  uint64_t column = 0;
  for (const TensorView& piece : pieces) {
    const uint64_t piece_row = piece.shape[axis] * split.inner * element;
    char* whole_at = static_cast<char*>(whole.data) + column;
    if (piece.present() && split.outer == 1) {
      // One contiguous block (also where a 2-D copy's pitch would exceed its limit).
      HR_CUDA(cudaMemcpyAsync(to_whole ? whole_at : piece.data,
                              to_whole ? piece.data : static_cast<const void*>(whole_at),
                              piece_row, cudaMemcpyDeviceToDevice, ctx.compute));
    } else if (piece.present()) {
      if (to_whole) {
        HR_CUDA(cudaMemcpy2DAsync(whole_at, whole_row, piece.data, piece_row, piece_row,
                                  split.outer, cudaMemcpyDeviceToDevice, ctx.compute));
      } else {
        HR_CUDA(cudaMemcpy2DAsync(piece.data, piece_row, whole_at, whole_row, piece_row,
                                  split.outer, cudaMemcpyDeviceToDevice, ctx.compute));
      }
    } else if (to_whole) {
      HR_CUDA(cudaMemset2DAsync(whole_at, whole_row, 0, piece_row, split.outer, ctx.compute));
    }
    column += piece_row;
  }
  return absl::OkStatus();
}

absl::Status ConcatForward(CudaContext& ctx, const ForwardArgs& args) {
  const int axis = NormalizedAxis(args.attrs->Int("axis"), args.outputs[0].rank());
  return MovePieces(ctx, args.outputs[0], args.inputs, axis, /*to_whole=*/true);
}

absl::Status ConcatBackward(CudaContext& ctx, const BackwardArgs& args) {
  const int axis = NormalizedAxis(args.attrs->Int("axis"), args.output_grads[0].rank());
  return MovePieces(ctx, args.output_grads[0], args.input_grads, axis, /*to_whole=*/false);
}

absl::Status SplitForward(CudaContext& ctx, const ForwardArgs& args) {
  const int axis = NormalizedAxis(args.attrs->Int("axis"), args.inputs[0].rank());
  return MovePieces(ctx, args.inputs[0], args.outputs, axis, /*to_whole=*/false);
}

absl::Status SplitBackward(CudaContext& ctx, const BackwardArgs& args) {
  if (!args.input_grads[0].present()) return absl::OkStatus();
  const int axis = NormalizedAxis(args.attrs->Int("axis"), args.input_grads[0].rank());
  // Pieces without a gradient (data == nullptr) become zeros.
  return MovePieces(ctx, args.input_grads[0], args.output_grads, axis, /*to_whole=*/true);
}

// ---- Optimizer steps --------------------------------------------------------------------

// The optimizer steps: optimizer_math.h's per-element arithmetic, bitwise the CPU backend's.

__global__ void SgdMomentumKernel(float* param, const float* grad, float* buf, int64_t n,
                                  SgdConstants c, bool first) {
  GRID_STRIDE_LOOP(i, n) SgdMomentumStep(c, first, grad[i], &param[i], &buf[i]);
}

__global__ void AdamKernel(float* param, const float* grad, float* m, float* v, int64_t n,
                           AdamConstants c, bool first) {
  GRID_STRIDE_LOOP(i, n) AdamStep(c, first, grad[i], &param[i], &m[i], &v[i]);
}

absl::Status CheckSameF32(const TensorView& view, const TensorView& like, const char* what) {
  RETURN_IF_ERROR(RequireF32(view, what));
  if (view.num_elements() != like.num_elements()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has shape ",
                                                   graph::ShapeString(view.shape), ", needs ",
                                                   graph::ShapeString(like.shape)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunUpdate(CudaContext& ctx, const UpdateArgs& args) {
  const TensorView& p = args.param;
  RETURN_IF_ERROR(RequireF32(p, "param"));
  RETURN_IF_ERROR(CheckSameF32(args.grad, p, "grad"));
  if (args.step < 1) return absl::InvalidArgumentError(absl::StrCat("step ", args.step, " < 1"));
  const OptimizerParams& o = args.params;
  const int64_t n = p.num_elements();
  const bool first = args.step == 1;
  if (args.op == "SgdMomentumUpdate") {
    if (args.state.size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("needs 1 state tensor (momentum buffer), got ", args.state.size()));
    }
    RETURN_IF_ERROR(CheckSameF32(args.state[0], p, "momentum buffer"));
    SgdMomentumKernel<<<GridFor(n), kThreads, 0, ctx.compute>>>(
        p.f32(), args.grad.f32(), args.state[0].f32(), n, SgdConstantsOf(o), first);
    HR_CUDA_LAUNCHED("SgdMomentumKernel");
    return absl::OkStatus();
  }
  if (args.op == "AdamUpdate") {
    if (args.state.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("needs 2 state tensors (m, v), got ", args.state.size()));
    }
    RETURN_IF_ERROR(CheckSameF32(args.state[0], p, "state m"));
    RETURN_IF_ERROR(CheckSameF32(args.state[1], p, "state v"));
    AdamKernel<<<GridFor(n), kThreads, 0, ctx.compute>>>(p.f32(), args.grad.f32(),
                                                         args.state[0].f32(), args.state[1].f32(),
                                                         n, AdamConstantsOf(o, args.step), first);
    HR_CUDA_LAUNCHED("AdamKernel");
    return absl::OkStatus();
  }
  return absl::UnimplementedError(absl::StrCat("no optimizer '", args.op, "'"));
}

absl::Status RunAccumulate(CudaContext& ctx, const TensorView& out, const TensorView& a,
                           const TensorView& b) {
  RETURN_IF_ERROR(RequireF32(out, "out"));
  RETURN_IF_ERROR(CheckSameF32(a, out, "a"));
  RETURN_IF_ERROR(CheckSameF32(b, out, "b"));
  const int64_t n = out.num_elements();
  AddKernel<<<GridFor(n), kThreads, 0, ctx.compute>>>(a.f32(), b.f32(), out.f32(), n);
  HR_CUDA_LAUNCHED("AddKernel");
  return absl::OkStatus();
}

absl::Status RunFill(CudaContext& ctx, const TensorView& out, float value) {
  RETURN_IF_ERROR(RequireF32(out, "out"));
  const int64_t n = out.num_elements();
  FillKernel<<<GridFor(n), kThreads, 0, ctx.compute>>>(out.f32(), n, value);
  HR_CUDA_LAUNCHED("FillKernel");
  return absl::OkStatus();
}

namespace {

// Block (32, 8): each block sums 32 columns over all rows.
__global__ void ColumnSumsKernel(const float* in, int64_t rows, int64_t cols, float* out) {
  __shared__ float partial[8][33];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float sum = 0.0f;
  if (c < cols) {
    for (int64_t r = threadIdx.y; r < rows; r += 8) sum += in[r * cols + c];
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float total = 0.0f;
    for (int k = 0; k < 8; ++k) total += partial[k][threadIdx.x];
    out[c] = total;
  }
}

}  // namespace

absl::Status ColumnSums(CudaContext& ctx, const float* in, int64_t rows, int64_t cols,
                        float* out) {
  const unsigned blocks = static_cast<unsigned>((cols + 31) / 32);
  ColumnSumsKernel<<<blocks, dim3(32, 8), 0, ctx.compute>>>(in, rows, cols, out);
  HR_CUDA_LAUNCHED("ColumnSumsKernel");
  return absl::OkStatus();
}

void RegisterElementwiseKernels(KernelTable* table) {
  (*table)["GELU"] = {GeluForward, GeluBackward};
  (*table)["Dropout"] = {DropoutForward, DropoutBackward};
  (*table)["Add"] = {BinaryForward<BinaryOp::kAdd>, BinaryBackward<BinaryOp::kAdd>};
  (*table)["Mul"] = {BinaryForward<BinaryOp::kMul>, BinaryBackward<BinaryOp::kMul>};
  (*table)["Sub"] = {BinaryForward<BinaryOp::kSub>, BinaryBackward<BinaryOp::kSub>};
  (*table)["Div"] = {BinaryForward<BinaryOp::kDiv>, DivBackward};
  (*table)["PReLU"] = {PReluForward, PReluBackward};
  (*table)["Flatten"] = {ViewForward, ViewBackward};
  (*table)["Reshape"] = {ViewForward, ViewBackward};
  (*table)["Transpose"] = {TransposeForward, TransposeBackward};
  (*table)["Slice"] = {GatherForward, SliceBackward};
  (*table)["Expand"] = {GatherForward, ExpandBackward};
  (*table)["Concat"] = {ConcatForward, ConcatBackward};
  (*table)["Split"] = {SplitForward, SplitBackward};
}

}  // namespace headroom::executor::cuda
