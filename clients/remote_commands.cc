#include "clients/remote_commands.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "util/cli_flags.h"
#include "clients/local_service.h"
#include "clients/model_flags.h"
#include "clients/remote_text.h"
#include "planner/cost_model.h"
#include "profiler/measured_cost_model.h"
#include "server/scheduler.h"
#include "util/byte_size.h"
#include "util/file_io.h"
#include "util/status_macros.h"

namespace headroom::clients {
namespace {

using proto::Headroom;

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitCancelled = 3;

// Plan and Profile may plan a large model or run steps; the other unary calls answer at once.
// WatchJob has no deadline: a job may train for days.
constexpr std::chrono::seconds kLongCallTimeout = std::chrono::minutes(10);
constexpr std::chrono::seconds kShortCallTimeout{30};

// Steps of a submitted job, and of a profile, when --steps is not given.
constexpr int64_t kDefaultJobSteps = 100;
constexpr int64_t kDefaultProfileSteps = 3;

const char* StatusCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN_CODE";
  }
}

void SetDeadline(grpc::ClientContext& context, std::chrono::seconds timeout) {
  context.set_deadline(std::chrono::system_clock::now() + timeout);
}

double NowUnixSeconds() { return absl::ToUnixMicros(absl::Now()) * 1e-6; }

// ---- Words ----------------------------------------------------------------------------

// What one remote command accepts.
struct CommandSpec {
  // Its name: "submit".
  std::string name;
  // Its usage lines.
  std::string usage;
  // The help lines of its own flags (--server, --json and --help are added).
  std::string flags_help;
  // Its boolean flags besides --help and --json.
  std::set<std::string> booleans;
  // Whether it takes one positional JOB id.
  bool takes_job = false;
  // Whether, given no --server, it asks the service in this process (local_service.h)
  // rather than headroomd at kDefaultServer.
  bool local_without_server = false;
};

// The words of a command line, split into flags (with their values) and positional words.
struct Words {
  std::vector<std::string> flags;
  std::vector<std::string> positional;
};

Words SplitPositional(const std::vector<std::string>& args, const std::set<std::string>& booleans) {
  Words words;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (!absl::StartsWith(arg, "--") || arg.size() == 2) {
      words.positional.push_back(arg);
      continue;
    }
    words.flags.push_back(arg);
    const bool value_inside = arg.find('=') != std::string::npos || booleans.count(arg.substr(2));
    if (!value_inside && i + 1 < args.size()) words.flags.push_back(args[++i]);
  }
  return words;
}

// One run of a remote command: its flags, job id, the daemon's address and stub, and how it
// reports. Call Parse(), take the command's own flags, Connect(), then call stub(). The
// error methods print and return the exit code. Not thread-safe.
class Invocation {
 public:
  Invocation(CommandSpec spec, const RemoteIo& io) : spec_(std::move(spec)), io_(io) {}

  // Returns nullopt when the words parse, else the exit code after printing: 0 for --help,
  // 2 for bad words.
  std::optional<int> Parse(const std::vector<std::string>& args);
  // Returns nullopt after checking that every flag was taken and making the stub (for a
  // local command, the local service planning for `local_backend`), else the exit code.
  std::optional<int> Connect(const std::string& local_backend = "cpu");

  // Return 2 after printing `message` and the usage.
  int UsageError(absl::string_view message) const;
  // Return 1 after printing `message`.
  int Error(absl::string_view message) const;
  // Returns 2 for InvalidArgument (bad words), else 1, after printing `status`.
  int Fail(const absl::Status& status) const;
  // Returns 1 after printing the failed call's code and message.
  int RpcError(const grpc::Status& status) const;

  CliFlags& flags() { return flags_; }
  const std::string& job_id() const { return job_id_; }
  bool json() const { return json_; }
  // Whether the command asks the service in this process (no --server).
  bool local() const { return local_; }
  const RemoteIo& io() const { return io_; }
  std::ostream& out() const { return io_.out; }
  // REQUIRES: Connect() returned nullopt.
  Headroom::StubInterface& stub() { return *stub_; }

