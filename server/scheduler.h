// headroomd's scheduling decisions for one device: the job queue, admission, and every job's
// state, as a state machine driven by events.
//
// `Apply(event, now)` changes the scheduler's state and returns what the caller must do
// (actions: start or stop a run, persist a job, wake watchers, answer a profile request) and
// the answer to the event's caller. Job state changes here only, in `Apply`; a job's
// progress for watchers is derived from its state by `ProgressOf`, never kept apart.
//
// Admission: one job runs at a time; the head of the queue starts once nothing else runs and
// its need (plan peak, host pool where it counts, fixed cost) fits the free bytes: the
// device's memory less what running work reserved, or the driver's figure when the caller
// reports one with `CapacityChanged`. A job that does not fit stays QUEUED with a message
// saying what it waits for, and the jobs behind it wait (head of line). Profiles run beside
// a job when they fit; one that does not fit is rejected, unless a run being stopped
// (cancelled, or shut down) would make room, in which case it waits for that run to end.
//
// A cancelled running job is CANCELLED at once; its run is asked to stop (StopRun) and its
// reservation is released when the run reports `RunEnded`. Shutdown asks the running job to
// stop after its step with a checkpoint; the run's `RunEnded{interrupted}` leaves it QUEUED.
// Shutdown also stops running profiles before their next node, and a profile whose caller
// left (`ProfileAbandoned`) is dropped while it waits or stopped while it runs: either way
// its memory comes back when its run reports `ProfileDone`.
//
// Wall time: a job's `running_seconds` grows while it is RUNNING (from its run's start to
// each step's end; the stored figure carries it across daemon restarts). Once it passes
// `max_job_seconds` at a step's end the job is FAILED saying so, and its run is stopped
// after that step with a checkpoint, which is kept.
//
// The scheduler has no threads, no mutex and no clock: time comes with each event. It does
// not train, plan or store: the caller (JobManager) carries out the actions.
// Thread-safety: not thread-safe; the caller serialises calls.
#ifndef HEADROOM_SERVER_SCHEDULER_H_
#define HEADROOM_SERVER_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/headroom.pb.h"

