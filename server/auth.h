// headroomd's authentication and encryption, with gRPC's own mechanisms: TLS from
// --tls-cert and --tls-key (grpc::SslServerCredentials), and bearer tokens from --token-file
// checked on every call by a grpc::AuthMetadataProcessor before any handler runs.
//
// A token file holds `TOKEN USER` lines (blank lines and `#` comments skipped), or a single
// token alone (its user is empty). A call must carry the metadata `authorization: Bearer
// TOKEN`; a missing or unknown token is UNAUTHENTICATED, with a message that never repeats
// what was sent. Tokens are compared in constant time (no early exit on the first differing
// byte, every entry of the table compared). Tokens need TLS: a bearer token over plaintext is
// readable by anyone on the path, so ServerCredentialsOf refuses a token file without a
// certificate. Everything here is immutable once made, so thread-safe.
#ifndef HEADROOM_SERVER_AUTH_H_
#define HEADROOM_SERVER_AUTH_H_

#include <memory>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/security/auth_metadata_processor.h"

namespace headroom::server {

// The auth context property that names the caller's user (the token file's USER column).
inline constexpr char kUserProperty[] = "headroom.user";

// Returns whether `a` equals `b`, in time that depends only on their lengths.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

// The tokens of a --token-file and the user each names.
class TokenTable {
 public:
  // Returns the table of a token file's `contents`; errors name `path` and the line.
  static absl::StatusOr<TokenTable> Parse(absl::string_view contents, const std::string& path);
  // Returns the table of the file at `path`, or the error of reading or parsing it.
  static absl::StatusOr<TokenTable> Load(const std::string& path);

  // Returns the user `token` names (empty for a single-token file), or nullopt for a token
  // not in the table. Compares against every entry in constant time.
  std::optional<std::string> UserOf(absl::string_view token) const;

  size_t size() const { return entries_.size(); }

 private:
  std::vector<std::pair<std::string, std::string>> entries_;  // (token, user)
};

// Returns the user of the `authorization` metadata's value (nullopt: none was sent), or
// UNAUTHENTICATED saying what is wrong without repeating the value.
absl::StatusOr<std::string> Authenticate(const TokenTable& tokens,
                                         const std::optional<absl::string_view>& authorization);

// Checks every call's token before its handler; sets kUserProperty on the call's auth
// context and consumes the authorization metadata. Runs inline on gRPC's thread.
class TokenAuthProcessor : public grpc::AuthMetadataProcessor {
 public:
  explicit TokenAuthProcessor(TokenTable tokens) : tokens_(std::move(tokens)) {}
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata,
                       OutputMetadata* response_metadata) override;

 private:
  const TokenTable tokens_;
};

// headroomd's --tls-cert, --tls-key and --token-file; all empty (the default): plaintext,
// no tokens, as before.
struct AuthOptions {
  std::string tls_cert_path;
  std::string tls_key_path;
  std::string token_file;
};

// Returns the server credentials `options` ask for: insecure when empty, else TLS with the
// certificate chain and key, with a TokenAuthProcessor when a token file is given. Errors
// name the flag and file: unreadable, a certificate without its key, tokens without TLS.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsOf(
    const AuthOptions& options);

}  // namespace headroom::server

#endif  // HEADROOM_SERVER_AUTH_H_
