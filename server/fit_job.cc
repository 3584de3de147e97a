#include "server/fit_job.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "data/epoch_order.h"
#include "executor/callbacks.h"
#include "executor/image_task.h"
#include "executor/lr_schedule.h"
#include "server/data_roots.h"
#include "util/status_macros.h"

namespace headroom::server {
namespace {

absl::Status OutOfRange(const char* field, uint64_t value, uint64_t most) {
  return absl::InvalidArgumentError(
      absl::StrCat("spec.data.", field, ": ", value, " is above the limit of ", most));
}

// The fields that mean something only with a dataset, and whether each is set.
bool AnyDataOptionSet(const proto::DataOptions& d) {
  return d.epochs() != 0 || d.eval_every() != 0 || d.validation_fraction() != 0 ||
         !d.lr_schedule().empty() || d.warmup_steps() != 0 || d.crop_padding() != 0 || d.flip() ||
         d.prefetch() != 0 || d.checkpoint_every_epochs() != 0 || d.keep_last() != 0 ||
         d.early_stop_patience() != 0 || !d.early_stop_metric().empty() ||
         d.early_stop_min_delta() != 0;
}

std::string EarlyStopMetric(const proto::DataOptions& d) {
  return d.early_stop_metric().empty() ? "eval_loss" : d.early_stop_metric();
}

}  // namespace

bool HasDataset(const proto::JobSpec& spec) { return !spec.data().dataset().empty(); }

absl::Status CheckDataOptions(const proto::JobSpec& spec) {
  const proto::DataOptions& d = spec.data();
  if (!HasDataset(spec)) {
    if (AnyDataOptionSet(d)) {
      return absl::InvalidArgumentError(
          "spec.data: options given without spec.data.dataset (they apply to training on a "
          "dataset)");
    }
    return absl::OkStatus();
  }
  if (spec.train().steps() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.train.steps: ", spec.train().steps(),
                     ", but with spec.data.dataset the epochs decide the steps: leave it 0"));
  }
  if (d.epochs() == 0) return absl::InvalidArgumentError("spec.data.epochs: must be at least 1");
  if (d.epochs() > kMaxJobEpochs) return OutOfRange("epochs", d.epochs(), kMaxJobEpochs);
  if (d.eval_every() > kMaxJobEpochs)
    return OutOfRange("eval_every", d.eval_every(), kMaxJobEpochs);
  if (!(d.validation_fraction() >= 0 && d.validation_fraction() <= kMaxValidationFraction)) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.data.validation_fraction: ", d.validation_fraction(), " is outside [0, ",
                     kMaxValidationFraction, "]"));
  }
  if (!d.lr_schedule().empty() && d.lr_schedule() != "constant" && d.lr_schedule() != "step" &&
      d.lr_schedule() != "cosine") {
    return absl::InvalidArgumentError(absl::StrCat("spec.data.lr_schedule: '", d.lr_schedule(),
                                                   "'; one of constant, step, cosine"));
  }
  if (d.crop_padding() > kMaxCropPadding) {
    return OutOfRange("crop_padding", d.crop_padding(), kMaxCropPadding);
  }
  if (d.prefetch() > kMaxPrefetch) return OutOfRange("prefetch", d.prefetch(), kMaxPrefetch);
  if (d.checkpoint_every_epochs() > kMaxJobEpochs) {
    return OutOfRange("checkpoint_every_epochs", d.checkpoint_every_epochs(), kMaxJobEpochs);
  }
  if (d.keep_last() > kMaxKeepLast) return OutOfRange("keep_last", d.keep_last(), kMaxKeepLast);
  if (d.early_stop_patience() > kMaxJobEpochs) {
    return OutOfRange("early_stop_patience", d.early_stop_patience(), kMaxJobEpochs);
  }
  const std::string metric = EarlyStopMetric(d);
  if (metric != "eval_loss" && metric != "eval_accuracy" && metric != "train_loss") {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.data.early_stop_metric: '", metric,
                     "'; one of eval_loss, eval_accuracy, train_loss"));
  }
  if (!(std::isfinite(d.early_stop_min_delta()) && d.early_stop_min_delta() >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.data.early_stop_min_delta: ", d.early_stop_min_delta(), "; must be finite and >= 0"));
  }
  if (d.dataset() != kFashionMnistName && d.eval_every() > 0 && d.validation_fraction() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.data.dataset '", d.dataset(),
                     "' has no test part to evaluate on: set spec.data.validation_fraction "
                     "(held out from it) or spec.data.eval_every 0"));
  }
  if (d.early_stop_patience() > 0 && d.eval_every() == 0 && metric != "train_loss") {
    return absl::InvalidArgumentError(absl::StrCat("spec.data.early_stop_metric ", metric,
                                                   " is measured by evaluation: not with "
                                                   "spec.data.eval_every 0"));
  }
  return absl::OkStatus();
}

