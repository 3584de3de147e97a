#include "clients/graph_command.h"

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "util/cli_flags.h"
#include "clients/model_flags.h"
#include "graph/graph.h"
#include "graph/graph_io.h"
#include "graph/op_registry.h"
#include "graph/summary.h"
#include "graph/zoo.h"
#include "util/json_writer.h"

namespace headroom::clients {
namespace {

std::string SummaryJson(const graph::GraphSummary& s) {
  JsonWriter w;
  w.BeginObject()
      .Key("name").String(s.name)
      .Key("num_nodes").Uint(s.num_nodes)
      .Key("num_tensors").Uint(s.num_tensors)
      .Key("num_parameters").Uint(s.num_parameters)
      .Key("parameter_bytes").Uint(s.parameter_bytes)
      .Key("buffer_bytes").Uint(s.buffer_bytes)
      .Key("input_bytes").Uint(s.input_bytes)
      .Key("activation_bytes").Uint(s.activation_bytes)
      .Key("largest_activation").BeginObject()
      .Key("name").String(s.largest_activation)
      .Key("bytes").Uint(s.largest_activation_bytes)
      .EndObject()
      .Key("nodes_by_op").BeginObject();
  for (const auto& [op, count] : s.nodes_by_op) w.Key(op).Uint(count);
  w.EndObject().EndObject();
  return w.str();
}

// Prints the error and returns the exit code for its kind.
int Fail(const std::string& command, const absl::Status& status, std::ostream& err) {
  err << "headroom " << command << ": " << status.message() << "\n";
  return 1;
}

}  // namespace

int RunGraphCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  absl::StatusOr<CliFlags> flags = CliFlags::Parse(args, {"json", "help"});
  if (!flags.ok()) return err << "headroom graph: " << flags.status().message() << "\n", 2;
  if (flags->TakeBool("help")) {
    out << "usage: headroom graph (--model NAME | --graph FILE | --onnx FILE) [--batch N] [--json] "
           "[--emit FILE]\n"
        << ModelFlagsUsage()
        << "  --json              print one JSON object\n"
           "  --emit FILE         write the validated description, shapes filled in "
           "(.pbtxt text, else binary)\n";
    return 0;
  }
  const bool json = flags->TakeBool("json");
  const std::string emit = flags->TakeString("emit");
  absl::StatusOr<proto::GraphDef> def = ModelFromFlags(*flags);
  if (!def.ok()) return Fail("graph", def.status(), err);
  if (absl::Status s = flags->CheckAllTaken("graph"); !s.ok()) {
    return err << "headroom graph: " << s.message() << "\n", 2;
  }
  absl::StatusOr<graph::Graph> g = graph::Graph::FromProto(*def);
  if (!g.ok()) return Fail("graph", g.status(), err);
  if (!emit.empty()) {
    if (absl::Status s = graph::WriteGraphFile(g->ToProto(), emit); !s.ok()) {
      return Fail("graph", s, err);
    }
  }
  const graph::GraphSummary summary = graph::Summarize(*g);
  out << (json ? SummaryJson(summary) + "\n" : summary.DebugString());
  if (!emit.empty() && !json) out << "wrote " << emit << "\n";
  return 0;
}

int RunOpsCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (!args.empty()) return err << "usage: headroom ops\n", 2;
  for (const graph::OpSchema* op : graph::AllOps()) {
    std::vector<std::string> inputs;
    for (size_t i = 0; i < op->input_names.size(); ++i) {
      const bool optional = i + op->num_optional_inputs >= op->input_names.size();
      inputs.push_back(optional ? "[" + op->input_names[i] + "]" : op->input_names[i]);
    }
    if (op->variadic_inputs) inputs.push_back("...");
    std::vector<std::string> attrs;
    for (const graph::AttrSpec& a : op->attrs) {
      attrs.push_back(absl::StrFormat("%s:%s%s", a.name, graph::AttrTypeName(a.type),
                                      a.required ? " (required)" : ""));
    }
    out << absl::StrFormat("%-20s (%s)%s\n    %s\n", op->name, absl::StrJoin(inputs, ", "),
                           attrs.empty() ? "" : "  " + absl::StrJoin(attrs, ", "), op->doc);
  }
  return 0;
}

int RunZooCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (!args.empty()) return err << "usage: headroom zoo\n", 2;
  for (const graph::ZooModelInfo& model : graph::ZooModels()) {
    out << absl::StrFormat("%-14s %s\n", model.name, model.doc);
    for (const graph::ZooOption& o : model.options) {
      out << absl::StrFormat("    --%-12s %-10d %s\n", o.name, o.default_value, o.doc);
    }
  }
  return 0;
}

}  // namespace headroom::clients
