// JobManager in process, on the CPU backend with a tiny MLP: the shell carries out the
// scheduler's decisions. No sleeps: every wait is a Watch of the job's own events.
#include "server/job_manager.h"

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "data/idx_file.h"
#include "executor/backend_scratch.h"
#include "executor/backends.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "profiler/metrics.h"
#include "server/scheduler.h"
#include "util/cancellation.h"

namespace headroom::server {
namespace {

using ::testing::HasSubstr;

proto::ModelSource TinyMlp() {
  proto::ModelSource m;
  proto::ZooModel* zoo = m.mutable_zoo();
  zoo->set_name("mlp");
  zoo->set_batch(8);
  (*zoo->mutable_options())["depth"] = 2;
  (*zoo->mutable_options())["width"] = 16;
  (*zoo->mutable_options())["input"] = 8;
  return m;
}

proto::JobSpec TinyJob(uint64_t steps) {
  proto::JobSpec spec;
  *spec.mutable_model() = TinyMlp();
  spec.mutable_train()->set_steps(steps);
  spec.mutable_train()->set_checkpoint_interval_steps(2);
  return spec;
}

// A manager on a fresh store; Reopen() starts another on the same store, as a restart does.
class JobManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "job_manager_XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    state_dir_ = pattern;
    absl::StatusOr<std::unique_ptr<profiler::Metrics>> metrics = profiler::Metrics::Create();
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    metrics_ = *std::move(metrics);
    absl::StatusOr<std::unique_ptr<executor::Backend>> backend = executor::MakeBackend("cpu");
    ASSERT_TRUE(backend.ok()) << backend.status();
    scratch_backend_ = *std::move(backend);
    scratch_ = std::make_unique<executor::BackendScratchModel>(scratch_backend_.get());
    Reopen();
  }

