#include "executor/trainer.h"

#include <malloc.h>

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "executor/backend_scratch.h"
#include "graph/mixed_precision.h"
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
                 const TrainerOptions& options, Backend* backend, SyntheticTask task)
    : forward_(forward),
      training_(std::move(training)),
      options_(options),
      backend_(backend),
      cost_(options.cost != nullptr
                ? options.cost
                : std::make_shared<planner::RooflineCostModel>(forward, options.device)),
      task_(std::move(task)) {
  options_.initial_values.clear();  // Used once, by Create() (Allocate()).
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const graph::Graph& forward,
                                                         Backend* backend,
                                                         const TrainerOptions& options) {
  if (options.max_rebuild_error < 0 || !std::isfinite(options.max_rebuild_error)) {
    return absl::InvalidArgumentError(absl::StrCat("max_rebuild_error ", options.max_rebuild_error,
                                                   ": needs a finite number >= 0"));
  }
  if (options.max_rebuild_error > 0) {
    if (options.check_rebuild_every <= 0) {
      return absl::InvalidArgumentError(
          "--max-rebuild-error needs --check-rebuild N: the error is measured on checked steps");
    }
    if (options.prefetch_to_device || options.gradients != nullptr ||
        options.batch_norm_sync != nullptr || options.cuts.has_value()) {
      return absl::InvalidArgumentError(
          "--max-rebuild-error replans during the run: not yet with prefetch to device, data "
          "parallel ranks or given cuts");
    }
  }
  // 0. The precision: bf16 trains the rewritten graph, which the trainer then owns; auto
  // plans both and keeps the one the planner's rule takes. Only then is the arena allocated.
  std::unique_ptr<Trainer> t;
  if (options.precision == proto::PRECISION_AUTO) {
    ASSIGN_OR_RETURN(t, PlannedAuto(forward, backend, options));
  } else {
    ASSIGN_OR_RETURN(t, Planned(forward, backend, options));
  }
  RETURN_IF_ERROR(t->Allocate(options.initial_values));
  return t;
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::PlannedAuto(const graph::Graph& forward,
                                                              Backend* backend,
                                                              const TrainerOptions& options) {
  if (options.cost != nullptr) {
    return absl::InvalidArgumentError(
        "precision auto: the given cost model (a measured profile) describes the float32 "
        "step only, so it cannot compare the two; plan without it");
  }
  TrainerOptions each = options;
  each.precision = proto::PRECISION_FP32;
  absl::StatusOr<std::unique_ptr<Trainer>> fp32 = Planned(forward, backend, each);
  each.precision = proto::PRECISION_BF16;
  absl::StatusOr<std::unique_ptr<Trainer>> bf16 = Planned(forward, backend, each);
  // Each plan's predicted step seconds, or why none fits.
  const auto seconds =
      [](const absl::StatusOr<std::unique_ptr<Trainer>>& t) -> absl::StatusOr<double> {
    if (!t.ok()) return t.status();
    return (*t)->plan_.step_seconds;
  };
  PrecisionChoice choice;
  choice.automatic = true;
  const auto record = [](const absl::StatusOr<double>& s, double& step_seconds,
                         std::string& refusal) {
    if (s.ok()) {
      step_seconds = *s;
    } else {
      refusal = std::string(s.status().message());
    }
  };
  record(seconds(fp32), choice.fp32_step_seconds, choice.fp32_refusal);
  record(seconds(bf16), choice.bf16_step_seconds, choice.bf16_refusal);
  ASSIGN_OR_RETURN(const proto::Precision precision,
                   graph::ChooseFasterPrecision(seconds(fp32), seconds(bf16)));
  std::unique_ptr<Trainer> chosen =
      precision == proto::PRECISION_BF16 ? *std::move(bf16) : *std::move(fp32);
  chosen->choice_ = std::move(choice);
  return chosen;
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Planned(const graph::Graph& forward,
                                                          Backend* backend,
                                                          const TrainerOptions& options) {
  if (options.precision == proto::PRECISION_BF16) {
    if (options.cost != nullptr) {
      return absl::InvalidArgumentError(
          "precision bf16: the given cost model (a measured profile) describes the float32 "
          "step, not the mixed-precision one; plan without it");
    }
    ASSIGN_OR_RETURN(graph::Graph mixed, graph::ToMixedPrecision(forward));
    auto owned = std::make_shared<const graph::Graph>(std::move(mixed));
    TrainerOptions as_given = options;
    as_given.precision = proto::PRECISION_FP32;  // The graph is already the rewrite.
    ASSIGN_OR_RETURN(std::unique_ptr<Trainer> t, Planned(*owned, backend, as_given));
    t->mixed_ = std::move(owned);
    return t;
  }
  // Every byte the backend's kernels need beyond their tensors is a tensor of the plan.
  const BackendScratchModel scratch(backend);
  planner::TrainingOptions training_options;
  training_options.optimizer = options.optimizer;
  training_options.scratch = &scratch;
  ASSIGN_OR_RETURN(planner::TrainingGraph training,
                   planner::TrainingGraph::Build(forward, training_options));
  ASSIGN_OR_RETURN(SyntheticTask task, SyntheticTask::Create(forward, options.seed));
  std::unique_ptr<Trainer> t(
      new Trainer(forward, std::move(training), options, backend, std::move(task)));
  ASSIGN_OR_RETURN(t->plan_, t->MakePlan(/*keep_every=*/0));
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
  return t;
}

absl::Status Trainer::Allocate(const std::vector<HostTensor>& initial_values) {
  // The arena, the host pool, then each parameter and buffer in turn straight into the arena
  // (the given value, else the seeded one).
  const graph::Graph& forward = forward_;
  ASSIGN_OR_RETURN(const auto given, ValuesByName(initial_values, forward));
  const uint64_t seed = options_.seed;
  return MakeExecutor([&](const StateTensorInfo& tensor, absl::Span<uint8_t> dst) {
    if (auto it = given.find(tensor.name); it != given.end()) {
      std::copy(it->second->bytes.begin(), it->second->bytes.end(), dst.begin());
    } else {
      FillInitialValue(forward, forward.FindTensor(tensor.name), seed, dst);
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<planner::SectionPlan> Trainer::MakePlan(int32_t keep_every) const {
  // Every reversible block rebuilt, given cuts, or the fastest plan that fits the budget
  // (rebuilding reversible blocks or keeping them, cuts, offload, placement). keep_every
  // k > 0 keeps an activation at least every k blocks along each chain.
  const TrainerOptions& options = options_;
  planner::SectionPlan plan;
  planner::SearchOptions search_options;
  search_options.allow_offload = options.allow_offload;
  search_options.host_pool_in_budget =
      planner::HostPoolInBudget(options.host_memory, backend_->host_is_device_memory());
  const bool reversible =
      options.rebuild_reversible && !forward_.reversible_blocks().empty() && keep_every != 1;
  if (reversible && options.parameters != proto::PARAMETERS_DEVICE) {
    return absl::InvalidArgumentError(
        "--parameters host or auto: parameters on the host are not yet planned beside rebuilt "
        "reversible blocks; give --no-reversible or --parameters device");
  }
  if (reversible && options.budget_bytes > 0) {
    ASSIGN_OR_RETURN(std::unique_ptr<planner::ReversibleSearch> search,
                     planner::ReversibleSearch::Create(forward_, training_, *cost_, search_options,
                                                       options.optimizer_state));
    ASSIGN_OR_RETURN(const uint64_t budget, PlanBudget(training_, options));
    return search->Plan(budget, keep_every);
  }
  if (reversible) {
    planner::ReversibleOptions blocks;
    if (keep_every > 1) blocks.blocks = planner::KeepOneInK(forward_, keep_every);
    ASSIGN_OR_RETURN(planner::ReversibleStep rev,
                     planner::ExpandReversible(forward_, training_, *cost_, blocks));
    ASSIGN_OR_RETURN(
        planner::MemoryPlan memory,
        planner::PlanScheduledGraph(rev.step.graph, rev.step.schedule,
                                    planner::kDefaultAlignmentBytes, planner::DefaultStrategies()));
    plan.strategy = keep_every > 1 ? absl::StrCat("reversible:keep_1_in_", keep_every)
                                   : std::string("reversible");
    plan.rebuilt_blocks = rev.rebuilt_blocks;
    std::sort(plan.rebuilt_blocks.begin(), plan.rebuilt_blocks.end());
    plan.peak_bytes = memory.arena_bytes;
    plan.step_seconds = rev.step.step_seconds;
    plan.step = std::make_shared<planner::SectionedStep>(std::move(rev.step));
    plan.memory = std::make_shared<planner::MemoryPlan>(std::move(memory));
    return plan;
  }
  if (options.cuts.has_value()) {
    ASSIGN_OR_RETURN(planner::SectionedStep step,
                     planner::ExpandSections(training_, *options.cuts, *cost_));
    ASSIGN_OR_RETURN(planner::MemoryPlan memory,
                     planner::PlanScheduledGraph(step.graph, step.schedule,
                                                 planner::kDefaultAlignmentBytes,
                                                 planner::DefaultStrategies()));
    plan.strategy = "given";
    plan.cuts = *options.cuts;
    plan.peak_bytes = memory.arena_bytes;
    plan.step_seconds = step.step_seconds;
    plan.host_pool_bytes = planner::HostPoolBytes(step, memory.alignment_bytes);
    plan.step = std::make_shared<planner::SectionedStep>(std::move(step));
    plan.memory = std::make_shared<planner::MemoryPlan>(std::move(memory));
    return plan;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<planner::PlacementSearch> search,
                   planner::PlacementSearch::Create(training_, *cost_, search_options,
                                                    options.optimizer_state, options.parameters));
  if (options.budget_bytes > 0) {
    ASSIGN_OR_RETURN(const uint64_t budget, PlanBudget(training_, options));
    return search->Plan(budget);
  }
  return search->Unconstrained();
}

absl::Status Trainer::MakeExecutor(InitialValueWriter initial) {
  ExecutorOptions executor_options;
  executor_options.optimizer = options_.optimizer_params;
  executor_options.seed = options_.seed;
  executor_options.events = options_.events;
  executor_options.cancel = options_.cancel;
  executor_options.capture = options_.capture;
  executor_options.gradients = options_.gradients;
  executor_options.batch_norm_sync = options_.batch_norm_sync;
  executor_options.check_rebuild_every = options_.check_rebuild_every;
  executor_options.prefetch_to_device = options_.prefetch_to_device;
  ASSIGN_OR_RETURN(executor_, Executor::Create(forward_, plan_.step, plan_.memory, backend_,
                                               initial, executor_options));
  // The staging slot is planned memory too.
  plan_.peak_bytes = executor_->predicted_peak_bytes();
  largest_planned_peak_bytes_ = std::max(largest_planned_peak_bytes_, plan_.peak_bytes);
  // The heap the planner freed goes back to the system.
  malloc_trim(0);
  return absl::OkStatus();
}

absl::StatusOr<StepResult> Trainer::Checked(absl::StatusOr<StepResult> result) {
  if (!result.ok() || options_.max_rebuild_error <= 0) return result;
  const double error = result->max_rebuild_error;
  if (error < 0) return result;  // Not a checked step.
  if (!replans_.empty() && replans_.back().error_after < 0) replans_.back().error_after = error;
  if (error <= options_.max_rebuild_error || plan_.rebuilt_blocks.empty() || keep_every_ == 1) {
    return result;
  }
  // Halve k: the longest chain over 2 first, then over 4, ... down to 1 (keep everything).
  const int32_t k =
      std::max(1, (keep_every_ == 0 ? planner::LongestChain(forward_) : keep_every_) / 2);
  RETURN_IF_ERROR(Replan(k, error));
  return result;
}

absl::Status Trainer::Replan(int32_t keep_every, double error) {
  RebuildReplan replan;
  replan.after_step = next_step_ - 1;
  replan.keep_every = keep_every;
  replan.error_before = error;
  replan.rebuilt_before = static_cast<int32_t>(plan_.rebuilt_blocks.size());
  // 1. The plan (the old arena still held: the planner's heap comes on top of it once).
  absl::StatusOr<planner::SectionPlan> plan = MakePlan(keep_every);
  if (!plan.ok()) {
    if (plan.status().code() != absl::StatusCode::kFailedPrecondition) return plan.status();
    // Nothing that keeps more fits the budget: go on under the current plan.
    replan.failure = std::string(plan.status().message());
    replans_.push_back(std::move(replan));
    keep_every_ = 1;
    return absl::OkStatus();
  }
  // 2. The state through host memory, the old arena freed before the new one is taken; the
  //    same parameters, optimizer state, step and learning rate go on.
  ASSIGN_OR_RETURN(const ExecutorState state, executor_->SaveState());
  const double rate = executor_->learning_rate();
  executor_.reset();
  plan_ = *std::move(plan);
  RETURN_IF_ERROR(MakeExecutor([](const StateTensorInfo&, absl::Span<uint8_t> dst) {
    std::fill(dst.begin(), dst.end(), 0);  // RestoreState() sets every one.
    return absl::OkStatus();
  }));
  RETURN_IF_ERROR(executor_->RestoreState(state));
  executor_->set_learning_rate(rate);
  keep_every_ = keep_every;
  replan.rebuilt_after = static_cast<int32_t>(plan_.rebuilt_blocks.size());
  replan.strategy = plan_.strategy;
  replan.peak_bytes = plan_.peak_bytes;
  // Nothing rebuilt: nothing to measure, the activations are the forward's.
  if (plan_.rebuilt_blocks.empty()) replan.error_after = 0;
  replans_.push_back(std::move(replan));
  return absl::OkStatus();
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

absl::StatusOr<StepResult> Trainer::Step() {
  const int64_t step = next_step_++;
  return Checked(executor_->RunStep(task_.Batch(step)));
}

absl::StatusOr<StepResult> Trainer::StepOn(const std::vector<HostTensor>& batch) {
  ++next_step_;
  return Checked(executor_->RunStep(batch));
}

absl::StatusOr<StepResult> Trainer::StepOnStaged(const std::vector<HostTensor>* next) {
  if (!executor_->batch_staged()) {
    return absl::FailedPreconditionError("trainer: no batch is staged (StageBatch())");
  }
  ++next_step_;
  return executor_->RunStagedStep(next);
}

}  // namespace headroom::executor
