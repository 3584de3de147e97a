// Measured costs from a profiled run: each node's median time, the measured copy rates
// between device and host, and the seconds spent re-running forward nodes. What the
// planner's cost model takes from a profile (profiler/measured_cost_model.h).
#ifndef HEADROOM_PROFILER_OP_COSTS_H_
#define HEADROOM_PROFILER_OP_COSTS_H_

#include <vector>

#include "profiler/events.h"
#include "profiler/step_layout.h"
#include "proto/headroom.pb.h"

namespace headroom::profiler {

struct MeasuredCosts {
  // One per node of the step, in schedule order. Medians over the steps profiled, leaving
  // out the first when there are more (it pays one-time costs: kernel selection, caches).
  std::vector<proto::OpCost> ops;
  // Bytes over seconds the copy streams took, over every measured copy each way; 0 when
  // none was measured.
  double copy_to_host_bytes_per_second = 0;
  double copy_to_device_bytes_per_second = 0;
  // Median per step of the seconds re-forward nodes took.
  double recompute_seconds = 0;
};

// Returns the costs measured in `log`, whose nodes `layout` names.
MeasuredCosts MeasureCosts(const EventLog& log, const StepLayout& layout);

}  // namespace headroom::profiler

#endif  // HEADROOM_PROFILER_OP_COSTS_H_
