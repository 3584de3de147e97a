// Sections: the training step with its forward schedule cut into sections. The forward pass
// keeps only each section's cached inputs (and the tensors named to keep); the backward pass
// visits sections in reverse, re-runs a section's forward from its cached inputs (only the
// nodes its backward needs that no kept tensor spares), then its backward. The last section
// is not re-run: its backward follows its forward.
// A cached input may be offloaded: copied to host memory after it is produced, its device
// copy freed once that copy is done, and prefetched back while the section visited just
// before its own runs backward.
//
// ExpandSections() builds the expanded step as an ordinary training graph with an explicit
// schedule, so Planner I plans its memory exactly, and predicts its time on a compute stream
// and two copy streams (one each way). Deciding only: nothing runs.
#ifndef HEADROOM_PLANNER_SECTIONS_H_
#define HEADROOM_PLANNER_SECTIONS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/cost_model.h"
#include "planner/schedule.h"
#include "planner/training_graph.h"

namespace headroom::planner {

// Where the forward schedule is cut, which tensors inside re-run sections are kept rather
// than recomputed, and which go to host memory.
struct SectionCuts {
  // Forward positions where a section starts, increasing, each in (0, number of forward
  // nodes). Empty: one section, the plain training step.
  std::vector<int32_t> cuts;
  // Tensors (by training-graph id) to offload. Each must be a cached input (or a kept
  // tensor) whose first backward-phase reader is not the first section visited backward.
  std::vector<TensorId> offload;
  // Tensors (by training-graph id, increasing) that a re-run section keeps from the forward
  // pass for its backward phase instead of recomputing them: each must be written by a
  // forward node of a section that is not the last. Its backward reads the forward's copy,
  // and its re-forward runs only what the rest still needs. Empty: recompute all it needs.
  std::vector<TensorId> keep;
  // Optimizer state on the host, update on the host (ZeRO-Offload's placement): each
  // parameter's final gradient is copied to the host pool as soon as its last writer ends and
  // dies on the device where that copy is awaited (a kOffload node "<grad>.to_host", op
  // "GradToHost"); the update runs on host threads (a kUpdate node with op "Host" + the
  // device op, reading no device tensor) on a host master copy of the parameter and the
  // state, which live in the host pool (TrainingTensor::on_host); the parameter is copied
  // back at the end of the step (a kPrefetch node "<param>.to_device", op "ParamToDevice",
  // that updates it), before the next step's forward reads it. Default false: all on the
  // device.
  bool optimizer_state_on_host = false;
  // Parameters on the host between uses (ZeRO-Infinity's placement; needs
  // optimizer_state_on_host, whose master copies in the host pool they are): the step is cut
  // into use groups (each section's forward but the last; the last section's forward with its
  // backward phase; each other section's backward phase, re-forward included), and each group
  // reads a device copy of each parameter it uses (a tensor TrainingTensor::parameter_copy,
  // role PARAMETER) prefetched from the master by a kPrefetch node "<param>.<group>.prefetch"
  // (op "ParamPrefetch") at the start of the group before it (the step's start for the
  // first), alive until its last reader in its group (two consecutive groups that read it
  // share one copy). The parameter itself is TrainingTensor::on_host; the step ends with a
  // kPrefetch node "<param>.host_updated" (op "AwaitHostUpdate") that copies nothing and
  // waits for its update. Default false: parameters live on the device.
  bool parameters_on_host = false;
  // Forward positions, increasing, each inside a re-run section (not the last) and not one of
  // `cuts`, that split that section's backward phase into chunks (nested sections): each
  // chunk's backward is preceded by its own re-forward, from the section's cached inputs and
  // kept tensors, of just what that chunk's backward reads. A node whose outputs several
  // chunks read runs again for each ("<node>.recompute", then "<node>.recompute2", ...), so
  // only one chunk's re-forward state is live at a time: a smaller peak for more recompute.
  // Empty: one re-forward per section, at the start of its backward phase.
  std::vector<int32_t> inner_cuts;
};

// Returns "host" or "device" (of the optimizer state, or of the parameters).
const char* OptimizerPlacementName(bool on_host);

// A cached input of a section: produced before the section (or a graph input), read by the
// section's re-forward or backward; or a tensor of its own that it keeps (SectionCuts::keep).
struct CachedInput {
  TensorId tensor = kNone;
  uint64_t bytes = 0;
  bool offloaded = false;
  // Steps of the expanded schedule, for an offloaded tensor (else -1): the copy to host is
  // issued after `copy_out_after_position` (-1: before the first position), awaited by the offload
  // node at `copy_out_await_position`; the copy back is issued by the prefetch node at
  // `prefetch_position` and awaited before `first_use_position`.
  Position copy_out_after_position = -1;
  Position copy_out_await_position = -1;
  Position prefetch_position = -1;
  Position first_use_position = -1;
};

struct SectionInfo {
  // Forward positions [begin, end).
  int32_t begin = 0;
  int32_t end = 0;
  // Whether its forward is re-run (every section but the last, when its backward needs it).
  bool recomputed = false;
  // Its inner cuts (SectionCuts::inner_cuts inside it), increasing.
  std::vector<int32_t> inner_cuts;
  // Forward nodes re-run (counted once per run) and their flops.
  int32_t recompute_nodes = 0;
  uint64_t recompute_flops = 0;
  // Its cached inputs, in tensor-id order.
  std::vector<CachedInput> boundary;
  // Its own tensors kept for its backward phase instead of recomputed, in tensor-id order.
  std::vector<CachedInput> kept;

