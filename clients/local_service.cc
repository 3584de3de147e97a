#include "clients/local_service.h"

#include <grpcpp/grpcpp.h>

#include <map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "executor/backend_scratch.h"
#include "executor/backends.h"
#include "server/service.h"
#include "util/status_macros.h"

namespace headroom::clients {
namespace {

// One local service: the backend it plans for, the service and the server that carries it.
struct LocalService {
  std::unique_ptr<executor::Backend> backend;
  std::unique_ptr<executor::BackendScratchModel> scratch;
  std::unique_ptr<server::HeadroomService> service;
  std::unique_ptr<grpc::Server> server;
};

absl::StatusOr<std::unique_ptr<LocalService>> StartLocalService(const std::string& backend_name) {
  auto local = std::make_unique<LocalService>();
  ASSIGN_OR_RETURN(local->backend, executor::MakeBackend(backend_name));
  local->scratch = std::make_unique<executor::BackendScratchModel>(local->backend.get());
  planner::PlanBackend plan_backend;
  plan_backend.scratch = local->scratch.get();
  plan_backend.host_is_device_memory = local->backend->host_is_device_memory();
  local->service = std::make_unique<server::HeadroomService>(/*jobs=*/nullptr, plan_backend);
  grpc::ServerBuilder builder;
  // No listening port: only this process's in-process channels reach it.
  builder.RegisterService(local->service.get());
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  local->server = builder.BuildAndStart();
  if (local->server == nullptr) return absl::InternalError("cannot start the local service");
  return local;
}

}  // namespace

absl::StatusOr<std::unique_ptr<proto::Headroom::StubInterface>> ConnectInProcess(
    const std::string& backend) {
  static absl::Mutex mu(absl::kConstInit);
  // Never destroyed: stubs handed out may be used until the process exits.
  static auto* services ABSL_GUARDED_BY(mu) =
      new std::map<std::string, std::unique_ptr<LocalService>>();
  absl::MutexLock lock(&mu);
  auto it = services->find(backend);
  if (it == services->end()) {
    ASSIGN_OR_RETURN(std::unique_ptr<LocalService> local, StartLocalService(backend));
    it = services->emplace(backend, std::move(local)).first;
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return proto::Headroom::NewStub(it->second->server->InProcessChannel(args));
}

}  // namespace headroom::clients
