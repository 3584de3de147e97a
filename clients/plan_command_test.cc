// `headroom plan`, run in-process as a user would run it.
#include "clients/plan_command.h"

#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom::clients {
namespace {

using ::testing::HasSubstr;

struct PlanRun {
  int code;
  std::string out;
  std::string err;
};

PlanRun Plan(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int code = RunPlanCommand(args, out, err);
  return {code, out.str(), err.str()};
}

TEST(PlanCommandTest, JsonHasTheFiguresUsersAskFor) {
  PlanRun r = Plan({"--model", "resnet18", "--batch", "2", "--image_size", "64", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* key : {"\"arena_bytes\":", "\"lower_bound_bytes\":", "\"no_sharing_bytes\":",
                          "\"bytes_by_role\":{", "\"num_tensors\":", "\"num_steps\":",
                          "\"planning_seconds\":", "\"parameter\":", "\"gradient\":",
                          "\"optimizer_state\":", "\"activation\":"}) {
    EXPECT_THAT(r.out, HasSubstr(key));
  }
  EXPECT_EQ(r.out.find("\"tensors\""), std::string::npos);
}

TEST(PlanCommandTest, TensorsListsOffsetsAndLifetimes) {
  PlanRun r = Plan({"--model", "mlp", "--batch", "2", "--depth", "2", "--width", "8",
                    "--json", "--tensors"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("{\"name\":\"fc1.weight\",\"role\":\"parameter\""));
  EXPECT_THAT(r.out, HasSubstr("\"first_step\":"));
  PlanRun table = Plan({"--model", "mlp", "--batch", "2", "--depth", "2", "--tensors"});
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("fc1.weight.momentum"));
  EXPECT_THAT(table.out, HasSubstr("training step"));
}

TEST(PlanCommandTest, InferenceAndAdamChangeThePlan) {
  PlanRun sgd = Plan({"--model", "mlp", "--batch", "2", "--json"});
  PlanRun adam = Plan({"--model", "mlp", "--batch", "2", "--optimizer", "adam", "--json"});
  PlanRun inference = Plan({"--model", "mlp", "--batch", "2", "--inference"});
  ASSERT_EQ(sgd.code, 0);
  ASSERT_EQ(adam.code, 0);
  ASSERT_EQ(inference.code, 0);
  EXPECT_NE(sgd.out, adam.out);
  EXPECT_THAT(inference.out, HasSubstr("(inference)"));
  EXPECT_EQ(inference.out.find("optimizer_state"), std::string::npos);
}

TEST(PlanCommandTest, BadFlagsExitTwo) {
  EXPECT_EQ(Plan({"--model", "mlp", "--optimizer", "lbfgs"}).code, 2);
  EXPECT_EQ(Plan({"--model", "mlp", "--alignment", "100"}).code, 2);
  EXPECT_EQ(Plan({"--model", "mlp", "--budget", "lots"}).code, 2);
  EXPECT_EQ(Plan({"--model", "mlp", "--budget", "0"}).code, 2);
  EXPECT_EQ(Plan({"--model", "mlp", "--budget", "1GiB", "--device", "tpu"}).code, 2);
  EXPECT_EQ(Plan({"--model", "mlp", "--budget", "1GiB", "--inference"}).code, 2);
  EXPECT_EQ(Plan({"--model", "mlp", "--budget", "1GiB", "--device-file", "/no/such"}).code, 2);
  EXPECT_EQ(Plan({"--model", "nope"}).code, 1);
}

// resnet18 on 64x64 images at batch 16: about 124 MiB with no sections, 107 MiB at the least.
std::vector<std::string> Small(std::vector<std::string> more) {
  std::vector<std::string> args = {"--model", "resnet18", "--batch", "16", "--image_size", "64"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST(PlanCommandTest, BudgetJsonHasThePlanAndItsSections) {
  PlanRun r = Plan(Small({"--budget", "115MiB", "--device", "h100", "--json"}));
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* key : {"\"budget_bytes\":120586240", "\"predicted_peak_bytes\":",
                          "\"predicted_step_seconds\":", "\"overhead_ratio\":",
                          "\"recompute_flops\":", "\"offloaded_bytes\":", "\"sections\":[",
                          "\"first_node\":\"conv1\"", "\"last_node\":", "\"boundary\":[",
                          "\"placement\":\"device\"", "\"device\":\"h100\""}) {
    EXPECT_THAT(r.out, HasSubstr(key));
  }
  EXPECT_EQ(r.out.find("\"frontier\""), std::string::npos);
}

TEST(PlanCommandTest, FrontierListsPointsAndBaselines) {
  PlanRun r = Plan(Small({"--frontier", "--json"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"frontier\":[{\"peak_bytes\":"));
  for (const char* name : {"no_sections", "sqrt_n", "every_layer"}) {
    EXPECT_THAT(r.out, HasSubstr(std::string("\"strategy\":\"") + name + "\""));
  }
  PlanRun table = Plan(Small({"--frontier", "--no-offload"}));
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("frontier (peak, predicted step time):"));
  EXPECT_THAT(table.out, HasSubstr("baselines:"));
}

TEST(PlanCommandTest, AnInfeasibleBudgetExitsOneWithTheSmallestThatWorks) {
  PlanRun r = Plan(Small({"--budget", "2MiB"}));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("below the smallest peak Headroom can plan"));
  EXPECT_THAT(r.err, HasSubstr("Parameters, buffers and optimizer state alone need"));
  EXPECT_TRUE(r.out.empty());
}

}  // namespace
}  // namespace headroom::clients
