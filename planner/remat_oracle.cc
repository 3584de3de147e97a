#include "planner/remat_oracle.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <utility>

#include "Cbc_C_Interface.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "graph/summary.h"
#include "util/check.h"
#include "util/status_macros.h"

namespace headroom::planner {
namespace {

uint64_t AlignUp(uint64_t bytes, uint64_t alignment) {
  return alignment <= 1 ? bytes : (bytes + alignment - 1) / alignment * alignment;
}

int32_t CountForwardNodes(const TrainingGraph& graph) {
  int32_t n = 0;
  while (n < static_cast<int32_t>(graph.nodes().size()) &&
         graph.node(n).kind == NodeKind::kForward) {
    ++n;
  }
  return n;
}

// The seconds of each node, and of each forward node run again: what the forward node costs,
// as Headroom prices its re-forward nodes (planner/sections.h, NodeCosts).
struct NodeTimes {
  std::vector<double> seconds;
  std::vector<double> rerun_seconds;
};

NodeTimes TimeNodes(const TrainingGraph& graph, const CostModel& cost) {
  NodeTimes times;
  const NodeCosts costs = ComputeNodeCosts(graph, cost);
  times.seconds = costs.seconds;
  times.rerun_seconds.assign(times.seconds.begin(),
                             times.seconds.begin() + CountForwardNodes(graph));
  return times;
}

// One run of a node in a schedule.
struct NodeRun {
  NodeId node = 0;
  NodeId stage = 0;
  bool rerun = false;
};

absl::StatusOr<std::vector<NodeRun>> Runs(const TrainingGraph& graph,
                                          const RecomputeSchedule& schedule) {
  const int32_t n = static_cast<int32_t>(graph.nodes().size());
  const int32_t nf = CountForwardNodes(graph);
  if (static_cast<int32_t>(schedule.recompute.size()) > n) {
    return absl::InvalidArgumentError(absl::StrCat("schedule has ", schedule.recompute.size(),
                                                   " stages; the graph has ", n, " nodes"));
  }
  std::vector<NodeRun> runs;
  for (NodeId t = 0; t < n; ++t) {
    if (t < static_cast<NodeId>(schedule.recompute.size())) {
      NodeId previous = kNone;
      for (NodeId k : schedule.recompute[t]) {
        if (k < 0 || k >= nf || k >= t || k <= previous) {
          return absl::InvalidArgumentError(absl::StrCat(
              "stage ", t, " ('", graph.node(t).name, "') re-runs node ", k,
              ": re-runs must be forward nodes before the stage's node, in increasing order"));
        }
        previous = k;
        runs.push_back({k, t, true});
      }
    }
    runs.push_back({t, t, false});
  }
  return runs;
}

// A copy of a tensor in a flat schedule: from the run that writes it (or 0) to its last reader.
struct Instance {
  TensorId tensor = kNone;
  int32_t first = 0;
  int32_t last = 0;
  bool fixed = false;  // Persistent, or exists before the step: never shared in place.
};

ScheduleCost Simulate(const TrainingGraph& graph, const NodeTimes& times,
                      const std::vector<NodeRun>& runs, uint64_t alignment,
                      std::vector<Instance>* instances_out,
                      std::vector<std::vector<int32_t>>* reads_out) {
  const int32_t positions = static_cast<int32_t>(runs.size());
  std::vector<Instance> inst;
  std::vector<int32_t> current(graph.tensors().size(), -1);
  for (TensorId t = 0; t < static_cast<TensorId>(graph.tensors().size()); ++t) {
    const TrainingTensor& tensor = graph.tensor(t);
    if (tensor.persistent() || tensor.producer == kNone) {
      current[t] = static_cast<int32_t>(inst.size());
      inst.push_back({t, 0, tensor.persistent() ? positions - 1 : 0, true});
    }
  }
  int32_t loss_instance = -1;
  std::vector<std::vector<int32_t>> reads(positions), writes(positions);
  ScheduleCost cost;
  for (int32_t p = 0; p < positions; ++p) {
    const TrainingNode& node = graph.node(runs[p].node);
    cost.step_seconds +=
        runs[p].rerun ? times.rerun_seconds[runs[p].node] : times.seconds[runs[p].node];
    for (TensorId t : node.inputs) {
      const int32_t c = current[t];
      CHECK(c >= 0) << "unchecked read of '" << graph.tensor(t).name << "'";
      inst[c].last = std::max(inst[c].last, p);
      reads[p].push_back(c);
    }
    for (TensorId t : node.outputs) {
      current[t] = static_cast<int32_t>(inst.size());
      if (t == graph.loss() && loss_instance < 0) loss_instance = current[t];
      writes[p].push_back(current[t]);
      inst.push_back({t, p, p, false});
    }
    if (node.scratch != kNone) inst.push_back({node.scratch, p, p, false});
  }
  if (loss_instance >= 0) inst[loss_instance].last = positions - 1;

  // In-place sharing, as planner/sharing.cc walks the schedule.
  std::vector<int32_t> parent(inst.size());
  std::iota(parent.begin(), parent.end(), 0);
  std::vector<Instance> group = inst;
  std::vector<bool> joined(inst.size(), false);
  auto find = [&](int32_t i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  };
  auto join = [&](int32_t member, int32_t root) {
    member = find(member);
    root = find(root);
    if (member == root) return;
    parent[member] = root;
    group[root].first = std::min(group[root].first, group[member].first);
    group[root].last = std::max(group[root].last, group[member].last);
    group[root].fixed = group[root].fixed || group[member].fixed;
  };
  for (int32_t p = 0; p < positions; ++p) {
    const TrainingNode& node = graph.node(runs[p].node);
    for (const auto& [o, i] : node.views) {
      join(writes[p][o], reads[p][i]);
      joined[writes[p][o]] = true;
    }
    std::vector<int32_t> taken;
    for (const auto& [o, i] : node.inplace) {
      const int32_t out = writes[p][o];
      const int32_t root = find(reads[p][i]);
      const bool free_here = !group[root].fixed && group[root].last == p;
      const bool untaken = std::find(taken.begin(), taken.end(), root) == taken.end();
      if (find(out) != out || joined[out] || !free_here || !untaken) continue;
      join(out, root);
      joined[out] = true;
      taken.push_back(root);
    }
  }
  // Buffers: the largest member, rounded up; live over the group's lifetime.
  std::vector<uint64_t> bytes(inst.size(), 0);
  for (size_t i = 0; i < inst.size(); ++i) {
    const int32_t r = find(static_cast<int32_t>(i));
    bytes[r] = std::max(bytes[r], graph.tensor(inst[i].tensor).bytes);
  }
  std::vector<int64_t> delta(positions + 1, 0);
  for (size_t i = 0; i < inst.size(); ++i) {
    if (find(static_cast<int32_t>(i)) != static_cast<int32_t>(i)) continue;
    const int64_t size = static_cast<int64_t>(AlignUp(bytes[i], alignment));
    delta[group[i].first] += size;
    delta[group[i].last + 1] -= size;
  }
  int64_t live = 0;
  for (int32_t p = 0; p < positions; ++p) {
    live += delta[p];
    if (static_cast<uint64_t>(live) > cost.peak_bytes) {
      cost.peak_bytes = static_cast<uint64_t>(live);
      cost.peak_stage = runs[p].stage;
      cost.peak_node = runs[p].node;
    }
  }
  if (instances_out != nullptr) *instances_out = std::move(inst);
  if (reads_out != nullptr) *reads_out = std::move(reads);
  return cost;
}

// Checks that every read of `runs` follows a write (or the tensor exists before the step).
absl::Status CheckReads(const TrainingGraph& graph, const std::vector<NodeRun>& runs) {
  std::vector<bool> written(graph.tensors().size(), false);
  for (TensorId t = 0; t < static_cast<TensorId>(graph.tensors().size()); ++t) {
    written[t] = graph.tensor(t).persistent() || graph.tensor(t).producer == kNone;
  }
  for (const NodeRun& run : runs) {
    const TrainingNode& node = graph.node(run.node);
    for (TensorId t : node.inputs) {
      if (!written[t]) {
        return absl::InvalidArgumentError(
            absl::StrCat("stage ", run.stage, ": node '", node.name, "' reads '",
                         graph.tensor(t).name, "' before any node of the schedule writes it"));
      }
    }
    for (TensorId t : node.outputs) written[t] = true;
  }
  return absl::OkStatus();
}

absl::StatusOr<ScheduleCost> Evaluate(const TrainingGraph& graph, const NodeTimes& times,
                                      const RecomputeSchedule& schedule, uint64_t alignment) {
  ASSIGN_OR_RETURN(const std::vector<NodeRun> runs, Runs(graph, schedule));
  RETURN_IF_ERROR(CheckReads(graph, runs));
  return Simulate(graph, times, runs, alignment, nullptr, nullptr);
}

}  // namespace

int64_t RecomputeSchedule::num_recomputes() const {
  int64_t n = 0;
  for (const auto& stage : recompute) n += static_cast<int64_t>(stage.size());
  return n;
}

struct ScheduleEvaluator::Times : NodeTimes {};

ScheduleEvaluator::ScheduleEvaluator(const TrainingGraph& graph, const CostModel& cost,
                                     uint64_t alignment_bytes)
    : graph_(graph), alignment_bytes_(alignment_bytes) {
  auto times = std::make_unique<Times>();
  static_cast<NodeTimes&>(*times) = TimeNodes(graph, cost);
  times_ = std::move(times);
}

ScheduleEvaluator::~ScheduleEvaluator() = default;

absl::StatusOr<ScheduleCost> ScheduleEvaluator::Evaluate(const RecomputeSchedule& schedule) const {
  return planner::Evaluate(graph_, *times_, schedule, alignment_bytes_);
}

double ScheduleEvaluator::rerun_seconds(NodeId k) const { return times_->rerun_seconds[k]; }

absl::StatusOr<ScheduleCost> EvaluateRecomputeSchedule(const TrainingGraph& graph,
                                                       const CostModel& cost,
                                                       const RecomputeSchedule& schedule,
                                                       uint64_t alignment_bytes) {
  return Evaluate(graph, TimeNodes(graph, cost), schedule, alignment_bytes);
}

absl::StatusOr<RecomputeSchedule> RecomputeScheduleOf(const TrainingGraph& graph,
                                                      const SectionedStep& step) {
  const int32_t n = static_cast<int32_t>(graph.nodes().size());
  const int32_t nf = CountForwardNodes(graph);
  std::map<graph::NodeId, NodeId> training_of;
  for (NodeId k = 0; k < nf; ++k) training_of[graph.node(k).forward_node] = k;
  RecomputeSchedule schedule;
  schedule.recompute.resize(n);
  std::vector<NodeId> pending;
  NodeId next = 0;  // The next original node expected.
  for (NodeId e = 0; e < static_cast<NodeId>(step.graph.nodes().size()); ++e) {
    const TrainingNode& node = step.graph.node(e);
    if (node.kind == NodeKind::kOffload || node.kind == NodeKind::kPrefetch) {
      return absl::InvalidArgumentError(
          absl::StrCat("node '", node.name,
                       "' copies to or from host memory: the oracle models recompute only"));
    }
    if (node.kind == NodeKind::kRecompute) {
      auto it = training_of.find(node.forward_node);
      if (it == training_of.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("re-forward node '", node.name, "' has no forward node in the graph"));
      }
      pending.push_back(it->second);
      continue;
    }
    if (next >= n || graph.node(next).name != node.name) {
      return absl::InvalidArgumentError(absl::StrCat("expanded node '", node.name, "' is not node ",
                                                     next, " of the training graph"));
    }
    std::sort(pending.begin(), pending.end());
    schedule.recompute[next] = std::move(pending);
    pending.clear();
    ++next;
  }
  if (next != n || !pending.empty()) {
    return absl::InvalidArgumentError("the sectioned step does not run every node of the graph");
  }
  return schedule;
}

