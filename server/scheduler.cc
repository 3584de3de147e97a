#include "server/scheduler.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "graph/summary.h"
#include "util/median.h"

namespace headroom::server {
namespace {

constexpr uint64_t kUnlimited = std::numeric_limits<uint64_t>::max();

double UnixSeconds(absl::Time t) { return absl::ToDoubleSeconds(t - absl::UnixEpoch()); }

sched::Action Act(sched::Action::Kind kind, std::string id) {
  sched::Action a;
  a.kind = kind;
  a.id = std::move(id);
  return a;
}

void RejectProfile(const std::string& profile_id, absl::Status status, Decision& d) {
  sched::Action reject = Act(sched::Action::Kind::kReject, profile_id);
  reject.profile = true;
  reject.status = std::move(status);
  d.actions.push_back(std::move(reject));
}

absl::Status ShuttingDown() { return absl::UnavailableError("headroomd is shutting down"); }

}  // namespace

bool Ended(proto::JobState state) {
  return state == proto::JOB_STATE_SUCCEEDED || state == proto::JOB_STATE_FAILED ||
         state == proto::JOB_STATE_CANCELLED;
}

proto::JobProgress ProgressOf(const ScheduledJob& job) {
  const proto::JobInfo& info = job.info;
  proto::JobProgress p;
  p.set_job_id(info.job_id());
  p.set_state(info.state());
  p.set_step(info.step());
  p.set_total_steps(info.total_steps());
  p.set_loss(info.loss());
  p.set_step_seconds(job.last_step_seconds);
  p.set_measured_peak_bytes(info.measured_peak_bytes());
  p.set_message(Ended(info.state()) ? info.error() : info.message());
  for (const proto::RoleBytes& b : job.memory_by_role) *p.add_memory_by_role() = b;
  if (info.has_fit()) *p.mutable_fit() = info.fit();
  for (const proto::RankProgress& r : info.ranks()) *p.add_ranks() = r;
  return p;
}

std::string sched::Action::DebugString() const {
  static constexpr const char* kNames[] = {"StartRun",         "StopRun",        "Persist",
                                           "DeleteCheckpoint", "NotifyWatchers", "Reject"};
  std::string s = absl::StrCat(kNames[static_cast<int>(kind)], "(", id);
  if (profile) absl::StrAppend(&s, ", profile");
  if (checkpoint) absl::StrAppend(&s, ", checkpoint");
  if (!status.ok()) absl::StrAppend(&s, ", ", status.ToString());
  return absl::StrCat(s, ")");
}

Decision Scheduler::Apply(const sched::Event& event, absl::Time now) {
  Decision d;
  std::visit([&](const auto& e) { On(e, now, d); }, event);
  return d;
}

const ScheduledJob* Scheduler::Find(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : &it->second;
}

// ---- Job state: the one place it changes -------------------------------------------------

void Scheduler::SetState(ScheduledJob& job, proto::JobState state, absl::Time now,
                         Decision& d) {
  job.info.set_state(state);
  if (Ended(state)) job.info.set_finished_unix_seconds(UnixSeconds(now));
  if (state == proto::JOB_STATE_RUNNING) {
    job.info.set_message("");
    job.run_started = now;
    job.running_seconds_at_start = job.info.running_seconds();
  }
  Changed(job, /*persist=*/true, now, d);
}

void Scheduler::CountRunningTime(ScheduledJob& job, absl::Time now) const {
  if (job.run_started == absl::InfinitePast()) return;
  job.info.set_running_seconds(job.running_seconds_at_start +
                               absl::ToDoubleSeconds(now - job.run_started));
}

void Scheduler::StopProfile(const std::string& profile_id, absl::Status status, Decision& d) {
  runs_[profile_id].stopping = true;
  sched::Action stop = Act(sched::Action::Kind::kStopRun, profile_id);
  stop.profile = true;
  stop.status = std::move(status);
  d.actions.push_back(std::move(stop));
}

void Scheduler::Changed(ScheduledJob& job, bool persist, absl::Time now, Decision& d) {
  ++job.version;
  d.actions.push_back(Act(sched::Action::Kind::kNotifyWatchers, job.info.job_id()));
  if (!persist) return;
  job.last_persist = now;
  d.actions.push_back(Act(sched::Action::Kind::kPersist, job.info.job_id()));
}

// ---- Events ------------------------------------------------------------------------------

void Scheduler::On(const sched::Submitted& e, absl::Time now, Decision& d) {
  if (stopping_) {
    d.status = absl::UnavailableError("headroomd is shutting down; the job stays queued");
    return;
  }
  ScheduledJob& job = jobs_[e.info.job_id()];
  job.info = e.info;
  job.need_bytes = e.need_bytes;
  queue_.push_back(e.info.job_id());
  SetState(job, proto::JOB_STATE_QUEUED, now, d);
  Admit(now, d);
}

std::string Scheduler::ResumeRefusal(const sched::Recovered& e) const {
  if (!e.load_error.empty()) return e.load_error;
  const std::string& backend = e.info.spec().train().backend();
  if (!backend.empty() && backend != options_.backend) {
    return absl::StrCat("it asks for backend '", backend, "', but this daemon runs ",
                        options_.device);
  }
  const uint64_t memory = options_.device_memory_bytes;
  if (memory > 0 && e.need_bytes > memory) {
    const uint64_t peak = e.info.planned_peak_bytes();
    return absl::StrCat("its plan's peak ", graph::HumanBytes(peak), " (", peak,
                        " bytes) with the fixed cost exceeds device ", options_.device,
                        "'s memory of ", graph::HumanBytes(memory), " (", memory,
                        " bytes) now; submit it again");
  }
  return "";
}

void Scheduler::On(const sched::Recovered& e, absl::Time now, Decision& d) {
  ScheduledJob& job = jobs_[e.info.job_id()];
  job.info = e.info;
  job.need_bytes = e.need_bytes;
  if (Ended(job.info.state())) return;
  const std::string refusal = ResumeRefusal(e);
  if (!refusal.empty()) {
    job.info.set_error(absl::StrCat("could not resume after a daemon restart: ", refusal));
    SetState(job, proto::JOB_STATE_FAILED, now, d);
    return;
  }
  const bool was_running = job.info.state() == proto::JOB_STATE_RUNNING;
  const uint64_t from = e.checkpoint_step.value_or(0);
  job.info.set_step(from);
  job.info.set_message(
      was_running ? absl::StrCat("resumes from step ", from, " after a daemon restart",
                                 e.checkpoint_step.has_value() ? "" : " (no checkpoint yet)")
                  : "");
  queue_.push_back(job.info.job_id());
  SetState(job, proto::JOB_STATE_QUEUED, now, d);
  Admit(now, d);
}

ScheduledJob* Scheduler::RecordStep(const std::string& job_id, uint64_t step, double loss) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second.info.state() != proto::JOB_STATE_RUNNING) return nullptr;
  it->second.info.set_step(step);
  it->second.info.set_loss(loss);
  return &it->second;
}

