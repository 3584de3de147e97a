#include "executor/cuda/device_info.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "util/cuda_status.h"

namespace headroom::executor::cuda {
namespace {

// The value the self-test writes: not 0 and not a byte pattern that fresh or poisoned
// memory tends to hold.
constexpr uint32_t kFillValue = 0x5eed1234u;

#define HEADROOM_CUDA_RETURN_IF_ERROR(call)                        \
  do {                                                             \
    absl::Status headroom_cuda_status_ = CudaStatus((call), #call);  \
    if (!headroom_cuda_status_.ok()) return headroom_cuda_status_; \
  } while (0)

// Writes `value` into out[0..n), with a grid-stride loop so any launch size covers n.
__global__ void FillKernel(uint32_t* out, size_t n, uint32_t value) {
  const size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = value;
  }
}

// Owns one cudaMalloc'd buffer; frees it on scope exit.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  absl::Status Allocate(size_t bytes) {
    return CudaStatus(cudaMalloc(&ptr_, bytes), "cudaMalloc");
  }
  uint32_t* words() const { return static_cast<uint32_t*>(ptr_); }

 private:
  void* ptr_ = nullptr;
};

}  // namespace

std::string CudaDevice::DebugString() const {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  return absl::StrFormat("cuda:%d %s sm_%d%d, %.1f GiB free of %.1f GiB", index, name, sm_major,
                         sm_minor, free_bytes / kGiB, total_bytes / kGiB);
}

absl::StatusOr<std::vector<CudaDevice>> ListCudaDevices() {
  int count = 0;
  HEADROOM_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  if (count == 0) return absl::FailedPreconditionError("cudaGetDeviceCount: no CUDA device");

  std::vector<CudaDevice> devices;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop;
    HEADROOM_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, i));
    // cudaMemGetInfo reports on the current device, so select it first.
    HEADROOM_CUDA_RETURN_IF_ERROR(cudaSetDevice(i));
    size_t free_bytes = 0, total_bytes = 0;
    HEADROOM_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
    devices.push_back(CudaDevice{i, prop.name, total_bytes, free_bytes, prop.major, prop.minor});
  }
  return devices;
}

absl::Status RunFillSelfTest(int device, size_t n) {
  if (n == 0) return absl::InvalidArgumentError("RunFillSelfTest: n must be > 0");
  int count = 0;
  HEADROOM_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(
        absl::StrFormat("RunFillSelfTest: device %d out of range [0, %d)", device, count));
  }
  HEADROOM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));

  DeviceBuffer buffer;
  if (absl::Status s = buffer.Allocate(n * sizeof(uint32_t)); !s.ok()) return s;
  // Zero first, so a kernel that never ran cannot pass by leftover memory.
  HEADROOM_CUDA_RETURN_IF_ERROR(cudaMemset(buffer.words(), 0, n * sizeof(uint32_t)));

  constexpr int kThreads = 256;
  const size_t blocks_needed = (n + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(blocks_needed < 1024 ? blocks_needed : 1024);
  FillKernel<<<blocks, kThreads>>>(buffer.words(), n, kFillValue);
  HEADROOM_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  HEADROOM_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());

  std::vector<uint32_t> host(n);
  HEADROOM_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(host.data(), buffer.words(), n * sizeof(uint32_t), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; ++i) {
    if (host[i] != kFillValue) {
      return absl::InternalError(absl::StrFormat(
          "fill self-test on cuda:%d: element %d of %d is 0x%08x, expected 0x%08x", device, i, n,
          host[i], kFillValue));
    }
  }
  return absl::OkStatus();
}

}  // namespace headroom::executor::cuda
