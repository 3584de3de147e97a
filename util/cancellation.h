// A cancellation token: long computations (planning) ask it, between pieces of work, whether
// to go on, so a request whose client gave up or whose time ran out stops promptly.
#ifndef HEADROOM_UTIL_CANCELLATION_H_
#define HEADROOM_UTIL_CANCELLATION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace headroom::util {

// Expires at a deadline, and is cancelled when its `cancelled` callback (gRPC's
// ServerContext::IsCancelled) says so. Made once per request, then Check() as often as the
// work allows: it reads the clock (absl::Now(), tens of nanoseconds) and calls the callback
// at most once per `poll_interval` (gRPC's IsCancelled polls the call's completion queue,
// about 17 us a call), so callers ask once per outer iteration of a loop, not per element.
// Once Check() has failed it fails on every later call (time only moves on; a cancellation
// is remembered). Check() is thread-safe if the callback is. A default token never expires.
// Neither copyable nor movable: make it where it is used (a function returning one by value
// is fine).
class CancellationToken {
 public:
  // Never expires, never cancelled.
  CancellationToken() = default;

  // Expires at `deadline`, a limit named by `limit` in its error ("the client's deadline of
  // 5 s", "--max-plan-seconds 60"); cancelled when `cancelled` (optional) returns true, which
  // is asked at most once per `poll_interval` (default zero: at every Check()). The time
  // spent is counted from `start`.
  CancellationToken(absl::Time deadline, std::string limit,
                    std::function<bool()> cancelled = nullptr, absl::Time start = absl::Now(),
                    absl::Duration poll_interval = absl::ZeroDuration())
      : deadline_(deadline),
        limit_(std::move(limit)),
        cancelled_(std::move(cancelled)),
        start_(start),
        poll_interval_nanos_(absl::ToInt64Nanoseconds(poll_interval)) {}
  CancellationToken(const CancellationToken&) = delete;
  CancellationToken& operator=(const CancellationToken&) = delete;

  // Returns OK while the work may go on; DeadlineExceeded naming the limit and the time
  // spent once the deadline has passed; Cancelled once the callback says so.
  absl::Status Check() const;

  absl::Time deadline() const { return deadline_; }

 private:
  absl::Time deadline_ = absl::InfiniteFuture();
  std::string limit_;
  std::function<bool()> cancelled_;
  absl::Time start_ = absl::Now();
  int64_t poll_interval_nanos_ = 0;
  // Unix nanoseconds before which `cancelled_` is not asked again.
  mutable std::atomic<int64_t> next_poll_nanos_{std::numeric_limits<int64_t>::min()};
  // Whether `cancelled_` has returned true.
  mutable std::atomic<bool> cancelled_seen_{false};
};

// Returns `token`->Check(), or OK for a null token (no limit).
inline absl::Status CheckCancellation(const CancellationToken* token) {
  return token == nullptr ? absl::OkStatus() : token->Check();
}

}  // namespace headroom::util

#endif  // HEADROOM_UTIL_CANCELLATION_H_
