#include "planner/section_search.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <thread>

#include "absl/base/attributes.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "graph/shape.h"
#include "graph/summary.h"
#include "planner/schedule.h"
#include "util/status_macros.h"

namespace headroom::planner {

// ---- Layers and equal splits -----------------------------------------------------------

namespace {

std::string LayerKey(const std::string& name) {
  std::string key;
  for (absl::string_view part : absl::StrSplit(name, '.')) {
    if (!key.empty()) key += '.';
    key += std::string(part);
    if (!part.empty() &&
        std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(c); })) {
      return key;
    }
  }
  const auto first = std::find_if(name.begin(), name.end(), [](char c) { return std::isdigit(c); });
  if (first == name.end()) return name;
  return std::string(first,
                     std::find_if(first, name.end(), [](char c) { return !std::isdigit(c); }));
}

}  // namespace

std::vector<int32_t> LayerCuts(const TrainingGraph& graph) {
  const int32_t n = NumForwardNodes(graph);
  std::vector<int32_t> cuts;
  for (int32_t i = 1; i < n; ++i) {
    if (LayerKey(graph.node(i).name) != LayerKey(graph.node(i - 1).name)) cuts.push_back(i);
  }
  return cuts;
}

bool HostPoolInBudget(proto::HostMemory host_memory, bool host_is_device_memory) {
  switch (host_memory) {
    case proto::HOST_MEMORY_SHARED:
      return true;
    case proto::HOST_MEMORY_SEPARATE:
      return false;
    default:
      return host_is_device_memory;
  }
}

std::vector<int32_t> SqrtCuts(int32_t num_forward) {
  const int32_t k = std::max<int32_t>(1, std::lround(std::sqrt(static_cast<double>(num_forward))));
  return EvenCuts(num_forward, k);
}

// ---- The section-model estimate and the dynamic program ---------------------------------

// Estimates, per section [a, b) of forward positions, what the exact plan will hold, so a
// dynamic program over cut positions can search quickly; the candidates it finds are then
// planned exactly. The estimate of a section's backward phase is
//   persistent + held cached inputs + its offloaded inputs and those being prefetched
//   + re-forward state its backward reads + gradients crossing its end + its largest
//   transient (2x an op's outputs, plus the larger kernel scratch of its forward and its
//   backward),
// and its time is the re-forward of the nodes its backward needs plus any wait for a
// prefetch that its backward cannot hide.
class SectionSearch::Estimator {
 public:
  Estimator(const TrainingGraph& graph, const CostModel& cost) : g_(graph), cost_(cost) {
    nf_ = NumForwardNodes(graph);
    Measure();
  }

  int32_t num_forward() const { return nf_; }
  // A floor and the no-sections figure of the estimate: the grid's range.
  double floor_bytes() const { return static_cast<double>(persistent_) + max_transient_; }
  double plain_bytes() const {
    return static_cast<double>(persistent_) + total_saved_ + max_transient_;
  }

  // A dynamic program's answer: where to cut, and at which cuts to offload the tensors that
  // cross them.
  struct Answer {
    std::vector<int32_t> cuts;
    std::vector<int32_t> offload_cuts;
  };

  // A partial answer of the dynamic program: sections up to forward position `position`.
  struct Label {
    double held = 0, own_offloaded = 0, prev_offloaded = 0, time = 0;
    int32_t parent = -1, position = 0;
    bool offload_here = false;
  };

  // The labels of a run of the dynamic program, by position: what Labels and
  // ReferenceLabels (which differ in how they bucket) share.
  class LabelSet {
   public:
    const Label& operator[](int32_t l) const { return labels_[l]; }
    // Returns the bytes label `l` holds.
    double Memory(int32_t l) const {
      const Label& L = labels_[l];
      return L.held + L.own_offloaded + L.prev_offloaded;
    }

    // Keeps, at `position`, the labels no other beats on both memory and time; returns them
    // in increasing memory.
    const std::vector<int32_t>& KeepParetoFront(int32_t position) {
      std::vector<int32_t>& at = at_[position];
      std::sort(at.begin(), at.end(), [&](int32_t x, int32_t y) {
        return Memory(x) != Memory(y) ? Memory(x) < Memory(y) : labels_[x].time < labels_[y].time;
      });
      std::vector<int32_t> front;
      for (int32_t l : at) {
        if (front.empty() || labels_[l].time < labels_[front.back()].time) front.push_back(l);
      }
      at = std::move(front);
      return at;
    }

    // Returns the cuts on the way to label `last`.
    Answer Trace(int32_t last) const {
      Answer answer;
      for (int32_t l = last; labels_[l].parent >= 0; l = labels_[l].parent) {
        answer.cuts.push_back(labels_[l].position);
        if (labels_[l].offload_here) answer.offload_cuts.push_back(labels_[l].position);
      }
      std::reverse(answer.cuts.begin(), answer.cuts.end());
      std::reverse(answer.offload_cuts.begin(), answer.offload_cuts.end());
      return answer;
    }

   protected:
    std::vector<Label> labels_;
    std::vector<std::vector<int32_t>> at_;  // Label indices by position.
  };

  // The dynamic program's labels, at most one per bucket of held bytes at each position
  // (held and own offloaded bytes in kBuckets steps of the budget, and whether anything is
  // offloaded): the one with the least time, then the least memory. Bucketing bounds the work;
  // the estimate is only a guide, since every candidate is planned exactly.
  //
  // Reset() empties it for another run, keeping what it allocated: a run at a large budget
  // holds megabytes, and the pool's 50 runs would otherwise fault them in afresh each time.
  class Labels : public LabelSet {
   public:
    // Empties it for a run over `num_forward` positions at `budget`: the root label only.
    void Reset(int32_t num_forward, double budget) {
      budget_ = budget;
      labels_.assign(1, Label{});
      at_.resize(num_forward + 1);
      for (std::vector<int32_t>& at : at_) at.clear();
      at_[0].push_back(0);
      slot_time_.assign((num_forward + 1) * kKeys, std::numeric_limits<double>::infinity());
      slot_label_.assign((num_forward + 1) * kKeys, -1);
    }

    // Adds the label {held, own_offloaded, prev_offloaded, time, parent, offload_here} at
    // `position`, unless its bucket there holds a better one. (Its fields one by one, not a
    // Label: the dynamic program's inner loop calls it, and a struct passed by value goes
    // through the stack.)
    ABSL_ATTRIBUTE_ALWAYS_INLINE void Insert(int32_t position, double label_held,
                                             double own_offloaded, double prev_offloaded,
                                             double time, int32_t parent, bool offload_here) {
      const double held = label_held + own_offloaded;
      const int32_t key =
          static_cast<int32_t>(std::min<double>(held / budget_ * kBuckets, kBuckets)) * 2 +
          (own_offloaded > 0 ? 1 : 0);
      const int32_t slot = position * kKeys + key;
      // An empty bucket's time is infinite: any label is faster.
      if (slot_time_[slot] < time) return;
      int32_t& index = slot_label_[slot];
      if (index >= 0) {
        // A tie in time goes to the label that holds less (the same sums as Memory()).
        if (slot_time_[slot] == time && Memory(index) <= held + prev_offloaded) return;
        labels_[index] = {label_held, own_offloaded, prev_offloaded, time,
                          parent,     position,      offload_here};
        slot_time_[slot] = time;
        return;
      }
      labels_.push_back(
          {label_held, own_offloaded, prev_offloaded, time, parent, position, offload_here});
      index = static_cast<int32_t>(labels_.size()) - 1;
      slot_time_[slot] = time;
      at_[position].push_back(index);
    }

   private:
    static constexpr int kBuckets = 32;
    static constexpr int kKeys = (kBuckets + 1) * 2;
    double budget_ = 0;
    // By position and key: the bucket's label, and its time beside it, so Insert() rejects
    // a slower label without reading the bucket's (labels_ is large and read at random).
    std::vector<double> slot_time_;
    std::vector<int32_t> slot_label_;
  };

  // Labels as Solve() kept them before it was made faster (the same buckets as Labels):
  // SolveReference()'s, for tests.
  class ReferenceLabels : public LabelSet {
   public:
    ReferenceLabels(int32_t num_forward, double budget)
        : budget_(budget), bucket_of_((num_forward + 1) * kKeys, -1) {
      labels_ = {Label{}};
      at_.resize(num_forward + 1);
      at_[0].push_back(0);
    }

    // Adds `label` at `position`, unless its bucket there holds a better one.
    void Insert(int32_t position, Label label) {
      const double held = label.held + label.own_offloaded;
      const int32_t key =
          static_cast<int32_t>(std::min<double>(held / budget_ * kBuckets, kBuckets)) * 2 +
          (label.own_offloaded > 0 ? 1 : 0);
      label.position = position;
      int32_t& slot = bucket_of_[position * kKeys + key];
      if (slot >= 0) {
        const Label& o = labels_[slot];
        const double o_mem = o.held + o.own_offloaded + o.prev_offloaded;
        const double mem = held + label.prev_offloaded;
        if (o.time < label.time || (o.time == label.time && o_mem <= mem)) return;
        labels_[slot] = label;
        return;
      }
      labels_.push_back(label);
      slot = static_cast<int32_t>(labels_.size()) - 1;
      at_[position].push_back(slot);
    }

