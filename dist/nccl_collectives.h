// Collectives over NCCL for the CUDA backend: reductions of device memory on their own
// CUDA stream, the communicator set up over MPI (rank 0's ncclUniqueId broadcast through
// `bootstrap`, then ncclCommInitRank on the device `device`).
//
// AllreduceAsync() enqueues ncclAllReduce (ncclSum or ncclAvg) on the communication stream
// and records an event; Wait() polls the event (cudaEventQuery) until it completes or the
// deadline passes, then aborts the communicator (ncclCommAbort) and fails naming the
// collective. Broadcast() moves device memory the same way, blocking. AllgatherU64() goes
// through `bootstrap` (host values).
//
// Built only where the toolkit has NCCL (@local_cuda//:nccl); needs a GPU per rank to run
// (its test reports itself skipped without one). Not yet driven by the trainer: the
// gradient buckets are host memory so far (dist/gradient_buckets.h). Borrows `bootstrap`,
// which must outlive it. Thread-compatible.
#ifndef HEADROOM_DIST_NCCL_COLLECTIVES_H_
#define HEADROOM_DIST_NCCL_COLLECTIVES_H_

#include <memory>

#include "dist/collectives.h"

namespace headroom::dist {

struct NcclOptions {
  // The CUDA device this rank uses. Default 0; one rank per device.
  int device = 0;
  // A collective not done this long after it was issued fails. Default 20 s.
  double timeout_seconds = 20;
};

// Returns NCCL's collectives among the ranks of `bootstrap`. FailedPrecondition naming the
// CUDA or NCCL call that failed (no device, for one).
absl::StatusOr<std::unique_ptr<Collectives>> CreateNcclCollectives(Collectives* bootstrap,
                                                                   const NcclOptions& options);

}  // namespace headroom::dist

#endif  // HEADROOM_DIST_NCCL_COLLECTIVES_H_
