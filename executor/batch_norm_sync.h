// The executor's hook for batch norm synchronised across data-parallel ranks
// (--sync-batchnorm; dist/sync_batch_norm implements it over the ranks' collectives).
//
// With a sync set (ExecutorOptions::batch_norm_sync), every BatchNorm of a training step
// normalises over the global batch: the CPU kernel sums its per-channel statistics through
// AllreduceSum() (ForwardArgs/BackwardArgs::sync_statistics; executor/kernel_args.h):
//   - each forward (not a re-forward): count and sum(x) (C + 1 floats), then
//     sum((x - mean)^2) (C floats);
//   - each backward that computes dx: count, sum(dy) and sum(dy * xhat) (2C + 1 floats).
// The executor keeps each batch norm's global mean and variance from the forward (host
// memory, 2C floats per batch norm, outside the plan) and copies them into a re-forward's
// saved statistics, so a re-forward issues no collective. Prepare() is told, before the
// first step, every collective a step issues through the sync, in order, with its schedule
// position, so that the ranks' sequences can be compared (dist/data_parallel.h).
//
// Limits: backends whose device is host memory (the CPU backend); others are refused at
// Create. Called from the executor's one thread.
#ifndef HEADROOM_EXECUTOR_BATCH_NORM_SYNC_H_
#define HEADROOM_EXECUTOR_BATCH_NORM_SYNC_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace headroom::executor {

// One allreduce a step issues for a synchronised batch norm.
struct BatchNormCollective {
  // "allreduce of batch norm 'bn1' count and sum(x)".
  std::string what;
  // Floats summed.
  uint64_t count = 0;
  // The schedule position of the node that issues it.
  int32_t position = 0;
};

class BatchNormSync {
 public:
  virtual ~BatchNormSync() = default;

  // Called once by Executor::Create with every collective a step issues through
  // AllreduceSum(), in the order it issues them. An error stops Create.
  virtual absl::Status Prepare(absl::Span<const BatchNormCollective> collectives) = 0;

  // Sums `count` floats at `data` in place over every rank; returns once done (blocking).
  // `what` names the collective in errors.
  virtual absl::Status AllreduceSum(float* data, size_t count, const std::string& what) = 0;
};

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_BATCH_NORM_SYNC_H_
