#include "server/job_store.h"

#include <malloc.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "profiler/process_memory.h"

namespace headroom::server {
namespace {

using ::headroom::proto::Checkpoint;
using ::headroom::proto::JobInfo;
using ::headroom::proto::JobState;
using ::headroom::proto::MemoryTimeline;
using ::headroom::proto::PlanResponse;
using ::headroom::proto::StoredProfile;

// Returns a state directory that does not exist yet, under a fresh temporary directory (so
// Open() has to create it and its parent-relative path).
std::string FreshStateDir() {
  std::string pattern = ::testing::TempDir() + "job_store_XXXXXX";
  const char* made = mkdtemp(pattern.data());
  EXPECT_NE(made, nullptr) << "mkdtemp " << pattern;
  return pattern + "/state/headroomd";
}

std::unique_ptr<JobStore> OpenOrDie(const std::string& state_dir) {
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(state_dir);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(store).value() : nullptr;
}

JobInfo MakeJob(const std::string& job_id, JobState state, double submitted_unix_seconds) {
  JobInfo job;
  job.set_job_id(job_id);
  job.set_name(absl::StrCat("train ", job_id));
  job.set_state(state);
  job.set_submitted_unix_seconds(submitted_unix_seconds);
  job.set_step(7);
  job.set_total_steps(100);
  job.set_planned_peak_bytes(uint64_t{3} << 30);
  job.mutable_spec()->mutable_model()->mutable_zoo()->set_name("resnet18");
  job.mutable_spec()->mutable_model()->mutable_zoo()->set_batch(32);
  job.mutable_spec()->mutable_train()->set_steps(100);
  if (state == proto::JOB_STATE_FAILED) job.set_error("out of memory at node 'layer3.conv2'");
  return job;
}

std::vector<std::string> JobIds(const std::vector<JobInfo>& jobs) {
  std::vector<std::string> ids;
  for (const JobInfo& job : jobs) ids.push_back(job.job_id());
  return ids;
}

// Returns a checkpoint of `job_id` at `step` whose every data byte is `step % 256`, so a torn
// or mixed-up checkpoint shows.
Checkpoint MakeCheckpoint(const std::string& job_id, uint64_t step, size_t tensor_bytes) {
  Checkpoint checkpoint;
  checkpoint.set_job_id(job_id);
  checkpoint.set_step(step);
  checkpoint.set_loss(1.0 / static_cast<double>(step + 1));
  for (const char* name : {"fc.weight", "fc.bias"}) {
    proto::TensorValue* tensor = checkpoint.add_tensors();
    tensor->set_name(name);
    tensor->add_shape(static_cast<int64_t>(tensor_bytes / 4));
    tensor->set_dtype(proto::DTYPE_FLOAT32);
    tensor->set_data(std::string(tensor_bytes, static_cast<char>(step % 256)));
  }
  return checkpoint;
}

// Returns "" if `checkpoint` is whole (as MakeCheckpoint made it), else what is wrong.
std::string CheckpointProblem(const Checkpoint& checkpoint) {
  if (checkpoint.tensors_size() != 2) {
    return absl::StrCat(checkpoint.tensors_size(), " tensors, expected 2");
  }
  for (const proto::TensorValue& tensor : checkpoint.tensors()) {
    for (char byte : tensor.data()) {
      if (byte != static_cast<char>(checkpoint.step() % 256)) {
        return absl::StrCat("tensor '", tensor.name(), "' holds bytes of another step than ",
                            checkpoint.step());
      }
    }
  }
  return "";
}

// Returns `n` bytes that differ from offset to offset and from seed to seed, so misplaced
// or mixed-up data shows.
std::string PatternBytes(size_t n, uint32_t seed) {
  std::string bytes(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (char& byte : bytes) {
    x = x * 1664525u + 1013904223u;
    byte = static_cast<char>(x >> 24);
  }
  return bytes;
}

// Returns "" when `a` and `b` are equal, else their sizes and first differing offset (without
// printing megabytes).
std::string FirstDifference(const std::string& a, const std::string& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  if (i == n && a.size() == b.size()) return "";
  return absl::StrCat(a.size(), " vs ", b.size(), " bytes, first difference at offset ", i);
}

CheckpointHeader HeaderOf(const Checkpoint& checkpoint) {
  return {checkpoint.job_id(), checkpoint.step(), checkpoint.loss()};
}

std::vector<CheckpointTensorInfo> TensorsOf(const Checkpoint& checkpoint) {
  std::vector<CheckpointTensorInfo> tensors;
  for (const proto::TensorValue& t : checkpoint.tensors()) {
    tensors.push_back({t.name(), {t.shape().begin(), t.shape().end()}, t.dtype(),
                       t.data().size()});
  }
  return tensors;
}

// Writes `checkpoint` through the streaming PutCheckpoint, each tensor's data read from it.
absl::Status PutStreamed(JobStore& store, const Checkpoint& checkpoint) {
  return store.PutCheckpoint(
      HeaderOf(checkpoint), TensorsOf(checkpoint), [&](size_t i, absl::Span<uint8_t> dst) {
        const std::string& data = checkpoint.tensors(i).data();
        if (dst.size() != data.size()) {
          return absl::InternalError(absl::StrCat("tensor ", i, ": asked for ", dst.size(),
                                                  " bytes, has ", data.size()));
        }
        std::memcpy(dst.data(), data.data(), data.size());
        return absl::OkStatus();
      });
}

// A raw SQLite connection, to look at or tamper with the database behind the store's back.
class RawDatabase {
 public:
  explicit RawDatabase(const std::string& path) {
    EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK)
        << path;
  }
  ~RawDatabase() { sqlite3_close(db_); }

  // Returns the blob in the first column of the first row of `sql` (nullopt when none).
  std::optional<std::string> QueryBlob(const std::string& sql) {
    sqlite3_stmt* statement = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &statement, nullptr), SQLITE_OK)
        << sql << ": " << sqlite3_errmsg(db_);
    std::optional<std::string> result;
    if (sqlite3_step(statement) == SQLITE_ROW) {
      const char* blob = static_cast<const char*>(sqlite3_column_blob(statement, 0));
      result = std::string(blob == nullptr ? "" : blob,
                           blob == nullptr ? 0 : sqlite3_column_bytes(statement, 0));
    }
    sqlite3_finalize(statement);
    return result;
  }