  // `adjust` changes the options the test's manager is made with.
  void Reopen(const std::function<void(JobManagerOptions&)>& adjust = {}) {
    jobs_.reset();
    store_.reset();
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(state_dir_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    JobManagerOptions options;
    options.make_backend = executor::MakeBackend;
    // Plans know the backend's kernels' scratch, as headroomd's do, so they are the plans
    // the trainers make.
    options.plan_backend.scratch = scratch_.get();
    options.plan_backend.host_is_device_memory = scratch_backend_->host_is_device_memory();
    options.fixed_cost_bytes = 0;
    if (adjust) adjust(options);
    absl::StatusOr<std::unique_ptr<JobManager>> jobs =
        JobManager::Create(store_.get(), metrics_.get(), options);
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    jobs_ = *std::move(jobs);
  }

  std::string Submit(const proto::JobSpec& spec) {
    absl::StatusOr<proto::SubmitJobResponse> r = jobs_->Submit(spec);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->job_id() : "";
  }

  // Returns the job's updates until `until` holds for one (included) or the job ends.
  std::vector<proto::JobProgress> Watch(
      const std::string& job_id,
      const std::function<bool(const proto::JobProgress&)>& until =
          [](const proto::JobProgress&) { return false; }) {
    std::vector<proto::JobProgress> updates;
    const absl::Status s = jobs_->Watch(
        job_id,
        [&](const proto::JobProgress& p) {
          updates.push_back(p);
          return !until(p);
        },
        [] { return false; });
    EXPECT_TRUE(s.ok() || absl::IsCancelled(s)) << s;
    EXPECT_FALSE(updates.empty());
    return updates;
  }

  proto::JobInfo Get(const std::string& job_id) {
    absl::StatusOr<proto::JobInfo> info = jobs_->Get(job_id);
    EXPECT_TRUE(info.ok()) << info.status();
    return info.value_or(proto::JobInfo());
  }

  std::string state_dir_;
  std::unique_ptr<profiler::Metrics> metrics_;
  std::unique_ptr<executor::Backend> scratch_backend_;
  std::unique_ptr<executor::BackendScratchModel> scratch_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<JobManager> jobs_;
};

TEST_F(JobManagerTest, AJobRunsToItsEndAndTheWatchSeesItsSteps) {
  const std::string id = Submit(TinyJob(5));
  const std::vector<proto::JobProgress> updates = Watch(id);
  EXPECT_EQ(updates.back().state(), proto::JOB_STATE_SUCCEEDED) << updates.back().message();
  EXPECT_EQ(updates.back().step(), 5u);
  const proto::JobInfo info = Get(id);
  EXPECT_EQ(info.state(), proto::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(info.step(), 5u);
  EXPECT_EQ(info.loss(), updates.back().loss());
  EXPECT_GT(info.measured_peak_bytes(), 0u);
  EXPECT_TRUE(jobs_->Timeline(id, 0).ok());
  EXPECT_EQ(jobs_->reserved_bytes(), 0u);
}

TEST_F(JobManagerTest, CancelReturnsAtOnceAndTheRunStopsBeforeTheNextJobStarts) {
  const std::string endless = Submit(TinyJob(100000000));
  const std::string next = Submit(TinyJob(3));
  Watch(endless, [](const proto::JobProgress& p) { return p.step() >= 1; });
  absl::StatusOr<proto::JobState> state = jobs_->Cancel(endless);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(*state, proto::JOB_STATE_CANCELLED);
  EXPECT_THAT(Get(endless).error(), HasSubstr("cancelled at step"));
  // One job trains at a time: the next one ends only after the cancelled run stopped.
  EXPECT_EQ(Watch(next).back().state(), proto::JOB_STATE_SUCCEEDED);
  EXPECT_LT(Get(endless).step(), 100000000u);
  // Cancelling again keeps the state; an unknown job is NotFound.
  EXPECT_EQ(jobs_->Cancel(endless).value_or(proto::JOB_STATE_UNSPECIFIED),
            proto::JOB_STATE_CANCELLED);
  EXPECT_TRUE(absl::IsNotFound(jobs_->Cancel("job-404").status()));
}

TEST_F(JobManagerTest, ShutdownLeavesTheRunningJobQueuedAndItResumesAfterARestart) {
  const std::string id = Submit(TinyJob(100000000));
  Watch(id, [](const proto::JobProgress& p) { return p.step() >= 3; });
  jobs_->Shutdown();
  const proto::JobInfo stopped = Get(id);
  EXPECT_EQ(stopped.state(), proto::JOB_STATE_QUEUED);
  EXPECT_THAT(stopped.message(), HasSubstr("stopped by a daemon shutdown at step"));
  EXPECT_EQ(jobs_->Submit(TinyJob(1)).status().code(), absl::StatusCode::kUnavailable);

  Reopen();
  const uint64_t from = stopped.step();
  EXPECT_GE(from, 3u);
  Watch(id, [&](const proto::JobProgress& p) { return p.step() > from; });
  // It resumed from the checkpoint written as it stopped, after its last step.
  EXPECT_EQ(Get(id).resumed_from_step(), from);
  EXPECT_EQ(jobs_->Cancel(id).value_or(proto::JOB_STATE_UNSPECIFIED), proto::JOB_STATE_CANCELLED);
}

TEST_F(JobManagerTest, ProfileRunsOnItsWorkerAndIsStored) {
  proto::ProfileRequest request;
  *request.mutable_model() = TinyMlp();
  request.set_steps(2);
  absl::StatusOr<proto::ProfileResponse> profile = jobs_->Profile(request);
  ASSERT_TRUE(profile.ok()) << profile.status();
  EXPECT_FALSE(profile->profile_id().empty());
  absl::StatusOr<proto::ListProfilesResponse> listed = jobs_->ListProfiles(true);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->profiles_size(), 1);
  EXPECT_EQ(listed->profiles(0).profile_id(), profile->profile_id());
  EXPECT_EQ(jobs_->reserved_bytes(), 0u);
}

TEST_F(JobManagerTest, ASubmitWhosePlanIsStoppedStoresNoJob) {
  const absl::Time start = absl::Now() - absl::Seconds(2);
  const util::CancellationToken expired(start + absl::Seconds(1), "a test's limit", nullptr, start);
  absl::StatusOr<proto::SubmitJobResponse> r = jobs_->Submit(TinyJob(5), &expired);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("a test's limit"));
  const util::CancellationToken cancelled(absl::InfiniteFuture(), "none", [] { return true; });
  EXPECT_EQ(jobs_->Submit(TinyJob(5), &cancelled).status().code(), absl::StatusCode::kCancelled);
  absl::StatusOr<proto::ListJobsResponse> listed = jobs_->List(proto::ListJobsRequest());
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->jobs_size(), 0);
}

