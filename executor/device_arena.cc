#include "executor/device_arena.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "util/check.h"

namespace headroom::executor {

DeviceArena::DeviceArena(std::unique_ptr<Buffer> memory) : memory_(std::move(memory)) {
  CHECK(memory_ != nullptr);
}

void* DeviceArena::At(uint64_t offset) const {
  return static_cast<char*>(memory_->data()) + offset;
}

absl::StatusOr<void*> DeviceArena::Allocate(int32_t id, uint64_t offset, uint64_t bytes,
                                            const std::string& what) {
  const uint64_t end = offset + std::max<uint64_t>(bytes, 1);
  if (end > capacity_bytes()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "out of device memory: '", what, "' needs bytes [", offset, ", ", end,
        ") but the arena holds ", capacity_bytes()));
  }
  if (offset_of_.contains(id)) {
    return absl::InternalError(absl::StrCat("arena: '", what, "' is allocated twice"));
  }
  // The live buffer starting at or before `offset`, and the one after it.
  auto next = by_offset_.lower_bound(offset);
  if (next != by_offset_.end() && next->first < end) {
    return absl::InternalError(absl::StrCat("arena: '", what, "' [", offset, ", ", end,
                                            ") overlaps live '", name_of_[next->second.id],
                                            "' at ", next->first));
  }
  if (next != by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->second.end > offset) {
      return absl::InternalError(absl::StrCat("arena: '", what, "' [", offset, ", ", end,
                                              ") overlaps live '", name_of_[prev->second.id],
                                              "' ending at ", prev->second.end));
    }
  }
  by_offset_.emplace(offset, Live{end, id});
  offset_of_[id] = offset;
  name_of_[id] = what;
  live_bytes_ += end - offset;
  high_water_bytes_ = std::max(high_water_bytes_, end);
  peak_live_bytes_ = std::max(peak_live_bytes_, live_bytes_);
  return At(offset);
}

absl::Status DeviceArena::Free(int32_t id) {
  auto it = offset_of_.find(id);
  if (it == offset_of_.end()) {
    return absl::InternalError(absl::StrCat("arena: buffer ", id, " freed but not live"));
  }
  auto live = by_offset_.find(it->second);
  CHECK(live != by_offset_.end() && live->second.id == id);
  live_bytes_ -= live->second.end - live->first;
  by_offset_.erase(live);
  offset_of_.erase(it);
  name_of_.erase(id);
  return absl::OkStatus();
}

void DeviceArena::ResetPeaks() {
  high_water_bytes_ = 0;
  for (const auto& [offset, live] : by_offset_) {
    high_water_bytes_ = std::max(high_water_bytes_, live.end);
  }
  peak_live_bytes_ = live_bytes_;
}

}  // namespace headroom::executor
