#include "planner/sections.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "graph/shape.h"
#include "util/check.h"
#include "util/status_macros.h"

namespace headroom::planner {

int32_t NumForwardNodes(const TrainingGraph& graph) {
  int32_t n = 0;
  while (n < static_cast<int32_t>(graph.nodes().size()) &&
         graph.node(n).kind == NodeKind::kForward) {
    ++n;
  }
  return n;
}

uint64_t HostPoolBytes(const SectionedStep& step, uint64_t alignment_bytes) {
  const uint64_t align = std::max<uint64_t>(alignment_bytes, 1);
  absl::flat_hash_set<TensorId> seen;
  uint64_t bytes = 0;
  for (const SectionInfo& section : step.sections) {
    for (const CachedInput* c : section.Held()) {
      if (c->offloaded && seen.insert(c->tensor).second) {
        bytes += (c->bytes + align - 1) / align * align;
      }
    }
  }
  return bytes + OptimizerHostBytes(step, alignment_bytes);
}

uint64_t OptimizerHostBytes(const SectionedStep& step, uint64_t alignment_bytes) {
  const uint64_t align = std::max<uint64_t>(alignment_bytes, 1);
  auto aligned = [&](TensorId t) {
    return (step.graph.tensor(t).bytes + align - 1) / align * align;
  };
  uint64_t bytes = 0;
  for (const HostUpdate& u : step.host_updates) {
    bytes += aligned(u.param) + aligned(u.grad);
    for (TensorId t : u.state) bytes += aligned(t);
  }
  return bytes;
}

const char* OptimizerPlacementName(bool on_host) { return on_host ? "host" : "device"; }

std::vector<int32_t> EvenCuts(int32_t num_forward, int32_t sections) {
  std::vector<int32_t> cuts;
  for (int32_t i = 1; i < sections; ++i) {
    const int32_t c = static_cast<int32_t>(
        std::lround(static_cast<double>(i) * num_forward / sections));
    if (c > (cuts.empty() ? 0 : cuts.back()) && c < num_forward) cuts.push_back(c);
  }
  return cuts;
}

absl::Status ValidateSchedule(const TrainingGraph& graph, const Schedule& schedule) {
  for (Position position = 0; position < schedule.num_positions(); ++position) {
    const TrainingNode& node = graph.node(schedule.order[position]);
    for (TensorId t : node.inputs) {
      const NodeId p = graph.tensor(t).producer;
      if (p != kNone && schedule.position_of[p] >= position) {
        return absl::InternalError(absl::StrCat("node '", node.name, "' at position ", position,
                                                " reads '", graph.tensor(t).name,
                                                "' before it is written"));
      }
    }
    if (node.kind != NodeKind::kUpdate) continue;
    for (TensorId t : node.updates) {
      for (NodeId c : graph.tensor(t).consumers) {
        if (schedule.position_of[c] > position) {
          return absl::InternalError(absl::StrCat("node '", graph.node(c).name, "' reads '",
                                                  graph.tensor(t).name, "' after its update '",
                                                  node.name, "'"));
        }
      }
    }
  }
  return absl::OkStatus();
}

namespace {

// One node of the expanded order before copies are placed: an original node, or the
// re-forward of forward node `node`.
struct Item {
  NodeId node = kNone;
  bool recompute = false;
  int32_t section = 0;
};

// Where the copies of one offloaded tensor go, as positions in the item order: the offload
// node goes before item `await_before`, the prefetch node before item `prefetch_before`.
struct Copies {
  int32_t await_before = 0;
  int32_t prefetch_before = 0;
};

}  // namespace

// Expands one SectionCuts: call Expand() once. Phases: Analyse() (sections of every node,
// the re-forward each section needs, the item order and its groups), PlaceCopies() (where
// each offload is awaited and each prefetch issued, from a timeline of the item order),
// Emit() (the expanded graph), Simulate() (its predicted time).
class SectionExpander {
 public:
  SectionExpander(const TrainingGraph& graph, const SectionCuts& cuts, const CostModel& cost,
                  const NodeCosts* node_costs = nullptr)
      : g_(graph), cuts_(cuts), cost_(cost), node_costs_(node_costs) {}

  absl::StatusOr<SectionedStep> Expand() {
    RETURN_IF_ERROR(Validate());
    if (cuts_.parameters_on_host && !cuts_.optimizer_state_on_host) {
      return absl::InvalidArgumentError(
          "parameters on the host need the optimizer state on the host too (the host update's "
          "master copies are what each use prefetches)");
    }
    if (node_costs_ == nullptr) {
      own_costs_ = ComputeNodeCosts(g_, cost_);
      node_costs_ = &own_costs_;
    }
    Analyse();
    RETURN_IF_ERROR(CheckOffloads());
    std::vector<TensorId> wanted = cuts_.offload;
    absl::flat_hash_map<TensorId, Copies> copies;
    // Dropping an offload frees the copy stream for the others: place again until stable.
    while (true) {
      copies = PlaceCopies(wanted);
      std::vector<TensorId> kept;
      for (TensorId t : wanted) {
        if (copies.contains(t)) kept.push_back(t);
      }
      if (kept.size() == wanted.size()) break;
      wanted = kept;
    }
    if (cuts_.optimizer_state_on_host) PlaceHostUpdates();
    if (cuts_.parameters_on_host) PlaceParameterCopies();
    SectionedStep step = Emit(copies);
    for (TensorId t : cuts_.offload) {
      if (!copies.contains(t)) step.offload_dropped.push_back(t);
    }
    Simulate(step);
    RETURN_IF_ERROR(ValidateSchedule(step.graph, step.schedule));
    return step;
  }

