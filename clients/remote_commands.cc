#include "clients/remote_commands.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "clients/remote_text.h"
#include "profiler/measured_cost_model.h"
#include "server/job_upload.h"
#include "server/scheduler.h"
#include "util/file_io.h"
#include "util/status_macros.h"

namespace headroom::clients {
namespace {

using proto::Headroom;

// Plan and Profile may plan a large model or run steps; the other unary calls answer at once.
// WatchJob has no deadline: a job may train for days.
constexpr std::chrono::seconds kLongCallTimeout = std::chrono::minutes(10);
constexpr std::chrono::seconds kShortCallTimeout{30};
constexpr std::chrono::seconds kNoTimeout{0};

// Rows of the tables at a peak (largest live tensors, slowest nodes) by default.
constexpr int64_t kDefaultRows = 12;

double NowUnixSeconds() { return absl::ToUnixMicros(absl::Now()) * 1e-6; }

// Returns the answer of a unary call of `method` on `stub` within `timeout` (0: none), or the
// failed call's status.
template <typename Request, typename Response>
absl::StatusOr<Response> Call(Headroom::StubInterface& stub,
                              grpc::Status (Headroom::StubInterface::*method)(grpc::ClientContext*,
                                                                              const Request&,
                                                                              Response*),
                              const Request& request, std::chrono::seconds timeout,
                              const std::string& address) {
  grpc::ClientContext context;
  // The service in this process answers without a deadline: the work is the command's own.
  if (timeout.count() > 0) context.set_deadline(std::chrono::system_clock::now() + timeout);
  Response response;
  grpc::Status status = (stub.*method)(&context, request, &response);
  if (!status.ok()) return FromRpc(status, address);
  return response;
}

// Returns UploadJob's answer for `spec` with the ONNX model in the file at `path` streamed
// after it in server::kUploadChunkBytes chunks (the file is read a chunk at a time), within
// kLongCallTimeout. The error of reading the file, naming --onnx, or the failed call's.
absl::StatusOr<proto::SubmitJobResponse> UploadJob(Headroom::StubInterface& stub,
                                                   const proto::JobSpec& spec,
                                                   const std::string& path,
                                                   const std::string& address) {
  std::error_code error;
  const uint64_t size = std::filesystem::file_size(path, error);
  if (error || !std::filesystem::is_regular_file(path)) {
    return absl::NotFoundError(absl::StrCat("--onnx ", path, ": not a readable file"));
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat("--onnx ", path, ": cannot open it"));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kLongCallTimeout);
  proto::SubmitJobResponse response;
  std::unique_ptr<grpc::ClientWriterInterface<proto::SubmitJobChunk>> writer =
      stub.UploadJob(&context, &response);
  proto::SubmitJobChunk message;
  *message.mutable_spec() = spec;
  message.set_onnx_model_bytes(size);
  // A failed write means the daemon has answered (an error): Finish() returns it.
  bool open = writer->Write(message);
  std::string chunk(server::kUploadChunkBytes, '\0');
  for (uint64_t sent = 0; open && sent < size;) {
    const uint64_t n = std::min<uint64_t>(chunk.size(), size - sent);
    if (!file.read(chunk.data(), static_cast<std::streamsize>(n))) {
      context.TryCancel();
      writer->Finish().IgnoreError();
      return absl::DataLossError(
          absl::StrCat("--onnx ", path, ": reading it failed after ", sent, " bytes"));
    }
    message.Clear();
    message.set_onnx_model_chunk(chunk.data(), n);
    open = writer->Write(message);
    sent += n;
  }
  if (open) writer->WritesDone();
  if (grpc::Status status = writer->Finish(); !status.ok()) return FromRpc(status, address);
  return response;
}

// One remote command's state: its service flags and the stub it made.
struct Remote {
  ServiceFlags service;
  std::unique_ptr<Headroom::StubInterface> stub;