   private:
    static constexpr int kBuckets = 32;
    static constexpr int kKeys = (kBuckets + 1) * 2;
    const double budget_;
    std::vector<int32_t> bucket_of_;  // Label index by position, key.
  };

  // Returns how long a backward group of `group_seconds` waits for the prefetch of what
  // `label` offloaded at its cut.
  double PrefetchStall(const Label& label, double group_seconds) const {
    if (label.prev_offloaded <= 0) return 0.0;
    return std::max(0.0,
                    cost_.CopySeconds(static_cast<uint64_t>(label.prev_offloaded)) - group_seconds);
  }

  // Returns the cuts with the least estimated time whose estimated peak is at most
  // `budget`, or nothing; the status of `cancel` (checked at each start position, O(n) work
  // each) once it fails. With `feasible_only`, returns as soon as any cuts are known to fit,
  // with an empty answer: whether there is one, not which.
  // `labels` is scratch space, reused between runs.
  absl::StatusOr<std::optional<Answer>> Solve(double budget, bool offload,
                                              const util::CancellationToken* cancel,
                                              bool feasible_only, Labels& labels) const {
    labels.Reset(nf_, budget);
    int32_t best = -1;
    double best_time = std::numeric_limits<double>::infinity();
    // The front at the start position, copied (Insert() may move the labels) with each
    // label's prefetch time computed once.
    struct FrontLabel {
      double held, own_offloaded, prev_offloaded, time, copy_seconds;
      int32_t index;
    };
    std::vector<FrontLabel> front_labels;
    for (int32_t a = 0; a < nf_; ++a) {
      RETURN_IF_ERROR(util::CheckCancellation(cancel));
      const std::vector<int32_t>& front = labels.KeepParetoFront(a);
      if (front.empty()) continue;
      const double least_held = labels.Memory(front.front());
      front_labels.clear();
      for (int32_t l : front) {
        const Label& L = labels[l];
        const double copy =
            L.prev_offloaded > 0 ? cost_.CopySeconds(static_cast<uint64_t>(L.prev_offloaded)) : 0.0;
        front_labels.push_back({L.held, L.own_offloaded, L.prev_offloaded, L.time, copy, l});
      }
      Sweep sweep(*this, a);
      for (int32_t b = a + 1; b <= nf_; ++b) {
        sweep.Extend(b);
        const double local = persistent_ + sweep.saved + sweep.largest_transient;
        if (local + least_held > budget) break;  // Later ends only hold more.
        const bool last = b == nf_;
        const double crossing_grads = last ? 0 : grads_crossing_[b];
        const double reforward = last ? 0 : sweep.recompute_seconds;
        const double group_seconds = reforward + backward_prefix_[b] - backward_prefix_[a];
        const double base = local + crossing_grads;
        for (const FrontLabel& L : front_labels) {
          if (last && L.own_offloaded > 0) continue;  // Nothing runs backward before it.
          // The sums in the order SolveReference() makes them, so the answers are identical.
          const double mem = base + L.held + L.own_offloaded + L.prev_offloaded;
          if (mem > budget) break;  // The labels come in increasing memory.
          const double stall =
              L.prev_offloaded <= 0 ? 0.0 : std::max(0.0, L.copy_seconds - group_seconds);
          const double time = L.time + reforward + stall;
          if (last) {
            if (feasible_only) return std::optional<Answer>(Answer{});
            if (time < best_time) {
              best_time = time;
              best = L.index;
            }
            continue;
          }
          labels.Insert(b, L.held + sweep.crossing, 0, L.own_offloaded, time, L.index, false);
          if (offload && sweep.crossing_offloadable > 0) {
            labels.Insert(b, L.held + sweep.crossing - sweep.crossing_offloadable,
                          sweep.crossing_offloadable, L.own_offloaded, time, L.index, true);
          }
        }
      }
    }
    if (best < 0) return std::optional<Answer>();
    return std::optional<Answer>(labels.Trace(best));
  }

  // Returns what Solve() returns, computed as it was before it was made faster (labels
  // read at random, the prefetch's copy time asked at every step): the reference the tests
  // hold the fast path to (SearchOptions::reference_search).
  absl::StatusOr<std::optional<Answer>> SolveReference(
      double budget, bool offload, const util::CancellationToken* cancel) const {
    ReferenceLabels labels(nf_, budget);
    int32_t best = -1;
    double best_time = std::numeric_limits<double>::infinity();
    for (int32_t a = 0; a < nf_; ++a) {
      RETURN_IF_ERROR(util::CheckCancellation(cancel));
      const std::vector<int32_t>& front = labels.KeepParetoFront(a);
      if (front.empty()) continue;
      const double least_held = labels.Memory(front.front());
      Sweep sweep(*this, a);
      for (int32_t b = a + 1; b <= nf_; ++b) {
        sweep.Extend(b);
        const double local = persistent_ + sweep.saved + sweep.largest_transient;
        if (local + least_held > budget) break;  // Later ends only hold more.
        const bool last = b == nf_;
        const double crossing_grads = last ? 0 : grads_crossing_[b];
        const double reforward = last ? 0 : sweep.recompute_seconds;
        const double group_seconds = reforward + backward_prefix_[b] - backward_prefix_[a];
        for (int32_t l : front) {
          const Label L = labels[l];                  // A copy: Insert() may move the labels.
          if (last && L.own_offloaded > 0) continue;  // Nothing runs backward before it.
          const double mem = local + crossing_grads + L.held + L.own_offloaded + L.prev_offloaded;
          if (mem > budget) break;  // The labels come in increasing memory.
          const double time = L.time + reforward + PrefetchStall(L, group_seconds);
          if (last) {
            if (time < best_time) {
              best_time = time;
              best = l;
            }
            continue;
          }
          labels.Insert(b, {L.held + sweep.crossing, 0, L.own_offloaded, time, l, 0, false});
          if (offload && sweep.crossing_offloadable > 0) {
            labels.Insert(b, {L.held + sweep.crossing - sweep.crossing_offloadable,
                              sweep.crossing_offloadable, L.own_offloaded, time, l, 0, true});
          }
        }
      }
    }
    if (best < 0) return std::optional<Answer>();
    return std::optional<Answer>(labels.Trace(best));
  }

  // Returns the tensors that cross cut `at` from the section [from, at): offload candidates.
  std::vector<TensorId> CrossingTensors(int32_t from, int32_t at, int32_t last_section) const {
    std::vector<TensorId> out;
    for (const Item& t : tensors_) {
      if (t.produced >= from && t.produced < at && t.last_forward_use >= at &&
          t.last_forward_use < last_section && t.offloadable) {
        out.push_back(t.id);
      }
    }
    return out;
  }

 private:
  // A forward tensor the estimate follows.
  struct Item {
    TensorId id = kNone;
    double bytes = 0;
    int32_t produced = 0;          // Forward position of its writer (graph inputs: 0).
    int32_t last_forward_use = 0;  // Last forward position that reads it (or `produced`).
    int32_t first_backward_read = std::numeric_limits<int32_t>::max();
    bool offloadable = false;
  };

  // Incremental sums over [a, b) as b grows, in O(1) amortised per step.
  struct Sweep {
    Sweep(const Estimator& e, int32_t a) : e(e), a(a) {}
    void Extend(int32_t b) {
      const int32_t p = b - 1;  // The position entering the section.
      largest_transient = std::max(largest_transient, e.transient_bytes_[p]);
      for (int32_t t : e.produced_at_[p]) {
        crossing += e.tensors_[t].bytes;
        if (e.tensors_[t].offloadable) crossing_offloadable += e.tensors_[t].bytes;
      }
      for (int32_t t : e.last_use_at_[p]) {
        if (e.tensors_[t].produced < a) continue;
        crossing -= e.tensors_[t].bytes;
        if (e.tensors_[t].offloadable) crossing_offloadable -= e.tensors_[t].bytes;
      }
      for (int32_t t : e.backward_read_at_[p]) {
        if (e.tensors_[t].produced >= a) saved += e.tensors_[t].bytes;
      }
      // A node is re-run once something inside the section reads what it writes.
      if (e.first_need_[p] <= p) recompute_seconds += e.forward_seconds_[p];
      for (int32_t n : e.needed_at_[p]) {
        if (n >= a && n < p) recompute_seconds += e.forward_seconds_[n];
      }
    }
    const Estimator& e;
    const int32_t a;
    double saved = 0, crossing = 0, crossing_offloadable = 0, largest_transient = 0;
    double recompute_seconds = 0;
  };