// ---- The program ----------------------------------------------------------------------------

// A linear expression over CBC's columns, plus a constant.
struct Expr {
  std::vector<std::pair<int32_t, double>> terms;
  double constant = 0;
  void Add(int32_t col, double coef) {
    if (col >= 0 && coef != 0) terms.push_back({col, coef});
  }
};

// A 0/1 quantity: a binary column, or a constant.
struct Bit {
  int32_t col = -1;
  double value = 0;  // When col < 0.
  static Bit Const(double v) { return {-1, v}; }
  bool is_const() const { return col < 0; }
  void AddTo(Expr* e, double coef) const {
    if (is_const()) {
      e->constant += coef * value;
    } else {
      e->Add(col, coef);
    }
  }
};

class RematOracle::Program {
 public:
  Program(const TrainingGraph& graph, NodeTimes times, uint64_t alignment)
      : g_(graph), times_(std::move(times)), unit_(std::max<uint64_t>(alignment, 1)) {
    Analyse();
  }

  const NodeTimes& times() const { return times_; }
  uint64_t persistent_bytes() const { return persistent_units_ * unit_; }
  int32_t num_forward() const { return nf_; }

  // What one build of the program is: the model and where its columns are.
  struct Built {
    Cbc_Model* model = nullptr;
    // R[t][k] column (or -1), indexed [t][k] for forward k.
    std::vector<std::vector<int32_t>> r;
    // S columns by (t, tensor).
    std::map<std::pair<NodeId, TensorId>, int32_t> s;
    int32_t num_cols = 0;
    int32_t num_rows = 0;
    int32_t num_binaries = 0;
    ~Built() {
      if (model != nullptr) Cbc_deleteModel(model);
    }
  };