 private:
  CommandSpec spec_;
  const RemoteIo& io_;
  CliFlags flags_;
  std::string address_ = kDefaultServer;
  std::string job_id_;
  bool json_ = false;
  bool local_ = false;
  std::unique_ptr<Headroom::StubInterface> stub_;
};

std::optional<int> Invocation::Parse(const std::vector<std::string>& args) {
  std::set<std::string> booleans = spec_.booleans;
  booleans.insert({"help", "json"});
  const Words words = SplitPositional(args, booleans);
  absl::StatusOr<CliFlags> flags = CliFlags::Parse(words.flags, booleans);
  if (!flags.ok()) return UsageError(flags.status().message());
  flags_ = *std::move(flags);
  if (flags_.TakeBool("help")) {
    io_.out << spec_.usage << spec_.flags_help
            << (spec_.local_without_server
                    ? "  --server ADDR       ask headroomd at ADDR (default: plan in this process)\n"
                    : absl::StrCat("  --server ADDR       headroomd's address (default ",
                                   kDefaultServer, ")\n"))
            << "  --json              print the daemon's answer as JSON\n";
    return kExitOk;
  }
  if (words.positional.size() != (spec_.takes_job ? 1 : 0)) {
    return UsageError(spec_.takes_job ? "give one JOB id"
                                      : "unexpected argument '" + words.positional[0] + "'");
  }
  if (spec_.takes_job) job_id_ = words.positional[0];
  local_ = spec_.local_without_server && !flags_.Has("server");
  address_ = flags_.TakeString("server", kDefaultServer);
  if (address_.empty()) return UsageError("--server needs an address, host:port");
  json_ = flags_.TakeBool("json");
  return std::nullopt;
}

std::optional<int> Invocation::Connect(const std::string& local_backend) {
  if (absl::Status s = flags_.CheckAllTaken(spec_.name); !s.ok()) return UsageError(s.message());
  if (local_) {
    absl::StatusOr<std::unique_ptr<Headroom::StubInterface>> stub =
        io_.connect_local(local_backend);
    if (!stub.ok()) return Error(absl::StrCat("--backend ", local_backend, ": ", stub.status().message()));
    stub_ = *std::move(stub);
    return std::nullopt;
  }
  stub_ = io_.connect(address_);
  if (stub_ == nullptr) return Error(absl::StrCat("cannot make a channel to ", address_));
  return std::nullopt;
}

int Invocation::UsageError(absl::string_view message) const {
  io_.err << "headroom " << spec_.name << ": " << message << "\n" << spec_.usage;
  return kExitUsage;
}

int Invocation::Error(absl::string_view message) const {
  io_.err << "headroom " << spec_.name << ": " << message << "\n";
  return kExitFailed;
}

int Invocation::Fail(const absl::Status& status) const {
  return absl::IsInvalidArgument(status) ? UsageError(status.message()) : Error(status.message());
}

int Invocation::RpcError(const grpc::Status& status) const {
  io_.err << "headroom " << spec_.name << ": " << StatusCodeName(status.error_code()) << ": ";
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE && !local_) {
    io_.err << "cannot reach headroomd at " << address_ << " (" << status.error_message()
            << ")\n  start it with `headroomd --listen " << address_
            << "`, or point --server at where it listens\n";
  } else {
    io_.err << status.error_message() << "\n";
  }
  return kExitFailed;
}

// ---- Requests from flags --------------------------------------------------------------------

absl::Status Flagged(const std::string& flag, const absl::Status& status) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", status.message()));
}

// Returns the model from --model or --graph. InvalidArgument means bad words; a --graph file
// that cannot be read or parsed comes back as FailedPrecondition.
absl::StatusOr<proto::ModelSource> TakeModel(CliFlags& flags) {
  const bool file_only = flags.Has("graph") && !flags.Has("model") && !flags.Has("batch");
  absl::StatusOr<proto::ModelSource> source = ModelSourceFromFlags(flags);
  if (!source.ok() && file_only) return absl::FailedPreconditionError(source.status().message());
  return source;
}

