#include "clients/train_command.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "util/cli_flags.h"
#include "clients/model_flags.h"
#include "clients/remote_text.h"
#include "clients/train_flags.h"
#include "executor/backends.h"
#include "util/median.h"
#include "executor/backend.h"
#include "executor/reference_export.h"
#include "executor/trainer.h"
#include "graph/graph.h"
#include "graph/summary.h"
#include "profiler/process_memory.h"
#include "profiler/profile_report.h"
#include "util/json_writer.h"

namespace headroom::clients {
namespace {

constexpr char kUsage[] =
    "usage: headroom train (--model NAME | --graph FILE | --onnx FILE) [--batch N] [--steps N]\n"
    "                      [--budget SIZE] [--backend cpu|cuda] [--no-offload]\n"
    "                      [--optimizer sgd|adam] [--lr RATE] [--seed N]\n"
    "                      [--device cpu|h100|h200] [--json] [--export DIR]\n";

struct TrainCommandFlags {
  TrainFlags train;
  bool json = false;
  std::string export_dir;
};

void PrintPlan(const executor::Trainer& trainer, const TrainFlags& f, const graph::Graph& g,
               std::ostream& out) {
  const planner::SectionPlan& plan = trainer.plan();
  int recomputed = 0, offloaded = 0;
  for (const planner::SectionInfo& s : plan.step->sections) {
    recomputed += s.recompute_nodes;
    for (const planner::CachedInput& c : s.boundary) offloaded += c.offloaded ? 1 : 0;
  }
  out << absl::StrFormat(
      "training %s on %s: %d steps, plan '%s' with %d section(s), %d node(s) recomputed, "
      "%d tensor(s) offloaded; predicted peak %s%s\n",
      g.name(), f.backend, f.steps, plan.strategy, plan.step->sections.size(), recomputed,
      offloaded, graph::HumanBytes(plan.peak_bytes),
      f.trainer.budget_bytes > 0
          ? absl::StrCat(" (budget ", graph::HumanBytes(f.trainer.budget_bytes), ")")
          : "");
}

}  // namespace

int RunTrainCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  absl::StatusOr<CliFlags> flags = CliFlags::Parse(args, {"json", "no-offload", "help"});
  if (!flags.ok()) return err << "headroom train: " << flags.status().message() << "\n" << kUsage, 2;
  if (flags->TakeBool("help")) {
    out << kUsage << ModelFlagsUsage() << TrainFlagsUsage(20)
        << "  --json              one JSON object per step, then a summary object\n"
           "  --export DIR        also write the graph, initial state, batches and results\n"
           "                      for tools/torch_reference.py\n";
    return 0;
  }
  TrainCommandFlags command;
  if (!TakeTrainFlags(*flags, "train", 20, command.train, err)) return 2;
  command.json = flags->TakeBool("json");
  command.export_dir = flags->TakeString("export");
  TrainFlags& f = command.train;
  // An ONNX model trains from its own weights.
  absl::StatusOr<LoadedModel> model = LoadModelFromFlags(*flags, /*with_values=*/true);
  if (!model.ok()) return err << "headroom train: " << model.status().message() << "\n", 1;
  if (absl::Status s = flags->CheckAllTaken("train"); !s.ok()) {
    return err << "headroom train: " << s.message() << "\n", 2;
  }
  for (const proto::TensorValue& v : model->values) {
    f.trainer.initial_values.push_back(executor::HostTensorFromValue(v));
  }
  model->values.clear();
  absl::StatusOr<graph::Graph> g = graph::Graph::FromProto(model->graph);
  if (!g.ok()) return err << "headroom train: " << g.status().message() << "\n", 1;
  if (absl::Status s = ResolveGraphFlags(*g, f); !s.ok()) {
    return err << "headroom train: " << s.message() << "\n", 1;
  }
  absl::StatusOr<std::unique_ptr<executor::Backend>> backend = executor::MakeBackend(f.backend);
  if (!backend.ok()) return err << "headroom train: " << backend.status().message() << "\n", 1;
  // The process's own memory from here on, against the plan (one run in this process: the
  // kernel's high-water mark is the run's).
  profiler::ProcessMemorySampler sampler(nullptr, {.reset_peak = true});
  f.trainer.events = &sampler;
  absl::StatusOr<std::unique_ptr<executor::Trainer>> trainer =
      executor::Trainer::Create(*g, backend->get(), f.trainer);
  if (!trainer.ok()) return err << "headroom train: " << trainer.status().message() << "\n", 1;
  if (!command.json) PrintPlan(**trainer, f, *g, out);
  if (!command.export_dir.empty()) {
    executor::ReferenceRun run;
    run.optimizer = f.trainer.optimizer;
    run.optimizer_params = f.trainer.optimizer_params;
    absl::StatusOr<std::vector<executor::HostTensor>> initial = (*trainer)->State();
    if (!initial.ok()) return err << "headroom train: --export: " << initial.status().message() << "\n", 1;
    run.initial_state = *std::move(initial);
    for (int64_t s = 0; s < f.steps; ++s) run.batches.push_back((*trainer)->task().Batch(s));
    if (absl::Status s = executor::WriteReferenceInputs(command.export_dir, *g, run); !s.ok()) {
      return err << "headroom train: --export: " << s.message() << "\n", 1;
    }
  }

