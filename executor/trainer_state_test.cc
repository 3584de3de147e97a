// Resuming: a run saved after k steps and restored into a new trainer (under another plan)
// goes on bitwise as the uninterrupted run, Adam's step count and dropout masks included;
// a state of another graph is refused; a set cancel flag stops a step.
#include <atomic>
#include <memory>
#include <optional>
#include <vector>

#include "executor/cpu/cpu_backend.h"
#include "executor/executor_testing.h"
#include "executor/trainer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom::executor {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<Trainer> MakeTrainer(const graph::Graph& g, Backend* backend,
                                     std::optional<planner::SectionCuts> cuts,
                                     proto::Optimizer::Kind optimizer,
                                     const std::atomic<bool>* cancel = nullptr) {
  TrainerOptions options;
  options.seed = 11;
  options.optimizer = optimizer;
  options.cuts = cuts;
  options.cancel = cancel;
  if (optimizer == proto::Optimizer::KIND_ADAM) options.optimizer_params.learning_rate = 1e-3;
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(g, backend, options);
  CHECK(t.ok()) << t.status();
  return *std::move(t);
}

std::vector<double> Losses(Trainer& t, int steps) {
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) {
    absl::StatusOr<StepResult> r = t.Step();
    CHECK(r.ok()) << r.status();
    losses.push_back(r->loss);
  }
  return losses;
}

// Trains 6 steps straight, and 3 + save + restore into a sectioned trainer + 3; the losses
// of the last 3 steps and the final state must be bitwise equal.
void ExpectResumeIsExact(const graph::Graph& g, proto::Optimizer::Kind optimizer) {
  std::unique_ptr<Backend> backend = cpu::CreateCpuBackend();
  std::unique_ptr<Trainer> straight = MakeTrainer(g, backend.get(), std::nullopt, optimizer);
  const std::vector<double> all = Losses(*straight, 6);

  std::unique_ptr<Trainer> first = MakeTrainer(g, backend.get(), std::nullopt, optimizer);
  Losses(*first, 3);
  absl::StatusOr<ExecutorState> saved = first->SaveState();
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->steps_run, 3);
  first.reset();

  std::unique_ptr<Trainer> resumed =
      MakeTrainer(g, backend.get(), SqrtCutsWithOffload(g, optimizer), optimizer);
  ASSERT_GT(resumed->plan().step->sections.size(), 1u);
  ASSERT_TRUE(resumed->RestoreState(*saved).ok());
  EXPECT_EQ(resumed->steps_run(), 3);
  const std::vector<double> rest = Losses(*resumed, 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(rest[i], all[3 + i]) << g.name() << ": loss of step " << 3 + i << " after resume";
  }
  const std::vector<HostTensor> a = straight->SaveState()->tensors;
  const std::vector<HostTensor> b = resumed->SaveState()->tensors;
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_TRUE(a[i].bytes == b[i].bytes) << g.name() << ": '" << a[i].name << "' differs";
  }
}

TEST(TrainerStateTest, MlpWithSgdResumesBitwise) {
  ExpectResumeIsExact(ZooGraph("mlp", 8), proto::Optimizer::KIND_SGD_MOMENTUM);
}

TEST(TrainerStateTest, TransformerWithAdamAndDropoutResumesBitwise) {
  ExpectResumeIsExact(ZooGraph("transformer", 2), proto::Optimizer::KIND_ADAM);
}

TEST(TrainerStateTest, SavedStateHoldsTheOptimizerState) {
  const graph::Graph g = ZooGraph("mlp", 8);
  std::unique_ptr<Backend> backend = cpu::CreateCpuBackend();
  std::unique_ptr<Trainer> t =
      MakeTrainer(g, backend.get(), std::nullopt, proto::Optimizer::KIND_ADAM);
  const size_t parameters_and_buffers = t->State()->size();
  absl::StatusOr<ExecutorState> saved = t->SaveState();
  ASSERT_TRUE(saved.ok());
  // Adam keeps two moments per parameter, so the saved state is larger than State().
  EXPECT_GT(saved->tensors.size(), parameters_and_buffers);
}

TEST(TrainerStateTest, AStateOfAnotherGraphIsRefusedNamingTheTensor) {
  std::unique_ptr<Backend> backend = cpu::CreateCpuBackend();
  std::unique_ptr<Trainer> small = MakeTrainer(ZooGraph("mlp", 8), backend.get(), std::nullopt,
                                               proto::Optimizer::KIND_SGD_MOMENTUM);
  std::unique_ptr<Trainer> wide = MakeTrainer(ZooGraph("mlp", 8, {{"width", 48}}), backend.get(),
                                              std::nullopt, proto::Optimizer::KIND_SGD_MOMENTUM);
  absl::StatusOr<ExecutorState> saved = small->SaveState();
  ASSERT_TRUE(saved.ok());
  absl::Status s = wide->RestoreState(*saved);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("saved '"));
  saved->tensors.pop_back();
  EXPECT_THAT(small->RestoreState(*saved).message(), HasSubstr("has no '"));
}

TEST(TrainerStateTest, ACancelFlagStopsTheStep) {
  const graph::Graph g = ZooGraph("mlp", 8);
  std::unique_ptr<Backend> backend = cpu::CreateCpuBackend();
  std::atomic<bool> cancel{false};
  std::unique_ptr<Trainer> t = MakeTrainer(g, backend.get(), std::nullopt,
                                           proto::Optimizer::KIND_SGD_MOMENTUM, &cancel);
  ASSERT_TRUE(t->Step().ok());
  cancel = true;
  absl::StatusOr<StepResult> r = t->Step();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(r.status().message(), HasSubstr("cancelled in step 1"));
}

}  // namespace
}  // namespace headroom::executor
