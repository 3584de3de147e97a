#include <cuda_runtime.h>

#include <chrono>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "executor/cuda/cuda_backend.h"
#include "executor/cuda/cuda_context.h"
#include "executor/cuda/device_footprint.h"

namespace headroom::executor::cuda {

namespace {

// A device event and the host time it completed at: converts the times of later events on
// the device to the host's clock (cudaEventElapsedTime from it). Shared by the copies'
// events made while it is the newest, so it outlives them.
struct ClockAnchor {
  cudaEvent_t event = nullptr;
  std::chrono::steady_clock::time_point host;
  ~ClockAnchor() {
    if (event != nullptr) cudaEventDestroy(event);
  }
};

}  // namespace

// The copy streams, an event marking "all compute issued so far" for them to wait on, and
// the newest clock anchor (made at Init() and at every Synchronize(), when the device is
// idle, so that device times stay close to it and convert precisely).
struct CudaStreams {
  cudaStream_t to_host = nullptr;
  cudaStream_t to_device = nullptr;
  cudaEvent_t compute_marker = nullptr;
  std::shared_ptr<const ClockAnchor> anchor;
  // Each ComputeWaits(): timing events on the compute stream where it reached the wait and
  // where it went on, until TakeStreamWaitSeconds() reads and destroys them.
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> waits;
};

namespace {

// Returns a new anchor recorded on `stream`, waiting for it.
// REQUIRES: the device is idle (else the host time is late).
absl::StatusOr<std::shared_ptr<const ClockAnchor>> MakeAnchor(cudaStream_t stream) {
  auto anchor = std::make_shared<ClockAnchor>();
  HR_CUDA(cudaEventCreate(&anchor->event));
  HR_CUDA(cudaEventRecord(anchor->event, stream));
  HR_CUDA(cudaEventSynchronize(anchor->event));
  anchor->host = std::chrono::steady_clock::now();
  return std::shared_ptr<const ClockAnchor>(std::move(anchor));
}

// Restores the calling thread's current device when it goes out of scope.
class CurrentDeviceRestorer {
 public:
  CurrentDeviceRestorer() {
    if (cudaGetDevice(&device_) != cudaSuccess) device_ = -1;
  }
  ~CurrentDeviceRestorer() {
    if (device_ >= 0) cudaSetDevice(device_);
  }
  CurrentDeviceRestorer(const CurrentDeviceRestorer&) = delete;
  CurrentDeviceRestorer& operator=(const CurrentDeviceRestorer&) = delete;

 private:
  int device_ = -1;
};

const KernelTable& Table() {
  static const KernelTable* table = [] {
    auto* t = new KernelTable;
    RegisterDnnKernels(t);
    RegisterPoolKernels(t);
    RegisterBlasKernels(t);
    RegisterElementwiseKernels(t);
    RegisterActivationKernels(t);
    RegisterRowKernels(t);
    RegisterReduceKernels(t);
    RegisterResizeKernels(t);
    RegisterSegmentationKernels(t);
    return t;
  }();
  return *table;
}

// Returns `status` with "CUDA backend: <what>: " in front of its message.
absl::Status Annotate(absl::Status status, const std::string& what) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("CUDA backend: ", what, ": ", status.message()));
}

class DeviceBuffer : public Buffer {
 public:
  DeviceBuffer(int device, void* data, uint64_t bytes)
      : device_(device), data_(data), bytes_(bytes) {}
  // Frees on the buffer's device, then makes the thread's current device what it was.
  ~DeviceBuffer() override {
    CurrentDeviceRestorer restore;
    cudaSetDevice(device_);
    cudaFree(data_);
  }
  void* data() const override { return data_; }
  uint64_t bytes() const override { return bytes_; }

 private:
  int device_;
  void* data_;
  uint64_t bytes_;
};

class PinnedBuffer : public Buffer {
 public:
  PinnedBuffer(void* data, uint64_t bytes) : data_(data), bytes_(bytes) {}
  ~PinnedBuffer() override { cudaFreeHost(data_); }
  void* data() const override { return data_; }
  uint64_t bytes() const override { return bytes_; }

