#include "profiler/metrics_sink.h"

#include <utility>

namespace headroom::profiler {
namespace {

int64_t Key(const MemoryEvent& e) {
  return (static_cast<int64_t>(e.host() ? 1 : 0) << 32) ^ static_cast<uint32_t>(e.buffer);
}

}  // namespace

MetricsSink::MetricsSink(Metrics* metrics, std::string job, std::string device,
                         EventSink* next)
    : metrics_(metrics), job_(std::move(job)), device_(std::move(device)), next_(next) {}

void MetricsSink::OnMemory(const MemoryEvent& event) {
  if (next_ != nullptr) next_->OnMemory(event);
  if (event.kind == MemoryEvent::Kind::kAllocate) {
    live_[Key(event)] = event;
    live_bytes_[static_cast<size_t>(event.role)] += event.bytes;
  } else {
    auto it = live_.find(Key(event));
    if (it == live_.end()) return;  // The timeline reports imbalance; metrics just skip it.
    live_bytes_[static_cast<size_t>(it->second.role)] -= it->second.bytes;
    live_.erase(it);
  }
  // Device roles are taken at the step's device peak; host bytes peak on their own (copies
  // back free them during the backward pass, usually before the device peak), so their
  // largest value is kept apart.
  const size_t host = static_cast<size_t>(MemoryRole::kHostOffload);
  const uint64_t host_peak = std::max(step_peak_bytes_[host], live_bytes_[host]);
  const uint64_t device = DeviceBytes(live_bytes_);
  if (device > step_peak_device_bytes_) {
    step_peak_device_bytes_ = device;
    step_peak_bytes_ = live_bytes_;
  }
  step_peak_bytes_[host] = host_peak;
}

void MetricsSink::OnOp(const OpEvent& event) {
  if (next_ != nullptr) next_->OnOp(event);
  if (event.recompute) recompute_seconds_ += (event.end_ns - event.begin_ns) * 1e-9;
}

void MetricsSink::OnCopy(const CopyEvent& event) {
  if (next_ != nullptr) next_->OnCopy(event);
  (event.direction == CopyEvent::Direction::kToHost ? offloaded_bytes_ : prefetched_bytes_) +=
      event.bytes;
}

void MetricsSink::OnStep(const StepEvent& event) {
  if (next_ != nullptr) next_->OnStep(event);
  StepObservation o;
  o.step_seconds = (event.end_ns - event.begin_ns) * 1e-9;
  for (MemoryRole role : kAllMemoryRoles) o.bytes(role) = step_peak_bytes_[static_cast<size_t>(role)];
  o.measured_peak_bytes = step_peak_device_bytes_;
  o.offloaded_bytes = offloaded_bytes_;
  o.prefetched_bytes = prefetched_bytes_;
  o.recompute_seconds = recompute_seconds_;
  last_step_ = o;
  absl::Status s = metrics_->ObserveStep(job_, device_, o);
  if (status_.ok() && !s.ok()) status_ = std::move(s);
  // The next step starts from what lives across steps.
  step_peak_bytes_ = live_bytes_;
  step_peak_device_bytes_ = DeviceBytes(live_bytes_);
  offloaded_bytes_ = prefetched_bytes_ = 0;
  recompute_seconds_ = 0;
}

}  // namespace headroom::profiler
