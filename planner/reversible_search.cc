#include "planner/reversible_search.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "graph/summary.h"
#include "planner/memory_planner.h"
#include "planner/reversible.h"
#include "util/check.h"
#include "util/status_macros.h"

namespace headroom::planner {

struct ReversibleSearch::Candidate {
  RebuildCandidate info;
  // The expanded step (uncut); its memory plan once planned.
  std::shared_ptr<const SectionedStep> step;
  std::shared_ptr<const MemoryPlan> memory;
  // The section search over step->graph, once built.
  std::unique_ptr<PlacementSearch> search;
};

ReversibleSearch::ReversibleSearch(const graph::Graph& forward, const TrainingGraph& graph,
                                   const CostModel& cost, const SearchOptions& options,
                                   proto::OptimizerState placement)
    : forward_(forward), graph_(graph), cost_(cost), options_(options), placement_(placement) {}

ReversibleSearch::~ReversibleSearch() = default;

absl::StatusOr<std::unique_ptr<ReversibleSearch>> ReversibleSearch::Create(
    const graph::Graph& forward, const TrainingGraph& graph, const CostModel& cost,
    const SearchOptions& options, proto::OptimizerState placement) {
  if (forward.reversible_blocks().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("graph '", forward.name(), "' declares no reversible block to search over"));
  }
  std::unique_ptr<ReversibleSearch> search(
      new ReversibleSearch(forward, graph, cost, options, placement));
  ASSIGN_OR_RETURN(search->sections_, PlacementSearch::Create(graph, cost, options, placement));
  ASSIGN_OR_RETURN(const SectionPlan plain, search->sections_->Unconstrained());
  search->plain_step_seconds_ = plain.step_seconds;
  RETURN_IF_ERROR(search->BuildPool());
  return search;
}

absl::Status ReversibleSearch::Add(const std::string& name, std::vector<int32_t> blocks) {
  std::sort(blocks.begin(), blocks.end());
  blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
  if (blocks.empty()) return absl::OkStatus();
  for (const Candidate& c : pool_) {
    if (c.info.rebuilt_blocks == blocks) return absl::OkStatus();
  }
  RETURN_IF_ERROR(util::CheckCancellation(options_.cancel));
  ReversibleOptions reversible;
  reversible.blocks = blocks;
  ASSIGN_OR_RETURN(ReversibleStep step, ExpandReversible(forward_, graph_, cost_, reversible));
  Candidate c;
  c.info.name = name;
  c.info.longest_run = LongestRebuiltRun(forward_, blocks);
  c.info.rebuilt_blocks = std::move(blocks);
  c.info.step_seconds = step.step.step_seconds;
  c.info.lower_bound_bytes =
      ScheduledLowerBound(step.step.graph, step.step.schedule, options_.alignment_bytes);
  c.step = std::make_shared<const SectionedStep>(std::move(step.step));
  pool_.push_back(std::move(c));
  return absl::OkStatus();
}

absl::Status ReversibleSearch::BuildPool() {
  const int32_t n = static_cast<int32_t>(forward_.reversible_blocks().size());
  std::vector<int32_t> all(n);
  std::iota(all.begin(), all.end(), 0);
  RETURN_IF_ERROR(Add("rebuild_all", all));
  // Keep one block in every k along each chain (the k-th of each run of k), rebuild the
  // others.
  for (int32_t k = 2; k <= 4 && k <= LongestChain(forward_); ++k) {
    RETURN_IF_ERROR(Add(absl::StrCat("keep_1_in_", k), KeepOneInK(forward_, k)));
  }
  // The blocks whose rebuild costs the least time per activation byte it frees first: its
  // F and G nodes' forward seconds against the bytes they and the coupling write.
  std::vector<double> price(n);
  for (int32_t b = 0; b < n; ++b) {
    const graph::ReversibleBlock& block = forward_.reversible_blocks()[b];
    double seconds = 0;
    uint64_t bytes = 0;
    for (const std::vector<graph::NodeId>* part : {&block.f_nodes, &block.g_nodes}) {
      for (graph::NodeId node : *part) {
        seconds += cost_.NodeSeconds(graph_, node);
        for (TensorId t : graph_.node(node).outputs) bytes += graph_.tensor(t).bytes;
      }
    }
    bytes += graph_.tensor(block.y1).bytes + graph_.tensor(block.y2).bytes;
    price[b] = seconds / static_cast<double>(std::max<uint64_t>(bytes, 1));
  }
  std::vector<int32_t> order = all;
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return price[a] < price[b]; });
  // Every prefix on small chains; at most kPrefixes spread evenly on long ones.
  constexpr int32_t kPrefixes = 6;
  std::vector<int32_t> lengths;
  for (int32_t i = 1; i <= std::min(n - 1, kPrefixes); ++i) {
    lengths.push_back(n - 1 <= kPrefixes ? i : (i * (n - 1) + kPrefixes - 1) / kPrefixes);
  }
  for (int32_t j : lengths) {
    RETURN_IF_ERROR(Add(absl::StrCat("rebuild_cheapest_", j),
                        std::vector<int32_t>(order.begin(), order.begin() + j)));
  }
  SortPool();
  return absl::OkStatus();
}