 private:
  void* data_;
  uint64_t bytes_;
};

// One copy: timing events recorded on its stream just before it (`begin`) and just after
// (`done`, its completion); owns both.
class CudaEvent : public Event {
 public:
  CudaEvent(cudaEvent_t begin, cudaEvent_t done, std::shared_ptr<const ClockAnchor> anchor)
      : begin_(begin), done_(done), anchor_(std::move(anchor)) {}
  ~CudaEvent() override {
    cudaEventDestroy(begin_);
    cudaEventDestroy(done_);
  }
  absl::Status Wait() override {
    return Annotate(CudaStatus(cudaEventSynchronize(done_), "cudaEventSynchronize"),
                    "waiting for a copy");
  }
  // Returns when the copy ran on its stream, on the host's clock, once it is done (nullopt
  // before: asking does not wait). Precise to about a microsecond.
  std::optional<Interval> interval() const override {
    if (cudaEventQuery(done_) != cudaSuccess) return std::nullopt;
    float begin_ms = 0, end_ms = 0;
    if (cudaEventElapsedTime(&begin_ms, anchor_->event, begin_) != cudaSuccess ||
        cudaEventElapsedTime(&end_ms, anchor_->event, done_) != cudaSuccess) {
      return std::nullopt;
    }
    auto at = [&](float ms) {
      return anchor_->host + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                 std::chrono::duration<double, std::milli>(ms));
    };
    return Interval{at(begin_ms), at(end_ms)};
  }
  cudaEvent_t event() const { return done_; }

 private:
  cudaEvent_t begin_;
  cudaEvent_t done_;
  std::shared_ptr<const ClockAnchor> anchor_;
};

}  // namespace

CudaBackend::CudaBackend(int device_ordinal, CudaBackendOptions options)
    : device_(device_ordinal),
      ctx_(std::make_unique<CudaContext>()),
      streams_(std::make_unique<CudaStreams>()) {
  ctx_->device = device_ordinal;
  ctx_->allow_tf32 = options.allow_tf32;
  ctx_->max_conv_workspace_bytes = options.max_conv_workspace_bytes;
  ctx_->deterministic = options.deterministic;
}

CudaBackend::~CudaBackend() {
  CurrentDeviceRestorer restore;
  cudaSetDevice(device_);
  if (ctx_->compute != nullptr) cudaStreamSynchronize(ctx_->compute);
  if (streams_->to_host != nullptr) cudaStreamSynchronize(streams_->to_host);
  if (streams_->to_device != nullptr) cudaStreamSynchronize(streams_->to_device);
  ctx_->cache.clear();  // Destroys cuDNN descriptors before the handle.
  if (ctx_->cublas != nullptr) cublasDestroy(ctx_->cublas);
  if (ctx_->cudnn != nullptr) cudnnDestroy(ctx_->cudnn);
  if (ctx_->workspace != nullptr) cudaFree(ctx_->workspace);
  if (ctx_->index_slots != nullptr) cudaFree(ctx_->index_slots);
  streams_->anchor.reset();
  for (const auto& [arrived, resumed] : streams_->waits) {
    cudaEventDestroy(arrived);
    cudaEventDestroy(resumed);
  }
  if (streams_->compute_marker != nullptr) cudaEventDestroy(streams_->compute_marker);
  if (streams_->to_host != nullptr) cudaStreamDestroy(streams_->to_host);
  if (streams_->to_device != nullptr) cudaStreamDestroy(streams_->to_device);
  if (ctx_->compute != nullptr) cudaStreamDestroy(ctx_->compute);
}

absl::Status CudaBackend::Activate() {
  return Annotate(CudaStatus(cudaSetDevice(device_), "cudaSetDevice"),
                  absl::StrCat("selecting cuda:", device_));
}

