// headroomd's jobs: the shell around the Scheduler (server/scheduler.h) that carries out
// its decisions: two worker threads (one trains jobs, one runs profiles), the store, the
// metrics, and the waits of RPC threads.
//
// A submitted job is planned at once (so a bad graph or a budget below the minimum is an
// error of the submit call), stored as QUEUED with its plan, and handed to the scheduler,
// which decides when it starts (in submission order, once its planned peak fits the
// device's free memory; otherwise it stays QUEUED with a message saying what it waits for).
// A job whose planned peak exceeds the device's whole memory is rejected at submit. While a
// job trains, every step updates its progress (for WatchJob and ListJobs) and its metrics;
// every `checkpoint_interval_steps` steps (and after its last) its parameters, buffers and
// optimizer state are stored, so a daemon killed mid-job resumes it from there when it starts again
// (bitwise as if never interrupted). A checkpoint goes from the device to the store a tensor at a
// time (Trainer::ReadStateTensor), and resuming restores from the parsed checkpoint in place, so
// neither holds the state in host memory twice. Cancel() makes a running job CANCELLED at
// once and stops its run before its next node; its arena is freed as the run stops.
// A job that has been RUNNING longer than `max_job_seconds` (summed across restarts) is
// FAILED at its next step's end, saying so, and stops with a checkpoint that is kept.
//
// A job with a dataset (JobSpec.data, server/fit_job.h) runs through the fit loop
// (executor::FitLoop, as `headroom train --dataset`): Submit resolves its path under the
// data roots and loads the set to check it against the model and count its steps (epochs x
// batches). Its checkpoints (the fit loop's, with the data position and every callback's
// state) go to STATE/fit/JOB/ every checkpoint interval of steps (and data.
// checkpoint_every_epochs), keeping data.keep_last and best.hrfit; a restarted daemon
// resumes it from the newest, so it ends bitwise as a run never stopped would. Its progress
// and JobInfo carry FitProgress (epoch, last evaluation, input wait) and its metrics the
// fit series; once it succeeds its final state is stored as the synthetic job's is, for
// ExportModel. STATE/fit/JOB/ is deleted with a job that fails or is cancelled.
//
// A full disk (the state directory's): Submit refuses a job whose checkpoint would not fit
// (ResourceExhausted naming the directory); a running job whose checkpoint cannot be
// written keeps training, its previous checkpoint intact (the store replaces a checkpoint in
// one transaction), and a restart resumes it from there.
//
// Phases: Create() (loads every stored job; requeues those that were queued or running),
// then any mix of Submit(), Cancel(), Get(), List(), Watch(), Timeline() and Profile() from
// any thread; Shutdown() (or the destructor) lets a running step finish, checkpoints it,
// leaves the job QUEUED for the next start, stops a running profile before its next node,
// and joins the workers.
//
// Ownership: borrows the store and the metrics, which must outlive it.
// Thread-safety: thread-safe. One mutex (mu_) guards the scheduler, the runs handed to the
// workers and what is kept of each job beside it; it is never held while a step trains, a
// plan is searched or the store writes. Waits (workers, watchers, profile callers) wake on
// the scheduler's changes, not on timers.
#ifndef HEADROOM_SERVER_JOB_MANAGER_H_
#define HEADROOM_SERVER_JOB_MANAGER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "executor/backend.h"
#include "executor/trainer.h"
#include "planner/plan_request.h"
#include "profiler/metrics.h"
#include "profiler/step_layout.h"
#include "profiler/timeline.h"
#include "proto/headroom.pb.h"
#include "server/data_roots.h"
#include "server/job_store.h"
#include "server/scheduler.h"
#include "util/cancellation.h"

