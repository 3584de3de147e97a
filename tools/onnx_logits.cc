// Writes the logits Headroom's forward pass computes for an ONNX model on given inputs: the
// model imported at --batch (re-batched when its export fixed another batch), one step on the
// CPU backend from the model's own weights, and the output the loss reads captured as the
// forward pass wrote it. tools/onnx_rebatch_survey.py compares them with PyTorch's.
//
//   onnx_logits --onnx FILE --batch N --inputs IN.bin --out OUT.bin
//
// IN.bin holds the model's one input, float32 row-major [N, ...]; OUT.bin gets the logits,
// float32 row-major. Exit status 0 on success; the error on stderr otherwise.
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "executor/backends.h"
#include "executor/trainer.h"
#include "graph/graph.h"
#include "graph/onnx_import.h"
#include "util/status_macros.h"

namespace headroom {
namespace {

struct Args {
  std::string onnx;
  uint64_t batch = 0;
  std::string inputs;
  std::string out;
};

absl::StatusOr<Args> ParseArgs(int argc, char** argv) {
  Args args;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--onnx") {
      args.onnx = value;
    } else if (flag == "--batch") {
      if (!absl::SimpleAtoi(value, &args.batch)) {
        return absl::InvalidArgumentError(absl::StrCat("--batch '", value, "'"));
      }
    } else if (flag == "--inputs") {
      args.inputs = value;
    } else if (flag == "--out") {
      args.out = value;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '", flag, "'"));
    }
  }
  if (args.onnx.empty() || args.batch == 0 || args.inputs.empty() || args.out.empty()) {
    return absl::InvalidArgumentError(
        "usage: onnx_logits --onnx FILE --batch N --inputs IN.bin --out OUT.bin");
  }
  return args;
}

absl::Status Run(const Args& args) {
  // 1. Import with the weights, and find the logits: what the loss reads.
  graph::OnnxImportOptions options;
  options.batch = args.batch;
  ASSIGN_OR_RETURN(graph::ImportedModel imported, graph::ImportOnnxFile(args.onnx, options));
  for (const std::string& warning : imported.warnings) std::cerr << "warning: " << warning << "\n";
  std::string logits;
  for (const proto::NodeDef& n : imported.graph.nodes()) {
    if (n.outputs_size() > 0 && n.outputs(0) == imported.graph.loss()) logits = n.inputs(0);
  }
  ASSIGN_OR_RETURN(graph::Graph g, graph::Graph::FromProto(imported.graph));

  // 2. One step from the model's weights on the inputs (labels 0), the logits captured.
  executor::TrainerOptions trainer_options;
  for (const proto::TensorValue& v : imported.values) {
    trainer_options.initial_values.push_back(executor::HostTensorFromValue(v));
  }
  imported.values.clear();
  trainer_options.capture = {logits};
  ASSIGN_OR_RETURN(std::unique_ptr<executor::Backend> backend, executor::MakeBackend("cpu"));
  ASSIGN_OR_RETURN(std::unique_ptr<executor::Trainer> trainer,
                   executor::Trainer::Create(g, backend.get(), trainer_options));
  std::ifstream in(args.inputs, std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  std::vector<executor::HostTensor> batch;
  for (const graph::Tensor& t : g.tensors()) {
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
  if (step.captured.size() != 1) {
    return absl::InternalError(absl::StrCat("captured ", step.captured.size(), " tensors"));
  }

  // 3. The logits, as float32.
  const executor::HostTensor& out = step.captured[0];
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
    std::cerr << "onnx_logits: " << s.message() << "\n";
    return 1;
  }
  return 0;
}