absl::Status CudaBackend::Init() {
  RETURN_IF_ERROR(Activate());
  HR_CUDA(cudaStreamCreateWithFlags(&ctx_->compute, cudaStreamNonBlocking));
  HR_CUDA(cudaStreamCreateWithFlags(&streams_->to_host, cudaStreamNonBlocking));
  HR_CUDA(cudaStreamCreateWithFlags(&streams_->to_device, cudaStreamNonBlocking));
  HR_CUDA(cudaEventCreateWithFlags(&streams_->compute_marker, cudaEventDisableTiming));
  HR_CUDNN(cudnnCreate(&ctx_->cudnn));
  HR_CUDNN(cudnnSetStream(ctx_->cudnn, ctx_->compute));
  HR_CUBLAS(cublasCreate(&ctx_->cublas));
  HR_CUBLAS(cublasSetStream(ctx_->cublas, ctx_->compute));
  // TF32 only where allowed; never CUBLAS_TENSOR_OP_MATH's half-precision conversion.
  HR_CUBLAS(cublasSetMathMode(ctx_->cublas, ctx_->allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                             : CUBLAS_DEFAULT_MATH));
  // cuBLAS's workspace comes from each MatMul's scratch; none until then, so that cuBLAS
  // allocates no pool of its own (cublasSetStream above resets it to that pool: it goes
  // first).
  HR_CUBLAS(cublasSetWorkspace(ctx_->cublas, nullptr, 0));
  int major = 0;
  HR_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_));
  ctx_->cublas_workspace_bytes = major >= 9 ? uint64_t{32} << 20 : uint64_t{4} << 20;
  RETURN_IF_ERROR(ctx_->AllocateIndexSlots());
  ASSIGN_OR_RETURN(streams_->anchor, MakeAnchor(ctx_->compute));
  // Last: the fixed cost includes the handles, the index slots and the anchor.
  return MeasureFixedCost();
}