  // Runs `sql` and returns the first column of its first row ("" when none).
  std::string Query(const std::string& sql) {
    sqlite3_stmt* statement = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &statement, nullptr), SQLITE_OK)
        << sql << ": " << sqlite3_errmsg(db_);
    std::string result;
    const int rc = sqlite3_step(statement);
    if (rc == SQLITE_ROW) {
      const unsigned char* text = sqlite3_column_text(statement, 0);
      if (text != nullptr) result = reinterpret_cast<const char*>(text);
    } else {
      EXPECT_EQ(rc, SQLITE_DONE) << sql << ": " << sqlite3_errmsg(db_);
    }
    sqlite3_finalize(statement);
    return result;
  }

 private:
  sqlite3* db_ = nullptr;
};

TEST(JobStoreTest, JobsRoundTripNewestFirstAndSurviveReopen) {
  const std::string dir = FreshStateDir();
  std::vector<JobInfo> put = {
      MakeJob("job-000001", proto::JOB_STATE_SUCCEEDED, 100.0),
      MakeJob("job-000002", proto::JOB_STATE_FAILED, 200.0),
      MakeJob("job-000003", proto::JOB_STATE_RUNNING, 300.0),
      MakeJob("job-000004", proto::JOB_STATE_QUEUED, 300.0),  // ties with 3: id descending
      MakeJob("job-000005", proto::JOB_STATE_CANCELLED, 50.0),
  };
  // Newest first: 300 (job-000004, job-000003), 200, 100, 50.
  const std::vector<std::string> expected_order = {"job-000004", "job-000003", "job-000002",
                                                   "job-000001", "job-000005"};
  {
    std::unique_ptr<JobStore> store = OpenOrDie(dir);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->path(), dir + "/headroom.db");
    for (const JobInfo& job : put) ASSERT_TRUE(store->PutJob(job).ok()) << job.job_id();
    // Replacing a job keeps one row with the new contents.
    put[2].set_state(proto::JOB_STATE_SUCCEEDED);
    put[2].set_step(100);
    ASSERT_TRUE(store->PutJob(put[2]).ok());

    absl::StatusOr<std::vector<JobInfo>> loaded = store->LoadJobs();
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(JobIds(*loaded), expected_order);
  }
  std::unique_ptr<JobStore> reopened = OpenOrDie(dir);
  ASSERT_NE(reopened, nullptr);
  absl::StatusOr<std::vector<JobInfo>> loaded = reopened->LoadJobs();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(JobIds(*loaded), expected_order);
  for (const JobInfo& job : put) {
    absl::StatusOr<JobInfo> got = reopened->GetJob(job.job_id());
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->DebugString(), job.DebugString());
  }
  EXPECT_EQ(reopened->GetJob("job-000003")->state(), proto::JOB_STATE_SUCCEEDED);

  absl::StatusOr<JobInfo> missing = reopened->GetJob("job-000999");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "no job 'job-000999'");

  absl::Status no_id = reopened->PutJob(MakeJob("", proto::JOB_STATE_QUEUED, 1.0));
  EXPECT_EQ(no_id.code(), absl::StatusCode::kInvalidArgument) << no_id;
}

