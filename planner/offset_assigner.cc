#include "planner/offset_assigner.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <queue>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "util/check.h"
#include "util/status_macros.h"

namespace headroom::planner {
namespace {

bool IsPowerOfTwo(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

// Returns `bytes` rounded up to a multiple of `alignment_bytes` (a power of two).
uint64_t AlignUp(uint64_t bytes, uint64_t alignment_bytes) {
  return (bytes + alignment_bytes - 1) & ~(alignment_bytes - 1);
}

// Returns the aligned size of every request, CHECKing the REQUIRES of the header.
std::vector<uint64_t> AlignedSizes(const std::vector<BufferRequest>& requests,
                                   uint64_t alignment_bytes) {
  CHECK(IsPowerOfTwo(alignment_bytes)) << "alignment " << alignment_bytes;
  std::vector<uint64_t> sizes;
  sizes.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const BufferRequest& r = requests[i];
    CHECK(r.bytes > 0 && 0 <= r.first_position && r.first_position <= r.last_position)
        << "request " << i << ": bytes " << r.bytes << ", positions [" << r.first_position << ", "
        << r.last_position << "]";
    sizes.push_back(AlignUp(r.bytes, alignment_bytes));
  }
  return sizes;
}

// Returns 0..n-1 sorted by `less`.
template <typename Less>
std::vector<int> SortedIndices(size_t n, Less less) {
  std::vector<int> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(), less);
  return order;
}

// Returns "3" or "3 ('conv1')" when a name is given.
std::string BufferLabel(size_t i, const std::vector<std::string>& names) {
  if (i < names.size()) return absl::StrCat(i, " ('", names[i], "')");
  return absl::StrCat(i);
}

// ---------------------------------------------------------------------------------------------
// Greedy by size.

// Counts of items inserted at positions 0..n-1 with prefix sums, both O(log n) (a Fenwick tree).
class PrefixCounter {
 public:
  explicit PrefixCounter(size_t n) : tree_(n + 1, 0) {}
  void Add(size_t position) {
    for (size_t i = position + 1; i < tree_.size(); i += i & (~i + 1)) ++tree_[i];
  }
  // Returns how many were added at positions below `end`.
  size_t CountBelow(size_t end) const {
    size_t count = 0;
    for (size_t i = end; i > 0; i -= i & (~i + 1)) count += tree_[i];
    return count;
  }

 private:
  std::vector<size_t> tree_;
};

// The requests sorted by one of their positions (ties by index).
struct PositionOrder {
  std::vector<int> rank;                  // Request index -> its place in the order.
  std::vector<int32_t> sorted_positions;  // The positions in the order.
};

template <typename PositionOf>
PositionOrder SortByPositions(const std::vector<BufferRequest>& requests, PositionOf position_of) {
  std::vector<int> order(requests.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return std::make_pair(position_of(requests[a]), a) <
           std::make_pair(position_of(requests[b]), b);
  });
  PositionOrder sorted{std::vector<int>(requests.size()), {}};
  sorted.sorted_positions.reserve(order.size());
  for (size_t p = 0; p < order.size(); ++p) {
    sorted.rank[order[p]] = static_cast<int>(p);
    sorted.sorted_positions.push_back(position_of(requests[order[p]]));
  }
  return sorted;
}

// The placed buffers, indexed by lifetime: counts those alive at some position of [first, last] in
// O(log n), and lists them in O(log n + k) for k of them.
//
// Listing uses a priority search tree of fixed shape: a segment tree over all requests sorted by
// (first_position, index), each node holding at most one placed buffer, heap-ordered by
// last_position (a node's buffer ends no earlier than any below it). A placed buffer overlaps
// [first, last] iff its first_position <= last (a prefix of the sorted order) and its last_position
// >= first (a heap threshold), so a query walks the prefix and stops under any node whose buffer
// ends before `first`: every node it enters reports a buffer or lies on the prefix's boundary path.
//
// Counting subtracts from all placed buffers those ending before `first` and those starting
// after `last` (never both), each a prefix count.
//
// Call Insert() once per buffer, in any order, interleaved with the queries. Holds a reference
// to the requests, which must outlive it. Not thread-safe.
class PlacedIndex {
 public:
  explicit PlacedIndex(const std::vector<BufferRequest>& requests)
      : requests_(requests),
        by_first_(
            SortByPositions(requests, [](const BufferRequest& r) { return r.first_position; })),
        by_last_(SortByPositions(requests, [](const BufferRequest& r) { return r.last_position; })),
        slot_(4 * requests.size() + 4, -1),
        placed_by_first_(requests.size()),
        placed_by_last_(requests.size()) {}

