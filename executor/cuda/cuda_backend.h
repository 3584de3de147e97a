// The CUDA backend: a Backend whose arena is one cudaMalloc'd block on one GPU, whose host
// memory for offloaded tensors is pinned (cudaMallocHost), and whose kernels are cuDNN
// (convolution, batch norm, pooling, activations), cuBLAS (MatMul) and small CUDA kernels
// of its own (everything else), all float32 NCHW, with the semantics of the CPU backend and
// PyTorch 1.13.
//
// Phases: CreateCudaBackend() once; AllocateDevice() for the arena and AllocateHost() for
// offload space; then per step Upload(), Forward()/Backward()/Update()/Accumulate()/Fill()
// in schedule order, CopyAsync()/ComputeWaits() for offloading, Synchronize() and
// Download() at the end.
//
// Streams: every kernel runs in issue order on one compute stream; copies run on one copy
// stream per direction (all three cudaStreamNonBlocking). CopyAsync() orders its copy
// after all compute issued so far; ComputeWaits() orders later compute after a copy.
// Kernel calls return once the work is issued: an error inside a kernel shows at the next
// call that synchronises (Upload, Download, Synchronize, Event::Wait). So do ids and labels
// out of range (Embedding, SoftmaxCrossEntropy), which the kernels check on the device:
// InvalidArgument, worded as the CPU backend's, from the next Synchronize (or Upload or
// Download). A copy's Event reports when it ran (interval(), timed on its stream) once it is
// done.
//
// Memory: every kernel declares its scratch (cuDNN algorithm workspaces, padded copies,
// temporaries) through ScratchBytes(), choosing and caching its cuDNN algorithms to size
// them, and runs in the node's planned scratch. A kernel handed less (a plan made without
// the backend's ScratchModel) takes it from one workspace buffer outside the plan, grown on
// demand (waiting for the compute stream); `workspace_bytes()` reports it.
// ReserveWorkspace() grows it up front. cuBLAS's workspace is MatMul's scratch, like
// cuDNN's: cuBLAS runs in no pool of its own (one cublasCreate makes, if any, is part of the
// fixed cost). Outside any plan: the context, the handles, the copy streams' events and a
// 4 KiB block for the index checks (the fixed cost).
//
// Determinism: with `deterministic` (the default), two runs of the same kernels on the
// same inputs give bitwise the same outputs: deterministic cuDNN convolution algorithms
// only, own kernels that never accumulate with atomics in an order that varies (Embedding's
// backward sorts the ids and sums each row in id order, as the CPU backend does), and
// cuDNN's deterministic max pooling. Dropout masks and optimizer steps are bitwise those of
// the CPU backend.
//
// Limits: float32 only (int32/int64 ids and labels, bool dropout masks); tensors of at most
// 8 dims for broadcasting and transposes; at most 2^31 - 1 elements in a tensor cuDNN takes
// (convolution, batch norm; else Unimplemented naming it; pooling past it runs on own
// kernels, activations' forward in chunks; own kernels index in 64 bits); MatMul needs b 2-D or
// equal batch dims (else Unimplemented); cuDNN plans (descriptors, algorithms, workspace sizes) are
// cached per shape and attributes for the backend's lifetime.
//
// Fixed cost: Init() measures what the context and handles hold on the device
// (fixed_device_bytes()), so that a budget leaves room for them.
//
// Ownership: Buffers and Events handed out own their CUDA memory and events and may outlive
// the backend. Thread-compatible: one executor thread calls it.
#ifndef HEADROOM_EXECUTOR_CUDA_CUDA_BACKEND_H_
#define HEADROOM_EXECUTOR_CUDA_CUDA_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "executor/backend.h"

