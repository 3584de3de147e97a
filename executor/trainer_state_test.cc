// Resuming: a run saved after k steps and restored into a new trainer (under another plan)
// goes on bitwise as the uninterrupted run, Adam's step count and dropout masks included;
// read one tensor at a time it is SaveState()'s, and borrowed views of it restore as well;
// a state of another graph is refused; a set cancel flag stops a step.
#include <atomic>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
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

// A learning rate set between steps is the one the update uses: set before the first step
// it trains as a trainer made with that rate, bitwise; at 0 the parameters stay.
TEST(TrainerStateTest, ALearningRateSetBetweenStepsIsTheOneUsed) {
  const graph::Graph g = ZooGraph("mlp", 16, {{"depth", 3}, {"width", 32}, {"input", 24}});
  auto backend = cpu::CreateCpuBackend();
  TrainerOptions at_005;
  at_005.optimizer_params.learning_rate = 0.05;
  std::unique_ptr<Trainer> made = Trainer::Create(g, backend.get(), at_005).value();
  std::unique_ptr<Trainer> set = Trainer::Create(g, backend.get(), TrainerOptions{}).value();
  set->SetLearningRate(0.05);
  EXPECT_EQ(Losses(*made, 3), Losses(*set, 3));
  EXPECT_EQ(FirstDifference(made->State().value(), set->State().value()), "");

  set->SetLearningRate(0.0);
  const std::vector<HostTensor> before = set->State().value();
  ASSERT_TRUE(set->Step().ok());
  EXPECT_EQ(FirstDifference(before, set->State().value()), "");
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

TEST(TrainerStateTest, StateTensorsReadOneAtATimeAreSaveStateInItsOrder) {
  const graph::Graph g = ZooGraph("mlp", 8);
  std::unique_ptr<Backend> backend = cpu::CreateCpuBackend();
  std::unique_ptr<Trainer> t =
      MakeTrainer(g, backend.get(), std::nullopt, proto::Optimizer::KIND_ADAM);
  Losses(*t, 2);
  absl::StatusOr<ExecutorState> saved = t->SaveState();
  ASSERT_TRUE(saved.ok()) << saved.status();
  const std::vector<StateTensorInfo>& infos = t->StateTensors();
  ASSERT_EQ(infos.size(), saved->tensors.size());
  for (size_t i = 0; i < infos.size(); ++i) {
    const HostTensor& expected = saved->tensors[i];
    EXPECT_EQ(infos[i].name, expected.name) << "tensor " << i;
    EXPECT_EQ(infos[i].shape, expected.shape) << expected.name;
    EXPECT_EQ(infos[i].dtype, expected.dtype) << expected.name;
    ASSERT_EQ(infos[i].bytes, expected.bytes.size()) << expected.name;
    std::vector<uint8_t> read(infos[i].bytes, 0xAB);
    ASSERT_TRUE(t->ReadStateTensor(i, absl::MakeSpan(read)).ok()) << expected.name;
    EXPECT_TRUE(read == expected.bytes) << "'" << expected.name << "' read alone differs";
  }
  std::vector<uint8_t> short_buffer(infos[0].bytes - 1);
  absl::Status wrong_size = t->ReadStateTensor(0, absl::MakeSpan(short_buffer));
  EXPECT_EQ(wrong_size.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong_size.message(), HasSubstr(absl::StrCat("'", infos[0].name, "'")));
  EXPECT_EQ(t->ReadStateTensor(infos.size(), absl::MakeSpan(short_buffer)).code(),
            absl::StatusCode::kOutOfRange);
}

TEST(TrainerStateTest, RestoringBorrowedViewsInAnyOrderResumesBitwise) {
  const graph::Graph g = ZooGraph("mlp", 8);
  std::unique_ptr<Backend> backend = cpu::CreateCpuBackend();
  const proto::Optimizer::Kind sgd = proto::Optimizer::KIND_SGD_MOMENTUM;
  std::unique_ptr<Trainer> straight = MakeTrainer(g, backend.get(), std::nullopt, sgd);
  const std::vector<double> all = Losses(*straight, 4);

  std::unique_ptr<Trainer> first = MakeTrainer(g, backend.get(), std::nullopt, sgd);
  Losses(*first, 2);
  absl::StatusOr<ExecutorState> saved = first->SaveState();
  ASSERT_TRUE(saved.ok()) << saved.status();
  std::vector<StateTensorView> views;
  for (auto it = saved->tensors.rbegin(); it != saved->tensors.rend(); ++it) {
    views.push_back({it->name, it->shape, it->dtype, it->bytes});
  }
  std::unique_ptr<Trainer> resumed = MakeTrainer(g, backend.get(), std::nullopt, sgd);
  ASSERT_TRUE(resumed->RestoreState(2, views).ok());
  EXPECT_EQ(resumed->steps_run(), 2);
  const std::vector<double> rest = Losses(*resumed, 2);
  EXPECT_EQ(rest[0], all[2]);
  EXPECT_EQ(rest[1], all[3]);

  // A view of the wrong size is refused, naming it, before anything is written.
  const std::vector<uint8_t> truncated(views[0].bytes.begin(), views[0].bytes.end() - 1);
  views[0].bytes = truncated;
  absl::Status refused = resumed->RestoreState(7, views);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr(absl::StrCat("saved '", views[0].name, "'")));
  EXPECT_EQ(resumed->steps_run(), 4) << "a refused state leaves the step count";
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