TEST_F(JobManagerTest, APageTokenNearTheLargestOffsetGivesAnEmptyLastPage) {
  Submit(TinyJob(1));
  proto::ListJobsRequest request;
  request.set_page_size(1);
  request.set_page_token("18446744073709551615");  // SIZE_MAX: offset + page_size wraps to 0.
  absl::StatusOr<proto::ListJobsResponse> page = jobs_->List(request);
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(page->jobs_size(), 0);
  // A token back to the first page would have a client follow pages for ever.
  EXPECT_EQ(page->next_page_token(), "") << page->DebugString();
}

TEST_F(JobManagerTest, StepCountsOutOfRangeAreInvalidArgumentNamingTheField) {
  // 2^63 steps used to become a negative int64: the job ended SUCCEEDED after 0 steps.
  for (const uint64_t steps : {uint64_t{0}, uint64_t{1000000001}, uint64_t{1} << 63,
                               ~uint64_t{0}}) {
    absl::StatusOr<proto::SubmitJobResponse> r = jobs_->Submit(TinyJob(steps));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << steps;
    EXPECT_THAT(std::string(r.status().message()),
                ::testing::HasSubstr(absl::StrCat("spec.train.steps: must be between 1 and "
                                                  "1000000000, got ", steps)));
  }
  proto::ProfileRequest request;
  *request.mutable_model() = TinyMlp();
  request.set_steps(10001);
  absl::StatusOr<proto::ProfileResponse> profile = jobs_->Profile(request);
  EXPECT_EQ(profile.status().code(), absl::StatusCode::kInvalidArgument) << profile.status();
  EXPECT_THAT(std::string(profile.status().message()),
              ::testing::HasSubstr("steps: a profile runs between 1 and 10000 steps, not 10001"));
  EXPECT_EQ(jobs_->reserved_bytes(), 0u);
}

// Returns how many lines of `text` contain `needle`.
int LinesContaining(const std::string& text, const std::string& needle) {
  int lines = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StrContains(line, needle)) ++lines;
  }
  return lines;
}

// The driver's free memory as a test sets it (a figure, or an error), and how often it was
// asked.
class FakeDriver {
 public:
  void Set(absl::StatusOr<uint64_t> value) {
    absl::MutexLock lock(&mu_);
    free_bytes_ = std::move(value);
  }
  // Returns JobManagerOptions::free_device_bytes reading this driver (which must outlive it).
  std::function<absl::StatusOr<uint64_t>()> Sampler() {
    return [this]() -> absl::StatusOr<uint64_t> {
      absl::MutexLock lock(&mu_);
      ++calls_;
      return free_bytes_;
    };
  }
  // Returns once the sampler has been called `more` times more, or false after `limit`.
  bool AwaitCalls(int more, absl::Duration limit) {
    absl::MutexLock lock(&mu_);
    target_ = calls_ + more;
    return mu_.AwaitWithTimeout(absl::Condition(this, &FakeDriver::Reached), limit);
  }

 private:
  bool Reached() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return calls_ >= target_; }

  absl::Mutex mu_;
  absl::StatusOr<uint64_t> free_bytes_ ABSL_GUARDED_BY(mu_) = uint64_t{0};
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  int target_ ABSL_GUARDED_BY(mu_) = 0;
};

constexpr char kCannotRead[] = "cannot read cpu:0's free memory (cudaMemGetInfo: gone)";
constexpr char kFallback[] =
    "admitting jobs by its memory less what Headroom's running work reserved (";

// Returns the job's updates until `until` holds for one (included), the job ends, or two
// minutes pass (then the test fails instead of hanging on a job that never starts).
std::vector<proto::JobProgress> WatchAtMostTwoMinutes(
    JobManager& jobs, const std::string& id,
    const std::function<bool(const proto::JobProgress&)>& until) {
  const absl::Time deadline = absl::Now() + absl::Minutes(2);
  std::vector<proto::JobProgress> updates;
  const absl::Status s = jobs.Watch(
      id,
      [&](const proto::JobProgress& p) {
        updates.push_back(p);
        return !until(p);
      },
      [&] { return absl::Now() > deadline; });
  EXPECT_TRUE(s.ok() || absl::IsCancelled(s)) << s;
  EXPECT_FALSE(updates.empty());
  if (!updates.empty()) {
    EXPECT_LT(absl::Now(), deadline) << "gave up watching; last: " << updates.back().DebugString();
  }
  return updates;
}

