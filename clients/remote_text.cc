#include "clients/remote_text.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "google/protobuf/util/json_util.h"
#include "graph/shape.h"
#include "graph/summary.h"
#include "profiler/profile_report.h"
#include "util/printable.h"

namespace headroom::clients {
namespace {

using graph::HumanBytes;

// Returns "12.30 GFLOP" style text for a count of floating-point operations.
std::string HumanFlops(uint64_t flops) {
  static const std::vector<std::string> kUnits = {"FLOP",  "KFLOP", "MFLOP",
                                                  "GFLOP", "TFLOP", "PFLOP"};
  return graph::HumanUnits(flops, 1000.0, kUnits, 2);
}

// Returns "42s", "5m", "3h" or "2d".
std::string AgeText(double seconds) {
  const int64_t s = std::max<int64_t>(0, static_cast<int64_t>(seconds));
  if (s < 60) return absl::StrCat(s, "s");
  if (s < 3600) return absl::StrCat(s / 60, "m");
  if (s < 86400) return absl::StrCat(s / 3600, "h");
  return absl::StrCat(s / 86400, "d");
}

// Returns `rows` (the first the header) as left-aligned columns two spaces apart.
std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const std::vector<std::string>& row : rows) {
    widths.resize(std::max(widths.size(), row.size()), 0);
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  std::string out;
  for (const std::vector<std::string>& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      absl::StrAppend(&line, row[c], std::string(widths[c] - row[c].size() + 2, ' '));
    }
    out += std::string(absl::StripTrailingAsciiWhitespace(line)) + "\n";
  }
  return out;
}

