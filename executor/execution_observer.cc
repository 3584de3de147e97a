#include "executor/execution_observer.h"

#include <chrono>
#include <optional>

namespace headroom::executor {
namespace {

using profiler::MemoryEvent;

int Index(CopyDirection direction) { return direction == CopyDirection::kToHost ? 0 : 1; }

int64_t Nanos(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

void EventSinkObserver::OnBuffer(BufferChange change, int32_t index, const ProgramBuffer& buffer,
                                 int64_t step, int32_t position) {
  MemoryEvent e;
  e.kind = change == BufferChange::kAllocated ? MemoryEvent::Kind::kAllocate
                                              : MemoryEvent::Kind::kFree;
  e.time_ns = profiler::NowNanos();
  e.step = step;
  e.node = position;
  e.buffer = index;
  e.tensor = buffer.first_tensor;
  e.role = buffer.role;
  e.offset = buffer.slice.offset;
  e.bytes = buffer.slice.bytes;
  sink_->OnMemory(e);
}

void EventSinkObserver::ReportHostSlot(MemoryEvent::Kind kind, int64_t time_ns, int64_t step,
                                       int32_t position, planner::TensorId original,
                                       uint64_t host_offset, uint64_t bytes) {
  MemoryEvent e;
  e.kind = kind;
  e.time_ns = time_ns;
  e.step = step;
  e.node = position;
  e.buffer = original;
  e.tensor = original;
  e.role = profiler::MemoryRole::kHostOffload;
  e.offset = host_offset;
  e.bytes = bytes;
  sink_->OnMemory(e);
}

void EventSinkObserver::OnCopyIssue(CopyDirection direction, int64_t step, int32_t position,
                                    planner::TensorId original, uint64_t host_offset,
                                    uint64_t bytes) {
  const int64_t now = profiler::NowNanos();
  issue_ns_[Index(direction)][original] = now;
  // The host slot is in use from the copy out until the copy back is done.
  if (direction == CopyDirection::kToHost) {
    ReportHostSlot(MemoryEvent::Kind::kAllocate, now, step, position, original, host_offset,
                   bytes);
  }
}

void EventSinkObserver::OnCopyWait(CopyDirection direction, planner::TensorId original) {
  wait_start_ns_ = profiler::NowNanos();
}

void EventSinkObserver::OnCopyAwaited(CopyDirection direction, int64_t step, int32_t position,
                                      planner::TensorId original, uint64_t host_offset,
                                      uint64_t bytes, const Event& event) {
  profiler::CopyEvent e;
  e.direction = direction == CopyDirection::kToHost ? profiler::CopyEvent::Direction::kToHost
                                                    : profiler::CopyEvent::Direction::kToDevice;
  e.step = step;
  e.tensor = original;
  e.bytes = bytes;
  auto issued = issue_ns_[Index(direction)].extract(original);
  e.issue_ns = issued.empty() ? wait_start_ns_ : issued.mapped();
  const int64_t now = profiler::NowNanos();
  e.wait_ns = now - wait_start_ns_;
  if (std::optional<Event::Interval> ran = event.interval()) {
    e.begin_ns = Nanos(ran->begin);
    e.end_ns = Nanos(ran->end);
    e.measured = true;
  } else {
    e.begin_ns = e.issue_ns;
    e.end_ns = now;
  }
  sink_->OnCopy(e);
  // The host slot is free once its bytes are back on the device.
  if (direction == CopyDirection::kToDevice) {
    ReportHostSlot(MemoryEvent::Kind::kFree, profiler::NowNanos(), step, position, original,
                   host_offset, bytes);
  }
}

void EventSinkObserver::OnNodeBegin(int64_t step, int32_t position) {
  node_begin_ns_ = profiler::NowNanos();
}

void EventSinkObserver::OnNodeEnd(int64_t step, int32_t position, bool recompute,
                                  uint64_t workspace_bytes) {
  sink_->OnOp({step, position, node_begin_ns_, profiler::NowNanos(), recompute});
  ReportWorkspace(step, position, workspace_bytes);
}

void EventSinkObserver::OnSetupEnd(uint64_t workspace_bytes) {
  ReportWorkspace(profiler::kSetupStep, -1, workspace_bytes);
}

void EventSinkObserver::ReportWorkspace(int64_t step, int32_t position, uint64_t bytes) {
  if (bytes == reported_workspace_bytes_) return;
  // A grown workspace is a new allocation: the old one is freed, the new one allocated.
  MemoryEvent e;
  e.time_ns = profiler::NowNanos();
  e.step = step;
  e.node = position;
  e.buffer = -1;
  e.role = profiler::MemoryRole::kWorkspace;
  if (reported_workspace_bytes_ > 0) {
    e.kind = MemoryEvent::Kind::kFree;
    e.bytes = reported_workspace_bytes_;
    sink_->OnMemory(e);
  }
  // Workspaces outlive steps; the timeline's balance checks leave them alone.
  e.kind = MemoryEvent::Kind::kAllocate;
  e.bytes = bytes;
  sink_->OnMemory(e);
  reported_workspace_bytes_ = bytes;
}

void EventSinkObserver::OnStepEnd(int64_t step, double seconds, double loss) {
  profiler::StepEvent e;
  e.step = step;
  e.end_ns = profiler::NowNanos();
  e.begin_ns = e.end_ns - static_cast<int64_t>(seconds * 1e9);
  e.loss = loss;
  sink_->OnStep(e);
}

}  // namespace headroom::executor
