// The budgeted search for a graph with reversible blocks: per block, rebuild its activations
// in the backward pass (planner/reversible.h) or keep them, beside the section cuts, offload
// and optimizer placement that PlacementSearch already chooses.
//
// Rebuild sets: every block; all but one block in every k along each chain (k = 2, 3, 4: a
// kept block resets the rebuild error that grows along a chain); and the blocks that save the most
// activation bytes per second of rebuild first (the cheapest j blocks, for up to 6 values of j).
// Each set's step (ExpandReversible: the rebuild's extra forward of F and G and the two
// subtractions priced by the cost model) is itself a training graph, and the section search
// (PlacementSearch: cuts, offload, optimizer placement, each candidate planned exactly) runs
// over it, so cuts and offload combine with rebuilding; "every block kept" is the section
// search over the plain step (checkpointing alone).
//
// Plan(budget) takes the fastest plan that fits over all of them. The rebuild sets are
// visited in order of their uncut step time and a set's section search is built only when
// that time beats the best plan found so far (cuts only add time), so a roomy budget builds
// none; it is freed once asked (built again if a later call needs it), so planning holds
// about two searches at a time. The answer is never slower than rebuilding every block or
// checkpointing alone where those fit.
//
// Create() once, then Plan() for any number of budgets. Keeps references to the forward
// graph, the training graph and the cost model, which must outlive it. Thread-compatible:
// Plan() fills caches.
#ifndef HEADROOM_PLANNER_REVERSIBLE_SEARCH_H_
#define HEADROOM_PLANNER_REVERSIBLE_SEARCH_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "planner/cost_model.h"
#include "planner/placement_search.h"
#include "planner/section_search.h"
#include "planner/training_graph.h"
#include "proto/headroom.pb.h"

namespace headroom::planner {

// One rebuild candidate as planned, for people and benchmarks.
struct RebuildCandidate {
  // "rebuild_all", "keep_1_in_<k>" or "rebuild_cheapest_<j>".
  std::string name;
  // Indexes into forward.reversible_blocks(), increasing.
  std::vector<int32_t> rebuilt_blocks;
  double step_seconds = 0;
  // Its uncut step: the aligned lower bound of its arena; its exact arena once planned,
  // else 0.
  uint64_t lower_bound_bytes = 0;
  uint64_t peak_bytes = 0;
  // Whether its section search was ever built.
  bool searched = false;
  // The longest run of rebuilt blocks one after another along a chain (LongestRebuiltRun).
  int32_t longest_run = 0;
};

class ReversibleSearch {
 public:
  // Returns the search over training graph `graph` built from `forward` (which has at least
  // one reversible block), the section search with `options` over the placements `placement`
  // allows; InvalidArgument for a graph without reversible blocks or an inference graph, or
  // PlacementSearch::Create's error.
  static absl::StatusOr<std::unique_ptr<ReversibleSearch>> Create(const graph::Graph& forward,
                                                                  const TrainingGraph& graph,
                                                                  const CostModel& cost,
                                                                  const SearchOptions& options,
                                                                  proto::OptimizerState placement);

  // Returns the plain step (every block kept, no sections).
  absl::StatusOr<SectionPlan> Unconstrained() { return sections_->Unconstrained(); }

  // Returns the step with every block rebuilt and no cuts, planned.
  absl::StatusOr<SectionPlan> RebuildAll();

  // Returns the fastest plan whose budget bytes fit `budget_bytes`: a rebuild set with the
  // section search's plan over its step (SectionPlan::rebuilt_blocks not empty, strategy
  // "reversible" uncut, else "reversible+" the section search's strategy), or the section
  // search's plan with every block kept; FailedPrecondition naming the smallest budget any
  // plan fits when none does. With `keep_every` k > 0, only the rebuild sets that keep an
  // activation at least every k blocks along each chain (no run of k rebuilt blocks; the set
  // keep_1_in_k among them, added if missing): k = 1 keeps every block.
  absl::StatusOr<SectionPlan> Plan(uint64_t budget_bytes, int32_t keep_every = 0);

