// The CUDA backend's activations that cuDNN does not have, as one kernel each with PyTorch's
// float formulas: HardSigmoid (ONNX's alpha x + beta, clamped to [0, 1]; backward from y),
// HardSwish (aten's hardswish and hardswish_backward; backward from x), and the activations
// imported from ONNX as the CPU backend computes them: LeakyReLU, ELU and SELU, Softplus (beta 1,
// threshold 20), Erf, Mish and Pow (backward from x), Sqrt (backward from y). All may run in place
// (y over x, dx over dy): each element is read just before it is written.
#include <cuda_runtime.h>

#include "executor/cuda/cuda_context.h"
#include "executor/cuda/cuda_device_utils.h"

namespace headroom::executor::cuda {
namespace {

// Returns v clamped to [lo, hi]; NaN stays NaN, as with std::min(std::max(v, lo), hi).
__device__ inline float Clamp(float v, float lo, float hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

struct HardSigmoidFn {
  static constexpr bool kFromOutput = true;
  float alpha, beta;
  explicit HardSigmoidFn(const graph::Attrs& attrs)
      : alpha(static_cast<float>(attrs.Float("alpha"))),
        beta(static_cast<float>(attrs.Float("beta"))) {}
  __device__ float Forward(float x) const { return Clamp(alpha * x + beta, 0.0f, 1.0f); }
  __device__ float Backward(float dy, float y) const {
    return y > 0.0f && y < 1.0f ? dy * alpha : 0.0f;
  }
};

struct HardSwishFn {
  static constexpr bool kFromOutput = false;
  explicit HardSwishFn(const graph::Attrs&) {}
  __device__ float Forward(float x) const { return x * Clamp(x + 3.0f, 0.0f, 6.0f) / 6.0f; }
  __device__ float Backward(float dy, float x) const {
    return x < -3.0f ? 0.0f : (x <= 3.0f ? dy * (x / 3.0f + 0.5f) : dy);
  }
};

// PyTorch 1.13's pow(x, scalar) as the CPU backend computes it: exponent 0 fills 1, 1 copies, 0.5,
// -0.5 and -1 are sqrt, 1 / sqrt and 1 / x, 2, 3 and -2 are products; others std::pow in float.
__device__ float TorchPow(float x, double c) {
  if (c == 0) return 1.f;
  if (c == 1) return x;
  if (c == 0.5) return sqrtf(x);
  if (c == -0.5) return 1.f / sqrtf(x);
  if (c == -1) return 1.f / x;
  if (c == 2) return x * x;
  if (c == 3) return x * x * x;
  if (c == -2) return 1.f / (x * x);
  return powf(x, static_cast<float>(c));
}

// y = x ^ c; dx = dy * (c * x ^ (c - 1)) (0 for c = 0), as PyTorch's pow_backward.
struct PowFn {
  static constexpr bool kFromOutput = false;
  explicit PowFn(const graph::Attrs& attrs) : c(attrs.Float("exponent")) {}
  __device__ float Forward(float x) const { return TorchPow(x, c); }
  __device__ float Backward(float dy, float x) const {
    return c == 0 ? 0.f : dy * (static_cast<float>(c) * TorchPow(x, c - 1));
  }
  double c;
};

struct LeakyReluFn {
  static constexpr bool kFromOutput = false;
  float alpha;
  explicit LeakyReluFn(const graph::Attrs& attrs)
      : alpha(static_cast<float>(attrs.Float("alpha"))) {}
  __device__ float Forward(float x) const { return x > 0.0f ? x : x * alpha; }
  __device__ float Backward(float dy, float x) const { return x > 0.0f ? dy : dy * alpha; }
};

// ELU is scale 1; SELU scale gamma.
struct EluFn {
  static constexpr bool kFromOutput = false;
  float scale, neg;
  explicit EluFn(const graph::Attrs& attrs)
      : scale(attrs.values().count("gamma") ? static_cast<float>(attrs.Float("gamma")) : 1.0f),
        neg(static_cast<float>(attrs.Float("alpha")) * scale) {}
  __device__ float Forward(float x) const { return x <= 0.0f ? (expf(x) - 1.0f) * neg : x * scale; }
  __device__ float Backward(float dy, float x) const {
    return x <= 0.0f ? dy * neg * expf(x) : dy * scale;
  }
};

struct SoftplusFn {
  static constexpr bool kFromOutput = false;
  explicit SoftplusFn(const graph::Attrs&) {}
  __device__ float Forward(float x) const { return x > 20.0f ? x : log1pf(expf(x)); }
  __device__ float Backward(float dy, float x) const {
    const float z = expf(x);
    return x > 20.0f ? dy : dy * z / (z + 1.0f);
  }
};

struct SqrtFn {
  static constexpr bool kFromOutput = true;
  explicit SqrtFn(const graph::Attrs&) {}
  __device__ float Forward(float x) const { return sqrtf(x); }
  __device__ float Backward(float dy, float y) const { return dy / (2.0f * y); }
};

struct ErfFn {
  static constexpr bool kFromOutput = false;
  explicit ErfFn(const graph::Attrs&) {}
  __device__ float Forward(float x) const { return erff(x); }
  __device__ float Backward(float dy, float x) const {
    return 1.1283791670955126f * expf(-(x * x)) * dy;
  }
};

struct MishFn {
  static constexpr bool kFromOutput = false;
  explicit MishFn(const graph::Attrs&) {}
  __device__ float Forward(float x) const { return x * tanhf(log1pf(expf(x))); }
  __device__ float Backward(float dy, float x) const {
    const float sigmoid = 1.0f / (1.0f + expf(-x));
    const float tanh_softplus = tanhf(log1pf(expf(x)));
    return dy * (tanh_softplus + x * sigmoid * (1.0f - tanh_softplus * tanh_softplus));
  }
};

template <typename Fn>
__global__ void PointwiseForwardKernel(const float* x, float* y, int64_t n, Fn fn) {
  GRID_STRIDE_LOOP(i, n) y[i] = fn.Forward(x[i]);
}

template <typename Fn>
__global__ void PointwiseBackwardKernel(const float* dy, const float* v, float* dx, int64_t n,
                                        Fn fn) {
  GRID_STRIDE_LOOP(i, n) dx[i] = fn.Backward(dy[i], v[i]);
}

template <typename Fn>
absl::Status PointwiseForward(CudaContext& ctx, const ForwardArgs& args) {
  const TensorView& x = args.inputs[0];
  RETURN_IF_ERROR(RequireF32(x, "input 'x'"));
  RETURN_IF_ERROR(RequireF32(args.outputs[0], "output 'y'"));
  const int64_t n = x.num_elements();
  PointwiseForwardKernel<<<GridFor(n), kThreads, 0, ctx.compute>>>(
      x.f32(), args.outputs[0].f32(), n, Fn(*args.attrs));
  HR_CUDA_LAUNCHED("PointwiseForwardKernel");
  return absl::OkStatus();
}

template <typename Fn>
absl::Status PointwiseBackward(CudaContext& ctx, const BackwardArgs& args) {
  const TensorView& dx = args.input_grads[0];
  if (!dx.present()) return absl::OkStatus();
  const TensorView& v = Fn::kFromOutput ? args.outputs[0] : args.inputs[0];
  RETURN_IF_ERROR(RequireF32(v, Fn::kFromOutput ? "output 'y'" : "input 'x'"));
  RETURN_IF_ERROR(RequireF32(args.output_grads[0], "gradient of output 'y'"));
  const int64_t n = dx.num_elements();
  PointwiseBackwardKernel<<<GridFor(n), kThreads, 0, ctx.compute>>>(
      args.output_grads[0].f32(), v.f32(), dx.f32(), n, Fn(*args.attrs));
  HR_CUDA_LAUNCHED("PointwiseBackwardKernel");
  return absl::OkStatus();
}

}  // namespace

void RegisterActivationKernels(KernelTable* table) {
  (*table)["HardSigmoid"] = {PointwiseForward<HardSigmoidFn>, PointwiseBackward<HardSigmoidFn>};
  (*table)["HardSwish"] = {PointwiseForward<HardSwishFn>, PointwiseBackward<HardSwishFn>};
  (*table)["LeakyReLU"] = {PointwiseForward<LeakyReluFn>, PointwiseBackward<LeakyReluFn>};
  (*table)["Pow"] = {PointwiseForward<PowFn>, PointwiseBackward<PowFn>};
  (*table)["ELU"] = {PointwiseForward<EluFn>, PointwiseBackward<EluFn>};
  (*table)["SELU"] = {PointwiseForward<EluFn>, PointwiseBackward<EluFn>};
  (*table)["Softplus"] = {PointwiseForward<SoftplusFn>, PointwiseBackward<SoftplusFn>};
  (*table)["Sqrt"] = {PointwiseForward<SqrtFn>, PointwiseBackward<SqrtFn>};
  (*table)["Erf"] = {PointwiseForward<ErfFn>, PointwiseBackward<ErfFn>};
  (*table)["Mish"] = {PointwiseForward<MishFn>, PointwiseBackward<MishFn>};
}

}  // namespace headroom::executor::cuda
