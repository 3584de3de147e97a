#include "dist/sync_batch_norm.h"

#include <chrono>
#include <climits>

#include "absl/strings/str_cat.h"
#include "util/status_macros.h"

namespace headroom::dist {

absl::Status SyncBatchNorm::Prepare(absl::Span<const executor::BatchNormCollective> collectives) {
  if (collectives.empty()) {
    return absl::InvalidArgumentError(
        "--sync-batchnorm: the model has no batch norm in training to synchronise");
  }
  sequence_.clear();
  for (const executor::BatchNormCollective& c : collectives) {
    sequence_.push_back({c.what, c.count, c.position});
  }
  return absl::OkStatus();
}

absl::Status SyncBatchNorm::AllreduceSum(float* data, size_t count, const std::string& what) {
  const auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(const CollectiveHandle handle,
                   collectives_->AllreduceAsync(data, count, ReduceOp::kSum, what));
  RETURN_IF_ERROR(collectives_->Wait(handle));
  stats_.wait_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ++stats_.allreduces;
  stats_.reduced_bytes += count * sizeof(float);
  return absl::OkStatus();
}

std::vector<CollectiveSpec> SyncBatchNorm::Sequence() const { return sequence_; }

std::vector<CollectiveSpec> MergeByPosition(const std::vector<CollectiveSpec>& a,
                                            const std::vector<CollectiveSpec>& b) {
  auto key = [](const CollectiveSpec& c) { return c.position < 0 ? INT_MAX : c.position; };
  std::vector<CollectiveSpec> merged;
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    if (j == b.size() || (i < a.size() && key(a[i]) <= key(b[j]))) {
      merged.push_back(a[i++]);
    } else {
      merged.push_back(b[j++]);
    }
  }
  return merged;
}

}  // namespace headroom::dist
