#include "graph/mixed_precision.h"

#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "util/status_macros.h"

namespace headroom::graph {
namespace {

// Ops that read their parameters through a bfloat16 Cast (the policy's compute ops).
bool CastsParameters(const std::string& op) {
  return op == "Conv2D" || op == "MatMul" || op == "Embedding";
}

proto::NodeDef CastNode(const std::string& from, const std::string& to, proto::DType dtype) {
  proto::NodeDef cast;
  cast.set_name(to);
  cast.set_op("Cast");
  cast.add_inputs(from);
  cast.add_outputs(to);
  (*cast.mutable_attrs())["to"].set_i(dtype);
  return cast;
}

// Returns the tensors to cast to bfloat16: float32 parameters a compute op reads, and float32
// inputs some node other than a Cast reads.
absl::flat_hash_set<TensorId> TensorsToCast(const Graph& g) {
  absl::flat_hash_set<TensorId> cast;
  for (const Node& n : g.nodes()) {
    for (TensorId t : n.inputs) {
      const Tensor& tensor = g.tensor(t);
      if (tensor.dtype != proto::DTYPE_FLOAT32) continue;
      const bool param = tensor.role == proto::ROLE_PARAMETER && CastsParameters(n.op->name);
      const bool input = tensor.role == proto::ROLE_INPUT && n.op->name != "Cast";
      if (param || input) cast.insert(t);
    }
  }
  return cast;
}

// Adds the Cast of each of `cast`'s parameters to the F or G of the reversible block that
// holds all its readers.
void JoinBlocks(const Graph& g, const absl::flat_hash_set<TensorId>& cast, proto::GraphDef& def) {
  // Node name -> (block, whether in G).
  absl::flat_hash_map<std::string, std::pair<int, bool>> part;
  for (int b = 0; b < def.reversible_blocks_size(); ++b) {
    for (const std::string& n : def.reversible_blocks(b).f_nodes()) part[n] = {b, false};
    for (const std::string& n : def.reversible_blocks(b).g_nodes()) part[n] = {b, true};
  }
  if (part.empty()) return;
  for (TensorId t : cast) {
    const Tensor& tensor = g.tensor(t);
    if (tensor.role != proto::ROLE_PARAMETER) continue;
    std::pair<int, bool> where = {-1, false};
    bool one_part = true;
    for (NodeId reader : tensor.consumers) {
      if (!CastsParameters(g.node(reader).op->name)) continue;
      auto it = part.find(g.node(reader).name);
      if (it == part.end() || (where.first >= 0 && it->second != where)) {
        one_part = false;
        break;
      }
      where = it->second;
    }
    if (!one_part || where.first < 0) continue;
    proto::ReversibleBlock& block = *def.mutable_reversible_blocks(where.first);
    const std::string name = absl::StrCat(tensor.name, ".bf16");
    if (where.second) {
      block.add_g_nodes(name);
    } else {
      block.add_f_nodes(name);
    }
  }
}

// Returns the graph of `def`, its error prefixed as the rewrite's.
absl::StatusOr<Graph> Load(const proto::GraphDef& def) {
  absl::StatusOr<Graph> g = Graph::FromProto(def);
  if (!g.ok()) {
    return absl::Status(g.status().code(),
                        absl::StrCat("mixed precision (bf16): ", g.status().message()));
  }
  return g;
}

}  // namespace

const char* PrecisionName(proto::Precision precision) {
  switch (precision) {
    case proto::PRECISION_BF16:
      return "bf16";
    case proto::PRECISION_AUTO:
      return "auto";
    default:
      return "fp32";
  }
}

absl::StatusOr<proto::Precision> ParsePrecision(absl::string_view name) {
  if (name == "fp32") return proto::PRECISION_FP32;
  if (name == "bf16") return proto::PRECISION_BF16;
  if (name == "auto") return proto::PRECISION_AUTO;
  return absl::InvalidArgumentError(
      absl::StrCat("precision '", name, "' is not fp32, bf16 or auto"));
}

absl::StatusOr<proto::Precision> ChooseFasterPrecision(
    const absl::StatusOr<double>& fp32_step_seconds,
    const absl::StatusOr<double>& bf16_step_seconds) {
  for (const absl::StatusOr<double>* s : {&fp32_step_seconds, &bf16_step_seconds}) {
    if (!s->ok() && s->status().code() != absl::StatusCode::kFailedPrecondition) {
      return s->status();
    }
  }
  if (!fp32_step_seconds.ok() && !bf16_step_seconds.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "neither precision fits. In bf16 mixed precision: ", bf16_step_seconds.status().message(),
        " In float32: ", fp32_step_seconds.status().message()));
  }
  if (!fp32_step_seconds.ok()) return proto::PRECISION_BF16;
  if (!bf16_step_seconds.ok()) return proto::PRECISION_FP32;
  return *bf16_step_seconds < *fp32_step_seconds ? proto::PRECISION_BF16 : proto::PRECISION_FP32;
}

