// The fit loop and its callbacks on a tiny image set: hooks run in order; the learning
// rate follows the schedule step by step; evaluation gives the loss and accuracy worked out
// by hand on a known case, runs inside the training plan's peak and changes nothing;
// checkpoints keep the last K and the best; early stopping stops when it should; a run
// stopped and resumed from a checkpoint (mid-epoch or at an epoch's end, under another
// plan) ends bitwise where the uninterrupted run does.
#include "executor/fit.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "data/idx_file.h"
#include "executor/callbacks.h"
#include "executor/cpu/cpu_backend.h"
#include "executor/executor_testing.h"
#include "executor/fit_checkpoint.h"
#include "executor/image_task.h"
#include "gmock/gmock.h"
#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "util/bfloat16.h"
#include "util/split_mix.h"

namespace headroom::executor {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// A set of `n` images of [1, size, size] bytes: class c (of `classes`) lights up row c, plus
// noise, so a small CNN can learn it.
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

std::unique_ptr<Trainer> MakeTrainer(const graph::Graph& g, Backend* backend,
                                     std::optional<planner::SectionCuts> cuts = std::nullopt) {
  TrainerOptions options;
  options.seed = 5;
  options.optimizer_params.learning_rate = 0.05;
  options.cuts = std::move(cuts);
  return Trainer::Create(g, backend, options).value();
}

data::LoaderOptions Order() {
  data::LoaderOptions order;
  order.seed = 9;
  order.augmentation.crop_padding = 1;
  order.augmentation.horizontal_flip = true;
  return order;
}

// Records every hook as a line, into a log shared by several recorders.
class Recorder : public Callback {
 public:
  Recorder(std::string name, std::vector<std::string>* log) : name_(std::move(name)), log_(log) {}
  std::string name() const override { return name_; }
  absl::Status OnTrainBegin(FitLoop&) override { return Log("train_begin"); }
  absl::Status OnTrainEnd(FitLoop&) override { return Log("train_end"); }
  absl::Status OnEpochBegin(FitLoop&, int64_t e) override { return Log(absl::StrCat("e", e)); }
  absl::Status OnEpochEnd(FitLoop&, int64_t e) override { return Log(absl::StrCat("/e", e)); }
  absl::Status OnStepBegin(FitLoop& fit, int64_t s) override {
    rates_.push_back(fit.trainer().executor().learning_rate());
    return Log(absl::StrCat("s", s));
  }
  absl::Status OnStepEnd(FitLoop&, const StepResult& r) override {
    return Log(absl::StrCat("/s", r.step));
  }
  const std::vector<double>& rates() const { return rates_; }

 private:
  absl::Status Log(const std::string& what) {
    log_->push_back(absl::StrCat(name_, ":", what));
    return absl::OkStatus();
  }
  const std::string name_;
  std::vector<std::string>* log_;
  std::vector<double> rates_;
};

// Sets metric "score" at each epoch's end from a list.
class Scorer : public Callback {
 public:
  explicit Scorer(std::vector<double> scores) : scores_(std::move(scores)) {}
  std::string name() const override { return "scorer"; }
  absl::Status OnEpochEnd(FitLoop& fit, int64_t epoch) override {
    fit.SetMetric("score", scores_[epoch], epoch);
    return absl::OkStatus();
  }

