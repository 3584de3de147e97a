#include "server/listen_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include <algorithm>

#include "absl/strings/str_cat.h"

namespace headroom::server {
namespace {

// Returns true for localhost, an IPv4 address in 127.0.0.0/8 or [::1].
bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    in6_addr v6{};
    const std::string inner = host.substr(1, host.size() - 2);
    return inet_pton(AF_INET6, inner.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
  }
  return false;
}

}  // namespace

std::string ListenAddress::Bound(int bound_port) const {
  return is_unix ? absl::StrCat("unix:", path) : absl::StrCat(host, ":", bound_port);
}

absl::StatusOr<ListenAddress> ParseListenAddress(const std::string& flag) {
  const auto invalid = [&flag](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("--listen '", flag, "': ", why));
  };
  ListenAddress address;
  if (absl::StartsWith(flag, "unix:")) {
    address.is_unix = true;
    address.loopback = true;
    address.path = flag.substr(5);
    if (address.path.empty()) return invalid("needs a socket path after 'unix:'");
    return address;
  }
  const size_t colon = flag.rfind(':');
  if (colon == std::string::npos) return invalid("needs HOST:PORT or unix:PATH");
  address.host = flag.substr(0, colon);
  const std::string port = flag.substr(colon + 1);
  if (address.host.empty()) return invalid("needs a host before the port");
  if (address.host.find(':') != std::string::npos &&
      !(address.host.front() == '[' && address.host.back() == ']')) {
    return invalid("an IPv6 host goes in brackets ([::1]:50051)");
  }
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return absl::ascii_isdigit(c); }) ||
      std::stoi(port) > 65535) {
    return invalid(absl::StrCat("port '", port, "' is not a number from 0 to 65535"));
  }
  address.port = std::stoi(port);
  address.loopback = IsLoopbackHost(address.host);
  return address;
}

}  // namespace headroom::server