TEST(JobStoreTest, PlansTimelinesAndProfilesRoundTripAndSurviveReopen) {
  const std::string dir = FreshStateDir();
  PlanResponse plan;
  plan.mutable_summary()->set_arena_bytes(123456789);
  plan.mutable_summary()->set_predicted_step_seconds(0.25);
  plan.add_sections()->set_first_node("conv1");
  plan.add_sections()->set_last_node("fc");
  MemoryTimeline timeline;
  timeline.set_peak_bytes(987654321);
  timeline.set_peak_node("layer3.conv2");
  proto::TimelineSample* sample = timeline.add_samples();
  sample->set_time_seconds(0.5);
  (*sample->mutable_bytes_by_role())["activations"] = 4096;
  std::vector<StoredProfile> profiles(3);
  const double created[] = {20.0, 30.0, 10.0};
  for (int i = 0; i < 3; ++i) {
    profiles[i].set_profile_id(absl::StrFormat("profile-%06d", i + 1));
    profiles[i].set_created_unix_seconds(created[i]);
    profiles[i].mutable_response()->set_measured_peak_bytes(1000 + i);
    profiles[i].mutable_request()->set_steps(3 + i);
  }
  {
    std::unique_ptr<JobStore> store = OpenOrDie(dir);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->PutPlan("job-000001", plan).ok());
    ASSERT_TRUE(store->PutTimeline("job-000001", timeline).ok());
    // An empty message is an empty blob; it must still read back as present.
    ASSERT_TRUE(store->PutTimeline("job-000002", MemoryTimeline()).ok());
    for (const StoredProfile& profile : profiles) ASSERT_TRUE(store->PutProfile(profile).ok());
  }
  std::unique_ptr<JobStore> store = OpenOrDie(dir);
  ASSERT_NE(store, nullptr);
  absl::StatusOr<PlanResponse> got_plan = store->GetPlan("job-000001");
  ASSERT_TRUE(got_plan.ok()) << got_plan.status();
  EXPECT_EQ(got_plan->DebugString(), plan.DebugString());
  absl::StatusOr<MemoryTimeline> got_timeline = store->GetTimeline("job-000001");
  ASSERT_TRUE(got_timeline.ok()) << got_timeline.status();
  EXPECT_EQ(got_timeline->DebugString(), timeline.DebugString());
  absl::StatusOr<MemoryTimeline> empty_timeline = store->GetTimeline("job-000002");
  ASSERT_TRUE(empty_timeline.ok()) << empty_timeline.status();
  EXPECT_EQ(empty_timeline->samples_size(), 0);

  absl::StatusOr<std::vector<StoredProfile>> loaded = store->LoadProfiles();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), 3u);
  // Newest first: created 30, 20, 10.
  EXPECT_EQ((*loaded)[0].DebugString(), profiles[1].DebugString());
  EXPECT_EQ((*loaded)[1].DebugString(), profiles[0].DebugString());
  EXPECT_EQ((*loaded)[2].DebugString(), profiles[2].DebugString());

  absl::StatusOr<PlanResponse> no_plan = store->GetPlan("job-000042");
  EXPECT_EQ(no_plan.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(no_plan.status().message().find("'job-000042'"), std::string::npos)
      << no_plan.status();
  absl::StatusOr<MemoryTimeline> no_timeline = store->GetTimeline("job-000043");
  EXPECT_EQ(no_timeline.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(no_timeline.status().message().find("'job-000043'"), std::string::npos)
      << no_timeline.status();
  EXPECT_EQ(store->PutProfile(StoredProfile()).code(), absl::StatusCode::kInvalidArgument);
}

TEST(JobStoreTest, IdsKeepIncreasingAcrossReopen) {
  const std::string dir = FreshStateDir();
  {
    std::unique_ptr<JobStore> store = OpenOrDie(dir);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->NewJobId().value(), "job-000001");
    EXPECT_EQ(store->NewJobId().value(), "job-000002");
    EXPECT_EQ(store->NewProfileId().value(), "profile-000001");
  }
  std::unique_ptr<JobStore> store = OpenOrDie(dir);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->NewJobId().value(), "job-000003");
  EXPECT_EQ(store->NewProfileId().value(), "profile-000002");
  EXPECT_EQ(store->NewJobId().value(), "job-000004");
}

