// A cost model from a profile: each node takes the median time the profile measured for
// it, copies take the measured copy rate, and whatever the profile did not see (a node it
// lacks, the flops) comes from a fallback model, usually the roofline. What
// `headroom plan --profile prof.json` plans with.
//
// A profile stands in only for the graph it was taken of: Create() refuses a profile whose
// graph fingerprint (tensor names, shapes and dtypes, so the batch too) differs. Nodes are
// matched by name; a re-forward node takes its own measured time if the profile ran it,
// else its forward node's. Immutable after Create(); thread-safe.
#ifndef HEADROOM_PROFILER_MEASURED_COST_MODEL_H_
#define HEADROOM_PROFILER_MEASURED_COST_MODEL_H_

#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "planner/cost_model.h"
#include "proto/headroom.pb.h"

namespace headroom::profiler {

// Returns a hex digest of `forward`'s name, tensors, shapes and dtypes: equal for the same
// model at the same batch size, different otherwise.
std::string GraphFingerprint(const graph::Graph& forward);

// Returns the profile in the JSON file at `path` (a ProfileResponse, as `headroom profile
// --out` writes it); NotFound or InvalidArgument naming the file.
absl::StatusOr<proto::ProfileResponse> ReadProfileFile(const std::string& path);

class MeasuredCostModel : public planner::CostModel {
 public:
  // Returns the model for `forward` on `device` from `profile`, with `device`'s roofline
  // for what the profile lacks. FailedPrecondition if the profile is of another graph, was
  // taken on another kind of device (a "cpu" profile plans only for the "cpu" preset, a
  // "cuda" one only for a GPU preset), or has no measured node times.
  static absl::StatusOr<std::unique_ptr<MeasuredCostModel>> Create(
      const graph::Graph& forward, const proto::ProfileResponse& profile,
      const planner::DeviceSpec& device);

  // "measured (cpu profile, 3 steps) over roofline cpu".
  std::string name() const override;
  double NodeSeconds(const planner::TrainingGraph& graph, planner::NodeId id) const override;
  uint64_t NodeFlops(const planner::TrainingGraph& graph, planner::NodeId id) const override;
  double CopySeconds(uint64_t bytes) const override;
  // The fallback's (no host update is measured yet).
  double HostUpdateSeconds(uint64_t bytes) const override;

  // Returns the share of `graph`'s compute nodes that have a measured time, in [0, 1].
  double Coverage(const planner::TrainingGraph& graph) const;

 private:
  MeasuredCostModel(std::unique_ptr<planner::CostModel> fallback, std::string description)
      : fallback_(std::move(fallback)), description_(std::move(description)) {}
  // Returns the measured seconds of node `id`, or -1 when the profile lacks it.
  double Measured(const planner::TrainingGraph& graph, planner::NodeId id) const;

  std::unique_ptr<planner::CostModel> fallback_;
  std::string description_;
  absl::flat_hash_map<std::string, double> seconds_by_node_;
  // The slower measured copy rate, or 0 when the profile copied nothing.
  double copy_bytes_per_second_ = 0;
};

}  // namespace headroom::profiler

#endif  // HEADROOM_PROFILER_MEASURED_COST_MODEL_H_
