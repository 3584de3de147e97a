// headroomd: Headroom's daemon. Serves the Headroom gRPC service (plans, profiles, training
// jobs with progress, checkpoints and timelines), keeps its jobs and profiles in SQLite
// under --state, and exposes Prometheus metrics at --metrics. SIGTERM or SIGINT stops it
// cleanly: a running job finishes its step, is checkpointed, and resumes at the next start.
#include <arpa/inet.h>
#include <malloc.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "CivetServer.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "executor/backend_scratch.h"
#include "executor/backends.h"
#include "graph/summary.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/resource_quota.h"
#include "profiler/metrics.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"
#include "runner/profile_run.h"
#include "runner/trainer_options.h"
#include "server/auth.h"
#include "server/data_roots.h"
#include "server/job_manager.h"
#include "server/job_store.h"
#include "server/listen_address.h"
#include "server/rank_job.h"
#include "server/request_errors.h"
#include "server/request_limits.h"
#include "server/service.h"
#include "server/state_lock.h"
#include "util/byte_size.h"
#include "util/openmp_wait.h"
#include "util/status_macros.h"
#ifdef HEADROOM_HAVE_CUDA
#include "profiler/cupti_memory.h"
#endif

namespace headroom::server {
namespace {

struct DaemonFlags {
  std::string listen = "127.0.0.1:50051";
  std::string metrics = "127.0.0.1:9464";
  std::string state;
  std::string backend = "cpu";
  // --nondeterministic: the backend options of every backend the daemon makes.
  executor::BackendOptions backend_options;
  std::string device_memory;
  uint64_t device_memory_bytes = 0;
  std::string fixed_cost;
  std::optional<uint64_t> fixed_cost_bytes;
  int64_t checkpoint_every = 10;
  // --data-root, repeatable: where jobs' dataset directories may lie.
  std::vector<std::string> data_roots;
  // --max-dataset-bytes: a dataset job's sets in memory once loaded (JobManagerOptions).
  std::string max_dataset;
  uint64_t max_dataset_bytes = 0;
  // A job's most seconds RUNNING, summed across restarts; 0: none. Default 7 days.
  uint64_t max_job_seconds = 7 * 24 * 3600;
  std::string max_message;
  uint64_t max_message_bytes = 64ull << 20;
  std::string max_upload;
  // --max-upload-bytes, the service's limit on UploadJob.
  ServiceOptions service;
  std::string ready_file;
  // Startup and state: --listen parsed by CheckListenFlag(); --insecure.
  ListenAddress listen_address;
  bool insecure = false;
  // --tls-cert, --tls-key, --token-file.
  AuthOptions auth;
  // --max-threads: gRPC's threads, one per call in progress.
  int max_threads = 256;
  // --max-ranks: the most data-parallel ranks a job may ask for. Default: this host's cores.
  uint32_t max_ranks = std::max(1u, std::thread::hardware_concurrency());
  // --rank-worker: what mpirun starts for each rank. Default: headroomd_rank beside this
  // executable.
  std::string rank_worker;
};

// gRPC threads kept for calls other than watches and plans (--max-threads).
constexpr int kThreadsForOtherCalls = 32;

// Declares headroomd's flags, each with its help and default, on `app`.
void AddDaemonFlags(CLI::App& app, DaemonFlags& f) {
  app.add_option("--listen", f.listen, "gRPC address (port 0 picks one)")
      ->type_name("ADDR")
      ->capture_default_str();
  app.add_option("--metrics", f.metrics,
                 "Prometheus /metrics address ('off' for none; port 0 picks one)")
      ->type_name("ADDR")
      ->capture_default_str();
  app.add_option("--state", f.state,
                 "where jobs, checkpoints and profiles are kept (default "
                 "$HOME/.local/state/headroom)")
      ->type_name("DIR");
  app.add_option("--backend", f.backend, "cpu or cuda")
      ->type_name("NAME")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_flag_callback(
      "--nondeterministic", [&f] { f.backend_options.deterministic = false; },
      "on cuda, admit nondeterministic kernels (cuDNN convolution algorithms that accumulate "
      "with atomics) for every job and profile: faster, but runs no longer repeat bitwise");
  app.add_option("--device-memory", f.device_memory,
                 "device memory jobs are admitted against and planned for when they give no "
                 "budget (e.g. 400MiB; default: the GPU's memory on cuda, unlimited on cpu)")
      ->type_name("SIZE");
  app.add_option("--fixed-cost", f.fixed_cost,
                 "memory a job holds beyond its plan, reserved beside each plan at admission "
                 "(default: measured once at start, by a small run)")
      ->type_name("SIZE");
  app.add_option("--checkpoint-every", f.checkpoint_every, "steps between checkpoints of a job")
      ->type_name("N")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, std::numeric_limits<int64_t>::max()));
  app.add_option("--data-root", f.data_roots,
                 "a directory jobs' datasets (JobSpec.data.dataset) may be read under; repeat "
                 "for more. A path that resolves (symlinks, ..) outside every root is refused; "
                 "fashion-mnist is always allowed")
      ->type_name("DIR");
  app.add_option("--max-dataset-bytes", f.max_dataset,
                 "largest dataset a job may load: its images and labels in memory, counted from "
                 "the files' headers at submit and again when the job starts (default: half of "
                 "this host's physical memory)")
      ->type_name("SIZE");
  app.add_option("--max-job-seconds", f.max_job_seconds,
                 "most seconds a job may spend running, summed across daemon restarts; past "
                 "it the job stops at its step's end with a checkpoint and ends FAILED "
                 "(0: no limit; default 604800, 7 days)")
      ->type_name("N");
  app.add_option("--max-message-bytes", f.max_message, "largest request accepted (default 64MiB)")
      ->type_name("SIZE");
  app.add_option("--max-threads", f.max_threads,
                 "gRPC threads, one per call in progress (beyond: RESOURCE_EXHAUSTED)")
      ->type_name("N")
      ->capture_default_str()
      ->check(CLI::Range(8, 4096));
  app.add_option("--max-ranks", f.max_ranks,
                 absl::StrCat("most data-parallel ranks a job may ask for (JobSpec.ranks; each a "
                              "process on this host; default: this host's cores, at most ",
                              kMaxRanksCeiling, ")"))
      ->type_name("N")
      ->check(CLI::Range(1u, kMaxRanksCeiling));
  app.add_option("--rank-worker", f.rank_worker,
                 "the rank worker mpirun starts for a job of several ranks (default: "
                 "headroomd_rank beside headroomd)")
      ->type_name("FILE");
  AddRequestLimitFlags(app, f.service.limits);
  app.add_option("--max-upload-bytes", f.max_upload,
                 absl::StrCat("largest ONNX model UploadJob takes, in chunks, and what all "
                              "uploads in flight may hold together (default 512MiB, at most ",
                              kMaxUploadBytesLimit >> 20, "MiB)"))
      ->type_name("SIZE");
  app.add_option("--ready-file", f.ready_file, "once serving, write the bound addresses there")
      ->type_name("FILE");
  app.add_flag("--insecure", f.insecure,
               "allow a --listen address beyond loopback without TLS and a token (anyone who "
               "reaches the port can submit jobs)");
  app.add_option("--tls-cert", f.auth.tls_cert_path,
                 "serve TLS with this PEM certificate chain (with --tls-key; default plaintext)")
      ->type_name("FILE");
  app.add_option("--tls-key", f.auth.tls_key_path, "the PEM private key of --tls-cert")
      ->type_name("FILE");
  app.add_option("--token-file", f.auth.token_file,
                 "every call must send `authorization: Bearer TOKEN` with a token of FILE "
                 "(`TOKEN USER` lines, or one token); needs --tls-cert")
      ->type_name("FILE");
}

