// The optimizers' arithmetic, one element at a time, shared by the CPU backend's update
// kernels (executor/cpu) and the host update (executor/host_update.h), so an update on the
// host gives bitwise the parameters and state the device update gives on the CPU backend.
// Callers parallelise over elements (each element's result depends on that element only).
#ifndef HEADROOM_EXECUTOR_OPTIMIZER_MATH_H_
#define HEADROOM_EXECUTOR_OPTIMIZER_MATH_H_

#include <cmath>
#include <cstdint>

#include "executor/kernel_args.h"

namespace headroom::executor {

// torch.optim.SGD (dampening 0, not Nesterov), in float as its CPU single-tensor path.
struct SgdMomentumMath {
  SgdMomentumMath(const OptimizerParams& o, int64_t step)
      : lr(static_cast<float>(o.learning_rate)),
        momentum(static_cast<float>(o.momentum)),
        wd(static_cast<float>(o.weight_decay)),
        first(step == 1) {}
  // Updates element i of parameter `p` and momentum buffer `buf` from gradient `grad`.
  void operator()(int64_t i, float* p, const float* grad, float* buf) const {
    const float g = wd != 0.f ? grad[i] + wd * p[i] : grad[i];
    const float b = first ? g : buf[i] * momentum + g;
    buf[i] = b;
    p[i] = p[i] + (-lr) * b;
  }
  float lr, momentum, wd;
  bool first;
};

// torch.optim.Adam (not AMSGrad), in float as its CPU single-tensor path; the bias
// corrections in double, as Python computes them.
struct AdamMath {
  AdamMath(const OptimizerParams& o, int64_t step) {
    const double t = static_cast<double>(step);
    const double bias_correction1 = 1.0 - std::pow(o.beta1, t);
    const double bias_correction2 = 1.0 - std::pow(o.beta2, t);
    neg_step_size = static_cast<float>(-(o.learning_rate / bias_correction1));
    bc2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
    beta1 = static_cast<float>(o.beta1);
    beta2 = static_cast<float>(o.beta2);
    one_minus_beta1 = static_cast<float>(1.0 - o.beta1);
    one_minus_beta2 = static_cast<float>(1.0 - o.beta2);
    eps = static_cast<float>(o.epsilon);
    wd = static_cast<float>(o.weight_decay);
    first = step == 1;
  }
  // Updates element i of parameter `p` and moments `m`, `v` from gradient `grad`.
  void operator()(int64_t i, float* p, const float* grad, float* m, float* v) const {
    const float g = wd != 0.f ? grad[i] + wd * p[i] : grad[i];
    const float m0 = first ? 0.f : m[i];
    const float v0 = first ? 0.f : v[i];
    const float mi = m0 * beta1 + one_minus_beta1 * g;
    const float vi = v0 * beta2 + one_minus_beta2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / bc2_sqrt + eps;
    p[i] = p[i] + neg_step_size * mi / denom;
  }
  float neg_step_size, bc2_sqrt, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, wd;
  bool first;
};

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_OPTIMIZER_MATH_H_