bool Ends(const proto::JobProgress& p) { return Ended(p.state()); }

// A failed sample of the driver's free memory used to count as 0 bytes free: the job stayed
// QUEUED for ever. Now admission counts the device's memory less reservations, and stderr
// says why once (then once a minute at most) however often the sampler fails.
TEST_F(JobManagerTest, AJobRunsWhenTheDevicesFreeMemoryCannotBeRead) {
  FakeDriver driver;
  driver.Set(absl::UnavailableError("cudaMemGetInfo: gone"));
  const absl::Time start = absl::Now();
  ::testing::internal::CaptureStderr();
  Reopen([&](JobManagerOptions& o) {
    o.device_memory_bytes = uint64_t{1} << 30;
    o.free_device_bytes = driver.Sampler();
    o.admission_poll = absl::Milliseconds(1);  // Samples (and fails) often while idle.
  });
  const std::string id = Submit(TinyJob(4));
  const std::vector<proto::JobProgress> updates = WatchAtMostTwoMinutes(*jobs_, id, Ends);
  // Polls go on after the job: still one line a minute at most.
  EXPECT_TRUE(driver.AwaitCalls(50, absl::Minutes(1)));
  const std::string log = ::testing::internal::GetCapturedStderr();
  const absl::Duration elapsed = absl::Now() - start;
  ASSERT_FALSE(updates.empty());
  EXPECT_EQ(updates.back().state(), proto::JOB_STATE_SUCCEEDED) << updates.back().message();
  EXPECT_EQ(Get(id).step(), 4u);
  const int lines = LinesContaining(log, kCannotRead);
  EXPECT_GE(lines, 1) << log;
  EXPECT_LE(lines, 1 + static_cast<int>(elapsed / absl::Minutes(1))) << log;
  EXPECT_EQ(LinesContaining(log, kFallback), lines) << log;
  EXPECT_EQ(jobs_->reserved_bytes(), 0u);
  jobs_.reset();  // Shut down while `driver`, which the manager samples until then, lives.
}

// The driver's figure is used while it can be read: 0 bytes free keeps the job QUEUED saying
// so. Once sampling fails, the job starts on the device's memory less reservations; when
// sampling works again, stderr says so.
TEST_F(JobManagerTest, AJobWaitsOnTheDriversFigureAndStartsOnceItCannotBeRead) {
  FakeDriver driver;
  driver.Set(uint64_t{0});
  ::testing::internal::CaptureStderr();
  Reopen([&](JobManagerOptions& o) {
    o.device_memory_bytes = uint64_t{1} << 30;
    o.free_device_bytes = driver.Sampler();
    o.admission_poll = absl::Milliseconds(1);
  });
  const std::string id = Submit(TinyJob(3));
  const std::vector<proto::JobProgress> waiting =
      WatchAtMostTwoMinutes(*jobs_, id, [](const proto::JobProgress& p) {
        return absl::StrContains(p.message(), "waiting for device memory");
      });
  ASSERT_FALSE(waiting.empty());
  EXPECT_EQ(waiting.back().state(), proto::JOB_STATE_QUEUED);
  EXPECT_THAT(waiting.back().message(), HasSubstr("0 B free"));
  // Many polls later it still waits: the driver's figure holds.
  EXPECT_TRUE(driver.AwaitCalls(20, absl::Minutes(1)));
  EXPECT_EQ(Get(id).state(), proto::JOB_STATE_QUEUED);

  driver.Set(absl::UnavailableError("cudaMemGetInfo: gone"));
  const std::vector<proto::JobProgress> ended = WatchAtMostTwoMinutes(*jobs_, id, Ends);
  ASSERT_FALSE(ended.empty());
  EXPECT_EQ(ended.back().state(), proto::JOB_STATE_SUCCEEDED) << ended.back().message();
  driver.Set(uint64_t{1} << 30);
  EXPECT_TRUE(driver.AwaitCalls(5, absl::Minutes(1)));
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_GE(LinesContaining(log, kCannotRead), 1) << log;
  EXPECT_EQ(LinesContaining(log, "reading cpu:0's free memory works again: 1.0 GiB free"), 1)
      << log;
  jobs_.reset();  // Shut down while `driver`, which the manager samples until then, lives.
}