// Returns the plan options of --budget, --device, --no-offload, --host-memory and --optimizer.
absl::StatusOr<proto::PlanOptions> TakePlanOptions(CliFlags& flags) {
  proto::PlanOptions options;
  if (flags.Has("budget")) {
    absl::StatusOr<uint64_t> bytes = ParseByteSize(flags.TakeString("budget"));
    if (!bytes.ok()) return Flagged("budget", bytes.status());
    if (*bytes == 0) return absl::InvalidArgumentError("--budget must be more than 0 bytes");
    options.set_budget_bytes(*bytes);
  }
  if (flags.Has("device-file")) {
    absl::StatusOr<proto::DeviceModel> model =
        planner::ReadDeviceModelFile(flags.TakeString("device-file"));
    if (!model.ok()) return Flagged("device-file", model.status());
    *options.mutable_device() = *std::move(model);
  }
  if (flags.Has("device")) {
    const std::string device = flags.TakeString("device");
    if (absl::Status s = planner::DevicePreset(device).status(); !s.ok()) {
      return Flagged("device", s);
    }
    options.mutable_device()->set_preset(device);
  }
  ASSIGN_OR_RETURN(int64_t alignment, flags.TakeInt("alignment", 0, 0));
  if ((alignment & (alignment - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--alignment must be a power of two, not ", alignment));
  }
  options.set_alignment_bytes(static_cast<uint64_t>(alignment));
  options.set_disable_offload(flags.TakeBool("no-offload"));
  ASSIGN_OR_RETURN(proto::HostMemory host_memory, TakeHostMemoryFlag(flags));
  options.set_host_memory(host_memory);
  const std::string optimizer = flags.TakeString("optimizer", "sgd");
  if (optimizer != "sgd" && optimizer != "adam") {
    return absl::InvalidArgumentError(
        absl::StrCat("--optimizer must be sgd or adam, not '", optimizer, "'"));
  }
  options.mutable_optimizer()->set_kind(optimizer == "adam" ? proto::Optimizer::KIND_ADAM
                                                            : proto::Optimizer::KIND_SGD_MOMENTUM);
  return options;
}

// Sets the learning rate of `options` from --lr, when given.
absl::Status TakeLearningRate(CliFlags& flags, proto::PlanOptions& options) {
  if (!flags.Has("lr")) return absl::OkStatus();
  const std::string text = flags.TakeString("lr");
  double rate = 0;
  if (!absl::SimpleAtod(text, &rate) || !(rate > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("--lr must be a positive number, not '", text, "'"));
  }
  options.mutable_optimizer()->set_learning_rate(rate);
  return absl::OkStatus();
}

// Returns --backend (cpu or cuda), or "" (the daemon's) when absent.
absl::StatusOr<std::string> TakeBackend(CliFlags& flags) {
  const std::string backend = flags.TakeString("backend");
  if (!backend.empty() && backend != "cpu" && backend != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat("--backend must be cpu or cuda, not '", backend, "'"));
  }
  return backend;
}

absl::StatusOr<proto::PlanRequest> PlanRequestFromFlags(CliFlags& flags) {
  proto::PlanRequest request;
  ASSIGN_OR_RETURN(*request.mutable_options(), TakePlanOptions(flags));
  request.mutable_options()->set_frontier(flags.TakeBool("frontier"));
  request.mutable_options()->set_inference(flags.TakeBool("inference"));
  request.mutable_options()->set_tensors(flags.TakeBool("tensors"));
  if (flags.Has("profile")) {
    const std::string path = flags.TakeString("profile");
    absl::StatusOr<proto::ProfileResponse> measured = profiler::ReadProfileFile(path);
    // An unreadable file is not bad words: FailedPrecondition, exit 1.
    if (!measured.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("--profile: ", measured.status().message()));
    }
    *request.mutable_measured() = *std::move(measured);
  }
  ASSIGN_OR_RETURN(*request.mutable_model(), TakeModel(flags));
  return request;
}

