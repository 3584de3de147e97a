// headroomd bounds the work of a Plan (issue 18: eight 53-byte requests kept both cores busy
// long after their clients gave up): the real daemon as a child process, and requests whose
// planning would take tens of seconds or more (a 10,000-node chain; the largest mlp under a
// budget below its minimum, a request of a few bytes). Whether the daemon stopped is
// read from the kernel's count of its CPU time (/proc/PID/stat), not from the daemon.
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "graph/chain_testing.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/headroom.grpc.pb.h"
#include "server/daemon_process.h"

namespace headroom {
namespace {

using server::DaemonProcess;
using ::testing::HasSubstr;

// Planned without a limit, this takes tens of seconds on one core.
constexpr int kChainLength = 10000;

std::string TmpDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

std::unique_ptr<DaemonProcess> StartDaemon(const std::string& state,
                                           std::vector<std::string> flags = {}) {
  static int started = 0;
  server::DaemonOptions options;
  options.binary = absl::StrCat(std::getenv("TEST_SRCDIR"), "/headroom/server/headroomd");
  options.state_dir = absl::StrCat(TmpDir(), "/", state);
  options.log_path = absl::StrCat(TmpDir(), "/plan-limit-", ++started, ".log");
  options.flags = std::move(flags);
  options.flags.push_back("--fixed-cost");  // No measuring run at start.
  options.flags.push_back("0");
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(options);
  EXPECT_TRUE(daemon.ok()) << daemon.status();
  return daemon.ok() ? *std::move(daemon) : nullptr;
}

// Returns the CPU seconds (user + system) process `pid` has used, from /proc/PID/stat.
double CpuSeconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces), from field 3 on: utime is 14th.
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string field;
  long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  return static_cast<double>(utime + stime) / sysconf(_SC_CLK_TCK);
}

// Returns the CPU seconds per second of wall time `pid` uses over the next `window`.
double CpuRate(pid_t pid, absl::Duration window) {
  const double before = CpuSeconds(pid);
  absl::SleepFor(window);
  return (CpuSeconds(pid) - before) / absl::ToDoubleSeconds(window);
}

// Expects `after` (CPU s/s once the plans should have stopped) to be well below `during`
// (while they ran): on a loaded two-core machine a plan may get a tenth of a core, so the
// test compares the daemon with itself, not with a fixed rate. An idle daemon (its
// once-a-second memory sample and trim) uses milliseconds a second.
void ExpectIdleAfter(double during, double after, const DaemonProcess& daemon) {
  std::cout << "headroomd used " << during << " CPU s/s while planning, " << after
            << " CPU s/s once stopped\n";
  EXPECT_LT(after, 0.5 * during + 0.02) << "headroomd still computes: " << during
                                        << " CPU s/s while planning, " << after << " after\n"
                                        << daemon.LogTail();
}

// A request of a few bytes that plans for minutes: the largest mlp under a budget below its
// minimum (the search descends move by move).
proto::PlanRequest SmallSlowPlan() {
  proto::PlanRequest request;
  proto::ZooModel* zoo = request.mutable_model()->mutable_zoo();
  zoo->set_name("mlp");
  zoo->set_batch(32);
  (*zoo->mutable_options())["depth"] = 1000;
  request.mutable_options()->set_budget_bytes(1);
  return request;
}

proto::PlanRequest ChainPlan() {
  proto::PlanRequest request;
  *request.mutable_model()->mutable_graph() = graph::ReluChain(kChainLength);
  return request;
}

