#include "clients/profile_command.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "clients/command_flags.h"
#include "clients/remote_commands.h"
#include "clients/remote_text.h"
#include "executor/backends.h"
#include "graph/graph.h"
#include "profiler/metrics.h"
#include "profiler/metrics_sink.h"
#include "profiler/profile_report.h"
#include "runner/physical_trace.h"
#include "runner/profile_run.h"
#include "util/file_io.h"
#include "util/status_macros.h"
#ifdef HEADROOM_HAVE_CUDA
#include "profiler/cupti_memory.h"  // SampleDeviceMemory
#endif

namespace headroom::clients {
namespace {

constexpr int64_t kDefaultSteps = 3;

// The run's Prometheus metrics, as the daemon observes a job's steps (--metrics).
struct RunMetrics {
  std::unique_ptr<profiler::Metrics> metrics;
  std::unique_ptr<profiler::MetricsSink> sink;
  std::string device;
};

struct ProfileCommand {
  ModelFlags model;
  PlanFlags plan;
  RunFlags run;
  LocalPlanFlags local;
  ServiceFlags service;
  ProfileFiles files;
  std::string metrics_path;
  const CLI::App* app = nullptr;

  absl::Status Run(const CommandIo& io);

 private:
  absl::Status RunHere(const CommandIo& io);
  absl::StatusOr<RunMetrics> StartMetrics(runner::ProfileRunOptions& options) const;
  void ObserveSteps(const CommandIo& io, RunMetrics& metrics,
                    runner::ProfileRunOptions& options) const;
  absl::Status WriteFiles(const runner::ProfileRun& run, const RunMetrics& metrics) const;
  void Print(const proto::ProfileResponse& report, const CommandIo& io) const;
};

absl::StatusOr<RunMetrics> ProfileCommand::StartMetrics(runner::ProfileRunOptions& options) const {
  RunMetrics m;
  m.device = absl::StrCat(run.backend, ":0");
  if (metrics_path.empty()) return m;
  ASSIGN_OR_RETURN(m.metrics, profiler::Metrics::Create());
  m.sink = std::make_unique<profiler::MetricsSink>(m.metrics.get(), "profile", m.device, nullptr);
  options.also = m.sink.get();
  profiler::Metrics* metrics = m.metrics.get();
  const std::string device = m.device;
  options.on_start = [metrics, device](const executor::Trainer& trainer) {
    return metrics->StartJob("profile", device, trainer.plan().peak_bytes);
  };
  return m;
}

void ProfileCommand::ObserveSteps(const CommandIo& io, RunMetrics& m,
                                  runner::ProfileRunOptions& options) const {
  const bool quiet = service.json;
  const int64_t steps = run.steps;
  const bool cuda = run.backend == "cuda";
  options.on_step = [&io, &m, quiet, steps, cuda](int64_t s, const executor::StepResult& r) {
    uint64_t used_bytes = 0;
#ifdef HEADROOM_HAVE_CUDA
    if (cuda) {
      absl::StatusOr<profiler::DeviceMemorySample> used = profiler::SampleDeviceMemory(0);
      if (used.ok()) {
        used_bytes = used->used_bytes();
        if (m.metrics != nullptr) {
          m.metrics->SetDeviceMemory(m.device, used->used_bytes(), used->total_bytes).IgnoreError();
        }
      }
    }
#else
    (void)cuda;
#endif
    if (!quiet) {
      io.err << absl::StrFormat("%s %d/%d  loss %.5f  %.3f s\n", ProgressBar(s + 1, steps), s + 1,
                                steps, r.loss, r.seconds)
             << std::flush;
    }
    return used_bytes;
  };
}

absl::Status ProfileCommand::WriteFiles(const runner::ProfileRun& profile,
                                        const RunMetrics& m) const {
  proto::ProfileResponse with_trace = profile.report;
  with_trace.set_trace_json(profile.trace_json);
  RETURN_IF_ERROR(WriteProfileFiles(with_trace, files));
  if (m.metrics == nullptr) return absl::OkStatus();
  absl::Status s = m.sink->status();
  if (s.ok()) s = WriteFileContents(metrics_path, m.metrics->TextExposition(), "metrics");
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat("--metrics: ", s.message()));
  return absl::OkStatus();
}

void ProfileCommand::Print(const proto::ProfileResponse& report, const CommandIo& io) const {
  if (service.json) {
    io.out << ProtoJson(report) << "\n";
    return;
  }
  io.out << ProfileText(report, static_cast<int>(files.rows));
  if (!files.trace_path.empty()) {
    io.out << "\ntrace: " << files.trace_path << " (open in ui.perfetto.dev)\n";
  }
  if (!files.out_path.empty()) {
    io.out << (files.trace_path.empty() ? "\n" : "") << "profile: " << files.out_path
           << " (plan with it: headroom plan ... --profile " << files.out_path << ")\n";
  }
}

absl::Status ProfileCommand::RunHere(const CommandIo& io) {
  ASSIGN_OR_RETURN(executor::TrainerOptions options, TrainerOptionsOf(plan, run));
  ASSIGN_OR_RETURN(LoadedModel loaded, LoadModel(model, /*with_values=*/false));
  ASSIGN_OR_RETURN(graph::Graph g, graph::Graph::FromProto(loaded.graph));
  RETURN_IF_ERROR(ResolveLocalPlan(g, local, options));
  // On a GPU, CUPTI sees every physical allocation from before the backend exists.
  runner::PhysicalTrace physical(run.backend);
  ASSIGN_OR_RETURN(std::unique_ptr<executor::Backend> backend, executor::MakeBackend(run.backend));
  runner::ProfileRunOptions run_options;
  run_options.steps = run.steps;
  run_options.backend = run.backend;
  run_options.trace = !files.trace_path.empty();
  run_options.reset_peak_resident = true;  // This run is the process's only one.
  ASSIGN_OR_RETURN(RunMetrics metrics, StartMetrics(run_options));
  ObserveSteps(io, metrics, run_options);
  ASSIGN_OR_RETURN(runner::ProfileRun profile,
                   runner::RunProfile(g, backend.get(), options, run_options));
  physical.Finish(profile.report);
  RETURN_IF_ERROR(WriteFiles(profile, metrics));
  Print(profile.report, io);
  // On the CPU backend the process's memory is the device's: bytes no plan holds beyond
  // the bound fail the profile, as the arena keeping to its plan would.
  const proto::ProcessMemory& p = profile.report.process();
  if (run.backend == "cpu" && !profiler::UnplannedWithinBound(p)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the process used ", p.unplanned_bytes(), " bytes that no plan holds, beyond the bound of ",
        p.unplanned_limit_bytes(), " bytes (", ProcessMemoryLine(p), ")"));
  }
  return absl::OkStatus();
}