namespace headroom::server {

// The most steps a job may ask for (JobSpec.train.steps): far beyond any real run, and well
// inside int64, which the trainer counts its steps in. headroomd's --max-job-steps may lower it.
inline constexpr uint64_t kMaxJobSteps = 1000000000;

struct JobManagerOptions {
  // The backend jobs run on when their spec names none: "cpu" or "cuda". Default "cpu".
  std::string backend = "cpu";
  // Device memory in bytes: the budget a job without one is planned for, and the most a
  // job's planned peak may be. 0: unlimited (only a job's own budget applies). Default 0.
  uint64_t device_memory_bytes = 0;
  // Steps between checkpoints when a job's spec leaves it 0. Default 10.
  uint64_t checkpoint_interval_steps = 10;
  // Steps of each run whose every memory event is kept for GetTimeline (memory repeats
  // from step to step). Default 2.
  int64_t timeline_steps = 2;
  // How often the driver's free bytes (free_device_bytes) are read again while the head of
  // the queue waits for memory: other processes free it without an event here. Unused
  // without free_device_bytes (admission then follows Headroom's own events). Default 1 s.
  absl::Duration admission_poll = absl::Seconds(1);
  // Least time between two writes of a running job's progress to the store (checkpoints
  // and state changes are written at once). Default 0.5 s.
  absl::Duration progress_write_interval = absl::Milliseconds(500);
  // The most steps a job may run: a dataset job's epochs times its batches per epoch too
  // (a job without a dataset is held to it by the service's --max-job-steps check of
  // spec.train.steps). Default kMaxJobSteps (headroomd's --max-job-steps sets it).
  uint64_t max_job_steps = kMaxJobSteps;
  // The most bytes a dataset job's sets may take in memory once loaded (images and labels,
  // the held-out part included), counted from the files' headers at submit and again before
  // the job loads them; 0: no limit. Default 0 (headroomd's --max-dataset-bytes sets half
  // the host's memory).
  uint64_t max_dataset_bytes = 0;
  // The most seconds a job may spend RUNNING, summed across daemon restarts; 0: no limit.
  // Default 0 (headroomd's --max-job-seconds sets its own default).
  uint64_t max_job_seconds = 0;
  // Makes the backend a job or profile names. Required.
  std::function<absl::StatusOr<std::unique_ptr<executor::Backend>>(const std::string&)>
      make_backend;
  // Returns the device's free bytes as its driver reports them (a GPU shared with other
  // processes); none: device_memory_bytes less what Headroom's own work holds. Where a call
  // fails, admission falls back to that figure (never to 0, which would queue every job for
  // ever) and stderr says why, at most once a minute while it keeps failing.
  std::function<absl::StatusOr<uint64_t>()> free_device_bytes;
  // What the plans of Submit (and the daemon's Plan) know of `backend`, so they are what the
  // job's trainer will plan: its kernels' scratch (a borrowed, thread-safe model) and whether
  // its host memory is its device's. Default: no scratch, separate host memory.
  planner::PlanBackend plan_backend;
  // The memory a run holds beyond its plan (the runtime's threads, kernels' code): admission
  // reserves it beside each plan, and a job without a budget is planned for the device's
  // memory less it. When set, this; when not, `measured_fixed_cost_bytes`, what the daemon
  // measured once at start. (Each job's own unplanned bytes are measured and reported in its
  // timeline, not added here: they depend on the job.)
  std::optional<uint64_t> fixed_cost_bytes;
  uint64_t measured_fixed_cost_bytes = 0;
  // Where a job's dataset path (JobSpec.data.dataset) may lie (headroomd's --data-root).
  // Default none: only "fashion-mnist".
  DataRoots data_roots;
  // The most ranks a job may ask for (JobSpec.ranks), at most kMaxRanksCeiling. Default 1
  // (headroomd's --max-ranks sets the host's cores).
  uint32_t max_ranks = 1;
  // The rank worker mpirun starts for a job of several ranks (server/rank_worker_main.cc),
  // and mpirun itself (found on PATH unless a path). Default none: such jobs are refused.
  std::string rank_worker;
  std::string mpirun = "mpirun";
};

class JobManager {
 public:
  // Returns a manager with its workers started and every stored job loaded: jobs stored as
  // RUNNING or QUEUED are queued again (a running one resumes from its checkpoint, or from
  // step 0 when it had none). One that cannot resume here is marked FAILED with the reason:
  // its plan or checkpoint cannot be read, it names another backend, or its planned peak
  // exceeds this daemon's device memory. The error of reading the store.
  static absl::StatusOr<std::unique_ptr<JobManager>> Create(JobStore* store,
                                                            profiler::Metrics* metrics,
                                                            JobManagerOptions options);
  ~JobManager();

  // Returns the submitted job's id, state and plan. InvalidArgument for a bad spec or graph
  // (naming the field or node); FailedPrecondition, naming the smallest feasible budget,
  // when no plan fits the budget, or when the plan's peak exceeds the device's memory.
  // Plans under `cancel` (borrowed; null: no limit), and returns its status, DeadlineExceeded
  // or Cancelled, once it fails: nothing is then stored.
  absl::StatusOr<proto::SubmitJobResponse> Submit(const proto::JobSpec& spec,
                                                  const util::CancellationToken* cancel = nullptr);

  // Returns the job's state after cancelling it (a job that already ended keeps its
  // state), at once: a running job is CANCELLED and its run stops before its next node,
  // releasing its memory to admission as it stops. NotFound for an unknown job.
  absl::StatusOr<proto::JobState> Cancel(const std::string& job_id);

  // Returns the job. NotFound for an unknown job.
  absl::StatusOr<proto::JobInfo> Get(const std::string& job_id) const;

  // Returns a page of jobs, newest first. InvalidArgument for a bad page token.
  absl::StatusOr<proto::ListJobsResponse> List(const proto::ListJobsRequest& request) const;

