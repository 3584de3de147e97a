#include "clients/train_command.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "clients/command_flags.h"
#include "clients/remote_text.h"
#include "executor/backend.h"
#include "executor/backends.h"
#include "executor/reference_export.h"
#include "executor/trainer.h"
#include "graph/graph.h"
#include "graph/summary.h"
#include "profiler/process_memory.h"
#include "util/json_writer.h"
#include "util/median.h"
#include "util/status_macros.h"

namespace headroom::clients {
namespace {

constexpr int64_t kDefaultSteps = 20;

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
};

struct TrainCommand {
  ModelFlags model;
  PlanFlags plan;
  RunFlags run;
  LocalPlanFlags local;
  bool json = false;
  std::string export_dir;
  // What importing --onnx found (set by Run()).
  ImportNotes notes;

  absl::Status Run(const CommandIo& io);

 private:
  void PrintPlan(const executor::Trainer& trainer, const graph::Graph& g,
                 const TrainTotals& totals, std::ostream& out) const;
  absl::Status ExportInputs(executor::Trainer& trainer, const graph::Graph& g,
                            const executor::TrainerOptions& options) const;
  absl::Status Train(executor::Trainer& trainer, TrainTotals& totals, std::ostream& out) const;
  void PrintSummary(const executor::Trainer& trainer, const graph::Graph& g,
                    const TrainTotals& totals, const proto::ProcessMemory& process,
                    std::ostream& out) const;
};

void TrainCommand::PrintPlan(const executor::Trainer& trainer, const graph::Graph& g,
                             const TrainTotals& totals, std::ostream& out) const {
  const planner::SectionPlan& plan = trainer.plan();
  int recomputed = 0, offloaded = 0;
  for (const planner::SectionInfo& s : plan.step->sections) {
    recomputed += s.recompute_nodes;
    for (const planner::CachedInput& c : s.boundary) offloaded += c.offloaded ? 1 : 0;
  }
  out << absl::StrFormat(
      "training %s on %s: %d steps, plan '%s' with %d section(s), %d node(s) recomputed, "
      "%d tensor(s) offloaded; predicted peak %s%s\n",
      g.name(), run.backend, run.steps, plan.strategy, plan.step->sections.size(), recomputed,
      offloaded, graph::HumanBytes(plan.peak_bytes),
      totals.budget > 0
          ? absl::StrCat(" (budget ", graph::HumanBytes(totals.budget),
                         totals.fixed_device > 0
                             ? absl::StrCat(", less ", graph::HumanBytes(totals.fixed_device),
                                            " for the backend's context and handles")
                             : "",
                         ")")
          : "");
}

absl::Status TrainCommand::ExportInputs(executor::Trainer& trainer, const graph::Graph& g,
                                        const executor::TrainerOptions& options) const {
  executor::ReferenceRun reference;
  reference.optimizer = options.optimizer;
  reference.optimizer_params = options.optimizer_params;
  ASSIGN_OR_RETURN(reference.initial_state, trainer.State());
  for (int64_t s = 0; s < run.steps; ++s) reference.batches.push_back(trainer.task().Batch(s));
  return executor::WriteReferenceInputs(export_dir, g, reference);
}

absl::Status TrainCommand::Train(executor::Trainer& trainer, TrainTotals& totals,
                                 std::ostream& out) const {
  for (int64_t s = 0; s < run.steps; ++s) {
    absl::StatusOr<executor::StepResult> r = trainer.Step();
    if (!r.ok())
      return absl::Status(r.status().code(), absl::StrCat("step ", s, ": ", r.status().message()));
    totals.losses.push_back(r->loss);
    totals.seconds.push_back(r->seconds);
    totals.measured_peak = std::max(totals.measured_peak, r->arena_high_water_bytes);
    totals.offloaded += r->offloaded_bytes;
    totals.copy_wait += r->copy_wait_seconds;
    if (json) {
      JsonWriter w;
      w.BeginObject()
          .Key("step").Int(s)
          .Key("loss").Double(r->loss)
          .Key("step_seconds").Double(r->seconds)
          .Key("measured_peak_bytes").Uint(r->arena_high_water_bytes)
          .Key("peak_live_bytes").Uint(r->peak_live_bytes)
          .Key("offloaded_bytes").Uint(r->offloaded_bytes)
          .Key("copy_wait_seconds").Double(r->copy_wait_seconds)
          .EndObject();
      out << w.str() << "\n" << std::flush;
    } else {
      out << absl::StrFormat("%s %*d/%d  loss %.5f  %.3f s  arena peak %s\n",
                             ProgressBar(s + 1, run.steps), std::to_string(run.steps).size(), s + 1,
                             run.steps, r->loss, r->seconds,
                             graph::HumanBytes(r->arena_high_water_bytes))
          << std::flush;
    }
  }
  return absl::OkStatus();
}

void TrainCommand::PrintSummary(const executor::Trainer& trainer, const graph::Graph& g,
                                const TrainTotals& t, const proto::ProcessMemory& process,
                                std::ostream& out) const {
  const planner::SectionPlan& plan = trainer.plan();
  const double median = Median(t.seconds);
  const double first = t.losses.empty() ? 0 : t.losses.front();
  const double last = t.losses.empty() ? 0 : t.losses.back();
  if (!json) {
    out << absl::StrFormat(
               "done: loss %.5f -> %.5f, median step %.3f s, measured peak %s (predicted %s)\n",
               first, last, median, graph::HumanBytes(t.measured_peak),
               graph::HumanBytes(plan.peak_bytes))
        << "physical: " << ProcessMemoryLine(process) << "\n";
    return;
  }
  JsonWriter w;
  w.BeginObject().Key("summary").Bool(true);
  WriteNotes(notes, w);
  w.Key("model").String(g.name())
      .Key("backend").String(run.backend)
      .Key("steps").Int(run.steps)
      .Key("budget_bytes").Uint(t.budget)
      .Key("strategy").String(plan.strategy)
      .Key("num_sections").Uint(plan.step->sections.size())
      .Key("predicted_peak_bytes").Uint(plan.peak_bytes)
      .Key("measured_peak_bytes").Uint(t.measured_peak)
      .Key("predicted_step_seconds").Double(plan.step_seconds)
      .Key("median_step_seconds").Double(median)
      .Key("first_loss").Double(first)
      .Key("last_loss").Double(last)
      .Key("offloaded_bytes_per_step").Uint(run.steps > 0 ? t.offloaded / run.steps : 0)
      .Key("copy_wait_seconds").Double(t.copy_wait)
      .Key("fixed_device_bytes").Uint(t.fixed_device)
      .Key("workspace_bytes").Uint(t.workspace)
      .Key("host_pool_bytes").Uint(process.host_pool_bytes())
      .Key("baseline_bytes").Uint(process.baseline_bytes())
      .Key("physical_peak_bytes").Uint(process.physical_peak_bytes())
      .Key("unplanned_bytes").Uint(process.unplanned_bytes())
      .Key("unplanned_limit_bytes").Uint(process.unplanned_limit_bytes())
      .EndObject();
  out << w.str() << "\n";
}

absl::Status TrainCommand::Run(const CommandIo& io) {
  ASSIGN_OR_RETURN(executor::TrainerOptions options, TrainerOptionsOf(plan, run));
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
  // The process's own memory from here on, against the plan (one run in this process: the
  // kernel's high-water mark is the run's).
  profiler::ProcessMemorySampler sampler(nullptr, {.reset_peak = true});
  options.events = &sampler;
  ASSIGN_OR_RETURN(std::unique_ptr<executor::Trainer> trainer,
                   executor::Trainer::Create(g, backend.get(), options));
  if (!json) PrintPlan(*trainer, g, totals, io.out);
  if (!export_dir.empty()) {
    if (absl::Status s = ExportInputs(*trainer, g, options); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("--export: ", s.message()));
    }
  }
  RETURN_IF_ERROR(Train(*trainer, totals, io.out));
  totals.workspace = backend->workspace_bytes();
  const planner::SectionPlan& plan = trainer->plan();
  if (!export_dir.empty()) {
    ASSIGN_OR_RETURN(std::vector<executor::HostTensor> state, trainer->State());
    absl::Status s =
        executor::WriteReferenceResults(export_dir, totals.losses, totals.seconds, state);
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("--export: ", s.message()));
  }
  const proto::ProcessMemory process =
      sampler.Account(plan.peak_bytes, trainer->executor().host_pool_bytes());
  PrintSummary(*trainer, g, totals, process, io.out);
  if (totals.measured_peak > plan.peak_bytes) {
    return absl::InternalError(absl::StrCat("measured peak ", totals.measured_peak,
                                            " B exceeds the predicted ", plan.peak_bytes,
                                            " B: a bug"));
  }
  return absl::OkStatus();
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
  app->add_flag("--json", state->json, "one JSON object per step, then a summary object");
  app->add_option("--export", state->export_dir,
                  "also write the graph, initial state, batches and results for "
                  "tools/torch_reference.py")
      ->type_name("DIR");
  return {app, [state, &io] { return state->Run(io); }};
}

}  // namespace headroom::clients
