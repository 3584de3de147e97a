// The logits Headroom's CPU executor computes for one batch read from a file: what
// tools/onnx_logits and tools/inference_logits write for the Python surveys and tests to
// compare with PyTorch's.
#ifndef HEADROOM_TOOLS_LOGITS_RUN_H_
#define HEADROOM_TOOLS_LOGITS_RUN_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "graph/graph.h"
#include "proto/headroom.pb.h"

namespace headroom::tools {

// Runs one step of `g` on the CPU backend from `values` (its weights) on the input in
// `inputs_path` (the graph's one input, float32 row-major; labels are zeros) and writes the
// tensor that `g`'s loss reads first (the logits), as the forward pass wrote it, to
// `out_path` as float32 row-major; prints its shape on stdout. InvalidArgument naming the
// file where its size is not the input's; the errors of building and running the trainer.
absl::Status WriteLogits(const graph::Graph& g, const std::vector<proto::TensorValue>& values,
                         const std::string& inputs_path, const std::string& out_path);

}  // namespace headroom::tools

#endif  // HEADROOM_TOOLS_LOGITS_RUN_H_
