#include "server/job_manager.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "dist/launch.h"
#include "executor/callbacks.h"
#include "executor/fit.h"
#include "executor/trainer.h"
#include "graph/graph.h"
#include "graph/model_source.h"
#include "graph/summary.h"
#include "planner/cost_model.h"
#include "planner/plan_request.h"
#include "profiler/metrics_sink.h"
#include "profiler/process_memory.h"
#include "runner/physical_trace.h"
#include "runner/profile_run.h"
#include "runner/trainer_options.h"
#include "server/fit_job.h"
#include "server/rank_job.h"
#include "util/file_io.h"
#include "util/status_macros.h"

namespace headroom::server {
namespace {

// Ended jobs whose metric series stay exported (older ones are forgotten).
constexpr size_t kKeptEndedSeries = 32;
constexpr uint32_t kDefaultPageSize = 100;
double UnixSeconds() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }

// Records the events of setup and of steps [first, first + count) in a log.
class WindowLog : public profiler::EventSink {
 public:
  explicit WindowLog(int64_t count) : count_(count) {}
  void set_first(int64_t first) { first_ = first; }
  bool Keeps(int64_t step) const {
    return step == profiler::kSetupStep || (step >= first_ && step < first_ + count_);
  }
  void OnMemory(const profiler::MemoryEvent& e) override { if (Keeps(e.step)) log_.OnMemory(e); }
  void OnOp(const profiler::OpEvent& e) override { if (Keeps(e.step)) log_.OnOp(e); }
  void OnCopy(const profiler::CopyEvent& e) override { if (Keeps(e.step)) log_.OnCopy(e); }
  void OnStep(const profiler::StepEvent& e) override { if (Keeps(e.step)) log_.OnStep(e); }
  const profiler::EventLog& log() const { return log_; }

 private:
  const int64_t count_;
  int64_t first_ = 0;
  profiler::EventLog log_;
};

// The planner's role of a device memory role, for JobProgress.memory_by_role.
std::optional<proto::TensorRole> TensorRoleOf(profiler::MemoryRole role) {
  using profiler::MemoryRole;
  switch (role) {
    case MemoryRole::kParameter: return proto::ROLE_PARAMETER;
    case MemoryRole::kGradient: return proto::ROLE_GRADIENT;
    case MemoryRole::kOptimizerState: return proto::ROLE_OPTIMIZER_STATE;
    case MemoryRole::kActivation: return proto::ROLE_ACTIVATION;
    case MemoryRole::kCachedInput: return proto::ROLE_CACHED_INPUT;
    case MemoryRole::kBuffer: return proto::ROLE_BUFFER;
    case MemoryRole::kBatch: return proto::ROLE_INPUT;
    case MemoryRole::kWorkspace: return proto::ROLE_TEMPORARY;
    case MemoryRole::kScratch: return proto::ROLE_TEMPORARY;
    case MemoryRole::kHostOffload: return std::nullopt;  // host memory
  }
  return std::nullopt;
}

// Writes `trainer`'s state now as job `job_id`'s checkpoint, a tensor at a time: the host
// holds one tensor's bytes, not the state.
absl::Status SaveCheckpoint(JobStore& store, const std::string& job_id,
                            const executor::Trainer& trainer, double loss) {
  const std::vector<executor::StateTensorInfo>& state = trainer.StateTensors();
  std::vector<CheckpointTensorInfo> tensors;
  tensors.reserve(state.size());
  for (const executor::StateTensorInfo& t : state) {
    tensors.push_back({t.name, t.shape, t.dtype, t.bytes});
  }
  const CheckpointHeader header{job_id, static_cast<uint64_t>(trainer.steps_run()), loss};
  return store.PutCheckpoint(header, tensors, [&](size_t index, absl::Span<uint8_t> dst) {
    return trainer.ReadStateTensor(index, dst);
  });
}

// The trainer options a spec asks for (events, cancel and budget are the caller's).
// Returns the step's memory by role at its peak, as JobProgress carries it: planned and
// unplanned scratch meet in one role.
std::vector<proto::RoleBytes> MemoryByRole(const profiler::StepObservation& observed) {
  std::map<proto::TensorRole, uint64_t> by_role;
  for (profiler::MemoryRole role : profiler::kAllMemoryRoles) {
    const std::optional<proto::TensorRole> tensor_role = TensorRoleOf(role);
    if (tensor_role.has_value() && observed.bytes(role) > 0) {
      by_role[*tensor_role] += observed.bytes(role);
    }
  }
  std::vector<proto::RoleBytes> out;
  for (const auto& [tensor_role, bytes] : by_role) {
    proto::RoleBytes& b = out.emplace_back();
    b.set_role(tensor_role);
    b.set_bytes(bytes);
  }
  return out;
}

absl::StatusOr<graph::Graph> GraphOf(const proto::ModelSource& model) {
  ASSIGN_OR_RETURN(proto::GraphDef def, graph::ResolveModel(model));
  return graph::Graph::FromProto(def);
}

// Returns the step of the newest fit checkpoint in `dir` (checkpoint-STEP.hrfit), if any.
std::optional<uint64_t> NewestFitCheckpointStep(const std::string& dir) {
  absl::StatusOr<std::string> latest = executor::LatestCheckpoint(dir);
  if (!latest.ok()) return std::nullopt;
  absl::string_view name = *latest;
  name = name.substr(name.rfind('/') + 1);
  uint64_t step = 0;
  if (!absl::ConsumePrefix(&name, "checkpoint-") || !absl::ConsumeSuffix(&name, ".hrfit") ||
      !absl::SimpleAtoi(name, &step)) {
    return std::nullopt;
  }
  return step;
}

// The daemon's hooks into a job's fit loop, called after every other callback (so a
// checkpoint it writes holds what they did): after each step and each epoch's end; and
// before the next step, when `interrupted` says so (a shutdown), a checkpoint to `dir` and
// an Aborted error that stops the loop at once.
class DaemonFitCallback : public executor::Callback {
 public:
  using StepHook = std::function<void(executor::FitLoop&, const executor::StepResult&)>;
  using EpochHook = std::function<void(executor::FitLoop&, int64_t epoch)>;
  DaemonFitCallback(StepHook on_step, EpochHook on_epoch, std::function<bool()> interrupted,
                    std::string dir)
      : on_step_(std::move(on_step)),
        on_epoch_(std::move(on_epoch)),
        interrupted_(std::move(interrupted)),
        dir_(std::move(dir)) {}
  std::string name() const override { return "daemon"; }

  absl::Status OnStepEnd(executor::FitLoop& fit, const executor::StepResult& r) override {
    on_step_(fit, r);
    if (!interrupted_()) return absl::OkStatus();
    const std::string path =
        absl::StrFormat("%s/checkpoint-%09d.hrfit", dir_, fit.trainer().steps_run());
    RETURN_IF_ERROR(fit.WriteCheckpoint(path));
    stop_checkpoint_ = path;
    return absl::AbortedError("stopped for a shutdown after its checkpoint");
  }
  absl::Status OnEpochEnd(executor::FitLoop& fit, int64_t epoch) override {
    on_epoch_(fit, epoch);
    return absl::OkStatus();
  }
  // The checkpoint written for a shutdown, or "".
  const std::string& stop_checkpoint() const { return stop_checkpoint_; }

 private:
  const StepHook on_step_;
  const EpochHook on_epoch_;
  const std::function<bool()> interrupted_;
  const std::string dir_;
  std::string stop_checkpoint_;
};

}  // namespace

