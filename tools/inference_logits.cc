// Writes the inference logits Headroom's CPU executor computes for a trained model, for
// tests/onnx_export_torch_test.py to compare with what PyTorch computes from the model
// `headroom export` wrote: the model in inference form (graph/inference_graph.h: batch norms
// with their running statistics, no dropout), the logits captured from one forward pass.
//
//   inference_logits --model NAME --batch N [--image-size S] --checkpoint PATH
//                    --inputs IN.bin --out OUT.bin
//   inference_logits --graph FILE --batch N --checkpoint PATH --inputs IN.bin --out OUT.bin
//   inference_logits --onnx FILE --batch N --inputs IN.bin --out OUT.bin
//
// The first two forms read a zoo model's or a graph description's weights as `headroom
// export --checkpoint` does (a graph's batch is its own; --batch must say it); the last
// imports an ONNX model (an export, read back) with its own weights. IN.bin holds the
// model's one input, float32 row-major [N, ...]; OUT.bin gets the logits, float32.
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "clients/export_command.h"
#include "graph/graph.h"
#include "graph/graph_io.h"
#include "graph/inference_graph.h"
#include "graph/onnx_import.h"
#include "graph/zoo.h"
#include "tools/logits_run.h"
#include "util/status_macros.h"

namespace headroom {
namespace {

struct Args {
  std::string model, graph, onnx, checkpoint, inputs, out;
  uint64_t batch = 0;
  int64_t image_size = 0;
};

absl::StatusOr<Args> ParseArgs(int argc, char** argv) {
  Args args;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--model") {
      args.model = value;
    } else if (flag == "--graph") {
      args.graph = value;
    } else if (flag == "--onnx") {
      args.onnx = value;
    } else if (flag == "--checkpoint") {
      args.checkpoint = value;
    } else if (flag == "--inputs") {
      args.inputs = value;
    } else if (flag == "--out") {
      args.out = value;
    } else if (flag == "--batch" && absl::SimpleAtoi(value, &args.batch)) {
    } else if (flag == "--image-size" && absl::SimpleAtoi(value, &args.image_size)) {
    } else {
      return absl::InvalidArgumentError(absl::StrCat("bad flag '", flag, " ", value, "'"));
    }
  }
  const int sources = !args.model.empty() + !args.graph.empty() + !args.onnx.empty();
  if (sources != 1 || args.batch == 0 || args.inputs.empty() || args.out.empty() ||
      (args.onnx.empty() && args.checkpoint.empty())) {
    return absl::InvalidArgumentError(
        "usage: inference_logits (--model NAME [--image-size S] --checkpoint PATH | --graph FILE "
        "--checkpoint PATH | --onnx FILE) --batch N --inputs IN.bin --out OUT.bin");
  }
  return args;
}

absl::Status Run(const Args& args) {
  // 1. The model and its weights.
  proto::GraphDef def;
  std::vector<proto::TensorValue> values;
  if (!args.model.empty()) {
    std::map<std::string, int64_t> options;
    if (args.image_size > 0) options["image_size"] = args.image_size;
    ASSIGN_OR_RETURN(def, graph::BuildZooModel(graph::ZooSpec(args.model, args.batch, options)));
    ASSIGN_OR_RETURN(graph::Graph g, graph::Graph::FromProto(def));
    ASSIGN_OR_RETURN(values, clients::ReadCheckpoint(args.checkpoint, g));
  } else if (!args.graph.empty()) {
    ASSIGN_OR_RETURN(def, graph::ReadGraphFile(args.graph));
    ASSIGN_OR_RETURN(graph::Graph g, graph::Graph::FromProto(def));
    ASSIGN_OR_RETURN(values, clients::ReadCheckpoint(args.checkpoint, g));
  } else {
    graph::OnnxImportOptions options;
    options.batch = args.batch;
    ASSIGN_OR_RETURN(graph::ImportedModel imported, graph::ImportOnnxFile(args.onnx, options));
    def = std::move(imported.graph);
    values = std::move(imported.values);
  }
  ASSIGN_OR_RETURN(graph::Graph g, graph::Graph::FromProto(def));
  ASSIGN_OR_RETURN(graph::InferenceModel inference, graph::InferenceForm(g, values));
  ASSIGN_OR_RETURN(graph::Graph ig, graph::Graph::FromProto(inference.graph));

  // 2. One forward pass on the inputs (labels 0), the logits written.
  return tools::WriteLogits(ig, inference.values, args.inputs, args.out);
}

}  // namespace
}  // namespace headroom

int main(int argc, char** argv) {
  absl::StatusOr<headroom::Args> args = headroom::ParseArgs(argc, argv);
  absl::Status s = args.ok() ? headroom::Run(*args) : args.status();
  if (!s.ok()) {
    std::cerr << "inference_logits: " << s.message() << "\n";
    return 1;
  }
  return 0;
}