  // Builds the program: with a budget, least time; without, least peak (ties by time).
  std::unique_ptr<Built> Build(std::optional<uint64_t> budget_bytes) const;

  // Returns the values of the R and S columns of a schedule (which must be valid), for a
  // MIP start.
  void StartValues(const Built& built, const RecomputeSchedule& schedule, std::vector<int>* cols,
                   std::vector<double>* values) const;

  // Returns the schedule of a solution.
  RecomputeSchedule ScheduleOf(const Built& built, const double* solution) const;

  // The largest time the objective can count (every possible re-run), in microseconds.
  double max_rerun_micros() const { return max_rerun_micros_; }

 private:
  enum class Kind { kPersistent, kInput, kForward, kFixed };

  void Analyse();
  // Whether tensor j's availability in stage t is a column.
  Bit S(const Built& b, NodeId t, TensorId j) const;
  Bit R(const Built& b, NodeId t, NodeId k) const {
    if (k == t) return Bit::Const(1);
    if (k < nf_ && b.r[t][k] >= 0) return {b.r[t][k], 0};
    return Bit::Const(0);
  }

  const TrainingGraph& g_;
  const NodeTimes times_;
  const uint64_t unit_;
  int32_t n_ = 0;
  int32_t nf_ = 0;
  uint64_t persistent_units_ = 0;
  double max_rerun_micros_ = 0;
  // Per tensor.
  std::vector<TensorId> base_;
  std::vector<Kind> kind_;    // Of its base.
  std::vector<NodeId> last_;  // Last stage that can read it (-1: never).
  std::vector<bool> is_scratch_;
  // Per base tensor: size in units, the nodes that read it or a view of it (sorted).
  std::vector<uint64_t> units_;
  std::vector<std::vector<NodeId>> users_;
  std::vector<std::vector<TensorId>> views_of_;
  // Per forward node: last stage it can run in.
  std::vector<NodeId> last_run_;
};

