#include "profiler/chrome_trace.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "graph/summary.h"
#include "planner/training_graph.h"
#include "profiler/memory_role.h"
#include "util/json_writer.h"
#include "util/status_macros.h"

namespace headroom::profiler {
namespace {

using planner::NodeKind;

constexpr int kPid = 1;

// The threads in display order. Tids rise with it and stay clear of the pid (a tid equal to
// the pid is the process's main thread to Perfetto).
enum class Thread { kSteps, kSections, kCompute, kCopyToHost, kCopyToDevice };
constexpr std::array<Thread, 5> kThreads = {Thread::kSteps, Thread::kSections,
                                            Thread::kCompute, Thread::kCopyToHost,
                                            Thread::kCopyToDevice};
constexpr std::array<const char*, 5> kThreadNames = {"steps", "sections", "compute",
                                                     "copy to host", "copy to device"};

int Index(Thread thread) { return static_cast<int>(thread); }
int Tid(Thread thread) { return kPid + 1 + Index(thread); }

// Returns `ns` in microseconds, nudged up by an ulp or two where needed so that truncating
// it times 1000 gives `ns` back (1001 ns is 1.0009999999999999 us, which truncates to 1000).
double Micros(int64_t ns) {
  double us = static_cast<double>(ns) / 1000.0;
  for (int i = 0; i < 4 && ns >= 0 && static_cast<int64_t>(us * 1000.0) < ns; ++i) {
    us = std::nextafter(us, HUGE_VAL);
  }
  return us;
}

// Writes the entries of traceEvents, counting them and what it clamps into `trace`. Times
// are nanoseconds since the trace's zero. Each Slice() and Instant() opens the event's
// args for the caller to fill; End() closes them and the event.
class EventWriter {
 public:
  EventWriter(JsonWriter& json, ChromeTrace& trace) : json_(json), trace_(trace) {}

  ChromeTrace& trace() { return trace_; }

  void ProcessName(std::string_view name) {
    Begin('M', "process_name").Key("args").BeginObject().Key("name").String(name);
    End();
  }

  void ThreadMetadata(Thread thread) {
    Begin('M', "thread_name").Key("tid").Int(Tid(thread));
    json_.Key("args").BeginObject().Key("name").String(kThreadNames[Index(thread)]);
    End();
    Begin('M', "thread_sort_index").Key("tid").Int(Tid(thread));
    json_.Key("args").BeginObject().Key("sort_index").Int(Index(thread));
    End();
  }

  JsonWriter& Slice(Thread thread, std::string_view name, std::string_view cat,
                    int64_t begin_ns, int64_t end_ns) {
    int64_t duration_ns = end_ns - begin_ns;
    if (duration_ns < 0) {
      duration_ns = 0;
      ++trace_.clamped_durations;
    }
    Begin('X', name).Key("cat").String(cat).Key("tid").Int(Tid(thread));
    json_.Key("ts").Double(Micros(begin_ns)).Key("dur").Double(Micros(duration_ns));
    return json_.Key("args").BeginObject();
  }

  void Counter(std::string_view name, int64_t time_ns, uint64_t bytes) {
    Begin('C', name).Key("cat").String("memory").Key("ts").Double(Micros(time_ns));
    json_.Key("args").BeginObject().Key("bytes").Uint(bytes);
    End();
  }

  // A global instant: a line across every track.
  JsonWriter& Instant(std::string_view name, std::string_view cat, int64_t time_ns) {
    Begin('i', name).Key("cat").String(cat).Key("s").String("g");
    json_.Key("ts").Double(Micros(time_ns));
    return json_.Key("args").BeginObject();
  }

  void End() { json_.EndObject().EndObject(); }

 private:
  JsonWriter& Begin(char phase, std::string_view name) {
    ++trace_.num_events;
    return json_.BeginObject()
        .Key("name")
        .String(name)
        .Key("ph")
        .String(std::string_view(&phase, 1))
        .Key("pid")
        .Int(kPid);
  }

