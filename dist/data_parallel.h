// The checks and transfers that keep data-parallel ranks in lock-step, over a Collectives:
// rank 0's state to every rank before the first step, the ranks' collective sequences
// compared before it, and their parameters compared at start and every K steps.
//
// Every function here is itself a collective: every rank must call it, in the same order.
// Errors name the ranks that differ and what differs; every rank returns the same error
// kind, so every rank stops.
#ifndef HEADROOM_DIST_DATA_PARALLEL_H_
#define HEADROOM_DIST_DATA_PARALLEL_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "dist/collectives.h"
#include "dist/gradient_buckets.h"
#include "executor/host_tensor.h"
#include "executor/trainer.h"

namespace headroom::dist {

// Sets every rank's persistent state (parameters, buffers, optimizer state, steps run) to
// rank 0's. The ranks first compare a hash of their state (read one tensor at a time); only
// where some rank differs is rank 0's state broadcast, a tensor at a time but held whole in
// host memory on each rank until it is restored.
absl::Status BroadcastState(executor::Trainer& trainer, Collectives& collectives);

// Returns a 64-bit FNV-1a hash of every parameter's bytes (not buffers: batch norm's running
// statistics are each rank's own), in tensor order, read one tensor at a time.
absl::StatusOr<uint64_t> ParameterChecksum(const executor::Trainer& trainer);

// Compares ParameterChecksum() across ranks. FailedPrecondition naming every rank whose
// parameters differ from rank 0's after `steps_run` steps.
absl::Status CheckParametersAgree(const executor::Trainer& trainer, Collectives& collectives,
                                  int64_t steps_run);

// Returns a hash of `sequence`: the collectives' sizes, in order.
uint64_t SequenceHash(absl::Span<const CollectiveSpec> sequence);

// Compares every rank's collective sequence. FailedPrecondition naming the ranks that
// differ from rank 0 and the first collective that differs (its index, its description on
// this rank, and its size on each rank).
absl::Status CheckSequencesAgree(absl::Span<const CollectiveSpec> sequence,
                                 Collectives& collectives);

// Returns rank `rank` of `ranks`' part of the global batch `global` (every input and label
// of the model at ranks times the batch) for `forward`, the model at the per-rank batch: a
// tensor whose dim 0 is `ranks` times forward's gives rows [rank * B, (rank + 1) * B) of
// it; one of forward's shape already (shared by every sample, like the transformer's
// positions) is copied whole. InvalidArgument naming a tensor that is neither, or that
// forward lacks.
absl::StatusOr<std::vector<executor::HostTensor>> RankShard(
    const std::vector<executor::HostTensor>& global, const graph::Graph& forward, int rank,
    int ranks);

}  // namespace headroom::dist

#endif  // HEADROOM_DIST_DATA_PARALLEL_H_