// ---- Jobs with a dataset (JobSpec.data) ---------------------------------------------------

// Writes a dataset directory of `items` 8x8 one-channel images of 4 classes into `dir`:
// class c lights up row c, plus noise from a fixed recurrence.
void WriteToyDataset(const std::string& dir, int64_t items) {
  std::filesystem::create_directories(dir);
  data::IdxArray images, labels;
  images.dims = {items, 8, 8};
  labels.dims = {items};
  uint32_t noise = 12345;
  for (int64_t i = 0; i < items; ++i) {
    const uint8_t label = static_cast<uint8_t>((i * 7 + 3) % 4);
    labels.bytes.push_back(label);
    for (int p = 0; p < 64; ++p) {
      noise = noise * 1103515245u + 12345u;
      images.bytes.push_back(
          static_cast<uint8_t>((noise >> 16) % 150 + (p / 8 == label ? 100 : 0)));
    }
  }
  std::ofstream(dir + "/images.idx", std::ios::binary) << data::EncodeIdx(images);
  std::ofstream(dir + "/labels.idx", std::ios::binary) << data::EncodeIdx(labels);
  std::ofstream(dir + "/index.txt")
      << "headroom-dataset 1\nclasses 4\nshard images.idx labels.idx\n";
}

class DatasetJobTest : public JobManagerTest {
 protected:
  void SetUp() override {
    JobManagerTest::SetUp();
    root_ = state_dir_ + "-data";
    WriteToyDataset(root_ + "/toy", 160);
    ReopenWithRoot();
  }
  void ReopenWithRoot() {
    Reopen([&](JobManagerOptions& o) { o.data_roots = DataRoots::Create({root_}).value(); });
  }

  // small_cnn for 8x8 images of 4 classes, batch 8: 128 training items after a 20% split,
  // 16 steps an epoch, 3 epochs, evaluated each, checkpoints every 5 steps.
  proto::JobSpec ToyJob() const {
    proto::JobSpec spec;
    proto::ZooModel* zoo = spec.mutable_model()->mutable_zoo();
    zoo->set_name("small_cnn");
    zoo->set_batch(8);
    (*zoo->mutable_options())["image_size"] = 8;
    (*zoo->mutable_options())["channels"] = 1;
    (*zoo->mutable_options())["classes"] = 4;
    spec.mutable_train()->set_seed(5);
    spec.mutable_train()->set_checkpoint_interval_steps(5);
    proto::DataOptions& d = *spec.mutable_data();
    d.set_dataset(root_ + "/toy");
    d.set_epochs(3);
    d.set_eval_every(1);
    d.set_validation_fraction(0.2);
    d.set_lr_schedule("cosine");
    d.set_warmup_steps(4);
    d.set_keep_last(2);
    return spec;
  }

  std::string root_;
};