// Resolves what the flags leave to be computed: byte sizes, the state directory's default.
absl::Status ResolveFlags(DaemonFlags& f) {
  if (f.state.empty()) {
    const char* home = getenv("HOME");
    f.state = absl::StrCat(home ? home : ".", "/.local/state/headroom");
  }
  if (!f.device_memory.empty()) {
    ASSIGN_OR_RETURN(f.device_memory_bytes, ParseByteSize(f.device_memory));
    if (f.device_memory_bytes == 0) {
      return absl::InvalidArgumentError("--device-memory: must be more than 0");
    }
  }
  if (!f.fixed_cost.empty()) {
    ASSIGN_OR_RETURN(f.fixed_cost_bytes, ParseByteSize(f.fixed_cost));
  }
  if (!f.max_dataset.empty()) {
    ASSIGN_OR_RETURN(f.max_dataset_bytes, ParseByteSize(f.max_dataset));
    if (f.max_dataset_bytes == 0) {
      return absl::InvalidArgumentError("--max-dataset-bytes: must be more than 0");
    }
  } else {
    f.max_dataset_bytes = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
                          static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) / 2;
  }
  if (!f.max_message.empty()) {
    ASSIGN_OR_RETURN(f.max_message_bytes, ParseByteSize(f.max_message));
  }
  if (!f.max_upload.empty()) {
    ASSIGN_OR_RETURN(f.service.max_upload_bytes, ParseByteSize(f.max_upload));
    if (f.service.max_upload_bytes == 0 || f.service.max_upload_bytes > kMaxUploadBytesLimit) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--max-upload-bytes ", f.max_upload, ": must be more than 0 and at most ",
          kMaxUploadBytesLimit, " bytes (768MiB: an uploaded model is stored in one row)"));
    }
  }
  // Watchers and plans waiting or running must leave threads for every other call.
  const int held = f.service.limits.max_watch_streams + f.service.limits.max_concurrent_plans +
                   f.service.limits.max_queued_plans + kThreadsForOtherCalls;
  if (held > f.max_threads) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max-threads ", f.max_threads, ": fewer than --max-watch-streams + "
        "--max-concurrent-plans + --max-queued-plans + ", kThreadsForOtherCalls, " = ", held,
        ", so watchers and plans could take every thread"));
  }
  return absl::OkStatus();
}

