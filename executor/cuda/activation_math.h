// Internal to the CUDA backend: the derivatives of ReLU, ReLU6, Sigmoid and Tanh from their
// output y, host and device, as the CPU backend computes them (oneDNN's *_use_dst_for_bwd)
// with PyTorch's semantics: ReLU passes dy where y > 0 (x = 0 gets 0); ReLU6 where
// 0 < y < 6 (x = 0, x = 6 and x > 6 get 0); both as dy times 1 or 0, so a negative dy that
// stops gives -0 as oneDNN's does. Sigmoid: dy * (y * (1 - y)), each operation rounded on its
// own; Tanh: dy * fma(-y, y, 1), 1 - y^2 rounded once, as oneDNN's vector code computes it
// (neither 1 - y * y nor (1 - y) * (1 + y) is that, bitwise). A test without a GPU checks them
// against the CPU backend (activation_math_test).
#ifndef HEADROOM_EXECUTOR_CUDA_ACTIVATION_MATH_H_
#define HEADROOM_EXECUTOR_CUDA_ACTIVATION_MATH_H_

#include "executor/cuda/optimizer_math.h"

namespace headroom::executor::cuda {

enum class ActivationKind { kRelu, kRelu6, kSigmoid, kTanh };

// Returns dx for output y and its gradient dy.
template <ActivationKind kKind>
HEADROOM_HOST_DEVICE inline float ActivationGradFromY(float y, float dy) {
  if (kKind == ActivationKind::kRelu) return MulRn(dy, y > 0.0f ? 1.0f : 0.0f);
  if (kKind == ActivationKind::kRelu6) return MulRn(dy, y > 0.0f && y < 6.0f ? 1.0f : 0.0f);
  if (kKind == ActivationKind::kSigmoid) return MulRn(dy, MulRn(y, AddRn(1.0f, -y)));
  return MulRn(dy, FmaRn(-y, y, 1.0f));
}

}  // namespace headroom::executor::cuda

#endif  // HEADROOM_EXECUTOR_CUDA_ACTIVATION_MATH_H_
