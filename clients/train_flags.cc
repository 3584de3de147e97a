#include "clients/train_flags.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "clients/model_flags.h"
#include "planner/cost_model.h"
#include "planner/sections.h"
#include "profiler/measured_cost_model.h"
#include "util/byte_size.h"

namespace headroom::clients {

bool TakeTrainFlags(CliFlags& flags, const std::string& command, int64_t default_steps,
                    TrainFlags& f, std::ostream& err) {
  const std::string prefix = absl::StrCat("headroom ", command, ": ");
  absl::StatusOr<int64_t> steps = flags.TakeInt("steps", default_steps);
  if (!steps.ok()) return err << prefix << steps.status().message() << "\n", false;
  f.steps = *steps;
  absl::StatusOr<int64_t> seed = flags.TakeInt("seed", 1, 0);
  if (!seed.ok()) return err << prefix << seed.status().message() << "\n", false;
  f.trainer.seed = static_cast<uint64_t>(*seed);
  const std::string budget = flags.TakeString("budget");
  if (!budget.empty()) {
    absl::StatusOr<uint64_t> bytes = ParseByteSize(budget);
    if (!bytes.ok() || *bytes == 0) {
      return err << prefix << "--budget: "
                 << (bytes.ok() ? "must be more than 0 bytes" : bytes.status().message())
                 << "\n", false;
    }
    f.trainer.budget_bytes = *bytes;
  }
  absl::StatusOr<int64_t> sections = flags.TakeInt("sections", 0, 0);
  if (!sections.ok()) return err << prefix << sections.status().message() << "\n", false;
  f.sections = *sections;
  if (f.sections > 0 && f.trainer.budget_bytes > 0) {
    return err << prefix << "--sections and --budget choose the plan two ways; give one\n",
           false;
  }
  f.backend = flags.TakeString("backend", "cpu");
  if (f.backend != "cpu" && f.backend != "cuda") {
    return err << prefix << "--backend must be cpu or cuda, not '" << f.backend << "'\n", false;
  }
  f.trainer.allow_offload = !flags.TakeBool("no-offload");
  absl::StatusOr<proto::HostMemory> host_memory = TakeHostMemoryFlag(flags);
  if (!host_memory.ok()) return err << prefix << host_memory.status().message() << "\n", false;
  f.trainer.host_memory = *host_memory;
  const std::string optimizer = flags.TakeString("optimizer", "sgd");
  if (optimizer != "sgd" && optimizer != "adam") {
    return err << prefix << "--optimizer must be sgd or adam, not '" << optimizer << "'\n",
           false;
  }
  const bool adam = optimizer == "adam";
  f.trainer.optimizer = adam ? proto::Optimizer::KIND_ADAM : proto::Optimizer::KIND_SGD_MOMENTUM;
  f.trainer.optimizer_params.learning_rate = adam ? 1e-3 : 0.01;
  const std::string lr = flags.TakeString("lr");
  if (!lr.empty()) {
    double rate = 0;
    if (!absl::SimpleAtod(lr, &rate) || !(rate > 0)) {
      return err << prefix << "--lr must be a positive number, not '" << lr << "'\n", false;
    }
    f.trainer.optimizer_params.learning_rate = rate;
  }
  const std::string device = flags.TakeString("device", f.backend == "cuda" ? "h100" : "cpu");
  absl::StatusOr<planner::DeviceSpec> spec = planner::DevicePreset(device);
  if (!spec.ok()) return err << prefix << spec.status().message() << "\n", false;
  f.trainer.device = *spec;
  f.profile_path = flags.TakeString("profile");
  return true;
}

absl::Status ResolveGraphFlags(const graph::Graph& forward, TrainFlags& f) {
  if (f.sections > 0) {
    const int64_t nodes = static_cast<int64_t>(forward.nodes().size());
    if (f.sections > nodes) {
      return absl::InvalidArgumentError(absl::StrCat("--sections ", f.sections, ": the model has ",
                                                     nodes, " forward nodes"));
    }
    planner::SectionCuts cuts;
    cuts.cuts = planner::EvenCuts(static_cast<int32_t>(nodes), static_cast<int32_t>(f.sections));
    f.trainer.cuts = cuts;
  }
  if (f.profile_path.empty()) return absl::OkStatus();
  absl::StatusOr<proto::ProfileResponse> profile = profiler::ReadProfileFile(f.profile_path);
  if (!profile.ok()) return profile.status();
  absl::StatusOr<std::unique_ptr<profiler::MeasuredCostModel>> model =
      profiler::MeasuredCostModel::Create(forward, *profile, f.trainer.device);
  if (!model.ok()) {
    return absl::Status(model.status().code(), absl::StrCat("--profile ", f.profile_path, ": ",
                                                            model.status().message()));
  }
  f.trainer.cost = *std::move(model);
  return absl::OkStatus();
}

std::string TrainFlagsUsage(int64_t default_steps) {
  return absl::StrCat(
      "  --steps N           training steps (default ", default_steps, ")\n",
      "  --budget SIZE       device memory to fit (6GiB, 400MiB, bytes); default: no\n"
      "                      limit (the plain step)\n"
      "  --sections N        instead of a budget: N sections of equal length, recompute\n"
      "                      only (for experiments)\n"
      "  --backend NAME      cpu (oneDNN, default) or cuda\n"
      "  --no-offload        recompute only; keep cached section inputs on the device\n",
      HostMemoryFlagUsage(),
      "  --optimizer NAME    sgd (momentum 0.9, lr 0.01; default) or adam (lr 0.001)\n"
      "  --lr RATE           learning rate\n"
      "  --seed N            seed of the weights, the synthetic batches and dropout\n"
      "  --device NAME       cost-model preset the plan is chosen for (default cpu,\n"
      "                      or h100 with --backend cuda)\n"
      "  --profile FILE      choose the plan with the node times and copy rates measured\n"
      "                      by `headroom profile --out FILE` (same model and batch)\n");
}

std::string ProgressBar(int64_t done, int64_t total) {
  constexpr int kWidth = 20;
  const int filled = static_cast<int>(kWidth * done / std::max<int64_t>(total, 1));
  return "[" + std::string(filled, '#') + std::string(kWidth - filled, '.') + "]";
}

}  // namespace headroom::clients
