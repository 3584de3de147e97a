// Prefetch to device (TrainerOptions::prefetch_to_device) on the CPU backend, where the
// staging logic runs though nothing overlaps: the fit loop computes bitwise the same losses,
// parameters and optimizer state with it and without it, across an epoch boundary, with
// evaluation between steps, and through a resume from a checkpoint (also under a sectioned
// plan with offload); the staging slot's bytes count in the plan and the measured peak equals
// the predicted one with them; a budget pays for the slot; misuse is refused by name.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/idx_file.h"
#include "executor/callbacks.h"
#include "executor/cpu/cpu_backend.h"
#include "executor/executor_testing.h"
#include "executor/fit.h"
#include "executor/image_task.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "profiler/events.h"
#include "util/split_mix.h"

namespace headroom::executor {
namespace {

using ::testing::HasSubstr;

// `n` images of [1, size, size]: class c lights up row c, plus noise.
data::ImageDataset ToySet(int64_t n, int64_t size, int classes, uint64_t seed) {
  data::IdxArray images{data::kIdxUnsignedByte, {n, size, size}, {}};
  data::IdxArray labels{data::kIdxUnsignedByte, {n}, {}};
  for (int64_t i = 0; i < n; ++i) {
    const int c = static_cast<int>(SplitMix64(seed + i) % classes);
    labels.bytes.push_back(static_cast<uint8_t>(c));
    for (int64_t p = 0; p < size * size; ++p) {
      const uint8_t noise = static_cast<uint8_t>(SplitMix64(seed * 7919 + i * 131 + p) % 64);
      images.bytes.push_back(p / size == c ? 200 + noise / 2 : noise);
    }
  }
  return data::ImageDataset::Create("toy", std::move(images), std::move(labels), classes).value();
}

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> items(n);
  for (int64_t i = 0; i < n; ++i) items[i] = i;
  return items;
}

// small_cnn for 8x8 images of one channel, 4 classes, batch 4.
graph::Graph ToyCnn() {
  return ZooGraph("small_cnn", 4, {{"image_size", 8}, {"channels", 1}, {"classes", 4}});
}

std::unique_ptr<Trainer> MakeTrainer(const graph::Graph& g, Backend* backend, bool prefetch,
                                     std::optional<planner::SectionCuts> cuts = std::nullopt,
                                     uint64_t budget_bytes = 0) {
  TrainerOptions options;
  options.seed = 5;
  options.optimizer_params.learning_rate = 0.05;
  options.cuts = std::move(cuts);
  options.budget_bytes = budget_bytes;
  options.prefetch_to_device = prefetch;
  return Trainer::Create(g, backend, options).value();
}

// Records every step's loss.
class LossRecorder : public Callback {
 public:
  explicit LossRecorder(std::vector<double>* losses) : losses_(losses) {}
  std::string name() const override { return "losses"; }
  absl::Status OnStepEnd(FitLoop&, const StepResult& r) override {
    losses_->push_back(r.loss);
    return absl::OkStatus();
  }