  // Adds placed buffer `index`. O(log n).
  void Insert(int index) {
    ++placed_count_;
    placed_by_first_.Add(by_first_.rank[index]);
    placed_by_last_.Add(by_last_.rank[index]);
    int node = 1, lo = 0, hi = static_cast<int>(requests_.size());
    int carried = index;
    while (true) {
      int& slot = slot_[node];
      if (slot < 0) {
        slot = carried;
        return;
      }
      // A leaf's range holds one position, and each position belongs to one buffer.
      CHECK(hi - lo > 1) << "buffer " << carried << " inserted twice";
      if (EndsLater(carried, slot)) std::swap(carried, slot);
      const int mid = lo + (hi - lo) / 2;
      if (by_first_.rank[carried] < mid) {
        node = 2 * node, hi = mid;
      } else {
        node = 2 * node + 1, lo = mid;
      }
    }
  }

  // Returns the number of placed buffers alive at some position of [first, last]. O(log n).
  size_t CountOverlapping(int32_t first, int32_t last) const {
    const size_t ending_before = placed_by_last_.CountBelow(PositionsBelow(by_last_, first));
    const size_t starting_after =
        placed_count_ - placed_by_first_.CountBelow(PositionsBelow(by_first_, int64_t{last} + 1));
    return placed_count_ - ending_before - starting_after;
  }

  // Calls visit(index) for every placed buffer alive at some position of [first, last].
  template <typename Visitor>
  void ForEachOverlapping(int32_t first, int32_t last, const Visitor& visit) const {
    const int prefix = static_cast<int>(PositionsBelow(by_first_, int64_t{last} + 1));
    Visit(1, 0, static_cast<int>(requests_.size()), prefix, first, last, visit);
  }

 private:
  // Returns how many requests in `order` have their position below `position`.
  static size_t PositionsBelow(const PositionOrder& order, int64_t position) {
    const std::vector<int32_t>& positions = order.sorted_positions;
    return std::lower_bound(positions.begin(), positions.end(), position,
                            [](int32_t p, int64_t value) { return p < value; }) -
           positions.begin();
  }

  // Returns true if buffer a belongs above buffer b in the heap.
  bool EndsLater(int a, int b) const {
    return std::make_pair(requests_[a].last_position, -a) >
           std::make_pair(requests_[b].last_position, -b);
  }

  template <typename Visitor>
  void Visit(int node, int lo, int hi, int prefix, int32_t first, int32_t last,
             const Visitor& visit) const {
    if (lo >= prefix) return;
    const int index = slot_[node];
    // Empty: nothing was ever pushed below. Ends too early: neither does anything below.
    if (index < 0 || requests_[index].last_position < first) return;
    if (requests_[index].first_position <= last) visit(index);
    if (hi - lo == 1) return;
    const int mid = lo + (hi - lo) / 2;
    Visit(2 * node, lo, mid, prefix, first, last, visit);
    Visit(2 * node + 1, mid, hi, prefix, first, last, visit);
  }

  const std::vector<BufferRequest>& requests_;
  const PositionOrder by_first_;  // Also the order of the tree's leaves.
  const PositionOrder by_last_;
  std::vector<int> slot_;  // Tree node (1-based heap layout) -> buffer or -1.
  PrefixCounter placed_by_first_;
  PrefixCounter placed_by_last_;
  size_t placed_count_ = 0;
};

