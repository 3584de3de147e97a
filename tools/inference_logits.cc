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
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "clients/export_command.h"
#include "executor/backends.h"
#include "executor/trainer.h"
#include "graph/graph.h"
#include "graph/graph_io.h"
#include "graph/inference_graph.h"
#include "graph/onnx_import.h"
#include "graph/zoo.h"
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

  // 2. One forward pass on the inputs (labels 0), the logits captured.
  executor::TrainerOptions options;
  for (const proto::TensorValue& v : inference.values) {
    options.initial_values.push_back(executor::HostTensorFromValue(v));
  }
  const graph::Tensor& loss = ig.tensor(ig.loss());
  options.capture = {ig.tensor(ig.node(loss.producer).inputs[0]).name};
  ASSIGN_OR_RETURN(std::unique_ptr<executor::Backend> backend, executor::MakeBackend("cpu"));
  ASSIGN_OR_RETURN(std::unique_ptr<executor::Trainer> trainer,
                   executor::Trainer::Create(ig, backend.get(), options));
  std::ifstream in(args.inputs, std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  std::vector<executor::HostTensor> batch;
  for (const graph::Tensor& t : ig.tensors()) {
    if (t.role == proto::ROLE_INPUT) {
      executor::HostTensor input = executor::MakeHostTensor(t.name, t.shape, t.dtype);
      if (bytes.size() != input.bytes.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat(args.inputs, ": ", bytes.size(), " bytes; input '", t.name, "' ",
                         graph::ShapeString(t.shape), " takes ", input.bytes.size()));
      }
      input.bytes = bytes;
      batch.push_back(std::move(input));
    } else if (t.role == proto::ROLE_LABEL) {
      batch.push_back(executor::MakeHostTensor(t.name, t.shape, t.dtype));
    }
  }
  ASSIGN_OR_RETURN(executor::StepResult step, trainer->StepOn(batch));
  const executor::HostTensor& out = step.captured.at(0);
  std::ofstream file(args.out, std::ios::binary);
  file.write(reinterpret_cast<const char*>(out.bytes.data()),
             static_cast<std::streamsize>(out.bytes.size()));
  if (!file) return absl::InternalError(absl::StrCat("cannot write ", args.out));
  std::cout << "logits " << graph::ShapeString(out.shape) << " -> " << args.out << "\n";
  return absl::OkStatus();
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
