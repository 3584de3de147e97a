// The executor's contracts on the CPU backend: plans change memory, never math (bitwise
// the same parameters with and without sections and offload), predicted is measured (the
// arena's high-water mark is the planned peak, every step), the loss falls, and a budget
// below the minimum fails before anything is allocated.
#include "executor/executor.h"

#include <cstring>
#include <iostream>
#include <map>
#include <optional>

#include "absl/strings/match.h"
#include "executor/cpu/cpu_backend.h"
#include "executor/executor_testing.h"
#include "executor/trainer.h"
#include "graph/graph_builder.h"
#include "graph/zoo.h"
#include "graph/zoo_testing.h"
#include "gtest/gtest.h"
#include "planner/section_search.h"
#include "planner/sections.h"
#include "util/check.h"

namespace headroom::executor {
namespace {

struct TrainRun {
  std::vector<StepResult> steps;
  std::vector<HostTensor> state;
  uint64_t predicted_peak_bytes = 0;
  int sections = 0;
  uint64_t offloaded_bytes = 0;
  int recomputed_nodes = 0;
};

TrainRun Train(const graph::Graph& forward, int steps, std::optional<planner::SectionCuts> cuts,
          proto::Optimizer::Kind optimizer = proto::Optimizer::KIND_SGD_MOMENTUM) {
  std::unique_ptr<Backend> backend = cpu::CreateCpuBackend();
  TrainerOptions options;
  options.seed = 7;
  options.cuts = cuts.value_or(planner::SectionCuts{});
  options.optimizer = optimizer;
  if (optimizer == proto::Optimizer::KIND_ADAM) options.optimizer_params.learning_rate = 1e-3;
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(forward, backend.get(), options);
  CHECK(trainer.ok()) << trainer.status();
  TrainRun run;
  run.predicted_peak_bytes = (*trainer)->plan().peak_bytes;
  run.sections = static_cast<int>((*trainer)->plan().step->sections.size());
  for (const planner::SectionInfo& s : (*trainer)->plan().step->sections) {
    run.recomputed_nodes += s.recompute_nodes;
  }
  for (int i = 0; i < steps; ++i) {
    absl::StatusOr<StepResult> r = (*trainer)->Step();
    CHECK(r.ok()) << r.status();
    run.offloaded_bytes += r->offloaded_bytes;
    run.steps.push_back(*r);
  }
  run.state = (*trainer)->State().value();
  return run;
}

void ExpectPredictedIsMeasured(const TrainRun& run, const std::string& what) {
  for (const StepResult& s : run.steps) {
    EXPECT_EQ(s.arena_high_water_bytes, run.predicted_peak_bytes)
        << what << " step " << s.step << ": measured high-water mark vs planned peak";
    EXPECT_LE(s.peak_live_bytes, run.predicted_peak_bytes) << what;
  }
}

void ExpectPlansChangeMemoryNotMath(const graph::Graph& g, int steps,
                                    proto::Optimizer::Kind optimizer,
                                    const planner::SectionCuts& cuts) {
  const TrainRun plain = Train(g, steps, std::nullopt, optimizer);
  const TrainRun sectioned = Train(g, steps, cuts, optimizer);
  ASSERT_GT(sectioned.sections, 1) << g.name();
  ASSERT_GT(sectioned.recomputed_nodes, 0) << g.name();
  EXPECT_LT(sectioned.predicted_peak_bytes, plain.predicted_peak_bytes) << g.name();
  EXPECT_EQ(FirstDifference(plain.state, sectioned.state), "")
      << g.name() << ": parameters differ after " << steps << " steps with sections";
  for (int i = 0; i < steps; ++i) {
    EXPECT_EQ(plain.steps[i].loss, sectioned.steps[i].loss) << g.name() << " step " << i;
  }
  ExpectPredictedIsMeasured(plain, g.name() + " plain");
  ExpectPredictedIsMeasured(sectioned, g.name() + " sectioned");
  std::cout << g.name() << ": plain peak " << plain.predicted_peak_bytes << " B, "
            << sectioned.sections << " sections peak " << sectioned.predicted_peak_bytes
            << " B, offloaded " << sectioned.offloaded_bytes / steps << " B/step, losses "
            << plain.steps.front().loss << " -> " << plain.steps.back().loss << "\n";
}

void ExpectPlansChangeMemoryNotMath(const graph::Graph& g, int steps,
                                    proto::Optimizer::Kind optimizer, bool keep = false) {
  ExpectPlansChangeMemoryNotMath(
      g, steps, optimizer,
      keep ? SqrtCutsKeepingHalf(g, optimizer) : SqrtCutsWithOffload(g, optimizer));
}

TEST(ExecutorTest, MlpSectionsAndOffloadGiveBitwiseSameParameters) {
  ExpectPlansChangeMemoryNotMath(ZooGraph("mlp", 512, {{"depth", 8}, {"width", 64}}), 4,
                                 proto::Optimizer::KIND_SGD_MOMENTUM);
}

TEST(ExecutorTest, MlpWithAdamSectionsGiveBitwiseSameParameters) {
  ExpectPlansChangeMemoryNotMath(ZooGraph("mlp", 512, {{"depth", 8}, {"width", 64}}), 3,
                                 proto::Optimizer::KIND_ADAM);
}

TEST(ExecutorTest, Resnet18SectionsAndOffloadGiveBitwiseSameParameters) {
  ExpectPlansChangeMemoryNotMath(ZooGraph("resnet18", 2, {{"image_size", 32}}), 2,
                                 proto::Optimizer::KIND_SGD_MOMENTUM);
}

TEST(ExecutorTest, TransformerSectionsAndOffloadGiveBitwiseSameParameters) {
  // The zoo transformer has dropout: a re-forward must replay the same masks.
  ExpectPlansChangeMemoryNotMath(ZooGraph("transformer", 2), 2,
                                 proto::Optimizer::KIND_SGD_MOMENTUM);
}

// Sections that keep some of the tensors they would recompute, some of them offloaded.
TEST(ExecutorTest, Resnet18KeptTensorsGiveBitwiseSameParameters) {
  ExpectPlansChangeMemoryNotMath(ZooGraph("resnet18", 2, {{"image_size", 32}}), 2,
                                 proto::Optimizer::KIND_SGD_MOMENTUM, /*keep=*/true);
}

TEST(ExecutorTest, TransformerKeptTensorsGiveBitwiseSameParameters) {
  ExpectPlansChangeMemoryNotMath(ZooGraph("transformer", 2), 2, proto::Optimizer::KIND_ADAM,
                                 /*keep=*/true);
}

// Nested sections (inner cuts): nodes re-run more than once, batch norms and dropouts among
// them, with the same parameters and the measured peak the planned one.
TEST(ExecutorTest, NestedSectionsGiveBitwiseSameParameters) {
  for (const graph::Graph& g :
       {ZooGraph("mlp", 512, {{"depth", 8}, {"width", 64}}),
        ZooGraph("resnet18", 2, {{"image_size", 32}}), ZooGraph("transformer", 2)}) {
    const planner::SectionCuts cuts = SqrtCutsNested(g);
    ASSERT_FALSE(cuts.inner_cuts.empty()) << g.name();
    const planner::TrainingGraph training = planner::TrainingGraph::Build(g, {}).value();
    const planner::RooflineCostModel cost(g, planner::DevicePreset("cpu").value());
    const planner::SectionedStep step = planner::ExpandSections(training, cuts, cost).value();
    int second_runs = 0;
    for (const planner::TrainingNode& node : step.graph.nodes()) {
      second_runs += absl::EndsWith(node.name, ".recompute2") ? 1 : 0;
    }
    EXPECT_GT(second_runs, 0) << g.name() << ": no node re-run twice";
    ExpectPlansChangeMemoryNotMath(g, 2, proto::Optimizer::KIND_SGD_MOMENTUM, cuts);
  }
}

TEST(ExecutorTest, LossFallsOnTheSyntheticTask) {
  const graph::Graph g = ZooGraph("mlp", 32, {{"depth", 3}, {"width", 64}});
  const TrainRun run = Train(g, 30, std::nullopt);
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) first += run.steps[i].loss / 5;
  for (int i = 25; i < 30; ++i) last += run.steps[i].loss / 5;
  EXPECT_LT(last, 0.5 * first) << "mean loss of steps 0-4 vs 25-29";
}

TEST(ExecutorTest, TrainingIsDeterministic) {
  const graph::Graph g = ZooGraph("resnet18", 2, {{"image_size", 32}});
  const TrainRun a = Train(g, 2, std::nullopt);
  const TrainRun b = Train(g, 2, std::nullopt);
  EXPECT_EQ(FirstDifference(a.state, b.state), "");
}

// A backend that records allocations and forwards everything to the CPU backend.
class RecordingBackend : public Backend {
 public:
  RecordingBackend() : cpu_(cpu::CreateCpuBackend()) {}
  std::string name() const override { return "recording"; }
  absl::StatusOr<std::unique_ptr<Buffer>> AllocateDevice(uint64_t bytes) override {
    ++allocations;
    return cpu_->AllocateDevice(bytes);
  }
  absl::StatusOr<std::unique_ptr<Buffer>> AllocateHost(uint64_t bytes) override {
    ++allocations;
    return cpu_->AllocateHost(bytes);
  }
  absl::StatusOr<std::unique_ptr<Event>> CopyAsync(CopyDirection d, void* dst, const void* src,
                                                   uint64_t bytes) override {
    return cpu_->CopyAsync(d, dst, src, bytes);
  }
  absl::Status ComputeWaits(Event& e) override { return cpu_->ComputeWaits(e); }
  absl::Status Upload(void* d, const void* s, uint64_t n) override { return cpu_->Upload(d, s, n); }
  absl::Status Download(void* d, const void* s, uint64_t n) override {
    return cpu_->Download(d, s, n);
  }
  absl::Status Forward(const ForwardArgs& a) override { return cpu_->Forward(a); }
  absl::Status Backward(const BackwardArgs& a) override { return cpu_->Backward(a); }
  absl::Status Update(const UpdateArgs& a) override { return cpu_->Update(a); }
  absl::Status Accumulate(const TensorView& o, const TensorView& a,
                          const TensorView& b) override {
    return cpu_->Accumulate(o, a, b);
  }
  absl::Status Fill(const TensorView& o, float v) override { return cpu_->Fill(o, v); }
  absl::Status Synchronize() override { return cpu_->Synchronize(); }
  uint64_t fixed_device_bytes() const override { return fixed_device; }

