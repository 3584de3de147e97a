#include "planner/cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/graph_io.h"
#include "graph/shape.h"
#include "util/status_macros.h"
#include "util/file_io.h"

namespace headroom::planner {
namespace {

// Datasheet figures, scaled by the share of them that real kernels reach: about 60% of the
// tensor-core peak for large fp32 (TF32) matmuls and convolutions, 80% of memory bandwidth,
// and what a pinned PCIe Gen5 x16 copy reaches (about 50 of 64 GB/s). The CPU preset is this
// project's build machine: 2 cores with AVX-512 under oneDNN, about 20 GB/s of memory
// bandwidth, and the arena-to-host-pool copy as a memcpy on the same memory.
constexpr double kComputeShare = 0.6;
constexpr double kBandwidthShare = 0.8;

// The host update rate: on this machine the update shares its 2 cores and 20 GB/s with the
// backward (10 GB/s); a PCIe host of an H100 or H200 streams a multithreaded AVX-512 Adam at
// about 30 GB/s (DeepSpeed's CPU-Adam reaches about a billion parameters a second, 28 bytes
// each); a Grace CPU's 72 cores on LPDDR5X (500 GB/s) about 200 GB/s. NVLink-C2C carries 450
// GB/s each way, of which copies reach about 80%.
//
// bf16: the H100's and H200's tensor cores reach 989.4 TFLOP/s dense bf16 (float32
// accumulation), twice TF32's, at the same share. This machine's AVX512-BF16 (vdpbf16ps: two
// bf16 products per float32 lane) gives oneDNN about twice its float32 rate: 2.0e11, an
// assumption (bench/bf16_rate.py measures it: see docs/planner.md).
constexpr double kH100Tf32 = 494.7e12;
constexpr double kH100Bf16 = 989.4e12;
DeviceSpec Cpu() { return {"cpu", 1.0e11, 1.6e10, 8.0e9, 2e-6, 1.0e10, 2.0e11}; }
DeviceSpec H100() {  // H100 SXM5: 494.7 TFLOP/s TF32 dense, 3.35 TB/s HBM3.
  return {"h100", kComputeShare * kH100Tf32, kBandwidthShare * 3.35e12, 50e9, 5e-6,
          3.0e10, kComputeShare * kH100Bf16};
}
DeviceSpec H200() {  // H200 SXM: the same compute, 4.8 TB/s HBM3e.
  return {"h200", kComputeShare * kH100Tf32, kBandwidthShare * 4.8e12, 50e9, 5e-6,
          3.0e10, kComputeShare * kH100Bf16};
}
DeviceSpec Gh200() {  // GH200: the H100's compute, 4 TB/s HBM3, NVLink-C2C to a Grace CPU.
  return {"gh200", kComputeShare * kH100Tf32, kBandwidthShare * 4.0e12, 360e9, 5e-6,
          2.0e11,  kComputeShare * kH100Bf16};
}

bool IsViewOp(const graph::Graph& g, graph::NodeId f) {
  const std::string& op = g.node(f).op->name;
  return op == "Flatten" || op == "Reshape";
}

uint64_t Numel(const graph::Graph& g, graph::TensorId t) {
  return graph::NumElements(g.tensor(t).shape);
}

// Returns the flops of forward node `f`.
uint64_t ForwardFlops(const graph::Graph& g, graph::NodeId f) {
  const graph::Node& n = g.node(f);
  const std::string& op = n.op->name;
  const uint64_t out = Numel(g, n.outputs[0]);
  const uint64_t in = Numel(g, n.inputs[0]);
  if (op == "MatMul") {
    const graph::Shape& a = g.tensor(n.inputs[0]).shape;
    const int64_t k = n.attrs.Bool("transpose_a") ? a[a.size() - 2] : a.back();
    return 2 * out * static_cast<uint64_t>(k) + (n.inputs.size() > 2 ? out : 0);
  }
  if (op == "Conv2D") {
    const graph::Shape& w = g.tensor(n.inputs[1]).shape;
    return 2 * out * (Numel(g, n.inputs[1]) / static_cast<uint64_t>(w[0]));
  }
  if (op == "ConvTranspose2D") {
    // Each input element meets every weight of its channel's group: C_out/groups kh kw.
    const graph::Shape& w = g.tensor(n.inputs[1]).shape;
    return 2 * in * (Numel(g, n.inputs[1]) / static_cast<uint64_t>(w[0])) +
           (n.inputs.size() > 2 ? out : 0);
  }
  if (op == "Resize") return n.attrs.String("mode") == "bilinear" ? 8 * out : out;
  if (op == "BatchNorm" || op == "LayerNorm" || op == "GroupNorm") return 8 * in;
  if (op == "Softmax" || op == "SoftmaxCrossEntropy" || op == "PixelSoftmaxCrossEntropy") {
    return 5 * in;
  }
  if (op == "GELU") return 10 * in;
  if (op == "Sigmoid" || op == "Tanh") return 4 * in;
  if (op == "HardSigmoid") return 3 * in;  // Multiply, add, clamp.
  if (op == "HardSwish") return 5 * in;    // Add, clamp, multiply, divide.
  if (op == "LeakyReLU" || op == "PReLU") return 2 * in;               // Compare, multiply.
  if (op == "ELU" || op == "SELU" || op == "Softplus") return 5 * in;  // An exp and a few.
  if (op == "Sqrt") return in;
  if (op == "Pow") return 10 * in;  // A general pow; its exact forms cost less.
  if (op == "Erf") return 10 * in;
  if (op == "Mish") return 12 * in;  // exp, log1p, tanh, multiply.
  if (op == "MaxPool" || op == "AvgPool" || op == "GlobalAvgPool") return std::max(in, out);
  if (op == "ReduceSum" || op == "ReduceMax" || op == "ReduceMin") return in;  // One per read.
  if (IsViewOp(g, f)) return 0;
  // Elementwise, copies and gathers (Transpose, Slice, Expand): about one operation per
  // element written.
  return out;
}

}  // namespace

std::vector<std::string> DevicePresetNames() { return {"cpu", "h100", "h200", "gh200"}; }

absl::StatusOr<DeviceSpec> DevicePreset(absl::string_view name) {
  if (name == "cpu") return Cpu();
  if (name == "h100") return H100();
  if (name == "h200") return H200();
  if (name == "gh200") return Gh200();
  return absl::InvalidArgumentError(absl::StrCat("unknown device preset '", name,
                                                 "'; the presets are ",
                                                 absl::StrJoin(DevicePresetNames(), ", ")));
}

absl::StatusOr<DeviceSpec> DeviceSpecFromProto(const proto::DeviceModel& model) {
  ASSIGN_OR_RETURN(DeviceSpec spec, DevicePreset(model.preset().empty() ? "cpu" : model.preset()));
  // A rate below 1 per second (1e-300, say) makes every time infinite, and an op overhead
  // over a second is no device's: both, like NaN and infinity, are refused.
  struct Field {
    const char* name;
    double value;
    double* target;
    double min_value;
    double max_value;
  };
  constexpr double kInf = std::numeric_limits<double>::infinity();
  for (const Field& f :
       {Field{"peak_flops_per_second", model.peak_flops_per_second(), &spec.peak_flops_per_second,
              1, kInf},
        Field{"memory_bytes_per_second", model.memory_bytes_per_second(),
              &spec.memory_bytes_per_second, 1, kInf},
        Field{"host_link_bytes_per_second", model.host_link_bytes_per_second(),
              &spec.host_link_bytes_per_second, 1, kInf},
        Field{"op_overhead_seconds", model.op_overhead_seconds(), &spec.op_overhead_seconds, 0, 1},
        Field{"host_update_bytes_per_second", model.host_update_bytes_per_second(),
              &spec.host_update_bytes_per_second, 1, kInf},
        Field{"bf16_flops_per_second", model.bf16_flops_per_second(), &spec.bf16_flops_per_second,
              1, kInf}}) {
    if (f.value == 0) continue;  // The preset's.
    if (!(std::isfinite(f.value) && f.value >= f.min_value && f.value <= f.max_value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "device.", f.name, ": ", f.value, " is not 0 (the preset's) or a finite number in [",
          f.min_value, ", ", f.max_value, "]"));
    }
    *f.target = f.value;
  }
  return spec;
}

