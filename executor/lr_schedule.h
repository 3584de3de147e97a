// Learning-rate schedules by step, in closed form, as PyTorch's schedulers define them:
// StepLR (multiply by gamma every step_size steps), CosineAnnealingLR (from the base rate
// down to min_rate over period steps, then back up, as PyTorch's closed form goes on) and a
// linear warm-up (LinearLR from start_factor to 1 over warmup_steps), which multiplies
// either. A schedule is a value: the rate of step t depends on t alone, so a resumed run
// needs no scheduler state beyond the step it resumes at.
//
// Pure; thread-safe.
#ifndef HEADROOM_EXECUTOR_LR_SCHEDULE_H_
#define HEADROOM_EXECUTOR_LR_SCHEDULE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace headroom::executor {

struct LearningRateSchedule {
  enum class Kind { kConstant, kStep, kCosine };
  Kind kind = Kind::kConstant;
  double base_rate = 0.01;
  // kStep: the rate is multiplied by `gamma` every `step_size` steps.
  int64_t step_size = 1;
  double gamma = 0.1;
  // kCosine: the rate falls from base_rate to min_rate over `period` steps.
  int64_t period = 1;
  double min_rate = 0;
  // Linear warm-up over the first `warmup_steps` steps, from start_factor * rate to rate;
  // 0 steps: none. Default none.
  int64_t warmup_steps = 0;
  double warmup_start_factor = 0.1;

  // Returns the rate of step `step` (0 for the first).
  double RateAt(int64_t step) const;
};

// Returns the schedule `name` names for a run of `total_steps` from `base_rate`, with
// `warmup_steps` of linear warm-up from a tenth of the rate: "constant"; "step", a tenth
// of the rate every third of the run (StepLR, step_size max(1, total_steps / 3), gamma
// 0.1); "cosine", down to 0 over the whole run. InvalidArgument for another name, or
// counts below 0 (total below 1).
absl::StatusOr<LearningRateSchedule> ScheduleNamed(const std::string& name, double base_rate,
                                                   int64_t total_steps, int64_t warmup_steps);

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_LR_SCHEDULE_H_