  // Returns its cached inputs, then its kept tensors: every tensor that may be offloaded.
  std::vector<const CachedInput*> Held() const {
    std::vector<const CachedInput*> held;
    for (const CachedInput& c : boundary) held.push_back(&c);
    for (const CachedInput& c : kept) held.push_back(&c);
    return held;
  }
  // First position of its backward-phase group (re-forward, then backward); -1 if it has none.
  Position backward_position = -1;
};

// One parameter's update on the host (SectionCuts::optimizer_state_on_host), as positions
// of the expanded schedule.
struct HostUpdate {
  TensorId param = kNone;
  // Its final gradient (on the device until its copy out is awaited).
  TensorId grad = kNone;
  // Its optimizer state, on the host.
  std::vector<TensorId> state;
  // The gradient's copy to host is issued after `grad_copy_after_position` (its writer) and
  // awaited at `grad_await_position` (the GradToHost node, where its device bytes die); the
  // host update is queued at `update_position`; the parameter's copy back is issued and
  // awaited at `copy_back_position`.
  Position grad_copy_after_position = -1;
  Position grad_await_position = -1;
  Position update_position = -1;
  Position copy_back_position = -1;
};

// One device copy of a parameter kept on the host (SectionCuts::parameters_on_host).
struct ParameterCopy {
  TensorId param = kNone;
  // The copy, a tensor of the expanded graph.
  TensorId copy = kNone;
  // Its use group's name: "f<s>" (section s's forward; the last section's with its backward
  // phase) or "b<s>" (section s's backward phase); "f1+b0" where two groups share it.
  std::string group;
  // The prefetch node, and the copy's first and last readers.
  Position prefetch_position = -1;
  Position first_use_position = -1;
  Position last_use_position = -1;
};

// Gradients of data-parallel ranks grouped to be averaged together (planner/gradient_buckets.h):
// one tensor of the step, role COMMUNICATION, each gradient copied in at its update's position.
struct GradientBucket {
  // Its tensor in the step's graph.
  TensorId tensor = kNone;
  // The update nodes whose gradients it holds, in the order the step completes them, and
  // each gradient's offset into it in bytes (packed: the bucket is their sum).
  std::vector<NodeId> updates;
  std::vector<uint64_t> offsets_bytes;
  uint64_t bytes = 0;
};

// The expanded training step of one SectionCuts.
struct SectionedStep {
  explicit SectionedStep(TrainingGraph expanded) : graph(std::move(expanded)) {}

