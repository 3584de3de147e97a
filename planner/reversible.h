// Reversible blocks in the training step: the backward pass of a reversible block
// (graph::ReversibleBlock, y1 = x1 + F(x2), y2 = x2 + G(y1)) rebuilds the block's inputs from
// its outputs instead of keeping them, and differentiates F and G from the values it
// rebuilds in the same pass (RevNet's backward: one extra evaluation of F and of G). For a
// chain of blocks only the chain's output is kept.
//
// ExpandReversible() builds that step as an ordinary training graph with an explicit
// schedule (a SectionedStep with one section), so Planner I plans its memory exactly and the
// executor runs it. Deciding only: nothing runs.
//
// The rebuild of block b, placed just before the first backward node of b's nodes:
//   G's nodes re-run from y1      (kRecompute, "<node>.rebuild"; running statistics untouched)
//   x2' = y2 - G(y1)              (kRebuild "<b>.x2.rebuild")
//   F's nodes re-run from x2'     (kRecompute)
//   x1' = y1 - F(x2')             (kRebuild "<b>.x1.rebuild")
// where y1 and y2 are the kept forward outputs for the last block of a chain, else the next
// block's rebuilt inputs. Every node after the rebuild reads the rebuilt copies; a node
// before it (another consumer of a block input, differentiated earlier) reads the forward's
// copy, which therefore lives until then: an input is freed only when nobody else needs it.
// Batch norm inside F or G re-run normalises the rebuilt input with the statistics its
// forward saved (planned tensors kept from the forward to the block's backward, which reads
// them too), computes and updates none (TrainingNode::saved_inputs_from); dropout gets the
// same seed and replays its mask.
// Rebuilding changes rounding: x - F + F is not x in floating point; see max_rebuild_error.
#ifndef HEADROOM_PLANNER_REVERSIBLE_H_
#define HEADROOM_PLANNER_REVERSIBLE_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "planner/cost_model.h"
#include "planner/sections.h"
#include "planner/training_graph.h"

namespace headroom::planner {

struct ReversibleOptions {
  // Indexes into forward.reversible_blocks() of the blocks to rebuild; the others keep their
  // activations as in the plain step. Empty: rebuild every block. Default empty.
  std::vector<int32_t> blocks;
};

// The expanded step of ExpandReversible.
struct ReversibleStep {
  explicit ReversibleStep(SectionedStep s) : step(std::move(s)) {}

  // The step: forward, the loss seed, then backward with each rebuilt block's rebuild before
  // its backward. One section; nothing offloaded.
  SectionedStep step;
  // Blocks rebuilt (indexes into forward.reversible_blocks()), in the order rebuilt. The
  // tensors they write anew are step.rebuilt.
  std::vector<int32_t> rebuilt_blocks;
};

// Returns the step of training graph `graph` (built from `forward`) with the blocks of
// `options` rebuilt, timed with `cost`; InvalidArgument for an inference graph or a block
// index out of range.
absl::StatusOr<ReversibleStep> ExpandReversible(const graph::Graph& forward,
                                                const TrainingGraph& graph, const CostModel& cost,
                                                const ReversibleOptions& options = {});

}  // namespace headroom::planner

#endif  // HEADROOM_PLANNER_REVERSIBLE_H_
