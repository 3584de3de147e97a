// headroomd end to end: the real daemon binary as a child process on free loopback ports,
// driven over gRPC through the generated stub, as a user's client drives it.
//
//  - a job submitted, watched from QUEUED to the end, listed, and its timeline read;
//  - cancelling a running and a queued job, and the device memory freed as the run stops;
//  - 32 concurrent Plan requests of four kinds, each answer equal to the one-at-a-time answer;
//  - bad input over the wire (an invalid graph, a budget below the minimum, unknown jobs, a
//    message over the size limit, garbage bytes on the port), after which it still serves;
//  - SIGKILL during a job and a restart on the same state: every job and profile is listed,
//    the interrupted job resumes from its checkpoint and ends with the loss of an
//    uninterrupted run, bitwise; a queued job runs; one that no longer fits is FAILED with
//    the reason;
//  - SIGTERM during a job: exit 0, the job checkpointed and resumed at the next start;
//  - an ONNX model over --max-message-bytes uploaded in chunks (UploadJob) and trained,
//    and the stream's refusals: over --max-upload-bytes, malformed, cancelled mid-way;
//  - a long profile whose client's deadline passed stops and frees the device for the job
//    queued behind it; SIGTERM during a long profile stops the daemon;
//  - a job past --max-job-seconds ends FAILED saying so, its checkpoint kept.
//
// The daemon trains with one OpenMP thread: oneDNN's threads spin-wait, which on a busy
// two-core machine makes steps far slower than one thread's.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "graph/zoo.h"
#include "gtest/gtest.h"
#include "proto/headroom.grpc.pb.h"
#include "server/daemon_process.h"
#include "server/scheduler.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;
using server::DaemonProcess;
using server::Ended;

constexpr uint64_t kMiB = 1024 * 1024;

// The test jobs' model: an MLP whose plain step needs 8.1 MiB (its kernels' scratch
// included); under kMlpBudget its plan (6.1 MiB) splits the step into sections, recomputes
// and offloads: the daemon runs the CPU backend, so its plans take host memory as separate
// (HOST_MEMORY_SEPARATE), as a GPU's. About 10 ms a step.
constexpr uint64_t kMlpBudget = 13 * kMiB / 2;
proto::ModelSource Mlp() {
  proto::ModelSource m;
  proto::ZooModel* zoo = m.mutable_zoo();
  zoo->set_name("mlp");
  zoo->set_batch(512);
  (*zoo->mutable_options())["depth"] = 8;
  (*zoo->mutable_options())["width"] = 256;
  (*zoo->mutable_options())["input"] = 64;
  return m;
}

proto::JobSpec MlpJob(const std::string& name, uint64_t steps, uint64_t seed = 7) {
  proto::JobSpec spec;
  spec.set_name(name);
  *spec.mutable_model() = Mlp();
  spec.mutable_plan()->set_budget_bytes(kMlpBudget);
  spec.mutable_plan()->set_host_memory(proto::HOST_MEMORY_SEPARATE);
  spec.mutable_train()->set_steps(steps);
  spec.mutable_train()->set_seed(seed);
  spec.mutable_train()->set_checkpoint_interval_steps(5);
  return spec;
}

std::string TmpDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

// Returns the options of a daemon on `state` (a directory of TEST_TMPDIR) with `flags`, its
// log a fresh file of TEST_TMPDIR.
server::DaemonOptions OptionsFor(const std::string& state, std::vector<std::string> flags) {
  static int started = 0;
  server::DaemonOptions options;
  options.binary = absl::StrCat(std::getenv("TEST_SRCDIR"), "/headroom/server/headroomd");
  options.state_dir = absl::StrCat(TmpDir(), "/", state);
  options.log_path = absl::StrCat(TmpDir(), "/headroomd-", ++started, ".log");
  options.flags = std::move(flags);
  options.env = {"OMP_NUM_THREADS=1"};
  return options;
}

// Returns a daemon on `state` (a directory of TEST_TMPDIR) with `flags`; fails the test if
// it does not start.
std::unique_ptr<DaemonProcess> StartDaemon(const std::string& state,
                                           std::vector<std::string> flags = {}) {
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
      DaemonProcess::Start(OptionsFor(state, std::move(flags)));
  EXPECT_TRUE(daemon.ok()) << daemon.status();
  return daemon.ok() ? *std::move(daemon) : nullptr;
}

// Returns how a daemon with `options` that must refuse to start ended; fails the test if it
// served or did not exit.
server::DaemonExit RunToRefusal(server::DaemonOptions options) {
  options.start_timeout = absl::Seconds(30);
  absl::StatusOr<server::DaemonExit> exit = DaemonProcess::RunToExit(std::move(options));
  EXPECT_TRUE(exit.ok()) << exit.status();
  return exit.value_or(server::DaemonExit{});
}

// Closes the test's channel, then stops the daemon with SIGTERM; fails the test unless it
// exits 0.
void Stop(std::unique_ptr<DaemonProcess>& daemon, std::unique_ptr<proto::Headroom::Stub>& stub) {
  stub.reset();
  const absl::StatusOr<int> exit_code = daemon->Terminate();
  EXPECT_TRUE(exit_code.ok()) << exit_code.status();
  EXPECT_EQ(exit_code.value_or(-1), 0) << daemon->LogTail();
}

// Returns SubmitJob's status for `spec`, its answer in `*response`.
grpc::Status TrySubmit(proto::Headroom::Stub& stub, const proto::JobSpec& spec,
                       proto::SubmitJobResponse* response) {
  proto::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  grpc::ClientContext context;
  return stub.SubmitJob(&context, request, response);
}

// Submits `spec`; fails the test on an error.
proto::SubmitJobResponse Submit(proto::Headroom::Stub& stub, const proto::JobSpec& spec) {
  proto::SubmitJobResponse response;
  const grpc::Status s = TrySubmit(stub, spec, &response);
  EXPECT_TRUE(s.ok()) << s.error_code() << ": " << s.error_message();
  return response;
}

// Returns the job's updates from WatchJob until `until` holds for one (that one included) or
// the stream ends; fails the test if the stream ends with an error.
std::vector<proto::JobProgress> Watch(
    proto::Headroom::Stub& stub, const std::string& job_id,
    const std::function<bool(const proto::JobProgress&)>& until =
        [](const proto::JobProgress&) { return false; }) {
  proto::WatchJobRequest request;
  request.set_job_id(job_id);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
  std::unique_ptr<grpc::ClientReader<proto::JobProgress>> reader = stub.WatchJob(&context, request);
  std::vector<proto::JobProgress> updates;
  proto::JobProgress p;
  while (reader->Read(&p)) {
    updates.push_back(p);
    if (until(p)) {
      context.TryCancel();
      while (reader->Read(&p)) {
      }
      reader->Finish().IgnoreError();
      return updates;
    }
  }
  const grpc::Status s = reader->Finish();
  EXPECT_TRUE(s.ok()) << "WatchJob(" << job_id << "): " << s.error_code() << ": "
                      << s.error_message();
  return updates;
}

