// EventSinkObserver: what each call of the run loop becomes in an EventLog, and in which
// order (the contract executor_events_test checks on whole runs).
#include "executor/execution_observer.h"

#include <chrono>
#include <optional>

#include "gtest/gtest.h"
#include "profiler/events.h"

namespace headroom::executor {
namespace {

using profiler::MemoryEvent;
using profiler::MemoryRole;
using BufferChange = ExecutionObserver::BufferChange;

// A copy that is done, and says when it ran where `ran` is set.
class DoneEvent : public Event {
 public:
  explicit DoneEvent(std::optional<Interval> ran = std::nullopt) : ran_(ran) {}
  absl::Status Wait() override { return absl::OkStatus(); }
  std::optional<Interval> interval() const override { return ran_; }

 private:
  std::optional<Interval> ran_;
};

TEST(EventSinkObserverTest, BuffersBecomeMemoryEventsOfTheirFirstTensor) {
  profiler::EventLog log;
  EventSinkObserver observer(&log);
  ProgramBuffer buffer;
  buffer.first_tensor = 7;
  buffer.role = MemoryRole::kGradient;
  buffer.slice = {512, 256};
  observer.OnBuffer(BufferChange::kAllocated, 3, buffer, profiler::kSetupStep, -1);
  observer.OnBuffer(BufferChange::kFreed, 3, buffer, 2, 9);
  ASSERT_EQ(log.memory().size(), 2u);
  const MemoryEvent& allocated = log.memory()[0];
  EXPECT_EQ(allocated.kind, MemoryEvent::Kind::kAllocate);
  EXPECT_EQ(allocated.step, profiler::kSetupStep);
  EXPECT_EQ(allocated.node, -1);
  EXPECT_EQ(allocated.buffer, 3);
  EXPECT_EQ(allocated.tensor, 7);
  EXPECT_EQ(allocated.role, MemoryRole::kGradient);
  EXPECT_EQ(allocated.offset, 512u);
  EXPECT_EQ(allocated.bytes, 256u);
  const MemoryEvent& freed = log.memory()[1];
  EXPECT_EQ(freed.kind, MemoryEvent::Kind::kFree);
  EXPECT_EQ(freed.step, 2);
  EXPECT_EQ(freed.node, 9);
  EXPECT_LE(allocated.time_ns, freed.time_ns);
}

TEST(EventSinkObserverTest, AGrownWorkspaceIsTheOldFreedAndTheNewAllocated) {
  profiler::EventLog log;
  EventSinkObserver observer(&log);
  observer.OnSetupEnd(0);  // None yet: nothing to say.
  observer.OnNodeBegin(0, 0);
  observer.OnNodeEnd(0, 0, false, 1024);
  observer.OnNodeBegin(0, 1);
  observer.OnNodeEnd(0, 1, true, 1024);  // Unchanged: no memory event.
  observer.OnNodeBegin(0, 2);
  observer.OnNodeEnd(0, 2, false, 4096);
  ASSERT_EQ(log.ops().size(), 3u);
  EXPECT_TRUE(log.ops()[1].recompute);
  EXPECT_FALSE(log.ops()[2].recompute);
  EXPECT_LE(log.ops()[0].begin_ns, log.ops()[0].end_ns);
  ASSERT_EQ(log.memory().size(), 3u);
  // +1024 after node 0; -1024 +4096 after node 2.
  EXPECT_EQ(log.memory()[0].kind, MemoryEvent::Kind::kAllocate);
  EXPECT_EQ(log.memory()[0].bytes, 1024u);
  EXPECT_EQ(log.memory()[0].node, 0);
  EXPECT_EQ(log.memory()[1].kind, MemoryEvent::Kind::kFree);
  EXPECT_EQ(log.memory()[1].bytes, 1024u);
  EXPECT_EQ(log.memory()[2].kind, MemoryEvent::Kind::kAllocate);
  EXPECT_EQ(log.memory()[2].bytes, 4096u);
  for (const MemoryEvent& e : log.memory()) {
    EXPECT_EQ(e.role, MemoryRole::kWorkspace);
    EXPECT_EQ(e.buffer, -1);
  }
  EXPECT_EQ(log.memory()[1].node, 2);
  EXPECT_EQ(log.memory()[2].node, 2);
}

TEST(EventSinkObserverTest, AHostSlotLivesFromTheCopyOutToTheAwaitedCopyBack) {
  profiler::EventLog log;
  EventSinkObserver observer(&log);
  const DoneEvent done;
  // Copied out after node 1, awaited at node 4; prefetched at node 8, awaited before 10.
  observer.OnCopyIssue(CopyDirection::kToHost, 0, 1, /*original=*/5, /*host_offset=*/256, 64);
  observer.OnNodeBegin(0, 4);
  observer.OnCopyWait(CopyDirection::kToHost, 5);
  observer.OnCopyAwaited(CopyDirection::kToHost, 0, 4, 5, 256, 64, done);
  observer.OnNodeEnd(0, 4, false, 0);
  observer.OnNodeBegin(0, 8);
  observer.OnCopyIssue(CopyDirection::kToDevice, 0, 8, 5, 256, 64);
  observer.OnNodeEnd(0, 8, false, 0);
  observer.OnCopyWait(CopyDirection::kToDevice, 5);
  observer.OnCopyAwaited(CopyDirection::kToDevice, 0, 10, 5, 256, 64, done);

  ASSERT_EQ(log.memory().size(), 2u);
  for (const MemoryEvent& e : log.memory()) {
    EXPECT_EQ(e.role, MemoryRole::kHostOffload);
    EXPECT_EQ(e.buffer, 5);
    EXPECT_EQ(e.tensor, 5);
    EXPECT_EQ(e.offset, 256u);
    EXPECT_EQ(e.bytes, 64u);
  }
  EXPECT_EQ(log.memory()[0].kind, MemoryEvent::Kind::kAllocate);
  EXPECT_EQ(log.memory()[0].node, 1);
  EXPECT_EQ(log.memory()[1].kind, MemoryEvent::Kind::kFree);
  EXPECT_EQ(log.memory()[1].node, 10);

  ASSERT_EQ(log.copies().size(), 2u);
  const profiler::CopyEvent& out = log.copies()[0];
  const profiler::CopyEvent& back = log.copies()[1];
  EXPECT_EQ(out.direction, profiler::CopyEvent::Direction::kToHost);
  EXPECT_EQ(back.direction, profiler::CopyEvent::Direction::kToDevice);
  for (const profiler::CopyEvent& c : log.copies()) {
    EXPECT_EQ(c.tensor, 5);
    EXPECT_EQ(c.bytes, 64u);
    // Unmeasured: from the issue to the end of the wait.
    EXPECT_FALSE(c.measured);
    EXPECT_EQ(c.begin_ns, c.issue_ns);
    EXPECT_LE(c.issue_ns, c.end_ns);
    EXPECT_GE(c.wait_ns, 0);
  }
  // The copy out was issued when its slot was taken.
  EXPECT_EQ(out.issue_ns, log.memory()[0].time_ns);
  EXPECT_LE(log.ops()[1].begin_ns, back.issue_ns);
}

TEST(EventSinkObserverTest, AMeasuredCopyReportsWhenItRan) {
  profiler::EventLog log;
  EventSinkObserver observer(&log);
  using Clock = std::chrono::steady_clock;
  const Clock::time_point begin{std::chrono::nanoseconds(1000)};
  const Clock::time_point end{std::chrono::nanoseconds(5000)};
  const DoneEvent ran(Event::Interval{begin, end});
  observer.OnCopyIssue(CopyDirection::kToHost, 1, 0, 2, 0, 8);
  observer.OnCopyWait(CopyDirection::kToHost, 2);
  observer.OnCopyAwaited(CopyDirection::kToHost, 1, 3, 2, 0, 8, ran);
  ASSERT_EQ(log.copies().size(), 1u);
  EXPECT_TRUE(log.copies()[0].measured);
  EXPECT_EQ(log.copies()[0].begin_ns, 1000);
  EXPECT_EQ(log.copies()[0].end_ns, 5000);
  EXPECT_EQ(log.copies()[0].step, 1);
}

TEST(EventSinkObserverTest, AStepEndsNowAndBeganItsSecondsAgo) {
  profiler::EventLog log;
  EventSinkObserver observer(&log);
  observer.OnStepEnd(3, 0.25, 1.5);
  ASSERT_EQ(log.steps().size(), 1u);
  EXPECT_EQ(log.steps()[0].step, 3);
  EXPECT_EQ(log.steps()[0].end_ns - log.steps()[0].begin_ns, 250000000);
  EXPECT_EQ(log.steps()[0].loss, 1.5);
}

}  // namespace
}  // namespace headroom::executor
