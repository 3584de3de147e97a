#include "planner/gradient_buckets.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "graph/zoo.h"
#include "graph/zoo_testing.h"
#include "gtest/gtest.h"
#include "planner/cost_model.h"
#include "planner/memory_planner.h"
#include "planner/offset_assigner.h"

namespace headroom::planner {
namespace {

using ::testing::HasSubstr;

TEST(GroupBySizeTest, ClosesABucketOnceItHoldsEnough) {
  // 1000 + 3000 reaches 4000: closed; 500 + 5000 is the last, whatever its size.
  const std::vector<uint64_t> bytes = {1000, 3000, 500, 5000};
  EXPECT_EQ(GroupBySize(bytes, 4000), (std::vector<std::vector<int32_t>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(GroupBySize(bytes, 0), (std::vector<std::vector<int32_t>>{{0}, {1}, {2}, {3}}));
  EXPECT_EQ(GroupBySize(bytes, 1 << 30), (std::vector<std::vector<int32_t>>{{0, 1, 2, 3}}));
  EXPECT_TRUE(GroupBySize({}, 0).empty());
}

// A model's training step at batch 4, expanded with `cuts` and planned.
struct Step {
  std::unique_ptr<graph::Graph> forward;
  std::unique_ptr<TrainingGraph> training;
  std::unique_ptr<CostModel> cost;
  SectionPlan plan;
};

std::unique_ptr<Step> Planned(const std::string& model, std::vector<int32_t> cuts) {
  auto s = std::make_unique<Step>();
  s->forward = std::make_unique<graph::Graph>(
      graph::Graph::FromProto(graph::BuildZooModel(graph::SmallZooSpec(model, 4)).value()).value());
  s->training =
      std::make_unique<TrainingGraph>(TrainingGraph::Build(*s->forward, TrainingOptions()).value());
  s->cost = std::make_unique<RooflineCostModel>(*s->forward, DevicePreset("cpu").value());
  SectionedStep step =
      ExpandSections(*s->training, SectionCuts{std::move(cuts), {}, {}}, *s->cost).value();
  MemoryPlan memory =
      PlanScheduledGraph(step.graph, step.schedule, kDefaultAlignmentBytes, DefaultStrategies())
          .value();
  s->plan.peak_bytes = memory.arena_bytes;
  s->plan.step = std::make_shared<SectionedStep>(std::move(step));
  s->plan.memory = std::make_shared<MemoryPlan>(std::move(memory));
  return s;
}

// Every bucket is a planned tensor: role COMMUNICATION, its gradients' bytes, alive from its
// first gradient's update to the last position; the plan lays them out without overlap
// (PlanScheduledGraph verifies it) and its peak holds them.
void ExpectBucketsPlanned(const Step& s, uint64_t bucket_bytes) {
  const absl::StatusOr<SectionPlan> with = AddGradientBuckets(s.plan, bucket_bytes);
  ASSERT_TRUE(with.ok()) << with.status();
  const TrainingGraph& g = with->step->graph;
  const std::vector<GradientBucket>& buckets = with->step->gradient_buckets;
  ASSERT_FALSE(buckets.empty());
  const int32_t last = with->memory->num_positions - 1;
  uint64_t total = 0;
  int32_t gradients = 0;
  for (size_t k = 0; k < buckets.size(); ++k) {
    const GradientBucket& b = buckets[k];
    const PlannedTensor& t = with->memory->tensors[b.tensor];
    EXPECT_EQ(t.name, "gradient_bucket." + std::to_string(k));
    EXPECT_EQ(t.role, proto::ROLE_COMMUNICATION);
    EXPECT_EQ(t.bytes, b.bytes);
    EXPECT_EQ(t.lifetime.first_position, b.updates.front()) << t.name;
    EXPECT_EQ(t.lifetime.last_position, last) << t.name;
    ASSERT_EQ(b.offsets_bytes.size(), b.updates.size());
    EXPECT_EQ(b.offsets_bytes.front(), 0u);
    for (NodeId u : b.updates) EXPECT_EQ(g.node(u).kind, NodeKind::kUpdate);
    if (bucket_bytes > 0 && k + 1 < buckets.size()) {
      EXPECT_GE(b.bytes, bucket_bytes) << t.name;
    }
    total += b.bytes;
    gradients += static_cast<int32_t>(b.updates.size());
  }
  int32_t updates = 0;
  for (const TrainingNode& node : g.nodes()) updates += node.kind == NodeKind::kUpdate;
  EXPECT_EQ(gradients, updates);
  EXPECT_EQ(total, GradientBucketBytes(s.plan.step->graph));
  EXPECT_EQ(with->memory->bytes_by_role.at(proto::ROLE_COMMUNICATION), total);
  EXPECT_EQ(with->peak_bytes, with->memory->arena_bytes);
  // At the last position every bucket is alive, beside what the plan without them held.
  EXPECT_GE(with->memory->lower_bound_bytes, total);
  EXPECT_GE(with->peak_bytes, s.plan.peak_bytes);
  // The plan it came from is unchanged.
  EXPECT_TRUE(s.plan.step->gradient_buckets.empty());
}

TEST(AddGradientBucketsTest, BucketsAreTensorsOfThePlan) {
  for (const std::string model : {"mlp", "small_cnn", "transformer"}) {
    SCOPED_TRACE(model);
    const std::unique_ptr<Step> s = Planned(model, {});
    ExpectBucketsPlanned(*s, 0);
    ExpectBucketsPlanned(*s, 16 << 10);
    ExpectBucketsPlanned(*s, 1 << 30);  // one bucket
  }
}

TEST(AddGradientBucketsTest, WithSectionsTheBucketsFollowTheUpdatesOrder) {
  const std::unique_ptr<Step> plain = Planned("transformer", {});
  const int32_t n = static_cast<int32_t>(plain->forward->nodes().size());
  const std::unique_ptr<Step> s = Planned("transformer", {n / 3, 2 * n / 3});
  ExpectBucketsPlanned(*s, 0);
  ExpectBucketsPlanned(*s, 16 << 10);
}

TEST(AddGradientBucketsTest, WholeBackwardLifetimeStartsAtTheLossSeed) {
  const std::unique_ptr<Step> s = Planned("mlp", {});
  const SectionPlan whole = AddGradientBuckets(s->plan, 0, BucketLifetime::kWholeBackward).value();
  NodeId seed = kNone;
  for (NodeId n = 0; n < static_cast<NodeId>(whole.step->graph.nodes().size()); ++n) {
    if (whole.step->graph.node(n).kind == NodeKind::kLossSeed) seed = n;
  }
  ASSERT_NE(seed, kNone);
  for (const GradientBucket& b : whole.step->gradient_buckets) {
    EXPECT_EQ(whole.memory->tensors[b.tensor].lifetime.first_position, seed);
  }
}

TEST(AddGradientBucketsTest, RefusesAPlanThatHasThemAlready) {
  const std::unique_ptr<Step> s = Planned("mlp", {});
  const SectionPlan once = AddGradientBuckets(s->plan, 0).value();
  const absl::Status twice = AddGradientBuckets(once, 0).status();
  EXPECT_EQ(twice.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(twice.message(), HasSubstr("already"));
}

}  // namespace
}  // namespace headroom::planner
