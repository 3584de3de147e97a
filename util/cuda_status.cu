#include "util/cuda_status.h"

#include <cublas_api.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "util/cublas_status.h"

namespace headroom {
namespace {

// What went wrong, as far as the policy cares.
enum class Failure { kOutOfMemory, kNoUsableDevice, kInvalidArgument, kOther };

// Returns the status the policy gives `failure` of `call`, with the library's `name` and
// `text` for the error.
absl::Status ToStatus(Failure failure, absl::string_view call, absl::string_view name,
                      absl::string_view text) {
  const std::string message =
      absl::StrCat(call.substr(0, call.find('(')), ": ", text, " (", name, ")");
  switch (failure) {
    case Failure::kOutOfMemory:
      return absl::ResourceExhaustedError(message);
    case Failure::kNoUsableDevice:
      return absl::FailedPreconditionError(message);
    case Failure::kInvalidArgument:
      return absl::InvalidArgumentError(message);
    case Failure::kOther:
      break;
  }
  return absl::InternalError(message);
}

Failure Classify(cudaError_t error) {
  switch (error) {
    case cudaErrorMemoryAllocation:
      return Failure::kOutOfMemory;
    case cudaErrorNoDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorInsufficientDriver:
    case cudaErrorInitializationError:
    case cudaErrorCallRequiresNewerDriver:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
      return Failure::kNoUsableDevice;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
      return Failure::kInvalidArgument;
    default:
      return Failure::kOther;
  }
}

Failure Classify(cudnnStatus_t status) {
  switch (status) {
    case CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED:
    case CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED:
      return Failure::kOutOfMemory;
    case CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH:
    case CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER:
    case CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART:
      return Failure::kNoUsableDevice;
    default:
      break;
  }
  // cuDNN 9's codes come in categories of a thousand: 1000s not initialised (no usable
  // device or library), 2000s bad parameters.
  switch (CUDNN_STATUS_CATEGORY(status)) {
    case CUDNN_STATUS_CATEGORY(CUDNN_STATUS_NOT_INITIALIZED):
      return Failure::kNoUsableDevice;
    case CUDNN_STATUS_BAD_PARAM:
      return Failure::kInvalidArgument;
    default:
      return Failure::kOther;
  }
}

Failure Classify(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return Failure::kOutOfMemory;
    case CUBLAS_STATUS_NOT_INITIALIZED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return Failure::kNoUsableDevice;
    case CUBLAS_STATUS_INVALID_VALUE:
      return Failure::kInvalidArgument;
    default:
      return Failure::kOther;
  }
}

Failure Classify(CUptiResult result) {
  switch (result) {
    case CUPTI_ERROR_OUT_OF_MEMORY:
      return Failure::kOutOfMemory;
    case CUPTI_ERROR_NOT_INITIALIZED:
    case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
      return Failure::kNoUsableDevice;
    case CUPTI_ERROR_INVALID_PARAMETER:
    case CUPTI_ERROR_INVALID_DEVICE:
      return Failure::kInvalidArgument;
    default:
      return Failure::kOther;
  }
}

// CUPTI's name for `result` ("CUPTI_ERROR_UNKNOWN") or its message for it, each from
// `describe`; its number where CUPTI has none.
std::string DescribeCupti(CUptiResult result,
                          CUptiResult (*describe)(CUptiResult, const char**)) {
  const char* text = nullptr;
  if (describe(result, &text) != CUPTI_SUCCESS || text == nullptr) {
    return absl::StrCat("CUptiResult ", static_cast<int>(result));
  }
  return text;
}

}  // namespace

absl::Status CudaStatus(cudaError_t error, absl::string_view call) {
  if (error == cudaSuccess) return absl::OkStatus();
  if (error == cudaErrorMemoryAllocation) cudaGetLastError();
  return ToStatus(Classify(error), call, cudaGetErrorName(error), cudaGetErrorString(error));
}

absl::Status CudnnStatus(cudnnStatus_t status, absl::string_view call) {
  if (status == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  // cuDNN's string is its name; it has no other text.
  const char* name = cudnnGetErrorString(status);
  return ToStatus(Classify(status), call, name, name);
}

absl::Status CublasStatus(cublasStatus_t status, absl::string_view call) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return ToStatus(Classify(status), call, cublasGetStatusName(status),
                  cublasGetStatusString(status));
}

absl::Status CuptiStatus(CUptiResult result, absl::string_view call) {
  if (result == CUPTI_SUCCESS) return absl::OkStatus();
  return ToStatus(Classify(result), call, DescribeCupti(result, cuptiGetResultString),
                  DescribeCupti(result, cuptiGetErrorMessage));
}

}  // namespace headroom
