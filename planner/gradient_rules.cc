#include "planner/gradient_rules.h"

#include "absl/container/flat_hash_map.h"

namespace headroom::planner {
namespace {

using K = TensorRef::Kind;

GradientRead Always(K kind, int index) { return {{kind, index}, -1}; }
GradientRead IfNeeds(int input, K kind, int index) { return {{kind, index}, input}; }

// A unary elementwise op whose backward reads one tensor, `reads`: the output y for ReLU
// (y > 0), ReLU6 (0 < y < 6), HardSigmoid (alpha where 0 < y < 1), Sigmoid (y (1 - y)), Tanh
// (1 - y^2), Sqrt (1 / 2y) and Softmax; the input x where the derivative is not a function of
// y: GELU, HardSwish (y is not monotonic in x on [-3, -1.5]), Mish (nor on x < -1.19), LeakyReLU,
// ELU and SELU (whose sign of y follows x only for a positive alpha), Softplus and Erf (as
// PyTorch's backwards read). Both directions may run in place.
GradientRule Elementwise(K reads) {
  GradientRule r;
  r.reads = {Always(reads, 0)};
  r.forward_inplace = true;
  r.backward_inplace = true;
  return r;
}

absl::flat_hash_map<std::string, GradientRule> BuildRules() {
  absl::flat_hash_map<std::string, GradientRule> rules;
  // da = dy b^T needs b; db = a^T dy needs a; dbias = sum(dy) needs nothing.
  rules["MatMul"].reads = {IfNeeds(0, K::kInput, 1), IfNeeds(1, K::kInput, 0)};
  // dx needs the weight; dw needs x.
  rules["Conv2D"].reads = {IfNeeds(0, K::kInput, 1), IfNeeds(1, K::kInput, 0)};
  // The same for a transposed convolution: dx = conv(dy, w), dw from x and dy.
  rules["ConvTranspose2D"].reads = {IfNeeds(0, K::kInput, 1), IfNeeds(1, K::kInput, 0)};
  {
    // Training batch norm normalises with the batch's statistics and saves them; running
    // statistics (inputs 3, 4) are updated once per step, and the backward never reads them.
    GradientRule& bn = rules["BatchNorm"];
    bn.saved = {{"saved_mean", SavedState::ShapeOf::kChannels, proto::DTYPE_FLOAT32},
                {"saved_invstd", SavedState::ShapeOf::kChannels, proto::DTYPE_FLOAT32}};
    bn.reads = {Always(K::kInput, 0), Always(K::kSaved, 0), Always(K::kSaved, 1),
                IfNeeds(0, K::kInput, 1)};
    bn.updates_inputs_from = 3;
    bn.forward_inplace = true;
  }
  {
    GradientRule& ln = rules["LayerNorm"];
    ln.saved = {{"saved_mean", SavedState::ShapeOf::kRows, proto::DTYPE_FLOAT32},
                {"saved_rstd", SavedState::ShapeOf::kRows, proto::DTYPE_FLOAT32}};
    ln.reads = {Always(K::kInput, 0), Always(K::kSaved, 0), Always(K::kSaved, 1),
                IfNeeds(0, K::kInput, 1)};
    ln.forward_inplace = true;
  }
  {
    // PyTorch's native_group_norm saves each sample's and group's mean and rstd; its backward
    // reads them with x (and the weight for dx).
    GradientRule& gn = rules["GroupNorm"];
    gn.saved = {{"saved_mean", SavedState::ShapeOf::kGroups, proto::DTYPE_FLOAT32},
                {"saved_rstd", SavedState::ShapeOf::kGroups, proto::DTYPE_FLOAT32}};
    gn.reads = {Always(K::kInput, 0), Always(K::kSaved, 0), Always(K::kSaved, 1),
                IfNeeds(0, K::kInput, 1)};
    gn.forward_inplace = true;
  }
  for (const char* op : {"ReLU", "ReLU6", "HardSigmoid", "Sigmoid", "Tanh", "Sqrt", "Softmax"}) {
    rules[op] = Elementwise(K::kOutput);
  }
  for (const char* op :
       {"GELU", "HardSwish", "LeakyReLU", "ELU", "SELU", "Softplus", "Erf", "Mish", "Pow"}) {
    rules[op] = Elementwise(K::kInput);
  }
  {
    GradientRule& dropout = rules["Dropout"];  // dx = dy * mask / (1 - rate).
    dropout.saved = {{"mask", SavedState::ShapeOf::kOutput, proto::DTYPE_BOOL}};
    dropout.reads = {Always(K::kSaved, 0)};
    dropout.forward_inplace = true;
    dropout.backward_inplace = true;
  }
  {
    GradientRule& add = rules["Add"];  // da = db = dy (summed over broadcast dims).
    add.forward_inplace = true;
    add.backward_inplace = true;
  }
  {
    GradientRule& mul = rules["Mul"];  // da = dy b, db = dy a.
    mul.reads = {IfNeeds(0, K::kInput, 1), IfNeeds(1, K::kInput, 0)};
    mul.forward_inplace = true;
    mul.backward_inplace = true;
  }
  {
    GradientRule& sub = rules["Sub"];  // da = dy, db = -dy (summed over broadcast dims).
    sub.forward_inplace = true;
    sub.backward_inplace = true;
  }
  {
    // da = dy / b, db = -dy (a / b) / b, as PyTorch computes them.
    GradientRule& div = rules["Div"];
    div.reads = {IfNeeds(0, K::kInput, 1), IfNeeds(1, K::kInput, 0), IfNeeds(1, K::kInput, 1)};
    div.forward_inplace = true;
    div.backward_inplace = true;
  }
  {
    // dx = dy where x > 0, else slope dy; dslope = x dy where x <= 0, summed over broadcast
    // dims (PyTorch's: the slope's side at 0).
    GradientRule& prelu = rules["PReLU"];
    prelu.reads = {Always(K::kInput, 0), IfNeeds(0, K::kInput, 1)};
    prelu.forward_inplace = true;
    prelu.backward_inplace = true;
  }
  rules["MaxPool"].reads = {Always(K::kInput, 0), Always(K::kOutput, 0)};  // Where the max was.
  rules["AvgPool"];        // dx spreads dy over each window: shapes only.
  rules["GlobalAvgPool"];  // dx = dy / (H W), broadcast.
  rules["Resize"];         // dx sums dy at the interpolation weights: shapes only.
  for (const char* op : {"Flatten", "Reshape"}) {
    rules[op].forward_view = true;
    rules[op].backward_view = true;
  }
  rules["Transpose"];  // dx = transpose(dy, inverse perm).
  rules["Slice"];      // dx = zeros with dy written at the slice: shapes only.
  rules["Expand"];     // dx = dy summed over the broadcast dims: shapes only.
  rules["Concat"];     // dx_i = slices of dy.
  rules["Split"];      // dx = concat(dy_i), zeros for unused pieces.
  rules["ReduceSum"];  // dx = dy broadcast over the reduced axes: shapes only.
  // dx = dy / count where x equals y (its max or min), else 0; count is the ties in each
  // reduced set: PyTorch 1.13's amax and amin backward.
  for (const char* op : {"ReduceMax", "ReduceMin"}) {
    rules[op].reads = {Always(K::kInput, 0), Always(K::kOutput, 0)};
  }
  // dx = dy converted to x's dtype (a parameter's bfloat16 gradient becomes the float32 one
  // its update reads): shapes and dtypes only.
  rules["Cast"];
  rules["Embedding"].reads = {Always(K::kInput, 0)};  // Scatter-add rows of dy at the ids.
  // dlogits = (softmax(logits) - onehot(labels)) dloss / N: recomputes the softmax from the
  // logits rather than saving probabilities, which would be as large.
  rules["SoftmaxCrossEntropy"].reads = {Always(K::kInput, 0), Always(K::kInput, 1)};
  // The same over the classes on axis 1, ignored pixels' gradients zero.
  rules["PixelSoftmaxCrossEntropy"].reads = {Always(K::kInput, 0), Always(K::kInput, 1)};
  return rules;
}

}  // namespace

const GradientRule* FindGradientRule(const std::string& op) {
  static const auto* rules = new absl::flat_hash_map<std::string, GradientRule>(BuildRules());
  auto it = rules->find(op);
  return it == rules->end() ? nullptr : &it->second;
}

graph::Shape SavedShape(const SavedState& s, const graph::Graph& graph, const graph::Node& node) {
  const graph::Shape& x = graph.tensor(node.inputs[0]).shape;
  switch (s.shape_of) {
    case SavedState::ShapeOf::kChannels:
      return {x[1]};
    case SavedState::ShapeOf::kRows:
      return graph::Shape(x.begin(), x.end() - 1);
    case SavedState::ShapeOf::kOutput:
      return graph.tensor(node.outputs[0]).shape;
    case SavedState::ShapeOf::kGroups:
      return {x[0], node.attrs.Int("num_groups")};
  }
  return {};
}

}  // namespace headroom::planner
