// Training a forward graph end to end: plan the step for a memory budget (or take given
// cuts), lay out the arena, initialise the weights, and run steps on the synthetic task.
// What `headroom train` and the daemon's jobs call.
//
// Create() plans first and allocates only once a plan fits, so a budget below the feasible
// minimum fails with the planner's message before any memory is taken. Then call Step()
// repeatedly. The initial weights live only in the arena once placed (State() before the
// first step reads them back), and the heap the planner freed goes back to the system.
// Borrows the forward graph and the backend, which must outlive it. Thread-compatible.
#ifndef HEADROOM_EXECUTOR_TRAINER_H_
#define HEADROOM_EXECUTOR_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "executor/backend.h"
#include "executor/executor.h"
#include "executor/synthetic_data.h"
#include "graph/graph.h"
#include "planner/cost_model.h"
#include "planner/placement_search.h"
#include "planner/section_search.h"
#include "planner/training_graph.h"
#include "profiler/events.h"
#include "proto/headroom.pb.h"

namespace headroom::executor {

struct TrainerOptions {
  // Seeds the initial weights, the synthetic batches and dropout. Default 1.
  uint64_t seed = 1;
  // The device memory budget the plan must fit; 0 plans the plain step (no sections).
  // ReserveFixedCost() lowers it by what the backend itself holds.
  uint64_t budget_bytes = 0;
  // Let the plan offload cached section inputs to host memory. Default true.
  bool allow_offload = true;
  // Whether the host pool counts against budget_bytes: HOST_MEMORY_BACKEND (default) does
  // where the backend's host memory is its device memory (the CPU backend).
  proto::HostMemory host_memory = proto::HOST_MEMORY_BACKEND;
  // Where the search keeps the optimizer state (planner/placement_search.h): on the device
  // (default), on the host, or either (auto). Given `cuts` say it themselves.
  proto::OptimizerState optimizer_state = proto::OPTIMIZER_STATE_DEVICE;
  // Where the search keeps the parameters between uses (planner/placement_search.h): on the
  // device (default), on the host (needs optimizer_state host or auto), or either (auto).
  proto::ParameterPlacement parameters = proto::PARAMETERS_DEVICE;
  // The precision of the step (graph/mixed_precision.h): PRECISION_FP32 (default) trains
  // the forward graph as given; PRECISION_BF16 plans and runs its bf16 mixed-precision
  // rewrite (the trainer owns it; forward() returns it), which needs the backend's bf16
  // kernels; PRECISION_AUTO plans both and runs the one `headroom plan --precision auto`
  // would take (graph::ChooseFasterPrecision over the two plans' predicted step seconds,
  // each planned as this trainer plans: its budget, placement search and the backend's
  // scratch; Trainer::precision_choice() says what it compared). BF16 and AUTO refuse a
  // given `cost` (a measured profile describes the float32 step).
  proto::Precision precision = proto::PRECISION_FP32;
  // Use exactly these cuts (and offloads) instead of searching; for tests and experiments.
  std::optional<planner::SectionCuts> cuts;
  // The optimizer (default SGD with momentum 0.9, learning rate 0.01).
  proto::Optimizer::Kind optimizer = proto::Optimizer::KIND_SGD_MOMENTUM;
  OptimizerParams optimizer_params;
  // The device the planner's cost model describes. Default the "cpu" preset.
  planner::DeviceSpec device = planner::DevicePreset("cpu").value();
  // The cost model to plan with (a profile's measured costs, for one); it must describe
  // this forward graph. Default none: the roofline of `device`.
  std::shared_ptr<const planner::CostModel> cost;
  // Where the executor reports what it does (borrowed; must outlive the trainer). Default
  // none.
  profiler::EventSink* events = nullptr;
  // Checked before every node; once true, Step() stops with Cancelled (borrowed). Default
  // none.
  const std::atomic<bool>* cancel = nullptr;
  // Values of parameters and buffers, by name, in place of their seeded initialisation
  // (an imported model's weights). Each must match its tensor's shape and dtype; tensors
  // not named keep the seeded values. Default none.
  std::vector<HostTensor> initial_values;
  // Forward tensors to copy out in every step (ExecutorOptions::capture). Default none.
  std::vector<std::string> capture;
  // Data-parallel training: ExecutorOptions::gradients (borrowed). Default none.
  GradientExchange* gradients = nullptr;
  // Batch norm over the global batch of data-parallel ranks: ExecutorOptions::
  // batch_norm_sync (borrowed). Default none.
  BatchNormSync* batch_norm_sync = nullptr;
  // Let the plan rebuild reversible blocks in the backward pass instead of keeping their
  // activations (planner/reversible.h). Without budget_bytes every block is rebuilt (cuts
  // are not used); with it the search chooses per block, beside cuts, offload and placement,
  // the fastest plan that fits (planner/reversible_search.h). False keeps everything, as a
  // graph without blocks. Default false.
  bool rebuild_reversible = false;
  // ExecutorOptions::check_rebuild_every. Default 0.
  int64_t check_rebuild_every = 0;
  // When a checked step's max_rebuild_error passes this (> 0), the trainer replans keeping
  // an activation at least every k blocks along each chain of reversible blocks (k = the
  // longest chain / 2 the first time, halved at each replan down to 1: keep everything) and
  // goes on from the same step with the same state (Trainer::replans()). Needs
  // check_rebuild_every > 0; not with prefetch_to_device, gradients, batch_norm_sync or
  // cuts. Default 0: never.
  double max_rebuild_error = 0;
  // Prefetch to device (ExecutorOptions::prefetch_to_device): the next batch is copied from
  // pinned host memory into a staging slot of the arena during the current step (StageBatch,
  // StepOnStaged). The slot's bytes (StagingSlotBytes) count in the plan's peak and come out
  // of budget_bytes. Worth it where copies overlap compute (CUDA); on the CPU backend the
  // copy is a memcpy either way. Default false.
  bool prefetch_to_device = false;
};

// For a run that owns the device (the command line's train and profile), whose budget is
// all the device memory it may hold: lowers options.budget_bytes (where set) by the
// backend's fixed_device_bytes(), so that the plan and the context and handles fit it
// together. FailedPrecondition, changing nothing, where the fixed cost takes it all.
// headroomd instead keeps a job's budget for its plan and adds the fixed cost at admission.
absl::Status ReserveFixedCost(const Backend& backend, TrainerOptions& options);

// One replan for TrainerOptions::max_rebuild_error.
struct RebuildReplan {
  // The step whose check passed the threshold; the next step runs under the new plan.
  int64_t after_step = 0;
  // The new plan keeps an activation at least every `keep_every` blocks (1: every block).
  int32_t keep_every = 0;
  // max_rebuild_error of that step, and of the first checked step under the new plan (0
  // when it rebuilds nothing; -1 until measured).
  double error_before = 0;
  double error_after = -1;
  // Blocks rebuilt before and after; the new plan's strategy and peak.
  int32_t rebuilt_before = 0;
  int32_t rebuilt_after = 0;
  std::string strategy;
  uint64_t peak_bytes = 0;
  // Not empty when no plan keeping more fitted the budget (the planner's message): the run
  // went on under the plan it had, and replans no more.
  std::string failure;
};

// What TrainerOptions::precision AUTO compared (Trainer::precision_choice()).
struct PrecisionChoice {
  // Whether the precision was chosen (AUTO); false: given. The rest is set only when true.
  bool automatic = false;
  // The predicted step seconds of the fastest plan that fits in each precision; -1 where
  // none fits, and then the planner's refusal.
  double fp32_step_seconds = -1;
  double bf16_step_seconds = -1;
  std::string fp32_refusal;
  std::string bf16_refusal;
};

class Trainer {
 public:
  // Returns a trainer with its plan made and its arena allocated. FailedPrecondition (the
  // planner's message) when no plan fits the budget; InvalidArgument for a graph the
  // synthetic task or the backend cannot take.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const graph::Graph& forward,
                                                         Backend* backend,
                                                         const TrainerOptions& options);