TEST(JobStoreTest, CheckpointReplaceKeepsOnlyTheNewest) {
  const std::string dir = FreshStateDir();
  std::unique_ptr<JobStore> store = OpenOrDie(dir);
  ASSERT_NE(store, nullptr);

  absl::StatusOr<std::optional<Checkpoint>> none = store->GetCheckpoint("job-000001");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());

  ASSERT_TRUE(store->PutCheckpoint(MakeCheckpoint("job-000001", 10, 1024)).ok());
  ASSERT_TRUE(store->PutCheckpoint(MakeCheckpoint("job-000002", 5, 1024)).ok());
  // A large one (32 MiB in all) replaces the small one.
  ASSERT_TRUE(store->PutCheckpoint(MakeCheckpoint("job-000001", 20, 16 << 20)).ok());

  absl::StatusOr<std::optional<Checkpoint>> latest = store->GetCheckpoint("job-000001");
  ASSERT_TRUE(latest.ok()) << latest.status();
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ((*latest)->step(), 20u);
  EXPECT_EQ((*latest)->tensors(0).data().size(), size_t{16} << 20);
  EXPECT_EQ(CheckpointProblem(**latest), "");
  {
    RawDatabase raw(store->path());
    EXPECT_EQ(raw.Query("SELECT COUNT(*) FROM checkpoints WHERE job_id = 'job-000001'"), "1");
  }

  ASSERT_TRUE(store->DeleteCheckpoint("job-000001").ok());
  ASSERT_TRUE(store->DeleteCheckpoint("job-000001").ok()) << "deleting none is OK";
  absl::StatusOr<std::optional<Checkpoint>> deleted = store->GetCheckpoint("job-000001");
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_FALSE(deleted->has_value());

  // The other job's checkpoint is untouched, and survives reopening.
  store.reset();
  store = OpenOrDie(dir);
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::optional<Checkpoint>> other = store->GetCheckpoint("job-000002");
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_TRUE(other->has_value());
  EXPECT_EQ((*other)->step(), 5u);
  EXPECT_EQ(CheckpointProblem(**other), "");
  EXPECT_EQ(store->PutCheckpoint(Checkpoint()).code(), absl::StatusCode::kInvalidArgument);
}

// What the killed child reports after each commit.
struct Committed {
  uint32_t jobs = 0;             // jobs job-000001 .. job-<jobs> are committed
  uint32_t checkpoint_step = 0;  // the checkpoint of "job-train" at this step is committed
};

std::string ChildJobId(uint32_t i) { return absl::StrFormat("job-%06d", i); }

// The child: writes jobs and, every third one, a 1 MiB checkpoint, reporting each commit on
// `report_fd`, until it is killed (or kills itself after `max_writes`). Never returns.
[[noreturn]] void WriteUntilKilled(const std::string& dir, int report_fd, uint32_t max_writes) {
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(dir);
  if (!store.ok()) _exit(2);
  Committed committed;
  for (uint32_t i = 1; i <= max_writes; ++i) {
    if (!(*store)->PutJob(MakeJob(ChildJobId(i), proto::JOB_STATE_RUNNING, i)).ok()) _exit(3);
    committed.jobs = i;
    if (i % 3 == 0) {
      if (!(*store)->PutCheckpoint(MakeCheckpoint("job-train", i, 512 << 10)).ok()) _exit(4);
      committed.checkpoint_step = i;
    }
    if (write(report_fd, &committed, sizeof committed) != sizeof committed) _exit(5);
  }
  raise(SIGKILL);
  _exit(6);
}

TEST(JobStoreTest, CommittedWritesSurviveSigkillMidWrite) {
  // Kill the child after different numbers of reported commits and different delays; it is
  // then somewhere in its next writes (often inside a 1 MiB checkpoint transaction).
  for (uint32_t round = 0; round < 16; ++round) {
    const uint32_t kill_after = 1 + 7 * round;
    const useconds_t delay_microseconds = (round * 397) % 3000;
    SCOPED_TRACE(absl::StrCat("killed ", delay_microseconds, " us after ", kill_after,
                              " reported commits"));
    const std::string dir = FreshStateDir();
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      WriteUntilKilled(dir, fds[1], /*max_writes=*/kill_after + 1000);
    }
    close(fds[1]);

    Committed last;
    Committed report;
    uint32_t reports = 0;
    bool killed = false;
    while (read(fds[0], &report, sizeof report) == sizeof report) {
      last = report;
      if (++reports == kill_after && !killed) {
        usleep(delay_microseconds);
        ASSERT_EQ(kill(pid, SIGKILL), 0);
        killed = true;
      }
    }
    // EOF: the child is gone; every report it wrote before dying was read.
    close(fds[0]);
    int wait_status = 0;
    ASSERT_EQ(waitpid(pid, &wait_status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(wait_status)) << "child exited with " << WEXITSTATUS(wait_status);
    EXPECT_EQ(WTERMSIG(wait_status), SIGKILL);
    ASSERT_GE(last.jobs, kill_after);

    std::unique_ptr<JobStore> store = OpenOrDie(dir);
    ASSERT_NE(store, nullptr);
    {
      RawDatabase raw(store->path());
      EXPECT_EQ(raw.Query("PRAGMA integrity_check"), "ok");
      EXPECT_EQ(raw.Query("PRAGMA journal_mode"), "wal");
    }
    absl::StatusOr<std::vector<JobInfo>> jobs = store->LoadJobs();
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    // Every reported job is there; at most one more committed without being reported.
    EXPECT_GE(jobs->size(), last.jobs);
    EXPECT_LE(jobs->size(), last.jobs + 1);
    for (uint32_t i = 1; i <= last.jobs; ++i) {
      absl::StatusOr<JobInfo> job = store->GetJob(ChildJobId(i));
      ASSERT_TRUE(job.ok()) << job.status();
      EXPECT_EQ(job->submitted_unix_seconds(), i);
    }
    absl::StatusOr<std::optional<Checkpoint>> checkpoint = store->GetCheckpoint("job-train");
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    if (last.checkpoint_step == 0) continue;
    ASSERT_TRUE(checkpoint->has_value()) << "reported checkpoint " << last.checkpoint_step;
    EXPECT_GE((*checkpoint)->step(), last.checkpoint_step);
    EXPECT_LE((*checkpoint)->step(), last.checkpoint_step + 3);
    EXPECT_EQ(CheckpointProblem(**checkpoint), "");
  }
}

