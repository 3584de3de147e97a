#include "clients/train_command.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iterator>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "clients/command_flags.h"
#include "clients/remote_text.h"
#include "data/epoch_order.h"
#include "data/image_dataset.h"
#include "dist/collectives.h"
#include "dist/data_parallel.h"
#include "dist/gradient_buckets.h"
#include "dist/launch.h"
#include "dist/mpi_collectives.h"
#include "dist/overlap.h"
#include "dist/sync_batch_norm.h"
#include "executor/backend.h"
#include "executor/backends.h"
#include "executor/callbacks.h"
#include "executor/fit.h"
#include "executor/lr_schedule.h"
#include "executor/reference_export.h"
#include "executor/trainer.h"
#include "graph/graph.h"
#include "graph/mixed_precision.h"
#include "graph/summary.h"
#include "planner/reversible_search.h"
#include "planner/sections.h"
#include "profiler/process_memory.h"
#include "util/file_io.h"
#include "util/json_writer.h"
#include "util/median.h"
#include "util/status_macros.h"

namespace headroom::clients {
namespace {

constexpr int64_t kDefaultSteps = 20;

// Returns the precision the run trains in, and with --precision auto what chose it:
// "bf16 (chosen by --precision auto: predicted step 0.0123 s, fp32's 0.0150 s)".
std::string PrecisionLine(const executor::Trainer& trainer) {
  const executor::PrecisionChoice& c = trainer.precision_choice();
  const std::string name = graph::PrecisionName(trainer.precision());
  if (!c.automatic) return name;
  const auto step = [](double seconds, const std::string& refusal) {
    return seconds >= 0 ? absl::StrFormat("%.4f s", seconds)
                        : absl::StrCat("does not fit (", refusal, ")");
  };
  const bool bf16 = trainer.precision() == proto::PRECISION_BF16;
  return absl::StrCat(
      name, " (chosen by --precision auto: predicted step ",
      bf16 ? step(c.bf16_step_seconds, c.bf16_refusal) : step(c.fp32_step_seconds, c.fp32_refusal),
      bf16 ? ", fp32's " : ", bf16's ",
      bf16 ? step(c.fp32_step_seconds, c.fp32_refusal) : step(c.bf16_step_seconds, c.bf16_refusal),
      ")");
}

// Writes "precision_requested" ("auto" where chosen, else the precision) and, where chosen,
// each precision's predicted step seconds (null where its plan does not fit).
void WritePrecisionChoice(const executor::Trainer& trainer, JsonWriter& w) {
  const executor::PrecisionChoice& c = trainer.precision_choice();
  w.Key("precision_requested")
      .String(c.automatic ? "auto" : graph::PrecisionName(trainer.precision()));
  if (!c.automatic) return;
  for (const auto& [key, seconds] : {std::pair{"fp32_step_seconds", c.fp32_step_seconds},
                                     std::pair{"bf16_step_seconds", c.bf16_step_seconds}}) {
    w.Key(absl::StrCat("auto_", key));
    if (seconds >= 0) {
      w.Double(seconds);
    } else {
      w.Null();
    }
  }
}

// What the steps measured.
struct TrainTotals {
  std::vector<double> losses;
  std::vector<double> seconds;
  uint64_t measured_peak = 0;
  uint64_t offloaded = 0;
  double copy_wait = 0;
  // The device memory budget given (before ReserveFixedCost lowered the plan's).
  uint64_t budget = 0;
  // The backend's device memory outside the arena: its context and handles
  // (fixed_device_bytes()) and the workspace its kernels grew (workspace_bytes()).
  uint64_t fixed_device = 0;
  uint64_t workspace = 0;
  // --check-rebuild: the largest rebuild error over the checked steps (-1: none checked) and
  // the elements of rebuilt non-float tensors (dropout masks) that differed.
  double max_rebuild_error = -1;
  int64_t rebuild_mismatches = 0;
  // The most a step's measured high-water mark went above the plan it ran under (a bug).
  uint64_t over_plan = 0;

  // Adds one step's measurements.
  void Add(const executor::StepResult& r) {
    losses.push_back(r.loss);
    seconds.push_back(r.seconds);
    measured_peak = std::max(measured_peak, r.arena_high_water_bytes);
    if (r.arena_high_water_bytes > r.planned_peak_bytes) {
      over_plan = std::max(over_plan, r.arena_high_water_bytes - r.planned_peak_bytes);
    }
    offloaded += r.offloaded_bytes;
    copy_wait += r.copy_wait_seconds;
    max_rebuild_error = std::max(max_rebuild_error, r.max_rebuild_error);
    rebuild_mismatches += r.rebuild_mismatches;
  }
};

// Returns the line of a --max-rebuild-error replan (threshold `threshold`).
std::string ReplanLine(const executor::RebuildReplan& r, double threshold) {
  if (!r.failure.empty()) {
    return absl::StrFormat(
        "rebuild replan after step %d: max_rebuild_error %.3g > %.3g, but no plan keeping a "
        "block in every %d fits (%s): going on rebuilding %d block(s)\n",
        r.after_step, r.error_before, threshold, r.keep_every, r.failure, r.rebuilt_before);
  }
  return absl::StrFormat(
      "rebuild replan after step %d: max_rebuild_error %.3g > %.3g: keep 1 block in every %d, "
      "%d -> %d block(s) rebuilt, plan '%s', predicted peak %s; error after %s\n",
      r.after_step, r.error_before, threshold, r.keep_every, r.rebuilt_before, r.rebuilt_after,
      r.strategy, graph::HumanBytes(r.peak_bytes),
      r.error_after < 0 ? std::string("not yet checked") : absl::StrFormat("%.3g", r.error_after));
}

// Writes a --max-rebuild-error replan as a JSON object.
void WriteReplan(const executor::RebuildReplan& r, JsonWriter& w) {
  w.BeginObject()
      .Key("after_step")
      .Int(r.after_step)
      .Key("keep_every")
      .Int(r.keep_every)
      .Key("error_before")
      .Double(r.error_before)
      .Key("error_after")
      .Double(r.error_after)
      .Key("rebuilt_before")
      .Int(r.rebuilt_before)
      .Key("rebuilt_after")
      .Int(r.rebuilt_after)
      .Key("strategy")
      .String(r.strategy)
      .Key("predicted_peak_bytes")
      .Uint(r.peak_bytes);
  if (!r.failure.empty()) w.Key("failure").String(r.failure);
  w.EndObject();
}

// Training on real data instead of the synthetic task: --dataset and what goes with it, the
// flags `headroom submit` shares and those of a run here.
struct DataFlags : DatasetFlags {
  // Copy the next batch to the device during the step (TrainerOptions::prefetch_to_device);
  // when not given, on for the CUDA backend only.
  bool prefetch_to_device = false;
  std::string checkpoint_dir;
  int64_t checkpoint_every_steps = 0;
  std::string resume;
  double progress_seconds = 10;
};

// Data-parallel training (docs/distributed.md): --ranks and what goes with it.
struct DistFlags {
  int ranks = 1;
  int threads_per_rank = 1;
  int64_t bucket_kib = 0;
  int64_t check_every = 0;
  double collective_timeout = 20;
  bool sync_batchnorm = false;
};

// A rank's view of a data-parallel run (set where mpirun started this process).
struct DistRun {
  int rank = 0;
  int size = 1;
  std::unique_ptr<dist::Collectives> collectives;
  std::unique_ptr<dist::GradientBuckets> buckets;
  // --sync-batchnorm: batch norm over the global batch.
  std::unique_ptr<dist::SyncBatchNorm> batch_norm;
  // The synthetic task at the global batch (ranks times --batch), whose batches the ranks
  // split: the samples one process at the global batch would see.
  std::unique_ptr<graph::Graph> global_graph;
  std::optional<executor::SyntheticTask> global_task;
  uint64_t parameter_checksum = 0;
  // Every rank's measured arena peak and its plan's (with the gradient buckets), by rank.
  std::vector<uint64_t> measured_peaks;
  std::vector<uint64_t> predicted_peaks;
  // The waits for the gradient allreduces, split into imbalance and exposed communication.
  std::optional<dist::OverlapReport> overlap;
};

// The sets a run on real data reads: the training set and where its held-out items are.
struct LoadedData {
  data::ImageDataset train;
  std::vector<int64_t> train_items;
  // The held-out set (the test part, or `train` itself for a validation split) and items.
  std::optional<data::ImageDataset> test;
  std::vector<int64_t> held_out_items;
  const data::ImageDataset& held_out() const { return test.has_value() ? *test : train; }
};

// What a run on real data did beyond the steps (TrainTotals).
struct FitTotals {
  executor::FitSummary summary;
  std::optional<executor::EvalMetrics> eval;
  double eval_seconds = 0;
  double checkpoint_seconds = 0;
  int64_t batches_per_epoch = 0;
};

struct TrainCommand {
  ModelFlags model;
  PlanFlags plan;
  RunFlags run;
  LocalPlanFlags local;
  bool json = false;
  std::string export_dir;
  // Every this many steps, compare rebuilt reversible-block tensors with the forward's
  // (ExecutorOptions::check_rebuild_every); 0 never.
  int64_t check_rebuild_every = 0;
  DataFlags data;
  DistFlags dist;
  // Set by Run() where mpirun started this process.
  DistRun* dist_run = nullptr;
  // The command (to ask which flags were given).
  const CLI::App* app = nullptr;
  // What importing --onnx found (set by Run()).
  ImportNotes notes;

