// Internal to the CUDA backend, and plain C++ (no CUDA headers), so that its checks run and
// are tested on any machine: the limits cuDNN puts on tensors.
#ifndef HEADROOM_EXECUTOR_CUDA_CUDNN_LIMITS_H_
#define HEADROOM_EXECUTOR_CUDA_CUDNN_LIMITS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace headroom::executor::cuda {

// Returns Unimplemented unless a tensor of `dims` fits cuDNN: at most 2^31 - 1 elements
// (cuDNN's strides and sizes are 32-bit, and past that it answers an opaque
// CUDNN_STATUS_NOT_SUPPORTED). `what` names the tensor ("input 'x'").
// REQUIRES: the dims of a tensor in memory (their product fits in 64 bits).
absl::Status CheckCudnnElements(const std::vector<int64_t>& dims, const char* what);

}  // namespace headroom::executor::cuda

#endif  // HEADROOM_EXECUTOR_CUDA_CUDNN_LIMITS_H_