  void Measure() {
    const int32_t n_nodes = static_cast<int32_t>(g_.nodes().size());
    forward_seconds_.resize(nf_);
    // Transient bytes by forward position: twice the node's outputs (its backward holds
    // their gradient and its input's), plus the larger scratch of the node and its backward.
    std::vector<double> scratch(nf_, 0);
    for (NodeId n = 0; n < n_nodes; ++n) {
      const TrainingNode& node = g_.node(n);
      if (node.scratch == kNone || node.forward_node == kNone) continue;
      const int32_t position = n < nf_ ? n : node.forward_node;
      scratch[position] = std::max<double>(scratch[position], g_.tensor(node.scratch).bytes);
    }
    transient_bytes_.assign(nf_, 0);
    for (int32_t i = 0; i < nf_; ++i) {
      forward_seconds_[i] = cost_.NodeSeconds(g_, i);
      double outputs = 0;
      for (TensorId t : g_.node(i).outputs) outputs += g_.tensor(t).bytes;
      transient_bytes_[i] = 2.0 * outputs + scratch[i];
      max_transient_ = std::max(max_transient_, transient_bytes_[i]);
    }
    // Backward-phase time by forward position.
    std::vector<double> backward(nf_, 0);
    int32_t position = nf_ - 1;
    for (NodeId n = nf_; n < n_nodes; ++n) {
      if (g_.node(n).kind == NodeKind::kBackward) position = g_.node(n).forward_node;
      backward[position] += cost_.NodeSeconds(g_, n);
    }
    backward_prefix_.assign(nf_ + 1, 0);
    for (int32_t i = 0; i < nf_; ++i) backward_prefix_[i + 1] = backward_prefix_[i] + backward[i];
    // Persistent bytes and the largest parameter gradient.
    double largest_gradient = 0;
    for (const TrainingTensor& t : g_.tensors()) {
      if (t.persistent()) persistent_ += t.bytes;
      if (t.role == proto::ROLE_GRADIENT)
        largest_gradient = std::max<double>(largest_gradient, t.bytes);
    }
    persistent_ += largest_gradient;
    FollowTensors();
  }

  void FollowTensors() {
    produced_at_.assign(nf_, {});
    last_use_at_.assign(nf_, {});
    backward_read_at_.assign(nf_, {});
    needed_at_.assign(nf_, {});
    first_need_.assign(nf_, std::numeric_limits<int32_t>::max());
    grads_crossing_.assign(nf_ + 1, 0);
    std::vector<double> grad_delta(nf_ + 2, 0);
    for (TensorId id = 0; id < static_cast<TensorId>(g_.tensors().size()); ++id) {
      const TrainingTensor& t = g_.tensor(id);
      const bool leaf =
          t.producer == kNone && (t.role == proto::ROLE_INPUT || t.role == proto::ROLE_LABEL);
      if (t.persistent() || !(leaf || (t.producer != kNone && t.producer < nf_))) continue;
      Item item;
      item.id = id;
      item.bytes = static_cast<double>(t.bytes);
      item.produced = leaf ? 0 : t.producer;
      item.last_forward_use = item.produced;
      int32_t first_forward_use = std::numeric_limits<int32_t>::max();
      for (NodeId c : t.consumers) {
        if (c < nf_) {
          item.last_forward_use = std::max(item.last_forward_use, c);
          first_forward_use = std::min(first_forward_use, c);
        } else if (g_.node(c).forward_node != kNone) {
          item.first_backward_read = std::min(item.first_backward_read, g_.node(c).forward_node);
        }
      }
      item.offloadable = t.role != proto::ROLE_LABEL;
      const int32_t index = static_cast<int32_t>(tensors_.size());
      produced_at_[item.produced].push_back(index);
      last_use_at_[item.last_forward_use].push_back(index);
      if (item.first_backward_read < nf_) {
        backward_read_at_[std::max(item.first_backward_read, item.produced)].push_back(index);
        total_saved_ += item.bytes;
      }
      if (!leaf) {
        const int32_t need = std::min(item.first_backward_read, first_forward_use);
        first_need_[t.producer] = std::min(first_need_[t.producer], need);
      }
      if (id < g_.num_forward_tensors() && g_.final_gradient_of(id) != kNone &&
          item.last_forward_use > item.produced) {
        grad_delta[item.produced + 1] += item.bytes;
        grad_delta[item.last_forward_use + 1] -= item.bytes;
      }
      tensors_.push_back(item);
    }
    for (int32_t i = 0; i < nf_; ++i) {
      if (first_need_[i] > i && first_need_[i] < nf_) needed_at_[first_need_[i]].push_back(i);
    }
    double running = 0;
    for (int32_t b = 0; b <= nf_; ++b) {
      running += grad_delta[b];
      grads_crossing_[b] = running;
    }
  }

  const TrainingGraph& g_;
  const CostModel& cost_;
  int32_t nf_ = 0;
  double persistent_ = 0;
  double max_transient_ = 0;
  double total_saved_ = 0;
  std::vector<double> forward_seconds_;
  std::vector<double> transient_bytes_;
  std::vector<double> backward_prefix_;
  std::vector<double> grads_crossing_;
  std::vector<Item> tensors_;
  // By forward position: items written there, last read forward there, first read by a
  // backward node there; nodes first needed there; the first position needing node i.
  std::vector<std::vector<int32_t>> produced_at_, last_use_at_, backward_read_at_, needed_at_;
  std::vector<int32_t> first_need_;
};

// ---- The pool ---------------------------------------------------------------------------

struct SectionSearch::Candidate {
  std::string strategy;
  SectionCuts cuts;
  // What the search asks of the expanded step before planning it exactly, taken when it
  // is added (Summarize).
  double step_seconds = 0;
  int64_t step_nodes = 0;
  uint64_t lower_bound_bytes = 0;
  uint64_t host_pool_bytes = 0;
  // The expanded step and its exact memory plan, both held only once it is planned
  // exactly (Evaluate expands it again from `cuts`): an expanded step is the bulk of a
  // candidate, and most candidates are never planned.
  std::shared_ptr<const SectionedStep> step;
  std::shared_ptr<const MemoryPlan> memory;
  // Found by DescendNested() (with inner cuts, or on the way between such plans): chosen
  // only where nothing else fits (or where it is faster than what does).
  bool nested = false;
};

SectionSearch::SectionSearch(const TrainingGraph& graph, const CostModel& cost,
                             const SearchOptions& options)
    : graph_(graph),
      cost_(cost),
      options_(options),
      node_costs_(ComputeNodeCosts(graph, cost)),
      work_limit_(options.refine_max_work) {}

absl::StatusOr<std::unique_ptr<SectionSearch>> SectionSearch::Create(const TrainingGraph& graph,
                                                                     const CostModel& cost,
                                                                     const SearchOptions& options) {
  if (graph.inference()) {
    return absl::InvalidArgumentError("a budget applies to training; this graph is inference only");
  }
  std::unique_ptr<SectionSearch> search(new SectionSearch(graph, cost, options));
  RETURN_IF_ERROR(search->BuildPool());
  return search;
}

absl::Status SectionSearch::BuildPool() {
  const int32_t nf = NumForwardNodes(graph_);
  // Each candidate is expanded and its lower bound taken at once (a second or more on a
  // 1000-layer graph), so a deadline is checked between them.
  const util::CancellationToken* cancel = options_.cancel;
  AddCandidate("no_sections", {}, {});
  RETURN_IF_ERROR(util::CheckCancellation(cancel));
  AddCandidate("sqrt_n", SqrtCuts(nf), {});
  RETURN_IF_ERROR(util::CheckCancellation(cancel));
  AddCandidate("every_layer", LayerCuts(graph_), {});
  RETURN_IF_ERROR(util::CheckCancellation(cancel));
  estimator_ = std::make_unique<Estimator>(graph_, cost_);
  const Estimator& estimator = *estimator_;
  const double lo = estimator.floor_bytes(), hi = estimator.plain_bytes() * 1.05;
  // For recompute alone, and with offload where allowed: find the smallest estimated budget
  // the program can meet (bisection), then run it on a geometric grid from there up to the
  // plain step's estimate.
  const int points = std::max(2, options_.grid_points);
  // One pass: the answers on the grid, or nothing when even the plain step's estimate is out
  // of reach. The bisection asks only whether the program meets a budget, so it stops at
  // the first cuts that do (unless the reference is asked for). `labels` is its scratch.
  using Answers = std::optional<std::vector<Estimator::Answer>>;
  auto pass = [&estimator, cancel, points, lo, hi, this](
                  bool offload, Estimator::Labels& labels) -> absl::StatusOr<Answers> {
    auto solve = [&](double budget,
                     bool feasible_only) -> absl::StatusOr<std::optional<Estimator::Answer>> {
      if (options_.reference_search) return estimator.SolveReference(budget, offload, cancel);
      return estimator.Solve(budget, offload, cancel, feasible_only, labels);
    };
    double low = lo, high = hi;
    ASSIGN_OR_RETURN(std::optional<Estimator::Answer> at_high, solve(high, true));
    if (!at_high) return Answers();
    for (int i = 0; i < 8; ++i) {
      const double mid = std::sqrt(low * high);
      ASSIGN_OR_RETURN(std::optional<Estimator::Answer> at_mid, solve(mid, true));
      (at_mid ? high : low) = mid;
    }
    std::vector<Estimator::Answer> answers;
    for (int i = 0; i < points; ++i) {
      const double budget = high * std::pow(hi / high, static_cast<double>(i) / (points - 1));
      ASSIGN_OR_RETURN(std::optional<Estimator::Answer> answer, solve(budget, false));
      if (answer) answers.push_back(*std::move(answer));
    }
    return Answers(std::move(answers));
  };
  // The two passes are independent: with search_threads > 1 the one with offload runs on a
  // second thread. Their answers join the pool in the same order either way.
  absl::StatusOr<Answers> recompute, offload = Answers();
  {
    Estimator::Labels labels, offload_labels;
    std::thread second;
    if (options_.allow_offload && options_.search_threads > 1) {
      second = std::thread([&] { offload = pass(true, offload_labels); });
    }
    recompute = pass(false, labels);
    if (second.joinable()) {
      second.join();
    } else if (options_.allow_offload) {
      offload = pass(true, labels);
    }
  }
  RETURN_IF_ERROR(recompute.status());
  RETURN_IF_ERROR(offload.status());
  for (const absl::StatusOr<Answers>* answers : {&recompute, &offload}) {
    if (!**answers) continue;
    for (const Estimator::Answer& answer : ***answers) {
      RETURN_IF_ERROR(util::CheckCancellation(cancel));
      AddCandidate("search", answer.cuts, answer.offload_cuts);
    }
    if (answers ==
        &offload) {  // The baselines' cuts with every cached input that can go offloaded.
      AddCandidate("search", SqrtCuts(nf), SqrtCuts(nf));
      AddCandidate("search", LayerCuts(graph_), LayerCuts(graph_));
    }
  }
  // On small graphs, each candidate's neighbours too (one cut removed, or moved by one
  // position), planned exactly like the rest: the estimate is only a guide.
  if (nf <= options_.refine_max_forward_nodes) {
    const size_t found = pool_.size();
    for (size_t i = 0; i < found; ++i) {
      RETURN_IF_ERROR(util::CheckCancellation(cancel));
      const std::vector<int32_t> cuts = pool_[i].cuts.cuts;
      for (size_t k = 0; k < cuts.size(); ++k) {
        std::vector<int32_t> removed = cuts;
        removed.erase(removed.begin() + k);
        AddCandidate("search", removed, {});
        for (int32_t delta : {-1, 1}) {
          std::vector<int32_t> moved = cuts;
          moved[k] += delta;
          const bool ordered = moved[k] > (k == 0 ? 0 : moved[k - 1]) &&
                               moved[k] < (k + 1 == moved.size() ? nf : moved[k + 1]);
          if (ordered) AddCandidate("search", moved, {});
        }
      }
    }
  }
  RETURN_IF_ERROR(util::CheckCancellation(cancel));
  if (pool_.empty()) return absl::InternalError("no candidate plan could be expanded");
  SortByTime();
  return absl::OkStatus();
}

