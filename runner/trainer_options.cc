#include "runner/trainer_options.h"

#include "absl/strings/str_cat.h"
#include "planner/cost_model.h"
#include "planner/plan_request.h"
#include "util/status_macros.h"

namespace headroom::runner {

double DefaultLearningRate(proto::Optimizer::Kind kind) {
  return kind == proto::Optimizer::KIND_ADAM ? 1e-3 : 0.01;
}

std::string DefaultDevicePreset(const std::string& backend) {
  return backend == "cuda" ? "h100" : "cpu";
}

absl::StatusOr<executor::TrainerOptions> TrainerOptionsOf(const proto::PlanOptions& plan,
                                                          uint64_t seed,
                                                          const std::string& backend) {
  RETURN_IF_ERROR(planner::CheckPlanOptions(plan, "plan"));
  if (plan.data_parallel().ranks() > 1) {
    // Planned only: a job or profile with ranks would run as one process under a plan that
    // assumed N (`headroom train --ranks N` starts its ranks itself).
    return absl::InvalidArgumentError(absl::StrCat(
        "plan.data_parallel.ranks: ", plan.data_parallel().ranks(),
        ": jobs and profiles run as one process (ranks are for `headroom plan --ranks`; "
        "`headroom train --ranks` starts its own)"));
  }
  executor::TrainerOptions o;
  o.seed = seed == 0 ? 1 : seed;
  o.budget_bytes = plan.budget_bytes();
  o.allow_offload = !plan.disable_offload();
  o.rebuild_reversible = !plan.disable_reversible();
  o.host_memory = plan.host_memory();
  o.optimizer_state = plan.optimizer_state();
  o.parameters = plan.parameters();
  o.precision = plan.precision();
  const proto::Optimizer& opt = plan.optimizer();
  if (opt.kind() != proto::Optimizer::KIND_UNSPECIFIED) o.optimizer = opt.kind();
  // Checked above: learning_rate is 0 (the default) or positive; the optional fields are used
  // as given when set, 0 included.
  o.optimizer_params.learning_rate =
      opt.learning_rate() > 0 ? opt.learning_rate() : DefaultLearningRate(o.optimizer);
  if (opt.has_momentum()) o.optimizer_params.momentum = opt.momentum();
  if (opt.has_beta1()) o.optimizer_params.beta1 = opt.beta1();
  if (opt.has_beta2()) o.optimizer_params.beta2 = opt.beta2();
  if (opt.has_epsilon()) o.optimizer_params.epsilon = opt.epsilon();
  o.optimizer_params.weight_decay = opt.weight_decay();
  proto::DeviceModel device = plan.device();
  if (device.preset().empty()) device.set_preset(DefaultDevicePreset(backend));
  ASSIGN_OR_RETURN(o.device, planner::DeviceSpecFromProto(device));
  return o;
}

}  // namespace headroom::runner
