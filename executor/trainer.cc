#include "executor/trainer.h"

#include "planner/memory_planner.h"
#include "planner/sections.h"
#include "util/status_macros.h"

namespace headroom::executor {

Trainer::Trainer(const graph::Graph& forward, planner::TrainingGraph training,
                 const TrainerOptions& options, SyntheticTask task)
    : forward_(forward),
      training_(std::move(training)),
      cost_(options.cost != nullptr
                ? options.cost
                : std::make_shared<planner::RooflineCostModel>(forward, options.device)),
      options_(options),
      task_(std::move(task)) {}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const graph::Graph& forward,
                                                         Backend* backend,
                                                         const TrainerOptions& options) {
  planner::TrainingOptions training_options;
  training_options.optimizer = options.optimizer;
  ASSIGN_OR_RETURN(planner::TrainingGraph training,
                   planner::TrainingGraph::Build(forward, training_options));
  ASSIGN_OR_RETURN(SyntheticTask task, SyntheticTask::Create(forward, options.seed));
  std::unique_ptr<Trainer> t(new Trainer(forward, std::move(training), options, std::move(task)));

  // 1. Plan: given cuts, or the fastest plan that fits the budget.
  if (options.cuts.has_value()) {
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
    t->plan_.step = std::make_shared<planner::SectionedStep>(std::move(step));
    t->plan_.memory = std::make_shared<planner::MemoryPlan>(std::move(memory));
  } else {
    planner::SearchOptions search_options;
    search_options.allow_offload = options.allow_offload;
    ASSIGN_OR_RETURN(std::unique_ptr<planner::SectionSearch> search,
                     planner::SectionSearch::Create(t->training_, *t->cost_, search_options));
    if (options.budget_bytes > 0) {
      ASSIGN_OR_RETURN(t->plan_, search->Plan(options.budget_bytes));
    } else {
      ASSIGN_OR_RETURN(t->plan_, search->Unconstrained());
    }
  }

  // 2. Only now allocate: the arena, the host pool, the initial state.
  t->initial_state_ = InitialState(forward, options.seed);
  ExecutorOptions executor_options;
  executor_options.optimizer = options.optimizer_params;
  executor_options.seed = options.seed;
  executor_options.events = options.events;
  executor_options.cancel = options.cancel;
  ASSIGN_OR_RETURN(t->executor_,
                   Executor::Create(forward, t->plan_.step, t->plan_.memory, backend,
                                    t->initial_state_, executor_options));
  return t;
}

absl::Status Trainer::RestoreState(const ExecutorState& state) {
  RETURN_IF_ERROR(executor_->RestoreState(state));
  next_step_ = state.steps_run;
  return absl::OkStatus();
}

absl::StatusOr<StepResult> Trainer::Step() { return executor_->RunStep(task_.Batch(next_step_++)); }

}  // namespace headroom::executor