  absl::Status Run(const CommandIo& io);

 private:
  // Run() for one process (one rank of a data-parallel run, or the only one).
  absl::Status RunRank(const CommandIo& io);
  // Sets dist_run's collectives, buckets and global task where this is one of several ranks.
  absl::Status StartRanks(const graph::Graph& g, executor::TrainerOptions& options,
                          executor::Backend* backend);

 private:
  // Returns an error naming the flag where the data flags do not go together.
  absl::Status CheckDataFlags() const;
  absl::StatusOr<LoadedData> LoadData() const;
  // Returns the callbacks of the run, in order (the checkpoint writer last).
  absl::StatusOr<std::vector<std::unique_ptr<executor::Callback>>> MakeCallbacks(
      const LoadedData& sets, int64_t total_steps, double base_rate, TrainTotals& totals,
      const CommandIo& io) const;
  absl::Status Fit(executor::Trainer& trainer, const graph::Graph& g, const LoadedData& sets,
                   double base_rate, TrainTotals& totals, FitTotals& fit,
                   const CommandIo& io) const;
  void PrintFitSummary(const FitTotals& fit, const TrainTotals& totals, JsonWriter* w,
                       std::ostream& out) const;
  void PrintPlan(const executor::Trainer& trainer, const graph::Graph& g, const TrainTotals& totals,
                 int64_t steps, std::ostream& out) const;
  absl::Status ExportInputs(executor::Trainer& trainer, const graph::Graph& g,
                            const executor::TrainerOptions& options) const;
  // With --dataset: the graph and initial state, then data_order.bin (int64, every step's
  // items in order) and learning_rates.bin (float64, every step's rate).
  absl::Status ExportFitInputs(executor::Trainer& trainer, const graph::Graph& g,
                               const executor::TrainerOptions& options,
                               const LoadedData& sets) const;
  absl::Status Train(executor::Trainer& trainer, TrainTotals& totals, std::ostream& out) const;
  void PrintSummary(const executor::Trainer& trainer, const graph::Graph& g,
                    const TrainTotals& totals, const FitTotals* fit,
                    const proto::ProcessMemory& process, std::ostream& out) const;
};

void TrainCommand::PrintPlan(const executor::Trainer& trainer, const graph::Graph& g,
                             const TrainTotals& totals, int64_t steps, std::ostream& out) const {
  const planner::SectionPlan& plan = trainer.plan();
  int recomputed = 0, offloaded = 0;
  for (const planner::SectionInfo& s : plan.step->sections) {
    recomputed += s.recompute_nodes;
    for (const planner::CachedInput& c : s.boundary) offloaded += c.offloaded ? 1 : 0;
  }
  out << absl::StrFormat(
      "training %s on %s: %s, plan '%s' with %d section(s), %d node(s) recomputed, "
      "%d tensor(s) offloaded; predicted peak %s%s\n",
      g.name(), run.backend,
      steps >= 0 ? absl::StrCat(steps, " steps")
                 : absl::StrCat(data.dataset, ", ", data.epochs, " epoch(s)"),
      plan.strategy, plan.step->sections.size(), recomputed, offloaded,
      graph::HumanBytes(plan.peak_bytes),
      totals.budget > 0
          ? absl::StrCat(" (budget ", graph::HumanBytes(totals.budget),
                         totals.fixed_device > 0
                             ? absl::StrCat(", less ", graph::HumanBytes(totals.fixed_device),
                                            " for the backend's context and handles")
                             : "",
                         ")")
          : "");
  if (!g.reversible_blocks().empty()) {
    const std::vector<std::string> rebuilt = planner::BlockNames(g, plan.rebuilt_blocks, true);
    const std::vector<std::string> kept = planner::BlockNames(g, plan.rebuilt_blocks, false);
    out << absl::StrFormat("reversible blocks: %d of %d rebuilt%s%s\n", rebuilt.size(),
                           g.reversible_blocks().size(),
                           rebuilt.empty() ? "" : absl::StrCat(": ", absl::StrJoin(rebuilt, " ")),
                           kept.empty() ? "" : absl::StrCat("; kept: ", absl::StrJoin(kept, " ")));
  }
}

absl::Status TrainCommand::ExportInputs(executor::Trainer& trainer, const graph::Graph& g,
                                        const executor::TrainerOptions& options) const {
  executor::ReferenceRun reference;
  reference.optimizer = options.optimizer;
  reference.optimizer_params = options.optimizer_params;
  ASSIGN_OR_RETURN(reference.initial_state, trainer.State());
  // Where ranks split a global batch, the global batches: what one process would train on.
  const executor::SyntheticTask& task = dist_run != nullptr && dist_run->global_task.has_value()
                                            ? *dist_run->global_task
                                            : trainer.task();
  for (int64_t s = 0; s < run.steps; ++s) reference.batches.push_back(task.Batch(s));
  // ... and the model at the global batch, which those batches fit.
  const graph::Graph& model_graph =
      dist_run != nullptr && dist_run->global_graph != nullptr ? *dist_run->global_graph : g;
  return executor::WriteReferenceInputs(export_dir, model_graph, reference);
}

// Reports each step into the run's totals and prints a line (or a JSON object) per epoch.
class EpochReport : public executor::Callback {
 public:
  EpochReport(TrainTotals* totals, bool json, std::ostream* out)
      : totals_(totals), json_(json), out_(out) {}
  std::string name() const override { return "epoch_report"; }

