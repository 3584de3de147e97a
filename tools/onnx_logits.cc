// Writes the logits Headroom's forward pass computes for an ONNX model on given inputs: the
// model imported at --batch (re-batched when its export fixed another batch), one step on the
// CPU backend from the model's own weights, and the output the loss reads captured as the
// forward pass wrote it. tools/onnx_rebatch_survey.py compares them with PyTorch's.
//
//   onnx_logits --onnx FILE --batch N --inputs IN.bin --out OUT.bin
//
// IN.bin holds the model's one input, float32 row-major [N, ...]; OUT.bin gets the logits,
// float32 row-major. Exit status 0 on success; the error on stderr otherwise.
#include <iostream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "graph/graph.h"
#include "graph/onnx_import.h"
#include "tools/logits_run.h"
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
  // 1. Import with the weights.
  graph::OnnxImportOptions options;
  options.batch = args.batch;
  ASSIGN_OR_RETURN(graph::ImportedModel imported, graph::ImportOnnxFile(args.onnx, options));
  for (const std::string& warning : imported.warnings) std::cerr << "warning: " << warning << "\n";
  ASSIGN_OR_RETURN(graph::Graph g, graph::Graph::FromProto(imported.graph));
  // 2. One step from the model's weights on the inputs, the logits written.
  return tools::WriteLogits(g, imported.values, args.inputs, args.out);
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
