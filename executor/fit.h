// The fit loop: epochs of steps over a labelled image set with callbacks around them, and a
// checkpoint that resumes exactly.
//
// Phases: Create() with the trainer, the training items and the callbacks; optionally
// Resume() from a checkpoint file; then Run() once. Run() calls, in the callbacks' order,
// OnTrainBegin; for each epoch OnEpochBegin, then for each batch OnStepBegin, the step and
// OnStepEnd; then OnEpochEnd; finally OnTrainEnd. Callbacks read the loop (the trainer, the
// position, the metrics), set metrics, ask it to stop (RequestStop) and write checkpoints; they
// never change a step's arithmetic except through what the trainer allows (the learning rate).
//
// The position is always the next batch to train: (epoch, batch within it). A checkpoint
// (WriteCheckpoint) holds the trainer's state (parameters, buffers, optimizer state, steps
// run), the position, the data order's seed and batch, the loop's metrics and running
// loss, and every callback's SaveState() by name. Resume() restores them all, and Run() then
// starts the data at that position: the run reaches bitwise the parameters of a run that was
// never stopped. A checkpoint taken in the middle of a hook leaves out what callbacks after
// the writer do in that hook, so a checkpoint writer goes last. A resumed run does not call
// OnEpochBegin for the epoch it resumes inside.
//
// Borrows the trainer and the set, which must outlive it. Thread-compatible.
#ifndef HEADROOM_EXECUTOR_FIT_H_
#define HEADROOM_EXECUTOR_FIT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/batch_loader.h"
#include "data/image_dataset.h"
#include "executor/image_task.h"
#include "executor/trainer.h"

namespace headroom::executor {

class FitLoop;

// Something run around the steps. Every hook returns a status; an error stops the run
// with it. Default hooks do nothing.
class Callback {
 public:
  virtual ~Callback() = default;
  // Returns its name, unique among a loop's callbacks: its state's key in a checkpoint.
  virtual std::string name() const = 0;

  virtual absl::Status OnTrainBegin(FitLoop& fit) { return absl::OkStatus(); }
  virtual absl::Status OnTrainEnd(FitLoop& fit) { return absl::OkStatus(); }
  virtual absl::Status OnEpochBegin(FitLoop& fit, int64_t epoch) { return absl::OkStatus(); }
  // After the epoch's last step; the position is already the next epoch's first batch.
  virtual absl::Status OnEpochEnd(FitLoop& fit, int64_t epoch) { return absl::OkStatus(); }
  // `step`: the trainer's step about to run (steps_run()).
  virtual absl::Status OnStepBegin(FitLoop& fit, int64_t step) { return absl::OkStatus(); }
  virtual absl::Status OnStepEnd(FitLoop& fit, const StepResult& result) {
    return absl::OkStatus();
  }

  // Returns what it must remember across a resume, as bytes; empty for nothing.
  virtual std::string SaveState() const { return ""; }
  // Sets it from SaveState()'s bytes. InvalidArgument for bytes it cannot read.
  virtual absl::Status RestoreState(absl::string_view state) { return absl::OkStatus(); }
};

// Where a run is: the next batch to train.
struct FitPosition {
  int64_t epoch = 0;
  int64_t batch = 0;  // within the epoch
};

// A metric and the epoch it was measured at the end of.
struct Metric {
  double value = 0;
  int64_t epoch = 0;
};

struct FitOptions {
  // Epochs to train (required, >= 1).
  int64_t epochs = 0;
  // Stop after the step that makes steps_run() this many, without an epoch end (a test's
  // kill); 0: never. Default 0.
  int64_t stop_at_step = 0;
};

// What a run did.
struct FitSummary {
  int64_t epochs_completed = 0;  // epochs whose end ran (in this and earlier runs)
  int64_t steps_run = 0;         // the trainer's, restored steps included
  int64_t steps_this_run = 0;
  bool stopped_early = false;  // a callback asked to stop
  std::string stop_reason;
  double loop_seconds = 0;        // the whole of Run()
  double step_seconds = 0;        // the steps' own (StepResult::seconds)
  double input_wait_seconds = 0;  // waiting for the loader
  // Seconds in each callback's hooks, by name, in the callbacks' order.
  std::vector<std::pair<std::string, double>> callback_seconds;
  double last_loss = 0;
  uint64_t arena_high_water_bytes = 0;
  std::map<std::string, Metric> metrics;
};

class FitLoop {
 public:
  // Returns a loop training `trainer` on items `train_items` of `set` in batches of the
  // model's batch, in the order `order` gives (its seed, ranks, shuffle and augmentation;
  // its batch and start are the loop's). InvalidArgument when the model cannot take the
  // set's batches (ImageTask), epochs below 1, two callbacks of one name, or an epoch
  // without a whole batch.
  static absl::StatusOr<std::unique_ptr<FitLoop>> Create(
      Trainer* trainer, const data::ImageDataset* set, std::vector<int64_t> train_items,
      const data::LoaderOptions& order, const FitOptions& options,
      std::vector<std::unique_ptr<Callback>> callbacks);

