// `headroom train` as a user runs it, in this process: --precision auto trains in the
// precision `headroom plan --precision auto` answers for the same flags, and says so.
#include <sstream>
#include <string>
#include <vector>

#include "clients/cli.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom::clients {
namespace {

using ::testing::HasSubstr;

struct CommandRun {
  int code;
  std::string out;
  std::string err;
};

CommandRun Headroom(const std::string& command, const std::vector<std::string>& args) {
  std::ostringstream out, err;
  std::vector<std::string> words = {command};
  words.insert(words.end(), args.begin(), args.end());
  const int code = RunHeadroom(words, CommandIo{out, err});
  return {code, out.str(), err.str()};
}

// Returns the value of "key":"value" in `json` (the first), or "" where it is missing.
std::string JsonString(const std::string& json, const std::string& key) {
  const std::string quoted = "\"" + key + "\":\"";
  const size_t at = json.find(quoted);
  if (at == std::string::npos) return "";
  const size_t start = at + quoted.size();
  return json.substr(start, json.find('"', start) - start);
}

// The mlp of 32: unconstrained, bf16's plan is the faster by the cpu preset (8.5 ms against
// 8.9 ms); at 29 MiB only float32's fits without sections (bf16 needs 6 sections there,
// 28.5 MiB at its smallest); at 26 MiB neither fits.
const std::vector<std::string> kMlp = {"--model", "mlp", "--batch", "32"};

std::vector<std::string> With(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST(TrainCommandTest, PrecisionAutoTrainsInThePrecisionThePlanChooses) {
  for (const std::vector<std::string>& budget :
       {std::vector<std::string>{}, std::vector<std::string>{"--budget", "29MiB"}}) {
    const CommandRun plan = Headroom("plan", With(With(kMlp, budget), {"--precision", "auto", "--json"}));
    ASSERT_EQ(plan.code, 0) << plan.err;
    const std::string planned = JsonString(plan.out, "precision");
    ASSERT_THAT(planned, ::testing::AnyOf("fp32", "bf16")) << plan.out;
    const CommandRun train = Headroom(
        "train", With(With(kMlp, budget), {"--steps", "2", "--precision", "auto", "--json"}));
    ASSERT_EQ(train.code, 0) << train.err;
    const std::string summary = train.out.substr(train.out.find("{\"summary\":true"));
    EXPECT_EQ(JsonString(summary, "precision"), planned) << summary;
    EXPECT_EQ(JsonString(summary, "precision_requested"), "auto") << summary;
    EXPECT_THAT(summary, HasSubstr("\"auto_fp32_step_seconds\":"));
    EXPECT_THAT(summary, HasSubstr("\"auto_bf16_step_seconds\":"));
    // The choice is the one the two plans' predicted steps give.
    EXPECT_EQ(planned, budget.empty() ? "bf16" : "fp32") << "the cpu preset's figures moved";
  }
}

TEST(TrainCommandTest, PrecisionAutoSaysWhatItCompared) {
  const CommandRun train = Headroom("train", With(kMlp, {"--steps", "1", "--precision", "auto"}));
  ASSERT_EQ(train.code, 0) << train.err;
  EXPECT_THAT(train.out, HasSubstr("precision: bf16 (chosen by --precision auto: predicted "
                                   "step "));
  EXPECT_THAT(train.out, HasSubstr(", fp32's 0.0"));
  const CommandRun budget =
      Headroom("train", With(kMlp, {"--steps", "1", "--precision", "auto", "--budget", "29MiB"}));
  ASSERT_EQ(budget.code, 0) << budget.err;
  EXPECT_THAT(budget.out, HasSubstr("precision: fp32 (chosen by --precision auto: predicted "
                                    "step "));
  const CommandRun given =
      Headroom("train", With(kMlp, {"--steps", "1", "--precision", "bf16", "--json"}));
  ASSERT_EQ(given.code, 0) << given.err;
  EXPECT_THAT(given.out, HasSubstr("\"precision_requested\":\"bf16\""));
  EXPECT_EQ(given.out.find("auto_fp32_step_seconds"), std::string::npos);
}

TEST(TrainCommandTest, PrecisionAutoWhereNeitherFitsGivesBothRefusals) {
  const CommandRun train =
      Headroom("train", With(kMlp, {"--steps", "1", "--precision", "auto", "--budget", "26MiB"}));
  EXPECT_EQ(train.code, 1);
  EXPECT_THAT(train.err, HasSubstr("neither precision fits. In bf16 mixed precision: budget "));
  EXPECT_THAT(train.err, HasSubstr(" In float32: budget "));
}

}  // namespace
}  // namespace headroom::clients