// Finds the tightest gap of at least `size` bytes between blocks fed in order of offset (which
// may overlap one another), the lowest on ties; without one, the end of the highest block.
class BestFitScan {
 public:
  explicit BestFitScan(uint64_t size) : size_(size) {}

  // REQUIRES: begin is no lower than that of any block added before.
  void Add(uint64_t begin, uint64_t end) {
    if (begin > cursor_) {
      const uint64_t gap = begin - cursor_;
      if (gap >= size_ && (!found_ || gap < best_gap_)) {
        found_ = true, best_gap_ = gap, best_offset_ = cursor_;
      }
    }
    cursor_ = std::max(cursor_, end);
  }

  // Returns the offset chosen.
  uint64_t offset() const { return found_ ? best_offset_ : cursor_; }

 private:
  uint64_t size_;
  uint64_t cursor_ = 0;  // Everything below is covered or a gap already considered.
  uint64_t best_offset_ = 0, best_gap_ = 0;
  bool found_ = false;
};

// Returns floor(log2(x)) + 1 for x > 0, and 0 for 0.
int BitWidth(size_t x) {
  int bits = 0;
  for (; x != 0; x >>= 1) ++bits;
  return bits;
}

// The buffers placed so far, two ways: by lifetime and by offset, answering best-fit queries.
//
// Best fit needs the k placed buffers alive with the new one, in offset order. With p placed,
// BestFit() lists them from a PlacedIndex and sorts them, O(log n + k log k), or, when that
// would cost more, walks all p in offset order and skips those not alive, O(p).
//
// Holds references to the requests, the aligned sizes and the offsets it writes, which must
// outlive it. Not thread-safe.
class PlacedBuffers {
 public:
  PlacedBuffers(const std::vector<BufferRequest>& requests, const std::vector<uint64_t>& sizes,
                std::vector<uint64_t>& offsets)
      : requests_(requests), sizes_(sizes), offsets_(offsets), by_lifetime_(requests) {}

  // Returns the offset of the tightest gap for buffer i among the placed buffers alive with it
  // (the lowest on ties), or else the end of the highest of them.
  uint64_t BestFit(int i) const {
    const BufferRequest& r = requests_[i];
    const size_t k = by_lifetime_.CountOverlapping(r.first_position, r.last_position);
    return k * BitWidth(k) <= by_offset_.size() ? BestFitBySorting(i, k)
                                                 : BestFitByScanning(i, k);
  }

  // Records buffer i at `offset`.
  void Place(int i, uint64_t offset) {
    offsets_[i] = offset;
    by_lifetime_.Insert(i);
    by_offset_.insert(
        {offset, i, offset + sizes_[i], requests_[i].first_position, requests_[i].last_position});
  }

 private:
  // A placed buffer, with what a scan needs at hand; ordered by offset, then index.
  struct Block {
    uint64_t offset;
    int index;
    uint64_t end;
    int32_t first_position;
    int32_t last_position;
    bool operator<(const Block& other) const {
      return std::make_pair(offset, index) < std::make_pair(other.offset, other.index);
    }
  };

  // Lists the k placed buffers alive with i, then sorts them. O(log n + k log k).
  uint64_t BestFitBySorting(int i, size_t k) const {
    const BufferRequest& r = requests_[i];
    std::vector<std::pair<uint64_t, int>> alive;
    alive.reserve(k);
    by_lifetime_.ForEachOverlapping(r.first_position, r.last_position,
                                    [&](int j) { alive.emplace_back(offsets_[j], j); });
    CHECK(alive.size() == k) << "listed " << alive.size() << " of " << k;
    std::sort(alive.begin(), alive.end());
    BestFitScan scan(sizes_[i]);
    for (const auto& [offset, j] : alive) scan.Add(offset, offset + sizes_[j]);
    return scan.offset();
  }

