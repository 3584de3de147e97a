#include "graph/onnx_patterns.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "graph/onnx_fold.h"
#include "graph/onnx_tensor.h"

namespace headroom::graph {
namespace {

// The graph's producers, consumers and scalar literals, and the matching helpers.
class Matcher {
 public:
  explicit Matcher(const onnx::GraphProto& graph) : graph_(graph) {
    for (const onnx::ValueInfoProto& out : graph.output()) external_.insert(out.name());
    for (const onnx::TensorProto& init : graph.initializer()) {
      initializers_.insert(init.name());
      if (init.dims_size() <= 1 && (init.dims_size() == 0 || init.dims(0) == 1)) {
        absl::StatusOr<OnnxTensor> t = OnnxTensor::FromProto(init, "");
        if (t.ok() && t->size() == 1) literals_[init.name()] = t->float_at(0);
      }
    }
    for (int i = 0; i < graph.node_size(); ++i) {
      const onnx::NodeProto& node = graph.node(i);
      for (const std::string& out : node.output()) producer_[out] = i;
      absl::flat_hash_set<std::string> seen;
      for (const std::string& in : node.input()) {
        if (!in.empty() && seen.insert(in).second) consumers_[in].push_back(i);
      }
      if (node.op_type() == "Constant" && node.output_size() == 1) {
        const onnx::AttributeProto* value = FindOnnxAttr(node, "value");
        if (value != nullptr) {
          absl::StatusOr<OnnxTensor> t = OnnxTensor::FromProto(value->t(), "");
          if (t.ok() && t->size() == 1) literals_[node.output(0)] = t->float_at(0);
        }
        if (const onnx::AttributeProto* f = FindOnnxAttr(node, "value_float")) {
          literals_[node.output(0)] = f->f();
        }
      }
    }
  }

  const onnx::NodeProto& node(int i) const { return graph_.node(i); }

  // Returns the node that writes `value`, if it is `op`.
  std::optional<int> Producer(const std::string& value, const std::string& op) const {
    auto it = producer_.find(value);
    if (it == producer_.end() || graph_.node(it->second).op_type() != op) return std::nullopt;
    return it->second;
  }

  // Returns the only reader of `value`, if it is `op` and nothing outside the graph reads it.
  std::optional<int> Only(const std::string& value, const std::string& op) const {
    auto it = consumers_.find(value);
    if (it == consumers_.end() || it->second.size() != 1 || external_.contains(value) ||
        graph_.node(it->second[0]).op_type() != op) {
      return std::nullopt;
    }
    return it->second[0];
  }

  // Returns the readers of `value` (each node once).
  std::vector<int> Consumers(const std::string& value) const {
    auto it = consumers_.find(value);
    return it == consumers_.end() ? std::vector<int>() : it->second;
  }
  bool IsExternal(const std::string& value) const { return external_.contains(value); }
  bool IsInitializer(const std::string& value) const { return initializers_.contains(value); }

  // Returns true if `value` is a scalar literal within `tolerance` of `expected`.
  bool Is(const std::string& value, double expected, double tolerance = 1e-5) const {
    auto it = literals_.find(value);
    return it != literals_.end() && std::fabs(it->second - expected) <= tolerance;
  }
  std::optional<double> Literal(const std::string& value) const {
    auto it = literals_.find(value);
    if (it == literals_.end()) return std::nullopt;
    return it->second;
  }

  // For a two-input node, returns the input that is not `known`, if the other one is.
  static std::optional<std::string> Other(const onnx::NodeProto& n, const std::string& known) {
    if (n.input_size() != 2) return std::nullopt;
    if (n.input(0) == known) return n.input(1);
    if (n.input(1) == known) return n.input(0);
    return std::nullopt;
  }

  // For a two-input node with one literal input near `expected`, returns the other input.
  std::optional<std::string> WithLiteral(const onnx::NodeProto& n, double expected,
                                         double tolerance = 1e-5) const {
    if (n.input_size() != 2) return std::nullopt;
    if (Is(n.input(1), expected, tolerance)) return n.input(0);
    if (Is(n.input(0), expected, tolerance)) return n.input(1);
    return std::nullopt;
  }

