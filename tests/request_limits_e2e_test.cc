// headroomd's limits on requests and on calls at once, over the wire: each refusal names its
// flag; a request gRPC cannot parse gets INVALID_ARGUMENT naming the method; watch streams
// beyond --max-watch-streams are refused while every other call is still served; a job's
// name cannot carry control characters; GetTimeline of a job with no finished step says so.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/headroom.grpc.pb.h"
#include "server/daemon_process.h"

namespace headroom {
namespace {

using server::DaemonProcess;
using ::testing::HasSubstr;

// Returns a daemon on a fresh state directory of TEST_TMPDIR with `flags`; fails the test
// if it does not start.
std::unique_ptr<DaemonProcess> StartDaemon(const std::string& name,
                                           std::vector<std::string> flags) {
  const std::string tmp = std::getenv("TEST_TMPDIR");
  server::DaemonOptions options;
  options.binary = absl::StrCat(std::getenv("TEST_SRCDIR"), "/headroom/server/headroomd");
  options.state_dir = absl::StrCat(tmp, "/", name);
  options.log_path = absl::StrCat(tmp, "/", name, ".log");
  options.flags = std::move(flags);
  options.flags.insert(options.flags.end(), {"--device-memory", "256MiB"});
  options.env = {"OMP_NUM_THREADS=1"};
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(options);
  EXPECT_TRUE(daemon.ok()) << daemon.status();
  return daemon.ok() ? *std::move(daemon) : nullptr;
}

std::unique_ptr<grpc::ClientContext> ContextWithin(absl::Duration timeout) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  return context;
}

proto::ModelSource Mlp(uint64_t batch = 8, int depth = 2) {
  proto::ModelSource source;
  source.mutable_zoo()->set_name("mlp");
  source.mutable_zoo()->set_batch(batch);
  (*source.mutable_zoo()->mutable_options())["depth"] = depth;
  return source;
}

grpc::Status Plan(proto::Headroom::Stub& stub, const proto::ModelSource& model) {
  proto::PlanRequest request;
  *request.mutable_model() = model;
  proto::PlanResponse response;
  return stub.Plan(ContextWithin(absl::Seconds(60)).get(), request, &response);
}

grpc::Status Submit(proto::Headroom::Stub& stub, const proto::JobSpec& spec,
                    std::string* job_id = nullptr) {
  proto::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  proto::SubmitJobResponse response;
  grpc::Status status = stub.SubmitJob(ContextWithin(absl::Seconds(60)).get(), request, &response);
  if (job_id != nullptr) *job_id = response.job_id();
  return status;
}

proto::JobSpec MlpJob(const std::string& name, uint64_t steps) {
  proto::JobSpec spec;
  spec.set_name(name);
  *spec.mutable_model() = Mlp();
  spec.mutable_train()->set_steps(steps);
  return spec;
}

TEST(RequestLimitsE2ETest, EachLimitIsAFlagAndItsRefusalNamesIt) {
  std::unique_ptr<DaemonProcess> daemon =
      StartDaemon("flags", {"--max-graph-nodes", "12", "--max-batch", "16", "--max-job-steps",
                            "100", "--max-job-name", "10"});
  ASSERT_NE(daemon, nullptr);
  auto stub = daemon->NewStub();
  ASSERT_TRUE(Plan(*stub, Mlp(8, 1)).ok());
  grpc::Status s = Plan(*stub, Mlp(8, 20));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("--max-graph-nodes 12"));
  s = Plan(*stub, Mlp(17, 1));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("model.zoo.batch: 17 samples per step, more than "
                                           "--max-batch 16"));
  proto::JobSpec spec = MlpJob("long", 101);
  *spec.mutable_model() = Mlp(8, 1);
  s = Submit(*stub, spec);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("spec.train.steps: 101, more than --max-job-steps 100"));
  spec.mutable_train()->set_steps(1);
  spec.set_name("a name of more than ten bytes");
  s = Submit(*stub, spec);
  EXPECT_THAT(s.error_message(), HasSubstr("more than --max-job-name 10"));
  // A name that would clear the reader's terminal.
  spec.set_name("x\x1b[2J");
  s = Submit(*stub, spec);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("control characters are not allowed"));
  EXPECT_EQ(s.error_message().find('\x1b'), std::string::npos) << "the refusal prints it escaped";
}

TEST(RequestLimitsE2ETest, AFlagAboveItsCeilingOrLimitsThatTakeEveryThreadAreRefusedAtStart) {
  const std::string tmp = std::getenv("TEST_TMPDIR");
  server::DaemonOptions options;
  options.binary = absl::StrCat(std::getenv("TEST_SRCDIR"), "/headroom/server/headroomd");
  options.state_dir = tmp + "/ceiling";
  options.log_path = tmp + "/ceiling.log";
  options.flags = {"--max-graph-nodes", "1000000"};
  absl::StatusOr<server::DaemonExit> exit = DaemonProcess::RunToExit(options);
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_EQ(exit->exit_code, 2);
  EXPECT_THAT(exit->log, HasSubstr("--max-graph-nodes"));
  options.flags = {"--max-threads", "64", "--max-watch-streams", "60"};
  exit = DaemonProcess::RunToExit(options);
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_EQ(exit->exit_code, 2);
  EXPECT_THAT(exit->log, HasSubstr("--max-threads 64: fewer than --max-watch-streams"));
}

