#include "server/service.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "graph/graph.h"
#include "graph/model_source.h"
#include "planner/cost_model.h"
#include "profiler/measured_cost_model.h"
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

// Returns the cost model of a request that carries a measured profile, or null (the
// roofline of its device) when it carries none.
absl::StatusOr<std::unique_ptr<planner::CostModel>> MeasuredCostOf(
    const graph::Graph& forward, const proto::PlanRequest& request) {
  if (!request.has_measured()) return nullptr;
  ASSIGN_OR_RETURN(planner::DeviceSpec device,
                   planner::DeviceSpecFromProto(request.options().device()));
  absl::StatusOr<std::unique_ptr<profiler::MeasuredCostModel>> measured =
      profiler::MeasuredCostModel::Create(forward, request.measured(), device);
  if (!measured.ok()) {
    return absl::Status(measured.status().code(),
                        absl::StrCat("measured: ", measured.status().message()));
  }
  return std::unique_ptr<planner::CostModel>(*std::move(measured));
}

absl::StatusOr<proto::PlanResponse> PlanModel(const proto::PlanRequest& request,
                                              const planner::PlanBackend& backend) {
  ASSIGN_OR_RETURN(proto::GraphDef def, graph::ResolveModel(request.model()));
  ASSIGN_OR_RETURN(graph::Graph g, graph::Graph::FromProto(def));
  ASSIGN_OR_RETURN(std::unique_ptr<planner::CostModel> cost, MeasuredCostOf(g, request));
  return planner::AnswerPlan(g, request.options(), cost.get(), backend);
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

template <typename Call>
grpc::Status HeadroomService::WithJobs(Call call) const {
  if (jobs_ == nullptr) {
    return ToGrpcStatus(absl::FailedPreconditionError(
        "jobs and their profiles run on headroomd: start it (./headroom serve) and pass "
        "--server ADDR"));
  }
  return call(*jobs_);
}

grpc::Status HeadroomService::Plan(grpc::ServerContext*, const proto::PlanRequest* request,
                                   proto::PlanResponse* response) {
  return Answer(PlanModel(*request, plan_backend_), response);
}

grpc::Status HeadroomService::Profile(grpc::ServerContext*, const proto::ProfileRequest* request,
                                      proto::ProfileResponse* response) {
  if (profiles_ != nullptr) return Answer(profiles_->Profile(*request), response);
  return WithJobs([&](JobManager& jobs) { return Answer(jobs.Profile(*request), response); });
}

grpc::Status HeadroomService::SubmitJob(grpc::ServerContext*,
                                        const proto::SubmitJobRequest* request,
                                        proto::SubmitJobResponse* response) {
  return WithJobs([&](JobManager& jobs) { return Answer(jobs.Submit(request->spec()), response); });
}

grpc::Status HeadroomService::WatchJob(grpc::ServerContext* context,
                                       const proto::WatchJobRequest* request,
                                       grpc::ServerWriter<proto::JobProgress>* writer) {
  return WithJobs([&](JobManager& jobs) {
    return ToGrpcStatus(jobs.Watch(
        request->job_id(), [writer](const proto::JobProgress& p) { return writer->Write(p); },
        [context] { return context->IsCancelled(); }));
  });
}

grpc::Status HeadroomService::CancelJob(grpc::ServerContext*,
                                        const proto::CancelJobRequest* request,
                                        proto::CancelJobResponse* response) {
  return WithJobs([&](JobManager& jobs) {
    absl::StatusOr<proto::JobState> state = jobs.Cancel(request->job_id());
    if (!state.ok()) return ToGrpcStatus(state.status());
    response->set_state(*state);
    return grpc::Status::OK;
  });
}

grpc::Status HeadroomService::ListJobs(grpc::ServerContext*, const proto::ListJobsRequest* request,
                                       proto::ListJobsResponse* response) {
  return WithJobs([&](JobManager& jobs) { return Answer(jobs.List(*request), response); });
}

grpc::Status HeadroomService::GetTimeline(grpc::ServerContext*,
                                          const proto::GetTimelineRequest* request,
                                          proto::GetTimelineResponse* response) {
  return WithJobs([&](JobManager& jobs) {
    absl::StatusOr<proto::MemoryTimeline> timeline =
        jobs.Timeline(request->job_id(), request->max_samples());
    if (!timeline.ok()) return ToGrpcStatus(timeline.status());
    response->set_job_id(request->job_id());
    *response->mutable_timeline() = *std::move(timeline);
    return grpc::Status::OK;
  });
}

grpc::Status HeadroomService::ListProfiles(grpc::ServerContext*,
                                           const proto::ListProfilesRequest* request,
                                           proto::ListProfilesResponse* response) {
  return WithJobs([&](JobManager& jobs) {
    return Answer(jobs.ListProfiles(request->summaries_only()), response);
  });
}

}  // namespace headroom::server
