// The trainer's options from the wire's plan options: what `headroom train`, `headroom
// profile` and headroomd's jobs all train with, so the defaults (the learning rate of each
// optimizer, the cost model's device for each backend, seed 1) live in one place.
#ifndef HEADROOM_RUNNER_TRAINER_OPTIONS_H_
#define HEADROOM_RUNNER_TRAINER_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "executor/trainer.h"
#include "proto/headroom.pb.h"

namespace headroom::runner {

// The learning rate an optimizer trains with when none is given: 0.01 for SGD with
// momentum, 0.001 for Adam.
double DefaultLearningRate(proto::Optimizer::Kind kind);

// The cost-model preset a backend's plans assume when none is named: "h100" for "cuda",
// else "cpu".
std::string DefaultDevicePreset(const std::string& backend);

// Returns the trainer options of `plan` (optimizer and its hyperparameters, offload, host
// memory, the device the plan is chosen for, the budget) for a run on `backend` with `seed`
// (0: 1). InvalidArgument for an unknown device preset or a bad rate, or
// planner::CheckPlanOptions(plan, "plan")'s error (NaN, infinite or out-of-range optimizer
// hyperparameters, unknown enum values, a bad alignment). Optional optimizer fields that are
// set are used as given: momentum 0 trains plain SGD.
absl::StatusOr<executor::TrainerOptions> TrainerOptionsOf(const proto::PlanOptions& plan,
                                                          uint64_t seed,
                                                          const std::string& backend);

}  // namespace headroom::runner

#endif  // HEADROOM_RUNNER_TRAINER_OPTIONS_H_
