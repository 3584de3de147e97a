// The executor's GradientExchange hook changes memory and timing, never math: one rank
// whose buckets hand every gradient back unchanged trains bitwise like a trainer without the
// hook, with and without sections (whose re-forwards issue no collective).
#include <memory>

#include "dist/gradient_buckets.h"
#include "dist/local_collectives.h"
#include "executor/cpu/cpu_backend.h"
#include "executor/trainer.h"
#include "graph/zoo.h"
#include "graph/zoo_testing.h"
#include "gtest/gtest.h"

namespace headroom::dist {
namespace {

struct TrainedRun {
  std::vector<executor::HostTensor> state;
  std::vector<double> losses;
  int64_t allreduces = 0;
};

TrainedRun Train(const graph::Graph& g, bool exchange, std::vector<int32_t> cuts) {
  std::unique_ptr<executor::Backend> cpu = executor::cpu::CreateCpuBackend();
  LocalGroup group(1);
  std::unique_ptr<Collectives> c = group.Rank(0);
  GradientBuckets buckets(c.get(), cpu.get(), {.bucket_bytes = 64 << 10});
  executor::TrainerOptions options;
  options.seed = 7;
  options.cuts = planner::SectionCuts{std::move(cuts), {}, {}};
  if (exchange) options.gradients = &buckets;
  absl::StatusOr<std::unique_ptr<executor::Trainer>> trainer =
      executor::Trainer::Create(g, cpu.get(), options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  TrainedRun run;
  if (!trainer.ok()) return run;
  for (int s = 0; s < 4; ++s) {
    absl::StatusOr<executor::StepResult> r = (*trainer)->Step();
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return run;
    run.losses.push_back(r->loss);
  }
  run.state = *(*trainer)->State();
  run.allreduces = buckets.stats().allreduces;
  if (exchange) {
    // One allreduce per bucket and step: the re-forwards of sections issue none.
    EXPECT_EQ(run.allreduces, 4 * static_cast<int64_t>(buckets.BucketBytes().size()));
  }
  return run;
}

void ExpectBitwiseEqual(const TrainedRun& a, const TrainedRun& b) {
  EXPECT_EQ(a.losses, b.losses);
  ASSERT_EQ(a.state.size(), b.state.size());
  for (size_t i = 0; i < a.state.size(); ++i) {
    EXPECT_EQ(a.state[i].bytes, b.state[i].bytes) << a.state[i].name;
  }
}

TEST(DeferredUpdateTest, OneRankTrainsBitwiseLikeNoExchange) {
  for (const std::string name : {"mlp", "transformer"}) {
    SCOPED_TRACE(name);
    absl::StatusOr<proto::GraphDef> def = graph::BuildZooModel(graph::SmallZooSpec(name, 4));
    ASSERT_TRUE(def.ok()) << def.status();
    absl::StatusOr<graph::Graph> g = graph::Graph::FromProto(*def);
    ASSERT_TRUE(g.ok()) << g.status();
    const TrainedRun plain = Train(*g, false, {});
    ExpectBitwiseEqual(Train(*g, true, {}), plain);
    // Three sections: re-forwards in the backward, still one allreduce per bucket and step.
    const int32_t n = static_cast<int32_t>(g->nodes().size());
    ExpectBitwiseEqual(Train(*g, true, {n / 3, 2 * n / 3}), plain);
  }
}

}  // namespace
}  // namespace headroom::dist
