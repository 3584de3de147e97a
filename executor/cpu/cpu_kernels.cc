#include "executor/cpu/cpu_kernels.h"

#include "executor/cpu/cpu_context.h"
#include "util/status_macros.h"

namespace headroom::executor::cpu {
namespace {

// Names the backend in errors.
constexpr char kBackend[] = "CPU backend";

const KernelTable& Table() {
  static const KernelTable* table = [] {
    auto* t = new KernelTable;
    RegisterDnnlKernels(t);
    RegisterLoopKernels(t);
    RegisterReduceKernels(t);
    RegisterResizeKernels(t);
    RegisterSegmentationKernels(t);
    RegisterBf16Kernels(t);
    return t;
  }();
  return *table;
}

}  // namespace

CpuKernels::CpuKernels() : ctx_(std::make_unique<CpuContext>()) {}
CpuKernels::~CpuKernels() = default;

bool CpuKernels::Supports(const std::string& op) const {
  auto it = Table().find(op);
  return it != Table().end() && it->second.forward != nullptr && it->second.backward != nullptr;
}

absl::StatusOr<uint64_t> CpuKernels::ScratchBytes(const ForwardArgs& args) {
  ASSIGN_OR_RETURN(const OpKernels* k, FindKernels(Table(), kBackend, args.op, /*forward=*/true));
  return ForwardScratchOf(*ctx_, *k, args);
}

absl::StatusOr<uint64_t> CpuKernels::ScratchBytes(const BackwardArgs& args) {
  ASSIGN_OR_RETURN(const OpKernels* k, FindKernels(Table(), kBackend, args.op, /*forward=*/false));
  return BackwardScratchOf(*ctx_, *k, args);
}

uint64_t CpuKernels::unplanned_scratch_bytes() const { return ctx_->unplanned_bytes; }

absl::Status CpuKernels::Forward(const ForwardArgs& args) {
  ASSIGN_OR_RETURN(const OpKernels* k, FindKernels(Table(), kBackend, args.op, /*forward=*/true));
  return RunForward(*ctx_, *k, args);
}

absl::Status CpuKernels::Backward(const BackwardArgs& args) {
  ASSIGN_OR_RETURN(const OpKernels* k, FindKernels(Table(), kBackend, args.op, /*forward=*/false));
  return RunBackward(*ctx_, *k, args);
}

absl::Status CpuKernels::Update(const UpdateArgs& args) { return RunUpdate(*ctx_, args); }

absl::Status CpuKernels::Accumulate(const TensorView& out, const TensorView& a,
                                    const TensorView& b) {
  return RunAccumulate(*ctx_, out, a, b);
}

}  // namespace headroom::executor::cpu
