// The device arena: one block of backend memory of fixed capacity, allocated once, in which
// the executor places each buffer at the offset the plan gave it. Doing only: the plan
// decides where and when; the arena checks that what the executor does keeps to it and
// measures what it really used.
//
// Call Allocate() when a buffer's first tensor is written and Free() after its last use.
// Going past the capacity is an out-of-memory error, as on a GPU; two live buffers that
// overlap are an internal error (a planner or executor bug). Thread-compatible.
#ifndef HEADROOM_EXECUTOR_DEVICE_ARENA_H_
#define HEADROOM_EXECUTOR_DEVICE_ARENA_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "executor/backend.h"

namespace headroom::executor {

class DeviceArena {
 public:
  // Takes ownership of `memory`; its size is the capacity.
  explicit DeviceArena(std::unique_ptr<Buffer> memory);

  // Returns the address of bytes [offset, offset + bytes) for buffer `id` and marks them
  // in use. ResourceExhausted if they end past the capacity, Internal if they overlap a
  // live buffer or `id` is live already. `what` names the buffer in messages.
  absl::StatusOr<void*> Allocate(int32_t id, uint64_t offset, uint64_t bytes,
                                 const std::string& what);
  // Marks buffer `id` free; Internal if it is not live.
  absl::Status Free(int32_t id);

  // Returns the address at `offset` without allocating (for views the executor prepares
  // once). REQUIRES: offset < capacity.
  void* At(uint64_t offset) const;

  uint64_t capacity_bytes() const { return memory_->bytes(); }
  // Sum of live buffers' bytes now.
  uint64_t live_bytes() const { return live_bytes_; }
  // Highest end offset of any live buffer since construction (or ResetPeaks()): the bytes
  // the arena really needed.
  uint64_t high_water_bytes() const { return high_water_bytes_; }
  // Largest live_bytes() since construction (or ResetPeaks()).
  uint64_t peak_live_bytes() const { return peak_live_bytes_; }
  void ResetPeaks();

 private:
  struct Live {
    uint64_t end;
    int32_t id;
  };

  std::unique_ptr<Buffer> memory_;
  // Live buffers by start offset.
  std::map<uint64_t, Live> by_offset_;
  absl::flat_hash_map<int32_t, uint64_t> offset_of_;
  absl::flat_hash_map<int32_t, std::string> name_of_;
  uint64_t live_bytes_ = 0;
  uint64_t high_water_bytes_ = 0;
  uint64_t peak_live_bytes_ = 0;
};

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_DEVICE_ARENA_H_
