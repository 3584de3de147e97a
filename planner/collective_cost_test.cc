#include "planner/collective_cost.h"

#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "graph/zoo.h"
#include "gtest/gtest.h"
#include "planner/section_search.h"
#include "planner/training_graph.h"

namespace headroom::planner {
namespace {

using ::testing::HasSubstr;

// Every node takes one second except the updates, which take none: what the backward hides
// is then plain to read off the schedule.
class UnitCostModel : public CostModel {
 public:
  std::string name() const override { return "unit"; }
  double NodeSeconds(const TrainingGraph& graph, NodeId id) const override {
    return graph.node(id).kind == NodeKind::kUpdate ? 0.0 : 1.0;
  }
  uint64_t NodeFlops(const TrainingGraph&, NodeId) const override { return 0; }
  double CopySeconds(uint64_t) const override { return 0; }
};

// An interconnect on which every allreduce takes `seconds`, whatever its size.
InterconnectSpec FixedLink(double seconds) {
  InterconnectSpec link;
  link.name = "fixed";
  link.bytes_per_second = 1e30;
  link.collective_overhead_seconds = seconds;
  return link;
}

// The plain step of the mlp at batch 4 under `cost`.
struct Plain {
  std::unique_ptr<graph::Graph> forward;
  std::unique_ptr<TrainingGraph> training;
  std::unique_ptr<SectionSearch> search;
  SectionPlan plan;
};

std::unique_ptr<Plain> PlainStep(const std::string& model, const CostModel& cost) {
  auto p = std::make_unique<Plain>();
  p->forward = std::make_unique<graph::Graph>(
      graph::Graph::FromProto(graph::BuildZooModel(graph::ZooSpec(model, 4)).value()).value());
  p->training =
      std::make_unique<TrainingGraph>(TrainingGraph::Build(*p->forward, TrainingOptions()).value());
  p->search = SectionSearch::Create(*p->training, cost, SearchOptions()).value();
  p->plan = p->search->Unconstrained().value();
  return p;
}

TEST(CollectiveCostTest, RingAllreduceOnKnownNumbers) {
  // 1 GB over 8 ranks at 100 GB/s, 5 us a step: 2*7/8 * 1e9 / 1e11 + 14 * 5e-6.
  EXPECT_DOUBLE_EQ(RingAllreduceSeconds(1000000000, 8, 100e9, 5e-6), 0.0175 + 70e-6);
  // 2 ranks move the whole buffer once each way: B / bandwidth + 2 steps.
  EXPECT_DOUBLE_EQ(RingAllreduceSeconds(50000000, 2, 50e9, 1e-6), 0.001 + 2e-6);
  EXPECT_EQ(RingAllreduceSeconds(1 << 20, 1, 50e9, 1e-6), 0.0);
}

TEST(CollectiveCostTest, OneNodeIsTheRingAndMoreAreHierarchical) {
  InterconnectSpec link = InterconnectPreset("nvlink+ib").value();
  link.collective_overhead_seconds = 0;
  const uint64_t bytes = 800000000;
  // 8 ranks: one node, the flat ring over NVLink.
  EXPECT_DOUBLE_EQ(AllreduceSeconds(bytes, 8, link).value(),
                   RingAllreduceSeconds(bytes, 8, 450e9, 3.4e-6));
  // 64 ranks: a ring of 8 over NVLink, then a ring of 8 nodes over IB carrying 1/8 each.
  const double expected = 2.0 * 7 / 8 * 8e8 / 450e9 + 14 * 3.4e-6 +  // within the node
                          2.0 * 7 / 8 * 1e8 / 50e9 + 14 * 9.6e-6;    // across nodes
  EXPECT_NEAR(AllreduceSeconds(bytes, 64, link).value(), expected, 1e-12);
  // "ib": every rank its own node, the flat ring over IB.
  InterconnectSpec ib = InterconnectPreset("ib").value();
  ib.collective_overhead_seconds = 0;
  EXPECT_NEAR(AllreduceSeconds(bytes, 16, ib).value(),
              RingAllreduceSeconds(bytes, 16, 50e9, 9.6e-6), 1e-12);
}

TEST(CollectiveCostTest, RanksThatDoNotFitTheInterconnectAreRefused) {
  const InterconnectSpec nvlink = InterconnectPreset("nvlink").value();
  absl::StatusOr<double> wide = AllreduceSeconds(1024, 16, nvlink);
  ASSERT_FALSE(wide.ok());
  EXPECT_THAT(wide.status().message(), HasSubstr("nvlink: 16 ranks exceed one node of 8"));
  absl::StatusOr<double> ragged =
      AllreduceSeconds(1024, 12, InterconnectPreset("nvlink+ib").value());
  ASSERT_FALSE(ragged.ok());
  EXPECT_THAT(ragged.status().message(), HasSubstr("12 ranks do not fill nodes of 8"));
  absl::StatusOr<InterconnectSpec> unknown = InterconnectPreset("token-ring");
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(),
              HasSubstr("'token-ring' is not a preset; choose one of nvlink, ib, pcie, "
                        "nvlink+ib, cpu"));
}

TEST(CollectiveCostTest, OverridesReplaceThePresetAndBadOnesNameTheField) {
  proto::InterconnectModel model;
  model.set_bytes_per_second(1e9);
  model.set_ranks_per_node(4);
  InterconnectSpec spec = InterconnectSpecFromProto(model, "nvlink+ib").value();
  EXPECT_EQ(spec.name, "nvlink+ib");
  EXPECT_EQ(spec.bytes_per_second, 1e9);
  EXPECT_EQ(spec.ranks_per_node, 4u);
  EXPECT_EQ(spec.inter_node_bytes_per_second, 50e9);
  model.set_inter_node_latency_seconds(-1);
  absl::StatusOr<InterconnectSpec> bad = InterconnectSpecFromProto(model, "nvlink+ib");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("interconnect.inter_node_latency_seconds: -1"));
}

