// libFuzzer target: headroomd's request handling. The input's first byte picks an RPC of
// server/service.h, the rest is parsed as its request (an unparseable one is skipped; for
// UploadJob, a stream of chunks, each after its 2-byte length), and an
// in-process headroomd answers it over gRPC's in-process channel: a HeadroomService on a real
// JobManager (the CPU backend, a JobStore in a temporary directory, a small device) so that
// jobs are submitted, run, watched, cancelled and listed as on the daemon. Any request must be
// answered, OK or with an error; a crash, a sanitizer report, a leak or a hang is a bug.
//
// Every daemon starts with one job (job-000001) run to its end, so job calls find one;
// later submits are job-000002 and on. A daemon lasts kRequestsPerDaemon inputs, then shuts
// down (its worker stops after the running step) and a fresh one on an empty store replaces
// it, so work never accumulates. By default the service accepts jobs of up to 10^9 steps and
// profiles of up to 10^4, work it is meant to take; the fuzzer's daemon is started with both
// limits (--max-job-steps, --max-profile-steps) at kMaxSteps so every input stays fast.
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "executor/backend.h"
#include "executor/backend_scratch.h"
#include "executor/backends.h"
#include "google/protobuf/stubs/logging.h"
#include "grpcpp/grpcpp.h"
#include "profiler/metrics.h"
#include "proto/headroom.grpc.pb.h"
#include "runner/trainer_options.h"
#include "server/job_manager.h"
#include "server/job_store.h"
#include "server/request_limits.h"
#include "server/service.h"

namespace headroom {
namespace {

// Inputs one daemon answers before a fresh one replaces it.
constexpr int kRequestsPerDaemon = 64;
// Device memory of the daemon: small, so admitted jobs and profiles are small and quick.
constexpr uint64_t kDeviceMemoryBytes = uint64_t{64} << 20;
// Most training steps a job or a profile of the fuzzer runs.
constexpr uint64_t kMaxSteps = 2;
// Largest ONNX model an upload may carry (--max-upload-bytes).
constexpr uint64_t kMaxUploadBytes = uint64_t{1} << 20;
// Longest a plan may take (--max-plan-seconds): the service stops one past it.
constexpr double kMaxPlanSeconds = 2;
// Longest a call may wait (a watch of a queued job); a hang past it is reported by libFuzzer.
constexpr auto kCallDeadline = std::chrono::seconds(5);

// The RPCs, by the input's first byte (modulo their count).
enum class Rpc {
  kPlan,
  kProfile,
  kSubmitJob,
  kWatchJob,
  kCancelJob,
  kListJobs,
  kGetJob,
  kGetTimeline,
  kListProfiles,
  kUploadJob,
  kCount,
};

void Check(const absl::Status& status, const char* what) {
  if (!status.ok()) {
    fprintf(stderr, "service_request_fuzzer: %s: %s\n", what, status.ToString().c_str());
    abort();
  }
}

// What every daemon shares and no request changes: the backend plans know of, the metrics.
struct Shared {
  std::unique_ptr<executor::Backend> scratch_backend;
  std::unique_ptr<executor::BackendScratchModel> scratch;
  std::unique_ptr<profiler::Metrics> metrics;
};

Shared& TheShared() {
  static Shared* shared = [] {
    auto* s = new Shared;
    absl::StatusOr<std::unique_ptr<executor::Backend>> backend = executor::MakeBackend("cpu");
    Check(backend.status(), "cpu backend");
    s->scratch_backend = *std::move(backend);
    s->scratch = std::make_unique<executor::BackendScratchModel>(s->scratch_backend.get());
    absl::StatusOr<std::unique_ptr<profiler::Metrics>> metrics = profiler::Metrics::Create();
    Check(metrics.status(), "metrics");
    s->metrics = *std::move(metrics);
    return s;
  }();
  return *shared;
}

// Returns a tiny job: a 2-layer MLP, kMaxSteps steps.
proto::JobSpec TinyJob() {
  proto::JobSpec spec;
  proto::ZooModel* zoo = spec.mutable_model()->mutable_zoo();
  zoo->set_name("mlp");
  zoo->set_batch(4);
  (*zoo->mutable_options())["depth"] = 2;
  (*zoo->mutable_options())["width"] = 8;
  (*zoo->mutable_options())["input"] = 8;
  spec.mutable_train()->set_steps(kMaxSteps);
  return spec;
}

// One headroomd's service in this process, as headroomd_main.cc assembles it, on a fresh
// store. Destroying it stops the manager's workers, then removes the store.
class Daemon {
 public:
  Daemon() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "service_request_fuzzer_XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) Check(absl::InternalError("mkdtemp"), "state dir");
    dir_ = pattern;
    absl::StatusOr<std::unique_ptr<server::JobStore>> store = server::JobStore::Open(dir_);
    Check(store.status(), "job store");
    store_ = *std::move(store);

