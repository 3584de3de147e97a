#include "planner/collective_cost.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/gradient_buckets.h"
#include "util/status_macros.h"

namespace headroom::planner {
namespace {

// NCCL's ring model (src/graph/tuning.cc, protocol Simple): 8.4 us per collective, and per
// ring step 3.4 us over NVLink, 5.7 us over PCIe, 9.6 us over the network.
constexpr double kNcclOverheadSeconds = 8.4e-6;
constexpr double kNvlinkStepSeconds = 3.4e-6;
constexpr double kPcieStepSeconds = 5.7e-6;
constexpr double kNetStepSeconds = 9.6e-6;
// NVLink 4 on H100 SXM: 18 links, 900 GB/s both directions, 450 GB/s each way per GPU.
constexpr double kNvlinkBytesPerSecond = 450e9;
// InfiniBand NDR: 400 Gb/s = 50 GB/s each way, one NIC per GPU (DGX H100: 8 ConnectX-7).
constexpr double kIbBytesPerSecond = 50e9;
// PCIe Gen5 x16: 63 GB/s each way raw; 80% of it reached.
constexpr double kPcieBytesPerSecond = 50e9;
constexpr uint32_t kGpusPerNode = 8;

InterconnectSpec Preset(const std::string& name) {
  InterconnectSpec s;
  s.name = name;
  if (name == "nvlink") {
    s = {name, kNvlinkBytesPerSecond, kNvlinkStepSeconds, kGpusPerNode, 0, 0, kNcclOverheadSeconds};
  } else if (name == "ib") {
    // Every rank on its own node: the whole ring crosses the network.
    s = {name,
         kIbBytesPerSecond,
         kNetStepSeconds,
         1,
         kIbBytesPerSecond,
         kNetStepSeconds,
         kNcclOverheadSeconds};
  } else if (name == "pcie") {
    s = {name,
         kPcieBytesPerSecond,
         kPcieStepSeconds,
         kGpusPerNode,
         kIbBytesPerSecond,
         kNetStepSeconds,
         kNcclOverheadSeconds};
  } else if (name == "nvlink+ib") {
    s = {name,
         kNvlinkBytesPerSecond,
         kNvlinkStepSeconds,
         kGpusPerNode,
         kIbBytesPerSecond,
         kNetStepSeconds,
         kNcclOverheadSeconds};
  } else if (name == "cpu") {
    // OpenMPI over shared memory on one host, fitted to dist/allreduce_bench with 2 ranks on
    // this 2-core machine (docs/distributed.md, "Planning with ranks").
    s = {name, 2.8e9, 140e-6, 0, 0, 0, 0};
  }
  return s;
}

// Returns, by node, the bytes of each allreduce a synchronised batch norm issues there
// (dist/sync_batch_norm.h): a training forward (not a re-forward) 2, count and sum(x) (C + 1
// floats) then sum((x - mean)^2) (C); a backward that computes dx 1, count, sum(dy) and
// sum(dy * xhat) (2C + 1). C is dim 1 of the batch norm's input.
std::vector<std::vector<uint64_t>> BatchNormAllreduceBytes(const TrainingGraph& g) {
  const int64_t num_nodes = static_cast<int64_t>(g.nodes().size());
  std::vector<std::vector<uint64_t>> out(num_nodes);
  if (g.inference()) return out;
  // The input x of each batch norm, by forward node.
  absl::flat_hash_map<graph::NodeId, TensorId> input_of;
  for (NodeId n = 0; n < num_nodes; ++n) {
    const TrainingNode& node = g.node(n);
    if (node.kind == NodeKind::kForward && node.op == "BatchNorm" && !node.inputs.empty()) {
      input_of[node.forward_node] = node.inputs[0];
    }
  }
  for (NodeId n = 0; n < num_nodes; ++n) {
    const TrainingNode& node = g.node(n);
    auto it = input_of.find(node.forward_node);
    if (it == input_of.end()) continue;
    const graph::Shape& x = g.tensor(it->second).shape;
    const uint64_t channels = x.size() >= 2 ? static_cast<uint64_t>(x[1]) : 1;
    if (node.kind == NodeKind::kForward) {
      out[n] = {(channels + 1) * sizeof(float), channels * sizeof(float)};
    } else if (node.kind == NodeKind::kBackward) {
      for (TensorId o : node.outputs) {
        if (g.tensor(o).role == proto::ROLE_GRADIENT && g.tensor(o).forward_tensor == it->second) {
          out[n] = {(2 * channels + 1) * sizeof(float)};
        }
      }
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> InterconnectPresetNames() {
  return {"nvlink", "ib", "pcie", "nvlink+ib", "cpu"};
}

absl::StatusOr<InterconnectSpec> InterconnectPreset(absl::string_view name) {
  const std::vector<std::string> names = InterconnectPresetNames();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "interconnect '", name, "' is not a preset; choose one of ", absl::StrJoin(names, ", ")));
  }
  return Preset(std::string(name));
}

absl::StatusOr<InterconnectSpec> InterconnectSpecFromProto(const proto::InterconnectModel& model,
                                                           absl::string_view default_preset) {
  ASSIGN_OR_RETURN(InterconnectSpec spec,
                   InterconnectPreset(model.preset().empty() ? default_preset : model.preset()));
  struct Override {
    const char* field;
    double value;
    double* into;
  };
  const Override overrides[] = {
      {"bytes_per_second", model.bytes_per_second(), &spec.bytes_per_second},
      {"latency_seconds", model.latency_seconds(), &spec.latency_seconds},
      {"inter_node_bytes_per_second", model.inter_node_bytes_per_second(),
       &spec.inter_node_bytes_per_second},
      {"inter_node_latency_seconds", model.inter_node_latency_seconds(),
       &spec.inter_node_latency_seconds},
      {"collective_overhead_seconds", model.collective_overhead_seconds(),
       &spec.collective_overhead_seconds},
  };
  for (const Override& o : overrides) {
    if (!std::isfinite(o.value) || o.value < 0) {
      return absl::InvalidArgumentError(absl::StrCat("interconnect.", o.field, ": ", o.value,
                                                     " is not a finite number >= 0 (0: preset)"));
    }
    if (o.value > 0) *o.into = o.value;
  }
  if (model.ranks_per_node() > 0) spec.ranks_per_node = model.ranks_per_node();
  return spec;
}

double RingAllreduceSeconds(uint64_t bytes, uint32_t ranks, double bytes_per_second,
                            double latency_seconds) {
  if (ranks <= 1) return 0;
  const double n = ranks;
  return 2 * (n - 1) / n * static_cast<double>(bytes) / bytes_per_second +
         2 * (n - 1) * latency_seconds;
}

absl::StatusOr<double> AllreduceSeconds(uint64_t bytes, uint32_t ranks,
                                        const InterconnectSpec& link) {
  if (ranks <= 1) return 0.0;
  const uint32_t per_node = link.ranks_per_node == 0 ? ranks : std::min(link.ranks_per_node, ranks);
  if (per_node < ranks) {
    if (link.inter_node_bytes_per_second <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "interconnect ", link.name, ": ", ranks, " ranks exceed one node of ", per_node,
          " and it has no link across nodes; choose nvlink+ib (or another with ib across)"));
    }
    if (ranks % per_node != 0) {
      return absl::InvalidArgumentError(absl::StrCat("interconnect ", link.name, ": ", ranks,
                                                     " ranks do not fill nodes of ", per_node,
                                                     "; give a multiple of ", per_node));
    }
  }
  const uint32_t nodes = ranks / per_node;
  // Within the node: a reduce-scatter and an all-gather, a ring of per_node; across nodes,
  // each rank's 1/per_node share on a ring of `nodes`.
  double seconds = link.collective_overhead_seconds;
  if (per_node > 1) {
    seconds += RingAllreduceSeconds(bytes, per_node, link.bytes_per_second, link.latency_seconds);
  }
  if (nodes > 1) {
    const uint64_t share = (bytes + per_node - 1) / per_node;
    seconds += RingAllreduceSeconds(share, nodes, link.inter_node_bytes_per_second,
                                    link.inter_node_latency_seconds);
  }
  return seconds;
}

