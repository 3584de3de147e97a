// The CPU backend, the embedded default: the arena is one block of host memory of fixed
// capacity, allocated once; "host" memory for offloaded tensors is a separate block, and
// copies between the two are real memcpys run by one copy thread per direction, so they
// overlap compute as a GPU's copy streams do. Kernels run on the calling thread
// (CpuKernels, multi-threaded inside oneDNN and OpenMP loops).
//
// Thread-compatible: one executor thread calls it; the copy threads are internal.
#ifndef HEADROOM_EXECUTOR_CPU_CPU_BACKEND_H_
#define HEADROOM_EXECUTOR_CPU_CPU_BACKEND_H_

#include <memory>

#include "executor/backend.h"

namespace headroom::executor::cpu {

// Returns a new CPU backend.
std::unique_ptr<Backend> CreateCpuBackend();

}  // namespace headroom::executor::cpu

#endif  // HEADROOM_EXECUTOR_CPU_CPU_BACKEND_H_
