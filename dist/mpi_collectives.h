// Collectives over MPI (OpenMPI 4.1) for the CPU backend: every MPI call is made by one
// communication thread that this object owns, so the training thread never blocks in MPI.
//
// Create() starts the thread, which initialises MPI with MPI_Init_thread at
// MPI_THREAD_FUNNELED (only the thread that initialised MPI calls it; Create() fails where
// the library provides less) and sets MPI_ERRORS_RETURN. Each collective is queued to the
// thread, which issues it as a non-blocking call (MPI_Iallreduce, MPI_Ibcast,
// MPI_Iallgather) and polls every request in flight with MPI_Test, sleeping 50 us between
// rounds while any is in flight. A collective in flight longer than
// Options::timeout_seconds fails with DeadlineExceeded naming it, and so does every later
// one: a peer died or issued something else. The destructor then skips MPI_Finalize (which
// would wait for the dead peer), so the process exits without it and mpirun ends the other
// ranks; after a clean run it calls MPI_Finalize.
//
// One per process (MPI can be initialised once). Thread-compatible: one training thread calls
// it; the communication thread is internal.
#ifndef HEADROOM_DIST_MPI_COLLECTIVES_H_
#define HEADROOM_DIST_MPI_COLLECTIVES_H_

#include <memory>

#include "dist/collectives.h"

namespace headroom::dist {

struct MpiOptions {
  // A collective not done this long after it was issued fails, naming it. Default 20 s, so
  // that a dead rank stops the others well within 30 s.
  double timeout_seconds = 20;
};

// Returns MPI's collectives for this process, MPI initialised on their own thread.
// FailedPrecondition when MPI cannot be initialised or lacks MPI_THREAD_FUNNELED;
// InvalidArgument for a timeout that is not positive.
absl::StatusOr<std::unique_ptr<Collectives>> CreateMpiCollectives(const MpiOptions& options);

}  // namespace headroom::dist

#endif  // HEADROOM_DIST_MPI_COLLECTIVES_H_