  absl::Status Connect(const CommandIo& io, const std::string& local_backend = "cpu") {
    ASSIGN_OR_RETURN(stub, clients::Connect(service, io, local_backend));
    return absl::OkStatus();
  }
  std::string address() const { return AddressOf(service); }
};

// Returns the states --state names ("queued,running").
absl::StatusOr<std::vector<proto::JobState>> ParseStates(const std::string& text) {
  std::vector<proto::JobState> states;
  for (absl::string_view name : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    proto::JobState state = proto::JOB_STATE_UNSPECIFIED;
    const std::string full = "JOB_STATE_" + absl::AsciiStrToUpper(absl::StripAsciiWhitespace(name));
    if (!proto::JobState_Parse(full, &state) || state == proto::JOB_STATE_UNSPECIFIED) {
      return absl::InvalidArgumentError(
          absl::StrCat("--state: unknown state '", name,
                       "'; use queued, running, succeeded, failed, cancelled"));
    }
    states.push_back(state);
  }
  return states;
}

void PrintProgress(const CommandIo& io, bool json, const proto::JobProgress& progress) {
  if (json) {
    io.out << ProtoJson(progress) << "\n" << std::flush;
  } else if (io.terminal) {
    io.out << "\r" << ProgressLine(progress) << "\x1b[K" << std::flush;
  } else {
    io.out << ProgressLine(progress) << "\n" << std::flush;
  }
}

// Returns the status a watched job's final state means: OK when it succeeded, CANCELLED when
// it was cancelled, else ABORTED with its error.
absl::Status StatusOfEnd(const std::string& job_id, const proto::JobProgress& last) {
  switch (last.state()) {
    case proto::JOB_STATE_SUCCEEDED:
      return absl::OkStatus();
    case proto::JOB_STATE_CANCELLED:
      return absl::CancelledError(absl::StrCat("job ", job_id, " was cancelled"));
    default:
      return absl::AbortedError(absl::StrCat("job ", job_id, " ", JobStateName(last.state()),
                                             last.message().empty() ? "" : ": " + last.message()));
  }
}

// Follows `job_id` until its stream ends; returns the status of its final state.
absl::Status Watch(Remote& remote, const CommandIo& io, const std::string& job_id) {
  proto::WatchJobRequest request;
  request.set_job_id(job_id);
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderInterface<proto::JobProgress>> reader =
      remote.stub->WatchJob(&context, request);
  proto::JobProgress progress, last;
  int updates = 0;
  for (; reader->Read(&progress); ++updates) {
    PrintProgress(io, remote.service.json, progress);
    last = progress;
  }
  if (updates > 0 && io.terminal && !remote.service.json) io.out << "\n";
  if (grpc::Status status = reader->Finish(); !status.ok()) {
    return FromRpc(status, remote.address());
  }
  if (!server::Ended(last.state())) {
    return absl::UnavailableError(absl::StrCat("the stream of job ", job_id, " ended while it was ",
                                               JobStateName(last.state())));
  }
  if (!remote.service.json) {
    io.out << "job " << job_id << " " << JobStateName(last.state())
           << (last.message().empty() ? "" : ": " + last.message()) << "\n";
  }
  return StatusOfEnd(job_id, last);
}

// Returns every job over all pages of ListJobs.
absl::StatusOr<std::vector<proto::JobInfo>> ListAllJobs(Remote& remote,
                                                        proto::ListJobsRequest request) {
  std::vector<proto::JobInfo> jobs;
  do {
    ASSIGN_OR_RETURN(proto::ListJobsResponse page,
                     Call(*remote.stub, &Headroom::StubInterface::ListJobs, request,
                          kShortCallTimeout, remote.address()));
    for (proto::JobInfo& job : *page.mutable_jobs()) jobs.push_back(std::move(job));
    if (!page.next_page_token().empty() && page.next_page_token() == request.page_token()) {
      return absl::InternalError("the daemon answered the same page token twice");
    }
    request.set_page_token(page.next_page_token());
  } while (!request.page_token().empty());
  return jobs;
}

// Adds the positional JOB id of `watch`, `cancel` and `timeline`.
void AddJobArgument(CLI::App& command, std::string& job_id) {
  command.add_option("job", job_id, "the job's id (as `headroom submit` and `jobs` print it)")
      ->type_name("JOB")
      ->required();
}

// ---- plan -----------------------------------------------------------------------------

struct PlanCommand {
  ModelFlags model;
  PlanFlags plan;
  Remote remote;
  bool frontier = false;
  bool inference = false;
  bool tensors = false;
  std::string profile_path;
  std::string backend;

  // What importing --onnx found, set by Request().
  ImportNotes notes;

