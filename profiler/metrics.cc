#include "profiler/metrics.h"

#include <cmath>
#include <exception>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "util/status_macros.h"

namespace headroom::profiler {
namespace {

// StepObservation::bytes() and JobSeries::role_bytes index by the enum value.
constexpr bool RolesInEnumOrder() {
  for (size_t i = 0; i < kAllMemoryRoles.size(); ++i) {
    if (static_cast<size_t>(kAllMemoryRoles[i]) != i) return false;
  }
  return true;
}
static_assert(RolesInEnumOrder(), "kAllMemoryRoles must list the roles in enum order");

// headroom_jobs' state label values, in JobCounts' field order.
constexpr std::array<const char*, 5> kJobStateNames = {"queued", "running", "succeeded",
                                                       "failed", "cancelled"};

constexpr char kLabelValueExtraChars[] = "_.:/@-";

// Returns "what: <exception message>" as an Internal status.
absl::Status InternalFromException(absl::string_view what, const std::exception& e) {
  return absl::InternalError(absl::StrCat(what, ": prometheus-cpp threw: ", e.what()));
}

absl::Status ValidateSeconds(absl::string_view field, double seconds) {
  if (std::isfinite(seconds) && seconds >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("step observation: ", field, " is ", seconds, ", needs a finite value >= 0"));
}

// Returns the family `builder` registers in `registry` as `name` with `help`. Throws as
// prometheus-cpp does (a name registered twice).
template <typename Builder>
auto* Family(Builder builder, prometheus::Registry& registry, const std::string& name,
             const std::string& help) {
  return &builder.Name(name).Help(help).Register(registry);
}

}  // namespace

std::vector<double> StepDurationBucketsSeconds() {
  std::vector<double> bounds;
  for (double decade : {0.001, 0.01, 0.1, 1.0, 10.0}) {
    for (double step : {1.0, 2.5, 5.0}) bounds.push_back(decade * step);
  }
  bounds.push_back(100.0);
  return bounds;
}

absl::Status ValidateLabelValue(const std::string& label_name, const std::string& value) {
  if (value.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(label_name, " label value is empty"));
  }
  if (value.size() > kMaxLabelValueBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(label_name, " label value '", absl::CHexEscape(value.substr(0, 32)),
                     "...' has ", value.size(), " bytes, at most ", kMaxLabelValueBytes,
                     " allowed"));
  }
  for (size_t i = 0; i < value.size(); ++i) {
    const char c = value[i];
    if (absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
        absl::string_view(kLabelValueExtraChars).find(c) != absl::string_view::npos) {
      continue;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        label_name, " label value '", absl::CHexEscape(value), "' has '",
        absl::CHexEscape(std::string(1, c)), "' at byte ", i,
        "; allowed are ASCII letters, digits and \"", kLabelValueExtraChars, "\""));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Metrics>> Metrics::Create() {
  auto registry = std::make_shared<prometheus::Registry>(
      prometheus::Registry::InsertBehavior::Throw);
  Families f;
  JobStateGauges job_state_gauges{};
  try {
    // Per job and device.
    f.job_memory_bytes = Family(
        prometheus::BuildGauge(), *registry, "headroom_job_memory_bytes",
        "Bytes a job held at the end of its last observed step, by memory role; role "
        "host_offload counts host memory, every other role device memory.");
    f.planned_peak_bytes = Family(
        prometheus::BuildGauge(), *registry, "headroom_planned_peak_bytes",
        "Peak device memory the planner predicted for a job's step.");
    f.measured_peak_bytes = Family(
        prometheus::BuildGauge(), *registry, "headroom_measured_peak_bytes",
        "Peak device memory measured during a job's last observed step.");
    f.offloaded_bytes = Family(
        prometheus::BuildCounter(), *registry, "headroom_offloaded_bytes_total",
        "Bytes a job copied from device to host memory (offloaded activations).");
    f.prefetched_bytes = Family(
        prometheus::BuildCounter(), *registry, "headroom_prefetched_bytes_total",
        "Bytes a job copied from host back to device memory (prefetched activations).");
    f.recompute_seconds = Family(
        prometheus::BuildCounter(), *registry, "headroom_recompute_seconds_total",
        "Seconds a job spent recomputing activations it dropped to save memory.");
    f.step_duration_seconds = Family(
        prometheus::BuildHistogram(), *registry, "headroom_step_duration_seconds",
        "Wall time of a job's training steps; _count is the number of steps.");
    f.epoch = Family(prometheus::BuildGauge(), *registry, "headroom_job_epoch",
                     "The epoch (from 1) of a dataset job's last step.");
    f.eval_accuracy =
        Family(prometheus::BuildGauge(), *registry, "headroom_job_eval_accuracy",
               "Top-1 accuracy (a fraction) of a dataset job's last evaluation on held-out data.");
    f.eval_loss = Family(prometheus::BuildGauge(), *registry, "headroom_job_eval_loss",
                         "Mean cross-entropy of a dataset job's last evaluation on held-out "
                         "data.");
    f.input_wait_seconds =
        Family(prometheus::BuildCounter(), *registry, "headroom_job_input_wait_seconds_total",
               "Seconds a dataset job's steps waited for the input pipeline's batches.");
    f.rank_resident_bytes =
        Family(prometheus::BuildGauge(), *registry, "headroom_rank_resident_bytes",
               "Resident memory of one rank's process of a data-parallel job after its last "
               "step (the OS's VmRSS).");
    // Daemon-wide.
    f.jobs = Family(
        prometheus::BuildGauge(), *registry, "headroom_jobs",
        "Jobs the daemon keeps, by state.");
    f.device_memory_used_bytes = Family(
        prometheus::BuildGauge(), *registry, "headroom_device_memory_used_bytes",
        "Physical device memory in use, as the driver reports it (all processes).");
    f.device_memory_total_bytes = Family(
        prometheus::BuildGauge(), *registry, "headroom_device_memory_total_bytes",
        "Physical device memory capacity, as the driver reports it.");
    for (size_t i = 0; i < kJobStateNames.size(); ++i) {
      job_state_gauges[i] = &f.jobs->Add({{"state", kJobStateNames[i]}});
    }
  } catch (const std::exception& e) {
    return InternalFromException("registering Headroom's metric families", e);
  }
  return std::unique_ptr<Metrics>(
      new Metrics(std::move(registry), f, job_state_gauges));
}

