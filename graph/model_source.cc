#include "graph/model_source.h"

#include "absl/strings/str_cat.h"
#include "graph/onnx_import.h"
#include "graph/zoo.h"
#include "util/status_macros.h"

namespace headroom::graph {
namespace {

absl::StatusOr<ResolvedModel> Resolve(const proto::ModelSource& source, bool with_values) {
  ResolvedModel model;
  switch (source.source_case()) {
    case proto::ModelSource::kGraph:
      model.graph = source.graph();
      return model;
    case proto::ModelSource::kZoo: {
      if (source.zoo().batch() == 0) {
        return absl::InvalidArgumentError("model.zoo.batch: must be at least 1");
      }
      ASSIGN_OR_RETURN(model.graph, BuildZooModel(source.zoo()));
      return model;
    }
    case proto::ModelSource::kOnnxModel: {
      OnnxImportOptions options;
      options.batch = source.onnx().batch();
      if (!source.onnx().loss().empty()) options.loss = source.onnx().loss();
      options.classes = source.onnx().classes();
      options.keep_values = with_values;
      absl::StatusOr<ImportedModel> imported = ImportOnnx(source.onnx_model(), options);
      if (!imported.ok()) {
        return absl::Status(imported.status().code(),
                            absl::StrCat("model.onnx_model: ", imported.status().message()));
      }
      model.graph = std::move(imported->graph);
      model.values = std::move(imported->values);
      return model;
    }
    case proto::ModelSource::SOURCE_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("model: set one of graph, zoo or onnx_model");
}

}  // namespace

absl::StatusOr<proto::GraphDef> ResolveModel(const proto::ModelSource& source) {
  ASSIGN_OR_RETURN(ResolvedModel model, Resolve(source, /*with_values=*/false));
  return std::move(model.graph);
}

absl::StatusOr<ResolvedModel> ResolveModelWithValues(const proto::ModelSource& source) {
  return Resolve(source, /*with_values=*/true);
}

}  // namespace headroom::graph