void SectionSearch::SortByTime() {
  by_time_.clear();
  for (int i = 0; i < static_cast<int>(pool_.size()); ++i) by_time_.push_back(i);
  std::stable_sort(by_time_.begin(), by_time_.end(),
                   [&](int a, int b) { return pool_[a].step_seconds < pool_[b].step_seconds; });
}

// How far Descend() moves one cut in one round.
constexpr int32_t kDescentReach = 3;

absl::Status SectionSearch::Descend() {
  if (descended_) return absl::OkStatus();
  const int32_t nf = NumForwardNodes(graph_);
  int best = 0;
  for (int i = 1; i < static_cast<int>(pool_.size()); ++i) {
    if (pool_[i].cuts.offload.empty() && LowerBound(i) < LowerBound(best)) best = i;
  }
  std::vector<int32_t> cuts = pool_[best].cuts.cuts;
  uint64_t bound = LowerBound(best);
  // Returns the moves of `cuts`, each a valid increasing set.
  auto moves = [&](const std::vector<int32_t>& from) {
    std::vector<std::vector<int32_t>> out;
    for (size_t k = 0; k < from.size(); ++k) {
      std::vector<int32_t> removed = from;
      removed.erase(removed.begin() + k);
      out.push_back(removed);
      for (int32_t delta = -kDescentReach; delta <= kDescentReach; ++delta) {
        std::vector<int32_t> moved = from;
        moved[k] += delta;
        const bool ordered = delta != 0 && moved[k] > (k == 0 ? 0 : moved[k - 1]) &&
                             moved[k] < (k + 1 == moved.size() ? nf : moved[k + 1]);
        if (ordered) out.push_back(moved);
      }
    }
    for (int32_t p = 1; p < nf; ++p) {
      if (std::binary_search(from.begin(), from.end(), p)) continue;
      std::vector<int32_t> added = from;
      added.insert(std::upper_bound(added.begin(), added.end(), p), p);
      out.push_back(added);
    }
    return out;
  };
  for (bool improved = true; improved;) {
    improved = false;
    for (const std::vector<int32_t>& m : moves(cuts)) {
      RETURN_IF_ERROR(util::CheckCancellation(options_.cancel));
      SectionCuts moved{m, {}};
      moved.optimizer_state_on_host = options_.optimizer_state_on_host;
      moved.parameters_on_host = options_.parameters_on_host;
      absl::StatusOr<SectionedStep> step = ExpandSections(graph_, moved, cost_, &node_costs_);
      if (!step.ok()) continue;
      const uint64_t b = ScheduledLowerBound(step->graph, step->schedule, options_.alignment_bytes);
      if (b >= bound) continue;
      bound = b;
      cuts = m;
      improved = true;
      Candidate c;
      c.strategy = "search";
      c.cuts = moved;
      Summarize(*step, &c);
      pool_.push_back(std::move(c));
      break;
    }
  }
  if (options_.nested) {
    // From where the descent ended; on small graphs also from one re-run section of all but
    // the last one or two nodes and from the sqrt(n) split (local optima differ by start).
    int64_t work = 0;
    RETURN_IF_ERROR(DescendNested(cuts, bound, &work));
    if (nf <= options_.refine_max_forward_nodes) {
      for (const std::vector<int32_t>& start :
           {std::vector<int32_t>{nf - 1}, std::vector<int32_t>{nf - 2}, SqrtCuts(nf)}) {
        if (start.empty() || start.front() <= 0 || start == cuts) continue;
        SectionCuts from{start, {}};
        from.optimizer_state_on_host = options_.optimizer_state_on_host;
        from.parameters_on_host = options_.parameters_on_host;
        absl::StatusOr<SectionedStep> step = ExpandSections(graph_, from, cost_, &node_costs_);
        if (!step.ok()) continue;
        RETURN_IF_ERROR(DescendNested(
            start, ScheduledLowerBound(step->graph, step->schedule, options_.alignment_bytes),
            &work));
      }
    }
  }
  descended_ = true;
  SortByTime();
  return absl::OkStatus();
}

bool SectionSearch::Nested(int index) const { return pool_[index].nested; }

namespace {

// Cuts and inner cuts, as DescendNested() walks them.
struct NestedCuts {
  std::vector<int32_t> cuts;
  std::vector<int32_t> inner;
};

// Returns `m` with its cuts and inner cuts sorted and unique, and every inner cut that falls
// on a cut or outside the re-run sections dropped.
NestedCuts Normalised(NestedCuts m) {
  std::sort(m.cuts.begin(), m.cuts.end());
  m.cuts.erase(std::unique(m.cuts.begin(), m.cuts.end()), m.cuts.end());
  std::sort(m.inner.begin(), m.inner.end());
  m.inner.erase(std::unique(m.inner.begin(), m.inner.end()), m.inner.end());
  const int32_t rerun_end = m.cuts.empty() ? 0 : m.cuts.back();
  m.inner.erase(std::remove_if(m.inner.begin(), m.inner.end(),
                               [&](int32_t c) {
                                 return c >= rerun_end ||
                                        std::binary_search(m.cuts.begin(), m.cuts.end(), c);
                               }),
                m.inner.end());
  return m;
}

// Returns the moves of DescendNested() from `from` over `nf` forward positions.
std::vector<NestedCuts> NestedMoves(const NestedCuts& from, int32_t nf) {
  std::vector<NestedCuts> out;
  auto valid = [&](int32_t p) { return p > 0 && p < nf; };
  for (size_t k = 0; k < from.inner.size(); ++k) {
    NestedCuts dropped = from;
    dropped.inner.erase(dropped.inner.begin() + k);
    out.push_back(dropped);
    for (int32_t delta : {-2, -1, 1, 2}) {
      NestedCuts moved = from;
      moved.inner[k] += delta;
      if (valid(moved.inner[k])) out.push_back(Normalised(moved));
    }
    NestedCuts to_cut = dropped;
    to_cut.cuts.push_back(from.inner[k]);
    out.push_back(Normalised(to_cut));
  }
  for (size_t k = 0; k < from.cuts.size(); ++k) {
    NestedCuts dropped = from;
    dropped.cuts.erase(dropped.cuts.begin() + k);
    out.push_back(Normalised(dropped));
    NestedCuts to_inner = dropped;
    to_inner.inner.push_back(from.cuts[k]);
    out.push_back(Normalised(to_inner));
    for (int32_t delta : {-1, 1}) {
      NestedCuts moved = from;
      moved.cuts[k] += delta;
      if (valid(moved.cuts[k])) out.push_back(Normalised(moved));
    }
  }
  for (int32_t p = 1; p < nf; ++p) {
    if (std::binary_search(from.cuts.begin(), from.cuts.end(), p) ||
        std::binary_search(from.inner.begin(), from.inner.end(), p)) {
      continue;
    }
    NestedCuts inner = from;
    inner.inner.push_back(p);
    inner = Normalised(inner);
    if (inner.inner.size() > from.inner.size()) out.push_back(inner);
    NestedCuts cut = from;
    cut.cuts.push_back(p);
    out.push_back(Normalised(cut));
  }
  // Moves that normalise to where they started change nothing.
  out.erase(std::remove_if(
                out.begin(), out.end(),
                [&](const NestedCuts& m) { return m.cuts == from.cuts && m.inner == from.inner; }),
            out.end());
  return out;
}

}  // namespace

