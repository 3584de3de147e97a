#include "executor/fit.h"

#include <algorithm>
#include <chrono>
#include <set>

#include "absl/strings/str_cat.h"
#include "data/epoch_order.h"
#include "executor/fit_checkpoint.h"
#include "util/check.h"
#include "util/status_macros.h"

namespace headroom::executor {
namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

FitLoop::FitLoop(Trainer* trainer, const data::ImageDataset* set, std::vector<int64_t> train_items,
                 const data::LoaderOptions& order, const FitOptions& options, ImageTask task,
                 int64_t batches_per_epoch, std::vector<std::unique_ptr<Callback>> callbacks)
    : trainer_(trainer),
      set_(set),
      train_items_(std::move(train_items)),
      order_(order),
      options_(options),
      task_(std::move(task)),
      batches_per_epoch_(batches_per_epoch),
      callbacks_(std::move(callbacks)),
      callback_seconds_(callbacks_.size(), 0.0) {}

absl::StatusOr<std::unique_ptr<FitLoop>> FitLoop::Create(
    Trainer* trainer, const data::ImageDataset* set, std::vector<int64_t> train_items,
    const data::LoaderOptions& order, const FitOptions& options,
    std::vector<std::unique_ptr<Callback>> callbacks) {
  if (options.epochs < 1) {
    return absl::InvalidArgumentError(absl::StrCat("fit: ", options.epochs, " epochs; needs >= 1"));
  }
  ASSIGN_OR_RETURN(ImageTask task, ImageTask::Create(trainer->forward(), *set));
  std::set<std::string> names;
  for (const auto& c : callbacks) {
    if (!names.insert(c->name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("fit: two callbacks are named '", c->name(), "'"));
    }
  }
  data::LoaderOptions loader = order;
  loader.batch = task.batch;
  const int64_t batches =
      data::BatchesPerEpoch(static_cast<int64_t>(train_items.size()), task.batch * loader.ranks);
  if (batches < 1) {
    return absl::InvalidArgumentError(absl::StrCat("fit: ", train_items.size(),
                                                   " training items hold no whole batch of ",
                                                   task.batch * loader.ranks));
  }
  return std::unique_ptr<FitLoop>(new FitLoop(trainer, set, std::move(train_items), loader, options,
                                              std::move(task), batches, std::move(callbacks)));
}

const Metric* FitLoop::FindMetric(const std::string& name) const {
  auto it = metrics_.find(name);
  return it == metrics_.end() ? nullptr : &it->second;
}

void FitLoop::RequestStop(absl::string_view reason) {
  if (stop_requested_) return;
  stop_requested_ = true;
  stop_reason_ = std::string(reason);
}

absl::Status FitLoop::WriteCheckpoint(const std::string& path) const {
  FitCheckpoint c;
  c.epoch = position_.epoch;
  c.batch = position_.batch;
  c.seed = order_.seed;
  c.batch_size = order_.batch;
  c.ranks = order_.ranks;
  c.epoch_loss_sum = epoch_loss_sum_;
  c.epoch_steps = epoch_steps_;
  c.stop_requested = stop_requested_;
  c.stop_reason = stop_reason_;
  ASSIGN_OR_RETURN(ExecutorState state, trainer_->SaveState());
  c.steps_run = state.steps_run;
  c.tensors = std::move(state.tensors);
  for (const auto& [name, metric] : metrics_) c.metrics[name] = {metric.value, metric.epoch};
  for (const auto& callback : callbacks_) {
    c.callbacks.emplace_back(callback->name(), callback->SaveState());
  }
  return WriteFitCheckpoint(path, c);
}

absl::Status FitLoop::Resume(const std::string& path) {
  CHECK(!ran_);
  ASSIGN_OR_RETURN(FitCheckpoint c, ReadFitCheckpoint(path));
  // 1. The same data order, or the resumed run would see other batches.
  if (c.seed != order_.seed || c.batch_size != order_.batch || c.ranks != order_.ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint '", path, "' was taken with seed ", c.seed, ", batch ",
                     c.batch_size, " and ", c.ranks, " rank(s); this run has seed ", order_.seed,
                     ", batch ", order_.batch, " and ", order_.ranks));
  }
  if (c.epoch < 0 || c.batch < 0 || c.batch > batches_per_epoch_) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint '", path, "': position epoch ",
                                                   c.epoch, " batch ", c.batch, " is outside ",
                                                   batches_per_epoch_, " batches per epoch"));
  }
  // 2. The trainer, then each callback's state (a callback this run lacks is left out).
  std::vector<StateTensorView> views;
  for (const HostTensor& t : c.tensors) views.push_back({t.name, t.shape, t.dtype, t.bytes});
  RETURN_IF_ERROR(trainer_->RestoreState(c.steps_run, views));
  for (const auto& [name, state] : c.callbacks) {
    for (const auto& cb : callbacks_) {
      if (cb->name() != name) continue;
      if (absl::Status s = cb->RestoreState(state); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("checkpoint '", path, "': callback '", name,
                                                   "': ", s.message()));
      }
    }
  }
  position_ = {c.epoch, c.batch};
  epoch_loss_sum_ = c.epoch_loss_sum;
  epoch_steps_ = c.epoch_steps;
  stop_requested_ = c.stop_requested;
  stop_reason_ = c.stop_reason;
  metrics_.clear();
  for (const auto& [name, metric] : c.metrics) metrics_[name] = {metric.first, metric.second};
  return absl::OkStatus();
}