void ReversibleSearch::SortPool() {
  std::stable_sort(pool_.begin(), pool_.end(), [](const Candidate& a, const Candidate& b) {
    return a.info.step_seconds < b.info.step_seconds;
  });
}

absl::StatusOr<SectionPlan> ReversibleSearch::Evaluate(int index) {
  Candidate& c = pool_[index];
  if (c.memory == nullptr) {
    RETURN_IF_ERROR(util::CheckCancellation(options_.cancel));
    ASSIGN_OR_RETURN(MemoryPlan memory,
                     PlanScheduledGraph(c.step->graph, c.step->schedule, options_.alignment_bytes,
                                        DefaultStrategies()));
    c.info.peak_bytes = memory.arena_bytes;
    c.memory = std::make_shared<const MemoryPlan>(std::move(memory));
  }
  SectionPlan plan;
  plan.strategy = "reversible";
  plan.step = c.step;
  plan.memory = c.memory;
  plan.peak_bytes = c.info.peak_bytes;
  plan.host_pool_bytes = 0;
  plan.step_seconds = c.info.step_seconds;
  plan.overhead_ratio = plain_step_seconds_ > 0 ? c.info.step_seconds / plain_step_seconds_ : 0;
  plan.rebuilt_blocks = c.info.rebuilt_blocks;
  return plan;
}

absl::StatusOr<SectionPlan> ReversibleSearch::RebuildAll() {
  const size_t n = forward_.reversible_blocks().size();
  for (size_t i = 0; i < pool_.size(); ++i) {
    if (pool_[i].info.rebuilt_blocks.size() == n) return Evaluate(static_cast<int>(i));
  }
  return absl::InternalError("the pool has no candidate rebuilding every block");
}

absl::StatusOr<PlacementSearch*> ReversibleSearch::SearchOf(int index) {
  Candidate& c = pool_[index];
  if (c.search == nullptr) {
    RETURN_IF_ERROR(util::CheckCancellation(options_.cancel));
    ASSIGN_OR_RETURN(c.search, PlacementSearch::Create(c.step->graph, cost_, options_, placement_));
    c.info.searched = true;
  }
  return c.search.get();
}

void ReversibleSearch::Release(int index) {
  Candidate& c = pool_[index];
  if (c.search == nullptr) return;
  released_candidates_ += c.search->num_candidates();
  c.search.reset();
}

SectionPlan ReversibleSearch::Marked(int index, SectionPlan plan) const {
  const Candidate& c = pool_[index];
  // The section search planned the rebuild step's graph: its tensors keep their ids, so
  // the rebuilt copies are where the uncut step has them.
  auto step = std::make_shared<SectionedStep>(*plan.step);
  step->rebuilt = c.step->rebuilt;
  plan.step = std::move(step);
  plan.strategy = plan.strategy == "no_sections" ? std::string("reversible")
                                                 : absl::StrCat("reversible+", plan.strategy);
  plan.overhead_ratio = plain_step_seconds_ > 0 ? plan.step_seconds / plain_step_seconds_ : 0;
  plan.rebuilt_blocks = c.info.rebuilt_blocks;
  return plan;
}

absl::StatusOr<SectionPlan> ReversibleSearch::Plan(uint64_t budget_bytes, int32_t keep_every) {
  if (keep_every > 1) {
    const size_t before = pool_.size();
    RETURN_IF_ERROR(Add(absl::StrCat("keep_1_in_", keep_every), KeepOneInK(forward_, keep_every)));
    if (pool_.size() != before) SortPool();
  }
  // 1. Checkpointing alone, every block kept.
  std::optional<SectionPlan> best;
  absl::StatusOr<SectionPlan> kept = sections_->Plan(budget_bytes);
  if (kept.ok()) {
    best = *std::move(kept);
  } else if (kept.status().code() != absl::StatusCode::kFailedPrecondition) {
    return kept.status();
  }
  // 2. Each rebuild set whose uncut step beats the best so far (the pool is sorted by that
  //    time; cuts only add to it): the section search over its step.
  for (size_t i = 0; i < pool_.size(); ++i) {
    if (best.has_value() && pool_[i].info.step_seconds >= best->step_seconds) break;
    if (keep_every > 0 && pool_[i].info.longest_run >= keep_every) continue;
    ASSIGN_OR_RETURN(PlacementSearch * search, SearchOf(static_cast<int>(i)));
    absl::StatusOr<SectionPlan> plan = search->Plan(budget_bytes);
    if (!plan.ok()) {
      if (plan.status().code() != absl::StatusCode::kFailedPrecondition) return plan.status();
      continue;
    }
    if (!best.has_value() || plan->step_seconds < best->step_seconds) {
      best = Marked(static_cast<int>(i), *std::move(plan));
    }
    // One set's search lives at a time: its pool of planned candidates is the bulk of what
    // planning holds (the plan returned owns its step and memory plan).
    Release(static_cast<int>(i));
  }
  if (best.has_value()) return *std::move(best);
  ASSIGN_OR_RETURN(const uint64_t smallest, MinimumPeakBytes());
  return absl::FailedPreconditionError(absl::StrCat(
      "no plan fits the budget of ", graph::HumanBytes(budget_bytes), ": the smallest needs ",
      graph::HumanBytes(smallest), " (rebuilding reversible blocks or keeping them, with ",
      "section cuts and offload); with every block kept: ", kept.status().message()));
}

