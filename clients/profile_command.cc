#include "clients/profile_command.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "clients/cli_flags.h"
#include "clients/model_flags.h"
#include "clients/train_flags.h"
#include "executor/trainer.h"
#include "google/protobuf/util/json_util.h"
#include "graph/graph.h"
#include "graph/summary.h"
#include "profiler/chrome_trace.h"
#include "profiler/events.h"
#include "profiler/metrics.h"
#include "profiler/metrics_sink.h"
#include "profiler/op_costs.h"
#include "profiler/profile_report.h"
#include "profiler/step_layout.h"
#include "profiler/timeline.h"
#include "util/file_io.h"
#ifdef HEADROOM_HAVE_CUDA
#include "profiler/cupti_memory.h"
#endif

namespace headroom::clients {
namespace {

constexpr char kUsage[] =
    "usage: headroom profile (--model NAME [--batch N] | --graph FILE) [--steps N]\n"
    "                        [--budget SIZE] [--backend cpu|cuda] [--no-offload]\n"
    "                        [--optimizer sgd|adam] [--lr RATE] [--seed N]\n"
    "                        [--device cpu|h100|h200] [--trace FILE] [--out FILE]\n"
    "                        [--metrics FILE] [--rows N] [--json]\n";

constexpr int64_t kDefaultSteps = 3;

// Returns the profile as JSON (field names as in the .proto file).
std::string ProfileJson(const proto::ProfileResponse& report, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  options.add_whitespace = pretty;
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(report, &json, options);
  return json;
}

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

#ifdef HEADROOM_HAVE_CUDA
// Fills `physical` from CUPTI's trace: the device memory the process really allocated
// against the executor's arena plus workspaces.
void FillPhysical(const absl::StatusOr<profiler::PhysicalMemoryTrace>& trace,
                  uint64_t expected_bytes, proto::PhysicalMemory& physical) {
  physical.set_expected_bytes(expected_bytes);
  if (!trace.ok()) {
    physical.set_unavailable_reason(std::string(trace.status().message()));
    return;
  }
  const profiler::PhysicalMemoryAccounting account =
      profiler::AccountPhysicalMemory(trace->events);
  uint64_t allocations = 0, live = 0;
  for (const auto& [device, usage] : account.device_memory_by_device) {
    allocations += usage.allocations;
    live += usage.live_bytes;
  }
  physical.set_peak_device_bytes(account.peak_device_bytes);
  physical.set_allocations(allocations);
  physical.set_live_device_bytes(live);
  physical.set_dropped_records(trace->dropped_records);
  physical.set_unmatched_frees(account.unmatched_frees.size());
  physical.set_replaced_allocations(account.replaced_allocations.size());
}
#endif

}  // namespace

int RunProfileCommand(const std::vector<std::string>& args, std::ostream& out,
                      std::ostream& err) {
  absl::StatusOr<CliFlags> flags = CliFlags::Parse(args, {"json", "no-offload", "help"});
  if (!flags.ok()) {
    return err << "headroom profile: " << flags.status().message() << "\n" << kUsage, 2;
  }
  if (flags->TakeBool("help")) {
    out << kUsage << ModelFlagsUsage() << TrainFlagsUsage(kDefaultSteps)
        << "  --trace FILE        write a Chrome trace-event JSON (open it in\n"
           "                      ui.perfetto.dev or chrome://tracing)\n"
           "  --out FILE          write the profile as JSON, for `headroom plan --profile`\n"
           "  --metrics FILE      write the run's Prometheus metrics (text exposition)\n"
           "  --rows N            rows of the peak and slowest-node tables (default 12)\n"
           "  --json              print the profile as JSON instead of the summary\n"
           "  --server ADDR       profile on headroomd instead (see 'headroom profile\n"
           "                      --server ADDR --help')\n";
    return 0;
  }
  TrainFlags f;
  if (!TakeTrainFlags(*flags, "profile", kDefaultSteps, f, err)) return 2;
  if (f.steps < 1) return err << "headroom profile: --steps must be at least 1\n", 2;
  const std::string trace_path = flags->TakeString("trace");
  const std::string out_path = flags->TakeString("out");
  const std::string metrics_path = flags->TakeString("metrics");
  const bool json = flags->TakeBool("json");
  absl::StatusOr<int64_t> rows = flags->TakeInt("rows", 12, 0);
  if (!rows.ok()) return err << "headroom profile: " << rows.status().message() << "\n", 2;
  absl::StatusOr<proto::GraphDef> def = ModelFromFlags(*flags);
  if (!def.ok()) return err << "headroom profile: " << def.status().message() << "\n", 1;
  if (absl::Status s = flags->CheckAllTaken("profile"); !s.ok()) {
    return err << "headroom profile: " << s.message() << "\n", 2;
  }
  absl::StatusOr<graph::Graph> g = graph::Graph::FromProto(*def);
  if (!g.ok()) return err << "headroom profile: " << g.status().message() << "\n", 1;
  if (absl::Status s = UseProfile(*g, f); !s.ok()) {
    return err << "headroom profile: " << s.message() << "\n", 1;
  }
#ifdef HEADROOM_HAVE_CUDA
  // On a GPU, CUPTI sees every physical allocation from before the backend exists.
  profiler::CuptiMemoryTracer tracer;
  absl::Status tracing = absl::FailedPreconditionError("not traced");
  if (f.backend == "cuda") tracing = tracer.Start();
#endif
  absl::StatusOr<std::unique_ptr<executor::Backend>> backend = MakeBackend(f.backend);
  if (!backend.ok()) return err << "headroom profile: " << backend.status().message() << "\n", 1;

  // 1. Plan, then run the steps with every event recorded (and, with --metrics, observed
  //    as the daemon observes a job's steps).
  profiler::EventLog log;
  f.trainer.events = &log;
  std::unique_ptr<profiler::Metrics> metrics;
  std::unique_ptr<profiler::MetricsSink> metrics_sink;
  const std::string device = absl::StrCat(f.backend, ":0");
  if (!metrics_path.empty()) {
    absl::StatusOr<std::unique_ptr<profiler::Metrics>> created = profiler::Metrics::Create();
    if (!created.ok()) return err << "headroom profile: " << created.status().message() << "\n", 1;
    metrics = *std::move(created);
    metrics_sink = std::make_unique<profiler::MetricsSink>(metrics.get(), "profile", device, &log);
    f.trainer.events = metrics_sink.get();
  }
  absl::StatusOr<std::unique_ptr<executor::Trainer>> trainer =
      executor::Trainer::Create(*g, backend->get(), f.trainer);
  if (!trainer.ok()) return err << "headroom profile: " << trainer.status().message() << "\n", 1;
  const planner::SectionPlan& plan = (*trainer)->plan();
  const profiler::StepLayout layout = profiler::DescribeStep(*plan.step);
  if (metrics != nullptr) {
    if (absl::Status s = metrics->StartJob("profile", device, plan.peak_bytes); !s.ok()) {
      return err << "headroom profile: " << s.message() << "\n", 1;
    }
  }
  uint64_t high_water = 0, peak_live = 0;
  // The driver's used bytes after each step, on a GPU (by step).
  std::vector<uint64_t> device_used_bytes;
  for (int64_t s = 0; s < f.steps; ++s) {
    absl::StatusOr<executor::StepResult> r = (*trainer)->Step();
    if (!r.ok()) {
      return err << "headroom profile: step " << s << ": " << r.status().message() << "\n", 1;
    }
#ifdef HEADROOM_HAVE_CUDA
    if (f.backend == "cuda") {
      absl::StatusOr<profiler::DeviceMemorySample> used = profiler::SampleDeviceMemory(0);
      device_used_bytes.push_back(used.ok() ? used->used_bytes() : 0);
      if (metrics != nullptr && used.ok()) {
        metrics->SetDeviceMemory(device, used->used_bytes(), used->total_bytes).IgnoreError();
      }
    }
#endif
    high_water = std::max(high_water, r->arena_high_water_bytes);
    peak_live = std::max(peak_live, r->peak_live_bytes);
    if (!json) {
      err << absl::StrFormat("%s %d/%d  loss %.5f  %.3f s\n", ProgressBar(s + 1, f.steps), s + 1,
                             f.steps, r->loss, r->seconds)
          << std::flush;
    }
  }

  // 2. The timeline, checked against the executor; the costs; the report.
  absl::StatusOr<profiler::Timeline> timeline = profiler::Timeline::Build(log, layout);
  if (!timeline.ok()) return err << "headroom profile: " << timeline.status().message() << "\n", 1;
  if (absl::Status s = CheckAgainstExecutor(*timeline, high_water, peak_live); !s.ok()) {
    return err << "headroom profile: " << s.message() << "\n", 1;
  }
  const profiler::MeasuredCosts costs = profiler::MeasureCosts(log, layout);
  profiler::ProfileReportOptions report_options;
  report_options.backend = f.backend;
  report_options.budget_bytes = f.trainer.budget_bytes;
  report_options.node_times_measured = f.backend == "cpu";
  proto::ProfileResponse report = profiler::BuildProfileReport(
      *g, plan, log, layout, *timeline, costs, report_options);
  // Each sample of a step gets the driver's used bytes sampled when that step ended.
  for (proto::TimelineSample& sample : *report.mutable_timeline()->mutable_samples()) {
    if (sample.step() >= 0 && sample.step() < static_cast<int64_t>(device_used_bytes.size())) {
      sample.set_device_used_bytes(device_used_bytes[sample.step()]);
    }
  }
  if ((*backend)->name() != "cuda") {
    report.mutable_physical()->set_unavailable_reason(
        "not measured: physical allocations are traced with CUPTI on the cuda backend");
  }
#ifdef HEADROOM_HAVE_CUDA
  if (f.backend == "cuda") {
    FillPhysical(tracing.ok() ? tracer.Stop() : absl::StatusOr<profiler::PhysicalMemoryTrace>(tracing),
                 report.measured_peak_bytes(), *report.mutable_physical());
  }
#endif

  // 3. Files, then the summary.
  if (!trace_path.empty()) {
    profiler::ChromeTraceOptions trace_options;
    trace_options.process_name = absl::StrCat("headroom ", g->name(), " (", f.backend, ")");
    trace_options.metadata = {{"model", g->name()},
                              {"backend", f.backend},
                              {"plan", absl::StrFormat("%s, %d section(s), predicted peak %d B",
                                                       plan.strategy, plan.step->sections.size(),
                                                       plan.peak_bytes)}};
    absl::StatusOr<profiler::ChromeTrace> trace =
        profiler::BuildChromeTrace(log, layout, *timeline, trace_options);
    if (!trace.ok()) return err << "headroom profile: " << trace.status().message() << "\n", 1;
    if (absl::Status s = WriteFileContents(trace_path, trace->json, "trace"); !s.ok()) {
      return err << "headroom profile: --trace: " << s.message() << "\n", 1;
    }
  }
  if (!out_path.empty()) {
    if (absl::Status s = WriteFileContents(out_path, ProfileJson(report, true) + "\n", "profile"); !s.ok()) {
      return err << "headroom profile: --out: " << s.message() << "\n", 1;
    }
  }
  if (metrics != nullptr) {
    absl::Status s = metrics_sink->status();
    if (s.ok()) s = WriteFileContents(metrics_path, metrics->TextExposition(), "metrics");
    if (!s.ok()) return err << "headroom profile: --metrics: " << s.message() << "\n", 1;
  }
  if (json) {
    out << ProfileJson(report, false) << "\n";
    return 0;
  }
  out << profiler::ProfileSummaryText(report, *timeline, static_cast<int>(*rows));
  if (!trace_path.empty()) out << "\ntrace: " << trace_path << " (open in ui.perfetto.dev)\n";
  if (!out_path.empty()) {
    out << (trace_path.empty() ? "\n" : "") << "profile: " << out_path
        << " (plan with it: headroom plan ... --profile " << out_path << ")\n";
  }
  return 0;
}

}  // namespace headroom::clients
