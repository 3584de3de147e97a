// A profiled run as a Chrome trace-event file (the JSON Object Format:
// {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}), which Perfetto
// (ui.perfetto.dev) and chrome://tracing both open. One process, named by the options; in it:
//
//   counters   "memory: <role>" (MemoryRoleName: "memory: activations", ...) and
//              "memory: device total", each a "C" event with args {"bytes": N}, written from
//              the timeline's points whenever the value changes (a role never in use has no
//              counter). One name per series, so Perfetto shows one track each
//              ("memory: activations bytes").
//   "steps"    an "X" slice per training step, "step 3", args {step, loss}.
//   "sections" an "X" slice per section, phase and step: "section 2 forward" from the
//              section's first forward op's begin to its last one's end, and "section 2
//              backward" over its backward-phase group (re-forward, backward, updates).
//   "compute"  an "X" slice per node run, named by the node, cat its kind ("forward",
//              "backward", "recompute", "update", ...), args {op, step, section, node}.
//   "copy to host", "copy to device"
//              an "X" slice per copy, named by the tensor, args {tensor, bytes, step,
//              measured, wait_ms, issue_us}.
//   the peak   an instant event ("i", scope "g") "peak 1.5 GiB" at the timeline's peak, args
//              {node, op, step, bytes}.
//
// Threads carry thread_name and thread_sort_index metadata; their tids rise in the same
// order, so viewers that ignore sort indexes (Perfetto) keep it too. Timestamps are
// microseconds since FirstEventNanos(log), written so that a reader that truncates
// microseconds times 1000 (Perfetto's importer) gets the exact nanoseconds back.
//
// Phases: a node belongs to the forward phase until the first node that is neither forward
// nor an offload (the loss seed); an offload node there counts with the forward node before
// it, every other node with StepLayout's section. A copy stream runs its copies in order, so
// a copy that would begin before the previous one on its stream ended (an unmeasured copy's
// begin is only its issue time) is started at that end and counted as queued. A slice whose
// end precedes its begin is written with duration 0 and counted; so is a timeline point
// earlier than the one before it, whose samples are written at that one's time. Flow arrows
// between a prefetch and its copy are not written. Strings are written as the layout holds
// them (names are expected to be UTF-8).
//
// A pure function of its arguments; thread-safe.
#ifndef HEADROOM_PROFILER_CHROME_TRACE_H_
#define HEADROOM_PROFILER_CHROME_TRACE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "profiler/events.h"
#include "profiler/step_layout.h"
#include "profiler/timeline.h"

namespace headroom::profiler {

struct ChromeTraceOptions {
  // The process name viewers show. Default "headroom".
  std::string process_name = "headroom";
  // Written to otherData as strings, in this order: ("model", "resnet18"), ("backend",
  // "cuda"), ("plan", ...). Default none.
  std::vector<std::pair<std::string, std::string>> metadata;
};

// A written trace and what was adjusted to write it.
struct ChromeTrace {
  std::string json;
  // Entries of traceEvents, metadata events included.
  int64_t num_events = 0;
  // Slices whose end preceded their begin, written with duration 0.
  int64_t clamped_durations = 0;
  // Timeline points earlier than the point before them, sampled at its time.
  int64_t clamped_counter_times = 0;
  // Copies started later than their recorded begin, when the one before on the stream ended.
  int64_t queued_copies = 0;

  // Returns a one-line summary: events, bytes and the counts above.
  std::string DebugString() const;
};

// Returns the trace of `log`, whose node positions and tensor ids `layout` names;
// InvalidArgument naming the event when an op names a position outside the layout or a copy
// a tensor outside it.
// REQUIRES: `timeline` was built from `log` and `layout`.
absl::StatusOr<ChromeTrace> BuildChromeTrace(const EventLog& log, const StepLayout& layout,
                                             const Timeline& timeline,
                                             const ChromeTraceOptions& options);

}  // namespace headroom::profiler

#endif  // HEADROOM_PROFILER_CHROME_TRACE_H_
