// The memory timeline of a profiled run: the executor's allocation and free events replayed
// in order, giving memory by role after every event and the peak with its attribution (the
// op running and every buffer live then, largest first), as TensorBoard's memory-profile
// breakdown table shows it.
//
// Build() checks the events as it replays them: a buffer allocated twice, or freed while
// not live, or allocated in a step and still live when the next step begins (allocations
// and frees must balance within each step; only the persistent state placed before the
// first step and kernel workspaces live across steps) is an Internal error naming the
// buffer. Immutable after
// Build(); thread-safe.
#ifndef HEADROOM_PROFILER_TIMELINE_H_
#define HEADROOM_PROFILER_TIMELINE_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "profiler/events.h"
#include "profiler/memory_role.h"
#include "profiler/step_layout.h"
#include "proto/headroom.pb.h"

namespace headroom::profiler {

// Bytes by role, indexed by the role's enum value.
using RoleBytes = std::array<uint64_t, kAllMemoryRoles.size()>;

// Returns the device bytes of `bytes`: every role but the host's.
uint64_t DeviceBytes(const RoleBytes& bytes);

// Memory after one event (or several at the same node and time).
struct TimelinePoint {
  // Nanoseconds since the first event.
  int64_t time_ns = 0;
  int64_t step = kSetupStep;
  // Schedule position of the node, or -1.
  int32_t node = -1;
  RoleBytes bytes{};
  uint64_t device_bytes = 0;
};

// A buffer live at the peak.
struct LiveBuffer {
  int32_t tensor = -1;
  std::string name;
  MemoryRole role = MemoryRole::kActivation;
  uint64_t bytes = 0;
  uint64_t offset = 0;
  std::string producer;
};

struct PeakAttribution {
  // Device bytes in use at the peak (live buffers plus workspaces); the first time that
  // many were in use.
  uint64_t device_bytes = 0;
  int64_t time_ns = 0;
  int64_t step = kSetupStep;
  // The node running then (its allocations are made before it runs), or -1.
  int32_t node = -1;
  std::string node_name;
  std::string op;
  RoleBytes bytes{};
  // Device buffers live at the peak, largest first (ties by name).
  std::vector<LiveBuffer> live;
};

class Timeline {
 public:
  // Returns the timeline of `events`, whose numbers `layout` names; Internal for events
  // that do not balance (see above).
  static absl::StatusOr<Timeline> Build(const EventLog& events, const StepLayout& layout);

  const std::vector<TimelinePoint>& points() const { return points_; }
  const PeakAttribution& peak() const { return peak_; }
  // Largest sum of live arena buffers (workspaces left out): the executor's peak_live_bytes.
  uint64_t arena_peak_live_bytes() const { return arena_peak_live_bytes_; }
  // Highest end offset of any live arena buffer: the executor's arena high-water mark.
  uint64_t high_water_bytes() const { return high_water_bytes_; }
  // Largest host bytes in use (offloaded tensors).
  uint64_t peak_host_bytes() const { return peak_host_bytes_; }
  // Per training step (index = step): the largest device bytes in use during it.
  const std::vector<uint64_t>& step_peak_bytes() const { return step_peak_bytes_; }

  // Returns the timeline as the wire message, with at most `max_samples` samples (evenly
  // thinned, the peak's sample always kept and, with room for two, the last; 0 keeps all).
  proto::MemoryTimeline ToProto(const StepLayout& layout, size_t max_samples) const;

 private:
  // The two phases of Build(). Replay() applies every event, filling everything but the
  // peak's live buffers, and returns the index of the peak's event (nothing without events).
  // AttributePeak() replays up to that event for the buffers live then.
  absl::StatusOr<std::optional<size_t>> Replay(const std::vector<MemoryEvent>& memory,
                                               int64_t base_ns, const StepLayout& layout);
  absl::Status AttributePeak(const std::vector<MemoryEvent>& memory, size_t peak_event,
                             const StepLayout& layout);
  // Records the totals after event `i`: a new point unless it continues the run of
  // same-kind events at one node; with `new_peak`, the peak too.
  void RecordPoint(const std::vector<MemoryEvent>& memory, size_t i, int64_t base_ns,
                   const RoleBytes& bytes, uint64_t device, bool new_peak);

  std::vector<TimelinePoint> points_;
  PeakAttribution peak_;
  uint64_t arena_peak_live_bytes_ = 0;
  uint64_t high_water_bytes_ = 0;
  uint64_t peak_host_bytes_ = 0;
  std::vector<uint64_t> step_peak_bytes_;
  size_t peak_point_ = 0;
};

// Returns the indices of at most `max_samples` (0: all) of `n` samples in order, evenly
// spread; `keep` (the peak's, when < n) is always among them and, with room for two, the last.
std::vector<size_t> SampleIndices(size_t n, size_t max_samples, size_t keep);

// Thins `timeline`'s samples to at most `max_samples` (0: leaves them all) as ToProto does,
// keeping the first sample with the most device bytes; for a stored timeline.
void ThinSamples(proto::MemoryTimeline& timeline, size_t max_samples);

}  // namespace headroom::profiler

#endif  // HEADROOM_PROFILER_TIMELINE_H_
