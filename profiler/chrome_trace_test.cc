// The trace parses as JSON (protobuf's parser, into a Struct) and holds what a viewer needs:
// every thread named in order, a counter series per role in use that replays the timeline,
// a slice per op, section phase, step and copy with the recorded times to the nanosecond,
// and the peak.
#include "profiler/chrome_trace.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/training_graph.h"
#include "profiler/events.h"
#include "profiler/memory_role.h"
#include "profiler/step_layout.h"
#include "profiler/timeline.h"

namespace headroom::profiler {
namespace {

using ::google::protobuf::Struct;
using ::google::protobuf::Value;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using planner::NodeKind;

constexpr int64_t kZeroNs = 5'000'000'000;

// Tensors of the tiny step, by id.
enum Tensor : int32_t {
  kX, kLabels, kFc1W, kFc2W, kFc1Momentum, kFc1Out, kRelu1Out, kLogits, kLoss, kFc2WGrad,
  kFc1WGrad, kRelu1OutPrefetched,
};

// Two sections; relu1.out, the second's cached input, is offloaded. By position:
//   forward:  0 fc1 (s0), 1 relu1 (s0), 2 relu1.out.offload (labeled s1, as DescribeStep
//             labels an offload awaited in the forward), 3 fc2 (s1), 4 loss (s1)
//   backward: 5 loss.seed, 6 fc2.grad, 7 fc2.w.update, 8 relu1.out.prefetch (s1),
//             9 fc1.recompute, 10 relu1.grad, 11 fc1.grad, 12 fc1.w.update (s0)
StepLayout TinyLayout() {
  StepLayout layout;
  layout.num_sections = 2;
  layout.nodes = {
      {"fc1", "MatMul", NodeKind::kForward, 0},
      {"relu1", "Relu", NodeKind::kForward, 0},
      {"relu1.out.offload", "CopyToHost", NodeKind::kOffload, 1},
      {"fc2", "MatMul", NodeKind::kForward, 1},
      {"loss", "SoftmaxCrossEntropy", NodeKind::kForward, 1},
      {"loss.seed", "Fill", NodeKind::kLossSeed, 1},
      {"fc2.grad", "MatMulGrad", NodeKind::kBackward, 1},
      {"fc2.w.update", "SgdMomentum", NodeKind::kUpdate, 1},
      {"relu1.out.prefetch", "CopyToDevice", NodeKind::kPrefetch, 1},
      {"fc1.recompute", "MatMul", NodeKind::kRecompute, 0},
      {"relu1.grad", "ReluGrad", NodeKind::kBackward, 0},
      {"fc1.grad", "MatMulGrad", NodeKind::kBackward, 0},
      {"fc1.w.update", "SgdMomentum", NodeKind::kUpdate, 0},
  };
  layout.tensors = {
      {"x", MemoryRole::kBatch, -1},
      {"labels", MemoryRole::kBatch, -1},
      {"fc1.w", MemoryRole::kParameter, -1},
      {"fc2.w", MemoryRole::kParameter, -1},
      {"fc1.w.momentum", MemoryRole::kOptimizerState, -1},
      {"fc1.out", MemoryRole::kActivation, 0},
      {"relu1.out", MemoryRole::kCachedInput, 1},
      {"logits", MemoryRole::kActivation, 3},
      {"loss", MemoryRole::kActivation, 4},
      {"fc2.w.grad", MemoryRole::kGradient, 6},
      {"fc1.w.grad", MemoryRole::kGradient, 11},
      {"relu1.out.prefetched", MemoryRole::kCachedInput, 8},
  };
  return layout;
}

// Emits events as an executor would, on a clock that advances by odd nanoseconds (1001 ns
// is 1.0009999999999999 us as a double: truncated times 1000 it would be 1000 ns).
class Recorder {
 public:
  explicit Recorder(const StepLayout& layout) : layout_(layout) {}