absl::StatusOr<proto::SubmitJobRequest> SubmitRequestFromFlags(CliFlags& flags) {
  proto::SubmitJobRequest request;
  proto::JobSpec& spec = *request.mutable_spec();
  spec.set_name(flags.TakeString("name"));
  ASSIGN_OR_RETURN(*spec.mutable_plan(), TakePlanOptions(flags));
  RETURN_IF_ERROR(TakeLearningRate(flags, *spec.mutable_plan()));
  proto::TrainOptions& train = *spec.mutable_train();
  ASSIGN_OR_RETURN(int64_t steps, flags.TakeInt("steps", kDefaultJobSteps));
  ASSIGN_OR_RETURN(int64_t seed, flags.TakeInt("seed", 1, 0));
  ASSIGN_OR_RETURN(int64_t every, flags.TakeInt("checkpoint-every", 0, 0));
  ASSIGN_OR_RETURN(*train.mutable_backend(), TakeBackend(flags));
  train.set_steps(static_cast<uint64_t>(steps));
  train.set_seed(static_cast<uint64_t>(seed));
  train.set_checkpoint_interval_steps(static_cast<uint64_t>(every));
  ASSIGN_OR_RETURN(*spec.mutable_model(), TakeModel(flags));
  return request;
}

absl::StatusOr<proto::ProfileRequest> ProfileRequestFromFlags(CliFlags& flags) {
  proto::ProfileRequest request;
  ASSIGN_OR_RETURN(*request.mutable_plan(), TakePlanOptions(flags));
  RETURN_IF_ERROR(TakeLearningRate(flags, *request.mutable_plan()));
  ASSIGN_OR_RETURN(int64_t steps, flags.TakeInt("steps", kDefaultProfileSteps));
  ASSIGN_OR_RETURN(int64_t seed, flags.TakeInt("seed", 1, 0));
  ASSIGN_OR_RETURN(*request.mutable_backend(), TakeBackend(flags));
  if (steps > UINT32_MAX) return absl::InvalidArgumentError("--steps is too large");
  request.set_steps(static_cast<uint32_t>(steps));
  request.set_seed(static_cast<uint64_t>(seed));
  ASSIGN_OR_RETURN(*request.mutable_model(), TakeModel(flags));
  return request;
}

// Returns the states of --state ("queued,running"); empty (every state) when absent.
absl::StatusOr<std::vector<proto::JobState>> TakeStates(CliFlags& flags) {
  std::vector<proto::JobState> states;
  const std::string text = flags.TakeString("state");
  if (text.empty()) return states;
  for (absl::string_view name : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    proto::JobState state = proto::JOB_STATE_UNSPECIFIED;
    const std::string full = "JOB_STATE_" + absl::AsciiStrToUpper(absl::StripAsciiWhitespace(name));
    if (!proto::JobState_Parse(full, &state) || state == proto::JOB_STATE_UNSPECIFIED) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--state: unknown state '", name, "'; use queued, running, succeeded, failed, cancelled"));
    }
    states.push_back(state);
  }
  return states;
}

// ---- Calls -----------------------------------------------------------------------------

// Returns watch's exit code for a job that ended in `state`.
int ExitCodeOf(proto::JobState state) {
  switch (state) {
    case proto::JOB_STATE_SUCCEEDED: return kExitOk;
    case proto::JOB_STATE_CANCELLED: return kExitCancelled;
    default: return kExitFailed;
  }
}

void PrintProgress(const Invocation& inv, const proto::JobProgress& progress) {
  if (inv.json()) {
    inv.out() << ProtoJson(progress) << "\n" << std::flush;
  } else if (inv.io().terminal) {
    inv.out() << "\r" << ProgressLine(progress) << "\x1b[K" << std::flush;
  } else {
    inv.out() << ProgressLine(progress) << "\n" << std::flush;
  }
}