TEST(JobStoreTest, RefusesADatabaseWithANewerSchemaVersion) {
  const std::string dir = FreshStateDir();
  std::string path;
  {
    std::unique_ptr<JobStore> store = OpenOrDie(dir);
    ASSERT_NE(store, nullptr);
    path = store->path();
  }
  {
    RawDatabase raw(path);
    raw.Query(absl::StrCat("PRAGMA user_version = ", JobStore::kSchemaVersion + 1));
  }
  absl::StatusOr<std::unique_ptr<JobStore>> refused = JobStore::Open(dir);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_NE(refused.status().message().find(path), std::string::npos) << refused.status();
  RawDatabase raw(path);
  EXPECT_EQ(raw.Query("PRAGMA user_version"), absl::StrCat(JobStore::kSchemaVersion + 1))
      << "refusing leaves the database as it was";
}

TEST(JobStoreTest, ANonDatabaseFileIsAnErrorNamingThePath) {
  const std::string dir = FreshStateDir();
  ASSERT_TRUE(OpenOrDie(dir) != nullptr);  // creates the directory
  const std::string path = dir + "/headroom.db";
  ASSERT_EQ(unlink(path.c_str()), 0);
  unlink((path + "-wal").c_str());
  unlink((path + "-shm").c_str());
  {
    std::ofstream garbage(path, std::ios::binary | std::ios::trunc);
    for (int i = 0; i < 512; ++i) garbage << "this is not a database, " << i << "\n";
  }
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(dir);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss) << store.status();
  EXPECT_NE(store.status().message().find(path), std::string::npos) << store.status();

  // A state directory that is a file names the directory.
  absl::StatusOr<std::unique_ptr<JobStore>> under_file = JobStore::Open(path + "/sub");
  ASSERT_FALSE(under_file.ok());
  EXPECT_NE(under_file.status().message().find(path), std::string::npos) << under_file.status();
}

TEST(JobStoreTest, AnUnparsableRowIsSkippedByLoadsAndNamedWithWhy) {
  const std::string dir = FreshStateDir();
  std::unique_ptr<JobStore> store = OpenOrDie(dir);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutJob(MakeJob("job-000001", proto::JOB_STATE_RUNNING, 1.0)).ok());
  ASSERT_TRUE(store->PutJob(MakeJob("job-000002", proto::JOB_STATE_SUCCEEDED, 2.0)).ok());
  ASSERT_TRUE(store->PutJob(MakeJob("job-000003", proto::JOB_STATE_QUEUED, 3.0)).ok());
  StoredProfile profile;
  profile.set_profile_id("profile-000001");
  ASSERT_TRUE(store->PutProfile(profile).ok());
  {
    // Field 1, length 5, then nothing: a truncated message.
    RawDatabase raw(store->path());
    raw.Query("UPDATE jobs SET info = x'0a05' WHERE job_id = 'job-000002'");
    raw.Query("UPDATE profiles SET profile = x'0a05' WHERE profile_id = 'profile-000001'");
  }
  // The loads serve the rest, newest first, and say what they left out and why.
  absl::StatusOr<std::vector<JobInfo>> jobs = store->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].job_id(), "job-000003");
  EXPECT_EQ((*jobs)[1].job_id(), "job-000001");
  absl::StatusOr<std::vector<StoredProfile>> profiles = store->LoadProfiles();
  ASSERT_TRUE(profiles.ok()) << profiles.status();
  EXPECT_TRUE(profiles->empty());
  const std::vector<SkippedRow> skipped = store->SkippedRows();
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_EQ(skipped[0].noun, "job");
  EXPECT_EQ(skipped[0].id, "job-000002");
  EXPECT_EQ(skipped[0].reason, "stored JobInfo (2 bytes) does not parse");
  EXPECT_EQ(skipped[1].noun, "profile");
  EXPECT_EQ(skipped[1].id, "profile-000001");
  // Loading again replaces the list rather than growing it.
  ASSERT_TRUE(store->LoadJobs().ok());
  EXPECT_EQ(store->SkippedRows().size(), 2u);

  // Reading the row itself is still DataLoss naming it.
  absl::StatusOr<JobInfo> job = store->GetJob("job-000002");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kDataLoss) << job.status();
  EXPECT_NE(job.status().message().find("job 'job-000002'"), std::string::npos)
      << job.status();
  EXPECT_TRUE(store->GetJob("job-000001").ok());
}

