#include "planner/plan_request.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "graph/chain_testing.h"
#include "graph/zoo.h"
#include "gtest/gtest.h"
#include "util/cancellation.h"

namespace headroom::planner {
namespace {

using ::testing::HasSubstr;

graph::Graph Zoo(const std::string& name, uint64_t batch) {
  absl::StatusOr<graph::Graph> g =
      graph::Graph::FromProto(graph::BuildZooModel(graph::ZooSpec(name, batch)).value());
  EXPECT_TRUE(g.ok()) << g.status();
  return *std::move(g);
}

graph::Graph Chain(int length) {
  absl::StatusOr<graph::Graph> g = graph::Graph::FromProto(graph::ReluChain(length));
  EXPECT_TRUE(g.ok()) << g.status();
  return *std::move(g);
}

uint64_t SumOfRoles(const proto::PlanSummary& s) {
  uint64_t sum = 0;
  for (const proto::RoleBytes& r : s.bytes_by_role()) sum += r.bytes();
  return sum;
}

TEST(PlanRequestTest, WithoutABudgetThePlainStepIsOneSection) {
  const graph::Graph g = Zoo("resnet18", 4);
  absl::StatusOr<proto::PlanResponse> r = AnswerPlan(g, proto::PlanOptions());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->sections_size(), 1);
  EXPECT_EQ(r->sections(0).first_node(), g.node(0).name);
  EXPECT_FALSE(r->sections(0).recomputed());
  const proto::PlanSummary& s = r->summary();
  EXPECT_EQ(s.predicted_peak_bytes(), s.arena_bytes());
  EXPECT_EQ(s.predicted_peak_bytes(), s.unconstrained_peak_bytes());
  EXPECT_LE(s.lower_bound_bytes(), s.arena_bytes());
  EXPECT_LE(s.arena_bytes(), s.no_sharing_bytes());
  EXPECT_EQ(SumOfRoles(s), s.no_sharing_bytes());
  EXPECT_DOUBLE_EQ(s.overhead_ratio(), 1.0);
  EXPECT_THAT(s.cost_model(), HasSubstr("cpu"));
}

TEST(PlanRequestTest, UnderABudgetThePlanFitsAndMatchesTheSearch) {
  const graph::Graph g = Zoo("resnet18", 32);
  proto::PlanOptions options;
  const uint64_t plain = AnswerPlan(g, options)->summary().predicted_peak_bytes();
  options.set_budget_bytes(plain * 3 / 4);
  options.mutable_device()->set_preset("h100");
  absl::StatusOr<proto::PlanResponse> r = AnswerPlan(g, options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LE(r->summary().predicted_peak_bytes(), options.budget_bytes());
  EXPECT_GT(r->sections_size(), 1);
  EXPECT_GT(r->summary().overhead_ratio(), 1.0);
  EXPECT_EQ(r->summary().budget_bytes(), options.budget_bytes());
  // The same search by hand gives the same plan.
  TrainingGraph training = TrainingGraph::Build(g, TrainingOptions()).value();
  RooflineCostModel cost(g, DevicePreset("h100").value());
  auto search = SectionSearch::Create(training, cost, SearchOptions()).value();
  SectionPlan plan = search->Plan(options.budget_bytes()).value();
  EXPECT_EQ(r->summary().predicted_peak_bytes(), plan.peak_bytes);
  EXPECT_EQ(r->sections_size(), static_cast<int>(plan.step->sections.size()));
  // Sections tile the forward order.
  for (int i = 1; i < r->sections_size(); ++i) EXPECT_EQ(r->sections(i).index(), i);
}

TEST(PlanRequestTest, ABudgetBelowTheMinimumNamesTheMinimum) {
  const graph::Graph g = Zoo("mlp", 8);
  proto::PlanOptions options;
  options.set_budget_bytes(1024);
  absl::Status s = AnswerPlan(g, options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("smallest peak"));
}

TEST(PlanRequestTest, FrontierPointsComeWithTheirSections) {
  const graph::Graph g = Zoo("mlp", 8);
  proto::PlanOptions options;
  options.set_frontier(true);
  absl::StatusOr<proto::PlanResponse> r = AnswerPlan(g, options);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_GT(r->frontier_size(), 0);
  for (const proto::FrontierPoint& p : r->frontier()) {
    EXPECT_GT(p.peak_bytes(), 0u);
    EXPECT_GE(p.num_sections(), 1u);
    EXPECT_FALSE(p.strategy().empty());
  }
}

TEST(PlanRequestTest, InferenceAndBadOptions) {
  const graph::Graph g = Zoo("mlp", 8);
  proto::PlanOptions options;
  options.set_inference(true);
  absl::StatusOr<proto::PlanResponse> r = AnswerPlan(g, options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->summary().strategy(), "inference");
  EXPECT_LT(r->summary().arena_bytes(), AnswerPlan(g, proto::PlanOptions())->summary().arena_bytes());
  options.set_budget_bytes(1 << 20);
  EXPECT_EQ(AnswerPlan(g, options).status().code(), absl::StatusCode::kInvalidArgument);
  proto::PlanOptions misaligned;
  misaligned.set_alignment_bytes(100);
  EXPECT_THAT(AnswerPlan(g, misaligned).status().message(), HasSubstr("alignment_bytes"));
  // Powers of two past a page: 2^40 planned a 15 TiB arena, 2^62 aborted in the assigner.
  for (const uint64_t huge : {uint64_t{8192}, uint64_t{1} << 40, uint64_t{1} << 62}) {
    misaligned.set_alignment_bytes(huge);
    absl::Status status = AnswerPlan(g, misaligned).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(),
                HasSubstr(absl::StrCat("alignment_bytes: ", huge, " is not a power of two at "
                                       "most 4096")));
  }
  misaligned.set_alignment_bytes(4096);
  EXPECT_TRUE(AnswerPlan(g, misaligned).ok());
  // Unknown enum values survive proto3 parsing; they are refused, named, not planned.
  proto::PlanOptions unknown_kind;
  unknown_kind.mutable_optimizer()->set_kind(static_cast<proto::Optimizer::Kind>(99));
  EXPECT_THAT(AnswerPlan(g, unknown_kind).status().message(),
              HasSubstr("options.optimizer.kind: 99 is not an Optimizer.Kind"));
  proto::PlanOptions nan_rate;
  nan_rate.mutable_optimizer()->set_learning_rate(std::nan(""));
  EXPECT_THAT(AnswerPlan(g, nan_rate).status().message(),
              HasSubstr("options.optimizer.learning_rate: nan is not a positive finite number"));
  proto::PlanOptions unknown_device;
  unknown_device.mutable_device()->set_preset("tpu");
  EXPECT_EQ(AnswerPlan(g, unknown_device).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PlanRequestTest, AnExpiredTokenStopsAPlanWithItsStatus) {
  const graph::Graph g = Chain(10000);
  const absl::Time start = absl::Now() - absl::Seconds(2);
  const util::CancellationToken expired(start + absl::Seconds(1), "a limit of 1 s", nullptr, start);
  const absl::Status status =
      AnswerPlan(g, proto::PlanOptions(), nullptr, PlanBackend(), &expired).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_THAT(status.message(), HasSubstr("a limit of 1 s has passed"));
  const util::CancellationToken cancelled(absl::InfiniteFuture(), "none", [] { return true; });
  EXPECT_EQ(AnswerPlan(g, proto::PlanOptions(), nullptr, PlanBackend(), &cancelled).status().code(),
            absl::StatusCode::kCancelled);
}

TEST(PlanRequestTest, ADeadlineThatPassesDuringTheSearchStopsIt) {
  // Without a token this plan takes tens of seconds, its time in the section search's
  // dynamic program; with one it ends soon after the deadline. (How soon is measured by
  // tests/server_e2e_test, against headroomd's CPU time, not asserted here.)
  const graph::Graph g = Chain(10000);
  const util::CancellationToken token(absl::Now() + absl::Milliseconds(100), "a test's 100 ms");
  const absl::Status status =
      AnswerPlan(g, proto::PlanOptions(), nullptr, PlanBackend(), &token).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_THAT(status.message(), HasSubstr("a test's 100 ms has passed"));
}

TEST(PlanRequestTest, ACancellationAtAnyCheckStopsThePlan) {
  // A budget below every candidate and a frontier: every phase runs (the pool's dynamic
  // program, exact plans, the descent). Count the checks of a whole plan, then cancel at
  // several of them: each gives CANCELLED, so no phase ignores the token.
  const graph::Graph g = Chain(200);
  proto::PlanOptions options;
  options.set_frontier(true);
  options.set_budget_bytes(1);
  std::atomic<int> checks{0};
  const util::CancellationToken counting(absl::InfiniteFuture(), "none", [&checks] {
    ++checks;
    return false;
  });
  const absl::Status whole = AnswerPlan(g, options, nullptr, PlanBackend(), &counting).status();
  EXPECT_EQ(whole.code(), absl::StatusCode::kFailedPrecondition) << whole;
  const int total = checks.load();
  EXPECT_GT(total, 200) << "the dynamic program checks once per start position";
  for (const int at : {1, total / 4, total / 2, 3 * total / 4, total}) {
    std::atomic<int> seen{0};
    const util::CancellationToken token(absl::InfiniteFuture(), "none",
                                        [&seen, at] { return ++seen >= at; });
    const absl::Status status = AnswerPlan(g, options, nullptr, PlanBackend(), &token).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kCancelled)
        << "cancelled at check " << at << " of " << total << ": " << status;
    EXPECT_EQ(seen.load(), at) << "checks went on after the cancellation";
  }
}

uint64_t RoleBytes(const proto::PlanSummary& s, proto::TensorRole role) {
  for (const proto::RoleBytes& r : s.bytes_by_role()) {
    if (r.role() == role) return r.bytes();
  }
  return 0;
}

TEST(PlanRequestTest, OneRankIsThePlanWithoutRanks) {
  const graph::Graph g = Zoo("resnet18", 4);
  proto::PlanOptions options;
  options.mutable_device()->set_preset("h100");
  options.set_frontier(true);
  const proto::PlanResponse alone = AnswerPlan(g, options).value();
  options.mutable_data_parallel()->set_ranks(1);
  options.mutable_data_parallel()->mutable_interconnect()->set_preset("ib");
  const proto::PlanResponse one = AnswerPlan(g, options).value();
  EXPECT_FALSE(one.summary().has_data_parallel());
  EXPECT_EQ(one.DebugString(), alone.DebugString());
}

TEST(PlanRequestTest, RanksAddTheExposedAllreducesAndTheBuckets) {
  const graph::Graph g = Zoo("resnet18", 32);
  proto::PlanOptions options;
  options.mutable_device()->set_preset("h100");
  options.set_frontier(true);
  const proto::PlanResponse alone = AnswerPlan(g, options).value();
  options.mutable_data_parallel()->set_ranks(64);
  const proto::PlanResponse ranked = AnswerPlan(g, options).value();
  const proto::PlanSummary& s = ranked.summary();
  ASSERT_TRUE(s.has_data_parallel());
  const proto::DataParallelSummary& d = s.data_parallel();
  EXPECT_EQ(d.ranks(), 64u);
  EXPECT_EQ(d.interconnect(), "nvlink+ib");  // the default on a GPU preset
  // Every parameter's gradient is in a bucket once (float32 like the parameter).
  EXPECT_EQ(d.communication_bytes(), RoleBytes(alone.summary(), proto::ROLE_PARAMETER));
  EXPECT_EQ(RoleBytes(s, proto::ROLE_COMMUNICATION), d.communication_bytes());
  // The buckets are laid out in the plan's arena: its peak holds them, and at most their
  // bytes more than the plan without them.
  EXPECT_EQ(d.peak_with_communication_bytes(), s.predicted_peak_bytes());
  EXPECT_GT(s.predicted_peak_bytes(), alone.summary().predicted_peak_bytes());
  EXPECT_LE(s.predicted_peak_bytes(),
            alone.summary().predicted_peak_bytes() + d.communication_bytes());
  // The step: one rank's plus what the backward does not hide, and never all of it.
  EXPECT_DOUBLE_EQ(d.single_rank_step_seconds(), alone.summary().predicted_step_seconds());
  EXPECT_GT(d.exposed_allreduce_seconds(), 0);
  EXPECT_LT(d.exposed_allreduce_seconds(), d.allreduce_seconds());
  EXPECT_DOUBLE_EQ(s.predicted_step_seconds(),
                   d.single_rank_step_seconds() + d.exposed_allreduce_seconds());
  EXPECT_DOUBLE_EQ(d.scaling_efficiency(),
                   d.single_rank_step_seconds() / s.predicted_step_seconds());
  // The frontier holds both: each point's buckets and exposed time.
  ASSERT_EQ(ranked.frontier_size(), alone.frontier_size());
  for (int i = 0; i < ranked.frontier_size(); ++i) {
    EXPECT_EQ(ranked.frontier(i).peak_bytes(),
              alone.frontier(i).peak_bytes() + d.communication_bytes())
        << i;
    EXPECT_DOUBLE_EQ(ranked.frontier(i).step_seconds(),
                     alone.frontier(i).step_seconds() + d.exposed_allreduce_seconds())
        << i;
  }
}

TEST(PlanRequestTest, TheBucketsAreTensorsOfThePlan) {
  const graph::Graph g = Zoo("mlp", 8);
  proto::PlanOptions options;
  options.set_tensors(true);
  options.mutable_data_parallel()->set_ranks(2);
  options.mutable_data_parallel()->set_bucket_bytes(16 << 10);
  const proto::PlanResponse r = AnswerPlan(g, options).value();
  uint64_t bucket_bytes = 0;
  int buckets = 0;
  for (const proto::PlannedTensor& t : r.tensors()) {
    if (t.role() != proto::ROLE_COMMUNICATION) continue;
    EXPECT_EQ(t.name(), absl::StrCat("gradient_bucket.", buckets));
    // Alive from its first gradient's update to the step's end (the first layer's bucket
    // fills at the last update: the last position itself).
    EXPECT_EQ(t.last_position(), static_cast<int32_t>(r.summary().num_steps()) - 1);
    EXPECT_LE(t.first_position(), t.last_position());
    if (buckets == 0) {
      EXPECT_LT(t.first_position(), t.last_position());
    }
    EXPECT_LE(t.offset() + t.bytes(), r.summary().predicted_peak_bytes());
    bucket_bytes += t.bytes();
    ++buckets;
  }
  EXPECT_EQ(buckets, static_cast<int>(r.summary().data_parallel().num_buckets()));
  EXPECT_EQ(bucket_bytes, r.summary().data_parallel().communication_bytes());
}

TEST(PlanRequestTest, SyncBatchNormAddsItsAllreducesToTheStep) {
  const graph::Graph g = Zoo("resnet18", 8);
  proto::PlanOptions options;
  options.mutable_data_parallel()->set_ranks(2);
  const proto::PlanSummary plain = AnswerPlan(g, options).value().summary();
  options.mutable_data_parallel()->set_sync_batch_norm(true);
  const proto::PlanSummary synced = AnswerPlan(g, options).value().summary();
  // resnet18's 20 batch norms: 2 allreduces in each forward, 1 in each backward.
  EXPECT_EQ(synced.data_parallel().batch_norm_allreduces(), 60u);
  EXPECT_GT(synced.data_parallel().batch_norm_allreduce_seconds(), 0);
  EXPECT_GE(synced.predicted_step_seconds(),
            plain.predicted_step_seconds() + synced.data_parallel().batch_norm_allreduce_seconds() -
                1e-12);
  EXPECT_EQ(plain.data_parallel().batch_norm_allreduces(), 0u);
  // A model without batch norm has nothing to synchronise.
  absl::StatusOr<proto::PlanResponse> mlp = AnswerPlan(Zoo("mlp", 8), options);
  ASSERT_FALSE(mlp.ok());
  EXPECT_THAT(mlp.status().message(), HasSubstr("sync_batch_norm: the model has no batch norm"));
}

TEST(PlanRequestTest, ABudgetWithRanksHoldsTheBuckets) {
  const graph::Graph g = Zoo("resnet18", 32);
  proto::PlanOptions options;
  options.mutable_device()->set_preset("h100");
  options.mutable_data_parallel()->set_ranks(8);
  const proto::PlanSummary plain = AnswerPlan(g, options).value().summary();
  const uint64_t buckets = plain.data_parallel().communication_bytes();
  options.set_budget_bytes((plain.predicted_peak_bytes() - buckets) * 3 / 4 + buckets);
  const proto::PlanSummary fit = AnswerPlan(g, options).value().summary();
  EXPECT_LE(fit.data_parallel().peak_with_communication_bytes(), options.budget_bytes());
  EXPECT_EQ(fit.data_parallel().peak_with_communication_bytes(), fit.predicted_peak_bytes());
  EXPECT_GE(fit.predicted_peak_bytes(), buckets);
  options.set_budget_bytes(buckets);
  absl::StatusOr<proto::PlanResponse> none = AnswerPlan(g, options);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(none.status().message(), HasSubstr("does not hold the 8 ranks' gradient buckets"));
}

TEST(PlanRequestTest, BadRanksAndInterconnectsNameTheValueAndTheChoices) {
  const graph::Graph g = Zoo("mlp", 4);
  proto::PlanOptions options;
  options.mutable_device()->set_preset("h100");
  options.mutable_data_parallel()->set_ranks(70000);
  EXPECT_THAT(AnswerPlan(g, options).status().message(),
              HasSubstr("options.data_parallel.ranks: 70000 is more than 65536"));
  options.mutable_data_parallel()->set_ranks(16);
  options.mutable_data_parallel()->mutable_interconnect()->set_preset("nvlink");
  EXPECT_THAT(AnswerPlan(g, options).status().message(),
              HasSubstr("options.data_parallel.ranks: interconnect nvlink: 16 ranks exceed one "
                        "node of 8"));
  options.mutable_data_parallel()->mutable_interconnect()->set_preset("carrier-pigeon");
  EXPECT_THAT(AnswerPlan(g, options).status().message(),
              HasSubstr("options.data_parallel.interconnect 'carrier-pigeon' is not a preset; "
                        "choose one of nvlink, ib, pcie, nvlink+ib, cpu"));
  options.mutable_data_parallel()->mutable_interconnect()->set_preset("");
  options.set_inference(true);
  EXPECT_THAT(AnswerPlan(g, options).status().message(), HasSubstr("an inference plan has none"));
}

// ---- Precision (graph/mixed_precision.h) ------------------------------------------------

proto::PlanOptions H100(proto::Precision precision, uint64_t budget_bytes = 0) {
  proto::PlanOptions options;
  options.mutable_device()->set_preset("h100");
  options.set_precision(precision);
  options.set_budget_bytes(budget_bytes);
  return options;
}

TEST(PlanRequestPrecisionTest, Bf16PlansTheRewrittenGraph) {
  const graph::Graph g = Zoo("resnet18", 32);
  absl::StatusOr<proto::PlanResponse> fp32 = AnswerPlan(g, H100(proto::PRECISION_FP32));
  absl::StatusOr<proto::PlanResponse> bf16 = AnswerPlan(g, H100(proto::PRECISION_BF16));
  ASSERT_TRUE(fp32.ok() && bf16.ok()) << fp32.status() << bf16.status();
  EXPECT_EQ(fp32->summary().precision(), "fp32");
  EXPECT_EQ(bf16->summary().precision(), "bf16");
  // Parameters and optimizer state are float32 in both; activations shrink.
  auto role = [](const proto::PlanSummary& s, proto::TensorRole r) {
    for (const proto::RoleBytes& b : s.bytes_by_role()) {
      if (b.role() == r) return b.bytes();
    }
    return uint64_t{0};
  };
  EXPECT_EQ(role(bf16->summary(), proto::ROLE_PARAMETER),
            role(fp32->summary(), proto::ROLE_PARAMETER));
  EXPECT_EQ(role(bf16->summary(), proto::ROLE_OPTIMIZER_STATE),
            role(fp32->summary(), proto::ROLE_OPTIMIZER_STATE));
  EXPECT_LT(bf16->summary().predicted_peak_bytes(), fp32->summary().predicted_peak_bytes());
  // The convolutions run at the bf16 rate: the step is faster.
  EXPECT_LT(bf16->summary().predicted_step_seconds(), fp32->summary().predicted_step_seconds());
}

TEST(PlanRequestPrecisionTest, AutoTakesBf16WhereFasterOrWhereOnlyItFits) {
  const graph::Graph g = Zoo("resnet18", 32);
  absl::StatusOr<proto::PlanResponse> plain = AnswerPlan(g, H100(proto::PRECISION_AUTO));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->summary().precision(), "bf16");  // Faster on the h100's tensor cores.
  // Where bf16 is no faster (its rate set to float32's), auto keeps float32.
  proto::PlanOptions same_rate = H100(proto::PRECISION_AUTO);
  same_rate.mutable_device()->set_bf16_flops_per_second(
      DevicePreset("h100")->peak_flops_per_second);
  same_rate.mutable_device()->set_memory_bytes_per_second(1e18);  // Compute-bound only.
  absl::StatusOr<proto::PlanResponse> kept = AnswerPlan(g, same_rate);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->summary().precision(), "fp32");
  // A budget below float32's smallest plan but above bf16's: only bf16 fits.
  absl::StatusOr<proto::PlanResponse> fp32_floor = AnswerPlan(g, H100(proto::PRECISION_FP32, 1024));
  ASSERT_EQ(fp32_floor.status().code(), absl::StatusCode::kFailedPrecondition);
  proto::PlanOptions frontier = same_rate;
  frontier.set_frontier(true);
  absl::StatusOr<proto::PlanResponse> points = AnswerPlan(g, frontier);
  ASSERT_TRUE(points.ok()) << points.status();
  uint64_t fp32_min = UINT64_MAX, bf16_min = UINT64_MAX;
  for (const proto::FrontierPoint& p : points->frontier()) {
    ASSERT_TRUE(p.precision() == "fp32" || p.precision() == "bf16") << p.precision();
    uint64_t& min = p.precision() == "bf16" ? bf16_min : fp32_min;
    min = std::min(min, p.peak_bytes());
  }
  ASSERT_LT(bf16_min, fp32_min) << "the frontier's smallest point is bf16";
  absl::StatusOr<proto::PlanResponse> only_bf16 = AnswerPlan(g, [&] {
    proto::PlanOptions o = same_rate;
    o.set_budget_bytes((bf16_min + fp32_min) / 2);
    return o;
  }());
  ASSERT_TRUE(only_bf16.ok()) << only_bf16.status();
  EXPECT_EQ(only_bf16->summary().precision(), "bf16");
  EXPECT_LE(only_bf16->summary().predicted_peak_bytes(), (bf16_min + fp32_min) / 2);
}