void RematOracle::Program::Analyse() {
  n_ = static_cast<int32_t>(g_.nodes().size());
  nf_ = CountForwardNodes(g_);
  const int32_t nt = static_cast<int32_t>(g_.tensors().size());
  base_.resize(nt);
  std::iota(base_.begin(), base_.end(), 0);
  is_scratch_.assign(nt, false);
  for (NodeId k = 0; k < n_; ++k) {
    const TrainingNode& node = g_.node(k);
    for (const auto& [o, i] : node.views) base_[node.outputs[o]] = base_[node.inputs[i]];
    if (node.scratch != kNone) is_scratch_[node.scratch] = true;
  }
  kind_.resize(nt);
  units_.assign(nt, 0);
  users_.assign(nt, {});
  views_of_.assign(nt, {});
  for (TensorId j = 0; j < nt; ++j) {
    const TrainingTensor& b = g_.tensor(base_[j]);
    kind_[j] = b.persistent()        ? Kind::kPersistent
               : b.producer == kNone ? Kind::kInput
               : b.producer < nf_    ? Kind::kForward
                                     : Kind::kFixed;
    const TensorId root = base_[j];
    units_[root] = std::max(units_[root], AlignUp(g_.tensor(j).bytes, unit_) / unit_);
    if (root != j) views_of_[root].push_back(j);
    for (NodeId c : g_.tensor(j).consumers) users_[root].push_back(c);
  }
  for (TensorId j = 0; j < nt; ++j) {
    std::sort(users_[j].begin(), users_[j].end());
    users_[j].erase(std::unique(users_[j].begin(), users_[j].end()), users_[j].end());
    if (base_[j] == j && kind_[j] == Kind::kPersistent) persistent_units_ += units_[j];
  }
  // The last stage that can read each tensor, and run each forward node, latest first.
  last_.assign(nt, -1);
  last_run_.assign(nf_, 0);
  // (The loss lives to the end without being read: no reason to run its node again.)
  auto tensor_last = [&](TensorId j) {
    NodeId last = g_.tensor(j).producer == kNone ? 0 : g_.tensor(j).producer;
    for (NodeId c : g_.tensor(j).consumers) last = std::max(last, c < nf_ ? last_run_[c] : c);
    return last;
  };
  for (NodeId k = nf_ - 1; k >= 0; --k) {
    NodeId last = k;
    for (TensorId o : g_.node(k).outputs) {
      last_[o] = tensor_last(o);
      last = std::max(last, last_[o]);
    }
    last_run_[k] = last;
  }
  for (TensorId j = 0; j < nt; ++j) {
    if (last_[j] < 0) last_[j] = tensor_last(j);
  }
  if (g_.loss() != kNone) last_[g_.loss()] = n_ - 1;
  // A base tensor is needed as long as any of its views.
  for (TensorId j = 0; j < nt; ++j) {
    if (base_[j] != j) last_[base_[j]] = std::max(last_[base_[j]], last_[j]);
  }
  for (NodeId k = 0; k < nf_; ++k) {
    max_rerun_micros_ += 1e6 * times_.rerun_seconds[k] * (last_run_[k] - k);
  }
}

Bit RematOracle::Program::S(const Built& b, NodeId t, TensorId j) const {
  if (t >= n_) return Bit::Const(j == g_.loss() ? 1 : 0);
  auto it = b.s.find({t, j});
  if (it != b.s.end()) return {it->second, 0};
  const TrainingTensor& tensor = g_.tensor(j);
  if (kind_[j] == Kind::kPersistent) return Bit::Const(1);
  if (tensor.producer == kNone) return Bit::Const(t == 0 && last_[j] >= 0 ? 1 : 0);
  if (t <= tensor.producer || t > last_[j]) return Bit::Const(0);
  // Written by a node that runs only in its own stage, or the loss: kept to its last reader.
  return Bit::Const(1);
}

