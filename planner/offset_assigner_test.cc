#include "planner/offset_assigner.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom::planner {
namespace {

using ::testing::HasSubstr;

// Named buffers, one line each: Buffers().Add("a", 1, 0, 1) adds buffer 0, of 1 byte, alive at
// positions 0 and 1.
class Buffers {
 public:
  Buffers& Add(std::string name, uint64_t bytes, int32_t first_position, int32_t last_position) {
    names_.push_back(std::move(name));
    requests_.push_back({bytes, first_position, last_position});
    return *this;
  }
  const std::vector<BufferRequest>& requests() const { return requests_; }
  const std::vector<std::string>& names() const { return names_; }

  // Returns the offsets by name and the arena size: "a@2 b@0 arena=3".
  std::string Layout(const OffsetAssignment& assignment) const {
    std::string out;
    for (size_t i = 0; i < names_.size() && i < assignment.offsets.size(); ++i) {
      absl::StrAppend(&out, names_[i], "@", assignment.offsets[i], " ");
    }
    return absl::StrCat(out, "arena=", assignment.arena_bytes);
  }

 private:
  std::vector<BufferRequest> requests_;
  std::vector<std::string> names_;
};

// Returns every buffer as "i:[first,last]x bytes@offset", for failure messages.
std::string DebugLayout(const std::vector<BufferRequest>& requests,
                        const OffsetAssignment& assignment) {
  std::string out = absl::StrCat(assignment.strategy, " arena=", assignment.arena_bytes, ":");
  for (size_t i = 0; i < requests.size() && i < assignment.offsets.size(); ++i) {
    absl::StrAppend(&out, " ", i, ":[", requests[i].first_position, ",", requests[i].last_position,
                    "]x", requests[i].bytes, "@", assignment.offsets[i]);
  }
  return out;
}

uint64_t AlignUp(uint64_t bytes, uint64_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

bool LifetimesOverlap(const BufferRequest& a, const BufferRequest& b) {
  return a.first_position <= b.last_position && b.first_position <= a.last_position;
}

// ---------------------------------------------------------------------------------------------
// Slow references, written as directly as possible from the definitions.

uint64_t ReferenceLowerBound(const std::vector<BufferRequest>& requests, uint64_t alignment) {
  int32_t last = -1;
  for (const BufferRequest& r : requests) last = std::max(last, r.last_position);
  uint64_t peak = 0;
  for (int32_t step = 0; step <= last; ++step) {
    uint64_t live = 0;
    for (const BufferRequest& r : requests) {
      if (r.first_position <= step && step <= r.last_position) live += AlignUp(r.bytes, alignment);
    }
    peak = std::max(peak, live);
  }
  return peak;
}

// Returns the tightest gap for `size` below the top among `blocks` (lowest on ties), else the
// end of the highest one; `top` > 0 also offers the gap between the highest one and `top`.
uint64_t ReferenceBestFit(std::vector<std::pair<uint64_t, uint64_t>> blocks, uint64_t size,
                          uint64_t top) {
  std::sort(blocks.begin(), blocks.end());
  uint64_t cursor = 0, best = 0, best_gap = UINT64_MAX;
  for (const auto& [begin, end] : blocks) {
    if (begin > cursor && begin - cursor >= size && begin - cursor < best_gap) {
      best_gap = begin - cursor, best = cursor;
    }
    cursor = std::max(cursor, end);
  }
  if (top > cursor && top - cursor >= size && top - cursor < best_gap) {
    best_gap = top - cursor, best = cursor;
  }
  return best_gap != UINT64_MAX ? best : cursor;
}

// Greedy by size with a linear scan over all placed buffers (TFLite's way).
std::vector<uint64_t> ReferenceGreedyBySize(const std::vector<BufferRequest>& requests,
                                            uint64_t alignment) {
  std::vector<int> order(requests.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto size = [&](int i) { return AlignUp(requests[i].bytes, alignment); };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (size(a) != size(b)) return size(a) > size(b);
    return requests[a].first_position < requests[b].first_position;
  });
  std::vector<uint64_t> offsets(requests.size());
  std::vector<int> placed;
  for (const int i : order) {
    std::vector<std::pair<uint64_t, uint64_t>> blocks;
    for (const int j : placed) {
      if (LifetimesOverlap(requests[i], requests[j])) {
        blocks.emplace_back(offsets[j], offsets[j] + size(j));
      }
    }
    offsets[i] = ReferenceBestFit(blocks, size(i), /*top=*/0);
    placed.push_back(i);
  }
  return offsets;
}

// Greedy by time without a free list: the free blocks are the gaps between live buffers below
// the highest byte allocated so far, recomputed for every allocation.
std::vector<uint64_t> ReferenceGreedyByTime(const std::vector<BufferRequest>& requests,
                                            uint64_t alignment) {
  std::vector<int> order(requests.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto size = [&](int i) { return AlignUp(requests[i].bytes, alignment); };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (requests[a].first_position != requests[b].first_position) {
      return requests[a].first_position < requests[b].first_position;
    }
    return size(a) > size(b);
  });
  std::vector<uint64_t> offsets(requests.size());
  std::vector<int> live;
  uint64_t top = 0;
  for (const int i : order) {
    std::vector<std::pair<uint64_t, uint64_t>> blocks;
    std::vector<int> still_live;
    for (const int j : live) {
      if (requests[j].last_position >= requests[i].first_position) {
        still_live.push_back(j);
        blocks.emplace_back(offsets[j], offsets[j] + size(j));
      }
    }
    live = still_live;
    offsets[i] = ReferenceBestFit(blocks, size(i), top);
    top = std::max(top, offsets[i] + size(i));
    live.push_back(i);
  }
  return offsets;
}

