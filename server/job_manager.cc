#include "server/job_manager.h"

#include <algorithm>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
#include "util/median.h"
#include "util/status_macros.h"

namespace headroom::server {
namespace {

constexpr uint64_t kUnlimited = std::numeric_limits<uint64_t>::max();
// Ended jobs whose metric series stay exported (older ones are forgotten).
constexpr size_t kKeptEndedSeries = 32;
constexpr uint32_t kDefaultPageSize = 100;

double UnixSeconds() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }

bool Ended(proto::JobState state) {
  return state == proto::JOB_STATE_SUCCEEDED || state == proto::JOB_STATE_FAILED ||
         state == proto::JOB_STATE_CANCELLED;
}

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

// Returns the checkpoint's tensors as the trainer restores them, borrowed from `c`.
std::vector<executor::StateTensorView> StateViews(const proto::Checkpoint& c) {
  std::vector<executor::StateTensorView> views;
  views.reserve(c.tensors_size());
  for (const proto::TensorValue& v : c.tensors()) {
    views.push_back({v.name(), absl::MakeConstSpan(v.shape().data(), v.shape().size()),
                     v.dtype(),
                     absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(v.data().data()),
                                         v.data().size())});
  }
  return views;
}

// The trainer options a spec asks for (events, cancel and budget are the caller's).
absl::StatusOr<executor::TrainerOptions> TrainerOptionsOf(const proto::JobSpec& spec) {
  executor::TrainerOptions o;
  o.seed = spec.train().seed() == 0 ? 1 : spec.train().seed();
  o.allow_offload = !spec.plan().disable_offload();
  o.host_memory = spec.plan().host_memory();
  const proto::Optimizer& opt = spec.plan().optimizer();
  if (opt.kind() != proto::Optimizer::KIND_UNSPECIFIED) o.optimizer = opt.kind();
  const bool adam = o.optimizer == proto::Optimizer::KIND_ADAM;
  o.optimizer_params.learning_rate =
      opt.learning_rate() > 0 ? opt.learning_rate() : (adam ? 1e-3 : 0.01);
  if (opt.momentum() > 0) o.optimizer_params.momentum = opt.momentum();
  if (opt.beta1() > 0) o.optimizer_params.beta1 = opt.beta1();
  if (opt.beta2() > 0) o.optimizer_params.beta2 = opt.beta2();
  if (opt.epsilon() > 0) o.optimizer_params.epsilon = opt.epsilon();
  o.optimizer_params.weight_decay = opt.weight_decay();
  ASSIGN_OR_RETURN(o.device, planner::DeviceSpecFromProto(spec.plan().device()));
  return o;
}

absl::StatusOr<graph::Graph> GraphOf(const proto::ModelSource& model) {
  ASSIGN_OR_RETURN(proto::GraphDef def, graph::ResolveModel(model));
  return graph::Graph::FromProto(def);
}

}  // namespace

// A job as the manager keeps it. Guarded by mu_, except the atomics (read by the executor).
struct JobManager::Job {
  proto::JobInfo info;
  proto::PlanResponse plan;
  // The budget its plan was chosen for (the spec's, or the device's memory).
  uint64_t budget_bytes = 0;
  proto::JobProgress progress;
  // Bumped on every change, for watchers.
  uint64_t version = 0;
  std::atomic<bool> cancel{false};
  std::vector<double> step_seconds;
  absl::Time last_write = absl::InfinitePast();
  // The timeline of its recorded steps, once one is complete.
  std::shared_ptr<const profiler::Timeline> timeline;
  std::shared_ptr<const profiler::StepLayout> layout;
  // The process's memory during its run against its plan (the timeline's process account).
  proto::ProcessMemory process;
  // What admission reserved for it while it runs (Need() when it started).
  uint64_t reserved_bytes = 0;
};

// What the worker needs of a job while it trains it, copied out of mu_.
struct JobManager::Run {
  std::string job_id;
  proto::JobSpec spec;
  uint64_t budget_bytes = 0;
  uint64_t planned_peak_bytes = 0;
  // What admission reserved for it (Need()).
  uint64_t reserved_bytes = 0;
  uint64_t checkpoint_interval = 0;
  std::atomic<bool>* cancel = nullptr;
  // Set when shutdown stopped it after a step, with its checkpoint stored.
  bool interrupted = false;
};

