// What autodiff needs to know of each op: the state its training-mode forward saves, exactly
// which forward tensors its backward reads, and where outputs may share their inputs' bytes.
#ifndef HEADROOM_PLANNER_GRADIENT_RULES_H_
#define HEADROOM_PLANNER_GRADIENT_RULES_H_

#include <string>
#include <vector>

#include "graph/graph.h"
#include "proto/headroom.pb.h"

namespace headroom::planner {

// A forward tensor of one node: its i-th input, i-th output, or i-th saved state.
struct TensorRef {
  enum class Kind { kInput, kOutput, kSaved };
  Kind kind;
  int index;
};

// State a training-mode forward writes for its backward (batch norm's mean and inverse
// deviation, layer norm's row statistics, dropout's mask).
struct SavedState {
  enum class ShapeOf {
    kChannels,  // [x.shape[1]]: per channel of input 0.
    kRows,      // x.shape[:-1]: per row of input 0 (normalised over the last dim).
    kOutput,    // The shape of output 0.
    kGroups,    // [x.shape[0], num_groups]: per sample and group (GroupNorm).
  };
  std::string suffix;  // Appended to the node's name: "saved_mean".
  ShapeOf shape_of;
  proto::DType dtype;  // DTYPE_UNSPECIFIED means input 0's dtype.
};

// A forward tensor the backward reads, perhaps only when some input needs a gradient.
struct GradientRead {
  TensorRef tensor;
  // The read is needed only if this input needs a gradient; -1 means always.
  int only_if_input_needs_grad = -1;
};

struct GradientRule {
  std::vector<SavedState> saved;
  std::vector<GradientRead> reads;
  // The training forward updates inputs from this index on in place (batch norm's running
  // statistics); -1 for none.
  int updates_inputs_from = -1;
  // Output 0 may overwrite an input of the same size that dies at this node (elementwise).
  bool forward_inplace = false;
  // Output 0 is a view of input 0 (no data is written).
  bool forward_view = false;
  // An input gradient may overwrite an output gradient of the same size that dies there.
  bool backward_inplace = false;
  // The input gradient is a view of the output gradient (reshape back).
  bool backward_view = false;
};

// Returns the rule of `op`, or nullptr for an op without a gradient.
const GradientRule* FindGradientRule(const std::string& op);

// Returns the shape of saved state `s` of `node`.
graph::Shape SavedShape(const SavedState& s, const graph::Graph& graph, const graph::Node& node);

}  // namespace headroom::planner

#endif  // HEADROOM_PLANNER_GRADIENT_RULES_H_