// Follows `job_id` until its stream ends; returns the exit code of its final state.
int Watch(Invocation& inv, const std::string& job_id) {
  proto::WatchJobRequest request;
  request.set_job_id(job_id);
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderInterface<proto::JobProgress>> reader =
      inv.stub().WatchJob(&context, request);
  proto::JobProgress progress, last;
  int updates = 0;
  for (; reader->Read(&progress); ++updates) {
    PrintProgress(inv, progress);
    last = progress;
  }
  if (updates > 0 && inv.io().terminal && !inv.json()) inv.out() << "\n";
  if (grpc::Status status = reader->Finish(); !status.ok()) return inv.RpcError(status);
  if (!server::Ended(last.state())) {
    return inv.Error(absl::StrCat("the stream of job ", job_id, " ended while it was ",
                                  JobStateName(last.state())));
  }
  if (!inv.json()) {
    inv.out() << "job " << job_id << " " << JobStateName(last.state())
              << (last.message().empty() ? "" : ": " + last.message()) << "\n";
  }
  return ExitCodeOf(last.state());
}

// Every job over all pages of ListJobs, or the failed call's status.
struct JobList {
  grpc::Status status;
  std::vector<proto::JobInfo> jobs;
};

JobList ListAllJobs(Headroom::StubInterface& stub, proto::ListJobsRequest request) {
  JobList list;
  do {
    grpc::ClientContext context;
    SetDeadline(context, kShortCallTimeout);
    proto::ListJobsResponse page;
    list.status = stub.ListJobs(&context, request, &page);
    if (!list.status.ok()) return list;
    for (proto::JobInfo& job : *page.mutable_jobs()) list.jobs.push_back(std::move(job));
    if (!page.next_page_token().empty() && page.next_page_token() == request.page_token()) {
      list.status = grpc::Status(grpc::StatusCode::INTERNAL,
                                 "the daemon answered the same page token twice");
      return list;
    }
    request.set_page_token(page.next_page_token());
  } while (!request.page_token().empty());
  return list;
}

// Writes the profile (and its trace) where --out and --trace ask.
absl::Status WriteProfileFiles(const proto::ProfileResponse& profile, const std::string& out_path,
                               const std::string& trace_path) {
  if (!out_path.empty()) {
    absl::Status s = WriteFileContents(out_path, ProtoJson(profile, true) + "\n", "profile");
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("--out: ", s.message()));
  }
  if (!trace_path.empty()) {
    absl::Status s = WriteFileContents(trace_path, profile.trace_json(), "trace");
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("--trace: ", s.message()));
  }
  return absl::OkStatus();
}

// ---- The commands' words ----------------------------------------------------------------

std::string PlanFlagsHelp() {
  return "  --budget SIZE       fit the step in SIZE (6GiB, 400MiB, bytes) with sections\n"
         "                      and host offload, at the least predicted time\n"
         "  --device NAME       cost-model preset: cpu (default), h100 or h200\n"
         "  --device-file FILE  a text-format DeviceModel overriding a preset's rates\n"
         "  --no-offload        keep every cached section input on the device\n" +
         HostMemoryFlagUsage() +
         "  --optimizer NAME    sgd (with momentum, default) or adam\n"
         "  --alignment BYTES   offset alignment in the arena (default 256)\n";
}

CommandSpec PlanSpec() {
  return {"plan",
          "usage: headroom plan (--model NAME | --graph FILE | --onnx FILE) [--batch N]\n"
          "                     [--budget SIZE] [--frontier] [--device cpu|h100|h200]\n"
          "                     [--device-file FILE] [--no-offload] [--optimizer sgd|adam]\n"
          "                     [--alignment BYTES] [--inference] [--tensors] [--profile FILE]\n"
          "                     [--backend cpu|cuda] [--host-memory shared|separate]\n"
          "                     [--server ADDR] [--json]\n",
          ModelFlagsUsage() + PlanFlagsHelp() +
              "  --frontier          also the peak/time Pareto frontier and the baselines\n"
              "  --inference         plan the forward pass only\n"
              "  --tensors           also every tensor's offset, size, lifetime and role\n"
              "  --profile FILE      plan with the node times and copy rates measured by\n"
              "                      `headroom profile --out FILE` (same model and batch)\n"
              "  --backend NAME      without --server: the backend whose kernel scratch the\n"
              "                      plan holds, as `headroom train` will: cpu (default) or\n"
              "                      cuda; headroomd plans for its own\n",
          {"frontier", "no-offload", "inference", "tensors"},
          /*takes_job=*/false,
          /*local_without_server=*/true};
}