  absl::Status OnEpochBegin(executor::FitLoop&, int64_t) override {
    epoch_start_ = std::chrono::steady_clock::now();
    return absl::OkStatus();
  }
  absl::Status OnStepEnd(executor::FitLoop&, const executor::StepResult& r) override {
    totals_->Add(r);
    return absl::OkStatus();
  }
  absl::Status OnEpochEnd(executor::FitLoop& fit, int64_t epoch) override {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start_).count();
    const executor::Metric* train = fit.FindMetric("train_loss");
    const executor::Metric* loss = fit.FindMetric("eval_loss");
    const executor::Metric* accuracy = fit.FindMetric("eval_accuracy");
    const bool evaluated = loss != nullptr && loss->epoch == epoch;
    if (json_) {
      JsonWriter w;
      w.BeginObject().Key("epoch").Int(epoch).Key("steps_run").Int(fit.trainer().steps_run());
      w.Key("train_loss").Double(train->value);
      if (evaluated) {
        w.Key("eval_loss").Double(loss->value).Key("eval_accuracy").Double(accuracy->value);
      }
      w.Key("epoch_seconds").Double(seconds).EndObject();
      *out_ << w.str() << "\n" << std::flush;
      return absl::OkStatus();
    }
    *out_ << absl::StrFormat("epoch %d/%d: train loss %.5f", epoch + 1, fit.epochs(), train->value);
    if (evaluated) {
      *out_ << absl::StrFormat(", eval loss %.5f, eval accuracy %.2f%%", loss->value,
                               100 * accuracy->value);
    }
    *out_ << absl::StrFormat(", %.1f s\n", seconds) << std::flush;
    return absl::OkStatus();
  }

 private:
  TrainTotals* const totals_;
  const bool json_;
  std::ostream* const out_;
  std::chrono::steady_clock::time_point epoch_start_ = std::chrono::steady_clock::now();
};

bool Given(const CLI::App* app, const std::string& flag) {
  return app != nullptr && app->count(flag) > 0;
}

absl::Status TrainCommand::CheckDataFlags() const {
  if (data.dataset.empty()) {
    std::vector<const char*> flags(std::begin(kDatasetOnlyFlags), std::end(kDatasetOnlyFlags));
    for (const char* flag : {"--prefetch-to-device", "--checkpoint-dir", "--checkpoint-every-steps",
                             "--resume", "--progress-seconds"}) {
      flags.push_back(flag);
    }
    for (const char* flag : flags) {
      if (Given(app, flag)) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, " applies to training on a --dataset"));
      }
    }
    return absl::OkStatus();
  }
  if (Given(app, "--steps")) {
    return absl::InvalidArgumentError(
        "--steps is the synthetic task's; with --dataset give --epochs");
  }
  if (!export_dir.empty() && (data.crop_padding > 0 || data.flip || !data.resume.empty())) {
    return absl::InvalidArgumentError(
        "--export with --dataset writes the order of the items and the rates from step 0: not "
        "with augmentation (--crop-padding, --flip) or --resume");
  }
  if (data.dataset != "fashion-mnist" && data.eval_every > 0 && data.validation_fraction == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dataset '", data.dataset,
                     "' has no test part to evaluate on: give "
                     "--validation-fraction F (held out from it) or --eval-every 0"));
  }
  if (data.checkpoint_dir.empty()) {
    for (const char* flag :
         {"--checkpoint-every-steps", "--checkpoint-every-epochs", "--keep-last"}) {
      if (Given(app, flag)) {
        return absl::InvalidArgumentError(absl::StrCat(flag, " needs --checkpoint-dir"));
      }
    }
  }
  if (data.early_stop_patience > 0 && data.eval_every == 0 &&
      data.early_stop_metric != "train_loss") {
    return absl::InvalidArgumentError(absl::StrCat("--early-stop-metric ", data.early_stop_metric,
                                                   " is measured by evaluation: not with "
                                                   "--eval-every 0"));
  }
  return absl::OkStatus();
}

absl::StatusOr<LoadedData> TrainCommand::LoadData() const {
  const bool fashion = data.dataset == "fashion-mnist";
  absl::StatusOr<data::ImageDataset> train =
      fashion ? data::ImageDataset::LoadFashionMnist(data::FashionMnistPart::kTrain)
              : data::ImageDataset::LoadDirectory(data.dataset);
  if (!train.ok()) {
    return absl::Status(train.status().code(),
                        absl::StrCat("--dataset: ", train.status().message()));
  }
  LoadedData sets{*std::move(train), {}, std::nullopt, {}};
  if (data.validation_fraction > 0) {
    ASSIGN_OR_RETURN(data::TrainValidationSplit split,
                     data::SplitTrainValidation(sets.train.size(), data.validation_fraction,
                                                static_cast<uint64_t>(run.seed)));
    sets.train_items = std::move(split.train);
    sets.held_out_items = std::move(split.validation);
    return sets;
  }
  sets.train_items.resize(sets.train.size());
  for (int64_t i = 0; i < sets.train.size(); ++i) sets.train_items[i] = i;
  if (fashion && data.eval_every > 0) {
    ASSIGN_OR_RETURN(sets.test,
                     data::ImageDataset::LoadFashionMnist(data::FashionMnistPart::kTest));
    sets.held_out_items.resize(sets.test->size());
    for (int64_t i = 0; i < sets.test->size(); ++i) sets.held_out_items[i] = i;
  }
  return sets;
}

