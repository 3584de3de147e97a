#include "server/plan_limit.h"

#include <string>
#include <utility>

#include "absl/strings/str_format.h"

namespace headroom::server {

util::CancellationToken PlanToken(absl::Time now, absl::Time client_deadline,
                                  absl::Duration max_plan_time, std::function<bool()> cancelled) {
  const absl::Time daemon_deadline = now + max_plan_time;  // Infinite stays infinite.
  if (client_deadline < daemon_deadline) {
    return util::CancellationToken(client_deadline,
                                   absl::StrFormat("the client's deadline of %.3g s",
                                                   absl::ToDoubleSeconds(client_deadline - now)),
                                   std::move(cancelled), now);
  }
  return util::CancellationToken(
      daemon_deadline,
      absl::StrFormat("headroomd's --max-plan-seconds %.3g", absl::ToDoubleSeconds(max_plan_time)),
      std::move(cancelled), now);
}

util::CancellationToken PlanToken(const grpc::ServerContext& context,
                                  absl::Duration max_plan_time) {
  // gRPC gives a call without a deadline the time_point's maximum: 2262, far enough.
  const absl::Time client_deadline = absl::FromChrono(context.deadline());
  return PlanToken(absl::Now(), client_deadline, max_plan_time,
                   [&context] { return context.IsCancelled(); });
}

}  // namespace headroom::server
