#include "planner/reversible.h"

#include <algorithm>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "util/check.h"
#include "util/status_macros.h"

namespace headroom::planner {

// Expands one step: call Expand() once. Emits the forward nodes unchanged, then the
// backward-phase nodes with each rebuilt block's rebuild before the first of its backward
// nodes, every input read through the map of rebuilt copies.
class ReversibleExpander {
 public:
  ReversibleExpander(const graph::Graph& forward, const TrainingGraph& graph, const CostModel& cost,
                     const ReversibleOptions& options)
      : forward_(forward), g_(graph), cost_(cost), options_(options) {}

  absl::StatusOr<ReversibleStep> Expand() {
    RETURN_IF_ERROR(Validate());
    TrainingGraph out;
    out.tensors_.reserve(g_.tensors().size() * 2);
    out.loss_ = g_.loss_;
    out.inference_ = false;
    out.final_gradient_ = g_.final_gradient_;
    for (const TrainingTensor& t : g_.tensors()) out.AppendTensor(Unlinked(t, ""));
    std::vector<bool> done(forward_.reversible_blocks().size(), false);
    for (NodeId n = 0; n < static_cast<NodeId>(g_.nodes().size()); ++n) {
      TrainingNode node = g_.node(n);
      node.after.clear();
      if (n >= nf_ && node.kind == NodeKind::kBackward) {
        const int32_t b = block_of_[node.forward_node];
        if (b >= 0 && !done[b]) {
          done[b] = true;
          Rebuild(b, &out);
        }
      }
      for (TensorId& t : node.inputs) t = Current(t);
      out.AppendNode(std::move(node));
    }
    ReversibleStep result{SectionedStep(std::move(out))};
    result.rebuilt_blocks = rebuilt_blocks_;
    result.step.rebuilt = std::move(rebuilt_);
    Finish(&result.step);
    RETURN_IF_ERROR(ValidateSchedule(result.step.graph, result.step.schedule));
    return result;
  }

 private:
  absl::Status Validate() {
    if (g_.inference()) {
      return absl::InvalidArgumentError(
          "reversible blocks need a training graph, not an inference one");
    }
    nf_ = NumForwardNodes(g_);
    const int32_t num_blocks = static_cast<int32_t>(forward_.reversible_blocks().size());
    std::vector<int32_t> blocks = options_.blocks;
    if (blocks.empty()) {
      for (int32_t b = 0; b < num_blocks; ++b) blocks.push_back(b);
    }
    block_of_.assign(forward_.nodes().size(), -1);
    for (int32_t b : blocks) {
      if (b < 0 || b >= num_blocks) {
        return absl::InvalidArgumentError(absl::StrCat("reversible block index ", b,
                                                       " is out of range: the graph has ",
                                                       num_blocks, " blocks"));
      }
      const graph::ReversibleBlock& block = forward_.reversible_blocks()[b];
      if (block_of_[block.y1_node] >= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("reversible block '", block.name, "' is named twice"));
      }
      for (const std::vector<graph::NodeId>* part : {&block.f_nodes, &block.g_nodes}) {
        for (graph::NodeId n : *part) block_of_[n] = b;
      }
      block_of_[block.y1_node] = block_of_[block.y2_node] = b;
    }
    // A training graph lists its forward nodes first, training node i running forward node i.
    for (NodeId n = 0; n < nf_; ++n) {
      CHECK(g_.node(n).forward_node == n) << "forward node " << n << " out of place";
    }
    return absl::OkStatus();
  }

  // Returns the copy of `t` that nodes emitted now read.
  TensorId Current(TensorId t) const {
    auto it = current_.find(t);
    return it == current_.end() ? t : it->second;
  }

  static TrainingTensor Unlinked(const TrainingTensor& t, const std::string& suffix) {
    TrainingTensor copy = t;
    copy.name = absl::StrCat(t.name, suffix);
    copy.producer = kNone;
    copy.consumers.clear();
    return copy;
  }

  // Appends a fresh copy of original tensor `t`, read from now on instead of it.
  TensorId Renew(TensorId t, TrainingGraph* out) {
    const TensorId id = out->AppendTensor(Unlinked(g_.tensor(t), ".rebuild"));
    rebuilt_.push_back({t, id});
    current_[t] = id;
    return id;
  }

