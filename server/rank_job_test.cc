#include "server/rank_job.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/file_io.h"

namespace headroom::server {
namespace {

using ::testing::HasSubstr;

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

TEST(RankLineTest, StepAndCheckpointLinesRoundTrip) {
  RankLine step;
  step.progress.set_step(7);
  step.progress.set_loss(0.123456789012345678);
  step.progress.set_arena_peak_bytes(1 << 20);
  step.progress.set_resident_bytes(3 << 20);
  step.progress.set_resident_peak_bytes(4 << 20);
  step.step_seconds = 0.25;
  const std::string text = FormatRankLine(step);
  ASSERT_EQ(text.back(), '\n');
  absl::StatusOr<RankLine> parsed = ParseRankLine(1, text.substr(0, text.size() - 1));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->kind, RankLine::Kind::kStep);
  EXPECT_EQ(parsed->progress.rank(), 1u);
  EXPECT_EQ(parsed->progress.step(), 7u);
  EXPECT_EQ(parsed->progress.loss(), step.progress.loss());  // %.17g: exact
  EXPECT_EQ(parsed->progress.arena_peak_bytes(), 1u << 20);
  EXPECT_EQ(parsed->progress.resident_bytes(), 3u << 20);
  EXPECT_EQ(parsed->progress.resident_peak_bytes(), 4u << 20);
  EXPECT_DOUBLE_EQ(parsed->step_seconds, 0.25);

  RankLine checkpoint;
  checkpoint.kind = RankLine::Kind::kCheckpoint;
  checkpoint.progress.set_step(10);
  const std::string c = FormatRankLine(checkpoint);
  parsed = ParseRankLine(0, c.substr(0, c.size() - 1));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->kind, RankLine::Kind::kCheckpoint);
  EXPECT_EQ(parsed->progress.step(), 10u);
}

TEST(RankLineTest, AnErrorStaysOneLine) {
  RankLine error;
  error.kind = RankLine::Kind::kError;
  error.error = "first\nsecond";
  const std::string text = FormatRankLine(error);
  EXPECT_EQ(text, "error first second\n");
}

TEST(RankLineTest, GarbageIsRefusedNamingTheRank) {
  for (const char* bad : {"", "step", "step x 1 1 1 1 1", "step 1 0.5 0.1 1 1", "jump 1 2"}) {
    absl::StatusOr<RankLine> parsed = ParseRankLine(3, bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_THAT(parsed.status().message(), HasSubstr("rank 3's log")) << bad;
  }
}

TEST(RankLogReaderTest, ReturnsOnlyCompleteLinesOnce) {
  const std::string path = TempDir() + "/reader.log";
  std::remove(path.c_str());
  RankLogReader reader(path);
  EXPECT_TRUE(reader.NewLines().empty());  // no file yet
  std::ofstream out(path);
  out << "one\ntw" << std::flush;
  EXPECT_THAT(reader.NewLines(), ::testing::ElementsAre("one"));
  EXPECT_TRUE(reader.NewLines().empty());  // "tw" has no newline yet
  out << "o\nthree\n" << std::flush;
  EXPECT_THAT(reader.NewLines(), ::testing::ElementsAre("two", "three"));
  EXPECT_TRUE(reader.NewLines().empty());
}

TEST(RankFailureTest, NamesTheRankMpirunSawDie) {
  const std::string dir = TempDir() + "/failed";
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(WriteFileContents(RankJobFile(dir, "mpirun.log"),
                                "some banner\nmpirun noticed that process rank 1 with PID 42 on "
                                "node h exited on signal 9 (Killed).\nmore\n",
                                "log")
                  .ok());
  // Rank 0's error is about the dead peer; the rank that died is the one to name.
  ASSERT_TRUE(WriteFileContents(RankLogPath(dir, 0), "error allreduce timed out\n", "log").ok());
  const std::string why = RankFailure(dir, 2, "exited with status 137");
  EXPECT_THAT(why, HasSubstr("rank 1 of 2 died"));
  EXPECT_THAT(why, HasSubstr("exited on signal 9"));
}

TEST(RankFailureTest, NamesTheRankThatReportedAnError) {
  const std::string dir = TempDir() + "/errored";
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(WriteFileContents(RankJobFile(dir, "mpirun.log"), "exit code 1\n", "log").ok());
  ASSERT_TRUE(WriteFileContents(RankLogPath(dir, 0), "step 1 0.5 0.1 1 2 3\n", "log").ok());
  ASSERT_TRUE(WriteFileContents(RankLogPath(dir, 1), "error INTERNAL: a bug\n", "log").ok());
  EXPECT_THAT(RankFailure(dir, 2, "exited with status 1"),
              HasSubstr("rank 1 of 2 failed: INTERNAL: a bug"));
}

TEST(CheckRanksTest, RefusesMoreThanTheLimitNamingIt) {
  proto::JobSpec spec;
  spec.mutable_model()->mutable_zoo()->set_name("mlp");
  spec.set_ranks(8);
  const absl::Status s = CheckRanks(spec, 2, "cpu");
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("spec.ranks: 8 ranks, more than this daemon's --max-ranks 2"));
  spec.set_ranks(2);
  EXPECT_TRUE(CheckRanks(spec, 2, "cpu").ok());
  EXPECT_TRUE(absl::IsUnimplemented(CheckRanks(spec, 2, "cuda")));
  spec.mutable_data()->set_dataset("fashion-mnist");
  EXPECT_TRUE(absl::IsUnimplemented(CheckRanks(spec, 2, "cpu")));
  spec.clear_data();
  spec.mutable_model()->mutable_graph();
  const absl::Status graph = CheckRanks(spec, 2, "cpu");
  EXPECT_TRUE(absl::IsInvalidArgument(graph)) << graph;
  EXPECT_THAT(graph.message(), HasSubstr("needs a zoo model"));
  spec.set_ranks(0);
  EXPECT_EQ(RanksOf(spec), 1u);
  EXPECT_TRUE(CheckRanks(spec, 1, "cuda").ok());  // one rank: the daemon's own run
}