absl::Status CudaBackend::MeasureFixedCost() {
  HR_CUDA(cudaDeviceSynchronize());
  if (absl::StatusOr<uint64_t> nvml = ThisProcessDeviceBytes(device_); nvml.ok()) {
    fixed_device_bytes_ = *nvml;
    fixed_device_source_ = "nvml";
    return absl::OkStatus();
  }
  size_t free = 0, total = 0;
  HR_CUDA(cudaMemGetInfo(&free, &total));
  fixed_device_bytes_ = total - free;
  fixed_device_source_ = "driver";
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Buffer>> CudaBackend::AllocateDevice(uint64_t bytes) {
  RETURN_IF_ERROR(Activate());
  void* data = nullptr;
  const cudaError_t err = cudaMalloc(&data, std::max<uint64_t>(bytes, 1));
  if (err != cudaSuccess) {
    absl::Status status = CudaStatus(err, "cudaMalloc");
    return absl::Status(status.code(), absl::StrCat("CUDA backend: cannot allocate ", bytes,
                                                    " bytes of device memory on cuda:",
                                                    device_, ": ", status.message()));
  }
  return std::unique_ptr<Buffer>(std::make_unique<DeviceBuffer>(device_, data, bytes));
}

absl::StatusOr<std::unique_ptr<Buffer>> CudaBackend::AllocateHost(uint64_t bytes) {
  RETURN_IF_ERROR(Activate());
  void* data = nullptr;
  const cudaError_t err = cudaMallocHost(&data, std::max<uint64_t>(bytes, 1));
  if (err != cudaSuccess) {
    absl::Status status = CudaStatus(err, "cudaMallocHost");
    return absl::Status(status.code(), absl::StrCat("CUDA backend: cannot allocate ", bytes,
                                                    " bytes of pinned host memory: ",
                                                    status.message()));
  }
  return std::unique_ptr<Buffer>(std::make_unique<PinnedBuffer>(data, bytes));
}

absl::StatusOr<std::unique_ptr<Event>> CudaBackend::CopyAsync(CopyDirection direction,
                                                              void* dst, const void* src,
                                                              uint64_t bytes) {
  RETURN_IF_ERROR(Activate());
  const bool to_host = direction == CopyDirection::kToHost;
  cudaStream_t stream = to_host ? streams_->to_host : streams_->to_device;
  // Timing events around the copy, for Event::interval().
  cudaEvent_t begin = nullptr, done = nullptr;
  absl::Status status = CudaStatus(cudaEventCreate(&begin), "cudaEventCreate");
  if (status.ok()) status = CudaStatus(cudaEventCreate(&done), "cudaEventCreate");
  if (status.ok()) {
    status = [&]() -> absl::Status {
      // After all compute issued so far.
      HR_CUDA(cudaEventRecord(streams_->compute_marker, ctx_->compute));
      HR_CUDA(cudaStreamWaitEvent(stream, streams_->compute_marker, 0));
      HR_CUDA(cudaEventRecord(begin, stream));
      HR_CUDA(cudaMemcpyAsync(dst, src, bytes,
                              to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, stream));
      HR_CUDA(cudaEventRecord(done, stream));
      return absl::OkStatus();
    }();
  }
  if (!status.ok()) {
    if (begin != nullptr) cudaEventDestroy(begin);
    if (done != nullptr) cudaEventDestroy(done);
    return Annotate(status,
                    absl::StrCat("copying ", bytes, " bytes to ", to_host ? "host" : "device"));
  }
  return std::unique_ptr<Event>(std::make_unique<CudaEvent>(begin, done, streams_->anchor));
}

absl::Status CudaBackend::ComputeWaits(Event& event) {
  auto* cuda_event = dynamic_cast<CudaEvent*>(&event);
  if (cuda_event == nullptr) {
    return absl::InvalidArgumentError("CUDA backend: ComputeWaits: not an event of this backend");
  }
  RETURN_IF_ERROR(Activate());
  // The stream's wait, timed on the stream: an event where it arrives, one where it goes on.
  std::pair<cudaEvent_t, cudaEvent_t> wait{nullptr, nullptr};
  absl::Status status = CudaStatus(cudaEventCreate(&wait.first), "cudaEventCreate");
  if (status.ok()) status = CudaStatus(cudaEventCreate(&wait.second), "cudaEventCreate");
  if (status.ok())
    status = CudaStatus(cudaEventRecord(wait.first, ctx_->compute), "cudaEventRecord");
  if (status.ok()) {
    status = CudaStatus(cudaStreamWaitEvent(ctx_->compute, cuda_event->event(), 0),
                        "cudaStreamWaitEvent");
  }
  if (status.ok())
    status = CudaStatus(cudaEventRecord(wait.second, ctx_->compute), "cudaEventRecord");
  if (status.ok()) {
    streams_->waits.push_back(wait);
  } else {
    if (wait.first != nullptr) cudaEventDestroy(wait.first);
    if (wait.second != nullptr) cudaEventDestroy(wait.second);
  }
  return Annotate(status, "ComputeWaits");
}

double CudaBackend::TakeStreamWaitSeconds() {
  CurrentDeviceRestorer restore;
  cudaSetDevice(device_);
  double seconds = 0;
  for (const auto& [arrived, resumed] : streams_->waits) {
    float ms = 0;
    // Both are done once the compute stream is (the caller synchronised); a pair that is not
    // counts nothing rather than blocking.
    if (cudaEventQuery(resumed) == cudaSuccess &&
        cudaEventElapsedTime(&ms, arrived, resumed) == cudaSuccess) {
      seconds += ms / 1e3;
    }
    cudaEventDestroy(arrived);
    cudaEventDestroy(resumed);
  }
  cudaGetLastError();  // A pair not done leaves cudaErrorNotReady behind; it is not an error.
  streams_->waits.clear();
  return seconds;
}

absl::Status CudaBackend::Upload(void* device_dst, const void* host_src, uint64_t bytes) {
  RETURN_IF_ERROR(Synchronize());
  absl::Status status = [&]() -> absl::Status {
    HR_CUDA(cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, ctx_->compute));
    HR_CUDA(cudaStreamSynchronize(ctx_->compute));
    return absl::OkStatus();
  }();
  return Annotate(status, absl::StrCat("uploading ", bytes, " bytes"));
}

