// A backend's kernel scratch as the planner asks for it: the planner::ScratchModel that
// builds each node's kernel arguments (executor/node_args.h, with placeholder data) and asks
// the backend how many scratch bytes that kernel needs. Pass it in TrainingOptions::scratch
// wherever a plan will run on that backend, so the plan holds every byte the step uses.
//
// Borrows the backend, which must outlive it. Deciding only, like the backend's
// ScratchBytes(). Thread-safe: it asks the backend one call at a time, so one model can
// serve concurrent plans (headroomd's), as long as nothing else uses the backend meanwhile.
#ifndef HEADROOM_EXECUTOR_BACKEND_SCRATCH_H_
#define HEADROOM_EXECUTOR_BACKEND_SCRATCH_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "executor/backend.h"
#include "graph/graph.h"
#include "planner/scratch_model.h"
#include "planner/training_graph.h"

namespace headroom::executor {

class BackendScratchModel : public planner::ScratchModel {
 public:
  explicit BackendScratchModel(Backend* backend) : backend_(backend) {}

  // Returns the backend's ScratchBytes() for forward and backward nodes; 0 for the rest
  // (loss seed, accumulations and optimizer updates need none on either backend).
  absl::StatusOr<uint64_t> NodeScratchBytes(const graph::Graph& forward,
                                            const planner::TrainingGraph& graph,
                                            planner::NodeId id) const override;

 private:
  mutable absl::Mutex mu_;
  Backend* const backend_ ABSL_PT_GUARDED_BY(mu_);
};

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_BACKEND_SCRATCH_H_
