#include "server/plan_limit.h"

#include <chrono>
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
                                   std::move(cancelled), now, kCancelledPollInterval);
  }
  return util::CancellationToken(
      daemon_deadline,
      absl::StrFormat("headroomd's --max-plan-seconds %.3g", absl::ToDoubleSeconds(max_plan_time)),
      std::move(cancelled), now, kCancelledPollInterval);
}

util::CancellationToken PlanToken(const grpc::ServerContext& context,
                                  absl::Duration max_plan_time) {
  // gRPC gives a call without a deadline the time_point's maximum.
  const std::chrono::system_clock::time_point deadline = context.deadline();
  const absl::Time client_deadline = deadline == std::chrono::system_clock::time_point::max()
                                         ? absl::InfiniteFuture()
                                         : absl::FromChrono(deadline);
  return PlanToken(absl::Now(), client_deadline, max_plan_time,
                   [&context] { return context.IsCancelled(); });
}

}  // namespace headroom::server