  // Returns the section search's plan for `budget_bytes`, every block kept (checkpointing
  // alone).
  absl::StatusOr<SectionPlan> PlanKeepingBlocks(uint64_t budget_bytes) {
    return sections_->Plan(budget_bytes);
  }

  // Returns the Pareto frontier over every section search (every block kept and each
  // rebuild set), largest peak first; a rebuild set's points are named "reversible:<set>:"
  // and the section search's strategy.
  absl::StatusOr<std::vector<TradeOffPoint>> Frontier();

  // Returns the section search's baselines and the step with every block rebuilt.
  absl::StatusOr<std::vector<TradeOffPoint>> Baselines();

  // Returns the smallest exact peak over every section search (each built).
  absl::StatusOr<uint64_t> MinimumPeakBytes();

  // Returns the rebuild candidates, fastest first, as planned so far.
  std::vector<RebuildCandidate> RebuildCandidates() const;

  // Number of candidates: every section search's built so far (released ones included).
  int num_candidates() const;

  ~ReversibleSearch();

 private:
  struct Candidate;

  ReversibleSearch(const graph::Graph& forward, const TrainingGraph& graph, const CostModel& cost,
                   const SearchOptions& options, proto::OptimizerState placement);
  // Adds the candidate rebuilding `blocks` (any order) unless it is in the pool.
  absl::Status Add(const std::string& name, std::vector<int32_t> blocks);
  absl::Status BuildPool();
  // Sorts the pool fastest first (by the uncut step's time).
  void SortPool();
  // Returns candidate `index`'s uncut step planned (its memory plan made once).
  absl::StatusOr<SectionPlan> Evaluate(int index);
  // Returns candidate `index`'s section search, built unless it is alive.
  absl::StatusOr<PlacementSearch*> SearchOf(int index);
  // Frees candidate `index`'s section search (counting its candidates): one lives at a time,
  // so what planning holds is about two searches' pools, not one per rebuild set.
  void Release(int index);
  // Returns `plan` of candidate `index`'s search marked as rebuilding its blocks.
  SectionPlan Marked(int index, SectionPlan plan) const;

  const graph::Graph& forward_;
  const TrainingGraph& graph_;
  const CostModel& cost_;
  const SearchOptions options_;
  const proto::OptimizerState placement_;
  std::unique_ptr<PlacementSearch> sections_;
  // Fastest first.
  std::vector<Candidate> pool_;
  double plain_step_seconds_ = 0;
  // Candidates of the section searches released.
  int released_candidates_ = 0;
};

// Chains: block b continues block b - 1's chain when its inputs (x1, x2) are b - 1's outputs
// (y1, y2). Returns each block's position along its chain (0 for the first).
std::vector<int32_t> ChainPositions(const graph::Graph& forward);

// Returns the number of blocks of `forward`'s longest chain (0 without blocks).
int32_t LongestChain(const graph::Graph& forward);

// Returns the blocks keep_1_in_k rebuilds: every block but the k-th of each run of k along
// a chain (positions k - 1, 2k - 1, ... are kept), in block order; none for k = 1.
// REQUIRES: k >= 1.
std::vector<int32_t> KeepOneInK(const graph::Graph& forward, int32_t k);

// Returns the longest run of blocks of `rebuilt` (indexes into forward.reversible_blocks())
// one after another along a chain: the rebuild error grows along such a run and a kept
// block (or the chain's end) resets it.
int32_t LongestRebuiltRun(const graph::Graph& forward, const std::vector<int32_t>& rebuilt);

// Returns the names of `forward`'s reversible blocks that `rebuilt` (indexes into
// forward.reversible_blocks()) lists (`listed`), or those it does not, in block order.
std::vector<std::string> BlockNames(const graph::Graph& forward,
                                    const std::vector<int32_t>& rebuilt, bool listed);

}  // namespace headroom::planner

#endif  // HEADROOM_PLANNER_REVERSIBLE_SEARCH_H_
