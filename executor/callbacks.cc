#include "executor/callbacks.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "util/check.h"
#include "util/status_macros.h"

namespace headroom::executor {
namespace {

constexpr char kCheckpointPrefix[] = "checkpoint-";
constexpr char kCheckpointSuffix[] = ".hrfit";

std::string Exact(double value) { return absl::StrFormat("%.17g", value); }

// Returns the "name value..." lines of a callback's state as (name, rest) pairs.
std::vector<std::pair<std::string, std::string>> StateLines(absl::string_view state) {
  std::vector<std::pair<std::string, std::string>> lines;
  for (absl::string_view line : absl::StrSplit(state, '\n', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(line, absl::MaxSplits(' ', 1));
    lines.push_back(std::move(kv));
  }
  return lines;
}

absl::Status BadState(absl::string_view what, absl::string_view line) {
  return absl::InvalidArgumentError(absl::StrCat("bad ", what, " state line '", line, "'"));
}

// Whether `value` beats `best` by more than `delta` in the direction that is better.
bool Improves(double value, const std::optional<double>& best, bool higher_is_better,
              double delta) {
  if (!best.has_value()) return true;
  return higher_is_better ? value > *best + delta : value < *best - delta;
}

}  // namespace

absl::Status LearningRateCallback::OnStepBegin(FitLoop& fit, int64_t step) {
  last_rate_ = schedule_.RateAt(step);
  fit.trainer().SetLearningRate(last_rate_);
  return absl::OkStatus();
}

EvaluationCallback::EvaluationCallback(const data::ImageDataset* set, std::vector<int64_t> items,
                                       int64_t every_epochs)
    : set_(set), items_(std::move(items)), every_epochs_(every_epochs) {
  CHECK(every_epochs_ >= 1 && !items_.empty());
}

absl::Status EvaluationCallback::OnEpochEnd(FitLoop& fit, int64_t epoch) {
  if ((epoch + 1) % every_epochs_ != 0 && epoch + 1 != fit.epochs()) return absl::OkStatus();
  ASSIGN_OR_RETURN(EvalMetrics m, EvaluateImages(fit.trainer(), fit.task(), *set_, items_));
  const uint64_t peak = fit.trainer().plan().peak_bytes;
  if (m.arena_high_water_bytes > peak) {
    return absl::InternalError(absl::StrCat("evaluation raised the arena's high-water mark to ",
                                            m.arena_high_water_bytes, " B, past the plan's ", peak,
                                            " B: a bug"));
  }
  seconds_ += m.seconds;
  fit.SetMetric("eval_loss", m.loss, epoch);
  fit.SetMetric("eval_accuracy", m.accuracy, epoch);
  last_ = m;
  return absl::OkStatus();
}

std::string EvaluationCallback::SaveState() const {
  if (!last_.has_value()) return "";
  return absl::StrCat("loss ", Exact(last_->loss), "\naccuracy ", Exact(last_->accuracy),
                      "\nitems ", last_->items, "\n");
}

absl::Status EvaluationCallback::RestoreState(absl::string_view state) {
  last_.reset();
  if (state.empty()) return absl::OkStatus();
  EvalMetrics m;
  for (const auto& [name, value] : StateLines(state)) {
    const bool ok = name == "loss"       ? absl::SimpleAtod(value, &m.loss)
                    : name == "accuracy" ? absl::SimpleAtod(value, &m.accuracy)
                    : name == "items"    ? absl::SimpleAtoi(value, &m.items)
                                         : false;
    if (!ok) return BadState("evaluation", absl::StrCat(name, " ", value));
  }
  last_ = m;
  return absl::OkStatus();
}

absl::Status EarlyStoppingCallback::OnEpochEnd(FitLoop& fit, int64_t epoch) {
  const Metric* m = fit.FindMetric(options_.metric);
  if (m == nullptr || m->epoch != epoch) return absl::OkStatus();  // not measured this epoch
  if (Improves(m->value, best_, options_.higher_is_better, options_.min_delta)) {
    best_ = m->value;
    best_epoch_ = epoch;
    wait_ = 0;
    return absl::OkStatus();
  }
  if (++wait_ >= options_.patience) {
    fit.RequestStop(absl::StrFormat(
        "early stop at epoch %d: %s has not improved on %.6g (epoch %d) by more than %g in %d "
        "evaluation(s)",
        epoch, options_.metric, *best_, best_epoch_, options_.min_delta, wait_));
  }
  return absl::OkStatus();
}

std::string EarlyStoppingCallback::SaveState() const {
  std::string state = absl::StrCat("wait ", wait_, "\n");
  if (best_.has_value()) absl::StrAppend(&state, "best ", Exact(*best_), " ", best_epoch_, "\n");
  return state;
}

absl::Status EarlyStoppingCallback::RestoreState(absl::string_view state) {
  best_.reset();
  best_epoch_ = -1;
  wait_ = 0;
  for (const auto& [name, value] : StateLines(state)) {
    bool ok = false;
    if (name == "wait") {
      ok = absl::SimpleAtoi(value, &wait_);
    } else if (name == "best") {
      std::pair<std::string, std::string> v = absl::StrSplit(value, ' ');
      double best = 0;
      ok = absl::SimpleAtod(v.first, &best) && absl::SimpleAtoi(v.second, &best_epoch_);
      best_ = best;
    }
    if (!ok) return BadState("early stopping", absl::StrCat(name, " ", value));
  }
  return absl::OkStatus();
}

std::string CheckpointCallback::best_path() const {
  return best_.has_value() ? (std::filesystem::path(options_.dir) / "best.hrfit").string() : "";
}

absl::Status CheckpointCallback::Save(FitLoop& fit) {
  const int64_t step = fit.trainer().steps_run();
  if (step == last_saved_step_) return absl::OkStatus();
  const auto start = std::chrono::steady_clock::now();
  const std::string path = (std::filesystem::path(options_.dir) /
                            absl::StrFormat("%s%09d%s", kCheckpointPrefix, step, kCheckpointSuffix))
                               .string();
  // The state the checkpoint holds already lists it and drops what it replaces.
  std::vector<std::string> pruned;
  if (kept_.empty() || kept_.back() != path) kept_.push_back(path);
  while (static_cast<int64_t>(kept_.size()) > options_.keep_last) {
    pruned.push_back(kept_.front());
    kept_.erase(kept_.begin());
  }
  last_saved_step_ = step;
  RETURN_IF_ERROR(fit.WriteCheckpoint(path));
  for (const std::string& old : pruned) {
    std::error_code error;
    std::filesystem::remove(old, error);
  }
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return absl::OkStatus();
}

absl::Status CheckpointCallback::OnStepEnd(FitLoop& fit, const StepResult&) {
  if (options_.every_steps > 0 && fit.trainer().steps_run() % options_.every_steps == 0) {
    return Save(fit);
  }
  return absl::OkStatus();
}

absl::Status CheckpointCallback::OnEpochEnd(FitLoop& fit, int64_t epoch) {
  if (options_.every_epochs > 0 && (epoch + 1) % options_.every_epochs == 0) {
    // A step checkpoint of the epoch's last step is written before its end ran: write again.
    last_saved_step_ = -1;
    RETURN_IF_ERROR(Save(fit));
  }
  if (options_.best_metric.empty()) return absl::OkStatus();
  const Metric* m = fit.FindMetric(options_.best_metric);
  if (m == nullptr || m->epoch != epoch ||
      !Improves(m->value, best_, options_.best_higher_is_better, 0)) {
    return absl::OkStatus();
  }
  best_ = m->value;
  const auto start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(fit.WriteCheckpoint(best_path()));
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return absl::OkStatus();
}

std::string CheckpointCallback::SaveState() const {
  std::string state;
  for (const std::string& path : kept_) absl::StrAppend(&state, "kept ", path, "\n");
  if (best_.has_value()) absl::StrAppend(&state, "best ", Exact(*best_), "\n");
  return state;
}

absl::Status CheckpointCallback::RestoreState(absl::string_view state) {
  kept_.clear();
  best_.reset();
  for (const auto& [name, value] : StateLines(state)) {
    if (name == "kept") {
      kept_.push_back(value);
    } else if (double best = 0; name == "best" && absl::SimpleAtod(value, &best)) {
      best_ = best;
    } else {
      return BadState("checkpoint", absl::StrCat(name, " ", value));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> LatestCheckpoint(const std::string& dir) {
  std::error_code error;
  std::filesystem::directory_iterator it(dir, error);
  if (error) {
    return absl::NotFoundError(absl::StrCat("checkpoint directory '", dir, "': ", error.message()));
  }
  std::string latest;
  int64_t latest_step = -1;
  for (const auto& entry : it) {
    const std::string filename = entry.path().filename().string();
    absl::string_view name = filename;
    int64_t step = 0;
    if (absl::ConsumePrefix(&name, kCheckpointPrefix) &&
        absl::ConsumeSuffix(&name, kCheckpointSuffix) && absl::SimpleAtoi(name, &step) &&
        step > latest_step) {
      latest_step = step;
      latest = entry.path().string();
    }
  }
  if (latest.empty()) {
    return absl::NotFoundError(
        absl::StrCat("no ", kCheckpointPrefix, "STEP", kCheckpointSuffix, " file in '", dir, "'"));
  }
  return latest;
}

ProgressCallback::ProgressCallback(std::ostream* out, double interval_seconds,
                                   std::function<double()> clock)
    : out_(out),
      interval_seconds_(interval_seconds),
      clock_(clock != nullptr ? std::move(clock) : [] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
            .count();
      }) {}

absl::Status ProgressCallback::OnTrainBegin(FitLoop& fit) {
  start_ = clock_();
  last_print_ = start_;
  start_step_ = fit.trainer().steps_run();
  return absl::OkStatus();
}

double ProgressCallback::SecondsLeft(const FitLoop& fit) const {
  const int64_t done = fit.trainer().steps_run() - start_step_;
  const double elapsed = clock_() - start_;
  if (done <= 0 || elapsed <= 0) return -1;
  return (fit.total_steps() - fit.trainer().steps_run()) * elapsed / done;
}

void ProgressCallback::Print(const FitLoop& fit, double loss) {
  const double elapsed = clock_() - start_;
  const int64_t done = fit.trainer().steps_run() - start_step_;
  const double left = SecondsLeft(fit);
  const FitPosition& p = fit.position();
  // At an epoch's end the position is already the next epoch's first batch.
  const int64_t epoch = p.batch == 0 && p.epoch > 0 ? p.epoch - 1 : p.epoch;
  const int64_t batch = p.batch == 0 && p.epoch > 0 ? fit.batches_per_epoch() : p.batch;
  std::string line = absl::StrFormat(
      "epoch %d/%d  batch %d/%d  loss %.4f  lr %.3g  %.1f steps/s  elapsed %s  ETA %s", epoch + 1,
      fit.epochs(), batch, fit.batches_per_epoch(), loss, fit.trainer().executor().learning_rate(),
      elapsed > 0 ? done / elapsed : 0.0, DurationString(elapsed),
      left < 0 ? "?" : DurationString(left));
  for (const char* name : {"eval_loss", "eval_accuracy"}) {
    const Metric* m = fit.FindMetric(name);
    if (m != nullptr && m->epoch == epoch && p.batch == 0) {
      absl::StrAppend(&line, absl::StrFormat("  %s %.4f", name, m->value));
    }
  }
  *out_ << line << "\n" << std::flush;
  last_print_ = clock_();
}

absl::Status ProgressCallback::OnStepEnd(FitLoop& fit, const StepResult& result) {
  if (clock_() - last_print_ >= interval_seconds_) Print(fit, result.loss);
  return absl::OkStatus();
}

absl::Status ProgressCallback::OnEpochEnd(FitLoop& fit, int64_t epoch) {
  const Metric* train = fit.FindMetric("train_loss");
  Print(fit, train != nullptr ? train->value : 0);
  return absl::OkStatus();
}

std::string DurationString(double seconds) {
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, (s / 60) % 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

}  // namespace headroom::executor