// Parses --listen into f.listen_address. InvalidArgument for a malformed address, or for
// one beyond loopback without TLS and a token (--tls-cert, --tls-key, --token-file) unless
// --insecure is given.
absl::Status CheckListenFlag(DaemonFlags& f) {
  ASSIGN_OR_RETURN(f.listen_address, ParseListenAddress(f.listen));
  const bool authenticated = !f.auth.tls_cert_path.empty() && !f.auth.token_file.empty();
  if (!f.listen_address.loopback && !authenticated && !f.insecure) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen ", f.listen, ": not a loopback address; without TLS and a token "
        "(--tls-cert, --tls-key, --token-file) anyone who reaches it could run jobs: give "
        "them, or --insecure to listen there anyway"));
  }
  return absl::OkStatus();
}

// Returns `address` with port 0 replaced by a port that is free now (civetweb, behind the
// metrics endpoint, cannot pick one itself); a small race with other processes remains.
std::string WithFreePort(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || address.substr(colon + 1) != "0") return address;
  const std::string host = address.substr(0, colon);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  if (fd >= 0) close(fd);
  return absl::StrCat(host, ":", port);
}

// Returns (used, total) device bytes: the driver's on a GPU; on the CPU backend, what
// Headroom's running work holds against --device-memory.
std::pair<uint64_t, uint64_t> DeviceMemory(const DaemonFlags& f, const JobManager& jobs) {
#ifdef HEADROOM_HAVE_CUDA
  if (f.backend == "cuda") {
    absl::StatusOr<profiler::DeviceMemorySample> s = profiler::SampleDeviceMemory(0);
    if (s.ok()) return {s->used_bytes(), s->total_bytes};
  }
#endif
  const uint64_t total =
      f.device_memory_bytes > 0 ? f.device_memory_bytes
                                : static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  return {std::min(jobs.reserved_bytes(), total), total};
}

