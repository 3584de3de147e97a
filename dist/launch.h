// Starting the ranks of a data-parallel run: `headroom train --ranks N` re-executes itself
// through OpenMPI's mpirun, and a process that mpirun started knows its rank from the
// environment mpirun gives it.
#ifndef HEADROOM_DIST_LAUNCH_H_
#define HEADROOM_DIST_LAUNCH_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace headroom::dist {

// This process's place among the ranks, from OpenMPI's environment.
struct RankEnvironment {
  int rank = 0;
  int size = 1;
};

// Returns the rank and size OpenMPI's mpirun set (OMPI_COMM_WORLD_RANK and
// OMPI_COMM_WORLD_SIZE), or nullopt outside mpirun. InvalidArgument naming the variable
// when one is set but not a valid number.
absl::StatusOr<std::optional<RankEnvironment>> RankFromEnvironment();

struct LaunchOptions {
  int ranks = 2;
  // OMP_NUM_THREADS given to every rank where the caller has not set it. Default 1 (one
  // core per rank).
  int threads_per_rank = 1;
  // mpirun refuses to start as root unless told; set where geteuid() is 0.
  bool as_root = false;
  // Where mpirun is. Default found on PATH.
  std::string mpirun = "mpirun";
};

// Returns mpirun's argv that runs `command` (this program's argv, the first element its
// path) as `ranks` processes on this host: -np N, --oversubscribe (more ranks than cores
// are allowed), --bind-to none, -x OMP_NUM_THREADS, and with as_root
// --allow-run-as-root. InvalidArgument for fewer than 1 rank or thread.
absl::StatusOr<std::vector<std::string>> MpirunCommand(const LaunchOptions& options,
                                                       const std::vector<std::string>& command);

// Returns this process's argv from /proc/self/cmdline, its first element replaced by the
// executable's absolute path (/proc/self/exe).
absl::StatusOr<std::vector<std::string>> OwnCommandLine();

// Replaces this process with `argv` (execvp), having set OMPI_ALLOW_RUN_AS_ROOT and
// OMPI_ALLOW_RUN_AS_ROOT_CONFIRM to 1 when `as_root` and OMP_NUM_THREADS where unset.
// Returns only on failure: Unavailable naming the program.
absl::Status Exec(const std::vector<std::string>& argv, const LaunchOptions& options);

}  // namespace headroom::dist

#endif  // HEADROOM_DIST_LAUNCH_H_