// The checkpoints the streaming PutCheckpoint must store as protobuf serializes them: no
// tensors; proto3 defaults (step 0, loss 0, empty data, a scalar) that serialization leaves
// out; -0.0 and a step past 32 bits; a tensor over 1 MiB whose lengths take 4-byte varints
// and a name whose length takes 2.
std::vector<Checkpoint> StreamingCases() {
  std::vector<Checkpoint> cases;
  Checkpoint empty;
  empty.set_job_id("job-000001");
  empty.set_step(7);
  empty.set_loss(0.5);
  cases.push_back(empty);

  Checkpoint defaults;
  defaults.set_job_id("job-000001");
  auto add = [](Checkpoint& c, const std::string& name, std::vector<int64_t> shape,
                proto::DType dtype, std::string data) {
    proto::TensorValue* t = c.add_tensors();
    t->set_name(name);
    for (int64_t d : shape) t->add_shape(d);
    t->set_dtype(dtype);
    t->set_data(std::move(data));
  };
  add(defaults, "no.elements", {0, 3}, proto::DTYPE_FLOAT32, "");
  add(defaults, "scalar", {}, proto::DTYPE_INT64, PatternBytes(8, 1));
  add(defaults, "", {2}, proto::DTYPE_UNSPECIFIED, PatternBytes(2, 2));
  add(defaults, "mask", {5}, proto::DTYPE_BOOL, PatternBytes(5, 3));
  cases.push_back(defaults);

  Checkpoint signs;
  signs.set_job_id("job-000001");
  signs.set_step(uint64_t{1} << 40);
  signs.set_loss(-0.0);
  add(signs, "layer.weight", {-1, 4}, proto::DTYPE_FLOAT32, PatternBytes(16, 4));
  cases.push_back(signs);

  Checkpoint large;
  large.set_job_id("job-000001");
  large.set_step(300);
  large.set_loss(std::nextafter(1.0, 2.0));
  add(large, std::string(200, 'w'), {3 << 18, 1}, proto::DTYPE_FLOAT32,
      PatternBytes((3 << 20) + 5, 5));
  add(large, "fc.bias", {10}, proto::DTYPE_FLOAT32, PatternBytes(40, 6));
  add(large, "fc.bias.momentum", {10}, proto::DTYPE_FLOAT32, PatternBytes(40, 7));
  cases.push_back(large);
  return cases;
}

TEST(JobStoreTest, StreamedCheckpointIsStoredByteForByteAsTheSerializedOne) {
  std::unique_ptr<JobStore> store = OpenOrDie(FreshStateDir());
  ASSERT_NE(store, nullptr);
  RawDatabase raw(store->path());
  const std::string stored_blob =
      "SELECT checkpoint FROM checkpoints WHERE job_id = 'job-000001'";
  const std::vector<Checkpoint> cases = StreamingCases();
  for (size_t c = 0; c < cases.size(); ++c) {
    SCOPED_TRACE(absl::StrCat("case ", c, ": ", cases[c].tensors_size(), " tensors, step ",
                              cases[c].step()));
    const std::string expected = cases[c].SerializeAsString();
    ASSERT_TRUE(store->PutCheckpoint(cases[c]).ok());
    const std::optional<std::string> serialized = raw.QueryBlob(stored_blob);
    absl::StatusOr<std::optional<Checkpoint>> serialized_back = store->GetCheckpoint("job-000001");

    const absl::Status streamed_status = PutStreamed(*store, cases[c]);
    ASSERT_TRUE(streamed_status.ok()) << streamed_status;
    const std::optional<std::string> streamed = raw.QueryBlob(stored_blob);
    absl::StatusOr<std::optional<Checkpoint>> streamed_back = store->GetCheckpoint("job-000001");

    ASSERT_TRUE(serialized.has_value() && streamed.has_value());
    EXPECT_EQ(FirstDifference(*serialized, expected), "") << "the proto path stores its bytes";
    EXPECT_EQ(FirstDifference(*streamed, expected), "") << "streamed vs serialized";
    ASSERT_TRUE(serialized_back.ok() && serialized_back->has_value()) << serialized_back.status();
    ASSERT_TRUE(streamed_back.ok() && streamed_back->has_value()) << streamed_back.status();
    EXPECT_EQ(FirstDifference((*streamed_back)->SerializeAsString(),
                              (*serialized_back)->SerializeAsString()),
              "")
        << "read back";
    EXPECT_EQ((*streamed_back)->tensors_size(), cases[c].tensors_size());
    EXPECT_EQ(raw.Query("SELECT step FROM checkpoints WHERE job_id = 'job-000001'"),
              absl::StrCat(cases[c].step()));
  }
}