absl::StatusOr<JobDataShape> InspectJobData(const proto::JobSpec& spec, const std::string& path,
                                            const graph::Graph& forward,
                                            uint64_t max_memory_bytes) {
  const proto::DataOptions& d = spec.data();
  const bool fashion = path == kFashionMnistName;
  auto named = [&](const absl::Status& s) {
    return absl::Status(s.code(),
                        absl::StrCat("spec.data.dataset '", d.dataset(), "': ", s.message()));
  };
  absl::StatusOr<data::ImageSetShape> train =
      fashion ? data::ImageDataset::InspectFashionMnist(data::FashionMnistPart::kTrain)
              : data::ImageDataset::InspectDirectory(path);
  if (!train.ok()) return named(train.status());
  JobDataShape out;
  out.train = *std::move(train);
  out.memory_bytes = out.train.memory_bytes();
  // The model must take the set's images and classes.
  absl::StatusOr<executor::ImageTask> task = executor::ImageTask::Create(forward, out.train);
  if (!task.ok()) return named(task.status());
  if (d.validation_fraction() > 0) {
    absl::StatusOr<data::TrainValidationSplit> split =
        data::SplitTrainValidation(out.train.size, d.validation_fraction(), spec.train().seed());
    if (!split.ok()) return named(split.status());
    out.train_items = std::move(split->train);
    if (d.eval_every() > 0) out.held_out_items = std::move(split->validation);
  } else {
    out.train_items.resize(out.train.size);
    for (int64_t i = 0; i < out.train.size; ++i) out.train_items[i] = i;
    if (fashion && d.eval_every() > 0) {
      absl::StatusOr<data::ImageSetShape> test =
          data::ImageDataset::InspectFashionMnist(data::FashionMnistPart::kTest);
      if (!test.ok()) return named(test.status());
      out.held_out_is_test = true;
      out.memory_bytes += test->memory_bytes();
      out.held_out_items.resize(test->size);
      for (int64_t i = 0; i < test->size; ++i) out.held_out_items[i] = i;
    }
  }
  if (max_memory_bytes > 0 && out.memory_bytes > max_memory_bytes) {
    return named(absl::ResourceExhaustedError(
        absl::StrCat(out.train.size, " items of ", out.train.channels, "x", out.train.height, "x",
                     out.train.width, out.train.floats ? " floats" : " bytes",
                     out.held_out_is_test ? " and its test part" : "", " take ", out.memory_bytes,
                     " bytes in memory once loaded, more than headroomd's --max-dataset-bytes ",
                     max_memory_bytes)));
  }
  if (d.eval_every() > 0 && out.held_out_items.empty()) {
    return named(absl::InvalidArgumentError("no items are held out to evaluate on"));
  }
  out.batches_per_epoch =
      data::BatchesPerEpoch(static_cast<int64_t>(out.train_items.size()), task->batch);
  if (out.batches_per_epoch < 1) {
    return named(absl::InvalidArgumentError(absl::StrCat(out.train_items.size(),
                                                         " training items hold no whole batch of ",
                                                         task->batch, " (the model's batch)")));
  }
  out.total_steps = d.epochs() * static_cast<uint64_t>(out.batches_per_epoch);
  if (d.warmup_steps() > out.total_steps) {
    return absl::InvalidArgumentError(absl::StrCat("spec.data.warmup_steps: ", d.warmup_steps(),
                                                   " is more than the job's ", out.total_steps,
                                                   " steps"));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<JobData>> LoadJobData(const proto::JobSpec& spec,
                                                     const std::string& path,
                                                     const graph::Graph& forward,
                                                     uint64_t max_memory_bytes) {
  ASSIGN_OR_RETURN(JobDataShape shape, InspectJobData(spec, path, forward, max_memory_bytes));
  const proto::DataOptions& d = spec.data();
  const bool fashion = path == kFashionMnistName;
  auto named = [&](const absl::Status& s) {
    return absl::Status(s.code(),
                        absl::StrCat("spec.data.dataset '", d.dataset(), "': ", s.message()));
  };
  absl::StatusOr<data::ImageDataset> train =
      fashion ? data::ImageDataset::LoadFashionMnist(data::FashionMnistPart::kTrain)
              : data::ImageDataset::LoadDirectory(path);
  if (!train.ok()) return named(train.status());
  // The files may change between reading their headers and reading them whole.
  if (train->size() != shape.train.size ||
      train->image_elements() != shape.train.image_elements()) {
    return named(absl::FailedPreconditionError("changed while it was read"));
  }
  auto out = std::make_unique<JobData>(JobData{*std::move(train), std::move(shape.train_items),
                                               std::nullopt, std::move(shape.held_out_items),
                                               shape.batches_per_epoch, shape.total_steps});
  if (shape.held_out_is_test) {
    absl::StatusOr<data::ImageDataset> test =
        data::ImageDataset::LoadFashionMnist(data::FashionMnistPart::kTest);
    if (!test.ok()) return named(test.status());
    if (test->size() != static_cast<int64_t>(out->held_out_items.size())) {
      return named(absl::FailedPreconditionError("its test part changed while it was read"));
    }
    out->test = *std::move(test);
  }
  return out;
}

data::LoaderOptions LoaderOptionsOf(const proto::JobSpec& spec) {
  data::LoaderOptions order;
  order.seed = spec.train().seed();
  order.augmentation.crop_padding = static_cast<int64_t>(spec.data().crop_padding());
  order.augmentation.horizontal_flip = spec.data().flip();
  order.prefetch = spec.data().prefetch() == 0 ? 2 : static_cast<int>(spec.data().prefetch());
  return order;
}

absl::StatusOr<std::vector<std::unique_ptr<executor::Callback>>> MakeFitCallbacks(
    const proto::JobSpec& spec, const JobData& data, double base_rate,
    const std::string& checkpoint_dir, uint64_t checkpoint_interval_steps) {
  const proto::DataOptions& d = spec.data();
  std::vector<std::unique_ptr<executor::Callback>> callbacks;
  absl::StatusOr<executor::LearningRateSchedule> schedule = executor::ScheduleNamed(
      d.lr_schedule().empty() ? "constant" : d.lr_schedule(), base_rate,
      static_cast<int64_t>(data.total_steps), static_cast<int64_t>(d.warmup_steps()));
  if (!schedule.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.data.lr_schedule: ", schedule.status().message()));
  }
  callbacks.push_back(std::make_unique<executor::LearningRateCallback>(*schedule));
  if (d.eval_every() > 0) {
    callbacks.push_back(std::make_unique<executor::EvaluationCallback>(
        &data.held_out(), data.held_out_items, static_cast<int64_t>(d.eval_every())));
  }
  if (d.early_stop_patience() > 0) {
    executor::EarlyStoppingOptions stop;
    stop.metric = EarlyStopMetric(d);
    stop.higher_is_better = stop.metric == "eval_accuracy";
    stop.patience = static_cast<int64_t>(d.early_stop_patience());
    stop.min_delta = d.early_stop_min_delta();
    callbacks.push_back(std::make_unique<executor::EarlyStoppingCallback>(stop));
  }
  executor::CheckpointOptions checkpoints;
  checkpoints.dir = checkpoint_dir;
  checkpoints.every_steps = static_cast<int64_t>(checkpoint_interval_steps);
  checkpoints.every_epochs = static_cast<int64_t>(d.checkpoint_every_epochs());
  checkpoints.keep_last = d.keep_last() == 0 ? 3 : static_cast<int64_t>(d.keep_last());
  if (d.eval_every() > 0) checkpoints.best_metric = "eval_accuracy";
  callbacks.push_back(std::make_unique<executor::CheckpointCallback>(checkpoints));
  return callbacks;
}

}  // namespace headroom::server