  // Sets the trainer, position, metrics and callbacks from checkpoint file `path`.
  // REQUIRES: before Run(). The state of a callback this run does not have (a resume
  // without checkpoints) is left out. InvalidArgument for a checkpoint of another order
  // (seed, batch, ranks) or another model's state; the reader's and callbacks' errors.
  absl::Status Resume(const std::string& path);

  // Runs the epochs from the position on. The first error of a step or a hook.
  absl::StatusOr<FitSummary> Run();

  // Writes a checkpoint of the run as it is now to `path` (a temporary file renamed into
  // place). For callbacks.
  absl::Status WriteCheckpoint(const std::string& path) const;

  // Asks the run to stop after the current step: an epoch's end still runs if the step
  // was its last (or the request came from its end), then the train end. The first reason
  // is kept.
  void RequestStop(absl::string_view reason);
  bool stop_requested() const { return stop_requested_; }

  // Sets metric `name` measured at the end of epoch `epoch`.
  void SetMetric(const std::string& name, double value, int64_t epoch) {
    metrics_[name] = {value, epoch};
  }
  // Returns the metric, or nullptr if none was set.
  const Metric* FindMetric(const std::string& name) const;
  const std::map<std::string, Metric>& metrics() const { return metrics_; }

  Trainer& trainer() { return *trainer_; }
  const Trainer& trainer() const { return *trainer_; }
  const ImageTask& task() const { return task_; }
  const FitPosition& position() const { return position_; }
  int64_t epochs() const { return options_.epochs; }
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  // Steps of the whole run, epochs * batches_per_epoch().
  int64_t total_steps() const { return options_.epochs * batches_per_epoch_; }
  // Seconds this Run() has waited for the loader's batches, up to the last batch taken (the
  // loader's wait_seconds()); 0 before the first.
  double input_wait_seconds() const { return input_wait_seconds_; }
  // The mean loss of the current epoch's steps so far (0 before its first).
  double epoch_loss() const { return epoch_steps_ == 0 ? 0 : epoch_loss_sum_ / epoch_steps_; }

 private:
  FitLoop(Trainer* trainer, const data::ImageDataset* set, std::vector<int64_t> train_items,
          const data::LoaderOptions& order, const FitOptions& options, ImageTask task,
          int64_t batches_per_epoch, std::vector<std::unique_ptr<Callback>> callbacks);

  // Calls `hook` on each callback in order, timing each.
  template <typename Hook>
  absl::Status CallEach(Hook hook);
  // Runs the batches of the position's epoch from the position on.
  absl::Status RunEpochSteps(data::BatchLoader& loader, FitSummary& summary);
  // Runs the step on the loader's next batch; with the trainer's prefetch_to_device, on the
  // staged batch while the next is staged.
  absl::StatusOr<StepResult> RunStep(data::BatchLoader& loader);

  Trainer* const trainer_;
  const data::ImageDataset* const set_;
  const std::vector<int64_t> train_items_;
  const data::LoaderOptions order_;
  const FitOptions options_;
  const ImageTask task_;
  const int64_t batches_per_epoch_;
  std::vector<std::unique_ptr<Callback>> callbacks_;
  std::vector<double> callback_seconds_;

  FitPosition position_;
  std::map<std::string, Metric> metrics_;
  double epoch_loss_sum_ = 0;
  int64_t epoch_steps_ = 0;
  double input_wait_seconds_ = 0;
  bool stop_requested_ = false;
  std::string stop_reason_;
  bool ran_ = false;
};

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_FIT_H_