    Shared& shared = TheShared();
    server::JobManagerOptions options;
    options.backend = "cpu";
    options.device_memory_bytes = kDeviceMemoryBytes;
    options.fixed_cost_bytes = 0;  // No measuring run.
    options.make_backend = executor::MakeBackend;
    options.plan_backend.scratch = shared.scratch.get();
    options.plan_backend.host_is_device_memory = shared.scratch_backend->host_is_device_memory();
    options.plan_backend.device_preset = runner::DefaultDevicePreset("cpu");
    absl::StatusOr<std::unique_ptr<server::JobManager>> jobs =
        server::JobManager::Create(store_.get(), shared.metrics.get(), options);
    Check(jobs.status(), "job manager");
    jobs_ = *std::move(jobs);
    server::ServiceOptions service_options;
    service_options.limits.max_job_steps = kMaxSteps;
    service_options.limits.max_profile_steps = kMaxSteps;
    service_options.max_upload_bytes = kMaxUploadBytes;
    service_options.limits.max_plan_seconds = kMaxPlanSeconds;
    service_ = std::make_unique<server::HeadroomService>(jobs_.get(), jobs_->plan_backend(),
                                                         /*profiles=*/nullptr, service_options);

    // job-000001, run to its end, for the job calls to find with a timeline.
    absl::StatusOr<proto::SubmitJobResponse> first = jobs_->Submit(TinyJob());
    Check(first.status(), "first job");
    Check(
        jobs_->Watch(
            first->job_id(), [](const proto::JobProgress&) { return true; }, [] { return false; }),
        "first job's run");
  }

  ~Daemon() {
    service_.reset();
    jobs_->Shutdown();
    jobs_.reset();
    store_.reset();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  server::HeadroomService& service() { return *service_; }

 private:
  std::string dir_;
  std::unique_ptr<server::JobStore> store_;
  std::unique_ptr<server::JobManager> jobs_;
  std::unique_ptr<server::HeadroomService> service_;
};

// The service the in-process gRPC server carries: every call goes to the current daemon's.
// One server lives as long as the process (a server started and stopped per daemon leaves
// gRPC's threads starting and ending under the leak checker); calls are made one at a time
// from the fuzzing thread, and the daemon is replaced only between them.
class Forwarder final : public proto::Headroom::Service {
 public:
  void set_to(server::HeadroomService* to) { to_ = to; }

  grpc::Status Plan(grpc::ServerContext* c, const proto::PlanRequest* q,
                    proto::PlanResponse* r) override {
    return to_->Plan(c, q, r);
  }
  grpc::Status Profile(grpc::ServerContext* c, const proto::ProfileRequest* q,
                       proto::ProfileResponse* r) override {
    return to_->Profile(c, q, r);
  }
  grpc::Status SubmitJob(grpc::ServerContext* c, const proto::SubmitJobRequest* q,
                         proto::SubmitJobResponse* r) override {
    return to_->SubmitJob(c, q, r);
  }
  grpc::Status UploadJob(grpc::ServerContext* c, grpc::ServerReader<proto::SubmitJobChunk>* q,
                         proto::SubmitJobResponse* r) override {
    return to_->UploadJob(c, q, r);
  }
  grpc::Status WatchJob(grpc::ServerContext* c, const proto::WatchJobRequest* q,
                        grpc::ServerWriter<proto::JobProgress>* w) override {
    return to_->WatchJob(c, q, w);
  }
  grpc::Status CancelJob(grpc::ServerContext* c, const proto::CancelJobRequest* q,
                         proto::CancelJobResponse* r) override {
    return to_->CancelJob(c, q, r);
  }
  grpc::Status ListJobs(grpc::ServerContext* c, const proto::ListJobsRequest* q,
                        proto::ListJobsResponse* r) override {
    return to_->ListJobs(c, q, r);
  }
  grpc::Status GetJob(grpc::ServerContext* c, const proto::GetJobRequest* q,
                      proto::JobInfo* r) override {
    return to_->GetJob(c, q, r);
  }
  grpc::Status GetTimeline(grpc::ServerContext* c, const proto::GetTimelineRequest* q,
                           proto::GetTimelineResponse* r) override {
    return to_->GetTimeline(c, q, r);
  }
  grpc::Status ListProfiles(grpc::ServerContext* c, const proto::ListProfilesRequest* q,
                            proto::ListProfilesResponse* r) override {
    return to_->ListProfiles(c, q, r);
  }

