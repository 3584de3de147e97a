#include "dist/nccl_collectives.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace headroom::dist {
namespace {

using Clock = std::chrono::steady_clock;

absl::Status CudaOk(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("nccl: ", what, ": ", cudaGetErrorString(e)));
}

absl::Status NcclOk(ncclResult_t r, const std::string& what) {
  if (r == ncclSuccess) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("nccl: ", what, ": ", ncclGetErrorString(r)));
}

class NcclCollectives : public Collectives {
 public:
  NcclCollectives(Collectives* bootstrap, const NcclOptions& options)
      : bootstrap_(bootstrap), options_(options) {}

  ~NcclCollectives() override {
    for (auto& [id, op] : in_flight_) cudaEventDestroy(op.event);
    if (comm_ != nullptr) {
      if (failed_) {
        ncclCommAbort(comm_);
      } else {
        ncclCommDestroy(comm_);
      }
    }
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  absl::Status Init() {
    absl::Status s = CudaOk(cudaSetDevice(options_.device),
                            absl::StrCat("cudaSetDevice(", options_.device, ")"));
    if (!s.ok()) return s;
    s = CudaOk(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    if (!s.ok()) return s;
    ncclUniqueId id;
    if (bootstrap_->rank() == 0) {
      s = NcclOk(ncclGetUniqueId(&id), "ncclGetUniqueId");
      if (!s.ok()) return s;
    }
    s = bootstrap_->Broadcast(&id, sizeof(id), 0, "broadcast of the ncclUniqueId");
    if (!s.ok()) return s;
    return NcclOk(ncclCommInitRank(&comm_, bootstrap_->size(), id, bootstrap_->rank()),
                  absl::StrCat("ncclCommInitRank(rank ", bootstrap_->rank(), " of ",
                               bootstrap_->size(), ")"));
  }

  int rank() const override { return bootstrap_->rank(); }
  int size() const override { return bootstrap_->size(); }
  std::string name() const override { return "nccl"; }

  absl::StatusOr<CollectiveHandle> AllreduceAsync(float* data, size_t count, ReduceOp op,
                                                  const std::string& what) override {
    if (failed_) return Failed(what);
    absl::Status s = NcclOk(ncclAllReduce(data, data, count, ncclFloat,
                                          op == ReduceOp::kSum ? ncclSum : ncclAvg, comm_,
                                          stream_),
                            what);
    if (!s.ok()) return s;
    return Record(what);
  }

  absl::Status Wait(CollectiveHandle handle) override {
    auto it = in_flight_.find(handle.id);
    if (it == in_flight_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("nccl: collective handle ", handle.id, " is not in flight"));
    }
    InFlight op = it->second;
    in_flight_.erase(it);
    for (;;) {
      const cudaError_t e = cudaEventQuery(op.event);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) {
        cudaEventDestroy(op.event);
        failed_ = true;
        return CudaOk(e, op.what);
      }
      if (std::chrono::duration<double>(Clock::now() - op.issued).count() >
          options_.timeout_seconds) {
        cudaEventDestroy(op.event);
        failed_ = true;
        return absl::DeadlineExceededError(absl::StrFormat(
            "nccl rank %d of %d: %s did not complete within %.1f s: a peer rank died or issued "
            "a different collective",
            rank(), size(), op.what, options_.timeout_seconds));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    cudaEventDestroy(op.event);
    return absl::OkStatus();
  }

  absl::Status Broadcast(void* data, size_t bytes, int root, const std::string& what) override {
    if (failed_) return Failed(what);
    absl::Status s = NcclOk(ncclBroadcast(data, data, bytes, ncclChar, root, comm_, stream_), what);
    if (!s.ok()) return s;
    absl::StatusOr<CollectiveHandle> handle = Record(what);
    if (!handle.ok()) return handle.status();
    return Wait(*handle);
  }

  absl::StatusOr<std::vector<uint64_t>> AllgatherU64(uint64_t value,
                                                     const std::string& what) override {
    return bootstrap_->AllgatherU64(value, what);
  }

 private:
  struct InFlight {
    cudaEvent_t event = nullptr;
    std::string what;
    Clock::time_point issued;
  };

  absl::StatusOr<CollectiveHandle> Record(const std::string& what) {
    InFlight op{nullptr, what, Clock::now()};
    absl::Status s =
        CudaOk(cudaEventCreateWithFlags(&op.event, cudaEventDisableTiming), "cudaEventCreate");
    if (!s.ok()) return s;
    s = CudaOk(cudaEventRecord(op.event, stream_), "cudaEventRecord");
    if (!s.ok()) return s;
    const int64_t id = next_id_++;
    in_flight_[id] = op;
    return CollectiveHandle{id};
  }

  absl::Status Failed(const std::string& what) const {
    return absl::FailedPreconditionError(
        absl::StrCat("nccl rank ", rank(), ": ", what, " not issued after an earlier failure"));
  }

  Collectives* const bootstrap_;
  const NcclOptions options_;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  absl::flat_hash_map<int64_t, InFlight> in_flight_;
  int64_t next_id_ = 0;
  bool failed_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Collectives>> CreateNcclCollectives(Collectives* bootstrap,
                                                                   const NcclOptions& options) {
  if (!(options.timeout_seconds > 0)) {
    return absl::InvalidArgumentError("nccl: the collective timeout must be positive");
  }
  auto c = std::make_unique<NcclCollectives>(bootstrap, options);
  absl::Status s = c->Init();
  if (!s.ok()) return s;
  return std::unique_ptr<Collectives>(std::move(c));
}

}  // namespace headroom::dist
