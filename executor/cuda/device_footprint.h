// What this process holds on a GPU, measured outside the CUDA runtime: NVML's per-process
// accounting (the number `nvidia-smi` prints beside each process), which counts the context,
// the libraries' handles, loaded kernels and every allocation alike. The CUDA backend uses it
// to measure its fixed cost at start (context and handles, before the arena), which a budget
// and the daemon's admission must leave room for.
//
// NVML ships with the driver (libnvidia-ml.so.1) and is opened at run time, so a build
// needs no NVML header or library and runs where there is none. Where NVML is missing, or
// lists no processes (a container without the host's PID namespace), the answer is
// Unavailable and the caller falls back to the runtime's free-memory figures.
//
// Thread-safe.
#ifndef HEADROOM_EXECUTOR_CUDA_DEVICE_FOOTPRINT_H_
#define HEADROOM_EXECUTOR_CUDA_DEVICE_FOOTPRINT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace headroom::executor::cuda {

// One row of NVML's compute-process list (nvmlProcessInfo_t's first two fields).
struct DeviceProcess {
  uint32_t pid = 0;
  // NVML's figure; kNotAvailable where the driver does not account per process.
  uint64_t used_bytes = 0;
  static constexpr uint64_t kNotAvailable = ~uint64_t{0};
};

// Returns the bytes row `pid` of `processes` uses: NotFound where `pid` is not listed,
// Unavailable where its figure is kNotAvailable.
absl::StatusOr<uint64_t> ProcessBytesOf(const std::vector<DeviceProcess>& processes, uint32_t pid);

// Returns NVML's compute-process list for CUDA device `device` (matched by PCI bus id, so
// CUDA_VISIBLE_DEVICES renumbering does not matter). Unavailable without NVML or its
// functions; FailedPrecondition where NVML cannot open the device.
absl::StatusOr<std::vector<DeviceProcess>> ListDeviceProcesses(int device);

// Returns the device bytes this process holds on CUDA device `device` by NVML, or the error
// of ListDeviceProcesses / ProcessBytesOf (NotFound: NVML does not list this process).
absl::StatusOr<uint64_t> ThisProcessDeviceBytes(int device);

}  // namespace headroom::executor::cuda

#endif  // HEADROOM_EXECUTOR_CUDA_DEVICE_FOOTPRINT_H_