  // Calls `write` with the job's progress now and after every change until the job ends
  // (the last call carries its final state), `write` returns false, or `stop` returns true.
  // Changes wake it at once; `stop` (gRPC's IsCancelled, which has no event to wait on) is
  // looked at whenever it wakes and at least every second. NotFound for an unknown job.
  absl::Status Watch(const std::string& job_id,
                     const std::function<bool(const proto::JobProgress&)>& write,
                     const std::function<bool()>& stop) const;

  // Returns the job's memory timeline: its first `timeline_steps` recorded steps, thinned
  // to `max_samples` (0: all). NotFound for an unknown job; FailedPrecondition for one with
  // no complete step recorded yet.
  absl::StatusOr<proto::MemoryTimeline> Timeline(const std::string& job_id,
                                                 uint32_t max_samples) const;

  // Runs a profile on this device's profile worker, beside any running job, if its planned
  // peak fits the free memory (else ResourceExhausted saying what is free; it waits for a
  // cancelled run to stop when that makes room), stores it, and returns it when done.
  // Once `stop` returns true (the caller went away: gRPC's IsCancelled, or its deadline
  // passed; looked at every 100 ms while it waits) the profile is dropped, or its run stops
  // before its next node and its memory goes back to admission; then Cancelled. A shutdown
  // stops it the same way (Unavailable). `stop` may be empty: the caller never leaves.
  absl::StatusOr<proto::ProfileResponse> Profile(const proto::ProfileRequest& request,
                                                 const std::function<bool()>& stop = {});

  // Returns the job's latest checkpoint (parameters, buffers and optimizer state): for a job
  // that SUCCEEDED, the one of its last step; none for a job that has not reached its first
  // (or one that failed or was cancelled: theirs are deleted). NotFound for an unknown job;
  // the store's error.
  absl::StatusOr<std::optional<proto::Checkpoint>> GetCheckpoint(const std::string& job_id) const;

  // Returns the stored profiles, newest first (without samples and op costs when
  // `summaries_only`).
  absl::StatusOr<proto::ListProfilesResponse> ListProfiles(bool summaries_only) const;

  // Stops taking jobs: lets a running step finish, checkpoints the job and leaves it QUEUED
  // for the next start, stops a running profile before its next node, then joins the
  // workers. Idempotent.
  void Shutdown();

  // Returns the device bytes Headroom's running work holds (by plan and fixed cost).
  uint64_t reserved_bytes() const {
    absl::MutexLock lock(&mu_);
    return scheduler_.reserved_bytes();
  }

  // Returns the fixed cost admission adds to each plan (JobManagerOptions).
  uint64_t fixed_cost_bytes() const { return fixed_cost_bytes_; }

  // The device label of jobs and metrics: "cpu:0" or "cuda:0".
  const std::string& device() const { return device_; }

  // What plans know of this daemon's backend (JobManagerOptions::plan_backend).
  const planner::PlanBackend& plan_backend() const { return options_.plan_backend; }

 private:
  struct Extras;
  struct RunControl;
  struct ProfileCall;
  struct Run;
  struct StepContext;

  JobManager(JobStore* store, profiler::Metrics* metrics, JobManagerOptions options);