template <typename Hook>
absl::Status FitLoop::CallEach(Hook hook) {
  for (size_t i = 0; i < callbacks_.size(); ++i) {
    const auto start = std::chrono::steady_clock::now();
    const absl::Status status = hook(*callbacks_[i]);
    callback_seconds_[i] += Seconds(start);
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat("callback '", callbacks_[i]->name(),
                                                      "': ", status.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<StepResult> FitLoop::RunStep(data::BatchLoader& loader) {
  if (!trainer_->prefetch_to_device()) {
    const data::Batch batch = loader.Next();
    input_wait_seconds_ = loader.wait_seconds();
    return trainer_->StepOn(task_.Tensors(batch.pixels, batch.labels));
  }
  // Prefetch to device: this step's batch is staged (the first one here), and the next
  // one, unless this step is the run's last, is staged while it computes.
  if (!trainer_->executor().batch_staged()) {
    const data::Batch batch = loader.Next();
    RETURN_IF_ERROR(trainer_->StageBatch(task_.Tensors(batch.pixels, batch.labels)));
  }
  const int64_t after = trainer_->steps_run() + 1;
  const bool last = position_.epoch * batches_per_epoch_ + position_.batch + 1 >= total_steps() ||
                    (options_.stop_at_step > 0 && after >= options_.stop_at_step);
  std::vector<HostTensor> next;
  if (!last) {
    const data::Batch batch = loader.Next();
    next = task_.Tensors(batch.pixels, batch.labels);
  }
  input_wait_seconds_ = loader.wait_seconds();
  return trainer_->StepOnStaged(last ? nullptr : &next);
}

absl::Status FitLoop::RunEpochSteps(data::BatchLoader& loader, FitSummary& summary) {
  while (position_.batch < batches_per_epoch_ && !stop_requested_) {
    const int64_t step = trainer_->steps_run();
    RETURN_IF_ERROR(CallEach([&](Callback& c) { return c.OnStepBegin(*this, step); }));
    absl::StatusOr<StepResult> result = RunStep(loader);
    if (!result.ok()) {
      return absl::Status(result.status().code(),
                          absl::StrCat("epoch ", position_.epoch, " batch ", position_.batch,
                                       " (step ", step, "): ", result.status().message()));
    }
    ++position_.batch;
    epoch_loss_sum_ += result->loss;
    ++epoch_steps_;
    ++summary.steps_this_run;
    summary.step_seconds += result->seconds;
    summary.last_loss = result->loss;
    summary.arena_high_water_bytes =
        std::max(summary.arena_high_water_bytes, result->arena_high_water_bytes);
    RETURN_IF_ERROR(CallEach([&](Callback& c) { return c.OnStepEnd(*this, *result); }));
    if (options_.stop_at_step > 0 && trainer_->steps_run() >= options_.stop_at_step) {
      RequestStop(absl::StrCat("stopped at step ", options_.stop_at_step));
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<FitSummary> FitLoop::Run() {
  CHECK(!ran_);
  ran_ = true;
  const auto start = std::chrono::steady_clock::now();
  FitSummary summary;
  // A resume right after an epoch's last step starts the loader at the next epoch.
  data::LoaderOptions loader_options = order_;
  loader_options.first_epoch = position_.epoch;
  loader_options.first_batch = position_.batch;
  if (position_.batch == batches_per_epoch_) {
    ++loader_options.first_epoch;
    loader_options.first_batch = 0;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<data::BatchLoader> loader,
                   data::BatchLoader::Create(set_, train_items_, loader_options));
  // A batch an earlier run staged and never trained on is not this run's.
  trainer_->DiscardStagedBatch();
  RETURN_IF_ERROR(CallEach([&](Callback& c) { return c.OnTrainBegin(*this); }));
  while (position_.epoch < options_.epochs && !stop_requested_) {
    const int64_t epoch = position_.epoch;
    if (position_.batch == 0) {
      epoch_loss_sum_ = 0;
      epoch_steps_ = 0;
      RETURN_IF_ERROR(CallEach([&](Callback& c) { return c.OnEpochBegin(*this, epoch); }));
    }
    RETURN_IF_ERROR(RunEpochSteps(*loader, summary));
    if (position_.batch < batches_per_epoch_) break;  // stopped inside the epoch
    SetMetric("train_loss", epoch_loss(), epoch);
    position_ = {epoch + 1, 0};
    RETURN_IF_ERROR(CallEach([&](Callback& c) { return c.OnEpochEnd(*this, epoch); }));
  }
  RETURN_IF_ERROR(CallEach([&](Callback& c) { return c.OnTrainEnd(*this); }));
  summary.epochs_completed = position_.epoch;
  summary.steps_run = trainer_->steps_run();
  summary.stopped_early = stop_requested_;
  summary.stop_reason = stop_reason_;
  summary.input_wait_seconds = loader->wait_seconds();
  trainer_->DiscardStagedBatch();  // staged before a stop
  for (size_t i = 0; i < callbacks_.size(); ++i) {
    summary.callback_seconds.emplace_back(callbacks_[i]->name(), callback_seconds_[i]);
  }
  summary.metrics = metrics_;
  summary.loop_seconds = Seconds(start);
  return summary;
}

}  // namespace headroom::executor
