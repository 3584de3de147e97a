#include "server/auth.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "util/file_io.h"
#include "util/status_macros.h"

namespace headroom::server {
namespace {

constexpr absl::string_view kBearer = "Bearer ";

}  // namespace

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  volatile unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = diff | (static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]));
  }
  return diff == 0;
}

absl::StatusOr<TokenTable> TokenTable::Parse(absl::string_view contents, const std::string& path) {
  TokenTable table;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(contents, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    std::vector<absl::string_view> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (words.size() > 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--token-file ", path, ":", line_number, ": expected `TOKEN USER` or a single token, "
          "found ", words.size(), " words"));
    }
    table.entries_.emplace_back(std::string(words[0]),
                                words.size() == 2 ? std::string(words[1]) : std::string());
  }
  if (table.entries_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--token-file ", path, ": holds no token"));
  }
  return table;
}

absl::StatusOr<TokenTable> TokenTable::Load(const std::string& path) {
  ASSIGN_OR_RETURN(std::string contents, ReadFileContents(path, "--token-file"));
  return Parse(contents, path);
}

std::optional<std::string> TokenTable::UserOf(absl::string_view token) const {
  std::optional<std::string> user;
  for (const auto& [known, name] : entries_) {
    // No early exit: the time taken does not tell which entry matched.
    if (ConstantTimeEquals(known, token) && !user.has_value()) user = name;
  }
  return user;
}

absl::StatusOr<std::string> Authenticate(const TokenTable& tokens,
                                         const std::optional<absl::string_view>& authorization) {
  if (!authorization.has_value()) {
    return absl::UnauthenticatedError(
        "this headroomd needs a token: send `authorization: Bearer TOKEN` metadata "
        "(headroom --token-file FILE or HEADROOM_TOKEN; Client(token=...) in Python)");
  }
  if (!absl::StartsWith(*authorization, kBearer)) {
    return absl::UnauthenticatedError(
        "the authorization metadata is not `Bearer TOKEN`");
  }
  std::optional<std::string> user = tokens.UserOf(authorization->substr(kBearer.size()));
  if (!user.has_value()) {
    return absl::UnauthenticatedError("the token sent is not one of this headroomd's tokens");
  }
  return *user;
}

grpc::Status TokenAuthProcessor::Process(const InputMetadata& auth_metadata,
                                         grpc::AuthContext* context,
                                         OutputMetadata* consumed_auth_metadata,
                                         OutputMetadata* /*response_metadata*/) {
  std::optional<absl::string_view> authorization;
  const auto it = auth_metadata.find("authorization");
  if (it != auth_metadata.end()) authorization.emplace(it->second.data(), it->second.size());
  absl::StatusOr<std::string> user = Authenticate(tokens_, authorization);
  if (!user.ok()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, std::string(user.status().message()));
  }
  consumed_auth_metadata->insert(std::make_pair(std::string(it->first.data(), it->first.size()),
                                                std::string(it->second.data(), it->second.size())));
  context->AddProperty(kUserProperty, *user);
  return grpc::Status::OK;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsOf(
    const AuthOptions& options) {
  if (options.tls_cert_path.empty() != options.tls_key_path.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together: give both");
  }
  if (options.tls_cert_path.empty()) {
    if (!options.token_file.empty()) {
      return absl::InvalidArgumentError(
          "--token-file needs --tls-cert and --tls-key: a bearer token sent in plaintext can be "
          "read by anyone on the path");
    }
    return grpc::InsecureServerCredentials();
  }
  grpc::SslServerCredentialsOptions ssl;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  ASSIGN_OR_RETURN(pair.private_key, ReadFileContents(options.tls_key_path, "--tls-key"));
  ASSIGN_OR_RETURN(pair.cert_chain, ReadFileContents(options.tls_cert_path, "--tls-cert"));
  ssl.pem_key_cert_pairs.push_back(std::move(pair));
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::SslServerCredentials(ssl);
  if (!options.token_file.empty()) {
    ASSIGN_OR_RETURN(TokenTable tokens, TokenTable::Load(options.token_file));
    credentials->SetAuthMetadataProcessor(std::make_shared<TokenAuthProcessor>(std::move(tokens)));
  }
  return credentials;
}

}  // namespace headroom::server
