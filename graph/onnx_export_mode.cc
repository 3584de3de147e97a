#include "graph/onnx_export_mode.h"

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "graph/onnx_fold.h"

namespace headroom::graph {
namespace {

constexpr char kHowToExport[] =
    "the plan is for the exported inference graph, not the model training runs; export with "
    "torch.onnx.export(..., training=torch.onnx.TrainingMode.TRAINING, "
    "do_constant_folding=False), or describe the module without exporting with "
    "headroom_client.torch_graph.graph_from_module (docs/onnx.md)";

}  // namespace

std::vector<std::string> OnnxExportMode::Warnings(const std::string& model_name) const {
  std::vector<std::string> warnings;
  if (inference_batch_norms > 0) {
    warnings.push_back(absl::StrCat(
        "ONNX model '", model_name, "' was exported for inference: ", inference_batch_norms,
        " of its ", batch_norms, " batch norm(s) have training_mode 0 (and an inference export ",
        "drops dropout); ", kHowToExport));
  }
  if (folded_convolutions > 0) {
    warnings.push_back(absl::StrCat(
        "ONNX model '", model_name, "' was exported for inference: ", folded_convolutions,
        " of its ", convolutions, " convolution(s) have a weight and bias the exporter computed ",
        "('onnx::Conv_*' initializers, not module parameters), batch norms folded into them; ",
        kHowToExport));
  }
  return warnings;
}

OnnxExportMode InspectOnnxExportMode(const onnx::GraphProto& graph, int64_t opset) {
  absl::flat_hash_set<std::string> initializers;
  for (const onnx::TensorProto& init : graph.initializer()) initializers.insert(init.name());
  // Identity aliases of initializers (eval exports merge equal ones behind them).
  absl::flat_hash_map<std::string, std::string> alias;
  for (const onnx::NodeProto& node : graph.node()) {
    if (node.op_type() == "Identity" && node.input_size() == 1 && node.output_size() == 1) {
      alias[node.output(0)] = node.input(0);
    }
  }
  // Returns true if `name` is, through aliases, an initializer torch computed at export.
  auto computed = [&](std::string name) {
    for (int hops = 0; hops < 8 && alias.contains(name); ++hops) name = alias.at(name);
    return initializers.contains(name) && absl::StartsWith(name, "onnx::");
  };
  OnnxExportMode mode;
  for (const onnx::NodeProto& node : graph.node()) {
    if (node.op_type() == "BatchNormalization") {
      ++mode.batch_norms;
      const bool inference =
          opset >= 14 ? OnnxIntAttr(node, "training_mode", 0) == 0 : node.output_size() <= 1;
      mode.inference_batch_norms += inference;
    } else if (node.op_type() == "Conv") {
      ++mode.convolutions;
      mode.folded_convolutions +=
          node.input_size() > 2 && computed(node.input(1)) && computed(node.input(2));
    }
  }
  return mode;
}

}  // namespace headroom::graph
