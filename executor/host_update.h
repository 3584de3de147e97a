// Optimizer updates on the host (optimizer state on the host, planner/sections.h): a queue
// that runs them on host threads while the device goes on with the backward pass.
//
// RunHostUpdate() is one update, over all its elements on OpenMP threads, with the
// arithmetic of executor/optimizer_math.h (so the parameters and state are bitwise those of
// the CPU backend's device update). HostUpdateQueue runs submitted updates in order on one
// worker thread: Submit() returns at once; Wait(ticket) blocks until that update is done;
// the destructor finishes what is queued. Submit/Wait from one thread (the executor's);
// the worker is internal.
#ifndef HEADROOM_EXECUTOR_HOST_UPDATE_H_
#define HEADROOM_EXECUTOR_HOST_UPDATE_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "executor/backend.h"
#include "executor/kernel_args.h"

namespace headroom::executor {

// Returns OK after updating args.param and args.state in place from args.grad (all host
// memory, float32, one size); InvalidArgument naming the op or the tensor at fault for an
// unknown op, a wrong number of state tensors, a size mismatch or a step below 1.
absl::Status RunHostUpdate(const UpdateArgs& args);

class HostUpdateQueue {
 public:
  HostUpdateQueue();
  ~HostUpdateQueue();
  HostUpdateQueue(const HostUpdateQueue&) = delete;
  HostUpdateQueue& operator=(const HostUpdateQueue&) = delete;

  // Returns the ticket of `args`'s update (0, 1, ... in order), queued to run after those
  // before it and, when `ready` is given, after the worker's Wait() on it (the copy of the
  // gradient to the host). The memory args points at must stay valid until Wait() of this
  // ticket.
  int64_t Submit(UpdateArgs args, std::unique_ptr<Event> ready = nullptr);
  // Blocks until update `ticket` (and every one before it) has run; returns the first error
  // of those updates, naming the parameter's update op.
  absl::Status Wait(int64_t ticket);
  // Returns the seconds the worker spent updating since the last call.
  double TakeBusySeconds();

 private:
  void Work();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<UpdateArgs, std::unique_ptr<Event>>> queue_;  // Guarded by mu_.
  int64_t submitted_ = 0;                                            // Guarded by mu_.
  int64_t done_ = 0;                                                 // Guarded by mu_.
  absl::Status error_;       // Guarded by mu_: the first failure.
  double busy_seconds_ = 0;  // Guarded by mu_.
  bool stop_ = false;        // Guarded by mu_.
  std::thread worker_;
};

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_HOST_UPDATE_H_
