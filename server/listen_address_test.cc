#include "server/listen_address.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom::server {
namespace {

using ::testing::HasSubstr;

TEST(ListenAddressTest, HostAndPort) {
  absl::StatusOr<ListenAddress> a = ParseListenAddress("127.0.0.1:0");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(a->is_unix);
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 0);
  EXPECT_TRUE(a->loopback);
  EXPECT_EQ(a->Bound(41234), "127.0.0.1:41234");
  a = ParseListenAddress("[::1]:65535");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->port, 65535);
  EXPECT_TRUE(a->loopback);
}

TEST(ListenAddressTest, UnixSocketIsReportedByItsPath) {
  absl::StatusOr<ListenAddress> a = ParseListenAddress("unix:/tmp/h.sock");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->is_unix);
  EXPECT_TRUE(a->loopback);
  EXPECT_EQ(a->Bound(1), "unix:/tmp/h.sock");
}

TEST(ListenAddressTest, LoopbackOrNot) {
  for (const char* flag : {"localhost:1", "127.9.9.9:1", "[::1]:1"}) {
    EXPECT_TRUE(ParseListenAddress(flag)->loopback) << flag;
  }
  for (const char* flag : {"0.0.0.0:1", "10.0.0.1:1", "[::]:1", "example.com:1", "128.0.0.1:1"}) {
    EXPECT_FALSE(ParseListenAddress(flag)->loopback) << flag;
  }
}

TEST(ListenAddressTest, BadAddressesNameTheFlagAndTheFault) {
  const struct {
    const char* flag;
    const char* says;
  } cases[] = {
      {"127.0.0.1:99999", "port '99999' is not a number from 0 to 65535"},
      {"127.0.0.1:-1", "port '-1'"},
      {"127.0.0.1:", "port ''"},
      {"127.0.0.1:50x", "port '50x'"},
      {"127.0.0.1", "needs HOST:PORT or unix:PATH"},
      {":50051", "needs a host"},
      {"::1:50051", "in brackets"},
      {"unix:", "needs a socket path"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<ListenAddress> a = ParseListenAddress(c.flag);
    ASSERT_FALSE(a.ok()) << c.flag;
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << c.flag;
    EXPECT_THAT(a.status().message(), HasSubstr(absl::StrCat("--listen '", c.flag, "'")));
    EXPECT_THAT(a.status().message(), HasSubstr(c.says)) << c.flag;
  }
}

}  // namespace
}  // namespace headroom::server
