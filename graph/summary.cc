#include "graph/summary.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace headroom::graph {

GraphSummary Summarize(const Graph& graph) {
  GraphSummary s;
  s.name = graph.name();
  s.num_nodes = graph.nodes().size();
  s.num_tensors = graph.tensors().size();
  for (const Tensor& t : graph.tensors()) {
    switch (t.role) {
      case proto::ROLE_PARAMETER:
        s.num_parameters += t.num_elements();
        s.parameter_bytes += t.bytes();
        break;
      case proto::ROLE_BUFFER:
        s.buffer_bytes += t.bytes();
        break;
      case proto::ROLE_INPUT:
      case proto::ROLE_LABEL:
        s.input_bytes += t.bytes();
        break;
      case proto::ROLE_ACTIVATION:
        s.activation_bytes += t.bytes();
        if (t.bytes() > s.largest_activation_bytes) {
          s.largest_activation_bytes = t.bytes();
          s.largest_activation = t.name;
        }
        break;
      default:
        break;
    }
  }
  for (const Node& n : graph.nodes()) ++s.nodes_by_op[n.op->name];
  return s;
}

std::string HumanUnits(uint64_t value, double base, const std::vector<std::string>& units,
                       int decimals) {
  double scaled = static_cast<double>(value);
  size_t unit = 0;
  while (scaled >= base && unit + 1 < units.size()) {
    scaled /= base;
    ++unit;
  }
  if (unit == 0) return absl::StrCat(value, " ", units[0]);
  return absl::StrFormat("%.*f %s", decimals, scaled, units[unit]);
}

std::string HumanBytes(uint64_t bytes) {
  static const std::vector<std::string> kUnits = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  return HumanUnits(bytes, 1024.0, kUnits, 1);
}

std::string GraphSummary::DebugString() const {
  std::vector<std::string> ops;
  for (const auto& [op, count] : nodes_by_op) ops.push_back(absl::StrCat(op, " ", count));
  std::string out;
  absl::StrAppendFormat(&out, "%-20s %s\n", "graph", name);
  absl::StrAppendFormat(&out, "%-20s %d\n", "nodes", num_nodes);
  absl::StrAppendFormat(&out, "%-20s %d\n", "tensors", num_tensors);
  absl::StrAppendFormat(&out, "%-20s %d\n", "parameters", num_parameters);
  absl::StrAppendFormat(&out, "%-20s %s (%d)\n", "parameter bytes", HumanBytes(parameter_bytes),
                        parameter_bytes);
  absl::StrAppendFormat(&out, "%-20s %s (%d)\n", "buffer bytes", HumanBytes(buffer_bytes),
                        buffer_bytes);
  absl::StrAppendFormat(&out, "%-20s %s (%d)\n", "input bytes", HumanBytes(input_bytes),
                        input_bytes);
  absl::StrAppendFormat(&out, "%-20s %s (%d)\n", "activation bytes",
                        HumanBytes(activation_bytes), activation_bytes);
  absl::StrAppendFormat(&out, "%-20s %s (%s)\n", "largest activation", largest_activation,
                        HumanBytes(largest_activation_bytes));
  absl::StrAppendFormat(&out, "%-20s %s\n", "ops", absl::StrJoin(ops, ", "));
  return out;
}

}  // namespace headroom::graph