namespace headroom::executor::cuda {

struct CudaBackendOptions {
  // Whether cuDNN convolutions and cuBLAS GEMMs may use TF32 tensor cores (faster on
  // Ampere and Hopper, about 1e-3 relative error). Default false: full float32, comparable
  // with the CPU backend.
  bool allow_tf32 = false;
  // The most workspace one convolution algorithm may use; faster algorithms needing more
  // are passed over. Default 1 GiB.
  uint64_t max_conv_workspace_bytes = uint64_t{1} << 30;
  // Whether only deterministic cuDNN convolution algorithms may run (bitwise the same
  // results run after run, as "plans change memory, never math" needs). Default true;
  // false admits faster ones that accumulate with atomics.
  bool deterministic = true;
};

struct CudaContext;
struct CudaStreams;

class CudaBackend : public Backend {
 public:
  // Use CreateCudaBackend().
  CudaBackend(int device_ordinal, CudaBackendOptions options);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  // Creates the streams and the cuDNN and cuBLAS handles. Called once by the factory.
  absl::Status Init();

  std::string name() const override { return "cuda"; }

  absl::StatusOr<std::unique_ptr<Buffer>> AllocateDevice(uint64_t bytes) override;
  absl::StatusOr<std::unique_ptr<Buffer>> AllocateHost(uint64_t bytes) override;
  absl::StatusOr<std::unique_ptr<Event>> CopyAsync(CopyDirection direction, void* dst,
                                                   const void* src, uint64_t bytes) override;
  // REQUIRES: `event` came from this backend's CopyAsync (else InvalidArgument).
  absl::Status ComputeWaits(Event& event) override;
  // The compute stream's time between reaching each ComputeWaits() and going on, timed with
  // events on the stream (the host never blocks there).
  double TakeStreamWaitSeconds() override;
  absl::Status Upload(void* device_dst, const void* host_src, uint64_t bytes) override;
  absl::Status Download(void* host_dst, const void* device_src, uint64_t bytes) override;
  absl::Status CopyOnDevice(void* dst, const void* src, uint64_t bytes) override;
  absl::StatusOr<uint64_t> ScratchBytes(const ForwardArgs& args) override;
  absl::StatusOr<uint64_t> ScratchBytes(const BackwardArgs& args) override;
  absl::Status Forward(const ForwardArgs& args) override;
  absl::Status Backward(const BackwardArgs& args) override;
  absl::Status Update(const UpdateArgs& args) override;
  absl::Status Accumulate(const TensorView& out, const TensorView& a,
                          const TensorView& b) override;
  absl::Status Fill(const TensorView& out, float value) override;
  absl::Status Synchronize() override;

  // Returns the bytes of device memory the workspace holds now (0 while every kernel runs
  // in its planned scratch): memory the backend uses besides the buffers it handed out.
  uint64_t workspace_bytes() const override;
  // Grows the workspace to at least `bytes` now, so that no kernel has to grow it later.
  absl::Status ReserveWorkspace(uint64_t bytes);

  // The device bytes the process held once Init() had made the context, streams and
  // handles: NVML's per-process figure where NVML lists this process, else the driver's
  // used bytes (total less free: other processes' use included, so never less than ours).
  uint64_t fixed_device_bytes() const override { return fixed_device_bytes_; }
  // Which of the two measured fixed_device_bytes(): "nvml" or "driver".
  const std::string& fixed_device_source() const { return fixed_device_source_; }

  int device_ordinal() const { return device_; }

 private:
  // Makes this backend's device current for the calling thread.
  absl::Status Activate();
  // Sets fixed_device_bytes_ and its source; called at the end of Init().
  absl::Status MeasureFixedCost();

  int device_;
  uint64_t fixed_device_bytes_ = 0;
  std::string fixed_device_source_;
  std::unique_ptr<CudaContext> ctx_;
  std::unique_ptr<CudaStreams> streams_;
};

// Returns a CUDA backend on device `device_ordinal`: FailedPrecondition("no CUDA device:
// ...") where the machine has no usable CUDA device or driver, InvalidArgument for an
// ordinal out of range.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device_ordinal);
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device_ordinal,
                                                           const CudaBackendOptions& options);

}  // namespace headroom::executor::cuda

#endif  // HEADROOM_EXECUTOR_CUDA_CUDA_BACKEND_H_