// Returns "name bytes" pairs sorted by bytes, largest first.
template <typename Map>
std::vector<std::pair<std::string, uint64_t>> LargestFirst(const Map& bytes_by_name) {
  std::vector<std::pair<std::string, uint64_t>> sorted(bytes_by_name.begin(), bytes_by_name.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return sorted;
}

std::string PlacementName(proto::Placement placement) {
  switch (placement) {
    case proto::PLACEMENT_DEVICE:
      return "DEVICE";
    case proto::PLACEMENT_HOST:
      return "HOST";
    default:
      return "UNDECIDED";
  }
}

// The plan's peak against its budget, step time, recompute and offload.
std::string SummaryLines(const proto::PlanSummary& s) {
  std::string out;
  if (s.strategy() == "inference") {
    return absl::StrFormat("%-24s %s (inference: the forward pass alone)\n", "predicted peak",
                           HumanBytes(s.predicted_peak_bytes()));
  }
  if (s.budget_bytes() > 0) {
    absl::StrAppendFormat(&out, "%-24s %s of the %s budget (%.0f%%)\n", "predicted peak",
                          HumanBytes(s.predicted_peak_bytes()), HumanBytes(s.budget_bytes()),
                          100.0 * s.predicted_peak_bytes() / s.budget_bytes());
  } else {
    absl::StrAppendFormat(&out, "%-24s %s (no budget)\n", "predicted peak",
                          HumanBytes(s.predicted_peak_bytes()));
  }
  absl::StrAppendFormat(&out, "%-24s %.4f s, %.2fx the step with no sections%s\n",
                        "predicted step", s.predicted_step_seconds(), s.overhead_ratio(),
                        s.cost_model().empty() ? "" : absl::StrCat(" (", s.cost_model(), ")"));
  if (s.precision() == "bf16") {
    absl::StrAppendFormat(&out, "%-24s %s\n", "precision",
                          "bf16 mixed (activations and their gradients bfloat16; parameters, "
                          "the gradients the update reads and optimizer state float32)");
  } else if (!s.precision().empty()) {
    absl::StrAppendFormat(&out, "%-24s %s\n", "precision", s.precision());
  }
  absl::StrAppendFormat(&out, "%-24s %s per step\n", "recomputed", HumanFlops(s.recompute_flops()));
  absl::StrAppendFormat(&out, "%-24s %s per step\n", "offloaded to host",
                        HumanBytes(s.offloaded_bytes()));
  if (s.optimizer_state() == "host") {
    absl::StrAppendFormat(&out,
                          "%-24s host: %s of the host pool (master parameters, gradients, "
                          "state), %s copied per step, host update %.4f s\n",
                          "optimizer state", HumanBytes(s.optimizer_host_bytes()),
                          HumanBytes(s.optimizer_copy_bytes()), s.host_update_seconds());
  } else if (!s.optimizer_state().empty()) {
    absl::StrAppendFormat(&out, "%-24s %s\n", "optimizer state", s.optimizer_state());
  }
  if (s.parameters() == "host") {
    absl::StrAppendFormat(&out,
                          "%-24s host between uses: %s of device copies prefetched per step "
                          "(their masters in the host pool)\n",
                          "parameters", HumanBytes(s.parameter_copy_bytes()));
  }
  if (s.rebuilt_blocks_size() + s.kept_blocks_size() > 0) {
    absl::StrAppendFormat(
        &out, "%-24s %d of %d rebuilt%s%s\n", "reversible blocks", s.rebuilt_blocks_size(),
        s.rebuilt_blocks_size() + s.kept_blocks_size(),
        s.rebuilt_blocks_size() > 0 ? absl::StrCat(": ", absl::StrJoin(s.rebuilt_blocks(), " "))
                                    : "",
        s.kept_blocks_size() > 0 ? absl::StrCat("; kept: ", absl::StrJoin(s.kept_blocks(), " "))
                                 : "");
  }
  if (s.has_data_parallel()) {
    const proto::DataParallelSummary& d = s.data_parallel();
    absl::StrAppendFormat(
        &out,
        "%-24s %d over %s: %d bucket(s), %s in all (peak with them %s); allreduce "
        "%.4f s, %.4f s of it exposed; one rank %.4f s, scaling efficiency "
        "%.1f%%\n",
        "ranks", d.ranks(), d.interconnect(), d.num_buckets(), HumanBytes(d.communication_bytes()),
        HumanBytes(d.peak_with_communication_bytes()), d.allreduce_seconds(),
        d.exposed_allreduce_seconds(), d.single_rank_step_seconds(),
        100.0 * d.scaling_efficiency());
    if (d.batch_norm_allreduces() > 0) {
      absl::StrAppendFormat(&out,
                            "%-24s %d allreduce(s) a step, %.4f s on the critical path (in the "
                            "exposed time above)\n",
                            "sync batch norm", d.batch_norm_allreduces(),
                            d.batch_norm_allreduce_seconds());
    }
  }
  return out;
}

// Each section: its nodes, whether its forward is recomputed, the tensors it caches and those
// of its own it keeps rather than recompute.
std::string SectionsText(const proto::PlanResponse& plan) {
  std::string out = absl::StrFormat("sections (%d):\n", plan.sections_size());
  for (const proto::Section& s : plan.sections()) {
    absl::StrAppendFormat(&out, "  #%-3d %s .. %s  %s\n", s.index(), s.first_node(), s.last_node(),
                          s.recompute_flops() > 0
                              ? absl::StrCat("recomputed (", HumanFlops(s.recompute_flops()), ")")
                              : "kept");
    for (const std::string& node : s.inner_cut_nodes()) {
      absl::StrAppendFormat(&out, "        inner cut before %s (re-runs again for its chunk)\n",
                            node);
    }
    for (const proto::BoundaryTensor& b : s.boundary()) {
      absl::StrAppendFormat(&out, "        caches %-32s %11s  %s\n", b.tensor(),
                            HumanBytes(b.bytes()), PlacementName(b.placement()));
    }
    for (const proto::BoundaryTensor& b : s.kept()) {
      absl::StrAppendFormat(&out, "        keeps  %-32s %11s  %s\n", b.tensor(),
                            HumanBytes(b.bytes()), PlacementName(b.placement()));
    }
  }
  return out;
}

std::string RolesText(const proto::PlanSummary& s) {
  std::string out = "bytes by role (no sharing):\n";
  for (const proto::RoleBytes& r : s.bytes_by_role()) {
    absl::StrAppendFormat(&out, "  %-22s %11s\n", graph::RoleName(r.role()), HumanBytes(r.bytes()));
  }
  return out;
}

std::string FrontierText(const proto::PlanResponse& plan) {
  std::vector<std::vector<std::string>> rows = {{"  PEAK", "STEP S", "STRATEGY"}};
  for (const proto::FrontierPoint& p : plan.frontier()) {
    rows.push_back({"  " + HumanBytes(p.peak_bytes()), absl::StrFormat("%.5f", p.step_seconds()),
                    p.strategy() + (p.precision() == "bf16" ? ", bf16" : "") +
                        (p.parameters_on_host()        ? ", optimizer state and parameters on host"
                         : p.optimizer_state_on_host() ? ", optimizer state on host"
                                                       : "")});
  }
  return "frontier (peak, predicted step time):\n" + Table(rows);
}

}  // namespace