  // Loads stored jobs and feeds them to the scheduler, which requeues unfinished ones.
  absl::Status Recover();
  // Returns the scheduler's decision on `event`, with the actions that need mu_ carried
  // out: runs handed to the workers, runs told to stop, waiters woken, profile requests
  // answered. The caller carries out the rest with Store() once it releases mu_. With a
  // driver's figure (free_device_bytes), the scheduler is told the free bytes first.
  Decision Feed(const sched::Event& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Returns the first error of carrying out `decision`'s store actions (persisting jobs,
  // deleting checkpoints); every action is tried.
  absl::Status Store(const Decision& decision) ABSL_LOCKS_EXCLUDED(mu_);
  // Returns Feed()'s decision on `event` (under mu_), carried out with Store(): its status
  // is Store()'s error when the scheduler's answer is OK.
  Decision Dispatch(const sched::Event& event) ABSL_LOCKS_EXCLUDED(mu_);
  // Returns the driver's free bytes (free_device_bytes); where that fails, the device's
  // memory less what running work reserved (unlimited when device_memory_bytes is 0), and
  // says so on stderr at most once a minute.
  uint64_t DriverFreeBytes() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job worker: runs the jobs the scheduler starts, one at a time, until shutdown.
  void JobWorkerLoop();
  // The profile worker: runs the profiles the scheduler starts and answers their callers.
  void ProfileWorkerLoop();
  // Returns what running `plan` takes from the device: its peak, its host pool where that
  // counts against budgets, and the fixed cost.
  uint64_t Need(const proto::PlanResponse& plan) const;
  // Trains one job to its end (or until cancelled or shut down) and reports RunEnded.
  void RunJob(const std::string& job_id);
  absl::Status TrainJob(Run& run);
  // Trains job `run` of several ranks (JobSpec.ranks > 1) as that many rank workers under
  // mpirun (server/rank_job.h), from its checkpoint in the store if it has one: follows
  // their logs into its progress and metrics, stores rank 0's checkpoints, stops every rank
  // on cancel or shutdown, and fails naming the rank that failed or died.
  absl::Status RunRanks(Run& run);
  // Stores rank 0's newest checkpoint file of `run`; on a full disk as Checkpoint().
  absl::Status StoreRankCheckpoint(const Run& run, const std::string& path);
  // Returns the directory of job `job_id`'s ranks: STATE/ranks/JOB.
  std::string RanksDir(const std::string& job_id) const;
  // Trains job `run` (one with a dataset) through the fit loop from its newest fit
  // checkpoint, if it has one.
  absl::Status FitJob(Run& run, StepContext& context);
  // Records a step just run: the job's process account and timeline, then StepDone (with
  // `fit` for a dataset job).
  void AfterStep(Run& run, StepContext& context, const executor::StepResult& r,
                 std::optional<proto::FitProgress> fit);
  // Returns the directory of job `job_id`'s fit checkpoints: STATE/fit/JOB.
  std::string FitDir(const std::string& job_id) const;
  // Stores `trainer`'s state as `run`'s checkpoint. On a full disk (IsDiskFull) the job goes
  // on: the error is reported on stderr, the previous checkpoint stays, and this returns OK.
  absl::Status Checkpoint(const Run& run, const executor::Trainer& trainer, double loss);
  // Returns OK when the state directory's disk has room for the checkpoints of `plan`'s job
  // (`copies` times its parameters, buffers and optimizer state, and 1 MiB); else
  // ResourceExhausted naming the directory.
  absl::Status CheckDiskRoom(const proto::PlanResponse& plan, uint64_t copies) const;
  // Returns the loss of job `job_id`'s checkpoint after restoring `trainer` from it (0
  // without one).
  absl::StatusOr<double> RestoreCheckpoint(const std::string& job_id, executor::Trainer& trainer);
  // Returns the profile of `call`, stored.
  absl::StatusOr<proto::ProfileResponse> RunProfile(const ProfileCall& call);
  // Sets headroom_jobs{state}.
  void PublishCounts() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Returns the plan of `spec` for this device, with the budget it was planned for, planned
  // under `cancel` (null: no limit).
  absl::StatusOr<proto::PlanResponse> PlanSpec(
      const proto::JobSpec& spec, uint64_t* budget_bytes,
      const util::CancellationToken* cancel = nullptr) const;

  JobStore* const store_;
  profiler::Metrics* const metrics_;
  const JobManagerOptions options_;
  const std::string device_;
  const uint64_t fixed_cost_bytes_;

  mutable absl::Mutex mu_;
  // Signalled on every change the scheduler reports (NotifyWatchers), for watchers.
  mutable absl::CondVar changed_;
  // Every decision about jobs: the queue, admission, job states, reservations.
  Scheduler scheduler_ ABSL_GUARDED_BY(mu_);
  // What the manager keeps of each job beside the scheduler: budget and timeline.
  std::map<std::string, Extras> extras_ ABSL_GUARDED_BY(mu_);
  // Runs started by the scheduler, waiting for their worker.
  std::deque<std::string> job_runs_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> profile_runs_ ABSL_GUARDED_BY(mu_);
  // The stop flags of started job runs, by job.
  std::map<std::string, std::shared_ptr<RunControl>> controls_ ABSL_GUARDED_BY(mu_);
  // Profile requests from their call to their answer, by profile run id.
  std::map<std::string, ProfileCall> profiles_ ABSL_GUARDED_BY(mu_);
  uint64_t profile_count_ ABSL_GUARDED_BY(mu_) = 0;
  // Set by Shutdown: the workers end once their runs are done.
  bool workers_stop_ ABSL_GUARDED_BY(mu_) = false;
  // Whether the last free_device_bytes call failed, and when its failure was last printed.
  bool free_bytes_failing_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time free_bytes_error_printed_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Ended jobs whose metric series are kept, oldest first.
  std::deque<std::string> ended_with_series_ ABSL_GUARDED_BY(mu_);
  // Orders job writes, so the store always ends with a job's latest info.
  absl::Mutex persist_mu_;
  // The last store error printed, and when: the same error is printed again only after a
  // minute (a full disk fails every progress write).
  std::string last_store_error_ ABSL_GUARDED_BY(persist_mu_);
  absl::Time last_store_error_time_ ABSL_GUARDED_BY(persist_mu_) = absl::InfinitePast();
  std::thread job_worker_;
  std::thread profile_worker_;
};

}  // namespace headroom::server

#endif  // HEADROOM_SERVER_JOB_MANAGER_H_
