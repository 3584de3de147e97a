#include "profiler/metrics.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom::profiler {
namespace {

using ::testing::HasSubstr;
using Labels = std::map<std::string, std::string>;

constexpr char kPromtool[] = "/usr/bin/promtool";

// One sample line of a text exposition: name{labels} value.
struct Sample {
  std::string name;
  Labels labels;
  double value = 0;
};

// Returns the value of one label, starting at text[*pos] just after its opening quote, and
// moves *pos past the closing quote. Undoes the format's escapes \\, \" and \n.
std::string ParseLabelValue(const std::string& text, size_t* pos) {
  std::string value;
  while (*pos < text.size() && text[*pos] != '"') {
    char c = text[(*pos)++];
    if (c == '\\' && *pos < text.size()) {
      c = text[(*pos)++];
      if (c == 'n') c = '\n';
    }
    value.push_back(c);
  }
  ++*pos;  // The closing quote.
  return value;
}

// Returns the samples of a text exposition (comments skipped); fails the test on a line it
// cannot read.
std::vector<Sample> ParseExposition(const std::string& text) {
  std::vector<Sample> samples;
  for (absl::string_view line_view : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const std::string line(line_view);
    if (line[0] == '#') continue;
    Sample sample;
    size_t pos = line.find_first_of("{ ");
    sample.name = line.substr(0, pos);
    if (pos != std::string::npos && line[pos] == '{') {
      ++pos;
      while (pos < line.size() && line[pos] != '}') {
        const size_t eq = line.find("=\"", pos);
        EXPECT_NE(eq, std::string::npos) << "bad labels in: " << line;
        if (eq == std::string::npos) return samples;
        const std::string name = line.substr(pos, eq - pos);
        pos = eq + 2;
        sample.labels[name] = ParseLabelValue(line, &pos);
        if (pos < line.size() && line[pos] == ',') ++pos;
      }
      ++pos;  // The closing brace.
    }
    const std::string value = line.substr(line.find_first_not_of(' ', pos));
    if (value == "+Inf") {
      sample.value = std::numeric_limits<double>::infinity();
    } else if (value == "NaN") {
      sample.value = std::nan("");
    } else {
      EXPECT_TRUE(absl::SimpleAtod(value, &sample.value)) << "bad value in: " << line;
    }
    samples.push_back(std::move(sample));
  }
  return samples;
}

// The samples of one exposition, to look values up in.
class Scrape {
 public:
  explicit Scrape(const Metrics& metrics)
      : text_(metrics.TextExposition()), samples_(ParseExposition(text_)) {}

  // Returns the value of the sample with exactly this name and these labels, or nullopt.
  std::optional<double> Value(const std::string& name, const Labels& labels) const {
    for (const Sample& sample : samples_) {
      if (sample.name == name && sample.labels == labels) return sample.value;
    }
    return std::nullopt;
  }

  // Returns the number of samples having label `label` equal to `value`.
  int CountWithLabel(const std::string& label, const std::string& value) const {
    int count = 0;
    for (const Sample& sample : samples_) {
      auto it = sample.labels.find(label);
      if (it != sample.labels.end() && it->second == value) ++count;
    }
    return count;
  }

  // Returns the cumulative count of histogram `name`'s bucket whose bound is `le`.
  std::optional<double> Bucket(const std::string& name, Labels labels, double le) const {
    for (const Sample& sample : samples_) {
      auto it = sample.labels.find("le");
      if (sample.name != name + "_bucket" || it == sample.labels.end()) continue;
      double bound = 0;
      if (it->second == "+Inf") {
        bound = std::numeric_limits<double>::infinity();
      } else if (!absl::SimpleAtod(it->second, &bound)) {
        continue;
      }
      Labels rest = sample.labels;
      rest.erase("le");
      if (rest == labels && bound == le) return sample.value;
    }
    return std::nullopt;
  }

  const std::string& text() const { return text_; }

