#include "profiler/timeline.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "graph/summary.h"
#include "util/status_macros.h"

namespace headroom::profiler {
namespace {

size_t Index(MemoryRole role) { return static_cast<size_t>(role); }

// The buffers live in each space, by buffer id: their allocation events.
struct LiveSet {
  absl::flat_hash_map<int32_t, MemoryEvent> device;
  absl::flat_hash_map<int32_t, MemoryEvent> host;
  absl::flat_hash_map<int32_t, MemoryEvent>& of(const MemoryEvent& e) {
    return e.host() ? host : device;
  }
};

std::string BufferName(const MemoryEvent& e, const StepLayout& layout) {
  if (e.role == MemoryRole::kWorkspace) return "workspace";
  if (e.tensor >= 0 && e.tensor < static_cast<int32_t>(layout.tensors.size())) {
    return layout.tensors[e.tensor].name;
  }
  return absl::StrCat("buffer ", e.buffer);
}

// Applies `e` to `live` and `bytes`; returns the allocation it made or ended, or Internal
// if it does not balance.
absl::StatusOr<MemoryEvent> Apply(const MemoryEvent& e, const StepLayout& layout,
                                  LiveSet& live, RoleBytes& bytes) {
  auto& set = live.of(e);
  if (e.kind == MemoryEvent::Kind::kAllocate) {
    auto [it, added] = set.emplace(e.buffer, e);
    if (!added) {
      return absl::InternalError(absl::StrCat("profile: '", BufferName(e, layout),
                                              "' allocated at step ", e.step,
                                              " while it is live already"));
    }
    bytes[Index(e.role)] += e.bytes;
    return e;
  }
  auto it = set.find(e.buffer);
  if (it == set.end()) {
    return absl::InternalError(absl::StrCat("profile: '", BufferName(e, layout),
                                            "' freed at step ", e.step,
                                            " while it is not live"));
  }
  const MemoryEvent allocation = it->second;
  bytes[Index(allocation.role)] -= allocation.bytes;
  set.erase(it);
  return allocation;
}

// Returns an error naming a buffer allocated during a step that is still live.
absl::Status CheckBalanced(const LiveSet& live, const StepLayout& layout, int64_t step,
                           const char* when) {
  for (const auto* set : {&live.device, &live.host}) {
    for (const auto& [id, e] : *set) {
      // The persistent state and kernel workspaces live across steps.
      if (e.step == kSetupStep || e.role == MemoryRole::kWorkspace) continue;
      return absl::InternalError(absl::StrCat("profile: '", BufferName(e, layout),
                                              "' allocated in step ", e.step,
                                              " is still live ", when, " ", step));
    }
  }
  return absl::OkStatus();
}

}  // namespace

uint64_t DeviceBytes(const RoleBytes& bytes) {
  uint64_t total = 0;
  for (MemoryRole role : kAllMemoryRoles) {
    if (!IsHostRole(role)) total += bytes[Index(role)];
  }
  return total;
}

absl::StatusOr<Timeline> Timeline::Build(const EventLog& events, const StepLayout& layout) {
  Timeline t;
  ASSIGN_OR_RETURN(const std::optional<size_t> peak_event,
                   t.Replay(events.memory(), FirstEventNanos(events), layout));
  if (peak_event) RETURN_IF_ERROR(t.AttributePeak(events.memory(), *peak_event, layout));
  return t;
}

absl::StatusOr<std::optional<size_t>> Timeline::Replay(const std::vector<MemoryEvent>& memory,
                                                       int64_t base_ns,
                                                       const StepLayout& layout) {
  // A point per run of same-kind events at one node, the peak, the arena's live bytes and
  // high-water mark, each step's peak.
  LiveSet live;
  RoleBytes bytes{};
  uint64_t arena_live = 0;
  int64_t step = kSetupStep;
  std::optional<size_t> peak_event;
  for (size_t i = 0; i < memory.size(); ++i) {
    const MemoryEvent& e = memory[i];
    // Setup events (the persistent state, a workspace growing) may come at any time.
    if (e.step != kSetupStep && e.step != step) {
      if (e.step < step) {
        return absl::InternalError(absl::StrCat("profile: an event of step ", e.step,
                                                " comes after step ", step));
      }
      RETURN_IF_ERROR(CheckBalanced(live, layout, e.step, "when step"));
      step = e.step;
    }
    ASSIGN_OR_RETURN(const MemoryEvent allocation, Apply(e, layout, live, bytes));
    if (!allocation.host() && allocation.role != MemoryRole::kWorkspace) {
      if (e.kind == MemoryEvent::Kind::kAllocate) {
        arena_live += e.bytes;
        high_water_bytes_ = std::max(high_water_bytes_, e.offset + e.bytes);
      } else {
        arena_live -= allocation.bytes;
      }
      arena_peak_live_bytes_ = std::max(arena_peak_live_bytes_, arena_live);
    }
    const uint64_t device = DeviceBytes(bytes);
    peak_host_bytes_ = std::max(peak_host_bytes_, bytes[Index(MemoryRole::kHostOffload)]);
    if (e.step >= 0) {
      if (step_peak_bytes_.size() <= static_cast<size_t>(e.step)) {
        step_peak_bytes_.resize(e.step + 1, 0);
      }
      step_peak_bytes_[e.step] = std::max(step_peak_bytes_[e.step], device);
    }
    const bool new_peak = !peak_event || device > peak_.device_bytes;
    RecordPoint(memory, i, base_ns, bytes, device, new_peak);
    if (new_peak) peak_event = i;
  }
  RETURN_IF_ERROR(CheckBalanced(live, layout, step, "at the end of step"));
  return peak_event;
}

void Timeline::RecordPoint(const std::vector<MemoryEvent>& memory, size_t i, int64_t base_ns,
                           const RoleBytes& bytes, uint64_t device, bool new_peak) {
  const MemoryEvent& e = memory[i];
  const bool merge = i > 0 && !points_.empty() && e.node >= 0 &&
                     memory[i - 1].kind == e.kind && memory[i - 1].node == e.node &&
                     memory[i - 1].step == e.step;
  if (!merge) {
    TimelinePoint p;
    p.time_ns = e.time_ns - base_ns;
    p.step = e.step;
    p.node = e.node;
    points_.push_back(p);
  }
  points_.back().bytes = bytes;
  points_.back().device_bytes = device;
  if (new_peak) {
    peak_point_ = points_.size() - 1;
    peak_.device_bytes = device;
    peak_.time_ns = e.time_ns - base_ns;
    peak_.step = e.step;
    peak_.node = e.node;
    peak_.bytes = bytes;
  }
}

absl::Status Timeline::AttributePeak(const std::vector<MemoryEvent>& memory, size_t peak_event,
                                     const StepLayout& layout) {
  LiveSet at_peak;
  RoleBytes scratch{};
  for (size_t i = 0; i <= peak_event; ++i) {
    RETURN_IF_ERROR(Apply(memory[i], layout, at_peak, scratch).status());
  }
  for (const auto& [id, e] : at_peak.device) {
    LiveBuffer b;
    b.tensor = e.tensor;
    b.name = BufferName(e, layout);
    b.role = e.role;
    b.bytes = e.bytes;
    b.offset = e.offset;
    b.producer = layout.ProducerName(e.tensor);
    peak_.live.push_back(std::move(b));
  }
  std::sort(peak_.live.begin(), peak_.live.end(), [](const LiveBuffer& a, const LiveBuffer& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.name < b.name;
  });
  peak_.node_name = layout.NodeName(peak_.node);
  if (peak_.node >= 0 && peak_.node < static_cast<int32_t>(layout.nodes.size())) {
    peak_.op = layout.nodes[peak_.node].op;
  }
  return absl::OkStatus();
}

proto::MemoryTimeline Timeline::ToProto(const StepLayout& layout, size_t max_samples) const {
  proto::MemoryTimeline out;
  for (size_t i : SampleIndices(points_.size(), max_samples, peak_point_)) {
    const TimelinePoint& p = points_[i];
    proto::TimelineSample* s = out.add_samples();
    s->set_time_seconds(p.time_ns * 1e-9);
    s->set_step(p.step);
    s->set_node(layout.NodeName(p.node));
    s->set_device_bytes(p.device_bytes);
    for (MemoryRole role : kAllMemoryRoles) {
      (*s->mutable_bytes_by_role())[MemoryRoleName(role)] = p.bytes[Index(role)];
    }
  }
  out.set_peak_bytes(peak_.device_bytes);
  out.set_peak_time_seconds(peak_.time_ns * 1e-9);
  out.set_peak_node(peak_.node_name);
  out.set_peak_op(peak_.op);
  out.set_peak_step(peak_.step);
  out.set_high_water_bytes(high_water_bytes_);
  for (MemoryRole role : kAllMemoryRoles) {
    (*out.mutable_peak_bytes_by_role())[MemoryRoleName(role)] = peak_.bytes[Index(role)];
  }
  for (const LiveBuffer& b : peak_.live) {
    proto::LiveTensor* l = out.add_peak_live();
    l->set_tensor(b.name);
    l->set_memory_role(MemoryRoleName(b.role));
    l->set_bytes(b.bytes);
    l->set_offset(b.offset);
    l->set_producer(b.producer);
  }
  return out;
}

std::vector<size_t> SampleIndices(size_t n, size_t max_samples, size_t keep) {
  std::vector<size_t> out;
  if (max_samples == 0 || n <= max_samples) {
    for (size_t i = 0; i < n; ++i) out.push_back(i);
    return out;
  }
  if (max_samples == 1) return {keep < n ? keep : n - 1};
  // max_samples evenly spaced from the first to the last (distinct, as n > max_samples);
  // then the one nearest `keep`, the last excepted, becomes `keep`.
  for (size_t k = 0; k < max_samples; ++k) out.push_back(k * (n - 1) / (max_samples - 1));
  if (keep < n && !std::binary_search(out.begin(), out.end(), keep)) {
    size_t nearest = 0;
    for (size_t k = 1; k + 1 < out.size(); ++k) {
      const auto distance = [&](size_t i) { return i > keep ? i - keep : keep - i; };
      if (distance(out[k]) < distance(out[nearest])) nearest = k;
    }
    out[nearest] = keep;
  }
  return out;
}

void ThinSamples(proto::MemoryTimeline& timeline, size_t max_samples) {
  const int n = timeline.samples_size();
  if (max_samples == 0 || static_cast<size_t>(n) <= max_samples) return;
  size_t peak = 0;
  for (int i = 1; i < n; ++i) {
    if (timeline.samples(i).device_bytes() > timeline.samples(peak).device_bytes()) peak = i;
  }
  google::protobuf::RepeatedPtrField<proto::TimelineSample> kept;
  for (size_t i : SampleIndices(n, max_samples, peak)) *kept.Add() = timeline.samples(i);
  timeline.mutable_samples()->Swap(&kept);
}

}  // namespace headroom::profiler