  // Allocates `tensor`'s buffer in the role the layout gives it, or in `role`.
  void Alloc(int64_t step, int32_t node, int32_t buffer, int32_t tensor, uint64_t bytes,
             std::optional<MemoryRole> role = std::nullopt) {
    MemoryEvent e;
    e.kind = MemoryEvent::Kind::kAllocate;
    e.time_ns = now_ns_;
    e.step = step;
    e.node = node;
    e.buffer = buffer;
    e.tensor = tensor;
    e.role = role.value_or(tensor >= 0 ? layout_.tensors[tensor].role : MemoryRole::kWorkspace);
    e.bytes = bytes;
    log_.OnMemory(e);
    roles_[{e.host(), buffer}] = e.role;
  }
  void Free(int64_t step, int32_t node, int32_t buffer, bool host = false) {
    MemoryEvent e;
    e.kind = MemoryEvent::Kind::kFree;
    e.time_ns = now_ns_;
    e.step = step;
    e.node = node;
    e.buffer = buffer;
    e.role = roles_.at({host, buffer});
    log_.OnMemory(e);
  }
  // Runs node `node` for `ns`, then leaves a 7 ns gap.
  void Run(int64_t step, int32_t node, int64_t ns) {
    log_.OnOp(OpEvent{step, node, now_ns_, now_ns_ + ns});
    now_ns_ += ns + 7;
  }
  void Copy(CopyEvent copy) { log_.OnCopy(copy); }
  void Step(int64_t step, int64_t begin_ns, double loss) {
    log_.OnStep(StepEvent{step, begin_ns, now_ns_, loss});
  }
  int64_t now_ns() const { return now_ns_; }
  EventLog& log() { return log_; }

