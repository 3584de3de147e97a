// A profile, start to end: train a few steps of a forward graph under a plan with every
// event recorded and the process's own memory sampled at every node boundary, build the
// timeline and check it against the executor, measure the node costs and write the report
// (and, when asked, the Chrome trace). What `headroom profile`
// and headroomd's Profile handler both run.
//
// Thread-compatible: one call runs on the caller's thread. Borrows the backend.
#ifndef HEADROOM_RUNNER_PROFILE_RUN_H_
#define HEADROOM_RUNNER_PROFILE_RUN_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "executor/backend.h"
#include "executor/trainer.h"
#include "graph/graph.h"
#include "profiler/events.h"
#include "profiler/timeline.h"
#include "proto/headroom.pb.h"

namespace headroom::runner {

// The most steps one profile may run (ProfileRequest.steps, `headroom profile --steps`): a
// profile needs a few; each is a full training step, so 2^32 of them held a worker for days.
inline constexpr int64_t kMaxProfileSteps = 10000;

struct ProfileRunOptions {
  // Training steps to run (at least 1, at most kMaxProfileSteps). Default 3.
  int64_t steps = 3;
  // "cpu" or "cuda": the backend's name, as the report gives it. Default "cpu".
  std::string backend = "cpu";
  // Also build the Chrome trace-event JSON (ProfileRun::trace_json). Default false.
  bool trace = false;
  // Timeline samples kept in the report (0: all). Default 2000.
  size_t max_samples = 2000;
  // Another sink to pass every event on to (a MetricsSink, say); borrowed. Default none.
  profiler::EventSink* also = nullptr;
  // Called after the trainer is made, before the first step (to StartJob the metrics, say).
  std::function<absl::Status(const executor::Trainer&)> on_start;
  // Called after every step with its result; it returns the driver's used device bytes
  // then (0: unknown), which the report's samples of that step carry.
  std::function<uint64_t(int64_t step, const executor::StepResult&)> on_step;
  // Reset the kernel's high-water mark of the process's resident bytes when the run starts,
  // so that the report's process account sees between node boundaries too: only where this
  // run is the only one in the process (the command line). Default false.
  bool reset_peak_resident = false;
};

struct ProfileRun {
  proto::ProfileResponse report;
  profiler::Timeline timeline;
  std::string trace_json;
};

// Returns the profile of `steps` steps of `forward` trained with `trainer_options` (its
// `events` is replaced) on `backend`. InvalidArgument naming `steps` outside
// [1, kMaxProfileSteps], before anything runs. The error of planning, of a step, or InternalError
// when the timeline disagrees with the executor's high-water mark or live peak (a bug).
absl::StatusOr<ProfileRun> RunProfile(const graph::Graph& forward, executor::Backend* backend,
                                      executor::TrainerOptions trainer_options,
                                      const ProfileRunOptions& options);

// Returns the memory a training run on `backend` holds beyond its plan when the model adds
// almost nothing of its own: the unplanned bytes of a few steps of a small MLP (the
// runtime's threads and their stacks, the kernel library's first code and buffers). On a
// backend with device memory of its own (CUDA), the device bytes instead: the backend's
// fixed_device_bytes() (context and handles) and the workspace its kernels grew outside the
// plan. A daemon measures it once at start. The error of the run, or Unavailable where the
// process's memory cannot be read.
absl::StatusOr<uint64_t> MeasureFixedCostBytes(executor::Backend* backend);

}  // namespace headroom::runner

#endif  // HEADROOM_RUNNER_PROFILE_RUN_H_
