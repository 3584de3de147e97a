#include "util/cancellation.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace headroom::util {

absl::Status CancellationToken::Check() const {
  if (deadline_ != absl::InfiniteFuture()) {
    const absl::Time now = absl::Now();
    if (now >= deadline_) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "stopped after %.3f s: %s has passed", absl::ToDoubleSeconds(now - start_), limit_));
    }
  }
  if (cancelled_ && cancelled_()) {
    return absl::CancelledError(absl::StrFormat("stopped after %.3f s: the request was cancelled",
                                                absl::ToDoubleSeconds(absl::Now() - start_)));
  }
  return absl::OkStatus();
}

}  // namespace headroom::util
