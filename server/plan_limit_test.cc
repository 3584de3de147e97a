#include "server/plan_limit.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom::server {
namespace {

using ::testing::HasSubstr;

TEST(PlanTokenTest, TheClientsEarlierDeadlineIsNamed) {
  const absl::Time arrived = absl::Now() - absl::Seconds(10);
  const util::CancellationToken token =
      PlanToken(arrived, arrived + absl::Seconds(5), absl::Seconds(60), nullptr);
  EXPECT_EQ(token.deadline(), arrived + absl::Seconds(5));
  const absl::Status status = token.Check();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_THAT(status.message(), HasSubstr("the client's deadline of 5 s has passed"));
}

TEST(PlanTokenTest, TheDaemonsEarlierLimitIsNamed) {
  const absl::Time arrived = absl::Now() - absl::Seconds(10);
  const util::CancellationToken token =
      PlanToken(arrived, absl::InfiniteFuture(), absl::Seconds(2.5), nullptr);
  EXPECT_EQ(token.deadline(), arrived + absl::Seconds(2.5));
  const absl::Status status = token.Check();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_THAT(status.message(), HasSubstr("headroomd's --max-plan-seconds 2.5 has passed"));
  EXPECT_THAT(status.message(), HasSubstr("stopped after 10.0"));
}

TEST(PlanTokenTest, NoLimitsNeverExpireButACancellationStops) {
  bool cancelled = false;
  const util::CancellationToken token = PlanToken(
      absl::Now(), absl::InfiniteFuture(), absl::InfiniteDuration(), [&] { return cancelled; });
  EXPECT_EQ(token.deadline(), absl::InfiniteFuture());
  EXPECT_TRUE(token.Check().ok());
  cancelled = true;
  // gRPC is asked at most every kCancelledPollInterval; past it, the next check asks.
  absl::SleepFor(kCancelledPollInterval);
  EXPECT_EQ(token.Check().code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace headroom::server
