// headroomd's gRPC service: each handler checks nothing itself and calls the library (the
// planner for Plan, the JobManager for the rest), converting absl::Status to grpc::Status in
// one place. The same service answers `headroom plan` and `headroom profile` given no
// --server, in their own process (clients/local_service.h): there it has no JobManager (its
// profiles run on a ProfileRunner), and the calls that need one answer FAILED_PRECONDITION.
// Jobs have owners: SubmitJob records the user of the call's token (server/auth.h) as the
// spec's owner, and a caller whose token names a user lists, watches, cancels and reads the
// timelines of its own jobs only (others' are NOT_FOUND, as if absent); a caller without a
// user sees every job. UploadJob joins a streamed ONNX model (server/job_upload.h) under
// ServiceOptions::max_upload_bytes, then submits it as SubmitJob does. ExportModel streams
// a job's trained model as ONNX, built under a plan turn and held to max_upload_bytes.
// Every request is first held to the daemon's limits (server/request_limits.h); a handler
// that runs out of memory answers RESOURCE_EXHAUSTED, and one that throws answers INTERNAL
// with what it threw, so no request ends the process.
// Borrows the JobManager and the ProfileRunner (either may be null) and the plan backend's
// scratch model, which must outlive it. Thread-safe (the manager is; a ProfileRunner is
// called from the RPC thread).
#ifndef HEADROOM_SERVER_SERVICE_H_
#define HEADROOM_SERVER_SERVICE_H_

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "planner/plan_request.h"
#include "proto/headroom.grpc.pb.h"
#include "server/job_manager.h"
#include "server/job_upload.h"
#include "server/request_limits.h"

namespace headroom::server {

// Returns `job` as ListJobs lists it: its spec's model without a description's nodes and
// tensors (its name kept) or an ONNX model's bytes.
proto::JobInfo JobSummary(proto::JobInfo job);

// Returns the gRPC status of `status`: the same code (absl's codes are gRPC's) and message.
grpc::Status ToGrpcStatus(const absl::Status& status);

// Runs the profiles of a service that has no job manager: `headroom profile` in its own
// process, which owns the whole process for the run.
class ProfileRunner {
 public:
  virtual ~ProfileRunner() = default;
  // Returns the profile `request` asks for, or the error of planning or running it.
  virtual absl::StatusOr<proto::ProfileResponse> Profile(const proto::ProfileRequest& request) = 0;
};

// The most model bytes one ExportModelChunk carries.
inline constexpr uint64_t kExportChunkBytes = 1 << 20;

// Returns the ONNX model (graph/onnx_export.h) of `job`'s forward graph with the weights of
// `checkpoint`, serialized: what ExportModel streams. InvalidArgument when the checkpoint
// does not fit the job's graph (naming the tensor); ResourceExhausted for a model over
// protobuf's 2 GiB or `max_bytes`.
absl::StatusOr<std::string> ExportJobModel(const proto::JobInfo& job,
                                           const proto::Checkpoint& checkpoint, bool fixed_batch,
                                           uint64_t max_bytes, std::string* summary);

// The service's limits, filled from headroomd's flags.
struct ServiceOptions {
  // The largest ONNX model UploadJob takes, and what all uploads in flight may hold
  // together (--max-upload-bytes). At most kMaxUploadBytesLimit. Default
  // kDefaultMaxUploadBytes (512 MiB).
  uint64_t max_upload_bytes = kDefaultMaxUploadBytes;
  // The other limits on requests and on calls at once, each a flag.
  RequestLimits limits = RequestLimits::Defaults();
};

class HeadroomService final : public proto::Headroom::Service {
 public:
  // Plans for `plan_backend`; runs jobs and profiles on `jobs`, or profiles on `profiles`
  // where it is given (none of either: those calls fail); holds requests to `options`.
  HeadroomService(JobManager* jobs, planner::PlanBackend plan_backend,
                  ProfileRunner* profiles = nullptr, ServiceOptions options = {});

  grpc::Status Plan(grpc::ServerContext* context, const proto::PlanRequest* request,
                    proto::PlanResponse* response) override;
  grpc::Status Profile(grpc::ServerContext* context, const proto::ProfileRequest* request,
                       proto::ProfileResponse* response) override;
  grpc::Status SubmitJob(grpc::ServerContext* context, const proto::SubmitJobRequest* request,
                         proto::SubmitJobResponse* response) override;
  grpc::Status UploadJob(grpc::ServerContext* context,
                         grpc::ServerReader<proto::SubmitJobChunk>* reader,
                         proto::SubmitJobResponse* response) override;
  grpc::Status WatchJob(grpc::ServerContext* context, const proto::WatchJobRequest* request,
                        grpc::ServerWriter<proto::JobProgress>* writer) override;
  grpc::Status CancelJob(grpc::ServerContext* context, const proto::CancelJobRequest* request,
                         proto::CancelJobResponse* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context, const proto::ListJobsRequest* request,
                        proto::ListJobsResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* context, const proto::GetJobRequest* request,
                      proto::JobInfo* response) override;
  grpc::Status GetTimeline(grpc::ServerContext* context, const proto::GetTimelineRequest* request,
                           proto::GetTimelineResponse* response) override;
  grpc::Status ListProfiles(grpc::ServerContext* context,
                            const proto::ListProfilesRequest* request,
                            proto::ListProfilesResponse* response) override;
  grpc::Status ExportModel(grpc::ServerContext* context, const proto::ExportModelRequest* request,
                           grpc::ServerWriter<proto::ExportModelChunk>* writer) override;

 private:
  // Returns `call(jobs)`, or FAILED_PRECONDITION for a service without a job manager.
  template <typename Call>
  grpc::Status WithJobs(Call call) const;
  // Returns SubmitJob's answer for `spec`, its owner the caller (SubmitJob and UploadJob).
  grpc::Status Submit(grpc::ServerContext* context, proto::JobSpec spec,
                      proto::SubmitJobResponse* response);

  JobManager* const jobs_;
  const planner::PlanBackend plan_backend_;
  ProfileRunner* const profiles_;
  const RequestLimits limits_;
  // Turns to plan (Plan, SubmitJob) and to watch (WatchJob).
  CallSlots plan_slots_;
  CallSlots watch_slots_;
  // The model bytes UploadJob calls in flight hold.
  UploadBudget uploads_;
  // The largest model ExportModel sends (--max-upload-bytes).
  const uint64_t max_export_bytes_;
};

}  // namespace headroom::server

#endif  // HEADROOM_SERVER_SERVICE_H_
