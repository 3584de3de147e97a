// How long headroomd plans one request: until the earlier of the client's deadline and the
// daemon's own limit (--max-plan-seconds), and no longer than the client waits.
#ifndef HEADROOM_SERVER_PLAN_LIMIT_H_
#define HEADROOM_SERVER_PLAN_LIMIT_H_

#include <functional>

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "util/cancellation.h"

namespace headroom::server {

// headroomd's --max-plan-seconds default: the longest one request's planning may take. The
// largest zoo models plan in a few seconds (docs/server.md, "Limits on requests").
inline constexpr double kDefaultMaxPlanSeconds = 60;

// How often a plan asks gRPC whether its call was cancelled: IsCancelled() polls the call's
// completion queue (about 17 us, in the kernel), too dear for every check of the planner.
inline constexpr absl::Duration kCancelledPollInterval = absl::Milliseconds(10);

// Returns the token a plan of a request runs under: it expires at the earlier of
// `client_deadline` (absl::InfiniteFuture(): none) and `now` + `max_plan_time`
// (absl::InfiniteDuration(): no daemon limit), its error naming which ("the client's deadline
// of 5 s", "headroomd's --max-plan-seconds 60"), and is cancelled when `cancelled` says so
// (asked at most every kCancelledPollInterval).
util::CancellationToken PlanToken(absl::Time now, absl::Time client_deadline,
                                  absl::Duration max_plan_time, std::function<bool()> cancelled);

// Returns PlanToken for the call of `context` (its deadline; cancelled when the client
// cancels or goes away), now. `context` must outlive the token.
util::CancellationToken PlanToken(const grpc::ServerContext& context, absl::Duration max_plan_time);

}  // namespace headroom::server

#endif  // HEADROOM_SERVER_PLAN_LIMIT_H_