// Returns true if the assignment is valid, checking every pair.
bool ReferenceValid(const std::vector<BufferRequest>& requests, const OffsetAssignment& a,
                    uint64_t alignment) {
  for (size_t i = 0; i < requests.size(); ++i) {
    if (a.offsets[i] % alignment != 0) return false;
    if (a.offsets[i] + AlignUp(requests[i].bytes, alignment) > a.arena_bytes) return false;
    for (size_t j = 0; j < i; ++j) {
      if (LifetimesOverlap(requests[i], requests[j]) &&
          a.offsets[i] < a.offsets[j] + AlignUp(requests[j].bytes, alignment) &&
          a.offsets[j] < a.offsets[i] + AlignUp(requests[i].bytes, alignment)) {
        return false;
      }
    }
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Random requests.

// Returns `count` buffers over `num_positions` positions: a quarter alive at one position, an
// eighth at all of them, the rest for a random stretch; sizes of 1 to `max_bytes` bytes, half of
// them a multiple of 256.
std::vector<BufferRequest> RandomRequests(std::mt19937& rng, int count, int32_t num_positions,
                                          uint64_t max_bytes) {
  std::vector<BufferRequest> requests;
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  for (int i = 0; i < count; ++i) {
    BufferRequest r;
    r.bytes = uniform(1, max_bytes);
    if (uniform(0, 1) == 0) r.bytes = AlignUp(r.bytes, 256);
    const int kind = uniform(0, 7);
    r.first_position = uniform(0, num_positions - 1);
    if (kind < 2) {
      r.last_position = r.first_position;
    } else if (kind == 2) {
      r.first_position = 0, r.last_position = num_positions - 1;
    } else {
      r.last_position =
          std::min<int64_t>(num_positions - 1, r.first_position + uniform(0, num_positions / 3));
    }
    requests.push_back(r);
  }
  return requests;
}

// Activation i of `layers` lives from forward position i to backward position
// 2 * layers - 1 - i; with `gradients`, the gradient made at each backward position lives until
// the next.
std::vector<BufferRequest> TrainingStack(const std::vector<uint64_t>& activation_bytes,
                                         bool gradients) {
  const int32_t layers = activation_bytes.size();
  std::vector<BufferRequest> requests;
  for (int32_t i = 0; i < layers; ++i) {
    requests.push_back({activation_bytes[i], i, 2 * layers - 1 - i});
    if (gradients) requests.push_back({activation_bytes[i], 2 * layers - 1 - i, 2 * layers - i});
  }
  return requests;
}

// ---------------------------------------------------------------------------------------------
// Fakes.

// Records the name of each strategy called, then delegates.
class RecordingStrategy : public OffsetStrategy {
 public:
  RecordingStrategy(std::unique_ptr<OffsetStrategy> inner, std::vector<std::string>* calls)
      : inner_(std::move(inner)), calls_(calls) {}
  std::string name() const override { return inner_->name(); }
  OffsetAssignment Assign(const std::vector<BufferRequest>& requests,
                          uint64_t alignment_bytes) const override {
    calls_->push_back(name());
    return inner_->Assign(requests, alignment_bytes);
  }

 private:
  std::unique_ptr<OffsetStrategy> inner_;
  std::vector<std::string>* calls_;
};

// Returns a fixed assignment, under its own name.
class FixedStrategy : public OffsetStrategy {
 public:
  FixedStrategy(std::string name, OffsetAssignment assignment)
      : name_(std::move(name)), assignment_(std::move(assignment)) {}
  std::string name() const override { return name_; }
  OffsetAssignment Assign(const std::vector<BufferRequest>&, uint64_t) const override {
    return assignment_;
  }

 private:
  std::string name_;
  OffsetAssignment assignment_;
};

std::vector<std::unique_ptr<OffsetStrategy>> Recorded(std::vector<std::string>* calls) {
  std::vector<std::unique_ptr<OffsetStrategy>> strategies;
  for (auto& strategy : DefaultStrategies()) {
    strategies.push_back(std::make_unique<RecordingStrategy>(std::move(strategy), calls));
  }
  return strategies;
}

// ---------------------------------------------------------------------------------------------
// Hand examples.

// Two 2-byte buffers at positions 0 and 2, and a chain of 1-byte buffers across them:
//   a: 1 byte, positions 0-1   b: 1 byte, positions 1-2
//   c: 2 bytes, position 0     d: 2 bytes, position 2
// Size order stacks c and d at the bottom, so a and b, which overlap each other and one of them,
// go on top; time order lets b take c's hole and d the hole a leaves.
//   greedy_by_size (4 bytes):      greedy_by_time (3 bytes, the lower bound):
//     byte 3   .  b  b
//     byte 2   a  a  .               byte 2   a  a  d
//     byte 1   c  .  d               byte 1   c  .  d
//     byte 0   c  .  d               byte 0   c  b  b
//   position   0  1  2             position   0  1  2
Buffers TimeOrderWins() {
  return Buffers().Add("a", 1, 0, 1).Add("b", 1, 1, 2).Add("c", 2, 0, 0).Add("d", 2, 2, 2);
}

// A 2-byte buffer at position 1 between a 1-byte buffer at position 0 and one alive throughout:
//   x: 1 byte, position 0   y: 1 byte, positions 0-2   big: 2 bytes, position 1
// Time order puts x and y side by side at position 0; x's hole is then too small for big, which
// goes on top. Size order places big first, y above it and x into the gap below y.
//   greedy_by_size (3 bytes, the lower bound):   greedy_by_time (4 bytes):
//                                                  byte 3   .  big .
//     byte 2   y  y   y                            byte 2   .  big .
//     byte 1   .  big .                            byte 1   y  y   y
//     byte 0   x  big .                            byte 0   x  .   .
//   position   0  1   2                          position   0  1   2
Buffers SizeOrderWins() {
  return Buffers().Add("x", 1, 0, 0).Add("y", 1, 0, 2).Add("big", 2, 1, 1);
}

TEST(OffsetAssignerTest, TimeOrderBeatsSizeOrderOnAChainAcrossTwoLargeBuffers) {
  const Buffers buffers = TimeOrderWins();
  const auto& requests = buffers.requests();
  ASSERT_EQ(AlignedLowerBound(requests, 1), 3);

  const OffsetAssignment by_size = GreedyBySizeBestFit()->Assign(requests, 1);
  EXPECT_EQ(buffers.Layout(by_size), "a@2 b@3 c@0 d@0 arena=4");
  const OffsetAssignment by_time = GreedyByTimeBestFit()->Assign(requests, 1);
  EXPECT_EQ(buffers.Layout(by_time), "a@2 b@0 c@0 d@1 arena=3");

  // Time order runs first and reaches the lower bound, so size order is never tried.
  std::vector<std::string> calls;
  const OffsetAssignment best = AssignOffsets(requests, 1, Recorded(&calls)).value();
  EXPECT_EQ(buffers.Layout(best), "a@2 b@0 c@0 d@1 arena=3");
  EXPECT_EQ(best.strategy, "greedy_by_time");
  EXPECT_THAT(calls, ::testing::ElementsAre("greedy_by_time"));
  EXPECT_TRUE(VerifyNoOverlap(requests, best, 1, buffers.names()).ok());
}

TEST(OffsetAssignerTest, SizeOrderBeatsTimeOrderWhenAHoleIsTooSmall) {
  const Buffers buffers = SizeOrderWins();
  const auto& requests = buffers.requests();
  ASSERT_EQ(AlignedLowerBound(requests, 1), 3);

  const OffsetAssignment by_size = GreedyBySizeBestFit()->Assign(requests, 1);
  EXPECT_EQ(buffers.Layout(by_size), "x@0 y@2 big@0 arena=3");
  const OffsetAssignment by_time = GreedyByTimeBestFit()->Assign(requests, 1);
  EXPECT_EQ(buffers.Layout(by_time), "x@0 y@1 big@2 arena=4");

  // Time order runs first and misses the lower bound; size order then wins.
  std::vector<std::string> calls;
  const OffsetAssignment best = AssignOffsets(requests, 1, Recorded(&calls)).value();
  EXPECT_EQ(buffers.Layout(best), "x@0 y@2 big@0 arena=3");
  EXPECT_EQ(best.strategy, "greedy_by_size");
  EXPECT_THAT(calls, ::testing::ElementsAre("greedy_by_time", "greedy_by_size"));
}

TEST(OffsetAssignerTest, AssignOffsetsKeepsTheFirstOnTies) {
  // One 256-byte buffer; both fakes waste 256 bytes, so neither reaches the lower bound.
  const std::vector<BufferRequest> requests = {{256, 0, 0}};
  std::vector<std::unique_ptr<OffsetStrategy>> strategies;
  strategies.push_back(std::make_unique<FixedStrategy>("p", OffsetAssignment{{256}, 512, ""}));
  strategies.push_back(std::make_unique<FixedStrategy>("q", OffsetAssignment{{0}, 512, ""}));
  const OffsetAssignment best = AssignOffsets(requests, 256, strategies).value();
  EXPECT_EQ(best.strategy, "p");
  EXPECT_EQ(best.offsets, std::vector<uint64_t>{256});
}

TEST(OffsetAssignerDeathTest, AssignOffsetsNeedsAStrategy) {
  const std::vector<BufferRequest> requests = {{256, 0, 0}};
  EXPECT_DEATH(AssignOffsets(requests, 256, {}), "at least one strategy");
}

TEST(OffsetAssignerTest, SizesThatOverflowUint64AreInvalidArgumentNotACrash) {
  // Alignment 2^62 rounds 3 buffers up past 2^64: greedy by time used to wrap offsets to 0 and
  // CHECK-fail "double free at 0".
  const uint64_t kHuge = uint64_t{1} << 62;
  const std::vector<BufferRequest> wraps = {{1, 0, 0}, {1, 0, 1}, {1, 0, 2}, {1, 1, 2}};
  absl::StatusOr<OffsetAssignment> sum = AssignOffsets(wraps, kHuge, DefaultStrategies());
  EXPECT_EQ(sum.status().code(), absl::StatusCode::kInvalidArgument) << sum.status();
  EXPECT_THAT(std::string(sum.status().message()), HasSubstr("more than 2^64 bytes"));
  // One buffer that cannot even be rounded up.
  const std::vector<BufferRequest> one = {{UINT64_MAX - 10, 0, 0}};
  absl::Status status = CheckAssignable(one, 256, {"x"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("buffer 0 ('x')"));
  EXPECT_EQ(CheckAssignable(one, 1).code(), absl::StatusCode::kOk);
  EXPECT_EQ(CheckAssignable({{1, 2, 1}}, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckAssignable({{1, 0, 0}}, 3).code(), absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// Properties on random inputs.

TEST(OffsetAssignerTest, RandomRequestsGetValidAssignmentsAndTheBestIsKept) {
  const uint64_t kAlignments[] = {1, 8, 256, 4096};
  std::mt19937 rng(20240601);
  for (int trial = 0; trial < 400; ++trial) {
    const int count = std::uniform_int_distribution<int>(1, 120)(rng);
    const int32_t num_positions = std::uniform_int_distribution<int32_t>(1, 60)(rng);
    const uint64_t max_bytes = trial % 2 == 0 ? 64 : 100000;
    const uint64_t alignment = kAlignments[trial % 4];
    const std::vector<BufferRequest> requests =
        RandomRequests(rng, count, num_positions, max_bytes);
    SCOPED_TRACE(absl::StrCat("trial ", trial, ", alignment ", alignment));

    const uint64_t lower_bound = AlignedLowerBound(requests, alignment);
    ASSERT_EQ(lower_bound, ReferenceLowerBound(requests, alignment));
    uint64_t smallest = UINT64_MAX;
    for (const auto& strategy : DefaultStrategies()) {
      const OffsetAssignment a = strategy->Assign(requests, alignment);
      const std::string layout = DebugLayout(requests, a);
      ASSERT_EQ(a.strategy, strategy->name());
      const absl::Status status = VerifyNoOverlap(requests, a, alignment);
      ASSERT_TRUE(status.ok()) << status << "\n" << layout;
      ASSERT_TRUE(ReferenceValid(requests, a, alignment)) << layout;
      EXPECT_GE(a.arena_bytes, lower_bound) << layout;
      EXPECT_EQ(a.arena_bytes % alignment, 0) << layout;
      uint64_t top = 0;
      for (size_t i = 0; i < requests.size(); ++i) {
        top = std::max(top, a.offsets[i] + AlignUp(requests[i].bytes, alignment));
      }
      EXPECT_EQ(a.arena_bytes, top) << "arena is not the highest byte used\n" << layout;
      smallest = std::min(smallest, a.arena_bytes);
    }
    const OffsetAssignment best = AssignOffsets(requests, alignment, DefaultStrategies()).value();
    EXPECT_EQ(best.arena_bytes, smallest) << DebugLayout(requests, best);
    EXPECT_TRUE(VerifyNoOverlap(requests, best, alignment).ok());
  }
}

// The interval index and the free list give exactly what a linear scan over everything gives.
TEST(OffsetAssignerTest, StrategiesMatchLinearScanReferences) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int count = std::uniform_int_distribution<int>(0, 150)(rng);
    const int32_t num_positions = std::uniform_int_distribution<int32_t>(1, 80)(rng);
    const uint64_t alignment = trial % 3 == 0 ? 1 : 256;
    const std::vector<BufferRequest> requests = RandomRequests(rng, count, num_positions, 5000);
    SCOPED_TRACE(absl::StrCat("trial ", trial));
    const OffsetAssignment by_size = GreedyBySizeBestFit()->Assign(requests, alignment);
    EXPECT_EQ(by_size.offsets, ReferenceGreedyBySize(requests, alignment))
        << DebugLayout(requests, by_size);
    const OffsetAssignment by_time = GreedyByTimeBestFit()->Assign(requests, alignment);
    EXPECT_EQ(by_time.offsets, ReferenceGreedyByTime(requests, alignment))
        << DebugLayout(requests, by_time);
  }
}

// On random, often invalid, assignments the verifier agrees with a check of every pair.
TEST(VerifyNoOverlapTest, AgreesWithPairwiseCheckOnRandomAssignments) {
  std::mt19937 rng(11);
  int valid = 0, invalid = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const int count = std::uniform_int_distribution<int>(1, 12)(rng);
    const std::vector<BufferRequest> requests = RandomRequests(rng, count, 10, 512);
    OffsetAssignment a;
    a.arena_bytes = 256 * std::uniform_int_distribution<int>(1, 20)(rng);
    for (int i = 0; i < count; ++i) {
      a.offsets.push_back(256 * std::uniform_int_distribution<int>(0, 14)(rng));
    }
    const bool expected = ReferenceValid(requests, a, 256);
    EXPECT_EQ(VerifyNoOverlap(requests, a, 256).ok(), expected) << DebugLayout(requests, a);
    (expected ? valid : invalid)++;
  }
  // Both verdicts were exercised.
  EXPECT_GT(valid, 100);
  EXPECT_GT(invalid, 100);
}

// ---------------------------------------------------------------------------------------------
// The verifier on planted faults.

// Four 256-aligned buffers, valid as laid out:
//   input: 256 bytes, positions 0-1 @0     conv1: 512 bytes, positions 1-2 @256
//   relu:  256 bytes, positions 2-3 @0     loss:  256 bytes, position 3 @256
//     bytes 512-767   .      conv1  conv1  .
//     bytes 256-511   .      conv1  conv1  loss
//     bytes   0-255   input  input  relu   relu
//          position   0      1      2      3
struct Planted {
  Buffers buffers = Buffers()
                        .Add("input", 256, 0, 1)
                        .Add("conv1", 512, 1, 2)
                        .Add("relu", 256, 2, 3)
                        .Add("loss", 256, 3, 3);
  OffsetAssignment assignment{{0, 256, 0, 256}, 768, "hand"};

  absl::Status Verify() const {
    return VerifyNoOverlap(buffers.requests(), assignment, 256, buffers.names());
  }
};

TEST(VerifyNoOverlapTest, AcceptsTheValidLayout) {
  const Planted planted;
  EXPECT_TRUE(planted.Verify().ok()) << planted.Verify();
}

TEST(VerifyNoOverlapTest, NamesBothBuffersOfAPlantedOverlap) {
  Planted planted;
  // relu onto the top half of conv1, both alive at position 2.
  planted.assignment.offsets[2] = 512;
  const absl::Status status = planted.Verify();
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(status.message(),
            "buffers 1 ('conv1') and 2 ('relu') overlap in bytes [512, 768) while both alive at "
            "position 2");
}

TEST(VerifyNoOverlapTest, NamesBuffersByIndexWithoutNames) {
  Planted planted;
  planted.assignment.offsets[3] = 0;  // loss onto relu at position 3.
  const absl::Status status =
      VerifyNoOverlap(planted.buffers.requests(), planted.assignment, 256);
  EXPECT_EQ(status.message(),
            "buffers 2 and 3 overlap in bytes [0, 256) while both alive at position 3");
}

TEST(VerifyNoOverlapTest, CatchesAMisalignedOffset) {
  Planted planted;
  planted.assignment.offsets[2] = 128;
  EXPECT_EQ(planted.Verify().message(),
            "buffer 2 ('relu') at offset 128 is not a multiple of the alignment 256");
}

TEST(VerifyNoOverlapTest, CatchesABufferBeyondTheArena) {
  Planted planted;
  planted.assignment.arena_bytes = 512;
  EXPECT_EQ(planted.Verify().message(),
            "buffer 1 ('conv1') occupies [256, 768) beyond arena_bytes 512");
}

TEST(VerifyNoOverlapTest, CatchesAMissingOffset) {
  Planted planted;
  planted.assignment.offsets.pop_back();
  EXPECT_EQ(planted.Verify().message(), "assignment has 3 offsets for 4 buffers");
}

TEST(VerifyNoOverlapTest, BuffersMayShareBytesOnlyAcrossDisjointLifetimes) {
  // Steps [0,2] then [3,5] never meet: both at offset 0 is fine.
  const Buffers apart = Buffers().Add("early", 256, 0, 2).Add("late", 256, 3, 5);
  EXPECT_TRUE(VerifyNoOverlap(apart.requests(), {{0, 0}, 256, ""}, 256, apart.names()).ok());
  // Steps [0,2] and [2,5] meet at position 2.
  const Buffers touching = Buffers().Add("early", 256, 0, 2).Add("late", 256, 2, 5);
  EXPECT_EQ(VerifyNoOverlap(touching.requests(), {{0, 0}, 256, ""}, 256, touching.names())
                .message(),
            "buffers 0 ('early') and 1 ('late') overlap in bytes [0, 256) while both alive at "
            "position 2");
}

// ---------------------------------------------------------------------------------------------
// Alignment, training stacks and edge cases.

TEST(OffsetAssignerTest, OddSizesRoundUpToTheAlignment) {
  // All alive at position 0: 1 -> 256, 257 -> 512, 511 -> 512 bytes.
  const Buffers buffers = Buffers().Add("a", 1, 0, 0).Add("b", 257, 0, 1).Add("c", 511, 0, 0);
  EXPECT_EQ(AlignedLowerBound(buffers.requests(), 256), 1280);
  for (const auto& strategy : DefaultStrategies()) {
    const OffsetAssignment a = strategy->Assign(buffers.requests(), 256);
    SCOPED_TRACE(buffers.Layout(a));
    EXPECT_EQ(a.arena_bytes, 1280) << strategy->name();
    for (const uint64_t offset : a.offsets) EXPECT_EQ(offset % 256, 0);
    EXPECT_TRUE(VerifyNoOverlap(buffers.requests(), a, 256).ok());
  }
}

TEST(OffsetAssignerTest, AlignmentOnePacksBytesTightly) {
  // Sizes 1, 3 and 5 all alive at once: 9 bytes, largest lowest.
  const Buffers buffers = Buffers().Add("a", 1, 0, 0).Add("b", 3, 0, 0).Add("c", 5, 0, 0);
  //   greedy_by_size and greedy_by_time both stack c, b, a: a@8 b@5 c@0.
  for (const auto& strategy : DefaultStrategies()) {
    const OffsetAssignment a = strategy->Assign(buffers.requests(), 1);
    EXPECT_EQ(buffers.Layout(a), "a@8 b@5 c@0 arena=9") << strategy->name();
  }
}

TEST(OffsetAssignerTest, LargeAlignmentGivesEveryBufferWholeUnits) {
  // All alive at position 0: 1 and 4096 bytes take one 4 KiB unit each, 4097 bytes take two.
  const Buffers buffers = Buffers().Add("a", 1, 0, 0).Add("b", 4096, 0, 0).Add("c", 4097, 0, 0);
  EXPECT_EQ(AlignedLowerBound(buffers.requests(), 4096), 4 * 4096);
  for (const auto& strategy : DefaultStrategies()) {
    const OffsetAssignment a = strategy->Assign(buffers.requests(), 4096);
    // c lowest, then a and b: equal once aligned, so in index order.
    EXPECT_EQ(buffers.Layout(a), "a@8192 b@12288 c@0 arena=16384") << strategy->name();
  }
}

TEST(OffsetAssignerTest, NestedLifetimesReachTheLowerBound) {
  // Activations of 64 layers with sizes 1..5 units, each alive from its forward position to its
  // backward position: a stack, so the peak (all alive at positions 63 and 64) is achievable.
  std::vector<uint64_t> sizes;
  for (int i = 0; i < 64; ++i) sizes.push_back(256 * (1 + (i * 7) % 5));
  const std::vector<BufferRequest> requests = TrainingStack(sizes, /*gradients=*/false);
  const uint64_t lower_bound = AlignedLowerBound(requests, 256);
  for (const auto& strategy : DefaultStrategies()) {
    const OffsetAssignment a = strategy->Assign(requests, 256);
    EXPECT_EQ(a.arena_bytes, lower_bound) << DebugLayout(requests, a);
  }
}

TEST(OffsetAssignerTest, NestedLifetimesWithGradientsOfOneSizeReachTheLowerBound) {
  // 40 layers of 1 KiB activations, plus each backward position's 1 KiB gradient alive for two
  // positions.
  const std::vector<BufferRequest> requests =
      TrainingStack(std::vector<uint64_t>(40, 1024), /*gradients=*/true);
  const uint64_t lower_bound = AlignedLowerBound(requests, 256);
  EXPECT_EQ(lower_bound, 41 * 1024);  // Step 41: 39 activations and two gradients.
  for (const auto& strategy : DefaultStrategies()) {
    const OffsetAssignment a = strategy->Assign(requests, 256);
    EXPECT_EQ(a.arena_bytes, lower_bound) << DebugLayout(requests, a);
  }
}

TEST(OffsetAssignerTest, NoRequestsGiveAnEmptyArena) {
  const std::vector<BufferRequest> none;
  EXPECT_EQ(AlignedLowerBound(none, 256), 0);
  for (const auto& strategy : DefaultStrategies()) {
    const OffsetAssignment a = strategy->Assign(none, 256);
    EXPECT_EQ(a.arena_bytes, 0) << strategy->name();
    EXPECT_TRUE(a.offsets.empty());
  }
  const OffsetAssignment best = AssignOffsets(none, 256, DefaultStrategies()).value();
  EXPECT_EQ(best.arena_bytes, 0);
  EXPECT_EQ(best.strategy, "greedy_by_time");
  EXPECT_TRUE(VerifyNoOverlap(none, best, 256).ok());
}

}  // namespace
}  // namespace headroom::planner