// Returns the final update of a watch to the end.
proto::JobProgress WatchToEnd(proto::Headroom::Stub& stub, const std::string& job_id) {
  std::vector<proto::JobProgress> updates = Watch(stub, job_id);
  EXPECT_FALSE(updates.empty());
  return updates.empty() ? proto::JobProgress() : updates.back();
}

std::vector<proto::JobInfo> ListJobs(proto::Headroom::Stub& stub) {
  proto::ListJobsRequest request;
  proto::ListJobsResponse response;
  grpc::ClientContext context;
  const grpc::Status s = stub.ListJobs(&context, request, &response);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return {response.jobs().begin(), response.jobs().end()};
}

// Returns the listed job `job_id`; fails the test when it is not listed.
proto::JobInfo Listed(proto::Headroom::Stub& stub, const std::string& job_id) {
  for (const proto::JobInfo& info : ListJobs(stub)) {
    if (info.job_id() == job_id) return info;
  }
  ADD_FAILURE() << "job " << job_id << " is not listed";
  return proto::JobInfo();
}

grpc::Status Plan(proto::Headroom::Stub& stub, const proto::PlanRequest& request,
                  proto::PlanResponse* response) {
  grpc::ClientContext context;
  return stub.Plan(&context, request, response);
}

grpc::Status Cancel(proto::Headroom::Stub& stub, const std::string& job_id,
                    proto::JobState* state) {
  proto::CancelJobRequest request;
  request.set_job_id(job_id);
  proto::CancelJobResponse response;
  grpc::ClientContext context;
  const grpc::Status s = stub.CancelJob(&context, request, &response);
  *state = response.state();
  return s;
}

grpc::Status ProfileMlp(proto::Headroom::Stub& stub, proto::ProfileResponse* response) {
  proto::ProfileRequest request;
  *request.mutable_model() = Mlp();
  request.mutable_plan()->set_budget_bytes(kMlpBudget);
  request.mutable_plan()->set_host_memory(proto::HOST_MEMORY_SEPARATE);
  request.set_steps(2);
  grpc::ClientContext context;
  return stub.Profile(&context, request, response);
}

// Returns the request for a profile of `steps` steps of the MLP under kMlpBudget.
proto::ProfileRequest MlpProfile(uint32_t steps) {
  proto::ProfileRequest request;
  *request.mutable_model() = Mlp();
  request.mutable_plan()->set_budget_bytes(kMlpBudget);
  request.mutable_plan()->set_host_memory(proto::HOST_MEMORY_SEPARATE);
  request.set_steps(steps);
  return request;
}

proto::PlanRequest PlanOf(proto::ModelSource model, uint64_t budget_bytes) {
  proto::PlanRequest request;
  *request.mutable_model() = std::move(model);
  request.mutable_options()->set_budget_bytes(budget_bytes);
  request.mutable_options()->set_host_memory(proto::HOST_MEMORY_SEPARATE);
  return request;
}

// ------------------------------------------------------------------------------------------

TEST(ServerE2ETest, SubmitWatchListAndTimeline) {
  std::unique_ptr<DaemonProcess> daemon = StartDaemon("watch", {"--device-memory", "64MiB"});
  ASSERT_NE(daemon, nullptr);
  auto stub = daemon->NewStub();

  // The watched job waits behind a blocker (one job trains at a time) until the watch has
  // its first update, so the watch sees it from QUEUED on, however slow the machine.
  const std::string blocker = Submit(*stub, MlpJob("blocker", 1000000)).job_id();
  constexpr uint64_t kSteps = 100;
  const proto::SubmitJobResponse submitted = Submit(*stub, MlpJob("e2e-watch", kSteps));
  ASSERT_FALSE(submitted.job_id().empty());
  EXPECT_EQ(submitted.state(), proto::JOB_STATE_QUEUED);
  const uint64_t planned = submitted.plan().summary().predicted_peak_bytes();
  EXPECT_LE(planned, kMlpBudget);
  EXPECT_GT(submitted.plan().sections_size(), 1) << "the budget should split the step";

  // Every update belongs to the job, counts up to its end, and its states go forward.
  const std::vector<proto::JobProgress> updates =
      Watch(*stub, submitted.job_id(), [&](const proto::JobProgress& p) {
        if (p.state() == proto::JOB_STATE_QUEUED) {
          proto::JobState state;
          EXPECT_TRUE(Cancel(*stub, blocker, &state).ok());
        }
        return false;
      });
  ASSERT_FALSE(updates.empty());
  EXPECT_EQ(updates.front().state(), proto::JOB_STATE_QUEUED);
  uint64_t last_step = 0;
  proto::JobState last_state = proto::JOB_STATE_QUEUED;
  bool saw_memory = false;
  for (const proto::JobProgress& p : updates) {
    EXPECT_EQ(p.job_id(), submitted.job_id());
    EXPECT_EQ(p.total_steps(), kSteps);
    EXPECT_GE(p.step(), last_step);
    EXPECT_GE(p.state(), last_state) << "QUEUED, RUNNING, SUCCEEDED, in that order";
    last_step = p.step();
    last_state = p.state();
    EXPECT_LE(p.measured_peak_bytes(), planned) << "measured above predicted at step " << p.step();
    if (p.state() == proto::JOB_STATE_RUNNING && p.step() > 0) {
      uint64_t by_role = 0;
      for (const proto::RoleBytes& r : p.memory_by_role()) by_role += r.bytes();
      EXPECT_GT(by_role, 0u);
      EXPECT_LE(by_role, planned);
      saw_memory = true;
    }
  }
  EXPECT_TRUE(saw_memory) << "no running update carried memory by role";
  const proto::JobProgress& last = updates.back();
  EXPECT_EQ(last.state(), proto::JOB_STATE_SUCCEEDED) << last.message();
  EXPECT_EQ(last.step(), kSteps);
  EXPECT_GT(last.measured_peak_bytes(), 0u);

  // The list agrees with the stream.
  const proto::JobInfo info = Listed(*stub, submitted.job_id());
  EXPECT_EQ(info.state(), proto::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(info.name(), "e2e-watch");
  EXPECT_EQ(info.step(), kSteps);
  EXPECT_EQ(info.loss(), last.loss());
  EXPECT_EQ(info.planned_peak_bytes(), planned);
  EXPECT_EQ(info.measured_peak_bytes(), last.measured_peak_bytes());
  EXPECT_GT(info.finished_unix_seconds(), info.submitted_unix_seconds());

  // The timeline: its peak is the measured one, thinned to what was asked.
  proto::GetTimelineRequest request;
  request.set_job_id(submitted.job_id());
  request.set_max_samples(50);
  proto::GetTimelineResponse timeline;
  grpc::ClientContext context;
  const grpc::Status s = stub->GetTimeline(&context, request, &timeline);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_GT(timeline.timeline().samples_size(), 1);
  EXPECT_LE(timeline.timeline().samples_size(), 50);
  EXPECT_EQ(timeline.timeline().high_water_bytes(), info.measured_peak_bytes());
  EXPECT_FALSE(timeline.timeline().peak_node().empty());

  Stop(daemon, stub);
}

TEST(ServerE2ETest, CancelRunningAndQueuedJobsFreesTheDeviceAsTheRunStops) {
  // 10 MiB: room for one 6.1 MiB job or profile with the 2 MiB fixed cost, not for two.
  std::unique_ptr<DaemonProcess> daemon =
      StartDaemon("cancel", {"--device-memory", "10MiB", "--fixed-cost", "2MiB"});
  ASSERT_NE(daemon, nullptr);
  auto stub = daemon->NewStub();

  const std::string running = Submit(*stub, MlpJob("long", 1000000)).job_id();
  const std::string queued = Submit(*stub, MlpJob("behind", 10)).job_id();
  Watch(*stub, running, [](const proto::JobProgress& p) {
    return p.state() == proto::JOB_STATE_RUNNING && p.step() >= 2;
  });

  // While the job holds the device, a profile of the same size does not fit: admission
  // counts its plan and the fixed cost.
  proto::ProfileResponse profile;
  grpc::Status s = ProfileMlp(*stub, &profile);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("fixed cost of 2.0 MiB"));

  // The queued job is cancelled without running.
  proto::JobState state;
  s = Cancel(*stub, queued, &state);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(state, proto::JOB_STATE_CANCELLED);
  EXPECT_EQ(Listed(*stub, queued).step(), 0u);

  // Cancel returns at once with the job CANCELLED; its run stops before its next node, and
  // a profile that needs its memory waits for that, then fits.
  s = Cancel(*stub, running, &state);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(state, proto::JOB_STATE_CANCELLED);
  s = ProfileMlp(*stub, &profile);
  EXPECT_TRUE(s.ok()) << s.error_code() << ": " << s.error_message();
  EXPECT_FALSE(profile.profile_id().empty());

  const proto::JobInfo info = Listed(*stub, running);
  EXPECT_EQ(info.state(), proto::JOB_STATE_CANCELLED);
  EXPECT_THAT(info.error(), HasSubstr("cancelled at step"));
  EXPECT_LT(info.step(), 1000000u);
  // A watch of an ended job answers its final state at once.
  const proto::JobProgress final_update = WatchToEnd(*stub, running);
  EXPECT_EQ(final_update.state(), proto::JOB_STATE_CANCELLED);
  // Cancelling it again keeps its state.
  s = Cancel(*stub, running, &state);
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(state, proto::JOB_STATE_CANCELLED);

  Stop(daemon, stub);
}

