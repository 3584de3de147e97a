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

#include <atomic>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "executor/backend_scratch.h"
#include "executor/backends.h"
#include "graph/summary.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/resource_quota.h"
#include "CivetServer.h"
#include "prometheus/exposer.h"
#include "profiler/metrics.h"
#include "runner/profile_run.h"
#include "server/job_manager.h"
#include "server/job_store.h"
#include "server/service.h"
#include "util/byte_size.h"
#include "util/cli_flags.h"
#include "util/openmp_wait.h"
#include "util/status_macros.h"
#include "prometheus/registry.h"
#ifdef HEADROOM_HAVE_CUDA
#include "profiler/cupti_memory.h"
#endif

namespace headroom::server {
namespace {

constexpr char kUsage[] =
    "usage: headroomd [--listen ADDR] [--metrics ADDR] [--state DIR] [--backend cpu|cuda]\n"
    "                 [--device-memory SIZE] [--fixed-cost SIZE] [--checkpoint-every N]\n"
    "                 [--max-message-bytes SIZE] [--ready-file FILE]\n"
    "\n"
    "  --listen ADDR          gRPC address (default 127.0.0.1:50051; port 0 picks one)\n"
    "  --metrics ADDR         Prometheus /metrics address (default 127.0.0.1:9464; 'off'\n"
    "                         for none; port 0 picks one)\n"
    "  --state DIR            where jobs, checkpoints and profiles are kept (default\n"
    "                         $HOME/.local/state/headroom)\n"
    "  --backend NAME         cpu (default) or cuda\n"
    "  --device-memory SIZE   device memory jobs are admitted against and planned for when\n"
    "                         they give no budget (e.g. 400MiB; default: the GPU's memory on\n"
    "                         cuda, unlimited on cpu)\n"
    "  --fixed-cost SIZE      memory a job holds beyond its plan, reserved beside each plan\n"
    "                         at admission (default: measured once at start, by a small run)\n"
    "  --checkpoint-every N   steps between checkpoints of a job (default 10)\n"
    "  --max-message-bytes SIZE  largest request accepted (default 64MiB)\n"
    "  --ready-file FILE      once serving, write the bound addresses there\n";

struct DaemonFlags {
  std::string listen = "127.0.0.1:50051";
  std::string metrics = "127.0.0.1:9464";
  std::string state;
  std::string backend = "cpu";
  uint64_t device_memory_bytes = 0;
  std::optional<uint64_t> fixed_cost_bytes;
  uint64_t checkpoint_every = 10;
  uint64_t max_message_bytes = 64ull << 20;
  std::string ready_file;
};

absl::Status ParseFlags(const std::vector<std::string>& args, DaemonFlags& f) {
  ASSIGN_OR_RETURN(CliFlags flags, CliFlags::Parse(args, {"help"}));
  if (flags.TakeBool("help")) return absl::CancelledError("help");
  f.listen = flags.TakeString("listen", f.listen);
  f.metrics = flags.TakeString("metrics", f.metrics);
  const char* home = getenv("HOME");
  f.state = flags.TakeString("state", absl::StrCat(home ? home : ".", "/.local/state/headroom"));
  f.backend = flags.TakeString("backend", f.backend);
  if (f.backend != "cpu" && f.backend != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat("--backend '", f.backend, "': needs cpu or cuda"));
  }
  if (flags.Has("device-memory")) {
    ASSIGN_OR_RETURN(f.device_memory_bytes, ParseByteSize(flags.TakeString("device-memory")));
    if (f.device_memory_bytes == 0) return absl::InvalidArgumentError("--device-memory: must be more than 0");
  }
  if (flags.Has("fixed-cost")) {
    ASSIGN_OR_RETURN(f.fixed_cost_bytes, ParseByteSize(flags.TakeString("fixed-cost")));
  }
  ASSIGN_OR_RETURN(int64_t every, flags.TakeInt("checkpoint-every", 10, 1));
  f.checkpoint_every = static_cast<uint64_t>(every);
  if (flags.Has("max-message-bytes")) {
    ASSIGN_OR_RETURN(f.max_message_bytes, ParseByteSize(flags.TakeString("max-message-bytes")));
  }
  f.ready_file = flags.TakeString("ready-file");
  return flags.CheckAllTaken("headroomd");
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

int Run(const DaemonFlags& f) {
  // 1. The store, the metrics and the jobs (stored ones resume now).
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(f.state);
  if (!store.ok()) return std::cerr << "headroomd: " << store.status().message() << "\n", 1;
  absl::StatusOr<std::unique_ptr<profiler::Metrics>> metrics = profiler::Metrics::Create();
  if (!metrics.ok()) return std::cerr << "headroomd: " << metrics.status().message() << "\n", 1;
  JobManagerOptions options;
  options.backend = f.backend;
  options.device_memory_bytes = f.device_memory_bytes;
  options.checkpoint_interval_steps = f.checkpoint_every;
  options.make_backend = executor::MakeBackend;
  // One backend instance answers every plan's scratch question (its kernels build no code
  // for that); jobs and profiles run on backends of their own.
  absl::StatusOr<std::unique_ptr<executor::Backend>> scratch_backend =
      executor::MakeBackend(f.backend);
  if (!scratch_backend.ok()) {
    return std::cerr << "headroomd: --backend " << f.backend << ": "
                     << scratch_backend.status().message() << "\n", 1;
  }
  const executor::BackendScratchModel scratch(scratch_backend->get());
  options.plan_backend.scratch = &scratch;
  options.plan_backend.host_is_device_memory = (*scratch_backend)->host_is_device_memory();
  // What a run holds beyond its plan, measured once now on a backend of its own (unless
  // given): admission reserves it beside every plan.
  options.fixed_cost_bytes = f.fixed_cost_bytes;
  if (!f.fixed_cost_bytes.has_value()) {
    absl::StatusOr<std::unique_ptr<executor::Backend>> backend = executor::MakeBackend(f.backend);
    absl::StatusOr<uint64_t> measured =
        backend.ok() ? runner::MeasureFixedCostBytes(backend->get())
                     : absl::StatusOr<uint64_t>(backend.status());
    if (!measured.ok()) {
      return std::cerr << "headroomd: measuring the fixed cost of a run: "
                       << measured.status().message() << " (give --fixed-cost)\n", 1;
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
  absl::StatusOr<std::unique_ptr<JobManager>> jobs =
      JobManager::Create(store->get(), metrics->get(), options);
  if (!jobs.ok()) return std::cerr << "headroomd: " << jobs.status().message() << "\n", 1;

  // 2. The metrics endpoint (prometheus-cpp throws when it cannot bind).
  std::unique_ptr<prometheus::Exposer> exposer;
  std::string metrics_address = "off";
  if (f.metrics != "off") {
    try {
      static CivetCallbacks callbacks{};
      callbacks.log_message = [](const mg_connection*, const char* message) {
        std::cerr << "headroomd: metrics endpoint: " << message << "\n";
        return 1;
      };
      exposer = std::make_unique<prometheus::Exposer>(WithFreePort(f.metrics), 2, &callbacks);
    } catch (const std::exception& e) {
      std::cerr << "headroomd: --metrics " << f.metrics << ": cannot listen: " << e.what() << "\n";
      return 1;
    }
    std::weak_ptr<prometheus::Collectable> registry = (*metrics)->registry();
    exposer->RegisterCollectable(registry);
    const std::vector<int> ports = exposer->GetListeningPorts();
    metrics_address = absl::StrCat(f.metrics.substr(0, f.metrics.rfind(':')), ":",
                                   ports.empty() ? 0 : ports[0]);
  }

  // 3. The gRPC server.
  HeadroomService service(jobs->get());
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(f.listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<uint64_t>(f.max_message_bytes, INT32_MAX)));
  builder.SetMaxSendMessageSize(INT32_MAX);
  grpc::ResourceQuota quota("headroomd");
  quota.SetMaxThreads(256);
  builder.SetResourceQuota(quota);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::cerr << "headroomd: --listen " << f.listen << ": cannot listen there\n";
    return 1;
  }
  const std::string address = absl::StrCat(f.listen.substr(0, f.listen.rfind(':')), ":", port);
  std::cout << absl::StrFormat(
                   "headroomd: serving on %s (%s, device memory %s, fixed cost %s %s), "
                   "metrics %s, state in %s\n",
                   address, (*jobs)->device(),
                   f.device_memory_bytes > 0 ? graph::HumanBytes(f.device_memory_bytes)
                                             : std::string(f.backend == "cuda" ? "the GPU's" : "unlimited"),
                   graph::HumanBytes((*jobs)->fixed_cost_bytes()),
                   f.fixed_cost_bytes.has_value() ? "given" : "measured",
                   metrics_address == "off" ? std::string("off") : "at http://" + metrics_address + "/metrics",
                   (*store)->path())
            << std::flush;
  if (!f.ready_file.empty()) {
    std::ofstream(f.ready_file) << "grpc=" << address << "\nmetrics=" << metrics_address << "\n";
  }

  // 4. Every second, until a signal stops everything: device memory for the metrics, and
  // the host memory glibc keeps in its arenas after a burst of requests handed back (a burst
  // of 32 concurrent plans otherwise leaves the daemon holding 4 times its idle size).
  absl::Notification stop;
  std::thread sampler([&] {
    do {
      const auto [used, total] = DeviceMemory(f, **jobs);
      (*metrics)->SetDeviceMemory((*jobs)->device(), used, total).IgnoreError();
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
    (*jobs)->Shutdown();
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    stop.Notify();
  });
  server->Wait();
  signals.join();
  sampler.join();
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
  absl::Status parsed = headroom::server::ParseFlags(std::vector<std::string>(argv + 1, argv + argc), flags);
  if (absl::IsCancelled(parsed)) return std::cout << headroom::server::kUsage, 0;
  if (!parsed.ok()) return std::cerr << "headroomd: " << parsed.message() << "\n" << headroom::server::kUsage, 2;
  return headroom::server::Run(flags);
}
