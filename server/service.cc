#include "server/service.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "graph/graph.h"
#include "graph/model_source.h"
#include "graph/onnx_export.h"
#include "planner/cost_model.h"
#include "profiler/measured_cost_model.h"
#include "server/auth.h"
#include "server/plan_limit.h"
#include "util/status_macros.h"

namespace headroom::server {
namespace {

// Returns the status of `result`, moving its value into `*out` when it is OK.
// Returns the gRPC status of a failed absl::Status from the enclosing handler.
#define RETURN_GRPC_IF_ERROR(expr)                                  \
  do {                                                              \
    if (absl::Status _status = (expr); !_status.ok()) {             \
      return ToGrpcStatus(_status);                                 \
    }                                                               \
  } while (0)

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
                                              const planner::PlanBackend& backend,
                                              const util::CancellationToken& cancel) {
  ASSIGN_OR_RETURN(proto::GraphDef def, graph::ResolveModel(request.model()));
  ASSIGN_OR_RETURN(graph::Graph g, graph::Graph::FromProto(def));
  ASSIGN_OR_RETURN(std::unique_ptr<planner::CostModel> cost, MeasuredCostOf(g, request));
  return planner::AnswerPlan(g, request.options(), cost.get(), backend, &cancel);
}

// Returns `handler()`, or RESOURCE_EXHAUSTED when it runs out of memory and INTERNAL naming
// what it threw when it throws (gRPC would answer UNKNOWN with a message of its own).
template <typename Handler>
grpc::Status Guarded(const char* rpc, Handler handler) {
  try {
    return handler();
  } catch (const std::bad_alloc&) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat(rpc, ": the daemon ran out of memory answering it"));
  } catch (const std::exception& e) {
    return grpc::Status(grpc::StatusCode::INTERNAL, absl::StrCat(rpc, ": ", e.what()));
  }
}

// Returns a turn of `slots` for the call of `context`, waiting until its deadline.
absl::StatusOr<CallSlots::Turn> TurnOf(CallSlots& slots, grpc::ServerContext* context) {
  return slots.Acquire(absl::FromChrono(context->deadline()),
                       [context] { return context->IsCancelled(); });
}

// Returns the user the call's token names (server/auth.h), or "" when it names none: no
// token file, a single-token file, or a call in this process.
std::string CallerOf(const grpc::ServerContext* context) {
  std::shared_ptr<const grpc::AuthContext> auth = context->auth_context();
  if (auth == nullptr) return "";
  std::vector<grpc::string_ref> users = auth->FindPropertyValues(kUserProperty);
  return users.empty() ? "" : std::string(users[0].data(), users[0].size());
}

// Returns whether `caller` may see `job`: a caller without a user sees every job.
bool MaySee(const std::string& caller, const proto::JobInfo& job) {
  return caller.empty() || job.spec().owner() == caller;
}

// Returns OK when `caller` may see job `job_id`; NOT_FOUND, as for a job that does not
// exist, when it may not (or when it does not exist).
absl::Status CheckOwner(const JobManager& jobs, const std::string& caller,
                        const std::string& job_id) {
  if (caller.empty()) return absl::OkStatus();
  absl::StatusOr<proto::JobInfo> job = jobs.Get(job_id);
  if (!job.ok() || !MaySee(caller, *job)) {
    return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ExportJobModel(const proto::JobInfo& job,
                                           const proto::Checkpoint& checkpoint, bool fixed_batch,
                                           uint64_t max_bytes, std::string* summary) {
  ASSIGN_OR_RETURN(proto::GraphDef def, graph::ResolveModel(job.spec().model()));
  ASSIGN_OR_RETURN(graph::Graph g, graph::Graph::FromProto(def));
  graph::OnnxExportOptions options;
  options.dynamic_batch = !fixed_batch;
  options.metadata = {{"headroom.job_id", job.job_id()},
                      {"headroom.step", absl::StrCat(checkpoint.step())},
                      {"headroom.loss", absl::StrCat(checkpoint.loss())}};
  const std::vector<proto::TensorValue> values(checkpoint.tensors().begin(),
                                               checkpoint.tensors().end());
  absl::StatusOr<graph::OnnxExport> e = graph::ExportOnnx(g, values, options);
  if (!e.ok()) {
    return absl::Status(e.status().code(), absl::StrCat("job '", job.job_id(), "': checkpoint at step ",
                                                        checkpoint.step(), ": ", e.status().message()));
  }
  const uint64_t bytes = e->model.ByteSizeLong();
  if (bytes > std::min<uint64_t>(max_bytes, INT32_MAX)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "job '", job.job_id(), "': its ONNX model is ", bytes, " bytes, over the daemon's ",
        std::min<uint64_t>(max_bytes, INT32_MAX), " (--max-upload-bytes; protobuf's 2 GiB)"));
  }
  if (summary != nullptr) *summary = e->stats.DebugString();
  return e->model.SerializeAsString();
}