TEST(ServerE2ETest, ThirtyTwoConcurrentPlansAreAllAnsweredCorrectly) {
  std::unique_ptr<DaemonProcess> daemon = StartDaemon("plans");
  ASSERT_NE(daemon, nullptr);

  // Four kinds of request, answered one at a time first.
  auto zoo = [](const std::string& name, uint64_t batch) {
    proto::ModelSource m;
    m.mutable_zoo()->set_name(name);
    m.mutable_zoo()->set_batch(batch);
    return m;
  };
  const std::vector<proto::PlanRequest> requests = {
      PlanOf(zoo("resnet18", 8), 0), PlanOf(zoo("resnet18", 8), 200 * kMiB),
      PlanOf(zoo("transformer", 2), 0), PlanOf(Mlp(), kMlpBudget)};
  std::vector<proto::PlanResponse> expected(requests.size());
  auto stub = daemon->NewStub();
  for (size_t i = 0; i < requests.size(); ++i) {
    const grpc::Status s = Plan(*stub, requests[i], &expected[i]);
    ASSERT_TRUE(s.ok()) << i << ": " << s.error_message();
  }
  ASSERT_NE(expected[0].summary().predicted_peak_bytes(),
            expected[1].summary().predicted_peak_bytes());

  // 32 clients, each on its own connection, all at once.
  constexpr int kClients = 32;
  std::vector<proto::PlanResponse> answers(kClients);
  std::vector<grpc::Status> statuses(kClients);
  std::atomic<int> ready{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      auto stub = daemon->NewStub();
      ++ready;
      while (ready < kClients) std::this_thread::yield();
      statuses[c] = Plan(*stub, requests[c % requests.size()], &answers[c]);
    });
  }
  for (std::thread& t : clients) t.join();
  for (int c = 0; c < kClients; ++c) {
    ASSERT_TRUE(statuses[c].ok()) << "client " << c << ": " << statuses[c].error_message();
    std::string diff;
    google::protobuf::util::MessageDifferencer differ;
    differ.ReportDifferencesToString(&diff);
    EXPECT_TRUE(differ.Compare(expected[c % requests.size()], answers[c]))
        << "client " << c << " (request " << c % requests.size() << "): " << diff;
  }
  Stop(daemon, stub);
}

// Returns the bytes of `n` random bytes.
std::string Garbage(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// Connects to `address` ("127.0.0.1:PORT"), writes `bytes`, reads what comes back for up to
// 200 ms and closes.
void SendRaw(const std::string& address, const std::string& bytes) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port));
  addr.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  timeval timeout{0, 200000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the daemon closed the connection: fine
    sent += n;
  }
  char buffer[4096];
  while (recv(fd, buffer, sizeof(buffer), 0) > 0) {
  }
  close(fd);
}

