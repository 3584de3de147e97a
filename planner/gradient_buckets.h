// Gradient buckets of data-parallel ranks as tensors of the plan: which gradients are
// averaged together, and the bytes that hold them while their allreduce runs, laid out in the
// arena with every other tensor (docs/distributed.md, "Memory"). Deciding only: dist/ runs
// the allreduces, the executor copies each gradient into its bucket.
//
// GroupBySize() is the one grouping rule: the gradients in the order the step completes
// them, a bucket closed once it holds at least `bucket_bytes` (0: one per gradient). The
// planner's cost of the ranks (collective_cost.h), the plan's memory (AddGradientBuckets) and
// the trainer's buckets (dist::GradientBuckets, handed the planned ones) all follow it.
#ifndef HEADROOM_PLANNER_GRADIENT_BUCKETS_H_
#define HEADROOM_PLANNER_GRADIENT_BUCKETS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "planner/section_search.h"
#include "planner/sections.h"
#include "planner/training_graph.h"

namespace headroom::planner {

// Returns the indices of `bytes` grouped into buckets, in order: each bucket closes once it
// holds at least `bucket_bytes` (the last may hold less); 0 puts each in its own.
std::vector<std::vector<int32_t>> GroupBySize(absl::Span<const uint64_t> bytes,
                                              uint64_t bucket_bytes);

// Returns the update nodes of `graph` (an expanded step: node ids are schedule positions)
// grouped by GroupBySize over their gradients' bytes, each with its gradients' offsets and
// its bytes; `tensor` is kNone. A node's gradient is its input of role GRADIENT.
std::vector<GradientBucket> GroupGradients(const TrainingGraph& graph, uint64_t bucket_bytes);

// Returns the bytes of every parameter's final gradient once: what the buckets hold in all.
uint64_t GradientBucketBytes(const TrainingGraph& graph);

// How long a bucket's bytes are held within a step.
enum class BucketLifetime {
  // From the update position of its first gradient (where that gradient is copied in) to
  // the step's last position, where the deferred updates read it. The default.
  kFromFirstGradient,
  // From the loss seed (the backward's start) to the step's last position: one buffer per
  // bucket for the whole backward, as a trainer that allocates its buckets once would hold
  // them. For comparison (planner/ranks_bench).
  kWholeBackward,
};

// Returns `plan` with its step's gradients in buckets (GroupGradients): each bucket a tensor
// of the step's graph, "gradient_bucket.K", role COMMUNICATION, float32 of its gradients'
// floats, alive as `lifetime` says, and the step's memory planned again with them
// (PlanScheduledGraph, the same strategies) so that peak_bytes includes them;
// step->gradient_buckets lists them. FailedPrecondition when the step already has buckets,
// InvalidArgument when a gradient is not float32 (naming it) or the step has no update; the
// planner's error otherwise.
absl::StatusOr<SectionPlan> AddGradientBuckets(
    const SectionPlan& plan, uint64_t bucket_bytes,
    BucketLifetime lifetime = BucketLifetime::kFromFirstGradient);

}  // namespace headroom::planner

#endif  // HEADROOM_PLANNER_GRADIENT_BUCKETS_H_
