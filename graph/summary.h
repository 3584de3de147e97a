// Totals of a forward graph, for `headroom graph` and the server.
#ifndef HEADROOM_GRAPH_SUMMARY_H_
#define HEADROOM_GRAPH_SUMMARY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace headroom::graph {

struct GraphSummary {
  std::string name;
  uint64_t num_nodes = 0;
  uint64_t num_tensors = 0;
  // Elements and bytes of trainable parameters.
  uint64_t num_parameters = 0;
  uint64_t parameter_bytes = 0;
  // Non-trainable state (batch-norm running statistics).
  uint64_t buffer_bytes = 0;
  // One batch of inputs and labels.
  uint64_t input_bytes = 0;
  // Every node output of one forward pass, with no sharing.
  uint64_t activation_bytes = 0;
  // The largest single activation.
  std::string largest_activation;
  uint64_t largest_activation_bytes = 0;
  // Nodes per op.
  std::map<std::string, uint64_t> nodes_by_op;

  // Returns a table for people, one figure a line.
  std::string DebugString() const;
};

// Returns the totals of `graph`.
GraphSummary Summarize(const Graph& graph);

// Returns "97.5 MiB" style text for a byte count.
std::string HumanBytes(uint64_t bytes);

// Returns `value` divided by `base` as often as keeps it below `base` (at most
// units.size() - 1 times), with `decimals` digits and that unit: units {"FLOP", "KFLOP",
// ...} and base 1000 give "12.30 GFLOP". The value itself, without decimals, when it is
// below `base`.
std::string HumanUnits(uint64_t value, double base, const std::vector<std::string>& units,
                       int decimals);

}  // namespace headroom::graph

#endif  // HEADROOM_GRAPH_SUMMARY_H_
