// A backend: where a training step's bytes live and what computes on them. The executor
// decides everything (offsets, order, copies); a backend only allocates, copies and runs
// kernels. Implementations: the CPU backend (oneDNN; the embedded default) and the CUDA
// backend (cuDNN, cuBLAS, a compute stream and copy streams).
#ifndef HEADROOM_EXECUTOR_BACKEND_H_
#define HEADROOM_EXECUTOR_BACKEND_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "executor/kernel_args.h"

namespace headroom::executor {

// Memory a backend allocated; freed when destroyed. `data()` is device memory for a device
// allocation, host memory (pinned on CUDA) for a host one.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() const = 0;
  virtual uint64_t bytes() const = 0;
};

// A point in a stream's work: done once everything issued to that stream before it is.
class Event {
 public:
  virtual ~Event() = default;
  // Blocks the calling thread until the event is done; returns the copy's error, if any.
  virtual absl::Status Wait() = 0;

  // When the copy ran on its stream.
  struct Interval {
    std::chrono::steady_clock::time_point begin;
    std::chrono::steady_clock::time_point end;
  };
  // Returns when the copy ran, once Wait() has returned; nullopt where the backend cannot
  // say on the host's clock.
  virtual std::optional<Interval> interval() const { return std::nullopt; }
};

enum class CopyDirection { kToHost, kToDevice };

// Thread-compatible: one executor thread calls it. Kernels run in issue order on one
// compute stream; copies run on one copy stream per direction, concurrently with compute.
class Backend {
 public:
  virtual ~Backend() = default;

  // Returns "cpu" or "cuda".
  virtual std::string name() const = 0;

  // Returns whether AllocateHost() memory is the same memory as AllocateDevice()'s (the
  // CPU backend), so that offloading a tensor frees none of it. Default false.
  virtual bool host_is_device_memory() const { return false; }

  // Returns `bytes` of device memory, allocated once (the arena); ResourceExhausted if
  // the device cannot hold them.
  virtual absl::StatusOr<std::unique_ptr<Buffer>> AllocateDevice(uint64_t bytes) = 0;
  // Returns `bytes` of host memory for offloaded tensors (pinned where that matters).
  virtual absl::StatusOr<std::unique_ptr<Buffer>> AllocateHost(uint64_t bytes) = 0;

  // Issues a copy of `bytes` between device and host memory on the copy stream of that
  // direction, after all compute issued so far; returns its completion event.
  virtual absl::StatusOr<std::unique_ptr<Event>> CopyAsync(CopyDirection direction, void* dst,
                                                           const void* src,
                                                           uint64_t bytes) = 0;
  // Makes compute issued after this call wait for `event`.
  virtual absl::Status ComputeWaits(Event& event) = 0;
  // Returns the seconds the compute stream stood waiting in ComputeWaits() since the last
  // call, for work done by now (call it after Synchronize()). 0 where ComputeWaits() blocks
  // the calling thread instead (the CPU backend): the caller times that wait itself.
  virtual double TakeStreamWaitSeconds() { return 0; }

  // Synchronous copies between host memory the caller owns and device memory: loading
  // inputs and parameters, reading the loss and parameters back.
  virtual absl::Status Upload(void* device_dst, const void* host_src, uint64_t bytes) = 0;
  virtual absl::Status Download(void* host_dst, const void* device_src, uint64_t bytes) = 0;
  // Issues a copy of `bytes` from device memory `src` to device memory `dst` on the compute
  // stream, after the compute issued so far (a staged batch moved into its place). The
  // ranges must not overlap. Default Unimplemented, naming the backend.
  virtual absl::Status CopyOnDevice(void* dst, const void* src, uint64_t bytes) {
    return absl::UnimplementedError("backend '" + name() + "' has no device-to-device copy");
  }

  // Returns the scratch bytes the kernel for `args` needs beyond its inputs and outputs
  // (oneDNN scratchpads and staged copies, cuDNN workspaces): what the plan reserves for
  // the node and Forward()/Backward() then receive in args.scratch. Deciding only: it runs
  // nothing and allocates no memory the plan would have to hold; the views' data are
  // placeholders, of which only presence counts. InvalidArgument for arguments the kernel
  // would refuse. Default 0: kernels that need no scratch.
  virtual absl::StatusOr<uint64_t> ScratchBytes(const ForwardArgs& args) { return 0; }
  virtual absl::StatusOr<uint64_t> ScratchBytes(const BackwardArgs& args) { return 0; }

  // Issue kernels on the compute stream (see kernel_args.h for what each receives).
  virtual absl::Status Forward(const ForwardArgs& args) = 0;
  virtual absl::Status Backward(const BackwardArgs& args) = 0;
  virtual absl::Status Update(const UpdateArgs& args) = 0;
  // out = a + b elementwise (same shapes, float32); out may alias a or b.
  virtual absl::Status Accumulate(const TensorView& out, const TensorView& a,
                                  const TensorView& b) = 0;
  // Writes `value` to every float32 element of `out`.
  virtual absl::Status Fill(const TensorView& out, float value) = 0;

  // Blocks until all compute and copies issued so far are done; returns the first error.
  virtual absl::Status Synchronize() = 0;

  // Returns the device bytes the backend holds now outside the arena for kernel workspaces
  // it did not declare through ScratchBytes() (cuBLAS's own, or a kernel handed less
  // scratch than it needs); 0 where every byte is planned. It may grow while a step runs.
  virtual uint64_t workspace_bytes() const { return 0; }

  // Returns the device bytes the process held when the backend had started and allocated
  // nothing yet: the CUDA context, the libraries' handles and streams, measured once at start
  // (NVML's per-process figure where it can be had). A budget must leave room for them:
  // ReserveFixedCost() (executor/trainer.h) lowers a run's plan budget by this. 0 where device memory is host memory (the CPU
  // backend, whose fixed cost shows in the process's own accounting instead).
  virtual uint64_t fixed_device_bytes() const { return 0; }
};

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_BACKEND_H_