// What the manager keeps of a job beside the scheduler. Guarded by mu_.
struct JobManager::Extras {
  // The budget its plan was chosen for (the spec's, or the device's memory).
  uint64_t budget_bytes = 0;
  // The timeline of its recorded steps, once one is complete.
  std::shared_ptr<const profiler::Timeline> timeline;
  std::shared_ptr<const profiler::StepLayout> layout;
  // The process's memory during its run against its plan (the timeline's process account).
  proto::ProcessMemory process;
};

// The flags a started job run reads: `cancel` before every node (the executor's), and
// `interrupt` before every step (shutdown: checkpoint, then stop).
struct JobManager::RunControl {
  std::atomic<bool> cancel{false};
  std::atomic<bool> interrupt{false};
};

// A profile request from its call to its answer.
struct JobManager::ProfileCall {
  proto::ProfileRequest request;
  proto::JobSpec spec;
  uint64_t budget_bytes = 0;
  std::string backend;
  // Its run's stop flag (`cancel`, checked before every node), and the answer when it is
  // stopped (the scheduler's reason).
  std::shared_ptr<RunControl> control = std::make_shared<RunControl>();
  absl::Status stop_reason;
  std::optional<absl::StatusOr<proto::ProfileResponse>> result;
};

// What the job worker needs of a job while it trains it, copied out of mu_.
struct JobManager::Run {
  std::string job_id;
  proto::JobSpec spec;
  uint64_t budget_bytes = 0;
  uint64_t planned_peak_bytes = 0;
  uint64_t checkpoint_interval = 0;
  std::shared_ptr<RunControl> control;
  // Set when shutdown stopped it after a step, with its checkpoint stored.
  bool interrupted = false;
  // Steps in all, as Submit counted them (a dataset job's epochs x batches).
  uint64_t total_steps = 0;
};

// What the steps of a job's run record into, for AfterStep.
struct JobManager::StepContext {
  executor::Trainer* trainer = nullptr;
  WindowLog* window = nullptr;
  profiler::MetricsSink* sink = nullptr;
  profiler::ProcessMemorySampler* process = nullptr;
  std::shared_ptr<const profiler::StepLayout> layout;
  // The base learning rate of the job's optimizer (its schedule's).
  double base_rate = 0;
};

namespace {

SchedulerOptions SchedulerOptionsOf(const JobManagerOptions& o, const std::string& device,
                                    uint64_t fixed_cost_bytes) {
  SchedulerOptions s;
  s.device = device;
  s.backend = o.backend;
  s.device_memory_bytes = o.device_memory_bytes;
  s.fixed_cost_bytes = fixed_cost_bytes;
  s.progress_write_interval = o.progress_write_interval;
  s.max_job_seconds = o.max_job_seconds;
  return s;
}

}  // namespace

JobManager::JobManager(JobStore* store, profiler::Metrics* metrics, JobManagerOptions options)
    : store_(store),
      metrics_(metrics),
      options_(std::move(options)),
      device_(absl::StrCat(options_.backend, ":0")),
      fixed_cost_bytes_(options_.fixed_cost_bytes.value_or(options_.measured_fixed_cost_bytes)),
      scheduler_(SchedulerOptionsOf(options_, device_, fixed_cost_bytes_)) {}

absl::StatusOr<std::unique_ptr<JobManager>> JobManager::Create(JobStore* store,
                                                               profiler::Metrics* metrics,
                                                               JobManagerOptions options) {
  if (!options.make_backend) return absl::InvalidArgumentError("JobManager: no make_backend");
  std::unique_ptr<JobManager> m(new JobManager(store, metrics, std::move(options)));
  RETURN_IF_ERROR(m->Recover());
  m->job_worker_ = std::thread([raw = m.get()] { raw->JobWorkerLoop(); });
  m->profile_worker_ = std::thread([raw = m.get()] { raw->ProfileWorkerLoop(); });
  return m;
}

JobManager::~JobManager() { Shutdown(); }

absl::Status JobManager::Recover() {
  ASSIGN_OR_RETURN(std::vector<proto::JobInfo> stored, store_->LoadJobs());
  // Oldest first, so that the queue keeps submission order.
  for (auto it = stored.rbegin(); it != stored.rend(); ++it) {
    sched::Recovered event;
    event.info = *it;
    const std::string& id = it->job_id();
    if (!Ended(it->state())) {
      absl::StatusOr<proto::PlanResponse> plan = store_->GetPlan(id);
      absl::StatusOr<std::optional<proto::Checkpoint>> checkpoint = store_->GetCheckpoint(id);
      if (!plan.ok()) {
        event.load_error = std::string(plan.status().message());
      } else if (!checkpoint.ok()) {
        event.load_error = std::string(checkpoint.status().message());
      } else {
        event.need_bytes = Need(*plan) * RanksOf(it->spec());
        if (checkpoint->has_value()) event.checkpoint_step = (*checkpoint)->step();
        // A dataset job resumes from its newest fit checkpoint.
        if (HasDataset(it->spec())) event.checkpoint_step = NewestFitCheckpointStep(FitDir(id));
      }
      absl::MutexLock lock(&mu_);
      if (plan.ok()) extras_[id].budget_bytes = plan->summary().budget_bytes();
    }
    // A write that fails here (a full disk) is reported on stderr by Store() and does not
    // keep the daemon from serving what it read: the job's stored row stays as it was,
    // which a later start reads the same way.
    Decision d;
    {
      absl::MutexLock lock(&mu_);
      d = Feed(event);
    }
    RETURN_IF_ERROR(d.status);
    Store(d).IgnoreError();
  }
  absl::MutexLock lock(&mu_);
  PublishCounts();
  return absl::OkStatus();
}

void JobManager::Shutdown() {
  Decision d;
  {
    absl::MutexLock lock(&mu_);
    if (workers_stop_ && !job_worker_.joinable()) return;
    d = Feed(sched::ShutdownRequested{});
    workers_stop_ = true;
  }
  Store(d).IgnoreError();  // Store() reports its errors on stderr.
  if (job_worker_.joinable()) job_worker_.join();
  if (profile_worker_.joinable()) profile_worker_.join();
}

uint64_t JobManager::Need(const proto::PlanResponse& plan) const {
  const proto::PlanSummary& summary = plan.summary();
  return summary.predicted_peak_bytes() +
         (summary.host_pool_in_budget() ? summary.host_pool_bytes() : 0) + fixed_cost_bytes_;
}

uint64_t JobManager::DriverFreeBytes() {
  absl::StatusOr<uint64_t> free = options_.free_device_bytes();
  if (free.ok()) {
    if (free_bytes_failing_) {
      fprintf(stderr, "headroomd: reading %s's free memory works again: %s free\n", device_.c_str(),
              graph::HumanBytes(*free).c_str());
    }
    free_bytes_failing_ = false;
    return *free;
  }
  // A failed sample says nothing about the device: admit as without a driver's figure (0
  // would keep every job queued for ever). Said once a minute while it keeps failing: the
  // job worker samples at every admission poll.
  const uint64_t memory = options_.device_memory_bytes;
  const uint64_t fallback = memory == 0 ? std::numeric_limits<uint64_t>::max()
                                        : memory - std::min(memory, scheduler_.reserved_bytes());
  const absl::Time now = absl::Now();
  if (!free_bytes_failing_ || now - free_bytes_error_printed_ >= absl::Minutes(1)) {
    fprintf(stderr,
            "headroomd: cannot read %s's free memory (%s); admitting jobs by its memory less "
            "what Headroom's running work reserved (%s) until it can\n",
            device_.c_str(), std::string(free.status().message()).c_str(),
            memory == 0 ? "unlimited" : graph::HumanBytes(fallback).c_str());
    free_bytes_error_printed_ = now;
  }
  free_bytes_failing_ = true;
  return fallback;
}

