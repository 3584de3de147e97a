#include "graph/reversible_block.h"

#include <algorithm>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "util/status_macros.h"

namespace headroom::graph {
namespace {

using absl::InvalidArgumentError;
using absl::StrCat;

// Resolves and checks one block. `owner` maps each node already in a block to that block's
// name; this block's nodes are added.
class BlockChecker {
 public:
  BlockChecker(const Graph& graph, const proto::ReversibleBlock& def,
               absl::flat_hash_map<NodeId, std::string>& owner)
      : g_(graph), def_(def), owner_(owner) {}

  absl::StatusOr<ReversibleBlock> Check() {
    block_.name = def_.name();
    ASSIGN_OR_RETURN(block_.y1_node, Claim(def_.y1_node(), "y1_node"));
    ASSIGN_OR_RETURN(block_.y2_node, Claim(def_.y2_node(), "y2_node"));
    for (const std::string& n : def_.f_nodes()) {
      ASSIGN_OR_RETURN(NodeId id, Claim(n, "f_nodes"));
      block_.f_nodes.push_back(id);
    }
    for (const std::string& n : def_.g_nodes()) {
      ASSIGN_OR_RETURN(NodeId id, Claim(n, "g_nodes"));
      block_.g_nodes.push_back(id);
    }
    if (block_.f_nodes.empty() || block_.g_nodes.empty()) {
      return Error(StrCat("needs at least one node in F and in G (has ", block_.f_nodes.size(),
                          " and ", block_.g_nodes.size(), ")"));
    }
    std::sort(block_.f_nodes.begin(), block_.f_nodes.end());
    std::sort(block_.g_nodes.begin(), block_.g_nodes.end());
    const absl::flat_hash_set<NodeId> f(block_.f_nodes.begin(), block_.f_nodes.end());
    const absl::flat_hash_set<NodeId> g(block_.g_nodes.begin(), block_.g_nodes.end());
    RETURN_IF_ERROR(Coupling(block_.y1_node, f, "F", "x1", &block_.x1, &block_.f_output));
    RETURN_IF_ERROR(Coupling(block_.y2_node, g, "G", "x2", &block_.x2, &block_.g_output));
    block_.y1 = g_.node(block_.y1_node).outputs[0];
    block_.y2 = g_.node(block_.y2_node).outputs[0];
    if (block_.x1 == block_.x2) {
      return Error(StrCat("x1 and x2 are the same tensor '", Name(block_.x1),
                          "'; the coupling needs two halves"));
    }
    RETURN_IF_ERROR(Reads(f, "F", block_.x2, "x2"));
    RETURN_IF_ERROR(Reads(g, "G", block_.y1, "y1"));
    RETURN_IF_ERROR(Escapes(f, "F", block_.y1_node));
    RETURN_IF_ERROR(Escapes(g, "G", block_.y2_node));
    RETURN_IF_ERROR(Couples(block_.f_output, "F", block_.x1, "x1"));
    RETURN_IF_ERROR(Couples(block_.g_output, "G", block_.x2, "x2"));
    return block_;
  }

 private:
  absl::Status Error(const std::string& what) const {
    return InvalidArgumentError(StrCat("reversible block '", def_.name(), "': ", what));
  }
  const std::string& Name(TensorId t) const { return g_.tensor(t).name; }

  // Returns the node named `name` after marking it as this block's.
  absl::StatusOr<NodeId> Claim(const std::string& name, const char* field) {
    const NodeId id = g_.FindNode(name);
    if (id < 0) return Error(StrCat(field, " names node '", name, "', which does not exist"));
    auto [it, inserted] = owner_.emplace(id, def_.name());
    if (!inserted) {
      return Error(
          StrCat(field, " names node '", name, "', already in ",
                 it->second == def_.name() ? "this block" : StrCat("block '", it->second, "'")));
    }
    return id;
  }

  // Checks that `node` is Add(outside, output of `part`) and returns the two.
  absl::Status Coupling(NodeId node, const absl::flat_hash_set<NodeId>& part, const char* label,
                        const char* outside, TensorId* x, TensorId* part_output) {
    const Node& n = g_.node(node);
    if (n.op->name != "Add") {
      return Error(StrCat("coupling node '", n.name, "' is ", n.op->name, ", needs Add"));
    }
    int from_part = 0;
    for (TensorId t : n.inputs) {
      if (g_.tensor(t).producer != kNoNode && part.contains(g_.tensor(t).producer)) {
        ++from_part;
        *part_output = t;
      } else {
        *x = t;
      }
    }
    if (from_part != 1 || n.inputs.size() != 2) {
      return Error(StrCat("coupling node '", n.name, "' must add one output of ", label, " to ",
                          outside, "; ", from_part, " of its inputs come from ", label));
    }
    return absl::OkStatus();
  }

