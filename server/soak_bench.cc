// Soak benchmark of one headroomd (issue 18, item 7): not a test.
//
// Starts headroomd (the binary beside this one in the runfiles, or --headroomd PATH) on a
// free loopback port with a fresh --state, or connects to one given (--address, with --pid
// for its memory), then runs --clients threads for --seconds, each on a channel of its own,
// each choosing every request from a weighted mix (--mix):
//   plan       Plan of zoo models (small and medium; no budget, 60% and 80% of the plain
//              step, an infeasible 1 MiB), each answer checked against the case's first;
//   submit     SubmitJob of a tiny MLP for 2 to 20 steps (a GetJob of the oldest unfinished
//              job instead while --max-pending jobs are unfinished, so the queue stays short);
//   watch      WatchJob of a recent job with a 1 to 5 s deadline;
//   cancel     CancelJob of a recent job;  list  ListJobs;  get  GetJob of a recent job;
//   bytes      bytes no parser accepts, through a generic stub, to any method;
//   values     valid messages with values out of range (alignment 2^62, batch 2^40, NaN
//              learning rate, optimizer kind 99, steps 2^63, unknown ids, ...);
//   oversized  a Plan over the daemon's message limit (--oversized-bytes).
// Meanwhile it samples the daemon's VmRSS and VmHWM from /proc/PID/status every second.
// At the end it checks that every job a client saw end is still listed by ListJobs and
// GetJob with the state and result (step, loss) it saw, then stops the daemon with SIGTERM.
//
// Prints requests and requests/s, status codes and p50/p99/max latency per kind, resident
// memory over time (at start, after --warmup-seconds, max, end) and every unexpected code
// with a message it came with. Exits 1 when the daemon died or answered UNAVAILABLE, an RPC
// other than WatchJob ran past its deadline, a Plan answer differed from its case's first, a
// finished job went missing or changed; with --strict also on any unexpected code (INTERNAL,
// UNKNOWN, an OK for a malformed request, ...) and on resident growth after warm-up above
// --rss-growth-limit.
//
//   bazel run -c opt //server:soak_bench -- --seconds 600
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "proto/headroom.grpc.pb.h"
#include "server/daemon_process.h"

namespace headroom::server {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kMiB = 1024 * 1024;
constexpr char kService[] = "/headroom.proto.Headroom/";

struct SoakOptions {
  // Concurrent clients, each with its own channel. Default 32.
  int clients = 32;
  // Seconds the clients run. Default 600.
  int64_t seconds = 600;
  // Seconds after which resident memory should no longer grow. Default 60.
  int64_t warmup_seconds = 60;
  // Deadline of every RPC but WatchJob (whose deadline is 1 to 5 s). Default 60 s.
  int64_t rpc_deadline_seconds = 60;
  // Unfinished jobs above which a submit becomes a GetJob of the oldest. Default 8.
  int max_pending = 8;
  // Request bytes of the oversized Plan; must exceed the daemon's --max-message-bytes.
  // Default 65 MiB (the daemon's default limit is 64 MiB).
  uint64_t oversized_bytes = 65 * kMiB;
  // Weights of the request kinds ("plan=25,submit=8,..."); see kKindNames.
  std::string mix =
      "plan=25,submit=8,watch=8,cancel=5,list=8,get=14,bytes=12,values=19,oversized=1";
  // Fail on unexpected codes and on resident growth after warm-up above the limit.
  bool strict = false;
  // Largest (end / after warm-up) resident ratio --strict accepts. Default 1.25.
  double rss_growth_limit = 1.25;
  // Seed of the clients' choices. Default 1.
  uint64_t seed = 1;
};

// ---------------------------------------------------------------------------------------------
// What the clients count.
// ---------------------------------------------------------------------------------------------

enum Kind { kPlan, kSubmit, kWatch, kCancel, kList, kGet, kBytes, kValues, kOversized, kKinds };
constexpr const char* kKindNames[kKinds] = {"plan", "submit", "watch",  "cancel",   "list",
                                            "get",  "bytes",  "values", "oversized"};
constexpr const char* kKindLabels[kKinds] = {
    "Plan",   "SubmitJob",       "WatchJob",         "CancelJob",          "ListJobs",
    "GetJob", "malformed:bytes", "malformed:values", "malformed:oversized"};

std::string CodeName(grpc::StatusCode code) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  const int i = static_cast<int>(code);
  return i >= 0 && i <= 16 ? kNames[i] : absl::StrCat("CODE_", i);
}

// One client's counts; merged after the clients stop. Not thread-safe: one per client.
struct Tally {
  std::vector<double> seconds[kKinds];
  std::map<grpc::StatusCode, int64_t> codes[kKinds];
  // "label case: CODE" -> (count, the first message).
  std::map<std::string, std::pair<int64_t, std::string>> unexpected;
  // What fails the run whatever --strict says: hangs, UNAVAILABLE, differing answers.
  std::vector<std::string> fatal;

  void Merge(Tally& other) {
    for (int k = 0; k < kKinds; ++k) {
      seconds[k].insert(seconds[k].end(), other.seconds[k].begin(), other.seconds[k].end());
      for (const auto& [code, n] : other.codes[k]) codes[k][code] += n;
    }
    for (auto& [key, entry] : other.unexpected) {
      auto [it, inserted] = unexpected.emplace(key, entry);
      if (!inserted) it->second.first += entry.first;
    }
    fatal.insert(fatal.end(), other.fatal.begin(), other.fatal.end());
  }
};

// What one RPC ended with and how long it took.
struct Outcome {
  grpc::Status status;
  double seconds = 0;
  double deadline_seconds = 0;
};