  // Walks every placed buffer in offset order, skipping all but the k alive with i. O(p).
  uint64_t BestFitByScanning(int i, size_t k) const {
    const BufferRequest& r = requests_[i];
    BestFitScan scan(sizes_[i]);
    size_t alive = 0;
    for (const Block& block : by_offset_) {
      if (block.first_position <= r.last_position && r.first_position <= block.last_position) {
        scan.Add(block.offset, block.end);
        ++alive;
      }
    }
    CHECK(alive == k) << "found " << alive << " of " << k;
    return scan.offset();
  }

  const std::vector<BufferRequest>& requests_;
  const std::vector<uint64_t>& sizes_;
  std::vector<uint64_t>& offsets_;
  PlacedIndex by_lifetime_;
  absl::btree_set<Block> by_offset_;
};

// Largest first (ties: earlier first_position, then index); each into the best-fitting gap among
// the placed buffers whose lifetimes overlap it (see PlacedBuffers). O(n log n + sum over buffers
// of min(k log k, p)), k being the placed buffers overlapping it and p all placed before it: O(n^2)
// when every lifetime overlaps every other (as the activations of a training step do), near
// O(n log n) when each overlaps few.
//
// With `longest_first`, buffers that live longer come first (ties: largest first): a buffer
// alive through most of the step (the batch, a cached input) placed after large short-lived
// ones (a node's scratch, a re-forward's output) finds no gap free for all its positions and goes
// on top of them, where it then holds the arena's peak up.
class GreedyBySize : public OffsetStrategy {
 public:
  explicit GreedyBySize(bool longest_first) : longest_first_(longest_first) {}

  std::string name() const override {
    return longest_first_ ? "greedy_by_lifetime" : "greedy_by_size";
  }

  OffsetAssignment Assign(const std::vector<BufferRequest>& requests,
                          uint64_t alignment_bytes) const override {
    const std::vector<uint64_t> sizes = AlignedSizes(requests, alignment_bytes);
    auto span = [&](int i) { return requests[i].last_position - requests[i].first_position; };
    const std::vector<int> order = SortedIndices(requests.size(), [&](int a, int b) {
      if (longest_first_ && span(a) != span(b)) return span(a) > span(b);
      if (sizes[a] != sizes[b]) return sizes[a] > sizes[b];
      return std::make_pair(requests[a].first_position, a) <
             std::make_pair(requests[b].first_position, b);
    });

    OffsetAssignment assignment{std::vector<uint64_t>(requests.size(), 0), 0, name()};
    PlacedBuffers placed(requests, sizes, assignment.offsets);
    for (const int i : order) {
      const uint64_t offset = placed.BestFit(i);
      placed.Place(i, offset);
      assignment.arena_bytes = std::max(assignment.arena_bytes, offset + sizes[i]);
    }
    return assignment;
  }

 private:
  const bool longest_first_;
};

// ---------------------------------------------------------------------------------------------
// Greedy by time.

// A heap that grows at its top and never shrinks, with best-fit allocation from the free blocks
// below the top; freed neighbours coalesce. Each call is O(log b) for b free blocks. Not
// thread-safe.
class FreeList {
 public:
  // Returns the offset of `bytes` newly taken: from the smallest free block that fits (lowest
  // offset on ties), else from the top (starting at the highest free block if it touches it).
  uint64_t Allocate(uint64_t bytes) {
    auto fit = by_size_.lower_bound({bytes, 0});
    if (fit != by_size_.end()) {
      const auto [size, offset] = *fit;
      Erase(offset, size);
      if (size > bytes) Insert(offset + bytes, size - bytes);
      return offset;
    }
    uint64_t offset = top_bytes_;
    if (!by_offset_.empty()) {
      const auto [last_offset, last_size] = *by_offset_.rbegin();
      if (last_offset + last_size == top_bytes_) {
        Erase(last_offset, last_size);
        offset = last_offset;
      }
    }
    top_bytes_ = offset + bytes;
    return offset;
  }