Decision JobManager::Feed(const sched::Event& event) {
  const absl::Time now = absl::Now();
  Decision d;
  if (options_.free_device_bytes && !std::holds_alternative<sched::CapacityChanged>(event)) {
    d = scheduler_.Apply(sched::CapacityChanged{DriverFreeBytes()}, now);
  }
  Decision e = scheduler_.Apply(event, now);
  d.status = e.status;
  d.state = e.state;
  d.actions.insert(d.actions.end(), e.actions.begin(), e.actions.end());
  bool changed = false;
  for (const sched::Action& a : d.actions) {
    switch (a.kind) {
      case sched::Action::Kind::kStartRun:
        if (a.profile) {
          profile_runs_.push_back(a.id);
        } else {
          controls_[a.id] = std::make_shared<RunControl>();
          job_runs_.push_back(a.id);
        }
        break;
      case sched::Action::Kind::kStopRun:
        if (a.profile) {
          ProfileCall& call = profiles_.at(a.id);
          call.stop_reason = a.status;
          call.control->cancel = true;
          break;
        }
        (a.checkpoint ? controls_.at(a.id)->interrupt : controls_.at(a.id)->cancel) = true;
        break;
      case sched::Action::Kind::kNotifyWatchers: changed = true; break;
      case sched::Action::Kind::kReject: profiles_.at(a.id).result = a.status; break;
      case sched::Action::Kind::kPersist:
      case sched::Action::Kind::kDeleteCheckpoint: break;  // Store()'s
    }
  }
  if (changed) {
    changed_.SignalAll();
    PublishCounts();
  }
  return d;
}

absl::Status JobManager::Store(const Decision& decision) {
  absl::Status first;
  for (const sched::Action& a : decision.actions) {
    absl::Status s;
    if (a.kind == sched::Action::Kind::kPersist) {
      // The job's latest info, read under persist_mu_: of two writes racing, the later
      // carries the later state.
      absl::MutexLock order(&persist_mu_);
      proto::JobInfo info;
      {
        absl::MutexLock lock(&mu_);
        info = scheduler_.Find(a.id)->info;
      }
      s = store_->PutJob(info);
    } else if (a.kind == sched::Action::Kind::kDeleteCheckpoint) {
      s = store_->DeleteCheckpoint(a.id);
      std::error_code error;
      std::filesystem::remove_all(FitDir(a.id), error);
      if (error && s.ok()) {
        s = absl::InternalError(absl::StrCat("deleting '", FitDir(a.id), "': ", error.message()));
      }
    }
    if (s.ok()) continue;
    if (first.ok()) first = s;
    // A failed write loses only progress that the next one carries; say so on stderr, the
    // same error once a minute.
    absl::MutexLock order(&persist_mu_);
    const std::string error = absl::StrCat("storing job ", a.id, ": ", s.message());
    const absl::Time now = absl::Now();
    if (error == last_store_error_ && now - last_store_error_time_ < absl::Minutes(1)) continue;
    last_store_error_ = error;
    last_store_error_time_ = now;
    fprintf(stderr, "headroomd: %s\n", error.c_str());
  }
  return first;
}

Decision JobManager::Dispatch(const sched::Event& event) {
  Decision d;
  {
    absl::MutexLock lock(&mu_);
    d = Feed(event);
  }
  absl::Status stored = Store(d);
  if (d.status.ok()) d.status = stored;
  return d;
}

void JobManager::PublishCounts() {
  profiler::JobCounts counts;
  for (const auto& [id, job] : scheduler_.jobs()) {
    switch (job.info.state()) {
      case proto::JOB_STATE_QUEUED: ++counts.queued; break;
      case proto::JOB_STATE_RUNNING: ++counts.running; break;
      case proto::JOB_STATE_SUCCEEDED: ++counts.succeeded; break;
      case proto::JOB_STATE_FAILED: ++counts.failed; break;
      case proto::JOB_STATE_CANCELLED: ++counts.cancelled; break;
      default: break;
    }
  }
  metrics_->SetJobCounts(counts).IgnoreError();
}

absl::StatusOr<proto::PlanResponse> JobManager::PlanSpec(
    const proto::JobSpec& spec, uint64_t* budget_bytes,
    const util::CancellationToken* cancel) const {
  ASSIGN_OR_RETURN(graph::Graph g, GraphOf(spec.model()));
  proto::PlanOptions options = spec.plan();
  // A job of several ranks: each rank's plan lays out its gradient buckets
  // (spec.plan.data_parallel.bucket_bytes, as headroomd_rank's) beside the rest, so the plan
  // admitted is the rank's.
  if (spec.ranks() > 1 && options.data_parallel().ranks() == 0) {
    options.mutable_data_parallel()->set_ranks(spec.ranks());
  }
  const uint64_t fixed_cost = fixed_cost_bytes_;
  // Without a budget, the plan gets the device's memory less the fixed cost.
  const uint64_t usable = options_.device_memory_bytes -
                          std::min(options_.device_memory_bytes, fixed_cost);
  const bool device_budget = options.budget_bytes() == 0 && options_.device_memory_bytes > 0;
  if (device_budget) options.set_budget_bytes(std::max<uint64_t>(usable, 1));
  absl::StatusOr<proto::PlanResponse> plan =
      planner::AnswerPlan(g, options, /*cost=*/nullptr, options_.plan_backend, cancel);
  const bool stopped = absl::IsDeadlineExceeded(plan.status()) || absl::IsCancelled(plan.status());
  if (!plan.ok() && device_budget && !stopped) {
    return absl::Status(plan.status().code(),
                        absl::StrCat("planned for device ", device_, "'s memory less the fixed "
                                     "cost (no budget given): ", plan.status().message()));
  }
  if (!plan.ok()) return plan.status();
  const proto::PlanSummary& summary = plan->summary();
  const uint64_t held = summary.predicted_peak_bytes() +
                        (summary.host_pool_in_budget() ? summary.host_pool_bytes() : 0);
  if (options_.device_memory_bytes > 0 && held + fixed_cost > options_.device_memory_bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the plan holds ", graph::HumanBytes(held), " (", held, " bytes), which with the fixed "
        "cost of ", graph::HumanBytes(fixed_cost), " exceeds device ", device_, "'s memory of ",
        graph::HumanBytes(options_.device_memory_bytes), " (", options_.device_memory_bytes,
        " bytes); submit with a budget of at most ", graph::HumanBytes(usable), " (", usable,
        " bytes), or none"));
  }
  *budget_bytes = options.budget_bytes();
  return plan;
}