JobManager::JobManager(JobStore* store, profiler::Metrics* metrics, JobManagerOptions options)
    : store_(store),
      metrics_(metrics),
      options_(std::move(options)),
      device_(absl::StrCat(options_.backend, ":0")),
      fixed_cost_bytes_(options_.fixed_cost_bytes.value_or(options_.measured_fixed_cost_bytes)) {}

absl::StatusOr<std::unique_ptr<JobManager>> JobManager::Create(JobStore* store,
                                                               profiler::Metrics* metrics,
                                                               JobManagerOptions options) {
  if (!options.make_backend) return absl::InvalidArgumentError("JobManager: no make_backend");
  std::unique_ptr<JobManager> m(new JobManager(store, metrics, std::move(options)));
  RETURN_IF_ERROR(m->Recover());
  m->worker_ = std::thread([raw = m.get()] { raw->WorkerLoop(); });
  return m;
}

JobManager::~JobManager() { Shutdown(); }

absl::Status JobManager::Recover() {
  ASSIGN_OR_RETURN(std::vector<proto::JobInfo> stored, store_->LoadJobs());
  absl::MutexLock lock(&mu_);
  // Oldest first, so that the queue keeps submission order.
  for (auto it = stored.rbegin(); it != stored.rend(); ++it) {
    auto job = std::make_unique<Job>();
    job->info = *it;
    const bool was_running = job->info.state() == proto::JOB_STATE_RUNNING;
    if (!Ended(job->info.state())) {
      absl::StatusOr<proto::PlanResponse> plan = store_->GetPlan(job->info.job_id());
      absl::StatusOr<std::optional<proto::Checkpoint>> checkpoint =
          store_->GetCheckpoint(job->info.job_id());
      const std::string refusal = ResumeRefusal(job->info, plan, checkpoint);
      if (!refusal.empty()) {
        job->info.set_state(proto::JOB_STATE_FAILED);
        job->info.set_finished_unix_seconds(UnixSeconds());
        job->info.set_error(absl::StrCat("could not resume after a daemon restart: ", refusal));
      } else {
        job->plan = *plan;
        job->budget_bytes = plan->summary().budget_bytes();
        const uint64_t from = checkpoint->has_value() ? (*checkpoint)->step() : 0;
        job->info.set_state(proto::JOB_STATE_QUEUED);
        job->info.set_step(from);
        job->info.set_message(
            was_running ? absl::StrCat("resumes from step ", from, " after a daemon restart",
                                       checkpoint->has_value() ? "" : " (no checkpoint yet)")
                        : "");
        queue_.push_back(job->info.job_id());
      }
      RETURN_IF_ERROR(store_->PutJob(job->info));
    }
    job->progress.set_job_id(job->info.job_id());
    job->progress.set_state(job->info.state());
    job->progress.set_step(job->info.step());
    job->progress.set_total_steps(job->info.total_steps());
    job->progress.set_loss(job->info.loss());
    job->progress.set_measured_peak_bytes(job->info.measured_peak_bytes());
    job->progress.set_message(Ended(job->info.state()) ? job->info.error() : job->info.message());
    jobs_[job->info.job_id()] = std::move(job);
  }
  PublishCounts();
  return absl::OkStatus();
}

std::string JobManager::ResumeRefusal(
    const proto::JobInfo& info, const absl::StatusOr<proto::PlanResponse>& plan,
    const absl::StatusOr<std::optional<proto::Checkpoint>>& checkpoint) const {
  if (!plan.ok()) return std::string(plan.status().message());
  if (!checkpoint.ok()) return std::string(checkpoint.status().message());
  const std::string& backend = info.spec().train().backend();
  if (!backend.empty() && backend != options_.backend) {
    return absl::StrCat("it asks for backend '", backend, "', but this daemon runs ", device_);
  }
  const uint64_t need = Need(*plan);
  if (options_.device_memory_bytes > 0 && need > options_.device_memory_bytes) {
    return absl::StrCat("its plan's peak ", graph::HumanBytes(plan->summary().predicted_peak_bytes()),
                        " (", plan->summary().predicted_peak_bytes(), " bytes) with the fixed cost "
                        "exceeds device ", device_, "'s memory of ",
                        graph::HumanBytes(options_.device_memory_bytes), " (",
                        options_.device_memory_bytes, " bytes) now; submit it again");
  }
  return "";
}

