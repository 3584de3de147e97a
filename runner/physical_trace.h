// CUPTI's account of a run's physical device allocations, for a profile on the cuda
// backend: started before the backend exists (so every allocation is seen), finished into the
// profile's `physical` message. What `headroom profile` and headroomd's Profile both use.
//
// Where the build has no CUDA toolkit, or on any other backend, nothing is traced and the
// message says why. Thread-compatible; one trace per process at a time (CUPTI's limit).
#ifndef HEADROOM_RUNNER_PHYSICAL_TRACE_H_
#define HEADROOM_RUNNER_PHYSICAL_TRACE_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "proto/headroom.pb.h"

namespace headroom::runner {

class PhysicalTrace {
 public:
  // Starts tracing when `backend` is "cuda" and the build has CUPTI; a trace that cannot
  // start (no device, another CUPTI client) keeps the reason for Finish.
  explicit PhysicalTrace(const std::string& backend);
  PhysicalTrace(const PhysicalTrace&) = delete;
  PhysicalTrace& operator=(const PhysicalTrace&) = delete;
  ~PhysicalTrace();

  // Stops tracing and fills `report.physical` against the executor's measured peak (arena
  // plus workspaces); on a backend that was not traced, leaves what the run wrote there.
  void Finish(proto::ProfileResponse& report);

 private:
  struct Tracer;
  std::unique_ptr<Tracer> tracer_;
  absl::Status started_;
};

}  // namespace headroom::runner

#endif  // HEADROOM_RUNNER_PHYSICAL_TRACE_H_