TEST_F(DatasetJobTest, TrainsItsEpochsAndReportsEpochAccuracyAndInputWait) {
  const std::string id = Submit(ToyJob());
  EXPECT_EQ(Get(id).total_steps(), 48u);
  const std::vector<proto::JobProgress> updates = Watch(id);
  const proto::JobProgress& last = updates.back();
  ASSERT_EQ(last.state(), proto::JOB_STATE_SUCCEEDED) << last.message();
  EXPECT_EQ(last.step(), 48u);
  ASSERT_TRUE(last.has_fit());
  EXPECT_EQ(last.fit().epoch(), 3u);
  EXPECT_EQ(last.fit().total_epochs(), 3u);
  EXPECT_EQ(last.fit().batches_per_epoch(), 16u);
  EXPECT_TRUE(last.fit().evaluated());
  EXPECT_EQ(last.fit().eval_epoch(), 3u);
  EXPECT_GE(last.fit().eval_accuracy(), 0.0);
  EXPECT_LE(last.fit().eval_accuracy(), 1.0);
  EXPECT_GT(last.fit().eval_loss(), 0.0);
  EXPECT_GE(last.fit().input_wait_fraction(), 0.0);
  // Every epoch showed while it ran, and each evaluation before the next epoch's steps.
  std::set<uint64_t> epochs, evaluated;
  for (const proto::JobProgress& p : updates) {
    epochs.insert(p.fit().epoch());
    if (p.fit().evaluated()) evaluated.insert(p.fit().eval_epoch());
  }
  EXPECT_THAT(epochs, ::testing::IsSupersetOf({1u, 2u, 3u}));
  EXPECT_THAT(evaluated, ::testing::IsSupersetOf({1u, 2u, 3u}));
  // The metrics carry the same figures; the trained weights are stored for ExportModel.
  const std::string text = metrics_->TextExposition();
  EXPECT_THAT(text,
              HasSubstr(absl::StrCat("headroom_job_epoch{device=\"cpu:0\",job=\"", id, "\"} 3")));
  EXPECT_THAT(text, HasSubstr("headroom_job_eval_accuracy{"));
  EXPECT_THAT(text, HasSubstr("headroom_job_input_wait_seconds_total{"));
  absl::StatusOr<std::optional<proto::Checkpoint>> checkpoint = jobs_->GetCheckpoint(id);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  ASSERT_TRUE(checkpoint->has_value());
  EXPECT_EQ((*checkpoint)->step(), 48u);
  // Its fit checkpoints: the newest 2 by steps and the best.
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(state_dir_ + "/fit/" + id)) {
    files.push_back(e.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  EXPECT_THAT(files, ::testing::ElementsAre("best.hrfit", "checkpoint-000000040.hrfit",
                                            "checkpoint-000000045.hrfit"));
}

// A daemon shutdown mid-epoch checkpoints the job where it is; the next start resumes it
// from there, and it ends with exactly the evaluation of a run never stopped.
TEST_F(DatasetJobTest, AShutdownMidEpochResumesToTheStraightRunsEvaluationBitwise) {
  const std::string straight = Submit(ToyJob());
  const proto::JobProgress done = Watch(straight).back();
  ASSERT_EQ(done.state(), proto::JOB_STATE_SUCCEEDED) << done.message();

  const std::string stopped = Submit(ToyJob());
  Watch(stopped, [](const proto::JobProgress& p) { return p.step() >= 21; });
  jobs_->Shutdown();
  const proto::JobInfo at_stop = Get(stopped);
  ASSERT_EQ(at_stop.state(), proto::JOB_STATE_QUEUED) << at_stop.message();
  ASSERT_LT(at_stop.step(), 48u);
  ASSERT_NE(at_stop.step() % 16, 0u) << "not mid-epoch";
  ReopenWithRoot();
  const proto::JobProgress resumed = Watch(stopped).back();
  ASSERT_EQ(resumed.state(), proto::JOB_STATE_SUCCEEDED) << resumed.message();
  EXPECT_EQ(Get(stopped).resumed_from_step(), at_stop.step());
  EXPECT_EQ(resumed.fit().eval_loss(), done.fit().eval_loss());
  EXPECT_EQ(resumed.fit().eval_accuracy(), done.fit().eval_accuracy());
  // The weights too, bitwise.
  const proto::Checkpoint a = jobs_->GetCheckpoint(straight).value().value();
  const proto::Checkpoint b = jobs_->GetCheckpoint(stopped).value().value();
  ASSERT_EQ(a.tensors_size(), b.tensors_size());
  for (int i = 0; i < a.tensors_size(); ++i) {
    EXPECT_EQ(a.tensors(i).data(), b.tensors(i).data()) << a.tensors(i).name();
  }
  // The shutdown's own checkpoint is not left behind.
  EXPECT_FALSE(std::filesystem::exists(
      absl::StrFormat("%s/fit/%s/checkpoint-%09d.hrfit", state_dir_, stopped, at_stop.step())));
}

TEST_F(DatasetJobTest, SubmitRefusesBadDataNamingTheFieldOrPath) {
  auto refused = [&](const proto::JobSpec& spec, const std::string& want) {
    absl::StatusOr<proto::SubmitJobResponse> r = jobs_->Submit(spec);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(want));
  };
  // Outside the data root, and through a ".." out of it.
  const std::string outside = state_dir_ + "-outside";
  WriteToyDataset(outside, 40);
  proto::JobSpec spec = ToyJob();
  spec.mutable_data()->set_dataset(outside);
  refused(spec, "outside this daemon's data roots");
  spec.mutable_data()->set_dataset(root_ + "/../" +
                                   std::filesystem::path(outside).filename().string());
  refused(spec, "outside this daemon's data roots");
  // Steps with a dataset; data options without one; a bad option.
  spec = ToyJob();
  spec.mutable_train()->set_steps(10);
  refused(spec, "spec.train.steps");
  spec = ToyJob();
  spec.mutable_data()->set_dataset("");
  refused(spec, "spec.data: options given without spec.data.dataset");
  spec = ToyJob();
  spec.mutable_data()->set_lr_schedule("linear");
  refused(spec, "spec.data.lr_schedule");
  spec = ToyJob();
  spec.mutable_data()->set_validation_fraction(0);
  refused(spec, "has no test part to evaluate on");
  // A model whose input does not take the set's images.
  spec = ToyJob();
  (*spec.mutable_model()->mutable_zoo()->mutable_options())["image_size"] = 12;
  refused(spec, absl::StrCat("spec.data.dataset '", root_, "/toy'"));
  // A broken index names the file.
  std::filesystem::create_directories(root_ + "/broken");
  std::ofstream(root_ + "/broken/index.txt") << "not an index\n";
  spec = ToyJob();
  spec.mutable_data()->set_dataset(root_ + "/broken");
  const absl::Status broken = jobs_->Submit(spec).status();
  EXPECT_FALSE(broken.ok());
  EXPECT_THAT(std::string(broken.message()), HasSubstr("index.txt"));
  // More epochs than --max-job-steps allows (3 epochs of 16 batches is 48 steps).
  Reopen([&](JobManagerOptions& o) {
    o.data_roots = DataRoots::Create({root_}).value();
    o.max_job_steps = 47;
  });
  refused(ToyJob(), "3 epoch(s) of 16 batches make 48 steps, more than --max-job-steps 47");
  // Nothing was stored.
  EXPECT_EQ(jobs_->List(proto::ListJobsRequest()).value().jobs_size(), 0);
}