// Counts `outcome` for `kind`; an unexpected code (not in `expected`) under the case's name,
// with its first message and the request the same channel made before (`previous`).
// Hangs (an answer past the deadline, or DEADLINE_EXCEEDED where no deadline was meant to
// pass) and UNAVAILABLE are fatal.
void Count(Tally& tally, Kind kind, const std::string& case_name, const Outcome& outcome,
           const std::vector<grpc::StatusCode>& expected, const std::string& previous) {
  const grpc::StatusCode code = outcome.status.error_code();
  tally.seconds[kind].push_back(outcome.seconds);
  ++tally.codes[kind][code];
  const std::string what = absl::StrCat(kKindLabels[kind], " ", case_name, ": ", CodeName(code));
  const std::string message = outcome.status.error_message().substr(0, 200);
  if (outcome.seconds > outcome.deadline_seconds + 10) {
    tally.fatal.push_back(absl::StrFormat("%s answered after %.1f s, its deadline %.0f s", what,
                                          outcome.seconds, outcome.deadline_seconds));
  }
  if (code == grpc::StatusCode::UNAVAILABLE ||
      (code == grpc::StatusCode::DEADLINE_EXCEEDED && kind != kWatch)) {
    tally.fatal.push_back(absl::StrCat(what, " \"", message, "\""));
  }
  if (std::find(expected.begin(), expected.end(), code) == expected.end()) {
    auto [it, inserted] = tally.unexpected.emplace(
        what, std::make_pair(int64_t{0}, absl::StrCat("\"", message, "\" (after ", previous, ")")));
    ++it->second.first;
  }
}

// ---------------------------------------------------------------------------------------------
// The jobs the clients saw.
// ---------------------------------------------------------------------------------------------

bool Ended(proto::JobState s) {
  return s == proto::JOB_STATE_SUCCEEDED || s == proto::JOB_STATE_FAILED ||
         s == proto::JOB_STATE_CANCELLED;
}

// A job's end as a client saw it.
struct SeenEnd {
  proto::JobState state = proto::JOB_STATE_UNSPECIFIED;
  // Whether step and loss were seen (CancelJob's answer has the state alone).
  bool has_result = false;
  uint64_t step = 0;
  double loss = 0;
  std::string via;

  bool SameResult(const SeenEnd& o) const {
    const bool same_loss = loss == o.loss || (std::isnan(loss) && std::isnan(o.loss));
    return state == o.state && (!has_result || !o.has_result || (step == o.step && same_loss));
  }
  std::string DebugString() const {
    return has_result ? absl::StrFormat("%s step %d loss %.17g (%s)", proto::JobState_Name(state),
                                        step, loss, via)
                      : absl::StrCat(proto::JobState_Name(state), " (", via, ")");
  }
};

// Every job the clients submitted, and the end each was last seen with. Thread-safe: one
// mutex guards all.
class JobRegistry {
 public:
  void Submitted(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    ids_.push_back(id);
    submitted_.insert(id);
    pending_.insert(id);
  }

  // Records what a client saw of job `id`; a job seen ended and later seen otherwise (another
  // state, step or loss) is counted in changes().
  void Saw(const std::string& id, proto::JobState state, bool has_result, uint64_t step,
           double loss, const char* via) {
    if (!Ended(state)) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (!submitted_.count(id)) return;
    pending_.erase(id);
    SeenEnd seen{state, has_result, step, loss, via};
    auto [it, inserted] = ended_.emplace(id, seen);
    if (inserted) return;
    if (!it->second.SameResult(seen) && changes_.size() < 20) {
      changes_.push_back(absl::StrCat("job ", id, " seen as ", it->second.DebugString(),
                                      ", later as ", seen.DebugString()));
    }
    if (has_result || !it->second.has_result) it->second = seen;
  }

  // Returns a job submitted recently (among the last 64), or "" before the first.
  std::string Recent(std::mt19937_64& rng) {
    std::lock_guard<std::mutex> lock(mu_);
    if (ids_.empty()) return "";
    const size_t window = std::min<size_t>(64, ids_.size());
    return ids_[ids_.size() - 1 - rng() % window];
  }

  // Returns the oldest job not yet seen ended when `max_pending` or more are unfinished,
  // else "".
  std::string OldestPendingOver(int max_pending) {
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<int>(pending_.size()) < max_pending) return "";
    while (oldest_ < ids_.size() && !pending_.count(ids_[oldest_])) ++oldest_;
    return oldest_ < ids_.size() ? ids_[oldest_] : "";
  }

  std::map<std::string, SeenEnd> ended() const {
    std::lock_guard<std::mutex> lock(mu_);
    return ended_;
  }
  size_t submitted() const {
    std::lock_guard<std::mutex> lock(mu_);
    return ids_.size();
  }
  std::vector<std::string> changes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return changes_;
  }

 private:
  mutable std::mutex mu_;
  // In submission order; ids_[oldest_] is the oldest job not seen ended (or the end).
  std::vector<std::string> ids_;
  size_t oldest_ = 0;
  std::set<std::string> submitted_;
  std::set<std::string> pending_;
  std::map<std::string, SeenEnd> ended_;
  std::vector<std::string> changes_;
};

// ---------------------------------------------------------------------------------------------
// Requests.
// ---------------------------------------------------------------------------------------------

proto::ModelSource Zoo(const std::string& name, uint64_t batch,
                       std::map<std::string, int64_t> options = {}) {
  proto::ModelSource m;
  m.mutable_zoo()->set_name(name);
  m.mutable_zoo()->set_batch(batch);
  for (const auto& [key, value] : options) (*m.mutable_zoo()->mutable_options())[key] = value;
  return m;
}

// A Plan case: the first answer is the reference every later one must equal.
struct PlanCase {
  std::string name;
  proto::PlanRequest request;
  std::once_flag once;
  grpc::StatusCode code = grpc::StatusCode::OK;
  uint64_t peak_bytes = 0;
  int sections = 0;
};

