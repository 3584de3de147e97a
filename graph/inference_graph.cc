#include "graph/inference_graph.h"

#include <cmath>
#include <cstring>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "util/status_macros.h"

namespace headroom::graph {
namespace {

using absl::StrCat;

// Returns the float32 elements of `name`'s value, checked against the graph's tensor.
absl::StatusOr<std::vector<float>> Floats(
    const Graph& g, const absl::flat_hash_map<std::string, const proto::TensorValue*>& values,
    const std::string& name) {
  auto it = values.find(name);
  if (it == values.end()) {
    return absl::InvalidArgumentError(StrCat("no value for '", name, "'"));
  }
  const Tensor& t = g.tensor(g.FindTensor(name));
  const proto::TensorValue& v = *it->second;
  if (v.dtype() != proto::DTYPE_FLOAT32 || t.dtype != proto::DTYPE_FLOAT32 ||
      v.data().size() != t.bytes()) {
    return absl::InvalidArgumentError(StrCat("value '", name, "' is ", DTypeName(v.dtype()), " of ",
                                             v.data().size(), " bytes; needs float32 ",
                                             ShapeString(t.shape)));
  }
  std::vector<float> out(t.num_elements());
  std::memcpy(out.data(), v.data().data(), v.data().size());
  return out;
}

proto::TensorValue FloatValue(const std::string& name, const Shape& shape,
                              const std::vector<float>& data) {
  proto::TensorValue v;
  v.set_name(name);
  for (int64_t d : shape) v.add_shape(d);
  v.set_dtype(proto::DTYPE_FLOAT32);
  v.set_data(std::string(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float)));
  return v;
}

}  // namespace

absl::StatusOr<InferenceModel> InferenceForm(const Graph& forward,
                                             const std::vector<proto::TensorValue>& values) {
  absl::flat_hash_map<std::string, const proto::TensorValue*> by_name;
  for (const proto::TensorValue& v : values) by_name[v.name()] = &v;
  InferenceModel out;
  proto::GraphDef& def = out.graph;
  def.set_name(forward.name());
  def.set_loss(forward.tensor(forward.loss()).name);
  // What each tensor is read as (a removed dropout's output is its input).
  absl::flat_hash_map<std::string, std::string> alias;
  auto read = [&](const std::string& name) {
    auto it = alias.find(name);
    return it == alias.end() ? name : it->second;
  };
  absl::flat_hash_set<std::string> read_names;
  std::vector<proto::TensorDef> new_leaves;

  // 1. The nodes, in topological order, batch norms and dropouts rewritten.
  for (const Node& n : forward.nodes()) {
    const std::string& out_name = forward.tensor(n.outputs[0]).name;
    if (n.op->name == "Dropout") {
      alias[out_name] = read(forward.tensor(n.inputs[0]).name);
      continue;
    }
    if (n.op->name == "BatchNorm") {
      std::vector<float> p[4];
      for (int k = 0; k < 4; ++k) {
        ASSIGN_OR_RETURN(p[k], Floats(forward, by_name, forward.tensor(n.inputs[k + 1]).name));
      }
      const double epsilon = static_cast<float>(n.attrs.Float("epsilon"));
      std::vector<float> scale(p[0].size()), shift(p[0].size());
      for (size_t c = 0; c < scale.size(); ++c) {
        const double s = p[0][c] / std::sqrt(static_cast<double>(p[3][c]) + epsilon);
        scale[c] = static_cast<float>(s);
        shift[c] = static_cast<float>(p[1][c] - static_cast<double>(p[2][c]) * s);
      }
      const Shape& x = forward.tensor(n.inputs[0]).shape;
      Shape shape = {x[1]};
      if (x.size() == 4) shape = {x[1], 1, 1};
      const std::string scale_name = StrCat(n.name, ".inference_scale");
      const std::string shift_name = StrCat(n.name, ".inference_shift");
      for (const auto& [name, data] :
           {std::pair(scale_name, &scale), std::pair(shift_name, &shift)}) {
        proto::TensorDef t;
        t.set_name(name);
        for (int64_t d : shape) t.add_shape(d);
        t.set_dtype(proto::DTYPE_FLOAT32);
        t.set_role(proto::ROLE_BUFFER);
        new_leaves.push_back(std::move(t));
        out.values.push_back(FloatValue(name, shape, *data));
      }
      const std::string scaled = StrCat(out_name, ".scaled");
      proto::NodeDef* mul = def.add_nodes();
      mul->set_name(StrCat(n.name, ".scale"));
      mul->set_op("Mul");
      mul->add_inputs(read(forward.tensor(n.inputs[0]).name));
      mul->add_inputs(scale_name);
      mul->add_outputs(scaled);
      proto::NodeDef* add = def.add_nodes();
      add->set_name(n.name);
      add->set_op("Add");
      add->add_inputs(scaled);
      add->add_inputs(shift_name);
      add->add_outputs(out_name);
      read_names.insert(mul->inputs(0));
      continue;
    }
    proto::NodeDef* node = def.add_nodes();
    node->set_name(n.name);
    node->set_op(n.op->name);
    for (TensorId in : n.inputs) {
      node->add_inputs(read(forward.tensor(in).name));
      read_names.insert(node->inputs(node->inputs_size() - 1));
    }
    for (TensorId o : n.outputs) node->add_outputs(forward.tensor(o).name);
    for (const auto& [name, value] : n.attrs.values()) (*node->mutable_attrs())[name] = value;
  }

  // 2. The leaves still read, then the batch norms' scales and shifts.
  for (const Tensor& t : forward.tensors()) {
    if (t.producer != kNoNode || !read_names.contains(t.name)) continue;
    proto::TensorDef* d = def.add_tensors();
    d->set_name(t.name);
    for (int64_t x : t.shape) d->add_shape(x);
    d->set_dtype(t.dtype);
    d->set_role(t.role);
    if (t.role == proto::ROLE_PARAMETER || t.role == proto::ROLE_BUFFER) {
      auto it = by_name.find(t.name);
      if (it == by_name.end()) {
        return absl::InvalidArgumentError(
            StrCat("no value for ", RoleName(t.role), " '", t.name, "'"));
      }
      out.values.push_back(*it->second);
    }
  }
  for (proto::TensorDef& t : new_leaves) *def.add_tensors() = std::move(t);
  return out;
}

}  // namespace headroom::graph
