#include "runner/profile_run.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "graph/zoo.h"
#include "profiler/chrome_trace.h"
#include "profiler/op_costs.h"
#include "profiler/process_memory.h"
#include "profiler/profile_report.h"
#include "profiler/step_layout.h"
#include "util/status_macros.h"

namespace headroom::runner {
namespace {

// Records every event in `log` and passes it on to `next` (may be null).
class TeeSink : public profiler::EventSink {
 public:
  TeeSink(profiler::EventLog* log, profiler::EventSink* next) : log_(log), next_(next) {}
  void OnMemory(const profiler::MemoryEvent& e) override { log_->OnMemory(e); if (next_) next_->OnMemory(e); }
  void OnOp(const profiler::OpEvent& e) override { log_->OnOp(e); if (next_) next_->OnOp(e); }
  void OnCopy(const profiler::CopyEvent& e) override { log_->OnCopy(e); if (next_) next_->OnCopy(e); }
  void OnStep(const profiler::StepEvent& e) override { log_->OnStep(e); if (next_) next_->OnStep(e); }

 private:
  profiler::EventLog* log_;
  profiler::EventSink* next_;
};

// Returns an error if the timeline's figures differ from what the executor measured.
absl::Status CheckAgainstExecutor(const profiler::Timeline& timeline, uint64_t high_water_bytes,
                                  uint64_t peak_live_bytes) {
  if (timeline.high_water_bytes() != high_water_bytes ||
      timeline.arena_peak_live_bytes() != peak_live_bytes) {
    return absl::InternalError(absl::StrFormat(
        "the timeline (high-water %d B, live peak %d B) disagrees with the executor "
        "(high-water %d B, live peak %d B): a bug",
        timeline.high_water_bytes(), timeline.arena_peak_live_bytes(), high_water_bytes,
        peak_live_bytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ProfileRun> RunProfile(const graph::Graph& forward, executor::Backend* backend,
                                      executor::TrainerOptions trainer_options,
                                      const ProfileRunOptions& options) {
  if (options.steps < 1 || options.steps > kMaxProfileSteps) {
    return absl::InvalidArgumentError(absl::StrCat(
        "steps: a profile runs between 1 and ", kMaxProfileSteps, " steps, not ", options.steps));
  }
  // 1. Plan, then run the steps with every event recorded.
  profiler::EventLog log;
  TeeSink tee(&log, options.also);
  // The process from before the plan: its baseline, then its resident bytes at every node.
  profiler::ProcessMemorySampler sampler(&tee, {.reset_peak = options.reset_peak_resident});
  trainer_options.events = &sampler;
  ASSIGN_OR_RETURN(std::unique_ptr<executor::Trainer> trainer,
                   executor::Trainer::Create(forward, backend, trainer_options));
  const planner::SectionPlan& plan = trainer->plan();
  const profiler::StepLayout layout = profiler::DescribeStep(*plan.step);
  if (options.on_start) RETURN_IF_ERROR(options.on_start(*trainer));
  uint64_t high_water = 0, peak_live = 0;
  std::vector<uint64_t> device_used_bytes;
  proto::RebuildCheck rebuild_check;  // --check-rebuild: over the checked steps.
  for (int64_t s = 0; s < options.steps; ++s) {
    absl::StatusOr<executor::StepResult> r = trainer->Step();
    if (!r.ok()) {
      return absl::Status(r.status().code(), absl::StrCat("step ", s, ": ", r.status().message()));
    }
    high_water = std::max(high_water, r->arena_high_water_bytes);
    peak_live = std::max(peak_live, r->peak_live_bytes);
    if (r->max_rebuild_error >= 0) {
      rebuild_check.set_checked_steps(rebuild_check.checked_steps() + 1);
      rebuild_check.set_max_rebuild_error(
          std::max(rebuild_check.max_rebuild_error(), r->max_rebuild_error));
      rebuild_check.set_mismatched_elements(rebuild_check.mismatched_elements() +
                                            static_cast<uint64_t>(r->rebuild_mismatches));
    }
    device_used_bytes.push_back(options.on_step ? options.on_step(s, *r) : 0);
  }
  // 2. The timeline, checked against the executor; the costs; the report.
  ASSIGN_OR_RETURN(profiler::Timeline timeline, profiler::Timeline::Build(log, layout));
  RETURN_IF_ERROR(CheckAgainstExecutor(timeline, high_water, peak_live));
  const profiler::MeasuredCosts costs = profiler::MeasureCosts(log, layout);
  profiler::ProfileReportOptions report_options;
  report_options.backend = options.backend;
  report_options.budget_bytes = trainer_options.budget_bytes;
  report_options.max_samples = options.max_samples;
  report_options.node_times_measured = options.backend == "cpu";
  proto::ProfileResponse report =
      profiler::BuildProfileReport(forward, plan, log, layout, timeline, costs, report_options);
  // Each sample of a step gets the driver's used bytes sampled when that step ended.
  for (proto::TimelineSample& sample : *report.mutable_timeline()->mutable_samples()) {
    if (sample.step() >= 0 && sample.step() < static_cast<int64_t>(device_used_bytes.size())) {
      sample.set_device_used_bytes(device_used_bytes[sample.step()]);
    }
  }
  *report.mutable_process() =
      sampler.Account(plan.peak_bytes, trainer->executor().host_pool_bytes(), &layout);
  if (rebuild_check.checked_steps() > 0) {
    rebuild_check.set_every_steps(static_cast<uint32_t>(trainer_options.check_rebuild_every));
    *report.mutable_rebuild_check() = rebuild_check;
  }
  if (options.backend != "cuda") {
    report.mutable_physical()->set_unavailable_reason(
        "not measured: physical allocations are traced with CUPTI on the cuda backend");
  }
  // 3. The trace, when asked.
  std::string trace_json;
  if (options.trace) {
    profiler::ChromeTraceOptions trace_options;
    trace_options.process_name = absl::StrCat("headroom ", forward.name(), " (", options.backend, ")");
    trace_options.metadata = {{"model", forward.name()},
                              {"backend", options.backend},
                              {"plan", absl::StrFormat("%s, %d section(s), predicted peak %d B",
                                                       plan.strategy, plan.step->sections.size(),
                                                       plan.peak_bytes)}};
    ASSIGN_OR_RETURN(profiler::ChromeTrace trace, profiler::BuildChromeTrace(log, layout, timeline, trace_options));
    trace_json = std::move(trace.json);
  }
  return ProfileRun{std::move(report), std::move(timeline), std::move(trace_json)};
}

absl::StatusOr<uint64_t> MeasureFixedCostBytes(executor::Backend* backend) {
  proto::ZooModel spec;
  spec.set_name("mlp");
  spec.set_batch(64);
  (*spec.mutable_options())["depth"] = 2;
  (*spec.mutable_options())["width"] = 64;
  (*spec.mutable_options())["input"] = 64;
  ASSIGN_OR_RETURN(proto::GraphDef def, graph::BuildZooModel(spec));
  ASSIGN_OR_RETURN(graph::Graph g, graph::Graph::FromProto(def));
  profiler::ProcessMemorySampler sampler;
  executor::TrainerOptions options;
  options.events = &sampler;
  ASSIGN_OR_RETURN(std::unique_ptr<executor::Trainer> trainer,
                   executor::Trainer::Create(g, backend, options));
  for (int step = 0; step < 3; ++step) RETURN_IF_ERROR(trainer->Step().status());
  if (!backend->host_is_device_memory()) {
    return backend->fixed_device_bytes() + backend->workspace_bytes();
  }
  const proto::ProcessMemory account =
      sampler.Account(trainer->plan().peak_bytes, trainer->executor().host_pool_bytes());
  if (!account.unavailable_reason().empty()) {
    return absl::UnavailableError(account.unavailable_reason());
  }
  return account.unplanned_bytes();
}

}  // namespace headroom::runner
