// The search: under a device-memory budget, the sectioned step with the least predicted time
// whose exact peak fits.
//
// Candidates come from a dynamic program over cut positions (each section's cached inputs
// kept on the device or offloaded) run at a grid of budgets on a section-model estimate of
// memory, plus three baselines: no sections, Chen's sqrt(n) equal split, and a cut at every
// layer. Every candidate's time is predicted on its expanded schedule; its peak is the
// arena Planner I lays out for that schedule, never the estimate. The pool does not depend on
// the budget asked for, so a larger budget never gives a slower plan; only a budget below
// every candidate grows it, by a local descent in memory (SectionSearch::Plan).
#ifndef HEADROOM_PLANNER_SECTION_SEARCH_H_
#define HEADROOM_PLANNER_SECTION_SEARCH_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/cost_model.h"
#include "planner/memory_planner.h"
#include "planner/sections.h"
#include "planner/training_graph.h"
#include "util/cancellation.h"

namespace headroom::planner {

struct SearchOptions {
  // Let cached section inputs go to host memory. Default true.
  bool allow_offload = true;
  // Count a candidate's host pool (its offloaded tensors' slots) against the budget beside
  // its arena: where host memory is the device's own (the CPU backend), offloading frees
  // nothing, and a budget then bounds all a plan holds. Default false (a GPU's host memory
  // is separate).
  bool host_pool_in_budget = false;
  // Budgets at which the dynamic program runs, geometric between the estimate's smallest
  // and largest peaks, for each of recompute alone and recompute with offload. Default 16.
  int grid_points = 16;
  // On graphs with at most this many forward nodes, also plan every candidate's neighbours
  // (one cut removed or moved by one position). Default 64.
  int32_t refine_max_forward_nodes = 64;
  // Arena alignment. Default 256.
  uint64_t alignment_bytes = kDefaultAlignmentBytes;
  // Refine the fastest candidate that fits each budget Plan() is asked for by local moves,
  // each planned exactly: keep a tensor its section recomputes, keep an offloaded tensor on
  // the device, add, drop or move a cut. Default true.
  bool refine = true;
  // Exact memory plans one refinement may make. Default 200.
  int refine_max_plans = 200;
  // Work one refinement may do, in nodes of expanded steps: each move predicted counts its
  // expanded step's nodes, each exact plan eight times as many. Bounds its time on large
  // graphs (on the 2-core build machine about 1 to 4 us a unit); a step too large for 64
  // expansions within it is not refined. Default 1,000,000.
  int64_t refine_max_work = 1000000;
  // When no candidate fits a budget even after the descent in cuts, descend further with
  // inner cuts (SectionCuts::inner_cuts: nested sections, nodes re-run more than once, just
  // before the chunk of backward that reads them) to peaks one re-forward per section cannot
  // reach. Plans with inner cuts are chosen only for budgets no plan without them meets, and
  // join the frontier only below the smallest of those, so every other answer is as it was
  // without them. Recompute only. Default true.
  bool nested = true;
  // Work the nested descent may do, in nodes of the expanded steps it predicts (on the 2-core
  // build machine about 0.1 to 0.3 us a unit). Default 4,000,000.
  int64_t nested_max_work = 4000000;
  // Every candidate keeps its optimizer state on the host and updates there
  // (SectionCuts::optimizer_state_on_host). Default false. PlanWithPlacement() searches
  // both placements.
  bool optimizer_state_on_host = false;
  // Every candidate keeps its parameters on the host between uses
  // (SectionCuts::parameters_on_host; needs optimizer_state_on_host). Default false.
  bool parameters_on_host = false;
  // Threads the pool's dynamic program runs on: with 2 or more, its pass with offload runs
  // beside its pass for recompute alone. The pool is the same either way. Default 1: on the
  // shared 2-core build machine a second thread bought no wall-clock time and cost about 6%
  // more CPU (docs/sections.md, "Search time"); on an idle machine it saves up to the
  // shorter pass.
  int search_threads = 1;
  // Search the slower way the faster one must agree with, for tests: the dynamic program as
  // it was before it was made faster (SolveReference), run in full at every budget. The
  // plans, pool and frontier are the same either way. Default false.
  bool reference_search = false;
  // Checked between pieces of work (each row of the dynamic program, each candidate planned,
  // each move of the descent): Create(), Plan(), Frontier() and the rest return its status
  // once it fails. Borrowed; it must outlive the search. Default none: no limit.
  const util::CancellationToken* cancel = nullptr;
};

// Returns SearchOptions::host_pool_in_budget for a plan under `host_memory` on a backend
// whose host memory is (`host_is_device_memory`) or is not its device memory.
bool HostPoolInBudget(proto::HostMemory host_memory, bool host_is_device_memory);

// One candidate, planned.
struct SectionPlan {
  // "search", "refined", "nested" (inner cuts, from DescendNested), "no_sections", "sqrt_n"
  // or "every_layer".
  std::string strategy;
  SectionCuts cuts;
  // The expanded step and its exact memory plan.
  std::shared_ptr<const SectionedStep> step;
  std::shared_ptr<const MemoryPlan> memory;
  // The arena of `memory`: the predicted peak of device memory.
  uint64_t peak_bytes = 0;
  // Host memory for its offloaded tensors (HostPoolBytes of `step`).
  uint64_t host_pool_bytes = 0;
  double step_seconds = 0;
  // step_seconds over that of the plain step (no sections).
  double overhead_ratio = 0;
  // Reversible blocks rebuilt in the backward pass (indexes into the forward graph's
  // reversible_blocks(), increasing; planner/reversible_search.h); empty: all kept.
  std::vector<int32_t> rebuilt_blocks;

