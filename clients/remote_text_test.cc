// Text for people from the daemon's answers: the chart's shape, the tables, progress lines.
#include "clients/remote_text.h"

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom::clients {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1024 * 1024;

proto::MemoryTimeline Samples(const std::vector<uint64_t>& mib) {
  proto::MemoryTimeline t;
  for (size_t i = 0; i < mib.size(); ++i) {
    proto::TimelineSample* s = t.add_samples();
    s->set_time_seconds(static_cast<double>(i));
    s->set_device_bytes(mib[i] * kMiB);
  }
  return t;
}

TEST(DeviceBytesChartTest, ColumnsRiseToTheirShareOfThePeak) {
  // Five samples over five columns, one per column: 100, 400, 200, 400, 0 MiB over 4 rows
  // fill 1, 4, 2, 4 and 0 rows.
  const std::string chart = DeviceBytesChart(Samples({100, 400, 200, 400, 0}), 5, 4);
  const std::vector<std::string> lines = absl::StrSplit(chart, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 6u) << chart;  // 4 rows, the axis, the times
  EXPECT_EQ(lines[0], " 400.0 MiB | # #") << chart;
  EXPECT_EQ(lines[1], "           | # #") << chart;
  EXPECT_EQ(lines[2], "           | ###") << chart;
  EXPECT_EQ(lines[3], "           |####") << chart;
  EXPECT_EQ(lines[4], "       0 B +-----") << chart;
  EXPECT_THAT(lines[5], HasSubstr("0.000 s")) << chart;
  EXPECT_THAT(lines[5], HasSubstr("4.000 s")) << chart;
}

TEST(DeviceBytesChartTest, ColumnsWithoutSamplesRepeatTheOneBefore) {
  // Two samples stretched over six columns: the first five hold the first sample's height.
  const std::string chart = DeviceBytesChart(Samples({100, 200}), 6, 2);
  const std::vector<std::string> lines = absl::StrSplit(chart, '\n', absl::SkipEmpty());
  ASSERT_GE(lines.size(), 2u) << chart;
  EXPECT_EQ(lines[0], " 200.0 MiB |     #") << chart;
  EXPECT_EQ(lines[1], "           |######") << chart;
  EXPECT_EQ(DeviceBytesChart(proto::MemoryTimeline(), 6, 2), "no samples\n");
}

TEST(ProgressLineTest, ShowsTheThreeLargestRolesAndTheState) {
  proto::JobProgress p;
  p.set_state(proto::JOB_STATE_RUNNING);
  p.set_step(3);
  p.set_total_steps(4);
  const std::vector<std::pair<proto::TensorRole, uint64_t>> roles = {
      {proto::ROLE_PARAMETER, 10}, {proto::ROLE_ACTIVATION, 40}, {proto::ROLE_GRADIENT, 20},
      {proto::ROLE_OPTIMIZER_STATE, 30}};
  for (const auto& [role, mib] : roles) {
    proto::RoleBytes* r = p.add_memory_by_role();
    r->set_role(role);
    r->set_bytes(mib * kMiB);
  }
  const std::string line = ProgressLine(p);
  EXPECT_THAT(line, HasSubstr("[###############.....] 3/4"));
  EXPECT_THAT(line, HasSubstr("activation 40.0 MiB, optimizer_state 30.0 MiB, gradient 20.0 MiB, "
                              "+1 more"));
  EXPECT_THAT(line, HasSubstr("RUNNING"));
}

TEST(ProgressLineTest, ShowsEveryRanksMemory) {
  proto::JobProgress p;
  p.set_state(proto::JOB_STATE_RUNNING);
  p.set_step(2);
  p.set_total_steps(4);
  for (uint32_t rank : {0u, 1u}) {
    proto::RankProgress* r = p.add_ranks();
    r->set_rank(rank);
    r->set_step(2);
    r->set_arena_peak_bytes((rank + 1) * kMiB);
    r->set_resident_bytes((rank + 10) * kMiB);
  }
  const std::string line = ProgressLine(p);
  EXPECT_THAT(line, HasSubstr("[rank 0: step 2, arena 1.0 MiB, resident 10.0 MiB]"));
  EXPECT_THAT(line, HasSubstr("[rank 1: step 2, arena 2.0 MiB, resident 11.0 MiB]"));
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;  // one line: watch redraws it
  EXPECT_THAT(line, HasSubstr("memory per rank in [ ]"));  // no roles: not "no memory"
}

TEST(ProgressLineTest, ShowsADatasetJobsEpochAndValidationAccuracy) {
  proto::JobProgress p;
  p.set_state(proto::JOB_STATE_RUNNING);
  p.set_step(150);
  p.set_total_steps(300);
  proto::FitProgress& f = *p.mutable_fit();
  f.set_epoch(2);
  f.set_total_epochs(4);
  EXPECT_THAT(ProgressLine(p), HasSubstr("epoch 2/4  input wait 0.00%"));
  EXPECT_THAT(ProgressLine(p), ::testing::Not(HasSubstr("val acc")));
  f.set_evaluated(true);
  f.set_eval_accuracy(0.8125);
  f.set_eval_loss(0.51234);
  f.set_eval_epoch(1);
  f.set_input_wait_fraction(0.0123);
  const std::string line = ProgressLine(p);
  EXPECT_THAT(line, HasSubstr("epoch 2/4  val acc 81.25% loss 0.5123 (epoch 1)  input wait 1.23%"));
  // A job without a dataset shows none of it.
  p.clear_fit();
  EXPECT_THAT(ProgressLine(p), ::testing::Not(HasSubstr("epoch")));
}

TEST(JobsTableTest, ShowsAgesAndTheErrorBeforeTheMessage) {
  proto::JobInfo job;
  job.set_job_id("job-1");
  job.set_state(proto::JOB_STATE_FAILED);
  job.set_submitted_unix_seconds(1000);
  job.set_error("step 3: out of memory");
  job.set_message("queued behind job-0");
  const std::string table = JobsTable({job}, 1000 + 7200 + 5);
  EXPECT_THAT(table, HasSubstr("FAILED"));
  EXPECT_THAT(table, HasSubstr("2h"));
  EXPECT_THAT(table, HasSubstr("step 3: out of memory"));
  EXPECT_THAT(table, ::testing::Not(HasSubstr("queued behind")));
  EXPECT_EQ(JobsTable({}, 0), "no jobs\n");
}

// A job stored before names were checked, or a daemon that does not check them: its
// escape codes are printed escaped, never sent to the terminal.
TEST(JobsTableTest, EscapesControlCharactersOfNamesAndMessages) {
  proto::JobInfo job;
  job.set_job_id("job-1");
  job.set_name("evil\x1b[2J\x1b]0;pwned\x07");
  job.set_message("waiting \xc2\x9b" "31m");
  const std::string table = JobsTable({job}, 0);
  EXPECT_EQ(table.find('\x1b'), std::string::npos) << table;
  EXPECT_EQ(table.find('\x07'), std::string::npos) << table;
  EXPECT_EQ(table.find("\xc2\x9b"), std::string::npos) << table;
  EXPECT_THAT(table, HasSubstr("evil\\x1b[2J\\x1b]0;pwned\\x07"));
  EXPECT_THAT(ProgressLine([] {
                proto::JobProgress p;
                p.set_message("\x1b[31mred");
                return p;
              }()),
              HasSubstr("(\\x1b[31mred)"));
}

TEST(PlanTextTest, ListsTheFrontierOnlyWhenThereIsOne) {
  proto::PlanResponse plan;
  plan.add_sections()->set_first_node("conv1");
  EXPECT_THAT(PlanText(plan), HasSubstr("(no budget)"));
  EXPECT_THAT(PlanText(plan), ::testing::Not(HasSubstr("frontier")));
  proto::FrontierPoint* point = plan.add_frontier();
  point->set_peak_bytes(64 * kMiB);
  point->set_strategy("sqrt_n");
  EXPECT_THAT(PlanText(plan), HasSubstr("frontier"));
  EXPECT_THAT(PlanText(plan), HasSubstr("64.0 MiB"));
  EXPECT_THAT(PlanText(plan), HasSubstr("sqrt_n"));
}

}  // namespace
}  // namespace headroom::clients