  // Returns [offset, offset + bytes) to the free blocks, merged with free neighbours.
  // REQUIRES: it was allocated and is not free.
  void Free(uint64_t offset, uint64_t bytes) {
    auto next = by_offset_.lower_bound(offset);
    if (next != by_offset_.end()) {
      CHECK(offset + bytes <= next->first) << "double free at " << offset;
      if (offset + bytes == next->first) {
        bytes += next->second;
        Erase(next->first, next->second);
      }
    }
    auto after = by_offset_.lower_bound(offset);
    if (after != by_offset_.begin()) {
      const auto [prev_offset, prev_size] = *std::prev(after);
      CHECK(prev_offset + prev_size <= offset) << "double free at " << offset;
      if (prev_offset + prev_size == offset) {
        Erase(prev_offset, prev_size);
        offset = prev_offset;
        bytes += prev_size;
      }
    }
    Insert(offset, bytes);
  }

  // Returns the highest byte ever allocated, plus one.
  uint64_t top_bytes() const { return top_bytes_; }

 private:
  void Insert(uint64_t offset, uint64_t bytes) {
    by_offset_.emplace(offset, bytes);
    by_size_.emplace(bytes, offset);
  }
  void Erase(uint64_t offset, uint64_t bytes) {
    by_offset_.erase(offset);
    by_size_.erase({bytes, offset});
  }

  std::map<uint64_t, uint64_t> by_offset_;         // Free block offset -> size.
  std::set<std::pair<uint64_t, uint64_t>> by_size_;  // (size, offset) of every free block.
  uint64_t top_bytes_ = 0;
};

// Replays the lifetimes in position order through a FreeList: at each first_position, frees every
// buffer whose last_position has passed, then allocates the buffers starting there, largest first
// (ties: index). O(n log n).
class GreedyByTime : public OffsetStrategy {
 public:
  std::string name() const override { return "greedy_by_time"; }

  OffsetAssignment Assign(const std::vector<BufferRequest>& requests,
                          uint64_t alignment_bytes) const override {
    const std::vector<uint64_t> sizes = AlignedSizes(requests, alignment_bytes);
    const std::vector<int> order = SortedIndices(requests.size(), [&](int a, int b) {
      if (requests[a].first_position != requests[b].first_position) {
        return requests[a].first_position < requests[b].first_position;
      }
      if (sizes[a] != sizes[b]) return sizes[a] > sizes[b];
      return a < b;
    });

    OffsetAssignment assignment{std::vector<uint64_t>(requests.size(), 0), 0, name()};
    FreeList heap;
    // Live buffers by (last_position, index), earliest end on top.
    using Live = std::pair<int32_t, int>;
    std::priority_queue<Live, std::vector<Live>, std::greater<Live>> live;
    for (const int i : order) {
      while (!live.empty() && live.top().first < requests[i].first_position) {
        const int done = live.top().second;
        live.pop();
        heap.Free(assignment.offsets[done], sizes[done]);
      }
      assignment.offsets[i] = heap.Allocate(sizes[i]);
      live.emplace(requests[i].last_position, i);
    }
    assignment.arena_bytes = heap.top_bytes();
    return assignment;
  }
};

// ---------------------------------------------------------------------------------------------
// Verification.

// Returns OK if request `i` satisfies the REQUIRES of BufferRequest: some bytes, and a
// lifetime of positions in order.
absl::Status CheckRequest(const BufferRequest& r, size_t i, const std::vector<std::string>& names) {
  if (r.bytes == 0 || r.first_position < 0 || r.first_position > r.last_position) {
    return absl::InvalidArgumentError(
        absl::StrCat("buffer ", BufferLabel(i, names),
                     ": needs bytes > 0 and 0 <= first_position <= last_position, has bytes ",
                     r.bytes, " and positions [", r.first_position, ", ", r.last_position, "]"));
  }
  return absl::OkStatus();
}