absl::StatusOr<std::vector<std::unique_ptr<executor::Callback>>> TrainCommand::MakeCallbacks(
    const LoadedData& sets, int64_t total_steps, double base_rate, TrainTotals& totals,
    const CommandIo& io) const {
  std::vector<std::unique_ptr<executor::Callback>> callbacks;
  absl::StatusOr<executor::LearningRateSchedule> schedule =
      executor::ScheduleNamed(data.lr_schedule, base_rate, total_steps, data.warmup_steps);
  if (!schedule.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--lr-schedule: ", schedule.status().message()));
  }
  callbacks.push_back(std::make_unique<executor::LearningRateCallback>(*schedule));
  if (data.eval_every > 0) {
    callbacks.push_back(std::make_unique<executor::EvaluationCallback>(
        &sets.held_out(), sets.held_out_items, data.eval_every));
  }
  if (data.early_stop_patience > 0) {
    executor::EarlyStoppingOptions stop;
    stop.metric = data.early_stop_metric;
    stop.higher_is_better = data.early_stop_metric == "eval_accuracy";
    stop.patience = data.early_stop_patience;
    stop.min_delta = data.early_stop_min_delta;
    callbacks.push_back(std::make_unique<executor::EarlyStoppingCallback>(stop));
  }
  callbacks.push_back(std::make_unique<EpochReport>(&totals, json, &io.out));
  if (data.progress_seconds > 0 && (dist_run == nullptr || dist_run->rank == 0)) {
    callbacks.push_back(
        std::make_unique<executor::ProgressCallback>(&io.err, data.progress_seconds));
  }
  // Rank 0 alone writes checkpoints; every rank can restore them.
  if (!data.checkpoint_dir.empty() && (dist_run == nullptr || dist_run->rank == 0)) {
    std::error_code error;
    std::filesystem::create_directories(data.checkpoint_dir, error);
    if (error) {
      return absl::UnavailableError(
          absl::StrCat("--checkpoint-dir '", data.checkpoint_dir, "': ", error.message()));
    }
    executor::CheckpointOptions checkpoints;
    checkpoints.dir = data.checkpoint_dir;
    checkpoints.every_steps = data.checkpoint_every_steps;
    checkpoints.every_epochs = data.checkpoint_every_epochs;
    checkpoints.keep_last = data.keep_last;
    if (data.eval_every > 0) checkpoints.best_metric = "eval_accuracy";
    callbacks.push_back(std::make_unique<executor::CheckpointCallback>(checkpoints));
  }
  return callbacks;
}

absl::Status TrainCommand::Fit(executor::Trainer& trainer, const graph::Graph& g,
                               const LoadedData& sets, double base_rate, TrainTotals& totals,
                               FitTotals& fit, const CommandIo& io) const {
  ASSIGN_OR_RETURN(const executor::ImageTask task, executor::ImageTask::Create(g, sets.train));
  const int ranks = dist_run != nullptr ? dist_run->size : 1;
  fit.batches_per_epoch =
      data::BatchesPerEpoch(static_cast<int64_t>(sets.train_items.size()), task.batch * ranks);
  ASSIGN_OR_RETURN(auto callbacks,
                   MakeCallbacks(sets, data.epochs * std::max<int64_t>(fit.batches_per_epoch, 1),
                                 base_rate, totals, io));
  const executor::EvaluationCallback* evaluation = nullptr;
  const executor::CheckpointCallback* checkpoints = nullptr;
  for (const auto& c : callbacks) {
    if (c->name() == "evaluation") {
      evaluation = static_cast<const executor::EvaluationCallback*>(c.get());
    }
    if (c->name() == "checkpoint") {
      checkpoints = static_cast<const executor::CheckpointCallback*>(c.get());
    }
  }
  data::LoaderOptions order;
  order.seed = static_cast<uint64_t>(run.seed);
  order.augmentation.crop_padding = data.crop_padding;
  order.augmentation.horizontal_flip = data.flip;
  order.prefetch = static_cast<int>(data.prefetch);
  if (dist_run != nullptr) {
    order.rank = dist_run->rank;
    order.ranks = dist_run->size;
  }
  executor::FitOptions options;
  options.epochs = data.epochs;
  ASSIGN_OR_RETURN(std::unique_ptr<executor::FitLoop> loop,
                   executor::FitLoop::Create(&trainer, &sets.train, sets.train_items, order,
                                             options, std::move(callbacks)));
  if (!data.resume.empty()) {
    std::string path = data.resume;
    if (std::filesystem::is_directory(path)) {
      ASSIGN_OR_RETURN(path, executor::LatestCheckpoint(path));
    }
    if (absl::Status s = loop->Resume(path); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("--resume: ", s.message()));
    }
    io.err << absl::StrFormat("resuming from '%s' at epoch %d, batch %d (step %d)\n", path,
                              loop->position().epoch + 1, loop->position().batch,
                              trainer.steps_run());
  }
  ASSIGN_OR_RETURN(fit.summary, loop->Run());
  if (evaluation != nullptr) {
    fit.eval = evaluation->last();
    fit.eval_seconds = evaluation->seconds();
  }
  if (checkpoints != nullptr) fit.checkpoint_seconds = checkpoints->seconds();
  if (fit.summary.stopped_early) io.err << fit.summary.stop_reason << "\n";
  return absl::OkStatus();
}

void TrainCommand::PrintFitSummary(const FitTotals& fit, const TrainTotals& totals, JsonWriter* w,
                                   std::ostream& out) const {
  const executor::FitSummary& s = fit.summary;
  // Time in callbacks beyond the work they exist for (evaluating, writing checkpoints).
  double callbacks = 0;
  for (const auto& [name, seconds] : s.callback_seconds) callbacks += seconds;
  const double overhead = std::max(0.0, callbacks - fit.eval_seconds - fit.checkpoint_seconds);
  const double step = s.step_seconds > 0 ? s.step_seconds : 1;
  if (w == nullptr) {
    out << absl::StrFormat(
        "epochs %d (%d steps, %d this run) in %.1f s; input wait %.2f s (%.2f%% of step "
        "time); callbacks %.3f s beyond evaluation (%.1f s) and checkpoints (%.1f s): "
        "%.2f%% of step time\n",
        s.epochs_completed, s.steps_run, s.steps_this_run, s.loop_seconds, s.input_wait_seconds,
        100 * s.input_wait_seconds / step, overhead, fit.eval_seconds, fit.checkpoint_seconds,
        100 * overhead / step);
    if (fit.eval.has_value()) {
      out << absl::StrFormat("evaluation: loss %.5f, accuracy %.2f%% on %d held-out items\n",
                             fit.eval->loss, 100 * fit.eval->accuracy, fit.eval->items);
    }
    return;
  }
  w->Key("dataset").String(data.dataset)
      .Key("epochs").Int(s.epochs_completed)
      .Key("batches_per_epoch").Int(fit.batches_per_epoch)
      .Key("steps_run").Int(s.steps_run)
      .Key("stopped_early").Bool(s.stopped_early)
      .Key("stop_reason").String(s.stop_reason)
      .Key("lr_schedule").String(data.lr_schedule)
      .Key("train_seconds").Double(s.loop_seconds)
      .Key("step_seconds_total").Double(s.step_seconds)
      .Key("input_wait_seconds").Double(s.input_wait_seconds)
      .Key("input_wait_fraction").Double(s.input_wait_seconds / step)
      .Key("callback_seconds").Double(callbacks)
      .Key("callback_overhead_seconds").Double(overhead)
      .Key("callback_overhead_fraction").Double(overhead / step)
      .Key("eval_seconds").Double(fit.eval_seconds)
      .Key("checkpoint_seconds").Double(fit.checkpoint_seconds);
  if (fit.eval.has_value()) {
    w->Key("eval_loss").Double(fit.eval->loss)
        .Key("eval_accuracy").Double(fit.eval->accuracy)
        .Key("eval_items").Int(fit.eval->items);
  }
}