// Returns the Plan cases: small and medium zoo models with no budget, 60% and 80% of their
// plain step's peak (`plain_peak` plans each without a budget), and an infeasible 1 MiB.
absl::StatusOr<std::vector<std::unique_ptr<PlanCase>>> PlanCases(proto::Headroom::Stub& stub) {
  const std::vector<std::pair<std::string, proto::ModelSource>> models = {
      {"mlp-small", Zoo("mlp", 64, {{"depth", 4}, {"width", 128}, {"input", 64}})},
      {"mlp-medium", Zoo("mlp", 512, {{"depth", 8}, {"width", 256}, {"input", 64}})},
      {"resnet18-b8", Zoo("resnet18", 8, {{"image_size", 128}})},
      {"mobilenet_v2-b4", Zoo("mobilenet_v2", 4, {{"image_size", 128}})},
      {"transformer-small", Zoo("transformer", 2,
                                {{"layers", 4},
                                 {"d_model", 256},
                                 {"heads", 4},
                                 {"sequence", 128},
                                 {"vocab", 8192},
                                 {"positions", 128}})}};
  std::vector<std::unique_ptr<PlanCase>> cases;
  for (const auto& [name, model] : models) {
    proto::PlanRequest plain;
    *plain.mutable_model() = model;
    proto::PlanResponse answer;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    const grpc::Status s = stub.Plan(&context, plain, &answer);
    if (!s.ok()) {
      return absl::InternalError(absl::StrCat("Plan of ", name, " without a budget: ",
                                              CodeName(s.error_code()), " ", s.error_message()));
    }
    const uint64_t peak = answer.summary().predicted_peak_bytes();
    const std::vector<std::pair<std::string, uint64_t>> budgets = {
        {"none", 0}, {"60%", peak * 6 / 10}, {"80%", peak * 8 / 10}, {"1MiB", kMiB}};
    for (const auto& [budget_name, budget] : budgets) {
      for (const char* preset : {"cpu", "h100"}) {
        auto c = std::make_unique<PlanCase>();
        c->name = absl::StrCat(name, "/", budget_name, "/", preset);
        *c->request.mutable_model() = model;
        c->request.mutable_options()->set_budget_bytes(budget);
        c->request.mutable_options()->mutable_device()->set_preset(preset);
        c->request.mutable_options()->set_host_memory(proto::HOST_MEMORY_SEPARATE);
        cases.push_back(std::move(c));
      }
    }
  }
  return cases;
}

proto::JobSpec TinyJob(std::mt19937_64& rng) {
  proto::JobSpec spec;
  spec.set_name("soak");
  *spec.mutable_model() = Zoo("mlp", 32, {{"depth", 3}, {"width", 64}, {"input", 32}});
  if (rng() % 2) spec.mutable_plan()->mutable_optimizer()->set_kind(proto::Optimizer::KIND_ADAM);
  spec.mutable_train()->set_steps(2 + rng() % 19);
  spec.mutable_train()->set_seed(1 + rng() % 1000);
  spec.mutable_train()->set_checkpoint_interval_steps(5);
  return spec;
}

// A malformed request sent through the typed stub, and the codes it may get.
struct BadCase {
  std::string name;
  std::function<grpc::Status(proto::Headroom::Stub&, grpc::ClientContext*)> call;
  std::vector<grpc::StatusCode> expected;
};

template <typename Request, typename Response>
using UnaryMethod = grpc::Status (proto::Headroom::Stub::*)(grpc::ClientContext*, const Request&,
                                                            Response*);

template <typename Request, typename Response>
std::function<grpc::Status(proto::Headroom::Stub&, grpc::ClientContext*)> Call(
    UnaryMethod<Request, Response> method, Request request) {
  return [method, request](proto::Headroom::Stub& stub, grpc::ClientContext* context) {
    Response response;
    return (stub.*method)(context, request, &response);
  };
}