// Checks that an invalid graph (for Plan and SubmitJob), an unknown op and a job of zero
// steps each get INVALID_ARGUMENT naming what is wrong. `mlp` is the valid graph.
void ExpectInvalidSpecsRejected(proto::Headroom::Stub& stub, const proto::GraphDef& mlp) {
  proto::PlanResponse plan;
  proto::SubmitJobResponse submitted;
  // An invalid graph: INVALID_ARGUMENT naming the node, for Plan and for SubmitJob.
  proto::GraphDef broken = mlp;
  ASSERT_GT(broken.nodes(2).inputs_size(), 0);
  const std::string node = broken.nodes(2).name();
  broken.mutable_nodes(2)->set_inputs(0, "no_such_tensor");
  proto::ModelSource broken_model;
  *broken_model.mutable_graph() = broken;
  grpc::Status s = Plan(stub, PlanOf(broken_model, 0), &plan);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr(node));
  EXPECT_THAT(s.error_message(), HasSubstr("no_such_tensor"));
  proto::JobSpec broken_job = MlpJob("broken", 3);
  *broken_job.mutable_model() = broken_model;
  s = TrySubmit(stub, broken_job, &submitted);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr(node));
  // An unknown op, and a job of zero steps.
  broken = mlp;
  broken.mutable_nodes(1)->set_op("Frobnicate");
  *broken_model.mutable_graph() = broken;
  s = Plan(stub, PlanOf(broken_model, 0), &plan);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr(broken.nodes(1).name()));
  EXPECT_THAT(s.error_message(), HasSubstr("Frobnicate"));
  s = TrySubmit(stub, MlpJob("no steps", 0), &submitted);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("steps"));
}

// Checks that a budget below the minimum gets FAILED_PRECONDITION naming the minimum, for
// Plan and for SubmitJob, and that the minimum named then plans.
void ExpectBudgetBelowMinimumNamesTheMinimum(proto::Headroom::Stub& stub) {
  proto::PlanResponse plan;
  grpc::Status s = Plan(stub, PlanOf(Mlp(), 1 * kMiB), &plan);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  std::smatch match;
  const std::string message = s.error_message();
  ASSERT_TRUE(std::regex_search(message, match,
                                std::regex("smallest peak [^(]*\\(([0-9]+) bytes\\)")))
      << message;
  const uint64_t minimum = std::stoull(match[1]);
  EXPECT_GT(minimum, 1 * kMiB);
  s = Plan(stub, PlanOf(Mlp(), minimum), &plan);
  ASSERT_TRUE(s.ok()) << "the minimum named, " << minimum << " bytes, does not plan: "
                      << s.error_message();
  EXPECT_LE(plan.summary().predicted_peak_bytes(), minimum);
  proto::JobSpec too_small = MlpJob("too small", 3);
  too_small.mutable_plan()->set_budget_bytes(1 * kMiB);
  proto::SubmitJobResponse submitted;
  s = TrySubmit(stub, too_small, &submitted);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr(absl::StrCat(minimum, " bytes")));
}