absl::Status SectionSearch::DescendNested(std::vector<int32_t> cuts, uint64_t bound,
                                          int64_t* work_done) {
  const int32_t nf = NumForwardNodes(graph_);
  const bool best_move = nf <= options_.refine_max_forward_nodes;
  int64_t& work = *work_done;
  NestedCuts current{std::move(cuts), {}};
  for (bool improved = true; improved && work < options_.nested_max_work;) {
    improved = false;
    std::optional<SectionCuts> best;
    std::optional<SectionedStep> best_step;
    for (const NestedCuts& m : NestedMoves(current, nf)) {
      if (work >= options_.nested_max_work) break;
      RETURN_IF_ERROR(util::CheckCancellation(options_.cancel));
      SectionCuts moved{m.cuts, {}};
      moved.inner_cuts = m.inner;
      moved.optimizer_state_on_host = options_.optimizer_state_on_host;
      moved.parameters_on_host = options_.parameters_on_host;
      absl::StatusOr<SectionedStep> step = ExpandSections(graph_, moved, cost_, &node_costs_);
      if (!step.ok()) continue;
      work += static_cast<int64_t>(step->graph.nodes().size());
      const uint64_t b = ScheduledLowerBound(step->graph, step->schedule, options_.alignment_bytes);
      if (b >= bound) continue;
      bound = b;
      best = moved;
      best_step = *std::move(step);
      if (!best_move) break;
    }
    if (!best) break;
    improved = true;
    current = {best->cuts, best->inner_cuts};
    Candidate c;
    c.strategy = "nested";
    c.cuts = *std::move(best);
    Summarize(*best_step, &c);  // The step itself is expanded again if it is planned.
    c.nested = true;
    pool_.push_back(std::move(c));
  }
  return absl::OkStatus();
}

void SectionSearch::AddCandidate(const std::string& strategy, const std::vector<int32_t>& cuts,
                                 const std::vector<int32_t>& offload_cuts) {
  SectionCuts section_cuts;
  section_cuts.cuts = cuts;
  section_cuts.optimizer_state_on_host = options_.optimizer_state_on_host;
  section_cuts.parameters_on_host = options_.parameters_on_host;
  if (!offload_cuts.empty()) {
    absl::StatusOr<std::vector<TensorId>> allowed = OffloadableTensors(graph_, cuts, cost_);
    if (!allowed.ok()) return;
    for (int32_t c : offload_cuts) {
      const auto it = std::find(cuts.begin(), cuts.end(), c);
      const int32_t from = it == cuts.begin() ? 0 : *(it - 1);
      for (TensorId t : estimator_->CrossingTensors(from, c, cuts.back())) {
        if (std::binary_search(allowed->begin(), allowed->end(), t)) {
          section_cuts.offload.push_back(t);
        }
      }
    }
    std::sort(section_cuts.offload.begin(), section_cuts.offload.end());
    section_cuts.offload.erase(
        std::unique(section_cuts.offload.begin(), section_cuts.offload.end()),
        section_cuts.offload.end());
  }
  for (const Candidate& c : pool_) {
    if (c.cuts.cuts == section_cuts.cuts && c.cuts.offload == section_cuts.offload &&
        c.cuts.keep.empty() && c.cuts.inner_cuts.empty()) {
      return;
    }
  }
  absl::StatusOr<SectionedStep> step = ExpandSections(graph_, section_cuts, cost_, &node_costs_);
  if (!step.ok()) return;  // An offload the expansion refuses: the candidate is not valid.
  Candidate c;
  c.strategy = strategy;
  c.cuts = section_cuts;
  Summarize(*step, &c);
  pool_.push_back(std::move(c));
}

void SectionSearch::Summarize(const SectionedStep& step, Candidate* c) const {
  c->step_seconds = step.step_seconds;
  c->step_nodes = static_cast<int64_t>(step.graph.nodes().size());
  c->lower_bound_bytes = ScheduledLowerBound(step.graph, step.schedule, options_.alignment_bytes);
  c->host_pool_bytes = HostPoolBytes(step, options_.alignment_bytes);
}

SectionSearch::~SectionSearch() = default;

int SectionSearch::num_candidates() const { return static_cast<int>(pool_.size()); }

absl::StatusOr<SectionPlan> SectionSearch::Evaluate(int index) {
  Candidate& c = pool_[index];
  if (c.memory == nullptr) {
    RETURN_IF_ERROR(util::CheckCancellation(options_.cancel));
    // The same cuts expand into the same step (it expanded when it was added).
    ASSIGN_OR_RETURN(SectionedStep step, ExpandSections(graph_, c.cuts, cost_, &node_costs_));
    ASSIGN_OR_RETURN(MemoryPlan memory,
                     PlanScheduledGraph(step.graph, step.schedule, options_.alignment_bytes,
                                        DefaultStrategies()));
    c.step = std::make_shared<const SectionedStep>(std::move(step));
    c.memory = std::make_shared<const MemoryPlan>(std::move(memory));
  }
  SectionPlan plan;
  plan.strategy = c.strategy;
  plan.cuts = c.cuts;
  plan.step = c.step;
  plan.memory = c.memory;
  plan.peak_bytes = c.memory->arena_bytes;
  plan.host_pool_bytes = c.host_pool_bytes;
  plan.step_seconds = c.step_seconds;
  plan.overhead_ratio = c.step_seconds / pool_[0].step_seconds;
  return plan;
}

uint64_t SectionSearch::LowerBound(int index) const { return pool_[index].lower_bound_bytes; }

absl::StatusOr<SectionPlan> SectionSearch::Plan(uint64_t budget_bytes) {
  // Passes: the pool; after the descent; then plans with inner cuts, only where nothing
  // without them fits (they are not refined).
  for (int pass = 0; pass < 3; ++pass) {
    if (pass == 1) {
      if (descended_) continue;
      RETURN_IF_ERROR(Descend());
    }
    const bool nested = pass == 2;
    for (int index : by_time_) {
      if (Nested(index) != nested || BudgetLowerBound(index) > budget_bytes) continue;
      ASSIGN_OR_RETURN(SectionPlan plan, Evaluate(index));
      if (BudgetBytes(plan) > budget_bytes) continue;
      if (nested) return plan;
      if (options_.refine) {
        ASSIGN_OR_RETURN(const int refined, Refine(index, budget_bytes));
        ASSIGN_OR_RETURN(plan, Evaluate(refined));
      }
      return FasterNested(std::move(plan), budget_bytes);
    }
  }
  return Infeasible(budget_bytes);
}

absl::StatusOr<SectionPlan> SectionSearch::FasterNested(SectionPlan plan, uint64_t budget_bytes) {
  for (int index : by_time_) {
    if (pool_[index].step_seconds >= plan.step_seconds) break;
    if (!Nested(index) || BudgetLowerBound(index) > budget_bytes) continue;
    ASSIGN_OR_RETURN(SectionPlan nested, Evaluate(index));
    if (BudgetBytes(nested) <= budget_bytes) return nested;
  }
  return plan;
}

// ---- Refinement -------------------------------------------------------------------------

namespace {

std::string CutsKey(const SectionCuts& c) {
  return absl::StrCat(absl::StrJoin(c.cuts, ","), "|", absl::StrJoin(c.keep, ","), "|",
                      absl::StrJoin(c.offload, ","), "|", absl::StrJoin(c.inner_cuts, ","));
}

// Returns `set` (increasing) with `t` added if it was absent, removed if present.
std::vector<TensorId> Toggled(std::vector<TensorId> set, TensorId t) {
  const auto it = std::lower_bound(set.begin(), set.end(), t);
  if (it != set.end() && *it == t) {
    set.erase(it);
  } else {
    set.insert(it, t);
  }
  return set;
}

bool Contains(const std::vector<TensorId>& set, TensorId t) {
  return std::binary_search(set.begin(), set.end(), t);
}

// Graphs with more forward nodes than this try adding a cut only where a layer begins.
constexpr int32_t kAddCutEverywhereMaxNodes = 256;
// Moves chained onto one another in a round, most time saved per byte first.
constexpr size_t kChainLength = 64;
// A move joins a chain only if it saves at least this share of the time per byte it saved
// on its own.
constexpr double kChainGainShare = 0.5;
// Candidates of the pool a refinement climbs from.
constexpr size_t kStarts = 4;
// Single moves planned exactly when no prefix of the chain fits.
constexpr int kSinglesPerRound = 8;
// Work units an exact plan costs, in expanded nodes (it takes several times an expansion).
constexpr int64_t kPlanWorkPerNode = 8;
// A refinement runs only if its work limit allows this many expansions of the step.
constexpr int64_t kMinRefineSteps = 64;

}  // namespace

// A move: keep or recompute one tensor, offload one or keep it on the device, or new cuts.
// kKeepNode keeps every output of one node its section recomputes (`tensors`): keeping only
// one of a batch norm's three outputs spares nothing (the node still re-runs for the other
// two), so no single keep is faster and the climb would stop short of keeping the node.
struct SectionSearch::Move {
  enum Kind { kKeep, kOffload, kCuts, kKeepNode };
  Kind kind = kKeep;
  TensorId tensor = kNone;
  std::vector<int32_t> cuts;
  std::vector<TensorId> tensors;
};