CommandSpec ProfileSpec() {
  return {"profile",
          "usage: headroom profile --server ADDR (--model NAME | --graph FILE | --onnx FILE) [--batch N]\n"
          "                        [--steps N] [--budget SIZE] [--backend cpu|cuda]\n"
          "                        [--device cpu|h100|h200] [--no-offload] [--optimizer sgd|adam]\n"
          "                        [--lr RATE] [--seed N] [--out FILE] [--trace FILE]\n"
          "                        [--rows N] [--json]\n",
          ModelFlagsUsage() + PlanFlagsHelp() +
              "  --lr RATE           learning rate\n"
              "  --steps N           steps to run (default 3)\n"
              "  --seed N            seed of the weights and synthetic batches (default 1)\n"
              "  --backend NAME      cpu or cuda (default the daemon's)\n"
              "  --out FILE          write the profile as JSON, for `headroom plan --profile`\n"
              "  --trace FILE        write the Chrome trace-event JSON\n"
              "  --rows N            largest live tensors shown at the peak (default 12)\n",
          {"no-offload"}};
}

CommandSpec SubmitSpec() {
  return {"submit",
          "usage: headroom submit [--server ADDR] (--model NAME | --graph FILE | --onnx FILE) [--batch N]\n"
          "                       [--budget SIZE] [--steps N] [--seed N] [--optimizer sgd|adam]\n"
          "                       [--lr RATE] [--name NAME] [--checkpoint-every N]\n"
          "                       [--backend cpu|cuda] [--device NAME] [--no-offload]\n"
          "                       [--watch] [--json]\n",
          ModelFlagsUsage() + PlanFlagsHelp() +
              "  --lr RATE           learning rate\n"
              "  --steps N           training steps (default 100)\n"
              "  --seed N            seed of the weights and synthetic batches (default 1)\n"
              "  --name NAME         a label for people\n"
              "  --checkpoint-every N  save the training state every N steps (default the\n"
              "                      daemon's)\n"
              "  --backend NAME      cpu or cuda (default the daemon's)\n"
              "  --watch             follow the job until it ends, as `headroom watch`\n",
          {"no-offload", "watch"}};
}

CommandSpec WatchSpec() {
  return {"watch", "usage: headroom watch [--server ADDR] JOB [--json]\n",
          "  exit code: 0 when the job succeeded, 1 when it failed, 3 when it was cancelled\n",
          {}, true};
}

CommandSpec JobsSpec() {
  return {"jobs", "usage: headroom jobs [--server ADDR] [--state queued,running,...] [--json]\n",
          "  --state LIST        only jobs in these states: queued, running, succeeded,\n"
          "                      failed, cancelled\n",
          {}};
}

CommandSpec CancelSpec() {
  return {"cancel", "usage: headroom cancel [--server ADDR] JOB [--json]\n", "", {}, true};
}

CommandSpec TimelineSpec() {
  return {"timeline",
          "usage: headroom timeline [--server ADDR] JOB [--samples N] [--rows N] [--json]\n",
          "  --samples N         thin the timeline to at most N samples (default 240; 0: all)\n"
          "  --rows N            largest live tensors shown at the peak (default 12)\n",
          {}, true};
}

CommandSpec ProfilesSpec() {
  return {"profiles", "usage: headroom profiles [--server ADDR] [--json]\n", "", {}};
}

}  // namespace

std::unique_ptr<proto::Headroom::StubInterface> ConnectToHeadroomd(const std::string& address) {
  return proto::Headroom::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

bool HasServerFlag(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    if (arg == "--server" || absl::StartsWith(arg, "--server=")) return true;
  }
  return false;
}