// Returns OK if every request satisfies the REQUIRES of BufferRequest and each offset is aligned
// and inside the arena.
absl::Status VerifyEachBuffer(const std::vector<BufferRequest>& requests,
                              const OffsetAssignment& assignment, uint64_t alignment_bytes,
                              const std::vector<std::string>& names) {
  for (size_t i = 0; i < requests.size(); ++i) {
    const BufferRequest& r = requests[i];
    RETURN_IF_ERROR(CheckRequest(r, i, names));
    const uint64_t offset = assignment.offsets[i];
    const uint64_t size = AlignUp(r.bytes, alignment_bytes);
    if (offset % alignment_bytes != 0) {
      return absl::InternalError(absl::StrCat("buffer ", BufferLabel(i, names), " at offset ",
                                              offset, " is not a multiple of the alignment ",
                                              alignment_bytes));
    }
    if (offset > assignment.arena_bytes || size > assignment.arena_bytes - offset) {
      return absl::InternalError(absl::StrCat("buffer ", BufferLabel(i, names), " occupies [",
                                              offset, ", ", offset + size,
                                              ") beyond arena_bytes ", assignment.arena_bytes));
    }
  }
  return absl::OkStatus();
}

// Returns OK if no two buffers alive at the same position share a byte: sweeps the positions
// keeping the live buffers in a map by offset (disjoint, else already reported), checking each new
// buffer against its neighbours there.
absl::Status VerifyLiveBuffersDisjoint(const std::vector<BufferRequest>& requests,
                                       const OffsetAssignment& assignment,
                                       uint64_t alignment_bytes,
                                       const std::vector<std::string>& names) {
  std::vector<int> order(requests.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return std::make_pair(requests[a].first_position, a) <
           std::make_pair(requests[b].first_position, b);
  });
  auto size_of = [&](int i) { return AlignUp(requests[i].bytes, alignment_bytes); };
  std::map<uint64_t, int> live_by_offset;
  using Live = std::pair<int32_t, int>;  // (last_position, index)
  std::priority_queue<Live, std::vector<Live>, std::greater<Live>> live_by_end;
  for (const int i : order) {
    const int32_t position = requests[i].first_position;
    while (!live_by_end.empty() && live_by_end.top().first < position) {
      live_by_offset.erase(assignment.offsets[live_by_end.top().second]);
      live_by_end.pop();
    }
    const uint64_t begin = assignment.offsets[i], end = begin + size_of(i);
    auto next = live_by_offset.lower_bound(begin);
    int other = -1;
    if (next != live_by_offset.end() && next->first < end) {
      other = next->second;
    } else if (next != live_by_offset.begin() &&
               std::prev(next)->first + size_of(std::prev(next)->second) > begin) {
      other = std::prev(next)->second;
    }
    if (other >= 0) {
      const uint64_t other_begin = assignment.offsets[other];
      return absl::InternalError(absl::StrCat(
          "buffers ", BufferLabel(std::min(i, other), names), " and ",
          BufferLabel(std::max(i, other), names), " overlap in bytes [",
          std::max(begin, other_begin), ", ", std::min(end, other_begin + size_of(other)),
          ") while both alive at position ", position));
    }
    live_by_offset.emplace(begin, i);
    live_by_end.emplace(requests[i].last_position, i);
  }
  return absl::OkStatus();
}

}  // namespace

std::unique_ptr<OffsetStrategy> GreedyBySizeBestFit() {
  return std::make_unique<GreedyBySize>(/*longest_first=*/false);
}

std::unique_ptr<OffsetStrategy> GreedyByLifetimeBestFit() {
  return std::make_unique<GreedyBySize>(/*longest_first=*/true);
}

std::unique_ptr<OffsetStrategy> GreedyByTimeBestFit() { return std::make_unique<GreedyByTime>(); }

std::vector<std::unique_ptr<OffsetStrategy>> DefaultStrategies() {
  // Time order first: it is O(n log n) and on training graphs usually reaches the lower bound,
  // which ends the search; size order (O(n^2) on the nested lifetimes of a training step) runs
  // only when time order leaves room to win, and lifetime order (as costly) only when both do
  // (sectioned steps with kernel scratch, whose short large buffers size order scatters).
  std::vector<std::unique_ptr<OffsetStrategy>> strategies;
  strategies.push_back(GreedyByTimeBestFit());
  strategies.push_back(GreedyBySizeBestFit());
  strategies.push_back(GreedyByLifetimeBestFit());
  return strategies;
}

