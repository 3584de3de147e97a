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

absl::Status GradientBuckets::Prepare(absl::Span<const executor::GradientInfo> gradients) {
  if (!backend_->host_is_device_memory()) {
    return absl::UnimplementedError(
        "data-parallel training: gradient buckets live in host memory, which this backend's "
        "kernels cannot read; only the cpu backend trains across ranks so far");
  }
  buckets_.clear();
  slots_.clear();
  uint64_t open_bytes = 0;
  for (size_t i = 0; i < gradients.size(); ++i) {
    const executor::GradientInfo& g = gradients[i];
    if (g.dtype != proto::DTYPE_FLOAT32) {
      return absl::InvalidArgumentError(absl::StrCat("data-parallel training: gradient of '",
                                                     g.name,
                                                     "' is not float32; only float32 "
                                                     "gradients are averaged"));
    }
    if (buckets_.empty() || open_bytes >= options_.bucket_bytes) {
      buckets_.emplace_back();
      open_bytes = 0;
    }
    Bucket& b = buckets_.back();
    slots_.push_back({static_cast<int32_t>(buckets_.size() - 1), b.values.size(), g});
    b.values.resize(b.values.size() + g.bytes / sizeof(float));
    b.gradients.push_back(static_cast<int32_t>(i));
    open_bytes += g.bytes;
  }
  for (Bucket& b : buckets_) b.pending = static_cast<int32_t>(b.gradients.size());
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
  RETURN_IF_ERROR(backend_->Download(b.values.data() + slot.offset, grad.data, slot.info.bytes));
  stats_.copy_seconds += SecondsSince(start);
  if (--b.pending > 0) return absl::OkStatus();
  // The bucket's last gradient: reduce it while the backward goes on.
  ASSIGN_OR_RETURN(b.handle, collectives_->AllreduceAsync(
                                 b.values.data(), b.values.size(), ReduceOp::kAverage,
                                 absl::StrCat("allreduce of gradient bucket ", slot.bucket, " (",
                                              b.values.size(), " floats) in step ", step)));
  b.issued = true;
  ++stats_.allreduces;
  stats_.reduced_bytes += b.values.size() * sizeof(float);
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
  if (!b.reduced) {
    const auto start = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(collectives_->Wait(b.handle));
    stats_.exposed_wait_seconds += SecondsSince(start);
    b.reduced = true;
  }
  return executor::TensorView{b.values.data() + slot.offset, slot.info.shape, slot.info.dtype};
}

absl::Status GradientBuckets::OnStepEnd(int64_t step) {
  for (size_t k = 0; k < buckets_.size(); ++k) {
    Bucket& b = buckets_[k];
    if (b.issued && !b.reduced) RETURN_IF_ERROR(collectives_->Wait(b.handle));
    if (!b.issued) {
      return absl::InternalError(absl::StrCat("gradient buckets: step ", step, " ended with ",
                                              b.pending, " gradient(s) of bucket ", k,
                                              " never written"));
    }
    b.pending = static_cast<int32_t>(b.gradients.size());
    b.issued = b.reduced = false;
  }
  ++stats_.steps;
  return absl::OkStatus();
}

std::vector<CollectiveSpec> GradientBuckets::Sequence() const {
  std::vector<CollectiveSpec> sequence;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    sequence.push_back(
        {absl::StrCat("allreduce of gradient bucket ", k, " (", buckets_[k].gradients.size(),
                      " gradient(s), first '", slots_[buckets_[k].gradients[0]].info.name, "')"),
         buckets_[k].values.size(), slots_[buckets_[k].gradients.back()].info.position});
  }
  return sequence;
}

std::vector<uint64_t> GradientBuckets::BucketBytes() const {
  std::vector<uint64_t> bytes;
  for (const Bucket& b : buckets_) bytes.push_back(b.values.size() * sizeof(float));
  return bytes;
}

}  // namespace headroom::dist