int RunPlanCommand(const std::vector<std::string>& args, const RemoteIo& io) {
  Invocation inv(PlanSpec(), io);
  if (std::optional<int> code = inv.Parse(args)) return *code;
  absl::StatusOr<std::string> backend = TakeBackend(inv.flags());
  if (!backend.ok()) return inv.Fail(backend.status());
  if (!backend->empty() && !inv.local()) {
    return inv.UsageError("--backend: headroomd plans for its own backend; drop --backend");
  }
  absl::StatusOr<proto::PlanRequest> request = PlanRequestFromFlags(inv.flags());
  if (!request.ok()) return inv.Fail(request.status());
  if (std::optional<int> code = inv.Connect(backend->empty() ? "cpu" : *backend)) return *code;
  grpc::ClientContext context;
  SetDeadline(context, kLongCallTimeout);
  proto::PlanResponse response;
  grpc::Status status = inv.stub().Plan(&context, *request, &response);
  if (!status.ok()) return inv.RpcError(status);
  inv.out() << (inv.json() ? ProtoJson(response) + "\n" : PlanText(response));
  return kExitOk;
}

int RunRemoteProfileCommand(const std::vector<std::string>& args, const RemoteIo& io) {
  Invocation inv(ProfileSpec(), io);
  if (std::optional<int> code = inv.Parse(args)) return *code;
  const std::string out_path = inv.flags().TakeString("out");
  const std::string trace_path = inv.flags().TakeString("trace");
  absl::StatusOr<int64_t> rows = inv.flags().TakeInt("rows", 12, 0);
  if (!rows.ok()) return inv.Fail(rows.status());
  absl::StatusOr<proto::ProfileRequest> request = ProfileRequestFromFlags(inv.flags());
  if (!request.ok()) return inv.Fail(request.status());
  request->set_trace(!trace_path.empty());
  if (std::optional<int> code = inv.Connect()) return *code;
  grpc::ClientContext context;
  SetDeadline(context, kLongCallTimeout);
  proto::ProfileResponse response;
  grpc::Status status = inv.stub().Profile(&context, *request, &response);
  if (!status.ok()) return inv.RpcError(status);
  if (absl::Status s = WriteProfileFiles(response, out_path, trace_path); !s.ok()) {
    return inv.Error(s.message());
  }
  inv.out() << (inv.json() ? ProtoJson(response) + "\n"
                           : ProfileText(response, static_cast<int>(*rows)));
  if (!inv.json() && !out_path.empty()) inv.out() << "\nprofile: " << out_path << "\n";
  return kExitOk;
}

int RunSubmitCommand(const std::vector<std::string>& args, const RemoteIo& io) {
  Invocation inv(SubmitSpec(), io);
  if (std::optional<int> code = inv.Parse(args)) return *code;
  const bool watch = inv.flags().TakeBool("watch");
  absl::StatusOr<proto::SubmitJobRequest> request = SubmitRequestFromFlags(inv.flags());
  if (!request.ok()) return inv.Fail(request.status());
  if (std::optional<int> code = inv.Connect()) return *code;
  grpc::ClientContext context;
  SetDeadline(context, kShortCallTimeout);
  proto::SubmitJobResponse response;
  grpc::Status status = inv.stub().SubmitJob(&context, *request, &response);
  if (!status.ok()) return inv.RpcError(status);
  if (inv.json()) {
    inv.out() << ProtoJson(response) << "\n";
  } else {
    inv.out() << "job " << response.job_id() << " " << JobStateName(response.state()) << "\n"
              << PlanBrief(response.plan());
    if (!watch) inv.out() << "follow it: headroom watch " << response.job_id() << "\n";
  }
  return watch ? Watch(inv, response.job_id()) : kExitOk;
}

int RunWatchCommand(const std::vector<std::string>& args, const RemoteIo& io) {
  Invocation inv(WatchSpec(), io);
  if (std::optional<int> code = inv.Parse(args)) return *code;
  if (std::optional<int> code = inv.Connect()) return *code;
  return Watch(inv, inv.job_id());
}