std::unique_ptr<RematOracle::Program::Built> RematOracle::Program::Build(
    std::optional<uint64_t> budget_bytes) const {
  auto built = std::make_unique<Built>();
  Built& b = *built;
  // Columns and rows are collected, then loaded at once (CBC's one-at-a-time calls copy).
  std::vector<double> col_lower, col_upper, objective;
  std::vector<int32_t> integers;
  std::vector<std::vector<std::pair<int32_t, double>>> column_entries;
  std::vector<double> row_lower, row_upper;
  auto add_col = [&](double lb, double ub, double obj, bool integer) {
    col_lower.push_back(lb);
    col_upper.push_back(ub);
    objective.push_back(obj);
    column_entries.emplace_back();
    if (integer) integers.push_back(b.num_cols);
    b.num_binaries += integer ? 1 : 0;
    return b.num_cols++;
  };
  auto add_row = [&](const Expr& e, char sense, double rhs) {
    std::map<int32_t, double> merged;
    for (const auto& [c, v] : e.terms) merged[c] += v;
    bool any = false;
    for (const auto& [c, v] : merged) {
      if (v == 0) continue;
      column_entries[c].push_back({b.num_rows, v});
      any = true;
    }
    if (!any) return;  // Constant rows hold by construction (checked by callers).
    const double right = rhs - e.constant;
    row_lower.push_back(sense == 'E' ? right : -std::numeric_limits<double>::max());
    row_upper.push_back(right);
    ++b.num_rows;
  };
  const bool least_peak = !budget_bytes.has_value();
  // Least peak: the peak in units, ties broken by time at under half a unit in all.
  const double time_weight = least_peak ? 0.5 / (max_rerun_micros_ + 1) : 1.0;
  const int32_t z = least_peak ? add_col(0, 1e300, 1.0, false) : -1;
  const double budget_units =
      least_peak ? 0 : std::floor(static_cast<double>(*budget_bytes) / unit_);

  // R: forward node k re-run in stage t, k < t <= its last useful stage.
  b.r.assign(n_, std::vector<int32_t>(nf_, -1));
  for (NodeId k = 0; k < nf_; ++k) {
    for (NodeId t = k + 1; t <= last_run_[k]; ++t) {
      b.r[t][k] = add_col(0, 1, time_weight * 1e6 * times_.rerun_seconds[k], true);
    }
  }
  // S: a graph input, or a tensor a forward node writes (not the loss), kept into stage t.
  for (TensorId j = 0; j < static_cast<TensorId>(g_.tensors().size()); ++j) {
    const TrainingTensor& tensor = g_.tensor(j);
    if (is_scratch_[j] || tensor.persistent() || j == g_.loss()) continue;
    if (tensor.producer != kNone && tensor.producer >= nf_) continue;
    const NodeId from = tensor.producer == kNone ? 1 : tensor.producer + 1;
    for (NodeId t = from; t <= last_[j]; ++t) b.s[{t, j}] = add_col(0, 1, 0, true);
  }
  // Keeping: S[t][j] <= R[t-1][p] + S[t-1][j]; a view only with its base; not kept and
  // written again in one stage.
  for (const auto& [key, col] : b.s) {
    const auto [t, j] = key;
    const NodeId p = g_.tensor(j).producer;
    Expr e;
    e.Add(col, 1);
    if (p != kNone) R(b, t - 1, p).AddTo(&e, -1);
    S(b, t - 1, j).AddTo(&e, -1);
    add_row(e, 'L', 0);
    if (base_[j] != j) {
      Expr v;
      v.Add(col, 1);
      S(b, t, base_[j]).AddTo(&v, -1);
      add_row(v, 'L', 0);
    }
    if (p != kNone) {
      const Bit r = R(b, t, p);
      if (!r.is_const()) {
        Expr once;
        once.Add(col, 1);
        once.Add(r.col, 1);
        add_row(once, 'L', 1);
      }
    }
  }
  // Per stage: dependencies, then memory at each node run.
  for (NodeId t = 0; t < n_; ++t) {
    std::vector<NodeId> positions;
    for (NodeId k = 0; k < std::min(t, nf_); ++k) {
      if (b.r[t][k] >= 0) positions.push_back(k);
    }
    positions.push_back(t);
    // Dependencies: every input of a node run in this stage is written in it or kept.
    for (NodeId k : positions) {
      const TrainingNode& node = g_.node(k);
      for (TensorId j : node.inputs) {
        if (kind_[j] == Kind::kPersistent) continue;
        Expr e;
        R(b, t, k).AddTo(&e, 1);
        const NodeId p = g_.tensor(j).producer;
        if (p != kNone) R(b, t, p).AddTo(&e, -1);
        S(b, t, j).AddTo(&e, -1);
        CHECK(!(e.terms.empty() && e.constant > 0))
            << "stage " << t << ": '" << node.name << "' cannot read '" << g_.tensor(j).name << "'";
        add_row(e, 'L', 0);
      }
    }
    // FREE[b][k]: base tensor b dies after position k of this stage (continuous; at most the
    // product R[k] (1 - S[t+1][b]) prod over later readers c run here (1 - R[c])).
    std::map<std::pair<NodeId, TensorId>, int32_t> free;
    auto free_col = [&](NodeId k, TensorId base) -> int32_t {
      auto it = free.find({k, base});
      if (it != free.end()) return it->second;
      int32_t col = -1;
      const Bit keep = S(b, t + 1, base);
      const bool read_at_stage_node =
          k != t && std::binary_search(users_[base].begin(), users_[base].end(), t);
      const Bit rk = R(b, t, k);
      if (!(keep.is_const() && keep.value == 1) && !read_at_stage_node &&
          !(rk.is_const() && rk.value == 0)) {
        col = add_col(0, 1, 0, false);
        Expr e;
        e.Add(col, 1);
        rk.AddTo(&e, -1);
        add_row(e, 'L', 0);
        if (!keep.is_const()) {
          Expr f;
          f.Add(col, 1);
          f.Add(keep.col, 1);
          add_row(f, 'L', 1);
        }
        for (NodeId c : users_[base]) {
          if (c <= k || c >= t) continue;
          const Bit rc = R(b, t, c);
          if (rc.is_const()) continue;
          Expr f;
          f.Add(col, 1);
          f.Add(rc.col, 1);
          add_row(f, 'L', 1);
        }
      }
      free[{k, base}] = col;
      return col;
    };
    // Constant part of what the stage starts with.
    Expr start;
    start.constant = static_cast<double>(persistent_units_);
    for (TensorId j = 0; j < static_cast<TensorId>(g_.tensors().size()); ++j) {
      if (base_[j] != j || is_scratch_[j] || kind_[j] == Kind::kPersistent) continue;
      S(b, t, j).AddTo(&start, static_cast<double>(units_[j]));
    }
    int32_t previous_v = -1;
    NodeId previous_k = kNone;
    for (NodeId k : positions) {
      const TrainingNode& node = g_.node(k);
      const Bit rk = R(b, t, k);
      // V: memory with k's outputs written, before anything dies after it.
      const int32_t v = add_col(0, 1e300, 0, false);
      Expr e;
      e.Add(v, 1);
      if (previous_v < 0) {
        for (const auto& [c, coef] : start.terms) e.Add(c, -coef);
        e.constant -= start.constant;
      } else {
        e.Add(previous_v, -1);
        // What dies after the previous run: its outputs and inputs no later run reads.
        std::vector<TensorId> touched;
        for (TensorId j : g_.node(previous_k).inputs) touched.push_back(base_[j]);
        for (TensorId j : g_.node(previous_k).outputs) touched.push_back(base_[j]);
        std::sort(touched.begin(), touched.end());
        touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
        for (TensorId base : touched) {
          if (kind_[base] == Kind::kPersistent || kind_[base] == Kind::kFixed) continue;
          if (base == base_[g_.loss()]) continue;
          const int32_t f = free_col(previous_k, base);
          if (f >= 0) e.Add(f, static_cast<double>(units_[base]));
        }
      }
      uint64_t written = 0;
      for (size_t o = 0; o < node.outputs.size(); ++o) {
        const TensorId j = node.outputs[o];
        if (base_[j] == j) written += units_[j];
      }
      rk.AddTo(&e, -static_cast<double>(written));
      add_row(e, 'E', 0);
      // The peak at this run: minus outputs written in place, plus scratch.
      Expr peak;
      peak.Add(v, 1);
      if (node.scratch != kNone) {
        rk.AddTo(&peak, static_cast<double>(AlignUp(g_.tensor(node.scratch).bytes, unit_) / unit_));
      }
      if (k < nf_) {
        // A forward node shares only its output 0 in place: with any input that dies here.
        Expr share;
        std::vector<TensorId> candidates;
        for (const auto& [o, i] : node.inplace) {
          const TensorId in = base_[node.inputs[i]];
          const TensorId out = node.outputs[o];
          const bool viewed =
              std::any_of(node.views.begin(), node.views.end(),
                          [&](const std::pair<int, int>& p) { return p.first == o; });
          if (o != 0 || viewed || base_[out] != out || units_[out] != units_[in]) continue;
          if (kind_[in] == Kind::kPersistent || kind_[in] == Kind::kInput) continue;
          if (std::find(candidates.begin(), candidates.end(), in) != candidates.end()) continue;
          candidates.push_back(in);
        }
        std::vector<int32_t> frees;
        for (TensorId in : candidates) {
          if (kind_[in] == Kind::kFixed) continue;
          const int32_t f = free_col(k, in);
          if (f >= 0) frees.push_back(f);
        }
        if (!frees.empty()) {
          const int32_t x = add_col(0, 1, 0, false);
          Expr cap;
          cap.Add(x, 1);
          for (int32_t f : frees) cap.Add(f, -1);
          add_row(cap, 'L', 0);
          peak.Add(x, -static_cast<double>(units_[node.outputs[0]]));
        }
      } else {
        // Other nodes share over gradients, whose lifetimes are fixed: Headroom's walk, here.
        std::vector<TensorId> taken;
        std::vector<bool> done(node.outputs.size(), false);
        for (const auto& [o, i] : node.inplace) {
          const TensorId in = base_[node.inputs[i]];
          const TensorId out = node.outputs[o];
          const bool viewed =
              std::any_of(node.views.begin(), node.views.end(),
                          [&](const std::pair<int, int>& p) { return p.first == o; });
          if (done[o] || viewed || base_[out] != out || kind_[in] != Kind::kFixed) continue;
          const Bit keep = S(b, t + 1, in);
          const bool dies = keep.is_const() && keep.value == 0 && in != base_[g_.loss()];
          if (!dies || std::find(taken.begin(), taken.end(), in) != taken.end()) continue;
          done[o] = true;
          taken.push_back(in);
          peak.constant -= static_cast<double>(std::min(units_[out], units_[in]));
        }
      }
      if (least_peak) {
        peak.Add(z, -1);
        add_row(peak, 'L', 0);
      } else {
        add_row(peak, 'L', budget_units);
      }
      previous_v = v;
      previous_k = k;
    }
  }
  std::vector<CoinBigIndex> starts = {0};
  std::vector<int> index;
  std::vector<double> value;
  for (const auto& entries : column_entries) {
    for (const auto& [row, v] : entries) {
      index.push_back(row);
      value.push_back(v);
    }
    starts.push_back(static_cast<CoinBigIndex>(index.size()));
  }
  b.model = Cbc_newModel();
  Cbc_loadProblem(b.model, b.num_cols, b.num_rows, starts.data(), index.data(), value.data(),
                  col_lower.data(), col_upper.data(), objective.data(), row_lower.data(),
                  row_upper.data());
  for (int32_t c : integers) Cbc_setInteger(b.model, c);
  return built;
}