  absl::StatusOr<proto::PlanRequest> Request() {
    proto::PlanRequest request;
    ASSIGN_OR_RETURN(*request.mutable_options(), PlanOptionsOf(plan));
    request.mutable_options()->set_frontier(frontier);
    request.mutable_options()->set_inference(inference);
    request.mutable_options()->set_tensors(tensors);
    if (!profile_path.empty()) {
      absl::StatusOr<proto::ProfileResponse> measured = profiler::ReadProfileFile(profile_path);
      if (!measured.ok()) {
        return absl::FailedPreconditionError(
            absl::StrCat("--profile: ", measured.status().message()));
      }
      *request.mutable_measured() = *std::move(measured);
    }
    ASSIGN_OR_RETURN(SourcedModel sourced, ModelSourceOf(model));
    *request.mutable_model() = std::move(sourced.source);
    notes = std::move(sourced.notes);
    return request;
  }

  absl::Status Run(const CommandIo& io) {
    if (!backend.empty() && !IsLocal(remote.service)) {
      return absl::InvalidArgumentError("--backend: headroomd plans for its own backend");
    }
    ASSIGN_OR_RETURN(proto::PlanRequest request, Request());
    RETURN_IF_ERROR(remote.Connect(io, backend.empty() ? "cpu" : backend));
    ASSIGN_OR_RETURN(
        proto::PlanResponse response,
        Call(*remote.stub, &Headroom::StubInterface::Plan, request,
             IsLocal(remote.service) ? kNoTimeout : kLongCallTimeout, remote.address()));
    PrintNotes(notes, io.err);
    io.out << (remote.service.json ? WithNotes(ProtoJson(response), notes) + "\n"
                                   : PlanText(response));
    return absl::OkStatus();
  }
};

// ---- submit ---------------------------------------------------------------------------

struct SubmitCommand {
  ModelFlags model;
  PlanFlags plan;
  RunFlags run;
  Remote remote;
  std::string name;
  int64_t checkpoint_every = 0;
  // JobSpec.ranks: data-parallel ranks on the daemon's host.
  int64_t ranks = 1;
  // With ranks: JobSpec.plan.data_parallel's bucket_bytes (in KiB) and sync_batch_norm.
  int64_t bucket_kib = 0;
  bool sync_batchnorm = false;
  bool watch = false;
  // JobSpec.data. The daemon checkpoints by steps (--checkpoint-every) unless told.
  DatasetFlags data = [] {
    DatasetFlags f;
    f.checkpoint_every_epochs = 0;
    return f;
  }();
  // The command (to ask which flags were given).
  const CLI::App* app = nullptr;

  // Returns an error naming the flag where the data flags do not go together.
  absl::Status CheckDataFlags() const {
    if (data.dataset.empty()) {
      for (const char* flag : kDatasetOnlyFlags) {
        if (app != nullptr && app->count(flag) > 0) {
          return absl::InvalidArgumentError(
              absl::StrCat(flag, " applies to training on a --dataset"));
        }
      }
      return absl::OkStatus();
    }
    if (app != nullptr && app->count("--steps") > 0) {
      return absl::InvalidArgumentError(
          "--steps is the synthetic task's; with --dataset give --epochs");
    }
    return absl::OkStatus();
  }

  void SetData(proto::JobSpec& spec) const {
    if (data.dataset.empty()) return;
    proto::DataOptions& d = *spec.mutable_data();
    d.set_dataset(data.dataset);
    d.set_epochs(static_cast<uint64_t>(data.epochs));
    d.set_eval_every(static_cast<uint64_t>(data.eval_every));
    d.set_validation_fraction(data.validation_fraction);
    d.set_lr_schedule(data.lr_schedule);
    d.set_warmup_steps(static_cast<uint64_t>(data.warmup_steps));
    d.set_crop_padding(static_cast<uint64_t>(data.crop_padding));
    d.set_flip(data.flip);
    d.set_prefetch(static_cast<uint64_t>(data.prefetch));
    d.set_checkpoint_every_epochs(static_cast<uint64_t>(data.checkpoint_every_epochs));
    d.set_keep_last(static_cast<uint64_t>(data.keep_last));
    d.set_early_stop_patience(static_cast<uint64_t>(data.early_stop_patience));
    d.set_early_stop_metric(data.early_stop_metric);
    d.set_early_stop_min_delta(data.early_stop_min_delta);
  }

