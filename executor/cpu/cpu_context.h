// Internal to the CPU backend: the oneDNN engine and stream its kernels share, a cache of
// built primitives, kernel scratch, and the per-op kernel table the kernel files fill in.
#ifndef HEADROOM_EXECUTOR_CPU_CPU_CONTEXT_H_
#define HEADROOM_EXECUTOR_CPU_CPU_CONTEXT_H_

#include <cstdlib>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "executor/kernel_args.h"
#include "executor/kernel_table.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace headroom::executor::cpu {

// One per CpuKernels. Not thread-safe: kernels run one at a time on the compute thread.
struct CpuContext {
  CpuContext() = default;
  CpuContext(const CpuContext&) = delete;
  CpuContext& operator=(const CpuContext&) = delete;
  ~CpuContext() { std::free(unplanned); }

  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  // Built primitives (and whatever else a kernel wants to keep between calls), keyed by a
  // string the kernel makes from its op, shapes and attributes. Building a oneDNN primitive
  // compiles code, so every kernel that uses one looks it up here first.
  absl::flat_hash_map<std::string, std::shared_ptr<void>> cache;

  // Returns the cached object for `key`, building it with `make()` (returning
  // std::shared_ptr<T>) on first use.
  template <typename T, typename Make>
  T& Cached(const std::string& key, Make make) {
    auto it = cache.find(key);
    if (it == cache.end()) it = cache.emplace(key, std::shared_ptr<void>(make())).first;
    return *static_cast<T*>(it->second.get());
  }

  // Returns `needed` bytes of scratch (64-byte aligned) for a kernel handed `planned`
  // bytes at `data` (its node's planned scratch, from the kernel arguments): those when
  // they are enough, else `unplanned`, a buffer outside any plan grown to the largest need
  // so far. So a kernel run without a plan's scratch (a kernel test, a plan made without
  // the backend's ScratchModel) still works, and the backend's workspace_bytes() shows
  // what no plan holds. ResourceExhausted if the buffer cannot grow.
  absl::StatusOr<char*> Scratch(void* data, uint64_t planned, uint64_t needed) {
    if (needed == 0 || (data != nullptr && planned >= needed)) return static_cast<char*>(data);
    if (needed > unplanned_bytes) {
      std::free(unplanned);
      unplanned_bytes = 0;
      unplanned = static_cast<char*>(std::aligned_alloc(64, (needed + 63) / 64 * 64));
      if (unplanned == nullptr) {
        return absl::ResourceExhaustedError(
            absl::StrCat("CPU backend: cannot allocate ", needed, " bytes of kernel scratch"));
      }
      unplanned_bytes = needed;
    }
    return unplanned;
  }

  // The scratch no plan holds (see Scratch()).
  char* unplanned = nullptr;
  uint64_t unplanned_bytes = 0;
};

// Returns primitive attributes under which the caller hands a primitive its scratchpad
// (DNNL_ARG_SCRATCHPAD, in the node's scratch) where oneDNN would otherwise allocate one
// outside the plan. Every primitive the kernels build uses them.
inline dnnl::primitive_attr UserScratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

using OpKernels = OpKernelsOf<CpuContext>;
using KernelTable = KernelTableOf<CpuContext>;
using ForwardKernel = OpKernels::Forward;
using BackwardKernel = OpKernels::Backward;
using ForwardScratch = OpKernels::ForwardScratch;
using BackwardScratch = OpKernels::BackwardScratch;

// cpu_dnnl_kernels.cc: Conv2D, BatchNorm, MatMul, MaxPool, AvgPool, GlobalAvgPool.
void RegisterDnnlKernels(KernelTable* table);
// cpu_dnnl_kernels.cc: returns whether MatMul's backward kernel takes these bfloat16
// arguments itself (its forward always does); false where a and b broadcast batch dims
// pairwise, or db sums a transposed a over a's batch: those the dispatch stages.
bool MatMulBackwardTakesBf16(const BackwardArgs& args);
// cpu_loop_kernels.cc: every other op of the op set (eltwise ops through oneDNN's eltwise
// primitive, softmax through oneDNN's softmax, the rest as loops).
void RegisterLoopKernels(KernelTable* table);
// cpu_resize_kernels.cc: Resize (nearest and bilinear).
void RegisterResizeKernels(KernelTable* table);

// cpu_reduce_kernels.cc: ReduceSum, ReduceMax, ReduceMin.
void RegisterReduceKernels(KernelTable* table);
// cpu_segmentation_kernels.cc: GroupNorm and PixelSoftmaxCrossEntropy.
void RegisterSegmentationKernels(KernelTable* table);

// cpu_bf16_kernels.cc: Cast (float32 <-> bfloat16).
void RegisterBf16Kernels(KernelTable* table);

// cpu_bf16_kernels.cc: run (or size the scratch of) kernel `k` for `args`, the way its
// dtypes ask: float32 calls as `k` itself; calls with a bfloat16 tensor through the op's
// bfloat16 path (its own kernel, or its float32 kernel on float32 copies staged in the
// node's scratch, which the scratch query then includes); InvalidArgument naming the op and
// tensor where the op has no bfloat16 path.
absl::StatusOr<uint64_t> ForwardScratchOf(CpuContext& ctx, const OpKernels& k,
                                          const ForwardArgs& args);
absl::StatusOr<uint64_t> BackwardScratchOf(CpuContext& ctx, const OpKernels& k,
                                           const BackwardArgs& args);
absl::Status RunForward(CpuContext& ctx, const OpKernels& k, const ForwardArgs& args);
absl::Status RunBackward(CpuContext& ctx, const OpKernels& k, const BackwardArgs& args);
// out = a + b on bfloat16 tensors of the same element count, added in float32 and rounded
// to nearest even; out may alias a or b. REQUIRES: all three present and bfloat16.
absl::Status AccumulateBf16(const TensorView& out, const TensorView& a, const TensorView& b);

// cpu_loop_kernels.cc: optimizer steps and gradient sums.
absl::Status RunUpdate(CpuContext& ctx, const UpdateArgs& args);
// out = a + b elementwise, same shapes and dtype (float32, or bfloat16 added in float32);
// out may alias a or b.
absl::Status RunAccumulate(CpuContext& ctx, const TensorView& out, const TensorView& a,
                           const TensorView& b);

}  // namespace headroom::executor::cpu

#endif  // HEADROOM_EXECUTOR_CPU_CPU_CONTEXT_H_
