// libFuzzer target: ONNX model bytes, as `headroom graph --onnx` or a SubmitJob's
// ModelSource.onnx carries them, through the importer (graph::ImportOnnx) and then the
// graph loader. Any input must give a model or an error; a crash, a sanitizer report, a
// leak or a hang is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "google/protobuf/stubs/logging.h"
#include "graph/graph.h"
#include "graph/onnx_import.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  headroom::graph::OnnxImportOptions options;
  options.batch = 2;
  absl::StatusOr<headroom::graph::ImportedModel> model =
      headroom::graph::ImportOnnx(std::string(reinterpret_cast<const char*>(data), size), options);
  if (model.ok()) (void)headroom::graph::Graph::FromProto(model->graph);
  return 0;
}