// A submit reads the set's headers, not its images: it refuses a set past
// --max-dataset-bytes at once, and a fault inside the elements (a label out of range) is
// found when the job loads the set, failing it with the file's error.
TEST_F(DatasetJobTest, ASubmitReadsHeadersAndHoldsTheSetToTheMemoryLimit) {
  // 160 items of 8x8 bytes and a label each: 10,400 bytes.
  Reopen([&](JobManagerOptions& o) {
    o.data_roots = DataRoots::Create({root_}).value();
    o.max_dataset_bytes = 10399;
  });
  absl::StatusOr<proto::SubmitJobResponse> r = jobs_->Submit(ToyJob());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("160 items of 1x8x8 bytes take 10400 bytes in memory once loaded, more "
                        "than headroomd's --max-dataset-bytes 10399"));
  EXPECT_EQ(jobs_->List(proto::ListJobsRequest()).value().jobs_size(), 0);

  Reopen([&](JobManagerOptions& o) {
    o.data_roots = DataRoots::Create({root_}).value();
    o.max_dataset_bytes = 10400;
  });
  // The last label becomes 9 of 4 classes: the header still holds, the load does not.
  data::IdxArray labels;
  labels.dims = {160};
  for (int64_t i = 0; i < 160; ++i) labels.bytes.push_back(static_cast<uint8_t>(i % 4));
  labels.bytes.back() = 9;
  std::ofstream(root_ + "/toy/labels.idx", std::ios::binary) << data::EncodeIdx(labels);
  const std::string id = Submit(ToyJob());
  const std::vector<proto::JobProgress> updates = Watch(id);
  ASSERT_FALSE(updates.empty());
  EXPECT_EQ(updates.back().state(), proto::JOB_STATE_FAILED);
  EXPECT_THAT(updates.back().message(), HasSubstr("item 159 has label 9, outside [0, 4)"));
}

}  // namespace
}  // namespace headroom::server