// Returns the valid messages with values out of range, each with the codes it may get.
std::vector<BadCase> BadValueCases() {
  using grpc::StatusCode;
  const std::vector<StatusCode> invalid = {
      StatusCode::INVALID_ARGUMENT, StatusCode::RESOURCE_EXHAUSTED, StatusCode::OUT_OF_RANGE};
  const std::vector<StatusCode> not_found = {StatusCode::NOT_FOUND, StatusCode::INVALID_ARGUMENT};
  proto::PlanRequest mlp;
  *mlp.mutable_model() = Zoo("mlp", 64, {{"depth", 4}, {"width", 128}, {"input", 64}});
  std::vector<BadCase> cases;
  auto plan = [&](const std::string& name, const std::function<void(proto::PlanRequest&)>& edit) {
    proto::PlanRequest r = mlp;
    edit(r);
    cases.push_back({absl::StrCat("Plan ", name), Call(&proto::Headroom::Stub::Plan, r), invalid});
  };
  plan("alignment 2^62", [](auto& r) { r.mutable_options()->set_alignment_bytes(1ull << 62); });
  plan("alignment 3", [](auto& r) { r.mutable_options()->set_alignment_bytes(3); });
  plan("batch 2^40", [](auto& r) { r.mutable_model()->mutable_zoo()->set_batch(1ull << 40); });
  plan("mlp depth 10^6",
       [](auto& r) { (*r.mutable_model()->mutable_zoo()->mutable_options())["depth"] = 1000000; });
  plan("zoo option unknown",
       [](auto& r) { (*r.mutable_model()->mutable_zoo()->mutable_options())["nope"] = 1; });
  plan("zoo name unknown", [](auto& r) { r.mutable_model()->mutable_zoo()->set_name("nope"); });
  plan("no model", [](auto& r) { r.clear_model(); });
  plan("learning rate NaN",
       [](auto& r) { r.mutable_options()->mutable_optimizer()->set_learning_rate(std::nan("")); });
  plan("learning rate -inf", [](auto& r) {
    r.mutable_options()->mutable_optimizer()->set_learning_rate(
        -std::numeric_limits<double>::infinity());
  });
  plan("momentum 1.5",
       [](auto& r) { r.mutable_options()->mutable_optimizer()->set_momentum(1.5); });
  plan("adam beta1 2", [](auto& r) {
    r.mutable_options()->mutable_optimizer()->set_kind(proto::Optimizer::KIND_ADAM);
    r.mutable_options()->mutable_optimizer()->set_beta1(2);
  });
  plan("optimizer kind 99", [](auto& r) {
    r.mutable_options()->mutable_optimizer()->set_kind(static_cast<proto::Optimizer::Kind>(99));
  });
  plan("host_memory 7",
       [](auto& r) { r.mutable_options()->set_host_memory(static_cast<proto::HostMemory>(7)); });
  plan("device flops NaN", [](auto& r) {
    r.mutable_options()->mutable_device()->set_peak_flops_per_second(std::nan(""));
  });
  plan("device preset unknown",
       [](auto& r) { r.mutable_options()->mutable_device()->set_preset("tpu9"); });
  plan("graph format_version 999", [](auto& r) {
    r.mutable_model()->mutable_graph()->set_format_version(999);
    r.mutable_model()->mutable_graph()->set_loss("loss");
  });
  plan("graph unknown op", [](auto& r) {
    proto::GraphDef* g = r.mutable_model()->mutable_graph();
    proto::TensorDef* x = g->add_tensors();
    x->set_name("x");
    x->add_shape(4);
    x->set_dtype(proto::DTYPE_FLOAT32);
    x->set_role(proto::ROLE_INPUT);
    proto::NodeDef* n = g->add_nodes();
    n->set_name("n");
    n->set_op("NoSuchOp");
    n->add_inputs("x");
    n->add_outputs("loss");
    g->set_loss("loss");
  });

  auto submit = [&](const std::string& name, const std::function<void(proto::JobSpec&)>& edit) {
    std::mt19937_64 rng(1);
    proto::SubmitJobRequest r;
    *r.mutable_spec() = TinyJob(rng);
    edit(*r.mutable_spec());
    cases.push_back(
        {absl::StrCat("SubmitJob ", name), Call(&proto::Headroom::Stub::SubmitJob, r), invalid});
  };
  submit("steps 2^63", [](auto& s) { s.mutable_train()->set_steps(1ull << 63); });
  submit("steps 2^64-1", [](auto& s) { s.mutable_train()->set_steps(~0ull); });
  submit("steps 0", [](auto& s) { s.mutable_train()->set_steps(0); });
  submit("learning rate NaN",
         [](auto& s) { s.mutable_plan()->mutable_optimizer()->set_learning_rate(std::nan("")); });
  submit("weight decay NaN",
         [](auto& s) { s.mutable_plan()->mutable_optimizer()->set_weight_decay(std::nan("")); });
  submit("alignment 2^62", [](auto& s) { s.mutable_plan()->set_alignment_bytes(1ull << 62); });
  submit("backend unknown", [](auto& s) { s.mutable_train()->set_backend("tpu"); });

  proto::ProfileRequest profile;
  *profile.mutable_model() = mlp.model();
  profile.set_steps(~0u);
  cases.push_back(
      {"Profile steps 2^32-1", Call(&proto::Headroom::Stub::Profile, profile), invalid});

  proto::ListJobsRequest list_state;
  list_state.add_states(static_cast<proto::JobState>(99));
  cases.push_back(
      {"ListJobs state 99", Call(&proto::Headroom::Stub::ListJobs, list_state), invalid});
  proto::ListJobsRequest list_token;
  list_token.set_page_token("not-a-page-token");
  cases.push_back(
      {"ListJobs page_token unknown", Call(&proto::Headroom::Stub::ListJobs, list_token), invalid});

  proto::GetJobRequest get;
  get.set_job_id("no-such-job");
  cases.push_back({"GetJob unknown id", Call(&proto::Headroom::Stub::GetJob, get), not_found});
  get.set_job_id("");
  cases.push_back({"GetJob empty id", Call(&proto::Headroom::Stub::GetJob, get), not_found});
  get.set_job_id(std::string(1 << 20, 'x'));
  cases.push_back({"GetJob 1 MiB id", Call(&proto::Headroom::Stub::GetJob, get), not_found});
  proto::CancelJobRequest cancel;
  cancel.set_job_id("../../no-such-job");
  cases.push_back(
      {"CancelJob unknown id", Call(&proto::Headroom::Stub::CancelJob, cancel), not_found});
  proto::GetTimelineRequest timeline;
  timeline.set_job_id("no-such-job");
  timeline.set_max_samples(~0u);
  cases.push_back(
      {"GetTimeline unknown id", Call(&proto::Headroom::Stub::GetTimeline, timeline), not_found});
  proto::WatchJobRequest watch;
  watch.set_job_id("no-such-job");
  cases.push_back({"WatchJob unknown id",
                   [watch](proto::Headroom::Stub& stub, grpc::ClientContext* context) {
                     auto reader = stub.WatchJob(context, watch);
                     proto::JobProgress p;
                     while (reader->Read(&p)) {
                     }
                     return reader->Finish();
                   },
                   not_found});
  return cases;
}

// Returns bytes that no protobuf parser accepts (a field number 0, wire type 7, a length
// past the end, a varint of 11 bytes), followed by random bytes.
std::string UnparseableBytes(std::mt19937_64& rng) {
  static const std::vector<std::string> kPrefixes = {
      std::string(1, '\0'), "\x0f", "\x0a\xff\xff\xff\x0f", std::string(11, '\xff')};
  std::string bytes = kPrefixes[rng() % kPrefixes.size()];
  const size_t tail = rng() % 200;
  for (size_t i = 0; i < tail; ++i) bytes.push_back(static_cast<char>(rng()));
  return bytes;
}

// Returns the serialized Plan request of `bytes` (a graph whose name fills it).
std::string OversizedPlan(uint64_t bytes) {
  proto::PlanRequest r;
  r.mutable_model()->mutable_graph()->set_name(std::string(bytes, 'x'));
  return r.SerializeAsString();
}

// ---------------------------------------------------------------------------------------------
// A client.
// ---------------------------------------------------------------------------------------------

// Everything the clients share: read-only but for the cases' references and the registry.
struct Shared {
  const SoakOptions* options;
  std::string address;
  std::vector<std::unique_ptr<PlanCase>> plan_cases;
  std::vector<BadCase> bad_cases;
  std::string oversized;
  std::discrete_distribution<int> mix;
  JobRegistry jobs;
  std::atomic<int64_t> requests{0};
  // Set by the memory sampler when the daemon's /proc entry is gone: the clients stop.
  std::atomic<bool> daemon_died{false};
  Clock::time_point end;
};

std::shared_ptr<grpc::Channel> NewChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

class Client {
 public:
  Client(Shared& shared, uint64_t seed)
      : shared_(shared),
        rng_(seed),
        mix_(shared.mix),
        channel_(NewChannel(shared.address)),
        stub_(proto::Headroom::NewStub(channel_)),
        generic_(channel_) {}