 private:
  const StepLayout& layout_;
  EventLog log_;
  int64_t now_ns_ = kZeroNs;
  std::map<std::pair<bool, int32_t>, MemoryRole> roles_;
};

// Two steps of the tiny layout: the persistent state first, then per step
//   +x +labels +fc1.out fc1 +relu1.out relu1 -fc1.out +host(relu1.out) offload -relu1.out
//   +logits fc2 +loss loss seed +fc2.w.grad +workspace fc2.grad -workspace -logits -loss
//   -labels update -fc2.w.grad +prefetched prefetch -host +fc1.out recompute -x relu1.grad
//   -fc1.out -prefetched +fc1.w.grad fc1.grad update -fc1.w.grad
// with a copy each way per step; step 1's copy to host ends before it begins.
EventLog TinyRun(const StepLayout& layout) {
  Recorder r(layout);
  r.Alloc(kSetupStep, -1, 0, kFc1W, 4000);
  r.Alloc(kSetupStep, -1, 1, kFc2W, 2000);
  r.Alloc(kSetupStep, -1, 2, kFc1Momentum, 4000);
  for (int64_t step = 0; step < 2; ++step) {
    const int64_t begin_ns = r.now_ns();
    r.Alloc(step, 0, 3, kX, 1000);
    r.Alloc(step, 0, 4, kLabels, 100);
    r.Alloc(step, 0, 5, kFc1Out, 8000);
    r.Run(step, 0, 1001);
    r.Alloc(step, 1, 6, kRelu1Out, 8000);
    r.Run(step, 1, 2002);
    r.Free(step, 1, 5);
    r.Alloc(step, 1, 0, kRelu1Out, 8000, MemoryRole::kHostOffload);
    CopyEvent out{CopyEvent::Direction::kToHost, step, kRelu1Out, 8000};
    out.issue_ns = r.now_ns();
    out.begin_ns = r.now_ns() + 11;
    out.end_ns = step == 0 ? r.now_ns() + 2011 : r.now_ns() - 5;
    out.measured = true;
    out.wait_ns = 1500;
    r.Copy(out);
    r.Run(step, 2, 3003);
    r.Free(step, 2, 6);
    r.Alloc(step, 3, 7, kLogits, 500);
    r.Run(step, 3, 1001);
    r.Alloc(step, 4, 8, kLoss, 4);
    r.Run(step, 4, 2030);
    r.Run(step, 5, 1015);
    r.Alloc(step, 6, 9, kFc2WGrad, 2000);
    r.Alloc(step, -1, 10, -1, 3000);
    r.Run(step, 6, 4004);
    r.Free(step, -1, 10);
    r.Free(step, 6, 7);
    r.Free(step, 6, 8);
    r.Free(step, 6, 4);
    r.Run(step, 7, 1001);
    r.Free(step, 7, 9);
    r.Alloc(step, 8, 11, kRelu1OutPrefetched, 8000);
    CopyEvent back{CopyEvent::Direction::kToDevice, step, kRelu1Out, 8000};
    back.issue_ns = back.begin_ns = r.now_ns();
    back.end_ns = r.now_ns() + 2500;
    r.Copy(back);
    r.Run(step, 8, 2002);
    r.Free(step, 8, 0, /*host=*/true);
    r.Alloc(step, 9, 5, kFc1Out, 8000);
    r.Run(step, 9, 1001);
    r.Free(step, 9, 3);
    r.Run(step, 10, 2002);
    r.Free(step, 10, 5);
    r.Free(step, 10, 11);
    r.Alloc(step, 11, 12, kFc1WGrad, 4000);
    r.Run(step, 11, 4004);
    r.Run(step, 12, 1001);
    r.Free(step, 12, 12);
    r.Step(step, begin_ns, 2.5 - static_cast<double>(step));
  }
  return std::move(r.log());
}

// ---- Reading the parsed trace --------------------------------------------------------------

const Value* Field(const Struct& s, const std::string& key) {
  auto it = s.fields().find(key);
  return it == s.fields().end() ? nullptr : &it->second;
}
std::string Str(const Struct& s, const std::string& key) {
  const Value* v = Field(s, key);
  return v == nullptr ? "" : v->string_value();
}
double Num(const Struct& s, const std::string& key) {
  const Value* v = Field(s, key);
  return v == nullptr ? -1 : v->number_value();
}
const Struct& Args(const Struct& event) { return Field(event, "args")->struct_value(); }
// Returns a trace time (microseconds) in nanoseconds as Perfetto reads it: truncated.
int64_t Nanos(double us) { return static_cast<int64_t>(us * 1000.0); }

Struct Parse(const std::string& json) {
  Struct parsed;
  const auto status = google::protobuf::util::JsonStringToMessage(json, &parsed);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << json;
  return parsed;
}

// Returns the events of phase `ph` (and thread `tid`, unless -1), in trace order.
std::vector<const Struct*> Events(const Struct& trace, const std::string& ph, int tid = -1) {
  std::vector<const Struct*> out;
  for (const Value& v : Field(trace, "traceEvents")->list_value().values()) {
    const Struct& e = v.struct_value();
    if (Str(e, "ph") == ph && (tid == -1 || Num(e, "tid") == tid)) out.push_back(&e);
  }
  return out;
}

// Returns the tid of the thread named `name`, or -1.
int TidOf(const Struct& trace, const std::string& name) {
  for (const Struct* e : Events(trace, "M")) {
    if (Str(*e, "name") == "thread_name" && Str(Args(*e), "name") == name) {
      return static_cast<int>(Num(*e, "tid"));
    }
  }
  return -1;
}

class ChromeTraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    layout_ = TinyLayout();
    log_ = TinyRun(layout_);
    absl::StatusOr<Timeline> timeline = Timeline::Build(log_, layout_);
    ASSERT_TRUE(timeline.ok()) << timeline.status();
    timeline_ = *std::move(timeline);
    ChromeTraceOptions options;
    options.process_name = "headroom tiny";
    options.metadata = {{"model", "tiny"}, {"backend", "cpu"}, {"model", "shadowed"}};
    absl::StatusOr<ChromeTrace> trace = BuildChromeTrace(log_, layout_, timeline_, options);
    ASSERT_TRUE(trace.ok()) << trace.status();
    trace_ = *std::move(trace);
    parsed_ = Parse(trace_.json);
  }

