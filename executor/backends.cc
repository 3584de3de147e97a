#include "executor/backends.h"

#include "absl/strings/str_cat.h"
#include "executor/cpu/cpu_backend.h"
#ifdef HEADROOM_HAVE_CUDA
#include "executor/cuda/cuda_backend.h"
#endif

namespace headroom::executor {

absl::StatusOr<std::unique_ptr<Backend>> MakeBackendWithOptions(const std::string& name,
                                                                const BackendOptions& options) {
  // The CPU backend is deterministic whatever the options.
  if (name == "cpu") return cpu::CreateCpuBackend();
  if (name != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat("backend '", name, "': needs cpu or cuda"));
  }
#ifdef HEADROOM_HAVE_CUDA
  cuda::CudaBackendOptions cuda_options;
  cuda_options.deterministic = options.deterministic;
  return cuda::CreateCudaBackend(0, cuda_options);
#else
  return absl::FailedPreconditionError("this build has no CUDA backend (no toolkit found)");
#endif
}

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const std::string& name) {
  return MakeBackendWithOptions(name, BackendOptions{});
}

}  // namespace headroom::executor
