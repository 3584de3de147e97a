// Internal to the CPU backend: the oneDNN engine and stream its kernels share, a cache of
// built primitives, and the per-op kernel table the kernel files fill in.
#ifndef HEADROOM_EXECUTOR_CPU_CPU_CONTEXT_H_
#define HEADROOM_EXECUTOR_CPU_CPU_CONTEXT_H_

#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "executor/kernel_args.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace headroom::executor::cpu {

// One per CpuKernels. Not thread-safe: kernels run one at a time on the compute thread.
struct CpuContext {
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
};

using ForwardKernel = absl::Status (*)(CpuContext& ctx, const ForwardArgs& args);
using BackwardKernel = absl::Status (*)(CpuContext& ctx, const BackwardArgs& args);

struct OpKernels {
  ForwardKernel forward = nullptr;
  BackwardKernel backward = nullptr;
};

// Op set name ("Conv2D") -> its kernels.
using KernelTable = absl::flat_hash_map<std::string, OpKernels>;

// cpu_dnnl_kernels.cc: Conv2D, BatchNorm, MatMul, MaxPool, AvgPool, GlobalAvgPool.
void RegisterDnnlKernels(KernelTable* table);
// cpu_loop_kernels.cc: every other op of the op set (eltwise ops through oneDNN's eltwise
// primitive, softmax through oneDNN's softmax, the rest as loops).
void RegisterLoopKernels(KernelTable* table);

// cpu_loop_kernels.cc: optimizer steps and gradient sums.
absl::Status RunUpdate(CpuContext& ctx, const UpdateArgs& args);
// out = a + b elementwise, same shapes; out may alias a or b.
absl::Status RunAccumulate(CpuContext& ctx, const TensorView& out, const TensorView& a,
                           const TensorView& b);

}  // namespace headroom::executor::cpu

#endif  // HEADROOM_EXECUTOR_CPU_CPU_CONTEXT_H_
