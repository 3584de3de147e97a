// --sync-batchnorm in process: 2 ranks (threads over LocalCollectives) at batch B train what
// one process at batch 2B trains, batch norm included; every collective a step issues is the
// one declared before the first step, in order; a re-forward (sections) issues none.
#include "dist/sync_batch_norm.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <thread>

#include "dist/data_parallel.h"
#include "dist/gradient_buckets.h"
#include "dist/local_collectives.h"
#include "executor/cpu/cpu_backend.h"
#include "executor/synthetic_data.h"
#include "executor/trainer.h"
#include "gmock/gmock.h"
#include "graph/zoo.h"
#include "gtest/gtest.h"
#include "util/check.h"

namespace headroom::dist {
namespace {

using ::testing::HasSubstr;

constexpr int kSteps = 6;
constexpr uint64_t kSeed = 11;

graph::Graph Model(const std::string& name, uint64_t batch) {
  absl::StatusOr<proto::GraphDef> def = graph::BuildZooModel(graph::ZooSpec(name, batch));
  CHECK(def.ok()) << def.status();
  absl::StatusOr<graph::Graph> g = graph::Graph::FromProto(*def);
  CHECK(g.ok()) << g.status();
  return *std::move(g);
}

int64_t CountBatchNorms(const graph::Graph& g) {
  int64_t n = 0;
  for (const graph::Node& node : g.nodes()) n += node.op->name == "BatchNorm";
  return n;
}

struct RankRun {
  std::vector<double> losses;
  std::vector<executor::HostTensor> state;
  // The counts of the collectives each step issued, in order (all steps).
  std::vector<size_t> issued_counts;
  // What the step declared: buckets and batch norm merged.
  std::vector<CollectiveSpec> declared;
  int64_t buckets = 0;
  int64_t batch_norm_allreduces = 0;
  bool recomputes_batch_norm = false;
};

// Trains `ranks` ranks of `name` at `batch` each on their shards of the global batches
// (sync: --sync-batchnorm; cuts: sections). Returns each rank's run.
std::vector<RankRun> TrainRanks(const std::string& name, int ranks, uint64_t batch, bool sync,
                                std::vector<int32_t> cuts) {
  const graph::Graph g = Model(name, batch);
  const graph::Graph global = Model(name, batch * ranks);
  absl::StatusOr<executor::SyntheticTask> task = executor::SyntheticTask::Create(global, kSeed);
  CHECK(task.ok()) << task.status();
  LocalGroup group(ranks);
  std::vector<RankRun> runs(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      RankRun& run = runs[r];
      std::unique_ptr<Collectives> c = group.Rank(r);
      std::unique_ptr<executor::Backend> cpu = executor::cpu::CreateCpuBackend();
      GradientBuckets buckets(c.get(), cpu.get(), {.bucket_bytes = 16 << 10});
      SyncBatchNorm bn(c.get());
      executor::TrainerOptions options;
      options.seed = kSeed;
      options.cuts = planner::SectionCuts{cuts, {}, {}};
      options.gradients = &buckets;
      if (sync) options.batch_norm_sync = &bn;
      absl::StatusOr<std::unique_ptr<executor::Trainer>> trainer =
          executor::Trainer::Create(g, cpu.get(), options);
      ASSERT_TRUE(trainer.ok()) << trainer.status();
      for (const planner::TrainingNode& node : (*trainer)->plan().step->graph.nodes()) {
        run.recomputes_batch_norm |=
            node.kind == planner::NodeKind::kRecompute && node.op == "BatchNorm";
      }
      run.declared =
          MergeByPosition(buckets.Sequence(), sync ? bn.Sequence() : std::vector<CollectiveSpec>{});
      for (int s = 0; s < kSteps; ++s) {
        absl::StatusOr<std::vector<executor::HostTensor>> shard =
            RankShard(task->Batch(s), g, r, ranks);
        ASSERT_TRUE(shard.ok()) << shard.status();
        absl::StatusOr<executor::StepResult> result = (*trainer)->StepOn(*shard);
        ASSERT_TRUE(result.ok()) << result.status();
        run.losses.push_back(result->loss);
      }
      run.state = *(*trainer)->State();
      for (const LocalCall& call : LocalCalls(*c)) run.issued_counts.push_back(call.count);
      run.buckets = static_cast<int64_t>(buckets.BucketBytes().size());
      run.batch_norm_allreduces = bn.stats().allreduces;
    });
  }
  for (std::thread& t : threads) t.join();
  return runs;
}

