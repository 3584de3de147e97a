#include "clients/profile_command.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "clients/command_flags.h"
#include "clients/local_service.h"
#include "clients/remote_commands.h"
#include "clients/remote_text.h"
#include "executor/backends.h"
#include "graph/graph.h"
#include "graph/model_source.h"
#include "profiler/metrics.h"
#include "profiler/metrics_sink.h"
#include "profiler/profile_report.h"
#include "runner/physical_trace.h"
#include "runner/profile_run.h"
#include "runner/trainer_options.h"
#include "server/service.h"
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

// Runs the local service's profiles in this process, which it owns for the run: the steps'
// progress on stderr, --metrics, --sections and --profile, the kernel's high-water mark of
// the process reset at the start, CUPTI's trace (started before any backend exists).
class LocalProfiler : public server::ProfileRunner {
 public:
  LocalProfiler(const LocalPlanFlags& local, const executor::BackendOptions& backend_options,
                const std::string& metrics_path, bool quiet, runner::PhysicalTrace* physical,
                const CommandIo& io)
      : local_(local),
        backend_options_(backend_options),
        metrics_path_(metrics_path),
        quiet_(quiet),
        physical_(physical),
        io_(io) {}

  absl::StatusOr<proto::ProfileResponse> Profile(const proto::ProfileRequest& request) override;

 private:
  absl::StatusOr<RunMetrics> StartMetrics(const std::string& backend,
                                          runner::ProfileRunOptions& options) const;
  void ObserveSteps(const std::string& backend, int64_t steps, RunMetrics& metrics,
                    runner::ProfileRunOptions& options) const;

  const LocalPlanFlags& local_;
  const executor::BackendOptions backend_options_;
  const std::string metrics_path_;
  const bool quiet_;
  runner::PhysicalTrace* const physical_;
  const CommandIo& io_;
};

absl::StatusOr<RunMetrics> LocalProfiler::StartMetrics(const std::string& backend,
                                                       runner::ProfileRunOptions& options) const {
  RunMetrics m;
  m.device = absl::StrCat(backend, ":0");
  if (metrics_path_.empty()) return m;
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

void LocalProfiler::ObserveSteps(const std::string& backend, int64_t steps, RunMetrics& m,
                                 runner::ProfileRunOptions& options) const {
  const bool quiet = quiet_;
  const bool cuda = backend == "cuda";
  const CommandIo& io = io_;
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

absl::StatusOr<proto::ProfileResponse> LocalProfiler::Profile(
    const proto::ProfileRequest& request) {
  const std::string backend_name = request.backend();
  ASSIGN_OR_RETURN(proto::GraphDef def, graph::ResolveModel(request.model()));
  ASSIGN_OR_RETURN(graph::Graph g, graph::Graph::FromProto(def));
  ASSIGN_OR_RETURN(executor::TrainerOptions options,
                   runner::TrainerOptionsOf(request.plan(), request.seed(), backend_name));
  RETURN_IF_ERROR(ResolveLocalPlan(g, local_, options));
  options.check_rebuild_every = request.check_rebuild_every();
  ASSIGN_OR_RETURN(std::unique_ptr<executor::Backend> backend,
                   executor::MakeBackendWithOptions(backend_name, backend_options_));
  RETURN_IF_ERROR(executor::ReserveFixedCost(*backend, options));
  runner::ProfileRunOptions run_options;
  run_options.steps = request.steps();
  run_options.backend = backend_name;
  run_options.trace = request.trace();
  run_options.reset_peak_resident = true;  // This run is the process's only one.
  ASSIGN_OR_RETURN(RunMetrics metrics, StartMetrics(backend_name, run_options));
  ObserveSteps(backend_name, run_options.steps, metrics, run_options);
  ASSIGN_OR_RETURN(runner::ProfileRun profile,
                   runner::RunProfile(g, backend.get(), options, run_options));
  physical_->Finish(profile.report);
  if (metrics.metrics != nullptr) {
    absl::Status s = metrics.sink->status();
    if (s.ok()) s = WriteFileContents(metrics_path_, metrics.metrics->TextExposition(), "metrics");
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("--metrics: ", s.message()));
  }
  profile.report.set_trace_json(std::move(profile.trace_json));
  return std::move(profile.report);
}

struct ProfileCommand {
  ModelFlags model;
  PlanFlags plan;
  RunFlags run;
  LocalPlanFlags local;
  ServiceFlags service;
  ProfileFiles files;
  std::string metrics_path;
  // --check-rebuild (ProfileRequest.check_rebuild_every).
  int64_t check_rebuild_every = 0;
  const CLI::App* app = nullptr;

  absl::Status Run(const CommandIo& io);

 private:
  absl::Status RunHere(const proto::ProfileRequest& request, const CommandIo& io);
};

absl::Status ProfileCommand::RunHere(const proto::ProfileRequest& request, const CommandIo& io) {
  // On a GPU, CUPTI sees every physical allocation from before any backend exists.
  runner::PhysicalTrace physical(run.backend);
  const executor::BackendOptions backend_options = BackendOptionsOf(run);
  LocalProfiler profiler(local, backend_options, metrics_path, service.json, &physical, io);
  ASSIGN_OR_RETURN(std::unique_ptr<InProcessService> local_service,
                   InProcessService::Start(run.backend, &profiler, backend_options));
  std::unique_ptr<proto::Headroom::StubInterface> stub = local_service->NewStub();
  ASSIGN_OR_RETURN(proto::ProfileResponse report,
                   AskProfile(*stub, request, /*address=*/"", files, service.json, io));
  // On the CPU backend the process's memory is the device's: bytes no plan holds beyond
  // the bound fail the profile, as the arena keeping to its plan would.
  const proto::ProcessMemory& p = report.process();
  if (run.backend == "cpu" && !profiler::UnplannedWithinBound(p)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the process used ", p.unplanned_bytes(), " bytes that no plan holds, beyond the bound of ",
        p.unplanned_limit_bytes(), " bytes (", ProcessMemoryLine(p), ")"));
  }
  return absl::OkStatus();
}

absl::Status ProfileCommand::Run(const CommandIo& io) {
  const bool here = IsLocal(service);
  if (!here) {
    for (const char* flag : {"--metrics", "--sections", "--profile", "--nondeterministic"}) {
      if (app->count(flag) > 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, " applies to a profile run here, not with --server"));
      }
    }
  }
  RunFlags asked = run;
  if (!here && app->count("--backend") == 0) asked.backend = "";  // the daemon's
  ASSIGN_OR_RETURN(proto::ProfileRequest request,
                   ProfileRequestOf(model, plan, asked, !files.trace_path.empty()));
  request.set_check_rebuild_every(static_cast<uint32_t>(check_rebuild_every));
  if (here) return RunHere(request, io);
  ASSIGN_OR_RETURN(std::unique_ptr<proto::Headroom::StubInterface> stub,
                   Connect(service, io, run.backend));
  return AskProfile(*stub, request, AddressOf(service), files, service.json, io).status();
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
  AddCheckRebuildFlag(*app, state->check_rebuild_every);
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
  // With --server the daemon runs it; without, this process's own service does.
  AddServiceFlags(*app, state->service, /*local_without_server=*/true);
  return {app, [state, &io] { return state->Run(io); }};
}

}  // namespace headroom::clients