  // Returns the op event at position `node` of `step`.
  const OpEvent& Op(int64_t step, int32_t node) const {
    for (const OpEvent& op : log_.ops()) {
      if (op.step == step && op.node == node) return op;
    }
    ADD_FAILURE() << "no op " << node << " in step " << step;
    return log_.ops().front();
  }

  StepLayout layout_;
  EventLog log_;
  Timeline timeline_;
  ChromeTrace trace_;
  Struct parsed_;
};

TEST_F(ChromeTraceTest, IsTheJsonObjectFormat) {
  ASSERT_NE(Field(parsed_, "traceEvents"), nullptr);
  EXPECT_EQ(Field(parsed_, "traceEvents")->list_value().values_size(), trace_.num_events);
  EXPECT_EQ(Str(parsed_, "displayTimeUnit"), "ms");
  const Struct& other = Field(parsed_, "otherData")->struct_value();
  EXPECT_EQ(Str(other, "model"), "tiny");  // The first of two "model" keys.
  EXPECT_EQ(Str(other, "backend"), "cpu");
  EXPECT_EQ(Num(other, "zero_steady_clock_ns"), static_cast<double>(kZeroNs));
  EXPECT_EQ(Num(other, "clamped_durations"), 1);  // Step 1's copy to host.
  EXPECT_EQ(trace_.clamped_durations, 1);
  EXPECT_EQ(trace_.clamped_counter_times, 0);
  EXPECT_EQ(trace_.queued_copies, 0);
  EXPECT_THAT(trace_.DebugString(), HasSubstr("1 durations clamped"));
}

TEST_F(ChromeTraceTest, NamesTheProcessAndThreadsInDisplayOrder) {
  std::map<int, std::string> name_of;
  std::map<int, int> tid_of_index;
  for (const Struct* e : Events(parsed_, "M")) {
    const int tid = static_cast<int>(Num(*e, "tid"));
    if (Str(*e, "name") == "process_name") {
      EXPECT_EQ(Str(Args(*e), "name"), "headroom tiny");
    }
    if (Str(*e, "name") == "thread_name") name_of[tid] = Str(Args(*e), "name");
    if (Str(*e, "name") == "thread_sort_index") {
      EXPECT_TRUE(tid_of_index.emplace(static_cast<int>(Num(Args(*e), "sort_index")), tid).second);
    }
  }
  std::vector<std::string> by_sort_index;
  std::vector<int> tids;
  for (const auto& [index, tid] : tid_of_index) {
    by_sort_index.push_back(name_of[tid]);
    tids.push_back(tid);
  }
  EXPECT_THAT(by_sort_index,
              ElementsAre("steps", "sections", "compute", "copy to host", "copy to device"));
  EXPECT_TRUE(std::is_sorted(tids.begin(), tids.end()));
  // Every slice is on a named thread, and none on the process's main thread (tid = pid).
  for (const Struct* e : Events(parsed_, "X")) {
    EXPECT_EQ(name_of.count(static_cast<int>(Num(*e, "tid"))), 1u) << Str(*e, "name");
    EXPECT_NE(Num(*e, "tid"), Num(*e, "pid"));
  }
}

