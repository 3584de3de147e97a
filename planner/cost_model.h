// The cost model: how long each node of a training step takes on a device, and how long a
// copy between host and device memory takes. Deciding only: nothing runs.
#ifndef HEADROOM_PLANNER_COST_MODEL_H_
#define HEADROOM_PLANNER_COST_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/graph.h"
#include "planner/training_graph.h"
#include "proto/headroom.pb.h"

namespace headroom::planner {

// What a device can do, as rates kernels actually reach (not datasheet peaks).
struct DeviceSpec {
  // "cpu", "h100", "h200", or the preset a file started from.
  std::string name;
  // Floating-point operations per second a large matmul or convolution reaches.
  double peak_flops_per_second = 0;
  // Device memory bytes per second a streaming kernel reaches.
  double memory_bytes_per_second = 0;
  // Host<->device copy bytes per second, each way (pinned memory; a copy engine per way).
  double host_link_bytes_per_second = 0;
  // Fixed cost of one op: launch and dispatch.
  double op_overhead_seconds = 0;
  // Host memory bytes per second an optimizer update on the host's threads streams (reading
  // the parameter, gradient and state, writing the parameter and state): the rate of the
  // update that SectionCuts::optimizer_state_on_host moves to the host.
  double host_update_bytes_per_second = 0;
  // Floating-point operations per second a large bfloat16 matmul or convolution reaches
  // (float32 accumulation): the rate bf16 mixed precision's compute ops are charged.
  double bf16_flops_per_second = 0;
};

// Returns the names of the presets: "cpu", "h100", "h200" (both on PCIe 5 x16 hosts), "gh200"
// (Grace Hopper: the H100's compute, 4 TB/s HBM3 and NVLink-C2C to the host).
std::vector<std::string> DevicePresetNames();

// Returns a preset by name, or InvalidArgument listing the presets.
absl::StatusOr<DeviceSpec> DevicePreset(absl::string_view name);

// Returns the preset `model.preset` names ("cpu" when empty) with every non-zero field of
// `model` overriding it; InvalidArgument naming the field ("device.peak_flops_per_second")
// for an unknown preset, a NaN, infinite or negative value, a rate below 1 per second or an
// op overhead above 1 second.
absl::StatusOr<DeviceSpec> DeviceSpecFromProto(const proto::DeviceModel& model);

// Returns a text-format DeviceModel file (`preset: "h100" host_link_bytes_per_second: 25e9`),
// checked as DeviceSpecFromProto checks it, or the error naming the file and line.
absl::StatusOr<proto::DeviceModel> ReadDeviceModelFile(const std::string& path);

// The work of one node.
struct NodeWork {
  uint64_t flops = 0;
  // Bytes read and written in device memory.
  uint64_t bytes = 0;
};

// Returns the work of node `id` of `graph`, whose forward graph is `forward`. Matmuls and
// convolutions count 2 flops per multiply-add; their backward does one such product per
// input gradient. Views move nothing; offload and prefetch nodes run on the copy stream
// and do no compute work.
NodeWork EstimateNodeWork(const graph::Graph& forward, const TrainingGraph& graph, NodeId id);

// Predicts times. Implementations are immutable after construction and thread-safe.
// Measured profiles (the profiler) will implement this interface beside the roofline.
class CostModel {
 public:
  virtual ~CostModel() = default;
  // Returns a short description, e.g. "roofline h100".
  virtual std::string name() const = 0;
  // Returns the seconds node `id` of `graph` occupies the compute stream.
  virtual double NodeSeconds(const TrainingGraph& graph, NodeId id) const = 0;
  // Returns the floating-point operations of node `id` of `graph`.
  virtual uint64_t NodeFlops(const TrainingGraph& graph, NodeId id) const = 0;
  // Returns the seconds to copy `bytes` between host and device, one way.
  virtual double CopySeconds(uint64_t bytes) const = 0;
  // Returns the seconds the host's threads take for an optimizer update that moves `bytes`
  // of host memory (HostUpdateBytes). The default, for a model that knows no host, is 0.
  virtual double HostUpdateSeconds(uint64_t bytes) const { return 0 * bytes; }
};

// Returns the host memory bytes one update of a parameter of `elements` float32 elements
// moves: SGD with momentum reads parameter, gradient and buffer and writes parameter and
// buffer (5 x 4 bytes per element); Adam reads 4 and writes 3 (7 x 4).
uint64_t HostUpdateBytes(uint64_t elements, bool adam);

// Returns whether node `id` is a matmul or convolution (forward, re-forward or backward) that
// computes in bfloat16: charged at DeviceSpec::bf16_flops_per_second.
bool ComputesInBf16(const graph::Graph& forward, const TrainingGraph& graph, NodeId id);

// The roofline: a node takes the longer of its flops at the peak rate (the bf16 rate for a
// bfloat16 matmul or convolution) and its bytes at the memory rate, plus the op overhead. Holds a
// reference to `forward`, which must outlive it.
class RooflineCostModel : public CostModel {
 public:
  RooflineCostModel(const graph::Graph& forward, DeviceSpec device);

  std::string name() const override;
  double NodeSeconds(const TrainingGraph& graph, NodeId id) const override;
  uint64_t NodeFlops(const TrainingGraph& graph, NodeId id) const override;
  double CopySeconds(uint64_t bytes) const override;
  double HostUpdateSeconds(uint64_t bytes) const override;

  const DeviceSpec& device() const { return device_; }

 private:
  const graph::Graph& forward_;
  const DeviceSpec device_;
};

}  // namespace headroom::planner

#endif  // HEADROOM_PLANNER_COST_MODEL_H_
