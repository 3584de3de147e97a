// The planner behind the wire's Plan request: PlanOptions become planner options, a plan
// becomes a PlanResponse. headroomd's Plan and SubmitJob handlers call this; so does any
// client that wants the response without a daemon.
#ifndef HEADROOM_PLANNER_PLAN_REQUEST_H_
#define HEADROOM_PLANNER_PLAN_REQUEST_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "planner/cost_model.h"
#include "planner/memory_planner.h"
#include "planner/scratch_model.h"
#include "planner/section_search.h"
#include "proto/headroom.pb.h"
#include "util/cancellation.h"

namespace headroom::planner {

// The largest PlanOptions.alignment_bytes a request may ask for: a page. No device allocator
// aligns more coarsely, and each buffer wastes up to this much (2^40 gave a 15 TiB arena;
// 2^62 overflowed the offsets).
inline constexpr uint64_t kMaxAlignmentBytes = 4096;

// Returns OK if `options` holds only values a plan and a training run can honour: an
// alignment that is 0 or a power of two at most kMaxAlignmentBytes, a known host_memory, and
// an optimizer that CheckOptimizer accepts. Otherwise InvalidArgument naming the field under
// `prefix` ("options" in a PlanRequest, "plan" in a JobSpec or ProfileRequest) and its value,
// e.g. "plan.optimizer.learning_rate: nan is not a positive finite number (0: default)".
// The one place request options are checked: PlannerOptionsFromProto and
// runner::TrainerOptionsOf both call it.
absl::Status CheckPlanOptions(const proto::PlanOptions& options, const std::string& prefix);

// Returns OK if `optimizer` has a known kind and every hyperparameter that is set (see
// proto::Optimizer: learning_rate 0 and the optional fields unset mean the default) is in
// range: learning rate and epsilon positive and finite, momentum and betas in [0, 1), weight
// decay finite and >= 0. Else InvalidArgument naming `prefix`.field and the value.
absl::Status CheckOptimizer(const proto::Optimizer& optimizer, const std::string& prefix);

// Returns the planner options `options` asks for (optimizer, inference, alignment: default
// 256), or CheckPlanOptions(options, "options")'s error.
absl::StatusOr<PlannerOptions> PlannerOptionsFromProto(const proto::PlanOptions& options);

// Returns the summary and sections of `plan` (chosen for `budget_bytes`, 0: none, with its
// host pool counted against it or not) with the plain step's figures from `plain` and the
// name of the cost model the times come from.
proto::PlanResponse SectionPlanToProto(const SectionPlan& plan, const SectionPlan& plain,
                                       uint64_t budget_bytes, bool host_pool_in_budget,
                                       const std::string& cost_model);

// Returns the plan of `forward` under `options`:
//   - inference: the forward pass's sharing plan (no sections; a budget is InvalidArgument);
//   - otherwise the fastest sectioned plan whose peak fits options.budget_bytes (the plain
//     step when it is 0), with the Pareto frontier and the baselines' points appended when
//     options.frontier is set.
// What a plan needs to know of the backend it will run on.
struct PlanBackend {
  // Declares each node's kernel scratch (borrowed). Default none: no scratch.
  const ScratchModel* scratch = nullptr;
  // Whether its host memory is its device memory (the CPU backend): then a budget holds the
  // host pool too, unless PlanOptions.host_memory says otherwise. Default false.
  bool host_is_device_memory = false;
  // The cost-model preset a request that names no device is planned for, as the trainer on
  // this backend chooses its plan (runner::DefaultDevicePreset). Default "cpu".
  std::string device_preset = "cpu";
};

// Times come from `cost` when given (it must describe `forward`), else from the roofline of
// options.device. Every node's kernel scratch, and whether the host pool counts against the
// budget, are as `backend` says. FailedPrecondition, naming the smallest feasible budget,
// when nothing fits. Checks `cancel` (borrowed; null: no limit) between phases and inside
// every long loop (SearchOptions::cancel) and returns its status, DeadlineExceeded or
// Cancelled, once it fails.
absl::StatusOr<proto::PlanResponse> AnswerPlan(const graph::Graph& forward,
                                               const proto::PlanOptions& options,
                                               const CostModel* cost = nullptr,
                                               const PlanBackend& backend = {},
                                               const util::CancellationToken* cancel = nullptr);

}  // namespace headroom::planner

#endif  // HEADROOM_PLANNER_PLAN_REQUEST_H_