TEST(PlanLimitE2ETest, PlansPastTheirClientsDeadlineStopAndTheDaemonGoesIdle) {
  std::unique_ptr<DaemonProcess> daemon = StartDaemon("client-deadline");
  ASSERT_NE(daemon, nullptr);
  const proto::PlanRequest requests[] = {ChainPlan(), SmallSlowPlan()};
  // Four clients at once, each giving up after two seconds: the attack of issue 18.
  const double cpu_before = CpuSeconds(daemon->pid());
  const absl::Time sent = absl::Now();
  std::vector<std::thread> clients;
  std::vector<grpc::Status> statuses(4);
  for (int i = 0; i < 4; ++i) {
    clients.emplace_back([&, i] {
      std::unique_ptr<proto::Headroom::Stub> stub = daemon->NewStub();
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
      proto::PlanResponse response;
      statuses[i] = stub->Plan(&context, requests[i % 2], &response);
    });
  }
  for (std::thread& t : clients) t.join();
  const double during =
      (CpuSeconds(daemon->pid()) - cpu_before) / absl::ToDoubleSeconds(absl::Now() - sent);
  for (const grpc::Status& s : statuses) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  }
  // Without the token each plan went on for tens of seconds. Generous: a second to stop,
  // then two measured.
  absl::SleepFor(absl::Seconds(1));
  ExpectIdleAfter(during, CpuRate(daemon->pid(), absl::Seconds(2)), *daemon);
  EXPECT_TRUE(daemon->Running());
}

TEST(PlanLimitE2ETest, ACancelledPlanStopsAndTheDaemonGoesIdle) {
  std::unique_ptr<DaemonProcess> daemon = StartDaemon("client-cancel");
  ASSERT_NE(daemon, nullptr);
  std::unique_ptr<proto::Headroom::Stub> stub = daemon->NewStub();
  const proto::PlanRequest request = ChainPlan();
  grpc::ClientContext context;  // No deadline: the client cancels instead.
  const double cpu_before = CpuSeconds(daemon->pid());
  const absl::Time sent = absl::Now();
  absl::Time cancelled;
  std::thread canceller([&context, &cancelled] {
    absl::SleepFor(absl::Seconds(2));
    cancelled = absl::Now();
    context.TryCancel();
  });
  proto::PlanResponse response;
  const grpc::Status status = stub->Plan(&context, request, &response);
  canceller.join();
  const double during =
      (CpuSeconds(daemon->pid()) - cpu_before) / absl::ToDoubleSeconds(cancelled - sent);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED) << status.error_message();
  // For the log, how soon it stopped: CPU time in the half second after the cancellation
  // (a plan that went on would use about half of `during`; the daemon's once-a-second
  // memory sample and trim use a tick or two).
  const double at_cancel = CpuSeconds(daemon->pid());
  absl::SleepFor(absl::Milliseconds(500) - (absl::Now() - cancelled));
  std::cout << "headroomd used " << CpuSeconds(daemon->pid()) - at_cancel
            << " CPU s in the 0.5 s after the client's cancellation\n";
  ExpectIdleAfter(during, CpuRate(daemon->pid(), absl::Seconds(2)), *daemon);
}

TEST(PlanLimitE2ETest, MaxPlanSecondsStopsPlanAndSubmitJobNamingTheFlag) {
  std::unique_ptr<DaemonProcess> daemon = StartDaemon("max-plan", {"--max-plan-seconds", "1"});
  ASSERT_NE(daemon, nullptr);
  std::unique_ptr<proto::Headroom::Stub> stub = daemon->NewStub();
  {
    grpc::ClientContext context;  // The client would wait a minute: the daemon's limit is first.
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(1));
    proto::PlanResponse response;
    const grpc::Status s = stub->Plan(&context, ChainPlan(), &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("--max-plan-seconds 1 has passed"));
  }
  {
    proto::SubmitJobRequest request;
    *request.mutable_spec()->mutable_model()->mutable_graph() = graph::ReluChain(kChainLength);
    request.mutable_spec()->mutable_train()->set_steps(1);
    grpc::ClientContext context;
    proto::SubmitJobResponse response;
    const grpc::Status s = stub->SubmitJob(&context, request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("--max-plan-seconds 1 has passed"));
  }
  // Nothing was stored, and small plans still answer.
  proto::ListJobsResponse jobs;
  grpc::ClientContext list_context;
  ASSERT_TRUE(stub->ListJobs(&list_context, proto::ListJobsRequest(), &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 0);
  proto::PlanRequest small;
  *small.mutable_model()->mutable_graph() = graph::ReluChain(10);
  grpc::ClientContext small_context;
  proto::PlanResponse answer;
  const grpc::Status s = stub->Plan(&small_context, small, &answer);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

}  // namespace
}  // namespace headroom