// Sets what `options` knows of a run's costs on the device: the fixed cost (given, or
// measured once now on a backend of its own: admission reserves it beside every plan) and,
// on a GPU, the driver's free bytes. The error of measuring.
absl::Status SetDeviceCosts(const DaemonFlags& f, JobManagerOptions& options) {
  options.fixed_cost_bytes = f.fixed_cost_bytes;
  if (!f.fixed_cost_bytes.has_value()) {
    absl::StatusOr<std::unique_ptr<executor::Backend>> backend =
        executor::MakeBackendWithOptions(f.backend, f.backend_options);
    absl::StatusOr<uint64_t> measured =
        backend.ok() ? runner::MeasureFixedCostBytes(backend->get())
                     : absl::StatusOr<uint64_t>(backend.status());
    if (!measured.ok()) {
      return absl::Status(measured.status().code(),
                          absl::StrCat("measuring the fixed cost of a run: ",
                                       measured.status().message(), " (give --fixed-cost)"));
    }
    options.measured_fixed_cost_bytes = *measured;
  }
#ifdef HEADROOM_HAVE_CUDA
  if (f.backend == "cuda") {
    options.free_device_bytes = []() -> absl::StatusOr<uint64_t> {
      ASSIGN_OR_RETURN(profiler::DeviceMemorySample s, profiler::SampleDeviceMemory(0));
      return s.free_bytes;
    };
  }
#endif
  return absl::OkStatus();
}

// Returns the metrics endpoint on `flag` (null when "off") and sets `address` to where it
// listens. The error when it cannot listen (prometheus-cpp throws; caught here).
absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartMetricsEndpoint(
    const std::string& flag, profiler::Metrics& metrics, std::string& address) {
  std::unique_ptr<prometheus::Exposer> exposer;
  if (flag == "off") return exposer;
  try {
    static CivetCallbacks callbacks{};
    callbacks.log_message = [](const mg_connection*, const char* message) {
      std::cerr << "headroomd: metrics endpoint: " << message << "\n";
      return 1;
    };
    exposer = std::make_unique<prometheus::Exposer>(WithFreePort(flag), 2, &callbacks);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("--metrics ", flag, ": cannot listen: ", e.what()));
  }
  std::weak_ptr<prometheus::Collectable> registry = metrics.registry();
  exposer->RegisterCollectable(registry);
  const std::vector<int> ports = exposer->GetListeningPorts();
  address = absl::StrCat(flag.substr(0, flag.rfind(':')), ":", ports.empty() ? 0 : ports[0]);
  return exposer;
}

// Serves until SIGTERM or SIGINT, then stops the jobs (checkpointing a running one) and the
// server.
void ServeUntilSignal(const DaemonFlags& f, grpc::Server& server, JobManager& jobs,
                      profiler::Metrics& metrics) {
  // Every second, until a signal stops everything: device memory for the metrics, and
  // the host memory glibc keeps in its arenas after a burst of requests handed back (a burst
  // of 32 concurrent plans otherwise leaves the daemon holding 4 times its idle size).
  absl::Notification stop;
  std::thread sampler([&] {
    do {
      const auto [used, total] = DeviceMemory(f, jobs);
      metrics.SetDeviceMemory(jobs.device(), used, total).IgnoreError();
      malloc_trim(0);
    } while (!stop.WaitForNotificationWithTimeout(absl::Seconds(1)));
  });
  std::thread signals([&] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    int signal = 0;
    sigwait(&set, &signal);
    std::cout << "headroomd: " << (signal == SIGINT ? "SIGINT" : "SIGTERM")
              << ": stopping (a running job is checkpointed and resumes at the next start)\n"
              << std::flush;
    jobs.Shutdown();
    server.Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    stop.Notify();
  });
  server.Wait();
  signals.join();
  sampler.join();
}

