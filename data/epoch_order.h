// The order a training run visits a dataset's items, decided from a seed alone, so that a
// resumed run (or another machine, or N ranks) sees exactly the same items in the same
// order: a train/validation split, one permutation per epoch, batches of that permutation,
// and each rank's share of a global batch.
//
// The shuffle is Fisher-Yates driven by SplitMix64 (util/split_mix.h) with an unbiased
// bounded draw (Lemire's multiply-shift with rejection), written out here rather than taken
// from <random>, whose distributions differ between standard libraries. A permutation depends only
// on (seed, epoch, the items), never on earlier calls.
//
// Batches: an epoch of n items at global batch G has floor(n / G) batches; the last n mod G
// items of the permutation are left out of that epoch (they are in other epochs' batches).
// Rank r of R ranks at per-rank batch B reads items [r*B, (r+1)*B) of each global batch of
// G = R*B, so R ranks at batch B train on what one process at batch R*B trains on.
//
// Pure functions; thread-safe.
#ifndef HEADROOM_DATA_EPOCH_ORDER_H_
#define HEADROOM_DATA_EPOCH_ORDER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace headroom::data {

struct TrainValidationSplit {
  std::vector<int64_t> train;       // ascending item indices
  std::vector<int64_t> validation;  // ascending item indices
};

// Returns a split of items [0, size) with round(size * validation_fraction) items, chosen
// from `seed`, held out for validation. InvalidArgument unless 0 <= fraction < 1 and the
// training part keeps at least one item.
absl::StatusOr<TrainValidationSplit> SplitTrainValidation(int64_t size, double validation_fraction,
                                                          uint64_t seed);

// Returns `items` permuted for epoch `epoch` of a run seeded `seed`.
std::vector<int64_t> EpochPermutation(absl::Span<const int64_t> items, uint64_t seed,
                                      int64_t epoch);

// Returns the number of whole global batches of `global_batch` items in an epoch of
// `items` items. REQUIRES: global_batch > 0.
int64_t BatchesPerEpoch(int64_t items, int64_t global_batch);

// Returns rank `rank` of `ranks`' items of global batch `index` of `order` (an epoch's
// permutation) at per-rank batch `batch`. OutOfRange past the epoch's last whole batch;
// InvalidArgument for a rank outside [0, ranks) or a batch below 1.
absl::StatusOr<absl::Span<const int64_t>> RankBatch(absl::Span<const int64_t> order, int64_t index,
                                                    int64_t batch, int rank, int ranks);

}  // namespace headroom::data

#endif  // HEADROOM_DATA_EPOCH_ORDER_H_