// One process at the global batch, no exchange.
RankRun TrainOne(const std::string& name, uint64_t batch) {
  const graph::Graph g = Model(name, batch);
  absl::StatusOr<executor::SyntheticTask> task = executor::SyntheticTask::Create(g, kSeed);
  CHECK(task.ok()) << task.status();
  std::unique_ptr<executor::Backend> cpu = executor::cpu::CreateCpuBackend();
  executor::TrainerOptions options;
  options.seed = kSeed;
  absl::StatusOr<std::unique_ptr<executor::Trainer>> trainer =
      executor::Trainer::Create(g, cpu.get(), options);
  CHECK(trainer.ok()) << trainer.status();
  RankRun run;
  for (int s = 0; s < kSteps; ++s) {
    absl::StatusOr<executor::StepResult> result = (*trainer)->StepOn(task->Batch(s));
    CHECK(result.ok()) << result.status();
    run.losses.push_back(result->loss);
  }
  run.state = *(*trainer)->State();
  return run;
}

// Returns the largest max|a - b| / max|b| over the tensors (compare_runs.py's measure).
double WorstTensorDifference(const std::vector<executor::HostTensor>& a,
                             const std::vector<executor::HostTensor>& b, std::string* worst) {
  EXPECT_EQ(a.size(), b.size());
  double result = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    if (a[i].dtype != proto::DTYPE_FLOAT32) continue;
    double diff = 0, scale = 1e-30;
    for (int64_t k = 0; k < b[i].num_elements(); ++k) {
      diff = std::max(diff, std::fabs(static_cast<double>(a[i].f32()[k]) - b[i].f32()[k]));
      scale = std::max(scale, std::fabs(static_cast<double>(b[i].f32()[k])));
    }
    if (diff / scale > result) {
      result = diff / scale;
      *worst = a[i].name;
    }
  }
  return result;
}

// The ranks' step loss is the mean of theirs (each over its shard).
double WorstLossDifference(const std::vector<RankRun>& ranks, const RankRun& one) {
  double worst = 0;
  for (int s = 0; s < kSteps; ++s) {
    double mean = 0;
    for (const RankRun& r : ranks) mean += r.losses[s];
    mean /= static_cast<double>(ranks.size());
    worst = std::max(worst, std::fabs(mean - one.losses[s]) / std::fabs(one.losses[s]));
  }
  return worst;
}

// Parameters and optimizer state always; the running statistics where they are the global
// batch's (`buffers_too`), not each rank's own.
void ExpectRanksBitwiseEqual(const std::vector<RankRun>& runs, bool buffers_too) {
  for (size_t r = 1; r < runs.size(); ++r) {
    ASSERT_EQ(runs[r].state.size(), runs[0].state.size());
    for (size_t i = 0; i < runs[0].state.size(); ++i) {
      if (!buffers_too && runs[0].state[i].name.find("running_") != std::string::npos) continue;
      EXPECT_EQ(runs[r].state[i].bytes, runs[0].state[i].bytes)
          << "rank " << r << " '" << runs[0].state[i].name << "'";
    }
  }
}

// Every step issued exactly the declared collectives, in the declared order: per step, each
// batch norm's forward (2), its backward where it computes dx, and the buckets.
void ExpectIssuedAsDeclared(const RankRun& run, int64_t expected_batch_norm_per_step) {
  const int64_t per_step = static_cast<int64_t>(run.declared.size());
  EXPECT_EQ(per_step, run.buckets + expected_batch_norm_per_step);
  ASSERT_EQ(static_cast<int64_t>(run.issued_counts.size()), kSteps * per_step);
  for (int64_t k = 0; k < kSteps * per_step; ++k) {
    EXPECT_EQ(run.issued_counts[k], run.declared[k % per_step].count)
        << "collective #" << k % per_step << " of step " << k / per_step << " ("
        << run.declared[k % per_step].what << ")";
  }
}

