// Headroom's Prometheus metrics: what each job's steps did to memory and time, how many jobs
// are in each state, and how full each device is. Recording only: the daemon exposes
// registry() with prometheus-cpp's Exposer; TextExposition() renders the same registry for
// tests and command-line dumps.
//
// Metrics (all in base units; every one has a HELP string):
//   headroom_job_memory_bytes{device,job,role}   gauge    bytes the job held by role at its
//       last observed step; role is MemoryRoleName() of each of kAllMemoryRoles. The role
//       "host_offload" counts host bytes (offloaded copies of the job on that device), every
//       other role device bytes: sum without(role) is the job's device plus host footprint,
//       sum by(job)(...{role!="host_offload"}) its device bytes. (Named "job_memory", not
//       "device_memory", so that it neither claims the host bytes are device bytes nor reads
//       like headroom_device_memory_used_bytes.)
//   headroom_planned_peak_bytes{device,job}      gauge    the planner's peak for the job.
//   headroom_measured_peak_bytes{device,job}     gauge    peak measured in the last step.
//   headroom_offloaded_bytes_total{device,job}   counter  bytes copied device -> host.
//   headroom_prefetched_bytes_total{device,job}  counter  bytes copied host -> device.
//   headroom_recompute_seconds_total{device,job} counter  time spent recomputing.
//   headroom_step_duration_seconds{device,job}   histogram of step times, buckets
//       StepDurationBucketsSeconds() (1 ms .. 100 s). Its _count is the number of steps, so
//       there is no separate headroom_steps_total: it would always equal _count, and
//       rate(..._count[5m]) is already the step rate.
//   Of a job with a dataset (added at its first ObserveFit):
//   headroom_job_epoch{device,job}               gauge    the epoch of its last step, from 1.
//   headroom_job_eval_accuracy{device,job}       gauge    top-1 accuracy (a fraction) and
//   headroom_job_eval_loss{device,job}           gauge    mean loss of its last evaluation.
//   headroom_job_input_wait_seconds_total{device,job} counter  time its steps waited for
//       the input pipeline's batches.
//   Of a job of several data-parallel ranks (added at each rank's first ObserveRank), the
//   job's series above carry the job (measured peak: the sum of its ranks'), and per rank:
//   headroom_measured_peak_bytes{device,job,rank} gauge  the rank's arena peak in its last
//       step (the job's series without `rank` is their sum).
//   headroom_rank_resident_bytes{device,job,rank} gauge  the rank process's resident memory
//       (the OS's VmRSS) after its last step.
//   headroom_jobs{state}                         gauge    jobs per state; all five states
//       (queued, running, succeeded, failed, cancelled) are always present.
//   headroom_device_memory_used_bytes{device}    gauge    physical memory in use, as the
//   headroom_device_memory_total_bytes{device}   gauge    driver reports it, and its capacity.
//
// Cardinality: role and state are fixed enumerations; device is bounded by the devices of the
// machine. The job label is the only one that grows, so every job series is removed by
// ForgetJob(): the daemon must call it when it forgets a job, which bounds the series to
// (jobs the daemon keeps) x (devices per job) x (10 roles + 5 + 19 histogram lines + 4 of
// a dataset job + 2 per rank). The rank label is bounded by the job's ranks, each below
// kMaxMetricRanks.
// Counters restart from zero if a job is forgotten and started again; Prometheus' rate()
// treats that as a counter reset.
//
// Phases: Create() once; then, for each job and device, StartJob() once, ObserveStep() after
// every step, ForgetJob() when the job is dropped; SetJobCounts() and SetDeviceMemory()
// whenever the daemon samples them. registry() and TextExposition() at any time.
//
// Thread-safe: any method may be called from any thread. One mutex (mu_) guards the index of
// series (jobs_, devices_) and is held while a job's series are updated, so that ForgetJob()
// cannot free a series another thread is writing; prometheus-cpp's registry, families and
// metrics are themselves thread-safe, so scraping needs no lock of ours.
//
// Ownership: the registry owns every family and series; Metrics holds it by shared_ptr and
// keeps raw pointers to the series it added (valid until it removes them).
//
// prometheus-cpp throws on invalid names and on allocation failure; every call into it that
// may throw is caught here and becomes an Internal status, so no exception leaves this module.
#ifndef HEADROOM_PROFILER_METRICS_H_
#define HEADROOM_PROFILER_METRICS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "profiler/memory_role.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace headroom::profiler {

// Longest device or job label value accepted, in bytes.
inline constexpr size_t kMaxLabelValueBytes = 128;