absl::StatusOr<uint64_t> ReversibleSearch::MinimumPeakBytes() {
  ASSIGN_OR_RETURN(uint64_t smallest, sections_->MinimumPeakBytes());
  for (size_t i = 0; i < pool_.size(); ++i) {
    ASSIGN_OR_RETURN(PlacementSearch * search, SearchOf(static_cast<int>(i)));
    ASSIGN_OR_RETURN(const uint64_t m, search->MinimumPeakBytes());
    smallest = std::min(smallest, m);
    Release(static_cast<int>(i));
  }
  return smallest;
}

absl::StatusOr<std::vector<TradeOffPoint>> ReversibleSearch::Frontier() {
  ASSIGN_OR_RETURN(std::vector<TradeOffPoint> all, sections_->Frontier());
  for (size_t i = 0; i < pool_.size(); ++i) {
    ASSIGN_OR_RETURN(PlacementSearch * search, SearchOf(static_cast<int>(i)));
    ASSIGN_OR_RETURN(std::vector<TradeOffPoint> points, search->Frontier());
    for (TradeOffPoint& p : points) {
      p.strategy = absl::StrCat("reversible:", pool_[i].info.name, ":", p.strategy);
      all.push_back(p);
    }
    Release(static_cast<int>(i));
  }
  return ParetoFrontier(std::move(all));
}

absl::StatusOr<std::vector<TradeOffPoint>> ReversibleSearch::Baselines() {
  ASSIGN_OR_RETURN(std::vector<TradeOffPoint> points, sections_->Baselines());
  ASSIGN_OR_RETURN(const SectionPlan all, RebuildAll());
  TradeOffPoint p;
  p.peak_bytes = all.peak_bytes;
  p.step_seconds = all.step_seconds;
  p.strategy = "reversible:rebuild_all";
  p.num_sections = 1;
  points.push_back(p);
  return points;
}

std::vector<RebuildCandidate> ReversibleSearch::RebuildCandidates() const {
  std::vector<RebuildCandidate> out;
  for (const Candidate& c : pool_) out.push_back(c.info);
  return out;
}

int ReversibleSearch::num_candidates() const {
  int n = sections_->num_candidates() + released_candidates_;
  for (const Candidate& c : pool_) n += c.search == nullptr ? 0 : c.search->num_candidates();
  return n;
}

std::vector<int32_t> ChainPositions(const graph::Graph& forward) {
  const std::vector<graph::ReversibleBlock>& blocks = forward.reversible_blocks();
  std::vector<int32_t> position(blocks.size(), 0);
  for (size_t b = 1; b < blocks.size(); ++b) {
    if (blocks[b].x1 == blocks[b - 1].y1 && blocks[b].x2 == blocks[b - 1].y2) {
      position[b] = position[b - 1] + 1;
    }
  }
  return position;
}

int32_t LongestChain(const graph::Graph& forward) {
  int32_t longest = 0;
  for (int32_t p : ChainPositions(forward)) longest = std::max(longest, p + 1);
  return longest;
}

std::vector<int32_t> KeepOneInK(const graph::Graph& forward, int32_t k) {
  CHECK(k >= 1) << "keep one block in " << k;
  const std::vector<int32_t> position = ChainPositions(forward);
  std::vector<int32_t> rebuilt;
  for (int32_t b = 0; b < static_cast<int32_t>(position.size()); ++b) {
    if (position[b] % k != k - 1) rebuilt.push_back(b);
  }
  return rebuilt;
}

int32_t LongestRebuiltRun(const graph::Graph& forward, const std::vector<int32_t>& rebuilt) {
  const std::vector<int32_t> position = ChainPositions(forward);
  std::vector<bool> is_rebuilt(position.size(), false);
  for (int32_t b : rebuilt) is_rebuilt[b] = true;
  int32_t longest = 0, run = 0;
  for (size_t b = 0; b < position.size(); ++b) {
    if (position[b] == 0) run = 0;  // A new chain.
    run = is_rebuilt[b] ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  return longest;
}

std::vector<std::string> BlockNames(const graph::Graph& forward,
                                    const std::vector<int32_t>& rebuilt, bool listed) {
  std::vector<std::string> names;
  for (int32_t b = 0; b < static_cast<int32_t>(forward.reversible_blocks().size()); ++b) {
    const bool in = std::find(rebuilt.begin(), rebuilt.end(), b) != rebuilt.end();
    if (in == listed) names.push_back(forward.reversible_blocks()[b].name);
  }
  return names;
}

}  // namespace headroom::planner
