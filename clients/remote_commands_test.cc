// The remote commands against a fake headroomd: a real gRPC server on a free loopback port
// whose service records every request and answers with canned responses, streams and errors.
#include "clients/remote_commands.h"

#include <algorithm>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/headroom.grpc.pb.h"

namespace headroom::clients {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1024 * 1024;

// Records each request and answers with what the test put in its public fields. Every rpc
// answers `status` instead when it is not OK. Handlers run on the server's threads and hold
// `mu`; a test reads the records after its command returned, which the call orders after the
// handler.
class FakeHeadroom : public proto::Headroom::Service {
 public:
  std::mutex mu;
  grpc::Status status = grpc::Status::OK;
  // Canned answers.
  proto::PlanResponse plan;
  proto::ProfileResponse profile;
  proto::SubmitJobResponse submitted;
  std::vector<proto::JobProgress> progress;
  // ListJobs answers page i for the token "page-i" ("" is page 0).
  std::vector<proto::ListJobsResponse> pages;
  proto::CancelJobResponse cancelled;
  proto::GetTimelineResponse timeline;
  proto::ListProfilesResponse profiles;
  // What was asked.
  std::vector<proto::PlanRequest> plan_requests;
  std::vector<proto::ProfileRequest> profile_requests;
  std::vector<proto::SubmitJobRequest> submit_requests;
  std::vector<proto::WatchJobRequest> watch_requests;
  std::vector<proto::ListJobsRequest> list_requests;
  std::vector<proto::CancelJobRequest> cancel_requests;
  std::vector<proto::GetTimelineRequest> timeline_requests;
  std::vector<proto::ListProfilesRequest> profiles_requests;
  // Every UploadJob stream's messages, one vector per call.
  std::vector<std::vector<proto::SubmitJobChunk>> uploads;

  int calls() {
    std::lock_guard<std::mutex> lock(mu);
    return plan_requests.size() + profile_requests.size() + submit_requests.size() +
           watch_requests.size() + list_requests.size() + cancel_requests.size() +
           timeline_requests.size() + profiles_requests.size() + uploads.size();
  }

  grpc::Status Plan(grpc::ServerContext*, const proto::PlanRequest* request,
                    proto::PlanResponse* response) override {
    return Answer(*request, plan_requests, plan, response);
  }
  grpc::Status Profile(grpc::ServerContext*, const proto::ProfileRequest* request,
                       proto::ProfileResponse* response) override {
    return Answer(*request, profile_requests, profile, response);
  }
  grpc::Status SubmitJob(grpc::ServerContext*, const proto::SubmitJobRequest* request,
                         proto::SubmitJobResponse* response) override {
    return Answer(*request, submit_requests, submitted, response);
  }
  grpc::Status CancelJob(grpc::ServerContext*, const proto::CancelJobRequest* request,
                         proto::CancelJobResponse* response) override {
    return Answer(*request, cancel_requests, cancelled, response);
  }
  grpc::Status GetTimeline(grpc::ServerContext*, const proto::GetTimelineRequest* request,
                           proto::GetTimelineResponse* response) override {
    return Answer(*request, timeline_requests, timeline, response);
  }
  grpc::Status ListProfiles(grpc::ServerContext*, const proto::ListProfilesRequest* request,
                            proto::ListProfilesResponse* response) override {
    return Answer(*request, profiles_requests, profiles, response);
  }

  grpc::Status ListJobs(grpc::ServerContext*, const proto::ListJobsRequest* request,
                        proto::ListJobsResponse* response) override {
    std::lock_guard<std::mutex> lock(mu);
    list_requests.push_back(*request);
    if (!status.ok()) return status;
    size_t page = 0;
    if (!request->page_token().empty() &&
        !absl::SimpleAtoi(request->page_token().substr(5), &page)) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad page token");
    }
    if (page < pages.size()) *response = pages[page];
    return grpc::Status::OK;
  }

  grpc::Status UploadJob(grpc::ServerContext*, grpc::ServerReader<proto::SubmitJobChunk>* reader,
                         proto::SubmitJobResponse* response) override {
    std::lock_guard<std::mutex> lock(mu);
    uploads.emplace_back();
    for (proto::SubmitJobChunk m; reader->Read(&m);) uploads.back().push_back(m);
    if (!status.ok()) return status;
    *response = submitted;
    return grpc::Status::OK;
  }

