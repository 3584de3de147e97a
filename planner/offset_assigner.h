// Offset assignment: places buffers with known lifetimes into one arena so that no two
// buffers alive at the same position overlap in bytes. Deciding only: nothing is allocated.
#ifndef HEADROOM_PLANNER_OFFSET_ASSIGNER_H_
#define HEADROOM_PLANNER_OFFSET_ASSIGNER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace headroom::planner {

// Default alignment of every offset (and rounding of every size) in the arena.
inline constexpr uint64_t kDefaultAlignmentBytes = 256;

// One buffer to place: its size and the positions it is alive at, both ends included.
// REQUIRES: bytes > 0, 0 <= first_position <= last_position.
struct BufferRequest {
  uint64_t bytes = 0;
  int32_t first_position = 0;
  int32_t last_position = 0;
};

// Where each buffer goes.
struct OffsetAssignment {
  // offsets[i] is the offset of request i, a multiple of the alignment.
  std::vector<uint64_t> offsets;
  // One past the highest byte used: the arena's size (a multiple of the alignment).
  uint64_t arena_bytes = 0;
  // The strategy that produced it.
  std::string strategy;
};

// A way to place buffers. Implementations are stateless and thread-compatible.
class OffsetStrategy {
 public:
  virtual ~OffsetStrategy() = default;
  // Returns a short name, e.g. "greedy_by_size".
  virtual std::string name() const = 0;
  // Returns an assignment of every request; sizes are rounded up to `alignment_bytes`.
  // REQUIRES: alignment_bytes is a power of two.
  virtual OffsetAssignment Assign(const std::vector<BufferRequest>& requests,
                                  uint64_t alignment_bytes) const = 0;
};

// Largest first; each into the free gap (among buffers already placed whose lifetimes overlap
// it) that fits it most tightly, else on top.
std::unique_ptr<OffsetStrategy> GreedyBySizeBestFit();

// As GreedyBySizeBestFit, but the longest-lived buffers first (ties: largest first).
std::unique_ptr<OffsetStrategy> GreedyByLifetimeBestFit();

// In order of first position (an online allocator with best fit over a free list, coalescing
// freed neighbours): O(n log n).
std::unique_ptr<OffsetStrategy> GreedyByTimeBestFit();

// The strategies Headroom tries, in order: greedy by time, by size, by lifetime.
std::vector<std::unique_ptr<OffsetStrategy>> DefaultStrategies();

// Returns the largest sum of aligned sizes alive at any position: no assignment can be smaller.
uint64_t AlignedLowerBound(const std::vector<BufferRequest>& requests, uint64_t alignment_bytes);

// Returns OK if `requests` can be placed with `alignment_bytes`: the alignment is a power of
// two, every request satisfies the REQUIRES of BufferRequest, and the sum of all aligned sizes
// (which bounds every strategy's arena, so every offset + size) fits in uint64. Otherwise
// InvalidArgument naming the first offending buffer (by `names[i]` when given) or the sum.
absl::Status CheckAssignable(const std::vector<BufferRequest>& requests, uint64_t alignment_bytes,
                             const std::vector<std::string>& names = {});

// Returns the smallest assignment among `strategies` (the first on ties). Stops early once
// one reaches AlignedLowerBound, which none can beat. InvalidArgument when CheckAssignable
// fails: the strategies' CHECKs and uint64 arithmetic are never reached with such requests.
absl::StatusOr<OffsetAssignment> AssignOffsets(const std::vector<BufferRequest>& requests,
                               uint64_t alignment_bytes,
                               const std::vector<std::unique_ptr<OffsetStrategy>>& strategies);

// Returns OK if every offset is aligned, every buffer fits inside arena_bytes, and no two
// buffers whose lifetimes overlap share a byte; otherwise Internal naming the first offending
// pair by index (and by `names[i]` when given). O(n log n).
absl::Status VerifyNoOverlap(const std::vector<BufferRequest>& requests,
                             const OffsetAssignment& assignment, uint64_t alignment_bytes,
                             const std::vector<std::string>& names = {});

}  // namespace headroom::planner

#endif  // HEADROOM_PLANNER_OFFSET_ASSIGNER_H_
