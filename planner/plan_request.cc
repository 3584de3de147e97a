#include "planner/plan_request.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/mixed_precision.h"
#include "graph/summary.h"
#include "planner/collective_cost.h"
#include "planner/gradient_buckets.h"
#include "planner/placement_search.h"
#include "planner/reversible_search.h"
#include "util/status_macros.h"

namespace headroom::planner {
namespace {

// Sets the figures every plan has: the arena and its bounds, bytes by role, sizes.
void FillMemory(const MemoryPlan& memory, proto::PlanSummary& summary) {
  summary.set_arena_bytes(memory.arena_bytes);
  summary.set_lower_bound_bytes(memory.lower_bound_bytes);
  summary.set_no_sharing_bytes(memory.no_sharing_bytes);
  summary.set_num_tensors(memory.tensors.size());
  summary.set_num_steps(memory.num_positions);
  summary.clear_bytes_by_role();
  for (const auto& [role, bytes] : memory.bytes_by_role) {
    proto::RoleBytes* r = summary.add_bytes_by_role();
    r->set_role(role);
    r->set_bytes(bytes);
  }
}

// Returns the name of the node at schedule position `position` of `step` ("" for none).
std::string NodeName(const SectionedStep& step, int32_t position) {
  return position < 0 ? "" : step.graph.node(position).name;
}

// Adds every tensor's place in the arena, when the options ask for them.
void AddTensors(const MemoryPlan& memory, const proto::PlanOptions& options,
                proto::PlanResponse& response) {
  if (!options.tensors()) return;
  for (const PlannedTensor& t : memory.tensors) {
    proto::PlannedTensor* out = response.add_tensors();
    out->set_name(t.name);
    out->set_role(t.role);
    out->set_bytes(t.bytes);
    out->set_offset(t.offset);
    out->set_first_position(t.lifetime.first_position);
    out->set_last_position(t.lifetime.last_position);
    out->set_buffer(t.buffer);
  }
}

// Returns the data-parallel options `options` asks for with the interconnect preset defaulting
// to the device's ("cpu" on the cpu preset, else "nvlink+ib"), or the interconnect's error.
absl::StatusOr<DataParallelOptions> DataParallelOf(const proto::PlanOptions& options,
                                                   const std::string& device_preset) {
  const proto::DataParallelOptions& d = options.data_parallel();
  DataParallelOptions out;
  out.ranks = std::max<uint32_t>(1, d.ranks());
  out.bucket_bytes = d.bucket_bytes();
  out.sync_batch_norm = d.sync_batch_norm();
  absl::StatusOr<InterconnectSpec> link =
      InterconnectSpecFromProto(d.interconnect(), device_preset == "cpu" ? "cpu" : "nvlink+ib");
  if (!link.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("options.data_parallel.", link.status().message()));
  }
  out.interconnect = *std::move(link);
  // The ranks must fit the interconnect's nodes: an empty allreduce says whether they do.
  absl::StatusOr<double> fits = AllreduceSeconds(0, out.ranks, out.interconnect);
  if (!fits.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("options.data_parallel.ranks: ", fits.status().message()));
  }
  return out;
}

// Sets the ranks' figures of `dp` (the chosen plan's, `plain`'s for the plain step) into
// `summary`: the step times with the allreduces and the buckets' bytes.
void FillDataParallel(const DataParallelOptions& options, const DataParallelStep& dp,
                      const DataParallelStep& plain, proto::PlanSummary& summary) {
  summary.set_predicted_step_seconds(dp.step_seconds);
  summary.set_unconstrained_step_seconds(plain.step_seconds);
  proto::DataParallelSummary& d = *summary.mutable_data_parallel();
  d.set_ranks(options.ranks);
  d.set_interconnect(options.interconnect.name);
  d.set_num_buckets(dp.buckets.size());
  d.set_communication_bytes(dp.communication_bytes);
  // The buckets are in the plan's arena (and its bytes by role, as COMMUNICATION).
  d.set_peak_with_communication_bytes(summary.predicted_peak_bytes());
  d.set_allreduce_seconds(dp.allreduce_seconds);
  d.set_exposed_allreduce_seconds(dp.exposed_seconds);
  d.set_single_rank_step_seconds(dp.single_rank_step_seconds);
  d.set_scaling_efficiency(dp.scaling_efficiency());
  d.set_batch_norm_allreduces(dp.batch_norm_allreduces);
  d.set_batch_norm_allreduce_seconds(dp.batch_norm_seconds);
}

