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
  EXPECT_EQ(Plan({"--model", "mlp", "--budget", "1GiB"}).code, 2);
  EXPECT_EQ(Plan({"--model", "nope"}).code, 1);
}

}  // namespace
}  // namespace headroom::clients
