#include "executor/cpu/cpu_kernels.h"

#include "absl/strings/str_cat.h"
#include "executor/cpu/cpu_context.h"

namespace headroom::executor::cpu {
namespace {

const KernelTable& Table() {
  static const KernelTable* table = [] {
    auto* t = new KernelTable;
    RegisterDnnlKernels(t);
    RegisterLoopKernels(t);
    return t;
  }();
  return *table;
}

}  // namespace

CpuKernels::CpuKernels() : ctx_(std::make_unique<CpuContext>()) {}
CpuKernels::~CpuKernels() = default;

const OpKernels* CpuKernels::Find(const std::string& op) const {
  auto it = Table().find(op);
  return it == Table().end() ? nullptr : &it->second;
}

bool CpuKernels::Supports(const std::string& op) const {
  const OpKernels* k = Find(op);
  return k != nullptr && k->forward != nullptr && k->backward != nullptr;
}

absl::StatusOr<uint64_t> CpuKernels::ScratchBytes(const ForwardArgs& args) {
  const OpKernels* k = Find(args.op);
  if (k == nullptr || k->forward == nullptr) {
    return absl::UnimplementedError(absl::StrCat("CPU backend: no forward kernel for op '",
                                                 args.op, "'"));
  }
  return k->forward_scratch == nullptr ? 0 : k->forward_scratch(*ctx_, args);
}

absl::StatusOr<uint64_t> CpuKernels::ScratchBytes(const BackwardArgs& args) {
  const OpKernels* k = Find(args.op);
  if (k == nullptr || k->backward == nullptr) {
    return absl::UnimplementedError(absl::StrCat("CPU backend: no backward kernel for op '",
                                                 args.op, "'"));
  }
  return k->backward_scratch == nullptr ? 0 : k->backward_scratch(*ctx_, args);
}

uint64_t CpuKernels::unplanned_scratch_bytes() const { return ctx_->unplanned_bytes; }

absl::Status CpuKernels::Forward(const ForwardArgs& args) {
  const OpKernels* k = Find(args.op);
  if (k == nullptr || k->forward == nullptr) {
    return absl::UnimplementedError(absl::StrCat("CPU backend: no forward kernel for op '",
                                                 args.op, "'"));
  }
  return k->forward(*ctx_, args);
}

absl::Status CpuKernels::Backward(const BackwardArgs& args) {
  const OpKernels* k = Find(args.op);
  if (k == nullptr || k->backward == nullptr) {
    return absl::UnimplementedError(absl::StrCat("CPU backend: no backward kernel for op '",
                                                 args.op, "'"));
  }
  return k->backward(*ctx_, args);
}

absl::Status CpuKernels::Update(const UpdateArgs& args) { return RunUpdate(*ctx_, args); }

absl::Status CpuKernels::Accumulate(const TensorView& out, const TensorView& a,
                                    const TensorView& b) {
  return RunAccumulate(*ctx_, out, a, b);
}

}  // namespace headroom::executor::cpu