absl::Status ProfileCommand::Run(const CommandIo& io) {
  if (IsLocal(service)) return RunHere(io);
  for (const char* flag : {"--metrics", "--sections", "--profile"}) {
    if (app->count(flag) > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " applies to a profile run here, not with --server"));
    }
  }
  RunFlags remote_run = run;
  if (app->count("--backend") == 0) remote_run.backend = "";  // the daemon's
  return RunRemoteProfile(model, plan, remote_run, service, files, io);
}

}  // namespace

Command AddProfileCommand(CLI::App& headroom, const CommandIo& io) {
  auto state = std::make_shared<ProfileCommand>();
  CLI::App* app = headroom.add_subcommand(
      "profile",
      "train a few steps recording memory: the timeline by role, the peak and what "
      "made it, measured node times (for plan --profile), a Perfetto trace");
  state->app = app;
  AddModelFlags(*app, state->model);
  AddPlanFlags(*app, state->plan, /*trains=*/true);
  AddLocalPlanFlags(*app, state->local);
  AddRunFlags(*app, state->run, kDefaultSteps, /*backend_default=*/"cpu");
  app->add_option("--trace", state->files.trace_path,
                  "write a Chrome trace-event JSON (ui.perfetto.dev or chrome://tracing)")
      ->type_name("FILE");
  app->add_option("--out", state->files.out_path,
                  "write the profile as JSON, for `headroom plan --profile`")
      ->type_name("FILE");
  app->add_option("--metrics", state->metrics_path,
                  "write the run's Prometheus metrics (text exposition)")
      ->type_name("FILE");
  app->add_option("--rows", state->files.rows, "rows of the peak and slowest-node tables")
      ->type_name("N")
      ->capture_default_str()
      ->check(AtLeast(0));
  // With --server the daemon runs it; without, this process does.
  AddServiceFlags(*app, state->service, /*local_without_server=*/true);
  return {app, [state, &io] { return state->Run(io); }};
}

}  // namespace headroom::clients