Metrics::Metrics(std::shared_ptr<prometheus::Registry> registry, Families families,
                 JobStateGauges job_state_gauges)
    : registry_(std::move(registry)),
      families_(families),
      job_state_gauges_(job_state_gauges),
      step_buckets_seconds_(StepDurationBucketsSeconds()) {}

Metrics::~Metrics() = default;

absl::Status Metrics::StartJob(const std::string& job, const std::string& device,
                               uint64_t planned_peak_bytes) {
  if (absl::Status s = ValidateLabelValue("job", job); !s.ok()) return s;
  if (absl::Status s = ValidateLabelValue("device", device); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = jobs_.try_emplace(std::make_pair(job, device));
  if (!inserted) {
    return absl::AlreadyExistsError(absl::StrCat("job '", job, "' on device '", device,
                                                 "' already started; ForgetJob it first"));
  }
  try {
    AddJobSeries(job, device, it->second);
  } catch (const std::exception& e) {
    RemoveJobSeries(it->second);
    jobs_.erase(it);
    return InternalFromException(
        absl::StrCat("adding the series of job '", job, "' on device '", device, "'"), e);
  }
  it->second.planned_peak_bytes->Set(static_cast<double>(planned_peak_bytes));
  return absl::OkStatus();
}

void Metrics::AddJobSeries(const std::string& job, const std::string& device,
                           JobSeries& series) {
  const prometheus::Labels labels = {{"device", device}, {"job", job}};
  for (MemoryRole role : kAllMemoryRoles) {
    prometheus::Labels role_labels = labels;
    role_labels.emplace("role", MemoryRoleName(role));
    series.role_bytes[static_cast<size_t>(role)] = &families_.job_memory_bytes->Add(role_labels);
  }
  series.planned_peak_bytes = &families_.planned_peak_bytes->Add(labels);
  series.measured_peak_bytes = &families_.measured_peak_bytes->Add(labels);
  series.offloaded_bytes = &families_.offloaded_bytes->Add(labels);
  series.prefetched_bytes = &families_.prefetched_bytes->Add(labels);
  series.recompute_seconds = &families_.recompute_seconds->Add(labels);
  series.step_duration_seconds =
      &families_.step_duration_seconds->Add(labels, step_buckets_seconds_);
}

namespace {

// Removes `metric` from `family` unless it was never added (null).
template <typename T>
void RemoveIfAdded(prometheus::Family<T>* family, T* metric) {
  if (metric != nullptr) family->Remove(metric);
}

}  // namespace

void Metrics::RemoveJobSeries(const JobSeries& series) {
  for (prometheus::Gauge* gauge : series.role_bytes) {
    RemoveIfAdded(families_.job_memory_bytes, gauge);
  }
  RemoveIfAdded(families_.planned_peak_bytes, series.planned_peak_bytes);
  RemoveIfAdded(families_.measured_peak_bytes, series.measured_peak_bytes);
  RemoveIfAdded(families_.offloaded_bytes, series.offloaded_bytes);
  RemoveIfAdded(families_.prefetched_bytes, series.prefetched_bytes);
  RemoveIfAdded(families_.recompute_seconds, series.recompute_seconds);
  RemoveIfAdded(families_.step_duration_seconds, series.step_duration_seconds);
  RemoveIfAdded(families_.epoch, series.epoch);
  RemoveIfAdded(families_.eval_accuracy, series.eval_accuracy);
  RemoveIfAdded(families_.eval_loss, series.eval_loss);
  RemoveIfAdded(families_.input_wait_seconds, series.input_wait_seconds);
  for (const auto& [rank, r] : series.ranks) {
    RemoveIfAdded(families_.measured_peak_bytes, r.measured_peak_bytes);
    RemoveIfAdded(families_.rank_resident_bytes, r.resident_bytes);
  }
}

absl::StatusOr<Metrics::JobSeries*> Metrics::FindJob(const std::string& job,
                                                     const std::string& device) {
  auto it = jobs_.find(std::make_pair(job, device));
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("job '", job, "' on device '", device,
                                            "' has no metrics: StartJob was not called, or "
                                            "the job was forgotten"));
  }
  return &it->second;
}

