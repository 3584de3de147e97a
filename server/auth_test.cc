#include "server/auth.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ConstantTimeEqualsTest, EqualOnlyForTheSameBytes) {
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_TRUE(ConstantTimeEquals("s3cret", "s3cret"));
  EXPECT_FALSE(ConstantTimeEquals("s3cret", "s3creT"));
  EXPECT_FALSE(ConstantTimeEquals("s3cret", "s3cre"));
  EXPECT_FALSE(ConstantTimeEquals("", "x"));
}

TEST(TokenTableTest, LinesOfTokenAndUserWithCommentsAndBlankLines) {
  absl::StatusOr<TokenTable> table =
      TokenTable::Parse("# team tokens\n\n  tok-a alice\ntok-b\tbob  \n", "tokens");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->size(), 2u);
  EXPECT_EQ(table->UserOf("tok-a"), "alice");
  EXPECT_EQ(table->UserOf("tok-b"), "bob");
  EXPECT_EQ(table->UserOf("tok-c"), std::nullopt);
  EXPECT_EQ(table->UserOf("tok-"), std::nullopt);
  EXPECT_EQ(table->UserOf(""), std::nullopt);
}

TEST(TokenTableTest, ASingleTokenHasNoUser) {
  absl::StatusOr<TokenTable> table = TokenTable::Parse("only-token\n", "tokens");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->UserOf("only-token"), "");
}

TEST(TokenTableTest, BadFilesNameTheFileAndLine) {
  absl::StatusOr<TokenTable> three = TokenTable::Parse("a b\nx y z\n", "/etc/t");
  EXPECT_EQ(three.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(three.status().message(), HasSubstr("/etc/t:2"));
  absl::StatusOr<TokenTable> empty = TokenTable::Parse("# nothing\n\n", "/etc/t");
  EXPECT_THAT(empty.status().message(), HasSubstr("/etc/t: holds no token"));
  absl::StatusOr<TokenTable> missing = TokenTable::Load("/nonexistent/tokens");
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/tokens"));
}

TEST(AuthenticateTest, MissingMalformedAndWrongAreUnauthenticatedWithoutTheToken) {
  const TokenTable table = *TokenTable::Parse("right-token carol\n", "t");
  for (const std::optional<absl::string_view>& sent :
       {std::optional<absl::string_view>(), std::optional<absl::string_view>("right-token"),
        std::optional<absl::string_view>("Basic right-token"),
        std::optional<absl::string_view>("Bearer wrong-token"),
        std::optional<absl::string_view>("Bearer right-token2")}) {
    absl::StatusOr<std::string> user = Authenticate(table, sent);
    EXPECT_EQ(user.status().code(), absl::StatusCode::kUnauthenticated) << sent.value_or("none");
    EXPECT_THAT(user.status().message(), Not(HasSubstr("token2")));
    EXPECT_THAT(user.status().message(), Not(HasSubstr("wrong-token")));
  }
  EXPECT_EQ(Authenticate(table, "Bearer right-token").value(), "carol");
}

TEST(ServerCredentialsOfTest, RefusesTokensWithoutTlsAndHalfAPair) {
  EXPECT_TRUE(ServerCredentialsOf({}).ok());
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> tokens_only =
      ServerCredentialsOf({"", "", "/some/tokens"});
  EXPECT_THAT(tokens_only.status().message(), HasSubstr("--token-file needs --tls-cert"));
  EXPECT_THAT(ServerCredentialsOf({"cert.pem", "", ""}).status().message(),
              HasSubstr("--tls-cert and --tls-key go together"));
  EXPECT_THAT(ServerCredentialsOf({"/nonexistent/c.pem", "/nonexistent/k.pem", ""})
                  .status()
                  .message(),
              HasSubstr("/nonexistent/"));
}

}  // namespace
}  // namespace headroom::server
