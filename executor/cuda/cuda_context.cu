#include "executor/cuda/cuda_context.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "executor/cuda/cuda_device_utils.h"

namespace headroom::executor::cuda {
namespace {

// Alignment of each piece Scratch() hands out, and the granule the workspace grows by.
constexpr uint64_t kScratchAlignment = 256;
constexpr uint64_t kWorkspaceGranule = uint64_t{1} << 20;

uint64_t RoundUp(uint64_t x, uint64_t to) { return (x + to - 1) / to * to; }

// slot[0] = the smallest flat index whose id lies outside [0, limit) and is not `exempt`.
template <typename Id>
__global__ void FindOutOfRangeKernel(const Id* ids, int64_t n, int64_t limit, int64_t exempt,
                                     unsigned long long* first) {
  GRID_STRIDE_LOOP(i, n) {
    const int64_t v = static_cast<int64_t>(ids[i]);
    if ((v < 0 || v >= limit) && v != exempt) {
      atomicMin(first, static_cast<unsigned long long>(i));
    }
  }
}

// slot[1] = the id at slot[0], if any: read before later kernels may overwrite the ids.
template <typename Id>
__global__ void RecordOutOfRangeKernel(const Id* ids, int64_t* slot) {
  if (slot[0] != CudaContext::kNoIndex) slot[1] = static_cast<int64_t>(ids[slot[0]]);
}

template <typename Id>
absl::Status LaunchIndexCheck(cudaStream_t stream, const Id* ids, int64_t n, int64_t limit,
                              int64_t exempt, int64_t* slot) {
  FindOutOfRangeKernel<<<GridFor(n), kThreads, 0, stream>>>(
      ids, n, limit, exempt, reinterpret_cast<unsigned long long*>(slot));
  HR_CUDA_LAUNCHED("FindOutOfRangeKernel");
  RecordOutOfRangeKernel<<<1, 1, 0, stream>>>(ids, slot);
  HR_CUDA_LAUNCHED("RecordOutOfRangeKernel");
  return absl::OkStatus();
}

__global__ void ClearIndexSlotsKernel(int64_t* slots, int count) {
  GRID_STRIDE_LOOP(i, count) {
    slots[2 * i] = CudaContext::kNoIndex;
    slots[2 * i + 1] = 0;
  }
}

// Writes kNoIndex, 0 to the first `count` slots, in order on `stream` (a synchronous copy
// from pageable memory could land after kernels the stream runs later).
absl::Status ClearIndexSlots(cudaStream_t stream, int64_t* slots, int count) {
  ClearIndexSlotsKernel<<<1, kThreads, 0, stream>>>(slots, count);
  HR_CUDA_LAUNCHED("ClearIndexSlotsKernel");
  return absl::OkStatus();
}

}  // namespace

absl::Status CudaContext::AllocateIndexSlots() {
  HR_CUDA(cudaMalloc(&index_slots, kIndexSlots * 2 * sizeof(int64_t)));
  RETURN_IF_ERROR(ClearIndexSlots(compute, index_slots, kIndexSlots));
  HR_CUDA(cudaStreamSynchronize(compute));
  return absl::OkStatus();
}

absl::Status CudaContext::CheckIndices(const TensorView& ids, int64_t limit, std::string what,
                                       std::string of, int64_t exempt) {
  if (ids.dtype != proto::DTYPE_INT32 && ids.dtype != proto::DTYPE_INT64) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has dtype ", graph::DTypeName(ids.dtype), ", needs int32 or int64"));
  }
  const int64_t n = ids.num_elements();
  if (n == 0) return absl::OkStatus();
  if (pending_index_checks.size() >= static_cast<size_t>(kIndexSlots)) {
    HR_CUDA(cudaStreamSynchronize(compute));
    RETURN_IF_ERROR(CollectIndexChecks());
  }
  int64_t* slot = index_slots + 2 * pending_index_checks.size();
  if (ids.dtype == proto::DTYPE_INT32) {
    RETURN_IF_ERROR(LaunchIndexCheck(compute, ids.i32(), n, limit, exempt, slot));
  } else {
    RETURN_IF_ERROR(LaunchIndexCheck(compute, ids.i64(), n, limit, exempt, slot));
  }
  pending_index_checks.push_back(
      {absl::StrCat(what, " ", graph::ShapeString(ids.shape)), limit, std::move(of)});
  return absl::OkStatus();
}

absl::Status CudaContext::CollectIndexChecks() {
  const int count = static_cast<int>(pending_index_checks.size());
  if (count == 0) return absl::OkStatus();
  std::vector<int64_t> found(2 * count);
  HR_CUDA(cudaMemcpyAsync(found.data(), index_slots, found.size() * sizeof(int64_t),
                          cudaMemcpyDeviceToHost, compute));
  HR_CUDA(cudaStreamSynchronize(compute));
  std::vector<PendingIndexCheck> checks = std::move(pending_index_checks);
  pending_index_checks.clear();
  RETURN_IF_ERROR(ClearIndexSlots(compute, index_slots, count));
  for (int i = 0; i < count; ++i) {
    if (found[2 * i] == kNoIndex) continue;
    const PendingIndexCheck& c = checks[i];
    return absl::InvalidArgumentError(absl::StrCat(c.what, " holds ", found[2 * i + 1],
                                                   " at flat index ", found[2 * i],
                                                   ", outside [0, ", c.limit, ") for ", c.of));
  }
  return absl::OkStatus();
}

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