// Returns `points`, each with `extra_bytes` and `extra_seconds` (the ranks' buckets and
// allreduces; 0 without ranks) and marked bf16 or not.
std::vector<TradeOffPoint> Shifted(std::vector<TradeOffPoint> points, uint64_t extra_bytes,
                                   double extra_seconds, bool bf16) {
  for (TradeOffPoint& p : points) {
    p.peak_bytes += extra_bytes;
    p.step_seconds += extra_seconds;
    p.bf16 = bf16;
  }
  return points;
}

// Adds `points` to the frontier.
void AddPoints(const std::vector<TradeOffPoint>& points, proto::PlanResponse& response) {
  for (const TradeOffPoint& p : points) {
    proto::FrontierPoint* f = response.add_frontier();
    f->set_peak_bytes(p.peak_bytes);
    f->set_step_seconds(p.step_seconds);
    f->set_strategy(p.strategy);
    f->set_num_sections(p.num_sections);
    f->set_offloaded_bytes(p.offloaded_bytes);
    f->set_optimizer_state_on_host(p.optimizer_state_on_host);
    f->set_parameters_on_host(p.parameters_on_host);
    f->set_precision(p.bf16 ? "bf16" : "fp32");
  }
}

// A training step's answer in one precision, its frontier and baselines apart (empty unless
// the options ask for the frontier), so answers in two precisions can be merged.
struct TrainingAnswer {
  proto::PlanResponse response;
  std::vector<TradeOffPoint> frontier;
  std::vector<TradeOffPoint> baselines;
};

// The forward pass alone: a sharing plan, no sections.
absl::StatusOr<proto::PlanResponse> AnswerInference(const graph::Graph& forward,
                                                    const proto::PlanOptions& options,
                                                    const PlannerOptions& planner_options) {
  if (options.budget_bytes() > 0 || options.frontier()) {
    return absl::InvalidArgumentError(
        "options.inference: a budget or frontier plans a training step, not inference");
  }
  ASSIGN_OR_RETURN(MemoryPlan memory, PlanMemory(forward, planner_options));
  proto::PlanResponse response;
  proto::PlanSummary& summary = *response.mutable_summary();
  FillMemory(memory, summary);
  summary.set_predicted_peak_bytes(memory.arena_bytes);
  summary.set_unconstrained_peak_bytes(memory.arena_bytes);
  summary.set_strategy("inference");
  AddTensors(memory, options, response);
  return response;
}

}  // namespace

absl::Status CheckPlanOptions(const proto::PlanOptions& options, const std::string& prefix) {
  const uint64_t alignment = options.alignment_bytes();
  if (alignment != 0 && ((alignment & (alignment - 1)) != 0 || alignment > kMaxAlignmentBytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, ".alignment_bytes: ", alignment, " is not a power of two at most ",
                     kMaxAlignmentBytes));
  }
  if (!proto::HostMemory_IsValid(options.host_memory())) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, ".host_memory: ", options.host_memory(),
        " is not a HostMemory (0 HOST_MEMORY_BACKEND, 1 HOST_MEMORY_SHARED, 2 HOST_MEMORY_SEPARATE)"));
  }
  if (!proto::OptimizerState_IsValid(options.optimizer_state())) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, ".optimizer_state: ", options.optimizer_state(),
        " is not an OptimizerState (0 OPTIMIZER_STATE_DEVICE, 1 OPTIMIZER_STATE_HOST, 2 "
        "OPTIMIZER_STATE_AUTO)"));
  }
  if (!proto::ParameterPlacement_IsValid(options.parameters())) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, ".parameters: ", options.parameters(),
                     " is not a ParameterPlacement (0 PARAMETERS_DEVICE, 1 PARAMETERS_HOST, 2 "
                     "PARAMETERS_AUTO)"));
  }
  if (options.parameters() == proto::PARAMETERS_HOST &&
      options.optimizer_state() == proto::OPTIMIZER_STATE_DEVICE) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, ".parameters: PARAMETERS_HOST needs ", prefix,
        ".optimizer_state HOST or AUTO (the host update's master copies are what each use "
        "prefetches)"));
  }
  if (!proto::Precision_IsValid(options.precision())) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, ".precision: ", options.precision(),
                     " is not a Precision (0 PRECISION_FP32, 1 PRECISION_BF16, 2 "
                     "PRECISION_AUTO)"));
  }
  if (!(options.max_rebuild_error() >= 0) || !std::isfinite(options.max_rebuild_error())) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, ".max_rebuild_error: ", options.max_rebuild_error(),
                     " is not a finite number >= 0"));
  }
  if (options.data_parallel().ranks() > kMaxRanks) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, ".data_parallel.ranks: ", options.data_parallel().ranks(),
                     " is more than ", kMaxRanks));
  }
  return CheckOptimizer(options.optimizer(), absl::StrCat(prefix, ".optimizer"));
}

