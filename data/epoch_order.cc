#include "data/epoch_order.h"

#include <cmath>
#include <utility>

#include "absl/numeric/int128.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "util/check.h"
#include "util/split_mix.h"

namespace headroom::data {
namespace {

// A stream of SplitMix64 draws: output k is the hash of seed + k times the golden gamma.
class SplitMix64Stream {
 public:
  explicit SplitMix64Stream(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    const uint64_t out = SplitMix64(state_);
    state_ += 0x9E3779B97F4A7C15ull;
    return out;
  }
  // Returns a uniform draw from [0, bound) (Lemire, "Fast Random Integer Generation in an
  // Interval", 2019). REQUIRES: bound > 0.
  uint64_t Below(uint64_t bound) {
    absl::uint128 m = absl::uint128(Next()) * bound;
    uint64_t low = absl::Uint128Low64(m);
    if (low < bound) {
      const uint64_t threshold = (0 - bound) % bound;
      while (low < threshold) {
        m = absl::uint128(Next()) * bound;
        low = absl::Uint128Low64(m);
      }
    }
    return absl::Uint128High64(m);
  }

 private:
  uint64_t state_;
};

// The generator of one purpose (`stream`) of a run seeded `seed`: the split, or an epoch.
SplitMix64Stream StreamOf(uint64_t seed, uint64_t stream) {
  return SplitMix64Stream(SplitMix64(seed ^ SplitMix64(stream)));
}

constexpr uint64_t kSplitStream = ~uint64_t{0};

void Shuffle(std::vector<int64_t>& v, SplitMix64Stream& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.Below(i)]);
}

}  // namespace

absl::StatusOr<TrainValidationSplit> SplitTrainValidation(int64_t size, double validation_fraction,
                                                          uint64_t seed) {
  if (!(validation_fraction >= 0 && validation_fraction < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("validation fraction ", validation_fraction, " is outside [0, 1)"));
  }
  const auto held = static_cast<int64_t>(std::llround(size * validation_fraction));
  if (size - held < 1) {
    return absl::InvalidArgumentError(absl::StrCat("a validation fraction of ", validation_fraction,
                                                   " of ", size, " items leaves none to train on"));
  }
  std::vector<int64_t> all(size);
  for (int64_t i = 0; i < size; ++i) all[i] = i;
  SplitMix64Stream rng = StreamOf(seed, kSplitStream);
  Shuffle(all, rng);
  TrainValidationSplit split;
  std::vector<bool> is_validation(size, false);
  for (int64_t i = 0; i < held; ++i) is_validation[all[i]] = true;
  for (int64_t i = 0; i < size; ++i)
    (is_validation[i] ? split.validation : split.train).push_back(i);
  return split;
}

std::vector<int64_t> EpochPermutation(absl::Span<const int64_t> items, uint64_t seed,
                                      int64_t epoch) {
  std::vector<int64_t> order(items.begin(), items.end());
  SplitMix64Stream rng = StreamOf(seed, static_cast<uint64_t>(epoch));
  Shuffle(order, rng);
  return order;
}

int64_t BatchesPerEpoch(int64_t items, int64_t global_batch) {
  CHECK(global_batch > 0);
  return items / global_batch;
}

absl::StatusOr<absl::Span<const int64_t>> RankBatch(absl::Span<const int64_t> order, int64_t index,
                                                    int64_t batch, int rank, int ranks) {
  if (batch < 1 || ranks < 1 || rank < 0 || rank >= ranks) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " of ", ranks, " at batch ",
                                                   batch, ": needs 0 <= rank < ranks, batch >= 1"));
  }
  const int64_t global = batch * ranks;
  const int64_t batches = BatchesPerEpoch(static_cast<int64_t>(order.size()), global);
  if (index < 0 || index >= batches) {
    return absl::OutOfRangeError(absl::StrCat("global batch ", index, " of an epoch of ",
                                              order.size(), " items, which holds ", batches, " of ",
                                              global));
  }
  return order.subspan(index * global + rank * batch, batch);
}

}  // namespace headroom::data