absl::Status CudaBackend::Download(void* host_dst, const void* device_src, uint64_t bytes) {
  RETURN_IF_ERROR(Synchronize());
  absl::Status status = [&]() -> absl::Status {
    HR_CUDA(cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, ctx_->compute));
    HR_CUDA(cudaStreamSynchronize(ctx_->compute));
    return absl::OkStatus();
  }();
  return Annotate(status, absl::StrCat("downloading ", bytes, " bytes"));
}

absl::Status CudaBackend::CopyOnDevice(void* dst, const void* src, uint64_t bytes) {
  RETURN_IF_ERROR(Activate());
  // On the compute stream: after the compute issued so far, before the compute after it.
  absl::Status status = [&]() -> absl::Status {
    HR_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx_->compute));
    return absl::OkStatus();
  }();
  return Annotate(status, absl::StrCat("copying ", bytes, " bytes on the device"));
}

namespace {

// Returns the kernels of `op` with a `forward` (else backward) kernel, given its attributes:
// Unimplemented for an op without one, InvalidArgument without attributes.
absl::StatusOr<const OpKernels*> KernelsOf(const std::string& op, const graph::Attrs* attrs,
                                          bool forward) {
  ASSIGN_OR_RETURN(const OpKernels* k, FindKernels(Table(), "CUDA backend", op, forward));
  if (attrs == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA backend: ", op, " ",
                                                   forward ? "forward" : "backward",
                                                   ": no attributes given"));
  }
  return k;
}

// Whether any output gradient flows into a backward (without, it only zeroes its inputs').
bool AnyGradientFlows(const BackwardArgs& args) {
  for (const TensorView& dy : args.output_grads) {
    if (dy.present()) return true;
  }
  return false;
}

// Returns Unimplemented, naming the op, where any of `lists` holds a bfloat16 tensor: the
// CUDA backend has no bfloat16 kernels yet (--precision bf16 runs on the CPU backend).
absl::Status RejectBFloat16(const std::string& op,
                            std::initializer_list<const std::vector<TensorView>*> lists) {
  for (const std::vector<TensorView>* list : lists) {
    for (const TensorView& t : *list) {
      if (t.dtype != proto::DTYPE_BFLOAT16) continue;
      return absl::UnimplementedError(
          absl::StrCat("CUDA backend: op '", op, "' has a bfloat16 tensor ",
                       graph::ShapeString(t.shape),
                       "; the CUDA backend has no bfloat16 kernels (bf16 runs on the CPU backend)"));
    }
  }
  return absl::OkStatus();
}

absl::Status RejectBFloat16(const ForwardArgs& args) {
  return RejectBFloat16(args.op, {&args.inputs, &args.outputs, &args.saved, &args.running});
}

absl::Status RejectBFloat16(const BackwardArgs& args) {
  return RejectBFloat16(args.op, {&args.inputs, &args.outputs, &args.saved, &args.output_grads,
                                  &args.input_grads});
}

}  // namespace

absl::StatusOr<uint64_t> CudaBackend::ScratchBytes(const ForwardArgs& args) {
  RETURN_IF_ERROR(RejectBFloat16(args));
  ASSIGN_OR_RETURN(const OpKernels* k, KernelsOf(args.op, args.attrs, /*forward=*/true));
  if (k->forward_scratch == nullptr) return 0;
  RETURN_IF_ERROR(Activate());
  absl::StatusOr<uint64_t> bytes = k->forward_scratch(*ctx_, args);
  if (!bytes.ok()) return Annotate(bytes.status(), absl::StrCat(args.op, " forward scratch"));
  return bytes;
}

absl::StatusOr<uint64_t> CudaBackend::ScratchBytes(const BackwardArgs& args) {
  RETURN_IF_ERROR(RejectBFloat16(args));
  ASSIGN_OR_RETURN(const OpKernels* k, KernelsOf(args.op, args.attrs, /*forward=*/false));
  if (!AnyGradientFlows(args) || k->backward_scratch == nullptr) return 0;
  RETURN_IF_ERROR(Activate());
  absl::StatusOr<uint64_t> bytes = k->backward_scratch(*ctx_, args);
  if (!bytes.ok()) return Annotate(bytes.status(), absl::StrCat(args.op, " backward scratch"));
  return bytes;
}

