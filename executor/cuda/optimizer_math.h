// Internal to the CUDA backend: the optimizer steps' per-element arithmetic, host and device,
// written to compute exactly what the CPU backend's loops compute (executor/cpu, PyTorch's
// CPU single-tensor path): the same float operations in the same order, each rounded on its
// own, and the same constants made on the host in double, then rounded to float once. So the
// two backends' parameters agree bitwise after any number of steps, given the same
// gradients. On the device the operations are __f*_rn intrinsics (nvcc would otherwise fuse
// multiply-adds); on the host, plain operators, so a test without a GPU checks the formulas
// against the CPU backend (optimizer_math_test).
#ifndef HEADROOM_EXECUTOR_CUDA_OPTIMIZER_MATH_H_
#define HEADROOM_EXECUTOR_CUDA_OPTIMIZER_MATH_H_

#include <cmath>
#include <cstdint>

#include "executor/kernel_args.h"
#include "util/host_device.h"


namespace headroom::executor::cuda {

// Correctly rounded float operations: each rounded once, never fused with another.
HEADROOM_HOST_DEVICE inline float AddRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
HEADROOM_HOST_DEVICE inline float MulRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
HEADROOM_HOST_DEVICE inline float DivRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
// a * b + c rounded once (a fused multiply-add).
HEADROOM_HOST_DEVICE inline float FmaRn(float a, float b, float c) {
#ifdef __CUDA_ARCH__
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
HEADROOM_HOST_DEVICE inline float SqrtRn(float a) {
#ifdef __CUDA_ARCH__
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

// torch.optim.SGD (dampening 0, not Nesterov), as floats.
struct SgdConstants {
  float lr, momentum, weight_decay;
};

inline SgdConstants SgdConstantsOf(const OptimizerParams& o) {
  return {static_cast<float>(o.learning_rate), static_cast<float>(o.momentum),
          static_cast<float>(o.weight_decay)};
}

// One element's SGD step: updates *p and the momentum buffer *buf (not read when `first`).
HEADROOM_HOST_DEVICE inline void SgdMomentumStep(const SgdConstants& c, bool first, float grad, float* p,
                                            float* buf) {
  const float g = c.weight_decay != 0.0f ? AddRn(grad, MulRn(c.weight_decay, *p)) : grad;
  const float b = first ? g : AddRn(MulRn(*buf, c.momentum), g);
  *buf = b;
  *p = AddRn(*p, MulRn(-c.lr, b));
}

// The constants of one Adam step: the (1 - beta) factors and the bias corrections in double
// (as Python computes them), each rounded to float once.
struct AdamConstants {
  float beta1, beta2;
  float one_minus_beta1, one_minus_beta2;
  float neg_step_size;  // -(lr / (1 - beta1^t))
  float bc2_sqrt;       // sqrt(1 - beta2^t)
  float eps, weight_decay;
};

inline AdamConstants AdamConstantsOf(const OptimizerParams& o, int64_t step) {
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(o.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(o.beta2, t);
  AdamConstants c;
  c.beta1 = static_cast<float>(o.beta1);
  c.beta2 = static_cast<float>(o.beta2);
  c.one_minus_beta1 = static_cast<float>(1.0 - o.beta1);
  c.one_minus_beta2 = static_cast<float>(1.0 - o.beta2);
  c.neg_step_size = static_cast<float>(-(o.learning_rate / bias_correction1));
  c.bc2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  c.eps = static_cast<float>(o.epsilon);
  c.weight_decay = static_cast<float>(o.weight_decay);
  return c;
}

// One element's Adam step (torch.optim.Adam, not amsgrad):
// p += -(lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps). Updates *p, *m and *v (m and v not
// read when `first`).
HEADROOM_HOST_DEVICE inline void AdamStep(const AdamConstants& c, bool first, float grad, float* p,
                                     float* m, float* v) {
  const float g = c.weight_decay != 0.0f ? AddRn(grad, MulRn(c.weight_decay, *p)) : grad;
  const float m0 = first ? 0.0f : *m;
  const float v0 = first ? 0.0f : *v;
  const float mi = AddRn(MulRn(m0, c.beta1), MulRn(c.one_minus_beta1, g));
  const float vi = AddRn(MulRn(v0, c.beta2), MulRn(MulRn(c.one_minus_beta2, g), g));
  *m = mi;
  *v = vi;
  const float denom = AddRn(DivRn(SqrtRn(vi), c.bc2_sqrt), c.eps);
  *p = AddRn(*p, DivRn(MulRn(c.neg_step_size, mi), denom));
}

}  // namespace headroom::executor::cuda

#endif  // HEADROOM_EXECUTOR_CUDA_OPTIMIZER_MATH_H_