void RematOracle::Program::StartValues(const Built& built, const RecomputeSchedule& schedule,
                                       std::vector<int>* cols, std::vector<double>* values) const {
  std::vector<NodeRun> runs = Runs(g_, schedule).value();
  std::vector<Instance> inst;
  std::vector<std::vector<int32_t>> reads;
  Simulate(g_, times_, runs, unit_, &inst, &reads);
  std::map<std::pair<NodeId, TensorId>, double> value;
  for (const auto& [key, col] : built.s) value[key] = 0;
  for (NodeId t = 0; t < n_; ++t) {
    for (NodeId k = 0; k < nf_; ++k) {
      if (built.r[t][k] >= 0) value[{t, -1 - k}] = 0;
    }
  }
  for (const NodeRun& run : runs) {
    if (run.rerun) value[{run.stage, -1 - run.node}] = 1;
  }
  // A copy is kept into every stage after the one that writes it, through its last read.
  for (const Instance& i : inst) {
    const NodeId from =
        i.first == 0 && g_.tensor(i.tensor).producer == kNone ? 0 : runs[i.first].stage;
    const NodeId to = runs[i.last].stage;
    for (NodeId t = from + 1; t <= to; ++t) {
      for (TensorId j : {i.tensor, base_[i.tensor]}) {
        if (built.s.count({t, j})) value[{t, j}] = 1;
      }
    }
  }
  for (const auto& [key, v] : value) {
    const auto [t, j] = key;
    const int32_t col = j < 0 ? built.r[t][-1 - j] : built.s.at(key);
    cols->push_back(col);
    values->push_back(v);
  }
}