proto::JobInfo JobSummary(proto::JobInfo job) {
  proto::ModelSource& model = *job.mutable_spec()->mutable_model();
  if (model.has_graph()) {
    proto::GraphDef named;
    named.set_name(model.graph().name());
    *model.mutable_graph() = std::move(named);
  } else if (model.source_case() == proto::ModelSource::kOnnxModel) {
    model.set_onnx_model("");
  }
  return job;
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

HeadroomService::HeadroomService(JobManager* jobs, planner::PlanBackend plan_backend,
                                 ProfileRunner* profiles, ServiceOptions options)
    : jobs_(jobs),
      plan_backend_(plan_backend),
      profiles_(profiles),
      limits_(options.limits),
      plan_slots_("--max-concurrent-plans", limits_.max_concurrent_plans,
                  limits_.max_queued_plans),
      watch_slots_("--max-watch-streams", limits_.max_watch_streams, /*max_waiting=*/0),
      uploads_(options.max_upload_bytes),
      max_export_bytes_(options.max_upload_bytes) {}

template <typename Call>
grpc::Status HeadroomService::WithJobs(Call call) const {
  if (jobs_ == nullptr) {
    return ToGrpcStatus(absl::FailedPreconditionError(
        "jobs and their profiles run on headroomd: start it (./headroom serve) and pass "
        "--server ADDR"));
  }
  return Guarded("headroomd", [&] { return call(*jobs_); });
}

grpc::Status HeadroomService::Plan(grpc::ServerContext* context, const proto::PlanRequest* request,
                                   proto::PlanResponse* response) {
  return Guarded("Plan", [&] {
    RETURN_GRPC_IF_ERROR(CheckRequest(*request, limits_));
    absl::StatusOr<CallSlots::Turn> turn = TurnOf(plan_slots_, context);
    if (!turn.ok()) return ToGrpcStatus(turn.status());
    const util::CancellationToken cancel =
        PlanToken(*context, absl::Seconds(limits_.max_plan_seconds));
    return Answer(PlanModel(*request, plan_backend_, cancel), response);
  });
}

grpc::Status HeadroomService::Profile(grpc::ServerContext* context,
                                      const proto::ProfileRequest* request,
                                      proto::ProfileResponse* response) {
  RETURN_GRPC_IF_ERROR(CheckRequest(*request, limits_));
  if (profiles_ != nullptr) {
    return Guarded("Profile", [&] { return Answer(profiles_->Profile(*request), response); });
  }
  // The profile stops when its caller leaves: cancelled, or past its deadline.
  auto left = [context] {
    return context->IsCancelled() || std::chrono::system_clock::now() > context->deadline();
  };
  return WithJobs([&](JobManager& jobs) { return Answer(jobs.Profile(*request, left), response); });
}

grpc::Status HeadroomService::Submit(grpc::ServerContext* context, proto::JobSpec spec,
                                     proto::SubmitJobResponse* response) {
  return WithJobs([&](JobManager& jobs) {
    RETURN_GRPC_IF_ERROR(CheckRequest(spec, limits_));
    absl::StatusOr<CallSlots::Turn> turn = TurnOf(plan_slots_, context);
    if (!turn.ok()) return ToGrpcStatus(turn.status());
    spec.set_owner(CallerOf(context));
    const util::CancellationToken cancel =
        PlanToken(*context, absl::Seconds(limits_.max_plan_seconds));
    return Answer(jobs.Submit(spec, &cancel), response);
  });
}

grpc::Status HeadroomService::SubmitJob(grpc::ServerContext* context,
                                        const proto::SubmitJobRequest* request,
                                        proto::SubmitJobResponse* response) {
  return Submit(context, request->spec(), response);
}

grpc::Status HeadroomService::UploadJob(grpc::ServerContext* context,
                                        grpc::ServerReader<proto::SubmitJobChunk>* reader,
                                        proto::SubmitJobResponse* response) {
  return WithJobs([&](JobManager&) {
    // The upload's bytes are freed when it goes out of scope, however the call ends.
    JobUpload upload(&uploads_);
    proto::SubmitJobChunk message;
    while (!context->IsCancelled() && reader->Read(&message)) {
      RETURN_GRPC_IF_ERROR(upload.Add(message));
    }
    // A client that left mid-upload submits nothing (its stream may look ended).
    if (context->IsCancelled()) {
      return grpc::Status(grpc::StatusCode::CANCELLED,
                          absl::StrCat("UploadJob: cancelled by the client after ",
                                       upload.received_bytes(), " bytes"));
    }
    absl::StatusOr<proto::JobSpec> spec = upload.Finish();
    if (!spec.ok()) return ToGrpcStatus(spec.status());
    return Submit(context, *std::move(spec), response);
  });
}

grpc::Status HeadroomService::WatchJob(grpc::ServerContext* context,
                                       const proto::WatchJobRequest* request,
                                       grpc::ServerWriter<proto::JobProgress>* writer) {
  return WithJobs([&](JobManager& jobs) {
    RETURN_GRPC_IF_ERROR(CheckJobId(request->job_id()));
    RETURN_GRPC_IF_ERROR(CheckOwner(jobs, CallerOf(context), request->job_id()));
    absl::StatusOr<CallSlots::Turn> turn = TurnOf(watch_slots_, context);
    if (!turn.ok()) return ToGrpcStatus(turn.status());
    return ToGrpcStatus(jobs.Watch(
        request->job_id(), [writer](const proto::JobProgress& p) { return writer->Write(p); },
        [context] { return context->IsCancelled(); }));
  });
}

grpc::Status HeadroomService::CancelJob(grpc::ServerContext* context,
                                        const proto::CancelJobRequest* request,
                                        proto::CancelJobResponse* response) {
  return WithJobs([&](JobManager& jobs) {
    RETURN_GRPC_IF_ERROR(CheckJobId(request->job_id()));
    RETURN_GRPC_IF_ERROR(CheckOwner(jobs, CallerOf(context), request->job_id()));
    absl::StatusOr<proto::JobState> state = jobs.Cancel(request->job_id());
    if (!state.ok()) return ToGrpcStatus(state.status());
    response->set_state(*state);
    return grpc::Status::OK;
  });
}

grpc::Status HeadroomService::ListJobs(grpc::ServerContext* context,
                                       const proto::ListJobsRequest* request,
                                       proto::ListJobsResponse* response) {
  return WithJobs([&](JobManager& jobs) {
    RETURN_GRPC_IF_ERROR(CheckRequest(*request));
    absl::StatusOr<proto::ListJobsResponse> page = jobs.List(*request);
    if (!page.ok()) return ToGrpcStatus(page.status());
    // The page's others' jobs are left out: a page may hold fewer than page_size.
    const std::string caller = CallerOf(context);
    *response = *std::move(page);
    auto* list = response->mutable_jobs();
    list->erase(std::remove_if(list->begin(), list->end(),
                               [&](const proto::JobInfo& job) { return !MaySee(caller, job); }),
                list->end());
    for (proto::JobInfo& job : *list) job = JobSummary(std::move(job));
    return grpc::Status::OK;
  });
}

grpc::Status HeadroomService::GetJob(grpc::ServerContext* context,
                                     const proto::GetJobRequest* request,
                                     proto::JobInfo* response) {
  return WithJobs([&](JobManager& jobs) {
    RETURN_GRPC_IF_ERROR(CheckJobId(request->job_id()));
    RETURN_GRPC_IF_ERROR(CheckOwner(jobs, CallerOf(context), request->job_id()));
    return Answer(jobs.Get(request->job_id()), response);
  });
}

grpc::Status HeadroomService::GetTimeline(grpc::ServerContext* context,
                                          const proto::GetTimelineRequest* request,
                                          proto::GetTimelineResponse* response) {
  return WithJobs([&](JobManager& jobs) {
    RETURN_GRPC_IF_ERROR(CheckJobId(request->job_id()));
    RETURN_GRPC_IF_ERROR(CheckOwner(jobs, CallerOf(context), request->job_id()));
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

grpc::Status HeadroomService::ExportModel(grpc::ServerContext* context,
                                          const proto::ExportModelRequest* request,
                                          grpc::ServerWriter<proto::ExportModelChunk>* writer) {
  return WithJobs([&](JobManager& jobs) {
    RETURN_GRPC_IF_ERROR(CheckJobId(request->job_id()));
    RETURN_GRPC_IF_ERROR(CheckOwner(jobs, CallerOf(context), request->job_id()));
    absl::StatusOr<proto::JobInfo> job = jobs.Get(request->job_id());
    if (!job.ok()) return ToGrpcStatus(job.status());
    absl::StatusOr<std::optional<proto::Checkpoint>> checkpoint =
        jobs.GetCheckpoint(request->job_id());
    if (!checkpoint.ok()) return ToGrpcStatus(checkpoint.status());
    if (!checkpoint->has_value()) {
      return ToGrpcStatus(absl::FailedPreconditionError(absl::StrCat(
          "job '", request->job_id(), "' (", proto::JobState_Name(job->state()),
          ") has no checkpoint: a job has one after its first checkpoint interval and keeps "
          "the last once it succeeds; failed and cancelled jobs do not keep theirs")));
    }
    // Building the model takes a plan's turn: it holds the job's weights about twice.
    absl::StatusOr<CallSlots::Turn> turn = TurnOf(plan_slots_, context);
    if (!turn.ok()) return ToGrpcStatus(turn.status());
    std::string summary;
    const uint64_t step = (**checkpoint).step();
    absl::StatusOr<std::string> model = ExportJobModel(*job, **checkpoint, request->fixed_batch(),
                                                       max_export_bytes_, &summary);
    checkpoint->reset();  // the model holds the weights now
    if (!model.ok()) return ToGrpcStatus(model.status());
    proto::ExportModelChunk first;
    first.set_onnx_model_bytes(model->size());
    first.set_step(step);
    first.set_summary(summary);
    for (size_t offset = 0; offset == 0 || offset < model->size(); offset += kExportChunkBytes) {
      proto::ExportModelChunk chunk = offset == 0 ? first : proto::ExportModelChunk();
      chunk.set_onnx_model_chunk(model->substr(offset, kExportChunkBytes));
      if (context->IsCancelled() || !writer->Write(chunk)) {
        return grpc::Status(grpc::StatusCode::CANCELLED,
                            absl::StrCat("ExportModel: the client left after ", offset, " bytes"));
      }
    }
    return grpc::Status::OK;
  });
}

}  // namespace headroom::server
