// The executor's one hook for data-parallel training (dist/gradient_buckets implements it):
// it sees each parameter's final gradient as soon as the step has completed it, and gives
// back the gradient the parameter's update must read (the average over the ranks).
//
// With an exchange set (ExecutorOptions::gradients), the plan must hold the gradient buckets
// (planner::AddGradientBuckets: tensors of role COMMUNICATION in the arena), and RunStep()
// changes in two places only: at each update node's position it calls OnGradientReady()
// with the gradient (the last writer has run and the backend is synchronized; the
// gradient's arena bytes are freed right after, as planned, so the exchange copies them into
// its bucket) and does not run the update; at the last position, after its node and before
// its frees (the buckets die there), it runs the deferred updates in the same order, each
// reading ReducedGradient() in place of its gradient. Re-forward (recompute) nodes never
// call it. With no exchange, nothing changes. Called from the executor's one thread.
#ifndef HEADROOM_EXECUTOR_GRADIENT_EXCHANGE_H_
#define HEADROOM_EXECUTOR_GRADIENT_EXCHANGE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "executor/tensor_view.h"

namespace headroom::executor {

// One parameter's final gradient, as the exchange is told it before the first step.
struct GradientInfo {
  // The update node's name (e.g. "update/fc1.weight").
  std::string name;
  graph::Shape shape;
  proto::DType dtype = proto::DTYPE_FLOAT32;
  uint64_t bytes = 0;
  // The schedule position of its update node (where OnGradientReady() is called).
  int32_t position = 0;
  // Its planned bucket (index into Prepare's `buckets`) and its offset there in bytes.
  int32_t bucket = 0;
  uint64_t bucket_offset_bytes = 0;
};

class GradientExchange {
 public:
  virtual ~GradientExchange() = default;

  // Returns the least bytes of a bucket the plan should group the gradients into (0: one per
  // gradient); the trainer plans the buckets with it (planner::GroupBySize).
  virtual uint64_t bucket_bytes() const = 0;

  // Called once by Executor::Create with every parameter's final gradient in the order a
  // step completes them (the schedule order of their update nodes) and the planned buckets
  // (float32 views of the arena, valid for the executor's life; a bucket's bytes are the
  // exchange's from its first gradient's OnGradientReady() to the step's deferred updates).
  // An error stops Create.
  virtual absl::Status Prepare(absl::Span<const GradientInfo> gradients,
                               absl::Span<const TensorView> buckets) = 0;

  // Gradient `index` (of Prepare's list) of step `step` is complete in `grad` (device
  // memory; the backend is synchronized). Its bytes are freed after this returns: the
  // exchange copies it into its bucket.
  virtual absl::Status OnGradientReady(int64_t step, int32_t index, const TensorView& grad) = 0;

  // Returns, once it is ready, the gradient `index`'s update must read (memory the
  // backend's kernels can read, of `grad`'s shape and dtype, valid until the update ran).
  virtual absl::StatusOr<TensorView> ReducedGradient(int64_t step, int32_t index) = 0;

  // The step's updates have all run.
  virtual absl::Status OnStepEnd(int64_t step) { return absl::OkStatus(); }
};

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_GRADIENT_EXCHANGE_H_