std::vector<SectionSearch::Move> SectionSearch::Moves(const SectionCuts& from) {
  // Refine() takes only faster moves: recomputing a kept tensor, or offloading one more,
  // never is, so those moves are not made.
  // Where the work runs out mid-scan (large graphs), the likeliest moves come first: keeps
  // by the seconds of their producer per byte kept.
  std::vector<Move> out;
  if (absl::StatusOr<std::vector<TensorId>> keepable = KeepableTensors(graph_, from.cuts, cost_);
      keepable.ok()) {
    std::vector<std::pair<double, TensorId>> keeps;
    for (TensorId t : *keepable) {
      if (Contains(from.keep, t)) continue;
      const TrainingTensor& tensor = graph_.tensor(t);
      keeps.push_back({-node_costs_.seconds[tensor.producer] / (tensor.bytes + 1.0), t});
    }
    std::sort(keeps.begin(), keeps.end());
    for (const auto& [unused, t] : keeps) out.push_back({Move::kKeep, t, {}});
    // Nodes with more than one output to keep: all of them at once, in the same order (by
    // the node's seconds per byte of all its outputs kept).
    std::map<NodeId, std::vector<TensorId>> by_node;
    for (const auto& [unused, t] : keeps) by_node[graph_.tensor(t).producer].push_back(t);
    std::vector<std::pair<double, NodeId>> nodes;
    for (auto& [node, tensors] : by_node) {
      if (tensors.size() < 2) continue;
      std::sort(tensors.begin(), tensors.end());
      double bytes = 1.0;
      for (TensorId t : tensors) bytes += graph_.tensor(t).bytes;
      nodes.push_back({-node_costs_.seconds[node] / bytes, node});
    }
    std::sort(nodes.begin(), nodes.end());
    for (const auto& [unused, node] : nodes) {
      out.push_back({Move::kKeepNode, kNone, {}, by_node[node]});
    }
  }
  for (TensorId t : from.offload) out.push_back({Move::kOffload, t, {}});
  const int32_t nf = NumForwardNodes(graph_);
  const std::vector<int32_t>& cuts = from.cuts;
  for (size_t k = 0; k < cuts.size(); ++k) {
    std::vector<int32_t> removed = cuts;
    removed.erase(removed.begin() + k);
    out.push_back({Move::kCuts, kNone, std::move(removed)});
    for (int32_t delta : {-2, -1, 1, 2}) {
      std::vector<int32_t> moved = cuts;
      moved[k] += delta;
      if (moved[k] > (k == 0 ? 0 : moved[k - 1]) &&
          moved[k] < (k + 1 == moved.size() ? nf : moved[k + 1])) {
        out.push_back({Move::kCuts, kNone, std::move(moved)});
      }
    }
  }
  std::vector<int32_t> positions;
  if (nf <= kAddCutEverywhereMaxNodes) {
    for (int32_t p = 1; p < nf; ++p) positions.push_back(p);
  } else {
    positions = LayerCuts(graph_);
  }
  for (int32_t p : positions) {
    if (std::binary_search(cuts.begin(), cuts.end(), p)) continue;
    std::vector<int32_t> added = cuts;
    added.insert(std::upper_bound(added.begin(), added.end(), p), p);
    out.push_back({Move::kCuts, kNone, std::move(added)});
  }
  return out;
}

std::optional<SectionCuts> SectionSearch::Apply(const SectionCuts& from, const Move& move) {
  SectionCuts m;
  switch (move.kind) {
    case Move::kKeep:
      m = from;
      m.keep = Toggled(m.keep, move.tensor);
      // A tensor recomputed again cannot stay offloaded (unless another section caches it:
      // the expansion says so, and the move is simply not taken).
      if (!Contains(m.keep, move.tensor) && Contains(m.offload, move.tensor)) {
        m.offload = Toggled(m.offload, move.tensor);
      }
      return m;
    case Move::kOffload:
      m = from;
      m.offload = Toggled(m.offload, move.tensor);
      return m;
    case Move::kKeepNode:
      m = from;
      for (TensorId t : move.tensors) {
        if (!Contains(m.keep, t)) m.keep = Toggled(m.keep, t);
      }
      return m;
    case Move::kCuts: {
      // Kept tensors that end up in the last section, and offloads the new cuts do not
      // allow, are dropped.
      m.cuts = move.cuts;
      const int32_t last_begin = m.cuts.empty() ? 0 : m.cuts.back();
      for (TensorId t : from.keep) {
        if (graph_.tensor(t).producer < last_begin) m.keep.push_back(t);
      }
      if (!from.offload.empty()) {
        absl::StatusOr<std::vector<TensorId>> allowed =
            OffloadableTensors(graph_, m.cuts, cost_, m.keep);
        if (!allowed.ok()) return std::nullopt;
        for (TensorId t : from.offload) {
          if (Contains(*allowed, t)) m.offload.push_back(t);
        }
      }
      return m;
    }
  }
  return std::nullopt;
}

int SectionSearch::AddExpanded(const std::string& strategy, const SectionCuts& cuts,
                               std::shared_ptr<const SectionedStep> step) {
  for (int i = 0; i < static_cast<int>(pool_.size()); ++i) {
    const SectionCuts& c = pool_[i].cuts;
    if (!pool_[i].nested && c.cuts == cuts.cuts && c.offload == cuts.offload &&
        c.keep == cuts.keep && c.inner_cuts == cuts.inner_cuts) {
      return i;
    }
  }
  Candidate c;
  c.strategy = strategy;
  c.cuts = cuts;
  Summarize(*step, &c);
  c.step = std::move(step);
  pool_.push_back(std::move(c));
  return static_cast<int>(pool_.size()) - 1;
}