TEST_F(ChromeTraceTest, CounterSeriesReplayTheTimelinePerRole) {
  // Expected: each role's values over the timeline's points, changes only, from its first
  // non-zero value; the device total likewise.
  std::map<std::string, std::vector<double>> expected;
  auto add = [&](const std::string& name, uint64_t bytes) {
    std::vector<double>& series = expected[name];
    if (series.empty() ? bytes != 0 : series.back() != static_cast<double>(bytes)) {
      series.push_back(static_cast<double>(bytes));
    }
    if (series.empty()) expected.erase(name);
  };
  for (const TimelinePoint& p : timeline_.points()) {
    for (MemoryRole role : kAllMemoryRoles) {
      add(std::string("memory: ") + MemoryRoleName(role), p.bytes[static_cast<size_t>(role)]);
    }
    add("memory: device total", p.device_bytes);
  }
  std::map<std::string, std::vector<double>> actual;
  std::map<std::string, double> last_ts;
  for (const Struct* e : Events(parsed_, "C")) {
    const std::string name = Str(*e, "name");
    ASSERT_EQ(Args(*e).fields_size(), 1) << name;
    actual[name].push_back(Num(Args(*e), "bytes"));
    if (last_ts.count(name) != 0) {
      EXPECT_GE(Num(*e, "ts"), last_ts[name]) << name;
    }
    last_ts[name] = Num(*e, "ts");
  }
  EXPECT_EQ(actual, expected);
  for (const char* role : {"parameters", "gradients", "optimizer_state", "activations",
                           "cached_inputs", "batch", "workspace", "host_offload"}) {
    EXPECT_EQ(actual.count(std::string("memory: ") + role), 1u) << role;
  }
  EXPECT_EQ(actual.count("memory: buffers"), 0u);  // Never in use.
  const std::vector<double>& total = actual["memory: device total"];
  ASSERT_FALSE(total.empty());
  EXPECT_EQ(*std::max_element(total.begin(), total.end()),
            static_cast<double>(timeline_.peak().device_bytes));
}

TEST_F(ChromeTraceTest, WritesASliceForEveryOpToTheNanosecond) {
  const std::vector<const Struct*> slices = Events(parsed_, "X", TidOf(parsed_, "compute"));
  ASSERT_EQ(slices.size(), log_.ops().size());
  for (size_t i = 0; i < slices.size(); ++i) {
    const OpEvent& op = log_.ops()[i];
    const StepLayout::Node& node = layout_.nodes[op.node];
    const Struct& e = *slices[i];
    EXPECT_EQ(Str(e, "name"), node.name);
    EXPECT_EQ(Str(e, "cat"), planner::NodeKindName(node.kind));
    EXPECT_EQ(Nanos(Num(e, "ts")), op.begin_ns - kZeroNs) << node.name;
    EXPECT_EQ(Nanos(Num(e, "dur")), op.end_ns - op.begin_ns) << node.name;
    EXPECT_EQ(Str(Args(e), "op"), node.op);
    EXPECT_EQ(Num(Args(e), "step"), op.step);
    EXPECT_EQ(Num(Args(e), "node"), op.node);
  }
  // The offload awaited in the forward counts with the forward node before it.
  EXPECT_EQ(Num(Args(*slices[2]), "section"), 0);
  EXPECT_EQ(Str(Args(*slices[2]), "phase"), "forward");
  EXPECT_EQ(Str(Args(*slices[8]), "phase"), "backward");
}

