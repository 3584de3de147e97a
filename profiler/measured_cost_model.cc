#include "profiler/measured_cost_model.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"
#include "graph/shape.h"
#include "util/file_io.h"
#include "util/status_macros.h"

namespace headroom::profiler {
namespace {

using planner::NodeKind;

// FNV-1a, 64 bits: stable across runs and builds, unlike absl::Hash.
class Fnv1a {
 public:
  void Add(absl::string_view s) {
    for (unsigned char c : s) {
      hash_ ^= c;
      hash_ *= 0x100000001b3ull;
    }
    hash_ ^= 0xff;  // A separator, so ("ab", "c") and ("a", "bc") differ.
    hash_ *= 0x100000001b3ull;
  }
  uint64_t hash() const { return hash_; }

 private:
  uint64_t hash_ = 0xcbf29ce484222325ull;
};

bool IsCopy(NodeKind kind) { return kind == NodeKind::kOffload || kind == NodeKind::kPrefetch; }

}  // namespace

std::string GraphFingerprint(const graph::Graph& forward) {
  Fnv1a h;
  h.Add(forward.name());
  for (const graph::Tensor& t : forward.tensors()) {
    h.Add(t.name);
    h.Add(graph::ShapeString(t.shape));
    h.Add(graph::DTypeName(t.dtype));
  }
  return absl::StrFormat("%016x", h.hash());
}

absl::StatusOr<proto::ProfileResponse> ReadProfileFile(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFileContents(path, "profile"));
  proto::ProfileResponse profile;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  const auto status = google::protobuf::util::JsonStringToMessage(text, &profile, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile '", path, "' is not a profile's JSON: ", status.ToString()));
  }
  return profile;
}

absl::StatusOr<std::unique_ptr<MeasuredCostModel>> MeasuredCostModel::Create(
    const graph::Graph& forward, const proto::ProfileResponse& profile,
    const planner::DeviceSpec& device) {
  const std::string fingerprint = GraphFingerprint(forward);
  if (profile.graph_fingerprint() != fingerprint) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the profile is of graph '", profile.graph_name(), "' (fingerprint ",
        profile.graph_fingerprint(), "), not of '", forward.name(), "' as given (fingerprint ",
        fingerprint, "): profile the same model at the same batch size"));
  }
  if ((profile.backend() == "cpu") != (device.name == "cpu")) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the profile was taken on the ", profile.backend(), " backend; it cannot stand in for "
        "the '", device.name, "' device: profile on that device, or plan for the preset ",
        "of the device profiled"));
  }
  int measured = 0;
  for (const proto::OpCost& op : profile.op_costs()) measured += op.runs() > 0 ? 1 : 0;
  if (measured == 0) {
    return absl::FailedPreconditionError(
        "the profile has no measured node times (on the cuda backend only launch times are "
        "recorded, which do not measure kernels)");
  }
  auto fallback = std::make_unique<planner::RooflineCostModel>(forward, device);
  std::string description =
      absl::StrFormat("measured (%s profile, %d steps) over %s", profile.backend(),
                      profile.step_seconds_size(), fallback ? fallback->name() : "nothing");
  std::unique_ptr<MeasuredCostModel> model(
      new MeasuredCostModel(std::move(fallback), std::move(description)));
  for (const proto::OpCost& op : profile.op_costs()) {
    if (op.runs() > 0) model->seconds_by_node_[op.node()] = op.seconds();
  }
  double rate = 0;
  for (double r : {profile.copy_to_host_bytes_per_second(),
                   profile.copy_to_device_bytes_per_second()}) {
    if (r > 0) rate = rate == 0 ? r : std::min(rate, r);
  }
  model->copy_bytes_per_second_ = rate;
  return model;
}

std::string MeasuredCostModel::name() const { return description_; }

double MeasuredCostModel::Measured(const planner::TrainingGraph& graph,
                                   planner::NodeId id) const {
  const planner::TrainingNode& node = graph.node(id);
  if (IsCopy(node.kind)) return -1;
  auto it = seconds_by_node_.find(node.name);
  if (it != seconds_by_node_.end()) return it->second;
  if (node.kind == NodeKind::kRecompute) {  // "<node>.recompute", "<node>.recompute2", ...
    const size_t suffix = node.name.rfind(".recompute");
    if (suffix != std::string::npos) it = seconds_by_node_.find(node.name.substr(0, suffix));
    if (it != seconds_by_node_.end()) return it->second;
  }
  return -1;
}

double MeasuredCostModel::NodeSeconds(const planner::TrainingGraph& graph,
                                      planner::NodeId id) const {
  const double measured = Measured(graph, id);
  if (measured >= 0) return measured;
  return fallback_ ? fallback_->NodeSeconds(graph, id) : 0;
}

uint64_t MeasuredCostModel::NodeFlops(const planner::TrainingGraph& graph,
                                      planner::NodeId id) const {
  return fallback_ ? fallback_->NodeFlops(graph, id) : 0;
}

double MeasuredCostModel::CopySeconds(uint64_t bytes) const {
  if (copy_bytes_per_second_ > 0) return static_cast<double>(bytes) / copy_bytes_per_second_;
  return fallback_ ? fallback_->CopySeconds(bytes) : 0;
}

double MeasuredCostModel::HostUpdateSeconds(uint64_t bytes) const {
  return fallback_ ? fallback_->HostUpdateSeconds(bytes) : 0;
}

double MeasuredCostModel::Coverage(const planner::TrainingGraph& graph) const {
  int compute = 0, found = 0;
  for (planner::NodeId id = 0; id < static_cast<planner::NodeId>(graph.nodes().size()); ++id) {
    if (IsCopy(graph.node(id).kind)) continue;
    ++compute;
    found += Measured(graph, id) >= 0 ? 1 : 0;
  }
  return compute == 0 ? 1.0 : static_cast<double>(found) / compute;
}

}  // namespace headroom::profiler