  // Runs the next step on the next synthetic batch.
  absl::StatusOr<StepResult> Step();

  // Runs the next step on `batch` (every input and label tensor, by name) instead.
  absl::StatusOr<StepResult> StepOn(const std::vector<HostTensor>& batch);

  // Stages `batch` for the next StepOnStaged() (Executor::StageBatch).
  // REQUIRES: options.prefetch_to_device.
  absl::Status StageBatch(const std::vector<HostTensor>& batch) {
    return executor_->StageBatch(batch);
  }
  // Runs the next step on the staged batch, staging `next` (when given) during it
  // (Executor::RunStagedStep): the same numbers as StepOn() on that batch.
  absl::StatusOr<StepResult> StepOnStaged(const std::vector<HostTensor>* next);
  bool prefetch_to_device() const { return executor_->staging_bytes() > 0; }
  // Forgets a staged batch (a run that stopped before its step).
  void DiscardStagedBatch() { executor_->DiscardStagedBatch(); }

  // Returns the loss of the forward pass on `batch` in inference mode and the forward
  // tensors `read` names, inside the training arena without raising its peak
  // (Executor::Evaluate). The parameters and steps_run() do not change.
  absl::StatusOr<EvalResult> Evaluate(const std::vector<HostTensor>& batch,
                                      absl::Span<const std::string> read) {
    return executor_->Evaluate(batch, read);
  }

  // Returns what resuming needs: every parameter, buffer and optimizer-state tensor now,
  // and the steps run (steps_run()). It holds the whole state in host memory; a checkpoint
  // writer reads it one tensor at a time with StateTensors() and ReadStateTensor().
  absl::StatusOr<ExecutorState> SaveState() const { return executor_->SaveState(); }

