// What the executor's run loop tells the outside world as it runs: the one interface its
// telemetry goes through. The loop calls these in the order things happen and never looks
// at clocks, sinks or metrics itself; an observer decides what to record.
//
// ExecutionObserver's methods do nothing by default, so an observer overrides only what it
// needs. EventSinkObserver turns the calls into profiler events (profiler/events.h) for an
// EventSink, timing them on the steady clock. Observers are called from the executor's one
// thread; neither is thread-safe.
#ifndef HEADROOM_EXECUTOR_EXECUTION_OBSERVER_H_
#define HEADROOM_EXECUTOR_EXECUTION_OBSERVER_H_

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "executor/backend.h"
#include "executor/execution_program.h"
#include "profiler/events.h"

namespace headroom::executor {

// `step` is the training step (profiler::kSetupStep while the state is placed, before the
// first); `position` a schedule position of the program (-1 outside nodes).
class ExecutionObserver {
 public:
  enum class BufferChange { kAllocated, kFreed };

  virtual ~ExecutionObserver() = default;

  // Buffer `index` of the program (`buffer`) was allocated before, or freed after, the
  // node at `position`.
  virtual void OnBuffer(BufferChange change, int32_t index, const ProgramBuffer& buffer,
                        int64_t step, int32_t position) {}
  // The copy of offloaded tensor `original` (`bytes`, host slot at `host_offset`) in
  // `direction` is about to be issued after (to host) or at (to device) `position`.
  virtual void OnCopyIssue(CopyDirection direction, int64_t step, int32_t position,
                           planner::TensorId original, uint64_t host_offset, uint64_t bytes) {}
  // The compute stream is about to wait for that copy; OnCopyAwaited() follows once it
  // waits no more, with the copy's event.
  virtual void OnCopyWait(CopyDirection direction, planner::TensorId original) {}
  virtual void OnCopyAwaited(CopyDirection direction, int64_t step, int32_t position,
                             planner::TensorId original, uint64_t host_offset, uint64_t bytes,
                             const Event& event) {}
  // The node at `position` is about to run, or has run (a re-forward when `recompute`);
  // the backend's workspace is then `workspace_bytes`.
  virtual void OnNodeBegin(int64_t step, int32_t position) {}
  virtual void OnNodeEnd(int64_t step, int32_t position, bool recompute,
                         uint64_t workspace_bytes) {}
  // The persistent state is placed; the backend's workspace is `workspace_bytes`.
  virtual void OnSetupEnd(uint64_t workspace_bytes) {}
  // Training step `step` ended after `seconds` with `loss`.
  virtual void OnStepEnd(int64_t step, double seconds, double loss) {}
};

// Reports every call as profiler events to `sink` (borrowed; must outlive it): buffers and
// host slots as MemoryEvents, a grown workspace as a free of the old and an allocation of
// the new, nodes as OpEvents, awaited copies as CopyEvents, steps as StepEvents.
class EventSinkObserver : public ExecutionObserver {
 public:
  explicit EventSinkObserver(profiler::EventSink* sink) : sink_(sink) {}

  void OnBuffer(BufferChange change, int32_t index, const ProgramBuffer& buffer, int64_t step,
                int32_t position) override;
  void OnCopyIssue(CopyDirection direction, int64_t step, int32_t position,
                   planner::TensorId original, uint64_t host_offset, uint64_t bytes) override;
  void OnCopyWait(CopyDirection direction, planner::TensorId original) override;
  void OnCopyAwaited(CopyDirection direction, int64_t step, int32_t position,
                     planner::TensorId original, uint64_t host_offset, uint64_t bytes,
                     const Event& event) override;
  void OnNodeBegin(int64_t step, int32_t position) override;
  void OnNodeEnd(int64_t step, int32_t position, bool recompute,
                 uint64_t workspace_bytes) override;
  void OnSetupEnd(uint64_t workspace_bytes) override;
  void OnStepEnd(int64_t step, double seconds, double loss) override;

 private:
  // Reports a change of the workspace since the last report.
  void ReportWorkspace(int64_t step, int32_t position, uint64_t bytes);
  // Reports host slot `host_offset` of `original` as allocated or freed at `time_ns`.
  void ReportHostSlot(profiler::MemoryEvent::Kind kind, int64_t time_ns, int64_t step,
                      int32_t position, planner::TensorId original, uint64_t host_offset,
                      uint64_t bytes);

  profiler::EventSink* sink_;
  // When each copy in flight was issued, by direction and original tensor.
  absl::flat_hash_map<planner::TensorId, int64_t> issue_ns_[2];
  int64_t wait_start_ns_ = 0;
  int64_t node_begin_ns_ = 0;
  // The workspace bytes last reported.
  uint64_t reported_workspace_bytes_ = 0;
};

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_EXECUTION_OBSERVER_H_