  JsonWriter& json_;
  ChromeTrace& trace_;
};

// Returns InvalidArgument for an op or copy that names something `layout` lacks.
absl::Status CheckEvents(const EventLog& log, const StepLayout& layout) {
  const auto num_nodes = static_cast<int32_t>(layout.nodes.size());
  const auto num_tensors = static_cast<int32_t>(layout.tensors.size());
  for (const OpEvent& op : log.ops()) {
    if (op.node >= 0 && op.node < num_nodes) continue;
    return absl::InvalidArgumentError(absl::StrCat("trace: op event of step ", op.step,
                                                   " names node position ", op.node,
                                                   "; the layout has ", num_nodes, " nodes"));
  }
  for (const CopyEvent& copy : log.copies()) {
    if (copy.tensor >= 0 && copy.tensor < num_tensors) continue;
    return absl::InvalidArgumentError(absl::StrCat("trace: copy event of step ", copy.step,
                                                   " names tensor ", copy.tensor,
                                                   "; the layout has ", num_tensors,
                                                   " tensors"));
  }
  return absl::OkStatus();
}

// Where a node runs: the section whose forward or backward phase holds it.
struct Phase {
  int32_t section = 0;
  bool backward = false;
};

// Returns the phase of each schedule position of `layout` (see the header).
std::vector<Phase> Phases(const StepLayout& layout) {
  std::vector<Phase> phases(layout.nodes.size());
  bool backward = false;
  int32_t forward_section = 0;  // Of the last forward node seen.
  for (size_t i = 0; i < layout.nodes.size(); ++i) {
    const StepLayout::Node& node = layout.nodes[i];
    const bool forward = node.kind == NodeKind::kForward;
    backward = backward || (!forward && node.kind != NodeKind::kOffload);
    if (forward && !backward) forward_section = node.section;
    phases[i].section = backward || forward ? node.section : forward_section;
    phases[i].backward = backward;
  }
  return phases;
}

const char* PhaseName(const Phase& phase) { return phase.backward ? "backward" : "forward"; }

void WriteMetadata(const ChromeTraceOptions& options, EventWriter& w) {
  w.ProcessName(options.process_name);
  for (Thread thread : kThreads) w.ThreadMetadata(thread);
}

// One counter per role in use, and the device total, sampled where their values change.
void WriteCounters(const Timeline& timeline, EventWriter& w) {
  constexpr size_t kTotal = kAllMemoryRoles.size();  // The device total's series.
  std::array<std::string, kTotal + 1> names;
  for (size_t i = 0; i < kTotal; ++i) {
    names[i] = absl::StrCat("memory: ", MemoryRoleName(kAllMemoryRoles[i]));
  }
  names[kTotal] = "memory: device total";
  std::array<std::optional<uint64_t>, kTotal + 1> last;
  int64_t last_time_ns = INT64_MIN;
  for (const TimelinePoint& point : timeline.points()) {
    int64_t time_ns = point.time_ns;
    if (time_ns < last_time_ns) {
      time_ns = last_time_ns;
      ++w.trace().clamped_counter_times;
    }
    last_time_ns = time_ns;
    for (size_t i = 0; i <= kTotal; ++i) {
      const uint64_t bytes = i < kTotal ? point.bytes[static_cast<size_t>(kAllMemoryRoles[i])]
                                        : point.device_bytes;
      if (last[i].has_value() ? *last[i] == bytes : bytes == 0) continue;
      last[i] = bytes;
      w.Counter(names[i], time_ns, bytes);
    }
  }
}

void WriteSteps(const EventLog& log, int64_t zero_ns, EventWriter& w) {
  for (const StepEvent& step : log.steps()) {
    w.Slice(Thread::kSteps, absl::StrCat("step ", step.step), "step", step.begin_ns - zero_ns,
            step.end_ns - zero_ns)
        .Key("step")
        .Int(step.step)
        .Key("loss")
        .Double(step.loss);
    w.End();
  }
}

// One slice per (step, section, phase), over the ops that ran in it.
void WriteSections(const EventLog& log, const std::vector<Phase>& phases, int64_t zero_ns,
                   EventWriter& w) {
  struct Span {
    int64_t begin_ns = INT64_MAX;
    int64_t end_ns = INT64_MIN;
    int64_t ops = 0;
  };
  std::map<std::tuple<int64_t, int32_t, bool>, Span> spans;  // By (step, section, backward).
  for (const OpEvent& op : log.ops()) {
    const Phase& phase = phases[op.node];
    Span& span = spans[{op.step, phase.section, phase.backward}];
    span.begin_ns = std::min(span.begin_ns, op.begin_ns);
    span.end_ns = std::max(span.end_ns, op.end_ns);
    ++span.ops;
  }
  for (const auto& [key, span] : spans) {
    const auto& [step, section, backward] = key;
    const Phase phase{section, backward};
    w.Slice(Thread::kSections, absl::StrCat("section ", section, " ", PhaseName(phase)),
            "section", span.begin_ns - zero_ns, span.end_ns - zero_ns)
        .Key("step")
        .Int(step)
        .Key("section")
        .Int(section)
        .Key("phase")
        .String(PhaseName(phase))
        .Key("ops")
        .Int(span.ops);
    w.End();
  }
}

void WriteOps(const EventLog& log, const StepLayout& layout, const std::vector<Phase>& phases,
              int64_t zero_ns, EventWriter& w) {
  for (const OpEvent& op : log.ops()) {
    const StepLayout::Node& node = layout.nodes[op.node];
    const Phase& phase = phases[op.node];
    w.Slice(Thread::kCompute, node.name, planner::NodeKindName(node.kind),
            op.begin_ns - zero_ns, op.end_ns - zero_ns)
        .Key("op")
        .String(node.op)
        .Key("step")
        .Int(op.step)
        .Key("section")
        .Int(phase.section)
        .Key("phase")
        .String(PhaseName(phase))
        .Key("node")
        .Int(op.node);
    w.End();
  }
}

// The copies of one direction, in the order their stream ran them.
void WriteCopyStream(const EventLog& log, const StepLayout& layout,
                     CopyEvent::Direction direction, int64_t zero_ns, EventWriter& w) {
  std::vector<const CopyEvent*> copies;
  for (const CopyEvent& copy : log.copies()) {
    if (copy.direction == direction) copies.push_back(&copy);
  }
  std::stable_sort(copies.begin(), copies.end(), [](const CopyEvent* a, const CopyEvent* b) {
    return a->begin_ns < b->begin_ns;
  });
  const bool to_host = direction == CopyEvent::Direction::kToHost;
  int64_t stream_free_ns = INT64_MIN;
  for (const CopyEvent* copy : copies) {
    int64_t begin_ns = copy->begin_ns;
    int64_t end_ns = copy->end_ns;
    if (begin_ns < stream_free_ns) {
      begin_ns = stream_free_ns;
      ++w.trace().queued_copies;
      // Queueing alone never makes a duration negative; a copy recorded backwards still is.
      if (copy->end_ns >= copy->begin_ns) end_ns = std::max(end_ns, begin_ns);
    }
    stream_free_ns = std::max(stream_free_ns, std::max(begin_ns, end_ns));
    const std::string& tensor = layout.tensors[copy->tensor].name;
    w.Slice(to_host ? Thread::kCopyToHost : Thread::kCopyToDevice, tensor,
            to_host ? "copy to host" : "copy to device", begin_ns - zero_ns, end_ns - zero_ns)
        .Key("tensor")
        .String(tensor)
        .Key("bytes")
        .Uint(copy->bytes)
        .Key("step")
        .Int(copy->step)
        .Key("measured")
        .Bool(copy->measured)
        .Key("wait_ms")
        .Double(static_cast<double>(copy->wait_ns) * 1e-6)
        .Key("issue_us")
        .Double(Micros(copy->issue_ns - zero_ns));
    w.End();
  }
}

void WritePeak(const Timeline& timeline, EventWriter& w) {
  if (timeline.points().empty()) return;  // No memory events: no peak.
  const PeakAttribution& peak = timeline.peak();
  JsonWriter& args =
      w.Instant(absl::StrCat("peak ", graph::HumanBytes(peak.device_bytes)), "memory",
                peak.time_ns)
          .Key("node")
          .String(peak.node_name)
          .Key("op")
          .String(peak.op)
          .Key("step")
          .Int(peak.step)
          .Key("bytes")
          .Uint(peak.device_bytes);
  args.Key("bytes_by_role").BeginObject();
  for (MemoryRole role : kAllMemoryRoles) {
    const uint64_t bytes = peak.bytes[static_cast<size_t>(role)];
    if (bytes != 0) args.Key(MemoryRoleName(role)).Uint(bytes);
  }
  args.EndObject();
  w.End();
}

// The trace's own figures, then the options' metadata; a key already written is skipped.
void WriteOtherData(const ChromeTraceOptions& options, const ChromeTrace& trace,
                    int64_t zero_ns, JsonWriter& json) {
  json.Key("otherData").BeginObject();
  json.Key("zero_steady_clock_ns").Int(zero_ns);
  json.Key("clamped_durations").Int(trace.clamped_durations);
  json.Key("clamped_counter_times").Int(trace.clamped_counter_times);
  json.Key("queued_copies").Int(trace.queued_copies);
  std::set<std::string> written = {"zero_steady_clock_ns", "clamped_durations",
                                   "clamped_counter_times", "queued_copies"};
  for (const auto& [key, value] : options.metadata) {
    if (written.insert(key).second) json.Key(key).String(value);
  }
  json.EndObject();
}

}  // namespace

std::string ChromeTrace::DebugString() const {
  return absl::StrFormat(
      "chrome trace: %d events, %d bytes; %d durations clamped, %d counter times clamped, "
      "%d copies queued",
      num_events, json.size(), clamped_durations, clamped_counter_times, queued_copies);
}

absl::StatusOr<ChromeTrace> BuildChromeTrace(const EventLog& log, const StepLayout& layout,
                                             const Timeline& timeline,
                                             const ChromeTraceOptions& options) {
  RETURN_IF_ERROR(CheckEvents(log, layout));
  const int64_t zero_ns = FirstEventNanos(log);
  const std::vector<Phase> phases = Phases(layout);
  ChromeTrace trace;
  JsonWriter json;
  json.BeginObject().Key("traceEvents").BeginArray();
  EventWriter w(json, trace);
  WriteMetadata(options, w);
  WriteCounters(timeline, w);
  WriteSteps(log, zero_ns, w);
  WriteSections(log, phases, zero_ns, w);
  WriteOps(log, layout, phases, zero_ns, w);
  WriteCopyStream(log, layout, CopyEvent::Direction::kToHost, zero_ns, w);
  WriteCopyStream(log, layout, CopyEvent::Direction::kToDevice, zero_ns, w);
  WritePeak(timeline, w);
  json.EndArray();
  json.Key("displayTimeUnit").String("ms");
  WriteOtherData(options, trace, zero_ns, json);
  json.EndObject();
  trace.json = json.str();
  return trace;
}

}  // namespace headroom::profiler