  int allocations = 0;
  // What the backend claims its context and handles hold (a CUDA backend's measurement).
  uint64_t fixed_device = 0;

 private:
  std::unique_ptr<Backend> cpu_;
};

TEST(ExecutorTest, BudgetBelowMinimumFailsBeforeAnythingIsAllocated) {
  const graph::Graph g = ZooGraph("mlp", 32, {{"depth", 4}, {"width", 64}});
  RecordingBackend backend;
  TrainerOptions options;
  options.budget_bytes = 1024;
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(g, &backend, options);
  ASSERT_FALSE(trainer.ok());
  EXPECT_EQ(trainer.status().code(), absl::StatusCode::kFailedPrecondition)
      << trainer.status();
  EXPECT_EQ(backend.allocations, 0);
}

// A run's budget covers the backend's context and handles too: the plan fits what they
// leave, and a budget they take whole fails before anything is allocated.
TEST(ExecutorTest, ReserveFixedCostLeavesRoomForTheBackendsContextAndHandles) {
  const graph::Graph g = ZooGraph("mlp", 2048, {{"depth", 8}, {"width", 128}});
  RecordingBackend backend;
  std::unique_ptr<Trainer> plain = Trainer::Create(g, &backend, TrainerOptions{}).value();
  const uint64_t unconstrained = plain->plan().peak_bytes;
  TrainerOptions options;
  options.budget_bytes = unconstrained;
  backend.fixed_device = unconstrained / 10;
  ASSERT_TRUE(ReserveFixedCost(backend, options).ok());
  EXPECT_EQ(options.budget_bytes, unconstrained - unconstrained / 10);
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(g, &backend, options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  // Without the fixed cost this budget would take the plain plan; with it, sections.
  EXPECT_LE((*trainer)->plan().peak_bytes + backend.fixed_device, unconstrained);

  TrainerOptions whole;
  whole.budget_bytes = unconstrained;
  backend.fixed_device = unconstrained;
  absl::Status taken = ReserveFixedCost(backend, whole);
  EXPECT_EQ(taken.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(taken.message().find("context and handles"), absl::string_view::npos) << taken;
  EXPECT_EQ(whole.budget_bytes, unconstrained);

  TrainerOptions unbudgeted;  // No budget: the plain plan, nothing to lower.
  EXPECT_TRUE(ReserveFixedCost(backend, unbudgeted).ok());
  EXPECT_EQ(unbudgeted.budget_bytes, 0u);
}

TEST(ExecutorTest, BudgetedPlanFitsAndRuns) {
  const graph::Graph g = ZooGraph("mlp", 2048, {{"depth", 8}, {"width", 128}});
  RecordingBackend backend;
  TrainerOptions plain_options;
  std::unique_ptr<Trainer> plain = Trainer::Create(g, &backend, plain_options).value();
  TrainerOptions options;
  options.budget_bytes = plain->plan().peak_bytes * 85 / 100;
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(g, &backend, options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  EXPECT_LE((*trainer)->plan().peak_bytes, options.budget_bytes);
  absl::StatusOr<StepResult> step = (*trainer)->Step();
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->arena_high_water_bytes, (*trainer)->plan().peak_bytes);
  EXPECT_LE(step->arena_high_water_bytes, options.budget_bytes);
}

}  // namespace
}  // namespace headroom::executor