  void Run() {
    while (Clock::now() < shared_.end && !shared_.daemon_died) {
      const Kind kind = static_cast<Kind>(mix_(rng_));
      switch (kind) {
        case kPlan:
          Plan();
          break;
        case kSubmit:
          Submit();
          break;
        case kWatch:
          Watch();
          break;
        case kCancel:
          Cancel();
          break;
        case kList:
          List();
          break;
        case kGet:
          Get(shared_.jobs.Recent(rng_));
          break;
        case kBytes:
          Bytes();
          break;
        case kValues:
          Values();
          break;
        case kOversized:
          Oversized();
          break;
        default:
          break;
      }
      ++shared_.requests;
    }
  }

  Tally& tally() { return tally_; }

 private:
  // Runs `call` with a context whose deadline is `deadline_seconds` away.
  Outcome Timed(double deadline_seconds,
                const std::function<grpc::Status(grpc::ClientContext*)>& call) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(static_cast<int64_t>(deadline_seconds * 1e3)));
    const Clock::time_point t0 = Clock::now();
    Outcome o;
    o.status = call(&context);
    o.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    o.deadline_seconds = deadline_seconds;
    return o;
  }
  double Deadline() const { return shared_.options->rpc_deadline_seconds; }

  // Counts `o` (see the free Count()) and remembers it as this channel's previous request.
  void Count(Kind kind, const std::string& case_name, const Outcome& o,
             const std::vector<grpc::StatusCode>& expected) {
    server::Count(tally_, kind, case_name, o, expected, previous_);
    previous_ =
        absl::StrCat(kKindLabels[kind], " ", case_name, ": ", CodeName(o.status.error_code()));
  }

  void Plan() {
    PlanCase& c = *shared_.plan_cases[rng_() % shared_.plan_cases.size()];
    proto::PlanResponse response;
    const Outcome o = Timed(Deadline(), [&](grpc::ClientContext* context) {
      return stub_->Plan(context, c.request, &response);
    });
    Count(kPlan, c.name, o, {grpc::StatusCode::OK, grpc::StatusCode::FAILED_PRECONDITION});
    const grpc::StatusCode code = o.status.error_code();
    if (code != grpc::StatusCode::OK && code != grpc::StatusCode::FAILED_PRECONDITION) return;
    std::call_once(c.once, [&] {
      c.code = code;
      c.peak_bytes = response.summary().predicted_peak_bytes();
      c.sections = response.sections_size();
    });
    if (code != c.code || (code == grpc::StatusCode::OK &&
                           (response.summary().predicted_peak_bytes() != c.peak_bytes ||
                            response.sections_size() != c.sections))) {
      tally_.fatal.push_back(absl::StrFormat(
          "Plan %s: %s peak %d with %d sections, first answer %s peak %d with %d sections", c.name,
          CodeName(code), response.summary().predicted_peak_bytes(), response.sections_size(),
          CodeName(c.code), c.peak_bytes, c.sections));
    }
  }

  void Submit() {
    const std::string oldest = shared_.jobs.OldestPendingOver(shared_.options->max_pending);
    if (!oldest.empty()) return Get(oldest);
    proto::SubmitJobRequest request;
    *request.mutable_spec() = TinyJob(rng_);
    proto::SubmitJobResponse response;
    const Outcome o = Timed(Deadline(), [&](grpc::ClientContext* context) {
      return stub_->SubmitJob(context, request, &response);
    });
    Count(kSubmit, "tiny mlp", o, {grpc::StatusCode::OK});
    if (o.status.ok()) shared_.jobs.Submitted(response.job_id());
  }

  void Watch() {
    const std::string id = shared_.jobs.Recent(rng_);
    if (id.empty()) return;
    proto::WatchJobRequest request;
    request.set_job_id(id);
    proto::JobProgress last;
    const Outcome o = Timed(1 + rng_() % 5, [&](grpc::ClientContext* context) {
      std::unique_ptr<grpc::ClientReader<proto::JobProgress>> reader =
          stub_->WatchJob(context, request);
      proto::JobProgress p;
      while (reader->Read(&p)) last = p;
      return reader->Finish();
    });
    Count(kWatch, "recent job", o, {grpc::StatusCode::OK, grpc::StatusCode::DEADLINE_EXCEEDED});
    if (o.status.ok()) {
      shared_.jobs.Saw(id, last.state(), true, last.step(), last.loss(), "WatchJob");
    }
  }

  void Cancel() {
    const std::string id = shared_.jobs.Recent(rng_);
    if (id.empty()) return;
    proto::CancelJobRequest request;
    request.set_job_id(id);
    proto::CancelJobResponse response;
    const Outcome o = Timed(Deadline(), [&](grpc::ClientContext* context) {
      return stub_->CancelJob(context, request, &response);
    });
    Count(kCancel, "recent job", o, {grpc::StatusCode::OK});
    if (o.status.ok()) shared_.jobs.Saw(id, response.state(), false, 0, 0, "CancelJob");
  }

  void List() {
    proto::ListJobsRequest request;
    const uint32_t sizes[] = {0, 10, 100, 1000};
    request.set_page_size(sizes[rng_() % 4]);
    if (rng_() % 4 == 0) request.add_states(proto::JOB_STATE_SUCCEEDED);
    proto::ListJobsResponse response;
    const Outcome o = Timed(Deadline(), [&](grpc::ClientContext* context) {
      return stub_->ListJobs(context, request, &response);
    });
    Count(kList, "first page", o, {grpc::StatusCode::OK});
    for (const proto::JobInfo& job : response.jobs()) {
      shared_.jobs.Saw(job.job_id(), job.state(), true, job.step(), job.loss(), "ListJobs");
    }
  }

  void Get(const std::string& id) {
    if (id.empty()) return;
    proto::GetJobRequest request;
    request.set_job_id(id);
    proto::JobInfo job;
    const Outcome o = Timed(Deadline(), [&](grpc::ClientContext* context) {
      return stub_->GetJob(context, request, &job);
    });
    Count(kGet, "recent job", o, {grpc::StatusCode::OK});
    if (o.status.ok()) shared_.jobs.Saw(id, job.state(), true, job.step(), job.loss(), "GetJob");
  }

  // Sends `bytes` to `method` through the generic stub.
  grpc::Status SendBytes(grpc::ClientContext* context, const std::string& method,
                         const grpc::ByteBuffer& request) {
    grpc::ByteBuffer response;
    std::promise<grpc::Status> done;
    generic_.UnaryCall(context, method, grpc::StubOptions(), &request, &response,
                       [&done](grpc::Status s) { done.set_value(std::move(s)); });
    return done.get_future().get();
  }

  void Bytes() {
    static const char* const kMethods[] = {"Plan",     "Profile",     "SubmitJob",
                                           "WatchJob", "CancelJob",   "ListJobs",
                                           "GetJob",   "GetTimeline", "ListProfiles"};
    const std::string method = kMethods[rng_() % 9];
    const std::string bytes = UnparseableBytes(rng_);
    grpc::Slice slice(bytes);
    const grpc::ByteBuffer request(&slice, 1);
    const Outcome o = Timed(Deadline(), [&](grpc::ClientContext* context) {
      return SendBytes(context, absl::StrCat(kService, method), request);
    });
    Count(kBytes, method, o,
          {grpc::StatusCode::INVALID_ARGUMENT, grpc::StatusCode::RESOURCE_EXHAUSTED});
  }

  void Values() {
    const BadCase& c = shared_.bad_cases[rng_() % shared_.bad_cases.size()];
    const Outcome o =
        Timed(Deadline(), [&](grpc::ClientContext* context) { return c.call(*stub_, context); });
    Count(kValues, c.name, o, c.expected);
  }

  void Oversized() {
    const std::string& bytes = shared_.oversized;
    grpc::Slice slice(bytes.data(), bytes.size(), grpc::Slice::STATIC_SLICE);
    const grpc::ByteBuffer request(&slice, 1);
    const Outcome o = Timed(Deadline(), [&](grpc::ClientContext* context) {
      return SendBytes(context, absl::StrCat(kService, "Plan"), request);
    });
    Count(kOversized, absl::StrCat("Plan of ", bytes.size(), " bytes"), o,
          {grpc::StatusCode::RESOURCE_EXHAUSTED, grpc::StatusCode::INVALID_ARGUMENT});
  }

  Shared& shared_;
  std::mt19937_64 rng_;
  // A copy of the shared mix: a distribution is not documented as safe to share.
  std::discrete_distribution<int> mix_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<proto::Headroom::Stub> stub_;
  grpc::GenericStub generic_;
  Tally tally_;
  // The last request this client sent, with its code, for the report.
  std::string previous_ = "none";
};