  absl::StatusOr<proto::SubmitJobRequest> Request() const {
    RETURN_IF_ERROR(CheckDataFlags());
    proto::SubmitJobRequest request;
    proto::JobSpec& spec = *request.mutable_spec();
    spec.set_name(name);
    spec.set_ranks(static_cast<uint32_t>(ranks));
    ASSIGN_OR_RETURN(*spec.mutable_plan(), PlanOptionsOf(plan));
    if ((bucket_kib > 0 || sync_batchnorm) && ranks <= 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          bucket_kib > 0 ? "--bucket-kib" : "--sync-batchnorm", " needs --ranks above 1"));
    }
    if (ranks > 1) {
      proto::DataParallelOptions& dp = *spec.mutable_plan()->mutable_data_parallel();
      dp.set_bucket_bytes(static_cast<uint64_t>(bucket_kib) << 10);
      dp.set_sync_batch_norm(sync_batchnorm);
    }
    SetData(spec);
    proto::TrainOptions& train = *spec.mutable_train();
    train.set_backend(run.backend);
    // With a dataset the epochs decide the steps.
    train.set_steps(data.dataset.empty() ? static_cast<uint64_t>(run.steps) : 0);
    train.set_seed(static_cast<uint64_t>(run.seed));
    train.set_checkpoint_interval_steps(static_cast<uint64_t>(checkpoint_every));
    if (model.onnx.empty()) {
      ASSIGN_OR_RETURN(SourcedModel sourced, ModelSourceOf(model));
      *spec.mutable_model() = std::move(sourced.source);
    } else {
      ASSIGN_OR_RETURN(*spec.mutable_model(), OnnxUploadSourceOf(model));
    }
    return request;
  }

  absl::Status Run(const CommandIo& io) {
    ASSIGN_OR_RETURN(proto::SubmitJobRequest request, Request());
    RETURN_IF_ERROR(remote.Connect(io));
    // An ONNX model travels whole, in chunks, so the job trains from its own weights.
    ASSIGN_OR_RETURN(proto::SubmitJobResponse response,
                     model.onnx.empty()
                         ? Call(*remote.stub, &Headroom::StubInterface::SubmitJob, request,
                                kShortCallTimeout, remote.address())
                         : UploadJob(*remote.stub, request.spec(), model.onnx, remote.address()));
    if (remote.service.json) {
      io.out << ProtoJson(response) << "\n";
    } else {
      io.out << "job " << response.job_id() << " " << JobStateName(response.state()) << "\n"
             << PlanBrief(response.plan());
      if (!watch) io.out << "follow it: headroom watch " << response.job_id() << "\n";
    }
    return watch ? Watch(remote, io, response.job_id()) : absl::OkStatus();
  }
};

}  // namespace

void AddServiceFlags(CLI::App& command, ServiceFlags& flags, bool local_without_server) {
  flags.app = &command;
  flags.local_without_server = local_without_server;
  command
      .add_option("--server", flags.server,
                  local_without_server
                      ? "ask headroomd at ADDR (host:port); default: this process"
                      : absl::StrCat("headroomd's address (default ", kDefaultServer, ")"))
      ->type_name("ADDR");
  command
      .add_option("--tls-ca", flags.tls_ca_path,
                  "connect with TLS, trusting the PEM CA certificate in FILE")
      ->type_name("FILE");
  command
      .add_option("--token-file", flags.token_file,
                  "send the token in FILE on every call (needs --tls-ca; default: "
                  "$HEADROOM_TOKEN, sent only with --tls-ca)")
      ->type_name("FILE");
  // The environment's token, through CLI11 so that main's parse reads it; no flag of its own.
  command.add_option("--headroom-token-env", flags.env_token)->envname("HEADROOM_TOKEN")->group("");
  command.add_flag("--json", flags.json, "print the answer as protobuf's JSON of the message");
}