absl::Status Metrics::ObserveStep(const std::string& job, const std::string& device,
                                  const StepObservation& step) {
  if (absl::Status s = ValidateSeconds("step_seconds", step.step_seconds); !s.ok()) return s;
  if (absl::Status s = ValidateSeconds("recompute_seconds", step.recompute_seconds); !s.ok()) {
    return s;
  }
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(JobSeries* const found, FindJob(job, device));
  const JobSeries& series = *found;
  for (MemoryRole role : kAllMemoryRoles) {
    series.role_bytes[static_cast<size_t>(role)]->Set(static_cast<double>(step.bytes(role)));
  }
  series.measured_peak_bytes->Set(static_cast<double>(step.measured_peak_bytes));
  series.offloaded_bytes->Increment(static_cast<double>(step.offloaded_bytes));
  series.prefetched_bytes->Increment(static_cast<double>(step.prefetched_bytes));
  series.recompute_seconds->Increment(step.recompute_seconds);
  series.step_duration_seconds->Observe(step.step_seconds);
  return absl::OkStatus();
}

absl::Status Metrics::ObserveFit(const std::string& job, const std::string& device,
                                 const FitObservation& fit) {
  if (!std::isfinite(fit.input_wait_seconds) || fit.input_wait_seconds < 0) {
    return absl::InvalidArgumentError(absl::StrCat("fit observation: input_wait_seconds is ",
                                                   fit.input_wait_seconds,
                                                   ", needs a finite value >= 0"));
  }
  if (fit.evaluated && !(std::isfinite(fit.eval_loss) && std::isfinite(fit.eval_accuracy))) {
    return absl::InvalidArgumentError(absl::StrCat("fit observation: eval loss ", fit.eval_loss,
                                                   " and accuracy ", fit.eval_accuracy,
                                                   " must be finite"));
  }
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(JobSeries* const found, FindJob(job, device));
  JobSeries& series = *found;
  if (series.epoch == nullptr) {
    const prometheus::Labels labels = {{"device", device}, {"job", job}};
    try {
      series.epoch = &families_.epoch->Add(labels);
      series.eval_accuracy = &families_.eval_accuracy->Add(labels);
      series.eval_loss = &families_.eval_loss->Add(labels);
      series.input_wait_seconds = &families_.input_wait_seconds->Add(labels);
    } catch (const std::exception& e) {
      return InternalFromException(
          absl::StrCat("adding the fit series of job '", job, "' on device '", device, "'"), e);
    }
  }
  series.epoch->Set(static_cast<double>(fit.epoch));
  if (fit.evaluated) {
    series.eval_accuracy->Set(fit.eval_accuracy);
    series.eval_loss->Set(fit.eval_loss);
  }
  series.input_wait_seconds->Increment(fit.input_wait_seconds);
  return absl::OkStatus();
}

