// An EventSink that turns a running job's events into its Prometheus metrics, step by
// step: after each step, memory by role at that step's peak, the peak, the bytes copied
// each way, the re-forward seconds and the step time go to Metrics::ObserveStep. Events are
// passed on to `next` (if any), so a job can be profiled and watched at once.
//
// Call Metrics::StartJob(job, device) before the first step ends (events before that, such
// as the persistent state placed when the trainer is created, are fine). Sinks cannot
// fail, so the first error
// ObserveStep returns is kept for status(). Thread-compatible: the executor's one thread
// calls it; Metrics itself may be scraped from any thread meanwhile.
#ifndef HEADROOM_PROFILER_METRICS_SINK_H_
#define HEADROOM_PROFILER_METRICS_SINK_H_

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "profiler/events.h"
#include "profiler/metrics.h"
#include "profiler/timeline.h"

namespace headroom::profiler {

class MetricsSink : public EventSink {
 public:
  // Borrows `metrics` and `next` (may be null); both must outlive it.
  MetricsSink(Metrics* metrics, std::string job, std::string device, EventSink* next);

  void OnMemory(const MemoryEvent& event) override;
  void OnOp(const OpEvent& event) override;
  void OnCopy(const CopyEvent& event) override;
  void OnStep(const StepEvent& event) override;

  // Returns OK, or the first error Metrics returned.
  const absl::Status& status() const { return status_; }

  // Returns what the last step ended observed (all zero before the first step ends).
  const StepObservation& last_step() const { return last_step_; }

 private:
  Metrics* metrics_;
  const std::string job_;
  const std::string device_;
  EventSink* next_;
  absl::Status status_;
  StepObservation last_step_;

  // Live allocations by (space, buffer): their role and bytes; bytes live by role now.
  absl::flat_hash_map<int64_t, MemoryEvent> live_;
  RoleBytes live_bytes_{};
  // This step so far.
  RoleBytes step_peak_bytes_{};
  uint64_t step_peak_device_bytes_ = 0;
  uint64_t offloaded_bytes_ = 0;
  uint64_t prefetched_bytes_ = 0;
  double recompute_seconds_ = 0;
};

}  // namespace headroom::profiler

#endif  // HEADROOM_PROFILER_METRICS_SINK_H_