absl::StatusOr<ChannelSecurity> SecurityOf(const ServiceFlags& flags) {
  ChannelSecurity security;
  if (!flags.token_file.empty() && flags.tls_ca_path.empty()) {
    return absl::InvalidArgumentError(
        "--token-file needs --tls-ca: a token is never sent in plaintext");
  }
  if (flags.tls_ca_path.empty()) return security;
  security.tls = true;
  ASSIGN_OR_RETURN(security.root_certs_pem, ReadFileContents(flags.tls_ca_path, "--tls-ca"));
  if (flags.token_file.empty()) {
    security.token = std::string(absl::StripAsciiWhitespace(flags.env_token));
    return security;
  }
  ASSIGN_OR_RETURN(std::string contents, ReadFileContents(flags.token_file, "--token-file"));
  for (absl::string_view line : absl::StrSplit(contents, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    security.token = std::string(line.substr(0, line.find_first_of(" \t")));
    return security;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--token-file ", flags.token_file, ": holds no token"));
}

bool IsLocal(const ServiceFlags& flags) {
  return flags.local_without_server && flags.server.empty();
}

std::string AddressOf(const ServiceFlags& flags) {
  return flags.server.empty() ? kDefaultServer : flags.server;
}

absl::StatusOr<std::unique_ptr<proto::Headroom::StubInterface>> Connect(
    const ServiceFlags& flags, const CommandIo& io, const std::string& local_backend) {
  if (IsLocal(flags)) {
    absl::StatusOr<std::unique_ptr<Headroom::StubInterface>> stub = io.connect_local(local_backend);
    if (!stub.ok()) {
      return absl::Status(stub.status().code(),
                          absl::StrCat("--backend ", local_backend, ": ", stub.status().message()));
    }
    return stub;
  }
  if (flags.app != nullptr && flags.app->count("--server") > 0 && flags.server.empty()) {
    return absl::InvalidArgumentError("--server needs an address, host:port");
  }
  ASSIGN_OR_RETURN(const ChannelSecurity security, SecurityOf(flags));
  std::unique_ptr<Headroom::StubInterface> stub = io.connect(AddressOf(flags), security);
  if (stub == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot make a channel to ", AddressOf(flags)));
  }
  return stub;
}

Command AddPlanCommand(CLI::App& headroom, const CommandIo& io) {
  auto state = std::make_shared<PlanCommand>();
  CLI::App* app = headroom.add_subcommand(
      "plan",
      "plan a training step's memory: arena, lower bound, bytes by role; with --budget, "
      "the section splits and offloads that fit");
  AddModelFlags(*app, state->model);
  AddPlanFlags(*app, state->plan, /*trains=*/false);
  app->add_flag("--frontier", state->frontier, "also the peak/time Pareto frontier and baselines");
  app->add_flag("--inference", state->inference, "plan the forward pass only");
  app->add_flag("--tensors", state->tensors, "also every tensor's offset, size, lifetime and role");
  app->add_option("--profile", state->profile_path,
                  "plan with the node times and copy rates measured by `headroom profile --out "
                  "FILE` (same model and batch)")
      ->type_name("FILE");
  app->add_option("--backend", state->backend,
                  "without --server: the backend whose kernel scratch the plan holds, as "
                  "`headroom train` will (default cpu), or none (no scratch); headroomd plans "
                  "for its own")
      ->type_name("NAME")
      ->check(CLI::IsMember({"cpu", "cuda", "none"}));
  AddServiceFlags(*app, state->remote.service, /*local_without_server=*/true);
  return {app, [state, &io] { return state->Run(io); }};
}

Command AddSubmitCommand(CLI::App& headroom, const CommandIo& io) {
  auto state = std::make_shared<SubmitCommand>();
  CLI::App* app = headroom.add_subcommand(
      "submit", "queue a training job on headroomd under a budget; --watch to follow it");
  AddModelFlags(*app, state->model);
  AddPlanFlags(*app, state->plan, /*trains=*/true);
  AddRunFlags(*app, state->run, /*default_steps=*/100, /*backend_default=*/"");
  app->add_option("--name", state->name, "a label for people")->type_name("NAME");
  app->add_option("--checkpoint-every", state->checkpoint_every,
                  "save the training state every N steps (default: the daemon's)")
      ->type_name("N")
      ->check(AtLeast(0));
  app->add_option("--ranks", state->ranks,
                  "train as N data-parallel ranks (processes, started with mpirun on the "
                  "daemon's host; --batch per rank; at most the daemon's --max-ranks)")
      ->type_name("N")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}));
  app->add_option("--bucket-kib", state->bucket_kib,
                  "with --ranks: average the gradients in buckets of at least this many KiB, as "
                  "`headroom train --bucket-kib` (default 0: one per gradient)")
      ->type_name("KIB")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  app->add_flag("--sync-batchnorm", state->sync_batchnorm,
                "with --ranks: batch norm over the global batch of all ranks, as `headroom train "
                "--sync-batchnorm`");
  app->add_flag("--watch", state->watch, "follow the job until it ends, as `headroom watch`");
  AddDatasetFlags(*app, state->data,
                  {"Data (instead of the synthetic task; docs/training.md)",
                   "train on real data: fashion-mnist, or a dataset directory on the daemon's "
                   "host under one of its --data-root directories",
                   "also a checkpoint at the end of every N-th epoch (0: by steps only, "
                   "--checkpoint-every)",
                   "keep the newest K checkpoints (and best.hrfit) in the daemon's state"});
  state->app = app;
  AddServiceFlags(*app, state->remote.service, /*local_without_server=*/false);
  return {app, [state, &io] { return state->Run(io); }};
}