absl::StatusOr<int> SectionSearch::Refine(int start, uint64_t budget_bytes) {
  if (auto it = refined_.find(budget_bytes); it != refined_.end()) return it->second;
  // A graph too large for the work limit to allow a few rounds is not refined: a single
  // exact plan of it may take seconds.
  const int64_t step_nodes = pool_[start].step_nodes;
  if (step_nodes * kMinRefineSteps > work_limit_) {
    refined_[budget_bytes] = start;
    return start;
  }
  const uint64_t alignment = options_.alignment_bytes;
  auto host_bytes = [&](const SectionedStep& step) {
    return options_.host_pool_in_budget ? HostPoolBytes(step, alignment) : 0;
  };
  int64_t work = 0;
  int plans = 0;
  auto out_of_work = [&] { return work >= work_limit_ || plans >= options_.refine_max_plans; };
  // A configuration predicted: its step's time and size and the lower bound of what it
  // holds. Not its expanded step: a round predicts every move, and fits() expands again
  // the few it plans.
  struct Predicted {
    SectionCuts cuts;
    std::string key;
    double step_seconds = 0;
    int64_t step_nodes = 0;
    uint64_t bound = 0;
  };
  // Returns `m` predicted if it is faster than `than` seconds and could fit the budget.
  auto predict = [&](SectionCuts m, double than) -> absl::StatusOr<std::optional<Predicted>> {
    RETURN_IF_ERROR(util::CheckCancellation(options_.cancel));
    m.optimizer_state_on_host = options_.optimizer_state_on_host;
    m.parameters_on_host = options_.parameters_on_host;
    std::string key = CutsKey(m);
    const double faster_than = than * (1 - 1e-12);
    auto [it, fresh] = known_.try_emplace(key);
    Known& known = it->second;
    if (!fresh) {
      const bool rejected = known.step_seconds >= faster_than ||
                            known.budget_lower_bound > budget_bytes ||
                            (known.budget_bytes != 0 && known.budget_bytes > budget_bytes);
      if (rejected) return std::nullopt;
    }
    absl::StatusOr<SectionedStep> step = ExpandSections(graph_, m, cost_, &node_costs_);
    if (!step.ok()) {
      known.step_seconds = std::numeric_limits<double>::infinity();
      return std::nullopt;
    }
    work += static_cast<int64_t>(step->graph.nodes().size());
    known.step_seconds = step->step_seconds;
    if (known.step_seconds >= faster_than) return std::nullopt;
    known.budget_lower_bound =
        ScheduledLowerBound(step->graph, step->schedule, alignment) + host_bytes(*step);
    if (known.budget_lower_bound > budget_bytes) return std::nullopt;
    return Predicted{std::move(m), std::move(key), step->step_seconds,
                     static_cast<int64_t>(step->graph.nodes().size()), known.budget_lower_bound};
  };
  // Plans `p` exactly; returns its pool index if it fits the budget, else -1.
  auto fits = [&](const Predicted& p) -> absl::StatusOr<int> {
    Known& known = known_[p.key];
    if (known.budget_bytes != 0 && known.budget_bytes > budget_bytes) return -1;
    ++plans;
    work += kPlanWorkPerNode * p.step_nodes;
    // predict() expanded the same cuts into the same step.
    ASSIGN_OR_RETURN(SectionedStep expanded, ExpandSections(graph_, p.cuts, cost_, &node_costs_));
    auto step = std::make_shared<const SectionedStep>(std::move(expanded));
    ASSIGN_OR_RETURN(MemoryPlan memory, PlanScheduledGraph(step->graph, step->schedule, alignment,
                                                           DefaultStrategies()));
    known.budget_bytes = memory.arena_bytes + host_bytes(*step);
    if (known.budget_bytes > budget_bytes) return -1;
    const int index = AddExpanded("refined", p.cuts, step);
    if (pool_[index].memory == nullptr) {
      pool_[index].step = std::move(step);
      pool_[index].memory = std::make_shared<const MemoryPlan>(std::move(memory));
    }
    return index;
  };

  // One round from candidate `current`: returns the candidate it moves to, or -1.
  auto round = [&](int current, size_t chain_length) -> absl::StatusOr<int> {
    const SectionCuts from = pool_[current].cuts;
    const double seconds = pool_[current].step_seconds;
    const uint64_t bound = BudgetLowerBound(current);
    // Every move predicted faster whose lower bound fits, most time saved per byte first.
    struct Better {
      Move move;
      Predicted predicted;
      double gain = 0;
    };
    std::vector<Better> better;
    for (const Move& move : Moves(from)) {
      if (out_of_work()) break;
      std::optional<SectionCuts> m = Apply(from, move);
      if (!m) continue;
      ASSIGN_OR_RETURN(std::optional<Predicted> p, predict(*std::move(m), seconds));
      if (!p) continue;
      const double added = p->bound > bound ? static_cast<double>(p->bound - bound) : 0.0;
      const double gain = (seconds - p->step_seconds) / (added + 4096);
      better.push_back({move, *std::move(p), gain});
    }
    // A round that ran out of work mid-scan still plans what it found (a chain and its
    // bisection at most): on large graphs one scan is all the work allows.
    if (better.empty()) return -1;
    std::stable_sort(better.begin(), better.end(),
                     [](const Better& a, const Better& b) { return a.gain > b.gain; });
    // Chain the moves in that order, each onto the last one taken while it still predicts
    // faster and its lower bound fits; then plan exactly the longest prefix that fits.
    std::vector<Predicted> chain = {better[0].predicted};
    for (size_t i = 1; i < better.size() && chain.size() < chain_length; ++i) {
      if (out_of_work()) break;
      std::optional<SectionCuts> m = Apply(chain.back().cuts, better[i].move);
      if (!m) continue;
      const Predicted& last = chain.back();
      ASSIGN_OR_RETURN(std::optional<Predicted> p, predict(*std::move(m), last.step_seconds));
      if (!p) continue;
      // Taken only while it still saves at least half the time per byte it did alone: moves
      // interact, and a poor one would spend memory a later, better one needs.
      const double added = p->bound > last.bound ? static_cast<double>(p->bound - last.bound) : 0;
      const double gain = (last.step_seconds - p->step_seconds) / (added + 4096);
      if (gain >= kChainGainShare * better[i].gain) chain.push_back(*std::move(p));
    }
    int next = -1;
    ASSIGN_OR_RETURN(next, fits(chain.back()));
    if (next < 0 && chain.size() > 1) {
      // The longest fitting prefix, by bisection: chain[low - 1] fits (or low is 0), chain[high -
      // 1] does not.
      size_t low = 0, high = chain.size();
      while (high - low > 1 && !out_of_work()) {
        const size_t mid = (low + high) / 2;
        ASSIGN_OR_RETURN(const int index, fits(chain[mid - 1]));
        if (index >= 0) {
          low = mid;
          next = index;
        } else {
          high = mid;
        }
      }
    }
    // No prefix fits: the next single moves, one at a time.
    for (size_t i = 1; next < 0 && i < better.size() && i <= kSinglesPerRound; ++i) {
      if (out_of_work()) break;
      ASSIGN_OR_RETURN(next, fits(better[i].predicted));
    }
    return next;
  };
  // Climbs from `from`: long chains first, which climb fast, then one move a round, which
  // climbs finely; or one move a round only.
  auto climb = [&](int from, bool chains) -> absl::StatusOr<int> {
    int current = from;
    for (size_t chain_length : {kChainLength, size_t{1}}) {
      if (chain_length > 1 && !chains) continue;
      while (!out_of_work()) {
        ASSIGN_OR_RETURN(const int next, round(current, chain_length));
        if (next < 0) break;
        current = next;
      }
    }
    return current;
  };
  // Local optima differ by where the climb starts and how it steps: climb from the fastest
  // candidates of the pool that fit, both ways from the fastest, and keep the best found.
  // Also from the fastest that offloads, when none of those does: keeping every tensor and
  // offloading what crosses the cuts may be the best plan of all, yet start slower.
  std::vector<int> starts = {start};
  bool offloads = !pool_[start].cuts.offload.empty();
  for (int index : by_time_) {
    if (starts.size() >= kStarts + 1 || (starts.size() >= kStarts && offloads)) break;
    if (index == start || Nested(index) || BudgetLowerBound(index) > budget_bytes) continue;
    const bool offload = !pool_[index].cuts.offload.empty();
    if (starts.size() >= kStarts && !offload) continue;
    ASSIGN_OR_RETURN(SectionPlan plan, Evaluate(index));
    if (BudgetBytes(plan) > budget_bytes) continue;
    starts.push_back(index);
    offloads = offloads || offload;
  }
  int best = start;
  for (size_t i = 0; i < starts.size() && !out_of_work(); ++i) {
    for (bool chains : {true, false}) {
      if (i > 0 && !chains) continue;
      ASSIGN_OR_RETURN(const int found, climb(starts[i], chains));
      if (pool_[found].step_seconds < pool_[best].step_seconds) best = found;
    }
  }
  const int current = best;
  SortByTime();
  refined_[budget_bytes] = current;
  return current;
}

absl::StatusOr<SectionPlan> SectionSearch::Unconstrained() { return Evaluate(0); }

uint64_t SectionSearch::BudgetLowerBound(int index) {
  const uint64_t host = options_.host_pool_in_budget ? pool_[index].host_pool_bytes : 0;
  return LowerBound(index) + host;
}

uint64_t SectionSearch::BudgetBytes(const SectionPlan& plan) const {
  return plan.peak_bytes + (options_.host_pool_in_budget ? plan.host_pool_bytes : 0);
}

absl::StatusOr<uint64_t> SectionSearch::MinimumPeakBytes() {
  ASSIGN_OR_RETURN(int index, Smallest());
  ASSIGN_OR_RETURN(SectionPlan plan, Evaluate(index));
  return BudgetBytes(plan);
}

absl::StatusOr<int> SectionSearch::Smallest() {
  RETURN_IF_ERROR(Descend());
  // Lower bounds first: only candidates that could beat the best arena so far are planned.
  std::vector<int> order(pool_.size());
  for (int i = 0; i < static_cast<int>(pool_.size()); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return BudgetLowerBound(a) < BudgetLowerBound(b); });
  int best = -1;
  uint64_t best_bytes = std::numeric_limits<uint64_t>::max();
  for (int index : order) {
    if (BudgetLowerBound(index) >= best_bytes) break;
    ASSIGN_OR_RETURN(SectionPlan plan, Evaluate(index));
    if (BudgetBytes(plan) < best_bytes) {
      best_bytes = BudgetBytes(plan);
      best = index;
    }
  }
  return best;
}

namespace {

// Returns the bytes by role of the buffers live at the position where `plan`'s live bytes peak.
std::map<proto::TensorRole, uint64_t> RolesAtPeak(const MemoryPlan& plan) {
  struct BufferUse {
    uint64_t bytes = 0;
    Lifetime life{std::numeric_limits<int32_t>::max(), -1};
    proto::TensorRole role = proto::ROLE_UNSPECIFIED;
  };
  std::map<int32_t, BufferUse> buffers;
  for (const PlannedTensor& t : plan.tensors) {
    BufferUse& b = buffers[t.buffer];
    if (b.role == proto::ROLE_UNSPECIFIED) b.role = t.role;
    b.bytes = std::max(b.bytes, t.bytes);
    b.life.first_position = std::min(b.life.first_position, t.lifetime.first_position);
    b.life.last_position = std::max(b.life.last_position, t.lifetime.last_position);
  }
  std::vector<uint64_t> bytes;
  std::vector<Lifetime> lifetimes;
  for (const auto& [id, b] : buffers) {
    bytes.push_back(b.bytes);
    lifetimes.push_back(b.life);
  }
  const Position peak = FindLivePeak(bytes, lifetimes).position;
  std::map<proto::TensorRole, uint64_t> roles;
  for (const auto& [id, b] : buffers) {
    if (b.life.first_position <= peak && peak <= b.life.last_position) roles[b.role] += b.bytes;
  }
  return roles;
}

}  // namespace