TEST(JobStoreTest, StreamedCheckpointLayoutKnowsEveryField) {
  // LayOutCheckpoint() in job_store.cc writes these fields and no others: a new field must
  // be added there (and to CheckpointHeader or CheckpointTensorInfo).
  EXPECT_EQ(Checkpoint::descriptor()->field_count(), 4);
  EXPECT_EQ(proto::TensorValue::descriptor()->field_count(), 4);
}

TEST(JobStoreTest, AFailingReaderLeavesThePreviousCheckpoint) {
  std::unique_ptr<JobStore> store = OpenOrDie(FreshStateDir());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(PutStreamed(*store, MakeCheckpoint("job-000001", 10, 1 << 20)).ok());

  // Step 20's reader fails at its second tensor, halfway through the blob.
  const Checkpoint next = MakeCheckpoint("job-000001", 20, 1 << 20);
  auto fail_at_bias = [&](size_t i, absl::Span<uint8_t> dst) {
    if (next.tensors(i).name() == "fc.bias") return absl::UnavailableError("device lost");
    std::memset(dst.data(), 20, dst.size());
    return absl::OkStatus();
  };
  const absl::Status failed = store->PutCheckpoint(HeaderOf(next), TensorsOf(next), fail_at_bias);
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable) << failed;
  for (const char* part : {"job 'job-000001'", "step 20", "'fc.bias'", "device lost"}) {
    EXPECT_NE(failed.message().find(part), std::string::npos) << failed << " lacks " << part;
  }
  absl::StatusOr<std::optional<Checkpoint>> kept = store->GetCheckpoint("job-000001");
  ASSERT_TRUE(kept.ok() && kept->has_value()) << kept.status();
  EXPECT_EQ((*kept)->step(), 10u);
  EXPECT_EQ(CheckpointProblem(**kept), "");

  // A job without a checkpoint still has none.
  const Checkpoint other = MakeCheckpoint("job-000002", 5, 1024);
  EXPECT_FALSE(store->PutCheckpoint(HeaderOf(other), TensorsOf(other), fail_at_bias).ok());
  absl::StatusOr<std::optional<Checkpoint>> none = store->GetCheckpoint("job-000002");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
  {
    RawDatabase raw(store->path());
    EXPECT_EQ(raw.Query("SELECT COUNT(*) FROM checkpoints"), "1");
    EXPECT_EQ(raw.Query("PRAGMA integrity_check"), "ok");
  }

  // The store goes on: the next write lands.
  ASSERT_TRUE(PutStreamed(*store, next).ok());
  absl::StatusOr<std::optional<Checkpoint>> replaced = store->GetCheckpoint("job-000001");
  ASSERT_TRUE(replaced.ok() && replaced->has_value()) << replaced.status();
  EXPECT_EQ((*replaced)->step(), 20u);
  EXPECT_EQ(CheckpointProblem(**replaced), "");
  EXPECT_EQ(store->PutCheckpoint(CheckpointHeader{}, {}, fail_at_bias).code(),
            absl::StatusCode::kInvalidArgument);
}

// Returns how far the process's resident high-water mark rose while `run` ran, starting
// from malloc's free pages given back (so earlier tests' freed memory cannot hide an
// allocation); nullopt where the kernel cannot reset the mark.
std::optional<uint64_t> ResidentGrowthBytes(const std::function<void()>& run) {
  malloc_trim(0);
  if (!profiler::ResetPeakResident().ok()) return std::nullopt;
  absl::StatusOr<profiler::ProcessMemory> before = profiler::SampleProcessMemory();
  if (!before.ok()) return std::nullopt;
  run();
  absl::StatusOr<uint64_t> peak = profiler::PeakResidentBytes();
  if (!peak.ok()) return std::nullopt;
  return *peak > before->resident_bytes ? *peak - before->resident_bytes : 0;
}