absl::StatusOr<proto::SubmitJobResponse> JobManager::Submit(const proto::JobSpec& spec,
                                                            const util::CancellationToken* cancel) {
  // 1. Check the spec and plan it: every error here is the caller's.
  RETURN_IF_ERROR(CheckDataOptions(spec));
  const bool fit = HasDataset(spec);
  if (!fit && (spec.train().steps() == 0 || spec.train().steps() > kMaxJobSteps)) {
    return absl::InvalidArgumentError(absl::StrCat("spec.train.steps: must be between 1 and ",
                                                   kMaxJobSteps, ", got ", spec.train().steps()));
  }
  const std::string backend = spec.train().backend().empty() ? options_.backend : spec.train().backend();
  if (backend != options_.backend) {
    return absl::InvalidArgumentError(absl::StrCat("spec.train.backend: '", backend,
                                                   "', but this daemon runs ", device_));
  }
  RETURN_IF_ERROR(runner::TrainerOptionsOf(spec.plan(), spec.train().seed(), backend).status());
  RETURN_IF_ERROR(CheckRanks(spec, options_.max_ranks, backend));
  const uint32_t ranks = RanksOf(spec);
  if (ranks > 1 && access(options_.rank_worker.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("spec.ranks: this daemon has no rank worker to start ranks with: '",
                     options_.rank_worker, "' is not an executable (headroomd --rank-worker)"));
  }
  uint64_t budget = 0;
  ASSIGN_OR_RETURN(proto::PlanResponse plan, PlanSpec(spec, &budget, cancel));
  // Each rank is a process holding the plan and the fixed cost: admitted by their sum.
  if (ranks > 1 && options_.device_memory_bytes > 0 &&
      Need(plan) * ranks > options_.device_memory_bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "spec.ranks: the ", ranks, " ranks' plans need ", ranks, " x ",
        graph::HumanBytes(Need(plan)), " = ", graph::HumanBytes(Need(plan) * ranks), " (",
        Need(plan) * ranks, " bytes, each rank's planned peak and fixed cost), more than device ",
        device_, "'s memory of ", graph::HumanBytes(options_.device_memory_bytes), " (",
        options_.device_memory_bytes, " bytes, --device-memory)"));
  }
  // A dataset: under a data root, readable, and fit for the model; it sets the steps.
  uint64_t total_steps = spec.train().steps();
  proto::FitProgress fit_progress;
  if (fit) {
    ASSIGN_OR_RETURN(const std::string path, options_.data_roots.Resolve(spec.data().dataset()));
    ASSIGN_OR_RETURN(const graph::Graph g, GraphOf(spec.model()));
    // The headers alone: a submit reads no images (the job loads them when it runs).
    ASSIGN_OR_RETURN(const JobDataShape data,
                     InspectJobData(spec, path, g, options_.max_dataset_bytes));
    total_steps = data.total_steps;
    if (total_steps > options_.max_job_steps) {
      return absl::InvalidArgumentError(
          absl::StrCat("spec.data: ", spec.data().epochs(), " epoch(s) of ", data.batches_per_epoch,
                       " batches make ", total_steps, " steps, more than --max-job-steps ",
                       options_.max_job_steps));
    }
    fit_progress.set_total_epochs(spec.data().epochs());
    fit_progress.set_batches_per_epoch(static_cast<uint64_t>(data.batches_per_epoch));
  }
  // A dataset job keeps keep_last checkpoints, best.hrfit, one being written and the
  // final state in the store.
  const uint64_t keep_last = spec.data().keep_last() == 0 ? 3 : spec.data().keep_last();
  RETURN_IF_ERROR(CheckDiskRoom(plan, fit ? keep_last + 3 : 2));
  // 2. Store it, then hand it to the scheduler.
  ASSIGN_OR_RETURN(std::string id, store_->NewJobId());
  sched::Submitted submitted;
  proto::JobInfo& info = submitted.info;
  info.set_job_id(id);
  info.set_name(spec.name().empty() ? id : spec.name());
  info.set_state(proto::JOB_STATE_QUEUED);
  info.set_submitted_unix_seconds(UnixSeconds());
  info.set_total_steps(total_steps);
  if (fit) *info.mutable_fit() = fit_progress;
  info.set_planned_peak_bytes(plan.summary().predicted_peak_bytes());
  info.set_offloaded_bytes_per_step(plan.summary().offloaded_bytes());
  info.set_device(device_);
  *info.mutable_spec() = spec;
  submitted.need_bytes = Need(plan) * ranks;
  RETURN_IF_ERROR(store_->PutPlan(id, plan));
  RETURN_IF_ERROR(store_->PutJob(info));
  {
    absl::MutexLock lock(&mu_);
    extras_[id].budget_bytes = budget;
  }
  RETURN_IF_ERROR(Dispatch(submitted).status);
  proto::SubmitJobResponse response;
  response.set_job_id(id);
  response.set_state(proto::JOB_STATE_QUEUED);
  *response.mutable_plan() = std::move(plan);
  return response;
}

absl::Status JobManager::CheckDiskRoom(const proto::PlanResponse& plan, uint64_t copies) const {
  uint64_t state_bytes = 0;
  for (const proto::RoleBytes& b : plan.summary().bytes_by_role()) {
    if (b.role() == proto::ROLE_PARAMETER || b.role() == proto::ROLE_BUFFER ||
        b.role() == proto::ROLE_OPTIMIZER_STATE) {
      state_bytes += b.bytes();
    }
  }
  const uint64_t need_bytes = copies * state_bytes + (uint64_t{1} << 20);
  const absl::StatusOr<uint64_t> free_bytes = store_->FreeDiskBytes();
  // When the free space cannot be read, the store's writes tell.
  if (!free_bytes.ok() || *free_bytes >= need_bytes) return absl::OkStatus();
  return DiskFullError(absl::StrCat("the disk holding the state directory '", store_->state_dir(),
                                    "' is full: ", graph::HumanBytes(*free_bytes),
                                    " free, and this job's checkpoints need about ",
                                    graph::HumanBytes(need_bytes), " (", copies,
                                    " times its parameters, buffers and "
                                    "optimizer state, and 1 MiB); free space there and submit "
                                    "it again"));
}

absl::StatusOr<proto::JobState> JobManager::Cancel(const std::string& job_id) {
  const Decision d = Dispatch(sched::CancelRequested{job_id});
  if (!d.status.ok()) return d.status;
  return d.state;
}

absl::StatusOr<proto::JobInfo> JobManager::Get(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  const ScheduledJob* job = scheduler_.Find(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  return job->info;
}

absl::StatusOr<proto::ListJobsResponse> JobManager::List(
    const proto::ListJobsRequest& request) const {
  size_t offset = 0;
  if (!request.page_token().empty() && !absl::SimpleAtoi(request.page_token(), &offset)) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_token: '", request.page_token(), "' is not one this daemon gave"));
  }
  const size_t page = request.page_size() == 0 ? kDefaultPageSize : request.page_size();
  // Where the page ends; a token near SIZE_MAX must not wrap it round to the first page.
  const size_t end = offset > std::numeric_limits<size_t>::max() - page
                         ? std::numeric_limits<size_t>::max()
                         : offset + page;
  proto::ListJobsResponse response;
  absl::MutexLock lock(&mu_);
  size_t index = 0;
  // Ids grow with submission, so the reverse id order is newest first.
  const std::map<std::string, ScheduledJob>& jobs = scheduler_.jobs();
  for (auto it = jobs.rbegin(); it != jobs.rend(); ++it) {
    const proto::JobInfo& info = it->second.info;
    if (!request.states().empty() &&
        std::find(request.states().begin(), request.states().end(), info.state()) ==
            request.states().end()) {
      continue;
    }
    if (index >= end) {
      response.set_next_page_token(absl::StrCat(end));
      break;
    }
    if (index++ >= offset) *response.add_jobs() = info;
  }
  return response;
}