// Returns the gRPC server serving `service` on f.listen_address with `credentials` and sets `address` to the
// address it serves on. The port is bound exclusively (gRPC's default SO_REUSEPORT would let
// a second daemon share it). Unavailable naming the address when it cannot bind.
absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpcServer(
    const DaemonFlags& f, const std::shared_ptr<grpc::ServerCredentials>& credentials,
    HeadroomService& service, std::string& address) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(f.listen, credentials, &port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(&service);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(UnparsedRequestErrors());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(std::min<uint64_t>(f.max_message_bytes, INT32_MAX)));
  builder.SetMaxSendMessageSize(INT32_MAX);
  grpc::ResourceQuota quota("headroomd");
  quota.SetMaxThreads(f.max_threads);
  builder.SetResourceQuota(quota);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat(
        "--listen ", f.listen, ": cannot listen there (in use by another process, or not "
        "an address of this host)"));
  }
  address = f.listen_address.Bound(port);
  return server;
}

// Prints the stored rows that could not be read at start (left out; the rest are served).
void ReportSkippedRows(const JobStore& store) {
  for (const SkippedRow& row : store.SkippedRows()) {
    std::cerr << "headroomd: " << row.noun << " '" << row.id << "' in " << store.path()
              << " left out: " << row.reason << "\n";
  }
}

// The state directory, held by this daemon alone, and its store.
struct OpenedState {
  std::unique_ptr<StateLock> lock;
  std::unique_ptr<JobStore> store;
};

// Returns the state of --state: its lock taken first (a second daemon on the same directory
// would train the same jobs), then the store opened. The error names the lock file and its
// holder's pid, or the store's error.
absl::StatusOr<OpenedState> OpenState(const DaemonFlags& f) {
  OpenedState state;
  ASSIGN_OR_RETURN(state.lock, StateLock::Acquire(f.state));
  ASSIGN_OR_RETURN(state.store, JobStore::Open(f.state));
  return state;
}

// Returns the credentials the gRPC port listens with (--tls-cert, --tls-key, --token-file),
// or exits 2 naming the flag at fault.
std::shared_ptr<grpc::ServerCredentials> ServerCredentialsOrExit(const DaemonFlags& f) {
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      ServerCredentialsOf(f.auth);
  if (!credentials.ok()) {
    std::cerr << "headroomd: " << credentials.status().message() << "\n";
    std::exit(2);
  }
  return *credentials;
}