 private:
  std::vector<double>* losses_;
};

// The schedule, evaluation every epoch (between steps, while the next batch is staged),
// checkpoints every 4 steps, and the loss recorder.
std::vector<std::unique_ptr<Callback>> Callbacks(const data::ImageDataset* held_out,
                                                 const std::string& dir,
                                                 std::vector<double>* losses) {
  std::vector<std::unique_ptr<Callback>> callbacks;
  callbacks.push_back(
      std::make_unique<LearningRateCallback>(ScheduleNamed("cosine", 0.05, 12, 3).value()));
  callbacks.push_back(std::make_unique<EvaluationCallback>(held_out, Iota(6), 1));
  callbacks.push_back(std::make_unique<LossRecorder>(losses));
  CheckpointOptions options;
  options.dir = dir;
  options.every_steps = 4;
  options.keep_last = 10;
  callbacks.push_back(std::make_unique<CheckpointCallback>(options));
  return callbacks;
}

std::unique_ptr<FitLoop> MakeLoop(Trainer* trainer, const data::ImageDataset* set,
                                  std::vector<std::unique_ptr<Callback>> callbacks,
                                  int64_t stop_at_step = 0) {
  FitOptions options;
  options.epochs = 2;
  options.stop_at_step = stop_at_step;
  data::LoaderOptions order;
  order.seed = 9;
  order.augmentation.crop_padding = 1;
  order.augmentation.horizontal_flip = true;
  return FitLoop::Create(trainer, set, Iota(26), order, options, std::move(callbacks)).value();
}

std::string TempDir(const std::string& name) {
  const std::string dir = absl::StrCat(testing::TempDir(), "/", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

struct RunEnd {
  std::vector<double> losses;
  std::vector<HostTensor> state;  // parameters, buffers and momentum
  FitSummary summary;
  uint64_t predicted_peak_bytes = 0;
};

// Trains 2 epochs of 6 batches (26 items, batch 4) from the start, or from checkpoint
// `resume` of `resume_dir`.
RunEnd Train(bool prefetch, std::optional<planner::SectionCuts> cuts = std::nullopt,
             const std::string& resume = "") {
  const graph::Graph g = ToyCnn();
  const data::ImageDataset set = ToySet(26, 8, 4, 6);
  const data::ImageDataset held_out = ToySet(6, 8, 4, 60);
  std::unique_ptr<Backend> backend = cpu::CreateCpuBackend();
  std::unique_ptr<Trainer> trainer = MakeTrainer(g, backend.get(), prefetch, std::move(cuts));
  RunEnd end;
  std::unique_ptr<FitLoop> fit =
      MakeLoop(trainer.get(), &set, Callbacks(&held_out, TempDir("run"), &end.losses));
  if (!resume.empty()) {
    EXPECT_TRUE(fit->Resume(resume).ok());
  }
  end.summary = fit->Run().value();
  end.state = trainer->SaveState().value().tensors;
  end.predicted_peak_bytes = trainer->plan().peak_bytes;
  return end;
}

TEST(PrefetchToDeviceTest, SameLossesAndStateOverTwoEpochsAndThePeakCountsTheSlot) {
  const RunEnd plain = Train(false);
  const RunEnd staged = Train(true);
  ASSERT_EQ(plain.summary.steps_run, 12);
  ASSERT_EQ(staged.summary.steps_run, 12);
  // Bitwise: every step's loss, every persistent tensor, and the evaluations.
  EXPECT_EQ(staged.losses, plain.losses);
  EXPECT_EQ(FirstDifference(staged.state, plain.state), "");
  for (const char* metric : {"eval_loss", "eval_accuracy", "train_loss"}) {
    EXPECT_EQ(staged.summary.metrics.at(metric).value, plain.summary.metrics.at(metric).value)
        << metric;
  }
  // The slot: the batch of 4 images of 8x8 float32 (1,024 B) and 4 int64 labels (32 B), each
  // rounded up to 256 B, after the plan's bytes; measured (the arena's high-water mark)
  // equals predicted.
  const graph::Graph g = ToyCnn();
  const uint64_t slot =
      StagingSlotBytes(planner::TrainingGraph::Build(g, planner::TrainingOptions{}).value());
  EXPECT_EQ(slot, 1024u + 256u);
  EXPECT_EQ(staged.predicted_peak_bytes, plain.predicted_peak_bytes + slot);
  EXPECT_EQ(plain.summary.arena_high_water_bytes, plain.predicted_peak_bytes);
  EXPECT_EQ(staged.summary.arena_high_water_bytes, staged.predicted_peak_bytes);
}

TEST(PrefetchToDeviceTest, ResumedFromACheckpointEndsBitwiseWhereThePlainRunDoes) {
  const RunEnd plain = Train(false);
  // Killed after step 9 with prefetch on (the staged batch of step 9 is dropped), then
  // resumed with it from step 8 (mid-epoch 1) and from step 4 under sections with offload.
  const std::string dir = TempDir("killed");
  {
    const graph::Graph g = ToyCnn();
    const data::ImageDataset set = ToySet(26, 8, 4, 6);
    const data::ImageDataset held_out = ToySet(6, 8, 4, 60);
    std::unique_ptr<Backend> backend = cpu::CreateCpuBackend();
    std::unique_ptr<Trainer> killed = MakeTrainer(g, backend.get(), true);
    std::vector<double> losses;
    std::unique_ptr<FitLoop> first =
        MakeLoop(killed.get(), &set, Callbacks(&held_out, dir, &losses), /*stop_at_step=*/9);
    ASSERT_EQ(first->Run().value().steps_run, 9);
    EXPECT_FALSE(killed->executor().batch_staged());
    EXPECT_EQ(losses, std::vector<double>(plain.losses.begin(), plain.losses.begin() + 9));
  }
  for (const char* name : {"checkpoint-000000008.hrfit", "checkpoint-000000004.hrfit"}) {
    SCOPED_TRACE(name);
    const bool sectioned = std::string(name) == "checkpoint-000000004.hrfit";
    const RunEnd resumed =
        Train(true, sectioned ? std::optional(SqrtCutsWithOffload(ToyCnn())) : std::nullopt,
              absl::StrCat(dir, "/", name));
    EXPECT_EQ(resumed.summary.steps_run, 12);
    EXPECT_EQ(FirstDifference(resumed.state, plain.state), "");
    const size_t from = sectioned ? 4 : 8;
    EXPECT_EQ(resumed.losses, std::vector<double>(plain.losses.begin() + from, plain.losses.end()));
    EXPECT_EQ(resumed.summary.metrics.at("eval_loss").value,
              plain.summary.metrics.at("eval_loss").value);
  }
}

TEST(PrefetchToDeviceTest, TheSlotIsReportedAsBatchMemoryAtSetup) {
  const graph::Graph g = ToyCnn();
  std::unique_ptr<Backend> backend = cpu::CreateCpuBackend();
  for (const bool prefetch : {false, true}) {
    SCOPED_TRACE(prefetch ? "prefetch" : "plain");
    profiler::EventLog log;
    TrainerOptions options;
    options.prefetch_to_device = prefetch;
    options.events = &log;
    std::unique_ptr<Trainer> trainer = Trainer::Create(g, backend.get(), options).value();
    uint64_t setup_batch_bytes = 0;
    for (const profiler::MemoryEvent& e : log.memory()) {
      if (e.step == profiler::kSetupStep && e.role == profiler::MemoryRole::kBatch &&
          e.kind == profiler::MemoryEvent::Kind::kAllocate) {
        setup_batch_bytes += e.bytes;
      }
    }
    EXPECT_EQ(setup_batch_bytes, trainer->executor().staging_bytes());
    EXPECT_EQ(setup_batch_bytes, prefetch ? 1280u : 0u);
  }
}

TEST(PrefetchToDeviceTest, ABudgetPaysForTheSlot) {
  const graph::Graph g = ToyCnn();
  std::unique_ptr<Backend> backend = cpu::CreateCpuBackend();
  const uint64_t unconstrained = MakeTrainer(g, backend.get(), false)->plan().peak_bytes;
  const uint64_t slot =
      StagingSlotBytes(planner::TrainingGraph::Build(g, planner::TrainingOptions{}).value());
  // Exactly the unconstrained plan plus the slot fits; the plan's peak stays within it.
  std::unique_ptr<Trainer> fits =
      MakeTrainer(g, backend.get(), true, std::nullopt, unconstrained + slot);
  EXPECT_LE(fits->plan().peak_bytes, unconstrained + slot);
  EXPECT_EQ(fits->executor().staging_bytes(), slot);
  // A budget the slot takes whole is refused, naming it.
  TrainerOptions options;
  options.budget_bytes = slot;
  options.prefetch_to_device = true;
  EXPECT_THAT(Trainer::Create(g, backend.get(), options).status().message(),
              HasSubstr("staging slot"));
}

TEST(PrefetchToDeviceTest, RefusesStagingWithoutTheOptionAStepWithNothingStagedAndABadBatch) {
  const graph::Graph g = ToyCnn();
  const data::ImageDataset set = ToySet(4, 8, 4, 3);
  const ImageTask task = ImageTask::Create(g, set).value();
  std::vector<float> pixels(4 * 64, 0.5f);
  std::vector<int64_t> labels = {0, 1, 2, 3};
  std::unique_ptr<Backend> backend = cpu::CreateCpuBackend();

  std::unique_ptr<Trainer> plain = MakeTrainer(g, backend.get(), false);
  EXPECT_EQ(plain->executor().staging_bytes(), 0u);
  const absl::Status no_option = plain->StageBatch(task.Tensors(pixels, labels));
  EXPECT_EQ(no_option.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(no_option.message(), HasSubstr("prefetch_to_device"));

  std::unique_ptr<Trainer> staged = MakeTrainer(g, backend.get(), true);
  EXPECT_EQ(staged->StepOnStaged(nullptr).status().code(), absl::StatusCode::kFailedPrecondition);
  std::vector<HostTensor> batch = task.Tensors(pixels, labels);
  std::vector<HostTensor> no_labels = {batch[0].name == task.input ? batch[0] : batch[1]};
  EXPECT_THAT(staged->StageBatch(no_labels).message(), HasSubstr(task.labels));
  ASSERT_TRUE(staged->StageBatch(batch).ok());
  EXPECT_EQ(staged->StageBatch(batch).code(), absl::StatusCode::kFailedPrecondition);
  // The staged step computes what a plain step on the same batch does.
  const StepResult a = staged->StepOnStaged(nullptr).value();
  const StepResult b = plain->StepOn(batch).value();
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(FirstDifference(staged->State().value(), plain->State().value()), "");
}

}  // namespace
}  // namespace headroom::executor
