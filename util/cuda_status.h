// One mapping of the CUDA libraries' error codes (the runtime's cudaError_t, cuDNN's
// cudnnStatus_t, cuBLAS's cublasStatus_t, CUPTI's CUptiResult) to absl::Status, with one
// policy for all four:
//   out of memory                                              -> ResourceExhausted
//   no device, no usable or a too-old driver, device unavailable -> FailedPrecondition
//   an invalid value or device ordinal                         -> InvalidArgument
//   anything else (a failed launch, copy or library call)      -> Internal
// The message names the call (`call` up to its first '(', so a stringised expression
// `cudaMalloc(&p, n)` reads "cudaMalloc") and gives the library's own name and text for the
// error: "cudaMalloc: out of memory (cudaErrorMemoryAllocation)".
//
// Thread-safe. Needs the CUDA toolkit (the target is incompatible without it). cuBLAS's
// mapper is declared apart, in util/cublas_status.h, since cuBLAS's header compiles only
// under nvcc; the policy is the same one, in cuda_status.cu.
#ifndef HEADROOM_UTIL_CUDA_STATUS_H_
#define HEADROOM_UTIL_CUDA_STATUS_H_

#include <cuda_runtime.h>
#include <cudnn.h>
#include <cupti.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace headroom {

// Each returns OK for its library's success code, else the status the policy above gives.
// CudaStatus also clears the runtime's last error after an out-of-memory error, which is
// not sticky, so that later checks do not see it again.
absl::Status CudaStatus(cudaError_t error, absl::string_view call);
absl::Status CudnnStatus(cudnnStatus_t status, absl::string_view call);
absl::Status CuptiStatus(CUptiResult result, absl::string_view call);

}  // namespace headroom

#endif  // HEADROOM_UTIL_CUDA_STATUS_H_