  grpc::Status WatchJob(grpc::ServerContext*, const proto::WatchJobRequest* request,
                        grpc::ServerWriter<proto::JobProgress>* writer) override {
    std::lock_guard<std::mutex> lock(mu);
    watch_requests.push_back(*request);
    if (!status.ok()) return status;
    for (const proto::JobProgress& p : progress) writer->Write(p);
    return grpc::Status::OK;
  }

 private:
  template <typename Request, typename Response>
  grpc::Status Answer(const Request& request, std::vector<Request>& requests,
                      const Response& canned, Response* response) {
    std::lock_guard<std::mutex> lock(mu);
    requests.push_back(request);
    if (!status.ok()) return status;
    *response = canned;
    return grpc::Status::OK;
  }
};

struct Result {
  int code;
  std::string out;
  std::string err;
};

// A command's name: "plan", "watch", ...
using Command = const char*;

class RemoteCommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&fake_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  void TearDown() override { server_->Shutdown(); }

  // Runs `command` with `args` and --server pointing at the fake.
  Result Call(Command command, std::vector<std::string> args, bool terminal = false) {
    args.push_back("--server");
    args.push_back(address_);
    return CallAsIs(command, args, terminal);
  }
  Result CallAsIs(Command command, const std::vector<std::string>& args, bool terminal = false) {
    std::ostringstream out, err;
    std::vector<std::string> words = {command};
    words.insert(words.end(), args.begin(), args.end());
    const int code = RunHeadroom(words, CommandIo{out, err, terminal});
    return {code, out.str(), err.str()};
  }

  FakeHeadroom fake_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