  // Returns a table for people: figures, then each section with its cached inputs.
  std::string DebugString() const;
};

// A point of the memory/time trade-off.
struct TradeOffPoint {
  // What the plan holds against a budget: its arena, and its host pool too with
  // SearchOptions::host_pool_in_budget.
  uint64_t peak_bytes = 0;
  double step_seconds = 0;
  std::string strategy;
  int32_t num_sections = 0;
  uint64_t offloaded_bytes = 0;
  // Whether its optimizer state lives on the host (planner/placement_search.h marks it).
  bool optimizer_state_on_host = false;
  // Whether its parameters live on the host between uses (placement_search.h marks it).
  bool parameters_on_host = false;
  // Whether its step computes in bf16 mixed precision (plan_request.cc marks it).
  bool bf16 = false;
};

// Plans one training graph under budgets. Create() once (it builds the candidate pool), then
// Plan() for any number of budgets and Frontier(). Keeps references to `graph` and `cost`,
// which must outlive it. Thread-compatible: Plan() fills a cache.
class SectionSearch {
 public:
  // Returns the search over `graph` (a training graph), or InvalidArgument for an
  // inference graph, or the status of options.cancel once it fails.
  static absl::StatusOr<std::unique_ptr<SectionSearch>> Create(const TrainingGraph& graph,
                                                               const CostModel& cost,
                                                               const SearchOptions& options);

  // Returns the candidate with the least predicted step time whose exact peak is at most
  // `budget_bytes`, or FailedPrecondition stating the smallest budget any candidate fits and
  // what its peak is made of. When no candidate of the pool fits, a local descent in memory
  // (Descend) adds smaller ones first, with inner cuts (SearchOptions::nested) last. With
  // SearchOptions::refine, the fastest candidate without inner cuts that fits is then
  // improved by local moves (Refine), and what they find joins the pool, so a later Plan()
  // for a larger budget is never slower.
  absl::StatusOr<SectionPlan> Plan(uint64_t budget_bytes);

  // Returns the plain step (no sections).
  absl::StatusOr<SectionPlan> Unconstrained();

  // Returns the Pareto frontier of (peak, time) over all candidates (Descend()'s too), from
  // the largest peak down to the smallest, each point faster than every point after it. With
  // SearchOptions::refine, each point of the pool's frontier is refined first (at its peak,
  // the points sharing one refinement's work).
  absl::StatusOr<std::vector<TradeOffPoint>> Frontier();

  // Returns each baseline's point: "no_sections", "sqrt_n", "every_layer".
  absl::StatusOr<std::vector<TradeOffPoint>> Baselines();

  // Returns the smallest exact peak of any candidate (offloading where allowed).
  absl::StatusOr<uint64_t> MinimumPeakBytes();

  // Number of distinct candidates in the pool.
  int num_candidates() const;

  ~SectionSearch();

 private:
  struct Candidate;
  class Estimator;