namespace headroom::server {

// Returns whether `state` is final (SUCCEEDED, FAILED or CANCELLED).
bool Ended(proto::JobState state);

struct SchedulerOptions {
  // The device label in messages: "cpu:0". Default "cpu:0".
  std::string device = "cpu:0";
  // The backend this daemon runs; a recovered job naming another cannot resume. Default "cpu".
  std::string backend = "cpu";
  // Device memory in bytes; 0: unlimited. Default 0.
  uint64_t device_memory_bytes = 0;
  // The fixed cost included in every need, for messages. Default 0.
  uint64_t fixed_cost_bytes = 0;
  // Least time between two persists of a running job's progress. Default 0.5 s.
  absl::Duration progress_write_interval = absl::Milliseconds(500);
  // The most seconds a job may spend RUNNING, across restarts (--max-job-seconds); 0: no
  // limit. Default 0.
  uint64_t max_job_seconds = 0;
};

// A job as the scheduler keeps it.
struct ScheduledJob {
  proto::JobInfo info;
  // What running it takes from the device: its plan's peak, host pool where that counts
  // against budgets, and the fixed cost.
  uint64_t need_bytes = 0;
  // Of its last step: its time and its memory by role at its peak.
  double last_step_seconds = 0;
  std::vector<proto::RoleBytes> memory_by_role;
  std::vector<double> step_seconds;
  // Bumped on every change a watcher should see.
  uint64_t version = 0;
  absl::Time last_persist = absl::InfinitePast();
  // When its current run started, and its info's running_seconds then.
  absl::Time run_started = absl::InfinitePast();
  double running_seconds_at_start = 0;
  // Ended with its checkpoint kept (it ran past max_job_seconds).
  bool keep_checkpoint = false;
};

// Returns the progress a watcher sees of `job`: the one derivation of JobProgress.
proto::JobProgress ProgressOf(const ScheduledJob& job);

namespace sched {

// A new job, stored QUEUED with its plan (`info` complete).
struct Submitted {
  proto::JobInfo info;
  uint64_t need_bytes = 0;
};
// A stored job loaded at start. `load_error`: why its plan or checkpoint cannot be read
// ("" when they can); `checkpoint_step`: the step of its checkpoint, if it has one.
struct Recovered {
  proto::JobInfo info;
  uint64_t need_bytes = 0;
  std::string load_error;
  std::optional<uint64_t> checkpoint_step;
};
// The run of `job_id` restored its checkpoint of `step`.
struct Restored {
  std::string job_id;
  uint64_t step = 0;
  double loss = 0;
};
// The run of `job_id` finished a step; `step` steps are done.
struct StepDone {
  std::string job_id;
  uint64_t step = 0;
  double loss = 0;
  double step_seconds = 0;
  uint64_t arena_high_water_bytes = 0;
  std::vector<proto::RoleBytes> memory_by_role;
  // Of a job with a dataset: its epoch, evaluation and input wait after the step.
  std::optional<proto::FitProgress> fit;
  // Of a job of several ranks: every rank's latest step and memory (JobInfo.ranks).
  std::vector<proto::RankProgress> ranks;
};
// The run of `job_id` (a job with a dataset) ended an epoch: `fit` is where it stands, its
// evaluation included. Stored at once.
struct EpochEnded {
  std::string job_id;
  proto::FitProgress fit;
};
// The run of `job_id` is over and holds nothing: `status` is how training ended;
// `interrupted` when it stopped for a shutdown with its checkpoint stored.
struct RunEnded {
  std::string job_id;
  absl::Status status;
  bool interrupted = false;
};
struct CancelRequested {
  std::string job_id;
};
struct ShutdownRequested {};
// A profile (named by the caller's `profile_id`) that needs `need_bytes`.
struct ProfileRequested {
  std::string profile_id;
  uint64_t need_bytes = 0;
};
struct ProfileDone {
  std::string profile_id;
};
// The caller of profile `profile_id` went away (its client cancelled, or its deadline
// passed) before the answer.
struct ProfileAbandoned {
  std::string profile_id;
};
// The driver reports `free_bytes` free on the device (other processes count).
struct CapacityChanged {
  uint64_t free_bytes = 0;
};

using Event = std::variant<Submitted, Recovered, Restored, StepDone, EpochEnded, RunEnded,
                           CancelRequested, ShutdownRequested, ProfileRequested, ProfileDone,
                           ProfileAbandoned, CapacityChanged>;

struct Action {
  enum class Kind {
    kStartRun,          // Start run `id` (a job, or a profile when `profile`).
    kStopRun,           // Stop run `id` (a profile when `profile`, answered with `status`)
                        // before its next node, or after its step with a checkpoint when
                        // `checkpoint` (shutdown, or past max_job_seconds).
    kPersist,           // Store job `id`'s info.
    kDeleteCheckpoint,  // Delete job `id`'s checkpoint: it ended and no run holds it.
    kNotifyWatchers,    // Some job's progress or the queue changed.
    kReject,            // Answer profile request `id` with `status`.
  };
  Kind kind;
  std::string id;
  bool profile = false;
  bool checkpoint = false;
  absl::Status status;

  std::string DebugString() const;
};

}  // namespace sched

// What `Scheduler::Apply` decided.
struct Decision {
  // The answer to the event's caller: NotFound for a cancel of an unknown job, Unavailable
  // for a submit during shutdown, else OK.
  absl::Status status;
  // For CancelRequested: the job's state after it.
  proto::JobState state = proto::JOB_STATE_UNSPECIFIED;
  std::vector<sched::Action> actions;
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerOptions options) : options_(std::move(options)) {}

  // Returns what to do after `event`, which happened at `now`.
  Decision Apply(const sched::Event& event, absl::Time now);