 private:
  int32_t num_sections() const { return static_cast<int32_t>(cuts_.cuts.size()) + 1; }
  int32_t last() const { return num_sections() - 1; }

  absl::Status Validate() {
    if (g_.inference()) {
      return absl::InvalidArgumentError("sections need a training graph, not an inference one");
    }
    nf_ = NumForwardNodes(g_);
    int32_t previous = 0;
    for (int32_t c : cuts_.cuts) {
      if (c <= previous || c >= nf_) {
        return absl::InvalidArgumentError(
            absl::StrCat("section cut at forward position ", c, " is out of order or outside (0, ",
                         nf_, ")"));
      }
      previous = c;
    }
    previous = 0;
    const int32_t rerun_end = cuts_.cuts.empty() ? 0 : cuts_.cuts.back();
    for (int32_t c : cuts_.inner_cuts) {
      if (c <= previous || c >= nf_) {
        return absl::InvalidArgumentError(absl::StrCat(
            "inner cut at forward position ", c, " is out of order or outside (0, ", nf_, ")"));
      }
      if (c >= rerun_end ||
          std::binary_search(cuts_.cuts.begin(), cuts_.cuts.end(), c)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "inner cut at forward position ", c,
            " is not inside a re-run section (one that ends at a cut, before ", rerun_end,
            ") or falls on a cut"));
      }
      previous = c;
    }
    kept_.assign(g_.tensors().size(), false);
    TensorId previous_kept = kNone;
    for (TensorId t : cuts_.keep) {
      if (t < 0 || t >= static_cast<TensorId>(g_.tensors().size())) {
        return absl::InvalidArgumentError(absl::StrCat("keep of unknown tensor id ", t));
      }
      if (t <= previous_kept) {
        return absl::InvalidArgumentError("tensors to keep must be in increasing id order");
      }
      previous_kept = t;
      const TrainingTensor& tensor = g_.tensor(t);
      const NodeId p = tensor.producer;
      const bool in_rerun_section =
          p != kNone && p < nf_ && p < (cuts_.cuts.empty() ? 0 : cuts_.cuts.back());
      if (!in_rerun_section || tensor.persistent()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", tensor.name,
            "' cannot be kept: only a tensor written by a forward node of a section that is "
            "re-run (not the last) can"));
      }
      kept_[t] = true;
    }
    return absl::OkStatus();
  }

  // ---- Analyse -------------------------------------------------------------------------

  void Analyse() {
    section_of_.assign(g_.nodes().size(), last());
    int32_t s = 0;
    for (NodeId n = 0; n < nf_; ++n) {
      while (s < last() && n >= cuts_.cuts[s]) ++s;
      section_of_[n] = s;
    }
    // Backward-phase nodes: a backward node belongs to its forward node's section; the seed,
    // accumulations and updates to the section of the backward node before them.
    int32_t current = last();
    for (NodeId n = nf_; n < static_cast<NodeId>(g_.nodes().size()); ++n) {
      const TrainingNode& node = g_.node(n);
      if (node.kind == NodeKind::kBackward) current = section_of_[node.forward_node];
      section_of_[n] = current;
    }
    FindChunks();
    FindRecompute();
    BuildItems();
    FindFirstBackwardReads();
  }

  // Returns the section of the forward node that writes `t`, or -1 (a leaf or not forward).
  int32_t ForwardSection(TensorId t) const {
    const NodeId p = g_.tensor(t).producer;
    return (p != kNone && p < nf_) ? section_of_[p] : -1;
  }

  // Whether readers in section `s`'s backward phase read the re-forward's copy of `t`.
  bool ReadsRecomputed(int32_t s, TensorId t) const {
    return s != last() && ForwardSection(t) == s && !kept_[t];
  }

  // The chunks of the backward phase (SectionCuts::inner_cuts): a backward node belongs to the
  // chunk of its forward node (the span between consecutive cuts or inner cuts), the seed,
  // accumulations and updates to that of the backward node before them. Each run of
  // backward-phase nodes in one chunk is one re-forward group (without inner cuts, one per
  // section).
  void FindChunks() {
    std::vector<int32_t> bounds = cuts_.cuts;
    bounds.insert(bounds.end(), cuts_.inner_cuts.begin(), cuts_.inner_cuts.end());
    std::sort(bounds.begin(), bounds.end());
    auto chunk_of = [&](NodeId f) {
      return static_cast<int32_t>(std::upper_bound(bounds.begin(), bounds.end(), f) -
                                  bounds.begin());
    };
    rerun_group_of_.assign(g_.nodes().size(), -1);
    rerun_group_section_.clear();
    int32_t chunk = chunk_of(nf_ - 1), previous = -1;
    for (NodeId n = nf_; n < static_cast<NodeId>(g_.nodes().size()); ++n) {
      const TrainingNode& node = g_.node(n);
      if (node.kind == NodeKind::kBackward) chunk = chunk_of(node.forward_node);
      if (chunk != previous) rerun_group_section_.push_back(section_of_[n]);
      previous = chunk;
      rerun_group_of_[n] = static_cast<int32_t>(rerun_group_section_.size()) - 1;
    }
  }

  // For each re-forward group of a section but the last: the forward nodes its backward
  // nodes need re-run (those whose outputs they read, and what those read in turn), walking
  // the section backward.
  void FindRecompute() {
    const int32_t groups = static_cast<int32_t>(rerun_group_section_.size());
    recompute_.assign(groups, {});
    std::vector<std::vector<TensorId>> read_by(groups);
    for (NodeId n = nf_; n < static_cast<NodeId>(g_.nodes().size()); ++n) {
      for (TensorId t : g_.node(n).inputs) {
        if (ReadsRecomputed(section_of_[n], t)) read_by[rerun_group_of_[n]].push_back(t);
      }
    }
    for (int32_t r = 0; r < groups; ++r) {
      const int32_t s = rerun_group_section_[r];
      if (s == last()) continue;
      absl::flat_hash_set<TensorId> needed(read_by[r].begin(), read_by[r].end());
      const int32_t begin = s == 0 ? 0 : cuts_.cuts[s - 1];
      for (NodeId n = cuts_.cuts[s] - 1; n >= begin; --n) {
        const TrainingNode& node = g_.node(n);
        const bool need = std::any_of(node.outputs.begin(), node.outputs.end(),
                                      [&](TensorId t) { return needed.contains(t); });
        if (!need) continue;
        recompute_[r].push_back(n);
        for (TensorId t : node.inputs) {
          if (ForwardSection(t) == s && !kept_[t]) needed.insert(t);
        }
      }
      std::reverse(recompute_[r].begin(), recompute_[r].end());
    }
  }

  // The item order: forward nodes, then per backward-phase group its original nodes, each
  // re-forward group's re-forward before its first. Groups come in descending section order.
  void BuildItems() {
    for (NodeId n = 0; n < nf_; ++n) items_.push_back({n, false, section_of_[n]});
    group_begin_.assign(num_sections(), -1);
    int32_t current = -1, current_rerun = -1;
    for (NodeId n = nf_; n < static_cast<NodeId>(g_.nodes().size()); ++n) {
      const int32_t s = section_of_[n];
      if (s != current) {
        CHECK(current == -1 || s < current) << "backward nodes out of section order at '"
                                            << g_.node(n).name << "'";
        current = s;
        group_begin_[s] = static_cast<int32_t>(items_.size());
        group_order_.push_back(s);
      }
      if (rerun_group_of_[n] != current_rerun) {
        current_rerun = rerun_group_of_[n];
        for (NodeId f : recompute_[current_rerun]) items_.push_back({f, true, s});
      }
      items_.push_back({n, false, s});
    }
  }

  // The section reading each item's inputs in the backward phase: -1 in the forward phase.
  int32_t BackwardSection(const Item& item) const {
    return (item.recompute || item.node >= nf_) ? item.section : -1;
  }

  // Returns, for tensor `t`, the first item in the backward phase that reads the original
  // (not a re-forward copy), or -1.
  int32_t FirstBackwardRead(TensorId t) const { return first_backward_read_[t]; }

  void FindFirstBackwardReads() {
    first_backward_read_.assign(g_.tensors().size(), -1);
    for (int32_t k = static_cast<int32_t>(items_.size()) - 1; k >= nf_; --k) {
      for (TensorId t : g_.node(items_[k].node).inputs) {
        if (!ReadsRecomputed(items_[k].section, t)) first_backward_read_[t] = k;
      }
    }
  }

  // Returns the item before which the prefetch of `t` is issued: the start of the group
  // visited just before the group of its first backward read; -1 if there is none.
  int32_t PrefetchItem(TensorId t) const {
    const int32_t first = FirstBackwardRead(t);
    if (first < 0) return -1;
    const int32_t s = items_[first].section;
    const auto it = std::find(group_order_.begin(), group_order_.end(), s);
    if (it == group_order_.begin()) return -1;
    return group_begin_[*(it - 1)];
  }

  // Whether `t` is a cached input that can go to host memory under these cuts.
  bool Offloadable(TensorId t) const {
    const TrainingTensor& tensor = g_.tensor(t);
    const bool forward = tensor.producer == kNone ? tensor.role == proto::ROLE_INPUT
                                                  : tensor.producer < nf_;
    return forward && !tensor.persistent() && PrefetchItem(t) >= 0;
  }

 public:
  // Returns every tensor that can be offloaded under the cuts, in id order.
  absl::StatusOr<std::vector<TensorId>> OffloadableTensors() {
    RETURN_IF_ERROR(Validate());
    Analyse();
    std::vector<TensorId> out;
    for (TensorId t = 0; t < static_cast<TensorId>(g_.tensors().size()); ++t) {
      if (Offloadable(t)) out.push_back(t);
    }
    return out;
  }

  // Returns every tensor that can be kept under the cuts (with nothing kept yet): the
  // non-persistent outputs of the nodes each re-run section recomputes, in id order.
  absl::StatusOr<std::vector<TensorId>> KeepableTensors() {
    RETURN_IF_ERROR(Validate());
    Analyse();
    std::vector<TensorId> out;
    for (const std::vector<NodeId>& nodes : recompute_) {
      for (NodeId n : nodes) {
        for (TensorId t : g_.node(n).outputs) {
          if (!g_.tensor(t).persistent()) out.push_back(t);
        }
      }
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }

 private:
  absl::Status CheckOffloads() {
    for (TensorId t : cuts_.offload) {
      if (t < 0 || t >= static_cast<TensorId>(g_.tensors().size())) {
        return absl::InvalidArgumentError(absl::StrCat("offload of unknown tensor id ", t));
      }
      const TrainingTensor& tensor = g_.tensor(t);
      if (!Offloadable(t)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", tensor.name,
            "' cannot be offloaded: only a cached section input read after the first section "
            "visited backward can"));
      }
    }
    return absl::OkStatus();
  }

  // ---- PlaceCopies ---------------------------------------------------------------------

  // Returns where the copies of each tensor of `offload` go, leaving out those whose copy
  // out cannot finish before its prefetch. Item times ignore waits for prefetches, so an
  // offload is awaited no earlier than it really can be.
  absl::flat_hash_map<TensorId, Copies> PlaceCopies(const std::vector<TensorId>& offload) {
    std::vector<double> start(items_.size() + 1, 0);
    for (size_t k = 0; k < items_.size(); ++k) {
      start[k + 1] = start[k] + node_costs_->seconds[items_[k].node];
    }
    std::vector<TensorId> order = offload;  // Copies out are issued as tensors are written.
    auto issued_after = [&](TensorId t) {
      const NodeId p = g_.tensor(t).producer;
      return p == kNone ? -1 : p;
    };
    std::stable_sort(order.begin(), order.end(), [&](TensorId a, TensorId b) {
      return issued_after(a) < issued_after(b);
    });
    absl::flat_hash_map<TensorId, Copies> placed;
    double out_stream = 0;
    for (TensorId t : order) {
      const int32_t after = issued_after(t);
      out_stream = std::max(out_stream, start[after + 1]) + cost_.CopySeconds(g_.tensor(t).bytes);
      int32_t last_forward_use = after;
      for (NodeId c : g_.tensor(t).consumers) {
        if (c < nf_) last_forward_use = std::max(last_forward_use, c);
      }
      int32_t await = last_forward_use + 1;
      while (await < static_cast<int32_t>(items_.size()) && start[await] < out_stream) ++await;
      const int32_t prefetch = PrefetchItem(t);
      if (await < prefetch) placed[t] = {await, prefetch};
    }
    return placed;
  }

  // ---- PlaceHostUpdates ----------------------------------------------------------------

  // Whether item `k` is an optimizer update that runs on the host.
  bool IsHostUpdateItem(int32_t k) const {
    return cuts_.optimizer_state_on_host && !items_[k].recompute &&
           g_.node(items_[k].node).kind == NodeKind::kUpdate;
  }

  // Decides where each update's gradient copy is awaited (and its host update queued): at
  // the first item that starts after the copy, issued when its writer ends, can be done (the
  // gradients' copies queue on one stream), and never before the update's own item. Item
  // times leave out the updates, which no longer run on the compute stream.
  void PlaceHostUpdates() {
    const int32_t n = static_cast<int32_t>(items_.size());
    std::vector<double> start(n + 1, 0);
    absl::flat_hash_map<NodeId, int32_t> item_of;
    for (int32_t k = 0; k < n; ++k) {
      start[k + 1] = start[k] + (IsHostUpdateItem(k) ? 0 : node_costs_->seconds[items_[k].node]);
      if (!items_[k].recompute) item_of[items_[k].node] = k;
    }
    host_at_.assign(n + 1, {});
    double stream = 0;
    for (int32_t k = 0; k < n; ++k) {
      if (!IsHostUpdateItem(k)) continue;
      const TensorId grad = g_.node(items_[k].node).inputs[0];
      const NodeId writer = g_.tensor(grad).producer;
      const double issued = writer == kNone ? 0 : start[item_of.at(writer) + 1];
      stream = std::max(stream, issued) + cost_.CopySeconds(g_.tensor(grad).bytes);
      int32_t at = k;
      while (at < n && start[at] < stream) ++at;
      host_at_[at].push_back(k);
    }
  }

  // ---- PlaceParameterCopies ------------------------------------------------------------

  // Returns the use group of item `k` (SectionCuts::parameters_on_host): section s's forward
  // is group s, except the last section's, which shares the group of its backward phase; the
  // i-th backward-phase group visited is group last() + i (+ 1 if the first is not the last
  // section's).
  int32_t UseGroup(int32_t k) const {
    const Item& item = items_[k];
    if (k < nf_) return item.section;
    const auto it = std::find(group_order_.begin(), group_order_.end(), item.section);
    const int32_t i = static_cast<int32_t>(it - group_order_.begin());
    return last() + i + (group_order_.front() == last() ? 0 : 1);
  }

  // Returns the name of use group `g`: "f<s>" or "b<s>".
  std::string UseGroupName(int32_t g) const {
    if (g <= last()) return absl::StrCat("f", g);
    const int32_t i = g - last() - (group_order_.front() == last() ? 0 : 1);
    return absl::StrCat("b", group_order_[i]);
  }

  // Decides, for each use group, the device copy of each host-updated parameter it reads and
  // the item before which that copy's prefetch is issued: the first item of the group before
  // (item 0 for the first group), or none where the group before read the same parameter
  // (its copy serves both).
  void PlaceParameterCopies() {
    const int32_t n = static_cast<int32_t>(items_.size());
    host_param_.assign(g_.tensors().size(), false);
    for (int32_t k = 0; k < n; ++k) {
      if (IsHostUpdateItem(k)) host_param_[g_.node(items_[k].node).updates[0]] = true;
    }
    item_group_.assign(n, 0);
    std::vector<int32_t> group_first;  // By group: its first item (-1: no items).
    for (int32_t k = 0; k < n; ++k) {
      const int32_t g = UseGroup(k);
      item_group_[k] = g;
      if (static_cast<int32_t>(group_first.size()) <= g) group_first.resize(g + 1, -1);
      if (group_first[g] < 0) group_first[g] = k;
    }
    param_prefetch_at_.assign(n + 1, {});
    copy_index_.assign(group_first.size(), {});
    int32_t copies = 0;
    for (int32_t k = 0; k < n; ++k) {
      if (IsHostUpdateItem(k)) continue;
      const int32_t g = item_group_[k];
      for (TensorId t : g_.node(items_[k].node).inputs) {
        if (!host_param_[t] || copy_index_[g].contains(t)) continue;
        int32_t before = g - 1;
        while (before >= 0 && group_first[before] < 0) --before;
        if (before >= 0) {
          if (auto it = copy_index_[before].find(t); it != copy_index_[before].end()) {
            copy_index_[g][t] = it->second;  // The group before still holds it.
            copy_groups_[it->second] += absl::StrCat("+", UseGroupName(g));
            continue;
          }
        }
        copy_index_[g][t] = copies++;
        copy_groups_.push_back(UseGroupName(g));
        param_prefetch_at_[before >= 0 ? group_first[before] : 0].push_back({t, copies - 1});
      }
    }
  }

  // ---- Emit ----------------------------------------------------------------------------

  SectionedStep Emit(const absl::flat_hash_map<TensorId, Copies>& copies) {
    TrainingGraph out;
    out.tensors_.reserve(g_.tensors().size() * 2);
    out.nodes_.reserve(items_.size() + 2 * cuts_.offload.size());
    origin_.reserve(out.nodes_.capacity());
    out.loss_ = g_.loss_;
    out.inference_ = false;
    out.final_gradient_ = g_.final_gradient_;
    for (const TrainingTensor& t : g_.tensors()) out.AppendTensor(Unlinked(t, ""));
    // Originals a recomputed section reads from before it are cached inputs.
    cached_.assign(g_.tensors().size(), false);
    std::vector<std::vector<TensorId>> offload_at(items_.size() + 1),
        prefetch_at(items_.size() + 1);
    for (const auto& [t, c] : copies) {
      offload_at[c.await_before].push_back(t);
      prefetch_at[c.prefetch_before].push_back(t);
    }
    for (auto* at : {&offload_at, &prefetch_at}) {
      for (auto& v : *at) std::sort(v.begin(), v.end());
    }
    absl::flat_hash_map<TensorId, TensorId> recomputed, prefetched;
    // A copy node of tensor t's, in no section.
    auto append_copy = [&](TensorId t, const char* suffix, const char* op, NodeKind kind,
                           std::vector<TensorId> inputs, std::vector<TensorId> outputs) {
      TrainingNode node;
      node.name = absl::StrCat(g_.tensor(t).name, suffix);
      node.op = op;
      node.kind = kind;
      node.inputs = std::move(inputs);
      node.outputs = std::move(outputs);
      out.AppendNode(std::move(node));
      expanded_section_.push_back(-1);
      origin_.push_back(kNone);
    };
    std::vector<HostUpdate> host_updates;
    std::vector<ParameterCopy> parameter_copies;
    absl::flat_hash_map<int32_t, TensorId> parameter_copy_ids;  // By copy index.
    if (param_prefetch_at_.empty()) param_prefetch_at_.assign(items_.size() + 1, {});
    // The update of item `k` on the host: the gradient's copy awaited (its device bytes die
    // there), then the update queued on the host's threads, reading no device tensor.
    auto emit_host_update = [&](int32_t k) {
      const TrainingNode& update = g_.node(items_[k].node);
      HostUpdate u;
      u.grad = update.inputs[0];
      u.param = update.updates[0];
      u.state.assign(update.updates.begin() + 1, update.updates.end());
      u.grad_copy_after_position = out.tensor(u.grad).producer;
      u.grad_await_position = static_cast<Position>(out.nodes().size());
      append_copy(u.grad, ".to_host", "GradToHost", NodeKind::kOffload, {u.grad}, {});
      TrainingNode node;
      node.name = update.name;
      node.op = absl::StrCat("Host", update.op);
      node.kind = NodeKind::kUpdate;
      node.updates = u.state;
      for (TensorId t : u.state) out.tensors_[t].on_host = true;
      u.update_position = out.AppendNode(std::move(node));
      expanded_section_.push_back(-1);
      origin_.push_back(kNone);
      host_updates.push_back(std::move(u));
    };
    for (int32_t k = 0; k < static_cast<int32_t>(items_.size()); ++k) {
      for (TensorId t : offload_at[k]) {
        append_copy(t, ".offload", "CopyToHost", NodeKind::kOffload, {t}, {});
      }
      for (TensorId t : prefetch_at[k]) {
        TrainingTensor copy = Unlinked(g_.tensor(t), ".prefetched");
        copy.role = proto::ROLE_CACHED_INPUT;
        const TensorId id = out.AppendTensor(std::move(copy));
        append_copy(t, ".prefetch", "CopyToDevice", NodeKind::kPrefetch, {}, {id});
        prefetched[t] = id;
      }
      for (const auto& [param, index] : param_prefetch_at_[k]) {
        TrainingTensor copy = Unlinked(g_.tensor(param), absl::StrCat(".", copy_groups_[index]));
        copy.parameter_copy = true;
        const TensorId id = out.AppendTensor(std::move(copy));
        parameter_copy_ids[index] = id;
        append_copy(param, absl::StrCat(".", copy_groups_[index], ".prefetch").c_str(),
                    "ParamPrefetch", NodeKind::kPrefetch, {}, {id});
        parameter_copies.push_back({param, id, copy_groups_[index]});
      }
      if (cuts_.optimizer_state_on_host) {
        for (int32_t u : host_at_[k]) emit_host_update(u);
        if (IsHostUpdateItem(k)) continue;
      }
      TrainingNode node = EmitItem(items_[k], &recomputed, prefetched, &out);
      if (cuts_.parameters_on_host) {
        for (TensorId& t : node.inputs) {
          if (t < static_cast<TensorId>(host_param_.size()) && host_param_[t]) {
            t = parameter_copy_ids.at(copy_index_[item_group_[k]].at(t));
          }
        }
      }
      out.AppendNode(std::move(node));
      expanded_section_.push_back(BackwardSection(items_[k]));
      origin_.push_back(items_[k].node);
    }
    if (cuts_.optimizer_state_on_host) {
      for (int32_t u : host_at_[items_.size()]) emit_host_update(u);
      // Each parameter comes back from its host master copy before the next step reads it
      // (on the host between uses: each use prefetches it, and the step waits for its update).
      for (HostUpdate& u : host_updates) {
        TrainingNode node;
        if (cuts_.parameters_on_host) {
          node.name = absl::StrCat(g_.tensor(u.param).name, ".host_updated");
          node.op = "AwaitHostUpdate";
          out.tensors_[u.param].on_host = true;
        } else {
          node.name = absl::StrCat(g_.tensor(u.param).name, ".to_device");
          node.op = "ParamToDevice";
        }
        node.kind = NodeKind::kPrefetch;
        node.updates = {u.param};
        u.copy_back_position = out.AppendNode(std::move(node));
        expanded_section_.push_back(-1);
        origin_.push_back(kNone);
      }
    }
    for (TensorId t = 0; t < static_cast<TensorId>(g_.tensors().size()); ++t) {
      if (cached_[t] && out.tensors_[t].role == proto::ROLE_ACTIVATION) {
        out.tensors_[t].role = proto::ROLE_CACHED_INPUT;
      }
    }
    SectionedStep step(std::move(out));
    step.schedule.order.resize(step.graph.nodes().size());
    step.schedule.position_of.resize(step.graph.nodes().size());
    for (NodeId n = 0; n < static_cast<NodeId>(step.graph.nodes().size()); ++n) {
      step.schedule.order[n] = n;
      step.schedule.position_of[n] = n;
    }
    Describe(copies, prefetched, &step);
    step.host_updates = std::move(host_updates);
    for (ParameterCopy& c : parameter_copies) {
      const TrainingTensor& copy = step.graph.tensor(c.copy);
      c.prefetch_position = copy.producer;
      c.first_use_position = copy.consumers.front();
      c.last_use_position = copy.consumers.back();
      step.parameter_copy_bytes += copy.bytes;
    }
    step.parameter_copies = std::move(parameter_copies);
    return step;
  }

  // Returns `t` named with `suffix` appended, with no producer or consumers yet (AppendNode
  // links them in the expanded graph).
  static TrainingTensor Unlinked(const TrainingTensor& t, absl::string_view suffix) {
    TrainingTensor copy = t;
    copy.name = absl::StrCat(t.name, suffix);
    copy.producer = kNone;
    copy.consumers.clear();
    return copy;
  }

  // Returns the node of one item with its inputs pointing at the copies it reads.
  TrainingNode EmitItem(const Item& item, absl::flat_hash_map<TensorId, TensorId>* recomputed,
                        const absl::flat_hash_map<TensorId, TensorId>& prefetched,
                        TrainingGraph* out) {
    TrainingNode node = g_.node(item.node);
    node.after.clear();
    const int32_t s = BackwardSection(item);
    if (s >= 0) {
      for (TensorId& t : node.inputs) {
        if (ReadsRecomputed(s, t)) {
          CHECK(recomputed->contains(t)) << "'" << g_.tensor(t).name << "' not recomputed";
          t = recomputed->at(t);
          continue;
        }
        // A tensor kept by its own section stays an activation; one read by a later
        // section's re-run backward phase is that section's cached input.
        if (ForwardSection(t) >= 0 || g_.tensor(t).role == proto::ROLE_INPUT) {
          cached_[t] = cached_[t] || (s != last() && ForwardSection(t) != s);
        }
        if (auto it = prefetched.find(t); it != prefetched.end()) t = it->second;
      }
    }
    if (!item.recompute) return node;
    // The first re-run of a node is "<node>.recompute", a later one (inner cuts)
    // "<node>.recompute2", ...
    const int32_t run = ++runs_[item.node];
    const std::string suffix = run == 1 ? ".recompute" : absl::StrCat(".recompute", run);
    node.name = absl::StrCat(node.name, suffix);
    node.kind = NodeKind::kRecompute;
    node.updates.clear();  // Running statistics are updated once per step, in the forward.
    for (TensorId& t : node.outputs) {
      const TensorId id = out->AppendTensor(Unlinked(g_.tensor(t), suffix));
      (*recomputed)[t] = id;
      t = id;
    }
    if (node.scratch != kNone) {
      node.scratch = out->AppendTensor(Unlinked(g_.tensor(node.scratch), suffix));
    }
    return node;
  }

  // Fills the sections' descriptions: extents, re-forward, cached inputs and their copies.
  void Describe(const absl::flat_hash_map<TensorId, Copies>& copies,
                const absl::flat_hash_map<TensorId, TensorId>& prefetched, SectionedStep* step) {
    const TrainingGraph& out = step->graph;
    step->sections.resize(num_sections());
    for (int32_t s = 0; s < num_sections(); ++s) {
      SectionInfo& info = step->sections[s];
      info.begin = s == 0 ? 0 : cuts_.cuts[s - 1];
      info.end = s == last() ? nf_ : cuts_.cuts[s];
      for (int32_t c : cuts_.inner_cuts) {
        if (c > info.begin && c < info.end) info.inner_cuts.push_back(c);
      }
    }
    absl::flat_hash_map<TensorId, TensorId> original_of;
    for (const auto& [t, copy] : prefetched) original_of[copy] = t;
    // Tensors from before each section that its backward phase reads.
    std::vector<absl::flat_hash_set<TensorId>> boundary(num_sections());
    for (NodeId n = 0; n < static_cast<NodeId>(out.nodes().size()); ++n) {
      const int32_t s = expanded_section_[n];
      if (s < 0) continue;
      const TrainingNode& node = out.node(n);
      SectionInfo& info = step->sections[s];
      if (info.backward_position < 0) info.backward_position = n;
      if (node.kind == NodeKind::kRecompute) {
        info.recomputed = true;
        ++info.recompute_nodes;
        info.recompute_flops += node_costs_->flops[origin_[n]];
      }
      for (TensorId t : node.inputs) {
        if (auto it = original_of.find(t); it != original_of.end()) t = it->second;
        if (IsCachedInputOf(s, t)) boundary[s].insert(t);
      }
    }
    // A tensor's entry, with where its copies go if it is offloaded.
    auto entry = [&](TensorId t) {
      CachedInput c;
      c.tensor = t;
      c.bytes = g_.tensor(t).bytes;
      if (copies.contains(t)) {
        c.offloaded = true;
        const NodeId p = out.tensor(t).producer;
        c.copy_out_after_position = p == kNone ? -1 : p;
        c.copy_out_await_position = out.tensor(t).consumers.back();
        const TensorId device = prefetched.at(t);
        c.prefetch_position = out.tensor(device).producer;
        c.first_use_position = out.tensor(device).consumers.front();
      }
      return c;
    };
    for (TensorId t : cuts_.keep) step->sections[ForwardSection(t)].kept.push_back(entry(t));
    for (int32_t s = 0; s < num_sections(); ++s) {
      std::vector<TensorId> ids(boundary[s].begin(), boundary[s].end());
      std::sort(ids.begin(), ids.end());
      for (TensorId t : ids) step->sections[s].boundary.push_back(entry(t));
    }
  }

  // Whether original tensor `t`, read in section `s`'s backward phase, is one of its cached
  // inputs: a graph input or label, or written by a forward node of an earlier section.
  bool IsCachedInputOf(int32_t s, TensorId t) const {
    if (t >= static_cast<TensorId>(g_.tensors().size())) return false;  // A re-forward copy.
    const TrainingTensor& tensor = g_.tensor(t);
    if (tensor.persistent() || tensor.role == proto::ROLE_GRADIENT) return false;
    if (tensor.producer == kNone) return true;
    const int32_t from = ForwardSection(t);
    return from >= 0 && from < s;
  }

  // ---- Simulate ------------------------------------------------------------------------

  // Predicts the step: the compute stream runs nodes in order; copies out queue on one copy
  // stream as their tensors are written, prefetches on the other as they are issued; an
  // offload node waits for its copy out, a reader of a prefetched copy for the prefetch.
  void Simulate(SectionedStep& step) {
    const TrainingGraph& out = step.graph;
    double compute = 0, to_host = 0, to_device = 0;
    // When each copy is done: copies out by the original's id, prefetches by the copy's id.
    absl::flat_hash_map<TensorId, double> copied_out, prefetched;
    std::vector<TensorId> offloaded;
    for (const SectionInfo& s : step.sections) {
      for (const CachedInput* c : s.Held()) {
        if (c->offloaded) offloaded.push_back(c->tensor);
      }
    }
    std::sort(offloaded.begin(), offloaded.end());
    offloaded.erase(std::unique(offloaded.begin(), offloaded.end()), offloaded.end());
    auto copy_out = [&](TensorId t) {
      to_host = std::max(to_host, compute) + cost_.CopySeconds(out.tensor(t).bytes);
      copied_out[t] = to_host;
    };
    for (TensorId t : offloaded) {
      if (out.tensor(t).producer == kNone) copy_out(t);
      step.offloaded_bytes += out.tensor(t).bytes;
    }
    // Host updates: gradients copy out on the same stream as they are written, updates run
    // in order on the host's threads once their gradient is there, parameters copy back on
    // the stream to the device once updated; the step ends when the last is back.
    std::vector<TensorId> host_grads;
    absl::flat_hash_map<NodeId, const HostUpdate*> host_update_at;
    absl::flat_hash_map<TensorId, double> updated;  // By parameter: when its host update ends.
    double host = 0;
    for (const HostUpdate& u : step.host_updates) {
      host_grads.push_back(u.grad);
      host_update_at[u.update_position] = &u;
      step.optimizer_copy_bytes +=
          out.tensor(u.grad).bytes + (cuts_.parameters_on_host ? 0 : out.tensor(u.param).bytes);
    }
    std::sort(host_grads.begin(), host_grads.end());
    for (NodeId n = 0; n < static_cast<NodeId>(out.nodes().size()); ++n) {
      const TrainingNode& node = out.node(n);
      if (auto it = host_update_at.find(n); it != host_update_at.end()) {
        const HostUpdate& u = *it->second;
        const double seconds = cost_.HostUpdateSeconds(
            HostUpdateBytes(graph::NumElements(out.tensor(u.param).shape), u.state.size() == 2));
        host = std::max(host, std::max(compute, copied_out.at(u.grad))) + seconds;
        updated[u.param] = host;
        step.host_update_seconds += seconds;
        continue;
      }
      if (node.kind == NodeKind::kPrefetch && node.op == "AwaitHostUpdate") {
        const double done = updated.at(node.updates[0]);
        step.stall_seconds += std::max(compute, done) - compute;
        compute = std::max(compute, done);
        continue;
      }
      if (node.kind == NodeKind::kPrefetch && node.outputs.empty()) {  // ParamToDevice.
        const TensorId p = node.updates[0];
        to_device = std::max(to_device, updated.at(p)) + cost_.CopySeconds(out.tensor(p).bytes);
        step.stall_seconds += std::max(compute, to_device) - compute;
        compute = std::max(compute, to_device);
        continue;
      }
      if (node.kind == NodeKind::kPrefetch) {
        const TensorId t = node.outputs[0];
        to_device = std::max(to_device, compute) + cost_.CopySeconds(out.tensor(t).bytes);
        prefetched[t] = to_device;
        continue;
      }
      double wait = compute;
      const auto& done = node.kind == NodeKind::kOffload ? copied_out : prefetched;
      for (TensorId t : node.inputs) {
        if (auto it = done.find(t); it != done.end()) wait = std::max(wait, it->second);
      }
      step.stall_seconds += wait - compute;
      const double seconds =
          origin_[n] != kNone ? node_costs_->seconds[origin_[n]] : cost_.NodeSeconds(out, n);
      compute = wait + seconds;
      if (node.kind == NodeKind::kRecompute) step.recompute_seconds += seconds;
      for (TensorId t : node.outputs) {
        if (std::binary_search(offloaded.begin(), offloaded.end(), t) ||
            std::binary_search(host_grads.begin(), host_grads.end(), t)) {
          copy_out(t);
        }
      }
    }
    step.step_seconds = compute;
    for (const SectionInfo& s : step.sections) step.recompute_flops += s.recompute_flops;
  }

  const TrainingGraph& g_;
  const SectionCuts& cuts_;
  const CostModel& cost_;
  const NodeCosts* node_costs_;
  NodeCosts own_costs_;  // When none are given.
  int32_t nf_ = 0;
  // Indexed by original node: its section.
  std::vector<int32_t> section_of_;
  // Indexed by original node: its re-forward group (FindChunks), -1 for a forward node.
  std::vector<int32_t> rerun_group_of_;
  // Indexed by re-forward group: its section; and the forward nodes it re-runs, in order.
  std::vector<int32_t> rerun_group_section_;
  std::vector<std::vector<NodeId>> recompute_;
  // By original forward node: how many times Emit() has re-run it so far.
  absl::flat_hash_map<NodeId, int32_t> runs_;
  std::vector<Item> items_;
  // Indexed by section: the item its backward-phase group starts at (-1 if none).
  std::vector<int32_t> group_begin_;
  // Sections with a backward-phase group, in the order visited.
  std::vector<int32_t> group_order_;
  // Indexed by original tensor: read from a recomputed section's backward phase.
  std::vector<bool> cached_;
  // Indexed by original tensor: named in SectionCuts::keep.
  std::vector<bool> kept_;
  // Indexed by expanded node: the section of a backward-phase node, else -1.
  std::vector<int32_t> expanded_section_;
  // Indexed by expanded node: the original node it runs, or kNone for a copy node.
  std::vector<NodeId> origin_;
  // Indexed by original tensor: the first backward-phase item reading it, or -1.
  std::vector<int32_t> first_backward_read_;
  // Indexed by item (and one past the last): the host-update items emitted before it.
  std::vector<std::vector<int32_t>> host_at_;
  // SectionCuts::parameters_on_host. Indexed by original tensor: a parameter updated on the
  // host. Indexed by item: its use group. Indexed by use group: the copy index of each
  // parameter it reads. Indexed by copy index: the groups it serves. Indexed by item (and one
  // past the last): the (parameter, copy index) prefetches issued before it.
  std::vector<bool> host_param_;
  std::vector<int32_t> item_group_;
  std::vector<absl::flat_hash_map<TensorId, int32_t>> copy_index_;
  std::vector<std::string> copy_groups_;
  std::vector<std::vector<std::pair<TensorId, int32_t>>> param_prefetch_at_;
};

