#include "util/cancellation.h"

#include "absl/strings/str_format.h"

namespace headroom::util {

absl::Status CancellationToken::Check() const {
  if (deadline_ == absl::InfiniteFuture() && !cancelled_) return absl::OkStatus();
  const absl::Time now = absl::Now();
  if (now >= deadline_) {
    return absl::DeadlineExceededError(absl::StrFormat(
        "stopped after %.3f s: %s has passed", absl::ToDoubleSeconds(now - start_), limit_));
  }
  if (!cancelled_) return absl::OkStatus();
  if (!cancelled_seen_.load(std::memory_order_relaxed)) {
    const int64_t now_nanos = absl::ToUnixNanos(now);
    if (now_nanos < next_poll_nanos_.load(std::memory_order_relaxed)) return absl::OkStatus();
    next_poll_nanos_.store(now_nanos + poll_interval_nanos_, std::memory_order_relaxed);
    if (!cancelled_()) return absl::OkStatus();
    cancelled_seen_.store(true, std::memory_order_relaxed);
  }
  return absl::CancelledError(absl::StrFormat("stopped after %.3f s: the request was cancelled",
                                              absl::ToDoubleSeconds(now - start_)));
}

}  // namespace headroom::util