int RunJobsCommand(const std::vector<std::string>& args, const RemoteIo& io) {
  Invocation inv(JobsSpec(), io);
  if (std::optional<int> code = inv.Parse(args)) return *code;
  absl::StatusOr<std::vector<proto::JobState>> states = TakeStates(inv.flags());
  if (!states.ok()) return inv.Fail(states.status());
  if (std::optional<int> code = inv.Connect()) return *code;
  proto::ListJobsRequest request;
  for (proto::JobState state : *states) request.add_states(state);
  JobList list = ListAllJobs(inv.stub(), request);
  if (!list.status.ok()) return inv.RpcError(list.status);
  if (inv.json()) {
    proto::ListJobsResponse all;
    for (proto::JobInfo& job : list.jobs) *all.add_jobs() = std::move(job);
    inv.out() << ProtoJson(all) << "\n";
  } else {
    inv.out() << JobsTable(list.jobs, NowUnixSeconds());
  }
  return kExitOk;
}

int RunCancelCommand(const std::vector<std::string>& args, const RemoteIo& io) {
  Invocation inv(CancelSpec(), io);
  if (std::optional<int> code = inv.Parse(args)) return *code;
  if (std::optional<int> code = inv.Connect()) return *code;
  proto::CancelJobRequest request;
  request.set_job_id(inv.job_id());
  grpc::ClientContext context;
  SetDeadline(context, kShortCallTimeout);
  proto::CancelJobResponse response;
  grpc::Status status = inv.stub().CancelJob(&context, request, &response);
  if (!status.ok()) return inv.RpcError(status);
  inv.out() << (inv.json() ? ProtoJson(response)
                           : "job " + inv.job_id() + " " + JobStateName(response.state()))
            << "\n";
  return kExitOk;
}

int RunTimelineCommand(const std::vector<std::string>& args, const RemoteIo& io) {
  Invocation inv(TimelineSpec(), io);
  if (std::optional<int> code = inv.Parse(args)) return *code;
  absl::StatusOr<int64_t> samples = inv.flags().TakeInt("samples", 240, 0);
  if (!samples.ok()) return inv.Fail(samples.status());
  absl::StatusOr<int64_t> rows = inv.flags().TakeInt("rows", 12, 0);
  if (!rows.ok()) return inv.Fail(rows.status());
  if (std::optional<int> code = inv.Connect()) return *code;
  proto::GetTimelineRequest request;
  request.set_job_id(inv.job_id());
  request.set_max_samples(static_cast<uint32_t>(std::min<int64_t>(*samples, UINT32_MAX)));
  grpc::ClientContext context;
  SetDeadline(context, kShortCallTimeout);
  proto::GetTimelineResponse response;
  grpc::Status status = inv.stub().GetTimeline(&context, request, &response);
  if (!status.ok()) return inv.RpcError(status);
  if (inv.json()) {
    inv.out() << ProtoJson(response) << "\n";
    return kExitOk;
  }
  inv.out() << "job " << inv.job_id() << ": " << response.timeline().samples_size()
            << " sample(s)\n"
            << PeakText(response.timeline(), static_cast<int>(*rows))
            << "device bytes over time:\n"
            << DeviceBytesChart(response.timeline(), 60, 8);
  return kExitOk;
}

int RunProfilesCommand(const std::vector<std::string>& args, const RemoteIo& io) {
  Invocation inv(ProfilesSpec(), io);
  if (std::optional<int> code = inv.Parse(args)) return *code;
  if (std::optional<int> code = inv.Connect()) return *code;
  proto::ListProfilesRequest request;
  request.set_summaries_only(true);
  grpc::ClientContext context;
  SetDeadline(context, kShortCallTimeout);
  proto::ListProfilesResponse response;
  grpc::Status status = inv.stub().ListProfiles(&context, request, &response);
  if (!status.ok()) return inv.RpcError(status);
  inv.out() << (inv.json() ? ProtoJson(response) + "\n"
                           : ProfilesTable(response, NowUnixSeconds()));
  return kExitOk;
}

}  // namespace headroom::clients