absl::Status CudaBackend::Forward(const ForwardArgs& args) {
  RETURN_IF_ERROR(RejectBFloat16(args));
  ASSIGN_OR_RETURN(const OpKernels* k, KernelsOf(args.op, args.attrs, /*forward=*/true));
  RETURN_IF_ERROR(Activate());
  return Annotate(k->forward(*ctx_, args), absl::StrCat(args.op, " forward"));
}

absl::Status CudaBackend::Backward(const BackwardArgs& args) {
  RETURN_IF_ERROR(RejectBFloat16(args));
  ASSIGN_OR_RETURN(const OpKernels* k, KernelsOf(args.op, args.attrs, /*forward=*/false));
  RETURN_IF_ERROR(Activate());
  // No gradient flows in at all: every input gradient is zero.
  if (!AnyGradientFlows(args)) {
    absl::Status status;
    for (const TensorView& dx : args.input_grads) {
      status.Update(ZeroIfPresent(*ctx_, dx));
    }
    return Annotate(status, absl::StrCat(args.op, " backward"));
  }
  return Annotate(k->backward(*ctx_, args), absl::StrCat(args.op, " backward"));
}

absl::Status CudaBackend::Update(const UpdateArgs& args) {
  RETURN_IF_ERROR(Activate());
  return Annotate(RunUpdate(*ctx_, args), args.op);
}

absl::Status CudaBackend::Accumulate(const TensorView& out, const TensorView& a,
                                     const TensorView& b) {
  RETURN_IF_ERROR(Activate());
  return Annotate(RunAccumulate(*ctx_, out, a, b), "Accumulate");
}

absl::Status CudaBackend::Fill(const TensorView& out, float value) {
  RETURN_IF_ERROR(Activate());
  return Annotate(RunFill(*ctx_, out, value), "Fill");
}

absl::Status CudaBackend::Synchronize() {
  RETURN_IF_ERROR(Activate());
  absl::Status status;
  status.Update(CudaStatus(cudaStreamSynchronize(ctx_->compute), "cudaStreamSynchronize"));
  status.Update(CudaStatus(cudaStreamSynchronize(streams_->to_host), "cudaStreamSynchronize"));
  status.Update(CudaStatus(cudaStreamSynchronize(streams_->to_device), "cudaStreamSynchronize"));
  if (status.ok()) status = ctx_->CollectIndexChecks();
  if (status.ok()) {
    // The device is idle: a precise moment to anchor the copies' clock again.
    absl::StatusOr<std::shared_ptr<const ClockAnchor>> anchor = MakeAnchor(ctx_->compute);
    if (anchor.ok()) {
      streams_->anchor = *std::move(anchor);
    } else {
      status = anchor.status();
    }
  }
  return Annotate(status, "Synchronize");
}

uint64_t CudaBackend::workspace_bytes() const { return ctx_->workspace_bytes; }

absl::Status CudaBackend::ReserveWorkspace(uint64_t bytes) {
  RETURN_IF_ERROR(Activate());
  return Annotate(ctx_->ReserveWorkspace(bytes), "reserving the workspace");
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device_ordinal) {
  return CreateCudaBackend(device_ordinal, CudaBackendOptions{});
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device_ordinal,
                                                           const CudaBackendOptions& options) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    const absl::Status status = CudaStatus(err, "cudaGetDeviceCount");
    return absl::Status(status.code(), absl::StrCat("no CUDA device: ", status.message()));
  }
  if (count == 0) return absl::FailedPreconditionError("no CUDA device: the driver lists none");
  if (device_ordinal < 0 || device_ordinal >= count) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA device ", device_ordinal,
                                                   " out of range [0, ", count, ")"));
  }
  auto backend = std::make_unique<CudaBackend>(device_ordinal, options);
  RETURN_IF_ERROR(Annotate(backend->Init(), absl::StrCat("initialising cuda:", device_ordinal)));
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace headroom::executor::cuda
