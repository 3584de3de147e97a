#include "executor/cuda/device_info.h"

#include <vector>

#include "gtest/gtest.h"

namespace headroom::executor::cuda {
namespace {

// Returns the devices, or an empty list (after GTEST_SKIP in the caller) without one.
#define SKIP_WITHOUT_DEVICE(devices_or)                           \
  if (!(devices_or).ok()) {                                       \
    GTEST_SKIP() << "no CUDA device: " << (devices_or).status(); \
  }

TEST(DeviceInfoTest, ListsSaneDevices) {
  absl::StatusOr<std::vector<CudaDevice>> devices = ListCudaDevices();
  SKIP_WITHOUT_DEVICE(devices);
  ASSERT_FALSE(devices->empty());
  for (size_t i = 0; i < devices->size(); ++i) {
    const CudaDevice& d = (*devices)[i];
    SCOPED_TRACE(d.DebugString());
    EXPECT_EQ(d.index, static_cast<int>(i));
    EXPECT_FALSE(d.name.empty());
    EXPECT_GT(d.total_bytes, uint64_t{0});
    EXPECT_LE(d.free_bytes, d.total_bytes);
    EXPECT_GE(d.sm_major, 5);  // CUDA 13 supports nothing older than Maxwell
    EXPECT_GE(d.sm_minor, 0);
  }
}

TEST(DeviceInfoTest, FillSelfTestPassesOnEveryDevice) {
  absl::StatusOr<std::vector<CudaDevice>> devices = ListCudaDevices();
  SKIP_WITHOUT_DEVICE(devices);
  for (const CudaDevice& d : *devices) {
    // One partial block, and enough words for several grid-stride passes (1024 x 256 threads).
    EXPECT_TRUE(RunFillSelfTest(d.index, 1).ok());
    absl::Status status = RunFillSelfTest(d.index, (size_t{1} << 20) + 17);
    EXPECT_TRUE(status.ok()) << d.DebugString() << ": " << status;
  }
}

TEST(DeviceInfoTest, FillSelfTestRejectsBadArguments) {
  absl::StatusOr<std::vector<CudaDevice>> devices = ListCudaDevices();
  SKIP_WITHOUT_DEVICE(devices);
  EXPECT_EQ(RunFillSelfTest(0, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunFillSelfTest(static_cast<int>(devices->size()), 16).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunFillSelfTest(-1, 16).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace headroom::executor::cuda