// What one training step did, as the executor and profiler measured it.
struct StepObservation {
  // Wall time of the step.
  double step_seconds = 0;
  // Bytes held at the end of the step by role, indexed by the role's enum value; use bytes().
  std::array<uint64_t, kAllMemoryRoles.size()> bytes_by_role{};
  // Highest device bytes in use at any moment of the step.
  uint64_t measured_peak_bytes = 0;
  // Bytes copied device -> host and host -> device during this step (not cumulative).
  uint64_t offloaded_bytes = 0;
  uint64_t prefetched_bytes = 0;
  // Time spent recomputing dropped activations during this step (not cumulative).
  double recompute_seconds = 0;

  // Returns the slot of bytes_by_role for `role`.
  uint64_t& bytes(MemoryRole role) { return bytes_by_role[static_cast<size_t>(role)]; }
  uint64_t bytes(MemoryRole role) const { return bytes_by_role[static_cast<size_t>(role)]; }
};

// One rank of a data-parallel job after its latest step.
struct RankObservation {
  // Highest bytes its arena held in the step.
  uint64_t measured_peak_bytes = 0;
  // Its process's resident bytes after the step.
  uint64_t resident_bytes = 0;
};

// Ranks are labelled from 0 to this less one at most.
inline constexpr int kMaxMetricRanks = 1024;

// Where a job with a dataset stands, as its fit loop reports it after a step or an epoch.
struct FitObservation {
  // The epoch of the last step, from 1.
  int64_t epoch = 0;
  // Whether an evaluation ran; then its mean loss and top-1 accuracy (a fraction).
  bool evaluated = false;
  double eval_loss = 0;
  double eval_accuracy = 0;
  // Seconds waited for the input pipeline since the last observation (not cumulative).
  double input_wait_seconds = 0;
};

// Jobs per state, as the daemon counts them; headroom_jobs{state} mirrors it.
struct JobCounts {
  int64_t queued = 0;
  int64_t running = 0;
  int64_t succeeded = 0;
  int64_t failed = 0;
  int64_t cancelled = 0;
};

// Returns the upper bounds of headroom_step_duration_seconds' buckets: 1, 2.5 and 5 in each
// decade from 1 ms to 100 s (16 bounds, then +Inf).
std::vector<double> StepDurationBucketsSeconds();

// Returns OK if `value` can be the value of label `label_name`: 1 to kMaxLabelValueBytes
// bytes of ASCII letters, digits and "_.:/@-"; otherwise InvalidArgument naming both.
absl::Status ValidateLabelValue(const std::string& label_name, const std::string& value);

// Headroom's metrics registry (see the file comment for the metrics, phases and locking).
class Metrics {
 public:
  // Returns a registry with every family registered and headroom_jobs at zero for each
  // state; Internal if prometheus-cpp rejects a name (a bug here).
  static absl::StatusOr<std::unique_ptr<Metrics>> Create();

  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Returns the registry, for prometheus::Exposer::RegisterCollectable.
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // Returns OK after adding the series of `job` on `device`, with every role at 0 bytes, the
  // planned peak set and the counters at 0. InvalidArgument for a bad job or device label
  // value (see ValidateLabelValue); AlreadyExists if that job already has series on that
  // device (ForgetJob first to start over).
  absl::Status StartJob(const std::string& job, const std::string& device,
                        uint64_t planned_peak_bytes);

  // Returns OK after recording one step of `job` on `device`: sets the role and measured
  // peak gauges, adds the step's offloaded, prefetched and recompute amounts to the
  // counters, and observes step_seconds in the histogram. NotFound if StartJob(job, device)
  // was not called (or the job was forgotten); InvalidArgument, recording nothing, if a
  // seconds field is negative, NaN or infinite.
  absl::Status ObserveStep(const std::string& job, const std::string& device,
                           const StepObservation& step);

  // Returns OK after recording where dataset job `job` on `device` stands: the epoch, the
  // evaluation's gauges (when `fit.evaluated`), and input_wait_seconds added to the counter.
  // The fit series are added at the first call. NotFound as ObserveStep; InvalidArgument,
  // recording nothing, for a negative or non-finite wait, or a non-finite evaluation.
  absl::Status ObserveFit(const std::string& job, const std::string& device,
                          const FitObservation& fit);

  // Returns OK after recording rank `rank`'s latest step of `job` on `device`: its series
  // labelled rank="R" are added at its first call. NotFound as ObserveStep; InvalidArgument
  // for a rank outside [0, kMaxMetricRanks).
  absl::Status ObserveRank(const std::string& job, const std::string& device, int rank,
                           const RankObservation& observed);

  // Returns the number of devices whose series of `job` were removed (0 if none: forgetting
  // an unknown job is harmless). Afterwards no series carries job="<job>".
  int ForgetJob(const std::string& job);