TEST_F(ChromeTraceTest, WritesEachSectionPhaseOfEachStep) {
  const int tid = TidOf(parsed_, "sections");
  const std::vector<const Struct*> slices = Events(parsed_, "X", tid);
  EXPECT_EQ(slices.size(), 2u * 2u * 2u);  // Steps x sections x phases.
  struct Expected {
    std::string name;
    int32_t first, last;  // Positions of its first and last op.
  };
  const std::vector<Expected> phases = {{"section 0 forward", 0, 2},
                                        {"section 1 forward", 3, 4},
                                        {"section 1 backward", 5, 8},
                                        {"section 0 backward", 9, 12}};
  for (int64_t step = 0; step < 2; ++step) {
    for (const Expected& want : phases) {
      const Struct* found = nullptr;
      for (const Struct* e : slices) {
        if (Str(*e, "name") == want.name && Num(Args(*e), "step") == step) found = e;
      }
      ASSERT_NE(found, nullptr) << want.name << " of step " << step;
      const int64_t begin_ns = Op(step, want.first).begin_ns;
      EXPECT_EQ(Nanos(Num(*found, "ts")), begin_ns - kZeroNs) << want.name;
      EXPECT_EQ(Nanos(Num(*found, "dur")), Op(step, want.last).end_ns - begin_ns) << want.name;
      EXPECT_EQ(Num(Args(*found), "ops"), want.last - want.first + 1) << want.name;
    }
  }
  // One track: the slices must not overlap.
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const Struct* e : slices) {
    spans.emplace_back(Nanos(Num(*e, "ts")), Nanos(Num(*e, "ts")) + Nanos(Num(*e, "dur")));
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) EXPECT_GE(spans[i].first, spans[i - 1].second);
}

TEST_F(ChromeTraceTest, WritesStepsWithTheirLoss) {
  const std::vector<const Struct*> slices = Events(parsed_, "X", TidOf(parsed_, "steps"));
  ASSERT_EQ(slices.size(), log_.steps().size());
  for (size_t i = 0; i < slices.size(); ++i) {
    const StepEvent& step = log_.steps()[i];
    EXPECT_EQ(Str(*slices[i], "name"), "step " + std::to_string(step.step));
    EXPECT_EQ(Num(Args(*slices[i]), "loss"), step.loss);
    EXPECT_EQ(Nanos(Num(*slices[i], "ts")), step.begin_ns - kZeroNs);
    EXPECT_EQ(Nanos(Num(*slices[i], "dur")), step.end_ns - step.begin_ns);
  }
}

TEST_F(ChromeTraceTest, WritesCopiesOnTheirStreams) {
  const std::vector<const Struct*> out = Events(parsed_, "X", TidOf(parsed_, "copy to host"));
  const std::vector<const Struct*> back = Events(parsed_, "X", TidOf(parsed_, "copy to device"));
  ASSERT_EQ(out.size(), 2u);
  ASSERT_EQ(back.size(), 2u);
  for (const Struct* e : out) {
    EXPECT_EQ(Str(*e, "name"), "relu1.out");
    EXPECT_EQ(Num(Args(*e), "bytes"), 8000);
    EXPECT_TRUE(Field(Args(*e), "measured")->bool_value());
    EXPECT_DOUBLE_EQ(Num(Args(*e), "wait_ms"), 1500e-6);
  }
  EXPECT_EQ(Nanos(Num(*out[0], "dur")), 2000);
  EXPECT_EQ(Num(*out[1], "dur"), 0);  // Recorded ending 16 ns before it began.
  for (const Struct* e : back) {
    EXPECT_FALSE(Field(Args(*e), "measured")->bool_value());
    EXPECT_EQ(Nanos(Num(*e, "dur")), 2500);
    EXPECT_EQ(Num(Args(*e), "issue_us"), Num(*e, "ts"));
  }
}

TEST_F(ChromeTraceTest, MarksThePeak) {
  const std::vector<const Struct*> instants = Events(parsed_, "i");
  ASSERT_EQ(instants.size(), 1u);
  const Struct& e = *instants[0];
  const PeakAttribution& peak = timeline_.peak();
  EXPECT_THAT(Str(e, "name"), StartsWith("peak "));
  EXPECT_EQ(Str(e, "s"), "g");
  EXPECT_EQ(Num(Args(e), "bytes"), static_cast<double>(peak.device_bytes));
  EXPECT_EQ(Str(Args(e), "node"), peak.node_name);
  EXPECT_EQ(Str(Args(e), "op"), peak.op);
  EXPECT_EQ(Nanos(Num(e, "ts")), peak.time_ns);
  EXPECT_FALSE(peak.node_name.empty());
}

