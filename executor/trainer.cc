#include "executor/trainer.h"

#include <malloc.h>

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "executor/backend_scratch.h"
#include "graph/summary.h"
#include "planner/gradient_buckets.h"
#include "planner/memory_planner.h"
#include "planner/reversible.h"
#include "planner/reversible_search.h"
#include "planner/sections.h"
#include "util/status_macros.h"

namespace headroom::executor {
namespace {

// Returns `values` by name, checked against `forward`: InvalidArgument naming a value that
// matches no parameter or buffer, or one of another shape or dtype.
absl::StatusOr<absl::flat_hash_map<std::string, const HostTensor*>> ValuesByName(
    const std::vector<HostTensor>& values, const graph::Graph& forward) {
  absl::flat_hash_map<std::string, const HostTensor*> by_name;
  for (const HostTensor& v : values) {
    const graph::TensorId t = forward.FindTensor(v.name);
    const bool state = t >= 0 && (forward.tensor(t).role == proto::ROLE_PARAMETER ||
                                  forward.tensor(t).role == proto::ROLE_BUFFER);
    if (!state) {
      return absl::InvalidArgumentError(absl::StrCat(
          "initial value '", v.name, "' names no parameter or buffer of the graph"));
    }
    const graph::Tensor& tensor = forward.tensor(t);
    if (tensor.shape != v.shape || tensor.dtype != v.dtype || tensor.bytes() != v.bytes.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "initial value '", v.name, "' is ", graph::ShapeString(v.shape), " ",
          graph::DTypeName(v.dtype), "; the graph's tensor is ", graph::ShapeString(tensor.shape),
          " ", graph::DTypeName(tensor.dtype)));
    }
    by_name[v.name] = &v;
  }
  return by_name;
}

// Returns the budget the step's plan gets: options.budget_bytes less the staging slot of
// prefetch_to_device. FailedPrecondition when the slot takes it all.
absl::StatusOr<uint64_t> PlanBudget(const planner::TrainingGraph& training,
                                    const TrainerOptions& options) {
  // With ranks, the gradient buckets are laid out beside the plan: at most their bytes more.
  const uint64_t buckets =
      options.gradients != nullptr ? planner::GradientBucketBytes(training) : 0;
  if (options.budget_bytes <= buckets) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the budget of ", graph::HumanBytes(options.budget_bytes), " leaves nothing for the ",
        "step: the data-parallel gradient buckets alone take ", graph::HumanBytes(buckets)));
  }
  if (!options.prefetch_to_device) return options.budget_bytes - buckets;
  const uint64_t slot = StagingSlotBytes(training) + buckets;
  if (slot + planner::kDefaultAlignmentBytes > options.budget_bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the budget of ", graph::HumanBytes(options.budget_bytes), " leaves nothing for the ",
        "step: prefetch to device's staging slot alone takes ", graph::HumanBytes(slot)));
  }
  // Rounded down to the alignment, so that the slot placed after the plan's aligned end
  // still ends within the budget.
  return (options.budget_bytes - slot) / planner::kDefaultAlignmentBytes *
         planner::kDefaultAlignmentBytes;
}

}  // namespace

absl::Status ReserveFixedCost(const Backend& backend, TrainerOptions& options) {
  const uint64_t fixed = backend.fixed_device_bytes();
  if (options.budget_bytes == 0 || fixed == 0) return absl::OkStatus();
  if (fixed >= options.budget_bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the budget of ", graph::HumanBytes(options.budget_bytes), " leaves nothing for the ",
        "step: the backend's context and handles alone hold ", graph::HumanBytes(fixed),
        " of device memory"));
  }
  options.budget_bytes -= fixed;
  return absl::OkStatus();
}