absl::Status Metrics::ObserveRank(const std::string& job, const std::string& device, int rank,
                                  const RankObservation& observed) {
  if (rank < 0 || rank >= kMaxMetricRanks) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " of job '", job, "' is outside [0, ", kMaxMetricRanks, ")"));
  }
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(JobSeries* const found, FindJob(job, device));
  JobSeries::RankSeries& series = found->ranks[rank];
  if (series.measured_peak_bytes == nullptr) {
    const prometheus::Labels labels = {
        {"device", device}, {"job", job}, {"rank", std::to_string(rank)}};
    try {
      series.measured_peak_bytes = &families_.measured_peak_bytes->Add(labels);
      series.resident_bytes = &families_.rank_resident_bytes->Add(labels);
    } catch (const std::exception& e) {
      return InternalFromException(
          absl::StrCat("adding the series of rank ", rank, " of job '", job, "'"), e);
    }
  }
  series.measured_peak_bytes->Set(static_cast<double>(observed.measured_peak_bytes));
  series.resident_bytes->Set(static_cast<double>(observed.resident_bytes));
  return absl::OkStatus();
}

int Metrics::ForgetJob(const std::string& job) {
  absl::MutexLock lock(&mu_);
  int forgotten = 0;
  // The job's devices are adjacent, starting at (job, "").
  auto it = jobs_.lower_bound(std::make_pair(job, std::string()));
  while (it != jobs_.end() && it->first.first == job) {
    RemoveJobSeries(it->second);
    it = jobs_.erase(it);
    ++forgotten;
  }
  return forgotten;
}

absl::Status Metrics::SetJobCounts(const JobCounts& counts) {
  const std::array<int64_t, 5> by_state = {counts.queued, counts.running, counts.succeeded,
                                           counts.failed, counts.cancelled};
  for (size_t i = 0; i < by_state.size(); ++i) {
    if (by_state[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("job count for state '", kJobStateNames[i],
                                                     "' is ", by_state[i], ", needs >= 0"));
    }
  }
  for (size_t i = 0; i < by_state.size(); ++i) {
    job_state_gauges_[i]->Set(static_cast<double>(by_state[i]));
  }
  return absl::OkStatus();
}

absl::Status Metrics::SetDeviceMemory(const std::string& device, uint64_t used_bytes,
                                      uint64_t total_bytes) {
  if (absl::Status s = ValidateLabelValue("device", device); !s.ok()) return s;
  if (used_bytes > total_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("device '", device, "': used_bytes ",
                                                   used_bytes, " exceeds total_bytes ",
                                                   total_bytes));
  }
  absl::MutexLock lock(&mu_);
  DeviceSeries& series = devices_[device];
  if (series.used_bytes == nullptr) {
    try {
      series.used_bytes = &families_.device_memory_used_bytes->Add({{"device", device}});
      series.total_bytes = &families_.device_memory_total_bytes->Add({{"device", device}});
    } catch (const std::exception& e) {
      if (series.used_bytes != nullptr) {
        families_.device_memory_used_bytes->Remove(series.used_bytes);
      }
      devices_.erase(device);
      return InternalFromException(absl::StrCat("adding the series of device '", device, "'"),
                                   e);
    }
  }
  series.used_bytes->Set(static_cast<double>(used_bytes));
  series.total_bytes->Set(static_cast<double>(total_bytes));
  return absl::OkStatus();
}

std::string Metrics::TextExposition() const {
  // Collect() and Serialize() document no exceptions (they take the families' locks and
  // write to a string stream).
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry_->Collect());
  return out.str();
}

}  // namespace headroom::profiler