absl::Status JobManager::Watch(const std::string& job_id,
                               const std::function<bool(const proto::JobProgress&)>& write,
                               const std::function<bool()>& stop) const {
  // A change wakes the wait at once (changed_ is signalled on every one). The timed wait is
  // only for a client that went away: gRPC's IsCancelled has no event to wait on.
  constexpr absl::Duration kClientCheck = absl::Seconds(1);
  uint64_t seen = 0;
  bool first = true;
  while (true) {
    proto::JobProgress progress;
    {
      absl::MutexLock lock(&mu_);
      const ScheduledJob* job = scheduler_.Find(job_id);
      if (job == nullptr) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
      while (!first && job->version == seen) {  // Jobs are never removed: `job` stays valid.
        if (stop()) return absl::CancelledError("the watcher went away");
        changed_.WaitWithTimeout(&mu_, kClientCheck);
      }
      first = false;
      seen = job->version;
      progress = ProgressOf(*job);
    }
    if (!write(progress)) return absl::CancelledError("the watcher went away");
    if (Ended(progress.state())) return absl::OkStatus();
  }
}

absl::StatusOr<proto::MemoryTimeline> JobManager::Timeline(const std::string& job_id,
                                                           uint32_t max_samples) const {
  Extras extras;
  {
    absl::MutexLock lock(&mu_);
    if (scheduler_.Find(job_id) == nullptr) {
      return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
    }
    auto it = extras_.find(job_id);
    if (it != extras_.end()) extras = it->second;
  }
  if (extras.timeline != nullptr) {
    proto::MemoryTimeline out = extras.timeline->ToProto(*extras.layout, max_samples);
    *out.mutable_process() = extras.process;
    return out;
  }
  // A job of an earlier run of the daemon: its stored timeline.
  absl::StatusOr<proto::MemoryTimeline> stored = store_->GetTimeline(job_id);
  if (absl::IsNotFound(stored.status())) {
    // The job exists: NOT_FOUND would say it does not.
    return absl::FailedPreconditionError(absl::StrCat(
        "job '", job_id, "' has no timeline yet: none of its steps has finished (its "
        "timeline is recorded over its first steps)"));
  }
  if (stored.ok()) profiler::ThinSamples(*stored, max_samples);
  return stored;
}

void JobManager::JobWorkerLoop() {
  while (true) {
    std::string job_id;
    Decision recheck;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return workers_stop_ || !job_runs_.empty();
      };
      if (!options_.free_device_bytes) {
        mu_.Await(absl::Condition(&ready));
      } else if (!mu_.AwaitWithTimeout(absl::Condition(&ready), options_.admission_poll)) {
        // The driver's free bytes change with other processes, without an event here:
        // the one periodic look, while nothing else happens.
        recheck = Feed(sched::CapacityChanged{DriverFreeBytes()});
      }
      if (job_runs_.empty() && workers_stop_) return;
      if (!job_runs_.empty()) {
        job_id = job_runs_.front();
        job_runs_.pop_front();
      }
    }
    Store(recheck).IgnoreError();  // Store() reports its errors on stderr.
    if (!job_id.empty()) RunJob(job_id);
  }
}

void JobManager::RunJob(const std::string& job_id) {
  Run run;
  run.job_id = job_id;
  {
    absl::MutexLock lock(&mu_);
    const proto::JobInfo& info = scheduler_.Find(job_id)->info;
    run.spec = info.spec();
    run.budget_bytes = extras_[job_id].budget_bytes;
    run.planned_peak_bytes = info.planned_peak_bytes();
    run.total_steps = info.total_steps();
    run.checkpoint_interval = run.spec.train().checkpoint_interval_steps() > 0
                                  ? run.spec.train().checkpoint_interval_steps()
                                  : options_.checkpoint_interval_steps;
    run.control = controls_.at(job_id);
  }

  const absl::Status status = TrainJob(run);  // the trainer and its arena are gone after this

  // Its timeline is stored before it is seen to end.
  std::optional<proto::MemoryTimeline> timeline;
  {
    absl::MutexLock lock(&mu_);
    const Extras& extras = extras_[job_id];
    if (extras.timeline != nullptr) {
      timeline = extras.timeline->ToProto(*extras.layout, 2000);
      *timeline->mutable_process() = extras.process;
    }
  }
  const bool timeline_stored =
      !timeline.has_value() || store_->PutTimeline(job_id, *timeline).ok();
  Dispatch(sched::RunEnded{job_id, status, run.interrupted});
  absl::MutexLock lock(&mu_);
  controls_.erase(job_id);
  if (Ended(scheduler_.Find(job_id)->info.state())) {
    // An ended job's timeline is served from the store from now on, as after a restart:
    // kept here, every job the daemon ever ran would hold its timeline in memory.
    if (timeline_stored) extras_.erase(job_id);
    // Keep the series of the latest ended jobs only.
    ended_with_series_.push_back(job_id);
    while (ended_with_series_.size() > kKeptEndedSeries) {
      metrics_->ForgetJob(ended_with_series_.front());
      ended_with_series_.pop_front();
    }
  }
}