  // The forward nodes, the loss seed, then for each section from the last: its re-forward
  // (kRecompute nodes), its backward, accumulations and updates, with kOffload and
  // kPrefetch nodes where copies are awaited and issued. Node ids are schedule positions;
  // `after` edges are dropped (the order is explicit).
  TrainingGraph graph;
  // The identity order of graph's nodes.
  Schedule schedule;
  std::vector<SectionInfo> sections;
  // Predicted: the compute stream's finish time, including waits for prefetches.
  double step_seconds = 0;
  // Of which the compute stream waited for copies.
  double stall_seconds = 0;
  // Seconds of re-forward nodes.
  double recompute_seconds = 0;
  uint64_t recompute_flops = 0;
  // Bytes copied to host (and back) per step.
  uint64_t offloaded_bytes = 0;
  // Offload requests that were dropped because the copy out could not finish before the
  // prefetch would be issued (the tensor stays on the device).
  std::vector<TensorId> offload_dropped;
  // With SectionCuts::optimizer_state_on_host, every parameter's host update, in schedule
  // order; else empty.
  std::vector<HostUpdate> host_updates;
  // Predicted seconds of the host updates (on host threads, overlapping the compute stream)
  // and bytes of gradients copied to host and parameters copied back per step.
  double host_update_seconds = 0;
  uint64_t optimizer_copy_bytes = 0;
  bool optimizer_state_on_host() const { return !host_updates.empty(); }
  // With SectionCuts::parameters_on_host, every device copy of a parameter, in prefetch
  // order, and the bytes they copy per step; else empty and 0.
  std::vector<ParameterCopy> parameter_copies;
  uint64_t parameter_copy_bytes = 0;
  bool parameters_on_host() const { return !parameter_copies.empty(); }
  // Only in a step that rebuilds reversible blocks (planner/reversible.h): (the forward's
  // tensor, its rebuilt copy) for every tensor a rebuild writes anew, in the order written.
  std::vector<std::pair<TensorId, TensorId>> rebuilt;
  // Only in a step planned for data-parallel ranks (AddGradientBuckets): the gradient
  // buckets, in the order they fill; else empty.
  std::vector<GradientBucket> gradient_buckets;
};

// The cost of each node of a training graph, by node id. An expanded step's nodes cost what
// the nodes they run cost (a re-forward node what its forward node does, as every CostModel
// here prices them), so a search expanding many steps computes these once.
struct NodeCosts {
  std::vector<double> seconds;
  std::vector<uint64_t> flops;
};
NodeCosts ComputeNodeCosts(const TrainingGraph& graph, const CostModel& cost);

// Returns the expanded step of training graph `graph` under `cuts`, with times from
// `cost` (node costs from `node_costs` where given, which must be ComputeNodeCosts(graph,
// cost)); InvalidArgument for an inference graph, cuts or inner cuts out of order or range
// (an inner cut outside a re-run section), an offload request that is not an offloadable
// cached input, or a kept tensor that is not written in a re-run section.
absl::StatusOr<SectionedStep> ExpandSections(const TrainingGraph& graph, const SectionCuts& cuts,
                                             const CostModel& cost,
                                             const NodeCosts* node_costs = nullptr);

// Returns the tensors SectionCuts::offload may name under `cuts` and `keep` (cached inputs and
// kept tensors first read backward after the first section visited), in id order;
// InvalidArgument for bad cuts or kept tensors.
absl::StatusOr<std::vector<TensorId>> OffloadableTensors(const TrainingGraph& graph,
                                                         const std::vector<int32_t>& cuts,
                                                         const CostModel& cost,
                                                         const std::vector<TensorId>& keep = {});

// Returns the tensors SectionCuts::keep may name under `cuts`: those written by a forward node
// of a section that is not the last and read by its backward phase or re-forward (recomputed
// now), in id order; InvalidArgument for bad cuts.
absl::StatusOr<std::vector<TensorId>> KeepableTensors(const TrainingGraph& graph,
                                                      const std::vector<int32_t>& cuts,
                                                      const CostModel& cost);

// Returns the number of forward nodes of `graph` (they are its first nodes).
int32_t NumForwardNodes(const TrainingGraph& graph);

// Returns the host memory `step` needs for its offloaded tensors: one slot each (a tensor
// cached by several sections once), rounded up to `alignment_bytes`, as the executor lays
// its host pool out; plus OptimizerHostBytes.
uint64_t HostPoolBytes(const SectionedStep& step, uint64_t alignment_bytes);
// Returns the part of HostPoolBytes that the host updates hold: per parameter its master
// copy, its gradient's copy and its optimizer state, each rounded up to `alignment_bytes`,
// laid out after the offloaded tensors' slots.
uint64_t OptimizerHostBytes(const SectionedStep& step, uint64_t alignment_bytes);

// Returns the cuts that split `num_forward` forward nodes into `sections` sections of
// (within one node) equal length; fewer when there are fewer nodes. REQUIRES: sections >= 1.
std::vector<int32_t> EvenCuts(int32_t num_forward, int32_t sections);

// Returns OK if every node's inputs are written by earlier nodes (or exist before the step)
// and every optimizer update is the last node to touch what it updates; else Internal
// naming the node.
absl::Status ValidateSchedule(const TrainingGraph& graph, const Schedule& schedule);

}  // namespace headroom::planner

#endif  // HEADROOM_PLANNER_SECTIONS_H_