  // Returns the name, shape, dtype and size of every tensor SaveState() saves, in its order.
  const std::vector<StateTensorInfo>& StateTensors() const { return executor_->StateTensors(); }

  // Copies tensor `index` of StateTensors() as it is now into `host_dst` (exactly its bytes),
  // after waiting for the device. OutOfRange or InvalidArgument naming the tensor otherwise.
  absl::Status ReadStateTensor(size_t index, absl::Span<uint8_t> host_dst) const {
    return executor_->ReadStateTensor(index, host_dst);
  }

  // Goes on from `state` (SaveState() of a trainer of the same graph, optimizer and seed,
  // under any plan): the next Step() runs step state.steps_run on its batch. InvalidArgument
  // naming a missing or mismatched tensor.
  absl::Status RestoreState(const ExecutorState& state);
  // The same from borrowed values (a checkpoint's, read in place): `tensors` by name and
  // `steps_run` steps run.
  absl::Status RestoreState(int64_t steps_run, absl::Span<const StateTensorView> tensors);

  // Steps run so far (restored ones included).
  int64_t steps_run() const { return next_step_; }

  // Sets the learning rate of the next steps (a schedule's; Executor::set_learning_rate).
  void SetLearningRate(double rate) { executor_->set_learning_rate(rate); }

  // Returns every parameter and buffer now.
  absl::StatusOr<std::vector<HostTensor>> State() const { return executor_->ReadState(); }

  // The forward graph it trains.
  const graph::Graph& forward() const { return forward_; }
  // The plan the steps run under now.
  const planner::SectionPlan& plan() const { return plan_; }
  // Returns the precision the step runs in: PRECISION_BF16 for the rewrite, else FP32.
  proto::Precision precision() const {
    return mixed_ != nullptr ? proto::PRECISION_BF16 : proto::PRECISION_FP32;
  }
  // What choosing the precision compared (automatic false where it was given).
  const PrecisionChoice& precision_choice() const { return choice_; }
  // The largest peak of the plans the steps ran under (replans change the plan).
  uint64_t largest_planned_peak_bytes() const { return largest_planned_peak_bytes_; }
  // The replans TrainerOptions::max_rebuild_error made, in order.
  const std::vector<RebuildReplan>& replans() const { return replans_; }
  const Executor& executor() const { return *executor_; }
  const SyntheticTask& task() const { return task_; }

 private:
  Trainer(const graph::Graph& forward, planner::TrainingGraph training,
          const TrainerOptions& options, Backend* backend, SyntheticTask task);

  // Returns a trainer of options.precision FP32 or BF16 with its plan made, its arena not
  // yet allocated (Create()'s errors).
  static absl::StatusOr<std::unique_ptr<Trainer>> Planned(const graph::Graph& forward,
                                                          Backend* backend,
                                                          const TrainerOptions& options);
  // Returns Planned() of the precision graph::ChooseFasterPrecision takes between the two,
  // its choice_ set.
  static absl::StatusOr<std::unique_ptr<Trainer>> PlannedAuto(const graph::Graph& forward,
                                                              Backend* backend,
                                                              const TrainerOptions& options);
  // Makes executor_ for plan_, each parameter and buffer from `initial_values` (by name),
  // else its seeded initial value.
  absl::Status Allocate(const std::vector<HostTensor>& initial_values);
  // Returns the plan of options_ (keep_every: ReversibleSearch::Plan's; 0 unrestricted).
  absl::StatusOr<planner::SectionPlan> MakePlan(int32_t keep_every) const;
  // Makes executor_ for plan_, its state written by `initial`.
  absl::Status MakeExecutor(InitialValueWriter initial);
  // Returns `result`, replanning first where its rebuild error passes the threshold.
  absl::StatusOr<StepResult> Checked(absl::StatusOr<StepResult> result);
  // Replans keeping an activation every `keep_every` blocks after a step with `error`.
  absl::Status Replan(int32_t keep_every, double error);

  const graph::Graph& forward_;
  // The bf16 rewrite forward_ refers to, with PRECISION_BF16; else null.
  std::shared_ptr<const graph::Graph> mixed_;
  planner::TrainingGraph training_;
  TrainerOptions options_;
  Backend* const backend_;
  std::shared_ptr<const planner::CostModel> cost_;
  SyntheticTask task_;
  planner::SectionPlan plan_;
  std::unique_ptr<Executor> executor_;
  int64_t next_step_ = 0;
  uint64_t largest_planned_peak_bytes_ = 0;
  // The k of the last replan (0: none yet; 1: every block kept, or no replan fits).
  int32_t keep_every_ = 0;
  std::vector<RebuildReplan> replans_;
  PrecisionChoice choice_;
};

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_TRAINER_H_
