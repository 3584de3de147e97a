#include "dist/gradient_buckets.h"

#include <memory>
#include <thread>

#include "dist/local_collectives.h"
#include "executor/cpu/cpu_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/gradient_buckets.h"

namespace headroom::dist {
namespace {

using executor::GradientInfo;
using executor::TensorView;
using ::testing::HasSubstr;

GradientInfo Grad(const std::string& name, int64_t floats) {
  return {name, {floats}, proto::DTYPE_FLOAT32, static_cast<uint64_t>(floats) * 4};
}

// Gradients of 250, 750, 125 and 1250 floats (1000, 3000, 500, 5000 bytes) with 4000-byte
// buckets: {0, 1} (4000 bytes closes it), then {2, 3}.
const std::vector<GradientInfo> kGradients = {Grad("a", 250), Grad("b", 750), Grad("c", 125),
                                              Grad("d", 1250)};

// Buckets of `gradients` as the planner groups them (planner::GroupBySize), in memory of
// their own in place of an arena.
struct PlannedBuckets {
  std::vector<GradientInfo> gradients;
  std::vector<std::vector<float>> storage;
  std::vector<TensorView> views;
};

std::unique_ptr<PlannedBuckets> Plan(const std::vector<GradientInfo>& gradients,
                                     uint64_t bucket_bytes) {
  auto p = std::make_unique<PlannedBuckets>();
  p->gradients = gradients;
  std::vector<uint64_t> bytes;
  for (const GradientInfo& g : gradients) bytes.push_back(g.bytes);
  const std::vector<std::vector<int32_t>> groups = planner::GroupBySize(bytes, bucket_bytes);
  for (size_t k = 0; k < groups.size(); ++k) {
    uint64_t offset = 0;
    for (int32_t i : groups[k]) {
      p->gradients[i].bucket = static_cast<int32_t>(k);
      p->gradients[i].bucket_offset_bytes = offset;
      offset += bytes[i];
    }
    p->storage.emplace_back(offset / sizeof(float));
  }
  for (std::vector<float>& s : p->storage) {
    p->views.push_back(
        TensorView{s.data(), {static_cast<int64_t>(s.size())}, proto::DTYPE_FLOAT32});
  }
  return p;
}

absl::Status Prepare(GradientBuckets& buckets, const PlannedBuckets& plan) {
  return buckets.Prepare(plan.gradients, plan.views);
}

TEST(GradientBucketsTest, GroupsInCompletionOrderAndIssuesAtEachBucketsLastGradient) {
  LocalGroup group(1);
  std::unique_ptr<Collectives> c = group.Rank(0);
  std::unique_ptr<executor::Backend> cpu = executor::cpu::CreateCpuBackend();
  GradientBuckets buckets(c.get(), cpu.get(), {.bucket_bytes = 4000});
  const std::unique_ptr<PlannedBuckets> plan = Plan(kGradients, buckets.bucket_bytes());
  ASSERT_TRUE(Prepare(buckets, *plan).ok());
  EXPECT_EQ(buckets.BucketBytes(), (std::vector<uint64_t>{4000, 5500}));
  ASSERT_EQ(buckets.Sequence().size(), 2u);
  EXPECT_EQ(buckets.Sequence()[1].count, 1375u);

  std::vector<std::vector<float>> grads;
  for (const GradientInfo& g : kGradients) grads.emplace_back(g.bytes / 4, 1.5f);
  // +a: nothing issued; +b: bucket 0; +c: nothing; +d: bucket 1.
  const std::vector<size_t> issued_after = {0, 1, 1, 2};
  for (int step = 0; step < 2; ++step) {
    const size_t before = LocalCalls(*c).size();
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(
          buckets
              .OnGradientReady(
                  step, i, TensorView{grads[i].data(), kGradients[i].shape, proto::DTYPE_FLOAT32})
              .ok());
      EXPECT_EQ(LocalCalls(*c).size() - before, issued_after[i]) << "after gradient " << i;
    }
    for (int i = 0; i < 4; ++i) {
      absl::StatusOr<TensorView> reduced = buckets.ReducedGradient(step, i);
      ASSERT_TRUE(reduced.ok()) << reduced.status();
      EXPECT_EQ(reduced->shape, kGradients[i].shape);
      EXPECT_NE(reduced->data, grads[i].data());  // a copy: the arena's bytes are freed
      // In its planned bucket.
      EXPECT_EQ(reduced->data, plan->storage[plan->gradients[i].bucket].data() +
                                   plan->gradients[i].bucket_offset_bytes / sizeof(float));
      EXPECT_EQ(reduced->f32()[0], 1.5f);
    }
    ASSERT_TRUE(buckets.OnStepEnd(step).ok());
  }
  EXPECT_EQ(buckets.stats().allreduces, 4);
  EXPECT_EQ(buckets.stats().steps, 2);
  // Every step's bucket times, in order: issued, then waited for, done by the wait's end.
  const RankTimeline timeline = buckets.timeline();
  ASSERT_EQ(timeline.steps.size(), 2u);
  for (const std::vector<BucketTimes>& step : timeline.steps) {
    ASSERT_EQ(step.size(), 2u);
    for (const BucketTimes& t : step) {
      EXPECT_GT(t.issued, 0);
      EXPECT_LE(t.issued, t.wait_start);
      EXPECT_LE(t.wait_start, t.wait_end);
      EXPECT_LE(t.completed, t.wait_end);
    }
    EXPECT_LE(step[0].issued, step[1].issued);
  }
  EXPECT_LE(timeline.steps[0][1].wait_end, timeline.steps[1][0].issued);
}

TEST(GradientBucketsTest, ZeroBucketBytesGivesOneBucketPerGradient) {
  LocalGroup group(1);
  std::unique_ptr<Collectives> c = group.Rank(0);
  std::unique_ptr<executor::Backend> cpu = executor::cpu::CreateCpuBackend();
  GradientBuckets buckets(c.get(), cpu.get(), {.bucket_bytes = 0});
  const std::unique_ptr<PlannedBuckets> plan = Plan(kGradients, buckets.bucket_bytes());
  ASSERT_TRUE(Prepare(buckets, *plan).ok());
  EXPECT_EQ(buckets.BucketBytes(), (std::vector<uint64_t>{1000, 3000, 500, 5000}));
}

TEST(GradientBucketsTest, AveragesAcrossRanks) {
  // Rank r's gradient element k is (r + 1) * k: the average is 1.5 * k on both ranks.
  LocalGroup group(2);
  std::vector<std::vector<float>> results(2);
  std::vector<absl::Status> statuses(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Collectives> c = group.Rank(r);
      std::unique_ptr<executor::Backend> cpu = executor::cpu::CreateCpuBackend();
      GradientBuckets buckets(c.get(), cpu.get(), {.bucket_bytes = 4000});
      const std::unique_ptr<PlannedBuckets> plan = Plan(kGradients, 4000);
      statuses[r] = Prepare(buckets, *plan);
      if (!statuses[r].ok()) return;
      std::vector<std::vector<float>> grads;
      for (const GradientInfo& g : kGradients) {
        grads.emplace_back(g.bytes / 4);
        for (size_t k = 0; k < grads.back().size(); ++k) grads.back()[k] = (r + 1.0f) * k;
      }
      for (int i = 0; i < 4; ++i) {
        statuses[r] = buckets.OnGradientReady(
            0, i, TensorView{grads[i].data(), kGradients[i].shape, proto::DTYPE_FLOAT32});
        if (!statuses[r].ok()) return;
      }
      absl::StatusOr<TensorView> d = buckets.ReducedGradient(0, 3);
      if (!d.ok()) {
        statuses[r] = d.status();
        return;
      }
      results[r].assign(d->f32(), d->f32() + 1250);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    for (size_t k = 0; k < 1250; ++k) ASSERT_EQ(results[r][k], 1.5f * k) << "rank " << r;
  }
}

TEST(GradientBucketsTest, RefusesNonFloatGradientsNamingThem) {
  LocalGroup group(1);
  std::unique_ptr<Collectives> c = group.Rank(0);
  std::unique_ptr<executor::Backend> cpu = executor::cpu::CreateCpuBackend();
  GradientBuckets buckets(c.get(), cpu.get(), {});
  std::unique_ptr<PlannedBuckets> plan = Plan({Grad("a", 4)}, 0);
  plan->gradients[0].dtype = proto::DTYPE_INT64;
  const absl::Status s = Prepare(buckets, *plan);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'a'"));
}

TEST(GradientBucketsTest, RefusesAGradientOutsideItsPlannedBucket) {
  LocalGroup group(1);
  std::unique_ptr<Collectives> c = group.Rank(0);
  std::unique_ptr<executor::Backend> cpu = executor::cpu::CreateCpuBackend();
  GradientBuckets buckets(c.get(), cpu.get(), {.bucket_bytes = 4000});
  std::unique_ptr<PlannedBuckets> plan = Plan(kGradients, 4000);
  plan->gradients[1].bucket_offset_bytes = 1004;  // b's 3000 bytes would pass the bucket's end
  const absl::Status s = Prepare(buckets, *plan);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("'b' does not lie in its planned bucket 0"));
}

TEST(GradientBucketsTest, UpdatingBeforeTheBucketIsCompleteIsAnError) {
  LocalGroup group(1);
  std::unique_ptr<Collectives> c = group.Rank(0);
  std::unique_ptr<executor::Backend> cpu = executor::cpu::CreateCpuBackend();
  GradientBuckets buckets(c.get(), cpu.get(), {.bucket_bytes = 4000});
  const std::unique_ptr<PlannedBuckets> plan = Plan(kGradients, 4000);
  ASSERT_TRUE(Prepare(buckets, *plan).ok());
  std::vector<float> a(250, 1.0f);
  ASSERT_TRUE(buckets.OnGradientReady(0, 0, TensorView{a.data(), {250}}).ok());
  EXPECT_THAT(buckets.ReducedGradient(0, 0).status().message(),
              HasSubstr("before bucket 0 was complete"));
}

}  // namespace
}  // namespace headroom::dist
