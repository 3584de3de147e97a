// Batch norm over the global batch of data-parallel ranks (--sync-batchnorm): the
// executor's BatchNormSync (executor/batch_norm_sync.h) over a Collectives
// (dist/collectives.h), as PyTorch's SyncBatchNorm.
//
// Each training step, every BatchNorm's forward sums its per-channel count and sum(x), then
// sum((x - mean)^2), over the ranks, and its backward (where it computes dx) count, sum(dy)
// and sum(dy * xhat): blocking allreduces (sum) issued by the training thread in schedule
// order. They go through the same Collectives as the gradient buckets' asynchronous
// allreduces, whose MPI implementation issues every collective from one FIFO queue on its
// communication thread, so every rank issues buckets and batch-norm sums on the one
// communicator in the same order (the schedule's), and none waits for a collective another
// rank has not issued. A re-forward issues none (the executor reuses the forward's
// statistics). Sequence() lists the step's batch-norm collectives with their positions;
// StepSequence() merges them with the buckets' for the check before the first step.
//
// Prepare() fails (InvalidArgument) for a model with no BatchNorm in training: nothing to
// synchronise. Borrows the collectives. Called from the executor's thread.
#ifndef HEADROOM_DIST_SYNC_BATCH_NORM_H_
#define HEADROOM_DIST_SYNC_BATCH_NORM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "dist/collectives.h"
#include "dist/gradient_buckets.h"
#include "executor/batch_norm_sync.h"

namespace headroom::dist {

// What the batch-norm allreduces cost, summed over the steps run.
struct SyncBatchNormStats {
  int64_t allreduces = 0;
  uint64_t reduced_bytes = 0;
  // The training thread's time in them (all of it is exposed: they block).
  double wait_seconds = 0;
};

class SyncBatchNorm : public executor::BatchNormSync {
 public:
  explicit SyncBatchNorm(Collectives* collectives) : collectives_(collectives) {}

  absl::Status Prepare(absl::Span<const executor::BatchNormCollective> collectives) override;
  absl::Status AllreduceSum(float* data, size_t count, const std::string& what) override;

  // Returns the batch-norm collectives of one step, in order. REQUIRES: Prepare() ran.
  std::vector<CollectiveSpec> Sequence() const;
  const SyncBatchNormStats& stats() const { return stats_; }

 private:
  Collectives* const collectives_;
  std::vector<CollectiveSpec> sequence_;
  SyncBatchNormStats stats_;
};

// Returns every collective of one step in the order a rank issues them: `a` and `b` (each
// in order) merged by schedule position, those at -1 (after the step) last, `a`'s first
// where positions tie.
std::vector<CollectiveSpec> MergeByPosition(const std::vector<CollectiveSpec>& a,
                                            const std::vector<CollectiveSpec>& b);

}  // namespace headroom::dist

#endif  // HEADROOM_DIST_SYNC_BATCH_NORM_H_