absl::StatusOr<proto::DeviceModel> ReadDeviceModelFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileContents(path, "device file"));
  proto::DeviceModel model;
  RETURN_IF_ERROR(graph::ParseTextMessage(text, absl::StrCat("device file '", path, "'"), &model));
  if (absl::Status s = DeviceSpecFromProto(model).status(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("device file '", path, "': ", s.message()));
  }
  return model;
}

NodeWork EstimateNodeWork(const graph::Graph& forward, const TrainingGraph& graph, NodeId id) {
  const TrainingNode& node = graph.node(id);
  NodeWork work;
  if (node.kind == NodeKind::kOffload || node.kind == NodeKind::kPrefetch ||
      node.kind == NodeKind::kLossSeed) {
    return work;
  }
  const bool has_forward = node.forward_node != kNone;
  if (has_forward && IsViewOp(forward, node.forward_node)) return work;
  for (TensorId t : node.inputs) work.bytes += graph.tensor(t).bytes;
  for (TensorId t : node.outputs) work.bytes += graph.tensor(t).bytes;
  for (TensorId t : node.updates) work.bytes += 2 * graph.tensor(t).bytes;
  switch (node.kind) {
    case NodeKind::kForward:
    case NodeKind::kRecompute:
      work.flops = ForwardFlops(forward, node.forward_node);
      break;
    case NodeKind::kBackward: {
      const graph::Node& f = forward.node(node.forward_node);
      const uint64_t fwd = ForwardFlops(forward, node.forward_node);
      if (f.op->name == "MatMul" || f.op->name == "Conv2D" || f.op->name == "ConvTranspose2D") {
        // One product per gradient of the data or weight input; a bias gradient is a sum.
        uint64_t products = 0;
        for (TensorId t : node.outputs) {
          const graph::TensorId of = graph.tensor(t).forward_tensor;
          products += (of == f.inputs[0] || of == f.inputs[1]) ? 1 : 0;
        }
        work.flops = fwd * products;
      } else {
        work.flops = 2 * fwd;
      }
      break;
    }
    case NodeKind::kAccumulate:
    case NodeKind::kRebuild:  // One subtraction per element.
      work.flops = graph::NumElements(graph.tensor(node.outputs[0]).shape);
      break;
    case NodeKind::kUpdate:  // Momentum: 4 flops per element; Adam: about 12.
      work.flops = (node.updates.size() > 2 ? 12 : 4) * graph.tensor(node.updates[0]).bytes / 4;
      break;
    default:
      break;
  }
  return work;
}