absl::Status CheckOptimizer(const proto::Optimizer& optimizer, const std::string& prefix) {
  if (!proto::Optimizer::Kind_IsValid(optimizer.kind())) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, ".kind: ", optimizer.kind(),
                     " is not an Optimizer.Kind (0 unspecified, 1 SGD with momentum, 2 Adam)"));
  }
  // NaN fails every comparison, so each rule is written as what a good value satisfies.
  auto positive = [](double x) { return std::isfinite(x) && x > 0; };
  auto unit = [](double x) { return x >= 0 && x < 1; };
  struct Rule {
    const char* field;
    bool set;  // Checked only when set: unset means the default.
    double value;
    bool ok;
    const char* needs;
  };
  const proto::Optimizer& o = optimizer;
  const double lr = o.learning_rate();
  const Rule rules[] = {
      {"learning_rate", lr != 0, lr, positive(lr), "a positive finite number (0: default)"},
      {"momentum", o.has_momentum(), o.momentum(), unit(o.momentum()), "in [0, 1)"},
      {"beta1", o.has_beta1(), o.beta1(), unit(o.beta1()), "in [0, 1)"},
      {"beta2", o.has_beta2(), o.beta2(), unit(o.beta2()), "in [0, 1)"},
      {"epsilon", o.has_epsilon(), o.epsilon(), positive(o.epsilon()), "a positive finite number"},
      {"weight_decay", true, o.weight_decay(),
       std::isfinite(o.weight_decay()) && o.weight_decay() >= 0, "a finite number >= 0"},
  };
  for (const Rule& rule : rules) {
    if (rule.set && !rule.ok) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, ".", rule.field, ": ", rule.value, " is not ", rule.needs));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<PlannerOptions> PlannerOptionsFromProto(const proto::PlanOptions& options) {
  RETURN_IF_ERROR(CheckPlanOptions(options, "options"));
  PlannerOptions planner_options;
  planner_options.training.inference = options.inference();
  if (options.optimizer().kind() != proto::Optimizer::KIND_UNSPECIFIED) {
    planner_options.training.optimizer = options.optimizer().kind();
  }
  if (options.alignment_bytes() != 0) planner_options.alignment_bytes = options.alignment_bytes();
  return planner_options;
}

proto::PlanResponse SectionPlanToProto(const SectionPlan& plan, const SectionPlan& plain,
                                       uint64_t budget_bytes, bool host_pool_in_budget,
                                       const std::string& cost_model) {
  const SectionedStep& step = *plan.step;
  proto::PlanResponse response;
  proto::PlanSummary& summary = *response.mutable_summary();
  FillMemory(*plan.memory, summary);
  summary.set_budget_bytes(budget_bytes);
  summary.set_predicted_peak_bytes(plan.peak_bytes);
  summary.set_predicted_step_seconds(plan.step_seconds);
  summary.set_overhead_ratio(plan.overhead_ratio);
  summary.set_recompute_flops(step.recompute_flops);
  summary.set_offloaded_bytes(step.offloaded_bytes);
  summary.set_copy_wait_seconds(step.stall_seconds);
  summary.set_host_pool_bytes(plan.host_pool_bytes);
  summary.set_host_pool_in_budget(host_pool_in_budget);
  summary.set_strategy(plan.strategy);
  summary.set_unconstrained_peak_bytes(plain.peak_bytes);
  summary.set_unconstrained_step_seconds(plain.step_seconds);
  summary.set_cost_model(cost_model);
  summary.set_optimizer_state(OptimizerPlacementName(step.optimizer_state_on_host()));
  summary.set_optimizer_host_bytes(OptimizerHostBytes(step, plan.memory->alignment_bytes));
  summary.set_optimizer_copy_bytes(step.optimizer_copy_bytes);
  summary.set_host_update_seconds(step.host_update_seconds);
  summary.set_parameters(OptimizerPlacementName(step.parameters_on_host()));
  summary.set_parameter_copy_bytes(step.parameter_copy_bytes);
  for (size_t s = 0; s < step.sections.size(); ++s) {
    const SectionInfo& info = step.sections[s];
    proto::Section* section = response.add_sections();
    section->set_index(s);
    section->set_first_node(step.graph.node(info.begin).name);
    section->set_last_node(step.graph.node(info.end - 1).name);
    section->set_recompute_flops(info.recompute_flops);
    section->set_recomputed(info.recomputed);
    section->set_recompute_nodes(info.recompute_nodes);
    for (int32_t c : info.inner_cuts) section->add_inner_cut_nodes(step.graph.node(c).name);
    auto describe = [&](const CachedInput& c, proto::BoundaryTensor* b) {
      b->set_tensor(step.graph.tensor(c.tensor).name);
      b->set_bytes(c.bytes);
      b->set_placement(c.offloaded ? proto::PLACEMENT_HOST : proto::PLACEMENT_DEVICE);
      if (c.offloaded) {
        b->set_copy_out_issued_after(NodeName(step, c.copy_out_after_position));
        b->set_copy_out_awaited_at(NodeName(step, c.copy_out_await_position));
        b->set_prefetch_issued_at(NodeName(step, c.prefetch_position));
        b->set_prefetch_awaited_before(NodeName(step, c.first_use_position));
      }
    };
    for (const CachedInput& c : info.boundary) describe(c, section->add_boundary());
    for (const CachedInput& c : info.kept) describe(c, section->add_kept());
  }
  return response;
}

