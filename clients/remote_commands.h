// The `headroom` commands that ask Headroom's service: `plan` (headroomd's with --server, else
// the same service in this process: local_service.h), `profile --server`, `submit`, `watch`,
// `jobs`, `cancel`, `timeline` and `profiles`.
//
// Each command parses its words, builds one request, makes the stub (RemoteIo::connect for
// --server, default kDefaultServer; RemoteIo::connect_local for a local `plan`), calls the
// service and prints the answer for people, or as protobuf's JSON of the answer with --json.
// A failed call prints `headroom CMD: CODE_NAME: message` (for UNAVAILABLE: where headroomd
// was looked for and how to start it) and exits 1.
#ifndef HEADROOM_CLIENTS_REMOTE_COMMANDS_H_
#define HEADROOM_CLIENTS_REMOTE_COMMANDS_H_

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "clients/local_service.h"
#include "proto/headroom.grpc.pb.h"

namespace headroom::clients {

// The daemon's address when a command is given no --server.
inline constexpr char kDefaultServer[] = "127.0.0.1:50051";

// Returns a stub for headroomd at `address` ("host:port") over an insecure channel. The
// channel connects on the first call: a daemon that is not there shows as UNAVAILABLE then.
std::unique_ptr<proto::Headroom::StubInterface> ConnectToHeadroomd(const std::string& address);

// Makes the stub for an address.
using StubFactory =
    std::function<std::unique_ptr<proto::Headroom::StubInterface>(const std::string& address)>;

// Makes the stub for the service in this process, planning for a backend ("cpu", "cuda").
using LocalStubFactory =
    std::function<absl::StatusOr<std::unique_ptr<proto::Headroom::StubInterface>>(
        const std::string& backend)>;

// Where a remote command writes, and how it reaches the daemon.
struct RemoteIo {
  // Results (tables, plans, progress lines, JSON).
  std::ostream& out;
  // Errors and usage.
  std::ostream& err;
  // Whether `out` is a terminal: `watch` then redraws a single progress line. Default false.
  bool terminal = false;
  // Makes the stub for --server's address; default ConnectToHeadroomd. A test may hand in a
  // factory that records the address or returns a fake stub.
  StubFactory connect = ConnectToHeadroomd;
  // Makes the stub for a command given no --server that runs here; default ConnectInProcess.
  LocalStubFactory connect_local = ConnectInProcess;
};

// Returns whether `args` (the words after the command) hold --server: `plan` and `profile`
// run on the daemon with it and locally without.
bool HasServerFlag(const std::vector<std::string>& args);

// Every entry point takes the words after its command and returns the exit code: 0 when the
// call succeeded; 1 for a failed call, an unreadable --graph or --out file; 2 for bad words
// (after printing the usage); --help prints the flags and returns 0.

// `headroom plan`: the Plan rpc, on headroomd with --server and in this process without;
// the predicted peak against the budget, the step time and its overhead, recompute and
// offload, each section with its cached boundary tensors, bytes by role, with --frontier the
// frontier and with --tensors every tensor's place in the arena.
int RunPlanCommand(const std::vector<std::string>& args, const RemoteIo& io);

// `headroom profile --server ADDR`: the Profile rpc; the measured peak and what made it,
// measured against predicted step time; --out FILE writes the profile as JSON, as local
// `profile --out` does.
int RunRemoteProfileCommand(const std::vector<std::string>& args, const RemoteIo& io);

// `headroom submit`: the SubmitJob rpc; the job id, its state and the plan it runs under;
// with --watch it goes on as `headroom watch` does (and returns watch's exit code).
int RunSubmitCommand(const std::vector<std::string>& args, const RemoteIo& io);

// `headroom watch JOB`: the WatchJob stream, one progress line per update (redrawn in place
// on a terminal), then the final state. Returns 0 for SUCCEEDED, 1 for FAILED (or a stream
// that ends before the job does), 3 for CANCELLED.
int RunWatchCommand(const std::vector<std::string>& args, const RemoteIo& io);

// `headroom jobs`: every page of the ListJobs rpc as one table.
int RunJobsCommand(const std::vector<std::string>& args, const RemoteIo& io);

// `headroom cancel JOB`: the CancelJob rpc; prints the job's state after the call.
int RunCancelCommand(const std::vector<std::string>& args, const RemoteIo& io);

// `headroom timeline JOB`: the GetTimeline rpc; the peak and what made it, and a chart of
// device bytes over time.
int RunTimelineCommand(const std::vector<std::string>& args, const RemoteIo& io);

// `headroom profiles`: the ListProfiles rpc (summaries only) as a table.
int RunProfilesCommand(const std::vector<std::string>& args, const RemoteIo& io);

}  // namespace headroom::clients

#endif  // HEADROOM_CLIENTS_REMOTE_COMMANDS_H_
