// cuDNN's element limit, checked without a GPU: the CUDA backend's error for a tensor past
// 2^31 - 1 elements names the tensor, its shape, its size and the limit.
#include "executor/cuda/cudnn_limits.h"

#include <climits>

#include "gtest/gtest.h"

namespace headroom::executor::cuda {
namespace {

TEST(CudnnLimitsTest, ElementLimitNamesTheTensorItsSizeAndTheLimit) {
  EXPECT_TRUE(CheckCudnnElements({1, 1, 1, INT_MAX}, "input 'x'").ok());
  EXPECT_TRUE(CheckCudnnElements({8, 64, 224, 224}, "input 'x'").ok());
  EXPECT_TRUE(CheckCudnnElements({0, 1 << 30, 1 << 30, 1}, "input 'x'").ok());
  const absl::Status status = CheckCudnnElements({2, 1, 32768, 32768}, "output 'y'");
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(status.message(),
            "output 'y' [2,1,32768,32768] has 2147483648 elements, past cuDNN's limit of "
            "2^31 - 1 (2147483647) per tensor");
}

}  // namespace
}  // namespace headroom::executor::cuda