 private:
  server::HeadroomService* to_ = nullptr;
};

// The in-process server and a stub reaching it. Never destroyed.
struct Channel {
  Forwarder forwarder;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<proto::Headroom::Stub> stub;
};

Channel& TheChannel() {
  static Channel* channel = [] {
    auto* c = new Channel;
    grpc::ServerBuilder builder;
    builder.RegisterService(&c->forwarder);
    builder.SetMaxReceiveMessageSize(-1);
    builder.SetMaxSendMessageSize(-1);
    // Two polling threads that never time out: gRPC starts a thread when its last poller
    // takes a call and ends one idle past the timeout, and a thread starting as an input
    // ends looks to the leak checker like a leak. Calls come one at a time, so after the
    // first call (LLVMFuzzerInitialize) no thread starts or ends.
    builder.SetSyncServerOption(grpc::ServerBuilder::MIN_POLLERS, 1);
    builder.SetSyncServerOption(grpc::ServerBuilder::MAX_POLLERS, 2);
    builder.SetSyncServerOption(grpc::ServerBuilder::CQ_TIMEOUT_MSEC, 24 * 3600 * 1000);
    c->server = builder.BuildAndStart();
    if (c->server == nullptr) Check(absl::InternalError("no server"), "grpc server");
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    c->stub = proto::Headroom::NewStub(c->server->InProcessChannel(args));
    return c;
  }();
  return *channel;
}

// Returns the status of calling `method` with the request parsed from `bytes`, or OK when
// they do not parse.
template <typename Request, typename Response, typename Method>
grpc::Status Call(proto::Headroom::Stub& stub, Method method, const uint8_t* bytes, size_t size) {
  Request request;
  if (!request.ParseFromArray(bytes, static_cast<int>(size))) return grpc::Status::OK;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
  Response response;
  return (stub.*method)(&context, request, &response);
}

// Reads every update of a watch, as a client does.
grpc::Status Watch(proto::Headroom::Stub& stub, const uint8_t* bytes, size_t size) {
  proto::WatchJobRequest request;
  if (!request.ParseFromArray(bytes, static_cast<int>(size))) return grpc::Status::OK;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
  std::unique_ptr<grpc::ClientReader<proto::JobProgress>> reader = stub.WatchJob(&context, request);
  proto::JobProgress progress;
  while (reader->Read(&progress)) {
  }
  return reader->Finish();
}

// Streams the chunks `bytes` holds, each a 2-byte little-endian length and a SubmitJobChunk
// (the last one cut at the input's end), as one upload; OK when one does not parse.
grpc::Status Upload(proto::Headroom::Stub& stub, const uint8_t* bytes, size_t size) {
  std::vector<proto::SubmitJobChunk> chunks;
  while (size >= 2) {
    const size_t length = std::min<size_t>(bytes[0] | bytes[1] << 8, size - 2);
    if (!chunks.emplace_back().ParseFromArray(bytes + 2, static_cast<int>(length))) {
      return grpc::Status::OK;
    }
    bytes += 2 + length;
    size -= 2 + length;
  }
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
  proto::SubmitJobResponse response;
  std::unique_ptr<grpc::ClientWriter<proto::SubmitJobChunk>> writer =
      stub.UploadJob(&context, &response);
  for (const proto::SubmitJobChunk& chunk : chunks) {
    if (!writer->Write(chunk)) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

// Lists a page of jobs, and checks that its next page starts after this one: a token that
// goes back would have a client that follows pages list for ever.
grpc::Status ListJobs(proto::Headroom::Stub& stub, const uint8_t* bytes, size_t size) {
  proto::ListJobsRequest request;
  if (!request.ParseFromArray(bytes, static_cast<int>(size))) return grpc::Status::OK;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
  proto::ListJobsResponse response;
  grpc::Status status = stub.ListJobs(&context, request, &response);
  if (!status.ok() || response.next_page_token().empty()) return status;
  uint64_t offset = 0, next = 0;
  if (!request.page_token().empty()) (void)absl::SimpleAtoi(request.page_token(), &offset);
  if (!absl::SimpleAtoi(response.next_page_token(), &next) || next <= offset) {
    fprintf(stderr, "service_request_fuzzer: ListJobs page_token '%s' gave next_page_token '%s'\n",
            request.page_token().c_str(), response.next_page_token().c_str());
    abort();
  }
  return status;
}

grpc::Status Answer(proto::Headroom::Stub& stub, Rpc rpc, const uint8_t* bytes, size_t size) {
  using S = proto::Headroom::Stub;
  switch (rpc) {
    case Rpc::kPlan:
      return Call<proto::PlanRequest, proto::PlanResponse>(stub, &S::Plan, bytes, size);
    case Rpc::kProfile:
      return Call<proto::ProfileRequest, proto::ProfileResponse>(stub, &S::Profile, bytes, size);
    case Rpc::kSubmitJob:
      return Call<proto::SubmitJobRequest, proto::SubmitJobResponse>(stub, &S::SubmitJob, bytes,
                                                                     size);
    case Rpc::kWatchJob:
      return Watch(stub, bytes, size);
    case Rpc::kCancelJob:
      return Call<proto::CancelJobRequest, proto::CancelJobResponse>(stub, &S::CancelJob, bytes,
                                                                     size);
    case Rpc::kListJobs:
      return ListJobs(stub, bytes, size);
    case Rpc::kGetJob:
      return Call<proto::GetJobRequest, proto::JobInfo>(stub, &S::GetJob, bytes, size);
    case Rpc::kGetTimeline:
      return Call<proto::GetTimelineRequest, proto::GetTimelineResponse>(stub, &S::GetTimeline,
                                                                         bytes, size);
    case Rpc::kListProfiles:
      return Call<proto::ListProfilesRequest, proto::ListProfilesResponse>(stub, &S::ListProfiles,
                                                                           bytes, size);
    case Rpc::kUploadJob:
      return Upload(stub, bytes, size);
    case Rpc::kCount:
      break;
  }
  return grpc::Status::OK;
}

}  // namespace
}  // namespace headroom

// gRPC's threads, started as the server needs them, hold what they are given in places the
// leak checker does not see until they run; these frames start threads and never run a call.
extern "C" const char* __lsan_default_suppressions() {
  return "leak:grpc::ThreadManager::Initialize\n"
         "leak:grpc_event_engine::experimental::ThreadPool::StartThread\n"
         "leak:grpc_core::Thread::Thread\n";
}

namespace headroom {
namespace {

// The daemon answering now and how many inputs it has answered (StopAtExit stops it).
struct Session {
  Daemon* daemon = nullptr;
  int answered = 0;
};

// Returns the stub, with a daemon behind it that has answered fewer than kRequestsPerDaemon
// inputs (a fresh one replacing it when it has).
Session& TheSession() {
  static Session* session = new Session;
  return *session;
}

proto::Headroom::Stub& NextCall() {
  Session* session = &TheSession();
  Channel& channel = TheChannel();
  if (session->daemon == nullptr || session->answered == kRequestsPerDaemon) {
    delete session->daemon;
    session->daemon = new Daemon();
    channel.forwarder.set_to(&session->daemon->service());
    session->answered = 0;
  }
  ++session->answered;
  return *channel.stub;
}

// Stops the daemon's workers and the server's threads as the process exits, before the
// libraries' own statics are destroyed under them.
void StopAtExit() {
  Session& session = TheSession();
  delete session.daemon;
  session.daemon = nullptr;
  TheChannel().server->Shutdown();
  TheChannel().server->Wait();
}

}  // namespace
}  // namespace headroom

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Protobuf logs every malformed UTF-8 string it parses; the fuzzer makes millions.
  google::protobuf::SetLogHandler(nullptr);
  // The first daemon, and gRPC's second polling thread started, before any input counts.
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext context;
    headroom::proto::ListJobsResponse response;
    (void)headroom::NextCall().ListJobs(&context, headroom::proto::ListJobsRequest(), &response);
  }
  std::atexit(headroom::StopAtExit);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using headroom::Rpc;
  if (size == 0) return 0;
  const auto rpc = static_cast<Rpc>(data[0] % static_cast<int>(Rpc::kCount));
  const grpc::Status status = headroom::Answer(headroom::NextCall(), rpc, data + 1, size - 1);
  // The call's deadline passing is a hang of the service: no call here should wait that long
  // (a plan stopped at --max-plan-seconds is the service keeping its own limit).
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
      status.error_message().find("--max-plan-seconds") == std::string::npos) {
    fprintf(stderr, "service_request_fuzzer: rpc %d: %s\n", static_cast<int>(rpc),
            status.error_message().c_str());
    abort();
  }
  return 0;
}
