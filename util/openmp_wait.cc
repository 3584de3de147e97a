#include "util/openmp_wait.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace headroom {

void RunWithPassiveOpenMpWait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) {
    return;
  }
  if (setenv("OMP_WAIT_POLICY", "PASSIVE", /*overwrite=*/1) != 0) return;
  execv("/proc/self/exe", argv);
  // Still here: the re-run failed; go on with the default policy, and say so.
  std::perror("headroom: re-running with OMP_WAIT_POLICY=PASSIVE");
  unsetenv("OMP_WAIT_POLICY");
}

}  // namespace headroom