absl::Status TrainCommand::ExportFitInputs(executor::Trainer& trainer, const graph::Graph& g,
                                           const executor::TrainerOptions& options,
                                           const LoadedData& sets) const {
  executor::ReferenceRun reference;
  reference.optimizer = options.optimizer;
  reference.optimizer_params = options.optimizer_params;
  ASSIGN_OR_RETURN(reference.initial_state, trainer.State());
  RETURN_IF_ERROR(executor::WriteReferenceInputs(export_dir, g, reference));
  ASSIGN_OR_RETURN(const executor::ImageTask task, executor::ImageTask::Create(g, sets.train));
  const int64_t batches =
      data::BatchesPerEpoch(static_cast<int64_t>(sets.train_items.size()), task.batch);
  ASSIGN_OR_RETURN(const executor::LearningRateSchedule schedule,
                   executor::ScheduleNamed(data.lr_schedule, options.optimizer_params.learning_rate,
                                           data.epochs * batches, data.warmup_steps));
  std::string order, rates;
  for (int64_t e = 0; e < data.epochs; ++e) {
    const std::vector<int64_t> permutation =
        data::EpochPermutation(sets.train_items, static_cast<uint64_t>(run.seed), e);
    for (int64_t b = 0; b < batches; ++b) {
      ASSIGN_OR_RETURN(absl::Span<const int64_t> items,
                       data::RankBatch(permutation, b, task.batch, 0, 1));
      order.append(reinterpret_cast<const char*>(items.data()), items.size() * sizeof(int64_t));
      const double rate = schedule.RateAt(e * batches + b);
      rates.append(reinterpret_cast<const char*>(&rate), sizeof(rate));
    }
  }
  RETURN_IF_ERROR(WriteFileContents(export_dir + "/data_order.bin", order, "data order"));
  return WriteFileContents(export_dir + "/learning_rates.bin", rates, "learning rates");
}

absl::Status TrainCommand::Train(executor::Trainer& trainer, TrainTotals& totals,
                                 std::ostream& out) const {
  const double max_rebuild_error = plan.max_rebuild_error;
  size_t replans_printed = 0;
  for (int64_t s = 0; s < run.steps; ++s) {
    absl::StatusOr<executor::StepResult> r;
    if (dist_run != nullptr && dist_run->global_task.has_value()) {
      // This rank's rows of the global batch.
      ASSIGN_OR_RETURN(std::vector<executor::HostTensor> shard,
                       dist::RankShard(dist_run->global_task->Batch(trainer.steps_run()),
                                       trainer.forward(), dist_run->rank, dist_run->size));
      r = trainer.StepOn(shard);
    } else {
      r = trainer.Step();
    }
    if (r.ok() && dist_run != nullptr) {
      // The step's loss over the global batch: the ranks' losses averaged.
      float loss = static_cast<float>(r->loss);
      ASSIGN_OR_RETURN(dist::CollectiveHandle h,
                       dist_run->collectives->AllreduceAsync(
                           &loss, 1, dist::ReduceOp::kAverage,
                           absl::StrCat("allreduce of step ", trainer.steps_run() - 1, "'s loss")));
      RETURN_IF_ERROR(dist_run->collectives->Wait(h));
      r->loss = loss;
    }
    if (r.ok() && dist_run != nullptr && dist.check_every > 0 && (s + 1) % dist.check_every == 0) {
      RETURN_IF_ERROR(
          dist::CheckParametersAgree(trainer, *dist_run->collectives, trainer.steps_run()));
    }
    if (!r.ok())
      return absl::Status(r.status().code(), absl::StrCat("step ", s, ": ", r.status().message()));
    totals.Add(*r);
    const bool replanned = trainer.replans().size() > replans_printed;
    if (json) {
      JsonWriter w;
      w.BeginObject()
          .Key("step").Int(s)
          .Key("loss").Double(r->loss)
          .Key("step_seconds").Double(r->seconds)
          .Key("measured_peak_bytes").Uint(r->arena_high_water_bytes)
          .Key("peak_live_bytes").Uint(r->peak_live_bytes)
          .Key("offloaded_bytes").Uint(r->offloaded_bytes)
          .Key("copy_wait_seconds").Double(r->copy_wait_seconds);
      if (r->max_rebuild_error >= 0) w.Key("max_rebuild_error").Double(r->max_rebuild_error);
      if (replanned) {
        w.Key("replan");
        WriteReplan(trainer.replans().back(), w);
      }
      w.EndObject();
      out << w.str() << "\n" << std::flush;
    } else {
      out << absl::StrFormat("%s %*d/%d  loss %.5f  %.3f s  arena peak %s\n",
                             ProgressBar(s + 1, run.steps), std::to_string(run.steps).size(), s + 1,
                             run.steps, r->loss, r->seconds,
                             graph::HumanBytes(r->arena_high_water_bytes))
          << std::flush;
      if (replanned) out << ReplanLine(trainer.replans().back(), max_rebuild_error) << std::flush;
    }
    replans_printed = trainer.replans().size();
  }
  return absl::OkStatus();
}