RooflineCostModel::RooflineCostModel(const graph::Graph& forward, DeviceSpec device)
    : forward_(forward), device_(std::move(device)) {}

std::string RooflineCostModel::name() const { return absl::StrCat("roofline ", device_.name); }

bool ComputesInBf16(const graph::Graph& forward, const TrainingGraph& graph, NodeId id) {
  const TrainingNode& node = graph.node(id);
  if (node.forward_node == kNone) return false;
  const graph::Node& f = forward.node(node.forward_node);
  const std::string& op = f.op->name;
  const bool product = op == "MatMul" || op == "Conv2D" || op == "ConvTranspose2D";
  return product && forward.tensor(f.inputs[0]).dtype == proto::DTYPE_BFLOAT16;
}

double RooflineCostModel::NodeSeconds(const TrainingGraph& graph, NodeId id) const {
  const NodeKind kind = graph.node(id).kind;
  if (kind == NodeKind::kOffload || kind == NodeKind::kPrefetch) return 0;
  const NodeWork w = EstimateNodeWork(forward_, graph, id);
  // A spec built field by field may leave the bf16 rate 0: then bf16 runs at the peak rate.
  const bool bf16 = ComputesInBf16(forward_, graph, id) && device_.bf16_flops_per_second > 0;
  const double flops_per_second =
      bf16 ? device_.bf16_flops_per_second : device_.peak_flops_per_second;
  return device_.op_overhead_seconds +
         std::max(static_cast<double>(w.flops) / flops_per_second,
                  static_cast<double>(w.bytes) / device_.memory_bytes_per_second);
}

uint64_t RooflineCostModel::NodeFlops(const TrainingGraph& graph, NodeId id) const {
  return EstimateNodeWork(forward_, graph, id).flops;
}

double RooflineCostModel::CopySeconds(uint64_t bytes) const {
  return static_cast<double>(bytes) / device_.host_link_bytes_per_second;
}

double RooflineCostModel::HostUpdateSeconds(uint64_t bytes) const {
  return static_cast<double>(bytes) / device_.host_update_bytes_per_second;
}

uint64_t HostUpdateBytes(uint64_t elements, bool adam) { return elements * 4 * (adam ? 7 : 5); }

}  // namespace headroom::planner