// ---------------------------------------------------------------------------------------------
// Resident memory.
// ---------------------------------------------------------------------------------------------

struct MemorySample {
  double seconds = 0;
  uint64_t rss_bytes = 0;
  uint64_t hwm_bytes = 0;
};

// Returns VmRSS and VmHWM of `pid` from /proc/PID/status; false when it is gone.
bool ReadMemory(pid_t pid, MemorySample& sample) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  bool found = false;
  while (std::getline(status, line)) {
    uint64_t kib = 0;
    if (line.rfind("VmRSS:", 0) == 0 &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::StripSuffix(line.substr(6), "kB")),
                         &kib)) {
      sample.rss_bytes = kib * 1024;
      found = true;
    }
    if (line.rfind("VmHWM:", 0) == 0 &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::StripSuffix(line.substr(6), "kB")),
                         &kib)) {
      sample.hwm_bytes = kib * 1024;
    }
  }
  return found;
}

// Returns /proc/loadavg's first three fields: how busy the machine was, beside the figures.
std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return absl::StrCat(one, " ", five, " ", fifteen);
}

// ---------------------------------------------------------------------------------------------
// The report.
// ---------------------------------------------------------------------------------------------

double Percentile(std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  return sorted[std::min(sorted.size() - 1, static_cast<size_t>(p * (sorted.size() - 1) + 0.5))];
}

void PrintRequests(Tally& all, double wall_seconds) {
  std::cout << absl::StrFormat("\n%-20s %9s %8s %9s %9s %9s  %s\n", "kind", "requests", "req/s",
                               "p50 ms", "p99 ms", "max ms", "codes");
  int64_t total = 0;
  for (int k = 0; k < kKinds; ++k) {
    std::vector<double>& s = all.seconds[k];
    std::sort(s.begin(), s.end());
    std::vector<std::string> codes;
    for (const auto& [code, n] : all.codes[k]) {
      if (n > 0) codes.push_back(absl::StrCat(CodeName(code), " ", n));
    }
    total += s.size();
    std::cout << absl::StrFormat("%-20s %9d %8.1f %9.1f %9.1f %9.1f  %s\n", kKindLabels[k],
                                 s.size(), s.size() / wall_seconds, Percentile(s, 0.5) * 1e3,
                                 Percentile(s, 0.99) * 1e3, s.empty() ? 0.0 : s.back() * 1e3,
                                 absl::StrJoin(codes, ", "));
  }
  std::cout << absl::StrFormat("%-20s %9d %8.1f\n", "total", total, total / wall_seconds);
}

// Prints resident memory over time; returns end / after-warm-up.
double PrintMemory(const std::vector<MemorySample>& samples, double warmup_seconds) {
  if (samples.empty()) {
    std::cout << "\nresident memory: not sampled (no --pid)\n";
    return 1;
  }
  std::cout << "\nresident memory (VmRSS from /proc/PID/status):\n";
  const size_t step = std::max<size_t>(1, samples.size() / 12);
  for (size_t i = 0; i < samples.size(); i += step) {
    std::cout << absl::StrFormat("  t=%5.0f s  %8.1f MiB\n", samples[i].seconds,
                                 samples[i].rss_bytes / double(kMiB));
  }
  const MemorySample* warm = &samples.back();
  for (const MemorySample& s : samples) {
    if (s.seconds >= warmup_seconds) {
      warm = &s;
      break;
    }
  }
  uint64_t max_rss = 0, max_after_warm = 0;
  for (const MemorySample& s : samples) {
    max_rss = std::max(max_rss, s.rss_bytes);
    if (s.seconds >= warm->seconds) max_after_warm = std::max(max_after_warm, s.rss_bytes);
  }
  const double ratio = double(samples.back().rss_bytes) / warm->rss_bytes;
  std::cout << absl::StrFormat(
      "  start %.1f MiB, after warm-up (t=%.0f s) %.1f MiB, max %.1f MiB (after warm-up %.1f "
      "MiB), end %.1f MiB; VmHWM %.1f MiB\n  growth after warm-up: end/warm %.3f, "
      "max/warm %.3f\n",
      samples.front().rss_bytes / double(kMiB), warm->seconds, warm->rss_bytes / double(kMiB),
      max_rss / double(kMiB), max_after_warm / double(kMiB),
      samples.back().rss_bytes / double(kMiB), samples.back().hwm_bytes / double(kMiB), ratio,
      double(max_after_warm) / warm->rss_bytes);
  return ratio;
}

