// cuBLAS's errors as absl::Status, by the policy of util/cuda_status.h. Include it only
// from code nvcc compiles: cuBLAS's header needs nvcc's include paths.
#ifndef HEADROOM_UTIL_CUBLAS_STATUS_H_
#define HEADROOM_UTIL_CUBLAS_STATUS_H_

#include <cublas_api.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace headroom {

// Returns OK for CUBLAS_STATUS_SUCCESS, else the status util/cuda_status.h's policy gives.
absl::Status CublasStatus(cublasStatus_t status, absl::string_view call);

}  // namespace headroom

#endif  // HEADROOM_UTIL_CUBLAS_STATUS_H_