  // Returns job `job_id`, or null.
  const ScheduledJob* Find(const std::string& job_id) const;
  // Returns every job, by id (ids grow with submission).
  const std::map<std::string, ScheduledJob>& jobs() const { return jobs_; }
  // Returns the ids of the queued jobs, in the order they will start.
  const std::deque<std::string>& queue() const { return queue_; }
  // Returns the bytes reserved by running work (jobs and profiles).
  uint64_t reserved_bytes() const { return reserved_bytes_; }
  // Returns the job that holds the device's run ("" when none).
  const std::string& running_job() const { return running_job_; }
  bool stopping() const { return stopping_; }

 private:
  struct Reservation {
    uint64_t bytes = 0;
    bool stopping = false;  // Asked to stop: its bytes come back when it ends.
    bool profile = false;
  };

  void On(const sched::Submitted& e, absl::Time now, Decision& d);
  void On(const sched::Recovered& e, absl::Time now, Decision& d);
  void On(const sched::Restored& e, absl::Time now, Decision& d);
  void On(const sched::StepDone& e, absl::Time now, Decision& d);
  void On(const sched::EpochEnded& e, absl::Time now, Decision& d);
  void On(const sched::RunEnded& e, absl::Time now, Decision& d);
  void On(const sched::CancelRequested& e, absl::Time now, Decision& d);
  void On(const sched::ShutdownRequested& e, absl::Time now, Decision& d);
  void On(const sched::ProfileRequested& e, absl::Time now, Decision& d);
  void On(const sched::ProfileDone& e, absl::Time now, Decision& d);
  void On(const sched::ProfileAbandoned& e, absl::Time now, Decision& d);
  void On(const sched::CapacityChanged& e, absl::Time now, Decision& d);

  // Returns job `job_id`, its `step` and `loss` recorded, if it is RUNNING (its run's reports
  // count); else null, and nothing changes.
  ScheduledJob* RecordStep(const std::string& job_id, uint64_t step, double loss);
  // Returns why a recovered job cannot resume here, or "".
  std::string ResumeRefusal(const sched::Recovered& e) const;
  // Starts what fits: waiting profiles, then the head of the queue.
  void Admit(absl::Time now, Decision& d);
  // Returns the free bytes (UINT64_MAX when unlimited).
  uint64_t FreeBytes() const;
  // Returns the bytes of runs asked to stop.
  uint64_t StoppingBytes() const;
  // Returns the ResourceExhausted answer for a profile needing `need_bytes`.
  absl::Status ProfileDoesNotFit(uint64_t need_bytes) const;
  // Sets `job`'s state (and its finish time when it ends), bumps its version and asks for
  // it to be persisted and watchers woken: the one place a job's state changes.
  void SetState(ScheduledJob& job, proto::JobState state, absl::Time now, Decision& d);
  // Marks `job` changed for watchers; persists it when `persist`.
  void Changed(ScheduledJob& job, bool persist, absl::Time now, Decision& d);
  // Sets `job`'s running_seconds to its time running until `now`.
  void CountRunningTime(ScheduledJob& job, absl::Time now) const;
  // Asks profile run `profile_id` to stop before its next node, answered with `status`.
  void StopProfile(const std::string& profile_id, absl::Status status, Decision& d);

  const SchedulerOptions options_;
  std::map<std::string, ScheduledJob> jobs_;
  std::deque<std::string> queue_;
  std::string running_job_;
  // Reservations of running work, by job or profile id.
  std::map<std::string, Reservation> runs_;
  // Profiles waiting for a stopping run's bytes, in request order: id and need.
  std::deque<std::pair<std::string, uint64_t>> waiting_profiles_;
  uint64_t reserved_bytes_ = 0;
  std::optional<uint64_t> driver_free_bytes_;
  bool stopping_ = false;
};

}  // namespace headroom::server

#endif  // HEADROOM_SERVER_SCHEDULER_H_