Command AddWatchCommand(CLI::App& headroom, const CommandIo& io) {
  struct State {
    Remote remote;
    std::string job_id;
  };
  auto state = std::make_shared<State>();
  CLI::App* app = headroom.add_subcommand(
      "watch", "follow a job's progress until it ends (exit 0 succeeded, 1 failed, 3 cancelled)");
  AddJobArgument(*app, state->job_id);
  AddServiceFlags(*app, state->remote.service, /*local_without_server=*/false);
  return {app, [state, &io]() -> absl::Status {
            RETURN_IF_ERROR(state->remote.Connect(io));
            return Watch(state->remote, io, state->job_id);
          }};
}

Command AddJobsCommand(CLI::App& headroom, const CommandIo& io) {
  struct State {
    Remote remote;
    std::string states;
  };
  auto state = std::make_shared<State>();
  CLI::App* app =
      headroom.add_subcommand("jobs", "list jobs: state, steps, planned and measured peak, loss");
  app->add_option("--state", state->states,
                  "only jobs in these states: queued, running, succeeded, failed, cancelled "
                  "(comma-separated)")
      ->type_name("LIST");
  AddServiceFlags(*app, state->remote.service, /*local_without_server=*/false);
  return {app, [state, &io]() -> absl::Status {
            ASSIGN_OR_RETURN(std::vector<proto::JobState> states, ParseStates(state->states));
            RETURN_IF_ERROR(state->remote.Connect(io));
            proto::ListJobsRequest request;
            for (proto::JobState s : states) request.add_states(s);
            ASSIGN_OR_RETURN(std::vector<proto::JobInfo> jobs, ListAllJobs(state->remote, request));
            if (!state->remote.service.json) {
              io.out << JobsTable(jobs, NowUnixSeconds());
              return absl::OkStatus();
            }
            proto::ListJobsResponse all;
            for (proto::JobInfo& job : jobs) *all.add_jobs() = std::move(job);
            io.out << ProtoJson(all) << "\n";
            return absl::OkStatus();
          }};
}

Command AddCancelCommand(CLI::App& headroom, const CommandIo& io) {
  struct State {
    Remote remote;
    std::string job_id;
  };
  auto state = std::make_shared<State>();
  CLI::App* app = headroom.add_subcommand("cancel", "cancel a job and free its device memory");
  AddJobArgument(*app, state->job_id);
  AddServiceFlags(*app, state->remote.service, /*local_without_server=*/false);
  return {app, [state, &io]() -> absl::Status {
            RETURN_IF_ERROR(state->remote.Connect(io));
            proto::CancelJobRequest request;
            request.set_job_id(state->job_id);
            ASSIGN_OR_RETURN(proto::CancelJobResponse response,
                             Call(*state->remote.stub, &Headroom::StubInterface::CancelJob, request,
                                  kShortCallTimeout, state->remote.address()));
            io.out << (state->remote.service.json
                           ? ProtoJson(response)
                           : "job " + state->job_id + " " + JobStateName(response.state()))
                   << "\n";
            return absl::OkStatus();
          }};
}

