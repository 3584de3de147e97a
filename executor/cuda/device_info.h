// Lists the CUDA devices on this machine and runs a tiny kernel on one of them: the smoke
// test that proves the nvcc build path and a working driver.
//
// Both functions return an error, never crash, where there is no driver or no device, so
// callers (the daemon's startup, `headroom devices`) can report "no GPU" and go on with the
// CPU backend. Thread-safe in the way the CUDA runtime is: each call sets the current device
// of the calling thread.
#ifndef HEADROOM_EXECUTOR_CUDA_DEVICE_INFO_H_
#define HEADROOM_EXECUTOR_CUDA_DEVICE_INFO_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace headroom::executor::cuda {

// One CUDA device as the runtime reports it.
struct CudaDevice {
  int index = 0;              // ordinal for cudaSetDevice
  std::string name;           // e.g. "NVIDIA H100 80GB HBM3"
  uint64_t total_bytes = 0;   // device memory
  uint64_t free_bytes = 0;    // free when listed (other processes' use included)
  int sm_major = 0;           // compute capability, e.g. 9.0 for Hopper
  int sm_minor = 0;

  // Returns e.g. "cuda:0 NVIDIA H100 80GB HBM3 sm_90, 79.1 GiB free of 79.6 GiB".
  std::string DebugString() const;
};

// Returns every visible device, in ordinal order. Returns FailedPrecondition where there is
// no device or no usable driver, and other CUDA errors as util/cuda_status.h maps them; the
// message carries the runtime's own text (cudaGetErrorString).
absl::StatusOr<std::vector<CudaDevice>> ListCudaDevices();

// Returns OK if a fill kernel writing a fixed value into `n` 32-bit words of device memory on
// `device` reads back correctly; Internal naming the first bad index if not; the CUDA error
// (as for ListCudaDevices) if allocation, launch or copy fails.
// REQUIRES: n > 0, 0 <= device < number of devices (else InvalidArgument).
absl::Status RunFillSelfTest(int device, size_t n);

}  // namespace headroom::executor::cuda

#endif  // HEADROOM_EXECUTOR_CUDA_DEVICE_INFO_H_