TEST(CollectiveCostTest, OneRankIsTheStepItself) {
  const UnitCostModel cost;
  const std::unique_ptr<Plain> p = PlainStep("mlp", cost);
  DataParallelOptions options;
  options.interconnect = FixedLink(100);
  const DataParallelStep dp = PredictDataParallelStep(*p->plan.step, cost, options).value();
  EXPECT_EQ(dp.step_seconds, p->plan.step_seconds);
  EXPECT_EQ(dp.exposed_seconds, 0.0);
  EXPECT_EQ(dp.allreduce_seconds, 0.0);
  EXPECT_EQ(dp.scaling_efficiency(), 1.0);
}

TEST(CollectiveCostTest, EarlyBucketsHideAndTheLastDoesNot) {
  const UnitCostModel cost;
  const std::unique_ptr<Plain> p = PlainStep("mlp", cost);
  DataParallelOptions options;
  options.ranks = 4;
  options.interconnect = FixedLink(0.5);  // less than one node of backward
  const DataParallelStep dp = PredictDataParallelStep(*p->plan.step, cost, options).value();
  const TrainingGraph& g = p->plan.step->graph;
  int updates = 0;
  uint64_t gradient_bytes = 0;
  for (const TrainingNode& node : g.nodes()) {
    if (node.kind != NodeKind::kUpdate) continue;
    ++updates;
    for (TensorId t : node.inputs) {
      if (g.tensor(t).role == proto::ROLE_GRADIENT) gradient_bytes += g.tensor(t).bytes;
    }
  }
  // One bucket per gradient (bucket_bytes 0), every gradient once.
  ASSERT_EQ(static_cast<int>(dp.buckets.size()), updates);
  EXPECT_EQ(dp.communication_bytes, gradient_bytes);
  EXPECT_DOUBLE_EQ(dp.allreduce_seconds, 0.5 * updates);
  // The first bucket (the last layer's gradients) has backward nodes after it: it ends
  // before the backward does.
  const BucketTiming& first = dp.buckets.front();
  EXPECT_EQ(first.start_seconds, first.ready_seconds);
  EXPECT_LE(first.end_seconds, dp.backward_end_seconds);
  // The last buckets, ready when the backward ends (a node that writes a weight's and a
  // bias's gradient completes two), are all exposed (the updates take no time here), and
  // they are the only ones that are.
  int at_end = 0;
  for (const BucketTiming& b : dp.buckets) at_end += b.ready_seconds == dp.backward_end_seconds;
  ASSERT_GE(at_end, 1);
  EXPECT_LT(at_end, updates);
  EXPECT_DOUBLE_EQ(dp.exposed_seconds, 0.5 * at_end);
  EXPECT_DOUBLE_EQ(dp.step_seconds, p->plan.step_seconds + 0.5 * at_end);
  EXPECT_DOUBLE_EQ(dp.hidden_fraction(), 1.0 - static_cast<double>(at_end) / updates);
}