void Scheduler::On(const sched::Restored& e, absl::Time now, Decision& d) {
  ScheduledJob* running = RecordStep(e.job_id, e.step, e.loss);
  if (running == nullptr) return;
  running->info.set_resumed_from_step(e.step);
  Changed(*running, /*persist=*/true, now, d);
}

void Scheduler::On(const sched::StepDone& e, absl::Time now, Decision& d) {
  ScheduledJob* running = RecordStep(e.job_id, e.step, e.loss);
  // A step that finished as the job was cancelled changes nothing.
  if (running == nullptr) return;
  ScheduledJob& job = *running;
  job.info.set_measured_peak_bytes(
      std::max<uint64_t>(job.info.measured_peak_bytes(), e.arena_high_water_bytes));
  job.step_seconds.push_back(e.step_seconds);
  job.info.set_median_step_seconds(Median(job.step_seconds));
  job.last_step_seconds = e.step_seconds;
  job.memory_by_role = e.memory_by_role;
  if (e.fit.has_value()) *job.info.mutable_fit() = *e.fit;
  if (!e.ranks.empty()) {
    job.info.clear_ranks();
    for (const proto::RankProgress& r : e.ranks) *job.info.add_ranks() = r;
  }
  CountRunningTime(job, now);
  const uint64_t limit = options_.max_job_seconds;
  // A run that just finished its last step is done, whatever its time.
  if (limit > 0 && job.info.running_seconds() > static_cast<double>(limit) &&
      e.step < job.info.total_steps()) {
    // Stopped after this step with a checkpoint, which is kept.
    job.info.set_error(absl::StrFormat(
        "ran past --max-job-seconds %d: %.1f s running at step %d of %d; stopped with its "
        "last checkpoint kept",
        limit, job.info.running_seconds(), job.info.step(), job.info.total_steps()));
    job.keep_checkpoint = true;
    SetState(job, proto::JOB_STATE_FAILED, now, d);
    runs_[e.job_id].stopping = true;
    sched::Action stop = Act(sched::Action::Kind::kStopRun, e.job_id);
    stop.checkpoint = true;
    d.actions.push_back(std::move(stop));
    return;
  }
  Changed(job, now - job.last_persist >= options_.progress_write_interval, now, d);
}

