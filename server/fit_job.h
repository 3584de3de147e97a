// A headroomd job with a dataset (JobSpec.data): checking its options, loading its sets, and
// the callbacks of its fit loop, so that it trains as `headroom train --dataset` does
// (executor/fit.h) with its checkpoints in the daemon's state directory.
//
// Phases: CheckDataOptions() (the options alone, no I/O); InspectJobData() at submit (the
// files' headers against the model and the limits); LoadJobData() when the job runs (the
// same checks, then the sets read whole); then MakeFitCallbacks() for the run. Stateless functions;
// thread-safe.
#ifndef HEADROOM_SERVER_FIT_JOB_H_
#define HEADROOM_SERVER_FIT_JOB_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/batch_loader.h"
#include "data/image_dataset.h"
#include "executor/fit.h"
#include "graph/graph.h"
#include "proto/headroom.pb.h"

namespace headroom::server {

// Limits of JobSpec.data (proto/headroom.proto documents each).
inline constexpr uint64_t kMaxJobEpochs = 10000;
inline constexpr uint64_t kMaxCropPadding = 64;
inline constexpr uint64_t kMaxPrefetch = 64;
inline constexpr uint64_t kMaxKeepLast = 100;
inline constexpr double kMaxValidationFraction = 0.99;

// Returns whether `spec` trains on a dataset.
bool HasDataset(const proto::JobSpec& spec);

// Returns OK when spec.data's options are in range and go together (and train.steps is 0
// with a dataset, or spec.data is empty without one); else InvalidArgument naming the field.
absl::Status CheckDataOptions(const proto::JobSpec& spec);

// A job's sets: the training set and where its held-out items are.
struct JobData {
  data::ImageDataset train;
  std::vector<int64_t> train_items;
  // The held-out set (Fashion-MNIST's test part, or `train` itself for a validation split)
  // and its items; none without evaluation.
  std::optional<data::ImageDataset> test;
  std::vector<int64_t> held_out_items;
  // Steps per epoch: whole batches of the model's batch.
  int64_t batches_per_epoch = 0;
  const data::ImageDataset& held_out() const { return test.has_value() ? *test : train; }
  // Steps of the whole job: epochs * batches_per_epoch.
  uint64_t total_steps = 0;
};

// What a dataset job will train on, from its sets' headers (data::ImageDataset::Inspect*),
// without reading their images.
struct JobDataShape {
  data::ImageSetShape train;
  // The split of the training set's items (all of them without a validation fraction) and
  // the held-out items (of the validation split or Fashion-MNIST's test part; none without
  // evaluation).
  std::vector<int64_t> train_items;
  std::vector<int64_t> held_out_items;
  bool held_out_is_test = false;
  int64_t batches_per_epoch = 0;
  uint64_t total_steps = 0;
  // What loading the sets takes in memory: the training set, and the test part where the
  // job evaluates on it.
  uint64_t memory_bytes = 0;
};

// Returns what the job of `spec` trains on in `path` ("fashion-mnist", or the resolved
// directory of DataRoots::Resolve), checked against `forward` (its input's image shape, its
// classes), holding at least one batch per epoch and taking at most `max_memory_bytes` (0:
// no limit; else ResourceExhausted naming the sizes) once loaded. The data layer's errors
// (NotFound, or InvalidArgument naming the file and line), prefixed with
// "spec.data.dataset". Reads the index and the IDX headers alone: cheap enough for a submit.
absl::StatusOr<JobDataShape> InspectJobData(const proto::JobSpec& spec, const std::string& path,
                                            const graph::Graph& forward, uint64_t max_memory_bytes);

// Returns the sets of `spec` read from `path`: InspectJobData's checks first (so nothing
// past the limit is read), then the sets loaded and checked whole (InvalidArgument naming
// the file and item for a bad label, a float that is not finite, a file that ends early).
absl::StatusOr<std::unique_ptr<JobData>> LoadJobData(const proto::JobSpec& spec,
                                                     const std::string& path,
                                                     const graph::Graph& forward,
                                                     uint64_t max_memory_bytes);

// Returns the data order of `spec`'s fit loop: seed, augmentation, prefetch.
data::LoaderOptions LoaderOptionsOf(const proto::JobSpec& spec);

// Returns the callbacks of `spec`'s fit loop, in order: the learning-rate schedule from
// `base_rate`, evaluation, early stopping; then the checkpoint writer into
// `checkpoint_dir` (which must exist) every `checkpoint_interval_steps` steps and
// data.checkpoint_every_epochs epochs, keeping data.keep_last and best.hrfit. Borrows
// `data`, which must outlive them. InvalidArgument for a schedule that cannot be built.
absl::StatusOr<std::vector<std::unique_ptr<executor::Callback>>> MakeFitCallbacks(
    const proto::JobSpec& spec, const JobData& data, double base_rate,
    const std::string& checkpoint_dir, uint64_t checkpoint_interval_steps);

}  // namespace headroom::server

#endif  // HEADROOM_SERVER_FIT_JOB_H_
