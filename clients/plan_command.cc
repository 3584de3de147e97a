#include "clients/plan_command.h"

#include "absl/strings/str_format.h"
#include "clients/cli_flags.h"
#include "clients/model_flags.h"
#include "graph/graph.h"
#include "graph/shape.h"
#include "planner/memory_planner.h"
#include "util/json_writer.h"

namespace headroom::clients {
namespace {

constexpr char kUsage[] =
    "usage: headroom plan (--model NAME [--batch N] | --graph FILE) [--inference]\n"
    "                     [--optimizer sgd|adam] [--alignment BYTES] [--tensors] [--json]\n";

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
      .Key("num_steps").Uint(plan.num_steps)
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
          .Key("first_step").Int(t.lifetime.first_step)
          .Key("last_step").Int(t.lifetime.last_step)
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
                          graph::RoleName(t.role), t.offset, t.bytes, t.lifetime.first_step,
                          t.lifetime.last_step, t.buffer);
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

}  // namespace

int RunPlanCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  absl::StatusOr<CliFlags> flags = CliFlags::Parse(args, {"json", "help", "inference", "tensors"});
  if (!flags.ok()) return err << "headroom plan: " << flags.status().message() << "\n", 2;
  if (flags->TakeBool("help")) {
    out << kUsage << ModelFlagsUsage()
        << "  --inference         plan the forward pass only\n"
           "  --optimizer NAME    sgd (with momentum, default) or adam\n"
           "  --alignment BYTES   offset alignment in the arena (default 256)\n"
           "  --tensors           every tensor's offset, size, lifetime and role\n"
           "  --json              print one JSON object\n";
    return 0;
  }
  const bool json = flags->TakeBool("json");
  const bool tensors = flags->TakeBool("tensors");
  planner::PlannerOptions options;
  if (!OptionsFromFlags(*flags, options, err)) return 2;
  absl::StatusOr<proto::GraphDef> def = ModelFromFlags(*flags);
  if (!def.ok()) return err << "headroom plan: " << def.status().message() << "\n", 1;
  if (absl::Status s = flags->CheckAllTaken("plan"); !s.ok()) {
    return err << "headroom plan: " << s.message() << "\n", 2;
  }
  absl::StatusOr<graph::Graph> g = graph::Graph::FromProto(*def);
  if (!g.ok()) return err << "headroom plan: " << g.status().message() << "\n", 1;
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