 private:
  std::vector<double> scores_;
};

std::unique_ptr<FitLoop> MakeLoop(Trainer* trainer, const data::ImageDataset* set, int64_t items,
                                  int64_t epochs, std::vector<std::unique_ptr<Callback>> callbacks,
                                  int64_t stop_at_step = 0) {
  FitOptions options;
  options.epochs = epochs;
  options.stop_at_step = stop_at_step;
  return FitLoop::Create(trainer, set, Iota(items), Order(), options, std::move(callbacks)).value();
}

std::string TempDir(const std::string& name) {
  const std::string dir = absl::StrCat(testing::TempDir(), "/", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(FitLoopTest, CallsHooksInOrderAroundEverySteps) {
  const graph::Graph g = ToyCnn();
  std::unique_ptr<Backend> backend_owner = cpu::CreateCpuBackend();
  Backend* backend = backend_owner.get();
  std::unique_ptr<Trainer> trainer = MakeTrainer(g, backend);
  const data::ImageDataset set = ToySet(9, 8, 4, 1);  // 2 batches of 4 (one item left out)
  std::vector<std::string> log;
  std::vector<std::unique_ptr<Callback>> callbacks;
  callbacks.push_back(std::make_unique<Recorder>("a", &log));
  callbacks.push_back(std::make_unique<Recorder>("b", &log));
  std::unique_ptr<FitLoop> fit = MakeLoop(trainer.get(), &set, 9, 2, std::move(callbacks));
  const FitSummary summary = fit->Run().value();
  // train_begin e0 s0 /s0 s1 /s1 /e0 e1 s2 /s2 s3 /s3 /e1 train_end, each a then b.
  std::vector<std::string> expected;
  for (const char* hook : {"train_begin", "e0", "s0", "/s0", "s1", "/s1", "/e0", "e1", "s2", "/s2",
                           "s3", "/s3", "/e1", "train_end"}) {
    expected.push_back(absl::StrCat("a:", hook));
    expected.push_back(absl::StrCat("b:", hook));
  }
  EXPECT_THAT(log, ElementsAreArray(expected)) << absl::StrJoin(log, " ");
  EXPECT_EQ(summary.steps_run, 4);
  EXPECT_EQ(summary.epochs_completed, 2);
  EXPECT_FALSE(summary.stopped_early);
  // The wait the loop reports while it runs is the loader's, up to its last batch.
  EXPECT_EQ(fit->input_wait_seconds(), summary.input_wait_seconds);
  ASSERT_EQ(summary.callback_seconds.size(), 2u);
  EXPECT_EQ(summary.callback_seconds[0].first, "a");
  ASSERT_NE(fit->FindMetric("train_loss"), nullptr);
  EXPECT_EQ(fit->FindMetric("train_loss")->epoch, 1);
}

TEST(FitLoopTest, RefusesTwoCallbacksOfOneNameAndAModelThatDoesNotFitTheSet) {
  const graph::Graph g = ToyCnn();
  std::unique_ptr<Backend> backend_owner = cpu::CreateCpuBackend();
  Backend* backend = backend_owner.get();
  std::unique_ptr<Trainer> trainer = MakeTrainer(g, backend);
  const data::ImageDataset set = ToySet(8, 8, 4, 1);
  std::vector<std::string> log;
  std::vector<std::unique_ptr<Callback>> twins;
  twins.push_back(std::make_unique<Recorder>("a", &log));
  twins.push_back(std::make_unique<Recorder>("a", &log));
  FitOptions options;
  options.epochs = 1;
  EXPECT_THAT(FitLoop::Create(trainer.get(), &set, Iota(8), Order(), options, std::move(twins))
                  .status()
                  .message(),
              HasSubstr("two callbacks are named 'a'"));
  const data::ImageDataset wide = ToySet(8, 12, 4, 1);
  EXPECT_THAT(
      FitLoop::Create(trainer.get(), &wide, Iota(8), Order(), options, {}).status().message(),
      HasSubstr("input 'images' is [4,1,8,8] float32; 'toy' gives [4,1,12,12]"));
}

TEST(ImageTaskTest, AnMlpTakesTheImagesFlattened) {
  const data::ImageDataset set = ToySet(8, 8, 4, 1);
  const graph::Graph mlp = ZooGraph("mlp", 4, {{"input", 64}, {"classes", 4}});
  absl::StatusOr<ImageTask> task = ImageTask::Create(mlp, set);
  ASSERT_TRUE(task.ok()) << task.status();
  EXPECT_EQ(task->input_shape, (graph::Shape{4, 64}));
  // The batch is the images' bytes as they are: pixel p of item i at i * 64 + p.
  std::vector<float> pixels(4 * 64);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<float>(i);
  const std::vector<HostTensor> batch = task->Tensors(pixels, {0, 1, 2, 3});
  ASSERT_EQ(batch[0].shape, (graph::Shape{4, 64}));
  EXPECT_EQ(batch[0].f32()[3 * 64 + 5], 3 * 64 + 5);
  const graph::Graph narrow = ZooGraph("mlp", 4, {{"input", 63}, {"classes", 4}});
  EXPECT_THAT(ImageTask::Create(narrow, set).status().message(),
              HasSubstr("input 'x' is [4,63] float32; 'toy' gives [4,1,8,8] float32 (1 "
                        "channel(s) of 8x8), or flattened [4,64]"));
}

TEST(FitLoopTest, LearningRateFollowsTheScheduleEveryStep) {
  const graph::Graph g = ToyCnn();
  std::unique_ptr<Backend> backend_owner = cpu::CreateCpuBackend();
  Backend* backend = backend_owner.get();
  const data::ImageDataset set = ToySet(12, 8, 4, 2);  // 3 batches per epoch
  const LearningRateSchedule schedule = ScheduleNamed("cosine", 0.05, 6, 2).value();
  std::unique_ptr<Trainer> trainer = MakeTrainer(g, backend);
  std::vector<std::string> log;
  std::vector<std::unique_ptr<Callback>> callbacks;
  callbacks.push_back(std::make_unique<LearningRateCallback>(schedule));
  callbacks.push_back(std::make_unique<Recorder>("r", &log));
  const Recorder* recorder = static_cast<const Recorder*>(callbacks.back().get());
  std::unique_ptr<FitLoop> fit = MakeLoop(trainer.get(), &set, 12, 2, std::move(callbacks));
  ASSERT_TRUE(fit->Run().ok());
  std::vector<double> expected;
  for (int64_t s = 0; s < 6; ++s) expected.push_back(schedule.RateAt(s));
  EXPECT_THAT(recorder->rates(), ElementsAreArray(expected));
  EXPECT_NE(expected[0], expected[3]);  // the schedule does change the rate

  // The rate reaches the update: the same batches by hand at the same rates end bitwise
  // alike.
  std::unique_ptr<Trainer> manual = MakeTrainer(g, backend);
  data::LoaderOptions order = Order();
  order.batch = 4;
  std::unique_ptr<data::BatchLoader> loader =
      data::BatchLoader::Create(&set, Iota(12), order).value();
  const ImageTask task = ImageTask::Create(g, set).value();
  for (int64_t s = 0; s < 6; ++s) {
    manual->SetLearningRate(schedule.RateAt(s));
    const data::Batch b = loader->Next();
    ASSERT_TRUE(manual->StepOn(task.Tensors(b.pixels, b.labels)).ok());
  }
  EXPECT_EQ(FirstDifference(trainer->State().value(), manual->State().value()), "");
}

TEST(ClassificationTotalsTest, CountsTopOneWithTiesToTheFirstAndSumsCrossEntropy) {
  HostTensor logits = MakeHostTensor("logits", {3, 3}, proto::DTYPE_FLOAT32);
  const float values[] = {2, 1, 0,   // argmax 0
                          1, 1, 0,   // a tie: 0 wins
                          0, 0, 5};  // argmax 2; row 3 is not counted below
  std::copy(values, values + 9, logits.f32());
  ClassificationTotals totals;
  const std::vector<int64_t> labels = {0, 1, 2};
  totals.Add(logits, labels, 2);
  EXPECT_EQ(totals.items, 2);
  EXPECT_EQ(totals.correct, 1);
  const double row0 = std::log(std::exp(2.0) + std::exp(1.0) + 1.0) - 2.0;
  const double row1 = std::log(2 * std::exp(1.0) + 1.0) - 1.0;
  EXPECT_NEAR(totals.loss(), (row0 + row1) / 2, 1e-12);
  EXPECT_DOUBLE_EQ(totals.accuracy(), 0.5);

  // The same logits in bfloat16 (a bf16 graph's; these values are exact in it) count alike.
  HostTensor narrow = MakeHostTensor("logits", {3, 3}, proto::DTYPE_BFLOAT16);
  uint16_t* bits = reinterpret_cast<uint16_t*>(narrow.bytes.data());
  for (int i = 0; i < 9; ++i) bits[i] = FloatToBFloat16(values[i]);
  ClassificationTotals from_bf16;
  from_bf16.Add(narrow, labels, 2);
  EXPECT_EQ(from_bf16.items, 2);
  EXPECT_EQ(from_bf16.correct, 1);
  EXPECT_NEAR(from_bf16.loss(), (row0 + row1) / 2, 1e-12);
}

// images [2, 1, 2, 2] -> Flatten -> Linear(4, 4) -> SoftmaxCrossEntropy.
graph::Graph IdentityClassifier() {
  graph::GraphBuilder b("identity");
  const std::string x = b.Input("images", {2, 1, 2, 2});
  const std::string flat = b.Op("Flatten", "flatten", {x});
  const std::string logits = b.Linear("fc", flat, 4, 4);
  const std::string labels = b.Label("labels", {2});
  b.SetLoss(b.Op("SoftmaxCrossEntropy", "loss", {logits, labels}));
  return graph::Graph::FromProto(b.Build()).value();
}

TEST(EvaluateImagesTest, KnownLogitsGiveTheLossAndAccuracyWorkedOutByHand) {
  const graph::Graph g = IdentityClassifier();
  std::unique_ptr<Backend> backend_owner = cpu::CreateCpuBackend();
  Backend* backend = backend_owner.get();
  TrainerOptions options;
  // fc = identity: the logits are the pixels.
  HostTensor weight = MakeHostTensor("fc.weight", {4, 4}, proto::DTYPE_FLOAT32);
  for (int i = 0; i < 4; ++i) weight.f32()[i * 4 + i] = 1;
  options.initial_values = {weight, MakeHostTensor("fc.bias", {4}, proto::DTYPE_FLOAT32)};
  std::unique_ptr<Trainer> trainer = Trainer::Create(g, backend, options).value();
  // Five items, one pixel lit (255 reads as 1.0): right, right, wrong, right, wrong. Batch 2:
  // the third pass holds item 4 and a repeat that must not count.
  data::IdxArray images{data::kIdxUnsignedByte, {5, 2, 2}, {}};
  data::IdxArray labels{data::kIdxUnsignedByte, {5}, {0, 1, 3, 3, 0}};
  for (int lit : {0, 1, 2, 3, 2}) {
    for (int p = 0; p < 4; ++p) images.bytes.push_back(p == lit ? 255 : 0);
  }
  const data::ImageDataset set =
      data::ImageDataset::Create("known", std::move(images), std::move(labels), 4).value();
  const ImageTask task = ImageTask::Create(g, set).value();
  const EvalMetrics m = EvaluateImages(*trainer, task, set, Iota(5)).value();
  EXPECT_EQ(m.items, 5);
  EXPECT_DOUBLE_EQ(m.accuracy, 3.0 / 5);
  // Each item: log(e + 3) less 1 where it is right.
  EXPECT_NEAR(m.loss, std::log(std::exp(1.0) + 3) - 3.0 / 5, 1e-6);
  EXPECT_EQ(trainer->steps_run(), 0);
}

TEST(EvaluateImagesTest, StaysInsideTheTrainingPeakAndChangesNoState) {
  const graph::Graph g = ToyCnn();
  const data::ImageDataset set = ToySet(10, 8, 4, 3);
  for (const bool sectioned : {false, true}) {
    SCOPED_TRACE(sectioned ? "sections with offload" : "plain plan");
    std::unique_ptr<Backend> backend_owner = cpu::CreateCpuBackend();
    Backend* backend = backend_owner.get();
    std::unique_ptr<Trainer> trainer =
        MakeTrainer(g, backend, sectioned ? std::optional(SqrtCutsWithOffload(g)) : std::nullopt);
    const uint64_t peak = trainer->plan().peak_bytes;
    const ImageTask task = ImageTask::Create(g, set).value();
    // Before any step, then after one: within the plan, and no parameter or running
    // statistic moves.
    const EvalMetrics before = EvaluateImages(*trainer, task, set, Iota(10)).value();
    EXPECT_LE(before.arena_high_water_bytes, peak);
    std::vector<float> pixels(4 * 64);
    std::vector<int64_t> labels(4);
    for (int i = 0; i < 4; ++i) labels[i] = set.Read(i, absl::MakeSpan(pixels).subspan(i * 64, 64));
    const StepResult step = trainer->StepOn(task.Tensors(pixels, labels)).value();
    const std::vector<HostTensor> state = trainer->State().value();
    const EvalMetrics after = EvaluateImages(*trainer, task, set, Iota(10)).value();
    EXPECT_LE(after.arena_high_water_bytes, peak);
    EXPECT_LE(after.peak_live_bytes, step.peak_live_bytes);
    EXPECT_EQ(FirstDifference(trainer->State().value(), state), "");
    EXPECT_EQ(trainer->steps_run(), 1);
    const EvalMetrics again = EvaluateImages(*trainer, task, set, Iota(10)).value();
    EXPECT_EQ(again.loss, after.loss);
    EXPECT_NE(after.loss, before.loss);
    // The next step sees the arena as it left it.
    const StepResult next = trainer->StepOn(task.Tensors(pixels, labels)).value();
    EXPECT_LE(next.arena_high_water_bytes, peak);
  }
}

TEST(CheckpointCallbackTest, KeepsTheLastKAndTheBest) {
  const graph::Graph g = ToyCnn();
  std::unique_ptr<Backend> backend_owner = cpu::CreateCpuBackend();
  Backend* backend = backend_owner.get();
  std::unique_ptr<Trainer> trainer = MakeTrainer(g, backend);
  const data::ImageDataset set = ToySet(8, 8, 4, 4);  // 2 batches per epoch
  const std::string dir = TempDir("keep");
  CheckpointOptions options;
  options.dir = dir;
  options.every_steps = 1;
  options.every_epochs = 0;
  options.keep_last = 2;
  options.best_metric = "score";
  std::vector<std::unique_ptr<Callback>> callbacks;
  callbacks.push_back(std::make_unique<Scorer>(std::vector<double>{0.5, 0.9, 0.7}));
  callbacks.push_back(std::make_unique<CheckpointCallback>(options));
  const auto* checkpoints = static_cast<const CheckpointCallback*>(callbacks.back().get());
  std::unique_ptr<FitLoop> fit = MakeLoop(trainer.get(), &set, 8, 3, std::move(callbacks));
  ASSERT_TRUE(fit->Run().ok());
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    files.push_back(entry.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  EXPECT_THAT(
      files, ElementsAre("best.hrfit", "checkpoint-000000005.hrfit", "checkpoint-000000006.hrfit"));
  EXPECT_THAT(checkpoints->kept(), ElementsAre(dir + "/checkpoint-000000005.hrfit",
                                               dir + "/checkpoint-000000006.hrfit"));
  EXPECT_EQ(LatestCheckpoint(dir).value(), dir + "/checkpoint-000000006.hrfit");
  // The best (0.9) is the end of epoch 1: 4 steps, next batch epoch 2's first.
  const FitCheckpoint best = ReadFitCheckpoint(dir + "/best.hrfit").value();
  EXPECT_EQ(best.steps_run, 4);
  EXPECT_EQ(best.epoch, 2);
  EXPECT_EQ(best.batch, 0);
  EXPECT_EQ(best.metrics.at("score").first, 0.9);
}

TEST(EarlyStoppingCallbackTest, StopsAfterPatienceEvaluationsWithoutImprovement) {
  struct Case {
    std::vector<double> scores;
    EarlyStoppingOptions options;
    int64_t epochs_completed;
  };
  const Case cases[] = {
      // best 0.9 at epoch 1; epochs 2 and 3 do not beat it: stop after epoch 3.
      {{1.0, 0.9, 0.95, 0.91, 0.5, 0.4}, {"score", false, 2, 0}, 4},
      // better each time, but never by more than 0.05 after the first.
      {{1.0, 0.99, 0.98, 0.97, 0.96, 0.95}, {"score", false, 2, 0.05}, 3},
      // larger is better: 0.6 is never beaten, patience 3.
      {{0.5, 0.6, 0.6, 0.55, 0.59, 0.7}, {"score", true, 3, 0}, 5},
      // always improving: runs all six.
      {{6, 5, 4, 3, 2, 1}, {"score", false, 1, 0}, 6},
  };
  const graph::Graph g = ToyCnn();
  const data::ImageDataset set = ToySet(4, 8, 4, 5);
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrJoin(c.scores, " "));
    std::unique_ptr<Backend> backend_owner = cpu::CreateCpuBackend();
    Backend* backend = backend_owner.get();
    std::unique_ptr<Trainer> trainer = MakeTrainer(g, backend);
    std::vector<std::unique_ptr<Callback>> callbacks;
    callbacks.push_back(std::make_unique<Scorer>(c.scores));
    callbacks.push_back(std::make_unique<EarlyStoppingCallback>(c.options));
    std::unique_ptr<FitLoop> fit = MakeLoop(trainer.get(), &set, 4, 6, std::move(callbacks));
    const FitSummary summary = fit->Run().value();
    EXPECT_EQ(summary.epochs_completed, c.epochs_completed);
    EXPECT_EQ(summary.stopped_early, c.epochs_completed < 6);
    if (summary.stopped_early) {
      EXPECT_THAT(summary.stop_reason, HasSubstr("score"));
    }
  }
}

// What a run ends with, to compare runs by.
struct RunEnd {
  std::vector<HostTensor> state;
  std::map<std::string, Metric> metrics;
  int64_t steps = 0;
};

// The callbacks of a full run: schedule, evaluation, early stopping, checkpoints.
std::vector<std::unique_ptr<Callback>> FullCallbacks(const data::ImageDataset* held_out,
                                                     const std::string& dir) {
  std::vector<std::unique_ptr<Callback>> callbacks;
  callbacks.push_back(
      std::make_unique<LearningRateCallback>(ScheduleNamed("cosine", 0.05, 12, 3).value()));
  callbacks.push_back(std::make_unique<EvaluationCallback>(held_out, Iota(6), 1));
  callbacks.push_back(
      std::make_unique<EarlyStoppingCallback>(EarlyStoppingOptions{"eval_loss", false, 5, 0}));
  CheckpointOptions options;
  options.dir = dir;
  options.every_steps = 4;
  options.keep_last = 10;
  options.best_metric = "eval_accuracy";
  callbacks.push_back(std::make_unique<CheckpointCallback>(options));
  return callbacks;
}

TEST(FitLoopTest, ResumedRunEndsBitwiseWhereTheUninterruptedRunDoes) {
  const graph::Graph g = ToyCnn();
  const data::ImageDataset set = ToySet(26, 8, 4, 6);  // 6 batches per epoch, 2 left out
  const data::ImageDataset held_out = ToySet(6, 8, 4, 60);
  auto finish = [&](Trainer& trainer, FitLoop& fit) {
    const FitSummary summary = fit.Run().value();
    return RunEnd{trainer.State().value(), summary.metrics, summary.steps_run};
  };
  // Two epochs straight.
  std::unique_ptr<Backend> backend_owner = cpu::CreateCpuBackend();
  Backend* backend = backend_owner.get();
  std::unique_ptr<Trainer> straight = MakeTrainer(g, backend);
  std::unique_ptr<FitLoop> fit =
      MakeLoop(straight.get(), &set, 26, 2, FullCallbacks(&held_out, TempDir("straight")));
  const RunEnd expected = finish(*straight, *fit);
  ASSERT_EQ(expected.steps, 12);
  ASSERT_EQ(expected.metrics.count("eval_accuracy"), 1u);

  // Killed after step 9; resumed from the checkpoint of step 8 (mid-epoch 1) and from the
  // end of epoch 0 (step 6), the second under a sectioned plan with offload.
  const std::string dir = TempDir("resumed");
  {
    std::unique_ptr<Trainer> killed = MakeTrainer(g, backend);
    std::unique_ptr<FitLoop> first =
        MakeLoop(killed.get(), &set, 26, 2, FullCallbacks(&held_out, dir), /*stop_at_step=*/9);
    ASSERT_EQ(first->Run().value().steps_run, 9);
  }
  for (const std::string name : {"checkpoint-000000008.hrfit", "checkpoint-000000006.hrfit"}) {
    SCOPED_TRACE(name);
    const bool sectioned = name == "checkpoint-000000006.hrfit";
    std::unique_ptr<Trainer> resumed =
        MakeTrainer(g, backend, sectioned ? std::optional(SqrtCutsWithOffload(g)) : std::nullopt);
    std::unique_ptr<FitLoop> second =
        MakeLoop(resumed.get(), &set, 26, 2, FullCallbacks(&held_out, TempDir("again")));
    ASSERT_TRUE(second->Resume(absl::StrCat(dir, "/", name)).ok());
    const RunEnd got = finish(*resumed, *second);
    EXPECT_EQ(got.steps, 12);
    EXPECT_EQ(FirstDifference(got.state, expected.state), "");
    for (const char* metric : {"eval_loss", "eval_accuracy", "train_loss"}) {
      EXPECT_EQ(got.metrics.at(metric).value, expected.metrics.at(metric).value) << metric;
    }
  }
}

TEST(FitLoopTest, ResumeRefusesAnotherDataOrderAndACutFile) {
  const graph::Graph g = ToyCnn();
  const data::ImageDataset set = ToySet(8, 8, 4, 7);
  std::unique_ptr<Backend> backend_owner = cpu::CreateCpuBackend();
  Backend* backend = backend_owner.get();
  const std::string dir = TempDir("refuse");
  std::unique_ptr<Trainer> trainer = MakeTrainer(g, backend);
  CheckpointOptions options;
  options.dir = dir;
  std::vector<std::unique_ptr<Callback>> callbacks;
  callbacks.push_back(std::make_unique<CheckpointCallback>(options));
  ASSERT_TRUE(MakeLoop(trainer.get(), &set, 8, 1, std::move(callbacks))->Run().ok());
  const std::string path = LatestCheckpoint(dir).value();

  data::LoaderOptions other = Order();
  other.seed = 10;
  FitOptions fit_options;
  fit_options.epochs = 2;
  std::unique_ptr<FitLoop> loop =
      FitLoop::Create(trainer.get(), &set, Iota(8), other, fit_options, {}).value();
  EXPECT_THAT(loop->Resume(path).message(), HasSubstr("taken with seed 9"));

  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string cut = dir + "/cut.hrfit";
  std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() - 20);
  EXPECT_THAT(ReadFitCheckpoint(cut).status().message(), HasSubstr("cut short"));
}

TEST(ProgressCallbackTest, EstimatesTheTimeLeftFromTheRateSoFar) {
  const graph::Graph g = ToyCnn();
  std::unique_ptr<Backend> backend_owner = cpu::CreateCpuBackend();
  Backend* backend = backend_owner.get();
  std::unique_ptr<Trainer> trainer = MakeTrainer(g, backend);
  const data::ImageDataset set = ToySet(8, 8, 4, 8);
  double now = 100;
  std::ostringstream out;
  std::vector<std::unique_ptr<Callback>> callbacks;
  // Each step takes 2 fake seconds; print every 3.
  class Tick : public Callback {
   public:
    explicit Tick(double* now) : now_(now) {}
    std::string name() const override { return "tick"; }
    absl::Status OnStepEnd(FitLoop&, const StepResult&) override {
      *now_ += 2;
      return absl::OkStatus();
    }
    double* now_;
  };
  callbacks.push_back(std::make_unique<Tick>(&now));
  callbacks.push_back(std::make_unique<ProgressCallback>(&out, 3, [&now] { return now; }));
  std::unique_ptr<FitLoop> fit = MakeLoop(trainer.get(), &set, 8, 3, std::move(callbacks));
  ASSERT_TRUE(fit->Run().ok());
  // 6 steps: prints after steps 2 (4 s), 4 (8 s), 6 (12 s) and at each epoch end.
  EXPECT_THAT(out.str(), HasSubstr("epoch 1/3  batch 2/2  loss"));
  EXPECT_THAT(out.str(), HasSubstr("0.5 steps/s  elapsed 4s  ETA 8s"));
  EXPECT_THAT(out.str(), HasSubstr("elapsed 8s  ETA 4s"));
  EXPECT_THAT(out.str(), HasSubstr("elapsed 12s  ETA 0s"));
  EXPECT_EQ(DurationString(3725), "1h02m");
  EXPECT_EQ(DurationString(307), "5m07s");
}

}  // namespace
}  // namespace headroom::executor
