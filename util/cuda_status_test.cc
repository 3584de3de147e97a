// The one policy, library by library (cuBLAS's mapper, declared for nvcc only, is the same
// policy over its codes): each library's out-of-memory, no-device, bad-value
// and other codes, and the message naming the call and the library's own words. Needs no
// GPU: only the libraries' error strings are read.
#include "util/cuda_status.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(CudaStatusTest, SuccessIsOkInEveryLibrary) {
  EXPECT_TRUE(CudaStatus(cudaSuccess, "cudaMalloc").ok());
  EXPECT_TRUE(CudnnStatus(CUDNN_STATUS_SUCCESS, "cudnnCreate").ok());
  EXPECT_TRUE(CuptiStatus(CUPTI_SUCCESS, "cuptiActivityEnable").ok());
}

TEST(CudaStatusTest, RuntimeErrorsFollowThePolicy) {
  EXPECT_EQ(CudaStatus(cudaErrorMemoryAllocation, "cudaMalloc").code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(CudaStatus(cudaErrorNoDevice, "cudaGetDeviceCount").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CudaStatus(cudaErrorInsufficientDriver, "cudaGetDeviceCount").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CudaStatus(cudaErrorInvalidValue, "cudaMemcpy").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CudaStatus(cudaErrorInvalidDevice, "cudaSetDevice").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CudaStatus(cudaErrorLaunchFailure, "FillKernel").code(),
            absl::StatusCode::kInternal);
}

TEST(CudaStatusTest, MessageNamesTheCallAndTheRuntimesWords) {
  const absl::Status status = CudaStatus(cudaErrorMemoryAllocation, "cudaMalloc(&data, bytes)");
  EXPECT_EQ(status.message(), std::string("cudaMalloc: ") +
                                  cudaGetErrorString(cudaErrorMemoryAllocation) +
                                  " (cudaErrorMemoryAllocation)");
}

TEST(CudaStatusTest, CudnnErrorsFollowThePolicy) {
  EXPECT_EQ(CudnnStatus(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED, "x").code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(CudnnStatus(CUDNN_STATUS_NOT_INITIALIZED, "x").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CudnnStatus(CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH, "x").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CudnnStatus(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "x").code(),
            absl::StatusCode::kInvalidArgument);
  const absl::Status failed =
      CudnnStatus(CUDNN_STATUS_EXECUTION_FAILED, "cudnnConvolutionForward(handle, ...)");
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(failed.message()), StartsWith("cudnnConvolutionForward: "));
  EXPECT_THAT(std::string(failed.message()), HasSubstr("EXECUTION_FAILED"));
}

TEST(CudaStatusTest, CuptiErrorsFollowThePolicy) {
  EXPECT_EQ(CuptiStatus(CUPTI_ERROR_OUT_OF_MEMORY, "x").code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(CuptiStatus(CUPTI_ERROR_INSUFFICIENT_PRIVILEGES, "x").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CuptiStatus(CUPTI_ERROR_INVALID_PARAMETER, "x").code(),
            absl::StatusCode::kInvalidArgument);
  const absl::Status unknown = CuptiStatus(CUPTI_ERROR_UNKNOWN, "cuptiActivityEnable");
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(unknown.message()), StartsWith("cuptiActivityEnable: "));
  EXPECT_THAT(std::string(unknown.message()), HasSubstr("CUPTI_ERROR_UNKNOWN"));
}

}  // namespace
}  // namespace headroom