double DataParallelStep::scaling_efficiency() const {
  return step_seconds > 0 ? single_rank_step_seconds / step_seconds : 1.0;
}

double DataParallelStep::hidden_fraction() const {
  const double collectives = allreduce_seconds + batch_norm_seconds;
  return collectives > 0 ? 1.0 - exposed_seconds / collectives : 1.0;
}

absl::StatusOr<DataParallelStep> PredictDataParallelStep(const SectionedStep& step,
                                                         const CostModel& cost,
                                                         const DataParallelOptions& options) {
  const TrainingGraph& g = step.graph;
  const int64_t num_nodes = static_cast<int64_t>(g.nodes().size());
  // 1. Node seconds, scaled so that they sum to the step (its copy waits spread over them).
  std::vector<double> seconds(num_nodes);
  double sum = 0;
  for (NodeId n = 0; n < num_nodes; ++n) sum += seconds[n] = cost.NodeSeconds(g, n);
  const double scale = sum > 0 ? step.step_seconds / sum : 0;
  for (double& s : seconds) s *= scale;

  // 2. The compute stream without the updates; each update's gradient is complete where the
  // schedule placed the update (right after its last writer). Buckets close in that order and
  // go on one communication stream, each after its last gradient and the bucket before it.
  // A synchronised batch norm's allreduces block the compute stream and queue on the same
  // stream (one FIFO of collectives, as dist/ issues them).
  DataParallelStep out;
  out.single_rank_step_seconds = step.step_seconds;
  struct Update {
    double seconds;
    int32_t bucket;
  };
  std::vector<Update> updates;
  const std::vector<GradientBucket> groups = step.gradient_buckets.empty()
                                                 ? GroupGradients(g, options.bucket_bytes)
                                                 : step.gradient_buckets;
  std::vector<int32_t> bucket_of(num_nodes, -1);
  std::vector<int32_t> pending(groups.size());
  out.buckets.resize(groups.size());
  for (size_t k = 0; k < groups.size(); ++k) {
    out.buckets[k].bytes = groups[k].bytes;
    out.buckets[k].gradients = static_cast<int32_t>(groups[k].updates.size());
    pending[k] = out.buckets[k].gradients;
    for (NodeId u : groups[k].updates) bucket_of[u] = static_cast<int32_t>(k);
  }
  const std::vector<std::vector<uint64_t>> batch_norm =
      options.sync_batch_norm && options.ranks > 1 ? BatchNormAllreduceBytes(g)
                                                   : std::vector<std::vector<uint64_t>>(num_nodes);
  double t = 0, comm = 0;
  for (NodeId n = 0; n < num_nodes; ++n) {
    if (g.node(n).kind != NodeKind::kUpdate) {
      t += seconds[n];
      for (uint64_t bytes : batch_norm[n]) {
        double allreduce = 0;
        ASSIGN_OR_RETURN(allreduce, AllreduceSeconds(bytes, options.ranks, options.interconnect));
        t = comm = std::max(t, comm) + allreduce;
        out.batch_norm_seconds += allreduce;
        ++out.batch_norm_allreduces;
      }
      continue;
    }
    const int32_t k = bucket_of[n];
    updates.push_back({seconds[n], k});
    if (--pending[k] > 0) continue;
    // The bucket's last gradient: its allreduce starts once the stream is free.
    BucketTiming& b = out.buckets[k];
    double allreduce = 0;
    ASSIGN_OR_RETURN(allreduce, AllreduceSeconds(b.bytes, options.ranks, options.interconnect));
    b.ready_seconds = t;
    b.start_seconds = std::max(comm, t);
    b.end_seconds = comm = b.start_seconds + allreduce;
    out.allreduce_seconds += allreduce;
    out.communication_bytes += b.bytes;
  }
  out.backward_end_seconds = t;

  // 3. The updates after the backward, each waiting for its bucket.
  double end = out.backward_end_seconds;
  for (const Update& u : updates) {
    end = std::max(end, out.buckets[u.bucket].end_seconds) + u.seconds;
  }
  // With one rank the updates only move to the end: the same sum as the step itself.
  // (Rounding apart: never faster than the step alone.)
  out.step_seconds =
      options.ranks <= 1 ? step.step_seconds : std::max({end, comm, step.step_seconds});
  out.exposed_seconds = out.step_seconds - out.single_rank_step_seconds;
  return out;
}

}  // namespace headroom::planner
