#include "planner/gradient_buckets.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "graph/shape.h"
#include "planner/memory_planner.h"
#include "util/status_macros.h"

namespace headroom::planner {
namespace {

// Returns the gradient `update` reads (its input of role GRADIENT), or kNone.
TensorId GradientOf(const TrainingGraph& g, const TrainingNode& update) {
  for (TensorId in : update.inputs) {
    if (g.tensor(in).role == proto::ROLE_GRADIENT) return in;
  }
  return kNone;
}

}  // namespace

// Appends the bucket tensors to an expanded step's graph (TrainingGraph's friend).
class GradientBucketAdder {
 public:
  static absl::Status Add(SectionedStep& step, std::vector<GradientBucket> buckets,
                          BucketLifetime lifetime) {
    TrainingGraph& g = step.graph;
    const NodeId last = static_cast<NodeId>(g.nodes().size()) - 1;
    NodeId seed = kNone;
    for (NodeId n = 0; n <= last && seed == kNone; ++n) {
      if (g.node(n).kind == NodeKind::kLossSeed) seed = n;
    }
    for (size_t k = 0; k < buckets.size(); ++k) {
      GradientBucket& b = buckets[k];
      TrainingTensor t;
      t.name = absl::StrCat("gradient_bucket.", k);
      t.dtype = proto::DTYPE_FLOAT32;
      t.shape = {static_cast<int64_t>(b.bytes / sizeof(float))};
      t.role = proto::ROLE_COMMUNICATION;
      t.bytes = b.bytes;
      // Written (its first gradient copied in) at that gradient's update; read by the
      // deferred updates, which run at the last position before its frees.
      t.producer =
          lifetime == BucketLifetime::kWholeBackward && seed != kNone ? seed : b.updates.front();
      t.consumers = {last};
      b.tensor = g.AppendTensor(std::move(t));
    }
    step.gradient_buckets = std::move(buckets);
    return absl::OkStatus();
  }
};

std::vector<std::vector<int32_t>> GroupBySize(absl::Span<const uint64_t> bytes,
                                              uint64_t bucket_bytes) {
  std::vector<std::vector<int32_t>> groups;
  uint64_t open_bytes = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (groups.empty() || open_bytes >= bucket_bytes) {
      groups.emplace_back();
      open_bytes = 0;
    }
    groups.back().push_back(static_cast<int32_t>(i));
    open_bytes += bytes[i];
  }
  return groups;
}

std::vector<GradientBucket> GroupGradients(const TrainingGraph& graph, uint64_t bucket_bytes) {
  std::vector<NodeId> updates;
  std::vector<uint64_t> bytes;
  for (NodeId n = 0; n < static_cast<NodeId>(graph.nodes().size()); ++n) {
    const TrainingNode& node = graph.node(n);
    if (node.kind != NodeKind::kUpdate) continue;
    const TensorId grad = GradientOf(graph, node);
    updates.push_back(n);
    bytes.push_back(grad == kNone ? 0 : graph.tensor(grad).bytes);
  }
  std::vector<GradientBucket> buckets;
  for (const std::vector<int32_t>& group : GroupBySize(bytes, bucket_bytes)) {
    GradientBucket& b = buckets.emplace_back();
    for (int32_t i : group) {
      b.updates.push_back(updates[i]);
      b.offsets_bytes.push_back(b.bytes);
      b.bytes += bytes[i];
    }
  }
  return buckets;
}

uint64_t GradientBucketBytes(const TrainingGraph& graph) {
  uint64_t bytes = 0;
  for (const GradientBucket& b : GroupGradients(graph, 0)) bytes += b.bytes;
  return bytes;
}

absl::StatusOr<SectionPlan> AddGradientBuckets(const SectionPlan& plan, uint64_t bucket_bytes,
                                               BucketLifetime lifetime) {
  if (!plan.step->gradient_buckets.empty()) {
    return absl::FailedPreconditionError("gradient buckets: the plan has them already");
  }
  const TrainingGraph& g = plan.step->graph;
  std::vector<GradientBucket> buckets = GroupGradients(g, bucket_bytes);
  if (buckets.empty()) {
    return absl::InvalidArgumentError(
        "gradient buckets: the step updates no parameter, so ranks have nothing to average");
  }
  for (const GradientBucket& b : buckets) {
    for (NodeId u : b.updates) {
      const TensorId grad = GradientOf(g, g.node(u));
      if (grad == kNone || g.tensor(grad).dtype != proto::DTYPE_FLOAT32) {
        return absl::InvalidArgumentError(
            absl::StrCat("gradient buckets: node '", g.node(u).name, "' updates from ",
                         grad == kNone ? "no gradient"
                                       : absl::StrCat(graph::DTypeName(g.tensor(grad).dtype),
                                                      " gradient '", g.tensor(grad).name, "'"),
                         "; only float32 gradients are averaged across ranks"));
      }
    }
  }
  auto step = std::make_shared<SectionedStep>(*plan.step);
  RETURN_IF_ERROR(GradientBucketAdder::Add(*step, std::move(buckets), lifetime));
  ASSIGN_OR_RETURN(MemoryPlan memory,
                   PlanScheduledGraph(step->graph, step->schedule, plan.memory->alignment_bytes,
                                      DefaultStrategies()));
  SectionPlan out = plan;
  out.peak_bytes = memory.arena_bytes;
  out.step = std::move(step);
  out.memory = std::make_shared<MemoryPlan>(std::move(memory));
  return out;
}

}  // namespace headroom::planner