TEST(JobStoreTest, StreamingACheckpointHoldsAboutOneTensorInMemory) {
  constexpr size_t kTensors = 8;
  constexpr size_t kTensorBytes = size_t{8} << 20;  // 64 MiB in all.
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  std::unique_ptr<JobStore> store = OpenOrDie(FreshStateDir());
  ASSERT_NE(store, nullptr);
  CheckpointHeader header{"job-000001", 8, 0.25};
  std::vector<CheckpointTensorInfo> tensors;
  for (size_t i = 0; i < kTensors; ++i) {
    tensors.push_back({absl::StrCat("layer", i, ".weight"), {int64_t{kTensorBytes / 4}},
                       proto::DTYPE_FLOAT32, kTensorBytes});
  }
  // The reader makes each tensor's bytes on the spot, as a device download would.
  auto fill = [](size_t i, absl::Span<uint8_t> dst) {
    std::memset(dst.data(), static_cast<int>(i + 1), dst.size());
    return absl::OkStatus();
  };

  absl::Status status;
  std::optional<uint64_t> streamed = ResidentGrowthBytes(
      [&] { status = store->PutCheckpoint(header, tensors, fill); });
  if (!streamed.has_value()) GTEST_SKIP() << "the kernel cannot reset the resident peak";
  ASSERT_TRUE(status.ok()) << status;
  RecordProperty("streamed_growth_bytes", absl::StrCat(*streamed));
  EXPECT_LT(*streamed, 3 * kTensorBytes)
      << "writing 64 MiB in 8 MiB tensors raised the resident peak by " << *streamed / kMiB
      << " MiB";

  // Reading it back holds the parsed checkpoint, and little beside it.
  absl::StatusOr<std::optional<Checkpoint>> back;
  std::optional<uint64_t> read = ResidentGrowthBytes([&] {
    back = store->GetCheckpoint("job-000001");
    ASSERT_TRUE(back.ok() && back->has_value()) << back.status();
    ASSERT_EQ((*back)->tensors_size(), static_cast<int>(kTensors));
    for (size_t i = 0; i < kTensors; ++i) {
      const std::string& data = (*back)->tensors(i).data();
      ASSERT_EQ(data.size(), kTensorBytes);
      EXPECT_EQ(data.find_first_not_of(static_cast<char>(i + 1)), std::string::npos)
          << "tensor " << i;
    }
    back = absl::StatusOr<std::optional<Checkpoint>>();
  });
  ASSERT_TRUE(read.has_value());
  RecordProperty("read_growth_bytes", absl::StrCat(*read));
  EXPECT_LT(*read, (kTensors + 3) * kTensorBytes)
      << "reading 64 MiB back raised the resident peak by " << *read / kMiB << " MiB";

  // The measurement sees a checkpoint held whole: the proto path holds it twice.
  std::optional<uint64_t> whole = ResidentGrowthBytes([&] {
    Checkpoint checkpoint;
    checkpoint.set_job_id("job-000001");
    for (size_t i = 0; i < kTensors; ++i) {
      checkpoint.add_tensors()->set_data(std::string(kTensorBytes, static_cast<char>(i + 1)));
    }
    status = store->PutCheckpoint(checkpoint);
  });
  ASSERT_TRUE(whole.has_value());
  RecordProperty("whole_growth_bytes", absl::StrCat(*whole));
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_GE(*whole, kTensors * kTensorBytes)
      << "the proto path raised the resident peak by only " << *whole / kMiB << " MiB";
}

TEST(JobStoreTest, ConcurrentPutJobFromEightThreadsAllLand) {
  const std::string dir = FreshStateDir();
  std::unique_ptr<JobStore> store = OpenOrDie(dir);
  ASSERT_NE(store, nullptr);
  constexpr int kThreads = 8;
  constexpr int kJobsPerThread = 50;
  std::vector<std::vector<std::string>> ids(kThreads);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int j = 0; j < kJobsPerThread; ++j) {
        absl::StatusOr<std::string> id = store->NewJobId();
        if (!id.ok()) {
          errors[t] = id.status().ToString();
          return;
        }
        absl::Status put = store->PutJob(MakeJob(*id, proto::JOB_STATE_QUEUED, t * 1000 + j));
        if (!put.ok()) {
          errors[t] = put.ToString();
          return;
        }
        ids[t].push_back(*id);
        // Readers interleave with the writers.
        if (j % 10 == 0 && !store->LoadJobs().ok()) errors[t] = "LoadJobs failed";
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::set<std::string> all_ids;
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(errors[t], "") << "thread " << t;
    all_ids.insert(ids[t].begin(), ids[t].end());
  }
  EXPECT_EQ(all_ids.size(), size_t{kThreads * kJobsPerThread}) << "ids are unique";
  absl::StatusOr<std::vector<JobInfo>> loaded = store->LoadJobs();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::set<std::string> loaded_ids;
  for (const JobInfo& job : *loaded) loaded_ids.insert(job.job_id());
  EXPECT_EQ(loaded_ids, all_ids);
}

}  // namespace
}  // namespace headroom::server