void JobManager::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ && !worker_.joinable()) return;
    stopping_ = true;
    changed_.SignalAll();
  }
  if (worker_.joinable()) worker_.join();
}

uint64_t JobManager::Need(const proto::PlanResponse& plan) const {
  const proto::PlanSummary& summary = plan.summary();
  return summary.predicted_peak_bytes() +
         (summary.host_pool_in_budget() ? summary.host_pool_bytes() : 0) + fixed_cost_bytes_;
}

uint64_t JobManager::FreeBytes() const {
  if (options_.free_device_bytes) {
    absl::StatusOr<uint64_t> free = options_.free_device_bytes();
    return free.ok() ? *free : 0;
  }
  if (options_.device_memory_bytes == 0) return kUnlimited;
  return options_.device_memory_bytes - std::min(options_.device_memory_bytes, reserved_bytes_);
}

void JobManager::PublishCounts() {
  profiler::JobCounts counts;
  for (const auto& [id, job] : jobs_) {
    switch (job->info.state()) {
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

void JobManager::UpdateJob(const std::string& job_id, const std::function<void(Job&)>& change,
                           bool force) {
  proto::JobInfo info;
  {
    absl::MutexLock lock(&mu_);
    Job& job = *jobs_.at(job_id);
    change(job);
    job.progress.set_state(job.info.state());
    job.progress.set_step(job.info.step());
    job.progress.set_total_steps(job.info.total_steps());
    job.progress.set_loss(job.info.loss());
    job.progress.set_measured_peak_bytes(job.info.measured_peak_bytes());
    job.progress.set_message(Ended(job.info.state()) ? job.info.error() : job.info.message());
    ++job.version;
    changed_.SignalAll();
    PublishCounts();
    const absl::Time now = absl::Now();
    if (!force && now - job.last_write < options_.progress_write_interval) return;
    job.last_write = now;
    info = job.info;
  }
  // A failed write loses only progress that the next one carries; say so on stderr.
  if (absl::Status s = store_->PutJob(info); !s.ok()) {
    fprintf(stderr, "headroomd: storing job %s: %s\n", job_id.c_str(),
            std::string(s.message()).c_str());
  }
}

absl::StatusOr<proto::PlanResponse> JobManager::PlanSpec(const proto::JobSpec& spec,
                                                         uint64_t* budget_bytes) const {
  ASSIGN_OR_RETURN(graph::Graph g, GraphOf(spec.model()));
  proto::PlanOptions options = spec.plan();
  const uint64_t fixed_cost = fixed_cost_bytes_;
  // Without a budget, the plan gets the device's memory less the fixed cost.
  const uint64_t usable = options_.device_memory_bytes -
                          std::min(options_.device_memory_bytes, fixed_cost);
  const bool device_budget = options.budget_bytes() == 0 && options_.device_memory_bytes > 0;
  if (device_budget) options.set_budget_bytes(std::max<uint64_t>(usable, 1));
  absl::StatusOr<proto::PlanResponse> plan =
      planner::AnswerPlan(g, options, /*cost=*/nullptr, options_.plan_backend);
  if (!plan.ok() && device_budget) {
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

absl::StatusOr<proto::SubmitJobResponse> JobManager::Submit(const proto::JobSpec& spec) {
  // 1. Check the spec and plan it: every error here is the caller's.
  if (spec.train().steps() == 0) {
    return absl::InvalidArgumentError("spec.train.steps: must be at least 1");
  }
  const std::string backend = spec.train().backend().empty() ? options_.backend : spec.train().backend();
  if (backend != options_.backend) {
    return absl::InvalidArgumentError(absl::StrCat("spec.train.backend: '", backend,
                                                   "', but this daemon runs ", device_));
  }
  RETURN_IF_ERROR(TrainerOptionsOf(spec).status());
  uint64_t budget = 0;
  ASSIGN_OR_RETURN(proto::PlanResponse plan, PlanSpec(spec, &budget));
  // 2. Store it, then queue it.
  ASSIGN_OR_RETURN(std::string id, store_->NewJobId());
  auto job = std::make_unique<Job>();
  job->info.set_job_id(id);
  job->info.set_name(spec.name().empty() ? id : spec.name());
  job->info.set_state(proto::JOB_STATE_QUEUED);
  job->info.set_submitted_unix_seconds(UnixSeconds());
  job->info.set_total_steps(spec.train().steps());
  job->info.set_planned_peak_bytes(plan.summary().predicted_peak_bytes());
  job->info.set_offloaded_bytes_per_step(plan.summary().offloaded_bytes());
  job->info.set_device(device_);
  *job->info.mutable_spec() = spec;
  job->plan = plan;
  job->budget_bytes = budget;
  job->progress.set_job_id(id);
  job->progress.set_state(proto::JOB_STATE_QUEUED);
  job->progress.set_total_steps(spec.train().steps());
  RETURN_IF_ERROR(store_->PutPlan(id, plan));
  RETURN_IF_ERROR(store_->PutJob(job->info));
  proto::SubmitJobResponse response;
  response.set_job_id(id);
  response.set_state(proto::JOB_STATE_QUEUED);
  *response.mutable_plan() = std::move(plan);
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("headroomd is shutting down; the job stays queued");
  jobs_[id] = std::move(job);
  queue_.push_back(id);
  PublishCounts();
  changed_.SignalAll();
  return response;
}

absl::StatusOr<proto::JobState> JobManager::Cancel(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  Job& job = *it->second;
  if (job.info.state() == proto::JOB_STATE_QUEUED) {
    queue_.erase(std::remove(queue_.begin(), queue_.end(), job_id), queue_.end());
    job.info.set_state(proto::JOB_STATE_CANCELLED);
    job.info.set_error("cancelled while queued");
    job.info.set_finished_unix_seconds(UnixSeconds());
    job.progress.set_state(job.info.state());
    job.progress.set_message(job.info.error());
    ++job.version;
    changed_.SignalAll();
    PublishCounts();
    proto::JobInfo info = job.info;
    mu_.Unlock();
    absl::Status s = store_->PutJob(info);
    store_->DeleteCheckpoint(job_id).IgnoreError();
    mu_.Lock();
    if (!s.ok()) return s;
    return proto::JOB_STATE_CANCELLED;
  }
  if (job.info.state() == proto::JOB_STATE_RUNNING) {
    job.cancel = true;
    // The run stops before its next node; wait until its arena is freed and it has ended.
    auto ended = [&job] { return Ended(job.info.state()); };
    mu_.AwaitWithTimeout(absl::Condition(&ended), absl::Seconds(60));
  }
  return job.info.state();
}

absl::StatusOr<proto::JobInfo> JobManager::Get(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  return it->second->info;
}

absl::StatusOr<proto::ListJobsResponse> JobManager::List(
    const proto::ListJobsRequest& request) const {
  size_t offset = 0;
  if (!request.page_token().empty() && !absl::SimpleAtoi(request.page_token(), &offset)) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_token: '", request.page_token(), "' is not one this daemon gave"));
  }
  const size_t page = request.page_size() == 0 ? kDefaultPageSize : request.page_size();
  proto::ListJobsResponse response;
  absl::MutexLock lock(&mu_);
  size_t index = 0;
  // Ids grow with submission, so the reverse id order is newest first.
  for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) {
    const proto::JobInfo& info = it->second->info;
    if (!request.states().empty() &&
        std::find(request.states().begin(), request.states().end(), info.state()) ==
            request.states().end()) {
      continue;
    }
    if (index >= offset + page) {
      response.set_next_page_token(absl::StrCat(offset + page));
      break;
    }
    if (index++ >= offset) *response.add_jobs() = info;
  }
  return response;
}

absl::Status JobManager::Watch(const std::string& job_id,
                               const std::function<bool(const proto::JobProgress&)>& write,
                               const std::function<bool()>& stop) const {
  uint64_t seen = 0;
  bool first = true;
  while (true) {
    proto::JobProgress progress;
    {
      absl::MutexLock lock(&mu_);
      auto it = jobs_.find(job_id);
      if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
      const Job& job = *it->second;
      if (!first && job.version == seen) {
        changed_.WaitWithTimeout(&mu_, absl::Milliseconds(200));
        if (job.version == seen) {
          if (stop()) return absl::CancelledError("the watcher went away");
          continue;
        }
      }
      first = false;
      seen = job.version;
      progress = job.progress;
    }
    if (!write(progress)) return absl::CancelledError("the watcher went away");
    if (Ended(progress.state())) return absl::OkStatus();
  }
}

absl::StatusOr<proto::MemoryTimeline> JobManager::Timeline(const std::string& job_id,
                                                           uint32_t max_samples) const {
  std::shared_ptr<const profiler::Timeline> timeline;
  std::shared_ptr<const profiler::StepLayout> layout;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
    timeline = it->second->timeline;
    layout = it->second->layout;
  }
  if (timeline != nullptr) {
    proto::MemoryTimeline out = timeline->ToProto(*layout, max_samples);
    absl::MutexLock lock(&mu_);
    *out.mutable_process() = jobs_.at(job_id)->process;
    return out;
  }
  // A job of an earlier run of the daemon: its stored timeline.
  absl::StatusOr<proto::MemoryTimeline> stored = store_->GetTimeline(job_id);
  if (absl::IsNotFound(stored.status())) {
    return absl::NotFoundError(
        absl::StrCat("job '", job_id, "' has no timeline yet: no step has finished"));
  }
  if (stored.ok()) profiler::ThinSamples(*stored, max_samples);
  return stored;
}

void JobManager::WorkerLoop() {
  while (true) {
    std::string job_id;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      Job& job = *jobs_.at(queue_.front());
      // Admission: the head of the queue starts once its plan and the fixed cost fit.
      const uint64_t need = Need(job.plan);
      const uint64_t free = FreeBytes();
      if (need > free) {
        const std::string wait = absl::StrCat("waiting for device memory: needs ",
                                              graph::HumanBytes(need), ", ",
                                              graph::HumanBytes(free), " free");
        if (job.info.message() != wait) {
          job.info.set_message(wait);
          job.progress.set_message(wait);
          ++job.version;
          changed_.SignalAll();
        }
        changed_.WaitWithTimeout(&mu_, options_.admission_poll);
        continue;
      }
      job_id = queue_.front();
      queue_.pop_front();
      reserved_bytes_ += need;
      job.reserved_bytes = need;
    }
    RunJob(job_id);
  }
}

void JobManager::RunJob(const std::string& job_id) {
  Run run;
  run.job_id = job_id;
  {
    absl::MutexLock lock(&mu_);
    Job& job = *jobs_.at(job_id);
    run.spec = job.info.spec();
    run.budget_bytes = job.budget_bytes;
    run.planned_peak_bytes = job.info.planned_peak_bytes();
    run.reserved_bytes = job.reserved_bytes;
    run.checkpoint_interval = run.spec.train().checkpoint_interval_steps() > 0
                                  ? run.spec.train().checkpoint_interval_steps()
                                  : options_.checkpoint_interval_steps;
    run.cancel = &job.cancel;
  }
  UpdateJob(job_id, [](Job& job) {
    job.info.set_state(proto::JOB_STATE_RUNNING);
    job.info.set_message("");
  }, /*force=*/true);

  const absl::Status status = TrainJob(run);  // the trainer and its arena are gone after this

  proto::MemoryTimeline timeline;
  bool has_timeline = false;
  UpdateJob(job_id, [&](Job& job) {
    // A cancel that came after the last step leaves the job finished.
    if (job.cancel && !status.ok()) {
      job.info.set_state(proto::JOB_STATE_CANCELLED);
      job.info.set_error(absl::StrCat("cancelled at step ", job.info.step()));
    } else if (run.interrupted) {
      job.info.set_state(proto::JOB_STATE_QUEUED);
      job.info.set_message(absl::StrCat("stopped by a daemon shutdown at step ",
                                        job.info.step(), "; resumes when headroomd starts"));
    } else if (!status.ok()) {
      job.info.set_state(proto::JOB_STATE_FAILED);
      job.info.set_error(std::string(status.message()));
    } else {
      job.info.set_state(proto::JOB_STATE_SUCCEEDED);
    }
    if (Ended(job.info.state())) job.info.set_finished_unix_seconds(UnixSeconds());
    if (job.timeline != nullptr) {
      timeline = job.timeline->ToProto(*job.layout, 2000);
      *timeline.mutable_process() = job.process;
      has_timeline = true;
    }
    reserved_bytes_ -= std::min(reserved_bytes_, run.reserved_bytes);
  }, /*force=*/true);
  if (has_timeline) store_->PutTimeline(job_id, timeline).IgnoreError();
  absl::MutexLock lock(&mu_);
  if (Ended(jobs_.at(job_id)->info.state())) {
    mu_.Unlock();
    store_->DeleteCheckpoint(job_id).IgnoreError();
    mu_.Lock();
    // Keep the series of the latest ended jobs only.
    ended_with_series_.push_back(job_id);
    while (ended_with_series_.size() > kKeptEndedSeries) {
      metrics_->ForgetJob(ended_with_series_.front());
      ended_with_series_.pop_front();
    }
  }
}

absl::Status JobManager::TrainJob(Run& run) {
  // 1. The graph (an ONNX model with its weights), the backend and the trainer, under the
  //    plan the job was admitted with.
  ASSIGN_OR_RETURN(graph::ResolvedModel model, graph::ResolveModelWithValues(run.spec.model()));
  ASSIGN_OR_RETURN(graph::Graph g, graph::Graph::FromProto(model.graph));
  const std::string backend_name =
      run.spec.train().backend().empty() ? options_.backend : run.spec.train().backend();
  ASSIGN_OR_RETURN(std::unique_ptr<executor::Backend> backend,
                   options_.make_backend(backend_name));
  ASSIGN_OR_RETURN(executor::TrainerOptions trainer_options, TrainerOptionsOf(run.spec));
  trainer_options.budget_bytes = run.budget_bytes;
  trainer_options.cancel = run.cancel;
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

  // 2. Resume from the checkpoint, if there is one. The parsed checkpoint is the one copy of
  //    the state in host memory; the trainer reads its tensors in place, and it is gone
  //    before the first step.
  double loss = 0;
  {
    ASSIGN_OR_RETURN(std::optional<proto::Checkpoint> checkpoint,
                     store_->GetCheckpoint(run.job_id));
    if (checkpoint.has_value()) {
      RETURN_IF_ERROR(trainer->RestoreState(static_cast<int64_t>(checkpoint->step()),
                                            StateViews(*checkpoint)));
      loss = checkpoint->loss();
      UpdateJob(run.job_id, [&](Job& job) {
        job.info.set_resumed_from_step(checkpoint->step());
        job.info.set_step(checkpoint->step());
        job.info.set_loss(checkpoint->loss());
      }, /*force=*/true);
    }
  }
  window.set_first(trainer->steps_run());
  metrics_->ForgetJob(run.job_id);
  RETURN_IF_ERROR(metrics_->StartJob(run.job_id, device_, run.planned_peak_bytes));

  // 3. The steps: progress after each, a checkpoint every interval.
  const int64_t total = static_cast<int64_t>(run.spec.train().steps());
  while (trainer->steps_run() < total) {
    bool stopping;
    {
      absl::MutexLock lock(&mu_);
      stopping = stopping_;
    }
    if (stopping) {
      RETURN_IF_ERROR(SaveCheckpoint(*store_, run.job_id, *trainer, loss));
      run.interrupted = true;
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(executor::StepResult r, trainer->Step());
    loss = r.loss;
    std::shared_ptr<const profiler::Timeline> timeline;
    if (window.Keeps(r.step)) {
      absl::StatusOr<profiler::Timeline> built = profiler::Timeline::Build(window.log(), *layout);
      if (built.ok()) timeline = std::make_shared<const profiler::Timeline>(*std::move(built));
    }
    const profiler::StepObservation& observed = sink.last_step();
    const int64_t done = trainer->steps_run();
    const proto::ProcessMemory account =
        process.Account(trainer->plan().peak_bytes, trainer->executor().host_pool_bytes(),
                        layout.get());
    UpdateJob(run.job_id, [&](Job& job) {
      job.process = account;
      job.info.set_step(done);
      job.info.set_loss(r.loss);
      job.info.set_measured_peak_bytes(
          std::max<uint64_t>(job.info.measured_peak_bytes(), r.arena_high_water_bytes));
      job.step_seconds.push_back(r.seconds);
      job.info.set_median_step_seconds(Median(job.step_seconds));
      job.progress.set_step_seconds(r.seconds);
      job.progress.clear_memory_by_role();
      std::map<proto::TensorRole, uint64_t> by_role;  // Planned and unplanned scratch meet.
      for (profiler::MemoryRole role : profiler::kAllMemoryRoles) {
        const std::optional<proto::TensorRole> tensor_role = TensorRoleOf(role);
        if (tensor_role.has_value() && observed.bytes(role) > 0) {
          by_role[*tensor_role] += observed.bytes(role);
        }
      }
      for (const auto& [tensor_role, bytes] : by_role) {
        proto::RoleBytes* b = job.progress.add_memory_by_role();
        b->set_role(tensor_role);
        b->set_bytes(bytes);
      }
      if (timeline != nullptr) {
        job.timeline = timeline;
        job.layout = layout;
      }
    }, /*force=*/false);
    if (done < total && done % static_cast<int64_t>(run.checkpoint_interval) == 0) {
      RETURN_IF_ERROR(SaveCheckpoint(*store_, run.job_id, *trainer, loss));
    }
  }
  return sink.status();
}

absl::StatusOr<proto::ProfileResponse> JobManager::Profile(const proto::ProfileRequest& request) {
  // 1. Check and plan it; reserve its peak on the device.
  const std::string backend_name = request.backend().empty() ? options_.backend : request.backend();
  if (backend_name != options_.backend) {
    return absl::InvalidArgumentError(absl::StrCat("backend: '", backend_name,
                                                   "', but this daemon runs ", device_));
  }
  proto::JobSpec spec;
  *spec.mutable_model() = request.model();
  *spec.mutable_plan() = request.plan();
  spec.mutable_train()->set_seed(request.seed());
  uint64_t budget = 0;
  ASSIGN_OR_RETURN(proto::PlanResponse plan, PlanSpec(spec, &budget));
  uint64_t need = 0;
  {
    absl::MutexLock lock(&mu_);
    const uint64_t free = FreeBytes();
    need = Need(plan);
    if (need > free) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "device ", device_, " has ", graph::HumanBytes(free), " free; the profile needs ",
          graph::HumanBytes(need), ", its plan and the fixed cost of ",
          graph::HumanBytes(fixed_cost_bytes_), " (try again when the running job ends)"));
    }
    reserved_bytes_ += need;
  }
  // 2. Run it.
  auto run = [&]() -> absl::StatusOr<proto::ProfileResponse> {
    ASSIGN_OR_RETURN(graph::Graph g, GraphOf(request.model()));
    // On a GPU, CUPTI sees every physical allocation from before the backend exists.
    runner::PhysicalTrace physical(backend_name);
    ASSIGN_OR_RETURN(std::unique_ptr<executor::Backend> backend,
                     options_.make_backend(backend_name));
    ASSIGN_OR_RETURN(executor::TrainerOptions trainer_options, TrainerOptionsOf(spec));
    trainer_options.budget_bytes = budget;
    runner::ProfileRunOptions run_options;
    run_options.steps = request.steps() == 0 ? 3 : request.steps();
    run_options.backend = backend_name;
    run_options.trace = request.trace();
    ASSIGN_OR_RETURN(runner::ProfileRun profile,
                     runner::RunProfile(g, backend.get(), trainer_options, run_options));
    physical.Finish(profile.report);
    profile.report.set_trace_json(std::move(profile.trace_json));
    return std::move(profile.report);
  };
  absl::StatusOr<proto::ProfileResponse> report = run();
  {
    absl::MutexLock lock(&mu_);
    reserved_bytes_ -= std::min(reserved_bytes_, need);
    changed_.SignalAll();
  }
  if (!report.ok()) return report.status();
  // 3. Keep it.
  ASSIGN_OR_RETURN(std::string id, store_->NewProfileId());
  report->set_profile_id(id);
  proto::StoredProfile stored;
  stored.set_profile_id(id);
  stored.set_created_unix_seconds(UnixSeconds());
  *stored.mutable_request() = request;
  *stored.mutable_response() = *report;
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