  // Checks that the nodes of `part` read only `allowed`, parameters, buffers and the part's
  // own outputs.
  absl::Status Reads(const absl::flat_hash_set<NodeId>& part, const char* label, TensorId allowed,
                     const char* allowed_label) const {
    bool reads_allowed = false;
    for (NodeId id : part) {
      for (TensorId t : g_.node(id).inputs) {
        const Tensor& tensor = g_.tensor(t);
        if (t == allowed) {
          reads_allowed = true;
          continue;
        }
        if (tensor.role == proto::ROLE_PARAMETER || tensor.role == proto::ROLE_BUFFER) continue;
        if (tensor.producer != kNoNode && part.contains(tensor.producer)) continue;
        return Error(StrCat(label, " node '", g_.node(id).name, "' reads '", tensor.name, "'; ",
                            label, " may read only ", allowed_label, " '", Name(allowed),
                            "', parameters, buffers and its own tensors"));
      }
    }
    if (!reads_allowed) {
      return Error(StrCat(label, " never reads ", allowed_label, " '", Name(allowed), "'"));
    }
    return absl::OkStatus();
  }

  // Checks that what `part` writes is read only by the part and its coupling node.
  absl::Status Escapes(const absl::flat_hash_set<NodeId>& part, const char* label,
                       NodeId coupling) const {
    for (NodeId id : part) {
      for (TensorId t : g_.node(id).outputs) {
        if (t == g_.loss()) {
          return Error(StrCat(label, " writes the loss '", Name(t), "'"));
        }
        for (NodeId reader : g_.tensor(t).consumers) {
          if (part.contains(reader) || reader == coupling) continue;
          return Error(StrCat("tensor '", Name(t), "' written inside ", label,
                              " is read outside the block by node '", g_.node(reader).name, "'"));
        }
      }
    }
    return absl::OkStatus();
  }

  // Checks that `part_output` has the shape and dtype of `x` (stride 1, no broadcasting).
  absl::Status Couples(TensorId part_output, const char* label, TensorId x,
                       const char* x_label) const {
    const Tensor& a = g_.tensor(part_output);
    const Tensor& b = g_.tensor(x);
    if (a.shape != b.shape || a.dtype != b.dtype) {
      return Error(StrCat(label, "'s output '", a.name, "' is ", DTypeName(a.dtype), " ",
                          ShapeString(a.shape), " but ", x_label, " '", b.name, "' is ",
                          DTypeName(b.dtype), " ", ShapeString(b.shape),
                          "; the coupling needs the same shape (stride 1, no broadcasting)"));
    }
    return absl::OkStatus();
  }

  const Graph& g_;
  const proto::ReversibleBlock& def_;
  absl::flat_hash_map<NodeId, std::string>& owner_;
  ReversibleBlock block_;
};

}  // namespace

absl::StatusOr<std::vector<ReversibleBlock>> ResolveReversibleBlocks(const Graph& graph,
                                                                     const proto::GraphDef& def) {
  std::vector<ReversibleBlock> blocks;
  absl::flat_hash_set<std::string> names;
  absl::flat_hash_map<NodeId, std::string> owner;
  for (const proto::ReversibleBlock& b : def.reversible_blocks()) {
    if (b.name().empty()) {
      return InvalidArgumentError(StrCat("reversible block ", blocks.size(), " has an empty name"));
    }
    if (!names.insert(b.name()).second) {
      return InvalidArgumentError(StrCat("reversible block '", b.name(), "' is defined twice"));
    }
    ASSIGN_OR_RETURN(ReversibleBlock block, BlockChecker(graph, b, owner).Check());
    blocks.push_back(std::move(block));
  }
  std::sort(blocks.begin(), blocks.end(), [](const ReversibleBlock& a, const ReversibleBlock& b) {
    return a.y1_node < b.y1_node;
  });
  return blocks;
}

}  // namespace headroom::graph