int Run(const DaemonFlags& f) {
  const std::shared_ptr<grpc::ServerCredentials> credentials = ServerCredentialsOrExit(f);
  // 1. The state (locked), the metrics and the jobs (stored ones resume now).
  absl::StatusOr<OpenedState> state = OpenState(f);
  if (!state.ok()) return std::cerr << "headroomd: " << state.status().message() << "\n", 1;
  JobStore& store = *state->store;
  absl::StatusOr<std::unique_ptr<profiler::Metrics>> metrics = profiler::Metrics::Create();
  if (!metrics.ok()) return std::cerr << "headroomd: " << metrics.status().message() << "\n", 1;
  JobManagerOptions options;
  options.backend = f.backend;
  options.device_memory_bytes = f.device_memory_bytes;
  options.checkpoint_interval_steps = f.checkpoint_every;
  options.max_job_seconds = f.max_job_seconds;
  options.max_job_steps = f.service.limits.max_job_steps;
  options.max_dataset_bytes = f.max_dataset_bytes;
  options.max_ranks = f.max_ranks;
  options.rank_worker = f.rank_worker;
  if (options.rank_worker.empty()) {
    std::error_code error;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
    if (!error) options.rank_worker = (self.parent_path() / "headroomd_rank").string();
  }
  absl::StatusOr<DataRoots> data_roots = DataRoots::Create(f.data_roots);
  if (!data_roots.ok()) {
    return std::cerr << "headroomd: " << data_roots.status().message() << "\n", 1;
  }
  options.data_roots = *std::move(data_roots);
  options.make_backend = [backend_options = f.backend_options](const std::string& name) {
    return executor::MakeBackendWithOptions(name, backend_options);
  };
  // One backend instance answers every plan's scratch question (its kernels build no code
  // for that); jobs and profiles run on backends of their own.
  // The same options as the jobs' backends: they decide the kernels' algorithms, so their
  // scratch.
  absl::StatusOr<std::unique_ptr<executor::Backend>> scratch_backend =
      executor::MakeBackendWithOptions(f.backend, f.backend_options);
  if (!scratch_backend.ok()) {
    return std::cerr << "headroomd: --backend " << f.backend << ": "
                     << scratch_backend.status().message() << "\n", 1;
  }
  const executor::BackendScratchModel scratch(scratch_backend->get());
  options.plan_backend.scratch = &scratch;
  options.plan_backend.host_is_device_memory = (*scratch_backend)->host_is_device_memory();
  options.plan_backend.device_preset = runner::DefaultDevicePreset(f.backend);
  if (absl::Status s = SetDeviceCosts(f, options); !s.ok()) {
    return std::cerr << "headroomd: " << s.message() << "\n", 1;
  }
  absl::StatusOr<std::unique_ptr<JobManager>> jobs =
      JobManager::Create(&store, metrics->get(), options);
  if (!jobs.ok()) return std::cerr << "headroomd: " << jobs.status().message() << "\n", 1;
  ReportSkippedRows(store);

  // 2. The metrics endpoint.
  std::string metrics_address = "off";
  absl::StatusOr<std::unique_ptr<prometheus::Exposer>> exposer =
      StartMetricsEndpoint(f.metrics, **metrics, metrics_address);
  if (!exposer.ok()) return std::cerr << "headroomd: " << exposer.status().message() << "\n", 1;

  // 3. The gRPC server.
  HeadroomService service(jobs->get(), (*jobs)->plan_backend(), /*profiles=*/nullptr, f.service);
  std::string address;
  absl::StatusOr<std::unique_ptr<grpc::Server>> server = StartGrpcServer(f, credentials, service, address);
  if (!server.ok()) return std::cerr << "headroomd: " << server.status().message() << "\n", 1;
  std::cout << absl::StrFormat(
                   "headroomd: serving on %s (%s, device memory %s, fixed cost %s %s), "
                   "metrics %s, state in %s\n",
                   address, (*jobs)->device(),
                   f.device_memory_bytes > 0 ? graph::HumanBytes(f.device_memory_bytes)
                                             : std::string(f.backend == "cuda" ? "the GPU's" : "unlimited"),
                   graph::HumanBytes((*jobs)->fixed_cost_bytes()),
                   f.fixed_cost_bytes.has_value() ? "given" : "measured",
                   metrics_address == "off" ? std::string("off") : "at http://" + metrics_address + "/metrics",
                   store.path())
            << std::flush;
  if (!f.ready_file.empty()) {
    std::ofstream(f.ready_file) << "grpc=" << address << "\nmetrics=" << metrics_address << "\n";
  }

  // 4. Until a signal stops everything.
  ServeUntilSignal(f, **server, **jobs, **metrics);
  std::cout << "headroomd: stopped\n";
  return 0;
}

}  // namespace
}  // namespace headroom::server

int main(int argc, char** argv) {
  headroom::RunWithPassiveOpenMpWait(argv);
  // Signals go to the thread that waits for them, not to gRPC's threads.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  headroom::server::DaemonFlags flags;
  CLI::App app("headroomd: Headroom's daemon; plans, queues and trains jobs under a memory "
                "budget and serves them over gRPC, with Prometheus metrics.",
                "headroomd");
  headroom::server::AddDaemonFlags(app, flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "headroomd: " << e.what() << "\nsee 'headroomd --help'\n";
    return 2;
  }
  if (absl::Status s = headroom::server::ResolveFlags(flags); !s.ok()) {
    std::cerr << "headroomd: " << s.message() << "\nsee 'headroomd --help'\n";
    return 2;
  }
  if (absl::Status s = headroom::server::CheckListenFlag(flags); !s.ok()) {
    std::cerr << "headroomd: " << s.message() << "\nsee 'headroomd --help'\n";
    return 2;
  }
  return headroom::server::Run(flags);
}
