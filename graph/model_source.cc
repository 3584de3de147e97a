#include "graph/model_source.h"

#include "graph/zoo.h"

namespace headroom::graph {

absl::StatusOr<proto::GraphDef> ResolveModel(const proto::ModelSource& source) {
  switch (source.source_case()) {
    case proto::ModelSource::kGraph:
      return source.graph();
    case proto::ModelSource::kZoo:
      if (source.zoo().batch() == 0) {
        return absl::InvalidArgumentError("model.zoo.batch: must be at least 1");
      }
      return BuildZooModel(source.zoo());
    case proto::ModelSource::kOnnxModel:
      return absl::UnimplementedError(
          "model.onnx_model: ONNX import is not in this build yet; send a graph description "
          "(the Python client's graph_from_module turns a PyTorch module into one) or a zoo "
          "model");
    case proto::ModelSource::SOURCE_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("model: set one of graph, zoo or onnx_model");
}

}  // namespace headroom::graph
