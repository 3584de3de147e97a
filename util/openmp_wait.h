// OpenMP threads that wait passively. libgomp spins for a while at every barrier and between
// parallel regions by default (OMP_WAIT_POLICY unset); oneDNN's kernels and Headroom's loops
// run one parallel region after another, so on a machine where another process wants a core
// the spinning threads take it from the one thread the region waits for, and a resnet50 step
// took 15.6 s instead of 1.6 s beside one busy process (3.1 s with passive waiting). libgomp
// reads its wait policy once, when it loads, before main(): the only way to choose it from
// inside the program is to run the program again with it set.
#ifndef HEADROOM_UTIL_OPENMP_WAIT_H_
#define HEADROOM_UTIL_OPENMP_WAIT_H_

namespace headroom {

// Unless the environment already chooses how OpenMP threads wait (OMP_WAIT_POLICY or
// GOMP_SPINCOUNT), sets OMP_WAIT_POLICY=PASSIVE and replaces the process with a new run of
// its own executable and `argv` (so this returns only when nothing was to be done, or the
// re-run failed, which leaves the default policy). Call it first thing in main().
void RunWithPassiveOpenMpWait(char** argv);

}  // namespace headroom

#endif  // HEADROOM_UTIL_OPENMP_WAIT_H_