absl::Status SectionSearch::Infeasible(uint64_t budget_bytes) {
  using graph::HumanBytes;
  ASSIGN_OR_RETURN(int index, Smallest());
  ASSIGN_OR_RETURN(SectionPlan smallest, Evaluate(index));
  const std::map<proto::TensorRole, uint64_t> roles = RolesAtPeak(*smallest.memory);
  std::vector<std::string> parts;
  for (const auto& [role, bytes] : roles) {
    parts.push_back(absl::StrCat(graph::RoleName(role), " ", HumanBytes(bytes)));
  }
  // What the smallest plan keeps on the device for good: parameters, buffers and (unless it
  // lives on the host) the optimizer state.
  uint64_t state = 0, host_state = 0;
  for (const TrainingTensor& t : smallest.step->graph.tensors()) {
    if (!t.persistent()) continue;
    state += t.device_bytes();
    host_state += t.bytes - t.device_bytes();
  }
  auto role = [&](proto::TensorRole r) {
    auto it = roles.find(r);
    return it == roles.end() ? uint64_t{0} : it->second;
  };
  const uint64_t smallest_bytes = BudgetBytes(smallest);
  const bool params_on_host = smallest.step->parameters_on_host();
  return absl::FailedPreconditionError(absl::StrCat(
      "budget ", HumanBytes(budget_bytes), " (", budget_bytes,
      " bytes) is below the smallest peak Headroom can plan for this step: ",
      HumanBytes(smallest_bytes), " (", smallest_bytes, " bytes",
      options_.host_pool_in_budget && smallest.host_pool_bytes > 0
          ? absl::StrCat(", its host pool of ", HumanBytes(smallest.host_pool_bytes),
                         " included: host memory is the device's here")
          : "",
      "), with ", smallest.step->sections.size(), " sections and ",
      HumanBytes(smallest.step->offloaded_bytes),
      " offloaded to host. At that peak: ", absl::StrJoin(parts, ", "), ". ",
      host_state == 0 ? "Parameters, buffers and optimizer state alone need "
      : params_on_host
          ? absl::StrCat("Its optimizer state and parameters (", HumanBytes(host_state),
                         ") live on the host; it keeps on the device buffers: ")
          : absl::StrCat("Its optimizer state (", HumanBytes(host_state),
                         ") lives on the host; it keeps on the device parameters and buffers: "),
      HumanBytes(state), " (", state, " bytes); with the gradients ",
      params_on_host ? "and the parameters' copies " : "", "live at the peak, ",
      HumanBytes(state + role(proto::ROLE_GRADIENT) +
                 (params_on_host ? role(proto::ROLE_PARAMETER) : 0)),
      "."));
}

absl::StatusOr<TradeOffPoint> SectionSearch::Point(int index) {
  ASSIGN_OR_RETURN(SectionPlan plan, Evaluate(index));
  return TradeOffPoint{BudgetBytes(plan), plan.step_seconds, plan.strategy,
                       static_cast<int32_t>(plan.step->sections.size()),
                       plan.step->offloaded_bytes};
}

absl::StatusOr<std::vector<TradeOffPoint>> SectionSearch::Frontier() {
  ASSIGN_OR_RETURN(std::vector<TradeOffPoint> frontier, PoolFrontier());
  // Plans with inner cuts are not refined: the others share the work.
  const int64_t refined =
      std::count_if(frontier.begin(), frontier.end(),
                    [](const TradeOffPoint& p) { return p.strategy != "nested"; });
  if (!options_.refine || refined < 2) return frontier;
  // Refine at each point's peak, the points sharing one refinement's work; then the frontier
  // of the pool the refinements grew.
  const int64_t work_limit = work_limit_;
  work_limit_ = std::max<int64_t>(options_.refine_max_work / refined, 1);
  for (const TradeOffPoint& point : frontier) {
    if (point.strategy == "nested") continue;
    absl::StatusOr<SectionPlan> plan = Plan(point.peak_bytes);
    if (!plan.ok()) {
      work_limit_ = work_limit;
      return plan.status();
    }
  }
  work_limit_ = work_limit;
  return PoolFrontier();
}

absl::StatusOr<std::vector<TradeOffPoint>> SectionSearch::PoolFrontier() {
  RETURN_IF_ERROR(Descend());  // The frontier ends at the smallest plan.
  std::vector<TradeOffPoint> points;
  // Plans with inner cuts join only below the smallest peak of those without.
  uint64_t smallest_flat = std::numeric_limits<uint64_t>::max();
  std::vector<TradeOffPoint> nested;
  for (int i = 0; i < static_cast<int>(pool_.size()); ++i) {
    RETURN_IF_ERROR(util::CheckCancellation(options_.cancel));  // Point() may plan exactly.
    ASSIGN_OR_RETURN(TradeOffPoint point, Point(i));
    if (Nested(i)) {
      nested.push_back(point);
      continue;
    }
    smallest_flat = std::min(smallest_flat, point.peak_bytes);
    points.push_back(point);
  }
  for (const TradeOffPoint& point : nested) {
    if (point.peak_bytes < smallest_flat) points.push_back(point);
  }
  std::sort(points.begin(), points.end(), [](const TradeOffPoint& a, const TradeOffPoint& b) {
    return a.peak_bytes != b.peak_bytes ? a.peak_bytes > b.peak_bytes
                                        : a.step_seconds > b.step_seconds;
  });
  // From the smallest peak up, keep a point only if it is faster than all smaller ones.
  std::vector<TradeOffPoint> frontier;
  double fastest = std::numeric_limits<double>::infinity();
  for (auto it = points.rbegin(); it != points.rend(); ++it) {
    if (it->step_seconds < fastest) {
      fastest = it->step_seconds;
      frontier.push_back(*it);
    }
  }
  std::reverse(frontier.begin(), frontier.end());
  return frontier;
}

absl::StatusOr<std::vector<TradeOffPoint>> SectionSearch::Baselines() {
  std::vector<TradeOffPoint> points;
  for (int i = 0; i < static_cast<int>(pool_.size()); ++i) {
    if (pool_[i].strategy == "search" || pool_[i].strategy == "refined" || Nested(i)) continue;
    RETURN_IF_ERROR(util::CheckCancellation(options_.cancel));
    ASSIGN_OR_RETURN(TradeOffPoint point, Point(i));
    points.push_back(point);
  }
  return points;
}

std::string SectionPlan::DebugString() const {
  using graph::HumanBytes;
  std::string out;
  absl::StrAppendFormat(&out, "%-24s %s\n", "strategy", strategy);
  absl::StrAppendFormat(&out, "%-24s %12s  (%d)\n", "predicted peak", HumanBytes(peak_bytes),
                        peak_bytes);
  absl::StrAppendFormat(&out, "%-24s %12.4f s  (%.3fx the plain step)\n", "predicted step",
                        step_seconds, overhead_ratio);
  absl::StrAppendFormat(&out, "%-24s %12.4f GFLOP\n", "recomputed",
                        static_cast<double>(step->recompute_flops) / 1e9);
  absl::StrAppendFormat(&out, "%-24s %12s  (waits %.4f s)\n", "offloaded to host",
                        HumanBytes(step->offloaded_bytes), step->stall_seconds);
  absl::StrAppendFormat(&out, "%-24s %12d\n", "sections", step->sections.size());
  const TrainingGraph& g = step->graph;
  for (size_t s = 0; s < step->sections.size(); ++s) {
    const SectionInfo& info = step->sections[s];
    absl::StrAppendFormat(
        &out, "  %3d  %-28s .. %-28s %s\n", s, g.node(info.begin).name, g.node(info.end - 1).name,
        info.recomputed ? absl::StrFormat("re-runs %d nodes", info.recompute_nodes)
                        : std::string("not re-run"));
    for (int32_t c : info.inner_cuts) {
      absl::StrAppendFormat(&out, "       inner cut before %s (its backward re-runs again)\n",
                            g.node(c).name);
    }
    for (const CachedInput& c : info.boundary) {
      absl::StrAppendFormat(&out, "       cached %-32s %10s  %s\n", g.tensor(c.tensor).name,
                            HumanBytes(c.bytes), c.offloaded ? "host" : "device");
    }
    for (const CachedInput& k : info.kept) {
      absl::StrAppendFormat(&out, "       kept   %-32s %10s  %s\n", g.tensor(k.tensor).name,
                            HumanBytes(k.bytes), k.offloaded ? "host" : "device");
    }
  }
  return out;
}

absl::StatusOr<ExhaustiveResult> ExhaustiveSearch(const TrainingGraph& graph, const CostModel& cost,
                                                  uint64_t budget_bytes, int32_t max_forward_nodes,
                                                  uint64_t alignment_bytes) {
  const int32_t nf = NumForwardNodes(graph);
  if (nf > max_forward_nodes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "exhaustive search over ", nf, " forward nodes: at most ", max_forward_nodes, " allowed"));
  }
  ExhaustiveResult best;
  best.step_seconds = std::numeric_limits<double>::infinity();
  const uint64_t sets = uint64_t{1} << (nf - 1);
  const NodeCosts node_costs = ComputeNodeCosts(graph, cost);
  for (uint64_t mask = 0; mask < sets; ++mask) {
    SectionCuts cuts;
    for (int32_t p = 1; p < nf; ++p) {
      if (mask >> (p - 1) & 1) cuts.cuts.push_back(p);
    }
    ASSIGN_OR_RETURN(SectionedStep step, ExpandSections(graph, cuts, cost, &node_costs));
    ++best.evaluated;
    if (step.step_seconds >= best.step_seconds) continue;
    if (ScheduledLowerBound(step.graph, step.schedule, alignment_bytes) > budget_bytes) continue;
    ASSIGN_OR_RETURN(MemoryPlan plan, PlanScheduledGraph(step.graph, step.schedule, alignment_bytes,
                                                         DefaultStrategies()));
    if (plan.arena_bytes > budget_bytes) continue;
    best.cuts = cuts.cuts;
    best.peak_bytes = plan.arena_bytes;
    best.step_seconds = step.step_seconds;
  }
  if (best.peak_bytes == 0) {
    return absl::NotFoundError(absl::StrCat("no set of cuts fits ", budget_bytes, " bytes"));
  }
  return best;
}

}  // namespace headroom::planner