TEST_F(ChromeTraceTest, NoDurationIsNegative) {
  for (const Struct* e : Events(parsed_, "X")) EXPECT_GE(Num(*e, "dur"), 0) << Str(*e, "name");
}

// A one-node layout with no memory events: no counters and no peak.
struct Bare {
  StepLayout layout;
  EventLog log;
  absl::StatusOr<ChromeTrace> Trace() const {
    absl::StatusOr<Timeline> timeline = Timeline::Build(log, layout);
    if (!timeline.ok()) return timeline.status();
    return BuildChromeTrace(log, layout, *timeline, ChromeTraceOptions());
  }
};

Bare BareLayout() {
  Bare bare;
  bare.layout.nodes = {{"fc", "MatMul", NodeKind::kForward, 0}};
  bare.layout.tensors = {{"x", MemoryRole::kCachedInput, -1}};
  return bare;
}

TEST(ChromeTrace, QueuesOverlappingCopiesOnOneStream) {
  Bare bare = BareLayout();
  // Unmeasured: each begins at its issue; the stream runs them one after the other.
  //   a: [0, 5000)   b: recorded [1000, 7000), runs [5000, 7000)
  CopyEvent a{CopyEvent::Direction::kToDevice, 0, 0, 64, 0, 0, 5000};
  CopyEvent b{CopyEvent::Direction::kToDevice, 0, 0, 64, 1000, 1000, 7000};
  bare.log.OnCopy(b);  // Reported in the order their waits returned.
  bare.log.OnCopy(a);
  absl::StatusOr<ChromeTrace> trace = bare.Trace();
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->queued_copies, 1);
  EXPECT_EQ(trace->clamped_durations, 0);
  const Struct parsed = Parse(trace->json);
  const std::vector<const Struct*> slices =
      Events(parsed, "X", TidOf(parsed, "copy to device"));
  ASSERT_EQ(slices.size(), 2u);
  EXPECT_EQ(Nanos(Num(*slices[0], "ts")), 0);
  EXPECT_EQ(Nanos(Num(*slices[0], "dur")), 5000);
  EXPECT_EQ(Nanos(Num(*slices[1], "ts")), 5000);
  EXPECT_EQ(Nanos(Num(*slices[1], "dur")), 2000);
  EXPECT_EQ(Num(Args(*slices[1]), "issue_us"), 1);
  EXPECT_TRUE(Events(parsed, "C").empty());
  EXPECT_TRUE(Events(parsed, "i").empty());
}

TEST(ChromeTrace, ClampsAnOpThatEndsBeforeItBegins) {
  Bare bare = BareLayout();
  bare.log.OnOp(OpEvent{0, 0, 2000, 1500});
  absl::StatusOr<ChromeTrace> trace = bare.Trace();
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->clamped_durations, 2);  // The op and its section's phase.
  const Struct parsed = Parse(trace->json);
  const std::vector<const Struct*> ops = Events(parsed, "X", TidOf(parsed, "compute"));
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(Num(*ops[0], "ts"), 0);
  EXPECT_EQ(Num(*ops[0], "dur"), 0);
  EXPECT_EQ(Num(Field(parsed, "otherData")->struct_value(), "clamped_durations"), 2);
}

TEST(ChromeTrace, RejectsEventsOutsideTheLayout) {
  Bare op = BareLayout();
  op.log.OnOp(OpEvent{3, 7, 0, 10});
  absl::StatusOr<ChromeTrace> trace = op.Trace();
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(trace.status().message(), HasSubstr("step 3 names node position 7"));

  Bare copy = BareLayout();
  copy.log.OnCopy(CopyEvent{CopyEvent::Direction::kToHost, 0, 4, 64, 0, 0, 10});
  trace = copy.Trace();
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(trace.status().message(), HasSubstr("names tensor 4"));
}

}  // namespace
}  // namespace headroom::profiler