  // Appends the re-run of forward node `n` from the current copies of its inputs.
  void ReRun(graph::NodeId n, TrainingGraph* out) {
    TrainingNode node = g_.node(n);
    node.name = absl::StrCat(node.name, ".rebuild");
    node.kind = NodeKind::kRecompute;
    node.after.clear();
    node.updates.clear();  // Running statistics are updated once per step, in the forward.
    for (TensorId& t : node.inputs) t = Current(t);
    // Batch norm normalises with the statistics its forward saved: they are read (kept from
    // the forward to here and to its backward), not computed again from the rebuilt input.
    const size_t num_outputs = forward_.node(n).outputs.size();
    if (node.op == "BatchNorm" && node.outputs.size() > num_outputs) {
      node.saved_inputs_from = static_cast<int32_t>(node.inputs.size());
      node.inputs.insert(node.inputs.end(), node.outputs.begin() + num_outputs, node.outputs.end());
      node.outputs.resize(num_outputs);
    }
    for (TensorId& t : node.outputs) t = Renew(t, out);
    if (node.scratch != kNone) {
      node.scratch = out->AppendTensor(Unlinked(g_.tensor(node.scratch), ".rebuild"));
    }
    out->AppendNode(std::move(node));
  }

  // Appends x' = y - part_output', the rebuilt copy of block input `x`.
  void Subtract(const graph::ReversibleBlock& block, graph::TensorId x, graph::TensorId y,
                graph::TensorId part_output, const char* label, TrainingGraph* out) {
    TrainingNode node;
    node.name = absl::StrCat(block.name, ".", label, ".rebuild");
    node.op = "Sub";
    node.kind = NodeKind::kRebuild;
    node.inputs = {Current(y), Current(part_output)};
    node.outputs = {Renew(x, out)};
    // The output may take y's bytes when y dies here (it does for y2).
    node.inplace = {{0, 0}};
    out->AppendNode(std::move(node));
  }

  // Appends the rebuild of block `b`: G re-run, x2, F re-run, x1.
  void Rebuild(int32_t b, TrainingGraph* out) {
    const graph::ReversibleBlock& block = forward_.reversible_blocks()[b];
    rebuilt_blocks_.push_back(b);
    for (graph::NodeId n : block.g_nodes) ReRun(n, out);
    Subtract(block, block.x2, block.y2, block.g_output, "x2", out);
    for (graph::NodeId n : block.f_nodes) ReRun(n, out);
    Subtract(block, block.x1, block.y1, block.f_output, "x1", out);
  }

  // Sets the identity schedule, the one section and the predicted times.
  void Finish(SectionedStep* step) const {
    const TrainingGraph& out = step->graph;
    const NodeId n = static_cast<NodeId>(out.nodes().size());
    step->schedule.order.resize(n);
    step->schedule.position_of.resize(n);
    SectionInfo section;
    section.begin = 0;
    section.end = nf_;
    section.backward_position = nf_ < n ? nf_ : -1;
    for (NodeId i = 0; i < n; ++i) {
      step->schedule.order[i] = i;
      step->schedule.position_of[i] = i;
      const double seconds = cost_.NodeSeconds(out, i);
      step->step_seconds += seconds;
      const NodeKind kind = out.node(i).kind;
      if (kind == NodeKind::kRecompute || kind == NodeKind::kRebuild) {
        step->recompute_seconds += seconds;
        step->recompute_flops += cost_.NodeFlops(out, i);
        section.recomputed = true;
        ++section.recompute_nodes;
        section.recompute_flops += cost_.NodeFlops(out, i);
      }
    }
    step->sections = {section};
  }

  const graph::Graph& forward_;
  const TrainingGraph& g_;
  const CostModel& cost_;
  const ReversibleOptions& options_;
  int32_t nf_ = 0;
  // Indexed by forward node: the block it belongs to if that block is rebuilt, else -1.
  std::vector<int32_t> block_of_;
  // Original tensor -> the rebuilt copy read from now on.
  absl::flat_hash_map<TensorId, TensorId> current_;
  std::vector<int32_t> rebuilt_blocks_;
  std::vector<std::pair<TensorId, TensorId>> rebuilt_;
};

absl::StatusOr<ReversibleStep> ExpandReversible(const graph::Graph& forward,
                                                const TrainingGraph& graph, const CostModel& cost,
                                                const ReversibleOptions& options) {
  return ReversibleExpander(forward, graph, cost, options).Expand();
}

}  // namespace headroom::planner
