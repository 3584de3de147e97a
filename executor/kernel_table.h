// The per-op kernel table a backend's kernel files fill in, shared by the CPU and CUDA
// backends: each op's forward and backward kernels and their scratch queries, all taking
// the backend's own context (CpuContext, CudaContext).
#ifndef HEADROOM_EXECUTOR_KERNEL_TABLE_H_
#define HEADROOM_EXECUTOR_KERNEL_TABLE_H_

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "executor/kernel_args.h"

namespace headroom::executor {

// The kernels of one op for a backend whose kernels share a `Context`.
template <typename Context>
struct OpKernelsOf {
  using Forward = absl::Status (*)(Context& ctx, const ForwardArgs& args);
  using Backward = absl::Status (*)(Context& ctx, const BackwardArgs& args);
  // Return the scratch bytes the kernel needs for these arguments (Backend::ScratchBytes):
  // deciding only, from shapes, attributes and which tensors are present.
  using ForwardScratch = absl::StatusOr<uint64_t> (*)(Context& ctx, const ForwardArgs& args);
  using BackwardScratch = absl::StatusOr<uint64_t> (*)(Context& ctx, const BackwardArgs& args);

  Forward forward = nullptr;
  Backward backward = nullptr;
  // None: the kernel needs no scratch.
  ForwardScratch forward_scratch = nullptr;
  BackwardScratch backward_scratch = nullptr;
};

// Op set name ("Conv2D") -> its kernels.
template <typename Context>
using KernelTableOf = absl::flat_hash_map<std::string, OpKernelsOf<Context>>;

// Returns the kernels of `op` in `table` that have a forward (else a backward) kernel;
// Unimplemented, naming `backend` ("CPU backend"), for an op without one.
template <typename Context>
absl::StatusOr<const OpKernelsOf<Context>*> FindKernels(const KernelTableOf<Context>& table,
                                                        const char* backend,
                                                        const std::string& op, bool forward) {
  auto it = table.find(op);
  if (it == table.end() ||
      (forward ? it->second.forward == nullptr : it->second.backward == nullptr)) {
    return absl::UnimplementedError(absl::StrCat(backend, ": no ",
                                                 forward ? "forward" : "backward",
                                                 " kernel for op '", op, "'"));
  }
  return &it->second;
}

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_KERNEL_TABLE_H_
