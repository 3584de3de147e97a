// `headroom profile` end to end, in-process: the summary with its peak table, the trace,
// the profile that `headroom plan --profile` reads back, the metrics promtool accepts, and
// errors for bad flags.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "clients/cli.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "profiler/measured_cost_model.h"

namespace headroom::clients {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct CommandRun {
  int code;
  std::string out;
  std::string err;
};

CommandRun Profile(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  std::vector<std::string> words = {"profile"};
  words.insert(words.end(), args.begin(), args.end());
  const int code = RunHeadroom(words, CommandIo{out, err});
  return {code, out.str(), err.str()};
}

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ProfileCommandTest, WritesSummaryTraceProfileAndMetrics) {
  const std::string dir = TempDir();
  CommandRun r = Profile({"--model", "resnet18", "--batch", "8", "--image_size", "64", "--steps",
                          "2", "--budget", "120MiB", "--trace", dir + "/trace.json", "--out",
                          dir + "/prof.json", "--metrics", dir + "/metrics.txt", "--rows", "5"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("measured peak"));
  EXPECT_THAT(r.out, HasSubstr("peak "));
  EXPECT_THAT(r.out, HasSubstr("largest live tensors at the peak (5 of"));
  EXPECT_THAT(r.out, HasSubstr("physical (process)"));
  EXPECT_THAT(r.out, HasSubstr("slowest nodes"));
  EXPECT_THAT(r.err, HasSubstr("2/2"));

  const std::string trace = ReadFile(dir + "/trace.json");
  EXPECT_THAT(trace, HasSubstr("\"traceEvents\""));
  EXPECT_THAT(trace, HasSubstr("memory: activations"));
  EXPECT_THAT(trace, HasSubstr("copy to host"));

  // The profile reads back, and the planner plans with it.
  absl::StatusOr<proto::ProfileResponse> profile = profiler::ReadProfileFile(dir + "/prof.json");
  ASSERT_TRUE(profile.ok()) << profile.status();
  EXPECT_EQ(profile->step_seconds_size(), 2);
  EXPECT_GT(profile->op_costs_size(), 0);
  EXPECT_EQ(profile->measured_peak_bytes(), profile->plan().predicted_peak_bytes());
  EXPECT_LE(profile->measured_peak_bytes(), 120u << 20);
  std::ostringstream out, err;
  ASSERT_EQ(RunHeadroom({"plan", "--model", "resnet18", "--batch", "8", "--image_size", "64",
                         "--budget", "120MiB", "--profile", dir + "/prof.json"},
                        CommandIo{out, err}),
            0)
      << err.str();
  EXPECT_THAT(out.str(), HasSubstr("measured (cpu profile, 2 steps)"));

  // The metrics pass Prometheus's own linter.
  const std::string metrics = ReadFile(dir + "/metrics.txt");
  EXPECT_THAT(
      metrics,
      HasSubstr("headroom_step_duration_seconds_count{device=\"cpu:0\",job=\"profile\"} 2"));
  ASSERT_EQ(std::system("test -x /usr/bin/promtool"), 0)
      << "promtool is missing: install Debian's prometheus package";
  const std::string command = "/usr/bin/promtool check metrics < " + dir + "/metrics.txt > " +
                              dir + "/promtool.out 2>&1";
  EXPECT_EQ(std::system(command.c_str()), 0) << ReadFile(dir + "/promtool.out");
}

TEST(ProfileCommandTest, JsonIsTheProfile) {
  CommandRun r = Profile({"--model", "mlp", "--batch", "4", "--depth", "2", "--width", "16",
                          "--steps", "1", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"graph_fingerprint\""));
  EXPECT_THAT(r.out, HasSubstr("\"op_costs\""));
  EXPECT_THAT(r.out, HasSubstr("\"peak_live\""));
  EXPECT_EQ(r.err, "") << "no progress lines with --json";
}

// --check-rebuild N: the rebuilt tensors of a reversible network checked against the
// forward's, in the text and the JSON.
TEST(ProfileCommandTest, ReportsMaxRebuildError) {
  const std::vector<std::string> model = {"--model",         "revnet38", "--batch", "2",
                                          "--image_size",    "16",       "--steps", "2",
                                          "--check-rebuild", "1"};
  CommandRun text = Profile(model);
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("max_rebuild_error"));
  EXPECT_THAT(text.out, HasSubstr("over 2 checked step(s) (every 1), mismatched mask elements 0"));
  std::vector<std::string> json_args = model;
  json_args.push_back("--json");
  CommandRun json = Profile(json_args);
  ASSERT_EQ(json.code, 0) << json.err;
  const size_t at = json.out.find("\"max_rebuild_error\":");
  ASSERT_NE(at, std::string::npos) << json.out.substr(0, 400);
  const double error = std::strtod(json.out.c_str() + at + 20, nullptr);
  std::cout << "profile revnet38: max_rebuild_error " << error << "\n";
  EXPECT_GT(error, 0) << "rebuilding rounds: the error is measured, not left at 0";
  EXPECT_LT(error, 1e-4);
  // Without the flag, nothing is checked and nothing reported.
  CommandRun plain =
      Profile({"--model", "revnet38", "--batch", "2", "--image_size", "16", "--steps", "1"});
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_THAT(plain.out, Not(HasSubstr("max_rebuild_error")));
}

TEST(ProfileCommandTest, BadFlagsAndBudgets) {
  EXPECT_EQ(Profile({"--model", "mlp", "--steps", "0"}).code, 2);
  EXPECT_EQ(Profile({"--model", "mlp", "--frobnicate", "1"}).code, 2);
  CommandRun tight = Profile({"--model", "mlp", "--batch", "4", "--budget", "1KiB"});
  EXPECT_EQ(tight.code, 1);
  EXPECT_THAT(tight.err, HasSubstr("headroom profile:"));
  CommandRun unwritable = Profile({"--model", "mlp", "--batch", "4", "--depth", "2", "--width", "8",
                            "--steps", "1", "--trace", "/nonexistent/dir/trace.json"});
  EXPECT_EQ(unwritable.code, 1);
  EXPECT_THAT(unwritable.err, HasSubstr("--trace"));
}

}  // namespace
}  // namespace headroom::clients
