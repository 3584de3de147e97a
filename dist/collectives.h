// Collectives across the ranks of a data-parallel run: the one interface the data-parallel
// trainer (dist/gradient_buckets, dist/data_parallel) talks to, with an MPI implementation
// for the CPU backend (dist/mpi_collectives) and an NCCL one for CUDA (dist/nccl_collectives).
//
// Every rank must issue the same collectives, with the same sizes, in the same order (the
// data-parallel trainer checks that before its first step: dist/data_parallel.h).
// AllreduceAsync() returns at once with a handle; Wait() blocks until that reduction is done
// or its deadline (Options::timeout_seconds) has passed. The blocking calls (Broadcast,
// AllgatherU64) wait the same way. A collective that misses its deadline means a rank died or
// issued something else: the error names the collective, and the implementation then aborts
// the whole job on destruction (MPI_Abort) rather than hang in its shutdown.
//
// Implementations are thread-compatible: one thread (the training loop) calls them.
#ifndef HEADROOM_DIST_COLLECTIVES_H_
#define HEADROOM_DIST_COLLECTIVES_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace headroom::dist {

enum class ReduceOp { kSum, kAverage };

// Returns "sum" or "average".
const char* ReduceOpName(ReduceOp op);

// Returns the steady clock (std::chrono::steady_clock) in seconds: one clock for every
// process of a host (CLOCK_MONOTONIC), so ranks on one host can compare its times.
double SteadySeconds();

// A reduction in flight, returned by AllreduceAsync(); waited on once with Wait().
struct CollectiveHandle {
  int64_t id = -1;
};

class Collectives {
 public:
  virtual ~Collectives() = default;

  // This process's rank in [0, size()) and the number of ranks.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Names the implementation ("mpi", "nccl") for messages.
  virtual std::string name() const = 0;

  // Starts reducing `count` floats at `data` in place across all ranks (their sum, or their
  // average: the sum divided by size()). `data` must stay valid and untouched until Wait()
  // returns. `what` names the collective in errors ("gradient bucket 3").
  virtual absl::StatusOr<CollectiveHandle> AllreduceAsync(float* data, size_t count, ReduceOp op,
                                                          const std::string& what) = 0;
  // Returns once the reduction of `handle` is done: DeadlineExceeded naming it when it is not
  // done within the deadline; InvalidArgument for a handle not in flight.
  virtual absl::Status Wait(CollectiveHandle handle) = 0;
  // Returns, like Wait(), once the reduction of `handle` is done, the steady clock's time
  // (SteadySeconds()) at which the implementation saw it complete; the same errors as Wait().
  // By default the time Wait() returned (an implementation with a communication thread
  // overrides it with that thread's time, so a reduction done long before it was waited for
  // says so).
  virtual absl::StatusOr<double> WaitCompleted(CollectiveHandle handle);

  // Copies `bytes` at `data` from rank `root` to every other rank (blocking).
  virtual absl::Status Broadcast(void* data, size_t bytes, int root, const std::string& what) = 0;

  // Returns every rank's `value`, by rank (blocking): the checks compare hashes this way.
  virtual absl::StatusOr<std::vector<uint64_t>> AllgatherU64(uint64_t value,
                                                             const std::string& what) = 0;
};

}  // namespace headroom::dist

#endif  // HEADROOM_DIST_COLLECTIVES_H_