RecomputeSchedule RematOracle::Program::ScheduleOf(const Built& built,
                                                   const double* solution) const {
  RecomputeSchedule schedule;
  schedule.recompute.resize(n_);
  for (NodeId t = 0; t < n_; ++t) {
    for (NodeId k = 0; k < nf_; ++k) {
      if (built.r[t][k] >= 0 && solution[built.r[t][k]] > 0.5) schedule.recompute[t].push_back(k);
    }
  }
  return schedule;
}

// ---- The oracle -----------------------------------------------------------------------------

RematOracle::RematOracle(const TrainingGraph& graph, const CostModel& cost,
                         const OracleOptions& options)
    : graph_(graph), cost_(cost), options_(options) {}

RematOracle::~RematOracle() = default;

uint64_t RematOracle::persistent_bytes() const { return program_->persistent_bytes(); }

absl::StatusOr<std::unique_ptr<RematOracle>> RematOracle::Create(const TrainingGraph& graph,
                                                                 const CostModel& cost,
                                                                 const OracleOptions& options) {
  if (graph.inference()) {
    return absl::InvalidArgumentError("the recompute oracle needs a training graph, not inference");
  }
  const int32_t nf = CountForwardNodes(graph);
  if (nf > options.max_forward_nodes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the recompute oracle takes at most ", options.max_forward_nodes,
        " forward nodes (OracleOptions::max_forward_nodes); this graph has ", nf,
        ": its program would have about ", int64_t{nf} * static_cast<int64_t>(graph.nodes().size()),
        " binaries, beyond what CBC solves"));
  }
  // The node order must be an execution order (it is Headroom's plain schedule).
  for (NodeId k = 0; k < static_cast<NodeId>(graph.nodes().size()); ++k) {
    for (TensorId t : graph.node(k).inputs) {
      if (graph.tensor(t).producer >= k) {
        return absl::InvalidArgumentError(absl::StrCat("node '", graph.node(k).name, "' reads '",
                                                       graph.tensor(t).name,
                                                       "' before it is written"));
      }
    }
  }
  std::unique_ptr<RematOracle> oracle(new RematOracle(graph, cost, options));
  oracle->program_ =
      std::make_unique<Program>(graph, TimeNodes(graph, cost), options.alignment_bytes);
  ASSIGN_OR_RETURN(oracle->plain_, Evaluate(graph, oracle->program_->times(), RecomputeSchedule{},
                                            options.alignment_bytes));
  return oracle;
}

absl::StatusOr<OracleResult> RematOracle::Solve(uint64_t budget_bytes) { return Run(budget_bytes); }

absl::StatusOr<OracleResult> RematOracle::LeastPeak() { return Run(std::nullopt); }