namespace {

// Returns the training plan of `forward` in its own precision (AnswerPlan's, for one graph).
absl::StatusOr<TrainingAnswer> AnswerTraining(const graph::Graph& forward,
                                              const proto::PlanOptions& options,
                                              const PlannerOptions& planner_options,
                                              const CostModel* cost, const PlanBackend& backend,
                                              const util::CancellationToken* cancel, bool bf16) {
  // 1. The training graph and the cost model (each linear in the graph's size).
  ASSIGN_OR_RETURN(TrainingGraph training,
                   TrainingGraph::Build(forward, planner_options.training));
  RETURN_IF_ERROR(util::CheckCancellation(cancel));
  std::unique_ptr<CostModel> roofline;
  if (cost == nullptr) {
    proto::DeviceModel model = options.device();
    if (model.preset().empty()) model.set_preset(backend.device_preset);
    ASSIGN_OR_RETURN(DeviceSpec device, DeviceSpecFromProto(model));
    roofline = std::make_unique<RooflineCostModel>(forward, device);
    cost = roofline.get();
  }
  const std::string device_preset =
      options.device().preset().empty() ? backend.device_preset : options.device().preset();
  ASSIGN_OR_RETURN(const DataParallelOptions dp, DataParallelOf(options, device_preset));
  // 2. The search: the plain step, then the plan for the budget.
  SearchOptions search_options;
  search_options.allow_offload = !options.disable_offload();
  search_options.host_pool_in_budget =
      HostPoolInBudget(options.host_memory(), backend.host_is_device_memory);
  search_options.alignment_bytes = planner_options.alignment_bytes;
  search_options.cancel = cancel;
  // A graph with reversible blocks: rebuild or keep each, beside cuts and offload; every
  // block rebuilt without a budget, as the trainer runs it.
  std::unique_ptr<ReversibleSearch> reversible;
  std::unique_ptr<PlacementSearch> placement;
  if (!forward.reversible_blocks().empty() && !options.disable_reversible()) {
    if (options.parameters() != proto::PARAMETERS_DEVICE) {
      return absl::InvalidArgumentError(
          "options.parameters: parameters on the host are not yet planned beside rebuilt "
          "reversible blocks; give options.disable_reversible (--no-reversible) or "
          "PARAMETERS_DEVICE");
    }
    ASSIGN_OR_RETURN(reversible, ReversibleSearch::Create(forward, training, *cost, search_options,
                                                          options.optimizer_state()));
  } else {
    ASSIGN_OR_RETURN(placement,
                     PlacementSearch::Create(training, *cost, search_options,
                                             options.optimizer_state(), options.parameters()));
  }
  ASSIGN_OR_RETURN(SectionPlan plain,
                   reversible ? reversible->Unconstrained() : placement->Unconstrained());
  // With ranks, the budget holds the gradient buckets beside the plan's arena.
  ASSIGN_OR_RETURN(DataParallelStep dp_plain, PredictDataParallelStep(*plain.step, *cost, dp));
  if (dp.sync_batch_norm && dp.ranks > 1 && dp_plain.batch_norm_allreduces == 0) {
    return absl::InvalidArgumentError(
        "options.data_parallel.sync_batch_norm: the model has no batch norm in training to "
        "synchronise");
  }
  const bool ranked = dp.ranks > 1;
  const uint64_t bucket_bytes = ranked ? dp_plain.communication_bytes : 0;
  SectionPlan plan = plain;
  if (reversible && options.budget_bytes() == 0) {
    ASSIGN_OR_RETURN(plan, reversible->RebuildAll());
  }
  if (options.budget_bytes() > 0) {
    if (options.budget_bytes() <= bucket_bytes) {
      return absl::FailedPreconditionError(absl::StrCat(
          "budget ", graph::HumanBytes(options.budget_bytes()), " does not hold the ", dp.ranks,
          " ranks' gradient buckets (", graph::HumanBytes(bucket_bytes), ") and a plan"));
    }
    const uint64_t budget = options.budget_bytes() - bucket_bytes;
    ASSIGN_OR_RETURN(plan, reversible ? reversible->Plan(budget) : placement->Plan(budget));
  }
  if (ranked) {
    // The buckets are tensors of the plan, laid out in its arena beside the rest, as the
    // trainer lays them out (planner/gradient_buckets.h).
    ASSIGN_OR_RETURN(plan, AddGradientBuckets(plan, dp.bucket_bytes));
    ASSIGN_OR_RETURN(plain, AddGradientBuckets(plain, dp.bucket_bytes));
    if (options.budget_bytes() > 0 && plan.peak_bytes > options.budget_bytes()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "budget ", graph::HumanBytes(options.budget_bytes()), ": the plan for it with the ",
          dp.ranks, " ranks' gradient buckets laid out beside it takes ",
          graph::HumanBytes(plan.peak_bytes)));
    }
  }
  proto::PlanResponse response = SectionPlanToProto(
      plan, plain, options.budget_bytes(), search_options.host_pool_in_budget, cost->name());
  if (reversible) {
    for (const std::string& name : BlockNames(forward, plan.rebuilt_blocks, true)) {
      response.mutable_summary()->add_rebuilt_blocks(name);
    }
    for (const std::string& name : BlockNames(forward, plan.rebuilt_blocks, false)) {
      response.mutable_summary()->add_kept_blocks(name);
    }
  }
  if (ranked) {
    ASSIGN_OR_RETURN(DataParallelStep dp_plan, PredictDataParallelStep(*plan.step, *cost, dp));
    FillDataParallel(dp, dp_plan, dp_plain, *response.mutable_summary());
  }
  AddTensors(*plan.memory, options, response);
  response.mutable_summary()->set_precision(bf16 ? "bf16" : "fp32");
  TrainingAnswer answer;
  // 3. The frontier, when asked. With ranks each point holds the buckets and the plain step's
  // exposed allreduce time: sections only add backward work behind each bucket, so a
  // sectioned plan hides at least as much (a bound, not each point's own schedule).
  if (options.frontier()) {
    ASSIGN_OR_RETURN(std::vector<TradeOffPoint> frontier,
                     reversible ? reversible->Frontier() : placement->Frontier());
    ASSIGN_OR_RETURN(std::vector<TradeOffPoint> baselines,
                     reversible ? reversible->Baselines() : placement->Baselines());
    const double exposed = ranked ? dp_plain.exposed_seconds : 0;
    answer.frontier = Shifted(std::move(frontier), bucket_bytes, exposed, bf16);
    answer.baselines = Shifted(std::move(baselines), bucket_bytes, exposed, bf16);
  }
  response.mutable_summary()->set_num_candidates(reversible ? reversible->num_candidates()
                                                            : placement->num_candidates());
  answer.response = std::move(response);
  return answer;
}

