// Writes a training run in the format tools/torch_reference.py reads, so PyTorch can train
// the same graph from the same initial state on the same batches and compare: graph.json
// (tensors, nodes with every attribute, optimizer, where each value lies), state.bin (the
// initial parameters and buffers), batches.bin (every step's inputs and labels), and after
// training headroom.json (losses, step times) with final_state.bin.
#ifndef HEADROOM_EXECUTOR_REFERENCE_EXPORT_H_
#define HEADROOM_EXECUTOR_REFERENCE_EXPORT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "executor/host_tensor.h"
#include "executor/kernel_args.h"
#include "graph/graph.h"
#include "proto/headroom.pb.h"

namespace headroom::executor {

struct ReferenceRun {
  proto::Optimizer::Kind optimizer = proto::Optimizer::KIND_SGD_MOMENTUM;
  OptimizerParams optimizer_params;
  std::vector<HostTensor> initial_state;
  // By step: every input and label tensor.
  std::vector<std::vector<HostTensor>> batches;
};

// Writes graph.json, state.bin and batches.bin into `dir` (created if missing).
absl::Status WriteReferenceInputs(const std::string& dir, const graph::Graph& forward,
                                  const ReferenceRun& run);

// Writes headroom.json ({"losses", "step_seconds", "final_state"}) and final_state.bin.
absl::Status WriteReferenceResults(const std::string& dir, const std::vector<double>& losses,
                                   const std::vector<double>& step_seconds,
                                   const std::vector<HostTensor>& final_state);

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_REFERENCE_EXPORT_H_