void TrainCommand::PrintSummary(const executor::Trainer& trainer, const graph::Graph& g,
                                const TrainTotals& t, const FitTotals* fit,
                                const proto::ProcessMemory& process, std::ostream& out) const {
  const planner::SectionPlan& plan = trainer.plan();
  const double median = Median(t.seconds);
  const double first = t.losses.empty() ? 0 : t.losses.front();
  const double last = t.losses.empty() ? 0 : t.losses.back();
  if (!json) {
    out << absl::StrFormat(
               "done: loss %.5f -> %.5f, median step %.3f s, measured peak %s (predicted %s)\n",
               first, last, median, graph::HumanBytes(t.measured_peak),
               graph::HumanBytes(plan.peak_bytes))
        << "optimizer state: "
        << planner::OptimizerPlacementName(plan.step->optimizer_state_on_host()) << "\n"
        << "parameters: " << planner::OptimizerPlacementName(plan.step->parameters_on_host())
        << "\n"
        << "precision: " << PrecisionLine(trainer) << "\n"
        << "physical: " << ProcessMemoryLine(process) << "\n";
    if (dist_run != nullptr) {
      const dist::BucketStats& b = dist_run->buckets->stats();
      out << absl::StrFormat(
          "ranks: %d x batch %d (global %d); %d allreduce(s) of %s in %d bucket(s) per step, "
          "%.3f s waited for them in all (buckets in the plan); parameters bitwise equal "
          "on every rank (checksum "
          "%016x)\n",
          dist_run->size, model.batch, dist_run->size * model.batch,
          b.steps > 0 ? b.allreduces / b.steps : 0,
          graph::HumanBytes(b.steps > 0 ? b.reduced_bytes / b.steps : 0),
          dist_run->buckets->BucketBytes().size(), b.exposed_wait_seconds,
          dist_run->parameter_checksum);
      if (dist_run->overlap.has_value()) {
        out << "allreduce overlap: " << dist_run->overlap->DebugString() << "\n";
      }
      for (size_t r = 0; r < dist_run->measured_peaks.size(); ++r) {
        out << absl::StrFormat("rank %d: arena measured peak %s, predicted %s (with buckets)\n", r,
                               graph::HumanBytes(dist_run->measured_peaks[r]),
                               graph::HumanBytes(dist_run->predicted_peaks[r]));
      }
      if (dist_run->batch_norm != nullptr) {
        const dist::SyncBatchNormStats& n = dist_run->batch_norm->stats();
        out << absl::StrFormat(
            "sync batch norm: %d allreduce(s) of %s per step (blocking), %.3f s in them in all\n",
            b.steps > 0 ? n.allreduces / b.steps : 0,
            graph::HumanBytes(b.steps > 0 ? n.reduced_bytes / b.steps : 0), n.wait_seconds);
      }
    }
    if (t.max_rebuild_error >= 0) {
      out << absl::StrFormat("rebuild check: max_rebuild_error %.3g, mismatched mask elements %d\n",
                             t.max_rebuild_error, t.rebuild_mismatches);
    }
    for (const executor::RebuildReplan& r : trainer.replans()) {
      out << ReplanLine(r, this->plan.max_rebuild_error);
    }
    if (fit != nullptr) PrintFitSummary(*fit, t, nullptr, out);
    return;
  }
  const int64_t steps = static_cast<int64_t>(t.losses.size());
  JsonWriter w;
  w.BeginObject().Key("summary").Bool(true);
  WriteNotes(notes, w);
  w.Key("model")
      .String(g.name())
      .Key("backend")
      .String(run.backend)
      .Key("steps")
      .Int(steps)
      .Key("budget_bytes")
      .Uint(t.budget)
      .Key("strategy")
      .String(plan.strategy)
      .Key("num_sections")
      .Uint(plan.step->sections.size())
      .Key("optimizer_state")
      .String(planner::OptimizerPlacementName(plan.step->optimizer_state_on_host()))
      .Key("parameters")
      .String(planner::OptimizerPlacementName(plan.step->parameters_on_host()))
      .Key("precision")
      .String(graph::PrecisionName(trainer.precision()));
  WritePrecisionChoice(trainer, w);
  w.Key("predicted_peak_bytes")
      .Uint(plan.peak_bytes)
      .Key("measured_peak_bytes")
      .Uint(t.measured_peak)
      .Key("predicted_step_seconds")
      .Double(plan.step_seconds)
      .Key("median_step_seconds")
      .Double(median)
      .Key("first_loss")
      .Double(first)
      .Key("last_loss")
      .Double(last)
      .Key("offloaded_bytes_per_step")
      .Uint(steps > 0 ? t.offloaded / steps : 0)
      .Key("copy_wait_seconds")
      .Double(t.copy_wait)
      .Key("fixed_device_bytes")
      .Uint(t.fixed_device)
      .Key("workspace_bytes")
      .Uint(t.workspace)
      .Key("host_pool_bytes")
      .Uint(process.host_pool_bytes())
      .Key("staging_slot_bytes")
      .Uint(trainer.executor().staging_bytes())
      .Key("baseline_bytes")
      .Uint(process.baseline_bytes())
      .Key("physical_peak_bytes")
      .Uint(process.physical_peak_bytes())
      .Key("unplanned_bytes")
      .Uint(process.unplanned_bytes())
      .Key("unplanned_limit_bytes")
      .Uint(process.unplanned_limit_bytes())
      .Key("reversible_blocks")
      .Uint(g.reversible_blocks().size());
  if (!g.reversible_blocks().empty()) {
    for (const bool rebuilt : {true, false}) {
      w.Key(rebuilt ? "rebuilt_blocks" : "kept_blocks").BeginArray();
      for (const std::string& name : planner::BlockNames(g, plan.rebuilt_blocks, rebuilt)) {
        w.String(name);
      }
      w.EndArray();
    }
  }
  if (dist_run != nullptr) {
    const dist::BucketStats& b = dist_run->buckets->stats();
    w.Key("ranks")
        .Int(dist_run->size)
        .Key("global_batch")
        .Int(dist_run->size * model.batch)
        .Key("buckets")
        .Uint(dist_run->buckets->BucketBytes().size())
        .Key("allreduces")
        .Int(b.allreduces)
        .Key("allreduce_bytes")
        .Uint(b.reduced_bytes)
        .Key("allreduce_exposed_seconds")
        .Double(b.exposed_wait_seconds)
        .Key("gradient_copy_seconds")
        .Double(b.copy_seconds)
        .Key("bucket_bytes_planned")
        .Uint(b.reduced_bytes / std::max<int64_t>(b.steps, 1))
        .Key("parameter_checksum")
        .Uint(dist_run->parameter_checksum);
    w.Key("bucket_sizes_bytes").BeginArray();
    for (uint64_t b : dist_run->buckets->BucketBytes()) w.Uint(b);
    w.EndArray();
    if (dist_run->overlap.has_value()) {
      // Medians per step over the steps kept (dist/overlap.h), the mean of the ranks.
      const dist::StepOverlap& m = dist_run->overlap->median;
      w.Key("allreduce_waited_seconds")
          .Double(m.waited_seconds)
          .Key("allreduce_imbalance_seconds")
          .Double(m.imbalance_seconds)
          .Key("allreduce_exposed_communication_seconds")
          .Double(m.exposed_seconds)
          .Key("allreduce_communication_seconds")
          .Double(m.communication_seconds)
          .Key("allreduce_hidden_share")
          .Double(dist_run->overlap->hidden_share());
    }
    w.Key("rank_measured_peak_bytes").BeginArray();
    for (uint64_t b : dist_run->measured_peaks) w.Uint(b);
    w.EndArray();
    w.Key("rank_predicted_peak_bytes").BeginArray();
    for (uint64_t b : dist_run->predicted_peaks) w.Uint(b);
    w.EndArray();
    if (dist_run->batch_norm != nullptr) {
      const dist::SyncBatchNormStats& n = dist_run->batch_norm->stats();
      w.Key("batch_norm_allreduces")
          .Int(n.allreduces)
          .Key("batch_norm_allreduce_bytes")
          .Uint(n.reduced_bytes)
          .Key("batch_norm_allreduce_seconds")
          .Double(n.wait_seconds);
    }
  }
  if (t.max_rebuild_error >= 0) {
    w.Key("max_rebuild_error").Double(t.max_rebuild_error)
        .Key("rebuild_mismatches").Int(t.rebuild_mismatches);
  }
  if (this->plan.max_rebuild_error > 0) {
    w.Key("max_rebuild_error_threshold")
        .Double(this->plan.max_rebuild_error)
        .Key("rebuild_replans");
    w.BeginArray();
    for (const executor::RebuildReplan& r : trainer.replans()) WriteReplan(r, w);
    w.EndArray();
  }
  if (fit != nullptr) PrintFitSummary(*fit, t, &w, out);
  w.EndObject();
  out << w.str() << "\n";
}

