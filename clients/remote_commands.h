// The `headroom` commands that ask Headroom's service: `plan` (headroomd's with --server,
// else the same service in this process: local_service.h), `profile --server`, `submit`,
// `watch`, `jobs`, `cancel`, `timeline` and `profiles`.
//
// Each builds one request from its flags, calls the stub and prints the answer for people,
// or protobuf's JSON of the answer with --json. A failed call's status carries its code
// (cli.h prints it and maps it to the exit code).
#ifndef HEADROOM_CLIENTS_REMOTE_COMMANDS_H_
#define HEADROOM_CLIENTS_REMOTE_COMMANDS_H_

#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "clients/cli.h"
#include "clients/command_flags.h"
#include "proto/headroom.grpc.pb.h"

namespace headroom::clients {

// --server ADDR, --tls-ca FILE, --token-file FILE (or HEADROOM_TOKEN) and --json.
struct ServiceFlags {
  std::string server;
  // --tls-ca: the PEM CA that signed the daemon's certificate; given, the channel is TLS.
  std::string tls_ca_path;
  // --token-file: the token sent on every call (its first word; a daemon's `TOKEN USER`
  // file works). Needs --tls-ca: a token is never sent in plaintext.
  std::string token_file;
  // HEADROOM_TOKEN's value: the token when no --token-file is given, sent only with --tls-ca.
  std::string env_token;
  bool json = false;
  // Whether, given no --server, the command asks the service in this process.
  bool local_without_server = false;
  const CLI::App* app = nullptr;
};

void AddServiceFlags(CLI::App& command, ServiceFlags& flags, bool local_without_server);

// Returns whether the command asks the service in this process (no --server given).
bool IsLocal(const ServiceFlags& flags);

// Returns the address the command asks: --server's, or kDefaultServer.
std::string AddressOf(const ServiceFlags& flags);

// Returns how the flags ask a connection to be secured: the CA's and token file's contents
// read; INVALID_ARGUMENT for --token-file without --tls-ca, NOT_FOUND naming a missing file.
absl::StatusOr<ChannelSecurity> SecurityOf(const ServiceFlags& flags);

// Returns the stub the flags ask for: headroomd's at --server (default kDefaultServer), or
// the local service planning for `local_backend`.
absl::StatusOr<std::unique_ptr<proto::Headroom::StubInterface>> Connect(
    const ServiceFlags& flags, const CommandIo& io, const std::string& local_backend);

// The commands (cli.h declares them all on `headroom`).
Command AddPlanCommand(CLI::App& headroom, const CommandIo& io);
Command AddSubmitCommand(CLI::App& headroom, const CommandIo& io);
Command AddWatchCommand(CLI::App& headroom, const CommandIo& io);
Command AddJobsCommand(CLI::App& headroom, const CommandIo& io);
Command AddCancelCommand(CLI::App& headroom, const CommandIo& io);
Command AddTimelineCommand(CLI::App& headroom, const CommandIo& io);
Command AddProfilesCommand(CLI::App& headroom, const CommandIo& io);

// What a profile writes and shows: --out FILE (the profile as JSON), --trace FILE (its
// Chrome trace), --rows N (largest tensors at the peak and slowest nodes shown).
struct ProfileFiles {
  std::string out_path;
  std::string trace_path;
  int64_t rows = 12;
};

// Writes the profile (and its trace) where --out and --trace ask.
absl::Status WriteProfileFiles(const proto::ProfileResponse& profile, const ProfileFiles& files);

// Returns the Profile request of the model, plan and run flags (`trace`: with the trace).
absl::StatusOr<proto::ProfileRequest> ProfileRequestOf(const ModelFlags& model,
                                                       const PlanFlags& plan, const RunFlags& run,
                                                       bool trace);

// Calls Profile on `stub` (headroomd's at `address`, or the local service when `address` is
// empty: then without a deadline), writes --out and --trace and prints the profile;
// returns it.
absl::StatusOr<proto::ProfileResponse> AskProfile(proto::Headroom::StubInterface& stub,
                                                  const proto::ProfileRequest& request,
                                                  const std::string& address,
                                                  const ProfileFiles& files, bool json,
                                                  const CommandIo& io);

}  // namespace headroom::clients

#endif  // HEADROOM_CLIENTS_REMOTE_COMMANDS_H_