absl::StatusOr<OracleResult> RematOracle::Run(std::optional<uint64_t> budget_bytes) {
  const absl::Time begin = absl::Now();
  const uint64_t unit = std::max<uint64_t>(options_.alignment_bytes, 1);
  std::unique_ptr<Program::Built> built = program_->Build(budget_bytes);
  Cbc_Model* m = built->model;
  Cbc_setLogLevel(m, options_.log_level);
  Cbc_setMaximumSeconds(m, options_.time_limit_seconds);
  Cbc_setParameter(m, "timeMode", "elapsed");  // Wall-clock, not CPU, seconds.
  Cbc_setAllowableFractionGap(m, options_.relative_gap);
  Cbc_setAllowableGap(m, budget_bytes ? 1e-3 : 0.25);
  // Start from the best schedule offered that fits.
  std::vector<RecomputeSchedule> starts = {RecomputeSchedule{}};
  if (options_.start) starts.push_back(*options_.start);
  std::optional<RecomputeSchedule> start;
  double start_seconds = 1e300;
  for (const RecomputeSchedule& s : starts) {
    absl::StatusOr<ScheduleCost> c =
        Evaluate(graph_, program_->times(), s, options_.alignment_bytes);
    if (!c.ok()) return c.status();
    const bool fits = !budget_bytes || c->peak_bytes <= *budget_bytes;
    const double key = budget_bytes ? c->step_seconds : static_cast<double>(c->peak_bytes);
    if (fits && key < start_seconds) {
      start = s;
      start_seconds = key;
    }
  }
  if (start) {
    std::vector<int> cols;
    std::vector<double> values;
    program_->StartValues(*built, *start, &cols, &values);
    Cbc_setMIPStartI(m, static_cast<int>(cols.size()), cols.data(), values.data());
  }
  Cbc_solve(m);

  OracleResult result;
  result.plain_step_seconds = plain_.step_seconds;
  result.num_variables = built->num_cols;
  result.num_binaries = built->num_binaries;
  result.num_constraints = built->num_rows;
  result.proven_infeasible = Cbc_isProvenInfeasible(m) != 0;
  const double* best = Cbc_bestSolution(m);
  const double bound = Cbc_getBestPossibleObjValue(m);
  if (budget_bytes) {
    result.bound_step_seconds = plain_.step_seconds + std::max(bound, 0.0) * 1e-6;
    result.bound_overhead_ratio = result.bound_step_seconds / plain_.step_seconds;
  } else {
    const double units = std::ceil(bound - 0.5 - 1e-6);
    result.bound_peak_bytes = static_cast<uint64_t>(std::max(units, 0.0)) * unit;
  }
  if (best != nullptr && !result.proven_infeasible) {
    result.feasible = true;
    result.proven_optimal = Cbc_isProvenOptimal(m) != 0;
    result.schedule = program_->ScheduleOf(*built, best);
    ASSIGN_OR_RETURN(const ScheduleCost c, Evaluate(graph_, program_->times(), result.schedule,
                                                    options_.alignment_bytes));
    result.step_seconds = c.step_seconds;
    result.peak_bytes = c.peak_bytes;
    result.overhead_ratio = c.step_seconds / plain_.step_seconds;
    if (budget_bytes && c.peak_bytes > *budget_bytes) {
      return absl::InternalError(absl::StrCat(
          "the oracle's schedule peaks at ", c.peak_bytes, " bytes (stage ", c.peak_stage,
          ", node '", graph_.node(c.peak_node).name, "') over the budget of ", *budget_bytes,
          ": the program's memory accounting is wrong"));
    }
    if (!budget_bytes && c.peak_bytes > Cbc_getObjValue(m) * unit + unit) {
      return absl::InternalError(absl::StrCat("the oracle's least-peak schedule peaks at ",
                                              c.peak_bytes, " bytes, above the program's ",
                                              Cbc_getObjValue(m) * unit));
    }
    if (result.proven_optimal) {
      if (budget_bytes) {
        result.bound_step_seconds = std::min(result.bound_step_seconds, result.step_seconds);
        result.bound_overhead_ratio = result.bound_step_seconds / plain_.step_seconds;
      } else {
        result.bound_peak_bytes = std::min(result.bound_peak_bytes, result.peak_bytes);
      }
    }
    std::vector<int32_t> reruns(graph_.nodes().size(), 0);
    for (const auto& stage : result.schedule.recompute) {
      for (NodeId k : stage) ++reruns[k];
    }
    for (NodeId k = 0; k < program_->num_forward(); ++k) {
      for (TensorId t : graph_.node(k).outputs) {
        result.fates.push_back({t, graph_.tensor(t).name, graph_.tensor(t).bytes, reruns[k]});
      }
    }
    std::sort(result.fates.begin(), result.fates.end(),
              [](const TensorFate& a, const TensorFate& b) { return a.tensor < b.tensor; });
  }
  result.solve_seconds = absl::ToDoubleSeconds(absl::Now() - begin);
  return result;
}

std::string OracleResult::DebugString() const {
  using graph::HumanBytes;
  std::string out;
  if (!feasible) {
    absl::StrAppendFormat(&out, "no schedule found (%s) in %.2f s\n",
                          proven_infeasible ? "proven infeasible" : "time limit", solve_seconds);
    return out;
  }
  absl::StrAppendFormat(&out, "%-24s %s\n", "status", proven_optimal ? "optimal" : "best found");
  absl::StrAppendFormat(&out, "%-24s %.6f s (plain %.6f s): overhead %.4f, bound %.4f\n",
                        "step time", step_seconds, plain_step_seconds, overhead_ratio,
                        bound_overhead_ratio);
  absl::StrAppendFormat(&out, "%-24s %s (%d)\n", "peak", HumanBytes(peak_bytes), peak_bytes);
  if (bound_peak_bytes > 0) {
    absl::StrAppendFormat(&out, "%-24s %s (%d)\n", "peak bound", HumanBytes(bound_peak_bytes),
                          bound_peak_bytes);
  }
  absl::StrAppendFormat(&out, "%-24s %d re-runs\n", "schedule", schedule.num_recomputes());
  absl::StrAppendFormat(&out, "%-24s %d columns (%d binary), %d rows, %.2f s\n", "program",
                        num_variables, num_binaries, num_constraints, solve_seconds);
  for (const TensorFate& f : fates) {
    if (f.recomputed == 0) continue;
    absl::StrAppendFormat(&out, "  %-40s %12s recomputed %d x\n", f.name, HumanBytes(f.bytes),
                          f.recomputed);
  }
  return out;
}

}  // namespace headroom::planner