absl::StatusOr<proto::GraphDef> MixedPrecisionDef(const Graph& forward) {
  const absl::flat_hash_set<TensorId> cast = TensorsToCast(forward);
  const proto::GraphDef original = forward.ToProto();
  proto::GraphDef def = original;
  def.clear_nodes();
  // 1. Node outputs are inferred again, in their new dtypes; leaves keep theirs.
  for (proto::TensorDef& t : *def.mutable_tensors()) {
    const TensorId id = forward.FindTensor(t.name());
    if (forward.tensor(id).producer != kNoNode) t.set_dtype(proto::DTYPE_UNSPECIFIED);
  }
  // 2. Each Cast just before its first reader; compute ops read the cast parameters, every
  // node the cast inputs.
  auto cast_name = [&](TensorId t) { return absl::StrCat(forward.tensor(t).name, ".bf16"); };
  absl::flat_hash_set<TensorId> emitted;
  for (int i = 0; i < original.nodes_size(); ++i) {
    proto::NodeDef node = original.nodes(i);
    const Node& n = forward.node(forward.FindNode(node.name()));
    for (int k = 0; k < node.inputs_size(); ++k) {
      const TensorId t = n.inputs[k];
      if (!cast.contains(t)) continue;
      const bool param = forward.tensor(t).role == proto::ROLE_PARAMETER;
      if (param && !CastsParameters(n.op->name)) continue;
      if (emitted.insert(t).second) {
        const std::string name = cast_name(t);
        if (forward.FindTensor(name) >= 0 || forward.FindNode(name) >= 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("mixed precision: the cast of '", forward.tensor(t).name,
                           "' would be named '", name, "', which the graph already uses"));
        }
        *def.add_nodes() = CastNode(forward.tensor(t).name, name, proto::DTYPE_BFLOAT16);
      }
      node.set_inputs(k, cast_name(t));
    }
    *def.add_nodes() = std::move(node);
  }
  JoinBlocks(forward, cast, def);
  // 3. The loss in float32: a loss computed in bfloat16 gets a final Cast.
  ASSIGN_OR_RETURN(const Graph mixed, Load(def));
  if (mixed.tensor(mixed.loss()).dtype != proto::DTYPE_FLOAT32) {
    const std::string loss = absl::StrCat(def.loss(), ".f32");
    if (mixed.FindTensor(loss) >= 0 || mixed.FindNode(loss) >= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("mixed precision: the float32 loss would be named '", loss,
                       "', which the graph already uses"));
    }
    *def.add_nodes() = CastNode(def.loss(), loss, proto::DTYPE_FLOAT32);
    def.set_loss(loss);
  }
  return def;
}

absl::StatusOr<Graph> ToMixedPrecision(const Graph& forward) {
  ASSIGN_OR_RETURN(const proto::GraphDef def, MixedPrecisionDef(forward));
  return Load(def);
}

}  // namespace headroom::graph
