// Clear errors for requests the handlers never see. gRPC answers a request it cannot parse
// as its method's message with INTERNAL and an empty message (the protobuf initialization
// error string, empty in proto3), which reads as the daemon's fault; this interceptor
// rewrites that answer as INVALID_ARGUMENT naming the method and what was wrong. The
// handlers never answer INTERNAL with an empty message themselves (ToGrpcStatus keeps
// absl's messages, which are never empty for an error), so nothing else is rewritten.
#ifndef HEADROOM_SERVER_REQUEST_ERRORS_H_
#define HEADROOM_SERVER_REQUEST_ERRORS_H_

#include <memory>

#include "grpcpp/support/server_interceptor.h"

namespace headroom::server {

// Returns the factory headroomd's server builder registers
// (ServerBuilder::experimental().SetInterceptorCreators).
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> UnparsedRequestErrors();

}  // namespace headroom::server

#endif  // HEADROOM_SERVER_REQUEST_ERRORS_H_