absl::Status JobManager::TrainJob(Run& run) {
  if (RanksOf(run.spec) > 1) return RunRanks(run);
  // 1. The graph (an ONNX model with its weights), the backend and the trainer, under the
  //    plan the job was admitted with.
  ASSIGN_OR_RETURN(graph::ResolvedModel model, graph::ResolveModelWithValues(run.spec.model()));
  ASSIGN_OR_RETURN(graph::Graph g, graph::Graph::FromProto(model.graph));
  const std::string backend_name =
      run.spec.train().backend().empty() ? options_.backend : run.spec.train().backend();
  ASSIGN_OR_RETURN(std::unique_ptr<executor::Backend> backend,
                   options_.make_backend(backend_name));
  ASSIGN_OR_RETURN(executor::TrainerOptions trainer_options,
                   runner::TrainerOptionsOf(run.spec.plan(), run.spec.train().seed(), backend_name));
  trainer_options.budget_bytes = run.budget_bytes;
  trainer_options.cancel = &run.control->cancel;
  for (const proto::TensorValue& v : model.values) {
    trainer_options.initial_values.push_back(executor::HostTensorFromValue(v));
  }
  model.values.clear();
  WindowLog window(options_.timeline_steps);
  profiler::MetricsSink sink(metrics_, run.job_id, device_, &window);
  // The process's memory from before the plan, at every node (the daemon may run a profile
  // beside the job: its bytes would show here too).
  profiler::ProcessMemorySampler process(&sink);
  trainer_options.events = &process;
  ASSIGN_OR_RETURN(std::unique_ptr<executor::Trainer> trainer,
                   executor::Trainer::Create(g, backend.get(), trainer_options));
  if (trainer->plan().peak_bytes != run.planned_peak_bytes) {
    return absl::InternalError(absl::StrCat("the plan's peak is ", trainer->plan().peak_bytes,
                                            " bytes now, ", run.planned_peak_bytes,
                                            " at submit: a bug"));
  }
  auto layout = std::make_shared<const profiler::StepLayout>(profiler::DescribeStep(*trainer->plan().step));
  StepContext context{trainer.get(), &window, &sink,
                      &process,      layout,  trainer_options.optimizer_params.learning_rate};
  metrics_->ForgetJob(run.job_id);
  RETURN_IF_ERROR(metrics_->StartJob(run.job_id, device_, run.planned_peak_bytes));
  if (HasDataset(run.spec)) return FitJob(run, context);

  // 2. Resume from the checkpoint, if there is one.
  ASSIGN_OR_RETURN(double loss, RestoreCheckpoint(run.job_id, *trainer));
  window.set_first(trainer->steps_run());

  // 3. The steps: progress after each, a checkpoint every interval; a shutdown stops it
  //    between steps with a checkpoint.
  //    Counted in uint64, as the spec is: a cast to int64 made 2^63 steps negative, so such a
  //    job ended SUCCEEDED after none.
  const uint64_t total = run.spec.train().steps();
  while (static_cast<uint64_t>(trainer->steps_run()) < total) {
    if (run.control->interrupt) {
      RETURN_IF_ERROR(Checkpoint(run, *trainer, loss));
      run.interrupted = true;
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(executor::StepResult r, trainer->Step());
    loss = r.loss;
    AfterStep(run, context, r, std::nullopt);
    const uint64_t done = static_cast<uint64_t>(trainer->steps_run());
    if (done < total && run.checkpoint_interval > 0 && done % run.checkpoint_interval == 0) {
      RETURN_IF_ERROR(Checkpoint(run, *trainer, loss));
    }
  }
  // 4. The trained weights, kept with the job once it succeeds (ExportModel reads them).
  RETURN_IF_ERROR(sink.status());
  return Checkpoint(run, *trainer, loss);
}

void JobManager::AfterStep(Run& run, StepContext& context, const executor::StepResult& r,
                           std::optional<proto::FitProgress> fit) {
  const executor::Trainer& trainer = *context.trainer;
  std::shared_ptr<const profiler::Timeline> timeline;
  if (context.window->Keeps(r.step)) {
    absl::StatusOr<profiler::Timeline> built =
        profiler::Timeline::Build(context.window->log(), *context.layout);
    if (built.ok()) timeline = std::make_shared<const profiler::Timeline>(*std::move(built));
  }
  const uint64_t done = static_cast<uint64_t>(trainer.steps_run());
  {
    absl::MutexLock lock(&mu_);
    Extras& extras = extras_[run.job_id];
    extras.process = context.process->Account(
        trainer.plan().peak_bytes, trainer.executor().host_pool_bytes(), context.layout.get());
    if (timeline != nullptr) {
      extras.timeline = timeline;
      extras.layout = context.layout;
    }
  }
  sched::StepDone step{run.job_id,
                       done,
                       r.loss,
                       r.seconds,
                       r.arena_high_water_bytes,
                       MemoryByRole(context.sink->last_step())};
  step.fit = std::move(fit);
  Dispatch(step);
}

std::string JobManager::FitDir(const std::string& job_id) const {
  return absl::StrCat(store_->state_dir(), "/fit/", job_id);
}

namespace {

// Returns where `fit` stands after a step of epoch `epoch` (from 0), with the input wait
// against `step_seconds` (the steps' own time in this run).
proto::FitProgress FitProgressOf(const executor::FitLoop& fit, int64_t epoch, double step_seconds) {
  proto::FitProgress p;
  p.set_epoch(static_cast<uint64_t>(epoch + 1));
  p.set_total_epochs(static_cast<uint64_t>(fit.epochs()));
  p.set_batches_per_epoch(static_cast<uint64_t>(fit.batches_per_epoch()));
  const executor::Metric* loss = fit.FindMetric("eval_loss");
  const executor::Metric* accuracy = fit.FindMetric("eval_accuracy");
  if (loss != nullptr && accuracy != nullptr) {
    p.set_evaluated(true);
    p.set_eval_loss(loss->value);
    p.set_eval_accuracy(accuracy->value);
    p.set_eval_epoch(static_cast<uint64_t>(loss->epoch + 1));
  }
  p.set_input_wait_seconds(fit.input_wait_seconds());
  p.set_input_wait_fraction(step_seconds > 0 ? fit.input_wait_seconds() / step_seconds : 0);
  return p;
}

}  // namespace

absl::Status JobManager::FitJob(Run& run, StepContext& context) {
  executor::Trainer& trainer = *context.trainer;
  // 1. The data, its path resolved again (a symlink changed since submit cannot lead out of
  //    the roots), and the same steps as at submit.
  ASSIGN_OR_RETURN(const std::string path, options_.data_roots.Resolve(run.spec.data().dataset()));
  ASSIGN_OR_RETURN(const std::unique_ptr<JobData> data,
                   LoadJobData(run.spec, path, trainer.forward(), options_.max_dataset_bytes));
  if (data->total_steps != run.total_steps) {
    return absl::FailedPreconditionError(
        absl::StrCat("spec.data.dataset '", run.spec.data().dataset(),
                     "' changed since the job was submitted: it makes ", data->total_steps,
                     " steps now, ", run.total_steps, " then"));
  }
  const std::string dir = FitDir(run.job_id);
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::UnavailableError(absl::StrCat("fit checkpoints '", dir, "': ", error.message()));
  }
  // 2. The callbacks: the job's, then the daemon's hooks.
  ASSIGN_OR_RETURN(
      std::vector<std::unique_ptr<executor::Callback>> callbacks,
      MakeFitCallbacks(run.spec, *data, context.base_rate, dir, run.checkpoint_interval));
  const auto* checkpoints = static_cast<const executor::CheckpointCallback*>(
      callbacks.back().get());  // MakeFitCallbacks puts the writer last
  double step_seconds = 0;
  double wait_observed = 0;
  auto observe = [&](const proto::FitProgress& p) {
    profiler::FitObservation o;
    o.epoch = static_cast<int64_t>(p.epoch());
    o.evaluated = p.evaluated();
    o.eval_loss = p.eval_loss();
    o.eval_accuracy = p.eval_accuracy();
    o.input_wait_seconds = std::max(0.0, p.input_wait_seconds() - wait_observed);
    wait_observed = std::max(wait_observed, p.input_wait_seconds());
    metrics_->ObserveFit(run.job_id, device_, o).IgnoreError();  // finite by construction
  };
  auto on_step = [&](executor::FitLoop& fit, const executor::StepResult& r) {
    step_seconds += r.seconds;
    proto::FitProgress p = FitProgressOf(fit, fit.position().epoch, step_seconds);
    observe(p);
    AfterStep(run, context, r, std::move(p));
  };
  auto on_epoch = [&](executor::FitLoop& fit, int64_t epoch) {
    proto::FitProgress p = FitProgressOf(fit, epoch, step_seconds);
    observe(p);
    Dispatch(sched::EpochEnded{run.job_id, std::move(p)});
  };
  auto daemon = std::make_unique<DaemonFitCallback>(
      on_step, on_epoch, [&run] { return run.control->interrupt.load(); }, dir);
  const DaemonFitCallback* hooks = daemon.get();
  callbacks.push_back(std::move(daemon));
  executor::FitOptions options;
  options.epochs = static_cast<int64_t>(run.spec.data().epochs());
  ASSIGN_OR_RETURN(
      std::unique_ptr<executor::FitLoop> loop,
      executor::FitLoop::Create(&trainer, &data->train, data->train_items,
                                LoaderOptionsOf(run.spec), options, std::move(callbacks)));
  // 3. Resume from the newest checkpoint, if there is one.
  if (absl::StatusOr<std::string> latest = executor::LatestCheckpoint(dir); latest.ok()) {
    RETURN_IF_ERROR(loop->Resume(*latest));
    Dispatch(sched::Restored{run.job_id, static_cast<uint64_t>(trainer.steps_run()),
                             loop->epoch_loss()});
  }
  context.window->set_first(trainer.steps_run());
  // 4. Run it; a shutdown stops it after a step with its checkpoint written.
  absl::StatusOr<executor::FitSummary> summary = loop->Run();
  if (!summary.ok()) {
    if (!hooks->stop_checkpoint().empty() && absl::IsAborted(summary.status())) {
      run.interrupted = true;
      return absl::OkStatus();
    }
    return summary.status();
  }
  // 5. Where it ended (an early stop says why), the step checkpoints no writer keeps
  //    (a shutdown's) removed, and the trained weights stored for ExportModel.
  proto::FitProgress last = FitProgressOf(
      *loop, std::max<int64_t>(0, std::min(loop->position().epoch, loop->epochs()) - 1),
      step_seconds);
  last.set_stop_reason(summary->stop_reason);
  Dispatch(sched::EpochEnded{run.job_id, last});
  const std::vector<std::string>& kept = checkpoints->kept();
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string file = entry.path().string();
    const std::string name = entry.path().filename().string();
    if (absl::StartsWith(name, "checkpoint-") &&
        std::find(kept.begin(), kept.end(), file) == kept.end()) {
      std::filesystem::remove(entry.path(), error);
    }
  }
  RETURN_IF_ERROR(context.sink->status());
  return Checkpoint(run, trainer, summary->last_loss);
}