TEST(CheckRanksTest, TheRanksBucketsAndBatchNormComeFromThePlanOptions) {
  proto::JobSpec spec;
  spec.mutable_model()->mutable_zoo()->set_name("small_cnn");
  spec.set_ranks(2);
  proto::DataParallelOptions& dp = *spec.mutable_plan()->mutable_data_parallel();
  dp.set_bucket_bytes(4 << 20);
  dp.set_sync_batch_norm(true);
  EXPECT_TRUE(CheckRanks(spec, 2, "cpu").ok());
  dp.set_ranks(2);
  EXPECT_TRUE(CheckRanks(spec, 2, "cpu").ok());
  dp.set_ranks(4);
  const absl::Status other = CheckRanks(spec, 2, "cpu");
  EXPECT_TRUE(absl::IsInvalidArgument(other)) << other;
  EXPECT_THAT(other.message(), HasSubstr("spec.plan.data_parallel.ranks: 4, but spec.ranks is 2"));
  // One rank: neither applies.
  dp.set_ranks(0);
  spec.set_ranks(1);
  const absl::Status one = CheckRanks(spec, 2, "cpu");
  EXPECT_TRUE(absl::IsInvalidArgument(one)) << one;
  EXPECT_THAT(one.message(), HasSubstr("spec.plan.data_parallel.sync_batch_norm: applies to a "
                                       "job of several ranks, and spec.ranks is 1"));
  dp.set_sync_batch_norm(false);
  EXPECT_THAT(CheckRanks(spec, 2, "cpu").message(),
              HasSubstr("spec.plan.data_parallel.bucket_bytes"));
}

// Returns whether process `pid` runs (a zombie does not).
bool Alive(int pid) {
  absl::StatusOr<std::string> stat = ReadFileContents(absl::StrCat("/proc/", pid, "/stat"), "stat");
  if (!stat.ok()) return false;
  const size_t paren = stat->rfind(')');
  return paren != std::string::npos && paren + 2 < stat->size() && (*stat)[paren + 2] != 'Z';
}

TEST(LauncherTest, StopEndsTheWholeGroup) {
  const std::string log = TempDir() + "/launcher.log";
  // A shell that starts a child and waits: both must be gone after StopLauncher.
  absl::StatusOr<int> pid =
      StartLauncher({"sh", "-c", "sleep 600 & echo child $!; wait"}, log, false);
  ASSERT_TRUE(pid.ok()) << pid.status();
  int child = 0;
  for (int i = 0; i < 100 && child == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    absl::StatusOr<std::string> text = ReadFileContents(log, "log");
    if (text.ok() && text->find("child ") != std::string::npos) {
      child = std::atoi(text->c_str() + text->find("child ") + 6);
    }
  }
  ASSERT_GT(child, 0);
  StopLauncher(*pid, 2);
  for (int i = 0; i < 100 && Alive(child); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(Alive(child)) << "the launcher's child " << child << " outlived it";
  EXPECT_FALSE(Alive(*pid));
  EXPECT_TRUE(absl::IsNotFound(StartLauncher({"no-such-program-here"}, log, false).status()));
}

}  // namespace
}  // namespace headroom::server