void Scheduler::On(const sched::EpochEnded& e, absl::Time now, Decision& d) {
  auto it = jobs_.find(e.job_id);
  // An epoch that ended as the job was cancelled changes nothing.
  if (it == jobs_.end() || it->second.info.state() != proto::JOB_STATE_RUNNING) return;
  *it->second.info.mutable_fit() = e.fit;
  Changed(it->second, /*persist=*/true, now, d);
}

void Scheduler::On(const sched::RunEnded& e, absl::Time now, Decision& d) {
  auto run = runs_.find(e.job_id);
  if (run != runs_.end()) {
    reserved_bytes_ -= std::min(reserved_bytes_, run->second.bytes);
    runs_.erase(run);
  }
  if (running_job_ == e.job_id) running_job_.clear();
  auto it = jobs_.find(e.job_id);
  if (it != jobs_.end()) {
    ScheduledJob& job = it->second;
    if (job.info.state() == proto::JOB_STATE_RUNNING) CountRunningTime(job, now);
    if (Ended(job.info.state())) {
      // Cancelled (or past max_job_seconds) while it ran: it keeps that state.
    } else if (e.interrupted) {
      job.info.set_message(absl::StrCat("stopped by a daemon shutdown at step ", job.info.step(),
                                        "; resumes when headroomd starts"));
      queue_.push_front(e.job_id);  // the head again, for the next start
      SetState(job, proto::JOB_STATE_QUEUED, now, d);
    } else if (!e.status.ok()) {
      job.info.set_error(std::string(e.status.message()));
      SetState(job, proto::JOB_STATE_FAILED, now, d);
    } else {
      SetState(job, proto::JOB_STATE_SUCCEEDED, now, d);
    }
    // A job that SUCCEEDED keeps the checkpoint of its last step: its trained weights, which
    // ExportModel serves.
    if (Ended(job.info.state()) && !job.keep_checkpoint &&
        job.info.state() != proto::JOB_STATE_SUCCEEDED) {
      d.actions.push_back(Act(sched::Action::Kind::kDeleteCheckpoint, e.job_id));
    }
  }
  Admit(now, d);
}

void Scheduler::On(const sched::CancelRequested& e, absl::Time now, Decision& d) {
  auto it = jobs_.find(e.job_id);
  if (it == jobs_.end()) {
    d.status = absl::NotFoundError(absl::StrCat("no job '", e.job_id, "'"));
    return;
  }
  ScheduledJob& job = it->second;
  if (job.info.state() == proto::JOB_STATE_QUEUED) {
    queue_.erase(std::remove(queue_.begin(), queue_.end(), e.job_id), queue_.end());
    job.info.set_error("cancelled while queued");
    SetState(job, proto::JOB_STATE_CANCELLED, now, d);
    d.actions.push_back(Act(sched::Action::Kind::kDeleteCheckpoint, e.job_id));
    // The head may have changed.
    Admit(now, d);
  } else if (job.info.state() == proto::JOB_STATE_RUNNING) {
    job.info.set_error(absl::StrCat("cancelled at step ", job.info.step()));
    CountRunningTime(job, now);
    SetState(job, proto::JOB_STATE_CANCELLED, now, d);
    runs_[e.job_id].stopping = true;
    d.actions.push_back(Act(sched::Action::Kind::kStopRun, e.job_id));
  }
  d.state = job.info.state();
}

void Scheduler::On(const sched::ShutdownRequested&, absl::Time, Decision& d) {
  stopping_ = true;
  if (!running_job_.empty() && !runs_[running_job_].stopping) {
    runs_[running_job_].stopping = true;
    sched::Action stop = Act(sched::Action::Kind::kStopRun, running_job_);
    stop.checkpoint = true;
    d.actions.push_back(std::move(stop));
  }
  for (const auto& [id, need] : waiting_profiles_) RejectProfile(id, ShuttingDown(), d);
  waiting_profiles_.clear();
  // Running profiles stop before their next node: a long one would hold the shutdown.
  std::vector<std::string> profiles;
  for (const auto& [id, run] : runs_) {
    if (run.profile && !run.stopping) profiles.push_back(id);
  }
  for (const std::string& id : profiles) {
    StopProfile(id, absl::UnavailableError("headroomd is shutting down: the profile was stopped"),
                d);
  }
}