absl::Status TrainCommand::Run(const CommandIo& io) {
  ASSIGN_OR_RETURN(const std::optional<dist::RankEnvironment> env, dist::RankFromEnvironment());
  if (dist.sync_batchnorm && (env.has_value() ? env->size : dist.ranks) == 1) {
    io.err << "warning: --sync-batchnorm with one rank: every batch norm already sees the whole "
              "batch; nothing to synchronise\n";
  }
  if (!env.has_value()) {
    if (dist.ranks == 1) return RunRank(io);
    // Start the ranks: this same command line under mpirun.
    dist::LaunchOptions launch;
    launch.ranks = dist.ranks;
    launch.threads_per_rank = dist.threads_per_rank;
    launch.as_root = geteuid() == 0;
    ASSIGN_OR_RETURN(const std::vector<std::string> self, dist::OwnCommandLine());
    ASSIGN_OR_RETURN(const std::vector<std::string> argv, dist::MpirunCommand(launch, self));
    io.err << "starting " << dist.ranks << " ranks: " << absl::StrJoin(argv, " ") << "\n"
           << std::flush;
    return dist::Exec(argv, launch);
  }
  if (Given(app, "--ranks") && dist.ranks != env->size) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ranks is ", dist.ranks, " but mpirun started ", env->size, " rank(s)"));
  }
  if (env->size == 1) return RunRank(io);
  DistRun run_state;
  run_state.rank = env->rank;
  run_state.size = env->size;
  dist::MpiOptions mpi;
  mpi.timeout_seconds = dist.collective_timeout;
  ASSIGN_OR_RETURN(run_state.collectives, dist::CreateMpiCollectives(mpi));
  dist_run = &run_state;
  // Only rank 0 prints results; every rank reports its errors.
  std::ostream quiet(nullptr);
  const CommandIo rank_io{env->rank == 0 ? io.out : quiet, io.err, io.terminal, io.connect,
                          io.connect_local};
  absl::Status status = RunRank(rank_io);
  dist_run = nullptr;
  if (!status.ok()) {
    return absl::Status(
        status.code(), absl::StrCat("rank ", env->rank, " of ", env->size, ": ", status.message()));
  }
  return status;
}

absl::Status TrainCommand::StartRanks(const graph::Graph& g, executor::TrainerOptions& options,
                                      executor::Backend* backend) {
  DistRun& d = *dist_run;
  dist::GradientBuckets::Options buckets;
  buckets.bucket_bytes = static_cast<uint64_t>(dist.bucket_kib) << 10;
  d.buckets = std::make_unique<dist::GradientBuckets>(d.collectives.get(), backend, buckets);
  options.gradients = d.buckets.get();
  if (dist.sync_batchnorm) {
    d.batch_norm = std::make_unique<dist::SyncBatchNorm>(d.collectives.get());
    options.batch_norm_sync = d.batch_norm.get();
  }
  if (!data.dataset.empty()) return absl::OkStatus();
  if (!model.onnx.empty() || !model.graph.empty()) {
    return absl::InvalidArgumentError(
        "--ranks on the synthetic task needs a zoo --model (the ranks split the batches of the "
        "model at ranks x --batch); give a --dataset to train --onnx or --graph across ranks");
  }
  ModelFlags global = model;
  global.batch = model.batch * d.size;
  ASSIGN_OR_RETURN(LoadedModel loaded, LoadModel(global, /*with_values=*/false));
  ASSIGN_OR_RETURN(graph::Graph global_graph, graph::Graph::FromProto(loaded.graph));
  d.global_graph = std::make_unique<graph::Graph>(std::move(global_graph));
  ASSIGN_OR_RETURN(executor::SyntheticTask task,
                   executor::SyntheticTask::Create(*d.global_graph, options.seed));
  d.global_task.emplace(std::move(task));
  (void)g;
  return absl::OkStatus();
}

absl::Status TrainCommand::RunRank(const CommandIo& io) {
  RETURN_IF_ERROR(CheckDataFlags());
  ASSIGN_OR_RETURN(executor::TrainerOptions options, TrainerOptionsOf(plan, run));
  options.check_rebuild_every = check_rebuild_every;
  options.max_rebuild_error = plan.max_rebuild_error;  // Replans during this run only.
  // Real data is read before the process's memory is measured: it is the run's input, not
  // the step's.
  std::optional<LoadedData> sets;
  if (!data.dataset.empty()) {
    ASSIGN_OR_RETURN(sets, LoadData());
  }
  // An ONNX model trains from its own weights.
  ASSIGN_OR_RETURN(LoadedModel loaded, LoadModel(model, /*with_values=*/true));
  notes = loaded.notes;
  PrintNotes(notes, io.err);
  for (const proto::TensorValue& v : loaded.values) {
    options.initial_values.push_back(executor::HostTensorFromValue(v));
  }
  loaded.values.clear();
  ASSIGN_OR_RETURN(graph::Graph g, graph::Graph::FromProto(loaded.graph));
  RETURN_IF_ERROR(ResolveLocalPlan(g, local, options));
  ASSIGN_OR_RETURN(std::unique_ptr<executor::Backend> backend,
                   executor::MakeBackendWithOptions(run.backend, BackendOptionsOf(run)));
  // The plan gets the budget less what the backend itself holds; the output shows both.
  TrainTotals totals;
  totals.budget = options.budget_bytes;
  totals.fixed_device = backend->fixed_device_bytes();
  RETURN_IF_ERROR(executor::ReserveFixedCost(*backend, options));
  if (!data.dataset.empty()) {
    options.prefetch_to_device =
        Given(app, "--prefetch-to-device") ? data.prefetch_to_device : backend->name() == "cuda";
  }
  // The process's own memory from here on, against the plan (one run in this process: the
  // kernel's high-water mark is the run's).
  profiler::ProcessMemorySampler sampler(nullptr, {.reset_peak = true});
  options.events = &sampler;
  if (dist_run != nullptr) RETURN_IF_ERROR(StartRanks(g, options, backend.get()));
  ASSIGN_OR_RETURN(std::unique_ptr<executor::Trainer> trainer,
                   executor::Trainer::Create(g, backend.get(), options));
  if (dist_run != nullptr) {
    // Lock-step from the start: the same collectives each step, rank 0's state everywhere.
    std::vector<dist::CollectiveSpec> sequence = dist_run->buckets->Sequence();
    if (dist_run->batch_norm != nullptr) {
      sequence = dist::MergeByPosition(sequence, dist_run->batch_norm->Sequence());
    }
    if (!sets.has_value()) sequence.push_back({"allreduce of the step's loss", 1});
    RETURN_IF_ERROR(dist::CheckSequencesAgree(sequence, *dist_run->collectives));
    RETURN_IF_ERROR(dist::BroadcastState(*trainer, *dist_run->collectives));
    RETURN_IF_ERROR(dist::CheckParametersAgree(*trainer, *dist_run->collectives, 0));
    RETURN_IF_ERROR(dist_run->buckets->StartClock());
  }
  if (!json) {
    PrintPlan(*trainer, g, totals, sets.has_value() ? -1 : run.steps, io.out);
  }
  if (!export_dir.empty() && (dist_run == nullptr || dist_run->rank == 0)) {
    absl::Status s = sets.has_value() ? ExportFitInputs(*trainer, g, options, *sets)
                                      : ExportInputs(*trainer, g, options);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("--export: ", s.message()));
    }
  }
  FitTotals fit;
  if (sets.has_value()) {
    RETURN_IF_ERROR(
        Fit(*trainer, g, *sets, options.optimizer_params.learning_rate, totals, fit, io));
    totals.measured_peak = std::max(totals.measured_peak, fit.summary.arena_high_water_bytes);
  } else {
    RETURN_IF_ERROR(Train(*trainer, totals, io.out));
  }
  totals.workspace = backend->workspace_bytes();
  if (dist_run != nullptr) {
    RETURN_IF_ERROR(
        dist::CheckParametersAgree(*trainer, *dist_run->collectives, trainer->steps_run()));
    ASSIGN_OR_RETURN(dist_run->parameter_checksum, dist::ParameterChecksum(*trainer));
    ASSIGN_OR_RETURN(dist_run->measured_peaks,
                     dist_run->collectives->AllgatherU64(totals.measured_peak,
                                                         "every rank's measured arena peak"));
    ASSIGN_OR_RETURN(dist_run->predicted_peaks,
                     dist_run->collectives->AllgatherU64(trainer->plan().peak_bytes,
                                                         "every rank's predicted arena peak"));
    ASSIGN_OR_RETURN(const std::vector<dist::RankTimeline> timelines,
                     dist::GatherTimelines(dist_run->buckets->timeline(), *dist_run->collectives));
    if (trainer->steps_run() > 0) {
      ASSIGN_OR_RETURN(dist_run->overlap, dist::AnalyseOverlap(timelines));
    }
  }
  const planner::SectionPlan& plan = trainer->plan();
  if (!export_dir.empty() && (dist_run == nullptr || dist_run->rank == 0)) {
    ASSIGN_OR_RETURN(std::vector<executor::HostTensor> state, trainer->State());
    absl::Status s =
        executor::WriteReferenceResults(export_dir, totals.losses, totals.seconds, state);
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("--export: ", s.message()));
  }
  // Replans change the plan: the process is held against the largest one it ran under.
  const proto::ProcessMemory process = sampler.Account(
      trainer->largest_planned_peak_bytes(),
      trainer->executor().host_pool_bytes() + trainer->executor().staging_host_bytes());
  PrintSummary(*trainer, g, totals, sets.has_value() ? &fit : nullptr, process, io.out);
  if (totals.over_plan > 0 || totals.measured_peak > trainer->largest_planned_peak_bytes()) {
    return absl::InternalError(absl::StrCat(
        "measured peak ", totals.measured_peak, " B exceeds the predicted ", plan.peak_bytes,
        " B (by ", totals.over_plan, " B over the plan of its step): a bug"));
  }
  return absl::OkStatus();
}