TEST(PlanRequestPrecisionTest, RefusalsNameTheField) {
  const graph::Graph g = Zoo("mlp", 8);
  proto::PlanOptions bad = H100(static_cast<proto::Precision>(7));
  EXPECT_THAT(AnswerPlan(g, bad).status().message(), HasSubstr("options.precision: 7"));
  // Neither precision fits: both floors are said.
  absl::StatusOr<proto::PlanResponse> none = AnswerPlan(g, H100(proto::PRECISION_AUTO, 1024));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(none.status().message(), HasSubstr("In bf16 mixed precision: budget"));
  EXPECT_THAT(none.status().message(), HasSubstr("In float32: budget"));
  // A measured cost model describes the float32 graph only.
  RooflineCostModel cost(g, DevicePreset("cpu").value());
  EXPECT_THAT(AnswerPlan(g, H100(proto::PRECISION_BF16), &cost).status().message(),
              HasSubstr("options.precision: bf16"));
  // Inference: bf16 plans the rewritten forward; auto has no step time to choose by.
  proto::PlanOptions inference = H100(proto::PRECISION_BF16);
  inference.set_inference(true);
  absl::StatusOr<proto::PlanResponse> forward = AnswerPlan(g, inference);
  ASSERT_TRUE(forward.ok()) << forward.status();
  EXPECT_EQ(forward->summary().precision(), "bf16");
  inference.set_precision(proto::PRECISION_AUTO);
  EXPECT_THAT(AnswerPlan(g, inference).status().message(), HasSubstr("options.precision: AUTO"));
}

}  // namespace
}  // namespace headroom::planner
