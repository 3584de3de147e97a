// The service headroomd runs, in this process: what a `headroom` command reaches when it is
// given no --server. The command builds the same request and calls the same stub methods
// either way, so a local answer is the daemon's answer, byte for byte, printed the same way.
//
// The local instance plans for the backend it is made for (its kernels' scratch, whether its
// host memory is its device's), as headroomd plans for its own; it has no jobs, so the job
// calls answer FAILED_PRECONDITION. Thread-safe.
#ifndef HEADROOM_CLIENTS_LOCAL_SERVICE_H_
#define HEADROOM_CLIENTS_LOCAL_SERVICE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "proto/headroom.grpc.pb.h"

namespace headroom::clients {

// Returns a stub over gRPC's in-process channel to the local service for `backend` ("cpu"
// or "cuda"), starting that service on first use; it lives until the process exits. The
// error of making the backend (no GPU, say).
absl::StatusOr<std::unique_ptr<proto::Headroom::StubInterface>> ConnectInProcess(
    const std::string& backend);

}  // namespace headroom::clients

#endif  // HEADROOM_CLIENTS_LOCAL_SERVICE_H_