 private:
  const onnx::GraphProto& graph_;
  absl::flat_hash_map<std::string, int> producer_;
  absl::flat_hash_map<std::string, std::vector<int>> consumers_;
  absl::flat_hash_map<std::string, double> literals_;
  absl::flat_hash_set<std::string> external_;
  absl::flat_hash_set<std::string> initializers_;
};

// Matches the tail both GELU forms share, from `one_plus` (the value 1 + erf(..) or
// 1 + tanh(..)): a product with x and 0.5 in any of the orders torch writes. Appends the
// nodes it covers and returns the final output.
std::optional<std::string> MatchGeluTail(const Matcher& m, const std::string& one_plus,
                                         const std::string& x, std::vector<int>& nodes) {
  std::optional<int> m1 = m.Only(one_plus, "Mul");
  if (!m1) return std::nullopt;
  const std::optional<std::string> other = Matcher::Other(m.node(*m1), one_plus);
  if (!other) return std::nullopt;
  nodes.push_back(*m1);
  const std::string& out1 = m.node(*m1).output(0);
  if (*other == x || m.Is(*other, 0.5)) {
    // (x * (1 + f)) * 0.5, or (0.5 * (1 + f)) * x.
    std::optional<int> m2 = m.Only(out1, "Mul");
    if (!m2) return std::nullopt;
    const std::optional<std::string> last = Matcher::Other(m.node(*m2), out1);
    if (!last || !(*other == x ? m.Is(*last, 0.5) : *last == x)) return std::nullopt;
    nodes.push_back(*m2);
    return m.node(*m2).output(0);
  }
  // (x * 0.5) * (1 + f).
  std::optional<int> half = m.Producer(*other, "Mul");
  if (!half || !m.Only(*other, "Mul")) return std::nullopt;
  const std::optional<std::string> hx = m.WithLiteral(m.node(*half), 0.5);
  if (!hx || *hx != x) return std::nullopt;
  nodes.push_back(*half);
  return out1;
}

// x / sqrt(2) -> Erf -> + 1 -> tail.
std::optional<OnnxFusion> MatchGeluErf(const Matcher& m, int erf) {
  const std::string& scaled = m.node(erf).input(0);
  if (!m.Only(scaled, "Erf")) return std::nullopt;
  std::vector<int> nodes = {erf};
  std::optional<std::string> x;
  if (std::optional<int> div = m.Producer(scaled, "Div")) {
    if (m.Is(m.node(*div).input(1), std::sqrt(2.0), 1e-4)) x = m.node(*div).input(0);
    nodes.push_back(*div);
  } else if (std::optional<int> mul = m.Producer(scaled, "Mul")) {
    x = m.WithLiteral(m.node(*mul), std::sqrt(0.5), 1e-4);
    nodes.push_back(*mul);
  }
  if (!x) return std::nullopt;
  std::optional<int> add = m.Only(m.node(erf).output(0), "Add");
  if (!add || !m.WithLiteral(m.node(*add), 1.0)) return std::nullopt;
  nodes.push_back(*add);
  std::optional<std::string> out = MatchGeluTail(m, m.node(*add).output(0), *x, nodes);
  if (!out) return std::nullopt;
  return OnnxFusion{"GELU", nodes, *x, *out, "none"};
}

// sqrt(2/pi) * (x + 0.044715 x^3) -> Tanh -> + 1 -> tail.
std::optional<OnnxFusion> MatchGeluTanh(const Matcher& m, int tanh) {
  const std::string& scaled = m.node(tanh).input(0);
  std::optional<int> outer = m.Producer(scaled, "Mul");
  if (!m.Only(scaled, "Tanh") || !outer) return std::nullopt;
  const std::optional<std::string> sum = m.WithLiteral(m.node(*outer), std::sqrt(2.0 / M_PI), 1e-4);
  if (!sum || !m.Only(*sum, "Mul")) return std::nullopt;
  std::optional<int> add = m.Producer(*sum, "Add");
  if (!add) return std::nullopt;
  // One input of the Add is x, the other 0.044715 * x^3.
  for (int k = 0; k < 2; ++k) {
    const std::string& x = m.node(*add).input(k);
    const std::string& cubic = m.node(*add).input(1 - k);
    std::optional<int> scale = m.Producer(cubic, "Mul");
    if (!scale || !m.Only(cubic, "Add")) continue;
    const std::optional<std::string> cube = m.WithLiteral(m.node(*scale), 0.044715, 1e-6);
    std::optional<int> pow = cube ? m.Producer(*cube, "Pow") : std::nullopt;
    if (!pow || !m.Only(*cube, "Mul") || m.node(*pow).input(0) != x ||
        !m.Is(m.node(*pow).input(1), 3.0)) {
      continue;
    }
    std::vector<int> nodes = {*pow, *scale, *add, *outer, tanh};
    std::optional<int> one = m.Only(m.node(tanh).output(0), "Add");
    if (!one || !m.WithLiteral(m.node(*one), 1.0)) return std::nullopt;
    nodes.push_back(*one);
    std::optional<std::string> out = MatchGeluTail(m, m.node(*one).output(0), x, nodes);
    if (!out) return std::nullopt;
    return OnnxFusion{"GELU", nodes, x, *out, "tanh"};
  }
  return std::nullopt;
}

// Absorbs into `f` the only consumer of its output when that is `op` with an initializer as
// its other input; returns the initializer's name, or nothing (leaving `f` as it was).
std::optional<std::string> AbsorbInitializerOp(const Matcher& m, const std::string& op,
                                               OnnxFusion& f) {
  const std::optional<int> node = m.Only(f.output, op);
  if (!node) return std::nullopt;
  std::optional<std::string> other = Matcher::Other(m.node(*node), f.output);
  if (!other || !m.IsInitializer(*other)) return std::nullopt;
  f.nodes.push_back(*node);
  f.output = m.node(*node).output(0);
  return other;
}

// ReduceMean(x) -> Sub -> Pow 2 -> ReduceMean -> Add eps -> Sqrt -> Div (-> Mul w -> Add b).
std::optional<OnnxFusion> MatchLayerNorm(const Matcher& m, int mean) {
  const onnx::NodeProto& r1 = m.node(mean);
  const std::vector<int64_t> axes = OnnxIntsAttr(r1, "axes");
  if (axes != std::vector<int64_t>{-1} || OnnxIntAttr(r1, "keepdims", 1) != 1) return std::nullopt;
  const std::string& x = r1.input(0);
  std::optional<int> sub = m.Only(r1.output(0), "Sub");
  if (!sub || m.node(*sub).input(0) != x) return std::nullopt;
  const std::string& centred = m.node(*sub).output(0);
  if (m.IsExternal(centred) || m.Consumers(centred).size() != 2) return std::nullopt;
  std::optional<int> square;
  for (int c : m.Consumers(centred)) {
    const onnx::NodeProto& n = m.node(c);
    if ((n.op_type() == "Pow" && n.input(0) == centred && m.Is(n.input(1), 2.0)) ||
        (n.op_type() == "Mul" && n.input(0) == centred && n.input(1) == centred)) {
      square = c;
    }
  }
  if (!square) return std::nullopt;
  std::optional<int> r2 = m.Only(m.node(*square).output(0), "ReduceMean");
  if (!r2 || OnnxIntsAttr(m.node(*r2), "axes") != axes) return std::nullopt;
  std::optional<int> add = m.Only(m.node(*r2).output(0), "Add");
  if (!add) return std::nullopt;
  const std::optional<std::string> eps_name = Matcher::Other(m.node(*add), m.node(*r2).output(0));
  const std::optional<double> eps = eps_name ? m.Literal(*eps_name) : std::nullopt;
  std::optional<int> sqrt = eps ? m.Only(m.node(*add).output(0), "Sqrt") : std::nullopt;
  std::optional<int> div = sqrt ? m.Only(m.node(*sqrt).output(0), "Div") : std::nullopt;
  if (!div || m.node(*div).input(0) != centred) return std::nullopt;
  OnnxFusion f{"LayerNorm", {mean, *sub, *square, *r2, *add, *sqrt, *div}, x,
               m.node(*div).output(0), "", *eps};
  // The affine part, when its weight and bias are initializers.
  if (std::optional<std::string> w = AbsorbInitializerOp(m, "Mul", f)) {
    f.weight = *w;
    if (std::optional<std::string> b = AbsorbInitializerOp(m, "Add", f)) f.bias = *b;
  }
  return f;
}

}  // namespace

std::vector<OnnxFusion> FindOnnxFusions(const onnx::GraphProto& graph) {
  const Matcher m(graph);
  std::vector<OnnxFusion> fusions;
  std::vector<bool> taken(graph.node_size(), false);
  for (int i = 0; i < graph.node_size(); ++i) {
    const std::string& op = graph.node(i).op_type();
    std::optional<OnnxFusion> f;
    if (op == "Erf") f = MatchGeluErf(m, i);
    else if (op == "Tanh") f = MatchGeluTanh(m, i);
    else if (op == "ReduceMean") f = MatchLayerNorm(m, i);
    if (!f) continue;
    std::sort(f->nodes.begin(), f->nodes.end());
    if (std::any_of(f->nodes.begin(), f->nodes.end(), [&](int n) { return taken[n]; })) continue;
    for (int n : f->nodes) taken[n] = true;
    fusions.push_back(*std::move(f));
  }
  return fusions;
}

}  // namespace headroom::graph