NodeCosts ComputeNodeCosts(const TrainingGraph& graph, const CostModel& cost) {
  NodeCosts costs;
  costs.seconds.reserve(graph.nodes().size());
  costs.flops.reserve(graph.nodes().size());
  for (NodeId n = 0; n < static_cast<NodeId>(graph.nodes().size()); ++n) {
    costs.seconds.push_back(cost.NodeSeconds(graph, n));
    costs.flops.push_back(cost.NodeFlops(graph, n));
  }
  return costs;
}

absl::StatusOr<SectionedStep> ExpandSections(const TrainingGraph& graph, const SectionCuts& cuts,
                                             const CostModel& cost, const NodeCosts* node_costs) {
  return SectionExpander(graph, cuts, cost, node_costs).Expand();
}

absl::StatusOr<std::vector<TensorId>> OffloadableTensors(const TrainingGraph& graph,
                                                         const std::vector<int32_t>& cuts,
                                                         const CostModel& cost,
                                                         const std::vector<TensorId>& keep) {
  const SectionCuts section_cuts{cuts, {}, keep};
  return SectionExpander(graph, section_cuts, cost).OffloadableTensors();
}

absl::StatusOr<std::vector<TensorId>> KeepableTensors(const TrainingGraph& graph,
                                                      const std::vector<int32_t>& cuts,
                                                      const CostModel& cost) {
  const SectionCuts section_cuts{cuts, {}, {}};
  return SectionExpander(graph, section_cuts, cost).KeepableTensors();
}

}  // namespace headroom::planner
