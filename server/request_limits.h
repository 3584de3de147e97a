// headroomd's limits on requests, each a daemon flag with its default: the size of a
// request's model, the steps it asks for, and how many calls may plan or watch at once.
// The libraries keep hard ceilings of their own (graph::kMaxGraphNodes, graph::kMaxZooBatch,
// planner::kMaxAlignmentBytes, runner::kMaxProfileSteps): a flag may lower a limit below its
// ceiling, never raise it above. Every refusal is INVALID_ARGUMENT (a request too large or
// out of range) or RESOURCE_EXHAUSTED (too many calls at once), naming the field or the
// flag, the value and the limit.
#ifndef HEADROOM_SERVER_REQUEST_LIMITS_H_
#define HEADROOM_SERVER_REQUEST_LIMITS_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/headroom.pb.h"

namespace CLI {
class App;
}  // namespace CLI

namespace headroom::server {

struct RequestLimits {
  // --max-graph-nodes, --max-graph-tensors: a model's nodes, and its tensors (listed plus
  // node outputs), as described or as the zoo builds it. An ONNX model is held to the
  // ceilings (graph::kMaxGraphNodes, kMaxGraphTensors) when it is imported.
  int64_t max_graph_nodes;
  int64_t max_graph_tensors;
  // --max-batch: a zoo model's or an ONNX import's samples per step.
  uint64_t max_batch;
  // --max-alignment: PlanOptions.alignment_bytes (a power of two).
  uint64_t max_alignment_bytes;
  // --max-job-steps, --max-profile-steps: TrainOptions.steps, ProfileRequest.steps.
  uint64_t max_job_steps;
  uint64_t max_profile_steps;
  // --max-job-name: JobSpec.name's bytes (control characters are always refused).
  uint64_t max_job_name_bytes;
  // --max-concurrent-plans: Plan and SubmitJob calls planning at once; a call beyond waits
  // for a turn until its deadline, and --max-queued-plans more may wait (RESOURCE_EXHAUSTED
  // beyond that).
  int max_concurrent_plans;
  int max_queued_plans;
  // --max-watch-streams: WatchJob streams open at once (RESOURCE_EXHAUSTED beyond).
  int max_watch_streams;
  // --max-plan-seconds: how long a Plan or SubmitJob may plan once it has its turn; a
  // client's earlier deadline applies first (server/plan_limit.h). Past it, DEADLINE_EXCEEDED
  // naming the flag. Infinity: no limit (the in-process service of `headroom plan`).
  double max_plan_seconds;

  // The defaults: the libraries' ceilings; two plans at a time per core (at least 2) with
  // 64 waiting; 64 watch streams (gRPC's threads, --max-threads, default 256, serve the
  // rest); job names of 256 bytes; 60 s of planning (kDefaultMaxPlanSeconds).
  static RequestLimits Defaults();
};

// Declares a flag for each limit on `app`, with its default and its ceiling.
void AddRequestLimitFlags(CLI::App& app, RequestLimits& limits);

// Returns OK when `source` is within `limits`: a description's nodes and tensors, a zoo
// model's batch and (built) nodes and tensors, an ONNX import's batch. InvalidArgument
// naming `field`, the value and the flag otherwise, or the zoo's own error.
absl::Status CheckModelSource(const proto::ModelSource& source, const RequestLimits& limits,
                              const std::string& field);

// Returns OK when a request is within `limits` (its model, alignment, steps and name).
absl::Status CheckRequest(const proto::PlanRequest& request, const RequestLimits& limits);
absl::Status CheckRequest(const proto::JobSpec& spec, const RequestLimits& limits);
absl::Status CheckRequest(const proto::ProfileRequest& request, const RequestLimits& limits);

// Returns OK for a job id a client may send: at most kMaxJobIdBytes bytes, no control
// characters (no id the daemon gives is longer or has any). InvalidArgument naming `field`,
// without echoing the value, otherwise.
inline constexpr size_t kMaxJobIdBytes = 128;
absl::Status CheckJobId(const std::string& job_id, const std::string& field = "job_id");

// Returns OK for a ListJobs request: known states, a page of at most kMaxPageSize jobs, a
// page token of at most kMaxJobIdBytes bytes.
inline constexpr uint32_t kMaxPageSize = 1000;
absl::Status CheckRequest(const proto::ListJobsRequest& request);

// Counts calls of one kind in progress against a limit, with an optional queue of callers
// waiting for a turn. Thread-safe.
class CallSlots {
 public:
  // `flag` names the limit in errors, e.g. "--max-watch-streams".
  CallSlots(std::string flag, int limit, int max_waiting)
      : flag_(std::move(flag)), limit_(limit), max_waiting_(max_waiting) {}

  // A turn, held until destroyed.
  class Turn {
   public:
    explicit Turn(CallSlots* slots) : slots_(slots) {}
    Turn(Turn&& other) noexcept : slots_(other.slots_) { other.slots_ = nullptr; }
    Turn& operator=(Turn&&) = delete;
    ~Turn() {
      if (slots_ != nullptr) slots_->Release();
    }

   private:
    CallSlots* slots_;
  };

  // Returns a turn: at once when fewer than the limit hold one; otherwise after waiting in
  // line for one until `deadline`, or until `cancelled` returns true (looked at every
  // 100 ms). ResourceExhausted naming the flag when the line is full too, DeadlineExceeded
  // or Cancelled when the wait ends without a turn.
  absl::StatusOr<Turn> Acquire(absl::Time deadline, const std::function<bool()>& cancelled);

  // Returns the turns held now.
  int held() const {
    absl::MutexLock lock(&mu_);
    return held_;
  }

 private:
  void Release();

  const std::string flag_;
  const int limit_;
  const int max_waiting_;
  mutable absl::Mutex mu_;
  int held_ ABSL_GUARDED_BY(mu_) = 0;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace headroom::server

#endif  // HEADROOM_SERVER_REQUEST_LIMITS_H_
