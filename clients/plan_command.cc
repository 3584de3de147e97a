#include "clients/plan_command.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "graph/summary.h"
#include "util/cli_flags.h"
#include "clients/model_flags.h"
#include "executor/backend_scratch.h"
#include "executor/backends.h"
#include "graph/graph.h"
#include "graph/shape.h"
#include "planner/cost_model.h"
#include "planner/memory_planner.h"
#include "planner/section_search.h"
#include "planner/training_graph.h"
#include "profiler/measured_cost_model.h"
#include "util/byte_size.h"
#include "util/json_writer.h"

namespace headroom::clients {
namespace {

constexpr char kUsage[] =
    "usage: headroom plan (--model NAME | --graph FILE | --onnx FILE) [--batch N] [--inference]\n"
    "                     [--optimizer sgd|adam] [--alignment BYTES] [--tensors] [--json]\n"
    "                     [--budget SIZE] [--frontier] [--device cpu|h100|h200]\n"
    "                     [--device-file FILE] [--no-offload] [--profile FILE]\n"
    "                     [--backend cpu|cuda] [--host-memory shared|separate]\n";

std::string PlanJson(const std::string& name, const planner::MemoryPlan& plan, bool tensors) {
  JsonWriter w;
  w.BeginObject()
      .Key("name").String(name)
      .Key("arena_bytes").Uint(plan.arena_bytes)
      .Key("lower_bound_bytes").Uint(plan.lower_bound_bytes)
      .Key("live_tensor_peak_bytes").Uint(plan.live_tensor_peak_bytes)
      .Key("no_sharing_bytes").Uint(plan.no_sharing_bytes)
      .Key("bytes_by_role").BeginObject();
  for (const auto& [role, bytes] : plan.bytes_by_role) w.Key(graph::RoleName(role)).Uint(bytes);
  w.EndObject()
      .Key("num_tensors").Uint(plan.tensors.size())
      .Key("num_buffers").Uint(plan.num_buffers)
      .Key("num_steps").Uint(plan.num_positions)
      .Key("alignment_bytes").Uint(plan.alignment_bytes)
      .Key("strategy").String(plan.strategy)
      .Key("planning_seconds").Double(plan.planning_seconds);
  if (tensors) {
    w.Key("tensors").BeginArray();
    for (const planner::PlannedTensor& t : plan.tensors) {
      w.BeginObject()
          .Key("name").String(t.name)
          .Key("role").String(graph::RoleName(t.role))
          .Key("bytes").Uint(t.bytes)
          .Key("offset").Uint(t.offset)
          .Key("first_step").Int(t.lifetime.first_position)
          .Key("last_step").Int(t.lifetime.last_position)
          .Key("buffer").Int(t.buffer)
          .EndObject();
    }
    w.EndArray();
  }
  w.EndObject();
  return w.str();
}

std::string TensorTable(const planner::MemoryPlan& plan) {
  std::string out = absl::StrFormat("%-40s %-16s %14s %14s %7s %7s %7s\n", "tensor", "role",
                                    "offset", "bytes", "first", "last", "buffer");
  for (const planner::PlannedTensor& t : plan.tensors) {
    absl::StrAppendFormat(&out, "%-40s %-16s %14d %14d %7d %7d %7d\n", t.name,
                          graph::RoleName(t.role), t.offset, t.bytes, t.lifetime.first_position,
                          t.lifetime.last_position, t.buffer);
  }
  return out;
}

// Fills planner options from flags; returns false (after printing) on a bad value.
bool OptionsFromFlags(CliFlags& flags, planner::PlannerOptions& options, std::ostream& err) {
  options.training.inference = flags.TakeBool("inference");
  const std::string optimizer = flags.TakeString("optimizer", "sgd");
  if (optimizer == "adam") {
    options.training.optimizer = proto::Optimizer::KIND_ADAM;
  } else if (optimizer != "sgd") {
    err << "headroom plan: --optimizer is '" << optimizer << "', needs sgd or adam\n";
    return false;
  }
  absl::StatusOr<int64_t> alignment =
      flags.TakeInt("alignment", static_cast<int64_t>(planner::kDefaultAlignmentBytes));
  if (!alignment.ok() || (*alignment & (*alignment - 1)) != 0) {
    err << "headroom plan: --alignment needs a power of two\n";
    return false;
  }
  options.alignment_bytes = static_cast<uint64_t>(*alignment);
  return true;
}


// ---- Under a budget: sections and offload ----------------------------------------------

struct SectionFlags {
  uint64_t budget_bytes = 0;
  bool frontier = false;
  bool offload = true;
  planner::DeviceSpec device;
  // A profile (`headroom profile --out`) whose measured node times replace the cost model's.
  std::string profile_path;
  proto::HostMemory host_memory = proto::HOST_MEMORY_BACKEND;
  // Whether the backend's host memory is its device memory (set from --backend).
  bool host_is_device_memory = false;
};

// Fills the section flags; returns false (after printing) on a bad value.
bool SectionFlagsFromFlags(CliFlags& flags, SectionFlags& section, std::ostream& err) {
  const std::string budget = flags.TakeString("budget");
  if (!budget.empty()) {
    absl::StatusOr<uint64_t> bytes = ParseByteSize(budget);
    if (!bytes.ok()) return err << "headroom plan: --budget: " << bytes.status().message() << "\n", false;
    if (*bytes == 0) return err << "headroom plan: --budget must be more than 0 bytes\n", false;
    section.budget_bytes = *bytes;
  }
  section.frontier = flags.TakeBool("frontier");
  section.offload = !flags.TakeBool("no-offload");
  absl::StatusOr<proto::HostMemory> host_memory = TakeHostMemoryFlag(flags);
  if (!host_memory.ok()) return err << "headroom plan: " << host_memory.status().message() << "\n", false;
  section.host_memory = *host_memory;
  const std::string file = flags.TakeString("device-file");
  const std::string preset = flags.TakeString("device", "cpu");
  absl::StatusOr<planner::DeviceSpec> device =
      file.empty() ? planner::DevicePreset(preset) : planner::ReadDeviceSpecFile(file);
  if (!device.ok()) return err << "headroom plan: " << device.status().message() << "\n", false;
  section.device = *device;
  section.profile_path = flags.TakeString("profile");
  return true;
}

// Returns the cost model: the roofline of `flags.device`, under the profile's measured
// times when one is given.
absl::StatusOr<std::unique_ptr<planner::CostModel>> MakeCostModel(const graph::Graph& g,
                                                                  const SectionFlags& flags) {
  if (flags.profile_path.empty()) {
    return std::unique_ptr<planner::CostModel>(
        std::make_unique<planner::RooflineCostModel>(g, flags.device));
  }
  absl::StatusOr<proto::ProfileResponse> profile = profiler::ReadProfileFile(flags.profile_path);
  if (!profile.ok()) return profile.status();
  absl::StatusOr<std::unique_ptr<profiler::MeasuredCostModel>> measured =
      profiler::MeasuredCostModel::Create(g, *profile, flags.device);
  if (!measured.ok()) {
    return absl::Status(measured.status().code(),
                        absl::StrCat("--profile ", flags.profile_path, ": ",
                                     measured.status().message()));
  }
  return std::unique_ptr<planner::CostModel>(*std::move(measured));
}

std::string StepName(const planner::SectionedStep& step, int32_t s) {
  return s < 0 ? "" : step.graph.node(s).name;
}

void PointsJson(JsonWriter& w, const std::vector<planner::TradeOffPoint>& points) {
  w.BeginArray();
  for (const planner::TradeOffPoint& p : points) {
    w.BeginObject()
        .Key("peak_bytes").Uint(p.peak_bytes)
        .Key("step_seconds").Double(p.step_seconds)
        .Key("strategy").String(p.strategy)
        .Key("num_sections").Int(p.num_sections)
        .Key("offloaded_bytes").Uint(p.offloaded_bytes)
        .EndObject();
  }
  w.EndArray();
}

std::string SectionPlanJson(const std::string& name, const std::string& cost_model,
                            const SectionFlags& flags,
                            const planner::SectionPlan& plan, const planner::SectionPlan& plain,
                            int candidates, double seconds,
                            const std::vector<planner::TradeOffPoint>* frontier,
                            const std::vector<planner::TradeOffPoint>* baselines) {
  const planner::SectionedStep& step = *plan.step;
  JsonWriter w;
  w.BeginObject()
      .Key("name").String(name)
      .Key("device").String(flags.device.name)
      .Key("cost_model").String(cost_model)
      .Key("budget_bytes").Uint(flags.budget_bytes)
      .Key("predicted_peak_bytes").Uint(plan.peak_bytes)
      .Key("predicted_step_seconds").Double(plan.step_seconds)
      .Key("overhead_ratio").Double(plan.overhead_ratio)
      .Key("recompute_flops").Uint(step.recompute_flops)
      .Key("offloaded_bytes").Uint(step.offloaded_bytes)
      .Key("copy_wait_seconds").Double(step.stall_seconds)
      .Key("strategy").String(plan.strategy)
      .Key("arena_bytes").Uint(plan.memory->arena_bytes)
      .Key("lower_bound_bytes").Uint(plan.memory->lower_bound_bytes)
      .Key("unconstrained_peak_bytes").Uint(plain.peak_bytes)
      .Key("unconstrained_step_seconds").Double(plain.step_seconds)
      .Key("bytes_by_role").BeginObject();
  for (const auto& [role, bytes] : plan.memory->bytes_by_role) w.Key(graph::RoleName(role)).Uint(bytes);
  w.EndObject()
      .Key("num_steps").Uint(plan.memory->num_positions)
      .Key("num_candidates").Int(candidates)
      .Key("planning_seconds").Double(seconds)
      .Key("sections").BeginArray();
  for (size_t s = 0; s < step.sections.size(); ++s) {
    const planner::SectionInfo& info = step.sections[s];
    w.BeginObject()
        .Key("index").Uint(s)
        .Key("first_node").String(step.graph.node(info.begin).name)
        .Key("last_node").String(step.graph.node(info.end - 1).name)
        .Key("recomputed").Bool(info.recomputed)
        .Key("recompute_nodes").Int(info.recompute_nodes)
        .Key("recompute_flops").Uint(info.recompute_flops)
        .Key("boundary").BeginArray();
    for (const planner::CachedInput& c : info.boundary) {
      w.BeginObject()
          .Key("tensor").String(step.graph.tensor(c.tensor).name)
          .Key("bytes").Uint(c.bytes)
          .Key("placement").String(c.offloaded ? "host" : "device");
      if (c.offloaded) {
        w.Key("copy_out_issued_after").String(StepName(step, c.copy_out_after_position))
            .Key("copy_out_awaited_at").String(StepName(step, c.copy_out_await_position))
            .Key("prefetch_issued_at").String(StepName(step, c.prefetch_position))
            .Key("prefetch_awaited_before").String(StepName(step, c.first_use_position));
      }
      w.EndObject();
    }
    w.EndArray().EndObject();
  }
  w.EndArray();
  if (frontier != nullptr) {
    w.Key("frontier");
    PointsJson(w, *frontier);
    w.Key("baselines");
    PointsJson(w, *baselines);
  }
  w.EndObject();
  return w.str();
}

std::string PointsTable(const std::string& title, const std::vector<planner::TradeOffPoint>& points) {
  std::string out = absl::StrFormat("%s\n  %14s %12s %9s %12s  %s\n", title, "peak", "step s",
                                    "sections", "offloaded", "strategy");
  for (const planner::TradeOffPoint& p : points) {
    absl::StrAppendFormat(&out, "  %14s %12.5f %9d %12s  %s\n", graph::HumanBytes(p.peak_bytes),
                          p.step_seconds, p.num_sections, graph::HumanBytes(p.offloaded_bytes),
                          p.strategy);
  }
  return out;
}

// Plans under a budget (and the frontier when asked); returns the exit code.
int RunSectionPlan(const graph::Graph& g, const planner::PlannerOptions& options,
                   const SectionFlags& flags, bool json, std::ostream& out, std::ostream& err) {
  const absl::Time start = absl::Now();
  if (options.training.inference) {
    return err << "headroom plan: --budget and --frontier plan a training step, not --inference\n", 2;
  }
  absl::StatusOr<planner::TrainingGraph> t = planner::TrainingGraph::Build(g, options.training);
  if (!t.ok()) return err << "headroom plan: " << t.status().message() << "\n", 1;
  absl::StatusOr<std::unique_ptr<planner::CostModel>> cost_model = MakeCostModel(g, flags);
  if (!cost_model.ok()) return err << "headroom plan: " << cost_model.status().message() << "\n", 1;
  const planner::CostModel& cost = **cost_model;
  planner::SearchOptions search_options;
  search_options.allow_offload = flags.offload;
  search_options.host_pool_in_budget =
      planner::HostPoolInBudget(flags.host_memory, flags.host_is_device_memory);
  search_options.alignment_bytes = options.alignment_bytes;
  absl::StatusOr<std::unique_ptr<planner::SectionSearch>> search =
      planner::SectionSearch::Create(*t, cost, search_options);
  if (!search.ok()) return err << "headroom plan: " << search.status().message() << "\n", 1;
  absl::StatusOr<planner::SectionPlan> plain = (*search)->Unconstrained();
  absl::StatusOr<planner::SectionPlan> plan =
      flags.budget_bytes > 0 ? (*search)->Plan(flags.budget_bytes) : plain;
  if (!plain.ok() || !plan.ok()) {
    return err << "headroom plan: " << (plan.ok() ? plain : plan).status().message() << "\n", 1;
  }
  std::vector<planner::TradeOffPoint> frontier, baselines;
  if (flags.frontier) {
    absl::StatusOr<std::vector<planner::TradeOffPoint>> f = (*search)->Frontier();
    absl::StatusOr<std::vector<planner::TradeOffPoint>> b = (*search)->Baselines();
    if (!f.ok() || !b.ok()) {
      return err << "headroom plan: " << (f.ok() ? b.status() : f.status()).message() << "\n", 1;
    }
    frontier = *std::move(f);
    baselines = *std::move(b);
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (json) {
    out << SectionPlanJson(g.name(), cost.name(), flags, *plan, *plain,
                           (*search)->num_candidates(), seconds,
                           flags.frontier ? &frontier : nullptr,
                           flags.frontier ? &baselines : nullptr)
        << "\n";
    return 0;
  }
  out << absl::StrFormat("%-24s %s (training step, %s)\n", "model", g.name(), cost.name());
  if (flags.budget_bytes > 0) {
    out << absl::StrFormat("%-24s %12s  (%d)\n", "budget", graph::HumanBytes(flags.budget_bytes),
                           flags.budget_bytes);
  }
  out << absl::StrFormat("%-24s %12s, %.5f s\n", "with no sections",
                         graph::HumanBytes(plain->peak_bytes), plain->step_seconds)
      << plan->DebugString()
      << absl::StrFormat("%-24s %12.1f ms (%d candidates)\n", "planning time", seconds * 1e3,
                         (*search)->num_candidates());
  if (flags.frontier) {
    out << PointsTable("frontier (peak, predicted step time):", frontier)
        << PointsTable("baselines:", baselines);
  }
  return 0;
}

}  // namespace

int RunPlanCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  absl::StatusOr<CliFlags> flags =
      CliFlags::Parse(args, {"json", "help", "inference", "tensors", "frontier", "no-offload"});
  if (!flags.ok()) return err << "headroom plan: " << flags.status().message() << "\n", 2;
  if (flags->TakeBool("help")) {
    out << kUsage << ModelFlagsUsage()
        << "  --inference         plan the forward pass only\n"
           "  --optimizer NAME    sgd (with momentum, default) or adam\n"
           "  --alignment BYTES   offset alignment in the arena (default 256)\n"
           "  --tensors           every tensor's offset, size, lifetime and role\n"
           "  --json              print one JSON object\n"
           "  --budget SIZE       fit the step in SIZE (6GiB, 512MiB, 1.5GB, bytes) with\n"
           "                      sections and host offload, at the least predicted time\n"
           "  --frontier          also the peak/time Pareto frontier and the baselines\n"
           "  --device NAME       cost-model preset: cpu (default), h100 or h200\n"
           "  --device-file FILE  a text-format DeviceModel overriding a preset's rates\n"
           "  --no-offload        keep every cached section input on the device\n"
        << HostMemoryFlagUsage()
        << "  --profile FILE      plan with the node times and copy rates measured by\n"
           "                      `headroom profile --out FILE` (same model and batch)\n"
           "  --backend NAME      the backend whose kernel scratch the plan holds, as\n"
           "                      `headroom train` will: cpu (oneDNN, default) or cuda\n"
           "                      (cuDNN's workspaces; needs a GPU here)\n"
           "  --server ADDR       plan on headroomd instead (see 'headroom plan --server\n"
           "                      ADDR --help')\n";
    return 0;
  }
  const bool json = flags->TakeBool("json");
  const bool tensors = flags->TakeBool("tensors");
  planner::PlannerOptions options;
  if (!OptionsFromFlags(*flags, options, err)) return 2;
  SectionFlags section;
  if (!SectionFlagsFromFlags(*flags, section, err)) return 2;
  const std::string backend_name = flags->TakeString("backend", "cpu");
  absl::StatusOr<proto::GraphDef> def = ModelFromFlags(*flags);
  if (!def.ok()) return err << "headroom plan: " << def.status().message() << "\n", 1;
  if (absl::Status s = flags->CheckAllTaken("plan"); !s.ok()) {
    return err << "headroom plan: " << s.message() << "\n", 2;
  }
  absl::StatusOr<graph::Graph> g = graph::Graph::FromProto(*def);
  if (!g.ok()) return err << "headroom plan: " << g.status().message() << "\n", 1;
  // The plan holds every byte the backend's kernels will need, as `headroom train`'s does.
  absl::StatusOr<std::unique_ptr<executor::Backend>> backend = executor::MakeBackend(backend_name);
  if (!backend.ok()) {
    return err << "headroom plan: --backend " << backend_name << ": "
               << backend.status().message() << "\n", 1;
  }
  const executor::BackendScratchModel scratch(backend->get());
  options.training.scratch = &scratch;
  section.host_is_device_memory = (*backend)->host_is_device_memory();
  if (section.budget_bytes > 0 || section.frontier || !section.profile_path.empty()) {
    return RunSectionPlan(*g, options, section, json, out, err);
  }
  absl::StatusOr<planner::MemoryPlan> plan = planner::PlanMemory(*g, options);
  if (!plan.ok()) return err << "headroom plan: " << plan.status().message() << "\n", 1;
  if (json) {
    out << PlanJson(g->name(), *plan, tensors) << "\n";
  } else {
    out << absl::StrFormat("%-24s %s (%s)\n", "model", g->name(),
                           options.training.inference ? "inference" : "training step")
        << plan->DebugString() << (tensors ? TensorTable(*plan) : "");
  }
  return 0;
}

}  // namespace headroom::clients
