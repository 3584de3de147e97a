// The CPU backend's kernels for every op of the op set, forward and backward, plus the
// optimizer steps: oneDNN for convolution, pooling, batch norm, eltwise, matmul and
// softmax, plain loops where oneDNN has nothing. Multi-threaded where oneDNN is (OpenMP).
// Deterministic: the same inputs give bitwise the same outputs on every call.
//
// Memory: every byte a kernel needs beyond its inputs and outputs (oneDNN scratchpads, run
// in user mode; copies staged in oneDNN's blocked layouts; loop temporaries) is declared by
// ScratchBytes() and taken from the arguments' scratch. What remains are the primitives
// themselves (descriptors and generated code), a fixed cost.
//
// Not thread-safe: one compute thread calls it. Owns its oneDNN engine, stream and
// primitive cache.
#ifndef HEADROOM_EXECUTOR_CPU_CPU_KERNELS_H_
#define HEADROOM_EXECUTOR_CPU_CPU_KERNELS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "executor/kernel_args.h"

namespace headroom::executor::cpu {

struct CpuContext;

class CpuKernels {
 public:
  CpuKernels();
  ~CpuKernels();
  CpuKernels(const CpuKernels&) = delete;
  CpuKernels& operator=(const CpuKernels&) = delete;

  // Returns whether `op` (an op set name) has forward and backward kernels.
  bool Supports(const std::string& op) const;

  // Returns the scratch bytes the kernel for `args` needs (Backend::ScratchBytes): deciding
  // only; Unimplemented for an unknown op, InvalidArgument for arguments it would refuse.
  absl::StatusOr<uint64_t> ScratchBytes(const ForwardArgs& args);
  absl::StatusOr<uint64_t> ScratchBytes(const BackwardArgs& args);

  // Runs the forward of args.op; Unimplemented for an unknown op, InvalidArgument for a
  // dtype or layout the kernel does not take.
  absl::Status Forward(const ForwardArgs& args);
  // Runs the backward of args.op.
  absl::Status Backward(const BackwardArgs& args);
  // Runs one optimizer step.
  absl::Status Update(const UpdateArgs& args);
  // out = a + b; out may alias a or b.
  absl::Status Accumulate(const TensorView& out, const TensorView& a, const TensorView& b);

  // Returns the bytes of scratch held outside any plan: kernels that were handed less
  // scratch than they declared (0 when every call got its planned scratch).
  uint64_t unplanned_scratch_bytes() const;

 private:
  std::unique_ptr<CpuContext> ctx_;
};

}  // namespace headroom::executor::cpu

#endif  // HEADROOM_EXECUTOR_CPU_CPU_KERNELS_H_