// A request that is not a message of its method's type: INVALID_ARGUMENT naming the method
// (gRPC alone answers INTERNAL with an empty message). Values no daemon gives (a huge job
// id, an unknown state) are refused without quoting them back.
TEST(RequestLimitsE2ETest, AnUnparsableRequestIsInvalidArgumentNamingTheMethod) {
  std::unique_ptr<DaemonProcess> daemon = StartDaemon("unparsable", {});
  ASSERT_NE(daemon, nullptr);
  auto channel = grpc::CreateChannel(daemon->address(), grpc::InsecureChannelCredentials());
  grpc::GenericStub generic(channel);
  // A field 1 of wire type 2 (length-delimited) whose length runs past the end.
  const std::string bytes(
      "\x0a\xff\xff\xff\x0f"
      "abc",
      8);
  for (const char* method : {"/headroom.proto.Headroom/Plan", "/headroom.proto.Headroom/SubmitJob",
                             "/headroom.proto.Headroom/GetJob"}) {
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1), response;
    auto context = ContextWithin(absl::Seconds(30));
    grpc::CompletionQueue cq;
    std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
        generic.PrepareUnaryCall(context.get(), method, request, &cq);
    call->StartCall();
    grpc::Status status;
    call->Finish(&response, &status, reinterpret_cast<void*>(1));
    void* tag = nullptr;
    bool ok = false;
    ASSERT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method;
    EXPECT_THAT(status.error_message(), HasSubstr(method));
    EXPECT_THAT(status.error_message(), HasSubstr("could not be parsed"));
  }
  auto stub = daemon->NewStub();
  EXPECT_TRUE(Plan(*stub, Mlp()).ok()) << "it still serves";

  // A job id of 1 MiB: refused without being quoted back (an error message that big passes
  // the client's limit on metadata, and its channel failed the next calls too).
  for (int i = 0; i < 3; ++i) {
    proto::GetJobRequest request;
    request.set_job_id(std::string(1 << 20, 'x'));
    proto::JobInfo job;
    grpc::Status s = stub->GetJob(ContextWithin(absl::Seconds(30)).get(), request, &job);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("a job id is at most 128 bytes"));
    EXPECT_TRUE(Plan(*stub, Mlp()).ok()) << "the same channel still serves";
  }
  // An unknown state in ListJobs' filter is refused, not answered with an empty page.
  proto::ListJobsRequest list;
  list.add_states(static_cast<proto::JobState>(99));
  proto::ListJobsResponse jobs;
  EXPECT_EQ(stub->ListJobs(ContextWithin(absl::Seconds(30)).get(), list, &jobs).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

// Watch streams beyond --max-watch-streams are refused at once; every other call is still
// served (without the limit, 100 open streams would take all of --max-threads 64 and every
// later call would be RESOURCE_EXHAUSTED). A job with no finished step has no timeline yet:
// FAILED_PRECONDITION, not NOT_FOUND.
TEST(RequestLimitsE2ETest, WatchStreamsBeyondTheLimitAreRefusedAndOtherCallsServed) {
  std::unique_ptr<DaemonProcess> daemon =
      StartDaemon("watchers", {"--max-threads", "64", "--max-watch-streams", "16",
                               "--max-concurrent-plans", "2", "--max-queued-plans", "8"});
  ASSERT_NE(daemon, nullptr);
  auto stub = daemon->NewStub();
  std::string running, queued;
  ASSERT_TRUE(Submit(*stub, MlpJob("long", 100000000), &running).ok());
  ASSERT_TRUE(Submit(*stub, MlpJob("behind it", 1), &queued).ok());
  {
    proto::GetTimelineRequest request;
    request.set_job_id(queued);
    proto::GetTimelineResponse response;
    grpc::Status s = stub->GetTimeline(ContextWithin(absl::Seconds(30)).get(), request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("no timeline yet"));
  }

  constexpr int kWatchers = 100;
  std::atomic<int> streaming{0}, refused{0}, other{0};
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts(kWatchers);
  std::vector<std::thread> watchers;
  for (int i = 0; i < kWatchers; ++i) {
    contexts[i] = ContextWithin(absl::Seconds(120));
    watchers.emplace_back([&, i] {
      proto::WatchJobRequest request;
      request.set_job_id(running);
      auto reader = stub->WatchJob(contexts[i].get(), request);
      proto::JobProgress progress;
      if (reader->Read(&progress)) {
        ++streaming;
        while (reader->Read(&progress)) {
        }
      }
      grpc::Status s = reader->Finish();
      if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
          s.error_message().find("--max-watch-streams 16") != std::string::npos) {
        ++refused;
      } else if (s.error_code() != grpc::StatusCode::CANCELLED) {
        ++other;
        ADD_FAILURE() << "watcher " << i << ": " << s.error_code() << " " << s.error_message();
      }
    });
  }
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (streaming + refused < kWatchers && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(streaming.load(), 16);
  EXPECT_EQ(refused.load(), kWatchers - 16);
  // Every other call is served while the 16 streams are open.
  EXPECT_TRUE(Plan(*stub, Mlp()).ok());
  proto::ListJobsRequest list;
  proto::ListJobsResponse jobs;
  EXPECT_TRUE(stub->ListJobs(ContextWithin(absl::Seconds(30)).get(), list, &jobs).ok());
  for (auto& context : contexts) context->TryCancel();
  for (std::thread& t : watchers) t.join();
  EXPECT_EQ(other.load(), 0);
  proto::CancelJobRequest cancel;
  cancel.set_job_id(running);
  proto::CancelJobResponse cancelled;
  EXPECT_TRUE(stub->CancelJob(ContextWithin(absl::Seconds(30)).get(), cancel, &cancelled).ok());
}

}  // namespace
}  // namespace headroom