absl::Status JobManager::Checkpoint(const Run& run, const executor::Trainer& trainer, double loss) {
  const absl::Status saved = SaveCheckpoint(*store_, run.job_id, trainer, loss);
  if (!IsDiskFull(saved)) return saved;
  fprintf(stderr,
          "headroomd: job %s: its checkpoint at step %lld is not stored (%s); it keeps "
          "training, and its previous checkpoint stays the one it resumes from\n",
          run.job_id.c_str(), static_cast<long long>(trainer.steps_run()),
          std::string(saved.message()).c_str());
  return absl::OkStatus();
}

absl::StatusOr<std::optional<proto::Checkpoint>> JobManager::GetCheckpoint(
    const std::string& job_id) const {
  RETURN_IF_ERROR(Get(job_id).status());
  return store_->GetCheckpoint(job_id);
}

absl::StatusOr<double> JobManager::RestoreCheckpoint(const std::string& job_id,
                                                     executor::Trainer& trainer) {
  // The parsed checkpoint is the one copy of the state in host memory; the trainer reads
  // its tensors in place, and it is gone before the first step.
  ASSIGN_OR_RETURN(std::optional<proto::Checkpoint> checkpoint, store_->GetCheckpoint(job_id));
  if (!checkpoint.has_value()) return 0.0;
  RETURN_IF_ERROR(trainer.RestoreState(static_cast<int64_t>(checkpoint->step()),
                                       StateViews(*checkpoint)));
  Dispatch(sched::Restored{job_id, checkpoint->step(), checkpoint->loss()});
  return checkpoint->loss();
}

std::string JobManager::RanksDir(const std::string& job_id) const {
  return absl::StrCat(store_->state_dir(), "/ranks/", job_id);
}

absl::Status JobManager::StoreRankCheckpoint(const Run& run, const std::string& path) {
  ASSIGN_OR_RETURN(const proto::Checkpoint checkpoint, ReadCheckpointFile(path));
  const absl::Status saved = store_->PutCheckpoint(checkpoint);
  if (!IsDiskFull(saved)) return saved;
  fprintf(stderr,
          "headroomd: job %s: its checkpoint at step %llu is not stored (%s); it keeps "
          "training, and its previous checkpoint stays the one it resumes from\n",
          run.job_id.c_str(), static_cast<unsigned long long>(checkpoint.step()),
          std::string(saved.message()).c_str());
  return absl::OkStatus();
}

absl::Status JobManager::RunRanks(Run& run) {
  const int ranks = static_cast<int>(RanksOf(run.spec));
  // 1. The job's directory, afresh: its spec, and the stored checkpoint every rank resumes
  //    from (what an earlier run left there, the daemon's or the ranks', is gone).
  const std::string dir = RanksDir(run.job_id);
  std::error_code error;
  std::filesystem::remove_all(dir, error);
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::UnavailableError(absl::StrCat("ranks' directory '", dir, "': ", error.message()));
  }
  RETURN_IF_ERROR(
      WriteFileContents(RankJobFile(dir, "spec.pb"), run.spec.SerializeAsString(), "job spec"));
  {
    ASSIGN_OR_RETURN(std::optional<proto::Checkpoint> checkpoint,
                     store_->GetCheckpoint(run.job_id));
    if (checkpoint.has_value()) {
      RETURN_IF_ERROR(WriteFileContents(RankJobFile(dir, "resume.pb"),
                                        checkpoint->SerializeAsString(), "checkpoint"));
      Dispatch(sched::Restored{run.job_id, checkpoint->step(), checkpoint->loss()});
    }
  }
  metrics_->ForgetJob(run.job_id);
  RETURN_IF_ERROR(metrics_->StartJob(run.job_id, device_, run.planned_peak_bytes * ranks));
  // 2. mpirun with a rank worker per rank (dist/launch.h's command line).
  dist::LaunchOptions launch;
  launch.ranks = ranks;
  launch.as_root = geteuid() == 0;
  launch.mpirun = options_.mpirun;
  ASSIGN_OR_RETURN(
      const std::vector<std::string> argv,
      dist::MpirunCommand(launch, {options_.rank_worker, absl::StrCat("--dir=", dir),
                                   absl::StrCat("--job=", run.job_id),
                                   absl::StrCat("--budget-bytes=", run.budget_bytes),
                                   absl::StrCat("--planned-peak-bytes=", run.planned_peak_bytes),
                                   absl::StrCat("--checkpoint-every=", run.checkpoint_interval)}));
  ASSIGN_OR_RETURN(const int pid,
                   StartLauncher(argv, RankJobFile(dir, "mpirun.log"), launch.as_root));
  // 3. Follow the ranks' logs until mpirun ends, or cancel or shutdown stops every rank.
  std::vector<RankLogReader> readers;
  std::vector<proto::RankProgress> latest(ranks);
  for (int r = 0; r < ranks; ++r) {
    readers.emplace_back(RankLogPath(dir, r));
    latest[r].set_rank(static_cast<uint32_t>(r));
  }
  // Returns the first error of reading the lines the ranks appended since the last call:
  // every rank's latest step into `latest` (and its metrics), then each of rank 0's steps
  // as the job's (StepDone, its loss the global batch's; its measured peak the ranks' sum).
  auto follow = [&]() -> absl::Status {
    std::vector<RankLine> rank0_steps;
    bool checkpointed = false;
    for (int r = 0; r < ranks; ++r) {
      for (const std::string& text : readers[r].NewLines()) {
        ASSIGN_OR_RETURN(RankLine line, ParseRankLine(r, text));
        if (line.kind == RankLine::Kind::kCheckpoint) checkpointed = true;
        if (line.kind != RankLine::Kind::kStep) continue;
        latest[r] = line.progress;
        profiler::RankObservation o;
        o.measured_peak_bytes = line.progress.arena_peak_bytes();
        o.resident_bytes = line.progress.resident_bytes();
        metrics_->ObserveRank(run.job_id, device_, r, o).IgnoreError();  // r < ranks <= max
        if (r == 0) rank0_steps.push_back(std::move(line));
      }
    }
    for (const RankLine& line : rank0_steps) {
      sched::StepDone step;
      step.job_id = run.job_id;
      step.step = line.progress.step();
      step.loss = line.progress.loss();
      step.step_seconds = line.step_seconds;
      for (const proto::RankProgress& p : latest)
        step.arena_high_water_bytes += p.arena_peak_bytes();
      profiler::StepObservation observed;
      observed.step_seconds = line.step_seconds;
      observed.measured_peak_bytes = step.arena_high_water_bytes;
      metrics_->ObserveStep(run.job_id, device_, observed).IgnoreError();  // finite seconds
      step.ranks = latest;
      Dispatch(step);
    }
    if (checkpointed) RETURN_IF_ERROR(StoreRankCheckpoint(run, RankJobFile(dir, "checkpoint.pb")));
    return absl::OkStatus();
  };
  int wait_status = 0;
  while (true) {
    const bool exited = waitpid(pid, &wait_status, WNOHANG) == pid;
    if (absl::Status s = follow(); !s.ok()) {
      if (!exited) StopLauncher(pid, 1);
      return s;
    }
    if (exited) break;
    if (run.control->cancel || run.control->interrupt) {
      // A shutdown resumes from the last checkpoint rank 0 wrote (the store has it).
      StopLauncher(pid, 1);
      if (run.control->cancel) return absl::CancelledError("cancelled");
      run.interrupted = true;
      return absl::OkStatus();
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  // 4. How it ended: every rank at the last step and rank 0's final checkpoint stored, or
  //    the rank that failed or died named.
  if (!WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0) {
    const std::string exit = WIFEXITED(wait_status)
                                 ? absl::StrCat("exited with status ", WEXITSTATUS(wait_status))
                                 : absl::StrCat("was killed by signal ", WTERMSIG(wait_status));
    return absl::AbortedError(RankFailure(dir, ranks, exit));
  }
  for (const proto::RankProgress& p : latest) {
    if (p.step() != run.spec.train().steps()) {
      return absl::InternalError(absl::StrCat("rank ", p.rank(), " of ", ranks,
                                              " ended without error at step ", p.step(), " of ",
                                              run.spec.train().steps()));
    }
  }
  std::filesystem::remove_all(dir, error);
  return absl::OkStatus();
}

absl::StatusOr<proto::ProfileResponse> JobManager::Profile(const proto::ProfileRequest& request,
                                                           const std::function<bool()>& stop) {
  // How often `stop` is looked at while the call waits: gRPC's IsCancelled has no event to
  // wait on.
  constexpr absl::Duration kCallerCheck = absl::Milliseconds(100);
  // 1. Check and plan it.
  ProfileCall call;
  call.backend = request.backend().empty() ? options_.backend : request.backend();
  if (call.backend != options_.backend) {
    return absl::InvalidArgumentError(absl::StrCat("backend: '", call.backend,
                                                   "', but this daemon runs ", device_));
  }
  call.request = request;
  *call.spec.mutable_model() = request.model();
  *call.spec.mutable_plan() = request.plan();
  call.spec.mutable_train()->set_seed(request.seed());
  ASSIGN_OR_RETURN(proto::PlanResponse plan, PlanSpec(call.spec, &call.budget_bytes));
  // 2. Hand it to the scheduler; the profile worker runs it once it fits, and the answer
  //    (its report, or why it was refused) wakes this call.
  std::string id;
  {
    absl::MutexLock lock(&mu_);
    id = absl::StrCat("profile-run-", ++profile_count_);
    profiles_[id] = std::move(call);
  }
  Dispatch(sched::ProfileRequested{id, Need(plan)});
  // 3. Wait for the answer; a caller that leaves has its profile dropped or stopped, and
  //    still waits for the answer (at most a node away), which ends the run's use of `call`.
  bool abandoned = false;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      ProfileCall& mine = profiles_.at(id);
      auto answered = [&mine] { return mine.result.has_value(); };
      bool done = true;
      if (abandoned || !stop) {
        mu_.Await(absl::Condition(&answered));
      } else {
        done = mu_.AwaitWithTimeout(absl::Condition(&answered), kCallerCheck);
      }
      if (done) {
        absl::StatusOr<proto::ProfileResponse> result = *std::move(mine.result);
        profiles_.erase(id);
        return result;
      }
    }
    if (stop()) {
      abandoned = true;
      Dispatch(sched::ProfileAbandoned{id});
    }
  }
}