 private:
  std::string text_;
  std::vector<Sample> samples_;
};

Labels JobLabels(const std::string& job, const std::string& device) {
  return {{"device", device}, {"job", job}};
}

Labels RoleLabels(const std::string& job, const std::string& device, MemoryRole role) {
  Labels labels = JobLabels(job, device);
  labels["role"] = MemoryRoleName(role);
  return labels;
}

std::unique_ptr<Metrics> NewMetrics() {
  absl::StatusOr<std::unique_ptr<Metrics>> metrics = Metrics::Create();
  EXPECT_TRUE(metrics.ok()) << metrics.status();
  return metrics.ok() ? std::move(metrics).value() : nullptr;
}

// A step in which role i holds (i + 1) * scale bytes.
StepObservation Step(double step_seconds, uint64_t scale) {
  StepObservation step;
  step.step_seconds = step_seconds;
  for (MemoryRole role : kAllMemoryRoles) {
    step.bytes(role) = (static_cast<uint64_t>(role) + 1) * scale;
  }
  step.measured_peak_bytes = 100 * scale;
  step.offloaded_bytes = 3 * scale;
  step.prefetched_bytes = 2 * scale;
  step.recompute_seconds = 0.25;
  return step;
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together.
};

// Returns what `promtool check metrics` says about `exposition`.
CommandResult RunPromtoolCheckMetrics(const std::string& exposition) {
  const char* tmpdir = std::getenv("TEST_TMPDIR");
  const std::string path =
      absl::StrCat(tmpdir != nullptr ? tmpdir : "/tmp", "/metrics_test_", getpid(), ".prom");
  {
    std::ofstream file(path);
    file << exposition;
  }
  CommandResult result;
  FILE* pipe = popen(absl::StrCat(kPromtool, " check metrics < '", path, "' 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    result.output = "popen failed";
    return result;
  }
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  const int status = pclose(pipe);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  std::remove(path.c_str());
  return result;
}

// Fails (never skips) when promtool is missing: the metric names must be checked.
void RequirePromtool() {
  ASSERT_EQ(access(kPromtool, X_OK), 0)
      << kPromtool << " is missing: install Debian's `prometheus` package "
      << "(apt-get install prometheus; ./headroom test installs it) to check the metric names";
}

TEST(MetricsTest, StartJobAddsEveryRoleAtZeroAndThePlannedPeak) {
  auto metrics = NewMetrics();
  ASSERT_NE(metrics, nullptr);
  ASSERT_TRUE(metrics->StartJob("job-1", "cuda:0", 1 << 30).ok());

  Scrape scrape(*metrics);
  for (MemoryRole role : kAllMemoryRoles) {
    EXPECT_EQ(scrape.Value("headroom_job_memory_bytes", RoleLabels("job-1", "cuda:0", role)), 0)
        << "role " << MemoryRoleName(role) << " in:\n" << scrape.text();
  }
  const Labels labels = JobLabels("job-1", "cuda:0");
  EXPECT_EQ(scrape.Value("headroom_planned_peak_bytes", labels), 1 << 30) << scrape.text();
  EXPECT_EQ(scrape.Value("headroom_measured_peak_bytes", labels), 0);
  EXPECT_EQ(scrape.Value("headroom_offloaded_bytes_total", labels), 0);
  EXPECT_EQ(scrape.Value("headroom_prefetched_bytes_total", labels), 0);
  EXPECT_EQ(scrape.Value("headroom_recompute_seconds_total", labels), 0);
  EXPECT_EQ(scrape.Value("headroom_step_duration_seconds_count", labels), 0);
  EXPECT_THAT(scrape.text(), HasSubstr("# HELP headroom_job_memory_bytes "));
  EXPECT_THAT(scrape.text(), HasSubstr("# TYPE headroom_step_duration_seconds histogram"));
}

TEST(MetricsTest, CountersAccumulateGaugesHoldTheLastStepHistogramCountsSteps) {
  auto metrics = NewMetrics();
  ASSERT_NE(metrics, nullptr);
  ASSERT_TRUE(metrics->StartJob("job-1", "cuda:0", 4096).ok());
  // Step 1: 3 ms, role i holds (i+1)*10 bytes. Step 2: 2 s, role i holds (i+1)*1000 bytes.
  ASSERT_TRUE(metrics->ObserveStep("job-1", "cuda:0", Step(0.003, 10)).ok());
  ASSERT_TRUE(metrics->ObserveStep("job-1", "cuda:0", Step(2.0, 1000)).ok());

  Scrape scrape(*metrics);
  SCOPED_TRACE(scrape.text());
  for (MemoryRole role : kAllMemoryRoles) {
    EXPECT_EQ(scrape.Value("headroom_job_memory_bytes", RoleLabels("job-1", "cuda:0", role)),
              (static_cast<double>(role) + 1) * 1000)
        << "role " << MemoryRoleName(role);
  }
  const Labels labels = JobLabels("job-1", "cuda:0");
  EXPECT_EQ(scrape.Value("headroom_measured_peak_bytes", labels), 100 * 1000);
  EXPECT_EQ(scrape.Value("headroom_planned_peak_bytes", labels), 4096);
  EXPECT_EQ(scrape.Value("headroom_offloaded_bytes_total", labels), 3 * 10 + 3 * 1000);
  EXPECT_EQ(scrape.Value("headroom_prefetched_bytes_total", labels), 2 * 10 + 2 * 1000);
  EXPECT_EQ(scrape.Value("headroom_recompute_seconds_total", labels), 0.5);
  EXPECT_EQ(scrape.Value("headroom_step_duration_seconds_count", labels), 2);
  std::optional<double> sum = scrape.Value("headroom_step_duration_seconds_sum", labels);
  ASSERT_TRUE(sum.has_value());
  EXPECT_NEAR(*sum, 2.003, 1e-9);
  // Cumulative buckets: 3 ms lies in (2.5 ms, 5 ms], 2 s in (1 s, 2.5 s].
  EXPECT_EQ(scrape.Bucket("headroom_step_duration_seconds", labels, 0.0025), 0);
  EXPECT_EQ(scrape.Bucket("headroom_step_duration_seconds", labels, 0.005), 1);
  EXPECT_EQ(scrape.Bucket("headroom_step_duration_seconds", labels, 1.0), 1);
  EXPECT_EQ(scrape.Bucket("headroom_step_duration_seconds", labels, 2.5), 2);
  EXPECT_EQ(scrape.Bucket("headroom_step_duration_seconds", labels, 100.0), 2);
  EXPECT_EQ(scrape.Bucket("headroom_step_duration_seconds", labels,
                          std::numeric_limits<double>::infinity()),
            2);
}

TEST(MetricsTest, BucketsSpanOneMillisecondToOneHundredSeconds) {
  const std::vector<double> bounds = StepDurationBucketsSeconds();
  ASSERT_EQ(bounds.size(), 16u);
  EXPECT_DOUBLE_EQ(bounds.front(), 0.001);
  EXPECT_DOUBLE_EQ(bounds.back(), 100.0);
  for (size_t i = 1; i < bounds.size(); ++i) {
    EXPECT_LT(bounds[i - 1], bounds[i]) << "bound " << i;
    EXPECT_LE(bounds[i] / bounds[i - 1], 2.5 + 1e-9) << "bound " << i;
  }
}

TEST(MetricsTest, ObserveStepNeedsAStartedJob) {
  auto metrics = NewMetrics();
  ASSERT_NE(metrics, nullptr);
  absl::Status status = metrics->ObserveStep("job-1", "cuda:0", Step(0.1, 1));
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_THAT(status.message(), HasSubstr("job 'job-1' on device 'cuda:0'"));

  // Started on another device only.
  ASSERT_TRUE(metrics->StartJob("job-1", "cuda:1", 0).ok());
  EXPECT_EQ(metrics->ObserveStep("job-1", "cuda:0", Step(0.1, 1)).code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(metrics->ObserveStep("job-1", "cuda:1", Step(0.1, 1)).ok());
}

TEST(MetricsTest, StartJobTwiceOnOneDeviceIsAlreadyExists) {
  auto metrics = NewMetrics();
  ASSERT_NE(metrics, nullptr);
  ASSERT_TRUE(metrics->StartJob("job-1", "cuda:0", 10).ok());
  absl::Status status = metrics->StartJob("job-1", "cuda:0", 20);
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists) << status;
  EXPECT_EQ(Scrape(*metrics).Value("headroom_planned_peak_bytes", JobLabels("job-1", "cuda:0")),
            10);
}

TEST(MetricsTest, ForgetJobRemovesEverySeriesOfThatJobOnly) {
  auto metrics = NewMetrics();
  ASSERT_NE(metrics, nullptr);
  // job-a on two devices, job-b (whose name sorts after job-a) and job-a0 (a job whose name
  // starts with job-a) on one each.
  for (const auto& [job, device] : std::vector<std::pair<std::string, std::string>>{
           {"job-a", "cuda:0"}, {"job-a", "cuda:1"}, {"job-a0", "cuda:0"}, {"job-b", "cuda:0"}}) {
    ASSERT_TRUE(metrics->StartJob(job, device, 100).ok());
    ASSERT_TRUE(metrics->ObserveStep(job, device, Step(0.5, 7)).ok());
  }
  ASSERT_TRUE(metrics->SetDeviceMemory("cuda:0", 1, 2).ok());
  const int per_job_device = Scrape(*metrics).CountWithLabel("job", "job-b");
  // A series per role + 2 peaks + 3 counters + 17 buckets + _sum + _count.
  EXPECT_EQ(per_job_device, static_cast<int>(kAllMemoryRoles.size()) + 2 + 3 + 17 + 2);

  EXPECT_EQ(metrics->ForgetJob("job-a"), 2);

  Scrape scrape(*metrics);
  SCOPED_TRACE(scrape.text());
  EXPECT_EQ(scrape.CountWithLabel("job", "job-a"), 0);
  EXPECT_EQ(scrape.CountWithLabel("job", "job-a0"), per_job_device);
  EXPECT_EQ(scrape.CountWithLabel("job", "job-b"), per_job_device);
  EXPECT_EQ(scrape.Value("headroom_device_memory_used_bytes", {{"device", "cuda:0"}}), 1);
  EXPECT_EQ(metrics->ObserveStep("job-a", "cuda:0", Step(0.5, 7)).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(metrics->ForgetJob("job-a"), 0);

  // Started again, its counters start from zero.
  ASSERT_TRUE(metrics->StartJob("job-a", "cuda:0", 100).ok());
  EXPECT_EQ(Scrape(*metrics).Value("headroom_offloaded_bytes_total",
                                   JobLabels("job-a", "cuda:0")),
            0);

  // Once every job is forgotten, no job label is left anywhere.
  metrics->ForgetJob("job-a");
  metrics->ForgetJob("job-a0");
  metrics->ForgetJob("job-b");
  EXPECT_THAT(metrics->TextExposition(), ::testing::Not(HasSubstr("job=")));
}

TEST(MetricsTest, FitSeriesAppearAtTheFirstObserveFitAndGoWithTheJob) {
  auto metrics = NewMetrics();
  ASSERT_NE(metrics, nullptr);
  EXPECT_EQ(metrics->ObserveFit("job-1", "cpu:0", {}).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(metrics->StartJob("job-1", "cpu:0", 100).ok());
  const Labels labels = JobLabels("job-1", "cpu:0");
  EXPECT_FALSE(Scrape(*metrics).Value("headroom_job_epoch", labels).has_value());
  // Epoch 1 without an evaluation; epoch 2 with one; the wait accumulates.
  ASSERT_TRUE(metrics->ObserveFit("job-1", "cpu:0", {1, false, 0, 0, 0.25}).ok());
  {
    Scrape scrape(*metrics);
    EXPECT_EQ(scrape.Value("headroom_job_epoch", labels), 1);
    EXPECT_EQ(scrape.Value("headroom_job_eval_accuracy", labels), 0);
    EXPECT_EQ(scrape.Value("headroom_job_input_wait_seconds_total", labels), 0.25);
  }
  ASSERT_TRUE(metrics->ObserveFit("job-1", "cpu:0", {2, true, 0.375, 0.875, 0.5}).ok());
  {
    Scrape scrape(*metrics);
    SCOPED_TRACE(scrape.text());
    EXPECT_EQ(scrape.Value("headroom_job_epoch", labels), 2);
    EXPECT_EQ(scrape.Value("headroom_job_eval_accuracy", labels), 0.875);
    EXPECT_EQ(scrape.Value("headroom_job_eval_loss", labels), 0.375);
    EXPECT_EQ(scrape.Value("headroom_job_input_wait_seconds_total", labels), 0.75);
  }
  // Bad figures record nothing.
  EXPECT_EQ(metrics->ObserveFit("job-1", "cpu:0", {3, false, 0, 0, -1}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(metrics->ObserveFit("job-1", "cpu:0", {3, true, std::nan(""), 0.5, 0}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Scrape(*metrics).Value("headroom_job_epoch", labels), 2);
  EXPECT_EQ(metrics->ForgetJob("job-1"), 1);
  EXPECT_THAT(metrics->TextExposition(), ::testing::Not(HasSubstr("job=")));
}

TEST(MetricsTest, BadLabelValuesAreInvalidArgument) {
  auto metrics = NewMetrics();
  ASSERT_NE(metrics, nullptr);
  const std::string longest(kMaxLabelValueBytes, 'j');
  EXPECT_TRUE(ValidateLabelValue("job", longest).ok());
  EXPECT_TRUE(ValidateLabelValue("job", "a_b.c:d/e@f-G9").ok());

  struct Case {
    std::string value;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {"", "job label value is empty"},
           {longest + "j", "has 129 bytes, at most 128"},
           {"my job", "has ' ' at byte 2"},
           {"a\"b", "at byte 1"},
           {"a\nb", "has '\\n' at byte 1"},
           {"caf\xc3\xa9", "at byte 3"},
       }) {
    absl::Status status = metrics->StartJob(c.value, "cuda:0", 0);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << "job '" << c.value << "'";
    EXPECT_THAT(status.message(), HasSubstr(c.message)) << status;
  }
  absl::Status status = metrics->StartJob("job-1", "cuda 0", 0);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("device label value 'cuda 0'"));
  EXPECT_EQ(metrics->SetDeviceMemory("", 0, 0).code(), absl::StatusCode::kInvalidArgument);

  // Nothing was added by the rejected calls.
  EXPECT_THAT(metrics->TextExposition(), ::testing::Not(HasSubstr("job=")));
  EXPECT_THAT(metrics->TextExposition(), ::testing::Not(HasSubstr("device=")));
}

TEST(MetricsTest, ObserveStepRejectsBadSecondsAndRecordsNothing) {
  auto metrics = NewMetrics();
  ASSERT_NE(metrics, nullptr);
  ASSERT_TRUE(metrics->StartJob("job-1", "cpu:0", 0).ok());
  for (double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    StepObservation step = Step(bad, 1);
    EXPECT_EQ(metrics->ObserveStep("job-1", "cpu:0", step).code(),
              absl::StatusCode::kInvalidArgument)
        << "step_seconds " << bad;
    step = Step(0.1, 1);
    step.recompute_seconds = bad;
    EXPECT_EQ(metrics->ObserveStep("job-1", "cpu:0", step).code(),
              absl::StatusCode::kInvalidArgument)
        << "recompute_seconds " << bad;
  }
  Scrape scrape(*metrics);
  const Labels labels = JobLabels("job-1", "cpu:0");
  EXPECT_EQ(scrape.Value("headroom_step_duration_seconds_count", labels), 0) << scrape.text();
  EXPECT_EQ(scrape.Value("headroom_offloaded_bytes_total", labels), 0);
  EXPECT_EQ(scrape.Value("headroom_measured_peak_bytes", labels), 0);
}

TEST(MetricsTest, JobCountsCoverEveryStateFromTheStart) {
  auto metrics = NewMetrics();
  ASSERT_NE(metrics, nullptr);
  const std::vector<std::string> states = {"queued", "running", "succeeded", "failed",
                                           "cancelled"};
  Scrape before(*metrics);
  for (const std::string& state : states) {
    EXPECT_EQ(before.Value("headroom_jobs", {{"state", state}}), 0) << state;
  }

  JobCounts counts;
  counts.queued = 1;
  counts.running = 2;
  counts.succeeded = 3;
  counts.failed = 4;
  counts.cancelled = 5;
  ASSERT_TRUE(metrics->SetJobCounts(counts).ok());
  Scrape after(*metrics);
  for (size_t i = 0; i < states.size(); ++i) {
    EXPECT_EQ(after.Value("headroom_jobs", {{"state", states[i]}}), i + 1) << states[i];
  }

  counts.failed = -1;
  absl::Status status = metrics->SetJobCounts(counts);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("'failed'"));
  EXPECT_EQ(Scrape(*metrics).Value("headroom_jobs", {{"state", "queued"}}), 1);
}

TEST(MetricsTest, DeviceMemoryHoldsTheLastReport) {
  auto metrics = NewMetrics();
  ASSERT_NE(metrics, nullptr);
  const uint64_t total = uint64_t{80} << 30;
  ASSERT_TRUE(metrics->SetDeviceMemory("cuda:0", 1 << 20, total).ok());
  ASSERT_TRUE(metrics->SetDeviceMemory("cuda:0", 3 << 20, total).ok());
  ASSERT_TRUE(metrics->SetDeviceMemory("cpu:0", 5, 10).ok());
  EXPECT_EQ(metrics->SetDeviceMemory("cuda:0", 11, 10).code(),
            absl::StatusCode::kInvalidArgument);

  Scrape scrape(*metrics);
  SCOPED_TRACE(scrape.text());
  EXPECT_EQ(scrape.Value("headroom_device_memory_used_bytes", {{"device", "cuda:0"}}), 3 << 20);
  EXPECT_EQ(scrape.Value("headroom_device_memory_total_bytes", {{"device", "cuda:0"}}),
            static_cast<double>(total));
  EXPECT_EQ(scrape.Value("headroom_device_memory_used_bytes", {{"device", "cpu:0"}}), 5);
  EXPECT_EQ(scrape.Value("headroom_device_memory_total_bytes", {{"device", "cpu:0"}}), 10);
}

TEST(MetricsTest, RankSeriesAppearAtEachRanksFirstObserveRankAndGoWithTheJob) {
  auto metrics = NewMetrics();
  ASSERT_NE(metrics, nullptr);
  EXPECT_EQ(metrics->ObserveRank("job-1", "cpu:0", 0, {}).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(metrics->StartJob("job-1", "cpu:0", 100).ok());
  EXPECT_EQ(metrics->ObserveRank("job-1", "cpu:0", -1, {}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(metrics->ObserveRank("job-1", "cpu:0", kMaxMetricRanks, {}).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(metrics->ObserveRank("job-1", "cpu:0", 0, {1000, 5000}).ok());
  ASSERT_TRUE(metrics->ObserveRank("job-1", "cpu:0", 1, {2000, 6000}).ok());
  ASSERT_TRUE(metrics->ObserveRank("job-1", "cpu:0", 1, {3000, 7000}).ok());  // the latest holds
  ASSERT_TRUE(metrics->ObserveStep("job-1", "cpu:0", Step(0.5, 40)).ok());    // peak 4000
  {
    Scrape scrape(*metrics);
    SCOPED_TRACE(scrape.text());
    Labels rank0 = JobLabels("job-1", "cpu:0"), rank1 = rank0;
    rank0.emplace("rank", "0");
    rank1.emplace("rank", "1");
    EXPECT_EQ(scrape.Value("headroom_measured_peak_bytes", rank0), 1000);
    EXPECT_EQ(scrape.Value("headroom_measured_peak_bytes", rank1), 3000);
    EXPECT_EQ(scrape.Value("headroom_rank_resident_bytes", rank0), 5000);
    EXPECT_EQ(scrape.Value("headroom_rank_resident_bytes", rank1), 7000);
    // The job's own series, without `rank`, stays.
    EXPECT_EQ(scrape.Value("headroom_measured_peak_bytes", JobLabels("job-1", "cpu:0")), 4000);
  }
  EXPECT_EQ(metrics->ForgetJob("job-1"), 1);
  EXPECT_THAT(metrics->TextExposition(), ::testing::Not(HasSubstr("rank=")));
}

TEST(MetricsTest, PromtoolFindsNoProblemInTheExposition) {
  RequirePromtool();
  auto metrics = NewMetrics();
  ASSERT_NE(metrics, nullptr);
  // Every family with series: two jobs, one on two devices, and both kinds of device.
  ASSERT_TRUE(metrics->StartJob("job-1", "cuda:0", 123456789).ok());
  ASSERT_TRUE(metrics->StartJob("job-1", "cpu:0", 1000).ok());
  ASSERT_TRUE(metrics->StartJob("job-2", "cuda:0", 42).ok());
  ASSERT_TRUE(metrics->ObserveStep("job-1", "cuda:0", Step(0.25, 4096)).ok());
  ASSERT_TRUE(metrics->ObserveStep("job-1", "cpu:0", Step(12.5, 1)).ok());
  ASSERT_TRUE(metrics->ObserveStep("job-2", "cuda:0", Step(0.0005, 3)).ok());
  ASSERT_TRUE(metrics->ObserveFit("job-2", "cuda:0", {2, true, 0.31, 0.9, 0.004}).ok());
  ASSERT_TRUE(metrics->ObserveRank("job-2", "cuda:0", 1, {4096, 1 << 20}).ok());
  ASSERT_TRUE(metrics->SetJobCounts({1, 2, 3, 0, 1}).ok());
  ASSERT_TRUE(metrics->SetDeviceMemory("cuda:0", uint64_t{40} << 30, uint64_t{80} << 30).ok());
  ASSERT_TRUE(metrics->SetDeviceMemory("cpu:0", uint64_t{8} << 30, uint64_t{64} << 30).ok());
  const std::string text = metrics->TextExposition();

  const CommandResult result = RunPromtoolCheckMetrics(text);
  EXPECT_EQ(result.exit_code, 0) << "promtool check metrics:\n"
                                 << result.output << "\non:\n"
                                 << text;
  EXPECT_EQ(result.output, "") << "on:\n" << text;
  // Every family made it into what promtool checked.
  for (const char* name :
       {"headroom_job_memory_bytes", "headroom_planned_peak_bytes", "headroom_measured_peak_bytes",
        "headroom_offloaded_bytes_total", "headroom_prefetched_bytes_total",
        "headroom_recompute_seconds_total", "headroom_step_duration_seconds", "headroom_jobs",
        "headroom_device_memory_used_bytes", "headroom_device_memory_total_bytes",
        "headroom_job_epoch", "headroom_job_eval_accuracy", "headroom_job_eval_loss",
        "headroom_job_input_wait_seconds_total", "headroom_rank_resident_bytes"}) {
    EXPECT_THAT(text, HasSubstr(absl::StrCat("# HELP ", name, " "))) << name;
  }
}

// The check above is only worth something if promtool does flag bad names.
TEST(MetricsTest, PromtoolFlagsACounterWithoutTotalSuffix) {
  RequirePromtool();
  const CommandResult result = RunPromtoolCheckMetrics(
      "# HELP headroom_offloaded_bytes Bytes.\n"
      "# TYPE headroom_offloaded_bytes counter\n"
      "headroom_offloaded_bytes 1\n");
  EXPECT_NE(result.exit_code, 0);
  EXPECT_THAT(result.output, HasSubstr("_total")) << result.output;
}

TEST(MetricsTest, ConcurrentStepsForgetsAndScrapesKeepEveryCount) {
  auto metrics = NewMetrics();
  ASSERT_NE(metrics, nullptr);
  constexpr int kJobs = 4;
  constexpr int kSteps = 200;
  std::vector<std::thread> threads;
  for (int j = 0; j < kJobs; ++j) {
    threads.emplace_back([&metrics, j] {
      const std::string job = absl::StrCat("job-", j);
      const std::string churn = absl::StrCat("churn-", j);
      EXPECT_TRUE(metrics->StartJob(job, "cuda:0", 1).ok());
      for (int s = 0; s < kSteps; ++s) {
        EXPECT_TRUE(metrics->ObserveStep(job, "cuda:0", Step(0.01, 1)).ok());
        // A short-lived job started and forgotten beside it.
        EXPECT_TRUE(metrics->StartJob(churn, "cuda:0", 1).ok());
        EXPECT_TRUE(metrics->ObserveStep(churn, "cuda:0", Step(0.01, 1)).ok());
        EXPECT_EQ(metrics->ForgetJob(churn), 1);
      }
    });
  }
  threads.emplace_back([&metrics] {
    for (int i = 0; i < 50; ++i) EXPECT_FALSE(metrics->TextExposition().empty());
  });
  for (std::thread& thread : threads) thread.join();

  Scrape scrape(*metrics);
  for (int j = 0; j < kJobs; ++j) {
    const Labels labels = JobLabels(absl::StrCat("job-", j), "cuda:0");
    EXPECT_EQ(scrape.Value("headroom_step_duration_seconds_count", labels), kSteps) << j;
    EXPECT_EQ(scrape.Value("headroom_offloaded_bytes_total", labels), 3 * kSteps) << j;
    EXPECT_EQ(scrape.CountWithLabel("job", absl::StrCat("churn-", j)), 0) << j;
  }
}

}  // namespace
}  // namespace headroom::profiler
