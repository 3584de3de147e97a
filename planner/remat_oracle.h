// The recompute oracle: the exact least-time recompute schedule of a small training step under a
// memory budget, as a mixed-integer program (Checkmate: Jain et al., MLSys 2020) solved by
// COIN-OR CBC, to measure how far Headroom's section search is from the best any
// recompute-only schedule can do. A test and benchmark tool: its size grows as (nodes x forward
// nodes), and CBC proves optimality within seconds only on graphs of about 10 to 30 forward
// nodes (docs/sections.md, "The oracle", has the figures).
//
// The model. Stage t runs node t of the training graph (in node order: forward, loss seed,
// backward, accumulations, updates), and before it, in node order, any forward nodes chosen
// to run again (R[t][k], binary; a forward node may run in any number of later stages). A
// tensor written by a forward node (or a graph input) crosses from stage t-1 into stage t only
// if kept (S[t][j], binary), and can be kept only if it was written or kept in stage t-1.
// Tensors written by other nodes (gradients) live from their write to their last reader, as
// in Headroom. Memory is counted at every node run, with Headroom's own accounting:
// persistent tensors throughout, each tensor from its write to its last reader in the stage
// (FREE variables, Checkmate's linearisation), sizes rounded up to the alignment, views
// sharing their input's bytes, an output taking an input's bytes in place where Headroom's
// sharing would, a node's kernel scratch while it runs, and the loss kept to the end. The
// objective is the seconds of the re-run nodes (CostModel::NodeSeconds, as Headroom's
// re-forward costs them), so (plain step + objective) / plain step is the overhead.
//
// EvaluateRecomputeSchedule() costs any schedule by simulating it (no solver): its peak is
// ScheduledLowerBound() of the same schedule planned by Headroom (the aligned lower bound of
// its arena), so on the plain step it is Headroom's aligned lower bound, and on a sectioned
// step (RecomputeScheduleOf) that of the expanded step, which PlanScheduledGraph's arena
// meets or exceeds.
//
// Deciding only; nothing runs. Create() once, then Solve() or LeastPeak() any number of
// times. Keeps references to the graph and the cost model, which must outlive it.
// Thread-compatible.
#ifndef HEADROOM_PLANNER_REMAT_ORACLE_H_
#define HEADROOM_PLANNER_REMAT_ORACLE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/cost_model.h"
#include "planner/offset_assigner.h"
#include "planner/sections.h"
#include "planner/training_graph.h"

namespace headroom::planner {

// Which forward nodes run again, and where.
struct RecomputeSchedule {
  // Indexed by stage (a node of the training graph): the forward nodes re-run in that stage,
  // before the stage's own node, in increasing order, each before the stage's node. Empty
  // (or all lists empty): the plain step.
  std::vector<std::vector<NodeId>> recompute;

  // Returns the number of re-runs in all.
  int64_t num_recomputes() const;
};

// What a schedule costs, exactly as Headroom counts it.
struct ScheduleCost {
  // The compute stream's time: every node once, plus every re-run.
  double step_seconds = 0;
  // The largest sum of live buffer bytes at one node run (buffers rounded up to the
  // alignment): ScheduledLowerBound of the schedule as Headroom would plan it.
  uint64_t peak_bytes = 0;
  // Stage and node (the stage's own node or a re-run) where the peak is first reached.
  NodeId peak_stage = 0;
  NodeId peak_node = 0;
};

// Costs schedules of one graph (EvaluateRecomputeSchedule, with the node times computed once).
// Keeps a reference to `graph`, which must outlive it. Immutable after construction.
class ScheduleEvaluator {
 public:
  ScheduleEvaluator(const TrainingGraph& graph, const CostModel& cost,
                    uint64_t alignment_bytes = kDefaultAlignmentBytes);
  ~ScheduleEvaluator();

  // Returns what EvaluateRecomputeSchedule(graph, cost, schedule, alignment_bytes) returns.
  absl::StatusOr<ScheduleCost> Evaluate(const RecomputeSchedule& schedule) const;

  // Returns the seconds of running forward node `k` again.
  double rerun_seconds(NodeId k) const;