  std::vector<double> losses, seconds;
  uint64_t measured_peak = 0, offloaded = 0;
  double copy_wait = 0;
  for (int64_t s = 0; s < f.steps; ++s) {
    absl::StatusOr<executor::StepResult> r = (*trainer)->Step();
    if (!r.ok()) return err << "headroom train: step " << s << ": " << r.status().message() << "\n", 1;
    losses.push_back(r->loss);
    seconds.push_back(r->seconds);
    measured_peak = std::max(measured_peak, r->arena_high_water_bytes);
    offloaded += r->offloaded_bytes;
    copy_wait += r->copy_wait_seconds;
    if (command.json) {
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
                             ProgressBar(s + 1, f.steps), std::to_string(f.steps).size(), s + 1,
                             f.steps, r->loss, r->seconds,
                             graph::HumanBytes(r->arena_high_water_bytes))
          << std::flush;
    }
  }
  const planner::SectionPlan& plan = (*trainer)->plan();
  if (!command.export_dir.empty()) {
    absl::StatusOr<std::vector<executor::HostTensor>> state = (*trainer)->State();
    absl::Status s = state.ok() ? executor::WriteReferenceResults(command.export_dir, losses, seconds, *state)
                                : state.status();
    if (!s.ok()) return err << "headroom train: --export: " << s.message() << "\n", 1;
  }
  const double median = Median(seconds);
  const proto::ProcessMemory process =
      sampler.Account(plan.peak_bytes, (*trainer)->executor().host_pool_bytes());
  if (command.json) {
    JsonWriter w;
    w.BeginObject()
        .Key("summary").Bool(true)
        .Key("model").String(g->name())
        .Key("backend").String(f.backend)
        .Key("steps").Int(f.steps)
        .Key("budget_bytes").Uint(f.trainer.budget_bytes)
        .Key("strategy").String(plan.strategy)
        .Key("num_sections").Uint(plan.step->sections.size())
        .Key("predicted_peak_bytes").Uint(plan.peak_bytes)
        .Key("measured_peak_bytes").Uint(measured_peak)
        .Key("predicted_step_seconds").Double(plan.step_seconds)
        .Key("median_step_seconds").Double(median)
        .Key("first_loss").Double(losses.empty() ? 0 : losses.front())
        .Key("last_loss").Double(losses.empty() ? 0 : losses.back())
        .Key("offloaded_bytes_per_step").Uint(f.steps > 0 ? offloaded / f.steps : 0)
        .Key("copy_wait_seconds").Double(copy_wait)
        .Key("host_pool_bytes").Uint(process.host_pool_bytes())
        .Key("baseline_bytes").Uint(process.baseline_bytes())
        .Key("physical_peak_bytes").Uint(process.physical_peak_bytes())
        .Key("unplanned_bytes").Uint(process.unplanned_bytes())
        .Key("unplanned_limit_bytes").Uint(process.unplanned_limit_bytes())
        .EndObject();
    out << w.str() << "\n";
  } else {
    out << absl::StrFormat(
        "done: loss %.5f -> %.5f, median step %.3f s, measured peak %s (predicted %s)\n",
        losses.empty() ? 0 : losses.front(), losses.empty() ? 0 : losses.back(), median,
        graph::HumanBytes(measured_peak), graph::HumanBytes(plan.peak_bytes))
        << "physical: " << ProcessMemoryLine(process) << "\n";
  }
  if (measured_peak > plan.peak_bytes) {
    err << "headroom train: measured peak " << measured_peak << " B exceeds the predicted "
        << plan.peak_bytes << " B: a bug\n";
    return 1;
  }
  return 0;
}

}  // namespace headroom::clients