TEST(CollectiveCostTest, OneBucketForEverythingHidesNothing) {
  const UnitCostModel cost;
  const std::unique_ptr<Plain> p = PlainStep("mlp", cost);
  DataParallelOptions options;
  options.ranks = 4;
  options.interconnect = FixedLink(2);
  options.bucket_bytes = uint64_t{1} << 40;
  const DataParallelStep dp = PredictDataParallelStep(*p->plan.step, cost, options).value();
  ASSERT_EQ(dp.buckets.size(), 1u);
  EXPECT_DOUBLE_EQ(dp.exposed_seconds, 2.0);
  EXPECT_DOUBLE_EQ(dp.hidden_fraction(), 0.0);
}

TEST(CollectiveCostTest, BucketsCloseAtTheirSizeInTheOrderGradientsComplete) {
  const UnitCostModel cost;
  const std::unique_ptr<Plain> p = PlainStep("resnet18", cost);
  DataParallelOptions options;
  options.ranks = 2;
  options.interconnect = FixedLink(0.001);
  options.bucket_bytes = 4 << 20;
  const DataParallelStep dp = PredictDataParallelStep(*p->plan.step, cost, options).value();
  ASSERT_GT(dp.buckets.size(), 1u);
  uint64_t total = 0;
  for (size_t b = 0; b < dp.buckets.size(); ++b) {
    total += dp.buckets[b].bytes;
    // Every bucket but the last holds at least the bucket size; each starts after the one
    // before it ends (one communication stream) and no earlier than its last gradient.
    if (b + 1 < dp.buckets.size()) {
      EXPECT_GE(dp.buckets[b].bytes, options.bucket_bytes) << b;
    }
    if (b > 0) {
      EXPECT_GE(dp.buckets[b].start_seconds, dp.buckets[b - 1].end_seconds) << b;
    }
    EXPECT_GE(dp.buckets[b].start_seconds, dp.buckets[b].ready_seconds) << b;
  }
  EXPECT_EQ(total, dp.communication_bytes);
}

TEST(CollectiveCostTest, SyncBatchNormAllreducesLengthenTheStep) {
  const UnitCostModel cost;
  const std::unique_ptr<Plain> p = PlainStep("small_cnn", cost);
  const TrainingGraph& g = p->plan.step->graph;
  int forwards = 0, backwards = 0;
  for (const TrainingNode& node : g.nodes()) {
    if (node.op == "BatchNorm" && node.kind == NodeKind::kForward) ++forwards;
    if (node.op == "BatchNormGrad" && node.kind == NodeKind::kBackward) ++backwards;
  }
  ASSERT_GT(forwards, 0);
  DataParallelOptions options;
  options.ranks = 2;
  options.interconnect = FixedLink(0.25);
  const DataParallelStep plain = PredictDataParallelStep(*p->plan.step, cost, options).value();
  EXPECT_EQ(plain.batch_norm_allreduces, 0);
  options.sync_batch_norm = true;
  const DataParallelStep synced = PredictDataParallelStep(*p->plan.step, cost, options).value();
  // 2 in each forward, 1 in each backward that computes dx (small_cnn's do).
  EXPECT_EQ(synced.batch_norm_allreduces, 2 * forwards + backwards);
  EXPECT_DOUBLE_EQ(synced.batch_norm_seconds, 0.25 * synced.batch_norm_allreduces);
  // On the critical path: every one lengthens the step by at least its own time; the
  // gradient buckets are the same.
  EXPECT_GE(synced.step_seconds, plain.step_seconds + synced.batch_norm_seconds - 1e-12);
  EXPECT_EQ(synced.communication_bytes, plain.communication_bytes);
  EXPECT_DOUBLE_EQ(synced.allreduce_seconds, plain.allreduce_seconds);
  // One rank synchronises nothing.
  options.ranks = 1;
  const DataParallelStep one = PredictDataParallelStep(*p->plan.step, cost, options).value();
  EXPECT_EQ(one.batch_norm_allreduces, 0);
  EXPECT_EQ(one.step_seconds, p->plan.step_seconds);
}

}  // namespace
}  // namespace headroom::planner