// Returns every job ListJobs lists, by id, paging to the end.
absl::StatusOr<std::map<std::string, proto::JobInfo>> ListAll(proto::Headroom::Stub& stub) {
  std::map<std::string, proto::JobInfo> jobs;
  proto::ListJobsRequest request;
  request.set_page_size(100);
  do {
    proto::ListJobsResponse page;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    const grpc::Status s = stub.ListJobs(&context, request, &page);
    if (!s.ok()) {
      return absl::InternalError(
          absl::StrCat("ListJobs: ", CodeName(s.error_code()), " ", s.error_message()));
    }
    for (const proto::JobInfo& job : page.jobs()) jobs[job.job_id()] = job;
    request.set_page_token(page.next_page_token());
  } while (!request.page_token().empty());
  return jobs;
}

// Checks every job seen ended against ListJobs and GetJob; returns the problems.
std::vector<std::string> CheckEndedJobs(proto::Headroom::Stub& stub,
                                        const std::map<std::string, SeenEnd>& ended) {
  std::vector<std::string> problems;
  absl::StatusOr<std::map<std::string, proto::JobInfo>> listed = ListAll(stub);
  if (!listed.ok()) return {std::string(listed.status().message())};
  auto compare = [&](const std::string& id, const SeenEnd& seen, const proto::JobInfo& job,
                     const char* via) {
    const SeenEnd now{job.state(), true, job.step(), job.loss(), via};
    if (!seen.SameResult(now)) {
      problems.push_back(absl::StrCat("job ", id, " was seen ", seen.DebugString(), "; ", via,
                                      " says ", now.DebugString()));
    }
  };
  for (const auto& [id, seen] : ended) {
    auto it = listed->find(id);
    if (it == listed->end()) {
      problems.push_back(absl::StrCat("job ", id, " (", seen.DebugString(), ") not listed"));
    } else {
      compare(id, seen, it->second, "ListJobs");
    }
    proto::GetJobRequest request;
    request.set_job_id(id);
    proto::JobInfo job;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    const grpc::Status s = stub.GetJob(&context, request, &job);
    if (!s.ok()) {
      problems.push_back(
          absl::StrCat("GetJob ", id, ": ", CodeName(s.error_code()), " ", s.error_message()));
    } else {
      compare(id, seen, job, "GetJob");
    }
  }
  std::cout << absl::StrFormat("\nfinished jobs: %d seen ended, %d listed in all, %d problems\n",
                               ended.size(), listed->size(), problems.size());
  return problems;
}

