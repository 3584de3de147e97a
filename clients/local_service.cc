#include "clients/local_service.h"

#include <grpcpp/grpcpp.h>

#include <limits>
#include <map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "executor/backend_scratch.h"
#include "executor/backends.h"
#include "runner/trainer_options.h"
#include "server/request_limits.h"
#include "util/status_macros.h"

namespace headroom::clients {

// The backend a service plans for, the service and the server that carries it.
struct InProcessService::Parts {
  std::unique_ptr<executor::Backend> backend;
  std::unique_ptr<executor::BackendScratchModel> scratch;
  std::unique_ptr<server::HeadroomService> service;
  std::unique_ptr<grpc::Server> server;
};

InProcessService::InProcessService(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {}

InProcessService::~InProcessService() {
  if (parts_ != nullptr && parts_->server != nullptr) parts_->server->Shutdown();
}

absl::StatusOr<std::unique_ptr<InProcessService>> InProcessService::Start(
    const std::string& backend_name, server::ProfileRunner* profiles,
    const executor::BackendOptions& backend_options) {
  auto parts = std::make_unique<Parts>();
  planner::PlanBackend plan_backend;
  // "none": plans hold no kernel scratch (a backend whose kernels need none), host memory
  // separate unless the options say otherwise, the cpu preset by default.
  if (backend_name != "none") {
    ASSIGN_OR_RETURN(parts->backend,
                     executor::MakeBackendWithOptions(backend_name, backend_options));
    parts->scratch = std::make_unique<executor::BackendScratchModel>(parts->backend.get());
    plan_backend.scratch = parts->scratch.get();
    plan_backend.host_is_device_memory = parts->backend->host_is_device_memory();
  }
  plan_backend.device_preset = runner::DefaultDevicePreset(backend_name);
  // The daemon's limits, but no limit on planning time: the work is the command's own (a
  // client deadline still applies; Ctrl-C ends it).
  server::ServiceOptions options;
  options.limits.max_plan_seconds = std::numeric_limits<double>::infinity();
  parts->service =
      std::make_unique<server::HeadroomService>(/*jobs=*/nullptr, plan_backend, profiles, options);
  grpc::ServerBuilder builder;
  // No listening port: only this process's in-process channels reach it.
  builder.RegisterService(parts->service.get());
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  parts->server = builder.BuildAndStart();
  if (parts->server == nullptr) return absl::InternalError("cannot start the local service");
  return std::unique_ptr<InProcessService>(new InProcessService(std::move(parts)));
}

std::unique_ptr<proto::Headroom::StubInterface> InProcessService::NewStub() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return proto::Headroom::NewStub(parts_->server->InProcessChannel(args));
}

absl::StatusOr<std::unique_ptr<proto::Headroom::StubInterface>> ConnectInProcess(
    const std::string& backend) {
  static absl::Mutex mu(absl::kConstInit);
  // Never destroyed: stubs handed out may be used until the process exits.
  static auto* services ABSL_GUARDED_BY(mu) =
      new std::map<std::string, std::unique_ptr<InProcessService>>();
  absl::MutexLock lock(&mu);
  auto it = services->find(backend);
  if (it == services->end()) {
    ASSIGN_OR_RETURN(std::unique_ptr<InProcessService> local, InProcessService::Start(backend));
    it = services->emplace(backend, std::move(local)).first;
  }
  return it->second->NewStub();
}

}  // namespace headroom::clients
