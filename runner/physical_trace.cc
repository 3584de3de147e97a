#include "runner/physical_trace.h"

#include <cstdint>

#ifdef HEADROOM_HAVE_CUDA
#include "profiler/cupti_memory.h"
#endif

namespace headroom::runner {

#ifdef HEADROOM_HAVE_CUDA
struct PhysicalTrace::Tracer {
  profiler::CuptiMemoryTracer cupti;
};

namespace {

// Fills `physical` from CUPTI's trace: the device memory the process really allocated
// against the executor's arena plus workspaces.
void FillPhysical(const absl::StatusOr<profiler::PhysicalMemoryTrace>& trace,
                  uint64_t expected_bytes, proto::PhysicalMemory& physical) {
  physical.Clear();
  physical.set_expected_bytes(expected_bytes);
  if (!trace.ok()) {
    physical.set_unavailable_reason(std::string(trace.status().message()));
    return;
  }
  const profiler::PhysicalMemoryAccounting account =
      profiler::AccountPhysicalMemory(trace->events);
  uint64_t allocations = 0, live = 0;
  for (const auto& [device, usage] : account.device_memory_by_device) {
    allocations += usage.allocations;
    live += usage.live_bytes;
  }
  physical.set_peak_device_bytes(account.peak_device_bytes);
  physical.set_allocations(allocations);
  physical.set_live_device_bytes(live);
  physical.set_dropped_records(trace->dropped_records);
  physical.set_unmatched_frees(account.unmatched_frees.size());
  physical.set_replaced_allocations(account.replaced_allocations.size());
}

}  // namespace

PhysicalTrace::PhysicalTrace(const std::string& backend)
    : started_(absl::FailedPreconditionError("not traced")) {
  if (backend != "cuda") return;
  tracer_ = std::make_unique<Tracer>();
  started_ = tracer_->cupti.Start();
}

void PhysicalTrace::Finish(proto::ProfileResponse& report) {
  if (tracer_ == nullptr) return;
  FillPhysical(started_.ok() ? tracer_->cupti.Stop()
                             : absl::StatusOr<profiler::PhysicalMemoryTrace>(started_),
               report.measured_peak_bytes(), *report.mutable_physical());
  tracer_.reset();
}
#else
struct PhysicalTrace::Tracer {};

PhysicalTrace::PhysicalTrace(const std::string&) : started_(absl::OkStatus()) {}

void PhysicalTrace::Finish(proto::ProfileResponse&) {}
#endif

PhysicalTrace::~PhysicalTrace() = default;

}  // namespace headroom::runner
