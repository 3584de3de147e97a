// The executor's one hook for data-parallel training (dist/gradient_buckets implements it):
// it sees each parameter's final gradient as soon as the step has completed it, and gives
// back the gradient the parameter's update must read (the average over the ranks).
//
// With an exchange set (ExecutorOptions::gradients), RunStep() changes in two places only:
// at each update node's position it calls OnGradientReady() with the gradient (the last
// writer has run and the backend is synchronized; the gradient's arena bytes are freed
// right after, as planned, so the exchange copies them out) and does not run the update;
// after the last node it runs the deferred updates in the same order, each reading
// ReducedGradient() in place of its gradient. Re-forward (recompute) nodes never call it.
// With no exchange, nothing changes. Called from the executor's one thread.
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
};

class GradientExchange {
 public:
  virtual ~GradientExchange() = default;

  // Called once by Executor::Create with every parameter's final gradient in the order a
  // step completes them (the schedule order of their update nodes). An error stops Create.
  virtual absl::Status Prepare(absl::Span<const GradientInfo> gradients) = 0;

  // Gradient `index` (of Prepare's list) of step `step` is complete in `grad` (device
  // memory; the backend is synchronized). Its bytes are freed after this returns.
  virtual absl::Status OnGradientReady(int64_t step, int32_t index, const TensorView& grad) = 0;

  // Returns, once it is ready, the gradient `index`'s update must read (memory the
  // backend's kernels can read, of `grad`'s shape and dtype, valid until the update ran).
  virtual absl::StatusOr<TensorView> ReducedGradient(int64_t step, int32_t index) = 0;

  // The step's updates have all run.
  virtual absl::Status OnStepEnd(int64_t step) { return absl::OkStatus(); }
};

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_GRADIENT_EXCHANGE_H_
