// headroomd's --listen address, checked before gRPC sees it: gRPC takes a port over 65535
// modulo 2^16 and reports a unix socket's "port" as 1, so the daemon validates the flag and
// writes the address it really serves on.
//
// Call ParseListenAddress() once on the flag, then Bound(port) with the port gRPC bound.
// Thread-safety: a value type.
#ifndef HEADROOM_SERVER_LISTEN_ADDRESS_H_
#define HEADROOM_SERVER_LISTEN_ADDRESS_H_

#include <string>

#include "absl/status/statusor.h"

namespace headroom::server {

struct ListenAddress {
  // "unix:PATH" when true (then `path` is set), else "HOST:PORT".
  bool is_unix = false;
  std::string path;
  // The host as written ("127.0.0.1", "localhost", "[::1]", "0.0.0.0").
  std::string host;
  // 0 picks a free port.
  int port = 0;
  // True for a unix socket, localhost, 127.0.0.0/8 and [::1]: reachable from this host only.
  bool loopback = false;

  // Returns the address served on once gRPC bound `bound_port`: "unix:PATH" for a unix
  // socket (whatever the port), else "HOST:bound_port".
  std::string Bound(int bound_port) const;
};

// Returns `flag` parsed: "unix:PATH" with a non-empty path, or "HOST:PORT" with a non-empty
// host (an IPv6 address in brackets) and a port of 0 to 65535 in decimal. InvalidArgument
// naming the flag and what is wrong otherwise.
absl::StatusOr<ListenAddress> ParseListenAddress(const std::string& flag);

}  // namespace headroom::server

#endif  // HEADROOM_SERVER_LISTEN_ADDRESS_H_