std::string ProgressBar(int64_t done, int64_t total) {
  constexpr int kWidth = 20;
  const int filled = static_cast<int>(kWidth * done / std::max<int64_t>(total, 1));
  return "[" + std::string(filled, '#') + std::string(kWidth - filled, '.') + "]";
}

std::string JobStateName(proto::JobState state) {
  return std::string(absl::StripPrefix(proto::JobState_Name(state), "JOB_STATE_"));
}

std::string ProtoJson(const google::protobuf::Message& message, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  options.add_whitespace = pretty;
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

namespace {

// Returns every tensor's place in the arena: offset, size, the positions it is alive at.
std::string TensorsText(const proto::PlanResponse& plan) {
  std::vector<std::vector<std::string>> rows = {
      {"TENSOR", "ROLE", "OFFSET", "BYTES", "FIRST", "LAST", "BUFFER"}};
  for (const proto::PlannedTensor& t : plan.tensors()) {
    rows.push_back({Printable(t.name()), graph::RoleName(t.role()), absl::StrCat(t.offset()),
                    absl::StrCat(t.bytes()), absl::StrCat(t.first_position()),
                    absl::StrCat(t.last_position()), absl::StrCat(t.buffer())});
  }
  return "tensors (offset and size in bytes, alive from position FIRST to LAST):\n" + Table(rows);
}

}  // namespace

std::string PlanText(const proto::PlanResponse& plan) {
  const proto::PlanSummary& s = plan.summary();
  std::string out = SummaryLines(s);
  absl::StrAppendFormat(&out, "%-24s %s (lower bound %s, no sharing %s)\n", "arena",
                        HumanBytes(s.arena_bytes()), HumanBytes(s.lower_bound_bytes()),
                        HumanBytes(s.no_sharing_bytes()));
  absl::StrAppendFormat(&out, "%-24s %d tensors, %d positions\n",
                        s.strategy() == "inference" ? "forward graph" : "training graph",
                        s.num_tensors(), s.num_steps());
  out += SectionsText(plan) + RolesText(s);
  if (plan.frontier_size() > 0) out += FrontierText(plan);
  if (plan.tensors_size() > 0) out += TensorsText(plan);
  return out;
}

std::string PlanBrief(const proto::PlanResponse& plan) {
  int recomputed = 0, offloaded = 0;
  for (const proto::Section& s : plan.sections()) {
    recomputed += s.recompute_flops() > 0;
    for (const proto::BoundaryTensor& b : s.boundary())
      offloaded += b.placement() == proto::PLACEMENT_HOST;
    for (const proto::BoundaryTensor& b : s.kept()) offloaded += b.placement() == proto::PLACEMENT_HOST;
  }
  const proto::PlanSummary& s = plan.summary();
  std::string out = SummaryLines(s);
  absl::StrAppendFormat(&out, "%-24s %d of %d section(s) recomputed, %d tensor(s) offloaded\n",
                        "split", recomputed, plan.sections_size(), offloaded);
  return out + SectionsText(plan);
}

std::string FitText(const proto::FitProgress& f) {
  std::string text = absl::StrFormat("epoch %d/%d", f.epoch(), f.total_epochs());
  if (f.evaluated()) {
    absl::StrAppendFormat(&text, "  val acc %.2f%% loss %.4f (epoch %d)", 100 * f.eval_accuracy(),
                          f.eval_loss(), f.eval_epoch());
  }
  absl::StrAppendFormat(&text, "  input wait %.2f%%", 100 * f.input_wait_fraction());
  if (!f.stop_reason().empty()) absl::StrAppend(&text, "  ", Printable(f.stop_reason()));
  return text;
}

std::string ProgressLine(const proto::JobProgress& p) {
  std::vector<std::pair<std::string, uint64_t>> by_role;
  for (const proto::RoleBytes& r : p.memory_by_role()) {
    if (r.bytes() > 0) by_role.emplace_back(graph::RoleName(r.role()), r.bytes());
  }
  by_role = LargestFirst(by_role);
  std::vector<std::string> memory;
  for (size_t i = 0; i < by_role.size() && i < 3; ++i) {
    memory.push_back(absl::StrCat(by_role[i].first, " ", HumanBytes(by_role[i].second)));
  }
  if (by_role.size() > 3) memory.push_back(absl::StrCat("+", by_role.size() - 3, " more"));
  std::string line = absl::StrFormat(
      "%s %d/%d  loss %.5f  %.3f s/step  %s  peak %s  %s",
      ProgressBar(static_cast<int64_t>(p.step()), static_cast<int64_t>(p.total_steps())), p.step(),
      p.total_steps(), p.loss(), p.step_seconds(),
      !memory.empty()      ? absl::StrJoin(memory, ", ")
      : p.ranks_size() > 0 ? "memory per rank in [ ]"
                           : "no memory in use",
      HumanBytes(p.measured_peak_bytes()), JobStateName(p.state()));
  if (p.has_fit()) absl::StrAppend(&line, "  ", FitText(p.fit()));
  if (!p.message().empty()) absl::StrAppend(&line, " (", Printable(p.message()), ")");
  // A data-parallel job: every rank's memory (the loss above is rank 0's, the global batch's).
  for (const proto::RankProgress& r : p.ranks()) {
    absl::StrAppendFormat(&line, "  [rank %d: step %d, arena %s, resident %s]", r.rank(), r.step(),
                          HumanBytes(r.arena_peak_bytes()), HumanBytes(r.resident_bytes()));
  }
  return line;
}

std::string JobsTable(const std::vector<proto::JobInfo>& jobs, double now_unix_seconds) {
  if (jobs.empty()) return "no jobs\n";
  std::vector<std::vector<std::string>> rows = {{"JOB", "NAME", "STATE", "STEP", "PLANNED PEAK",
                                                 "MEASURED PEAK", "LOSS", "AGE", "NOTE"}};
  for (const proto::JobInfo& j : jobs) {
    rows.push_back({Printable(j.job_id()), j.name().empty() ? "-" : Printable(j.name()),
                    JobStateName(j.state()),
                    absl::StrCat(j.step(), "/", j.total_steps()),
                    HumanBytes(j.planned_peak_bytes()),
                    j.measured_peak_bytes() > 0 ? HumanBytes(j.measured_peak_bytes()) : "-",
                    j.step() > 0 ? absl::StrFormat("%.4f", j.loss()) : "-",
                    j.submitted_unix_seconds() > 0
                        ? AgeText(now_unix_seconds - j.submitted_unix_seconds())
                        : "-",
                    Printable(j.error().empty() ? j.message() : j.error())});
  }
  return Table(rows);
}

std::string PeakText(const proto::MemoryTimeline& t, int rows) {
  std::string out = absl::StrFormat("%-24s %s at step %d, node %s (%s), %.3f s\n", "peak",
                                    HumanBytes(t.peak_bytes()), t.peak_step(),
                                    t.peak_node().empty() ? "-" : t.peak_node(),
                                    t.peak_op().empty() ? "-" : t.peak_op(),
                                    t.peak_time_seconds());
  absl::StrAppendFormat(&out, "%-24s %s\n", "arena high-water", HumanBytes(t.high_water_bytes()));
  if (t.has_process()) {
    absl::StrAppendFormat(&out, "%-24s %s\n", "physical (process)",
                          ProcessMemoryLine(t.process()));
  }
  out += "peak by role:\n";
  for (const auto& [role, bytes] : LargestFirst(t.peak_bytes_by_role())) {
    absl::StrAppendFormat(&out, "  %-22s %11s\n", role, HumanBytes(bytes));
  }
  std::vector<std::vector<std::string>> table = {{"  TENSOR", "ROLE", "BYTES", "PRODUCER"}};
  for (int i = 0; i < rows && i < t.peak_live_size(); ++i) {
    const proto::LiveTensor& l = t.peak_live(i);
    table.push_back({"  " + l.tensor(), l.memory_role(), HumanBytes(l.bytes()),
                     l.producer().empty() ? "-" : l.producer()});
  }
  absl::StrAppendFormat(&out, "largest live tensors at the peak (%d of %d):\n",
                        table.size() - 1, t.peak_live_size());
  return out + Table(table);
}

std::string DeviceBytesChart(const proto::MemoryTimeline& t, int width, int height) {
  if (t.samples().empty()) return "no samples\n";
  // 1. Each column holds the highest sample of its stretch of time; a column no sample
  //    falls in repeats the one before.
  const double t0 = t.samples(0).time_seconds();
  const double span = t.samples(t.samples_size() - 1).time_seconds() - t0;
  std::vector<uint64_t> column(width, 0);
  std::vector<bool> seen(width, false);
  for (const proto::TimelineSample& s : t.samples()) {
    const int c =
        span > 0 ? static_cast<int>(std::lround((s.time_seconds() - t0) / span * (width - 1))) : 0;
    const int at = std::clamp(c, 0, width - 1);
    column[at] = std::max(column[at], s.device_bytes());
    seen[at] = true;
  }
  for (int c = 1; c < width; ++c) {
    if (!seen[c]) column[c] = column[c - 1];
  }
  const uint64_t top = std::max<uint64_t>(1, *std::max_element(column.begin(), column.end()));
  // 2. Rows from the top: a column is filled up to its share of the highest sample.
  std::string out;
  for (int r = height; r >= 1; --r) {
    std::string line = absl::StrFormat("%10s |", r == height ? HumanBytes(top) : "");
    for (int c = 0; c < width; ++c) {
      const double filled = std::ceil(static_cast<double>(column[c]) / top * height);
      line += filled >= r ? '#' : ' ';
    }
    out += std::string(absl::StripTrailingAsciiWhitespace(line)) + "\n";
  }
  absl::StrAppendFormat(&out, "%10s +%s\n", "0 B", std::string(width, '-'));
  const std::string end = absl::StrFormat("%.3f s", t0 + span);
  const std::string start = absl::StrFormat("%.3f s", t0);
  const int gap = std::max<int>(1, width - static_cast<int>(start.size() + end.size()));
  absl::StrAppendFormat(&out, "%10s  %s%s%s\n", "", start, std::string(gap, ' '), end);
  return out;
}

std::string ProcessMemoryLine(const proto::ProcessMemory& p) {
  if (!p.unavailable_reason().empty())
    return absl::StrCat("not measured: ", p.unavailable_reason());
  return absl::StrFormat("peak %s = baseline %s + arena %s + host pool %s + unplanned %s "
                         "(bound %s)%s",
                         HumanBytes(p.physical_peak_bytes()), HumanBytes(p.baseline_bytes()),
                         HumanBytes(p.arena_bytes()), HumanBytes(p.host_pool_bytes()),
                         HumanBytes(p.unplanned_bytes()), HumanBytes(p.unplanned_limit_bytes()),
                         profiler::UnplannedWithinBound(p) ? "" : ": OVER THE BOUND");
}

namespace {

// Returns CUPTI's account of physical device memory against the arena and workspaces, or
// why there is none; "" when the profile says nothing of it.
std::string CuptiText(const proto::PhysicalMemory& p) {
  if (!p.unavailable_reason().empty()) {
    return absl::StrFormat("%-24s %s\n", "physical (CUPTI)", p.unavailable_reason());
  }
  if (p.allocations() == 0) return "";
  std::string out = absl::StrFormat(
      "%-24s peak %s in %d allocation(s); arena + workspace %s (%+.1f%%)\n", "physical (CUPTI)",
      HumanBytes(p.peak_device_bytes()), p.allocations(), HumanBytes(p.expected_bytes()),
      p.expected_bytes() > 0
          ? 100.0 * (static_cast<double>(p.peak_device_bytes()) / p.expected_bytes() - 1)
          : 0.0);
  if (p.dropped_records() + p.unmatched_frees() + p.replaced_allocations() > 0) {
    absl::StrAppendFormat(&out,
                          "%-24s incomplete: %d record(s) dropped, %d unmatched free(s), "
                          "%d replaced allocation(s)\n",
                          "", p.dropped_records(), p.unmatched_frees(), p.replaced_allocations());
  }
  return out;
}

// Returns the `rows` slowest nodes of a profile with their share of the step.
std::string SlowestNodesText(const proto::ProfileResponse& p, int rows) {
  std::vector<const proto::OpCost*> ops;
  double total = 0;
  for (const proto::OpCost& op : p.op_costs()) {
    ops.push_back(&op);
    total += op.seconds();
  }
  if (ops.empty()) return "";
  std::sort(ops.begin(), ops.end(), [](const proto::OpCost* a, const proto::OpCost* b) {
    return a->seconds() > b->seconds();
  });
  std::string out = absl::StrFormat("\nslowest nodes (median of %d step(s); %.4f s in all):\n",
                                    ops.front()->runs(), total);
  for (int i = 0; i < rows && i < static_cast<int>(ops.size()); ++i) {
    absl::StrAppendFormat(&out, "  %-44s %-22s %9.3f ms %5.1f%%\n", ops[i]->node(), ops[i]->op(),
                          ops[i]->seconds() * 1e3,
                          total > 0 ? 100.0 * ops[i]->seconds() / total : 0.0);
  }
  return out;
}

}  // namespace

std::string ProfileText(const proto::ProfileResponse& p, int rows) {
  std::string out = absl::StrFormat("%-24s %s on %s, %d step(s)%s\n", "profiled", Printable(p.graph_name()),
                                    p.backend(), p.step_seconds_size(),
                                    p.profile_id().empty() ? "" : " as " + p.profile_id());
  absl::StrAppendFormat(&out, "%-24s %s (predicted %s)\n", "measured peak",
                        HumanBytes(p.measured_peak_bytes()),
                        HumanBytes(p.plan().predicted_peak_bytes()));
  const double measured = p.median_step_seconds(), predicted = p.predicted_step_seconds();
  absl::StrAppendFormat(&out, "%-24s %.4f s (cost model predicted %.4f s, %.2fx)\n",
                        "median step", measured, predicted,
                        predicted > 0 ? measured / predicted : 0.0);
  if (p.offloaded_bytes() > 0) {
    absl::StrAppendFormat(&out, "%-24s %s per step; copy rates %.2f GB/s to host, %.2f GB/s back\n",
                          "offloaded", HumanBytes(p.offloaded_bytes()),
                          p.copy_to_host_bytes_per_second() * 1e-9,
                          p.copy_to_device_bytes_per_second() * 1e-9);
  }
  if (p.recompute_seconds() > 0) {
    absl::StrAppendFormat(&out, "%-24s %.4f s per step\n", "recomputed forward",
                          p.recompute_seconds());
  }
  if (p.has_process()) {
    absl::StrAppendFormat(&out, "%-24s %s\n", "physical (process)", ProcessMemoryLine(p.process()));
  }
  if (p.has_rebuild_check()) {
    const proto::RebuildCheck& c = p.rebuild_check();
    absl::StrAppendFormat(&out,
                          "%-24s max_rebuild_error %.3g over %d checked step(s) (every %d), "
                          "mismatched mask elements %d\n",
                          "rebuild check", c.max_rebuild_error(), c.checked_steps(),
                          c.every_steps(), c.mismatched_elements());
  }
  out += CuptiText(p.physical());
  return out + "\n" + PeakText(p.timeline(), rows) + SlowestNodesText(p, rows);
}

std::string ProfilesTable(const proto::ListProfilesResponse& profiles, double now_unix_seconds) {
  if (profiles.profiles().empty()) return "no profiles\n";
  std::vector<std::vector<std::string>> rows = {{"PROFILE", "AGE", "MODEL", "BACKEND", "STEPS",
                                                 "BUDGET", "MEASURED PEAK", "PREDICTED PEAK",
                                                 "MEDIAN STEP"}};
  for (const proto::StoredProfile& s : profiles.profiles()) {
    const proto::ProfileResponse& r = s.response();
    const uint64_t budget = s.request().plan().budget_bytes();
    const int steps = r.step_seconds_size() > 0 ? r.step_seconds_size()
                                                : static_cast<int>(s.request().steps());
    rows.push_back({s.profile_id(),
                    s.created_unix_seconds() > 0
                        ? AgeText(now_unix_seconds - s.created_unix_seconds())
                        : "-",
                    Printable(r.graph_name().empty() ? s.request().model().zoo().name() : r.graph_name()),
                    r.backend(), absl::StrCat(steps),
                    budget > 0 ? HumanBytes(budget) : "-", HumanBytes(r.measured_peak_bytes()),
                    HumanBytes(r.plan().predicted_peak_bytes()),
                    absl::StrFormat("%.4f s", r.median_step_seconds())});
  }
  return Table(rows);
}

}  // namespace headroom::clients
