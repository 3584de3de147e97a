// What a profiled training run reports, as it happens: every logical allocation and free
// the executor makes in its arena and host pool, every node it runs, every copy between
// device and host, every step. The executor emits them into an EventSink it is handed;
// the timeline, the trace and the measured costs are built afterwards from an EventLog.
//
// Times are steady-clock nanoseconds (std::chrono::steady_clock's epoch); consumers
// subtract the first event's time. Node positions are positions in the expanded schedule
// (planner/sections.h), which StepLayout (profiler/step_layout.h) names.
#ifndef HEADROOM_PROFILER_EVENTS_H_
#define HEADROOM_PROFILER_EVENTS_H_

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "profiler/memory_role.h"

namespace headroom::profiler {

// Returns steady-clock nanoseconds now.
inline int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Training step of events outside any step: placing the persistent state before the first.
inline constexpr int64_t kSetupStep = -1;

// One logical allocation or free: a buffer of the plan (tensors sharing bytes in place are
// one buffer, named and classed by its first tensor) placed in the device arena, or an
// offloaded tensor's slot in host memory, or a kernel workspace.
struct MemoryEvent {
  enum class Kind { kAllocate, kFree };
  Kind kind = Kind::kAllocate;
  int64_t time_ns = 0;
  // Training step (0 for the first run), or kSetupStep.
  int64_t step = kSetupStep;
  // The schedule position it happens at: a buffer is allocated before that node runs and
  // freed after it; a host slot is allocated after that node wrote the tensor (when the
  // copy out is issued) and freed where the copy back is awaited; a workspace changes after
  // that node. -1 outside nodes (setup).
  int32_t node = -1;
  // Unique among live allocations of the same space (device or host).
  int32_t buffer = 0;
  // The buffer's first tensor, by training-graph id (-1 for a workspace).
  int32_t tensor = -1;
  MemoryRole role = MemoryRole::kActivation;
  // Host memory (role kHostOffload) or device memory (every other role).
  bool host() const { return IsHostRole(role); }
  // Offset in the arena (device) or host pool (host); 0 for a workspace.
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

// One node run on the compute stream: from issuing it to its return. On the CPU backend a
// kernel is done when it returns; on a GPU this is only the launch (kernel times would need
// CUPTI's kernel activity, which is not collected), so measured costs are CPU-only.
struct OpEvent {
  int64_t step = 0;
  int32_t node = 0;
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
  // Whether it re-runs a forward node (a section's re-forward).
  bool recompute = false;
};

// One copy between device and host on a copy stream.
struct CopyEvent {
  enum class Direction { kToHost, kToDevice };
  Direction direction = Direction::kToHost;
  int64_t step = 0;
  // The offloaded tensor (training-graph id of the original).
  int32_t tensor = 0;
  uint64_t bytes = 0;
  // When it was issued, when the copy stream ran it (where the backend can say; else the
  // issue time and the time its wait returned, which on a GPU is when the wait was queued,
  // not when the copy ended), and whether those two are measured.
  int64_t issue_ns = 0;
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
  bool measured = false;
  // Time the compute stream waited for it.
  int64_t wait_ns = 0;
};

struct StepEvent {
  int64_t step = 0;
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
  double loss = 0;
};

// Receives events as they happen. The executor calls it from its one thread, in order.
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void OnMemory(const MemoryEvent& event) = 0;
  virtual void OnOp(const OpEvent& event) = 0;
  virtual void OnCopy(const CopyEvent& event) = 0;
  virtual void OnStep(const StepEvent& event) = 0;
};

// An EventSink that keeps everything, in arrival order. Thread-compatible.
class EventLog : public EventSink {
 public:
  void OnMemory(const MemoryEvent& event) override { memory_.push_back(event); }
  void OnOp(const OpEvent& event) override { ops_.push_back(event); }
  void OnCopy(const CopyEvent& event) override { copies_.push_back(event); }
  void OnStep(const StepEvent& event) override { steps_.push_back(event); }

  const std::vector<MemoryEvent>& memory() const { return memory_; }
  const std::vector<OpEvent>& ops() const { return ops_; }
  const std::vector<CopyEvent>& copies() const { return copies_; }
  const std::vector<StepEvent>& steps() const { return steps_; }

 private:
  std::vector<MemoryEvent> memory_;
  std::vector<OpEvent> ops_;
  std::vector<CopyEvent> copies_;
  std::vector<StepEvent> steps_;
};

// Returns the earliest time of any event in `log` (0 when it is empty): the zero of
// timelines and traces.
inline int64_t FirstEventNanos(const EventLog& log) {
  int64_t first = INT64_MAX;
  if (!log.memory().empty()) first = std::min(first, log.memory().front().time_ns);
  if (!log.ops().empty()) first = std::min(first, log.ops().front().begin_ns);
  if (!log.steps().empty()) first = std::min(first, log.steps().front().begin_ns);
  for (const CopyEvent& c : log.copies()) first = std::min(first, c.issue_ns);
  return first == INT64_MAX ? 0 : first;
}

}  // namespace headroom::profiler

#endif  // HEADROOM_PROFILER_EVENTS_H_
