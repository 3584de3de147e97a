#include "clients/cli.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "clients/export_command.h"
#include "clients/graph_command.h"
#include "clients/local_service.h"
#include "clients/profile_command.h"
#include "clients/remote_commands.h"
#include "clients/train_command.h"
#include "util/printable.h"

namespace headroom::clients {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitCancelled = 3;

// Declares every command on `headroom`, in the order its help lists them.
std::vector<Command> AddCommands(CLI::App& headroom, const CommandIo& io) {
  return {AddGraphCommand(headroom, io),    AddPlanCommand(headroom, io),
          AddTrainCommand(headroom, io),    AddProfileCommand(headroom, io),
          AddOpsCommand(headroom, io),      AddZooCommand(headroom, io),
          AddSubmitCommand(headroom, io),   AddWatchCommand(headroom, io),
          AddJobsCommand(headroom, io),     AddCancelCommand(headroom, io),
          AddTimelineCommand(headroom, io), AddProfilesCommand(headroom, io),
          AddExportCommand(headroom, io)};
}

}  // namespace

std::unique_ptr<proto::Headroom::StubInterface> ConnectToHeadroomd(
    const std::string& address, const ChannelSecurity& security) {
  // An answer of any size: a job's spec (GetJob) carries its whole model, over gRPC's 4 MiB.
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  if (!security.tls) {
    return proto::Headroom::NewStub(
        grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
  }
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = security.root_certs_pem;
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::SslCredentials(ssl);
  if (!security.token.empty()) {
    credentials = grpc::CompositeChannelCredentials(
        credentials, grpc::AccessTokenCredentials(security.token));
  }
  return proto::Headroom::NewStub(grpc::CreateCustomChannel(address, credentials, args));
}

int ExitCodeOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kInvalidArgument:
      return kExitUsage;
    case absl::StatusCode::kCancelled:
      return kExitCancelled;
    default:
      return kExitFailed;
  }
}

absl::Status FromRpc(const grpc::Status& status, const std::string& address) {
  const auto code = static_cast<absl::StatusCode>(status.error_code());
  if (code == absl::StatusCode::kUnavailable) {
    return absl::UnavailableError(absl::StrCat(
        "UNAVAILABLE: cannot reach headroomd at ", address, " (", status.error_message(),
        ")\n  start it with `./headroom serve` (or `headroomd --listen ", address,
        "`), or point --server at where it listens; one that serves TLS needs --tls-ca"));
  }
  return absl::Status(code,
                      absl::StrCat(absl::StatusCodeToString(code), ": ", status.error_message()));
}

int RunHeadroom(const std::vector<std::string>& args, const CommandIo& given_io) {
  CommandIo io = given_io;
  if (!io.connect_local) io.connect_local = ConnectInProcess;
  CLI::App headroom(
      "Headroom: plans, trains and profiles neural-network training under a "
      "memory budget; talks to headroomd (./headroom serve) with --server.",
      "headroom");
  headroom.require_subcommand(1);
  const std::vector<Command> commands = AddCommands(headroom, io);
  if (args.empty()) {
    io.err << headroom.help();
    return kExitUsage;
  }
  // CLI11 takes the words last first.
  std::vector<std::string> words(args.rbegin(), args.rend());
  try {
    headroom.parse(words);
  } catch (const CLI::ParseError& e) {
    // --help (of `headroom` or of the command given) prints the help and succeeds.
    if (e.get_exit_code() == 0) return headroom.exit(e, io.out, io.err);
    const std::vector<CLI::App*> chosen = headroom.get_subcommands();
    const std::string name =
        chosen.empty() ? "headroom" : absl::StrCat("headroom ", chosen[0]->get_name());
    io.err << name << ": " << e.what() << "\nsee '" << name << " --help'\n";
    return kExitUsage;
  }
  for (const Command& command : commands) {
    if (!command.app->parsed()) continue;
    const absl::Status status = command.run();
    if (!status.ok()) {
      // A server's message may quote what a client sent: its control characters are escaped.
      io.err << "headroom " << command.app->get_name() << ": " << PrintableLines(std::string(status.message()))
             << "\n";
      if (status.code() == absl::StatusCode::kInvalidArgument) {
        io.err << "see 'headroom " << command.app->get_name() << " --help'\n";
      }
    }
    return ExitCodeOf(status);
  }
  return kExitUsage;  // require_subcommand(1): CLI11 refuses words that name no command
}

}  // namespace headroom::clients