 private:
  struct Times;
  const TrainingGraph& graph_;
  const uint64_t alignment_bytes_;
  std::unique_ptr<const Times> times_;
};

// Returns the cost of running `graph` with `schedule`, or InvalidArgument for a schedule that
// re-runs a node that is not a forward node, out of order, at or after its stage, or reads a
// tensor no earlier node of the schedule wrote. A re-run node reads the latest copy of each
// input and writes fresh copies of its outputs, as a Headroom re-forward does, and costs what
// Headroom's re-forward does: the forward node's time (NodeCosts).
absl::StatusOr<ScheduleCost> EvaluateRecomputeSchedule(
    const TrainingGraph& graph, const CostModel& cost, const RecomputeSchedule& schedule,
    uint64_t alignment_bytes = kDefaultAlignmentBytes);

// Returns the schedule of a sectioned step of `graph` (ExpandSections): each re-forward node
// in the stage of the backward-phase node after it. InvalidArgument if the step offloads
// (the oracle models recompute only) or is not an expansion of `graph`. With
// SectionCuts::keep, a kept output of a node that runs again for another output is read from
// the re-run here, not from the kept copy as in the step.
absl::StatusOr<RecomputeSchedule> RecomputeScheduleOf(const TrainingGraph& graph,
                                                      const SectionedStep& step);

struct OracleOptions {
  // CBC's wall-clock limit per solve. Default 5 seconds.
  double time_limit_seconds = 5;
  // CBC stops once its best is within this fraction of its bound. Default 1e-6.
  double relative_gap = 1e-6;
  // Create() returns InvalidArgument above this many forward nodes. Default 64.
  int32_t max_forward_nodes = 64;
  // Every size is rounded up to this, as Headroom's arena does. Default 256.
  uint64_t alignment_bytes = kDefaultAlignmentBytes;
  // A schedule CBC starts from (a MIP start) if it fits the budget, e.g. a sectioned step's
  // (RecomputeScheduleOf); the plain step is always offered. Default none.
  std::optional<RecomputeSchedule> start;
  // CBC's log level (0: silent). Default 0.
  int log_level = 0;
};

// What happens to one tensor a forward node writes.
struct TensorFate {
  TensorId tensor = kNone;
  std::string name;
  uint64_t bytes = 0;
  // Times its node runs again (0: the forward's copy is kept to its last reader).
  int32_t recomputed = 0;
};

// One solve of the program.
struct OracleResult {
  // Whether CBC found a schedule that fits, and whether it proved it the best.
  bool feasible = false;
  bool proven_optimal = false;
  // CBC proved that no schedule fits.
  bool proven_infeasible = false;
  // The plain step's time (no re-runs).
  double plain_step_seconds = 0;
  // The schedule found, its exact time and peak (EvaluateRecomputeSchedule), its overhead.
  RecomputeSchedule schedule;
  double step_seconds = 0;
  uint64_t peak_bytes = 0;
  double overhead_ratio = 0;
  // CBC's bound: no schedule within the budget is faster (Solve), or has a smaller peak
  // (LeastPeak; bound_peak_bytes).
  double bound_step_seconds = 0;
  double bound_overhead_ratio = 0;
  uint64_t bound_peak_bytes = 0;
  // Per tensor written by a forward node, in id order.
  std::vector<TensorFate> fates;
  double solve_seconds = 0;
  int32_t num_variables = 0;
  int32_t num_binaries = 0;
  int32_t num_constraints = 0;

  // Returns a summary for people: figures, then each re-run tensor.
  std::string DebugString() const;
};

class RematOracle {
 public:
  // Returns the oracle of `graph`, or InvalidArgument for an inference graph or one with more
  // than options.max_forward_nodes forward nodes.
  static absl::StatusOr<std::unique_ptr<RematOracle>> Create(const TrainingGraph& graph,
                                                             const CostModel& cost,
                                                             const OracleOptions& options);

  // Returns the least-time schedule whose peak (as EvaluateRecomputeSchedule counts it) is at
  // most `budget_bytes`, or what CBC found in its time limit (`feasible` false if nothing:
  // `proven_infeasible` says whether none exists). Internal if CBC fails, or if the schedule
  // it returns does not fit when simulated (a bug in the program).
  absl::StatusOr<OracleResult> Solve(uint64_t budget_bytes);

  // Returns the schedule with the least peak at any time, as Solve() does otherwise.
  absl::StatusOr<OracleResult> LeastPeak();

  // Returns the plain step's cost (no re-runs).
  const ScheduleCost& plain() const { return plain_; }
  // Returns the bytes of parameters, buffers and optimizer state (aligned): in every peak.
  uint64_t persistent_bytes() const;

  ~RematOracle();

 private:
  class Program;
  RematOracle(const TrainingGraph& graph, const CostModel& cost, const OracleOptions& options);
  absl::StatusOr<OracleResult> Run(std::optional<uint64_t> budget_bytes);

  const TrainingGraph& graph_;
  const CostModel& cost_;
  const OracleOptions options_;
  ScheduleCost plain_;
  std::unique_ptr<Program> program_;
};

}  // namespace headroom::planner

#endif  // HEADROOM_PLANNER_REMAT_ORACLE_H_