  // Sets headroom_jobs{state} for all five states. InvalidArgument, setting nothing, if a
  // count is negative.
  absl::Status SetJobCounts(const JobCounts& counts);

  // Sets the physical memory used and total of `device` as its driver reports them.
  // InvalidArgument for a bad device label value or used_bytes > total_bytes.
  absl::Status SetDeviceMemory(const std::string& device, uint64_t used_bytes,
                               uint64_t total_bytes);

  // Returns the registry in Prometheus' text exposition format (version 0.0.4).
  std::string TextExposition() const;

 private:
  // The families, owned by registry_.
  struct Families {
    prometheus::Family<prometheus::Gauge>* job_memory_bytes = nullptr;
    prometheus::Family<prometheus::Gauge>* planned_peak_bytes = nullptr;
    prometheus::Family<prometheus::Gauge>* measured_peak_bytes = nullptr;
    prometheus::Family<prometheus::Counter>* offloaded_bytes = nullptr;
    prometheus::Family<prometheus::Counter>* prefetched_bytes = nullptr;
    prometheus::Family<prometheus::Counter>* recompute_seconds = nullptr;
    prometheus::Family<prometheus::Histogram>* step_duration_seconds = nullptr;
    prometheus::Family<prometheus::Gauge>* epoch = nullptr;
    prometheus::Family<prometheus::Gauge>* eval_accuracy = nullptr;
    prometheus::Family<prometheus::Gauge>* eval_loss = nullptr;
    prometheus::Family<prometheus::Counter>* input_wait_seconds = nullptr;
    prometheus::Family<prometheus::Gauge>* rank_resident_bytes = nullptr;
    prometheus::Family<prometheus::Gauge>* jobs = nullptr;
    prometheus::Family<prometheus::Gauge>* device_memory_used_bytes = nullptr;
    prometheus::Family<prometheus::Gauge>* device_memory_total_bytes = nullptr;
  };

  // The series of one job on one device; null where not (yet) added.
  struct JobSeries {
    std::array<prometheus::Gauge*, kAllMemoryRoles.size()> role_bytes{};
    prometheus::Gauge* planned_peak_bytes = nullptr;
    prometheus::Gauge* measured_peak_bytes = nullptr;
    prometheus::Counter* offloaded_bytes = nullptr;
    prometheus::Counter* prefetched_bytes = nullptr;
    prometheus::Counter* recompute_seconds = nullptr;
    prometheus::Histogram* step_duration_seconds = nullptr;
    // A dataset job's, from its first ObserveFit.
    prometheus::Gauge* epoch = nullptr;
    prometheus::Gauge* eval_accuracy = nullptr;
    prometheus::Gauge* eval_loss = nullptr;
    prometheus::Counter* input_wait_seconds = nullptr;
    // A data-parallel job's, by rank, from each rank's first ObserveRank.
    struct RankSeries {
      prometheus::Gauge* measured_peak_bytes = nullptr;
      prometheus::Gauge* resident_bytes = nullptr;
    };
    std::map<int, RankSeries> ranks;
  };

  // The physical-memory series of one device.
  struct DeviceSeries {
    prometheus::Gauge* used_bytes = nullptr;
    prometheus::Gauge* total_bytes = nullptr;
  };

  // headroom_jobs{state}, in JobCounts' field order.
  using JobStateGauges = std::array<prometheus::Gauge*, 5>;

  Metrics(std::shared_ptr<prometheus::Registry> registry, Families families,
          JobStateGauges job_state_gauges);

  // Adds every series of `job` on `device` into `series`; throws what prometheus-cpp throws,
  // leaving the series added so far in `series` for RemoveJobSeries().
  void AddJobSeries(const std::string& job, const std::string& device, JobSeries& series);
  // Returns the series of `job` on `device`; NotFound naming them when StartJob was not
  // called (or the job was forgotten).
  absl::StatusOr<JobSeries*> FindJob(const std::string& job, const std::string& device)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes every non-null series in `series` from its family.
  void RemoveJobSeries(const JobSeries& series);

  const std::shared_ptr<prometheus::Registry> registry_;
  const Families families_;
  const JobStateGauges job_state_gauges_;
  const std::vector<double> step_buckets_seconds_;

  mutable absl::Mutex mu_;
  // Keyed by (job, device), so that one job's devices are adjacent.
  std::map<std::pair<std::string, std::string>, JobSeries> jobs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, DeviceSeries> devices_ ABSL_GUARDED_BY(mu_);
};

}  // namespace headroom::profiler

#endif  // HEADROOM_PROFILER_METRICS_H_
