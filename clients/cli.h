// `headroom`'s command line: every command, its flags and its help declared once on one
// CLI11 app; one place that prints a command's error and maps its status to the exit code.
//
// A command's flags are bound to its own state when it is declared (Add*Command); after the
// words parse, the chosen command runs and returns an absl::Status:
//   OK                0
//   INVALID_ARGUMENT  2  bad words: a flag's value, a model option, a malformed request
//   CANCELLED         3  `watch`: the job was cancelled
//   anything else     1  the error is printed as "headroom COMMAND: message"
// Words CLI11 cannot parse exit 2 too; --help prints the command's help and exits 0.
#ifndef HEADROOM_CLIENTS_CLI_H_
#define HEADROOM_CLIENTS_CLI_H_

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "proto/headroom.grpc.pb.h"

namespace headroom::clients {

// The daemon's address when a command is given no --server.
inline constexpr char kDefaultServer[] = "127.0.0.1:50051";

// How a channel to headroomd is secured (remote_commands.h fills it from --tls-ca and
// --token-file). Default: plaintext, no token.
struct ChannelSecurity {
  // Whether the channel is TLS. Default false.
  bool tls = false;
  // The PEM root certificates the daemon's certificate must chain to (--tls-ca); empty with
  // `tls`: the system's roots.
  std::string root_certs_pem;
  // Sent on every call as `authorization: Bearer TOKEN` when not empty; only with `tls`.
  std::string token;
};

// Makes the stub for headroomd at an address, secured as asked.
using StubFactory = std::function<std::unique_ptr<proto::Headroom::StubInterface>(
    const std::string& address, const ChannelSecurity& security)>;

// Makes the stub for the service in this process, planning for a backend ("cpu", "cuda").
using LocalStubFactory =
    std::function<absl::StatusOr<std::unique_ptr<proto::Headroom::StubInterface>>(
        const std::string& backend)>;

// Returns a stub for headroomd at `address` ("host:port"): plaintext, or TLS trusting
// `security`'s roots, with its token as call credentials (grpc::AccessTokenCredentials). The
// channel connects on the first call: a daemon that is not there, or one that speaks the
// other of TLS and plaintext, shows as UNAVAILABLE then. REQUIRES: no token without tls.
std::unique_ptr<proto::Headroom::StubInterface> ConnectToHeadroomd(
    const std::string& address, const ChannelSecurity& security = {});

// Where a command writes, and how it reaches Headroom's service.
struct CommandIo {
  // Results (tables, plans, progress lines, JSON).
  std::ostream& out;
  // Errors, usage and progress of work done here.
  std::ostream& err;
  // Whether `out` is a terminal: `watch` then redraws a single progress line. Default false.
  bool terminal = false;
  // Makes the stub for --server's address; default ConnectToHeadroomd. A test may hand in a
  // factory that records the address or returns a fake stub.
  StubFactory connect = ConnectToHeadroomd;
  // Makes the stub for a command that asks the service in this process (`plan` without
  // --server); default ConnectInProcess (local_service.h).
  LocalStubFactory connect_local;
};

// A declared command: its CLI11 subcommand and what runs once its words parsed.
struct Command {
  CLI::App* app = nullptr;
  std::function<absl::Status()> run;
};

// Runs `headroom ARGS...` (the words after the program's name); returns the exit code.
int RunHeadroom(const std::vector<std::string>& args, const CommandIo& io);

// Returns the exit code of a command's status (the table above).
int ExitCodeOf(const absl::Status& status);

// Returns a failed call's status: its code, and a message that starts with the code's name
// (and, for UNAVAILABLE on a daemon at `address`, says how to start one).
absl::Status FromRpc(const grpc::Status& status, const std::string& address);

}  // namespace headroom::clients

#endif  // HEADROOM_CLIENTS_CLI_H_
