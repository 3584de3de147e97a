#include "executor/cuda/device_footprint.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace headroom::executor::cuda {
namespace {

TEST(ProcessBytesOfTest, FindsThePidAmongOthers) {
  const std::vector<DeviceProcess> rows = {{10, 100}, {42, 5000}, {7, 1}};
  absl::StatusOr<uint64_t> bytes = ProcessBytesOf(rows, 42);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, 5000u);
}

TEST(ProcessBytesOfTest, AnUnlistedPidIsNotFound) {
  absl::StatusOr<uint64_t> bytes = ProcessBytesOf({{10, 100}}, 42);
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(bytes.status().message().find("42"), absl::string_view::npos);
}

TEST(ProcessBytesOfTest, AFigureTheDriverDoesNotKeepIsUnavailable) {
  absl::StatusOr<uint64_t> bytes = ProcessBytesOf({{42, DeviceProcess::kNotAvailable}}, 42);
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kUnavailable);
}

// NVML, an instrument outside the CUDA runtime, sees an allocation of this process grow its
// figure by at least the allocation's size.
TEST(ThisProcessDeviceBytesTest, GrowsByAnAllocation) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    GTEST_SKIP() << "no CUDA device";
  }
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaFree(nullptr), cudaSuccess);  // Creates the context.
  absl::StatusOr<uint64_t> before = ThisProcessDeviceBytes(0);
  if (!before.ok()) GTEST_SKIP() << "NVML cannot say: " << before.status();
  constexpr uint64_t kBytes = uint64_t{256} << 20;
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, kBytes), cudaSuccess);
  absl::StatusOr<uint64_t> after = ThisProcessDeviceBytes(0);
  cudaFree(p);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_GE(*after, *before + kBytes);
  // The driver rounds to its pages (2 MiB) and may map a little more; not a second copy.
  EXPECT_LT(*after, *before + kBytes + (uint64_t{64} << 20));
  // The context alone is tens of MiB at least on every driver NVIDIA ships.
  EXPECT_GT(*before, uint64_t{16} << 20);
}

}  // namespace
}  // namespace headroom::executor::cuda
