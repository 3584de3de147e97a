// The fit loop's built-in callbacks (executor/fit.h): a learning-rate schedule, evaluation
// on held-out images, early stopping, checkpoints, and progress with the time left. A
// command adds them in this order, the checkpoint writer last, so that a checkpoint holds
// what the others did in the same hook.
//
// Each is thread-compatible and used by one loop.
#ifndef HEADROOM_EXECUTOR_CALLBACKS_H_
#define HEADROOM_EXECUTOR_CALLBACKS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/image_dataset.h"
#include "executor/fit.h"
#include "executor/image_task.h"
#include "executor/lr_schedule.h"

namespace headroom::executor {

// Sets the trainer's learning rate before every step to the schedule's rate of that step.
// Stateless: the rate depends on the step alone (lr_schedule.h), which the trainer's state
// holds.
class LearningRateCallback : public Callback {
 public:
  explicit LearningRateCallback(const LearningRateSchedule& schedule) : schedule_(schedule) {}
  std::string name() const override { return "lr_schedule"; }
  absl::Status OnStepBegin(FitLoop& fit, int64_t step) override;
  // The rate the last step ran with (the schedule's base before the first).
  double last_rate() const { return last_rate_; }

 private:
  const LearningRateSchedule schedule_;
  double last_rate_ = schedule_.base_rate;
};

// Evaluates held-out items at the end of every `every_epochs`-th epoch and of the last
// (EvaluateImages: inside the training arena, in inference mode): sets the metrics
// "eval_loss" (mean cross-entropy) and "eval_accuracy" (top-1, a fraction). Internal when
// the arena's high-water mark passes the plan's peak (a bug). Its state is the last result.
class EvaluationCallback : public Callback {
 public:
  // Borrows `set`, which must outlive it. REQUIRES: every_epochs >= 1, items not empty.
  EvaluationCallback(const data::ImageDataset* set, std::vector<int64_t> items,
                     int64_t every_epochs);
  std::string name() const override { return "evaluation"; }
  absl::Status OnEpochEnd(FitLoop& fit, int64_t epoch) override;
  std::string SaveState() const override;
  absl::Status RestoreState(absl::string_view state) override;

  // The last evaluation (this run's or a restored one), if any.
  const std::optional<EvalMetrics>& last() const { return last_; }
  // Seconds spent evaluating in this run.
  double seconds() const { return seconds_; }

 private:
  const data::ImageDataset* const set_;
  const std::vector<int64_t> items_;
  const int64_t every_epochs_;
  std::optional<EvalMetrics> last_;
  double seconds_ = 0;
};

struct EarlyStoppingOptions {
  // The metric watched (required): "eval_loss", "eval_accuracy", "train_loss".
  std::string metric = "eval_loss";
  // Whether larger is better. Default false (a loss).
  bool higher_is_better = false;
  // Evaluations without improvement before the run stops (>= 1). Default 3.
  int64_t patience = 3;
  // An improvement must beat the best by more than this. Default 0.
  double min_delta = 0;
};

// Asks the loop to stop once the metric, each time it is measured at an epoch's end, has
// not improved on its best by more than min_delta `patience` times in a row. Its state is
// the best value, its epoch and the count.
class EarlyStoppingCallback : public Callback {
 public:
  explicit EarlyStoppingCallback(const EarlyStoppingOptions& options) : options_(options) {}
  std::string name() const override { return "early_stopping"; }
  absl::Status OnEpochEnd(FitLoop& fit, int64_t epoch) override;
  std::string SaveState() const override;
  absl::Status RestoreState(absl::string_view state) override;

  int64_t evaluations_without_improvement() const { return wait_; }

 private:
  const EarlyStoppingOptions options_;
  std::optional<double> best_;
  int64_t best_epoch_ = -1;
  int64_t wait_ = 0;
};

struct CheckpointOptions {
  // Where the files go (required; it must exist): checkpoint-STEP.hrfit and best.hrfit.
  std::string dir;
  // Write one after every N-th step (0: not by steps). Default 0.
  int64_t every_steps = 0;
  // Write one at the end of every N-th epoch (0: not by epochs). Default 1.
  int64_t every_epochs = 1;
  // Keep the newest K of them (>= 1), deleting older ones. Default 3.
  int64_t keep_last = 3;
  // Also keep best.hrfit, written at an epoch's end when this metric improves (empty:
  // none). Default none.
  std::string best_metric;
  bool best_higher_is_better = true;
};

// Writes checkpoints (FitLoop::WriteCheckpoint) every N steps or epochs, keeps the last K,
// and the best by a metric. Its state is the files it keeps and the best value, so a
// resumed run goes on pruning the same files.
class CheckpointCallback : public Callback {
 public:
  explicit CheckpointCallback(const CheckpointOptions& options) : options_(options) {}
  std::string name() const override { return "checkpoint"; }
  absl::Status OnStepEnd(FitLoop& fit, const StepResult& result) override;
  absl::Status OnEpochEnd(FitLoop& fit, int64_t epoch) override;
  std::string SaveState() const override;
  absl::Status RestoreState(absl::string_view state) override;

  // The checkpoints kept, oldest first.
  const std::vector<std::string>& kept() const { return kept_; }
  // The best checkpoint's path, or empty.
  std::string best_path() const;
  double seconds() const { return seconds_; }

 private:
  // Writes the checkpoint of the step just run and prunes to keep_last.
  absl::Status Save(FitLoop& fit);

  const CheckpointOptions options_;
  std::vector<std::string> kept_;
  int64_t last_saved_step_ = -1;
  std::optional<double> best_;
  double seconds_ = 0;
};

// Returns the newest checkpoint-STEP.hrfit in `dir` (by STEP). NotFound where none is.
absl::StatusOr<std::string> LatestCheckpoint(const std::string& dir);

// Prints a line to `out` at most every `interval_seconds` (and at each epoch's end): the
// epoch and batch, the loss, the learning rate, steps per second and the estimated time
// left (the steps left at this run's rate so far, evaluations included). Stateless.
class ProgressCallback : public Callback {
 public:
  // `clock` returns seconds (default: a steady clock). Borrows `out`.
  ProgressCallback(std::ostream* out, double interval_seconds,
                   std::function<double()> clock = nullptr);
  std::string name() const override { return "progress"; }
  absl::Status OnTrainBegin(FitLoop& fit) override;
  absl::Status OnStepEnd(FitLoop& fit, const StepResult& result) override;
  absl::Status OnEpochEnd(FitLoop& fit, int64_t epoch) override;

  // Returns the seconds left at the rate so far, or -1 before a step ran.
  double SecondsLeft(const FitLoop& fit) const;

 private:
  void Print(const FitLoop& fit, double loss);

  std::ostream* const out_;
  const double interval_seconds_;
  const std::function<double()> clock_;
  double start_ = 0;
  int64_t start_step_ = 0;
  double last_print_ = 0;
};

// Returns "1h02m", "5m07s" or "42s".
std::string DurationString(double seconds);

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_CALLBACKS_H_