Command AddTimelineCommand(CLI::App& headroom, const CommandIo& io) {
  struct State {
    Remote remote;
    std::string job_id;
    int64_t samples = 240;
    int64_t rows = kDefaultRows;
  };
  auto state = std::make_shared<State>();
  CLI::App* app =
      headroom.add_subcommand("timeline", "a job's memory over time and what made its peak");
  AddJobArgument(*app, state->job_id);
  app->add_option("--samples", state->samples, "thin the timeline to at most N samples (0: all)")
      ->type_name("N")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{UINT32_MAX}));
  app->add_option("--rows", state->rows, "largest live tensors shown at the peak")
      ->type_name("N")
      ->capture_default_str()
      ->check(AtLeast(0));
  AddServiceFlags(*app, state->remote.service, /*local_without_server=*/false);
  return {app, [state, &io]() -> absl::Status {
            RETURN_IF_ERROR(state->remote.Connect(io));
            proto::GetTimelineRequest request;
            request.set_job_id(state->job_id);
            request.set_max_samples(static_cast<uint32_t>(state->samples));
            ASSIGN_OR_RETURN(proto::GetTimelineResponse response,
                             Call(*state->remote.stub, &Headroom::StubInterface::GetTimeline,
                                  request, kShortCallTimeout, state->remote.address()));
            if (state->remote.service.json) {
              io.out << ProtoJson(response) << "\n";
              return absl::OkStatus();
            }
            io.out << "job " << state->job_id << ": " << response.timeline().samples_size()
                   << " sample(s)\n"
                   << PeakText(response.timeline(), static_cast<int>(state->rows))
                   << "device bytes over time:\n"
                   << DeviceBytesChart(response.timeline(), 60, 8);
            return absl::OkStatus();
          }};
}

Command AddProfilesCommand(CLI::App& headroom, const CommandIo& io) {
  struct State {
    Remote remote;
  };
  auto state = std::make_shared<State>();
  CLI::App* app = headroom.add_subcommand("profiles", "list the profiles headroomd ran");
  AddServiceFlags(*app, state->remote.service, /*local_without_server=*/false);
  return {app, [state, &io]() -> absl::Status {
            RETURN_IF_ERROR(state->remote.Connect(io));
            proto::ListProfilesRequest request;
            request.set_summaries_only(true);
            ASSIGN_OR_RETURN(proto::ListProfilesResponse response,
                             Call(*state->remote.stub, &Headroom::StubInterface::ListProfiles,
                                  request, kShortCallTimeout, state->remote.address()));
            io.out << (state->remote.service.json ? ProtoJson(response) + "\n"
                                                  : ProfilesTable(response, NowUnixSeconds()));
            return absl::OkStatus();
          }};
}

absl::Status WriteProfileFiles(const proto::ProfileResponse& profile, const ProfileFiles& files) {
  if (!files.out_path.empty()) {
    // The profile without its trace (--trace writes that): what `plan --profile` reads.
    proto::ProfileResponse kept = profile;
    kept.clear_trace_json();
    absl::Status s = WriteFileContents(files.out_path, ProtoJson(kept, true) + "\n", "profile");
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("--out: ", s.message()));
  }
  if (!files.trace_path.empty()) {
    absl::Status s = WriteFileContents(files.trace_path, profile.trace_json(), "trace");
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("--trace: ", s.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<proto::ProfileRequest> ProfileRequestOf(const ModelFlags& model,
                                                       const PlanFlags& plan, const RunFlags& run,
                                                       bool trace) {
  proto::ProfileRequest request;
  ASSIGN_OR_RETURN(*request.mutable_plan(), PlanOptionsOf(plan));
  request.set_steps(static_cast<uint32_t>(std::min<int64_t>(run.steps, UINT32_MAX)));
  request.set_seed(static_cast<uint64_t>(run.seed));
  request.set_backend(run.backend);
  request.set_trace(trace);
  ASSIGN_OR_RETURN(SourcedModel sourced, ModelSourceOf(model));
  *request.mutable_model() = std::move(sourced.source);
  return request;
}

absl::StatusOr<proto::ProfileResponse> AskProfile(Headroom::StubInterface& stub,
                                                  const proto::ProfileRequest& request,
                                                  const std::string& address,
                                                  const ProfileFiles& files, bool json,
                                                  const CommandIo& io) {
  const bool local = address.empty();
  ASSIGN_OR_RETURN(proto::ProfileResponse response,
                   Call(stub, &Headroom::StubInterface::Profile, request,
                        local ? kNoTimeout : kLongCallTimeout, local ? "this process" : address));
  RETURN_IF_ERROR(WriteProfileFiles(response, files));
  if (json) {
    io.out << ProtoJson(response) << "\n";
    return response;
  }
  io.out << ProfileText(response, static_cast<int>(files.rows));
  if (!files.trace_path.empty()) {
    io.out << "\ntrace: " << files.trace_path << " (open in ui.perfetto.dev)\n";
  }
  if (!files.out_path.empty()) {
    io.out << (files.trace_path.empty() ? "\n" : "") << "profile: " << files.out_path
           << " (plan with it: headroom plan ... --profile " << files.out_path << ")\n";
  }
  return response;
}

}  // namespace headroom::clients
