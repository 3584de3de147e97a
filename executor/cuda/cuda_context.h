// Internal to the CUDA backend: the device state its kernels share (the compute stream, the
// cuDNN and cuBLAS handles bound to it, the one workspace buffer, a cache of cuDNN plans),
// macros that return CUDA, cuDNN and cuBLAS errors (as util/cuda_status.h maps them), and
// the per-op kernel table the kernel files fill in.
//
// Not thread-safe: kernels run one at a time on the executor thread, and everything they
// issue goes to `compute`, so stream order is the only synchronisation they need.
#ifndef HEADROOM_EXECUTOR_CUDA_CUDA_CONTEXT_H_
#define HEADROOM_EXECUTOR_CUDA_CUDA_CONTEXT_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "executor/cuda/cudnn_limits.h"
#include "executor/kernel_args.h"
#include "executor/kernel_table.h"
#include "util/cublas_status.h"
#include "util/cuda_status.h"
#include "util/status_macros.h"

// Each returns the error from the enclosing function, naming the call, as util/cuda_status.h
// maps it.
#define HR_CUDA(call) RETURN_IF_ERROR(::headroom::CudaStatus((call), #call))
#define HR_CUDNN(call) RETURN_IF_ERROR(::headroom::CudnnStatus((call), #call))
#define HR_CUBLAS(call) RETURN_IF_ERROR(::headroom::CublasStatus((call), #call))
// After a <<<...>>> launch: returns a launch error (bad configuration, no kernel image).
#define HR_CUDA_LAUNCHED(kernel_name) \
  RETURN_IF_ERROR(::headroom::CudaStatus(cudaGetLastError(), kernel_name))

namespace headroom::executor::cuda {

// Threads per block of the simple kernels, and the grid of a grid-stride loop over n items.
inline constexpr int kThreads = 256;
inline unsigned GridFor(int64_t n, int threads = kThreads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, int64_t{1} << 20));
}

struct CudaContext {
  int device = 0;
  // Whether cuDNN convolutions and cuBLAS GEMMs may use TF32 tensor cores.
  bool allow_tf32 = false;
  // Caps the workspace a cuDNN convolution algorithm may ask for.
  uint64_t max_conv_workspace_bytes = 0;
  // Whether every kernel must give bitwise the same results run after run: cuDNN
  // convolution algorithms are then chosen among the deterministic ones only.
  bool deterministic = true;
  // The workspace each MatMul declares as scratch and hands to cuBLAS (cublasSetWorkspace):
  // NVIDIA's recommendation, 32 MiB on Hopper and newer (compute capability 9+), 4 MiB
  // before. Set by Init() from the device.
  uint64_t cublas_workspace_bytes = 0;
  cudaStream_t compute = nullptr;
  cudnnHandle_t cudnn = nullptr;
  cublasHandle_t cublas = nullptr;

  // The workspace: one device buffer outside any plan, grown (never shrunk) by Scratch()
  // for a kernel handed less planned scratch than it declared (a plan made without the
  // backend's ScratchModel); its contents do not survive from one kernel call to the next.
  void* workspace = nullptr;
  uint64_t workspace_bytes = 0;

  // Descriptors and chosen algorithms (cuDNN plans), keyed by a string a kernel makes from
  // its op, shapes and attributes; built once per key.
  absl::flat_hash_map<std::string, std::shared_ptr<void>> cache;

  // Returns the cached object for `key`, building it with `make()` (returning
  // absl::StatusOr<std::shared_ptr<T>>) on first use; a failed build is not cached.
  template <typename T, typename Make>
  absl::StatusOr<T*> Cached(const std::string& key, Make make) {
    auto it = cache.find(key);
    if (it == cache.end()) {
      absl::StatusOr<std::shared_ptr<T>> built = make();
      if (!built.ok()) return built.status();
      it = cache.emplace(key, std::shared_ptr<void>(*std::move(built))).first;
    }
    return static_cast<T*>(it->second.get());
  }

  // Returns one pointer per entry of `bytes`, each 256-byte aligned, carved from the
  // node's planned scratch (`planned`, `planned_bytes`: the kernel arguments' scratch) when
  // it holds ScratchTotal(bytes), else from the workspace (grown first if it is too small;
  // growing waits for the compute stream). The pointers are valid until the next call.
  // Sizes of 0 give unusable (maybe null) pointers, and a call asking for 0 bytes in all
  // allocates nothing.
  absl::StatusOr<std::vector<void*>> Scratch(void* planned, uint64_t planned_bytes,
                                             const std::vector<uint64_t>& bytes);
  // As above, with the scratch of kernel arguments `args` (ForwardArgs or BackwardArgs).
  template <typename Args>
  absl::StatusOr<std::vector<void*>> Scratch(const Args& args,
                                             const std::vector<uint64_t>& bytes) {
    return Scratch(args.scratch, args.scratch_bytes, bytes);
  }
  // Returns the bytes Scratch() carves for `bytes`: what a kernel declares as its scratch.
  static uint64_t ScratchTotal(const std::vector<uint64_t>& bytes);

