#include "clients/profile_command.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "clients/model_flags.h"
#include "clients/remote_text.h"
#include "clients/train_flags.h"
#include "executor/backends.h"
#include "graph/graph.h"
#include "graph/summary.h"
#include "profiler/metrics.h"
#include "profiler/metrics_sink.h"
#include "profiler/profile_report.h"
#include "runner/physical_trace.h"
#include "runner/profile_run.h"
#include "util/cli_flags.h"
#include "util/file_io.h"
#ifdef HEADROOM_HAVE_CUDA
#include "profiler/cupti_memory.h"  // SampleDeviceMemory
#endif

namespace headroom::clients {
namespace {

constexpr char kUsage[] =
    "usage: headroom profile (--model NAME | --graph FILE | --onnx FILE) [--batch N] [--steps N]\n"
    "                        [--budget SIZE] [--backend cpu|cuda] [--no-offload]\n"
    "                        [--optimizer sgd|adam] [--lr RATE] [--seed N]\n"
    "                        [--device cpu|h100|h200] [--trace FILE] [--out FILE]\n"
    "                        [--metrics FILE] [--rows N] [--json]\n";

constexpr int64_t kDefaultSteps = 3;

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
  if (absl::Status s = ResolveGraphFlags(*g, f); !s.ok()) {
    return err << "headroom profile: " << s.message() << "\n", 1;
  }
  // On a GPU, CUPTI sees every physical allocation from before the backend exists.
  runner::PhysicalTrace physical(f.backend);
  absl::StatusOr<std::unique_ptr<executor::Backend>> backend = executor::MakeBackend(f.backend);
  if (!backend.ok()) return err << "headroom profile: " << backend.status().message() << "\n", 1;

  // 1. Profile: plan, run the steps with every event recorded (and, with --metrics,
  //    observed as the daemon observes a job's steps), build the timeline and the report.
  runner::ProfileRunOptions run_options;
  run_options.steps = f.steps;
  run_options.backend = f.backend;
  run_options.trace = !trace_path.empty();
  run_options.reset_peak_resident = true;  // This run is the process's only one.
  std::unique_ptr<profiler::Metrics> metrics;
  std::unique_ptr<profiler::MetricsSink> metrics_sink;
  const std::string device = absl::StrCat(f.backend, ":0");
  if (!metrics_path.empty()) {
    absl::StatusOr<std::unique_ptr<profiler::Metrics>> created = profiler::Metrics::Create();
    if (!created.ok()) return err << "headroom profile: " << created.status().message() << "\n", 1;
    metrics = *std::move(created);
    metrics_sink = std::make_unique<profiler::MetricsSink>(metrics.get(), "profile", device, nullptr);
    run_options.also = metrics_sink.get();
    run_options.on_start = [&](const executor::Trainer& trainer) {
      return metrics->StartJob("profile", device, trainer.plan().peak_bytes);
    };
  }
  run_options.on_step = [&](int64_t s, const executor::StepResult& r) -> uint64_t {
    uint64_t used_bytes = 0;
#ifdef HEADROOM_HAVE_CUDA
    if (f.backend == "cuda") {
      absl::StatusOr<profiler::DeviceMemorySample> used = profiler::SampleDeviceMemory(0);
      if (used.ok()) {
        used_bytes = used->used_bytes();
        if (metrics != nullptr) {
          metrics->SetDeviceMemory(device, used->used_bytes(), used->total_bytes).IgnoreError();
        }
      }
    }
#endif
    if (!json) {
      err << absl::StrFormat("%s %d/%d  loss %.5f  %.3f s\n", ProgressBar(s + 1, f.steps), s + 1,
                             f.steps, r.loss, r.seconds)
          << std::flush;
    }
    return used_bytes;
  };
  absl::StatusOr<runner::ProfileRun> run =
      runner::RunProfile(*g, backend->get(), f.trainer, run_options);
  if (!run.ok()) return err << "headroom profile: " << run.status().message() << "\n", 1;
  proto::ProfileResponse& report = run->report;
  physical.Finish(report);
  // 3. Files, then the summary.
  if (!trace_path.empty()) {
    if (absl::Status s = WriteFileContents(trace_path, run->trace_json, "trace"); !s.ok()) {
      return err << "headroom profile: --trace: " << s.message() << "\n", 1;
    }
  }
  if (!out_path.empty()) {
    if (absl::Status s = WriteFileContents(out_path, ProtoJson(report, true) + "\n", "profile"); !s.ok()) {
      return err << "headroom profile: --out: " << s.message() << "\n", 1;
    }
  }
  if (metrics != nullptr) {
    absl::Status s = metrics_sink->status();
    if (s.ok()) s = WriteFileContents(metrics_path, metrics->TextExposition(), "metrics");
    if (!s.ok()) return err << "headroom profile: --metrics: " << s.message() << "\n", 1;
  }
  // On the CPU backend the process's memory is the device's: bytes no plan holds beyond
  // the bound fail the profile, as the arena keeping to its plan would.
  const bool within = f.backend != "cpu" || profiler::UnplannedWithinBound(report.process());
  if (json) {
    out << ProtoJson(report, false) << "\n";
  } else {
    out << ProfileText(report, static_cast<int>(*rows));
    if (!trace_path.empty()) out << "\ntrace: " << trace_path << " (open in ui.perfetto.dev)\n";
    if (!out_path.empty()) {
      out << (trace_path.empty() ? "\n" : "") << "profile: " << out_path
          << " (plan with it: headroom plan ... --profile " << out_path << ")\n";
    }
  }
  if (!within) {
    const proto::ProcessMemory& p = report.process();
    err << "headroom profile: the process used " << p.unplanned_bytes()
        << " bytes that no plan holds, beyond the bound of " << p.unplanned_limit_bytes()
        << " bytes (" << ProcessMemoryLine(p) << ")\n";
    return 1;
  }
  return 0;
}

}  // namespace headroom::clients
