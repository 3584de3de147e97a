#include "runner/trainer_options.h"

#include <cmath>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom::runner {
namespace {

using ::testing::HasSubstr;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Returns TrainerOptionsOf's error message for `plan` on the CPU, failing the test if it is
// accepted or the error is not InvalidArgument.
std::string ErrorOf(const proto::PlanOptions& plan) {
  absl::StatusOr<executor::TrainerOptions> o = TrainerOptionsOf(plan, 1, "cpu");
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << o.status();
  return std::string(o.status().message());
}

TEST(TrainerOptionsTest, BadLearningRatesAreRefusedNotReplacedByTheDefault) {
  // NaN, infinities and negative rates used to train silently at 0.01.
  proto::PlanOptions plan;
  plan.mutable_optimizer()->set_learning_rate(std::nan(""));
  EXPECT_THAT(ErrorOf(plan),
              HasSubstr("plan.optimizer.learning_rate: nan is not a positive finite number"));
  for (const double lr : {kInf, -kInf, -0.01}) {
    plan.mutable_optimizer()->set_learning_rate(lr);
    EXPECT_THAT(ErrorOf(plan), HasSubstr("plan.optimizer.learning_rate: ")) << lr;
  }
}

TEST(TrainerOptionsTest, HyperparametersOutOfRangeAreNamed) {
  struct Case {
    void (*set)(proto::Optimizer&);
    const char* expected;
  };
  const Case cases[] = {
      {[](proto::Optimizer& o) { o.set_beta1(2); }, "plan.optimizer.beta1: 2 is not in [0, 1)"},
      {[](proto::Optimizer& o) { o.set_beta2(1); }, "plan.optimizer.beta2: 1 is not in [0, 1)"},
      {[](proto::Optimizer& o) { o.set_momentum(std::nan("")); },
       "plan.optimizer.momentum: nan is not in [0, 1)"},
      {[](proto::Optimizer& o) { o.set_epsilon(std::nan("")); },
       "plan.optimizer.epsilon: nan is not a positive finite number"},
      {[](proto::Optimizer& o) { o.set_epsilon(kInf); },
       "plan.optimizer.epsilon: inf is not a positive finite number"},
      {[](proto::Optimizer& o) { o.set_epsilon(0); },
       "plan.optimizer.epsilon: 0 is not a positive finite number"},
      {[](proto::Optimizer& o) { o.set_weight_decay(std::nan("")); },
       "plan.optimizer.weight_decay: nan is not a finite number >= 0"},
      {[](proto::Optimizer& o) { o.set_kind(static_cast<proto::Optimizer::Kind>(99)); },
       "plan.optimizer.kind: 99 is not an Optimizer.Kind"},
  };
  for (const Case& c : cases) {
    proto::PlanOptions plan;
    c.set(*plan.mutable_optimizer());
    EXPECT_THAT(ErrorOf(plan), HasSubstr(c.expected));
  }
  proto::PlanOptions plan;
  plan.set_host_memory(static_cast<proto::HostMemory>(7));
  EXPECT_THAT(ErrorOf(plan), HasSubstr("plan.host_memory: 7 is not a HostMemory"));
  plan = proto::PlanOptions();
  plan.set_alignment_bytes(uint64_t{1} << 62);
  EXPECT_THAT(ErrorOf(plan), HasSubstr("plan.alignment_bytes: 4611686018427387904 is not"));
}

TEST(TrainerOptionsTest, DeviceRatesMustBeFiniteAndUsable) {
  proto::PlanOptions plan;
  plan.mutable_device()->set_peak_flops_per_second(std::nan(""));
  EXPECT_THAT(ErrorOf(plan), HasSubstr("device.peak_flops_per_second: nan is not 0"));
  // A rate of 1e-300 bytes per second made every predicted time infinite.
  plan = proto::PlanOptions();
  plan.mutable_device()->set_memory_bytes_per_second(1e-300);
  EXPECT_THAT(ErrorOf(plan), HasSubstr("device.memory_bytes_per_second: 1e-300 is not"));
  plan = proto::PlanOptions();
  plan.mutable_device()->set_op_overhead_seconds(1e300);
  EXPECT_THAT(ErrorOf(plan), HasSubstr("device.op_overhead_seconds: 1e+300 is not"));
  plan = proto::PlanOptions();
  plan.mutable_device()->set_host_link_bytes_per_second(-kInf);
  EXPECT_THAT(ErrorOf(plan), HasSubstr("device.host_link_bytes_per_second: -inf is not"));
  plan = proto::PlanOptions();
  plan.mutable_device()->set_host_link_bytes_per_second(25e9);
  plan.mutable_device()->set_op_overhead_seconds(5e-6);
  absl::StatusOr<executor::TrainerOptions> o = TrainerOptionsOf(plan, 1, "cpu");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->device.host_link_bytes_per_second, 25e9);
}

TEST(TrainerOptionsTest, RanksAreRefusedForAJob) {
  proto::PlanOptions plan;
  plan.mutable_data_parallel()->set_ranks(1);
  EXPECT_TRUE(TrainerOptionsOf(plan, 1, "cpu").ok()) << "one rank is one process";
  plan.mutable_data_parallel()->set_ranks(4);
  absl::StatusOr<executor::TrainerOptions> o = TrainerOptionsOf(plan, 1, "cpu");
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(o.status().message()),
              ::testing::HasSubstr("plan.data_parallel.ranks: 4: jobs and profiles run as one "
                                   "process"));
}

TEST(TrainerOptionsTest, ExplicitZeroMomentumIsHonouredAndUnsetMeansTheDefault) {
  proto::PlanOptions plan;
  absl::StatusOr<executor::TrainerOptions> defaults = TrainerOptionsOf(plan, 0, "cpu");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->optimizer_params.momentum, 0.9);
  EXPECT_EQ(defaults->optimizer_params.learning_rate, 0.01);
  EXPECT_EQ(defaults->optimizer_params.epsilon, 1e-8);
  EXPECT_EQ(defaults->seed, 1u);
  // Zero momentum (plain SGD) and zero beta1 used to train as 0.9.
  plan.mutable_optimizer()->set_momentum(0);
  plan.mutable_optimizer()->set_beta1(0);
  plan.mutable_optimizer()->set_beta2(0.5);
  plan.mutable_optimizer()->set_epsilon(1e-6);
  absl::StatusOr<executor::TrainerOptions> o = TrainerOptionsOf(plan, 7, "cpu");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->optimizer_params.momentum, 0);
  EXPECT_EQ(o->optimizer_params.beta1, 0);
  EXPECT_EQ(o->optimizer_params.beta2, 0.5);
  EXPECT_EQ(o->optimizer_params.epsilon, 1e-6);
  EXPECT_EQ(o->seed, 7u);
}

}  // namespace
}  // namespace headroom::runner