  // Grows the workspace to at least `bytes`.
  absl::Status ReserveWorkspace(uint64_t bytes);

  // Range checks of ids and labels, run on the device so that no kernel waits for the host:
  // CheckIndices() issues one on the compute stream, and CollectIndexChecks(), called once
  // the compute stream is idle (Synchronize()), returns the first that failed, as the CPU
  // backend words it: InvalidArgument("op 'Embedding': input 'ids' [2,3] holds 7 at flat
  // index 1, outside [0, 5) for input 'table' [5,4]"). Each issued check holds one slot of
  // `index_slots` (device memory: the first flat index out of range, kNoIndex if none, and
  // the value there); with all slots held, CheckIndices() first waits and collects.
  static constexpr int kIndexSlots = 256;
  static constexpr int64_t kNoIndex = INT64_MAX;
  int64_t* index_slots = nullptr;  // [kIndexSlots][2]; allocated by AllocateIndexSlots().
  struct PendingIndexCheck {
    std::string what;  // "op 'Embedding': input 'ids' [2,3]"
    int64_t limit;     // The ids must lie in [0, limit).
    std::string of;    // "input 'table' [5,4]"
  };
  std::vector<PendingIndexCheck> pending_index_checks;

  // Allocates and clears the index slots (once, at Init()).
  absl::Status AllocateIndexSlots();
  // Issues a check that every element of `ids` (int32 or int64) lies in [0, limit) or equals
  // `exempt` (a loss's ignore_index; by default no id).
  static constexpr int64_t kNoExemptId = INT64_MIN;
  absl::Status CheckIndices(const TensorView& ids, int64_t limit, std::string what, std::string of,
                            int64_t exempt = kNoExemptId);
  // Returns the first failed check issued since the last call, and clears them all.
  // REQUIRES: the compute stream is idle.
  absl::Status CollectIndexChecks();
};

// Returns InvalidArgument unless `view` is present and float32; `what` names it.
absl::Status RequireF32(const TensorView& view, const char* what);
// Issues a device-to-device copy of `bytes` on the compute stream unless dst == src.
absl::Status CopyIfDistinct(CudaContext& ctx, void* dst, const void* src, uint64_t bytes);
// Issues a memset of the view's bytes to zero on the compute stream (nothing if absent).
absl::Status ZeroIfPresent(CudaContext& ctx, const TensorView& view);

// The scratch queries return CudaContext::ScratchTotal of the pieces the kernel will ask
// Scratch() for. Deciding only, though a convolution's query chooses (and caches) its cuDNN
// algorithms, which needs the device.
using OpKernels = OpKernelsOf<CudaContext>;
using KernelTable = KernelTableOf<CudaContext>;

// cuda_dnn_kernels.cu: Conv2D, BatchNorm, ReLU, ReLU6, Sigmoid, Tanh (cuDNN).
void RegisterDnnKernels(KernelTable* table);
// cuda_pool_kernels.cu: MaxPool, AvgPool (cuDNN, or own kernels for ceil_mode and
// asymmetric padding), GlobalAvgPool.
void RegisterPoolKernels(KernelTable* table);
// cuda_blas_kernels.cu: MatMul (cuBLAS).
void RegisterBlasKernels(KernelTable* table);
// cuda_elementwise_kernels.cu: GELU, Dropout, Add, Mul, Flatten, Reshape, Transpose, Slice,
// Expand, Concat, Split.
void RegisterElementwiseKernels(KernelTable* table);
// cuda_activation_kernels.cu: HardSigmoid, HardSwish.
void RegisterActivationKernels(KernelTable* table);
// cuda_row_kernels.cu: LayerNorm, Softmax, Embedding, SoftmaxCrossEntropy.
void RegisterRowKernels(KernelTable* table);
// cuda_resize_kernels.cu: Resize (nearest and bilinear), bitwise the CPU backend's.
void RegisterResizeKernels(KernelTable* table);

// cuda_reduce_kernels.cu: ReduceSum, ReduceMax, ReduceMin.
void RegisterReduceKernels(KernelTable* table);
// cuda_segmentation_kernels.cu: GroupNorm, PixelSoftmaxCrossEntropy.
void RegisterSegmentationKernels(KernelTable* table);

// cuda_elementwise_kernels.cu: optimizer steps, gradient sums and fills.
absl::Status RunUpdate(CudaContext& ctx, const UpdateArgs& args);
absl::Status RunAccumulate(CudaContext& ctx, const TensorView& out, const TensorView& a,
                           const TensorView& b);
absl::Status RunFill(CudaContext& ctx, const TensorView& out, float value);

// cuda_elementwise_kernels.cu: out[c] = sum over r of in[r * cols + c], for bias gradients.
absl::Status ColumnSums(CudaContext& ctx, const float* in, int64_t rows, int64_t cols,
                        float* out);

}  // namespace headroom::executor::cuda

#endif  // HEADROOM_EXECUTOR_CUDA_CUDA_CONTEXT_H_
