#include "clients/graph_command.h"

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "clients/command_flags.h"
#include "graph/graph.h"
#include "graph/graph_io.h"
#include "graph/op_registry.h"
#include "graph/summary.h"
#include "graph/zoo.h"
#include "util/json_writer.h"
#include "util/status_macros.h"

namespace headroom::clients {
namespace {

std::string SummaryJson(const graph::GraphSummary& s, const ImportNotes& notes) {
  JsonWriter w;
  w.BeginObject();
  WriteNotes(notes, w);
  w.Key("name").String(s.name)
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

}  // namespace

Command AddGraphCommand(CLI::App& headroom, const CommandIo& io) {
  struct State {
    ModelFlags model;
    bool json = false;
    std::string emit;
  };
  auto state = std::make_shared<State>();
  CLI::App* app = headroom.add_subcommand(
      "graph", "validate a model and summarise it (nodes, parameters, activation bytes)");
  AddModelFlags(*app, state->model);
  app->add_flag("--json", state->json, "print one JSON object");
  app->add_option("--emit", state->emit,
                  "write the validated description, shapes filled in (.pbtxt text, else binary)")
      ->type_name("FILE");
  return {app, [state, &io]() -> absl::Status {
            ASSIGN_OR_RETURN(LoadedModel model, LoadModel(state->model, /*with_values=*/false));
            ASSIGN_OR_RETURN(graph::Graph g, graph::Graph::FromProto(model.graph));
            if (!state->emit.empty())
              RETURN_IF_ERROR(graph::WriteGraphFile(g.ToProto(), state->emit));
            const graph::GraphSummary summary = graph::Summarize(g);
            PrintNotes(model.notes, io.err);
            io.out << (state->json ? SummaryJson(summary, model.notes) + "\n"
                                   : summary.DebugString());
            if (!state->emit.empty() && !state->json) io.out << "wrote " << state->emit << "\n";
            return absl::OkStatus();
          }};
}

Command AddOpsCommand(CLI::App& headroom, const CommandIo& io) {
  CLI::App* app = headroom.add_subcommand("ops", "list the op set: inputs and attributes");
  return {app, [&io]() -> absl::Status {
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
              io.out << absl::StrFormat(
                  "%-20s (%s)%s\n    %s\n", op->name, absl::StrJoin(inputs, ", "),
                  attrs.empty() ? "" : "  " + absl::StrJoin(attrs, ", "), op->doc);
            }
            return absl::OkStatus();
          }};
}

Command AddZooCommand(CLI::App& headroom, const CommandIo& io) {
  CLI::App* app = headroom.add_subcommand("zoo", "list the model zoo and each model's options");
  return {app, [&io]() -> absl::Status {
            for (const graph::ZooModelInfo& model : graph::ZooModels()) {
              io.out << absl::StrFormat("%-14s %s\n", model.name, model.doc);
              for (const graph::ZooOption& o : model.options) {
                io.out << absl::StrFormat("    --%-12s %-10d %s\n", o.name, o.default_value, o.doc);
              }
            }
            return absl::OkStatus();
          }};
}

}  // namespace headroom::clients
