#include "executor/backends.h"

#include "absl/strings/str_cat.h"
#include "executor/cpu/cpu_backend.h"
#ifdef HEADROOM_HAVE_CUDA
#include "executor/cuda/cuda_backend.h"
#endif

namespace headroom::executor {

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const std::string& name) {
  if (name == "cpu") return cpu::CreateCpuBackend();
  if (name != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("backend '", name, "': needs cpu or cuda"));
  }
#ifdef HEADROOM_HAVE_CUDA
  return cuda::CreateCudaBackend(0);
#else
  return absl::FailedPreconditionError("this build has no CUDA backend (no toolkit found)");
#endif
}

}  // namespace headroom::executor