uint64_t AlignedLowerBound(const std::vector<BufferRequest>& requests, uint64_t alignment_bytes) {
  const std::vector<uint64_t> sizes = AlignedSizes(requests, alignment_bytes);
  // (position, kind, size): at one position, ends (kind 0, from last_position + 1) before starts
  // (kind 1).
  std::vector<std::tuple<int64_t, int, uint64_t>> events;
  events.reserve(2 * requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    events.emplace_back(requests[i].first_position, 1, sizes[i]);
    events.emplace_back(int64_t{requests[i].last_position} + 1, 0, sizes[i]);
  }
  std::sort(events.begin(), events.end());
  uint64_t live_bytes = 0, peak_bytes = 0;
  for (const auto& [position, kind, size] : events) {
    if (kind == 1) {
      live_bytes += size;
      peak_bytes = std::max(peak_bytes, live_bytes);
    } else {
      live_bytes -= size;
    }
  }
  return peak_bytes;
}

absl::Status CheckAssignable(const std::vector<BufferRequest>& requests, uint64_t alignment_bytes,
                             const std::vector<std::string>& names) {
  if (!IsPowerOfTwo(alignment_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("alignment ", alignment_bytes, " is not a power of two"));
  }
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  uint64_t total_bytes = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const BufferRequest& r = requests[i];
    RETURN_IF_ERROR(CheckRequest(r, i, names));
    // AlignUp(bytes) = bytes + alignment - 1 rounded down: it must not pass 2^64.
    if (r.bytes > kMax - (alignment_bytes - 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("buffer ", BufferLabel(i, names), ": ", r.bytes,
                       " bytes aligned to ", alignment_bytes, " overflow uint64"));
    }
    const uint64_t size = AlignUp(r.bytes, alignment_bytes);
    if (size > kMax - total_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "buffers 0..", BufferLabel(i, names), ": their aligned sizes (alignment ",
          alignment_bytes, ") add up to more than 2^64 bytes"));
    }
    total_bytes += size;
  }
  return absl::OkStatus();
}

absl::StatusOr<OffsetAssignment> AssignOffsets(
    const std::vector<BufferRequest>& requests, uint64_t alignment_bytes,
    const std::vector<std::unique_ptr<OffsetStrategy>>& strategies) {
  CHECK(!strategies.empty()) << "AssignOffsets needs at least one strategy";
  absl::Status assignable = CheckAssignable(requests, alignment_bytes);
  if (!assignable.ok()) return assignable;
  const uint64_t lower_bound_bytes = AlignedLowerBound(requests, alignment_bytes);
  OffsetAssignment best;
  bool have_best = false;
  for (const auto& strategy : strategies) {
    CHECK(strategy != nullptr) << "null strategy";
    OffsetAssignment candidate = strategy->Assign(requests, alignment_bytes);
    CHECK(candidate.offsets.size() == requests.size())
        << strategy->name() << " placed " << candidate.offsets.size() << " of "
        << requests.size() << " buffers";
    candidate.strategy = strategy->name();
    if (!have_best || candidate.arena_bytes < best.arena_bytes) {
      best = std::move(candidate);
      have_best = true;
    }
    if (best.arena_bytes == lower_bound_bytes) break;
  }
  return best;
}

absl::Status VerifyNoOverlap(const std::vector<BufferRequest>& requests,
                             const OffsetAssignment& assignment, uint64_t alignment_bytes,
                             const std::vector<std::string>& names) {
  if (!IsPowerOfTwo(alignment_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("alignment ", alignment_bytes, " is not a power of two"));
  }
  if (assignment.offsets.size() != requests.size()) {
    return absl::InternalError(absl::StrCat("assignment has ", assignment.offsets.size(),
                                            " offsets for ", requests.size(), " buffers"));
  }
  absl::Status status = VerifyEachBuffer(requests, assignment, alignment_bytes, names);
  if (!status.ok()) return status;
  return VerifyLiveBuffersDisjoint(requests, assignment, alignment_bytes, names);
}

}  // namespace headroom::planner