absl::Status ParseMix(const std::string& mix, std::vector<double>& weights) {
  weights.assign(kKinds, 0);
  for (absl::string_view part : absl::StrSplit(mix, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(part, '=');
    const auto* it = std::find(std::begin(kKindNames), std::end(kKindNames), kv.first);
    double w = 0;
    if (it == std::end(kKindNames) || !absl::SimpleAtod(kv.second, &w) || w < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--mix: '", part, "' is not KIND=WEIGHT with KIND one of ",
                       absl::StrJoin(std::begin(kKindNames), std::end(kKindNames), ", ")));
    }
    weights[it - std::begin(kKindNames)] = w;
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  SoakOptions options;
  std::string binary = "server/headroomd";
  std::string address;
  pid_t pid = 0;
  std::vector<std::string> daemon_flags;
  bool keep_state = false;
  CLI::App app(
      "Soak benchmark: concurrent clients mixing every RPC and malformed requests "
      "against one headroomd.",
      "soak_bench");
  app.add_option("--headroomd", binary, "the daemon's binary to start")->capture_default_str();
  app.add_option("--daemon-flag", daemon_flags,
                 "a flag for the daemon started (repeat: --daemon-flag=--max-message-bytes "
                 "--daemon-flag=8MiB)");
  app.add_option("--address", address, "use this running daemon instead of starting one");
  app.add_option("--pid", pid, "the --address daemon's pid, for its resident memory");
  app.add_option("--clients", options.clients)->capture_default_str()->check(CLI::Range(1, 4096));
  app.add_option("--seconds", options.seconds, "how long the clients run")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("--warmup-seconds", options.warmup_seconds,
                 "resident memory after this is the reference for growth")
      ->capture_default_str();
  app.add_option("--rpc-deadline-seconds", options.rpc_deadline_seconds,
                 "deadline of every RPC but WatchJob")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{3600}));
  app.add_option("--max-pending", options.max_pending,
                 "unfinished jobs above which a submit becomes a GetJob")
      ->capture_default_str();
  app.add_option("--oversized-bytes", options.oversized_bytes,
                 "size of the oversized Plan (above the daemon's --max-message-bytes)")
      ->capture_default_str();
  app.add_option("--mix", options.mix, "weights of the request kinds")->capture_default_str();
  app.add_flag("--strict", options.strict,
               "also fail on unexpected codes and on resident growth over --rss-growth-limit");
  app.add_option("--rss-growth-limit", options.rss_growth_limit,
                 "end/after-warm-up resident ratio --strict accepts")
      ->capture_default_str();
  app.add_option("--seed", options.seed)->capture_default_str();
  app.add_flag("--keep-state", keep_state, "keep the started daemon's state directory");
  CLI11_PARSE(app, argc, argv);
  std::vector<double> weights;
  if (absl::Status s = ParseMix(options.mix, weights); !s.ok()) {
    std::cerr << s.message() << "\n";
    return 2;
  }

  // 1. The daemon: started here, or the one given.
  std::unique_ptr<DaemonProcess> daemon;
  std::string dir;
  if (address.empty()) {
    char dir_template[] = "/tmp/headroom-soak-XXXXXX";
    dir = mkdtemp(dir_template);
    DaemonOptions daemon_options;
    daemon_options.binary = binary;
    daemon_options.state_dir = dir + "/state";
    daemon_options.log_path = dir + "/headroomd.log";
    daemon_options.flags = daemon_flags;
    absl::StatusOr<std::unique_ptr<DaemonProcess>> started = DaemonProcess::Start(daemon_options);
    if (!started.ok()) return std::cerr << started.status().message() << "\n", 1;
    daemon = *std::move(started);
    address = daemon->address();
    pid = daemon->pid();
    std::cout << "headroomd pid " << pid << " on " << address << ", state and log in " << dir
              << "\n";
  }

  // 2. The cases, and each Plan model's plain peak.
  Shared shared;
  shared.options = &options;
  shared.address = address;
  shared.mix = std::discrete_distribution<int>(weights.begin(), weights.end());
  {
    auto stub = proto::Headroom::NewStub(NewChannel(address));
    absl::StatusOr<std::vector<std::unique_ptr<PlanCase>>> cases = PlanCases(*stub);
    if (!cases.ok()) return std::cerr << cases.status().message() << "\n", 1;
    shared.plan_cases = *std::move(cases);
  }
  shared.bad_cases = BadValueCases();
  shared.oversized = OversizedPlan(options.oversized_bytes);
  std::cout << absl::StrFormat(
      "%d clients for %d s on %d cores (load average %s): %d Plan cases, %d malformed-value "
      "cases, mix %s\n",
      options.clients, options.seconds, std::thread::hardware_concurrency(), LoadAverage(),
      shared.plan_cases.size(), shared.bad_cases.size(), options.mix);

  // 3. The clients, and the memory sampler with a progress line every 30 s.
  const Clock::time_point start = Clock::now();
  shared.end = start + std::chrono::seconds(options.seconds);
  std::vector<std::unique_ptr<Client>> clients;
  for (int c = 0; c < options.clients; ++c) {
    clients.push_back(std::make_unique<Client>(shared, options.seed * 1000003 + c));
  }
  std::vector<std::thread> threads;
  for (auto& c : clients) threads.emplace_back([&c] { c->Run(); });
  std::vector<MemorySample> samples;
  std::atomic<bool> clients_done{false};
  std::thread sampler([&] {
    for (int64_t t = 0; !clients_done; ++t) {
      MemorySample s;
      s.seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (pid > 0) {
        if (!ReadMemory(pid, s)) {
          shared.daemon_died = true;
        } else {
          samples.push_back(s);
        }
      }
      if (t % 30 == 0) {
        std::cout << absl::StrFormat(
                         "t=%4.0f s  requests %8d  jobs submitted %6d  VmRSS %.1f MiB\n", s.seconds,
                         shared.requests.load(), shared.jobs.submitted(),
                         s.rss_bytes / double(kMiB))
                  << std::flush;
      }
      std::this_thread::sleep_until(start + std::chrono::seconds(t + 1));
    }
  });
  for (std::thread& t : threads) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  clients_done = true;
  sampler.join();

  // 4. The report.
  Tally all;
  for (auto& c : clients) all.Merge(c->tally());
  std::cout << "\nload average at the end: " << LoadAverage() << "\n";
  PrintRequests(all, wall);
  const double growth = PrintMemory(samples, options.warmup_seconds);
  const bool died = shared.daemon_died || (daemon != nullptr && !daemon->Running());
  std::vector<std::string> failures;
  if (died) failures.push_back(absl::StrCat("headroomd (pid ", pid, ") died during the run"));
  failures.insert(failures.end(), all.fatal.begin(), all.fatal.end());
  std::vector<std::string> job_problems;
  if (!died) {
    auto stub = proto::Headroom::NewStub(NewChannel(address));
    job_problems = CheckEndedJobs(*stub, shared.jobs.ended());
  }
  failures.insert(failures.end(), job_problems.begin(), job_problems.end());
  const std::vector<std::string> changes = shared.jobs.changes();
  failures.insert(failures.end(), changes.begin(), changes.end());
  std::cout << "\nunexpected codes (" << (options.strict ? "fail: --strict" : "shown, not failed")
            << "):\n";
  if (all.unexpected.empty()) std::cout << "  none\n";
  for (const auto& [what, entry] : all.unexpected) {
    std::cout << absl::StrFormat("  %6d x %s  %s\n", entry.first, what, entry.second);
  }
  if (options.strict) {
    for (const auto& [what, entry] : all.unexpected) {
      failures.push_back(absl::StrCat(entry.first, " x ", what));
    }
    if (growth > options.rss_growth_limit) {
      failures.push_back(absl::StrFormat("resident memory grew %.3f x after warm-up (limit %.3f)",
                                         growth, options.rss_growth_limit));
    }
  }

  // 5. Stop the daemon started here, the clients' channels closed first.
  clients.clear();
  if (daemon != nullptr && daemon->Running()) {
    const Clock::time_point t0 = Clock::now();
    absl::StatusOr<int> exit_code = daemon->Terminate();
    if (!exit_code.ok()) {
      failures.push_back(std::string(exit_code.status().message()));
    } else {
      std::cout << absl::StrFormat("\nheadroomd exited %d %.1f s after SIGTERM\n", *exit_code,
                                   std::chrono::duration<double>(Clock::now() - t0).count());
      if (*exit_code != 0) {
        failures.push_back(
            absl::StrCat("headroomd exited ", *exit_code, "; its log ends:\n", daemon->LogTail()));
      }
    }
  }
  if (!dir.empty() && !keep_state && failures.empty()) {
    std::filesystem::remove_all(dir);
  }

  std::cout << "\n" << (failures.empty() ? "PASS" : "FAIL") << "\n";
  const size_t shown = std::min<size_t>(failures.size(), 40);
  for (size_t i = 0; i < shown; ++i) std::cout << "  " << failures[i] << "\n";
  if (failures.size() > shown) std::cout << "  ... and " << failures.size() - shown << " more\n";
  if (!failures.empty() && !dir.empty()) std::cout << "state and log kept in " << dir << "\n";
  return failures.empty() ? 0 : 1;
}

}  // namespace
}  // namespace headroom::server

int main(int argc, char** argv) { return headroom::server::Main(argc, argv); }
