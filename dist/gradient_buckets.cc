#include "dist/gradient_buckets.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "util/status_macros.h"

namespace headroom::dist {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

GradientBuckets::GradientBuckets(Collectives* collectives, executor::Backend* backend,
                                 const Options& options)
    : collectives_(collectives), backend_(backend), options_(options) {}

absl::Status GradientBuckets::Prepare(absl::Span<const executor::GradientInfo> gradients,
                                      absl::Span<const executor::TensorView> buckets) {
  if (!backend_->host_is_device_memory()) {
    return absl::UnimplementedError(
        "data-parallel training: MPI reads the gradient buckets in place, in the arena, which "
        "on this backend is not host memory; only the cpu backend trains across ranks so far");
  }
  buckets_.clear();
  slots_.clear();
  for (const executor::TensorView& view : buckets) {
    if (view.dtype != proto::DTYPE_FLOAT32 || view.shape.size() != 1) {
      return absl::InternalError("gradient buckets: a planned bucket is not a float32 vector");
    }
    buckets_.push_back({static_cast<float*>(view.data), static_cast<uint64_t>(view.shape[0])});
  }
  for (size_t i = 0; i < gradients.size(); ++i) {
    const executor::GradientInfo& g = gradients[i];
    if (g.dtype != proto::DTYPE_FLOAT32) {
      return absl::InvalidArgumentError(absl::StrCat("data-parallel training: gradient of '",
                                                     g.name,
                                                     "' is not float32; only float32 "
                                                     "gradients are averaged"));
    }
    if (g.bucket < 0 || g.bucket >= static_cast<int32_t>(buckets_.size()) ||
        g.bucket_offset_bytes % sizeof(float) != 0 ||
        g.bucket_offset_bytes + g.bytes > buckets_[g.bucket].floats * sizeof(float)) {
      return absl::InternalError(absl::StrCat("gradient buckets: the gradient of '", g.name,
                                              "' does not lie in its planned bucket ", g.bucket));
    }
    slots_.push_back({g.bucket, g.bucket_offset_bytes / sizeof(float), g});
    buckets_[g.bucket].gradients.push_back(static_cast<int32_t>(i));
  }
  for (size_t k = 0; k < buckets_.size(); ++k) {
    Bucket& b = buckets_[k];
    if (b.gradients.empty()) {
      return absl::InternalError(absl::StrCat("gradient buckets: bucket ", k, " holds nothing"));
    }
    b.pending = static_cast<int32_t>(b.gradients.size());
  }
  return absl::OkStatus();
}

absl::Status GradientBuckets::OnGradientReady(int64_t step, int32_t index,
                                              const executor::TensorView& grad) {
  if (index < 0 || index >= static_cast<int32_t>(slots_.size())) {
    return absl::InternalError(absl::StrCat("gradient buckets: no gradient ", index));
  }
  const Slot& slot = slots_[index];
  Bucket& b = buckets_[slot.bucket];
  const auto start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(backend_->CopyOnDevice(b.values + slot.offset, grad.data, slot.info.bytes));
  stats_.copy_seconds += SecondsSince(start);
  if (--b.pending > 0) return absl::OkStatus();
  // The bucket's last gradient: reduce it while the backward goes on.
  ASSIGN_OR_RETURN(b.handle, collectives_->AllreduceAsync(
                                 b.values, b.floats, ReduceOp::kAverage,
                                 absl::StrCat("allreduce of gradient bucket ", slot.bucket, " (",
                                              b.floats, " floats) in step ", step)));
  b.issued = true;
  b.times.issued = SteadySeconds() - clock_zero_seconds_;
  ++stats_.allreduces;
  stats_.reduced_bytes += b.floats * sizeof(float);
  return absl::OkStatus();
}

absl::StatusOr<executor::TensorView> GradientBuckets::ReducedGradient(int64_t step, int32_t index) {
  if (index < 0 || index >= static_cast<int32_t>(slots_.size())) {
    return absl::InternalError(absl::StrCat("gradient buckets: no gradient ", index));
  }
  const Slot& slot = slots_[index];
  Bucket& b = buckets_[slot.bucket];
  if (!b.issued) {
    return absl::InternalError(absl::StrCat("gradient buckets: step ", step, " updates '",
                                            slot.info.name, "' before bucket ", slot.bucket,
                                            " was complete"));
  }
  if (!b.reduced) RETURN_IF_ERROR(AwaitBucket(b));
  return executor::TensorView{b.values + slot.offset, slot.info.shape, slot.info.dtype};
}

absl::Status GradientBuckets::OnStepEnd(int64_t step) {
  for (size_t k = 0; k < buckets_.size(); ++k) {
    Bucket& b = buckets_[k];
    if (b.issued && !b.reduced) RETURN_IF_ERROR(AwaitBucket(b));
    if (!b.issued) {
      return absl::InternalError(absl::StrCat("gradient buckets: step ", step, " ended with ",
                                              b.pending, " gradient(s) of bucket ", k,
                                              " never written"));
    }
  }
  std::vector<BucketTimes> times;
  for (Bucket& b : buckets_) {
    times.push_back(b.times);
    b.pending = static_cast<int32_t>(b.gradients.size());
    b.issued = b.reduced = false;
  }
  timeline_.push_back(std::move(times));
  if (timeline_.size() > kMaxTimelineSteps) timeline_.pop_front();
  ++stats_.steps;
  return absl::OkStatus();
}

absl::Status GradientBuckets::AwaitBucket(Bucket& b) {
  const double start = SteadySeconds();
  ASSIGN_OR_RETURN(const double completed, collectives_->WaitCompleted(b.handle));
  const double end = SteadySeconds();
  stats_.exposed_wait_seconds += end - start;
  b.times.wait_start = start - clock_zero_seconds_;
  b.times.wait_end = end - clock_zero_seconds_;
  b.times.completed = completed - clock_zero_seconds_;
  b.reduced = true;
  return absl::OkStatus();
}

absl::Status GradientBuckets::StartClock() {
  RETURN_IF_ERROR(
      collectives_->AllgatherU64(0, "allgather aligning the ranks' clocks (a barrier)").status());
  clock_zero_seconds_ = SteadySeconds();
  return absl::OkStatus();
}

RankTimeline GradientBuckets::timeline() const {
  return RankTimeline{{timeline_.begin(), timeline_.end()}};
}

std::vector<CollectiveSpec> GradientBuckets::Sequence() const {
  std::vector<CollectiveSpec> sequence;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    sequence.push_back(
        {absl::StrCat("allreduce of gradient bucket ", k, " (", buckets_[k].gradients.size(),
                      " gradient(s), first '", slots_[buckets_[k].gradients[0]].info.name, "')"),
         buckets_[k].floats, slots_[buckets_[k].gradients.back()].info.position});
  }
  return sequence;
}

std::vector<uint64_t> GradientBuckets::BucketBytes() const {
  std::vector<uint64_t> bytes;
  for (const Bucket& b : buckets_) bytes.push_back(b.floats * sizeof(float));
  return bytes;
}

}  // namespace headroom::dist