// Checks that CancelJob, WatchJob and GetTimeline answer NOT_FOUND for an unknown job.
void ExpectUnknownJobsNotFound(proto::Headroom::Stub& stub) {
  proto::JobState state;
  EXPECT_EQ(Cancel(stub, "job-999999", &state).error_code(), grpc::StatusCode::NOT_FOUND);
  {
    proto::WatchJobRequest request;
    request.set_job_id("job-999999");
    grpc::ClientContext context;
    auto reader = stub.WatchJob(&context, request);
    proto::JobProgress p;
    EXPECT_FALSE(reader->Read(&p));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    proto::GetTimelineRequest request;
    request.set_job_id("job-999999");
    proto::GetTimelineResponse response;
    grpc::ClientContext context;
    EXPECT_EQ(stub.GetTimeline(&context, request, &response).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
}

// Sends garbage to the daemon at `address`: random bytes, HTTP/1.1, a valid HTTP/2 preface
// followed by junk frames, and a connection closed at once.
void SendGarbage(const std::string& address) {
  SendRaw(address, Garbage(64 * 1024, 1));
  SendRaw(address, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  SendRaw(address, std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") + Garbage(16 * 1024, 2));
  SendRaw(address, "");
}

TEST(ServerE2ETest, BadInputGetsItsCodeAndTheDaemonKeepsServing) {
  std::unique_ptr<DaemonProcess> daemon =
      StartDaemon("bad", {"--device-memory", "64MiB", "--max-message-bytes", "1MiB"});
  ASSERT_NE(daemon, nullptr);
  auto stub = daemon->NewStub();
  const std::string job = Submit(*stub, MlpJob("kept", 3)).job_id();
  absl::StatusOr<proto::GraphDef> mlp = graph::BuildZooModel(Mlp().zoo());
  ASSERT_TRUE(mlp.ok()) << mlp.status();

  ASSERT_NO_FATAL_FAILURE(ExpectInvalidSpecsRejected(*stub, *mlp));
  ASSERT_NO_FATAL_FAILURE(ExpectBudgetBelowMinimumNamesTheMinimum(*stub));
  ExpectUnknownJobsNotFound(*stub);

  // A request over --max-message-bytes (1 MiB): RESOURCE_EXHAUSTED.
  proto::PlanResponse plan;
  proto::ModelSource big;
  *big.mutable_graph() = *mlp;
  big.mutable_graph()->mutable_tensors(0)->set_doc(std::string(2 * kMiB, 'x'));
  grpc::Status s = Plan(*stub, PlanOf(big, 0), &plan);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();

  ASSERT_NO_FATAL_FAILURE(SendGarbage(daemon->address()));
  ASSERT_TRUE(daemon->Running()) << daemon->LogTail();

  // It still serves, on the old channel and a new one, and the stored job is there.
  EXPECT_TRUE(Plan(*stub, PlanOf(Mlp(), kMlpBudget), &plan).ok());
  auto fresh = daemon->NewStub();
  EXPECT_TRUE(Plan(*fresh, PlanOf(Mlp(), kMlpBudget), &plan).ok());
  EXPECT_EQ(WatchToEnd(*fresh, job).state(), proto::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(ListJobs(*fresh).size(), 1u) << "only the good job is stored";

  Stop(daemon, stub);
}

// ListJobs lists summaries: a description's nodes and tensors stay out of every page, so a
// page stays small whatever was submitted; GetJob returns the job whole.
TEST(ServerE2ETest, ListJobsListsSummariesAndGetJobReturnsTheJobWhole) {
  std::unique_ptr<DaemonProcess> daemon = StartDaemon("summaries", {"--device-memory", "64MiB"});
  ASSERT_NE(daemon, nullptr);
  auto stub = daemon->NewStub();
  absl::StatusOr<proto::GraphDef> mlp = graph::BuildZooModel(Mlp().zoo());
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  proto::JobSpec spec = MlpJob("described", 2);
  *spec.mutable_model()->mutable_graph() = *mlp;
  const std::string job = Submit(*stub, spec).job_id();

  const std::vector<proto::JobInfo> listed = ListJobs(*stub);
  ASSERT_EQ(listed.size(), 1u);
  const proto::GraphDef& summary = listed[0].spec().model().graph();
  EXPECT_EQ(summary.name(), mlp->name());
  EXPECT_EQ(summary.nodes_size(), 0) << "a page carries no description";
  EXPECT_EQ(summary.tensors_size(), 0);

  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  proto::GetJobRequest request;
  request.set_job_id(job);
  proto::JobInfo whole;
  ASSERT_TRUE(stub->GetJob(&context, request, &whole).ok());
  EXPECT_EQ(whole.spec().model().graph().SerializeAsString(), mlp->SerializeAsString());

  grpc::ClientContext missing_context;
  request.set_job_id("no-such-job");
  EXPECT_EQ(stub->GetJob(&missing_context, request, &whole).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(WatchToEnd(*stub, job).state(), proto::JOB_STATE_SUCCEEDED);
  Stop(daemon, stub);
}

// Returns the bytes of the runfile `path` (relative to the workspace); fails the test when it
// cannot be read.
std::string ReadRunfile(const std::string& path) {
  std::ifstream in(absl::StrCat(std::getenv("TEST_SRCDIR"), "/headroom/", path), std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A job of squeezenet1_1 exported by tools/export_onnx.py (4.9 MB of weights), its ONNX
// bytes left out: UploadJob sends them.
proto::JobSpec OnnxJob(const std::string& name) {
  proto::JobSpec spec;
  spec.set_name(name);
  spec.mutable_model()->mutable_onnx()->set_batch(2);
  spec.mutable_train()->set_steps(2);
  spec.mutable_train()->set_seed(3);
  return spec;
}

// Streams `messages` through UploadJob (stopping at the first write the daemon refuses);
// returns its status, its answer in `*response`. `cancel_after`: cancel the call after that
// many messages instead of finishing the stream.
grpc::Status UploadMessages(proto::Headroom::Stub& stub,
                            const std::vector<proto::SubmitJobChunk>& messages,
                            proto::SubmitJobResponse* response, size_t cancel_after = SIZE_MAX) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(2));
  std::unique_ptr<grpc::ClientWriter<proto::SubmitJobChunk>> writer =
      stub.UploadJob(&context, response);
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i == cancel_after) {
      context.TryCancel();
      return writer->Finish();
    }
    if (!writer->Write(messages[i])) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

// Returns the messages of an upload of `model` for `spec`: the spec and the declared size
// (`declared_bytes`, default the model's), then chunks of `chunk_bytes`.
std::vector<proto::SubmitJobChunk> UploadOf(const proto::JobSpec& spec, const std::string& model,
                                            size_t chunk_bytes,
                                            uint64_t declared_bytes = UINT64_MAX) {
  std::vector<proto::SubmitJobChunk> messages(1);
  *messages[0].mutable_spec() = spec;
  messages[0].set_onnx_model_bytes(declared_bytes == UINT64_MAX ? model.size() : declared_bytes);
  for (size_t at = 0; at < model.size(); at += chunk_bytes) {
    messages.emplace_back().set_onnx_model_chunk(model.substr(at, chunk_bytes));
  }
  return messages;
}

// An ONNX model larger than --max-message-bytes cannot be submitted whole, but is uploaded
// in chunks, and the job holds and trains from the model's own bytes; over-limit and
// malformed streams get their codes, a cancelled upload submits nothing and frees its bytes.
TEST(ServerE2ETest, AnOnnxModelOverTheMessageLimitIsUploadedInChunksAndTrains) {
  std::unique_ptr<DaemonProcess> daemon = StartDaemon(
      "upload",
      {"--device-memory", "2GiB", "--max-message-bytes", "1MiB", "--max-upload-bytes", "8MiB"});
  ASSERT_NE(daemon, nullptr);
  auto stub = daemon->NewStub();
  const std::string model = ReadRunfile("tests/onnx/squeezenet1_1.onnx");
  ASSERT_GT(model.size(), 4 * kMiB) << "the model should exceed the 1 MiB message limit";

  // Whole, in one SubmitJob, it is over the message limit.
  proto::JobSpec whole = OnnxJob("whole");
  whole.mutable_model()->set_onnx_model(model);
  proto::SubmitJobResponse response;
  grpc::Status s = TrySubmit(*stub, whole, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();

  // In 512 KiB chunks it is taken, stored whole, and trains.
  s = UploadMessages(*stub, UploadOf(OnnxJob("uploaded"), model, 512 * 1024), &response);
  ASSERT_TRUE(s.ok()) << s.error_code() << ": " << s.error_message();
  const std::string job = response.job_id();
  EXPECT_GT(response.plan().summary().predicted_peak_bytes(), 0u);
  const proto::JobProgress end = WatchToEnd(*stub, job);
  EXPECT_EQ(end.state(), proto::JOB_STATE_SUCCEEDED) << end.message();
  EXPECT_EQ(end.step(), 2u);
  EXPECT_TRUE(std::isfinite(end.loss()));
  {
    grpc::ClientContext context;
    proto::GetJobRequest request;
    request.set_job_id(job);
    proto::JobInfo info;
    ASSERT_TRUE(stub->GetJob(&context, request, &info).ok());
    EXPECT_TRUE(info.spec().model().onnx_model() == model) << "the stored model is not the file";
    EXPECT_EQ(info.spec().model().onnx().batch(), 2u);
  }

  // Refusals, each with its code and what is at fault.
  struct Refusal {
    std::vector<proto::SubmitJobChunk> messages;
    grpc::StatusCode code;
    std::string message;
  };
  std::vector<Refusal> refusals;
  refusals.push_back({UploadOf(OnnxJob("big"), "", 1, 9 * kMiB),
                      grpc::StatusCode::RESOURCE_EXHAUSTED,
                      "the model is 9437184 bytes (9.0 MiB), over headroomd's --max-upload-bytes "
                      "of 8388608 bytes (8.0 MiB)"});
  std::vector<proto::SubmitJobChunk> no_spec = UploadOf(OnnxJob("no-spec"), model, 512 * 1024);
  no_spec.erase(no_spec.begin());
  refusals.push_back({no_spec, grpc::StatusCode::INVALID_ARGUMENT,
                      "message 1: the first message must carry the job's spec"});
  std::vector<proto::SubmitJobChunk> two_specs = UploadOf(OnnxJob("two"), model, 512 * 1024);
  two_specs.insert(two_specs.begin() + 2, two_specs[0]);
  refusals.push_back({two_specs, grpc::StatusCode::INVALID_ARGUMENT, "message 3: a second spec"});
  std::vector<proto::SubmitJobChunk> inline_bytes = UploadOf(OnnxJob("inline"), model, 512 * 1024);
  inline_bytes[0].mutable_spec()->mutable_model()->set_onnx_model("xyz");
  refusals.push_back({inline_bytes, grpc::StatusCode::INVALID_ARGUMENT,
                      "spec.model.onnx_model carries 3 bytes inline"});
  std::vector<proto::SubmitJobChunk> short_stream = UploadOf(OnnxJob("short"), model, 512 * 1024);
  short_stream.pop_back();
  refusals.push_back({short_stream, grpc::StatusCode::INVALID_ARGUMENT, "the stream ended after"});
  for (const Refusal& r : refusals) {
    s = UploadMessages(*stub, r.messages, &response);
    EXPECT_EQ(s.error_code(), r.code) << r.message << ": " << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(r.message));
  }

  // A client that leaves mid-upload submits nothing, and its bytes are given back: the next
  // whole upload fits the 8 MiB that uploads in flight may hold (the daemon may take a moment
  // to see the cancellation).
  s = UploadMessages(*stub, UploadOf(OnnxJob("left"), model, 512 * 1024), &response,
                     /*cancel_after=*/4);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED) << s.error_message();
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  for (;; absl::SleepFor(absl::Milliseconds(100))) {
    s = UploadMessages(*stub, UploadOf(OnnxJob("after"), model, 512 * 1024), &response);
    if (s.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED || absl::Now() > deadline) break;
  }
  EXPECT_TRUE(s.ok()) << s.error_code() << ": " << s.error_message();
  std::vector<std::string> names;
  for (const proto::JobInfo& info : ListJobs(*stub)) names.push_back(info.name());
  EXPECT_THAT(names, ::testing::UnorderedElementsAre("uploaded", "after"));
  Stop(daemon, stub);
}

TEST(ServerE2ETest, SigkillDuringAJobThenRestartResumesItAndKeepsEverything) {
  const std::string state = "sigkill";
  std::unique_ptr<DaemonProcess> daemon = StartDaemon(state, {"--device-memory", "64MiB"});
  ASSERT_NE(daemon, nullptr);
  auto stub = daemon->NewStub();

  // Before the crash: a profile, a job run to the end (the reference), the same job again
  // (to be interrupted) and one queued behind it.
  proto::ProfileResponse profile;
  grpc::Status s = ProfileMlp(*stub, &profile);
  ASSERT_TRUE(s.ok()) << s.error_message();
  constexpr uint64_t kSteps = 300;
  const std::string reference = Submit(*stub, MlpJob("reference", kSteps)).job_id();
  const proto::JobProgress reference_end = WatchToEnd(*stub, reference);
  ASSERT_EQ(reference_end.state(), proto::JOB_STATE_SUCCEEDED) << reference_end.message();
  const std::string interrupted = Submit(*stub, MlpJob("interrupted", kSteps)).job_id();
  const std::string queued = Submit(*stub, MlpJob("queued", 10, /*seed=*/9)).job_id();
  const std::vector<proto::JobProgress> before = Watch(*stub, interrupted, [](auto& p) {
    return p.step() >= 12;  // two checkpoints (every 5 steps) written
  });
  ASSERT_FALSE(before.empty());
  ASSERT_FALSE(Ended(before.back().state())) << "the job ended before the kill";
  daemon->Kill();

  // After the restart every job and the profile are there.
  daemon = StartDaemon(state, {"--device-memory", "64MiB"});
  ASSERT_NE(daemon, nullptr);
  stub = daemon->NewStub();
  const proto::JobInfo reference_info = Listed(*stub, reference);
  EXPECT_EQ(reference_info.state(), proto::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(reference_info.loss(), reference_end.loss());
  EXPECT_EQ(reference_info.step(), kSteps);
  EXPECT_EQ(ListJobs(*stub).size(), 3u);
  {
    proto::ListProfilesRequest request;
    request.set_summaries_only(true);
    proto::ListProfilesResponse profiles;
    grpc::ClientContext context;
    ASSERT_TRUE(stub->ListProfiles(&context, request, &profiles).ok());
    ASSERT_EQ(profiles.profiles_size(), 1);
    EXPECT_EQ(profiles.profiles(0).profile_id(), profile.profile_id());
  }
  {
    proto::GetTimelineRequest request;
    request.set_job_id(reference);
    proto::GetTimelineResponse timeline;
    grpc::ClientContext context;
    ASSERT_TRUE(stub->GetTimeline(&context, request, &timeline).ok());
    EXPECT_EQ(timeline.timeline().high_water_bytes(), reference_info.measured_peak_bytes());
  }

  // The interrupted job resumes from a checkpoint and ends exactly where the reference did.
  const proto::JobProgress resumed_end = WatchToEnd(*stub, interrupted);
  ASSERT_EQ(resumed_end.state(), proto::JOB_STATE_SUCCEEDED) << resumed_end.message();
  const proto::JobInfo resumed = Listed(*stub, interrupted);
  EXPECT_GE(resumed.resumed_from_step(), 10u);
  EXPECT_EQ(resumed.resumed_from_step() % 5, 0u);
  EXPECT_LE(resumed.resumed_from_step(), before.back().step());
  EXPECT_EQ(resumed.step(), kSteps);
  EXPECT_EQ(resumed.loss(), reference_end.loss()) << "resuming changed the training";
  // The queued one runs from the start.
  const proto::JobProgress queued_end = WatchToEnd(*stub, queued);
  EXPECT_EQ(queued_end.state(), proto::JOB_STATE_SUCCEEDED) << queued_end.message();
  EXPECT_EQ(Listed(*stub, queued).resumed_from_step(), 0u);

  Stop(daemon, stub);
}

TEST(ServerE2ETest, AJobThatNoLongerFitsAfterARestartIsFailedWithTheReason) {
  const std::string state = "shrunk";
  std::unique_ptr<DaemonProcess> daemon = StartDaemon(state, {"--device-memory", "64MiB"});
  ASSERT_NE(daemon, nullptr);
  auto stub = daemon->NewStub();
  const std::string job = Submit(*stub, MlpJob("big", 1000000)).job_id();
  Watch(*stub, job, [](const proto::JobProgress& p) { return p.step() >= 1; });
  daemon->Kill();

  // 4 MiB cannot hold its 6.1 MiB plan.
  daemon = StartDaemon(state, {"--device-memory", "4MiB"});
  ASSERT_NE(daemon, nullptr);
  stub = daemon->NewStub();
  const proto::JobInfo info = Listed(*stub, job);
  ASSERT_EQ(info.state(), proto::JOB_STATE_FAILED) << info.message();
  EXPECT_THAT(info.error(), HasSubstr("could not resume after a daemon restart"));
  EXPECT_THAT(info.error(), HasSubstr("exceeds device cpu:0's memory"));
  EXPECT_EQ(WatchToEnd(*stub, job).state(), proto::JOB_STATE_FAILED);
  Stop(daemon, stub);
}

TEST(ServerE2ETest, SigtermCheckpointsTheRunningJobAndItResumesAtTheNextStart) {
  const std::string state = "sigterm";
  std::unique_ptr<DaemonProcess> daemon = StartDaemon(state, {"--device-memory", "64MiB"});
  ASSERT_NE(daemon, nullptr);
  auto stub = daemon->NewStub();
  constexpr uint64_t kSteps = 200;
  const std::string job = Submit(*stub, MlpJob("stopped", kSteps)).job_id();
  const std::vector<proto::JobProgress> before =
      Watch(*stub, job, [](const proto::JobProgress& p) { return p.step() >= 3; });
  ASSERT_FALSE(before.empty());
  Stop(daemon, stub);
  EXPECT_THAT(daemon->LogTail(), HasSubstr("headroomd: stopped"));

  daemon = StartDaemon(state, {"--device-memory", "64MiB"});
  ASSERT_NE(daemon, nullptr);
  stub = daemon->NewStub();
  const proto::JobProgress end = WatchToEnd(*stub, job);
  EXPECT_EQ(end.state(), proto::JOB_STATE_SUCCEEDED) << end.message();
  const proto::JobInfo info = Listed(*stub, job);
  // Shutdown checkpoints after the step it was running, not at an interval.
  EXPECT_GE(info.resumed_from_step(), before.back().step());
  EXPECT_LT(info.resumed_from_step(), kSteps);
  EXPECT_EQ(info.step(), kSteps);
  Stop(daemon, stub);
}

// 10 MiB with a 2 MiB fixed cost: room for one MLP job or profile, not for two.
const std::vector<std::string> kRoomForOne = {"--device-memory", "10MiB", "--fixed-cost", "2MiB"};

// Returns the seconds from `start` to now.
double SecondsSince(absl::Time start) { return absl::ToDoubleSeconds(absl::Now() - start); }

TEST(ServerE2ETest, AProfileWhoseClientLeftStopsAndTheJobBehindItStarts) {
  std::unique_ptr<DaemonProcess> daemon = StartDaemon("profile-left", kRoomForOne);
  ASSERT_NE(daemon, nullptr);
  auto stub = daemon->NewStub();

  // 10,000 steps of about 10 ms: minutes of work, for a client that waits 3 s.
  proto::ProfileResponse profile;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
  const grpc::Status s = stub->Profile(&context, MlpProfile(10000), &profile);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  const absl::Time left = absl::Now();

  // The job does not fit beside the profile: it starts once the profile has stopped.
  const std::string job = Submit(*stub, MlpJob("behind-the-profile", 3)).job_id();
  Watch(*stub, job,
        [](const proto::JobProgress& p) { return p.state() != proto::JOB_STATE_QUEUED; });
  const double started_after = SecondsSince(left);
  std::printf("the job behind the profile started %.2f s after the profile's client left\n",
              started_after);
  // The profile alone runs for minutes; a generous bound, not a timing.
  EXPECT_LT(started_after, 30) << "the profile went on after its client left";
  EXPECT_EQ(WatchToEnd(*stub, job).state(), proto::JOB_STATE_SUCCEEDED);
  // The stopped profile was not stored.
  proto::ListProfilesRequest list;
  list.set_summaries_only(true);
  proto::ListProfilesResponse profiles;
  grpc::ClientContext list_context;
  ASSERT_TRUE(stub->ListProfiles(&list_context, list, &profiles).ok());
  EXPECT_EQ(profiles.profiles_size(), 0);
  Stop(daemon, stub);
}

TEST(ServerE2ETest, SigtermDuringALongProfileStopsTheDaemon) {
  std::unique_ptr<DaemonProcess> daemon = StartDaemon("profile-sigterm", kRoomForOne);
  ASSERT_NE(daemon, nullptr);
  auto stub = daemon->NewStub();
  // The long profile, asked again while a probe below holds the device.
  grpc::Status profile_status;
  std::thread client([&] {
    do {
      proto::ProfileResponse profile;
      grpc::ClientContext context;
      profile_status = stub->Profile(&context, MlpProfile(10000), &profile);
    } while (profile_status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  });
  // A short profile of the same size is refused once the long one holds the device.
  grpc::Status probe;
  for (int i = 0; i < 600 && probe.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED; ++i) {
    proto::ProfileResponse response;
    grpc::ClientContext context;
    probe = stub->Profile(&context, MlpProfile(1), &response);
  }
  EXPECT_EQ(probe.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << probe.error_message();
  const absl::Time signalled = absl::Now();
  const absl::StatusOr<int> exit_code = daemon->Terminate(absl::Seconds(20));
  const double stop_seconds = SecondsSince(signalled);
  std::printf("SIGTERM during a profile: the daemon exited after %.2f s\n", stop_seconds);
  EXPECT_TRUE(exit_code.ok()) << exit_code.status() << "\n" << daemon->LogTail();
  EXPECT_EQ(exit_code.value_or(-1), 0) << daemon->LogTail();
  client.join();
  EXPECT_FALSE(profile_status.ok());
  EXPECT_EQ(profile_status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << profile_status.error_message();
}

TEST(ServerE2ETest, AJobPastMaxJobSecondsEndsFailedSayingSoWithItsCheckpointKept) {
  std::unique_ptr<DaemonProcess> daemon =
      StartDaemon("max-job-seconds", {"--device-memory", "64MiB", "--max-job-seconds", "1"});
  ASSERT_NE(daemon, nullptr);
  auto stub = daemon->NewStub();
  const std::string job = Submit(*stub, MlpJob("long", 1000000)).job_id();
  const proto::JobProgress last = WatchToEnd(*stub, job);
  EXPECT_EQ(last.state(), proto::JOB_STATE_FAILED);
  EXPECT_THAT(last.message(), HasSubstr("ran past --max-job-seconds 1: "));
  const proto::JobInfo info = Listed(*stub, job);
  EXPECT_GT(info.running_seconds(), 1.0);
  EXPECT_LT(info.step(), 1000000u);
  std::printf("stopped at step %llu after %.2f s running\n",
              static_cast<unsigned long long>(info.step()), info.running_seconds());
  Stop(daemon, stub);

  // Its checkpoint is kept, of the step it stopped at.
  sqlite3* db = nullptr;
  const std::string path = absl::StrCat(TmpDir(), "/max-job-seconds/headroom.db");
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* select = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT step FROM checkpoints WHERE job_id = ?1", -1, &select,
                               nullptr),
            SQLITE_OK);
  sqlite3_bind_text(select, 1, job.c_str(), -1, SQLITE_TRANSIENT);
  EXPECT_EQ(sqlite3_step(select), SQLITE_ROW) << "no checkpoint kept";
  EXPECT_EQ(static_cast<uint64_t>(sqlite3_column_int64(select, 0)), info.step());
  sqlite3_finalize(select);
  sqlite3_close(db);
}

}  // namespace
}  // namespace headroom

namespace headroom {
namespace {

// Returns true when the daemon answers ListJobs.
bool Serves(const DaemonProcess& daemon) {
  std::unique_ptr<proto::Headroom::Stub> stub = daemon.NewStub();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  proto::ListJobsRequest request;
  proto::ListJobsResponse response;
  return stub->ListJobs(&context, request, &response).ok();
}

TEST(ServerStartupTest, ASecondDaemonOnTheSameStateExitsNamingTheLockAndItsHolder) {
  std::unique_ptr<DaemonProcess> first = StartDaemon("one-state", {"--fixed-cost", "1MiB"});
  ASSERT_NE(first, nullptr);
  const server::DaemonExit second =
      RunToRefusal(OptionsFor("one-state", {"--fixed-cost", "1MiB"}));
  EXPECT_EQ(second.exit_code, 1) << second.log;
  EXPECT_THAT(second.log, HasSubstr(absl::StrCat(TmpDir(), "/one-state/headroomd.lock")));
  EXPECT_THAT(second.log, HasSubstr(absl::StrCat("pid ", first->pid())));
  EXPECT_TRUE(Serves(*first)) << first->LogTail();
  std::unique_ptr<proto::Headroom::Stub> no_stub;
  Stop(first, no_stub);
}


TEST(ServerStartupTest, ASecondDaemonOnTheSamePortExitsNamingTheAddress) {
  std::unique_ptr<DaemonProcess> first = StartDaemon("port-a", {"--fixed-cost", "1MiB"});
  ASSERT_NE(first, nullptr);
  server::DaemonOptions options = OptionsFor("port-b", {"--fixed-cost", "1MiB"});
  options.listen = first->address();
  const server::DaemonExit second = RunToRefusal(options);
  EXPECT_EQ(second.exit_code, 1) << second.log;
  EXPECT_THAT(second.log, HasSubstr(absl::StrCat("--listen ", first->address(),
                                                 ": cannot listen there")));
  EXPECT_TRUE(Serves(*first)) << first->LogTail();
  std::unique_ptr<proto::Headroom::Stub> no_stub;
  Stop(first, no_stub);
}

TEST(ServerStartupTest, APortOver65535IsRefusedAndAUnixSocketIsReportedByItsPath) {
  server::DaemonOptions options = OptionsFor("listen-bad", {"--fixed-cost", "1MiB"});
  options.listen = "127.0.0.1:99999";
  const server::DaemonExit bad = RunToRefusal(options);
  EXPECT_EQ(bad.exit_code, 2) << bad.log;
  EXPECT_THAT(bad.log, HasSubstr("--listen '127.0.0.1:99999': port '99999' is not a number"));

  // A short directory: a unix socket's path holds at most 107 bytes.
  char dir[] = "/tmp/headroomd-e2e-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string socket = absl::StrCat(dir, "/grpc.sock");
  options = OptionsFor("listen-unix", {"--fixed-cost", "1MiB"});
  options.listen = "unix:" + socket;
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(options);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  EXPECT_EQ((*daemon)->address(), "unix:" + socket);
  EXPECT_THAT((*daemon)->LogTail(), HasSubstr("serving on unix:" + socket));
  EXPECT_TRUE(Serves(**daemon)) << (*daemon)->LogTail();
  std::unique_ptr<proto::Headroom::Stub> no_stub;
  Stop(*daemon, no_stub);
  std::remove(socket.c_str());
  rmdir(dir);
}

TEST(ServerStartupTest, ListeningBeyondLoopbackNeedsInsecure) {
  server::DaemonOptions options = OptionsFor("listen-any", {"--fixed-cost", "1MiB"});
  options.listen = "0.0.0.0:0";
  const server::DaemonExit refused = RunToRefusal(options);
  EXPECT_EQ(refused.exit_code, 2) << refused.log;
  EXPECT_THAT(refused.log, HasSubstr("--listen 0.0.0.0:0: not a loopback address"));
  EXPECT_THAT(refused.log, HasSubstr("--insecure"));

  options.flags.push_back("--insecure");
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(options);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  EXPECT_THAT((*daemon)->address(), HasSubstr("0.0.0.0:"));
  std::unique_ptr<proto::Headroom::Stub> no_stub;
  Stop(*daemon, no_stub);
}

TEST(ServerStartupTest, CudaWithoutADeviceExitsAtStartSayingWhy) {
  // No device visible, whether or not this machine has one.
  server::DaemonOptions options = OptionsFor("no-gpu", {"--backend", "cuda"});
  options.env.push_back("CUDA_VISIBLE_DEVICES=");
  const server::DaemonExit exit = RunToRefusal(options);
  EXPECT_EQ(exit.exit_code, 1) << exit.log;
  EXPECT_THAT(exit.log, HasSubstr("--backend cuda: "));
  EXPECT_THAT(exit.log, ::testing::Not(HasSubstr("serving on"))) << exit.log;
}

TEST(ServerStartupTest, AnUnreadableStoredJobIsLeftOutNamedAndTheRestServed) {
  std::unique_ptr<DaemonProcess> daemon = StartDaemon("corrupt-row", {"--fixed-cost", "1MiB"});
  ASSERT_NE(daemon, nullptr);
  std::unique_ptr<proto::Headroom::Stub> stub = daemon->NewStub();
  Stop(daemon, stub);
  {
    // A finished job's row whose message is cut short: field 1, length 5, then nothing.
    const std::string db = absl::StrCat(TmpDir(), "/corrupt-row/headroom.db");
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
    char* error = nullptr;
    EXPECT_EQ(sqlite3_exec(raw,
                           "INSERT INTO jobs (job_id, state, submitted_unix_seconds, info) "
                           "VALUES ('job-000042', 3, 1.0, x'0a05')",
                           nullptr, nullptr, &error),
              SQLITE_OK)
        << (error ? error : "");
    sqlite3_free(error);
    sqlite3_close(raw);
  }
  daemon = StartDaemon("corrupt-row", {"--fixed-cost", "1MiB"});
  ASSERT_NE(daemon, nullptr);
  EXPECT_THAT(daemon->LogTail(),
              HasSubstr("job 'job-000042' in " + TmpDir() + "/corrupt-row/headroom.db left out: "
                        "stored JobInfo (2 bytes) does not parse"));
  stub = daemon->NewStub();
  grpc::ClientContext context;
  proto::ListJobsRequest request;
  proto::ListJobsResponse response;
  ASSERT_TRUE(stub->ListJobs(&context, request, &response).ok());
  EXPECT_EQ(response.jobs_size(), 0) << response.DebugString();
  Stop(daemon, stub);
}

}  // namespace
}  // namespace headroom
