#include "executor/cuda/device_footprint.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <unistd.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "util/cuda_status.h"
#include "util/status_macros.h"

namespace headroom::executor::cuda {
namespace {

// NVML's ABI, as nvml.h declares it (the toolkit does not always ship the header).
using NvmlReturn = int;
using NvmlDevice = void*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr NvmlReturn kNvmlInsufficientSize = 7;
// nvmlProcessInfo_t of the _v2 and _v3 process queries.
struct NvmlProcessInfo {
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};
using InitFn = NvmlReturn (*)();
using HandleByPciFn = NvmlReturn (*)(const char*, NvmlDevice*);
using ProcessesFn = NvmlReturn (*)(NvmlDevice, unsigned int*, NvmlProcessInfo*);

struct Nvml {
  HandleByPciFn handle_by_pci = nullptr;
  ProcessesFn processes = nullptr;
  std::string error;  // Why NVML cannot be used; empty where it can.
};

// Opens and initialises NVML once per process.
const Nvml& OpenNvml() {
  static const Nvml* nvml = [] {
    auto* n = new Nvml;
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      n->error = absl::StrCat("NVML not found (", dlerror(), ")");
      return n;
    }
    auto init = reinterpret_cast<InitFn>(dlsym(lib, "nvmlInit_v2"));
    n->handle_by_pci =
        reinterpret_cast<HandleByPciFn>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    n->processes =
        reinterpret_cast<ProcessesFn>(dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v3"));
    if (n->processes == nullptr) {
      n->processes =
          reinterpret_cast<ProcessesFn>(dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v2"));
    }
    if (init == nullptr || n->handle_by_pci == nullptr || n->processes == nullptr) {
      n->error = "NVML lacks nvmlInit_v2, nvmlDeviceGetHandleByPciBusId_v2 or the process query";
    } else if (const NvmlReturn r = init(); r != kNvmlSuccess) {
      n->error = absl::StrCat("nvmlInit_v2 returned ", r);
    }
    return n;
  }();
  return *nvml;
}

}  // namespace

absl::StatusOr<uint64_t> ProcessBytesOf(const std::vector<DeviceProcess>& processes, uint32_t pid) {
  for (const DeviceProcess& p : processes) {
    if (p.pid != pid) continue;
    if (p.used_bytes == DeviceProcess::kNotAvailable) {
      return absl::UnavailableError(
          absl::StrCat("NVML lists process ", pid, " without its memory"));
    }
    return p.used_bytes;
  }
  return absl::NotFoundError(absl::StrCat("NVML does not list process ", pid,
                                          " (a container with its own PID namespace?)"));
}

absl::StatusOr<std::vector<DeviceProcess>> ListDeviceProcesses(int device) {
  const Nvml& nvml = OpenNvml();
  if (!nvml.error.empty()) return absl::UnavailableError(nvml.error);
  char bus_id[64] = {};
  RETURN_IF_ERROR(
      CudaStatus(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device), "cudaDeviceGetPCIBusId"));
  NvmlDevice handle = nullptr;
  if (const NvmlReturn r = nvml.handle_by_pci(bus_id, &handle); r != kNvmlSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat("NVML cannot open the device at PCI ", bus_id, " (error ", r, ")"));
  }
  std::vector<NvmlProcessInfo> rows(16);
  for (int attempt = 0; attempt < 4; ++attempt) {
    unsigned int count = static_cast<unsigned int>(rows.size());
    const NvmlReturn r = nvml.processes(handle, &count, rows.data());
    if (r == kNvmlInsufficientSize) {
      rows.resize(static_cast<size_t>(count) + 16);
      continue;
    }
    if (r != kNvmlSuccess) {
      return absl::UnavailableError(absl::StrCat("NVML's process query returned ", r));
    }
    std::vector<DeviceProcess> out;
    for (unsigned int i = 0; i < count; ++i) {
      out.push_back({rows[i].pid, rows[i].used_gpu_memory});
    }
    return out;
  }
  return absl::UnavailableError("NVML's process list kept growing");
}

absl::StatusOr<uint64_t> ThisProcessDeviceBytes(int device) {
  ASSIGN_OR_RETURN(std::vector<DeviceProcess> processes, ListDeviceProcesses(device));
  return ProcessBytesOf(processes, static_cast<uint32_t>(getpid()));
}

}  // namespace headroom::executor::cuda
