#include "executor/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace headroom::executor {

double LearningRateSchedule::RateAt(int64_t step) const {
  double rate = base_rate;
  switch (kind) {
    case Kind::kConstant:
      break;
    case Kind::kStep:
      rate = base_rate * std::pow(gamma, static_cast<double>(step / step_size));
      break;
    case Kind::kCosine:
      rate = min_rate +
             (base_rate - min_rate) * (1 + std::cos(M_PI * static_cast<double>(step) / period)) / 2;
      break;
  }
  if (warmup_steps > 0) {
    const double done = static_cast<double>(std::min(step, warmup_steps)) / warmup_steps;
    rate *= warmup_start_factor + (1 - warmup_start_factor) * done;
  }
  return rate;
}

absl::StatusOr<LearningRateSchedule> ScheduleNamed(const std::string& name, double base_rate,
                                                   int64_t total_steps, int64_t warmup_steps) {
  if (total_steps < 1 || warmup_steps < 0 || !(base_rate > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "learning-rate schedule over ", total_steps, " steps with ", warmup_steps,
        " warm-up steps from rate ", base_rate, ": needs steps >= 1, warm-up >= 0, rate > 0"));
  }
  LearningRateSchedule s;
  s.base_rate = base_rate;
  s.warmup_steps = warmup_steps;
  if (name == "constant") {
    s.kind = LearningRateSchedule::Kind::kConstant;
  } else if (name == "step") {
    s.kind = LearningRateSchedule::Kind::kStep;
    s.step_size = std::max<int64_t>(1, total_steps / 3);
    s.gamma = 0.1;
  } else if (name == "cosine") {
    s.kind = LearningRateSchedule::Kind::kCosine;
    s.period = total_steps;
    s.min_rate = 0;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("learning-rate schedule '", name, "': needs constant, step or cosine"));
  }
  return s;
}

}  // namespace headroom::executor
