// NCCL's collectives on one rank (the bootstrap in process): an averaging allreduce and a
// broadcast of device memory leave the values as they are, and a handle is waited on once.
// Needs a GPU: without one every case reports itself skipped.
#include "dist/nccl_collectives.h"

#include <cuda_runtime.h>

#include <vector>

#include "dist/local_collectives.h"
#include "gtest/gtest.h"

namespace headroom::dist {
namespace {

class NcclCollectivesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      GTEST_SKIP() << "no CUDA device";
    }
  }
};

TEST_F(NcclCollectivesTest, OneRankAllreduceAndBroadcastKeepValues) {
  LocalGroup group(1);
  std::unique_ptr<Collectives> bootstrap = group.Rank(0);
  absl::StatusOr<std::unique_ptr<Collectives>> nccl = CreateNcclCollectives(bootstrap.get(), {});
  ASSERT_TRUE(nccl.ok()) << nccl.status();
  EXPECT_EQ((*nccl)->size(), 1);
  std::vector<float> host(1000);
  for (size_t i = 0; i < host.size(); ++i) host[i] = 0.5f * i;
  float* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, host.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(device, host.data(), host.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  absl::StatusOr<CollectiveHandle> h =
      (*nccl)->AllreduceAsync(device, host.size(), ReduceOp::kAverage, "test allreduce");
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_TRUE((*nccl)->Wait(*h).ok());
  EXPECT_EQ((*nccl)->Wait(*h).code(), absl::StatusCode::kInvalidArgument);  // waited once
  ASSERT_TRUE((*nccl)->Broadcast(device, host.size() * 4, 0, "test broadcast").ok());
  std::vector<float> back(host.size());
  ASSERT_EQ(cudaMemcpy(back.data(), device, back.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, host);
  cudaFree(device);
}

}  // namespace
}  // namespace headroom::dist
