#include "dist/collectives.h"

#include <chrono>

namespace headroom::dist {

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

absl::StatusOr<double> Collectives::WaitCompleted(CollectiveHandle handle) {
  absl::Status status = Wait(handle);
  if (!status.ok()) return status;
  return SteadySeconds();
}

const char* ReduceOpName(ReduceOp op) { return op == ReduceOp::kSum ? "sum" : "average"; }

}  // namespace headroom::dist