  SectionSearch(const TrainingGraph& graph, const CostModel& cost, const SearchOptions& options);
  absl::Status BuildPool();
  // Adds the candidate of `cuts` offloading what crosses each of `offload_cuts` (unless the
  // last section reads it too), if it is new and expands.
  void AddCandidate(const std::string& strategy, const std::vector<int32_t>& cuts,
                    const std::vector<int32_t>& offload_cuts);
  // Returns candidate `index` with its exact memory plan (planned once).
  absl::StatusOr<SectionPlan> Evaluate(int index);
  // Returns candidate `index`'s point of the trade-off.
  absl::StatusOr<TradeOffPoint> Point(int index);
  // Returns the aligned lower bound of candidate `index`'s arena (taken when it was added).
  uint64_t LowerBound(int index) const;
  // Fills what `c` keeps of its expanded `step` (its time, size, lower bound and host pool),
  // so that the step itself need not be held until it is planned exactly.
  void Summarize(const SectionedStep& step, Candidate* c) const;
  // Returns the candidate with the smallest exact peak (after Descend()), its host pool
  // included with host_pool_in_budget.
  absl::StatusOr<int> Smallest();
  // Returns what candidate `index` holds against a budget: its arena's lower bound, or its
  // exact arena once planned, plus its host pool with host_pool_in_budget.
  uint64_t BudgetLowerBound(int index);
  uint64_t BudgetBytes(const SectionPlan& plan) const;
  absl::Status Infeasible(uint64_t budget_bytes);
  // Walks downhill in memory from the candidate with the smallest lower bound, recompute
  // only: each round takes the first move (a cut moved by up to kDescentReach positions,
  // removed, or added) whose lower bound is smaller, and adds its cuts to the pool, until no
  // move helps. Guided by lower bounds, not plans; run once, for budgets no candidate of the
  // pool meets. The status of options_.cancel (checked at each move) once it fails.
  absl::Status Descend();
  // Walks on downhill from `cuts` (whose expanded step's lower bound is `bound`), recompute
  // only, over cuts and inner cuts: add, drop or move (by up to two) an inner cut, turn a cut
  // into an inner cut or back, drop, move (by one) or add a cut; each round takes the move
  // with the lowest lower bound (the first lower one on graphs of more than
  // refine_max_forward_nodes forward nodes) and adds it to the pool (strategy "nested", even
  // where the walk passes a plan without inner cuts), until none is lower or
  // SearchOptions::nested_max_work is spent (counting `work_done`, which it adds to).
  // Called by Descend() with SearchOptions::nested.
  absl::Status DescendNested(std::vector<int32_t> cuts, uint64_t bound, int64_t* work_done);
  // Returns the fastest candidate with inner cuts that fits `budget_bytes` and is faster than
  // `plan` (a plan with inner cuts may rarely be faster than the answer without them at a
  // larger budget: so a larger budget is never slower), else `plan`.
  absl::StatusOr<SectionPlan> FasterNested(SectionPlan plan, uint64_t budget_bytes);
  // Returns whether candidate `index` was found by DescendNested().
  bool Nested(int index) const;
  // Frontier() of the pool as it is.
  absl::StatusOr<std::vector<TradeOffPoint>> PoolFrontier();
  // Sorts by_time_ again after candidates were added.
  void SortByTime();
  struct Move;
  // Hill-climbs from candidate `start` (which fits `budget_bytes`) to faster plans that fit.
  // Each round predicts every move from the current plan (its time, and its lower bound),
  // chains the faster ones that could fit in order of time saved per byte added, each
  // applied on top of the last, and plans exactly the longest prefix of the chain that fits
  // (by bisection; else single moves). Stops when no move helps or a limit of SearchOptions
  // is reached. Returns the index of the fastest candidate found (added to the pool).
  absl::StatusOr<int> Refine(int start, uint64_t budget_bytes);
  // Returns the moves from `from` that can be faster: keep a tensor a re-run section
  // recomputes (or every output of one node at once), keep an offloaded tensor on the device, drop or move a cut by up to two
  // positions, add one (where a layer begins, on large graphs).
  std::vector<Move> Moves(const SectionCuts& from);
  // Returns `move` applied to `from`, or nothing where it does not apply.
  std::optional<SectionCuts> Apply(const SectionCuts& from, const Move& move);
  // Adds `cuts`, already expanded into `step`, to the pool unless it is there; returns its
  // index.
  int AddExpanded(const std::string& strategy, const SectionCuts& cuts,
                  std::shared_ptr<const SectionedStep> step);

  const TrainingGraph& graph_;
  const CostModel& cost_;
  const SearchOptions options_;
  const NodeCosts node_costs_;
  std::unique_ptr<Estimator> estimator_;
  std::vector<Candidate> pool_;
  // Indices into pool_, fastest first.
  std::vector<int> by_time_;
  bool descended_ = false;
  // Refine()'s answer by budget asked for, and what it learnt of each configuration it
  // predicted, by a key of its cuts: its time, and what it holds against a budget.
  std::map<uint64_t, int> refined_;
  // The work a refinement may do now (SearchOptions::refine_max_work, less for a frontier).
  int64_t work_limit_;
  struct Known {
    double step_seconds = 0;
    uint64_t budget_lower_bound = 0;
    // Exact, once planned; 0 until then.
    uint64_t budget_bytes = 0;
  };
  std::map<std::string, Known> known_;
};

// Returns the forward positions where "layers" begin: where the layer key of consecutive
// forward nodes changes. The key of a node is its name up to its first all-digit component
// ("layer1.0.conv1" -> "layer1.0", "h.3.attn.c_attn" -> "h.3"), else the first run of digits
// in its name ("fc12" -> "12"), else the whole name.
std::vector<int32_t> LayerCuts(const TrainingGraph& graph);

// Returns ceil-free equal cuts into round(sqrt(n)) sections of `num_forward` positions.
std::vector<int32_t> SqrtCuts(int32_t num_forward);

// Returns the least predicted step time over every set of cuts (no offload) whose exact
// peak fits `budget_bytes`, with its cuts, by enumerating all 2^(n-1) sets; for checking the
// search on small graphs. InvalidArgument when n exceeds `max_forward_nodes`; NotFound if
// none fits.
struct ExhaustiveResult {
  std::vector<int32_t> cuts;
  uint64_t peak_bytes = 0;
  double step_seconds = 0;
  int64_t evaluated = 0;
};
absl::StatusOr<ExhaustiveResult> ExhaustiveSearch(const TrainingGraph& graph,
                                                  const CostModel& cost, uint64_t budget_bytes,
                                                  int32_t max_forward_nodes = 22,
                                                  uint64_t alignment_bytes = kDefaultAlignmentBytes);

}  // namespace headroom::planner

#endif  // HEADROOM_PLANNER_SECTION_SEARCH_H_
