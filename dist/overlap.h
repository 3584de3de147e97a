// How much of the gradient allreduces a data-parallel step hides behind its backward, with
// communication told apart from imbalance (docs/distributed.md, "Throughput").
//
// Each rank records, per step and gradient bucket (dist::GradientBuckets), when it issued
// the bucket's allreduce, when its communication thread saw it complete, and when its
// training thread began and stopped waiting for it, on a clock aligned across the ranks by
// a barrier at the start. GatherTimelines() gives every rank every rank's record (one
// collective); AnalyseOverlap() splits each wait in two:
//   - imbalance: the part before the LAST rank issued that bucket. No transport, however
//     fast, could have ended it sooner: another rank had not finished that part of its
//     backward (it was slower, or descheduled).
//   - exposed communication: the part after it, the reduction itself not hidden.
// and measures the communication in flight in the step: the union over buckets of [last
// rank's issue, this rank's completion]. hidden share = 1 - exposed / communication.
//
// Limits: the clocks are aligned to within the barrier's exit skew (on one host, the
// steady clock is one clock for every process and the alignment is exact). A rank's
// completion is when its communication thread's MPI_Test saw it done (polled every 50 us).
// Plain functions and values; GatherTimelines() is a collective (every rank calls it).
#ifndef HEADROOM_DIST_OVERLAP_H_
#define HEADROOM_DIST_OVERLAP_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "dist/collectives.h"

namespace headroom::dist {

// One bucket's allreduce in one step on one rank, in seconds of the aligned clock.
struct BucketTimes {
  double issued = 0;      // the rank issued it (its last gradient copied in)
  double completed = 0;   // the rank's communication thread saw it done
  double wait_start = 0;  // the training thread began waiting for it (its first update)
  double wait_end = 0;    // and stopped (wait_end == wait_start: it was done already)
};

// A rank's record: by step, every bucket's times (the same number of buckets each step).
struct RankTimeline {
  std::vector<std::vector<BucketTimes>> steps;
};

// One step's waits for the gradient allreduces (seconds; on one rank, or their mean).
struct StepOverlap {
  double waited_seconds = 0;         // the training thread's wait, over the buckets
  double imbalance_seconds = 0;      // the part of it before the last rank's issue
  double exposed_seconds = 0;        // the rest: communication not hidden
  double communication_seconds = 0;  // communication in flight (the union, above)
};

struct OverlapReport {
  int ranks = 0;
  int buckets = 0;
  // By step, the mean over the ranks.
  std::vector<StepOverlap> steps;
  // The median over the steps of each field.
  StepOverlap median;
  // By bucket (in issue order), the median over the steps of its exposed communication
  // (mean of the ranks): which reductions the backward did not hide.
  std::vector<double> exposed_by_bucket;
  // Returns 1 - median exposed / median communication (1 where nothing was in flight).
  double hidden_share() const;
  std::string DebugString() const;
};

// Returns the waits of `ranks` (by rank) split as above. InvalidArgument where the ranks'
// timelines differ in steps or buckets, or hold none.
absl::StatusOr<OverlapReport> AnalyseOverlap(absl::Span<const RankTimeline> ranks);

// Returns every rank's timeline, by rank: one collective (the step counts compared with
// AllgatherU64, then one sum-allreduce where each rank fills its own slice and every time
// crosses as two floats whose sum is the double). Keeps each rank's last steps only, as many
// as fit 4 Mi floats in all (at least one). FailedPrecondition naming the ranks whose step or
// bucket counts differ from rank 0's.
absl::StatusOr<std::vector<RankTimeline>> GatherTimelines(const RankTimeline& mine,
                                                          Collectives& collectives);

}  // namespace headroom::dist

#endif  // HEADROOM_DIST_OVERLAP_H_
