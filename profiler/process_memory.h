// The process's own memory as the operating system counts it: what the CPU backend's
// "device" really is, and the evidence behind "predicted is measured" (the arena's own
// counter is not). Resident bytes come from /proc/self/statm, the kernel's high-water mark
// from /proc/self/status (VmHWM, which /proc/self/clear_refs resets), the heap in use from
// glibc's mallinfo2(). On the GPU, CUPTI plays this part (cupti_memory.h).
#ifndef HEADROOM_PROFILER_PROCESS_MEMORY_H_
#define HEADROOM_PROFILER_PROCESS_MEMORY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "profiler/events.h"
#include "profiler/step_layout.h"
#include "proto/headroom.pb.h"

namespace headroom::profiler {

struct ProcessMemory {
  // Bytes of the process's pages in RAM.
  uint64_t resident_bytes = 0;
  // Bytes malloc has handed out and not had back (in its arenas and its own mmaps).
  uint64_t heap_bytes = 0;
};

// Returns the process's resident and heap bytes now; Unavailable where /proc cannot be read.
absl::StatusOr<ProcessMemory> SampleProcessMemory();

// Returns the kernel's high-water mark of resident bytes since the process started or the
// last ResetPeakResident(); Unavailable where /proc cannot be read.
absl::StatusOr<uint64_t> PeakResidentBytes();

// Resets the kernel's high-water mark to the resident bytes now (process-wide);
// Unavailable where the kernel refuses (before Linux 4.0, or no /proc).
absl::Status ResetPeakResident();

// Returns the most unplanned bytes a run may show: max(5% of `planned_bytes`, 32 MiB).
uint64_t UnplannedLimitBytes(uint64_t planned_bytes);

// Samples the process's memory at every node boundary of a run, as an EventSink between the
// executor and `next` (events pass through unchanged): its baseline when it is made, its
// peak, and where in the run the peak came. Make it just before the trainer (so the baseline
// is the process before the run plans or allocates anything), hand it the trainer as its
// sink, and read Account() after the steps.
//
// The peak is the largest sample; with Options::reset_peak also the kernel's own high-water
// mark since the baseline, which sees between samples (a kernel's own temporary allocation).
// Resetting it is process-wide: use it only where one run is measured at a time.
// Thread-compatible: the executor's one thread calls it.
class ProcessMemorySampler : public EventSink {
 public:
  struct Options {
    // Reset the kernel's high-water mark at the baseline and read it into the peak.
    // Default false.
    bool reset_peak = false;
  };

  explicit ProcessMemorySampler(EventSink* next = nullptr) : ProcessMemorySampler(next, {}) {}
  ProcessMemorySampler(EventSink* next, Options options);

  void OnMemory(const MemoryEvent& e) override;
  void OnOp(const OpEvent& e) override;
  void OnCopy(const CopyEvent& e) override;
  void OnStep(const StepEvent& e) override;

  // Returns the account of the run so far against the plan's device bytes (`arena_bytes`)
  // and host pool: unplanned = peak - baseline - arena - host pool (0 when the peak stayed
  // below that: pages of the arena never touched), the peak's node named by `layout`.
  // `unavailable_reason` says why, when /proc could not be read.
  proto::ProcessMemory Account(uint64_t arena_bytes, uint64_t host_pool_bytes,
                               const StepLayout* layout = nullptr) const;

  uint64_t baseline_bytes() const { return baseline_.resident_bytes; }
  // The largest sample (and the kernel's high-water mark, with reset_peak).
  uint64_t peak_bytes() const;
  // The largest sample of each step so far, by step (0 for steps not sampled).
  const std::vector<uint64_t>& step_peak_bytes() const { return step_peak_bytes_; }
  // The last sample: the process's resident bytes after the last node run.
  uint64_t last_bytes() const { return last_.resident_bytes; }

 private:
  // Samples now, after node `node` of step `step` (-1: outside nodes).
  void Sample(int64_t step, int32_t node);

  EventSink* const next_;
  const Options options_;
  std::string unavailable_reason_;
  bool peak_reset_ = false;
  ProcessMemory baseline_;
  ProcessMemory last_;
  ProcessMemory peak_;
  int64_t peak_step_ = kSetupStep;
  int32_t peak_node_ = -1;
  uint64_t samples_ = 0;
  std::vector<uint64_t> step_peak_bytes_;
};

}  // namespace headroom::profiler

#endif  // HEADROOM_PROFILER_PROCESS_MEMORY_H_
