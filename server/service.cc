#include "server/service.h"

#include <string>

#include "graph/graph.h"
#include "graph/model_source.h"
#include "planner/plan_request.h"
#include "util/status_macros.h"

namespace headroom::server {
namespace {

// Returns the status of `result`, moving its value into `*out` when it is OK.
template <typename T>
grpc::Status Answer(absl::StatusOr<T> result, T* out) {
  if (!result.ok()) return ToGrpcStatus(result.status());
  *out = *std::move(result);
  return grpc::Status::OK;
}

absl::StatusOr<proto::PlanResponse> PlanModel(const proto::PlanRequest& request,
                                              const planner::PlanBackend& backend) {
  ASSIGN_OR_RETURN(proto::GraphDef def, graph::ResolveModel(request.model()));
  ASSIGN_OR_RETURN(graph::Graph g, graph::Graph::FromProto(def));
  return planner::AnswerPlan(g, request.options(), /*cost=*/nullptr, backend);
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

grpc::Status HeadroomService::Plan(grpc::ServerContext*, const proto::PlanRequest* request,
                                   proto::PlanResponse* response) {
  return Answer(PlanModel(*request, jobs_->plan_backend()), response);
}

grpc::Status HeadroomService::Profile(grpc::ServerContext*, const proto::ProfileRequest* request,
                                      proto::ProfileResponse* response) {
  return Answer(jobs_->Profile(*request), response);
}

grpc::Status HeadroomService::SubmitJob(grpc::ServerContext*,
                                        const proto::SubmitJobRequest* request,
                                        proto::SubmitJobResponse* response) {
  return Answer(jobs_->Submit(request->spec()), response);
}

grpc::Status HeadroomService::WatchJob(grpc::ServerContext* context,
                                       const proto::WatchJobRequest* request,
                                       grpc::ServerWriter<proto::JobProgress>* writer) {
  return ToGrpcStatus(jobs_->Watch(
      request->job_id(), [writer](const proto::JobProgress& p) { return writer->Write(p); },
      [context] { return context->IsCancelled(); }));
}

grpc::Status HeadroomService::CancelJob(grpc::ServerContext*,
                                        const proto::CancelJobRequest* request,
                                        proto::CancelJobResponse* response) {
  absl::StatusOr<proto::JobState> state = jobs_->Cancel(request->job_id());
  if (!state.ok()) return ToGrpcStatus(state.status());
  response->set_state(*state);
  return grpc::Status::OK;
}

grpc::Status HeadroomService::ListJobs(grpc::ServerContext*, const proto::ListJobsRequest* request,
                                       proto::ListJobsResponse* response) {
  return Answer(jobs_->List(*request), response);
}

grpc::Status HeadroomService::GetTimeline(grpc::ServerContext*,
                                          const proto::GetTimelineRequest* request,
                                          proto::GetTimelineResponse* response) {
  absl::StatusOr<proto::MemoryTimeline> timeline =
      jobs_->Timeline(request->job_id(), request->max_samples());
  if (!timeline.ok()) return ToGrpcStatus(timeline.status());
  response->set_job_id(request->job_id());
  *response->mutable_timeline() = *std::move(timeline);
  return grpc::Status::OK;
}

grpc::Status HeadroomService::ListProfiles(grpc::ServerContext*,
                                           const proto::ListProfilesRequest* request,
                                           proto::ListProfilesResponse* response) {
  return Answer(jobs_->ListProfiles(request->summaries_only()), response);
}

}  // namespace headroom::server
