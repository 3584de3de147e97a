// Plan latency of a real headroomd, and its idle footprint.
//
// Starts headroomd (the binary beside this one in the runfiles, or --headroomd PATH) on
// loopback ports with a fresh state directory, then:
//   1. idle: after it settles, its resident memory and its CPU use over --idle-seconds;
//   2. Plan latency for resnet50 (batch 32, under 2 GiB: its plain step needs 2.7 GiB) with 1, 8 and
//      32 concurrent clients, each on its own channel sending requests back to back;
//      p50 and p99 of the per-request latency, and requests per second.
// Every answer is checked against the first one (same peak, same sections).
//
//   bazel run -c opt //server:plan_latency_bench -- [--requests-per-client N]
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "grpcpp/grpcpp.h"
#include "proto/headroom.grpc.pb.h"
#include "server/daemon_process.h"
#include "CLI/CLI.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// Returns (resident bytes, CPU seconds so far) of `pid` from /proc.
std::pair<uint64_t, double> Usage(pid_t pid) {
  uint64_t rss_kib = 0;
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) rss_kib = std::stoull(line.substr(6));
  }
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  std::istringstream fields(text.substr(text.rfind(')') + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::stod(field);  // utime, stime
  }
  return {rss_kib * 1024, ticks / sysconf(_SC_CLK_TCK)};
}

headroom::proto::PlanRequest Resnet50Request() {
  headroom::proto::PlanRequest r;
  r.mutable_model()->mutable_zoo()->set_name("resnet50");
  r.mutable_model()->mutable_zoo()->set_batch(32);
  r.mutable_options()->set_budget_bytes(2ull << 30);  // its plain step needs 2.7 GiB
  r.mutable_options()->mutable_device()->set_preset("h100");
  return r;
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[i];
}

// Returns the latency in seconds of every Plan of `clients` concurrent clients (a connection
// each) sending `per_client` requests; counts the answers that failed or differ from
// `reference` in `wrong`.
std::vector<double> PlanLatencies(headroom::server::DaemonProcess& d,
                                  const headroom::proto::PlanRequest& request,
                                  const headroom::proto::PlanResponse& reference, int clients,
                                  int64_t per_client, int& wrong) {
  std::vector<std::vector<double>> latencies(clients);
  std::atomic<int> wrong_answers{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      auto stub = d.NewStub();
      for (int64_t i = 0; i < per_client; ++i) {
        headroom::proto::PlanResponse response;
        grpc::ClientContext context;
        const Clock::time_point t0 = Clock::now();
        grpc::Status s = stub->Plan(&context, request, &response);
        latencies[c].push_back(std::chrono::duration<double>(Clock::now() - t0).count());
        if (!s.ok() || response.summary().predicted_peak_bytes() !=
                           reference.summary().predicted_peak_bytes() ||
            response.sections_size() != reference.sections_size()) {
          ++wrong_answers;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  wrong = wrong_answers;
  std::vector<double> all;
  for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  return all;
}

}  // namespace

int main(int argc, char** argv) {
  std::string binary = "server/headroomd";
  int64_t per_client = 4;
  int64_t idle_seconds = 10;
  CLI::App app("Plan latency of headroomd under concurrent clients.", "plan_latency_bench");
  app.add_option("--headroomd", binary, "the daemon's binary")->capture_default_str();
  app.add_option("--requests-per-client", per_client, "Plan calls each client makes")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--idle-seconds", idle_seconds, "seconds of idle connections measured")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  CLI11_PARSE(app, argc, argv);
  char dir_template[] = "/tmp/headroom-bench-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  headroom::server::DaemonOptions options;
  options.binary = binary;
  options.state_dir = dir + "/state";
  options.log_path = dir + "/headroomd.log";
  options.metrics = true;
  absl::StatusOr<std::unique_ptr<headroom::server::DaemonProcess>> daemon =
      headroom::server::DaemonProcess::Start(options);
  if (!daemon.ok()) return std::cerr << daemon.status().message() << "\n", 1;
  headroom::server::DaemonProcess& d = **daemon;

  // 1. Idle footprint.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const auto [rss_before, cpu_before] = Usage(d.pid());
  std::this_thread::sleep_for(std::chrono::seconds(idle_seconds));
  const auto [rss_idle, cpu_after] = Usage(d.pid());
  std::cout << absl::StrFormat("idle: resident %.1f MiB, CPU %.3f%% of one core over %d s\n",
                               rss_idle / 1048576.0,
                               100.0 * (cpu_after - cpu_before) / idle_seconds, idle_seconds);

  // 2. Plan latency at 1, 8 and 32 clients.
  const headroom::proto::PlanRequest request = Resnet50Request();
  headroom::proto::PlanResponse reference;
  {
    auto stub = d.NewStub();
    grpc::ClientContext context;
    grpc::Status s = stub->Plan(&context, request, &reference);
    if (!s.ok()) return std::cerr << "Plan: " << s.error_message() << "\n", 1;
  }
  std::cout << absl::StrFormat(
      "resnet50 batch 32 under 2 GiB (h100 cost model): peak %.1f MiB, %d sections\n\n",
      reference.summary().predicted_peak_bytes() / 1048576.0, reference.sections_size());
  std::cout << absl::StrFormat("%8s %9s %10s %10s %10s %10s\n", "clients", "requests", "p50 ms",
                               "p99 ms", "req/s", "p50/p50@1");
  double p50_one = 0;
  for (int clients : {1, 8, 32}) {
    const Clock::time_point start = Clock::now();
    int wrong = 0;
    const std::vector<double> all =
        PlanLatencies(d, request, reference, clients, per_client, wrong);
    const double wall = std::chrono::duration<double>(Clock::now() - start).count();
    const double p50 = Percentile(all, 0.5), p99 = Percentile(all, 0.99);
    if (clients == 1) p50_one = p50;
    std::cout << absl::StrFormat("%8d %9d %10.1f %10.1f %10.2f %10.2f\n", clients, all.size(),
                                 p50 * 1e3, p99 * 1e3, all.size() / wall, p50 / p50_one);
    if (wrong > 0) std::cout << "  " << wrong << " answers differed or failed\n";
  }
  const auto [rss_after, cpu_end] = Usage(d.pid());
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const auto [rss_settled, cpu_settled] = Usage(d.pid());
  std::cout << absl::StrFormat("\nafter the runs: resident %.1f MiB, %.1f MiB 3 s later\n",
                               rss_after / 1048576.0, rss_settled / 1048576.0);
  absl::StatusOr<int> exit_code = d.Terminate();
  if (!exit_code.ok()) return std::cerr << exit_code.status().message() << "\n", 1;
  std::cout << "headroomd exited " << *exit_code << "\n";
  return *exit_code == 0 ? 0 : 1;
}
