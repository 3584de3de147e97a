// The cost of data-parallel training: how long the gradient allreduces take over an
// interconnect, and how much of them hides behind the rest of the backward. Deciding only:
// nothing runs (dist/ runs the collectives; docs/distributed.md "Planning with ranks").
//
// The model (every figure per rank, each direction):
//   - A ring allreduce of B bytes over N ranks moves 2(N-1)/N x B over the link and takes
//     2(N-1) steps: 2(N-1)/N x B / bandwidth + 2(N-1) x latency (RingAllreduceSeconds).
//   - Ranks beyond one node (InterconnectSpec::ranks_per_node = g, N = M x g ranks) reduce
//     hierarchically: a reduce-scatter and an all-gather within the node (a ring of g on the
//     node's link) around a ring of M across nodes on each rank's own NIC carrying B / g
//     (AllreduceSeconds). One node is the flat ring.
//   - Gradients are grouped into buckets in the order the planned schedule completes them
//     (its update order); a bucket's allreduce starts when its last gradient is written,
//     after the bucket before it (one communication stream), while the backward goes on.
//     The updates are deferred to the backward's end, each waiting for its bucket, as
//     dist::GradientBuckets runs them (PredictDataParallelStep).
//   - With sync_batch_norm, every training batch norm's forward issues 2 allreduces (C + 1
//     and C floats) and its backward, where it computes dx, 1 (2C + 1): each blocks the
//     compute stream (on the critical path) and queues on the communication stream behind
//     any bucket still in flight, as dist/ issues them from one FIFO.
#ifndef HEADROOM_PLANNER_COLLECTIVE_COST_H_
#define HEADROOM_PLANNER_COLLECTIVE_COST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner/cost_model.h"
#include "planner/sections.h"
#include "proto/headroom.pb.h"

namespace headroom::planner {

// The most ranks a plan may have.
inline constexpr uint32_t kMaxRanks = 65536;

// What the links between ranks do, as a ring allreduce reaches them.
struct InterconnectSpec {
  // "nvlink", "ib", "pcie", "nvlink+ib", "cpu".
  std::string name;
  // Within a node: bytes per second per rank, each direction.
  double bytes_per_second = 0;
  // Within a node: seconds per ring step.
  double latency_seconds = 0;
  // Ranks on one node's link; 0: any number (one node).
  uint32_t ranks_per_node = 0;
  // Across nodes: bytes per second per rank, each direction; 0: no link across nodes.
  double inter_node_bytes_per_second = 0;
  // Across nodes: seconds per ring step.
  double inter_node_latency_seconds = 0;
  // Fixed seconds per collective.
  double collective_overhead_seconds = 0;
};

// Returns the names of the presets: "nvlink", "ib", "pcie", "nvlink+ib", "cpu".
std::vector<std::string> InterconnectPresetNames();

// Returns a preset by name, or InvalidArgument naming `name` and listing the presets.
absl::StatusOr<InterconnectSpec> InterconnectPreset(absl::string_view name);

// Returns the preset `model.preset` names (`default_preset` when empty) with every non-zero
// field of `model` overriding it; InvalidArgument naming the field
// ("interconnect.bytes_per_second") for an unknown preset or a NaN, infinite or negative
// value.
absl::StatusOr<InterconnectSpec> InterconnectSpecFromProto(const proto::InterconnectModel& model,
                                                           absl::string_view default_preset);

// Returns the seconds of a ring allreduce of `bytes` over `ranks` ranks on one link:
// 2(N-1)/N x bytes / bytes_per_second + 2(N-1) x latency_seconds; 0 for one rank.
// REQUIRES: ranks >= 1, bytes_per_second > 0.
double RingAllreduceSeconds(uint64_t bytes, uint32_t ranks, double bytes_per_second,
                            double latency_seconds);

// Returns the seconds of an allreduce of `bytes` over `ranks` ranks on `link` (the header
// comment's model; 0 for one rank), or InvalidArgument when the ranks do not fit it: more
// than ranks_per_node with no link across nodes, or not a multiple of ranks_per_node.
absl::StatusOr<double> AllreduceSeconds(uint64_t bytes, uint32_t ranks,
                                        const InterconnectSpec& link);

struct DataParallelOptions {
  // Ranks; 1: one process (no collectives). Default 1.
  uint32_t ranks = 1;
  InterconnectSpec interconnect;
  // A bucket is closed once it holds at least this many bytes; 0 (default): one per gradient.
  uint64_t bucket_bytes = 0;
  // Batch norm over the global batch (--sync-batchnorm): its allreduces in the step. Default
  // false.
  bool sync_batch_norm = false;
};

// One gradient bucket's allreduce in a predicted step.
struct BucketTiming {
  uint64_t bytes = 0;
  int32_t gradients = 0;
  // Seconds from the step's start: its last gradient written, its allreduce started, ended.
  double ready_seconds = 0;
  double start_seconds = 0;
  double end_seconds = 0;
};

// A predicted data-parallel step.
struct DataParallelStep {
  // The step with the allreduces and the updates waiting for them.
  double step_seconds = 0;
  // The step alone (SectionedStep::step_seconds).
  double single_rank_step_seconds = 0;
  // When the last node that is not an update ends.
  double backward_end_seconds = 0;
  // Sum of the gradient buckets' allreduces' seconds (none overlapped).
  double allreduce_seconds = 0;
  // With sync_batch_norm: the batch norms' allreduces per step and their seconds (all on the
  // critical path, besides any wait behind buckets).
  int32_t batch_norm_allreduces = 0;
  double batch_norm_seconds = 0;
  // step_seconds - single_rank_step_seconds.
  double exposed_seconds = 0;
  // Bytes of all buckets: every gradient once.
  uint64_t communication_bytes = 0;
  std::vector<BucketTiming> buckets;

  // Returns single_rank_step_seconds / step_seconds (1 with one rank).
  double scaling_efficiency() const;
  // Returns 1 - exposed / (allreduce + batch norm seconds): the share of all collectives'
  // time hidden (1 when there is nothing to reduce).
  double hidden_fraction() const;
};

// Returns the step of `step` on options.ranks ranks, each node taking what `cost` says (the
// compute stream's waits for copies spread over the nodes in proportion), or
// AllreduceSeconds' error. One rank gives the step itself.
absl::StatusOr<DataParallelStep> PredictDataParallelStep(const SectionedStep& step,
                                                         const CostModel& cost,
                                                         const DataParallelOptions& options);

}  // namespace headroom::planner

#endif  // HEADROOM_PLANNER_COLLECTIVE_COST_H_