void Scheduler::On(const sched::ProfileRequested& e, absl::Time now, Decision& d) {
  if (stopping_) {
    RejectProfile(e.profile_id, ShuttingDown(), d);
    return;
  }
  waiting_profiles_.emplace_back(e.profile_id, e.need_bytes);
  Admit(now, d);
}

void Scheduler::On(const sched::ProfileDone& e, absl::Time now, Decision& d) {
  auto run = runs_.find(e.profile_id);
  if (run != runs_.end()) {
    reserved_bytes_ -= std::min(reserved_bytes_, run->second.bytes);
    runs_.erase(run);
  }
  Admit(now, d);
}

void Scheduler::On(const sched::ProfileAbandoned& e, absl::Time now, Decision& d) {
  const absl::Status left = absl::CancelledError("the profile's caller went away");
  auto waiting = std::find_if(waiting_profiles_.begin(), waiting_profiles_.end(),
                              [&e](const auto& p) { return p.first == e.profile_id; });
  if (waiting != waiting_profiles_.end()) {
    waiting_profiles_.erase(waiting);
    RejectProfile(e.profile_id, left, d);
    return;
  }
  auto run = runs_.find(e.profile_id);
  if (run != runs_.end() && run->second.profile && !run->second.stopping) {
    StopProfile(e.profile_id, left, d);
  }
}

void Scheduler::On(const sched::CapacityChanged& e, absl::Time now, Decision& d) {
  driver_free_bytes_ = e.free_bytes;
  Admit(now, d);
}

// ---- Admission ---------------------------------------------------------------------------

uint64_t Scheduler::FreeBytes() const {
  if (driver_free_bytes_.has_value()) return *driver_free_bytes_;
  const uint64_t memory = options_.device_memory_bytes;
  if (memory == 0) return kUnlimited;
  return memory - std::min(memory, reserved_bytes_);
}

uint64_t Scheduler::StoppingBytes() const {
  uint64_t bytes = 0;
  for (const auto& [id, run] : runs_) {
    if (run.stopping) bytes += run.bytes;
  }
  return bytes;
}

absl::Status Scheduler::ProfileDoesNotFit(uint64_t need_bytes) const {
  return absl::ResourceExhaustedError(absl::StrCat(
      "device ", options_.device, " has ", graph::HumanBytes(FreeBytes()),
      " free; the profile needs ", graph::HumanBytes(need_bytes),
      ", its plan and the fixed cost of ", graph::HumanBytes(options_.fixed_cost_bytes),
      " (try again when the running job ends)"));
}

void Scheduler::Admit(absl::Time now, Decision& d) {
  // 1. Profiles, in request order: each starts if it fits, waits while a stopping run would
  //    make room, and is rejected otherwise.
  for (auto it = waiting_profiles_.begin(); it != waiting_profiles_.end();) {
    const auto& [id, need] = *it;
    const uint64_t free = FreeBytes();
    if (need <= free) {
      runs_[id] = Reservation{need, false, /*profile=*/true};
      reserved_bytes_ += need;
      sched::Action start = Act(sched::Action::Kind::kStartRun, id);
      start.profile = true;
      d.actions.push_back(std::move(start));
    } else if (free != kUnlimited && need <= free + StoppingBytes()) {
      ++it;
      continue;
    } else {
      RejectProfile(id, ProfileDoesNotFit(need), d);
    }
    it = waiting_profiles_.erase(it);
  }
  // 2. The head of the queue, once nothing else runs and it fits.
  if (stopping_ || !running_job_.empty() || queue_.empty()) return;
  ScheduledJob& head = jobs_.at(queue_.front());
  const uint64_t free = FreeBytes();
  if (head.need_bytes > free) {
    const std::string wait = absl::StrCat("waiting for device memory: needs ",
                                          graph::HumanBytes(head.need_bytes), ", ",
                                          graph::HumanBytes(free), " free");
    if (head.info.message() != wait) {
      head.info.set_message(wait);
      Changed(head, /*persist=*/false, now, d);
    }
    return;
  }
  queue_.pop_front();
  running_job_ = head.info.job_id();
  runs_[running_job_] = Reservation{head.need_bytes, false};
  reserved_bytes_ += head.need_bytes;
  SetState(head, proto::JOB_STATE_RUNNING, now, d);
  d.actions.push_back(Act(sched::Action::Kind::kStartRun, running_job_));
}

}  // namespace headroom::server
