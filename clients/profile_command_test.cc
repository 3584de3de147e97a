// `headroom profile` end to end, in-process: the summary with its peak table, the trace,
// the profile that `headroom plan --profile` reads back, the metrics promtool accepts, and
// errors for bad flags.
#include "clients/cli.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "profiler/measured_cost_model.h"

namespace headroom::clients {
namespace {

using ::testing::HasSubstr;

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