// A plan of two sections: the first recomputed, caching one tensor on the host.
proto::PlanResponse TwoSectionPlan() {
  proto::PlanResponse plan;
  proto::PlanSummary& s = *plan.mutable_summary();
  s.set_budget_bytes(400 * kMiB);
  s.set_predicted_peak_bytes(380 * kMiB);
  s.set_predicted_step_seconds(0.25);
  s.set_overhead_ratio(1.18);
  s.set_recompute_flops(3'000'000'000);
  s.set_offloaded_bytes(24 * kMiB);
  proto::RoleBytes* role = s.add_bytes_by_role();
  role->set_role(proto::ROLE_PARAMETER);
  role->set_bytes(44 * kMiB);
  proto::Section* first = plan.add_sections();
  first->set_index(0);
  first->set_first_node("conv1");
  first->set_last_node("layer2.1.relu");
  first->set_recompute_flops(3'000'000'000);
  proto::BoundaryTensor* b = first->add_boundary();
  b->set_tensor("layer2.1.out");
  b->set_bytes(24 * kMiB);
  b->set_placement(proto::PLACEMENT_HOST);
  proto::Section* second = plan.add_sections();
  second->set_index(1);
  second->set_first_node("layer3.0.conv1");
  second->set_last_node("fc");
  return plan;
}

proto::JobProgress Progress(proto::JobState state, uint64_t step, uint64_t total) {
  proto::JobProgress p;
  p.set_job_id("job-3");
  p.set_state(state);
  p.set_step(step);
  p.set_total_steps(total);
  p.set_loss(2.5 - 0.1 * step);
  p.set_step_seconds(0.125);
  p.set_measured_peak_bytes(300 * kMiB);
  proto::RoleBytes* r = p.add_memory_by_role();
  r->set_role(proto::ROLE_ACTIVATION);
  r->set_bytes(200 * kMiB);
  return p;
}

// Five RUNNING updates, then `final`.
std::vector<proto::JobProgress> FiveStepsThen(proto::JobState final, const std::string& message) {
  std::vector<proto::JobProgress> stream;
  for (uint64_t step = 1; step <= 5; ++step) {
    stream.push_back(Progress(proto::JOB_STATE_RUNNING, step, 5));
  }
  stream.push_back(Progress(final, 5, 5));
  stream.back().set_message(message);
  return stream;
}

TEST_F(RemoteCommandsTest, PlanSendsTheZooModelAndBudgetAndPrintsTheSections) {
  fake_.plan = TwoSectionPlan();
  Result r = Call("plan", {"--model", "resnet18", "--batch", "8", "--budget", "400MiB",
                                      "--device", "h100", "--frontier"});
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(fake_.plan_requests.size(), 1u);
  const proto::PlanRequest& request = fake_.plan_requests[0];
  EXPECT_EQ(request.model().zoo().name(), "resnet18");
  EXPECT_EQ(request.model().zoo().batch(), 8u);
  EXPECT_EQ(request.options().budget_bytes(), 400 * kMiB);
  EXPECT_EQ(request.options().device().preset(), "h100");
  EXPECT_TRUE(request.options().frontier());
  EXPECT_FALSE(request.options().disable_offload());
  for (const char* text : {"380.0 MiB of the 400.0 MiB budget", "1.18x", "3.00 GFLOP",
                           "#0   conv1 .. layer2.1.relu  recomputed", "layer2.1.out", "HOST",
                           "#1   layer3.0.conv1 .. fc  kept", "parameter"}) {
    EXPECT_THAT(r.out, HasSubstr(text));
  }
}

TEST_F(RemoteCommandsTest, PlanSendsAGraphFileAndPrintsJson) {
  const std::string path = ::testing::TempDir() + "/tiny.pbtxt";
  std::ofstream(path) << "name: \"tiny\" loss: \"loss\"\n";
  fake_.plan = TwoSectionPlan();
  Result r = Call("plan", {"--graph", path, "--no-offload", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(fake_.plan_requests.size(), 1u);
  EXPECT_EQ(fake_.plan_requests[0].model().graph().name(), "tiny");
  EXPECT_TRUE(fake_.plan_requests[0].options().disable_offload());
  EXPECT_THAT(r.out, HasSubstr("\"predicted_peak_bytes\":\"398458880\""));
  EXPECT_THAT(r.out, HasSubstr("\"first_node\":\"layer3.0.conv1\""));
}

TEST_F(RemoteCommandsTest, AFailedCallExitsOneWithItsCodeAndMessage) {
  fake_.status = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                              "budget 2.0 MiB is below the smallest peak, 107.3 MiB");
  Result r = Call("plan", {"--model", "resnet18", "--budget", "2MiB"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("headroom plan: FAILED_PRECONDITION: budget 2.0 MiB is below "
                               "the smallest peak, 107.3 MiB"));
  EXPECT_EQ(r.out, "");
}

TEST_F(RemoteCommandsTest, SubmitSendsTheJobSpecAndPrintsTheJob) {
  fake_.submitted.set_job_id("job-7");
  fake_.submitted.set_state(proto::JOB_STATE_QUEUED);
  *fake_.submitted.mutable_plan() = TwoSectionPlan();
  Result r = Call("submit",
               {"--model", "transformer", "--batch", "4", "--layers", "2", "--budget", "400MiB",
                "--steps", "50", "--name", "nightly", "--optimizer", "adam", "--lr", "0.002",
                "--checkpoint-every", "10", "--backend", "cpu"});
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(fake_.submit_requests.size(), 1u);
  const proto::JobSpec& spec = fake_.submit_requests[0].spec();
  EXPECT_EQ(spec.name(), "nightly");
  EXPECT_EQ(spec.model().zoo().name(), "transformer");
  EXPECT_EQ(spec.model().zoo().batch(), 4u);
  EXPECT_EQ(spec.model().zoo().options().at("layers"), 2);
  EXPECT_EQ(spec.plan().budget_bytes(), 400 * kMiB);
  EXPECT_EQ(spec.plan().optimizer().kind(), proto::Optimizer::KIND_ADAM);
  EXPECT_DOUBLE_EQ(spec.plan().optimizer().learning_rate(), 0.002);
  EXPECT_EQ(spec.train().steps(), 50u);
  EXPECT_EQ(spec.train().checkpoint_interval_steps(), 10u);
  EXPECT_EQ(spec.train().backend(), "cpu");
  for (const char* text :
       {"job job-7 QUEUED", "1 of 2 section(s) recomputed, 1 tensor(s) offloaded", "layer2.1.out",
        "HOST", "headroom watch job-7"}) {
    EXPECT_THAT(r.out, HasSubstr(text));
  }
  EXPECT_TRUE(fake_.watch_requests.empty());
}

TEST_F(RemoteCommandsTest, SubmitWithWatchFollowsTheNewJob) {
  fake_.submitted.set_job_id("job-3");
  fake_.submitted.set_state(proto::JOB_STATE_RUNNING);
  fake_.progress = FiveStepsThen(proto::JOB_STATE_SUCCEEDED, "done");
  Result r = Call("submit", {"--model", "mlp", "--watch"});
  EXPECT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(fake_.watch_requests.size(), 1u);
  EXPECT_EQ(fake_.watch_requests[0].job_id(), "job-3");
  EXPECT_EQ(fake_.submit_requests[0].spec().train().steps(), 100u);
  EXPECT_THAT(r.out, HasSubstr("5/5"));
  EXPECT_THAT(r.out, HasSubstr("job job-3 SUCCEEDED: done"));
}

TEST_F(RemoteCommandsTest, SubmitWithRanksCarriesTheBucketSizeAndSyncBatchNorm) {
  fake_.submitted.set_job_id("job-4");
  fake_.submitted.set_state(proto::JOB_STATE_QUEUED);
  Result r = Call("submit", {"--model", "small_cnn", "--ranks", "2", "--bucket-kib", "4096",
                             "--sync-batchnorm"});
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(fake_.submit_requests.size(), 1u);
  const proto::JobSpec& spec = fake_.submit_requests[0].spec();
  EXPECT_EQ(spec.ranks(), 2u);
  EXPECT_EQ(spec.plan().data_parallel().bucket_bytes(), 4096u << 10);
  EXPECT_TRUE(spec.plan().data_parallel().sync_batch_norm());
  // The daemon plans each rank with spec.ranks.
  EXPECT_EQ(spec.plan().data_parallel().ranks(), 0u);
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--model", "small_cnn", "--bucket-kib", "64"},
                                             {"--model", "small_cnn", "--sync-batchnorm"}}) {
    Result one = Call("submit", args);
    EXPECT_NE(one.code, 0);
    EXPECT_THAT(one.err, HasSubstr(" needs --ranks above 1")) << absl::StrJoin(args, " ");
  }
  EXPECT_EQ(fake_.submit_requests.size(), 1u);
}

// headroomd imports an uploaded model itself, so --strict-training cannot be kept there.
TEST_F(RemoteCommandsTest, SubmitOnnxRefusesStrictTraining) {
  const std::string path = ::testing::TempDir() + "/strict.onnx";
  std::ofstream(path, std::ios::binary) << "not read";
  Result r = Call("submit", {"--onnx", path, "--batch", "2", "--strict-training"});
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.err, HasSubstr("--strict-training: headroomd imports an uploaded model"));
  EXPECT_TRUE(fake_.uploads.empty());
}

// --onnx: the file itself travels through UploadJob (the spec and its size, then chunks of
// at most server::kUploadChunkBytes), so the job trains from the model's own weights.
TEST_F(RemoteCommandsTest, SubmitOnnxStreamsTheFileInChunksAfterTheSpec) {
  const std::string path = ::testing::TempDir() + "/model.onnx";
  std::string model(1300 * 1024, '\0');
  for (size_t i = 0; i < model.size(); ++i) model[i] = static_cast<char>(i * 7919 % 251);
  std::ofstream(path, std::ios::binary) << model;
  fake_.submitted.set_job_id("job-9");
  fake_.submitted.set_state(proto::JOB_STATE_QUEUED);
  Result r = Call("submit", {"--onnx", path, "--batch", "2", "--classes", "10", "--steps", "5",
                             "--name", "uploaded"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("job job-9 QUEUED"));
  EXPECT_TRUE(fake_.submit_requests.empty()) << "an ONNX model goes through UploadJob";
  ASSERT_EQ(fake_.uploads.size(), 1u);
  const std::vector<proto::SubmitJobChunk>& messages = fake_.uploads[0];
  ASSERT_EQ(messages.size(), 4u) << "the spec, then 512 + 512 + 276 KiB";
  const proto::JobSpec& spec = messages[0].spec();
  EXPECT_EQ(messages[0].onnx_model_bytes(), model.size());
  EXPECT_EQ(spec.name(), "uploaded");
  EXPECT_EQ(spec.train().steps(), 5u);
  EXPECT_FALSE(spec.model().has_graph()) << "the daemon imports the model itself";
  EXPECT_TRUE(spec.model().onnx_model().empty());
  EXPECT_EQ(spec.model().onnx().batch(), 2u);
  EXPECT_EQ(spec.model().onnx().classes(), 10u);
  EXPECT_EQ(spec.model().onnx().loss(), "softmax_cross_entropy");
  std::string joined;
  for (size_t i = 1; i < messages.size(); ++i) {
    EXPECT_EQ(messages[i].part_case(), proto::SubmitJobChunk::kOnnxModelChunk);
    EXPECT_LE(messages[i].onnx_model_chunk().size(), 512u * 1024);
    joined += messages[i].onnx_model_chunk();
  }
  EXPECT_TRUE(joined == model) << "the chunks are not the file's bytes in order";
}

TEST_F(RemoteCommandsTest, SubmitOnnxOfAMissingFileOrARefusedUploadExitsOne) {
  Result missing = Call("submit", {"--onnx", ::testing::TempDir() + "/absent.onnx"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_THAT(missing.err, HasSubstr("absent.onnx: not a readable file"));
  EXPECT_EQ(fake_.calls(), 0);

  const std::string path = ::testing::TempDir() + "/small.onnx";
  std::ofstream(path, std::ios::binary) << "not really onnx";
  fake_.status = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                              "UploadJob: the model is 15 bytes (15 B), over headroomd's "
                              "--max-upload-bytes of 8 bytes (8 B)");
  Result refused = Call("submit", {"--onnx", path});
  EXPECT_EQ(refused.code, 1);
  EXPECT_THAT(refused.err, HasSubstr("RESOURCE_EXHAUSTED: UploadJob: the model is 15 bytes"));
}

struct FinalState {
  proto::JobState state;
  int exit_code;
};

class WatchExitTest : public RemoteCommandsTest,
                      public ::testing::WithParamInterface<FinalState> {};

TEST_P(WatchExitTest, PrintsEveryStepAndExitsByTheFinalState) {
  fake_.progress = FiveStepsThen(GetParam().state, "the last word");
  Result r = Call("watch", {"job-3"});
  EXPECT_EQ(r.code, GetParam().exit_code) << r.out << r.err;
  ASSERT_EQ(fake_.watch_requests.size(), 1u);
  EXPECT_EQ(fake_.watch_requests[0].job_id(), "job-3");
  for (int step = 1; step <= 5; ++step)
    EXPECT_THAT(r.out, HasSubstr(absl::StrCat(" ", step, "/5 ")));
  EXPECT_THAT(r.out, HasSubstr("loss 2.00000"));
  EXPECT_THAT(r.out, HasSubstr("activation 200.0 MiB"));
  EXPECT_THAT(r.out, HasSubstr("peak 300.0 MiB"));
  const std::vector<std::string> lines = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  EXPECT_EQ(lines.size(), 7u) << r.out;  // six updates and the final state
  EXPECT_THAT(lines.back(), HasSubstr("the last word"));
}

INSTANTIATE_TEST_SUITE_P(FinalStates, WatchExitTest,
                         ::testing::Values(FinalState{proto::JOB_STATE_SUCCEEDED, 0},
                                           FinalState{proto::JOB_STATE_FAILED, 1},
                                           FinalState{proto::JOB_STATE_CANCELLED, 3}));

TEST_F(RemoteCommandsTest, WatchJsonPrintsOneObjectPerUpdate) {
  fake_.progress = FiveStepsThen(proto::JOB_STATE_SUCCEEDED, "");
  Result r = Call("watch", {"job-3", "--json"});
  EXPECT_EQ(r.code, 0) << r.err;
  const std::vector<std::string> lines = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 6u) << r.out;
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_THAT(lines[i], HasSubstr("{\"job_id\":\"job-3\""));
    EXPECT_THAT(lines[i], HasSubstr(absl::StrCat("\"step\":\"", std::min<size_t>(i + 1, 5), "\"")));
  }
  EXPECT_THAT(lines.back(), HasSubstr("\"state\":\"JOB_STATE_SUCCEEDED\""));
}

TEST_F(RemoteCommandsTest, WatchOnATerminalRedrawsOneLine) {
  fake_.progress = FiveStepsThen(proto::JOB_STATE_SUCCEEDED, "");
  Result r = Call("watch", {"job-3"}, /*terminal=*/true);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\r'), 6);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;
}

TEST_F(RemoteCommandsTest, WatchOfAStreamThatEndsEarlyExitsOne) {
  fake_.progress = {Progress(proto::JOB_STATE_RUNNING, 1, 5)};
  Result r = Call("watch", {"job-3"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("ended while it was RUNNING"));
  fake_.status = grpc::Status(grpc::StatusCode::NOT_FOUND, "no job 'job-9'");
  Result missing = Call("watch", {"job-9"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_THAT(missing.err, HasSubstr("headroom watch: NOT_FOUND: no job 'job-9'"));
}

proto::JobInfo Job(const std::string& id, proto::JobState state, const std::string& note) {
  proto::JobInfo job;
  job.set_job_id(id);
  job.set_name("n-" + id);
  job.set_state(state);
  job.set_step(3);
  job.set_total_steps(10);
  job.set_planned_peak_bytes(512 * kMiB);
  job.set_measured_peak_bytes(500 * kMiB);
  job.set_loss(1.25);
  job.set_message(note);
  return job;
}

TEST_F(RemoteCommandsTest, JobsFollowsPageTokensThroughEveryPage) {
  fake_.pages.resize(2);
  *fake_.pages[0].add_jobs() = Job("job-2", proto::JOB_STATE_RUNNING, "");
  fake_.pages[0].set_next_page_token("page-1");
  *fake_.pages[1].add_jobs() = Job("job-1", proto::JOB_STATE_QUEUED, "needs 1.2 GiB, 800 MiB free");
  Result r = Call("jobs", {"--state", "queued,running"});
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(fake_.list_requests.size(), 2u);
  EXPECT_EQ(fake_.list_requests[0].page_token(), "");
  EXPECT_EQ(fake_.list_requests[1].page_token(), "page-1");
  EXPECT_THAT(fake_.list_requests[1].states(),
              ElementsAre(proto::JOB_STATE_QUEUED, proto::JOB_STATE_RUNNING));
  for (const char* text : {"JOB", "MEASURED PEAK", "job-2", "RUNNING", "3/10", "512.0 MiB",
                           "1.2500", "job-1", "QUEUED", "needs 1.2 GiB, 800 MiB free"}) {
    EXPECT_THAT(r.out, HasSubstr(text));
  }
  Result json = Call("jobs", {"--json"});
  ASSERT_EQ(json.code, 0) << json.err;
  EXPECT_THAT(json.out, HasSubstr("\"job_id\":\"job-2\""));
  EXPECT_THAT(json.out, HasSubstr("\"job_id\":\"job-1\""));
}

TEST_F(RemoteCommandsTest, CancelPrintsTheStateAndMapsNotFound) {
  fake_.cancelled.set_state(proto::JOB_STATE_CANCELLED);
  Result r = Call("cancel", {"job-2"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(fake_.cancel_requests[0].job_id(), "job-2");
  EXPECT_EQ(r.out, "job job-2 CANCELLED\n");
  fake_.status = grpc::Status(grpc::StatusCode::NOT_FOUND, "no job 'job-9'");
  Result missing = Call("cancel", {"job-9"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_THAT(missing.err, HasSubstr("headroom cancel: NOT_FOUND: no job 'job-9'"));
}

TEST_F(RemoteCommandsTest, TimelinePrintsThePeakItsTensorsAndAChart) {
  proto::MemoryTimeline& t = *fake_.timeline.mutable_timeline();
  for (int i = 0; i < 10; ++i) {
    proto::TimelineSample* s = t.add_samples();
    s->set_time_seconds(0.1 * i);
    s->set_device_bytes((i == 6 ? 300 : 100) * kMiB);
  }
  t.set_peak_bytes(300 * kMiB);
  t.set_peak_step(2);
  t.set_peak_node("layer4.1.conv2.backward");
  t.set_peak_op("Conv2DGrad");
  (*t.mutable_peak_bytes_by_role())["activations"] = 200 * kMiB;
  proto::LiveTensor* live = t.add_peak_live();
  live->set_tensor("layer4.1.conv1.out");
  live->set_bytes(64 * kMiB);
  live->set_memory_role("activations");
  live->set_producer("layer4.1.conv1");
  Result r = Call("timeline", {"job-4", "--samples", "50"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(fake_.timeline_requests[0].job_id(), "job-4");
  EXPECT_EQ(fake_.timeline_requests[0].max_samples(), 50u);
  for (const char* text : {"300.0 MiB at step 2, node layer4.1.conv2.backward (Conv2DGrad)",
                           "activations", "layer4.1.conv1.out", "64.0 MiB",
                           "device bytes over time:", "#", "0.900 s"}) {
    EXPECT_THAT(r.out, HasSubstr(text));
  }
}

TEST_F(RemoteCommandsTest, ProfileSendsTheRequestAndWritesOut) {
  fake_.profile.set_graph_name("mlp");
  fake_.profile.set_backend("cpu");
  fake_.profile.set_measured_peak_bytes(12 * kMiB);
  fake_.profile.set_median_step_seconds(0.02);
  fake_.profile.set_predicted_step_seconds(0.01);
  fake_.profile.mutable_timeline()->set_peak_node("fc2.backward");
  const std::string path = ::testing::TempDir() + "/profile.json";
  Result r = Call("profile", {"--model", "mlp", "--steps", "4", "--budget", "1GiB",
                                         "--seed", "7", "--out", path});
  ASSERT_EQ(r.code, 0) << r.err;
  const proto::ProfileRequest& request = fake_.profile_requests[0];
  EXPECT_EQ(request.steps(), 4u);
  EXPECT_EQ(request.seed(), 7u);
  EXPECT_EQ(request.plan().budget_bytes(), 1024 * kMiB);
  EXPECT_FALSE(request.trace());
  EXPECT_THAT(r.out, HasSubstr("12.0 MiB"));
  EXPECT_THAT(r.out, HasSubstr("fc2.backward"));
  EXPECT_THAT(r.out, HasSubstr("2.00x"));
  std::stringstream file;
  file << std::ifstream(path).rdbuf();
  EXPECT_THAT(file.str(), HasSubstr("\"measured_peak_bytes\": \"12582912\""));
}

TEST_F(RemoteCommandsTest, ProfilesAsksForSummariesAndPrintsATable) {
  proto::StoredProfile* p = fake_.profiles.add_profiles();
  p->set_profile_id("prof-5");
  p->mutable_response()->set_graph_name("resnet18");
  p->mutable_response()->set_backend("cuda");
  p->mutable_response()->set_measured_peak_bytes(900 * kMiB);
  Result r = Call("profiles", {});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fake_.profiles_requests[0].summaries_only());
  for (const char* text : {"PROFILE", "prof-5", "resnet18", "cuda", "900.0 MiB"}) {
    EXPECT_THAT(r.out, HasSubstr(text));
  }
}

TEST_F(RemoteCommandsTest, NoDaemonIsUnavailableWithHowToStartIt) {
  // A port the system handed out and nothing listens on any more.
  int port = 0;
  proto::Headroom::Service unimplemented;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&unimplemented);
  std::unique_ptr<grpc::Server> gone = builder.BuildAndStart();
  ASSERT_GT(port, 0);
  gone->Shutdown();
  gone.reset();
  const std::string address = absl::StrCat("127.0.0.1:", port);
  Result r = CallAsIs("jobs", {"--server", address});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("headroom jobs: UNAVAILABLE: cannot reach headroomd at " + address));
  EXPECT_THAT(r.err, HasSubstr("headroomd --listen " + address));
}

TEST_F(RemoteCommandsTest, UsageErrorsExitTwoWithoutCalling) {
  const std::vector<std::pair<Command, std::vector<std::string>>> cases = {
      {"watch", {}},
      {"cancel", {"job-1", "job-2"}},
      {"jobs", {"--state", "sleeping"}},
      {"jobs", {"stray"}},
      {"submit", {"--budget", "1GiB"}},
      {"submit", {"--model", "mlp", "--backend", "tpu"}},
      {"submit", {"--model", "mlp", "--steps", "0"}},
      {"plan", {"--model", "mlp", "--budget", "lots"}},
      {"plan", {"--model", "mlp", "--device", "tpu"}},
      {"plan", {"--model", "mlp", "--frobnicate", "3"}},
      {"timeline", {"job-1", "--rows", "-1"}},
  };
  for (const auto& [command, args] : cases) {
    Result r = Call(command, args);
    EXPECT_EQ(r.code, 2) << absl::StrJoin(args, " ") << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(absl::StrCat("see 'headroom ", command, " --help'")))
        << absl::StrJoin(args, " ");
  }
  EXPECT_EQ(fake_.calls(), 0);
}

TEST_F(RemoteCommandsTest, AnUnreadableGraphFileExitsOne) {
  Result r = Call("plan", {"--graph", ::testing::TempDir() + "/no-such.pb"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("no-such.pb"));
  EXPECT_EQ(fake_.calls(), 0);
}

TEST_F(RemoteCommandsTest, HelpListsTheFlagsAndExitsZero) {
  Result r = CallAsIs("submit", {"--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("--checkpoint-every N"));
  EXPECT_THAT(r.out, HasSubstr("--server ADDR"));
  EXPECT_EQ(fake_.calls(), 0);
}

TEST_F(RemoteCommandsTest, WithoutServerTheDefaultAddressIsUsed) {
  std::vector<std::string> addresses;
  std::ostringstream out, err;
  CommandIo io{out, err};
  io.connect = [&](const std::string& address, const ChannelSecurity&) {
    addresses.push_back(address);
    return ConnectToHeadroomd(address_);  // The fake stands in for the default daemon.
  };
  EXPECT_EQ(RunHeadroom({"profiles"}, io), 0) << err.str();
  EXPECT_THAT(addresses, ElementsAre(kDefaultServer));
  EXPECT_EQ(fake_.calls(), 1);
}

// --tls-ca and --token-file (or HEADROOM_TOKEN) reach the stub factory read; a token is
// never sent without TLS, and the files' errors name them.
TEST(ChannelSecurityTest, FlagsAndEnvironmentBecomeTheChannelsSecurity) {
  const std::string dir = getenv("TEST_TMPDIR");
  std::ofstream(dir + "/ca.pem") << "PEM OF THE CA\n";
  std::ofstream(dir + "/tokens") << "# mine\n\n  tok-1 alice\n";
  std::vector<ChannelSecurity> seen;
  std::ostringstream out, err;
  CommandIo io{out, err};
  io.connect = [&](const std::string&, const ChannelSecurity& security) {
    seen.push_back(security);
    return std::unique_ptr<proto::Headroom::StubInterface>();  // Connect's error follows.
  };
  RunHeadroom({"jobs", "--server", "h:1"}, io);
  RunHeadroom({"jobs", "--server", "h:1", "--tls-ca", dir + "/ca.pem", "--token-file",
               dir + "/tokens"}, io);
  setenv("HEADROOM_TOKEN", "env-token", 1);
  RunHeadroom({"jobs", "--server", "h:1"}, io);  // No TLS: the environment's token stays.
  RunHeadroom({"jobs", "--server", "h:1", "--tls-ca", dir + "/ca.pem"}, io);
  unsetenv("HEADROOM_TOKEN");
  ASSERT_EQ(seen.size(), 4u) << err.str();
  EXPECT_FALSE(seen[0].tls);
  EXPECT_TRUE(seen[1].tls);
  EXPECT_EQ(seen[1].root_certs_pem, "PEM OF THE CA\n");
  EXPECT_EQ(seen[1].token, "tok-1");
  EXPECT_FALSE(seen[2].tls);
  EXPECT_EQ(seen[2].token, "");
  EXPECT_EQ(seen[3].token, "env-token");

  std::ostringstream err2;
  CommandIo io2{out, err2};
  io2.connect = io.connect;
  EXPECT_EQ(RunHeadroom({"jobs", "--token-file", dir + "/tokens"}, io2), 2);
  EXPECT_THAT(err2.str(), HasSubstr("--token-file needs --tls-ca"));
  EXPECT_EQ(RunHeadroom({"jobs", "--tls-ca", dir + "/nope.pem"}, io2), 1);
  EXPECT_THAT(err2.str(), HasSubstr("nope.pem"));
  EXPECT_EQ(seen.size(), 4u);
}

}  // namespace
}  // namespace headroom::clients
