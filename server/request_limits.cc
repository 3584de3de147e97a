#include "server/request_limits.h"

#include <algorithm>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "graph/graph.h"
#include "graph/zoo.h"
#include "planner/plan_request.h"
#include "runner/profile_run.h"
#include "server/job_manager.h"
#include "server/plan_limit.h"
#include "util/printable.h"
#include "util/status_macros.h"

namespace headroom::server {
namespace {

using absl::InvalidArgumentError;
using absl::StrCat;

constexpr uint64_t kMaxJobNameCeiling = 4096;

// Returns the nodes and tensors (listed plus node outputs) of `def`.
std::pair<int64_t, int64_t> SizeOf(const proto::GraphDef& def) {
  int64_t tensors = def.tensors_size();
  for (const proto::NodeDef& node : def.nodes()) tensors += node.outputs_size();
  return {def.nodes_size(), tensors};
}

absl::Status CheckGraphSize(const proto::GraphDef& def, const RequestLimits& limits,
                            const std::string& field) {
  const auto [nodes, tensors] = SizeOf(def);
  if (nodes > limits.max_graph_nodes) {
    return InvalidArgumentError(
        StrCat(field, ": ", nodes, " nodes, more than --max-graph-nodes ", limits.max_graph_nodes));
  }
  if (tensors > limits.max_graph_tensors) {
    return InvalidArgumentError(StrCat(field, ": ", tensors,
                                       " tensors (listed and node outputs), more than "
                                       "--max-graph-tensors ",
                                       limits.max_graph_tensors));
  }
  return absl::OkStatus();
}

absl::Status CheckBatch(uint64_t batch, const RequestLimits& limits, const std::string& field) {
  if (batch > limits.max_batch) {
    return InvalidArgumentError(
        StrCat(field, ": ", batch, " samples per step, more than --max-batch ", limits.max_batch));
  }
  return absl::OkStatus();
}

absl::Status CheckAlignment(const proto::PlanOptions& options, const RequestLimits& limits,
                            const std::string& field) {
  if (options.alignment_bytes() > limits.max_alignment_bytes) {
    return InvalidArgumentError(StrCat(field, ".alignment_bytes: ", options.alignment_bytes(),
                                       ", more than --max-alignment ", limits.max_alignment_bytes));
  }
  return absl::OkStatus();
}

absl::Status CheckSteps(uint64_t steps, uint64_t limit, const char* flag,
                        const std::string& field) {
  if (steps > limit) {
    return InvalidArgumentError(StrCat(field, ": ", steps, ", more than ", flag, " ", limit));
  }
  return absl::OkStatus();
}

}  // namespace

RequestLimits RequestLimits::Defaults() {
  RequestLimits limits;
  limits.max_graph_nodes = graph::kMaxGraphNodes;
  limits.max_graph_tensors = graph::kMaxGraphTensors;
  limits.max_batch = graph::kMaxZooBatch;
  limits.max_alignment_bytes = planner::kMaxAlignmentBytes;
  limits.max_job_steps = kMaxJobSteps;
  limits.max_profile_steps = runner::kMaxProfileSteps;
  limits.max_job_name_bytes = 256;
  limits.max_concurrent_plans =
      std::max(2, 2 * static_cast<int>(std::thread::hardware_concurrency()));
  limits.max_queued_plans = 64;
  limits.max_watch_streams = 64;
  limits.max_plan_seconds = kDefaultMaxPlanSeconds;
  return limits;
}

void AddRequestLimitFlags(CLI::App& app, RequestLimits& limits) {
  const auto at_most = [](auto ceiling) { return CLI::Range(decltype(ceiling){1}, ceiling); };
  app.add_option("--max-graph-nodes", limits.max_graph_nodes,
                 "most nodes of a model (described or built by the zoo)")
      ->type_name("N")
      ->capture_default_str()
      ->check(at_most(int64_t{graph::kMaxGraphNodes}));
  app.add_option("--max-graph-tensors", limits.max_graph_tensors,
                 "most tensors of a model (listed plus node outputs)")
      ->type_name("N")
      ->capture_default_str()
      ->check(at_most(int64_t{graph::kMaxGraphTensors}));
  app.add_option("--max-batch", limits.max_batch, "most samples per step of a zoo or ONNX model")
      ->type_name("N")
      ->capture_default_str()
      ->check(at_most(graph::kMaxZooBatch));
  app.add_option("--max-alignment", limits.max_alignment_bytes,
                 "largest PlanOptions.alignment_bytes")
      ->type_name("BYTES")
      ->capture_default_str()
      ->check(at_most(planner::kMaxAlignmentBytes));
  app.add_option("--max-job-steps", limits.max_job_steps, "most steps of a job")
      ->type_name("N")
      ->capture_default_str()
      ->check(at_most(kMaxJobSteps));
  app.add_option("--max-profile-steps", limits.max_profile_steps, "most steps of a profile")
      ->type_name("N")
      ->capture_default_str()
      ->check(at_most(static_cast<uint64_t>(runner::kMaxProfileSteps)));
  app.add_option("--max-job-name", limits.max_job_name_bytes, "longest job name, in bytes")
      ->type_name("BYTES")
      ->capture_default_str()
      ->check(at_most(kMaxJobNameCeiling));
  app.add_option("--max-concurrent-plans", limits.max_concurrent_plans,
                 "Plan and SubmitJob calls planning at once (others wait for a turn until "
                 "their deadline)")
      ->type_name("N")
      ->capture_default_str()
      ->check(at_most(1024));
  app.add_option("--max-queued-plans", limits.max_queued_plans,
                 "calls that may wait for a turn to plan (more: RESOURCE_EXHAUSTED)")
      ->type_name("N")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  app.add_option("--max-watch-streams", limits.max_watch_streams,
                 "WatchJob streams open at once (more: RESOURCE_EXHAUSTED)")
      ->type_name("N")
      ->capture_default_str()
      ->check(at_most(1024));
  app.add_option("--max-plan-seconds", limits.max_plan_seconds,
                 "longest a Plan or SubmitJob may plan (a client's earlier deadline applies "
                 "first; past it: DEADLINE_EXCEEDED)")
      ->type_name("SECONDS")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
}

absl::Status CheckModelSource(const proto::ModelSource& source, const RequestLimits& limits,
                              const std::string& field) {
  switch (source.source_case()) {
    case proto::ModelSource::kGraph:
      return CheckGraphSize(source.graph(), limits, StrCat(field, ".graph"));
    case proto::ModelSource::kZoo: {
      RETURN_IF_ERROR(CheckBatch(source.zoo().batch(), limits, StrCat(field, ".zoo.batch")));
      // The zoo's options have ceilings of their own; what they build is held to the flags.
      ASSIGN_OR_RETURN(proto::GraphDef built, graph::BuildZooModel(source.zoo()));
      return CheckGraphSize(built, limits, StrCat(field, ".zoo (", source.zoo().name(), ")"));
    }
    case proto::ModelSource::kOnnxModel:
      return CheckBatch(source.onnx().batch(), limits, StrCat(field, ".onnx.batch"));
    case proto::ModelSource::SOURCE_NOT_SET:
      return absl::OkStatus();  // The model's resolution names the missing source.
  }
  return absl::OkStatus();
}

absl::Status CheckRequest(const proto::PlanRequest& request, const RequestLimits& limits) {
  RETURN_IF_ERROR(CheckModelSource(request.model(), limits, "model"));
  return CheckAlignment(request.options(), limits, "options");
}

absl::Status CheckRequest(const proto::JobSpec& spec, const RequestLimits& limits) {
  if (spec.name().size() > limits.max_job_name_bytes) {
    return InvalidArgumentError(StrCat("spec.name: ", spec.name().size(),
                                       " bytes, more than --max-job-name ",
                                       limits.max_job_name_bytes));
  }
  if (HasControlCharacters(spec.name())) {
    return InvalidArgumentError(StrCat("spec.name '", Printable(spec.name()),
                                       "': control characters are not allowed in a job's name"));
  }
  RETURN_IF_ERROR(CheckModelSource(spec.model(), limits, "spec.model"));
  RETURN_IF_ERROR(CheckAlignment(spec.plan(), limits, "spec.plan"));
  return CheckSteps(spec.train().steps(), limits.max_job_steps, "--max-job-steps",
                    "spec.train.steps");
}

absl::Status CheckRequest(const proto::ProfileRequest& request, const RequestLimits& limits) {
  RETURN_IF_ERROR(CheckModelSource(request.model(), limits, "model"));
  RETURN_IF_ERROR(CheckAlignment(request.plan(), limits, "plan"));
  return CheckSteps(request.steps(), limits.max_profile_steps, "--max-profile-steps", "steps");
}

absl::Status CheckJobId(const std::string& job_id, const std::string& field) {
  if (job_id.size() > kMaxJobIdBytes) {
    return InvalidArgumentError(StrCat(field, ": ", job_id.size(), " bytes; a job id is at most ",
                                       kMaxJobIdBytes, " bytes"));
  }
  if (HasControlCharacters(job_id)) {
    return InvalidArgumentError(
        StrCat(field, " '", Printable(job_id), "': a job id has no control characters"));
  }
  return absl::OkStatus();
}

absl::Status CheckRequest(const proto::ListJobsRequest& request) {
  for (int i = 0; i < request.states_size(); ++i) {
    if (!proto::JobState_IsValid(request.states(i)) ||
        request.states(i) == proto::JOB_STATE_UNSPECIFIED) {
      return InvalidArgumentError(
          StrCat("states[", i, "]: ", request.states(i), " is not a job state (see JobState)"));
    }
  }
  if (request.page_size() > kMaxPageSize) {
    return InvalidArgumentError(
        StrCat("page_size: ", request.page_size(), ", more than ", kMaxPageSize, " jobs per page"));
  }
  return CheckJobId(request.page_token(), "page_token");
}

absl::StatusOr<CallSlots::Turn> CallSlots::Acquire(absl::Time deadline,
                                                   const std::function<bool()>& cancelled) {
  absl::MutexLock lock(&mu_);
  if (held_ < limit_) {
    ++held_;
    return Turn(this);
  }
  if (waiting_ >= max_waiting_) {
    return absl::ResourceExhaustedError(
        max_waiting_ == 0
            ? StrCat(flag_, " ", limit_, ": that many are in progress; try again later")
            : StrCat(flag_, " ", limit_, ": that many are in progress and ", waiting_,
                     " more wait for a turn; try again later"));
  }
  ++waiting_;
  const auto free = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return held_ < limit_; };
  absl::Status ended;
  while (!free()) {
    if (absl::Now() >= deadline) {
      ended = absl::DeadlineExceededError(
          StrCat("the deadline passed while waiting for one of ", flag_, " ", limit_, " turns"));
      break;
    }
    if (cancelled && cancelled()) {
      ended = absl::CancelledError(StrCat("cancelled while waiting for a ", flag_, " turn"));
      break;
    }
    mu_.AwaitWithDeadline(absl::Condition(&free),
                          std::min(deadline, absl::Now() + absl::Milliseconds(100)));
  }
  --waiting_;
  if (!ended.ok()) return ended;
  ++held_;
  return Turn(this);
}

void CallSlots::Release() {
  absl::MutexLock lock(&mu_);
  --held_;
}

}  // namespace headroom::server
