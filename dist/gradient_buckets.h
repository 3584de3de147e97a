// Averages gradients across ranks in buckets, overlapping the reductions with the rest of
// the backward: the executor's GradientExchange (executor/gradient_exchange.h) over a
// Collectives (dist/collectives.h).
//
// The buckets are tensors of the plan (planner/gradient_buckets.h: role COMMUNICATION, laid
// out in the arena with the rest, grouped by Options::bucket_bytes through bucket_bytes());
// Prepare() takes them with each gradient's place in them. Each step, OnGradientReady()
// copies a gradient into its bucket; the bucket's last one starts its allreduce (average) at
// once, while the backward goes on. ReducedGradient() waits for the bucket (the time it
// waits is the reduction's exposed part) and returns the averaged gradient in the bucket.
// Sequence() is what every rank issues each step, for the check before the first step
// (dist/data_parallel.h). Every step's bucket times (issue, completion, the wait) are kept,
// the last kMaxTimelineSteps steps, on the clock StartClock() aligned (dist/overlap.h).
//
// Limits: float32 gradients only; MPI reads and writes the buckets in place, so a backend
// whose arena is not host memory is refused. Borrows the collectives and the backend.
// Called from the executor's thread.
#ifndef HEADROOM_DIST_GRADIENT_BUCKETS_H_
#define HEADROOM_DIST_GRADIENT_BUCKETS_H_

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "dist/collectives.h"
#include "dist/overlap.h"
#include "executor/backend.h"
#include "executor/gradient_exchange.h"

namespace headroom::dist {

// One collective of a step, as the sequence check compares it.
struct CollectiveSpec {
  std::string what;    // "allreduce of gradient bucket 2"
  uint64_t count = 0;  // floats
  // The schedule position where a step issues it (-1: after the step).
  int32_t position = -1;
};

// What the reductions cost, summed over the steps run.
struct BucketStats {
  int64_t steps = 0;
  int64_t allreduces = 0;
  uint64_t reduced_bytes = 0;
  // The training thread's wait for reductions: what the backward did not hide.
  double exposed_wait_seconds = 0;
  // Copying gradients into buckets.
  double copy_seconds = 0;
};

class GradientBuckets : public executor::GradientExchange {
 public:
  struct Options {
    // A bucket is closed once it holds at least this many bytes; 0: one per gradient.
    // Default 0: on resnet18 over MPI every size from one per gradient to 16 MiB hid 87-98%
    // of the reductions once imbalance is told apart, and the exposed rest (6-24 ms a step)
    // did not separate them; one bucket for everything hides nothing (docs/distributed.md).
    uint64_t bucket_bytes = 0;
  };

  GradientBuckets(Collectives* collectives, executor::Backend* backend, const Options& options);

  uint64_t bucket_bytes() const override { return options_.bucket_bytes; }
  absl::Status Prepare(absl::Span<const executor::GradientInfo> gradients,
                       absl::Span<const executor::TensorView> buckets) override;
  absl::Status OnGradientReady(int64_t step, int32_t index,
                               const executor::TensorView& grad) override;
  absl::StatusOr<executor::TensorView> ReducedGradient(int64_t step, int32_t index) override;
  absl::Status OnStepEnd(int64_t step) override;

  // Returns the collectives one step issues, in order, each at the position of its bucket's
  // last gradient. REQUIRES: Prepare() ran.
  std::vector<CollectiveSpec> Sequence() const;
  // Returns the buckets' sizes in bytes, in order.
  std::vector<uint64_t> BucketBytes() const;
  const BucketStats& stats() const { return stats_; }

  // Aligns the clock of timeline() across the ranks: a barrier (an allgather), then its
  // zero is this rank's time of leaving it. A collective: every rank calls it, before the
  // first step.
  absl::Status StartClock();
  // Returns the buckets' times of the last steps run (at most kMaxTimelineSteps).
  RankTimeline timeline() const;
  static constexpr size_t kMaxTimelineSteps = 256;

 private:
  struct Bucket {
    float* values = nullptr;  // the planned bucket, in the arena
    uint64_t floats = 0;
    std::vector<int32_t> gradients;
    int32_t pending = 0;  // gradients not yet copied in this step
    bool issued = false;
    bool reduced = false;
    CollectiveHandle handle;
    BucketTimes times;  // this step's, on the aligned clock
  };
  struct Slot {
    int32_t bucket = 0;
    uint64_t offset = 0;  // floats into the bucket
    executor::GradientInfo info;
  };

  // Waits for `b`'s reduction, recording the wait and its completion in b.times.
  absl::Status AwaitBucket(Bucket& b);

  Collectives* const collectives_;
  executor::Backend* const backend_;
  const Options options_;
  std::vector<Bucket> buckets_;
  std::vector<Slot> slots_;  // by gradient index
  BucketStats stats_;
  double clock_zero_seconds_ = 0;  // SteadySeconds() at StartClock()
  std::deque<std::vector<BucketTimes>> timeline_;
};

}  // namespace headroom::dist

#endif  // HEADROOM_DIST_GRADIENT_BUCKETS_H_