// Returns `answer`'s response with its frontier, then its baselines.
proto::PlanResponse WithFrontier(TrainingAnswer answer) {
  AddPoints(answer.frontier, answer.response);
  AddPoints(answer.baselines, answer.response);
  return std::move(answer.response);
}

// PRECISION_AUTO: the faster of the two answers that fit (float32 on a tie), the frontier
// over both; when neither fits, both refusals.
absl::StatusOr<proto::PlanResponse> ChoosePrecision(absl::StatusOr<TrainingAnswer> fp32,
                                                    absl::StatusOr<TrainingAnswer> bf16) {
  const auto seconds = [](const absl::StatusOr<TrainingAnswer>& a) -> absl::StatusOr<double> {
    if (!a.ok()) return a.status();
    return a->response.summary().predicted_step_seconds();
  };
  ASSIGN_OR_RETURN(const proto::Precision precision,
                   graph::ChooseFasterPrecision(seconds(fp32), seconds(bf16)));
  const bool take_bf16 = precision == proto::PRECISION_BF16;
  if (!fp32.ok()) return WithFrontier(*std::move(bf16));
  if (!bf16.ok()) return WithFrontier(*std::move(fp32));
  TrainingAnswer chosen = take_bf16 ? *std::move(bf16) : *std::move(fp32);
  const TrainingAnswer& other = take_bf16 ? *fp32 : *bf16;
  std::vector<TradeOffPoint> all = chosen.frontier;
  all.insert(all.end(), other.frontier.begin(), other.frontier.end());
  chosen.frontier = ParetoFrontier(std::move(all));
  chosen.baselines.insert(chosen.baselines.end(), other.baselines.begin(), other.baselines.end());
  chosen.response.mutable_summary()->set_num_candidates(chosen.response.summary().num_candidates() +
                                                        other.response.summary().num_candidates());
  return WithFrontier(std::move(chosen));
}

}  // namespace

