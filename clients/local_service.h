// The service headroomd runs, in this process: what `headroom plan` and `headroom profile`
// reach when they are given no --server. The command builds the same request and calls the
// same stub method either way, so a local answer is the daemon's answer, printed the same
// way (for a plan, byte for byte).
//
// A local service plans for the backend it is made for (its kernels' scratch, whether its
// host memory is its device's), as headroomd plans for its own; it has no jobs, so the job
// calls answer FAILED_PRECONDITION, and its profiles run on the ProfileRunner it is given.
#ifndef HEADROOM_CLIENTS_LOCAL_SERVICE_H_
#define HEADROOM_CLIENTS_LOCAL_SERVICE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "executor/backends.h"
#include "proto/headroom.grpc.pb.h"
#include "server/service.h"

namespace headroom::clients {

// One instance of the service in this process, reached over gRPC's in-process channel (no
// listening port). Start() once, then NewStub() for each caller. Thread-safe.
class InProcessService {
 public:
  // Returns the service planning for `backend` ("cpu", "cuda", or "none": no backend, no kernel
  // scratch) made with `backend_options` (which decide its kernels' algorithms, so their scratch:
  // the same as the backend the plans run on), with its profiles run on `profiles` (borrowed; null:
  // Profile fails). The error of making the backend.
  static absl::StatusOr<std::unique_ptr<InProcessService>> Start(
      const std::string& backend, server::ProfileRunner* profiles = nullptr,
      const executor::BackendOptions& backend_options = {});
  ~InProcessService();

  // Returns a stub for it; REQUIRES: used only while this object lives.
  std::unique_ptr<proto::Headroom::StubInterface> NewStub();

 private:
  struct Parts;
  explicit InProcessService(std::unique_ptr<Parts> parts);
  std::unique_ptr<Parts> parts_;
};

// Returns a stub for this process's plan service for `backend`, starting it on first use;
// it lives until the process exits.
absl::StatusOr<std::unique_ptr<proto::Headroom::StubInterface>> ConnectInProcess(
    const std::string& backend);

}  // namespace headroom::clients

#endif  // HEADROOM_CLIENTS_LOCAL_SERVICE_H_
