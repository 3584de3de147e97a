// The scheduler driven by hand: events in, state and actions out, with a fake clock.
#include "server/scheduler.h"

#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr uint64_t kMiB = 1024 * 1024;

proto::JobInfo Info(const std::string& id, proto::JobState state = proto::JOB_STATE_QUEUED) {
  proto::JobInfo info;
  info.set_job_id(id);
  info.set_state(state);
  info.set_total_steps(100);
  return info;
}

// Returns the actions as strings, "StartRun(job-1)", without NotifyWatchers (most events
// notify; the tests that care look at versions).
std::vector<std::string> Acts(const Decision& d) {
  std::vector<std::string> out;
  for (const sched::Action& a : d.actions) {
    if (a.kind != sched::Action::Kind::kNotifyWatchers) out.push_back(a.DebugString());
  }
  return out;
}

// A scheduler on a 10 MiB device with a 1 MiB fixed cost, and a clock it is told.
class SchedulerTest : public ::testing::Test {
 protected:
  SchedulerTest() : scheduler_(Options()) {}
  static SchedulerOptions Options() {
    SchedulerOptions o;
    o.device = "cpu:0";
    o.backend = "cpu";
    o.device_memory_bytes = 10 * kMiB;
    o.fixed_cost_bytes = kMiB;
    o.progress_write_interval = absl::Milliseconds(500);
    return o;
  }
  Decision Apply(const sched::Event& e) { return scheduler_.Apply(e, now_); }
  Decision Submit(const std::string& id, uint64_t need_bytes) {
    return Apply(sched::Submitted{Info(id), need_bytes});
  }
  proto::JobState State(const std::string& id) const {
    return scheduler_.Find(id)->info.state();
  }
  std::string Message(const std::string& id) const {
    return ProgressOf(*scheduler_.Find(id)).message();
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
  Scheduler scheduler_;
};

TEST_F(SchedulerTest, JobsStartOneAtATimeInSubmissionOrder) {
  EXPECT_THAT(Acts(Submit("job-1", 3 * kMiB)),
              ElementsAre("Persist(job-1)", "Persist(job-1)", "StartRun(job-1)"));
  // Room for it, but one job runs at a time.
  EXPECT_THAT(Acts(Submit("job-2", 3 * kMiB)), ElementsAre("Persist(job-2)"));
  EXPECT_THAT(Acts(Submit("job-3", 3 * kMiB)), ElementsAre("Persist(job-3)"));
  EXPECT_EQ(State("job-1"), proto::JOB_STATE_RUNNING);
  EXPECT_THAT(scheduler_.queue(), ElementsAre("job-2", "job-3"));
  EXPECT_EQ(Message("job-2"), "") << "waiting for the worker is not waiting for memory";

  now_ += absl::Seconds(5);
  // It keeps its checkpoint: its trained weights (ExportModel).
  EXPECT_THAT(Acts(Apply(sched::RunEnded{"job-1", absl::OkStatus()})),
              ElementsAre("Persist(job-1)", "Persist(job-2)", "StartRun(job-2)"));
  EXPECT_EQ(State("job-1"), proto::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(scheduler_.Find("job-1")->info.finished_unix_seconds(), 1005);
  EXPECT_EQ(scheduler_.running_job(), "job-2");
  EXPECT_EQ(scheduler_.reserved_bytes(), 3 * kMiB);
}

TEST_F(SchedulerTest, HeadOfLineWaitsForMemoryAndSaysWhatItWaitsFor) {
  // A profile holds 6 MiB of 10.
  EXPECT_THAT(Acts(Apply(sched::ProfileRequested{"profile-1", 6 * kMiB})),
              ElementsAre("StartRun(profile-1, profile)"));
  EXPECT_THAT(Acts(Submit("job-1", 5 * kMiB)), ElementsAre("Persist(job-1)"));
  EXPECT_EQ(Message("job-1"), "waiting for device memory: needs 5.0 MiB, 4.0 MiB free");
  // A smaller job behind it does not jump the queue.
  Submit("job-2", 1 * kMiB);
  EXPECT_EQ(State("job-2"), proto::JOB_STATE_QUEUED);
  EXPECT_EQ(scheduler_.running_job(), "");

  // The profile's end frees the memory: the head starts, its message cleared.
  EXPECT_THAT(Acts(Apply(sched::ProfileDone{"profile-1"})),
              ElementsAre("Persist(job-1)", "StartRun(job-1)"));
  EXPECT_EQ(State("job-1"), proto::JOB_STATE_RUNNING);
  EXPECT_EQ(Message("job-1"), "");
  EXPECT_EQ(State("job-2"), proto::JOB_STATE_QUEUED);
}

TEST_F(SchedulerTest, ThatWaitMessageIsNotPersistedAndNotRepeated) {
  Apply(sched::ProfileRequested{"profile-1", 6 * kMiB});
  Submit("job-1", 5 * kMiB);
  const uint64_t version = scheduler_.Find("job-1")->version;
  // An event that changes nothing for the head leaves it as it was.
  EXPECT_THAT(Acts(Apply(sched::CancelRequested{"job-404"})), IsEmpty());
  EXPECT_EQ(scheduler_.Find("job-1")->version, version);
}

TEST_F(SchedulerTest, CancelQueuedJob) {
  Submit("job-1", 3 * kMiB);
  Submit("job-2", 3 * kMiB);
  const Decision d = Apply(sched::CancelRequested{"job-2"});
  EXPECT_TRUE(d.status.ok());
  EXPECT_EQ(d.state, proto::JOB_STATE_CANCELLED);
  EXPECT_THAT(Acts(d), ElementsAre("Persist(job-2)", "DeleteCheckpoint(job-2)"));
  EXPECT_EQ(Message("job-2"), "cancelled while queued");
  EXPECT_EQ(scheduler_.Find("job-2")->info.step(), 0u);
  EXPECT_THAT(scheduler_.queue(), IsEmpty());
}

TEST_F(SchedulerTest, CancelRunningJobStopsItsRunAndFreesItsMemoryWhenTheRunEnds) {
  Submit("job-1", 6 * kMiB);
  Submit("job-2", 6 * kMiB);
  Apply(sched::StepDone{"job-1", 7, 0.5, 0.01, 4 * kMiB, {}});
  const Decision d = Apply(sched::CancelRequested{"job-1"});
  EXPECT_EQ(d.state, proto::JOB_STATE_CANCELLED);
  EXPECT_THAT(Acts(d), ElementsAre("Persist(job-1)", "StopRun(job-1)"));
  EXPECT_EQ(Message("job-1"), "cancelled at step 7");
  // Its memory is held until the run has stopped.
  EXPECT_EQ(scheduler_.reserved_bytes(), 6 * kMiB);
  // A step that finished meanwhile changes nothing.
  EXPECT_THAT(Acts(Apply(sched::StepDone{"job-1", 8, 0.4, 0.01, 4 * kMiB, {}})), IsEmpty());
  EXPECT_EQ(scheduler_.Find("job-1")->info.step(), 7u);

  // The run ends with the executor's cancelled error: the job stays CANCELLED.
  EXPECT_THAT(Acts(Apply(sched::RunEnded{"job-1", absl::CancelledError("cancelled")})),
              ElementsAre("DeleteCheckpoint(job-1)", "Persist(job-2)", "StartRun(job-2)"));
  EXPECT_EQ(State("job-1"), proto::JOB_STATE_CANCELLED);
  EXPECT_EQ(Message("job-1"), "cancelled at step 7");
}

TEST_F(SchedulerTest, ADatasetJobsFitProgressReachesWatchersAndEpochEndsAreStored) {
  Submit("job-1", 6 * kMiB);
  sched::StepDone step{"job-1", 3, 0.9, 0.01, kMiB, {}};
  proto::FitProgress fit;
  fit.set_epoch(1);
  fit.set_total_epochs(4);
  fit.set_input_wait_fraction(0.002);
  step.fit = fit;
  Apply(step);
  EXPECT_EQ(ProgressOf(*scheduler_.Find("job-1")).fit().epoch(), 1u);
  EXPECT_EQ(ProgressOf(*scheduler_.Find("job-1")).fit().input_wait_fraction(), 0.002);
  // An epoch's end (its evaluation) is stored at once, even within the write interval.
  fit.set_evaluated(true);
  fit.set_eval_accuracy(0.75);
  fit.set_eval_epoch(1);
  EXPECT_THAT(Acts(Apply(sched::EpochEnded{"job-1", fit})), ElementsAre("Persist(job-1)"));
  EXPECT_EQ(scheduler_.Find("job-1")->info.fit().eval_accuracy(), 0.75);
  EXPECT_EQ(ProgressOf(*scheduler_.Find("job-1")).fit().eval_epoch(), 1u);
  // A step without fit progress (a synthetic job's) leaves it; one of an ended job is
  // ignored.
  Apply(sched::StepDone{"job-1", 4, 0.8, 0.01, kMiB, {}});
  EXPECT_EQ(scheduler_.Find("job-1")->info.fit().eval_accuracy(), 0.75);
  Apply(sched::CancelRequested{"job-1"});
  fit.set_eval_accuracy(0.5);
  EXPECT_THAT(Acts(Apply(sched::EpochEnded{"job-1", fit})), IsEmpty());
  EXPECT_EQ(scheduler_.Find("job-1")->info.fit().eval_accuracy(), 0.75);
}

TEST_F(SchedulerTest, EveryRanksProgressReachesTheJobAndItsWatchers) {
  Submit("job-1", 6 * kMiB);
  sched::StepDone step{"job-1", 3, 0.9, 0.01, 2 * kMiB, {}};
  for (uint32_t rank : {0u, 1u}) {
    proto::RankProgress& r = step.ranks.emplace_back();
    r.set_rank(rank);
    r.set_step(3);
    r.set_arena_peak_bytes(kMiB);
    r.set_resident_bytes((rank + 30) * kMiB);
  }
  Apply(step);
  const proto::JobProgress p = ProgressOf(*scheduler_.Find("job-1"));
  ASSERT_EQ(p.ranks_size(), 2);
  EXPECT_EQ(p.ranks(1).rank(), 1u);
  EXPECT_EQ(p.ranks(1).resident_bytes(), 31 * kMiB);
  EXPECT_EQ(scheduler_.Find("job-1")->info.ranks_size(), 2);
  // The next step's ranks replace them; a step without ranks leaves them.
  step.step = 4;
  step.ranks[1].set_resident_bytes(40 * kMiB);
  Apply(step);
  Apply(sched::StepDone{"job-1", 5, 0.8, 0.01, kMiB, {}});
  ASSERT_EQ(scheduler_.Find("job-1")->info.ranks_size(), 2);
  EXPECT_EQ(scheduler_.Find("job-1")->info.ranks(1).resident_bytes(), 40 * kMiB);
}

TEST_F(SchedulerTest, CancelEndedOrUnknownJob) {
  Submit("job-1", 3 * kMiB);
  Apply(sched::RunEnded{"job-1", absl::InternalError("out of luck")});
  EXPECT_EQ(State("job-1"), proto::JOB_STATE_FAILED);
  const Decision ended = Apply(sched::CancelRequested{"job-1"});
  EXPECT_TRUE(ended.status.ok());
  EXPECT_EQ(ended.state, proto::JOB_STATE_FAILED);
  EXPECT_THAT(Acts(ended), IsEmpty());
  EXPECT_EQ(Message("job-1"), "out of luck");

  const Decision unknown = Apply(sched::CancelRequested{"job-9"});
  EXPECT_EQ(unknown.status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.status.message(), HasSubstr("no job 'job-9'"));
}

TEST_F(SchedulerTest, RecoveryRequeuesUnfinishedJobsInOrderAndFailsThoseThatCannotResume) {
  Apply(sched::Recovered{Info("job-1", proto::JOB_STATE_SUCCEEDED), kMiB, "", std::nullopt});
  Apply(sched::Recovered{Info("job-2", proto::JOB_STATE_RUNNING), 4 * kMiB, "", 20});
  Apply(sched::Recovered{Info("job-3", proto::JOB_STATE_RUNNING), 4 * kMiB, "", std::nullopt});
  Apply(sched::Recovered{Info("job-4", proto::JOB_STATE_QUEUED), 4 * kMiB, "", std::nullopt});
  Apply(sched::Recovered{Info("job-5", proto::JOB_STATE_QUEUED), kMiB, "no plan stored", {}});
  proto::JobInfo gpu = Info("job-6", proto::JOB_STATE_RUNNING);
  gpu.mutable_spec()->mutable_train()->set_backend("cuda");
  Apply(sched::Recovered{gpu, kMiB, "", std::nullopt});
  proto::JobInfo big = Info("job-7", proto::JOB_STATE_QUEUED);
  big.set_planned_peak_bytes(10 * kMiB);
  // Its plan with the fixed cost exceeds the device it was restarted with.
  const Decision too_big = Apply(sched::Recovered{big, 11 * kMiB, "", std::nullopt});
  EXPECT_THAT(Acts(too_big), ElementsAre("Persist(job-7)"));

  EXPECT_EQ(State("job-1"), proto::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(State("job-2"), proto::JOB_STATE_RUNNING);
  EXPECT_EQ(scheduler_.Find("job-2")->info.step(), 20u);
  EXPECT_EQ(Message("job-3"), "resumes from step 0 after a daemon restart (no checkpoint yet)");
  EXPECT_EQ(Message("job-4"), "");
  EXPECT_THAT(scheduler_.queue(), ElementsAre("job-3", "job-4"));
  EXPECT_EQ(State("job-5"), proto::JOB_STATE_FAILED);
  EXPECT_EQ(Message("job-5"), "could not resume after a daemon restart: no plan stored");
  EXPECT_EQ(Message("job-6"),
            "could not resume after a daemon restart: it asks for backend 'cuda', but this "
            "daemon runs cpu:0");
  EXPECT_EQ(State("job-7"), proto::JOB_STATE_FAILED);
  EXPECT_THAT(Message("job-7"), HasSubstr("its plan's peak 10.0 MiB (10485760 bytes) with the "
                                          "fixed cost exceeds device cpu:0's memory of 10.0 MiB"));
  EXPECT_GT(scheduler_.Find("job-7")->info.finished_unix_seconds(), 0);
}

TEST_F(SchedulerTest, RecoveredRunningJobSaysWhereItResumes) {
  Submit("job-0", kMiB);  // runs, so the recovered job stays queued
  Apply(sched::Recovered{Info("job-1", proto::JOB_STATE_RUNNING), 4 * kMiB, "", 20});
  EXPECT_EQ(State("job-1"), proto::JOB_STATE_QUEUED);
  EXPECT_EQ(scheduler_.Find("job-1")->info.message(),
            "resumes from step 20 after a daemon restart");
}

TEST_F(SchedulerTest, ShutdownLeavesTheRunningJobQueuedAfterItsCheckpoint) {
  Submit("job-1", 3 * kMiB);
  Submit("job-2", 3 * kMiB);
  Apply(sched::StepDone{"job-1", 12, 0.5, 0.01, kMiB, {}});
  EXPECT_THAT(Acts(Apply(sched::ShutdownRequested{})), ElementsAre("StopRun(job-1, checkpoint)"));
  EXPECT_THAT(Acts(Apply(sched::RunEnded{"job-1", absl::OkStatus(), /*interrupted=*/true})),
              ElementsAre("Persist(job-1)"));
  EXPECT_EQ(State("job-1"), proto::JOB_STATE_QUEUED);
  EXPECT_EQ(Message("job-1"),
            "stopped by a daemon shutdown at step 12; resumes when headroomd starts");
  // It is the head again; nothing starts; new work is refused.
  EXPECT_THAT(scheduler_.queue(), ElementsAre("job-1", "job-2"));
  EXPECT_EQ(State("job-2"), proto::JOB_STATE_QUEUED);
  EXPECT_EQ(scheduler_.running_job(), "");
  EXPECT_EQ(Submit("job-3", kMiB).status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(scheduler_.Find("job-3"), nullptr);
  EXPECT_THAT(Acts(Apply(sched::ProfileRequested{"profile-1", kMiB})),
              ElementsAre("Reject(profile-1, profile, UNAVAILABLE: headroomd is shutting down)"));
}

TEST_F(SchedulerTest, ProfileThatDoesNotFitIsRejectedSayingWhatIsFree) {
  Submit("job-1", 6 * kMiB);
  const Decision d = Apply(sched::ProfileRequested{"profile-1", 6 * kMiB});
  ASSERT_EQ(d.actions.size(), 1u);
  EXPECT_EQ(d.actions[0].kind, sched::Action::Kind::kReject);
  EXPECT_EQ(d.actions[0].status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(d.actions[0].status.message(),
            "device cpu:0 has 4.0 MiB free; the profile needs 6.0 MiB, its plan and the fixed "
            "cost of 1.0 MiB (try again when the running job ends)");
  // One that fits runs beside the job.
  EXPECT_THAT(Acts(Apply(sched::ProfileRequested{"profile-2", 4 * kMiB})),
              ElementsAre("StartRun(profile-2, profile)"));
  EXPECT_EQ(scheduler_.reserved_bytes(), 10 * kMiB);
}

TEST_F(SchedulerTest, ProfileWaitsForACancelledRunToFreeItsMemory) {
  Submit("job-1", 6 * kMiB);
  Apply(sched::CancelRequested{"job-1"});
  EXPECT_THAT(Acts(Apply(sched::ProfileRequested{"profile-1", 6 * kMiB})), IsEmpty());
  EXPECT_THAT(Acts(Apply(sched::RunEnded{"job-1", absl::CancelledError("cancelled")})),
              ElementsAre("DeleteCheckpoint(job-1)", "StartRun(profile-1, profile)"));
}

TEST_F(SchedulerTest, AProfileWhoseCallerLeftIsDroppedWhileWaitingAndStoppedWhileRunning) {
  // Waiting (for a cancelled run's memory): dropped, its caller answered.
  Submit("job-1", 6 * kMiB);
  Apply(sched::CancelRequested{"job-1"});
  Apply(sched::ProfileRequested{"profile-1", 6 * kMiB});
  EXPECT_THAT(Acts(Apply(sched::ProfileAbandoned{"profile-1"})),
              ElementsAre("Reject(profile-1, profile, CANCELLED: the profile's caller went away)"));
  EXPECT_THAT(Acts(Apply(sched::RunEnded{"job-1", absl::CancelledError("cancelled")})),
              ElementsAre("DeleteCheckpoint(job-1)"));
  // Running: stopped before its next node; its memory comes back when it is done, and the
  // job that waited for it starts.
  EXPECT_THAT(Acts(Apply(sched::ProfileRequested{"profile-2", 8 * kMiB})),
              ElementsAre("StartRun(profile-2, profile)"));
  EXPECT_THAT(Acts(Submit("job-2", 3 * kMiB)), ElementsAre("Persist(job-2)"));
  EXPECT_THAT(Acts(Apply(sched::ProfileAbandoned{"profile-2"})),
              ElementsAre("StopRun(profile-2, profile, CANCELLED: the profile's caller went "
                          "away)"));
  EXPECT_THAT(Acts(Apply(sched::ProfileAbandoned{"profile-2"})), IsEmpty()) << "asked once";
  EXPECT_THAT(Acts(Apply(sched::ProfileDone{"profile-2"})),
              ElementsAre("Persist(job-2)", "StartRun(job-2)"));
  EXPECT_EQ(scheduler_.reserved_bytes(), 3 * kMiB);
}

TEST_F(SchedulerTest, ShutdownStopsRunningProfiles) {
  Apply(sched::ProfileRequested{"profile-1", kMiB});
  EXPECT_THAT(Acts(Apply(sched::ShutdownRequested{})),
              ElementsAre("StopRun(profile-1, profile, UNAVAILABLE: headroomd is shutting down: "
                          "the profile was stopped)"));
}

// A scheduler whose jobs may run 60 s.
class WallTimeTest : public SchedulerTest {
 protected:
  WallTimeTest() : limited_(Limited()) {}
  static SchedulerOptions Limited() {
    SchedulerOptions o = Options();
    o.max_job_seconds = 60;
    return o;
  }
  Decision Apply(const sched::Event& e) { return limited_.Apply(e, now_); }
  const ScheduledJob& Job(const std::string& id) const { return *limited_.Find(id); }

  Scheduler limited_;
};

TEST_F(WallTimeTest, AJobPastMaxJobSecondsFailsSayingSoAndKeepsItsCheckpoint) {
  Apply(sched::Submitted{Info("job-1"), kMiB});
  now_ += absl::Seconds(30);
  Apply(sched::StepDone{"job-1", 3, 0.5, 0.01, kMiB, {}});
  EXPECT_EQ(Job("job-1").info.state(), proto::JOB_STATE_RUNNING);
  EXPECT_DOUBLE_EQ(Job("job-1").info.running_seconds(), 30);
  now_ += absl::Seconds(31);
  EXPECT_THAT(Acts(Apply(sched::StepDone{"job-1", 6, 0.4, 0.01, kMiB, {}})),
              ElementsAre("Persist(job-1)", "StopRun(job-1, checkpoint)"));
  EXPECT_EQ(Job("job-1").info.state(), proto::JOB_STATE_FAILED);
  EXPECT_EQ(Job("job-1").info.error(),
            "ran past --max-job-seconds 60: 61.0 s running at step 6 of 100; stopped with its "
            "last checkpoint kept");
  // Its run stops after a checkpoint; no DeleteCheckpoint.
  EXPECT_THAT(Acts(Apply(sched::RunEnded{"job-1", absl::OkStatus(), /*interrupted=*/true})),
              IsEmpty());
  EXPECT_EQ(Job("job-1").info.state(), proto::JOB_STATE_FAILED);
}

TEST_F(WallTimeTest, TimeBeforeARestartCountsAndTimeQueuedDoesNot) {
  proto::JobInfo info = Info("job-1", proto::JOB_STATE_RUNNING);
  info.set_running_seconds(50);
  Apply(sched::Submitted{Info("job-0"), kMiB});  // runs: job-1 waits in the queue
  Apply(sched::Recovered{info, kMiB, "", 10});
  now_ += absl::Hours(1);
  Apply(sched::RunEnded{"job-0", absl::OkStatus()});
  EXPECT_EQ(Job("job-1").info.state(), proto::JOB_STATE_RUNNING);
  now_ += absl::Seconds(5);
  Apply(sched::StepDone{"job-1", 11, 0.5, 0.01, kMiB, {}});
  EXPECT_DOUBLE_EQ(Job("job-1").info.running_seconds(), 55);
  EXPECT_EQ(Job("job-1").info.state(), proto::JOB_STATE_RUNNING);
  now_ += absl::Seconds(6);
  Apply(sched::StepDone{"job-1", 12, 0.5, 0.01, kMiB, {}});
  EXPECT_EQ(Job("job-1").info.state(), proto::JOB_STATE_FAILED);
}

TEST_F(WallTimeTest, AJobThatFinishedItsLastStepSucceedsWhateverItsTime) {
  proto::JobInfo info = Info("job-1");
  info.set_total_steps(2);
  Apply(sched::Submitted{info, kMiB});
  now_ += absl::Seconds(100);
  Apply(sched::StepDone{"job-1", 2, 0.5, 0.01, kMiB, {}});
  Apply(sched::RunEnded{"job-1", absl::OkStatus()});
  EXPECT_EQ(Job("job-1").info.state(), proto::JOB_STATE_SUCCEEDED);
  EXPECT_DOUBLE_EQ(Job("job-1").info.running_seconds(), 100);
}

TEST_F(SchedulerTest, ProgressIsDerivedFromTheJobAndPersistedAtMostEveryInterval) {
  Submit("job-1", 3 * kMiB);
  proto::RoleBytes params;
  params.set_role(proto::ROLE_PARAMETER);
  params.set_bytes(1234);
  // Its start was persisted now; the first steps within the interval are not.
  now_ += absl::Milliseconds(100);
  EXPECT_THAT(Acts(Apply(sched::StepDone{"job-1", 1, 2.5, 0.25, 2 * kMiB, {params}})),
              IsEmpty());
  now_ += absl::Milliseconds(400);
  EXPECT_THAT(Acts(Apply(sched::StepDone{"job-1", 2, 2.0, 0.75, kMiB, {params}})),
              ElementsAre("Persist(job-1)"));
  now_ += absl::Milliseconds(100);
  EXPECT_THAT(Acts(Apply(sched::StepDone{"job-1", 3, 1.5, 0.5, kMiB, {}})), IsEmpty());

  const ScheduledJob& job = *scheduler_.Find("job-1");
  const proto::JobProgress p = ProgressOf(job);
  EXPECT_EQ(p.job_id(), "job-1");
  EXPECT_EQ(p.state(), proto::JOB_STATE_RUNNING);
  EXPECT_EQ(p.step(), 3u);
  EXPECT_EQ(p.total_steps(), 100u);
  EXPECT_EQ(p.loss(), 1.5);
  EXPECT_EQ(p.step_seconds(), 0.5);
  EXPECT_EQ(p.measured_peak_bytes(), 2 * kMiB) << "the highest step's";
  EXPECT_EQ(p.memory_by_role_size(), 0);
  EXPECT_EQ(job.info.median_step_seconds(), 0.5);
}

TEST_F(SchedulerTest, RestoredCheckpointSetsWhereTheRunResumed) {
  Submit("job-1", 3 * kMiB);
  EXPECT_THAT(Acts(Apply(sched::Restored{"job-1", 40, 0.125})), ElementsAre("Persist(job-1)"));
  EXPECT_EQ(scheduler_.Find("job-1")->info.resumed_from_step(), 40u);
  EXPECT_EQ(ProgressOf(*scheduler_.Find("job-1")).step(), 40u);
}

TEST_F(SchedulerTest, EveryChangeBumpsTheVersionWatchersWaitOn) {
  Submit("job-1", 3 * kMiB);
  const uint64_t before = scheduler_.Find("job-1")->version;
  const Decision d = Apply(sched::StepDone{"job-1", 1, 1, 0.1, kMiB, {}});
  EXPECT_GT(scheduler_.Find("job-1")->version, before);
  EXPECT_EQ(d.actions.front().kind, sched::Action::Kind::kNotifyWatchers);
}

TEST(SchedulerDriverTest, DriverFreeBytesDecideAdmission) {
  SchedulerOptions options;
  options.device_memory_bytes = 10 * kMiB;
  Scheduler scheduler(options);
  const absl::Time now = absl::FromUnixSeconds(1);
  scheduler.Apply(sched::CapacityChanged{2 * kMiB}, now);
  scheduler.Apply(sched::Submitted{Info("job-1"), 3 * kMiB}, now);
  EXPECT_EQ(scheduler.Find("job-1")->info.message(),
            "waiting for device memory: needs 3.0 MiB, 2.0 MiB free");
  const Decision d = scheduler.Apply(sched::CapacityChanged{8 * kMiB}, now);
  EXPECT_EQ(scheduler.Find("job-1")->info.state(), proto::JOB_STATE_RUNNING);
  std::vector<std::string> acts;
  for (const sched::Action& a : d.actions) acts.push_back(a.DebugString());
  EXPECT_EQ(absl::StrJoin(acts, " "),
            "NotifyWatchers(job-1) Persist(job-1) StartRun(job-1)");
}

TEST(SchedulerDriverTest, UnlimitedDeviceAdmitsAnything) {
  Scheduler scheduler(SchedulerOptions{});
  scheduler.Apply(sched::Submitted{Info("job-1"), 1ull << 50}, absl::UnixEpoch());
  EXPECT_EQ(scheduler.Find("job-1")->info.state(), proto::JOB_STATE_RUNNING);
}

}  // namespace
}  // namespace headroom::server