absl::StatusOr<proto::PlanResponse> AnswerPlan(const graph::Graph& forward,
                                               const proto::PlanOptions& options,
                                               const CostModel* cost, const PlanBackend& backend,
                                               const util::CancellationToken* cancel) {
  ASSIGN_OR_RETURN(PlannerOptions planner_options, PlannerOptionsFromProto(options));
  planner_options.training.scratch = backend.scratch;
  RETURN_IF_ERROR(util::CheckCancellation(cancel));
  const proto::Precision precision = options.precision();
  if (precision != proto::PRECISION_FP32 && cost != nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("options.precision: ", graph::PrecisionName(precision),
                     " plans the mixed-precision graph, which the given cost model (a measured "
                     "profile of the float32 step) does not describe; plan it without one (the "
                     "roofline of options.device)"));
  }
  if (planner_options.training.inference) {
    if (options.data_parallel().ranks() > 1) {
      return absl::InvalidArgumentError(
          "options.data_parallel.ranks: ranks reduce gradients; an inference plan has none");
    }
    if (precision == proto::PRECISION_AUTO) {
      return absl::InvalidArgumentError(
          "options.precision: AUTO chooses by a training step's predicted time; an inference "
          "plan has none (ask for FP32 or BF16)");
    }
    if (precision == proto::PRECISION_BF16) {
      ASSIGN_OR_RETURN(const graph::Graph mixed, graph::ToMixedPrecision(forward));
      ASSIGN_OR_RETURN(proto::PlanResponse response,
                       AnswerInference(mixed, options, planner_options));
      response.mutable_summary()->set_precision("bf16");
      return response;
    }
    ASSIGN_OR_RETURN(proto::PlanResponse response,
                     AnswerInference(forward, options, planner_options));
    response.mutable_summary()->set_precision("fp32");
    return response;
  }
  if (precision == proto::PRECISION_FP32) {
    ASSIGN_OR_RETURN(TrainingAnswer answer, AnswerTraining(forward, options, planner_options, cost,
                                                           backend, cancel, false));
    return WithFrontier(std::move(answer));
  }
  // The mixed-precision graph (its own cost model: the roofline of its dtypes).
  ASSIGN_OR_RETURN(const graph::Graph mixed, graph::ToMixedPrecision(forward));
  RETURN_IF_ERROR(util::CheckCancellation(cancel));
  absl::StatusOr<TrainingAnswer> bf16 =
      AnswerTraining(mixed, options, planner_options, nullptr, backend, cancel, true);
  if (precision == proto::PRECISION_BF16) {
    if (!bf16.ok()) return bf16.status();
    return WithFrontier(*std::move(bf16));
  }
  RETURN_IF_ERROR(util::CheckCancellation(cancel));
  return ChoosePrecision(
      AnswerTraining(forward, options, planner_options, nullptr, backend, cancel, false),
      std::move(bf16));
}

}  // namespace headroom::planner
