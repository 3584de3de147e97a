#include "util/cancellation.h"

#include <atomic>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom::util {
namespace {

using ::testing::HasSubstr;

TEST(CancellationTokenTest, DefaultNeverExpires) {
  const CancellationToken token;
  EXPECT_TRUE(token.Check().ok());
  EXPECT_TRUE(CheckCancellation(nullptr).ok());
  EXPECT_TRUE(CheckCancellation(&token).ok());
}

TEST(CancellationTokenTest, OkBeforeTheDeadline) {
  const CancellationToken token(absl::Now() + absl::Hours(1), "a test's hour");
  EXPECT_TRUE(token.Check().ok());
}

TEST(CancellationTokenTest, DeadlinePassedNamesTheLimitAndTheTimeSpent) {
  const absl::Time start = absl::Now() - absl::Seconds(3);
  const CancellationToken token(start + absl::Seconds(2), "--max-plan-seconds 2", nullptr, start);
  const absl::Status status = token.Check();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_THAT(status.message(), HasSubstr("--max-plan-seconds 2"));
  EXPECT_THAT(status.message(), HasSubstr("stopped after 3.0"));
  // It stays expired.
  EXPECT_EQ(token.Check().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(CheckCancellation(&token).code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(CancellationTokenTest, CancelledWhenTheCallbackSaysSo) {
  std::atomic<bool> cancelled{false};
  const CancellationToken token(absl::InfiniteFuture(), "none",
                                [&cancelled] { return cancelled.load(); });
  EXPECT_TRUE(token.Check().ok());
  cancelled = true;
  const absl::Status status = token.Check();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_THAT(status.message(), HasSubstr("cancelled"));
}

TEST(CancellationTokenTest, TheCallbackIsAskedAtMostOncePerPollInterval) {
  int asked = 0;
  const CancellationToken token(
      absl::InfiniteFuture(), "none", [&asked] { return ++asked >= 3; }, absl::Now(),
      absl::Hours(1));
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(token.Check().ok());
  EXPECT_EQ(asked, 1);
  // Without an interval it is asked at every check, and a cancellation is remembered.
  asked = 0;
  const CancellationToken every(absl::InfiniteFuture(), "none", [&asked] { return ++asked == 3; });
  EXPECT_TRUE(every.Check().ok());
  EXPECT_TRUE(every.Check().ok());
  EXPECT_EQ(every.Check().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(every.Check().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(asked, 3);
}

TEST(CancellationTokenTest, DeadlineComesBeforeCancellation) {
  // gRPC marks a call whose deadline passed as cancelled too: the deadline is the reason.
  const CancellationToken token(absl::Now() - absl::Seconds(1), "the client's deadline",
                                [] { return true; });
  EXPECT_EQ(token.Check().code(), absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace headroom::util