void AddDataFlags(CLI::App& app, DataFlags& f) {
  const std::string group = "Data (instead of the synthetic task)";
  AddDatasetFlags(
      app, f,
      {group,
       "train on real data: fashion-mnist (/usr/share/datasets/fashion-mnist) or a "
       "dataset directory (docs/data.md)",
       "a checkpoint every N epochs (0: none by epochs)", "keep the newest K checkpoints"});
  app.add_flag("--prefetch-to-device", f.prefetch_to_device,
               "copy the next batch to the device from pinned memory during the step, into a "
               "planned staging slot (default: on for --backend cuda, off for cpu, where the "
               "copy cannot overlap; --prefetch-to-device=false turns it off)")
      ->group(group);
  app.add_option("--checkpoint-dir", f.checkpoint_dir,
                 "write checkpoints here (checkpoint-STEP.hrfit, and best.hrfit by eval "
                 "accuracy)")
      ->type_name("DIR")
      ->group(group);
  app.add_option("--checkpoint-every-steps", f.checkpoint_every_steps,
                 "a checkpoint every N steps (0: none by steps)")
      ->type_name("N")
      ->capture_default_str()
      ->check(AtLeast(0))
      ->group(group);
  app.add_option("--resume", f.resume,
                 "go on exactly from a checkpoint file, or the newest in a directory")
      ->type_name("FILE|DIR")
      ->group(group);
  app.add_option("--progress-seconds", f.progress_seconds,
                 "a progress line with the time left on stderr at most every S seconds (0: "
                 "none)")
      ->type_name("S")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber)
      ->group(group);
}

void AddDistFlags(CLI::App& app, DistFlags& f) {
  const std::string group = "Data parallel (docs/distributed.md)";
  app.add_option("--ranks", f.ranks,
                 "train as N processes through mpirun, --batch each (rank r reads its share "
                 "of every global batch of N x --batch); under mpirun, its -np")
      ->type_name("N")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024))
      ->group(group);
  app.add_option("--threads-per-rank", f.threads_per_rank,
                 "OMP_NUM_THREADS of each rank --ranks starts, unless already set")
      ->type_name("N")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024))
      ->group(group);
  app.add_option("--bucket-kib", f.bucket_kib,
                 "gradients are averaged in buckets of at least this many KiB, each as soon as "
                 "the backward completes it (0: one per gradient)")
      ->type_name("KIB")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 21))
      ->group(group);
  app.add_option("--check-every", f.check_every,
                 "compare the ranks' parameter checksums every K steps, besides at the start "
                 "and the end (0: only there)")
      ->type_name("K")
      ->capture_default_str()
      ->check(AtLeast(0))
      ->group(group);
  app.add_flag("--sync-batchnorm", f.sync_batchnorm,
               "every batch norm normalises over the global batch of all ranks (allreduces of "
               "its statistics in the forward and backward), as PyTorch's SyncBatchNorm; "
               "without it each rank normalises its own share")
      ->group(group);
  app.add_option("--collective-timeout", f.collective_timeout,
                 "a collective not done after S seconds stops every rank, naming it (a rank "
                 "died or issued something else)")
      ->type_name("S")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0))
      ->group(group);
}

}  // namespace

Command AddTrainCommand(CLI::App& headroom, const CommandIo& io) {
  auto state = std::make_shared<TrainCommand>();
  CLI::App* app = headroom.add_subcommand(
      "train", "train a model under a memory budget on the CPU (oneDNN) or CUDA backend");
  AddModelFlags(*app, state->model);
  AddPlanFlags(*app, state->plan, /*trains=*/true);
  AddLocalPlanFlags(*app, state->local);
  AddRunFlags(*app, state->run, kDefaultSteps, /*backend_default=*/"cpu");
  app->add_flag("--json", state->json,
                "one JSON object per step (per epoch with --dataset), then a summary object");
  AddCheckRebuildFlag(*app, state->check_rebuild_every);
  app->add_option("--max-rebuild-error", state->plan.max_rebuild_error,
                  "when a step checked by --check-rebuild measures a max_rebuild_error above T, "
                  "replan keeping an activation at least every k reversible blocks (k = the "
                  "longest chain / 2, halved at each replan down to 1: keep everything) and go "
                  "on from the same step; 0 never")
      ->type_name("T")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  AddDataFlags(*app, state->data);
  AddDistFlags(*app, state->dist);
  state->app = app;
  app->add_option("--export", state->export_dir,
                  "also write the graph, initial state, batches and results for "
                  "tools/torch_reference.py")
      ->type_name("DIR");
  return {app, [state, &io] { return state->Run(io); }};
}

}  // namespace headroom::clients