TEST(SyncBatchNormTest, TwoRanksTrainLikeOneProcessAtTheGlobalBatch) {
  const std::string name = "small_cnn";
  const RankRun one = TrainOne(name, 8);
  const int64_t norms = CountBatchNorms(Model(name, 4));
  ASSERT_EQ(norms, 2);
  // Both batch norms compute dx (a convolution before each needs it): 3 allreduces each.
  const std::vector<RankRun> plain = TrainRanks(name, 2, 4, /*sync=*/true, {});
  ExpectRanksBitwiseEqual(plain, true);
  ExpectIssuedAsDeclared(plain[0], 3 * norms);
  EXPECT_EQ(plain[0].batch_norm_allreduces, kSteps * 3 * norms);
  std::string worst;
  const double loss = WorstLossDifference(plain, one);
  const double tensors = WorstTensorDifference(plain[0].state, one.state, &worst);
  std::cout << "2 ranks x 4 against 1 x 8, small_cnn, " << kSteps << " steps: worst loss " << loss
            << " relative, worst tensor " << tensors << " ('" << worst << "')\n";
  EXPECT_LE(loss, 1e-5);
  // Parameters, optimizer state and the running statistics (global ones) alike.
  EXPECT_LE(tensors, 1e-5) << worst;

  // Sections: the re-forwards recompute batch norms and issue nothing more; the plan
  // changes no bit.
  const int32_t n = static_cast<int32_t>(Model(name, 4).nodes().size());
  const std::vector<RankRun> sections = TrainRanks(name, 2, 4, true, {n / 3, 2 * n / 3});
  ASSERT_TRUE(sections[0].recomputes_batch_norm) << "the cuts recompute no batch norm";
  ExpectRanksBitwiseEqual(sections, true);
  ExpectIssuedAsDeclared(sections[0], 3 * norms);
  EXPECT_EQ(sections[0].batch_norm_allreduces, kSteps * 3 * norms);
  EXPECT_EQ(sections[0].losses, plain[0].losses);
  for (size_t i = 0; i < plain[0].state.size(); ++i) {
    EXPECT_EQ(sections[0].state[i].bytes, plain[0].state[i].bytes) << plain[0].state[i].name;
  }
}

TEST(SyncBatchNormTest, WithoutSyncEachRankNormalisesItsShard) {
  // The same comparison fails without --sync-batchnorm (as PyTorch's DDP): the measure above
  // can see the difference.
  const std::string name = "small_cnn";
  const RankRun one = TrainOne(name, 8);
  const std::vector<RankRun> ranks = TrainRanks(name, 2, 4, /*sync=*/false, {});
  ExpectRanksBitwiseEqual(ranks, false);
  ExpectIssuedAsDeclared(ranks[0], 0);
  std::string worst;
  EXPECT_GT(WorstLossDifference(ranks, one), 1e-4);
  EXPECT_GT(WorstTensorDifference(ranks[0].state, one.state, &worst), 1e-3);
}

TEST(SyncBatchNormTest, AModelWithoutBatchNormIsRefused) {
  const graph::Graph g = Model("mlp", 4);
  LocalGroup group(1);
  std::unique_ptr<Collectives> c = group.Rank(0);
  std::unique_ptr<executor::Backend> cpu = executor::cpu::CreateCpuBackend();
  SyncBatchNorm bn(c.get());
  executor::TrainerOptions options;
  options.batch_norm_sync = &bn;
  absl::StatusOr<std::unique_ptr<executor::Trainer>> trainer =
      executor::Trainer::Create(g, cpu.get(), options);
  EXPECT_EQ(trainer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(trainer.status().message(), HasSubstr("no batch norm in training"));
}

TEST(SyncBatchNormTest, MergeByPositionKeepsEachListsOrderAndPutsAfterStepLast) {
  const std::vector<CollectiveSpec> buckets = {{"b0", 10, 5}, {"b1", 20, 9}};
  const std::vector<CollectiveSpec> norms = {
      {"f0", 1, 2}, {"f1", 2, 2}, {"g0", 3, 7}, {"loss", 4, -1}};
  std::vector<std::string> order;
  for (const CollectiveSpec& c : MergeByPosition(buckets, norms)) order.push_back(c.what);
  EXPECT_EQ(order, (std::vector<std::string>{"f0", "f1", "b0", "g0", "b1", "loss"}));
}

}  // namespace
}  // namespace headroom::dist
