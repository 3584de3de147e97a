#include "executor/lr_schedule.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom::executor {
namespace {

using ::testing::HasSubstr;

// The rates PyTorch 1.13's schedulers give an SGD optimizer at lr 0.1, step by step
// (optimizer.param_groups[0]["lr"] before each optimizer.step(); scheduler.step() after).
// PyTorch updates them recursively; these closed forms agree to rounding.
void ExpectRates(const LearningRateSchedule& s, const std::vector<double>& torch) {
  for (size_t t = 0; t < torch.size(); ++t) {
    EXPECT_NEAR(s.RateAt(t), torch[t], 1e-12 * torch[t]) << "step " << t;
  }
}

TEST(LearningRateScheduleTest, StepMatchesTorchStepLR) {
  // StepLR(step_size=3, gamma=0.5)
  ExpectRates(
      {.kind = LearningRateSchedule::Kind::kStep, .base_rate = 0.1, .step_size = 3, .gamma = 0.5},
      {0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025});
}

TEST(LearningRateScheduleTest, CosineMatchesTorchCosineAnnealingLR) {
  // CosineAnnealingLR(T_max=5, eta_min=0.001), past T_max too.
  ExpectRates({.kind = LearningRateSchedule::Kind::kCosine,
               .base_rate = 0.1,
               .period = 5,
               .min_rate = 0.001},
              {0.10000000000000001, 0.090546341221559898, 0.06579634122155989, 0.035203658778440096,
               0.010453658778440105, 0.001, 0.010453658778440102});
}

TEST(LearningRateScheduleTest, WarmupMatchesTorchLinearLR) {
  // LinearLR(start_factor=0.25, total_iters=4)
  ExpectRates({.base_rate = 0.1, .warmup_steps = 4, .warmup_start_factor = 0.25},
              {0.025000000000000001, 0.043750000000000004, 0.062500000000000014,
               0.081250000000000017, 0.10000000000000002, 0.10000000000000002});
}

TEST(LearningRateScheduleTest, NamedSchedules) {
  const LearningRateSchedule cosine = *ScheduleNamed("cosine", 0.2, 100, 0);
  EXPECT_DOUBLE_EQ(cosine.RateAt(0), 0.2);
  EXPECT_DOUBLE_EQ(cosine.RateAt(50), 0.1);
  EXPECT_NEAR(cosine.RateAt(100), 0.0, 1e-15);
  const LearningRateSchedule step = *ScheduleNamed("step", 1.0, 90, 10);
  EXPECT_DOUBLE_EQ(step.RateAt(0), 0.1);  // warm-up starts at a tenth
  EXPECT_DOUBLE_EQ(step.RateAt(29), 1.0);
  EXPECT_DOUBLE_EQ(step.RateAt(30), 0.1);
  EXPECT_DOUBLE_EQ(step.RateAt(60), 0.1 * 0.1);
  EXPECT_DOUBLE_EQ(ScheduleNamed("constant", 0.5, 10, 0)->RateAt(9), 0.5);
  EXPECT_THAT(ScheduleNamed("linear", 0.1, 10, 0).status().message(),
              HasSubstr("needs constant, step or cosine"));
  EXPECT_FALSE(ScheduleNamed("cosine", 0.1, 0, 0).ok());
  EXPECT_FALSE(ScheduleNamed("cosine", -1, 10, 0).ok());
}

}  // namespace
}  // namespace headroom::executor