Trainer::Trainer(const graph::Graph& forward, planner::TrainingGraph training,
                 const TrainerOptions& options, SyntheticTask task)
    : forward_(forward),
      training_(std::move(training)),
      cost_(options.cost != nullptr
                ? options.cost
                : std::make_shared<planner::RooflineCostModel>(forward, options.device)),
      task_(std::move(task)) {}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const graph::Graph& forward,
                                                         Backend* backend,
                                                         const TrainerOptions& options) {
  // Every byte the backend's kernels need beyond their tensors is a tensor of the plan.
  const BackendScratchModel scratch(backend);
  planner::TrainingOptions training_options;
  training_options.optimizer = options.optimizer;
  training_options.scratch = &scratch;
  ASSIGN_OR_RETURN(planner::TrainingGraph training,
                   planner::TrainingGraph::Build(forward, training_options));
  ASSIGN_OR_RETURN(SyntheticTask task, SyntheticTask::Create(forward, options.seed));
  std::unique_ptr<Trainer> t(new Trainer(forward, std::move(training), options, std::move(task)));

  // 1. Plan: every reversible block rebuilt, given cuts, or the fastest plan that fits the
  //    budget (rebuilding reversible blocks or keeping them, cuts, offload, placement).
  planner::SearchOptions search_options;
  search_options.allow_offload = options.allow_offload;
  search_options.host_pool_in_budget =
      planner::HostPoolInBudget(options.host_memory, backend->host_is_device_memory());
  const bool reversible = options.rebuild_reversible && !forward.reversible_blocks().empty();
  if (reversible && options.parameters != proto::PARAMETERS_DEVICE) {
    return absl::InvalidArgumentError(
        "--parameters host or auto: parameters on the host are not yet planned beside rebuilt "
        "reversible blocks; give --no-reversible or --parameters device");
  }
  if (reversible && options.budget_bytes > 0) {
    ASSIGN_OR_RETURN(std::unique_ptr<planner::ReversibleSearch> search,
                     planner::ReversibleSearch::Create(forward, t->training_, *t->cost_,
                                                       search_options, options.optimizer_state));
    ASSIGN_OR_RETURN(const uint64_t budget, PlanBudget(t->training_, options));
    ASSIGN_OR_RETURN(t->plan_, search->Plan(budget));
  } else if (reversible) {
    ASSIGN_OR_RETURN(planner::ReversibleStep rev,
                     planner::ExpandReversible(forward, t->training_, *t->cost_));
    ASSIGN_OR_RETURN(
        planner::MemoryPlan memory,
        planner::PlanScheduledGraph(rev.step.graph, rev.step.schedule,
                                    planner::kDefaultAlignmentBytes, planner::DefaultStrategies()));
    t->plan_.strategy = "reversible";
    t->plan_.rebuilt_blocks = rev.rebuilt_blocks;
    std::sort(t->plan_.rebuilt_blocks.begin(), t->plan_.rebuilt_blocks.end());
    t->plan_.peak_bytes = memory.arena_bytes;
    t->plan_.step_seconds = rev.step.step_seconds;
    t->plan_.step = std::make_shared<planner::SectionedStep>(std::move(rev.step));
    t->plan_.memory = std::make_shared<planner::MemoryPlan>(std::move(memory));
  } else if (options.cuts.has_value()) {
    ASSIGN_OR_RETURN(planner::SectionedStep step,
                     planner::ExpandSections(t->training_, *options.cuts, *t->cost_));
    ASSIGN_OR_RETURN(planner::MemoryPlan memory,
                     planner::PlanScheduledGraph(step.graph, step.schedule,
                                                 planner::kDefaultAlignmentBytes,
                                                 planner::DefaultStrategies()));
    t->plan_.strategy = "given";
    t->plan_.cuts = *options.cuts;
    t->plan_.peak_bytes = memory.arena_bytes;
    t->plan_.step_seconds = step.step_seconds;
    t->plan_.host_pool_bytes = planner::HostPoolBytes(step, memory.alignment_bytes);
    t->plan_.step = std::make_shared<planner::SectionedStep>(std::move(step));
    t->plan_.memory = std::make_shared<planner::MemoryPlan>(std::move(memory));
  } else {
    ASSIGN_OR_RETURN(std::unique_ptr<planner::PlacementSearch> search,
                     planner::PlacementSearch::Create(t->training_, *t->cost_, search_options,
                                                      options.optimizer_state, options.parameters));
    if (options.budget_bytes > 0) {
      ASSIGN_OR_RETURN(const uint64_t budget, PlanBudget(t->training_, options));
      ASSIGN_OR_RETURN(t->plan_, search->Plan(budget));
    } else {
      ASSIGN_OR_RETURN(t->plan_, search->Unconstrained());
    }
  }

  // With ranks, the gradient buckets are tensors of the plan, laid out beside the rest.
  if (options.gradients != nullptr) {
    ASSIGN_OR_RETURN(t->plan_,
                     planner::AddGradientBuckets(t->plan_, options.gradients->bucket_bytes()));
    const uint64_t staging = options.prefetch_to_device ? StagingSlotBytes(t->training_) : 0;
    if (options.budget_bytes > 0 && t->plan_.peak_bytes + staging > options.budget_bytes) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the budget of ", graph::HumanBytes(options.budget_bytes), ": the plan for it with the ",
          "gradient buckets laid out beside it takes ", graph::HumanBytes(t->plan_.peak_bytes)));
    }
  }

  // 2. Only now allocate: the arena, the host pool, then each parameter and buffer in turn
  //    straight into the arena (the given value, else the seeded one), and hand the heap
  //    freed since back to the system.
  ASSIGN_OR_RETURN(const auto given, ValuesByName(options.initial_values, forward));
  auto initial = [&](const StateTensorInfo& tensor, absl::Span<uint8_t> dst) {
    if (auto it = given.find(tensor.name); it != given.end()) {
      std::copy(it->second->bytes.begin(), it->second->bytes.end(), dst.begin());
    } else {
      FillInitialValue(forward, forward.FindTensor(tensor.name), options.seed, dst);
    }
    return absl::OkStatus();
  };
  ExecutorOptions executor_options;
  executor_options.optimizer = options.optimizer_params;
  executor_options.seed = options.seed;
  executor_options.events = options.events;
  executor_options.cancel = options.cancel;
  executor_options.capture = options.capture;
  executor_options.gradients = options.gradients;
  executor_options.batch_norm_sync = options.batch_norm_sync;
  executor_options.check_rebuild_every = options.check_rebuild_every;
  executor_options.prefetch_to_device = options.prefetch_to_device;
  ASSIGN_OR_RETURN(t->executor_,
                   Executor::Create(forward, t->plan_.step, t->plan_.memory, backend,
                                    initial, executor_options));
  // The staging slot is planned memory too.
  t->plan_.peak_bytes = t->executor_->predicted_peak_bytes();
  malloc_trim(0);
  return t;
}

absl::Status Trainer::RestoreState(const ExecutorState& state) {
  RETURN_IF_ERROR(executor_->RestoreState(state));
  next_step_ = state.steps_run;
  return absl::OkStatus();
}

absl::Status Trainer::RestoreState(int64_t steps_run, absl::Span<const StateTensorView> tensors) {
  RETURN_IF_ERROR(executor_->RestoreState(steps_run, tensors));
  next_step_ = steps_run;
  return absl::OkStatus();
}

absl::StatusOr<StepResult> Trainer::Step() { return executor_->RunStep(task_.Batch(next_step_++)); }

absl::StatusOr<StepResult> Trainer::StepOn(const std::vector<HostTensor>& batch) {
  ++next_step_;
  return executor_->RunStep(batch);
}

absl::StatusOr<StepResult> Trainer::StepOnStaged(const std::vector<HostTensor>* next) {
  if (!executor_->batch_staged()) {
    return absl::FailedPreconditionError("trainer: no batch is staged (StageBatch())");
  }
  ++next_step_;
  return executor_->RunStagedStep(next);
}

}  // namespace headroom::executor
