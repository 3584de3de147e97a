#include "executor/cuda/cuda_context.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace headroom::executor::cuda {
namespace {

// Alignment of each piece Scratch() hands out, and the granule the workspace grows by.
constexpr uint64_t kScratchAlignment = 256;
constexpr uint64_t kWorkspaceGranule = uint64_t{1} << 20;

uint64_t RoundUp(uint64_t x, uint64_t to) { return (x + to - 1) / to * to; }

}  // namespace

absl::Status CudaContext::ReserveWorkspace(uint64_t bytes) {
  if (bytes <= workspace_bytes) return absl::OkStatus();
  const uint64_t grown = RoundUp(bytes, kWorkspaceGranule);
  // Kernels already issued may still use the old buffer.
  HR_CUDA(cudaStreamSynchronize(compute));
  if (workspace != nullptr) {
    HR_CUDA(cudaFree(workspace));
    workspace = nullptr;
    workspace_bytes = 0;
  }
  absl::Status status = CudaStatus(cudaMalloc(&workspace, grown), "cudaMalloc");
  if (!status.ok()) {
    workspace = nullptr;
    return absl::Status(status.code(), absl::StrCat("growing the workspace to ", grown,
                                                    " bytes: ", status.message()));
  }
  workspace_bytes = grown;
  return absl::OkStatus();
}

uint64_t CudaContext::ScratchTotal(const std::vector<uint64_t>& bytes) {
  uint64_t total = 0;
  for (uint64_t b : bytes) total += RoundUp(b, kScratchAlignment);
  return total;
}

absl::StatusOr<std::vector<void*>> CudaContext::Scratch(void* planned, uint64_t planned_bytes,
                                                        const std::vector<uint64_t>& bytes) {
  const uint64_t total = ScratchTotal(bytes);
  char* base = static_cast<char*>(planned);
  if (total > 0 && (planned == nullptr || planned_bytes < total)) {
    RETURN_IF_ERROR(ReserveWorkspace(total));
    base = static_cast<char*>(workspace);
  }
  std::vector<void*> pieces;
  uint64_t offset = 0;
  for (uint64_t b : bytes) {
    pieces.push_back(base + offset);
    offset += RoundUp(b, kScratchAlignment);
  }
  return pieces;
}

absl::Status RequireF32(const TensorView& view, const char* what) {
  if (!view.present()) return absl::InvalidArgumentError(absl::StrCat(what, " is not given"));
  if (view.dtype != proto::DTYPE_FLOAT32) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has dtype ",
                                                   graph::DTypeName(view.dtype),
                                                   "; the CUDA backend takes float32 only"));
  }
  return absl::OkStatus();
}

absl::Status CopyIfDistinct(CudaContext& ctx, void* dst, const void* src, uint64_t bytes) {
  if (dst == src || bytes == 0) return absl::OkStatus();
  HR_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx.compute));
  return absl::OkStatus();
}

absl::Status ZeroIfPresent(CudaContext& ctx, const TensorView& view) {
  if (!view.present()) return absl::OkStatus();
  HR_CUDA(cudaMemsetAsync(view.data, 0, view.bytes(), ctx.compute));
  return absl::OkStatus();
}

}  // namespace headroom::executor::cuda