void JobManager::ProfileWorkerLoop() {
  while (true) {
    std::string id;
    const ProfileCall* call = nullptr;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return workers_stop_ || !profile_runs_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (profile_runs_.empty()) return;
      id = profile_runs_.front();
      profile_runs_.pop_front();
      call = &profiles_.at(id);  // Its caller waits: it stays until answered.
    }
    absl::StatusOr<proto::ProfileResponse> result = RunProfile(*call);
    {
      // A run stopped by the scheduler answers with its reason (the caller left, shutdown).
      absl::MutexLock lock(&mu_);
      if (call->control->cancel && !result.ok() && !call->stop_reason.ok()) {
        result = call->stop_reason;
      }
    }
    // Its caller wakes with its memory already released.
    Decision done;
    {
      absl::MutexLock lock(&mu_);
      profiles_.at(id).result = std::move(result);
      done = Feed(sched::ProfileDone{id});
    }
    Store(done).IgnoreError();  // Store() reports its errors on stderr.
  }
}

absl::StatusOr<proto::ProfileResponse> JobManager::RunProfile(const ProfileCall& call) {
  // 1. Run it.
  auto run = [&]() -> absl::StatusOr<proto::ProfileResponse> {
    ASSIGN_OR_RETURN(graph::Graph g, GraphOf(call.request.model()));
    // On a GPU, CUPTI sees every physical allocation from before the backend exists.
    runner::PhysicalTrace physical(call.backend);
    ASSIGN_OR_RETURN(std::unique_ptr<executor::Backend> backend,
                     options_.make_backend(call.backend));
    ASSIGN_OR_RETURN(executor::TrainerOptions trainer_options,
                     runner::TrainerOptionsOf(call.spec.plan(), call.spec.train().seed(),
                                              call.backend));
    trainer_options.budget_bytes = call.budget_bytes;
    trainer_options.cancel = &call.control->cancel;
    trainer_options.check_rebuild_every = call.request.check_rebuild_every();
    runner::ProfileRunOptions run_options;
    run_options.steps = call.request.steps() == 0 ? 3 : call.request.steps();
    run_options.backend = call.backend;
    run_options.trace = call.request.trace();
    ASSIGN_OR_RETURN(runner::ProfileRun profile,
                     runner::RunProfile(g, backend.get(), trainer_options, run_options));
    physical.Finish(profile.report);
    profile.report.set_trace_json(std::move(profile.trace_json));
    return std::move(profile.report);
  };
  ASSIGN_OR_RETURN(proto::ProfileResponse report, run());
  // 2. Keep it.
  ASSIGN_OR_RETURN(std::string id, store_->NewProfileId());
  report.set_profile_id(id);
  proto::StoredProfile stored;
  stored.set_profile_id(id);
  stored.set_created_unix_seconds(UnixSeconds());
  *stored.mutable_request() = call.request;
  *stored.mutable_response() = report;
  stored.mutable_response()->clear_trace_json();
  RETURN_IF_ERROR(store_->PutProfile(stored));
  return report;
}

absl::StatusOr<proto::ListProfilesResponse> JobManager::ListProfiles(bool summaries_only) const {
  ASSIGN_OR_RETURN(std::vector<proto::StoredProfile> profiles, store_->LoadProfiles());
  proto::ListProfilesResponse response;
  for (proto::StoredProfile& p : profiles) {
    if (summaries_only) {
      p.mutable_response()->mutable_timeline()->clear_samples();
      p.mutable_response()->clear_op_costs();
      p.mutable_request()->mutable_model()->clear_graph();
    }
    *response.add_profiles() = std::move(p);
  }
  return response;
}

}  // namespace headroom::server
