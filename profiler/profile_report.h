// A profile's report: the figures of a profiled run gathered into the wire message
// (proto::ProfileResponse, what `headroom profile --out` writes and the daemon's Profile
// call returns). Rendering it for people is the clients' (clients/remote_text.h).
#ifndef HEADROOM_PROFILER_PROFILE_REPORT_H_
#define HEADROOM_PROFILER_PROFILE_REPORT_H_

#include <string>

#include "graph/graph.h"
#include "planner/section_search.h"
#include "profiler/events.h"
#include "profiler/op_costs.h"
#include "profiler/step_layout.h"
#include "profiler/timeline.h"
#include "proto/headroom.pb.h"

namespace headroom::profiler {

struct ProfileReportOptions {
  // "cpu" or "cuda".
  std::string backend = "cpu";
  // The budget the plan was asked to fit (0: none).
  uint64_t budget_bytes = 0;
  // Timeline samples kept in the message (evenly thinned; the peak's is always kept).
  // Default 2000; 0 keeps every one.
  size_t max_samples = 2000;
  // Whether node events time the kernels (the CPU backend) or only their launches (a GPU):
  // without, op costs are written with runs 0 so that no planner takes them. Default true.
  bool node_times_measured = true;
};

// Returns the report of a run of `plan` for `forward` whose events are `log`, laid out as
// `layout`, with timeline `timeline` and measured costs `costs`. Leaves trace_json and
// physical empty.
proto::ProfileResponse BuildProfileReport(const graph::Graph& forward,
                                          const planner::SectionPlan& plan,
                                          const EventLog& log, const StepLayout& layout,
                                          const Timeline& timeline, const MeasuredCosts& costs,
                                          const ProfileReportOptions& options);

// Returns whether the process's unplanned bytes are within their bound (true when nothing
// was measured).
bool UnplannedWithinBound(const proto::ProcessMemory& process);

}  // namespace headroom::profiler

#endif  // HEADROOM_PROFILER_PROFILE_REPORT_H_
